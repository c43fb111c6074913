"""An in-memory Kafka for unit tests of queue semantics: the :class:`facade.kafka.kafkaseam.KafkaSession`
protocol, served from this process's memory instead of a broker.

``QueueManager.open(config, session=MemoryKafkaSession())`` gives a queue manager whose
cursors, quotas, acknowledgments, journals, transactions and dead-letter copies run on the same
code as on a broker, in milliseconds and with nothing to start. It lives in ``facade`` (not
under ``tests/``) because an application can unit-test its own MSMQ logic on it too, as
kombu's ``memory://`` transport allows.

Kafka's documented semantics, for what kmq uses and nothing more:

* topics have one partition; records get consecutive offsets from 0 and keep their key,
  value, headers (in order, duplicates kept) and a timestamp (epoch ms, wall clock);
* a topic's log start offset moves only by :meth:`MemoryKafkaSession.delete_records`
  (DeleteRecords); a reader positioned below it reads from it (``auto.offset.reset=earliest``);
  the high watermark is the offset the next record gets;
* producers report deliveries through ``poll``/``flush`` on the calling thread (confluent-kafka's
  ``on_delivery``), never from ``produce``; every produced record is delivered exactly once
  (an idempotent producer never writes duplicates);
* transactions: ``init_transactions`` fences the previous producer with the same
  ``transactional.id`` (its open transaction is aborted); commit and abort write one control
  record (the transaction marker) in every topic the transaction wrote, which takes an offset;
  readers are read_committed: they stop at the last stable offset (the first record of an open
  transaction) and skip aborted records and markers;
* compacted topics (the registries) are read as a log: nothing is ever compacted away.

Not modelled (these need the broker-process tests): replication, ``acks`` and broker failures
(no record is ever lost or refused for want of replicas, so EXPRESS and RECOVERABLE behave
alike), retention by time or size, compaction, ``max.message.bytes`` refusals by the broker,
ACLs and authentication, the transaction timeout, delivery timeouts (``message.timeout.ms``,
TTRQ: a record is delivered at once, and one for a missing topic is refused at once with
QueueNotFound where librdkafka reports UNKNOWN_TOPIC_OR_PART after the timeout), consumer
groups, share groups (KIP-932: a queue created with ``arbitration="share"`` is refused with
:class:`~facade.errors.BrokerError` naming this), more than one partition, and other processes (a cluster lives in one process).
librdkafka tuning settings passed as ``extra`` (linger, fetch sizes) change nothing here.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from facade.errors import BrokerError, BrokerUnavailable, QueueExists, QueueNotFound
from facade.kafka.kafkaseam import DeliveryCallback, KafkaRecord, ProducerFenced
from facade.model.message import Delivery
from facade.model.topicsettings import MAX_MESSAGE_BYTES, topic_config

if TYPE_CHECKING:
    from facade.kafka import kafkaseam

__all__ = ["MemoryKafka", "MemoryKafkaSession", "MemoryProducer", "MemoryReader"]

#: Why a share-arbitrated queue cannot run here.
NO_SHARE_GROUPS = ("the in-memory Kafka does not model Kafka share groups (KIP-932: acquisition "
                   "locks, delivery counts, dead-letter topics), so it has no queue arbitrated "
                   "by one (arbitration='share')")
_SHARE_HINT = ("test share-arbitrated queues on a real broker (tests/integration), or create "
               "the queue with arbitration='receipts'")
#: What :attr:`MemoryKafkaSession.bootstrap_servers` reports (no broker is involved).
MEMORY_BOOTSTRAP = "memory://"


class _TransactionState(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(eq=False)
class _Transaction:
    """One Kafka transaction of one producer, and the topics it wrote."""

    state: _TransactionState = _TransactionState.OPEN
    topics: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Entry:
    """One record slot of a log: a data record or a transaction marker (``control``)."""

    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    transaction: _Transaction | None
    control: bool = False


@dataclass(eq=False)
class _Log:
    """Partition 0 of one topic: ``entries[i]`` has offset ``i``."""

    name: str
    config: dict[str, str]
    entries: list[_Entry] = field(default_factory=list)
    log_start: int = 0

    @property
    def high_watermark(self) -> int:
        return len(self.entries)

    def stable_offset(self) -> int:
        """Kafka's last stable offset: the first record of a still-open transaction, or the
        high watermark. read_committed readers read nothing at or past it."""
        for offset in range(self.log_start, len(self.entries)):
            transaction = self.entries[offset].transaction
            if transaction is not None and transaction.state is _TransactionState.OPEN:
                return offset
        return len(self.entries)

    def visible(self, offset: int) -> bool:
        """Whether a read_committed reader hands out the record at ``offset``."""
        entry = self.entries[offset]
        return not entry.control and (entry.transaction is None
                                      or entry.transaction.state is _TransactionState.COMMITTED)

    def record(self, offset: int) -> KafkaRecord:
        entry = self.entries[offset]
        return KafkaRecord(self.name, 0, offset, entry.timestamp_ms, entry.key, entry.value,
                           entry.headers)


def _missing(topic: str) -> QueueNotFound:
    return QueueNotFound(f"topic {topic!r} does not exist in the in-memory Kafka", queue=topic,
                         hint="create the queue first (QueueManager.create_queue)")


class MemoryKafka:
    """An in-process Kafka cluster: the topics and transactions its sessions share.

    Thread-safe. Several :class:`MemoryKafkaSession` (several queue managers, or a sender and a
    receiver) on one cluster see each other's records, as processes on one broker do.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._logs: dict[str, _Log] = {}
        #: The live producer of each ``transactional.id`` (later ones fence earlier ones).
        self._transactional: dict[str, MemoryProducer] = {}

    def log(self, topic: str) -> _Log:
        """The log of ``topic``; call with the lock held.

        Raises:
            QueueNotFound: no such topic.
        """
        found = self._logs.get(topic)
        if found is None:
            raise _missing(topic)
        return found

    @property
    def changed(self) -> threading.Condition:
        """The cluster's lock, notified on every append and transaction end."""
        return self._changed

    def logs(self) -> Mapping[str, _Log]:
        """Every topic's log by name; call with the lock held."""
        return self._logs

    def topics(self) -> set[str]:
        """Every topic's name."""
        with self._changed:
            return set(self._logs)

    def create(self, name: str, config: Mapping[str, str]) -> bool:
        """Create ``name``; False if it already exists."""
        with self._changed:
            if name in self._logs:
                return False
            self._logs[name] = _Log(name, dict(config))
            return True

    def delete(self, name: str) -> None:
        """Delete ``name`` (nothing if it does not exist); its readers get QueueNotFound."""
        with self._changed:
            self._logs.pop(name, None)
            self._changed.notify_all()

    def append(self, topic: str, entry: _Entry) -> int:
        """Append one entry; its offset.

        Raises:
            QueueNotFound: no such topic.
        """
        with self._changed:
            log = self.log(topic)
            log.entries.append(entry)
            self._changed.notify_all()
            return log.high_watermark - 1

    def register(self, transactional_id: str, producer: MemoryProducer) -> None:
        """Make ``producer`` the live one for ``transactional_id``: the previous one is fenced
        and its open transaction aborted (Kafka's ``init_transactions``)."""
        with self._changed:
            previous = self._transactional.get(transactional_id)
            self._transactional[transactional_id] = producer
            if previous is not None and previous is not producer:
                previous.fence()

    def end(self, transaction: _Transaction, state: _TransactionState) -> None:
        """Commit or abort ``transaction``: a marker in each topic it wrote, then the state."""
        with self._changed:
            if transaction.state is not _TransactionState.OPEN:
                return
            now = _now_ms()
            for topic in sorted(transaction.topics):
                log = self._logs.get(topic)
                if log is not None:  # a deleted topic keeps no marker
                    log.entries.append(_Entry(now, None, None, (), transaction, control=True))
            transaction.state = state
            self._changed.notify_all()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


@dataclass(frozen=True)
class _Delivered:
    """The message a delivery report names (the members kmq reads of confluent-kafka's)."""

    _topic: str
    _offset: int

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None


class MemoryProducer:
    """A producer on a :class:`MemoryKafka` (satisfies :class:`facade.kafka.kafkaseam.RecordProducer`).

    Args:
        cluster (MemoryKafka): where records go.
        transactional_id (str | None): Kafka ``transactional.id``; None for a plain
            (idempotent or not: the same here) producer.
    """

    def __init__(self, cluster: MemoryKafka, transactional_id: str | None = None):
        self._cluster = cluster
        self._transactional_id = transactional_id
        self._reports: list[tuple[DeliveryCallback, _Delivered]] = []
        self._lock = threading.Lock()
        self._initialised = False
        self._fenced = False
        self._transaction: _Transaction | None = None

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
                headers: list[Any] | None = None,
                on_delivery: DeliveryCallback | None = None) -> None:
        """Append one record to ``topic``; its delivery report waits for :meth:`poll`.

        Raises:
            QueueNotFound: the topic does not exist (a broker reports UNKNOWN_TOPIC_OR_PART).
            BrokerError: a transactional producer outside a transaction, or fenced.
        """
        with self._lock:
            transaction = self._transaction_for_produce()
            entry = _Entry(_now_ms(), _as_bytes(key), _as_bytes(value),
                           tuple((name, _as_bytes(data) or b"") for name, data in headers or ()),
                           transaction)
            offset = self._cluster.append(topic, entry)
            if transaction is not None:
                transaction.topics.add(topic)
            if on_delivery is not None:
                self._reports.append((on_delivery, _Delivered(topic, offset)))

    def _transaction_for_produce(self) -> _Transaction | None:
        if self._transactional_id is None:
            return None
        self._check_live("produce")
        if self._transaction is None:
            raise BrokerError(f"produce by transactional producer {self._transactional_id!r} "
                              "outside a transaction", kafka_code="_STATE",
                              hint="call begin_transaction() first")
        return self._transaction

    def poll(self, timeout: float = -1) -> int:
        """Serve the pending delivery reports (all records are delivered at once); how many."""
        with self._lock:
            reports, self._reports = self._reports, []
        for callback, message in reports:
            callback(None, message)
        return len(reports)

    def flush(self, timeout: float = -1) -> int:
        """Serve the pending delivery reports; 0: nothing is left undelivered."""
        self.poll(0)
        return 0

    def init_transactions(self, timeout: float = -1) -> None:
        """Register the ``transactional.id``, fencing the previous producer with it.

        Raises:
            BrokerError: the producer has no ``transactional.id``.
        """
        if self._transactional_id is None:
            raise BrokerError("init_transactions on a producer without transactional.id",
                              kafka_code="_NOT_CONFIGURED",
                              hint="create the producer with a transactional_id")
        self._cluster.register(self._transactional_id, self)
        self._initialised = True

    def begin_transaction(self) -> None:
        """Start a transaction.

        Raises:
            BrokerError: not initialised, fenced, or a transaction is already open.
        """
        with self._lock:
            self._check_live("begin_transaction")
            if not self._initialised or self._transaction is not None:
                raise BrokerError("begin_transaction: the producer is not initialised or a "
                                  "transaction is already open", kafka_code="_STATE")
            self._transaction = _Transaction()

    def commit_transaction(self, timeout: float = -1) -> None:
        """Deliver the transaction's records, then commit it: markers, then visibility.

        Raises:
            ProducerFenced: this producer was fenced; the transaction is aborted.
            BrokerError: no transaction is open.
        """
        self.flush(timeout)
        self._end(_TransactionState.COMMITTED)

    def abort_transaction(self, timeout: float = -1) -> None:
        """Abort the open transaction (nothing if fenced: it is already aborted).

        Raises:
            BrokerError: no transaction is open.
        """
        self.flush(timeout)
        with self._lock:
            if self._fenced:
                self._transaction = None
                return
        self._end(_TransactionState.ABORTED)

    def _end(self, state: _TransactionState) -> None:
        with self._lock:
            self._check_live(f"{state.value} transaction")
            transaction, self._transaction = self._transaction, None
        if transaction is None:
            raise BrokerError(f"no transaction is open to {state.value}", kafka_code="_STATE")
        self._cluster.end(transaction, state)

    def fence(self) -> None:
        """A newer producer took this one's ``transactional.id``: abort what it has open;
        every later transactional call fails."""
        self._fenced = True
        transaction = self._transaction
        if transaction is not None:
            self._cluster.end(transaction, _TransactionState.ABORTED)

    def _check_live(self, operation: str) -> None:
        if self._fenced:
            raise ProducerFenced(
                f"{operation}: the producer with transactional.id {self._transactional_id!r} "
                "was fenced by a newer one with the same id (PRODUCER_FENCED)",
                hint="nothing it sent is visible")


class MemoryReader:
    """A read_committed reader of a :class:`MemoryKafka` at explicit offsets (satisfies
    :class:`facade.kafka.kafkaseam.RecordReader`)."""

    def __init__(self, cluster: MemoryKafka):
        self._cluster = cluster
        #: Per assigned topic: the log it was assigned on, and the next offset (< 0: log start).
        self._logs: dict[str, _Log] = {}
        self._next: dict[str, int] = {}
        self._paused: set[str] = set()

    def assign(self, positions: Mapping[str, int]) -> None:
        """Read each topic from the given offset (< 0: the log start).

        Raises:
            QueueNotFound: a topic does not exist.
        """
        with self._cluster.changed:
            logs = {topic: self._cluster.log(topic) for topic in positions}
        self._logs, self._next = logs, dict(positions)
        self._paused.clear()

    def _live(self, topic: str) -> _Log:
        """The assigned log of ``topic``, unless the topic was deleted (lock held)."""
        log = self._logs.get(topic)
        if log is None:
            raise BrokerError(f"topic {topic!r} is not assigned to this reader",
                              kafka_code="_STATE", hint="assign() it first")
        if self._cluster.logs().get(topic) is not log:
            raise QueueNotFound(f"topic {topic!r} was deleted while this process was reading "
                                "it: its queue no longer exists", queue=topic,
                                hint="open or create the queue again")
        return log

    def _position(self, log: _Log, topic: str) -> int:
        return max(self._next[topic], log.log_start)

    def _take(self, max_records: int) -> list[KafkaRecord]:
        """Committed records from every fetching topic, positions moved past them (lock held)."""
        records: list[KafkaRecord] = []
        for topic in self._next:
            log = self._live(topic)
            if topic in self._paused:
                continue
            position, stable = self._position(log, topic), log.stable_offset()
            while position < stable and len(records) < max_records:
                if log.visible(position):
                    records.append(log.record(position))
                position += 1
            self._next[topic] = position
        return records

    def poll(self, timeout: float, max_records: int = 1000) -> list[KafkaRecord]:
        """Committed records available within ``timeout`` seconds (may be empty).

        Raises:
            QueueNotFound: an assigned topic was deleted.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._cluster.changed:
            while True:
                records = self._take(max_records)
                left = deadline - time.monotonic()
                if records or left <= 0:
                    return records
                self._cluster.changed.wait(left)

    def seek(self, topic: str, offset: int) -> None:
        """Read ``topic`` again from ``offset``."""
        with self._cluster.changed:
            self._live(topic)
            self._next[topic] = offset

    def pause(self, topic: str) -> None:
        """Hand out none of ``topic``'s records until :meth:`resume`."""
        self._paused.add(topic)

    def resume(self, topic: str) -> None:
        """Hand out ``topic``'s records again."""
        self._paused.discard(topic)

    def wake(self) -> None:
        """Check that the assigned topics still exist (a memory reader never rests).

        Raises:
            QueueNotFound: one was deleted.
        """
        with self._cluster.changed:
            for topic in self._next:
                self._live(topic)

    def caught_up(self, topics: Iterable[str]) -> bool:
        """True when every topic's position is at its high watermark."""
        with self._cluster.changed:
            return all(self._position(self._live(topic), topic)
                       >= self._logs[topic].high_watermark for topic in topics)

    def log_start(self, topic: str) -> int:
        """The log start offset of ``topic``.

        Raises:
            QueueNotFound: the topic does not exist.
        """
        with self._cluster.changed:
            return self._cluster.log(topic).log_start

    def end_offsets(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, int]:
        """The high watermark of each topic.

        Raises:
            QueueNotFound: a topic does not exist.
        """
        with self._cluster.changed:
            return {topic: self._cluster.log(topic).high_watermark for topic in topics}

    def watermarks(self, topics: Sequence[str],
                   timeout: float = 10.0) -> dict[str, tuple[int, int]]:
        """``(log start, high watermark)`` of each topic; assigns them at their ends.

        Raises:
            QueueNotFound: a topic does not exist.
        """
        with self._cluster.changed:
            found = {topic: (self._cluster.log(topic).log_start,
                             self._cluster.log(topic).high_watermark) for topic in topics}
        self.assign({topic: high for topic, (_low, high) in found.items()})
        return found

    def read_to_end(self, topics: Sequence[str], timeout: float, *,
                    ends: Mapping[str, int] | None = None) -> Iterator[list[KafkaRecord]]:
        """Yield batches until every topic is read up to its high watermark (``ends`` is not
        needed: the in-memory logs are always exact).

        Raises:
            BrokerUnavailable: an open transaction kept a topic from being read to its end
                for ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while not self.caught_up(topics):
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"could not read {', '.join(topics)} up to the end within "
                                        f"{timeout:g} s (a transaction stays open)")
            yield self.poll(0.01)

    def close(self) -> None:
        """Forget the assignment."""
        self._logs.clear()
        self._next.clear()


class MemoryKafkaSession:
    """Kafka clients on a :class:`MemoryKafka` (satisfies :class:`facade.kafka.kafkaseam.KafkaSession`).

    Args:
        cluster (MemoryKafka | None): the cluster; None: a new, empty one of its own.
        message_max_bytes (int): what :attr:`message_max_bytes` reports (bytes).
    """

    def __init__(self, cluster: MemoryKafka | None = None, *,
                 message_max_bytes: int = MAX_MESSAGE_BYTES):
        self.cluster = cluster or MemoryKafka()
        self._message_max_bytes = message_max_bytes

    @property
    def bootstrap_servers(self) -> str:
        """:data:`MEMORY_BOOTSTRAP`: no broker is involved."""
        return MEMORY_BOOTSTRAP

    @property
    def message_max_bytes(self) -> int:
        """The producers' ``message.max.bytes`` (bytes), as given."""
        return self._message_max_bytes

    def producer(self, delivery: Delivery, transactional_id: str | None = None,
                 extra: Mapping[str, Any] | None = None) -> MemoryProducer:
        """A new producer; ``delivery`` changes nothing (no replicas to wait for), ``extra``
        librdkafka tuning neither."""
        return MemoryProducer(self.cluster, transactional_id)

    def reader(self, extra: Mapping[str, Any] | None = None) -> MemoryReader:
        """A new read_committed reader."""
        return MemoryReader(self.cluster)

    def watermarks(self, topics: Sequence[str],
                   timeout: float = 10.0) -> dict[str, tuple[int, int]]:
        """``(log start, high watermark)`` of each topic.

        Raises:
            QueueNotFound: a topic does not exist.
        """
        return self.reader().watermarks(topics, timeout)

    def offset_bounds(self, topics: Sequence[str],
                      timeout: float = 10.0) -> dict[str, tuple[int, int]]:
        """``(log start, last stable offset)`` of each topic; missing topics are left out."""
        with self.cluster.changed:
            logs = self.cluster.logs()
            return {topic: (logs[topic].log_start, logs[topic].stable_offset())
                    for topic in topics if topic in logs}

    def ping(self, timeout: float = 10.0) -> None:
        """Always answers."""

    def share_consumer(self, group: str, topic: str,
                       extra: Mapping[str, Any] | None = None) -> kafkaseam.ShareRecordConsumer:
        """Refused: share groups are not modelled.

        Raises:
            BrokerError: always (see :data:`NO_SHARE_GROUPS`).
        """
        raise BrokerError(NO_SHARE_GROUPS, queue=topic, hint=_SHARE_HINT)

    def set_group_configs(self, group: str, settings: Mapping[str, str]) -> dict[str, str]:
        """Refused: share groups are not modelled.

        Raises:
            BrokerError: always (see :data:`NO_SHARE_GROUPS`).
        """
        raise BrokerError(NO_SHARE_GROUPS, hint=_SHARE_HINT)

    def delete_groups(self, groups: Iterable[str]) -> list[str]:
        """Nothing to delete: the in-memory Kafka keeps no groups."""
        return []

    def broker_config(self, name: str) -> str | None:
        """None: the in-memory Kafka has no broker configs."""
        return None

    def create_topics(self, names: Sequence[str], config: Mapping[str, str] | None = None,
                      exist_ok: bool = False) -> list[str]:
        """Create topics with kmq's configs for their role (one replica), ``config`` over them.

        Raises:
            QueueExists: a topic exists and ``exist_ok`` is false.
        """
        created = []
        for name in names:
            if self.cluster.create(name, {**topic_config(name, 1), **(config or {})}):
                created.append(name)
            elif not exist_ok:
                raise QueueExists(f"create topic {name!r} failed: it already exists", queue=name)
        return created

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete topics; missing ones are ignored."""
        for name in names:
            self.cluster.delete(name)

    def topic_exists(self, name: str) -> bool:
        """True if ``name`` exists."""
        return name in self.cluster.topics()

    def topic_configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        """The configs each topic was created with.

        Raises:
            QueueNotFound: a topic does not exist.
        """
        with self.cluster.changed:
            return {name: dict(self.cluster.log(name).config) for name in names}

    def write_problem(self, topic: str, timeout: float = 5.0) -> tuple[str, str] | None:
        """None: a topic in memory has no replicas that could be missing."""
        return None

    def delete_records_support(self) -> tuple[bool, str]:
        """DeleteRecords is supported."""
        return (True, "")

    def delete_records(self, topic: str, before: int) -> int:
        """Move the log start offset of ``topic`` up to ``before`` (at most the high watermark).

        Raises:
            QueueNotFound: the topic does not exist.
        """
        with self.cluster.changed:
            log = self.cluster.log(topic)
            log.log_start = max(log.log_start, min(before, log.high_watermark))
            return log.log_start

    def close(self) -> None:
        """Nothing to release: the cluster outlives its sessions."""


if TYPE_CHECKING:
    def _conforms(session: MemoryKafkaSession) -> kafkaseam.KafkaSession:
        """mypy checks here that the in-memory session satisfies the seam."""
        return session
