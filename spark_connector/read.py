"""``read_queue``: a kmq queue (or list of queues) as a DataFrame of decoded messages.

Two paths, one result:

* **kafka**: Spark's own Kafka source (``format("kafka")``, the ``spark-sql-kafka-0-10``
  package) reads the data topics with :func:`kafka_source_options`; a ``mapInArrow`` step then
  keeps only the records in the queue view (:class:`QueueViewFilter`: it reads each queue's
  receipts and the data records' headers with :mod:`facade.kafka`, as every queue view does).
* **kmq**: the project's Python data source (``format("kmq")``, :mod:`spark_connector.source`)
  yields the same Kafka-source rows, already filtered.

Both then go through :func:`spark_connector.decode.decode_messages`. ``path="auto"`` (default)
takes the Kafka source when its classes are on the driver's classpath
(:func:`kafka_source_available`) and the mode allows it; receive mode and
``includeRemoved=false`` semantics are exact on the kmq path, while the kafka path supports
peek only.

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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import fields
from typing import Any

import pyarrow as pa

from facade.config import KmqConfig
from facade.errors import InvalidParameter
from facade.kafka import KafkaRecord, KafkaSession, TopicReader
from facade.queuestate import OffsetStatus
from spark_connector._view import DEFAULT_STALL_TIMEOUT, TopicView, data_records, in_view
from spark_connector.decode import ON_ERROR_CHOICES, decode_messages
from spark_connector.resolve import Resolution, resolve

__all__ = [
    "KAFKA_SOURCE_PROVIDER",
    "QueueViewFilter",
    "kafka_source_available",
    "kafka_source_options",
    "read_queue",
]

log = logging.getLogger("kmq.spark")

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


def read_queue(spark: Any, format_name: str, streaming: bool = True, **options: Any) -> Any:
    """Read a kmq queue, list or set of queues as a DataFrame with one row per message.

    Args:
        spark (SparkSession): the session (``format("kmq")`` is registered on it if needed).
        format_name (str): any readable path or format name: a private, public or direct
            queue, ``DL=``, a multiple-element name (the union of its queues), a journal, a
            dead-letter queue (``MACHINE=<guid>;DEADLETTER``), an admin queue.
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
            on the kafka path; ``path="kafka"`` without the Kafka source on the classpath.
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
    resolution = resolve(format_name, operation=mode, config=settings.config,
                         **settings.overrides)
    if path == "kafka":
        raw = _kafka_path(spark, resolution, streaming, settings.source)
    else:
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
                source: Mapping[str, str]) -> Any:
    reader = spark.readStream if streaming else spark.read
    options = kafka_source_options(resolution, streaming=streaming, **source)
    raw = reader.format("kafka").options(**options).load()
    lowered = {k.lower(): str(v).lower() for k, v in source.items()}
    if lowered.get("kmq.includeremoved") == "true":
        return raw
    return raw.mapInArrow(QueueViewFilter(resolution), raw.schema)


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
        source), ``failOnDataLoss=false`` (retention may delete removed messages), plus
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
    the same :class:`~spark_connector._view.TopicView` as the kmq source (receipts read to
    their end, data headers fed from the dedupe window before the first row's offset) and
    drops removed messages and duplicates. Rows of topics the resolution does not name pass.

    Args:
        resolution (Resolution): the queues (data and receipts topics) and broker.
        stall_timeout (float): seconds a Kafka read may make no progress.
    """

    def __init__(self, resolution: Resolution, stall_timeout: float = DEFAULT_STALL_TIMEOUT):
        self.resolution = resolution
        self.stall_timeout = stall_timeout

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        receipts = {t.data_topic: t.receipts_topic for t in self.resolution.targets}
        session = KafkaSession(self.resolution.bootstrap_servers,
                               self.resolution.kafka_options, client_id="kmq-spark-filter")
        trackers: dict[str, _TopicTracker] = {}
        try:
            for batch in batches:
                topics = batch.column("topic").to_pylist()
                offsets = batch.column("offset").to_pylist()
                keep = []
                for i, (topic, offset) in enumerate(zip(topics, offsets)):
                    if topic not in receipts:
                        keep.append(i)
                        continue
                    tracker = trackers.get(topic)
                    if tracker is None or offset < tracker.next_offset:
                        if tracker is not None:
                            tracker.close()
                        tracker = trackers[topic] = _TopicTracker(
                            session, topic, receipts[topic], offset, self.stall_timeout)
                    if tracker.keep(offset):
                        keep.append(i)
                yield batch.take(pa.array(keep, type=pa.int64()))
        finally:
            for tracker in trackers.values():
                tracker.close()


class _TopicTracker:
    """Feeds one topic's data headers into a TopicView up to the offsets asked about."""

    def __init__(self, session: KafkaSession, topic: str, receipts_topic: str, first: int,
                 stall_timeout: float):
        self.view = TopicView(session, topic, receipts_topic, first, stall_timeout)
        self.topic = topic
        self.stall_timeout = stall_timeout
        self.first = first
        self.next_offset = self.view.feed_from
        self._statuses: dict[int, OffsetStatus] = {}
        self._reader: TopicReader = session.reader()
        self._records: Iterator[list[KafkaRecord]] = iter(())

    def keep(self, offset: int) -> bool:
        """Whether the record at ``offset`` (asked in increasing order) is in the view."""
        while self.next_offset <= offset:
            if not self._advance(offset):
                return True  # not found again: never drop a row silently
        status = self._statuses.pop(offset, None)
        return status is None or in_view(status, None)

    def _advance(self, offset: int) -> bool:
        batch = next(self._records, None)
        if batch is None:
            # Read from where we are up to a little past the offset asked (one fetch's worth).
            self._records = data_records(self._reader, self.topic, self.next_offset,
                                         offset + 4096, self.stall_timeout)
            batch = next(self._records, None)
            if batch is None:
                return False
        for record in batch:
            status = self.view.add(record)
            if record.offset >= self.first:  # the dedupe prefix is never asked about
                self._statuses[record.offset] = status
            self.next_offset = record.offset + 1
        return True

    def close(self) -> None:
        """Release the reader."""
        self._reader.close()
