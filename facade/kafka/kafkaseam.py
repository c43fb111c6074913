"""What kmq uses of Kafka, as protocols: the seam between the queue semantics and the broker.

The queue manager, its queues, the registry and the receipts views reach Kafka only through a
:class:`KafkaSession`: producers (:class:`RecordProducer`), readers of single-partition topics at
explicit offsets (:class:`RecordReader`) and the few administrative calls kmq makes. Two
implementations satisfy it: :class:`facade.kafka.librdkafka.KafkaSession` (librdkafka, a real broker) and
:class:`facade.kafka.memorykafka.MemoryKafkaSession` (in process, for unit tests of queue semantics).
mypy checks that both do (``tests/unit/test_typecheck.py``). Kafka concepts, Kafka names:
docs/design.md, "The Kafka seam", says what the in-memory one does not model.

The records and topic descriptions both return live here, below both implementations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from facade.errors import TransactionAborted

if TYPE_CHECKING:
    from facade.model.message import Delivery

__all__ = ["ACCEPT", "DeliveryCallback", "KafkaRecord", "KafkaSession", "ProducerFenced",
           "RELEASE", "RecordProducer", "RecordReader", "SharedRecord", "ShareRecordConsumer",
           "TopicDescription"]

#: Acknowledgement kinds of a share consumer (KIP-932's AcknowledgeType): ACCEPT removes the
#: record from the share group's view for good; RELEASE gives it back for another delivery
#: (its delivery count stays one higher).
ACCEPT = "accept"
RELEASE = "release"

#: A producer's delivery report: ``callback(error, message)``; ``error`` is None on success and
#: ``message.offset()`` is the record's offset (confluent-kafka's ``on_delivery``).
DeliveryCallback = Callable[[Any, Any], None]


class ProducerFenced(TransactionAborted):
    """A transactional :class:`RecordProducer` was fenced: a newer producer took its
    ``transactional.id`` (Kafka's PRODUCER_FENCED), so its open transaction is aborted and every
    later transactional call fails. What a producer other than librdkafka's raises for it
    (librdkafka raises a fatal ``KafkaException``); the owner replaces the producer."""


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One record read from a topic.

    Attributes:
        topic (str), partition (int), offset (int): where it is.
        timestamp_ms (int): the record's timestamp, epoch milliseconds.
        key (bytes | None), value (bytes | None): as stored.
        headers (tuple[tuple[str, bytes], ...]): in order, duplicates kept.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class TopicDescription:
    """A topic as the cluster describes it (metadata and topic configs).

    Attributes:
        name (str): the topic.
        partitions (int): its partition count.
        replication_factor (int): the fewest replicas any of its partitions has.
        configs (Mapping[str, str]): topic configs as the broker reports them, by Kafka name
            (``retention.ms``...). Kafka reports every config with its effective value; a
            broker that reports only the configs set on the topic leaves the others out.
    """

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class SharedRecord:
    """One record a share consumer acquired (KIP-932): the record and how often the share
    group has delivered it, this delivery included.

    Attributes:
        record (KafkaRecord): the record.
        delivery_count (int): 1 for a first delivery; a RELEASE or a lapsed acquisition lock
            makes the next delivery count one more.
        acquired_at (float): ``time.monotonic()`` when the poll that acquired it returned; the
            acquisition lock started no later than that.
    """

    record: KafkaRecord
    delivery_count: int
    acquired_at: float


class ShareRecordConsumer(Protocol):
    """A member of a Kafka share group (KIP-932) in explicit acknowledgement mode, subscribed
    to one single-partition topic: what a share-arbitrated queue receives with."""

    def poll(self, timeout: float) -> list[SharedRecord]:
        """Records acquired within ``timeout`` seconds (may be empty). Every record of the
        previous poll must have been acknowledged first.

        Raises:
            BrokerUnavailable, QueueNotFound, BrokerError: as mapped from Kafka.
        """
        ...

    def acknowledge(self, shared: SharedRecord, kind: str) -> None:
        """Record :data:`ACCEPT` or :data:`RELEASE` for ``shared``; sent by :meth:`commit_sync`.

        Raises:
            BrokerError: the record is no longer in flight with this consumer.
        """
        ...

    def commit_sync(self, timeout: float) -> str | None:
        """Send the pending acknowledgements and wait for the broker's answer.

        Returns:
            str | None: None when the broker applied them to the partition; otherwise the
            Kafka error name for the partition (``INVALID_RECORD_STATE``: a lock lapsed and
            the acknowledgement was refused; ``NOT_LEADER_FOR_PARTITION``...). The result is
            per partition, not per record.

        Raises:
            BrokerUnavailable, BrokerError: no answer (the outcome is unknown).
        """
        ...

    def close(self) -> None:
        """Leave the share group; records acquired and not acknowledged are released."""
        ...


class RecordProducer(Protocol):
    """A Kafka producer, as kmq drives it (the subset of confluent-kafka's ``Producer``).

    Delivery reports are served by :meth:`poll` and :meth:`flush` on the calling thread, never
    by :meth:`produce`. A transactional producer (made with a ``transactional_id``) must be
    initialised with :meth:`init_transactions` and produce only between
    :meth:`begin_transaction` and :meth:`commit_transaction` / :meth:`abort_transaction`.
    """

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
                headers: list[Any] | None = None,
                on_delivery: DeliveryCallback | None = None) -> None:
        """Hand one record for partition 0 of ``topic`` to the producer; returns at once.

        Raises:
            KafkaException (librdkafka) or MessageQueueError: the record is refused at once.
        """
        ...

    def poll(self, timeout: float = -1) -> int:
        """Serve pending delivery reports, waiting up to ``timeout`` seconds; how many."""
        ...

    def flush(self, timeout: float = -1) -> int:
        """Wait up to ``timeout`` seconds for every record; the number still undelivered."""
        ...

    def init_transactions(self, timeout: float = -1) -> None:
        """Register the ``transactional.id``, fencing earlier producers with the same one."""
        ...

    def begin_transaction(self) -> None:
        """Start a Kafka transaction.

        Raises:
            KafkaException (fatal) or ProducerFenced: a newer producer took the
                ``transactional.id``.
        """
        ...

    def commit_transaction(self, timeout: float = -1) -> None:
        """Make the transaction's records visible to read_committed readers, atomically.

        Raises:
            KafkaException (fatal) or ProducerFenced: a newer producer took the
                ``transactional.id``; the broker aborted the transaction.
        """
        ...

    def abort_transaction(self, timeout: float = -1) -> None:
        """Discard the transaction's records: read_committed readers never see them."""
        ...


class RecordReader(Protocol):
    """Reads single-partition topics from explicit offsets, read_committed, without a consumer
    group (see :class:`facade.kafka.librdkafka.TopicReader` for the librdkafka one)."""

    def assign(self, positions: Mapping[str, int]) -> None:
        """Read each topic (partition 0) from the given offset (< 0: the log start); replaces
        earlier assignments.

        Raises:
            QueueNotFound: a topic was deleted.
        """
        ...

    def poll(self, timeout: float, max_records: int = 1000) -> list[KafkaRecord]:
        """Committed records available within ``timeout`` seconds (may be empty).

        Raises:
            QueueNotFound: an assigned topic was deleted.
        """
        ...

    def seek(self, topic: str, offset: int) -> None:
        """Read ``topic`` again from ``offset``."""
        ...

    def pause(self, topic: str) -> None:
        """Stop handing out ``topic``'s records until :meth:`resume`; the position is kept."""
        ...

    def resume(self, topic: str) -> None:
        """Hand out ``topic``'s records again after :meth:`pause`."""
        ...

    def wake(self) -> None:
        """Fetch again now if the reader rested.

        Raises:
            QueueNotFound: one of its topics was deleted meanwhile.
        """
        ...

    def caught_up(self, topics: Iterable[str]) -> bool:
        """True when every topic has been read up to its high watermark."""
        ...

    def log_start(self, topic: str) -> int:
        """The log start offset of ``topic``: records below it were deleted."""
        ...

    def end_offsets(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, int]:
        """The offset the next record of each topic will get (its high watermark).

        Raises:
            QueueNotFound: a topic does not exist.
        """
        ...

    def watermarks(self, topics: Sequence[str],
                   timeout: float = 10.0) -> dict[str, tuple[int, int]]:
        """``(log start, high watermark)`` of each topic; replaces the assignment.

        Raises:
            QueueNotFound: a topic does not exist.
        """
        ...

    def read_to_end(self, topics: Sequence[str], timeout: float, *,
                    ends: Mapping[str, int] | None = None) -> Iterator[list[KafkaRecord]]:
        """Yield batches of records until every topic is read up to what it holds now.

        ``ends``: end offsets of the topics the caller has just queried (one batched query for
        many topics, :meth:`KafkaSession.offset_bounds`); None: the reader queries them.

        Raises:
            BrokerUnavailable: not caught up within ``timeout`` seconds.
        """
        ...

    def close(self) -> None:
        """Release the reader."""
        ...


@runtime_checkable
class KafkaSession(Protocol):
    """The Kafka clients of one queue manager: what the queue manager, its queues, the
    registries and the receipts views use of Kafka, and nothing more.

    Runtime-checkable, so that :meth:`facade.manager.QueueManager.open` refuses an object
    that is no session with ``InvalidParameter`` rather than failing on its first use.

    Every topic kmq makes has one partition; offsets, headers, keys, log start offsets, high
    watermarks, idempotent produce and transactions keep Kafka's documented meaning.
    """

    @property
    def bootstrap_servers(self) -> str:
        """The brokers (``host:port,...``), for messages that tell an administrator what to do."""
        ...

    @property
    def message_max_bytes(self) -> int:
        """The producers' ``message.max.bytes`` (bytes)."""
        ...

    def producer(self, delivery: Delivery, transactional_id: str | None = None,
                 extra: Mapping[str, Any] | None = None) -> RecordProducer:
        """A new producer for an MSMQ delivery mode: EXPRESS ``acks=1``; RECOVERABLE (and
        every transactional one) ``acks=all`` and idempotent. ``extra``: librdkafka settings.

        Raises:
            BrokerError: the settings are refused.
        """
        ...

    def reader(self, extra: Mapping[str, Any] | None = None) -> RecordReader:
        """A new reader (``extra``: librdkafka consumer settings)."""
        ...

    def watermarks(self, topics: Sequence[str],
                   timeout: float = 10.0) -> dict[str, tuple[int, int]]:
        """``(low, high)`` offsets of each single-partition topic.

        Raises:
            QueueNotFound: a topic does not exist.
            BrokerUnavailable: no answer within ``timeout`` seconds.
        """
        ...

    def offset_bounds(self, topics: Sequence[str],
                      timeout: float = 10.0) -> dict[str, tuple[int, int]]:
        """``(log start, end offset)`` of each single-partition topic from one batched
        ListOffsets request per bound, whatever the number of topics. The end offset is the
        last stable offset (read_committed): what a reader can read now. Topics that do not
        exist are left out.

        Raises:
            BrokerUnavailable: no answer within ``timeout`` seconds.
        """
        ...

    def share_consumer(self, group: str, topic: str,
                       extra: Mapping[str, Any] | None = None) -> ShareRecordConsumer:
        """A new member of share group ``group`` subscribed to ``topic`` (explicit
        acknowledgement). ``extra``: librdkafka settings (``max.poll.records``).

        Raises:
            BrokerError: this Kafka has no share groups.
        """
        ...

    def set_group_configs(self, group: str, settings: Mapping[str, str]) -> dict[str, str]:
        """Set dynamic configs of consumer group ``group`` (the GROUP config resource; the group
        need not exist) and return what the broker reports for those names afterwards.

        Raises:
            BrokerError: a name or value refused, or no share groups on this Kafka.
            BrokerUnavailable: no answer.
        """
        ...

    def delete_groups(self, groups: Iterable[str]) -> list[str]:
        """Delete empty groups of any type (DeleteGroups: a share group too); groups that do
        not exist are ignored.

        Returns:
            list[str]: the groups left because members are still in them (NON_EMPTY_GROUP).

        Raises:
            BrokerError: another refusal (e.g. GROUP_AUTHORIZATION_FAILED).
            BrokerUnavailable: no answer.
        """
        ...

    def broker_config(self, name: str) -> str | None:
        """The value a broker of the cluster reports for broker config ``name``; None when it
        reports none.

        Raises:
            BrokerUnavailable, BrokerError: as mapped from Kafka.
        """
        ...

    def ping(self, timeout: float = 10.0) -> None:
        """Check that the brokers answer.

        Raises:
            BrokerUnavailable: no answer within ``timeout`` seconds.
        """
        ...

    def create_topics(self, names: Sequence[str], config: Mapping[str, str] | None = None,
                      exist_ok: bool = False) -> list[str]:
        """Create single-partition topics with kmq's settings (``facade.model.topicsettings``),
        ``config`` overriding them; the names actually created.

        Raises:
            QueueExists: a topic exists and ``exist_ok`` is false.
        """
        ...

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete topics; topics that do not exist are ignored."""
        ...

    def topic_exists(self, name: str) -> bool:
        """True if ``name`` exists."""
        ...

    def topic_configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        """The topic configs of each topic, by Kafka name.

        Raises:
            QueueNotFound: a topic does not exist.
        """
        ...

    def write_problem(self, topic: str, timeout: float = 5.0) -> tuple[str, str] | None:
        """Why the cluster cannot acknowledge an ``acks=all`` write to ``topic`` now (no leader,
        too few in-sync replicas, in-sync replicas down), as ``(cause, fix)``; None when it
        sees nothing that blocks one. For the error of a write not acknowledged in time; never
        raises."""
        ...

    def delete_records_support(self) -> tuple[bool, str]:
        """Whether the broker deletes records below an offset (DeleteRecords), and why not."""
        ...

    def delete_records(self, topic: str, before: int) -> int:
        """Delete the records of ``topic`` below offset ``before``; the new log start offset."""
        ...

    def close(self) -> None:
        """Release what the session holds (producers and readers are closed by their owners)."""
        ...
