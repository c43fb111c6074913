"""Spark connector for kmq queues: batch and Structured Streaming reads and writes.

Reading::

    from spark_connector import read_queue

    df = read_queue(spark, r"DIRECT=OS:qm1\\private$\\orders", streaming=True)
    df.writeStream.option("checkpointLocation", "/chk/orders").toTable("orders")

``read_queue`` resolves the format name on the driver (queues, ``DL=`` lists, multiple-element
names, journals, dead-letter and admin queues) and checks the driver's principal's right on
every queue it reaches (``AccessDenied`` otherwise: :mod:`spark_connector.resolve`), reads with Spark's own Kafka source when it is
on the classpath (envelopes decoded on the JVM by spark-avro's ``from_avro``) or with kmq's
Python data source (``format("kmq")``) otherwise or in receive mode, and returns the decoded
messages (:data:`~spark_connector.schema.MESSAGE_SCHEMA`). :func:`local_session` puts Spark's
Kafka and Avro connectors on ``spark.jars`` (:mod:`spark_connector.jars`). :func:`decode_messages` decodes
any DataFrame with Spark's Kafka-source schema; :func:`kafka_source_options` gives the options
for reading kmq topics with ``format("kafka")`` yourself.

Writing (``write_messages``, ``write_stream``) lives in :mod:`spark_connector.write`, the
writers it plans in :mod:`spark_connector.sink`.
"""

from __future__ import annotations

from spark_connector.datasource import register
from spark_connector.decode import DeadLetterTarget, decode_messages
from spark_connector.read import kafka_source_available, kafka_source_options, read_queue
from spark_connector.resolve import Operation, QueueTarget, Resolution, resolve
from spark_connector.schema import KAFKA_SOURCE_SCHEMA, MESSAGE_SCHEMA
from spark_connector.session import local_session
from spark_connector.write import write_messages, write_stream

__all__ = [
    "KAFKA_SOURCE_SCHEMA",
    "MESSAGE_SCHEMA",
    "DeadLetterTarget",
    "Operation",
    "QueueTarget",
    "Resolution",
    "decode_messages",
    "kafka_source_available",
    "kafka_source_options",
    "local_session",
    "read_queue",
    "register",
    "resolve",
    "write_messages",
    "write_stream",
]
