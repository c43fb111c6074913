r"""Writing kmq messages from Spark: the writers behind :func:`spark_connector.write_messages`
(batch) and :func:`spark_connector.write_stream` (in :mod:`spark_connector.write`).

Each row of the DataFrame becomes one MSMQ message (``MQSendMessage``) sent to a format name:
a queue, a ``PUBLIC=`` name, a distribution list (``DL=``) or a multiple-element format name. The
name is resolved once, on the driver, through the queue manager (registry and directory), exactly
as :meth:`facade.manager.QueueManager.open_queue` would; executors receive the resolved queues
(topics and format names) in the writer's options, encode envelopes and produce the records.

Columns (see :data:`MESSAGE_COLUMNS`): ``body`` (required, binary or string), the other message
properties declared with ``spark_input=`` on :class:`facade.model.message.Message` (``label``,
``priority``, ``correlation_id``, time limits, queues, flags...), and ``message_key`` (the
source of the message id, see below). Keyword defaults (``**message_defaults``) fill missing
columns and nulls.

Exactly-once
------------
The message id of each row is deterministic: ``guid = uuid5(ID_NAMESPACE, scope/partition)``
and ``sequence = row index + 1``, where the scope is ``stream/<query id>/<batch id>`` for a
micro-batch and ``batch/<write id>`` for a batch write; with a ``message_key`` column the id is
a SHA-256 of scope and key instead. A micro-batch that Spark replays after a failure (same query
id from the checkpoint, same batch id, same input offsets) therefore produces records with the
ids it produced the first time, and every kmq receiver drops a record whose message id appeared
within :data:`facade.state.queuestate.DEDUPE_WINDOW` earlier offsets of its queue. Positional ids need
the replay to put the same rows in the same partitions in the same order (true of file, Kafka
and rate sources read without a shuffle); after a shuffle, give a ``message_key``.
Spark's own Kafka sink produces new records on a replay, which consumers cannot tell apart: it is
at-least-once. Limits: see ``docs/spark.md`` ("Writing").

What every send does with a message is :mod:`facade.queues.sending`'s, shared with
:meth:`facade.queues.queue.MessageQueue.send`: the queue manager's stamps, one copy per queue (the
envelope encoded once for all of them), the machine-journal copy (source journaling, the
time-to-be-received kept in a property as on every journal copy) and the arrival
acknowledgments (ACK_REACH_QUEUE, posted once the task's records are stored).

Access lists are checked on the driver, for the driver's principal, with the facade's checks
(:mod:`spark_connector.resolve`), before any row is written: WRITE_MESSAGE (and Send To on
``DL=`` and ``PUBLIC=`` names) on every queue the format name reaches, and WRITE_MESSAGE on
every queue of each admin queue the messages may ask acknowledgments on: the ``admin_queue``
default when acknowledgments may be asked for, and the ``admin_queues`` a writer declares for
its rows. Unlike a facade send, which writes the permitted copies and dead-letters the refused
ones, a refused write writes nothing. The driver checks again whenever Spark plans a writer
(a batch write; a streaming query at its start and at each micro-batch's commit). A row that
asks for acknowledgments on an admin queue the driver did not check fails its task before any
copy of it is written: executors cannot check rights themselves.

What the facade does at send and this sink does not (documented in ``docs/spark.md``): queue
quotas, NACKs and dead-lettering of copies that cannot be delivered (the task fails and Spark
retries it instead), time-to-reach-queue as a delivery deadline, signing and encryption. The
facade signs and encrypts (:mod:`facade.queues.protection`), but with the sender's private key and
certificate and the destination queues' keys, which the executors running the tasks do not
have: the columns that ask for signing or encryption are refused (:func:`check_schema`), and a
message is never sent unprotected. :func:`secure_message` is where each copy would be protected.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import functools
import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum, IntFlag
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from facade.config import DEFAULT_MAX_SEND_BYTES, KmqConfig
from facade.model.envelope import encode_message
from facade.errors import AccessDenied, BrokerUnavailable, InvalidParameter
from facade.model.formatnames import SystemQueue
from facade.kafka.librdkafka import KafkaSession, kafka_error_to_queue_error, map_kafka_errors
from facade.manager import QueueManager
from facade.model.message import (
    Acknowledgment,
    BodyType,
    Delivery,
    Message,
    MessageClass,
    MessageId,
    unsupported_security,
)
from facade.model.propertyspec import SparkInput, specs
from facade.queues.sending import (
    SendCopies,
    acknowledgment,
    check_fan_out,
    source_journal_copy,
    stamp_acknowledgment,
    stamp_sent,
)
from facade.model.topics import system_topics
from spark_connector.resolve import DriverQueues, Operation, QueueTarget, Resolution, resolve_with

__all__ = [
    "ID_NAMESPACE",
    "MESSAGE_COLUMNS",
    "KmqBatchWriter",
    "KmqCommitMessage",
    "KmqStreamWriter",
    "check_schema",
    "message_from_row",
    "normalize_defaults",
    "require_write_rights",
    "secure_message",
    "writer_options",
]

log = logging.getLogger("kmq.spark.sink")

#: Namespace of the deterministic GUIDs in the ids of Spark-written messages (uuid5).
ID_NAMESPACE = uuid.UUID("e018d5ca-b6a4-43f8-ab30-156d6ff57862")

# Writer options. Data-source options are strings, and Spark hands them to the data source
# with lower-cased keys: keep the names lower case.
OPTION_RESOLUTION = "kmq.resolution"
OPTION_DEFAULTS = "kmq.defaults"
OPTION_ADMIN = "kmq.admin_queues"
OPTION_WRITE_ID = "kmq.write_id"
OPTION_TRANSACTIONAL = "kmq.transactional"
OPTION_FLUSH_TIMEOUT = "kmq.flush_timeout"
OPTION_MAX_SEND_BYTES = "kmq.max_send_bytes"

#: Seconds a task waits for the broker to acknowledge its records before it fails.
DEFAULT_FLUSH_TIMEOUT = 120.0

# Local properties Spark sets on the tasks of a micro-batch (checked on pyspark 4.2.0 and 4.2.1).
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


# --------------------------------------------------------------------------------------------
# Columns: which Spark types each accepts, and how a value becomes a Message argument
# --------------------------------------------------------------------------------------------


def _as_bytes(name: str, value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidParameter(f"{name} must be binary or a string, got {type(value).__name__}")


def _as_int(name: str, value: Any) -> Any:
    # Ranges are Message.validate's job; only refuse what would silently truncate.
    if isinstance(value, (float, bool)):
        raise InvalidParameter(f"{name} must be an integer, got {value!r}")
    return value


def _as_text(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        raise InvalidParameter(f"{name} must be a string, got {type(value).__name__}")
    return value


def _as_seconds(name: str, value: Any) -> Any:
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (Decimal, int)) and not isinstance(value, bool):
        return float(value)
    return value  # floats and wrong types: Message.validate names the range


def _as_instant(name: str, value: Any) -> Any:
    if isinstance(value, dt.datetime):
        # PySpark hands TimestampType values over as naive local time.
        return value.astimezone(dt.UTC)
    raise InvalidParameter(f"{name} must be a timestamp, got {type(value).__name__}")


def _as_correlation_id(name: str, value: Any) -> Any:
    # Message accepts a MessageId, its 20 bytes or its 'guid\seq' text and says which is wrong.
    return bytes(value) if isinstance(value, (bytearray, memoryview)) else value


def _as_properties(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise InvalidParameter(f"{name} must be a map<string,string>, got {type(value).__name__}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidParameter(f"{name} keys and values must be non-null strings, got {value!r}")
    return dict(value)


def _as_named(enum_cls: type[IntEnum | IntFlag]) -> Callable[[str, Any], Any]:
    """A converter taking an int, a member, or member names joined by ``|`` (flags)."""

    def convert(name: str, value: Any) -> Any:
        if not isinstance(value, str):
            return _as_int(name, value)
        total = 0
        for part in filter(None, re.split(r"[|,+\s]+", value.strip())):
            member = enum_cls.__members__.get(part.upper())
            if member is None:
                raise InvalidParameter(
                    f"{name}: {part!r} is not a {enum_cls.__name__} name",
                    hint=f"use an int or one of {', '.join(enum_cls.__members__)}")
            total |= int(member)
        return total

    return convert


@dataclass(frozen=True)
class _Column:
    """One recognised column: the Spark type names it accepts and its converter."""

    types: tuple[str, ...]
    convert: Callable[[str, Any], Any]
    meaning: str


_INTEGER = ("byte", "short", "integer", "long")
_NUMBER = (*_INTEGER, "float", "double", "decimal")

#: SparkInput kind (facade.model.propertyspec) -> (Spark type names accepted, converter).
_INPUT_KINDS: dict[str, tuple[tuple[str, ...], Callable[[str, Any], Any]]] = {
    "bytes": (("binary", "string"), _as_bytes),
    "int": (_INTEGER, _as_int),
    "text": (("string",), _as_text),
    "seconds": (_NUMBER, _as_seconds),
    "instant": (("timestamp",), _as_instant),
    "message_id": (("string", "binary"), _as_correlation_id),
    "properties": (("map",), _as_properties),
}


def _input_column(spark_input: SparkInput, enum: type | None) -> _Column:
    """The column a writer may give for a property declared with ``spark_input=``.

    Raises:
        TypeError: a ``named`` input on a property without an enum (a declaration bug).
    """
    if spark_input.kind == "named":
        if enum is None or not issubclass(enum, (IntEnum, IntFlag)):
            raise TypeError(f"a 'named' Spark input needs an IntEnum or IntFlag, got {enum!r}")
        return _Column((*_INTEGER, "string"), _as_named(enum), spark_input.meaning)
    types, convert = _INPUT_KINDS[spark_input.kind]
    return _Column(types, convert, spark_input.meaning)


#: Recognised columns (and ``**message_defaults`` names): Spark types accepted, MSMQ property.
#: The message properties are those declared with ``spark_input=`` on
#: :class:`facade.model.message.Message`, in field order; ``message_key`` is the sink's own.
MESSAGE_COLUMNS: dict[str, _Column] = {
    **{f.name: _input_column(spec.spark_input, spec.enum)
       for f, spec in specs(Message) if spec.spark_input is not None},
    "message_key": _Column(("string", "binary"), _as_bytes,
                           "the message id's source (unique per batch) instead of the row's "
                           "position; not a default"),
}

# Message properties a writer could ask for but that need signing or encryption, which the
# sink cannot do (no keys on the executors, see the module docstring): refused instead of sent
# unprotected.
_SECURITY_COLUMNS = ("auth_level", "privacy_level", "hash_algorithm", "encryption_algorithm",
                     "sender_certificate", "signature", "destination_symmetric_key")


def _unsupported_security(names: Iterable[str]) -> InvalidParameter:
    # The facade's error (facade.model.message.unsupported_security), with the sink's own hint.
    return unsupported_security(
        names, hint="drop these columns, or send these messages with MessageQueue.send, which "
                    "signs and encrypts them")


def check_schema(schema: Any) -> str:
    """Check a DataFrame schema against :data:`MESSAGE_COLUMNS` (runs on the driver).

    Args:
        schema (pyspark.sql.types.StructType): the rows to write.

    Returns:
        str: the Spark type name of the ``body`` column (``binary`` or ``string``), which picks
        the default PROPID_M_BODY_TYPE.

    Raises:
        InvalidParameter: a column is unknown (the message names it and lists the known ones),
            ``body`` is missing, a column has a type it does not accept, or a column asks for
            signing or encryption (refused: the executors have no keys to protect it with).
    """
    fields = {f.name: f.dataType for f in schema.fields}
    security = [name for name in fields if name in _SECURITY_COLUMNS]
    if security:
        raise _unsupported_security(security)
    unknown = [name for name in fields if name not in MESSAGE_COLUMNS]
    if unknown:
        raise InvalidParameter(
            f"unknown column(s) {', '.join(map(repr, unknown))} for writing kmq messages",
            hint="select or rename to the known columns: " + ", ".join(MESSAGE_COLUMNS))
    if "body" not in fields:
        raise InvalidParameter("writing kmq messages needs a 'body' column (binary or string)",
                               hint="e.g. df.selectExpr('CAST(value AS BINARY) AS body', ...)")
    for name, data_type in fields.items():
        _check_type(name, data_type)
    return fields["body"].typeName()


def _check_type(name: str, data_type: Any) -> None:
    column = MESSAGE_COLUMNS[name]
    type_name = data_type.typeName()
    if type_name == "map":
        # map<string,string> only: kmq properties are text.
        ok = (data_type.keyType.typeName() == "string"
              and data_type.valueType.typeName() == "string")
    else:
        ok = type_name in column.types
    if not ok:
        raise InvalidParameter(
            f"column {name!r} has type {data_type.simpleString()}; it takes "
            + (" or ".join(column.types) if name != "properties" else "map<string,string>"),
            hint=f"{name} is {column.meaning}: cast the column")


def normalize_defaults(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Check and convert ``**message_defaults`` on the driver (same names as the columns).

    Args:
        defaults (Mapping[str, Any]): e.g. ``label="x", priority=5, delivery="RECOVERABLE"``;
            enum members, ints and names are accepted, durations in seconds or timedelta,
            ``not_before`` a timezone-aware datetime; ``None`` values are dropped.

    Returns:
        dict[str, Any]: converted values (plain ints for enums).

    Raises:
        InvalidParameter: an unknown name (lists the known ones), a naive ``not_before``, or a
            value out of its MSMQ range (checked by building a :class:`Message`).
    """
    values = {name: value for name, value in defaults.items() if value is not None}
    security = [name for name in values if name in _SECURITY_COLUMNS]
    if security:
        raise _unsupported_security(security)
    unknown = [name for name in values if name not in MESSAGE_COLUMNS or name == "message_key"]
    if unknown:
        raise InvalidParameter(
            f"unknown message default(s) {', '.join(map(repr, unknown))}",
            hint="known names: " + ", ".join(MESSAGE_COLUMNS))
    not_before = values.get("not_before")
    if isinstance(not_before, dt.datetime) and not_before.utcoffset() is None:
        raise InvalidParameter("default not_before must be timezone-aware",
                               hint="use datetime(..., tzinfo=timezone.utc)")
    converted = {name: MESSAGE_COLUMNS[name].convert(name, value)
                 for name, value in values.items()}
    Message(**converted)  # range checks now, on the driver, rather than in every task
    return {name: _plain(value) for name, value in converted.items()}


def _plain(value: Any) -> Any:
    """Enum members as ints, message ids as text: what survives the JSON option."""
    if isinstance(value, (IntEnum, IntFlag)):
        return int(value)
    if isinstance(value, MessageId):
        return str(value)
    return value


def _defaults_to_json(defaults: Mapping[str, Any]) -> str:
    def tag(value: Any) -> Any:
        if isinstance(value, bytes):
            return {"$bytes": base64.b64encode(value).decode("ascii")}
        if isinstance(value, dt.datetime):
            return {"$time": value.isoformat()}
        return value

    return json.dumps({name: tag(value) for name, value in defaults.items()}, sort_keys=True)


def _defaults_from_json(text: str) -> dict[str, Any]:
    def untag(value: Any) -> Any:
        if isinstance(value, dict) and "$bytes" in value:
            return base64.b64decode(value["$bytes"])
        if isinstance(value, dict) and "$time" in value:
            return dt.datetime.fromisoformat(value["$time"])
        return value

    return {name: untag(value) for name, value in json.loads(text or "{}").items()}


def message_from_row(row: Mapping[str, Any], defaults: Mapping[str, Any],
                     body_column_type: str = "binary") -> Message:
    """Build the message for one row: row values, then defaults for missing columns and nulls.

    Args:
        row (Mapping[str, Any]): column name -> value (columns already checked by
            :func:`check_schema`).
        defaults (Mapping[str, Any]): output of :func:`normalize_defaults`.
        body_column_type (str): ``binary`` or ``string``: the default body type is BYTES
            (VT_UI1|VT_VECTOR) or STRING (VT_LPWSTR, stored UTF-8) unless a ``body_type`` is given.

    Returns:
        Message: unsent (no id yet), validated.

    Raises:
        InvalidParameter: a value of the wrong kind or outside its MSMQ range.
    """
    values = dict(defaults)
    for name, value in row.items():
        if value is None or name == "message_key":
            continue
        values[name] = MESSAGE_COLUMNS[name].convert(name, value)
    if "properties" in defaults and row.get("properties") is not None:
        # A row's properties add to (and override) the default ones rather than replace them.
        values["properties"] = {**defaults["properties"], **values["properties"]}
    values.setdefault("body", b"")
    values.setdefault("body_type",
                      BodyType.STRING if body_column_type == "string" else BodyType.BYTES)
    return Message(**values)


def _message_key(row: Mapping[str, Any]) -> bytes | None:
    """The row's ``message_key`` as bytes; None when the DataFrame has no such column.

    Raises:
        InvalidParameter: the column exists but is null in this row (a null key would fall back
            to a positional id, silently losing what the key column was chosen for).
    """
    if "message_key" not in row:
        return None
    value = row["message_key"]
    if value is None:
        raise InvalidParameter("message_key is null", hint="give every row a key, unique within "
                               "the batch, or drop the column to use positional ids")
    return _as_bytes("message_key", value)


def secure_message(message: Message, target: QueueTarget) -> Message:
    """Hook for signing (PROPID_M_AUTH_LEVEL) and body encryption (PROPID_M_PRIV_LEVEL).

    Called for each copy just before it is encoded, with the queue it goes to (encryption is
    per destination). The sink does not sign or encrypt: :mod:`facade.queues.protection` needs the
    sender's private key and certificate and the destination queues' keys, which the executors
    do not have. So this returns the copy unchanged, and the columns that would ask for
    protection are refused by :func:`check_schema` (a message is never sent unprotected).

    Args:
        message (Message): the stamped copy (id, sent time, destination set).
        target (QueueTarget): its queue.

    Returns:
        Message: the copy to encode.
    """
    return message


# --------------------------------------------------------------------------------------------
# The write plan: everything a task needs, parsed from the writer options
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WritePlan:
    """What the driver decided, as the tasks see it (built from the writer's options)."""

    resolution: Resolution
    defaults: dict[str, Any]
    body_column_type: str
    fields: tuple[str, ...]
    admin: dict[str, Resolution]
    transactional: bool
    flush_timeout: float
    write_id: str | None
    #: The driver's queue manager's max_send_bytes: a row is one send (facade.queues.sending).
    max_send_bytes: int = DEFAULT_MAX_SEND_BYTES

    @classmethod
    def from_options(cls, options: Mapping[str, str], schema: Any, *,
                     batch: bool) -> _WritePlan:
        """Parse the options; a batch write without ``kmq.write_id`` gets a fresh one here.

        Raises:
            InvalidParameter: no ``kmq.resolution`` option, or the schema does not fit.
        """
        options = {key.lower(): value for key, value in options.items()}
        text = options.get(OPTION_RESOLUTION)
        if not text:
            raise InvalidParameter(
                f"format('kmq') writes need the {OPTION_RESOLUTION!r} option",
                hint="use spark_connector.write_messages / write_stream, or "
                     "df.write.format('kmq').options(**writer_options(df.schema, format_name))")
        admin = {name: Resolution.from_json(json.dumps(doc))
                 for name, doc in json.loads(options.get(OPTION_ADMIN) or "{}").items()}
        # The writer object is built once at planning and pickled to every task, so a write id
        # drawn here is shared by all partitions (and by Spark's retries of them).
        write_id = options.get(OPTION_WRITE_ID) or (str(uuid.uuid4()) if batch else None)
        return cls(
            resolution=Resolution.from_json(text),
            defaults=_defaults_from_json(options.get(OPTION_DEFAULTS, "")),
            body_column_type=check_schema(schema), fields=tuple(schema.fieldNames()),
            admin=admin,
            transactional=options.get(OPTION_TRANSACTIONAL, "false").lower() == "true",
            flush_timeout=float(options.get(OPTION_FLUSH_TIMEOUT) or DEFAULT_FLUSH_TIMEOUT),
            write_id=write_id,
            max_send_bytes=int(options.get(OPTION_MAX_SEND_BYTES) or DEFAULT_MAX_SEND_BYTES))


@dataclass(frozen=True)
class _TaskScope:
    """Where a task's rows come from: the key of their deterministic ids.

    Attributes:
        key (str): ``stream/<query id>/<batch id>`` or ``batch/<write id>``.
        partition (int): the Spark partition id.
        transactional_id (str): per (query or write, partition): a replayed task fences the
            producer of the attempt it replaces.
    """

    key: str
    partition: int
    transactional_id: str

    @functools.cached_property
    def guid(self) -> uuid.UUID:
        """GUID of the partition's positional message ids."""
        return uuid.uuid5(ID_NAMESPACE, f"{self.key}/{self.partition}")

    def message_id(self, index: int, message_key: bytes | None) -> MessageId:
        """The id of row ``index``: from its ``message_key`` if given, else from its position.

        A positional id (partition GUID, sequence = index + 1) is the same on a replay only if
        the replay puts the same rows in the same partition in the same order; a keyed id
        (SHA-256 of scope and key) only needs the key to be unique within the batch.
        """
        if message_key is None:
            return MessageId(self.guid, index + 1)
        digest = hashlib.sha256(f"{self.key}/".encode() + message_key).digest()
        return MessageId(uuid.UUID(bytes=digest[:16]), int.from_bytes(digest[16:20], "little"))

    def where(self, index: int) -> str:
        """Human position of row ``index`` for error messages."""
        return f"row {index} of partition {self.partition} ({self.key})"


def _ack_id(message_id: MessageId, target_index: int) -> MessageId:
    """The id of the arrival ACK for the copy of ``message_id`` sent to target ``target_index``.

    Derived from the message id alone, so a replayed ACK is a duplicate however the replay
    partitions its rows.
    """
    return MessageId(uuid.uuid5(ID_NAMESPACE, f"ack/{message_id}/{target_index}"),
                     message_id.sequence)


def _task_context() -> Any:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("kmq writers run inside Spark tasks (no TaskContext)")
    return context


def _batch_scope(write_id: str) -> _TaskScope:
    partition = _task_context().partitionId()
    return _TaskScope(f"batch/{write_id}", partition, f"kmq-spark-{write_id}-{partition}")


def _stream_scope() -> _TaskScope:
    context = _task_context()
    batch_id = context.getLocalProperty(_BATCH_ID_PROPERTY)
    query_id = context.getLocalProperty(_QUERY_ID_PROPERTY)
    if batch_id is None or query_id is None:
        raise RuntimeError(f"Spark did not set {_BATCH_ID_PROPERTY}/{_QUERY_ID_PROPERTY} on this "
                           "streaming task: deterministic message ids need both")
    partition = context.partitionId()
    return _TaskScope(f"stream/{query_id}/{batch_id}", partition,
                      f"kmq-spark-{query_id}-{partition}")


# --------------------------------------------------------------------------------------------
# Producing one task's records
# --------------------------------------------------------------------------------------------


class _RecordOutput:
    """One idempotent ``acks=all`` producer for one task: produce, then flush or fail.

    Every copy is produced with RECOVERABLE settings whatever its PROPID_M_DELIVERY: the task
    reports success only once every record is acknowledged, which is the strongest promise
    either mode makes. With ``transactional_id`` the task's records form one Kafka transaction.
    """

    def __init__(self, resolution: Resolution, transactional_id: str | None, timeout: float):
        self.timeout = timeout
        session = KafkaSession(resolution.bootstrap_servers, resolution.kafka_options,
                               client_id="kmq-spark")
        extra = {"message.timeout.ms": int(timeout * 1000)}
        if transactional_id:
            # A transaction left open by a dead task holds back read_committed readers of its
            # topics until it times out or a replay fences it: keep the timeout near the flush.
            extra["transaction.timeout.ms"] = int(timeout * 1000)
        self.producer = session.producer(Delivery.RECOVERABLE, transactional_id, extra)
        self.transactional = transactional_id is not None
        self.errors: list[tuple[Any, str]] = []
        self.produced = 0
        if self.transactional:
            with map_kafka_errors("begin Kafka transaction"):
                # Fences (and aborts the open transaction of) an earlier attempt of this task.
                self.producer.init_transactions(timeout)
                self.producer.begin_transaction()

    def send(self, topic: str, record: Any) -> None:
        """Queue one record (an :class:`~facade.model.envelope.EncodedRecord`) for ``topic``."""
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append((err, topic))

        while True:
            try:
                with map_kafka_errors("write to queue", topic):
                    self.producer.produce(topic, value=record.value, key=record.key,
                                          headers=record.headers, on_delivery=delivered)
                break
            except BufferError:
                # librdkafka's local queue is full: let deliveries drain, then retry.
                self.producer.poll(0.05)
        self.produced += 1
        self.producer.poll(0)

    def flush(self) -> None:
        """Wait until every record is acknowledged.

        Raises:
            BrokerUnavailable: records still unacknowledged after the flush timeout.
            MessageQueueError: the broker refused a record (mapped from the Kafka error).
        """
        remaining = self.producer.flush(self.timeout)
        if self.errors:
            err, topic = self.errors[0]
            raise kafka_error_to_queue_error(err, "write to queue", topic)
        if remaining:
            raise BrokerUnavailable(
                f"{remaining} records not acknowledged within {self.timeout:g} s",
                hint=f"check the broker, or raise the {OPTION_FLUSH_TIMEOUT} option")

    def commit(self) -> None:
        """Commit the Kafka transaction (transactional mode); otherwise nothing to do."""
        if self.transactional:
            with map_kafka_errors("commit Kafka transaction"):
                self.producer.commit_transaction(self.timeout)

    def abort(self) -> None:
        """Abort the Kafka transaction after a failure; best effort (the task fails anyway)."""
        if self.transactional:
            try:
                self.producer.abort_transaction(min(self.timeout, 30.0))
            except Exception as exc:  # noqa: BLE001 - the original failure is what matters
                log.warning("could not abort Kafka transaction: %s", exc)


@dataclass
class KmqCommitMessage(WriterCommitMessage):
    """What one write task did, sent back to the driver's ``commit``/``abort``.

    Attributes:
        scope (str): ``stream/<query id>/<batch id>`` or ``batch/<write id>``.
        partition (int): Spark partition id.
        rows (int): rows (messages) written.
        records (int): message copies produced (rows x queues of the format name).
        acknowledgments (int): ACK_REACH_QUEUE messages posted to admin queues.
        journal_copies (int): copies written to the machine journal (PROPID_M_JOURNAL JOURNAL).
    """

    scope: str
    partition: int
    rows: int = 0
    records: int = 0
    acknowledgments: int = 0
    journal_copies: int = 0


class _PartitionWriter:
    """Turns one task's rows into records: stamp, copy per queue, side outputs, flush."""

    def __init__(self, plan: _WritePlan, scope: _TaskScope):
        self.plan = plan
        self.scope = scope
        self.summary = KmqCommitMessage(scope.key, scope.partition)
        self.machine_guid = uuid.UUID(plan.resolution.queue_manager_guid)
        self.pending_acks: list[Message] = []

    def run(self, rows: Iterator[Any]) -> KmqCommitMessage:
        """Write every row; on any failure abort the transaction (if any) and re-raise."""
        plan = self.plan
        output = _RecordOutput(plan.resolution, self.scope.transactional_id
                               if plan.transactional else None, plan.flush_timeout)
        try:
            for index, row in enumerate(rows):
                self._write_row(output, index, dict(zip(plan.fields, row, strict=True)))
            output.flush()
            # Arrival ACKs follow the arrival they report (MSMQ posts them on delivery).
            for sent in self.pending_acks:
                self._acknowledge(output, sent)
            output.flush()
            output.commit()
        except BaseException:
            output.abort()
            raise
        return self.summary

    def _write_row(self, output: _RecordOutput, index: int, row: Mapping[str, Any]) -> None:
        plan = self.plan
        targets = plan.resolution.targets
        try:
            message_key = _message_key(row)
            message = message_from_row(row, plan.defaults, plan.body_column_type)
            # As MessageQueue.send: one id for every copy; the QM stamps time, source, name.
            sent = stamp_sent(message, self.scope.message_id(index, message_key),
                              dt.datetime.now(dt.UTC), self.machine_guid,
                              plan.resolution.format_name)
            # The queue count was checked on the driver; the bytes per row only here.
            check_fan_out((sent,), len(targets), plan.resolution.format_name,
                          max_queues=len(targets), max_bytes=plan.max_send_bytes)
        except InvalidParameter as exc:
            raise InvalidParameter(f"{self.scope.where(index)}: {exc.message}",
                                   hint=exc.hint) from exc
        self._require_checked_admin_queue(sent, index)
        copies = SendCopies(sent, len(targets))
        for target in targets:
            copy = copies.copy(target.format_name)
            output.send(target.data_topic, copies.record(copy, secure_message(copy, target)))
        self.summary.rows += 1
        self.summary.records += len(targets)
        journal_copy = source_journal_copy(sent)
        if journal_copy is not None:
            self._source_journal(output, journal_copy)
        if sent.admin_queue and sent.acknowledge & Acknowledgment.POSITIVE_ARRIVAL:
            self.pending_acks.append(dataclasses.replace(sent, body=b""))

    def _require_checked_admin_queue(self, sent: Message, index: int) -> None:
        """Refuse a message that asks for acknowledgments on an admin queue whose
        WRITE_MESSAGE the driver did not check: the facade refuses a send whose admin queue
        the sender may not write, and an executor cannot check rights.

        Raises:
            AccessDenied: naming the row, the admin queue and the principal.
        """
        admin_queue = sent.admin_queue
        if not admin_queue or not sent.acknowledge or admin_queue in self.plan.admin:
            return
        principal = self.plan.resolution.principal
        raise AccessDenied(
            f"{self.scope.where(index)}: admin queue {admin_queue!r} was not checked on the "
            f"driver: a row may ask for acknowledgments only on an admin queue whose "
            f"WRITE_MESSAGE the driver checked for {principal!r}; nothing of this row was "
            "written", queue=admin_queue,
            hint="declare it in admin_queues=[...] (or give it as the admin_queue default)")

    def _source_journal(self, output: _RecordOutput, copy: Message) -> None:
        """Write ``copy`` (:func:`facade.queues.sending.source_journal_copy`) to the driver queue
        manager's machine journal, as the facade's source journaling does."""
        topic = system_topics(self.plan.resolution.queue_manager, SystemQueue.JOURNAL).data
        output.send(topic, encode_message(copy))
        self.summary.journal_copies += 1

    def _acknowledge(self, output: _RecordOutput, sent: Message) -> None:
        """Post ACK_REACH_QUEUE for each copy of ``sent`` to its admin queue (resolved and
        checked on the driver: :meth:`_require_checked_admin_queue`)."""
        admin_queue = sent.admin_queue
        assert admin_queue  # only messages with an admin queue are pending
        admin = self.plan.admin[admin_queue]
        targets = self.plan.resolution.targets
        sent_id = sent.id
        if sent_id is None:  # stamped before it was written: a bug if not
            raise InvalidParameter("a sent message has no id: it cannot be acknowledged")
        for index, target in enumerate(targets):
            guid = uuid.UUID(target.queue_guid) if target.queue_guid else None
            ack = acknowledgment(sent, MessageClass.ACK_REACH_QUEUE, target.format_name, guid)
            assert ack is not None  # _write_row checked that it was asked for
            copies = stamp_acknowledgment(
                # Deterministic like the message's own id, so a replayed ACK is a duplicate.
                ack, _ack_id(sent_id, index), dt.datetime.now(dt.UTC), self.machine_guid,
                admin_queue, (admin_target.format_name for admin_target in admin.targets))
            for admin_target, copy in zip(admin.targets, copies, strict=True):
                output.send(admin_target.data_topic, encode_message(copy))
            self.summary.acknowledgments += 1


# --------------------------------------------------------------------------------------------
# The data-source writers
# --------------------------------------------------------------------------------------------


def _log_totals(what: str, messages: list[Any]) -> None:
    done = [m for m in messages if isinstance(m, KmqCommitMessage)]
    log.info("%s: %d rows, %d copies, %d ACKs, %d journal copies", what,
             sum(m.rows for m in done), sum(m.records for m in done),
             sum(m.acknowledgments for m in done), sum(m.journal_copies for m in done))


class KmqBatchWriter(DataSourceWriter):
    """``df.write.format("kmq")``: one message per row, ids keyed by the write id.

    Built on the driver at planning, where the rights are checked again
    (:func:`require_write_rights`), and pickled to the tasks. ``write`` runs once per partition
    on an executor; ``commit``/``abort`` on the driver.

    Args:
        options (dict[str, str]): writer options (see :func:`writer_options`).
        schema (StructType): the DataFrame's schema.

    Raises:
        InvalidParameter: missing ``kmq.resolution`` option, unknown columns, missing body.
        AccessDenied: the principal may not write to a queue or admin queue now.
    """

    def __init__(self, options: dict[str, str], schema: Any):
        self.plan = _WritePlan.from_options(options, schema, batch=True)
        require_write_rights(self.plan.resolution, self.plan.admin)

    def write(self, iterator: Iterator[Any]) -> KmqCommitMessage:
        """Send this partition's rows; returns once the broker acknowledged every record.

        Raises:
            InvalidParameter: a row's value is invalid (names the row and partition).
            BrokerUnavailable, MessageQueueError: records not acknowledged or refused; Spark
                retries the task, whose records get the same ids (duplicates are dropped).
        """
        assert self.plan.write_id is not None
        return _PartitionWriter(self.plan, _batch_scope(self.plan.write_id)).run(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded: log the totals (nothing else to commit: records are stored)."""
        _log_totals(f"kmq batch write {self.plan.write_id}", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed for good. Records of the tasks that succeeded stay in the queues.

        Re-running the job with the same ``write_id`` (and the same input) sends them again
        with the same ids, which receivers drop; otherwise they stay delivered.
        """
        log.warning("kmq batch write %s aborted: messages of the %d finished partitions stay "
                    "delivered; re-run with write_id=%r to complete it without duplicates",
                    self.plan.write_id, sum(m is not None for m in messages), self.plan.write_id)


class KmqStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("kmq")``: exactly-once per micro-batch through deterministic ids.

    The ids of a micro-batch depend only on the query id (kept in the checkpoint), the batch id,
    the partition and the row's position, so a batch replayed after a failure resends the same
    ids and receivers drop the copies (see :mod:`spark_connector.sink`).

    Spark builds it on the driver when the query starts and again for each micro-batch's
    commit or abort; each time the rights are checked again (:func:`require_write_rights`), so
    a revoked right fails the query at the end of the micro-batch in progress.

    Args:
        options (dict[str, str]): writer options (see :func:`writer_options`).
        schema (StructType): the streaming DataFrame's schema.

    Raises:
        InvalidParameter: missing ``kmq.resolution`` option, unknown columns, missing body.
        AccessDenied: the principal may not write to a queue or admin queue now.
    """

    def __init__(self, options: dict[str, str], schema: Any):
        self.plan = _WritePlan.from_options(options, schema, batch=False)
        require_write_rights(self.plan.resolution, self.plan.admin)

    def write(self, iterator: Iterator[Any]) -> KmqCommitMessage:
        """Send this partition's rows of the current micro-batch (see KmqBatchWriter.write)."""
        return _PartitionWriter(self.plan, _stream_scope()).run(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The micro-batch is complete: log its totals. Spark then records it in the commit log."""
        _log_totals(f"kmq micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The micro-batch failed. Records already produced stay in the queues.

        When the query restarts from its checkpoint, Spark replays the batch and its records
        come again with the same ids: receivers drop them. A batch that is never replayed (the
        checkpoint is deleted, the query never restarted) leaves what it produced delivered,
        and a new query sending the same input again duplicates it: at-least-once in that
        corner. ``transactional`` narrows it to whole partitions: a failed task's records stay
        invisible to read_committed readers (Kafka hides aborted transactions), but partitions
        that committed stay visible.
        """
        log.warning("kmq micro-batch %d aborted after %d of %d partitions: their messages are "
                    "delivered; the replay of this batch resends them with the same ids",
                    batchId, sum(m is not None for m in messages), len(messages))


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def writer_options(schema: Any, format_name: str, *, config: KmqConfig | None = None,
                   bootstrap_servers: str | None = None, queue_manager: str | None = None,
                   transactional: bool = False, write_id: str | None = None,
                   flush_timeout: float = DEFAULT_FLUSH_TIMEOUT,
                   admin_queues: Iterable[str] = (), **message_defaults: Any) -> dict[str, str]:
    """Resolve ``format_name`` on the driver, check the driver's principal's rights and build
    the ``format("kmq")`` writer options.

    Args:
        schema (StructType): the DataFrame's schema, checked here.
        format_name (str): where to send: a path name, a queue format name, ``PUBLIC=``,
            ``DL=``, or a multiple-element format name (all resolved now, through the directory
            for public queues and distribution lists).
        config (KmqConfig | None): default :meth:`KmqConfig.load` (``KMQ_HOME``, kmq.toml,
            ``KMQ_PRINCIPAL``).
        bootstrap_servers (str | None), queue_manager (str | None): configuration overrides;
            the queue manager stamps PROPID_M_SRC_MACHINE_ID and owns the machine journal.
        transactional (bool): produce each task's records in one Kafka transaction.
        write_id (str | None): batch writes only: the key of the message ids; re-running a failed
            batch job with the same write id and input resends the same ids (no duplicates).
        flush_timeout (float): seconds a task waits for acknowledgments before failing.
        admin_queues (Iterable[str]): admin queues that rows (an ``admin_queue`` column) may
            ask acknowledgments on, beside the ``admin_queue`` default: each is resolved and
            checked now, and gets arrival ACKs (PROPID_M_ADMIN_QUEUE).
        **message_defaults: values for missing columns and nulls (see :data:`MESSAGE_COLUMNS`).

    Returns:
        dict[str, str]: options for ``df.write.format("kmq")`` / ``writeStream``.

    Raises:
        AccessDenied: the driver's principal lacks WRITE_MESSAGE on a queue ``format_name``
            reaches (or Send To on a ``DL=`` or ``PUBLIC=`` name), or on a queue of an admin
            queue that messages may ask acknowledgments on (the ``admin_queue`` default when
            ``acknowledge`` is a column or a non-zero default, and every ``admin_queues``
            entry); the message names the queue, the right and the principal. Nothing is
            written.
        InvalidParameter: schema or defaults invalid (names the column or default), or
            ``format_name`` reaches more queues than the queue manager's ``max_send_fanout``.
            A row is one send: a row whose body times the queues exceeds ``max_send_bytes``
            fails its task (:func:`facade.queues.sending.check_fan_out`).
        FormatNameError, QueueNotFound, UnsupportedFormatNameOperation,
        DirectoryUnavailable, BrokerUnavailable: as :func:`spark_connector.resolve.resolve`
            (for the format name and for the admin queues).
    """
    check_schema(schema)
    defaults = normalize_defaults(message_defaults)
    overrides: dict[str, Any] = {key: value for key, value in (
        ("bootstrap_servers", bootstrap_servers),
        ("queue_manager", queue_manager)) if value}
    if config is None:
        config = KmqConfig.load(**overrides)
    elif overrides:
        config = dataclasses.replace(config, **overrides)
    with QueueManager.open(config, lease_ids=False) as manager:
        resolution = resolve_with(manager, format_name, Operation.SEND)
        check_fan_out((), len(resolution.targets), format_name,
                      max_queues=config.max_send_fanout, max_bytes=config.max_send_bytes)
        admin = {name: json.loads(resolve_with(manager, name, Operation.ACKNOWLEDGE).to_json())
                 for name in _admin_queues(defaults, schema, admin_queues)}
    options = {
        OPTION_RESOLUTION: resolution.to_json(),
        OPTION_DEFAULTS: _defaults_to_json(defaults),
        OPTION_ADMIN: json.dumps(admin),
        OPTION_TRANSACTIONAL: "true" if transactional else "false",
        OPTION_FLUSH_TIMEOUT: str(float(flush_timeout)),
        OPTION_MAX_SEND_BYTES: str(config.max_send_bytes),
    }
    if write_id:
        options[OPTION_WRITE_ID] = write_id
    return options


def _admin_queues(defaults: Mapping[str, Any], schema: Any,
                  declared: Iterable[str]) -> list[str]:
    """The admin queues the write's messages may ask acknowledgments on, to resolve and check
    on the driver: the declared ones, and the ``admin_queue`` default when a message may ask
    (an ``acknowledge`` column, or a non-zero default), as the facade checks a send's admin
    queue only for messages that ask."""
    if isinstance(declared, str):
        raise InvalidParameter("admin_queues must be a list of format names, not one string",
                               hint=f"admin_queues=[{declared!r}]")
    names = [str(name) for name in declared]
    default = defaults.get("admin_queue")
    may_ask = "acknowledge" in schema.fieldNames() or int(defaults.get("acknowledge", 0))
    if default and may_ask:
        names.insert(0, default)
    return list(dict.fromkeys(names))


def require_write_rights(resolution: Resolution, admin: Mapping[str, Resolution]) -> None:
    """Check again, on the driver, what :func:`writer_options` checked: WRITE_MESSAGE for the
    resolution's principal on every destination queue and on every queue of each admin queue.

    Args:
        resolution (Resolution): the write's destinations (``kmq.resolution``).
        admin (Mapping[str, Resolution]): the admin queues checked for the rows, by name.

    Raises:
        AccessDenied: a queue refuses the principal now (MQ_ERROR_ACCESS_DENIED naming the
            queue, the right and the principal).
        QueueNotFound: a queue was deleted or recreated since the options were made.
        BrokerUnavailable: the queue manager could not be opened.
    """
    with DriverQueues(resolution) as queues:
        queues.require(Operation.SEND)
        for admin_resolution in admin.values():
            queues.require(Operation.ACKNOWLEDGE, admin_resolution)
