"""Driver-side resolution and access checks: what a format name means for a Spark job, and
whether the driver's principal may do with its queues what the job does.

Distribution lists, multiple-element names and ``PUBLIC=`` names are resolved on the driver
through the queue manager (registry and directory), exactly as a facade ``open_queue`` would;
executors only receive the result (topics, format names, broker settings), which is plain data
and pickles.

A Spark job acts for the principal of the driver's configuration (``KMQ_PRINCIPAL``, or the
authenticated Kafka or directory identity: :mod:`facade.security.principal`). :func:`resolve` checks
that principal's right for the job's :class:`Operation` on every queue the name reaches, with
the facade's own checks (:class:`facade.queues.authorization.QueueAccess`), before any row is read,
removed or written, and records the principal in the :class:`Resolution`. The data source's
planning runs in Python processes of its own on the driver: :class:`DriverQueues` reopens the
queues there as that principal, so each batch, micro-batch, receive-mode removal and writer is
checked again against the access lists as they are then. Executors check nothing; what they
may read and write on Kafka is bounded by the Kafka ACLs of the identity they connect as
(``kmq acl sync``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from facade.security.acl import AccessRight
from facade.queues.authorization import receive_right
from facade.config import KmqConfig
from facade.queues.destination import Destination
from facade.errors import (
    AccessDenied,
    InvalidParameter,
    QueueNotFound,
    UnsupportedFormatNameOperation,
)
from facade.model.formatnames import parse_queue_reference
from facade.kafka.librdkafka import resolve_bootstrap_servers
from facade.manager import QueueManager

__all__ = ["DriverQueues", "Operation", "QueueTarget", "Resolution", "authorize", "resolve",
           "resolve_many", "resolve_with"]


class Operation(StrEnum):
    """What a Spark job does with the queues of a name, and so the right it needs on each
    (MSMQ's ``MQSEC_*`` rights, as :mod:`facade.queues.authorization` checks them for the facade).

    A dead-letter queue or machine journal has no access list of its own: its queue manager's
    descriptor decides (:mod:`facade.queues.qmsecurity`).

    Attributes:
        PEEK: batch reads and peek-mode streams (``MQPeekMessage``): PEEK_MESSAGE, on a
            journal too.
        RECEIVE: receive-mode streams (``MQReceiveMessage``): DELETE_MESSAGE, or
            DELETE_JOURNAL_MESSAGE on a queue journal.
        SEND: the sink's destinations (``MQSendMessage``): WRITE_MESSAGE, and the directory's
            Send To on ``DL=`` and ``PUBLIC=`` names.
        ACKNOWLEDGE: the admin queue (PROPID_M_ADMIN_QUEUE) of messages the sink writes that
            ask for acknowledgments: WRITE_MESSAGE, as a send to it
            (:meth:`~facade.queues.authorization.QueueAccess.require_admin_queue`).
    """

    PEEK = "peek"
    RECEIVE = "receive"
    SEND = "send"
    ACKNOWLEDGE = "acknowledge"

    @property
    def writes(self) -> bool:
        """bool: the job writes to the queues (resolved for sending: Send To checked,
        journals, dead-letter queues and subqueues refused)."""
        return self in (Operation.SEND, Operation.ACKNOWLEDGE)


#: How a refusal says what the job was refused.
_REFUSED = {Operation.PEEK: "read", Operation.RECEIVE: "receive from",
            Operation.SEND: "write to", Operation.ACKNOWLEDGE: "ask for acknowledgments on"}


@dataclass(frozen=True)
class QueueTarget:
    """One concrete queue of a resolved name.

    Attributes:
        format_name (str): the queue's own format name (PROPID_M_DEST_QUEUE of its copies).
        data_topic (str): the Kafka topic holding its messages (one partition).
        receipts_topic (str): the topic holding its removal receipts.
        read_only (bool): a journal or dead-letter queue (readable, not writable).
        is_subqueue (bool): a subqueue (readable; messages enter only by being moved).
        queue_guid (str | None): PROPID_Q_INSTANCE (None for system queues), for
            acknowledgments.
    """

    format_name: str
    data_topic: str
    receipts_topic: str
    read_only: bool = False
    is_subqueue: bool = False
    queue_guid: str | None = None


@dataclass(frozen=True)
class Resolution:
    """A format name resolved for a Spark job.

    Attributes:
        format_name (str): the canonical text the user gave (PROPID_M_DEST_FORMAT_NAME).
        targets (tuple[QueueTarget, ...]): its queues, duplicates removed, in element order.
        bootstrap_servers (str): Kafka ``bootstrap.servers``.
        kafka_options (dict[str, str]): extra librdkafka properties (TLS, SASL).
        queue_manager (str), queue_manager_guid (str): the driver's queue manager, which
            stamps ``source_machine_id`` on messages written by the job.
        home (str): the driver's ``KMQ_HOME``.
        principal (str): the driver's principal, whose rights :func:`resolve` checked; the
            driver-side planning checks them again for it (:class:`DriverQueues`).
    """

    format_name: str
    targets: tuple[QueueTarget, ...]
    bootstrap_servers: str
    kafka_options: dict[str, str] = field(default_factory=dict)
    queue_manager: str = ""
    queue_manager_guid: str = ""
    home: str = ""
    principal: str = ""

    @property
    def topics(self) -> list[str]:
        """The data topics, in order."""
        return [target.data_topic for target in self.targets]

    def to_json(self) -> str:
        """JSON text, for a data-source option (options are strings)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Resolution:
        """Inverse of :meth:`to_json`."""
        doc = json.loads(text)
        doc["targets"] = tuple(QueueTarget(**t) for t in doc["targets"])
        return cls(**doc)

    def config(self) -> KmqConfig:
        """The driver's configuration as far as it travels with the resolution: brokers,
        Kafka client settings, queue manager, ``KMQ_HOME`` (its ``kmq.toml``) and principal.

        Raises:
            ConfigurationError: the ``kmq.toml`` found from here is invalid.
        """
        overrides: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers,
                                     "queue_manager": self.queue_manager,
                                     "kafka_options": dict(self.kafka_options)}
        if self.home:
            overrides["home"] = Path(self.home)
        if self.principal:
            overrides["principal"] = self.principal
        return KmqConfig.load(**overrides)


def resolve(format_name: str, *, for_send: bool = False,
            operation: Operation | str | None = None, config: KmqConfig | None = None,
            **overrides: Any) -> Resolution:
    """Resolve ``format_name`` through a queue manager on the driver and check that its
    principal may do ``operation`` on every queue the name reaches.

    Args:
        format_name (str): any path or format name: a queue, ``PUBLIC=``, ``DL=``, a
            multiple-element name, a journal or dead-letter queue, an admin queue.
        for_send (bool): resolve for writing (``operation`` defaults to SEND): checks Send To
            on directory objects and refuses read-only queues and subqueues.
        operation (Operation | str | None): what the job does (``peek``, ``receive``,
            ``send``, ``acknowledge``); default PEEK, or SEND with ``for_send``.
        config (KmqConfig | None): configuration; default :meth:`KmqConfig.load`.
        **overrides: passed to :meth:`KmqConfig.load` (e.g. ``bootstrap_servers=``,
            ``principal=``).

    Returns:
        Resolution: the queues, the broker settings and the principal that was checked.

    Raises:
        AccessDenied: the principal lacks the operation's right on a queue
            (MQ_ERROR_ACCESS_DENIED; see :func:`authorize`), or Send To on a directory object.
        InvalidParameter: an unknown ``operation``, or a reading one with ``for_send``.
        FormatNameError, QueueNotFound, DirectoryUnavailable: as
            :meth:`QueueManager.open_queue`.
        UnsupportedFormatNameOperation: writing to a read-only queue or subqueue; reading a
            share-arbitrated queue (docs/design.md, "Share-group arbitration").
        BrokerUnavailable: no broker.
    """
    chosen = _operation(for_send, operation)
    config = config or KmqConfig.load(**overrides)
    with QueueManager.open(config, lease_ids=False) as manager:
        return resolve_with(manager, format_name, chosen)


def resolve_many(format_names: Sequence[str], *, operation: Operation | str | None = None,
                 config: KmqConfig | None = None, **overrides: Any) -> Resolution:
    """Resolve several format names for one read, as :func:`resolve` resolves one: the
    queues of every name, each checked for ``operation``, in one :class:`Resolution`.

    For a job that reads queues no single format name can list together: MSMQ's grammar keeps
    journals, dead-letter queues and subqueues out of multiple-element names, and a report
    reads a queue's journal beside the dead-letter and admin queues. A queue reached by two
    names is read once.

    Args:
        format_names (Sequence[str]): at least one readable name (as :func:`resolve` takes).
        operation (Operation | str | None): ``peek`` (default) or ``receive``; a reading
            operation only.
        config (KmqConfig | None), **overrides: as :func:`resolve`.

    Returns:
        Resolution: ``targets`` in the order of the names and their elements;
        ``format_name`` the names joined with ``" + "`` (for messages only).

    Raises:
        InvalidParameter: no name, a name that is not text, or a writing operation.
        AccessDenied, FormatNameError, QueueNotFound, DirectoryUnavailable,
        UnsupportedFormatNameOperation, BrokerUnavailable: as :func:`resolve`, for the first
            name that fails; nothing is read.
    """
    if isinstance(format_names, (str, bytes)) or not all(
            isinstance(name, str) for name in format_names):
        raise InvalidParameter("format_names must be a sequence of format-name strings",
                               hint="for one name, call resolve(format_name)")
    if not format_names:
        raise InvalidParameter("no format name to resolve", hint="give at least one name")
    chosen = _operation(False, operation)
    if chosen.writes:
        raise InvalidParameter(f"resolve_many resolves names for reading, not to {chosen}",
                               hint="resolve each destination of a write with resolve()")
    config = config or KmqConfig.load(**overrides)
    with QueueManager.open(config, lease_ids=False) as manager:
        resolutions = [resolve_with(manager, name, chosen) for name in format_names]
    targets: dict[str, QueueTarget] = {}
    for resolution in resolutions:
        for target in resolution.targets:
            targets.setdefault(target.data_topic, target)
    return replace(resolutions[0], format_name=" + ".join(r.format_name for r in resolutions),
                   targets=tuple(targets.values()))


def _operation(for_send: bool, operation: Operation | str | None) -> Operation:
    if operation is None:
        return Operation.SEND if for_send else Operation.PEEK
    try:
        chosen = Operation(str(operation).lower())
    except ValueError:
        raise InvalidParameter(f"operation must be one of {', '.join(Operation)}, got "
                               f"{operation!r}") from None
    if for_send and not chosen.writes:
        raise InvalidParameter(f"for_send=True resolves for writing, not to {chosen}",
                               hint="drop for_send, or use operation='send' or 'acknowledge'")
    return chosen


def resolve_with(manager: QueueManager, format_name: str, operation: Operation) -> Resolution:
    """:func:`resolve` through a queue manager the caller has open (several names, one
    queue manager), for the manager's principal.

    Args:
        manager (QueueManager): the driver's queue manager.
        format_name (str): as for :func:`resolve`.
        operation (Operation): what the job does with the queues.

    Returns:
        Resolution: as :func:`resolve`.

    Raises:
        AccessDenied, FormatNameError, QueueNotFound, DirectoryUnavailable,
        UnsupportedFormatNameOperation: as :func:`resolve`.
    """
    reference = parse_queue_reference(format_name)
    destinations = manager.destinations(reference, for_send=operation.writes)
    targets = []
    for destination in destinations:
        if operation.writes and (destination.read_only or destination.is_subqueue):
            raise UnsupportedFormatNameOperation(
                f"{destination.format_name!r} cannot be written to (journal, dead-letter "
                "queue or subqueue)", queue=destination.format_name)
        if not operation.writes and destination.arbitration == "share":
            # Its messages are removed by the share group's ACCEPTs, which no queue view sees:
            # a peek would show received messages, and receive mode would be a second arbiter.
            raise UnsupportedFormatNameOperation(
                f"a Spark job may not {_REFUSED[operation]} {destination.format_name!r}: the "
                "queue is arbitrated by a Kafka share group, which has no peek and takes no "
                "receipts", queue=destination.format_name,
                hint="receive it with MessageQueue.receive or receive_many, read its journal "
                     "(;JOURNAL) from Spark, or use a queue created with "
                     "arbitration='receipts'")
        properties = destination.properties
        targets.append(QueueTarget(
            format_name=destination.format_name, data_topic=destination.topics.data,
            receipts_topic=destination.topics.receipts, read_only=destination.read_only,
            is_subqueue=destination.is_subqueue,
            queue_guid=properties.instance if properties else None))
    authorize(manager, destinations, operation, str(reference))
    config = manager.config
    return Resolution(
        format_name=str(reference), targets=tuple(targets),
        bootstrap_servers=resolve_bootstrap_servers(config),
        kafka_options=dict(config.kafka_options), queue_manager=manager.name,
        queue_manager_guid=str(manager.guid), home=str(config.home),
        principal=manager.principal.name)


def authorize(manager: QueueManager, destinations: Iterable[Destination], operation: Operation,
              format_name: str) -> None:
    """Raise unless the manager's principal may do ``operation`` on every one of
    ``destinations`` (the queues ``format_name`` reaches), checked by the manager's
    :class:`~facade.queues.authorization.QueueAccess` against the access lists the registry holds now
    (a queue's journal and subqueues share its list; system queues are guarded by their queue
    manager's).

    Args:
        manager (QueueManager): the driver's queue manager, open as the job's principal.
        destinations (Iterable[Destination]): the queues.
        operation (Operation): what the job does with them (the right: see
            :class:`Operation`).
        format_name (str): the name the job was given, for the message (and, for
            ACKNOWLEDGE, the admin queue).

    Raises:
        AccessDenied: MQ_ERROR_ACCESS_DENIED for the first queue that refuses: the message
            names the job's operation, the queue, the missing right and the principal; the
            hint whom to ask. Nothing of the job has run.
    """
    access = manager.access
    for destination in destinations:
        try:
            if operation is Operation.SEND:
                access.require(destination, AccessRight.WRITE_MESSAGE)
            elif operation is Operation.ACKNOWLEDGE:
                access.require_admin_queue(format_name, destination)
            else:
                access.require(destination,
                               receive_right(destination, operation is Operation.RECEIVE))
        except AccessDenied as exc:
            raise AccessDenied(f"a Spark job may not {_REFUSED[operation]} {format_name!r}: "
                               f"{exc.message}", queue=destination.format_name,
                               hint=exc.hint) from exc


class DriverQueues:
    """The queues of a :class:`Resolution`, reopened on the driver as the principal that
    resolved them: the data source's planning checks the rights again through it, and
    receive mode removes messages through it.

    The queue manager is opened at first use, with :meth:`Resolution.config`, and kept until
    :meth:`close` (a streaming query keeps it for its life).

    Args:
        resolution (Resolution): the queues, the driver's configuration and principal.
    """

    def __init__(self, resolution: Resolution):
        self.resolution = resolution
        self._manager: QueueManager | None = None
        self._destinations: dict[str, Destination] = {}

    @property
    def manager(self) -> QueueManager:
        """The driver's queue manager, open as the resolution's principal.

        Raises:
            BrokerUnavailable, ConfigurationError: as :meth:`QueueManager.open`.
        """
        if self._manager is None:
            self._manager = QueueManager.open(self.resolution.config(), lease_ids=False)
        return self._manager

    def destination(self, target: QueueTarget) -> Destination:
        """``target``'s queue, resolved again by its format name (once).

        Raises:
            QueueNotFound: the queue was deleted, or recreated (new topics) since the
                resolution was made.
        """
        destination = self._destinations.get(target.data_topic)
        if destination is None:
            destination = self.manager.resolve(parse_queue_reference(target.format_name))
            if destination.topics.data != target.data_topic:
                raise QueueNotFound(f"queue {target.format_name!r} was recreated since the query "
                                    "started", queue=target.format_name,
                                    hint="restart the query with a new checkpoint")
            self._destinations[target.data_topic] = destination
        return destination

    def require(self, operation: Operation, resolution: Resolution | None = None) -> None:
        """Check again that the principal may do ``operation`` on every queue of
        ``resolution`` (default: this one's), as :func:`authorize` does.

        Args:
            operation (Operation): what the job does.
            resolution (Resolution | None): another resolution of the same job (an admin
                queue of a write); default :attr:`resolution`.

        Raises:
            AccessDenied: a queue refuses the principal now.
            QueueNotFound: a queue was deleted or recreated since the resolution was made.
            BrokerUnavailable: the queue manager could not be opened.
        """
        resolution = resolution or self.resolution
        authorize(self.manager, [self.destination(t) for t in resolution.targets], operation,
                  resolution.format_name)

    def close(self) -> None:
        """Close the queue manager (if it was opened)."""
        manager, self._manager = self._manager, None
        self._destinations.clear()
        if manager is not None:
            manager.close()

    def __enter__(self) -> DriverQueues:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
