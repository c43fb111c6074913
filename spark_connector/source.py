"""Reading kmq queues with the ``kmq`` Python data source (batch and Structured Streaming).

Rows have Spark's Kafka-source schema (:data:`~spark_connector.schema.KAFKA_SOURCE_SCHEMA`), so
:func:`spark_connector.decode.decode_messages` decodes them as it decodes ``format("kafka")``
rows. Each queue is one single-partition data topic; a Spark partition reads one topic's offset
range inside ``read()`` with :mod:`facade.kafka.librdkafka` (no consumer group, nothing committed to Kafka).

Options (strings; Spark lower-cases the names):

``kmq.resolution``
    :meth:`Resolution.to_json` of the queues to read (what :func:`spark_connector.read_queue`
    passes). Alternatively ``kmq.formatName`` (plus optional ``kmq.queueManager``,
    ``kmq.home``, ``kafka.bootstrap.servers``) resolves on the driver when the reader is built.
``startingOffsets``
    ``earliest`` (default, batch and streaming: a queue's content is what is in it now),
    ``latest``, or JSON ``{"topic": offset}`` (also Spark's ``{"topic": {"0": offset}}``;
    ``-2`` = earliest, ``-1`` = latest). Streaming: only for a new checkpoint.
``endingOffsets``
    batch only: ``latest`` (default) or JSON as above.
``maxOffsetsPerTrigger``
    streaming: at most this many offsets per micro-batch over all topics (split in proportion
    to each topic's backlog, as Spark's Kafka source does). Offsets, not rows: removed
    messages count. Ignored when Spark asks for everything (``Trigger.AvailableNow`` honours
    it batch by batch).
``kmq.mode``
    ``peek`` (default) or ``receive`` (streaming only, see below).
``kmq.includeRemoved``
    ``true`` reads the raw log: removed messages and duplicates too (no receipts read).
``kmq.stallTimeout``
    seconds a read may make no progress before the task fails (default 60).
``kafka.*``
    librdkafka properties for the readers (``kafka.bootstrap.servers`` replaces the resolved
    brokers), over the resolution's own ``kafka_options``.

**Peek** (default): the rows are the queue's *view*: every record still in the queue when the
task reads (not removed by a receipt, not a duplicate), including messages not yet visible
(timed dequeue) or past their time-to-be-received that nobody expired yet, and poison records
(so the decoder reports them), i.e. what ``MessageQueue.count()`` counts. Like ``kmq peek``,
nothing is changed. With ``kmq.includeRemoved=true``, the raw log.

**Receive**: destructive reading with queue semantics. A micro-batch delivers the messages that
are in the queue and visible (not before their not-before time, not expired) at the instant the
batch was planned, plus poison records; when the batch has committed, those messages are
removed as a facade receive removes them (receipt, queue-journal copy, ACK_RECEIVE) and
:meth:`~facade.queues.queue.MessageQueue.expire_due` dead-letters expired messages and poison records
(see :mod:`spark_connector._receive`). Removal runs on the driver as soon as Spark shows that
the batch committed: when it asks for the next offsets (``latestOffset`` with the batch's end as
start, which Spark only does after the batch's commit-log entry is written) or calls
``commit``, whichever comes first. Guarantees, as implemented:

* a message is removed at most once, by the first receipt naming it; a restart redoes the
  removal of the last committed batch and finds its messages gone (exactly-once removal per
  committed batch);
* a batch that fails or crashes before its commit is re-planned by Spark from its offset log
  with the same range and planning instant and delivers the messages still pending again, so
  the sink sees them at least once (use an idempotent sink, e.g. kmq's own writer, or
  ``foreachBatch`` keyed by the batch id);
* a concurrent facade receiver on the same queue may take a message between planning and
  removal: both have it (at-least-once towards concurrent receivers; counted as
  ``taken_by_others``);
* messages not yet visible when their range was planned are neither delivered nor removed:
  they stay in the queue for other receivers (the stream has moved past their offsets).

**Access checks**: the options' resolution was checked for the driver's principal when it was
made (:func:`~spark_connector.resolve.resolve`: PEEK_MESSAGE to peek, DELETE_MESSAGE or
DELETE_JOURNAL_MESSAGE to receive). The driver checks again, for the principal the resolution
names (:class:`~spark_connector.resolve.DriverQueues`), whenever it plans a batch read or a
micro-batch (``partitions``) and before each receive-mode removal, so a revoked right stops the
query before its next rows or removal (``AccessDenied`` naming the queue, the right and the
principal).

Offsets (Spark's offset log): ``{"offsets": {topic: next offset}, "from": {topic: first
offset}, "at_ms": planning instant}``; the initial offset has only ``"offsets"``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from facade.errors import InvalidParameter
from facade.kafka.librdkafka import KafkaRecord, KafkaSession
from spark_connector._view import DEFAULT_STALL_TIMEOUT, TopicView, data_records, in_view
from spark_connector.resolve import DriverQueues, Operation, Resolution, resolve

__all__ = [
    "KmqBatchReader",
    "KmqStreamReader",
    "SourceOptions",
    "TopicRange",
    "allot",
    "plan_partitions",
    "read_range",
    "records_to_batch",
    "resolve_positions",
]

#: Option names (as Spark passes them: lower case).
OPT_RESOLUTION = "kmq.resolution"
OPT_FORMAT_NAME = "kmq.formatname"
OPT_QUEUE_MANAGER = "kmq.queuemanager"
OPT_HOME = "kmq.home"
OPT_STARTING = "startingoffsets"
OPT_ENDING = "endingoffsets"
OPT_MAX_PER_TRIGGER = "maxoffsetspertrigger"
OPT_MODE = "kmq.mode"
OPT_INCLUDE_REMOVED = "kmq.includeremoved"
OPT_STALL_TIMEOUT = "kmq.stalltimeout"
KAFKA_PREFIX = "kafka."

MODES = ("peek", "receive")
#: Rows per Arrow batch yielded by ``read()``.
ROWS_PER_BATCH = 4096
#: Spark's timestampType for CreateTime, which kmq producers use.
_CREATE_TIME = 0


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceOptions:
    """The ``kmq`` source options, parsed and checked (see the module docs for each).

    Attributes:
        resolution (Resolution): the queues and broker.
        starting (str): ``earliest``, ``latest`` or JSON.
        ending (str): ``latest`` or JSON (batch).
        max_offsets_per_trigger (int | None): per-trigger offset budget.
        mode (str): ``peek`` or ``receive``.
        include_removed (bool): read the raw log.
        stall_timeout (float): seconds.
        kafka_options (dict[str, str]): librdkafka properties for the readers.
    """

    resolution: Resolution
    starting: str = "earliest"
    ending: str = "latest"
    max_offsets_per_trigger: int | None = None
    mode: str = "peek"
    include_removed: bool = False
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    kafka_options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's option map (any case).

        Raises:
            InvalidParameter: a missing resolution, an unknown mode, or a malformed number,
                boolean or offsets JSON; the message names the option.
            AccessDenied: ``kmq.formatName`` names a queue the driver's principal may not
                read (or, in receive mode, receive from).
        """
        opts = {k.lower(): str(v) for k, v in options.items()}
        kafka = {k[len(KAFKA_PREFIX):]: v for k, v in opts.items() if k.startswith(KAFKA_PREFIX)}
        mode = opts.get(OPT_MODE, "peek").lower()
        if mode not in MODES:
            raise InvalidParameter(f"option kmq.mode must be peek or receive, got {mode!r}")
        resolution = _resolution(opts, kafka.pop("bootstrap.servers", None), Operation(mode))
        parsed = cls(
            resolution=resolution,
            starting=opts.get(OPT_STARTING, "earliest"),
            ending=opts.get(OPT_ENDING, "latest"),
            max_offsets_per_trigger=_positive_int(opts, OPT_MAX_PER_TRIGGER),
            mode=mode,
            include_removed=_boolean(opts, OPT_INCLUDE_REMOVED),
            stall_timeout=float(_positive_int(opts, OPT_STALL_TIMEOUT) or DEFAULT_STALL_TIMEOUT),
            kafka_options={**resolution.kafka_options, **kafka},
        )
        _offsets_spec(parsed.starting, OPT_STARTING)  # fail at planning, not in a task
        _offsets_spec(parsed.ending, OPT_ENDING)
        if parsed.mode == "receive" and parsed.include_removed:
            raise InvalidParameter("kmq.mode=receive cannot be combined with kmq.includeRemoved")
        return parsed

    @property
    def receive(self) -> bool:
        """bool: destructive reading (``kmq.mode=receive``)."""
        return self.mode == "receive"

    @property
    def operation(self) -> Operation:
        """Operation: what the query does with its queues (the right it needs on each)."""
        return Operation.RECEIVE if self.receive else Operation.PEEK

    def session(self) -> KafkaSession:
        """Kafka clients for this source (create them where they are used)."""
        return KafkaSession(self.resolution.bootstrap_servers, self.kafka_options,
                            client_id="kmq-spark")


def _resolution(opts: Mapping[str, str], bootstrap: str | None,
                operation: Operation) -> Resolution:
    text = opts.get(OPT_RESOLUTION)
    if text:
        resolution = Resolution.from_json(text)
    elif opts.get(OPT_FORMAT_NAME):
        overrides: dict[str, Any] = {}
        if bootstrap:
            overrides["bootstrap_servers"] = bootstrap
        if opts.get(OPT_QUEUE_MANAGER):
            overrides["queue_manager"] = opts[OPT_QUEUE_MANAGER]
        if opts.get(OPT_HOME):
            from pathlib import Path

            overrides["home"] = Path(opts[OPT_HOME])
        resolution = resolve(opts[OPT_FORMAT_NAME], operation=operation, **overrides)
    else:
        raise InvalidParameter("the kmq source needs option kmq.resolution or kmq.formatName",
                               hint="use spark_connector.read_queue(spark, format_name)")
    return replace(resolution, bootstrap_servers=bootstrap) if bootstrap else resolution


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    text = opts.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidParameter(f"option {name} must be a positive integer, got {text!r}")
    return value


def _boolean(opts: Mapping[str, str], name: str) -> bool:
    text = opts.get(name, "false").strip().lower()
    if text not in ("true", "false"):
        raise InvalidParameter(f"option {name} must be true or false, got {text!r}")
    return text == "true"


def _offsets_spec(text: str, name: str) -> str | dict[str, int]:
    """``earliest``/``latest`` or a {topic: offset} dict (Spark's per-partition form too)."""
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        return {str(topic): int(value["0"] if isinstance(value, dict) else value)
                for topic, value in doc.items()}
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidParameter(f"option {name} must be earliest, latest or JSON "
                               f'{{"topic": offset}}, got {text!r}') from exc


def resolve_positions(spec: str | dict[str, int], topics: list[str],
                      marks: Mapping[str, tuple[int, int]], default: str) -> dict[str, int]:
    """Turn an offsets spec into one offset per topic, inside each topic's stored range.

    Args:
        spec: ``earliest``, ``latest`` or {topic: offset} (-2 earliest, -1 latest).
        topics (list[str]): the data topics.
        marks (Mapping[str, tuple[int, int]]): (low, high) per topic.
        default (str): ``earliest`` or ``latest`` for topics the dict does not name.

    Returns:
        dict[str, int]: offset per topic.
    """
    positions = {}
    for topic in topics:
        low, high = marks[topic]
        wanted = spec if isinstance(spec, str) else spec.get(topic, default)
        if wanted == "earliest" or wanted == -2:
            positions[topic] = low
        elif wanted == "latest" or wanted == -1:
            positions[topic] = high
        else:
            positions[topic] = min(max(int(wanted), low), high)
    return positions


# --------------------------------------------------------------------------------------------
# Partitions and read()
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicRange(InputPartition):
    """One Spark partition: the offsets ``[start, end)`` of one queue's data topic.

    Everything ``read()`` needs travels in it (executors share nothing with the planner).

    Attributes:
        topic (str), receipts_topic (str): the queue's topics.
        start (int), end (int): the offset range.
        bootstrap_servers (str), kafka_options (dict[str, str]): how to reach the broker.
        include_removed (bool): raw log instead of the queue view.
        receive_at_ms (int | None): receive mode: the planning instant (visibility test).
        stall_timeout (float): seconds.
    """

    topic: str
    receipts_topic: str
    start: int
    end: int
    bootstrap_servers: str
    kafka_options: dict[str, str]
    include_removed: bool = False
    receive_at_ms: int | None = None
    stall_timeout: float = DEFAULT_STALL_TIMEOUT

    def __post_init__(self) -> None:
        # InputPartition keeps a ``value``; a readable one helps Spark's plan output.
        object.__setattr__(self, "value", f"{self.topic}[{self.start}:{self.end}]")


def plan_partitions(options: SourceOptions, start: Mapping[str, int], end: Mapping[str, int],
                    receive_at_ms: int | None) -> list[TopicRange]:
    """One :class:`TopicRange` per topic with offsets to read (none when start == end)."""
    ranges = []
    for target in options.resolution.targets:
        first, stop = start.get(target.data_topic, 0), end.get(target.data_topic, 0)
        if stop > first:
            ranges.append(TopicRange(
                topic=target.data_topic, receipts_topic=target.receipts_topic, start=first,
                end=stop, bootstrap_servers=options.resolution.bootstrap_servers,
                kafka_options=dict(options.kafka_options),
                include_removed=options.include_removed, receive_at_ms=receive_at_ms,
                stall_timeout=options.stall_timeout))
    return ranges


def read_range(part: TopicRange) -> Iterator[pa.RecordBatch]:
    """Read one partition's records as Arrow batches of the Kafka-source schema.

    Peek and receive read the queue view (:class:`~spark_connector._view.TopicView`);
    ``include_removed`` reads the raw log.

    Args:
        part (TopicRange): what to read.

    Yields:
        pa.RecordBatch: up to :data:`ROWS_PER_BATCH` rows each.

    Raises:
        BrokerUnavailable: the broker stopped answering for ``stall_timeout`` seconds.
        QueueNotFound: a topic was deleted.
    """
    session = KafkaSession(part.bootstrap_servers, part.kafka_options, client_id="kmq-spark")
    view = None
    if not part.include_removed:
        view = TopicView(session, part.topic, part.receipts_topic, part.start, part.stall_timeout)
    reader = session.reader()
    try:
        first = view.feed_from if view is not None else part.start
        rows: list[KafkaRecord] = []
        for records in data_records(reader, part.topic, first, part.end, part.stall_timeout):
            for record in records:
                if view is not None:
                    status = view.add(record)
                    if record.offset < part.start or not in_view(status, part.receive_at_ms):
                        continue
                rows.append(record)
            if len(rows) >= ROWS_PER_BATCH:
                yield records_to_batch(rows)
                rows = []
        if rows:
            yield records_to_batch(rows)
    finally:
        reader.close()


_ARROW_SCHEMA: list[pa.Schema] = []


def _kafka_arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for KAFKA_SOURCE_SCHEMA (timestamps in UTC)."""
    if not _ARROW_SCHEMA:
        from pyspark.sql.pandas.types import to_arrow_schema

        from spark_connector.schema import KAFKA_SOURCE_SCHEMA

        _ARROW_SCHEMA.append(to_arrow_schema(KAFKA_SOURCE_SCHEMA, timezone="UTC"))
    return _ARROW_SCHEMA[0]


def records_to_batch(records: list[KafkaRecord]) -> pa.RecordBatch:
    """Kafka records as one Arrow batch of Spark's Kafka-source columns.

    ``timestampType`` is 0 (CreateTime), which kmq's producers use.
    """
    schema = _kafka_arrow_schema()
    header_type = schema.field("headers").type
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([r.topic for r in records], pa.string()),
        pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp_ms * 1000 for r in records], pa.int64()).cast(
            schema.field("timestamp").type),
        pa.array([_CREATE_TIME] * len(records), pa.int32()),
        pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records], header_type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# --------------------------------------------------------------------------------------------
# Batch reader
# --------------------------------------------------------------------------------------------


class KmqBatchReader(DataSourceReader):
    """``spark.read.format("kmq")``: the queue view (or raw log) between two offsets.

    Args:
        options (dict[str, str]): the source options (module docs).
        schema (StructType): always the Kafka-source schema.

    Raises:
        InvalidParameter: bad options, or ``kmq.mode=receive`` (a batch DataFrame has no
            commit point at which to remove messages: use ``readStream``).
    """

    def __init__(self, options: dict[str, str], schema: StructType):
        self.options = SourceOptions.parse(options)
        if self.options.receive:
            raise InvalidParameter(
                "kmq.mode=receive needs a streaming read: a batch DataFrame has no commit at "
                "which its messages could be removed",
                hint="use spark.readStream (e.g. with trigger(availableNow=True))")
        self.schema = schema

    def partitions(self) -> list[TopicRange]:
        """One partition per queue topic, from ``startingOffsets`` to ``endingOffsets``
        (read from the broker now, on the driver).

        Raises:
            AccessDenied: the resolution's principal may not peek at a queue now.
        """
        with DriverQueues(self.options.resolution) as queues:
            queues.require(self.options.operation)
        topics = self.options.resolution.topics
        marks = self.options.session().watermarks(topics)
        start = resolve_positions(_offsets_spec(self.options.starting, OPT_STARTING), topics,
                                  marks, "earliest")
        end = resolve_positions(_offsets_spec(self.options.ending, OPT_ENDING), topics, marks,
                                "latest")
        return plan_partitions(self.options, start, end, None)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one topic range (on an executor)."""
        assert isinstance(partition, TopicRange)
        return read_range(partition)


# --------------------------------------------------------------------------------------------
# Stream reader
# --------------------------------------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def allot(start: Mapping[str, int], latest: Mapping[str, int], budget: int | None) -> dict[str, int]:
    """End offsets for the next micro-batch under an offset budget.

    Each topic gets a share of ``budget`` in proportion to its backlog (at least one offset
    while any budget is left), as Spark's Kafka source splits ``maxOffsetsPerTrigger``.

    Args:
        start (Mapping[str, int]): where each topic's batch starts.
        latest (Mapping[str, int]): the newest offset each topic may reach.
        budget (int | None): offsets for the whole batch; None = no limit.

    Returns:
        dict[str, int]: end offset per topic (``start <= end <= latest``).
    """
    backlog = {t: max(0, latest[t] - start[t]) for t in latest}
    total = sum(backlog.values())
    if budget is None or total <= budget:
        return {t: start[t] + backlog[t] for t in latest}
    ends, left = {}, budget
    for topic in sorted(backlog, key=lambda t: -backlog[t]):
        share = min(backlog[topic], left, max(1, budget * backlog[topic] // total))
        ends[topic] = start[topic] + share
        left -= share
    return ends


class KmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kmq")``: micro-batches of the queue view, peek or receive.

    Offsets, limits, availableNow and receive-mode removal are described in the module docs.
    Planning methods run in one long-lived Python process on the driver; ``read()`` runs on
    executors with only the :class:`TopicRange`.

    Args:
        options (dict[str, str]): the source options.
        schema (StructType): always the Kafka-source schema.
    """

    def __init__(self, options: dict[str, str], schema: StructType):
        self.options = SourceOptions.parse(options)
        self.schema = schema
        self._target: dict[str, int] | None = None  # availableNow: never read past this
        self._last: dict[str, Any] | None = None
        self._removed: set[str] = set()
        self._remover: Any = None
        self._queues: DriverQueues | None = None

    # -- offsets -------------------------------------------------------------------------

    def _marks(self) -> dict[str, tuple[int, int]]:
        return self.options.session().watermarks(self.options.resolution.topics)

    def initialOffset(self) -> dict:  # noqa: N802 - PySpark's hook name
        """Where a new query starts: ``startingOffsets`` resolved now."""
        topics = self.options.resolution.topics
        spec = _offsets_spec(self.options.starting, OPT_STARTING)
        return {"offsets": resolve_positions(spec, topics, self._marks(), "earliest")}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when the option is set, else everything."""
        budget = self.options.max_offsets_per_trigger
        return ReadMaxRows(budget) if budget else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Fix the end of an availableNow run at the topics' current ends."""
        self._target = {t: high for t, (_low, high) in self._marks().items()}

    def latestOffset(self, start: dict | None = None,  # noqa: N802
                     limit: ReadLimit | None = None) -> dict:
        """The end of the next micro-batch (``start`` itself when there is nothing new).

        Receive mode first removes the messages of the batch ending at ``start``: Spark asks
        for the next offsets only after that batch committed.
        """
        start = start or self._last or self.initialOffset()
        if self.options.receive:
            self._remove_batch(start)
        marks = self._marks()
        begin = {t: start["offsets"].get(t, marks[t][0]) for t in self.options.resolution.topics}
        latest = {t: high for t, (_low, high) in marks.items()}
        if self._target is not None:
            latest = {t: min(latest[t], self._target.get(t, latest[t])) for t in latest}
        latest = {t: max(latest[t], begin[t]) for t in latest}  # never move backwards
        ends = allot(begin, latest, self._budget(limit))
        if ends == start["offsets"]:
            return start
        self._last = {"offsets": ends, "from": begin, "at_ms": _now_ms()}
        return self._last

    def _budget(self, limit: ReadLimit | None) -> int | None:
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows
        if limit is None:  # Spark before 4.2 passes no limit: apply the option ourselves
            return self.options.max_offsets_per_trigger
        return None  # ReadAllAvailable, or a limit kind this source does not count

    # -- planning and reading ------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[TopicRange]:
        """One partition per topic with new offsets (none when ``start == end``).

        Raises:
            AccessDenied: the resolution's principal may not peek at (receive mode: receive
                from) a queue now; the batch reads nothing.
        """
        self._driver_queues().require(self.options.operation)
        begin = end.get("from", start["offsets"])
        at_ms = end.get("at_ms") if self.options.receive else None
        return plan_partitions(self.options, begin, end["offsets"], at_ms)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one topic range (on an executor)."""
        assert isinstance(partition, TopicRange)
        return read_range(partition)

    def commit(self, end: dict) -> None:
        """Spark committed every batch up to ``end``: receive mode removes that batch."""
        if self.options.receive:
            self._remove_batch(end)

    def stop(self) -> None:
        """Release the driver-side queue manager."""
        if self._remover is not None:
            self._remover.close()
            self._remover = None
        if self._queues is not None:
            self._queues.close()
            self._queues = None

    def _driver_queues(self) -> DriverQueues:
        """The query's queues on the driver, open as its principal for the query's life."""
        if self._queues is None:
            self._queues = DriverQueues(self.options.resolution)
        return self._queues

    # -- receive mode --------------------------------------------------------------------

    def _remove_batch(self, end: dict) -> None:
        """Remove the messages of the committed batch that ends at ``end`` (once per process;
        repeating it after a restart removes nothing more)."""
        if "from" not in end:
            return  # the initial offset: no batch ends here
        key = json.dumps(end, sort_keys=True)
        if key in self._removed:
            return
        if self._remover is None:
            from spark_connector._receive import BatchRemover

            self._remover = BatchRemover(self.options.resolution, self._driver_queues())
        self._remover.remove(end["from"], end["offsets"], int(end["at_ms"]))
        self._removed.add(key)

