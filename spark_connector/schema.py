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

__all__ = ["KAFKA_SOURCE_SCHEMA", "MESSAGE_SCHEMA"]

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
MESSAGE_SCHEMA = StructType([
    StructField("id", StringType()),
    StructField("correlation_id", StringType()),
    StructField("label", StringType()),
    StructField("priority", IntegerType()),
    StructField("message_class", StringType()),
    StructField("body", BinaryType()),
    StructField("body_type", LongType()),
    StructField("app_specific", LongType()),
    StructField("extension", BinaryType()),
    StructField("sent_time", TimestampType()),
    StructField("arrived_time", TimestampType()),
    StructField("not_before", TimestampType()),
    StructField("time_to_reach_queue", DoubleType()),
    StructField("time_to_be_received", DoubleType()),
    StructField("source_machine_id", StringType()),
    StructField("destination_queue", StringType()),
    StructField("destination_format_name", StringType()),
    StructField("response_queue", StringType()),
    StructField("admin_queue", StringType()),
    StructField("dead_letter_queue", StringType()),
    StructField("delivery", StringType()),
    StructField("acknowledge", IntegerType()),
    StructField("journal", IntegerType()),
    StructField("transaction_id", StringType()),
    StructField("first_in_transaction", BooleanType()),
    StructField("last_in_transaction", BooleanType()),
    StructField("sender_id", BinaryType()),
    StructField("auth_level", IntegerType()),
    StructField("privacy_level", IntegerType()),
    StructField("authenticated", BooleanType()),
    StructField("abort_count", LongType()),
    StructField("move_count", LongType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("ack_original_id", StringType()),
    StructField("ack_queues", ArrayType(StringType())),
    StructField("ack_reason", StringType()),
    StructField("ack_time", TimestampType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("error", StringType()),
    StructField("raw_value", BinaryType()),
])
