"""Decoding kmq envelopes in Spark: Kafka-source rows in, one row per message out.

:func:`decode_messages` takes any DataFrame with the columns of Spark's Kafka source
(:data:`~spark_connector.schema.KAFKA_SOURCE_SCHEMA`: from ``format("kafka")`` with
``includeHeaders=true``, from kmq's ``format("kmq")``, or a user's own Kafka read; only
``value``, ``topic``, ``partition``, ``offset`` and ``timestamp`` are used) and returns
:data:`~spark_connector.schema.MESSAGE_SCHEMA`. Decoding runs in ``mapInArrow`` on the
executors, one :func:`facade.model.envelope.decode_message` per record; the record headers are not read
because the envelope is authoritative.

Poison records (values that are not kmq envelopes) never disappear silently; ``on_error`` says
what happens to them:

* ``"column"`` (default): the row is kept with ``error`` (the reason) and ``raw_value`` (the
  record value) set and every envelope column null.
* ``"dead_letter"``: the record is written to the dead-letter queue of the job's queue manager
  as the facade does (:meth:`facade.manager.QueueManager.poison_message`: the raw value as body,
  class NACK_RECEIVE_REJECTED, properties ``kmq.reason`` and ``kmq.source``) and the row is
  dropped. The copy's message id is derived from topic, partition and offset, so a retried task
  writes a duplicate that queue views ignore, not a second message. The task fails if the
  dead-letter write is not acknowledged.
* ``"fail"``: the task fails with an :class:`facade.errors.EnvelopeError` naming topic,
  partition and offset (Spark retries the task, then fails the job).

The row-level work (:func:`decode_batch`) is plain pyarrow and is unit-tested without Spark.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from facade.model.envelope import decode_acknowledgment, decode_message, encode_message
from facade.errors import EnvelopeError, InvalidParameter
from facade.model.formatnames import SystemQueue
from facade.model.message import Message, MessageClass, MessageId
from facade.model.topics import system_topics
from facade.model.propertyspec import compile_function
from spark_connector.schema import ACK_COLUMNS, MESSAGE_SCHEMA, property_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_connector.resolve import Resolution

__all__ = [
    "ON_ERROR_CHOICES",
    "DeadLetterTarget",
    "PoisonSink",
    "decode_batch",
    "decode_messages",
    "poison_copy",
]

#: Accepted values of ``on_error``.
ON_ERROR_CHOICES = ("column", "dead_letter", "fail")
#: Internal choice: drop poison rows without writing them anywhere (receive mode, where the
#: removal at commit dead-letters them through the facade; see spark_connector.source).
_DROP = "drop"

#: Namespace of the synthetic queue-manager GUIDs in dead-letter copies' message ids.
_POISON_ID_NAMESPACE = uuid.UUID("6f6b6d71-2d70-6f69-736f-6e2d7265636f")
_UINT32 = 0xFFFFFFFF
_UTC = dt.timezone.utc
_TIMESTAMP = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class DeadLetterTarget:
    """Where ``on_error="dead_letter"`` writes poison records: a queue manager's dead-letter
    queue (MSMQ's per-machine DEADLETTER system queue). Plain data, shipped to executors.

    Attributes:
        topic (str): the dead-letter queue's data topic.
        bootstrap_servers (str): Kafka ``bootstrap.servers``.
        kafka_options (dict[str, str]): extra librdkafka properties (TLS, SASL).
        queue_manager_guid (str): the queue manager writing the copies
            (PROPID_M_SRC_MACHINE_ID of the copies).
        queues (dict[str, str]): data topic -> queue format name, for the copies'
            ``destination_queue`` and label; topics not listed are named by topic.
    """

    topic: str
    bootstrap_servers: str
    kafka_options: dict[str, str] = field(default_factory=dict)
    queue_manager_guid: str = ""
    queues: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_resolution(cls, resolution: Resolution) -> DeadLetterTarget:
        """The dead-letter queue of the queue manager that resolved ``resolution``.

        Args:
            resolution (Resolution): from :func:`spark_connector.resolve.resolve`.

        Returns:
            DeadLetterTarget: its DEADLETTER queue, naming the resolution's queues.
        """
        return cls(
            topic=system_topics(resolution.queue_manager, SystemQueue.DEADLETTER).data,
            bootstrap_servers=resolution.bootstrap_servers,
            kafka_options=dict(resolution.kafka_options),
            queue_manager_guid=resolution.queue_manager_guid,
            queues={t.data_topic: t.format_name for t in resolution.targets})


def decode_messages(df: DataFrame, *, on_error: str = "column",
                    dead_letter: DeadLetterTarget | Resolution | None = None) -> DataFrame:
    """Decode kmq envelopes in a DataFrame with Spark's Kafka-source schema.

    Works on the output of ``format("kafka")`` (Spark's own Kafka source), of ``format("kmq")``
    and of :func:`spark_connector.read_queue` before decoding, batch or streaming.

    Args:
        df (DataFrame): needs columns ``value`` (binary), ``topic`` (string), ``partition``
            (int), ``offset`` (long) and ``timestamp`` (timestamp); others are ignored.
        on_error (str): ``"column"``, ``"dead_letter"`` or ``"fail"`` (see the module docs).
        dead_letter (DeadLetterTarget | Resolution | None): required with
            ``on_error="dead_letter"``: the queue manager whose dead-letter queue receives the
            poison records (a Resolution means its resolving queue manager).

    Returns:
        DataFrame: :data:`~spark_connector.schema.MESSAGE_SCHEMA`, one row per record (minus
        poison records with ``"dead_letter"``).

    Raises:
        InvalidParameter: an unknown ``on_error``, ``"dead_letter"`` without ``dead_letter``,
            or ``df`` lacks a needed column.
    """
    if on_error not in (*ON_ERROR_CHOICES, _DROP):
        raise InvalidParameter(f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}, "
                               f"got {on_error!r}")
    if on_error == "dead_letter" and dead_letter is None:
        raise InvalidParameter("on_error='dead_letter' needs dead_letter=",
                               hint="pass the Resolution of the queue, or a DeadLetterTarget")
    missing = {"value", "topic", "partition", "offset", "timestamp"} - set(df.columns)
    if missing:
        raise InvalidParameter(f"decode_messages needs Kafka-source columns; missing "
                               f"{', '.join(sorted(missing))}",
                               hint="read with format('kafka') or format('kmq')")
    target = (dead_letter if isinstance(dead_letter, DeadLetterTarget) or dead_letter is None
              else DeadLetterTarget.from_resolution(dead_letter))
    inputs = df.select("value", "topic", "partition", "offset", "timestamp")
    return inputs.mapInArrow(_BatchDecoder(on_error, target if on_error == "dead_letter" else None),
                             MESSAGE_SCHEMA)


class _BatchDecoder:
    """The ``mapInArrow`` function: picklable, opens its dead-letter producer on the executor."""

    def __init__(self, on_error: str, dead_letter: DeadLetterTarget | None):
        self.on_error = on_error
        self.dead_letter = dead_letter

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = _DeadLetterWriter(self.dead_letter) if self.dead_letter else None
        try:
            for batch in batches:
                yield decode_batch(batch, self.on_error, writer.write if writer else None)
            if writer is not None:
                writer.flush()  # the task succeeds only once every copy is acknowledged
        finally:
            if writer is not None:
                writer.close()


#: Signature of the poison sink: (value, topic, partition, offset, reason).
PoisonSink = Callable[[bytes | None, str, int, int, str], None]


def decode_batch(batch: pa.RecordBatch, on_error: str = "column",
                 poison: PoisonSink | None = None) -> pa.RecordBatch:
    """Decode one Arrow batch of Kafka-source rows into message rows (no Spark needed).

    Args:
        batch (pa.RecordBatch): columns ``value``, ``topic``, ``partition``, ``offset``,
            ``timestamp`` (any others are ignored).
        on_error (str): ``"column"``, ``"dead_letter"`` (rows dropped after ``poison`` is
            called), ``"fail"`` or the internal ``"drop"``.
        poison (PoisonSink | None): called with each poison record under ``"dead_letter"``.

    Returns:
        pa.RecordBatch: rows of :data:`~spark_connector.schema.MESSAGE_SCHEMA`.

    Raises:
        EnvelopeError: ``on_error="fail"`` and a record is not a kmq envelope; it names the
            topic, partition and offset.
    """
    values = batch.column("value").to_pylist()
    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()
    rows: list[tuple[Any, ...]] = []
    errors: list[str | None] = []
    raws: list[bytes | None] = []
    keep: list[int] = []
    for i, value in enumerate(values):
        try:
            message = decode_message(value, topic=topics[i], partition=partitions[i],
                                     offset=offsets[i])
        except EnvelopeError as exc:
            if on_error == "fail":
                raise
            if on_error == "dead_letter":
                if poison is None:
                    raise InvalidParameter("on_error='dead_letter' needs a poison sink") from exc
                poison(value, topics[i], partitions[i], offsets[i], exc.message)
            if on_error != "column":
                continue
            rows.append(_NULL_ROW)
            errors.append(exc.message)
            raws.append(value)
        else:
            rows.append(_row(message))
            errors.append(None)
            raws.append(None)
        keep.append(i)
    columns = list(zip(*rows)) if rows else [()] * len(_ENVELOPE_COLUMNS)
    arrays = [pa.array(column, type=_ARROW_TYPES[name])
              for name, column in zip(_ENVELOPE_COLUMNS, columns)]
    record = _record_columns(batch, keep)
    error_array = pa.array(errors, type=pa.string())
    # PROPID_M_ARRIVEDTIME is the record timestamp, as the queue manager sets it on receive.
    arrays[_ARRIVED_INDEX] = pc.if_else(pc.is_null(error_array), record["timestamp"],
                                        pa.scalar(None, type=_TIMESTAMP))
    arrays += [record["topic"], record["partition"], record["offset"], record["timestamp"],
               error_array, pa.array(raws, type=pa.binary())]
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA)


def _record_columns(batch: pa.RecordBatch, keep: list[int]) -> dict[str, pa.Array]:
    """The kept rows' record columns, cast to the output types (the timestamp to UTC)."""
    taken = batch.select(["topic", "partition", "offset", "timestamp"])
    if len(keep) != batch.num_rows:
        taken = taken.take(pa.array(keep, type=pa.int64()))
    return {
        "topic": taken.column("topic").cast(pa.string()),
        "partition": taken.column("partition").cast(pa.int32()),
        "offset": taken.column("offset").cast(pa.int64()),
        # Instants are kept; only the zone label changes (Spark sends the session zone).
        "timestamp": _as_utc(taken.column("timestamp")),
    }


def _as_utc(array: pa.Array) -> pa.Array:
    if array.type.tz is None:  # naive: Spark's Arrow timestamps are UTC instants
        array = array.cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))
    return array.cast(_TIMESTAMP)


# --------------------------------------------------------------------------------------------
# Message -> column values
# --------------------------------------------------------------------------------------------


#: Spark codec (facade.model.propertyspec) -> expression turning the property value ``{v}`` into
#: its column value.
_TO_COLUMN = {
    "plain": "{v}",
    "int": "int({v})",
    "text": "None if {v} is None else str({v})",
    "name": "{v}.name",
    "pairs": "list({v}.items())",
    # Filled from the record timestamp, as the queue manager sets PROPID_M_ARRIVEDTIME.
    "record_timestamp": "None",
    # authenticated: never taken from the wire, and no signature check here.
    "false": "False",
}

#: The property column values of one message, in column order, generated from the
#: declarations: plain attribute reads, because this runs once per record and dominates the
#: decoder's cost after Avro decoding itself.
_property_values = compile_function(
    "property_values", "m",
    "(" + "".join(_TO_COLUMN[column.codec].format(v=f"m.{name}") + ", "
                  for name, column in property_columns()) + ")",
    globals())


def _row(m: Message) -> tuple[Any, ...]:
    """The envelope column values of one message, in :data:`_ENVELOPE_COLUMNS` order."""
    ack = _acknowledgment(m) if m.message_class.is_acknowledgment else None
    if ack is None:
        return cast(tuple[Any, ...], _property_values(m)) + _NO_ACK
    return cast(tuple[Any, ...], _property_values(m)) + (
        str(ack.original_id),
        [q.format_name or f"{{{q.guid}}}" for q in ack.queues],
        ack.reason,
        ack.time,
    )


#: The envelope columns :func:`_row` fills, in order (a prefix of MESSAGE_SCHEMA).
_ENVELOPE_COLUMNS = tuple(name for name, _column in property_columns()) + tuple(
    f.name for f in ACK_COLUMNS)
_NO_ACK = (None,) * len(ACK_COLUMNS)
_NULL_ROW = (None,) * len(_ENVELOPE_COLUMNS)
_ARRIVED_INDEX = _ENVELOPE_COLUMNS.index("arrived_time")


def _acknowledgment(message: Message) -> Any:
    """The acknowledgment payload of an ACK/NACK message, or None.

    A NACK-class message is not always an acknowledgment: dead-letter copies carry the NACK
    class as the reason but keep their own body, so a body that does not decode is no error.
    """
    try:
        return decode_acknowledgment(message.body)
    except EnvelopeError:
        return None


# --------------------------------------------------------------------------------------------
# Arrow types
# --------------------------------------------------------------------------------------------


def _arrow_schema_of(schema: Any) -> pa.Schema:
    """A Spark StructType of flat columns as an Arrow schema (timestamps: microseconds, UTC)."""
    types = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(),
             "binary": pa.binary(), "double": pa.float64(), "boolean": pa.bool_(),
             "timestamp": _TIMESTAMP, "map<string,string>": pa.map_(pa.string(), pa.string()),
             "array<string>": pa.list_(pa.string())}
    return pa.schema([pa.field(f.name, types[f.dataType.simpleString()]) for f in schema.fields])


_ARROW_SCHEMA = _arrow_schema_of(MESSAGE_SCHEMA)
_ARROW_TYPES = {name: _ARROW_SCHEMA.field(name).type for name in _ARROW_SCHEMA.names}


# --------------------------------------------------------------------------------------------
# Dead-lettering poison records from executors
# --------------------------------------------------------------------------------------------


def poison_copy(target: DeadLetterTarget, value: bytes | None, topic: str, partition: int,
                offset: int, reason: str, now: dt.datetime | None = None) -> Message:
    """The dead-letter message for a poison record, as QueueManager.poison_message builds it.

    The id is derived from the record's position (a GUID per topic-partition and the offset),
    so writing it twice yields a duplicate that queue views drop.

    Args:
        target (DeadLetterTarget): the dead-letter queue and queue manager.
        value (bytes | None): the record value, kept unchanged as the body.
        topic (str), partition (int), offset (int): where the record is.
        reason (str): why it is not a kmq envelope (``kmq.reason``).
        now (datetime | None): the sent time; default now (UTC).

    Returns:
        Message: class NACK_RECEIVE_REJECTED, properties ``kmq.reason`` and ``kmq.source``.
    """
    source = target.queues.get(topic)
    machine = uuid.uuid5(_POISON_ID_NAMESPACE, f"{topic}/{partition}")
    return Message(
        id=MessageId(machine, offset & _UINT32), body=value or b"",
        label=f"poison record from {source or topic}"[:250],
        message_class=MessageClass.NACK_RECEIVE_REJECTED,
        sent_time=now or dt.datetime.now(_UTC),
        source_machine_id=uuid.UUID(target.queue_manager_guid) if target.queue_manager_guid else None,
        destination_queue=source,
        properties={"kmq.reason": reason[:1000], "kmq.source": f"{topic}@{partition}:{offset}"})


class _DeadLetterWriter:
    """Produces poison copies to a dead-letter topic from one task (acks=all)."""

    def __init__(self, target: DeadLetterTarget):
        self.target = target
        self._producer: Any = None
        self._failures: list[str] = []

    def write(self, value: bytes | None, topic: str, partition: int, offset: int,
              reason: str) -> None:
        """Queue one poison copy for sending; :meth:`flush` waits for the verdicts."""
        if self._producer is None:
            from facade.kafka.librdkafka import KafkaSession
            from facade.model.message import Delivery

            session = KafkaSession(self.target.bootstrap_servers, self.target.kafka_options,
                                   client_id="kmq-spark-dead-letter")
            self._producer = session.producer(Delivery.RECOVERABLE)
        record = encode_message(poison_copy(self.target, value, topic, partition, offset, reason))
        self._producer.produce(self.target.topic, value=record.value, key=record.key,
                               headers=record.headers, on_delivery=self._delivered)
        self._producer.poll(0)

    def _delivered(self, error: Any, _msg: Any) -> None:
        if error is not None:
            self._failures.append(str(error))

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every copy is acknowledged.

        Raises:
            BrokerUnavailable: copies still unacknowledged after ``timeout`` seconds.
            BrokerError: the broker rejected a copy.
        """
        from facade.errors import BrokerError, BrokerUnavailable

        if self._producer is None:
            return
        if self._producer.flush(timeout):
            raise BrokerUnavailable(f"dead-letter copies to {self.target.topic!r} not "
                                    f"acknowledged within {timeout:g} s")
        if self._failures:
            raise BrokerError(f"dead-letter copies to {self.target.topic!r} failed: "
                              + "; ".join(self._failures[:3]))

    def close(self) -> None:
        """Drop the producer (flush first to know the outcome)."""
        self._producer = None
