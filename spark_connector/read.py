"""``read_queue``: a kmq queue (or list of queues) as a DataFrame of decoded messages.

Two paths, one result:

* **kafka**: Spark's own Kafka source (``format("kafka")``, the ``spark-sql-kafka-0-10``
  package) reads the data topics with :func:`kafka_source_options`; spark-avro's ``from_avro``
  decodes the envelopes on the JVM (:mod:`spark_connector.jvmdecode`); two Arrow UDF steps
  (:class:`KafkaRowFinisher`) then keep only the records in the queue view
  (:class:`QueueViewFilter`: each queue's receipts read with :mod:`facade.kafka.librdkafka`,
  the rows' own headers judged by the same rules as every queue view) and hand the rows the
  JVM did not decode (poison records, acknowledgments) to the Python decoder.
* **kmq**: the project's Python data source (``format("kmq")``, :mod:`spark_connector.source`)
  yields Kafka-source rows already filtered, decoded by
  :func:`spark_connector.decode.decode_messages`.

Both give the same rows and columns. ``path="auto"`` (default) takes the Kafka source when its
classes are on the driver's classpath (:func:`kafka_source_available`;
:func:`spark_connector.local_session` puts them there) in peek mode; receive mode needs the kmq
path (Spark's Kafka source cannot remove messages).

The format name is resolved once, on the driver, when the DataFrame is built (a ``DL=`` list's
members are read then; a restarted query resolves again). The driver's principal must have the
read's right on every queue it reaches then (PEEK_MESSAGE; receive mode DELETE_MESSAGE, or
DELETE_JOURNAL_MESSAGE on a journal; see :mod:`spark_connector.resolve`), or ``read_queue``
raises ``AccessDenied`` and builds nothing. The kmq path checks again whenever the driver plans
a batch (:mod:`spark_connector.source`); on the kafka path Spark's own source plans them, so a
running query meets only the Kafka ACLs of the identity it connects as.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from facade.config import KmqConfig
from facade.errors import InvalidParameter
from facade.kafka.librdkafka import KafkaSession, TopicReader
from spark_connector._view import (
    DEFAULT_STALL_TIMEOUT,
    PeekView,
    data_records,
    plain_message_ids,
)
from spark_connector.decode import ON_ERROR_CHOICES, DeadLetterTarget, decode_messages
from spark_connector.jvmdecode import FAST_PATH
from spark_connector.resolve import Resolution, resolve, resolve_many

__all__ = [
    "KAFKA_SOURCE_PROVIDER",
    "KafkaRowFinisher",
    "QueueViewFilter",
    "kafka_source_available",
    "kafka_source_options",
    "read_queue",
]

log = logging.getLogger("kmq.spark")

#: ``kafka.fetch.max.wait.ms`` of the Kafka source's consumers (milliseconds); see
#: :func:`kafka_source_options`.
SOURCE_FETCH_WAIT_MS = 10
#: The JVM class that makes ``format("kafka")`` work.
KAFKA_SOURCE_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
PATHS = ("auto", "kafka", "kmq")

#: read_queue keyword -> source option (snake_case spellings of the documented options).
_OPTION_ALIASES = {
    "starting_offsets": "startingOffsets",
    "ending_offsets": "endingOffsets",
    "max_offsets_per_trigger": "maxOffsetsPerTrigger",
    "mode": "kmq.mode",
    "include_removed": "kmq.includeRemoved",
    "stall_timeout": "kmq.stallTimeout",
}
_CONFIG_FIELDS = {f.name for f in fields(KmqConfig)}

#: librdkafka property -> Kafka Java client property, for settings that mean the same.
_JAVA_EQUIVALENTS = {
    "security.protocol": "security.protocol",
    "sasl.mechanism": "sasl.mechanism",
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.endpoint.identification.algorithm": "ssl.endpoint.identification.algorithm",
    "client.id": "client.id",
}
_SASL_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def read_queue(spark: Any, format_name: str | Sequence[str], streaming: bool = True,
               **options: Any) -> Any:
    """Read a kmq queue, list or set of queues as a DataFrame with one row per message.

    Args:
        spark (SparkSession): the session (``format("kmq")`` is registered on it if needed).
        format_name (str | Sequence[str]): any readable path or format name: a private,
            public or direct queue, ``DL=``, a multiple-element name (the union of its
            queues), a journal, a dead-letter queue (``MACHINE=<guid>;DEADLETTER``), an admin
            queue; or a list of such names, read as one source (the union of their queues,
            each read once: journals and dead-letter queues beside other queues, which no
            single MSMQ format name may list; one Spark source plans, compiles and reads
            faster than a union of one per name). The ``topic`` column says which queue a row
            comes from.
        streaming (bool): ``readStream`` (default) or a batch ``read``.
        **options: keywords, all optional:

            * ``path``: ``"auto"`` (default), ``"kafka"`` or ``"kmq"``;
            * ``mode``: ``"peek"`` (default) or ``"receive"`` (streaming, kmq path only);
            * ``on_error``: ``"column"`` (default), ``"dead_letter"`` or ``"fail"``
              (see :mod:`spark_connector.decode`);
            * ``decode``: False returns the Kafka-source rows (queue view applied) undecoded;
            * ``starting_offsets``, ``ending_offsets``, ``max_offsets_per_trigger``,
              ``include_removed``, ``stall_timeout``: the source options of
              :mod:`spark_connector.source`;
            * ``options``: a dict of further source options (``kafka.*`` properties...);
            * ``bootstrap_servers``, ``queue_manager``, ``home``, ``kafka_options``,
              ``directory``, ``principal`` or ``config`` (a KmqConfig): how to resolve the
              name on the driver (as :meth:`KmqConfig.load`);
            * any other keyword is passed as a source option as is (``startingOffsets``...).

    Returns:
        DataFrame: :data:`~spark_connector.schema.MESSAGE_SCHEMA` (or the Kafka-source
        schema with ``decode=False``), streaming when ``streaming``.

    Raises:
        AccessDenied: the driver's principal lacks PEEK_MESSAGE on a queue ``format_name``
            reaches (receive mode: DELETE_MESSAGE, or DELETE_JOURNAL_MESSAGE on a journal; a
            dead-letter queue or machine journal: that right on its queue manager); the
            message names the queue, the right and the principal. Nothing is read.
        InvalidParameter: an unknown path, mode or on_error; receive mode on a batch read or
            on the kafka path; ``path="kafka"`` without the Kafka source on the classpath;
            an empty list of names, or one that is not text.
        FormatNameError, QueueNotFound, DirectoryUnavailable, BrokerUnavailable: resolving
            ``format_name`` (see :func:`spark_connector.resolve.resolve`).
    """
    settings = _split_options(options)
    mode = {k.lower(): v for k, v in settings.source.items()}.get("kmq.mode", "peek").lower()
    if mode not in ("peek", "receive"):
        raise InvalidParameter(f"mode must be peek or receive, got {mode!r}")
    if mode == "receive" and not streaming:
        raise InvalidParameter("receive mode needs streaming=True: a batch DataFrame has no "
                               "commit at which its messages could be removed")
    path = _choose_path(spark, settings.path, mode)
    if isinstance(format_name, str):
        resolution = resolve(format_name, operation=mode, config=settings.config,
                             **settings.overrides)
    else:
        resolution = resolve_many(format_name, operation=mode, config=settings.config,
                                  **settings.overrides)
    if path == "kafka":
        return _kafka_path(spark, resolution, streaming, settings.source, settings.decode,
                           settings.on_error)
    raw = _kmq_path(spark, resolution, streaming, settings.source)
    if not settings.decode:
        return raw
    # Receive mode: the removal at commit dead-letters poison records through the facade, so
    # the decoder must not write a second copy.
    on_error = "drop" if mode == "receive" and settings.on_error == "dead_letter" else settings.on_error
    return decode_messages(raw, on_error=on_error, dead_letter=resolution)


class _Settings:
    """read_queue's keywords sorted into their roles."""

    def __init__(self) -> None:
        self.path = "auto"
        self.on_error = "column"
        self.decode = True
        self.config: KmqConfig | None = None
        self.overrides: dict[str, Any] = {}
        self.source: dict[str, str] = {}


def _split_options(options: Mapping[str, Any]) -> _Settings:
    settings = _Settings()
    for key, value in options.items():
        if key == "path":
            settings.path = str(value).lower()
        elif key == "on_error":
            settings.on_error = str(value)
        elif key == "decode":
            settings.decode = bool(value)
        elif key == "config":
            settings.config = value
        elif key == "options":
            settings.source.update({str(k): _option_text(v) for k, v in dict(value).items()})
        elif key in _CONFIG_FIELDS:
            settings.overrides[key] = value
        elif value is not None:
            settings.source[_OPTION_ALIASES.get(key, key)] = _option_text(value)
    if settings.path not in PATHS:
        raise InvalidParameter(f"path must be one of {', '.join(PATHS)}, got {settings.path!r}")
    if settings.on_error not in ON_ERROR_CHOICES:
        raise InvalidParameter(f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}, got "
                               f"{settings.on_error!r}")
    if settings.config is not None and settings.overrides:
        raise InvalidParameter("give either config= or configuration keywords, not both")
    return settings


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def _choose_path(spark: Any, path: str, mode: str) -> str:
    if path == "kmq":
        return "kmq"
    if path == "kafka" and mode == "receive":
        raise InvalidParameter("receive mode is only supported on the kmq path "
                               "(Spark's Kafka source cannot remove messages)",
                               hint="use path='kmq' or path='auto'")
    available = kafka_source_available(spark)
    if path == "kafka" and not available:
        raise InvalidParameter(
            "path='kafka' but Spark's Kafka source is not on the classpath",
            hint="start Spark with --packages org.apache.spark:spark-sql-kafka-0-10_2.13:"
            "<spark version>, or use path='kmq'")
    if path == "kafka":
        return "kafka"
    return "kafka" if available and mode != "receive" else "kmq"


def kafka_source_available(spark: Any) -> bool:
    """Whether Spark's own Kafka source (spark-sql-kafka-0-10) is on the driver's classpath.

    Args:
        spark (SparkSession): a classic (JVM-backed) session; Spark Connect sessions answer
            False (the Python side cannot see the server's classpath).

    Returns:
        bool: True when :data:`KAFKA_SOURCE_PROVIDER` loads.
    """
    try:
        jvm = spark._jvm  # noqa: SLF001 - the only way to ask the driver's classloader
        if jvm is None:
            return False
        jvm.org.apache.spark.util.Utils.classForName(KAFKA_SOURCE_PROVIDER, True, False)
        return True
    except Exception:  # noqa: BLE001 - Py4J errors, Connect sessions: all mean "not here"
        return False


def _kmq_path(spark: Any, resolution: Resolution, streaming: bool,
              source: Mapping[str, str]) -> Any:
    from spark_connector.datasource import register

    register(spark)
    reader = spark.readStream if streaming else spark.read
    return reader.format("kmq").option("kmq.resolution", resolution.to_json()).options(
        **source).load()


def _kafka_path(spark: Any, resolution: Resolution, streaming: bool,
                source: Mapping[str, str], decode: bool, on_error: str) -> Any:
    """Spark's Kafka source, the envelope decoded on the JVM, Python steps for the queue
    view and the rows only Python decodes (see the module docs)."""
    reader = spark.readStream if streaming else spark.read
    options = kafka_source_options(resolution, streaming=streaming, **source)
    raw = reader.format("kafka").options(**options).load()
    lowered = {k.lower(): str(v).lower() for k, v in source.items()}
    stall = float(lowered.get("kmq.stalltimeout", DEFAULT_STALL_TIMEOUT))
    include_removed = lowered.get("kmq.includeremoved") == "true"
    if not decode:
        if include_removed:
            return raw
        return raw.mapInArrow(QueueViewFilter(resolution, stall), raw.schema)
    view = None if include_removed else QueueViewFilter(
        resolution, stall, headers=_VIEW_INPUTS[3], size=_VIEW_INPUTS[2])
    target = DeadLetterTarget.from_resolution(resolution) if on_error == "dead_letter" else None
    return KafkaRowFinisher(view, on_error, target).apply(raw)


def kafka_source_options(resolution: Resolution, *, streaming: bool = True,
                         **options: Any) -> dict[str, str]:
    """Options for Spark's ``format("kafka")`` reading the resolved queues' data topics.

    Args:
        resolution (Resolution): the queues (one partition each) and broker settings.
        streaming (bool): False adds ``endingOffsets`` (batch reads only).
        **options: the kmq source options (``startingOffsets``, ``endingOffsets``,
            ``maxOffsetsPerTrigger``, ``kafka.*``...; snake_case spellings accepted); ``kmq.*``
            options are not Kafka-source options and are left out.

    Returns:
        dict[str, str]: ``kafka.bootstrap.servers``, ``assign`` (every data topic, partition
        0), ``includeHeaders=true``, ``startingOffsets`` (default ``earliest``, as the kmq
        source), ``failOnDataLoss=false`` (retention may delete removed messages),
        ``kafka.isolation.level=read_committed`` (as every kmq reader),
        ``kafka.fetch.max.wait.ms`` :data:`SOURCE_FETCH_WAIT_MS` (a task's last poll past a
        transaction marker does not wait half a second), plus
        ``endingOffsets``, ``maxOffsetsPerTrigger``, the resolution's librdkafka security
        settings translated to Java client ones, and ``kafka.*`` passthrough (which wins).
    """
    given = {_OPTION_ALIASES.get(k, k): _option_text(v) for k, v in options.items()
             if v is not None}
    lowered = {k.lower(): (k, v) for k, v in given.items()}
    result = {
        "kafka.bootstrap.servers": resolution.bootstrap_servers,
        "assign": json.dumps({topic: [0] for topic in resolution.topics}),
        "includeHeaders": "true",
        "startingOffsets": _spark_offsets(lowered.get("startingoffsets", ("", "earliest"))[1]),
        "failOnDataLoss": "false",
        # Records of aborted (and still open) Kafka transactions are not messages: kmq's
        # receivers and the kmq source read committed records only, and so must this.
        "kafka.isolation.level": "read_committed",
        # A task reads a known offset range, but a range that ends on a transaction marker
        # (kmq's transactional writes: journals, moves, transactional queues) makes Spark's
        # consumer poll once more past the last record, and that fetch waits the Java client's
        # fetch.max.wait.ms (500 ms) for records that are not coming: half a second per topic
        # and batch (docs/performance.md).
        "kafka.fetch.max.wait.ms": str(SOURCE_FETCH_WAIT_MS),
    }
    if not streaming:
        result["endingOffsets"] = _spark_offsets(lowered.get("endingoffsets", ("", "latest"))[1])
    if "maxoffsetspertrigger" in lowered:
        result["maxOffsetsPerTrigger"] = lowered["maxoffsetspertrigger"][1]
    result.update(_java_security(resolution.kafka_options))
    for key, value in given.items():
        if key.lower().startswith("kafka."):
            result[key] = value
    return result


def _spark_offsets(text: str) -> str:
    """kmq's offsets text (``{"topic": n}``) in the Kafka source's form
    (``{"topic": {"0": n}}``); ``earliest``/``latest`` unchanged."""
    if text.strip().lower() in ("earliest", "latest"):
        return text.strip().lower()
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidParameter(f"offsets must be earliest, latest or JSON, got {text!r}") from exc
    return json.dumps({topic: value if isinstance(value, dict) else {"0": value}
                       for topic, value in doc.items()})


def _java_security(librdkafka: Mapping[str, str]) -> dict[str, str]:
    """librdkafka security settings as Kafka Java client options (``kafka.`` prefixed).

    Settings with no faithful equivalent (key files, Kerberos...) are left out with a warning:
    pass the Java ones as ``kafka.*`` options.
    """
    result = {}
    for key, value in librdkafka.items():
        if key in _JAVA_EQUIVALENTS:
            result["kafka." + _JAVA_EQUIVALENTS[key]] = value
        elif key == "ssl.ca.location":
            result["kafka.ssl.truststore.type"] = "PEM"
            result["kafka.ssl.truststore.location"] = value
        elif key not in ("sasl.username", "sasl.password"):
            log.warning("librdkafka option %r has no Kafka Java client equivalent here: pass "
                        "it as a kafka.* option of read_queue", key)
    mechanism = librdkafka.get("sasl.mechanism") or librdkafka.get("sasl.mechanisms")
    if "sasl.username" in librdkafka and mechanism in _SASL_LOGIN_MODULES:
        user = json.dumps(librdkafka["sasl.username"])
        password = json.dumps(librdkafka.get("sasl.password", ""))
        result["kafka.sasl.jaas.config"] = (f"{_SASL_LOGIN_MODULES[mechanism]} required "
                                            f"username={user} password={password};")
    return result


class QueueViewFilter:
    """``mapInArrow`` step keeping only Kafka-source rows that are in their queue's view.

    For Spark's Kafka source, which reads the raw data topics: per task and topic, it builds
    the view the kmq source builds (:class:`~spark_connector._view.PeekView`: the same receipt
    and dedupe rules; receipts read to their end; the data records of the dedupe window before
    the first row's offset read from Kafka, the rows themselves fed from their own headers,
    those in kmq's plain header form read per batch with Arrow compute) and drops removed
    messages and duplicates. Rows of topics the resolution does not name pass.

    Args:
        resolution (Resolution): the queues (data and receipts topics) and broker.
        stall_timeout (float): seconds a Kafka read may make no progress.
        headers (str): the column holding the record headers; ``size`` the one holding the
            value's length in bytes (None: computed from ``value``).
    """

    def __init__(self, resolution: Resolution, stall_timeout: float = DEFAULT_STALL_TIMEOUT,
                 headers: str = "headers", size: str | None = None):
        self.resolution = resolution
        self.stall_timeout = stall_timeout
        self.headers = headers
        self.size = size

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with self.open() as keep:
            for batch in batches:
                yield batch.filter(keep(batch))

    def open(self) -> _ViewMask:
        """The per-task state: call it with a batch for its keep mask; close it at the end."""
        return _ViewMask(self)


class _ViewMask:
    """One task's trackers (one per topic), as a context manager giving keep masks."""

    def __init__(self, spec: QueueViewFilter):
        self.spec = spec
        self.receipts = {t.data_topic: t.receipts_topic for t in spec.resolution.targets}
        self.session = KafkaSession(spec.resolution.bootstrap_servers,
                                    spec.resolution.kafka_options, client_id="kmq-spark-filter")
        self.trackers: dict[str, _TopicTracker] = {}

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        for tracker in self.trackers.values():
            tracker.close()
        self.trackers.clear()

    def __call__(self, batch: pa.RecordBatch) -> pa.Array:
        topics = batch.column("topic").to_pylist()
        offsets = batch.column("offset").to_pylist()
        headers = batch.column(self.spec.headers)
        if self.spec.size is not None:
            size_column = batch.column(self.spec.size)
        else:
            size_column = pc.binary_length(batch.column("value"))
        # Rows in kmq's plain header form are judged from their id alone; the others (poison,
        # other writers) from their headers, row by row, as every queue view reads them.
        ids = plain_message_ids(headers, size_column)
        sizes = size_column.to_pylist()
        keep = []
        for row, (topic, offset, message_id) in enumerate(zip(topics, offsets, ids)):
            if topic not in self.receipts:
                keep.append(True)
                continue
            tracker = self.trackers.get(topic)
            if tracker is None or offset < tracker.next_offset:
                if tracker is not None:
                    tracker.close()
                tracker = self.trackers[topic] = _TopicTracker(
                    self.session, topic, self.receipts[topic], offset, self.spec.stall_timeout)
            if message_id is not None:
                keep.append(tracker.keep_plain(offset, message_id))
            else:
                pairs = headers[row].as_py()
                keep.append(tracker.keep(offset, sizes[row] or 0,
                                         [(h["key"], h["value"]) for h in pairs or ()]))
        return pa.array(keep, type=pa.bool_())


class _TopicTracker:
    """One topic's PeekView: the dedupe window before the first row read from Kafka, then
    fed with the rows' own offsets, sizes and headers."""

    def __init__(self, session: KafkaSession, topic: str, receipts_topic: str, first: int,
                 stall_timeout: float):
        self.view = PeekView.read(session, topic, receipts_topic, first, stall_timeout)
        self.next_offset = self.view.feed_from
        reader: TopicReader = session.reader()
        try:
            for records in data_records(reader, topic, self.view.feed_from, first,
                                        stall_timeout):
                for record in records:
                    self.view.add(record)
                    self.next_offset = record.offset + 1
        finally:
            reader.close()
        self.next_offset = max(self.next_offset, first)

    def keep(self, offset: int, size: int, headers: list[tuple[str, bytes | None]]) -> bool:
        """Whether the record at ``offset`` (asked in increasing order) is in the view."""
        self.next_offset = offset + 1
        return self.view.add_entry(offset, size, headers)

    def keep_plain(self, offset: int, message_id: str) -> bool:
        """:meth:`keep` for a row :func:`~spark_connector._view.plain_message_ids` read."""
        self.next_offset = offset + 1
        return self.view.add_plain(offset, message_id)

    def close(self) -> None:
        """Nothing is held open between batches (the prefix reader is closed already)."""


#: The columns the queue-view step reads.
_VIEW_INPUTS = ("topic", "offset", "_kmq_size", "_kmq_headers")
#: The columns the decode step reads (narrow: the decoded columns stay on the JVM; the value
#: only of rows the JVM did not decode).
_DECODE_INPUTS = ("topic", "partition", "offset", "timestamp", FAST_PATH, "_kmq_value")
#: The queue-view step's result column (dropped from the output).
_VIEWED = "_kmq_viewed"
#: The struct field of the decode step's result saying whether the row is output.
_KEEP = "_kmq_keep"
#: The decode step's result column (dropped from the output).
_STEP = "_kmq_step"


class KafkaRowFinisher:
    """The Python steps of the Kafka-source path, two scalar iterator ``arrow_udf``s over a
    few narrow columns each: the queue view, then the Python decoder for the rows the JVM did
    not decode (:mod:`spark_connector.jvmdecode`).

    1. **The queue view** sees each row's topic, offset, value length and headers and says
       whether it is in the view (:class:`QueueViewFilter`); the rows that are not are
       filtered out on the JVM.
    2. **The decode step** sees each remaining row's JVM verdict (``_kmq_fast``) and, where
       the JVM did not decode it, the record's value, topic, partition, offset and timestamp;
       it decodes those rows (poison records, acknowledgments, other writer schemas) with
       :func:`spark_connector.decode.decode_batch` and ``on_error`` as on the kmq path, and
       returns their columns and whether each row is output (one dead-lettered is not), and
       null for the rows the JVM decoded.

    The ~45 decoded columns never leave the JVM; the choice between the JVM's and Python's
    columns is made there (:meth:`apply`). Both UDFs are non-deterministic, so Spark runs each
    once per row, in the partition's offset order, and pushes no filter below them (the queue
    view must see every record: a filter below it would change which copy of a message is
    the duplicate). With ``on_error="column"`` no row is dropped by decoding, so a query that
    reads no message column (``count()``) lets Spark leave out the decode step and the JVM's
    decoding altogether; with ``"dead_letter"`` and ``"fail"`` the output depends on it, and
    it runs for every row in the view.

    Args:
        view (QueueViewFilter | None): the queue view to apply; None keeps every row
            (``include_removed``).
        on_error (str): as :func:`spark_connector.decode.decode_messages`.
        dead_letter (DeadLetterTarget | None): where ``on_error="dead_letter"`` writes.
    """

    def __init__(self, view: QueueViewFilter | None, on_error: str,
                 dead_letter: DeadLetterTarget | None):
        self.view = view
        self.on_error = on_error
        self.dead_letter = dead_letter

    def apply(self, raw: Any) -> Any:
        """The message rows of Spark's Kafka-source rows ``raw``: the queue view, then
        :func:`spark_connector.jvmdecode.check_on_jvm`, the decode step, and each message
        column from :func:`spark_connector.jvmdecode.jvm_columns` or the decode step.

        The Python steps also divide the work into compiled methods: the JVM's verdict is
        computed between the two (its own stage of generated code), the message columns a
        query reads after both.

        Args:
            raw (DataFrame): ``format("kafka")`` rows, with headers.

        Returns:
            DataFrame: :data:`~spark_connector.schema.MESSAGE_SCHEMA` rows in the view.
        """
        from pyspark.sql import functions as F
        from pyspark.sql.functions import arrow_udf
        from pyspark.sql.types import BooleanType

        from spark_connector.jvmdecode import ENVELOPE, check_on_jvm, jvm_columns
        from spark_connector.schema import MESSAGE_SCHEMA

        finisher = self
        viewed = raw
        if self.view is not None:
            def view(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
                return finisher.keep(batches)  # a function: arrow_udf takes its kind from hints

            # cast: pyspark's stubs do not know arrow_udf's iterator form.
            in_view = cast(Any, arrow_udf)(view, BooleanType()).asNondeterministic()
            inputs = [F.col("topic"), F.col("offset"), F.length("value").alias(_VIEW_INPUTS[2]),
                      F.col("headers").alias(_VIEW_INPUTS[3])]
            viewed = (raw.select("*", in_view(*inputs).alias(_VIEWED))
                      .filter(F.col(_VIEWED)).drop(_VIEWED))

        def finish(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
            return finisher(batches)

        step = cast(Any, arrow_udf)(finish, _step_type()).asNondeterministic()
        checked = check_on_jvm(viewed)
        # Only the rows the JVM did not decode cross to Python with their record's fields;
        # the step's result is null for the others.
        fast = F.col(FAST_PATH)
        inputs = [F.col(c) if c in (FAST_PATH, "_kmq_value") else F.when(~fast, F.col(c)).alias(c)
                  for c in _DECODE_INPUTS]
        stepped = checked.select("*", step(*inputs).alias(_STEP))
        if self.on_error != "column":  # decoding may drop rows (dead_letter) or fail
            stepped = stepped.filter(F.coalesce(F.col(_STEP)[_KEEP], fast))
        columns = jvm_columns(F.col(ENVELOPE), F.col("timestamp"))
        outputs = []
        for field in MESSAGE_SCHEMA.fields:
            if field.name in _JVM_ONLY:
                outputs.append(F.col(field.name))
                continue
            python = F.col(_STEP)[field.name]
            if field.name in columns:
                python = F.when(F.col(FAST_PATH), columns[field.name]).otherwise(python)
            outputs.append(python.cast(field.dataType).alias(field.name))
        return stepped.select(*outputs)

    def keep(self, batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        """The queue-view step: per batch of :data:`_VIEW_INPUTS`, whether each row is in the
        view (the view must not be None)."""
        if self.view is None:
            raise ValueError("KafkaRowFinisher.keep needs a queue view (include_removed has none)")
        with self.view.open() as masks:
            for arrays in batches:
                yield masks(pa.RecordBatch.from_arrays(list(arrays), names=list(_VIEW_INPUTS)))

    def __call__(self, batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        """The decode step: per batch of :data:`_DECODE_INPUTS` (the record's fields null
        where the JVM decoded it), a struct of the keep flag and the Python decoder's columns;
        the struct is null for rows the JVM decoded."""
        from spark_connector.decode import _DeadLetterWriter

        writer = _DeadLetterWriter(self.dead_letter) if self.dead_letter else None
        try:
            for arrays in batches:
                batch = pa.RecordBatch.from_arrays(list(arrays), names=list(_DECODE_INPUTS))
                yield self._step(batch, writer)
            if writer is not None:
                writer.flush()  # the task succeeds only once every copy is acknowledged
        finally:
            if writer is not None:
                writer.close()

    def _step(self, batch: pa.RecordBatch, writer: Any) -> pa.StructArray:
        from spark_connector.decode import decode_batch

        slow = pc.invert(batch.column(FAST_PATH).fill_null(False))
        if not pc.any(slow).as_py():
            return pa.nulls(batch.num_rows, _STEP_ARROW)  # every row decoded on the JVM
        rows = batch.filter(slow)
        records = pa.RecordBatch.from_arrays(
            [rows.column("_kmq_value"), rows.column("topic"), rows.column("partition"),
             rows.column("offset"), rows.column("timestamp")],
            names=["value", "topic", "partition", "offset", "timestamp"])
        decoded = decode_batch(records, self.on_error, writer.write if writer else None)
        # Decoded rows keep their record's topic and offset: put each back in its place
        # (rows dead-lettered there are not output).
        where = {key: i for i, key in zip(np.flatnonzero(slow.to_numpy(zero_copy_only=False)),
                                           zip(rows.column("topic").to_pylist(),
                                               rows.column("offset").to_pylist()))}
        index: list[int | None] = [None] * batch.num_rows
        for j, key in enumerate(zip(decoded.column("topic").to_pylist(),
                                    decoded.column("offset").to_pylist())):
            index[where[key]] = j
        positions = pa.array(index, type=pa.int32())
        columns = [decoded.column(f.name).take(positions) for f in list(_STEP_ARROW)[1:]]
        return pa.StructArray.from_arrays([pc.is_valid(positions), *columns],
                                          fields=list(_STEP_ARROW), mask=pc.invert(slow))


#: Columns always taken from the JVM (the record's own).
_JVM_ONLY = ("topic", "partition", "offset", "timestamp")


def _step_type() -> Any:
    """Spark type of the Python step's result: the keep flag, then the Python decoder's
    columns for the rows the JVM did not decode."""
    from pyspark.sql.types import BooleanType, StructField, StructType

    from spark_connector.schema import MESSAGE_SCHEMA

    return StructType([StructField(_KEEP, BooleanType(), False)]
                      + [f for f in MESSAGE_SCHEMA.fields if f.name not in _JVM_ONLY])


def _step_arrow() -> pa.StructType:
    from spark_connector.decode import _ARROW_SCHEMA

    return pa.struct([pa.field(_KEEP, pa.bool_(), nullable=False)]
                     + [f for f in _ARROW_SCHEMA if f.name not in _JVM_ONLY])


_STEP_ARROW = _step_arrow()
