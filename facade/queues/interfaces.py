"""What the modules below the queue manager need from it, as small protocols.

The queue manager (:class:`facade.manager.QueueManager`) builds the resolver, the system
outputs, the sender and every opened queue, and hands itself to them. They name it only
through these protocols, so no module below the manager imports it (the layers are stated in
``docs/design.md``, "Layers", and checked by ``tests/unit/test_layers.py``). A test or another
host can give them anything that has these members.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from facade.queues.destination import Destination
    from facade.directory import Directory
    from facade.model.formatnames import FormatName, QueuePath, SystemQueue
    from facade.model.envelope import EncodedRecord
    from facade.kafka.kafkaseam import KafkaRecord, KafkaSession
    from facade.model.message import Message, MessageId
    from facade.state.registry import Registry

__all__ = ["AcknowledgmentGuard", "IdAllocator", "OutputsHost", "QueueResolver", "RegistryHost",
           "ResolverHost", "SystemQueueWriter"]


class IdAllocator(Protocol):
    """Hands out message ids (PROPID_M_MSGID) unique to one queue manager, across its
    processes (:class:`facade.state.sequence.MessageIdAllocator`)."""

    def new(self) -> MessageId:
        """A fresh id.

        Raises:
            BrokerUnavailable: a new block of ids could not be leased.
        """
        ...


class QueueResolver(Protocol):
    """Resolves path names and format names to the queues they name (the queue manager, over
    its registry and directory)."""

    def resolve(self, reference: FormatName | QueuePath) -> Destination:
        """The one queue a path name or single-queue format name names.

        Raises:
            QueueNotFound, DirectoryObjectNotFound, DirectoryUnavailable,
            UnsupportedFormatNameOperation: as :meth:`facade.manager.QueueManager.resolve`.
        """
        ...

    def resolve_topic(self, topic: str, message: Message) -> Destination:
        """The destination a stored copy on ``topic`` was produced for.

        Raises:
            QueueNotFound: the queue no longer exists or no longer uses ``topic``.
        """
        ...

    def destinations(self, reference: FormatName | QueuePath, *,
                     for_send: bool = False) -> list[Destination]:
        """Every queue ``reference`` names (lists expanded, duplicates dropped).

        Raises:
            as :meth:`facade.queues.resolution.Resolver.destinations`.
        """
        ...


class SystemQueueWriter(Protocol):
    """Writes what the queue manager itself produces: dead-letter, journal and
    acknowledgment copies (MSMQ's system queues), with ``acks=all``."""

    @property
    def guid(self) -> uuid.UUID:
        """The queue manager's GUID (PROPID_M_SRC_MACHINE_ID of what it writes)."""
        ...

    @property
    def dead_letter_topic(self) -> str:
        """The Kafka topic of the nontransactional dead-letter queue."""
        ...

    def system_topic(self, queue: SystemQueue) -> str:
        """The Kafka data topic of one of the queue manager's system queues."""
        ...

    def write_system_copy(self, topic: str, message: Message, timeout: float = 30.0) -> None:
        """Write ``message`` to ``topic`` and wait for the broker (seconds).

        Raises:
            BrokerUnavailable, BrokerError: the copy was not acknowledged.
        """
        ...

    def write_system_copies(self, copies: Sequence[tuple[str, Message]],
                            timeout: float = 30.0) -> None:
        """Write ``copies`` (topic, message), in order, and wait once for the broker (seconds).

        Raises:
            BrokerUnavailable, BrokerError: a copy was not acknowledged (others may be).
        """
        ...

    def encode_system_copy(self, message: Message) -> EncodedRecord:
        """``message`` in the record form a system copy is written in (encrypted again for
        this queue manager if private)."""
        ...

    def write_system_records(self, records: Sequence[tuple[str, EncodedRecord | KafkaRecord]],
                             timeout: float = 30.0) -> None:
        """Write ``records`` (topic, record: encoded, or a stored one written again), in
        order, and wait once for the broker (seconds).

        Raises:
            BrokerUnavailable, BrokerError: a record was not acknowledged (others may be).
        """
        ...

    def dead_letter(self, message: Message, *, transactional: bool = False,
                    timeout: float = 30.0) -> None:
        """Write ``message`` (its class already the reason) to DEADLETTER, or DEADXACT.

        Raises:
            BrokerUnavailable, BrokerError: the copy was not acknowledged.
        """
        ...

    def poison_message(self, raw: bytes | None, reason: str, source: Destination | str,
                       where: str) -> Message:
        """A record that is not a valid envelope, wrapped as a NACK_RECEIVE_REJECTED message."""
        ...


class RegistryHost(Protocol):
    """Where the queue manager keeps queues' records: the registry and the directory."""

    @property
    def registry(self) -> Registry:
        """The queue and queue-manager registries."""
        ...

    @property
    def directory(self) -> Directory:
        """The directory of public objects, opened on first use.

        Raises:
            DirectoryUnavailable: workgroup mode, or it cannot be reached.
        """
        ...


class ResolverHost(RegistryHost, Protocol):
    """What :class:`facade.queues.resolution.Resolver` reads: the registry, the directory and the
    single-queue resolution of the queue manager."""

    def resolve(self, reference: FormatName | QueuePath) -> Destination:
        """As :meth:`QueueResolver.resolve`."""
        ...


class AcknowledgmentGuard(Protocol):
    """Checks that the caller may post acknowledgments to a queue
    (:class:`facade.queues.authorization.QueueAccess`)."""

    def require_admin_queue(self, admin_queue: str, destination: Destination) -> None:
        """Raise unless the caller has WRITE_MESSAGE on ``destination``, one of the queues
        the admin queue ``admin_queue`` names.

        Raises:
            AccessDenied: the admin queue's access list refuses it (names both).
        """
        ...


class OutputsHost(QueueResolver, SystemQueueWriter, Protocol):
    """What :class:`facade.queues.systemoutputs.SystemOutputs` needs: resolution of admin queues and
    the caller's right to write them, the system-queue writer, message ids and the Kafka
    session (to read journal sizes)."""

    @property
    def access(self) -> AcknowledgmentGuard:
        """The access checks of the caller's principal."""
        ...

    @property
    def ids(self) -> IdAllocator:
        """The queue manager's message-id allocator."""
        ...

    @property
    def session(self) -> KafkaSession:
        """The queue manager's Kafka clients."""
        ...
