"""The queue manager's own access list: seed 004's queue-manager rights.

=================== ================================================ ===========================
seed 004            kmq right (:class:`~facade.security.acl.AccessRight`)     checked when
=================== ================================================ ===========================
Control             CONTROL (= CHANGE_PERMISSIONS; owner change:     the descriptor is replaced
                    TAKE_OWNERSHIP)
Queue Creation      CREATE_QUEUE                                     ``create_queue``
Queue Management    MANAGE (= SET_PROPERTIES)                        a queue's own list refuses
                                                                     set properties, purge or
                                                                     delete: MANAGE on the queue
                                                                     manager allows them anyway
Queue Status Query  QUEUE_STATUS                                     ``list_queues``
Test                TEST                                             ``queue_exists``
(read the list)     GET_PERMISSIONS                                  ``queue_manager_security``
=================== ================================================ ===========================

Descriptors live in the compacted topic :data:`QUEUE_MANAGER_SECURITY_TOPIC` (key: the queue
manager's name; value: ``{"version": 1, "owner": ..., "access_list": [...]}``; the latest valid
record wins). The first principal to open a queue manager that has no descriptor yet records
MSMQ's default for it (:meth:`QueueManagerSecurity.claim_if_unset`): that principal owns it with
every right, and everyone may create queues, list them, test them and read the descriptor, as
the creator of an MSMQ machine is its administrator. Two processes opening a new queue manager
at the same moment may both write a default; the later record wins. Until the first record is
read, :func:`unset_descriptor` applies (every right to everyone: a queue manager nobody
has claimed restricts nobody). A record that is not a valid descriptor is skipped and logged
(the key keeps its previous value); writing a valid one repairs it.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from facade.security.acl import EVERYONE, AccessRight, ObjectKind, SecurityDescriptor
from facade.errors import BrokerUnavailable, InvalidParameter, MessageQueueError
from facade.kafka.librdkafka import NO_LINGER, produce_and_wait
from facade.model.message import Delivery
from facade.model.topics import QUEUE_MANAGER_SECURITY_TOPIC

if TYPE_CHECKING:
    from facade.kafka.kafkaseam import KafkaSession
    from facade.security.principal import Principal

__all__ = ["QUEUE_MANAGER_SECURITY_TOPIC", "QueueManagerSecurity", "SecurityHost",
           "unset_descriptor"]

log = logging.getLogger("kmq.qmsecurity")

#: Seconds a descriptor read may be reused before the topic is read again.
REFRESH_INTERVAL = 1.0
_SCAN_TIMEOUT = 15.0


def unset_descriptor() -> SecurityDescriptor:
    """The descriptor of a queue manager nobody has secured: owned by Everyone, every right to
    everyone (what every caller could do before queue-manager rights existed)."""
    full = AccessRight.FULL_CONTROL | AccessRight.CREATE_QUEUE | AccessRight.QUEUE_STATUS \
        | AccessRight.TEST
    return SecurityDescriptor.default_for(ObjectKind.QUEUE_MANAGER, EVERYONE).grant(EVERYONE, full)


def _decode(value: bytes | None) -> SecurityDescriptor:
    """A record's descriptor; InvalidParameter (or ValueError) when it is not one."""
    doc = json.loads((value or b"").decode("utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("access_list"), list):
        raise InvalidParameter("not an object with an 'access_list' list")
    owner = doc.get("owner")
    if not isinstance(owner, str):
        raise InvalidParameter(f"owner must be text, not {type(owner).__name__}")
    return SecurityDescriptor.from_values(owner, doc["access_list"])


class SecurityHost(Protocol):
    """What :class:`QueueManagerSecurity` needs from its queue manager (which passes itself)."""

    @property
    def name(self) -> str:
        """The queue manager's name (the key of its descriptor record)."""
        ...

    @property
    def principal(self) -> Principal:
        """The caller the checks are made for."""
        ...

    @property
    def session(self) -> KafkaSession:
        """The queue manager's Kafka clients (read and write the descriptor topic)."""
        ...


class QueueManagerSecurity:
    """Reads, checks and replaces queue managers' descriptors for one queue manager's caller.

    Args:
        manager (SecurityHost): the queue manager: supplies the Kafka session, its name and the
            principal.
    """

    def __init__(self, manager: SecurityHost):
        self.manager = manager
        self._lock = threading.Lock()
        self._reader: Any = None
        self._producer: Any = None
        self._next = 0
        self._refreshed = -math.inf
        self._descriptors: dict[str, SecurityDescriptor] = {}

    def descriptor(self, name: str | None = None) -> SecurityDescriptor:
        """The descriptor of queue manager ``name`` (default this one), read at most
        :data:`REFRESH_INTERVAL` seconds ago.

        Raises:
            BrokerUnavailable: the topic could not be read.
        """
        self._refresh(force=False)
        with self._lock:
            return self._descriptors.get(name or self.manager.name) or unset_descriptor()

    def claim_if_unset(self) -> None:
        """Record MSMQ's default descriptor, owned by the caller, if this queue manager has
        none (called when it is opened).

        Raises:
            BrokerUnavailable, BrokerError: the topic could not be read or written.
        """
        self._refresh(force=True)
        with self._lock:
            if self.manager.name in self._descriptors:
                return
        owner = self.manager.principal.name
        self._write(SecurityDescriptor.default_for(ObjectKind.QUEUE_MANAGER, owner))

    def require(self, rights: AccessRight) -> None:
        """Raise unless the caller has ``rights`` on this queue manager.

        Raises:
            AccessDenied: a right is missing (MQ_ERROR_ACCESS_DENIED), naming it.
        """
        self.descriptor().require(self.manager.principal.name, rights,
                                  f"queue manager {self.manager.name}")

    def allows(self, rights: AccessRight) -> bool:
        """Whether the caller has ``rights`` on this queue manager."""
        return self.descriptor().allows(self.manager.principal.name, rights)

    def replace(self, descriptor: SecurityDescriptor) -> SecurityDescriptor:
        """Replace this queue manager's descriptor (CONTROL; TAKE_OWNERSHIP to change the
        owner).

        Raises:
            InvalidParameter: ``descriptor`` is not a SecurityDescriptor.
            AccessDenied: a right is missing.
            BrokerUnavailable, BrokerError: the record was not written.
        """
        if not isinstance(descriptor, SecurityDescriptor):
            raise InvalidParameter.wrong_type(
                "descriptor", "a SecurityDescriptor (the queue manager's security)", descriptor,
                hint="start from qm.queue_manager_security()")
        current = self.descriptor()
        self.require(AccessRight.CONTROL)
        if descriptor.owner.casefold() != current.owner.casefold():
            self.require(AccessRight.TAKE_OWNERSHIP)
        self._write(descriptor)
        return descriptor

    def _write(self, descriptor: SecurityDescriptor) -> None:
        value = json.dumps({"version": 1, "owner": descriptor.owner,
                            "access_list": descriptor.to_values()}).encode()
        self._ensure_topic()
        with self._lock:
            if self._producer is None:
                self._producer = self.manager.session.producer(Delivery.RECOVERABLE,
                                                               extra=NO_LINGER)
            producer = self._producer
        produce_and_wait(producer, QUEUE_MANAGER_SECURITY_TOPIC, value,
                         key=self.manager.name.encode(), operation="write queue manager security")
        with self._lock:
            self._descriptors[self.manager.name] = descriptor

    def close(self) -> None:
        """Release the reader and flush the producer."""
        with self._lock:
            reader, self._reader = self._reader, None
            producer, self._producer = self._producer, None
        if reader is not None:
            reader.close()
        if producer is not None:
            producer.flush(10.0)

    def _ensure_topic(self) -> None:
        self.manager.session.create_topics([QUEUE_MANAGER_SECURITY_TOPIC],
                                           {"cleanup.policy": "compact"}, exist_ok=True)

    def _refresh(self, *, force: bool) -> None:
        with self._lock:
            if not force and time.monotonic() - self._refreshed < REFRESH_INTERVAL:
                return
            if self._reader is None:
                self._ensure_topic()
                self._reader = self.manager.session.reader()
                self._reader.assign({QUEUE_MANAGER_SECURITY_TOPIC: 0})
            # Up to the end the broker reports now: a record acknowledged before this call is
            # always seen (the registry's rule).
            end = self._reader.end_offsets([QUEUE_MANAGER_SECURITY_TOPIC], _SCAN_TIMEOUT)
            deadline = time.monotonic() + _SCAN_TIMEOUT
            while self._next < end[QUEUE_MANAGER_SECURITY_TOPIC]:
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(
                        f"could not read {QUEUE_MANAGER_SECURITY_TOPIC} up to its end within "
                        f"{_SCAN_TIMEOUT:g} s", hint="check that the Kafka broker is running")
                for record in self._reader.poll(0.05):
                    self._apply(record)
            self._refreshed = time.monotonic()

    def _apply(self, record: Any) -> None:
        self._next = record.offset + 1
        name = (record.key or b"").decode("utf-8", errors="replace")
        if record.value is None:  # a tombstone: back to the unset descriptor
            self._descriptors.pop(name, None)
            return
        try:
            self._descriptors[name] = _decode(record.value)
        except (MessageQueueError, ValueError, UnicodeDecodeError) as exc:
            log.warning("skipping record %d of %s for %r: not a security descriptor (%s)",
                        record.offset, QUEUE_MANAGER_SECURITY_TOPIC, name, exc)
