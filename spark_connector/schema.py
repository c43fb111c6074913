"""Column layouts: Spark's Kafka-source schema, and kmq's decoded message columns."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from facade.model.message import Message
from facade.model.propertyspec import SparkColumn, specs

__all__ = [
    "ACK_COLUMNS",
    "KAFKA_SOURCE_SCHEMA",
    "MESSAGE_SCHEMA",
    "RECORD_COLUMNS",
    "property_columns",
]

#: Exactly the columns of Spark's ``format("kafka")`` source (with ``includeHeaders=true``).
KAFKA_SOURCE_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()),
        StructField("value", BinaryType()),
    ]))),
])

#: The decoded message columns :func:`spark_connector.decode.decode_messages` produces, in order.
#: The envelope columns come from the property declarations (``spark=`` in
#: :class:`facade.model.message.Message`), in their declared positions.
#:
#: Envelope columns (null on a row whose record could not be decoded):
#:
#: * ``id``, ``correlation_id``: PROPID_M_MSGID / PROPID_M_CORRELATIONID as ``guid\seq`` text.
#: * ``label``, ``priority`` (0-7), ``message_class`` (MessageClass name, e.g. ``NORMAL``,
#:   ``ACK_REACH_QUEUE``, ``NACK_RECEIVE_TIMEOUT``), ``body`` (bytes), ``body_type`` (VARTYPE),
#:   ``app_specific``, ``extension``.
#: * ``sent_time``, ``arrived_time`` (= the Kafka record timestamp, as the queue manager sets
#:   PROPID_M_ARRIVEDTIME), ``not_before`` (timed dequeue): timestamps.
#: * ``time_to_reach_queue``, ``time_to_be_received``: seconds (double); null = no limit.
#: * ``source_machine_id`` (sending queue manager GUID), ``destination_queue`` (this copy's
#:   queue), ``destination_format_name`` (what the sender addressed, maybe a DL=),
#:   ``response_queue``, ``admin_queue``, ``dead_letter_queue``: format-name text.
#: * ``delivery`` (``EXPRESS`` | ``RECOVERABLE``), ``acknowledge`` and ``journal`` (MSMQ flag
#:   values), ``transaction_id``, ``first_in_transaction``, ``last_in_transaction``,
#:   ``sender_id``, ``auth_level``, ``privacy_level``, ``authenticated`` (always false: this
#:   path verifies no signatures), ``abort_count``, ``move_count``, ``properties``.
#: * ``ack_original_id``, ``ack_queues`` (format names), ``ack_reason``, ``ack_time``: the
#:   payload of an acknowledgment (ACK/NACK class with a ``kmq.Acknowledgment`` body, as in
#:   admin queues); null otherwise, e.g. for dead-letter copies, which keep their own body.
#:
#: Record columns (always set): ``topic``, ``partition``, ``offset`` (the message's lookup id,
#: PROPID_M_LOOKUPID), ``timestamp``; then ``error`` (why the record is not a valid kmq
#: envelope, null when fine) and ``raw_value`` (the record value, only on error rows).
#: Spark type (``simpleString()``) of a declared column -> the type (flat columns only).
_SPARK_TYPES = {
    "string": StringType(), "int": IntegerType(), "bigint": LongType(), "binary": BinaryType(),
    "double": DoubleType(), "boolean": BooleanType(), "timestamp": TimestampType(),
    "map<string,string>": MapType(StringType(), StringType()),
}


def property_columns() -> list[tuple[str, SparkColumn]]:
    """(property name, its declared Spark column) for every message property shown in
    :data:`MESSAGE_SCHEMA`, in column order (see :mod:`facade.model.propertyspec`)."""
    found = [(f.name, spec.spark) for f, spec in specs(Message) if spec.spark is not None]
    return sorted(found, key=lambda item: item[1].position)


#: The acknowledgment payload columns, after the property columns (not message properties:
#: they are decoded from an ACK/NACK message's body).
ACK_COLUMNS = [
    StructField("ack_original_id", StringType()),
    StructField("ack_queues", ArrayType(StringType())),
    StructField("ack_reason", StringType()),
    StructField("ack_time", TimestampType()),
]

#: The Kafka record columns, after the envelope columns.
RECORD_COLUMNS = [
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("error", StringType()),
    StructField("raw_value", BinaryType()),
]

MESSAGE_SCHEMA = StructType(
    [StructField(name, _SPARK_TYPES[column.type]) for name, column in property_columns()]
    + ACK_COLUMNS + RECORD_COLUMNS)
