"""Queue and queue-manager registries: MSMQ's queue properties, kept where every process sees them.

Two compacted single-partition topics hold them: ``__kmq.queues`` (key: the queue's canonical
path name; value: its properties as JSON; a tombstone deletes it) and ``__kmq.queue_managers``
(key: queue-manager name; value: its GUID). The registries are small control-plane logs, so each
read scans them from the start; the latest record per key wins on the queue registry (a property
change is a new record), while on the queue-manager registry the first record wins (two processes
initialising the same name at once agree on one GUID).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from facade.errors import BrokerUnavailable, InvalidParameter
from facade.kafka import KafkaSession, produce_and_wait
from facade.message import Delivery
from facade.topics import QUEUE_MANAGER_REGISTRY_TOPIC, QUEUE_REGISTRY_TOPIC

__all__ = ["QueueManagerRecord", "QueueProperties", "Registry"]

#: Registry topics are compacted: only the latest record per key matters.
_REGISTRY_TOPIC_CONFIG = {"cleanup.policy": "compact"}
_SCAN_TIMEOUT = 15.0
#: Seconds a registry lookup that hits may serve the cached view without reading new records.
REFRESH_INTERVAL = 1.0
#: PROPID_Q_LABEL limit in characters.
MAX_QUEUE_LABEL_LENGTH = 124


@dataclass(frozen=True)
class QueueProperties:
    """MSMQ queue properties (PROPID_Q_*) of one queue.

    Attributes:
        path_name (str): canonical path name, e.g. ``qm1\\private$\\orders`` (PROPID_Q_PATHNAME).
        queue_manager (str): the owning queue manager's name.
        queue_name (str): the name part (lowercase).
        private (bool): a private queue (``private$``) rather than a public one.
        data_topic (str), receipts_topic (str): the Kafka topics holding it.
        instance (str): the queue's GUID (PROPID_Q_INSTANCE).
        type_id (str | None): application-defined type GUID (PROPID_Q_TYPE).
        label (str): PROPID_Q_LABEL, at most 124 characters.
        transactional (bool): PROPID_Q_TRANSACTION.
        journal (bool): PROPID_Q_JOURNAL: keep a copy of each removed message in ``;JOURNAL``.
        quota_kb (int | None): PROPID_Q_QUOTA in KB; None is unlimited.
        journal_quota_kb (int | None): PROPID_Q_JOURNAL_QUOTA in KB; None is unlimited.
        base_priority (int): PROPID_Q_BASEPRIORITY, -32768..32767.
        authenticate (bool): PROPID_Q_AUTHENTICATE: accept only signed messages.
        privacy_level (int): PROPID_Q_PRIV_LEVEL: 0 NONE, 1 OPTIONAL, 2 BODY.
        create_time (float), modify_time (float): epoch seconds.
    """

    path_name: str
    queue_manager: str
    queue_name: str
    private: bool
    data_topic: str
    receipts_topic: str
    instance: str = field(default_factory=lambda: str(uuid.uuid4()))
    type_id: str | None = None
    label: str = ""
    transactional: bool = False
    journal: bool = False
    quota_kb: int | None = None
    journal_quota_kb: int | None = None
    base_priority: int = 0
    authenticate: bool = False
    privacy_level: int = 0
    create_time: float = field(default_factory=time.time)
    modify_time: float = field(default_factory=time.time)

    @property
    def queue_number(self) -> int:
        """The queue's number in ``PRIVATE=<queue manager guid>\\<number>`` (the first 32 bits
        of its instance GUID; unique among its queue manager's private queues)."""
        return int(uuid.UUID(self.instance).hex[:8], 16)

    def validate(self) -> QueueProperties:
        """Check the property ranges.

        Raises:
            InvalidParameter: a property outside its MSMQ range; the message names it.
        """
        if len(self.label) > MAX_QUEUE_LABEL_LENGTH:
            raise InvalidParameter(f"queue label (PROPID_Q_LABEL) longer than {MAX_QUEUE_LABEL_LENGTH} characters",
                                   queue=self.path_name)
        for name in ("quota_kb", "journal_quota_kb"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise InvalidParameter(f"{name} must be a positive number of KB or None (unlimited), not {value!r}",
                                       queue=self.path_name)
        if not -32768 <= self.base_priority <= 32767:
            raise InvalidParameter("base_priority (PROPID_Q_BASEPRIORITY) must be within -32768..32767",
                                   queue=self.path_name)
        if self.privacy_level not in (0, 1, 2):
            raise InvalidParameter("privacy_level (PROPID_Q_PRIV_LEVEL) must be 0 NONE, 1 OPTIONAL or 2 BODY",
                                   queue=self.path_name)
        return self

    def with_changes(self, **changes: Any) -> QueueProperties:
        """A copy with ``changes`` applied and ``modify_time`` updated, validated."""
        return replace(self, **changes, modify_time=time.time()).validate()

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> QueueProperties:
        doc = json.loads(data)
        doc.pop("version", None)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in doc.items() if k in known})


@dataclass(frozen=True)
class QueueManagerRecord:
    """A queue manager (MSMQ machine) known to the cluster.

    Attributes:
        name (str): its name (lowercase).
        guid (str): its GUID (MSMQ's QM id), used in message ids and MACHINE= format names.
        create_time (float): epoch seconds.
    """

    name: str
    guid: str
    create_time: float


class Registry:
    """Reads and writes the registry topics, keeping a cached view of them.

    The view is brought up to date incrementally (one persistent reader per registry): at most
    every :data:`REFRESH_INTERVAL` seconds for lookups that hit, and always before a lookup
    misses or before :meth:`queues` lists everything, so a queue created anywhere is found at
    once and a property change is seen within that interval. Own writes are applied at once.

    Args:
        session (KafkaSession): the Kafka clients to use.
    """

    def __init__(self, session: KafkaSession):
        self._session = session
        self._producer = None
        self._lock = threading.RLock()
        self._reader: Any = None
        self._refreshed = float("-inf")
        self._queues: dict[str, QueueProperties] = {}
        self._managers: dict[str, QueueManagerRecord] = {}
        self._next: dict[str, int] = {}  # per registry topic: the next offset to apply

    def ensure_topics(self) -> None:
        """Create the registry topics if they do not exist yet."""
        self._session.create_topics([QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC],
                                    _REGISTRY_TOPIC_CONFIG, exist_ok=True)

    # -- queues --------------------------------------------------------------------------------

    def queues(self) -> dict[str, QueueProperties]:
        """Every registered queue, by canonical path name (latest record per key wins), read up
        to the end of the registry now."""
        self._refresh(force=True)
        with self._lock:
            return dict(self._queues)

    def get_queue(self, path_name: str) -> QueueProperties | None:
        """The queue registered under ``path_name`` (canonical form), or None.

        A hit may be up to :data:`REFRESH_INTERVAL` seconds old; a miss is always re-checked
        against the end of the registry.
        """
        self._refresh(force=False)
        with self._lock:
            found = self._queues.get(path_name)
        if found is None:
            self._refresh(force=True)
            with self._lock:
                found = self._queues.get(path_name)
        return found

    def put_queue(self, properties: QueueProperties) -> None:
        """Register or update a queue (one record, acknowledged by all in-sync replicas)."""
        self._write(QUEUE_REGISTRY_TOPIC, properties.path_name, properties.to_json())
        with self._lock:
            self._queues[properties.path_name] = properties

    def remove_queue(self, path_name: str) -> None:
        """Unregister a queue (a tombstone)."""
        self._write(QUEUE_REGISTRY_TOPIC, path_name, None)
        with self._lock:
            self._queues.pop(path_name, None)

    # -- queue managers ------------------------------------------------------------------------

    def queue_managers(self) -> dict[str, QueueManagerRecord]:
        """Every queue manager, by name; the first record per name is authoritative."""
        self._refresh(force=True)
        with self._lock:
            return dict(self._managers)

    def ensure_queue_manager(self, name: str) -> QueueManagerRecord:
        """Return the queue manager ``name``, registering it with a new GUID if unknown."""
        existing = self.queue_managers().get(name)
        if existing is not None:
            return existing
        record = QueueManagerRecord(name, str(uuid.uuid4()), time.time())
        self._write(QUEUE_MANAGER_REGISTRY_TOPIC, name, json.dumps(asdict(record)).encode())
        # Read back: if another process registered the name first, its GUID wins.
        return self.queue_managers()[name]

    def close(self) -> None:
        """Release the reader and the producer."""
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            if self._producer is not None:
                self._producer.flush(5.0)
                self._producer = None

    # -- plumbing ------------------------------------------------------------------------------

    def _write(self, topic: str, key: str, value: bytes | None) -> None:
        with self._lock:
            if self._producer is None:
                self._producer = self._session.producer(Delivery.RECOVERABLE)
            producer = self._producer
        produce_and_wait(producer, topic, value, key=key.encode(), operation="write registry")

    def _refresh(self, *, force: bool) -> None:
        """Apply the registry records written since the last refresh, up to the end offsets
        the broker reports now (so a record acknowledged before this call is always seen)."""
        with self._lock:
            if not force and time.monotonic() - self._refreshed < REFRESH_INTERVAL:
                return
            topics = [QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC]
            if self._reader is None:
                self._reader = self._session.reader()
                self._reader.assign({topic: 0 for topic in topics})
            ends = self._reader.end_offsets(topics, _SCAN_TIMEOUT)
            deadline = time.monotonic() + _SCAN_TIMEOUT
            while any(self._next.get(topic, 0) < end for topic, end in ends.items()):
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(
                        f"could not read the queue registry up to its end within {_SCAN_TIMEOUT:g} s",
                        hint="check that the Kafka broker is running")
                for record in self._reader.poll(0.05):
                    self._apply(record.topic, (record.key or b"").decode(), record.value)
                    self._next[record.topic] = record.offset + 1
            self._refreshed = time.monotonic()

    def _apply(self, topic: str, key: str, value: bytes | None) -> None:
        if topic == QUEUE_REGISTRY_TOPIC:
            if value is None:
                self._queues.pop(key, None)
            else:
                self._queues[key] = QueueProperties.from_json(value)
        elif value is not None and key not in self._managers:
            self._managers[key] = QueueManagerRecord(**json.loads(value))
