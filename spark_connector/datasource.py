"""The ``kmq`` Python data source: Kafka-source columns in, kmq messages out.

Registered as ``format("kmq")`` (:func:`register`). Reading yields exactly the columns of Spark's
own Kafka source (:data:`spark_connector.schema.KAFKA_SOURCE_SCHEMA`), so the same decoder
serves both paths; writing takes rows of messages and produces kmq envelopes.

Planning runs on the driver and ``read``/``write`` on executors, which share no state: the
options carry everything (the resolved queues as JSON), and Kafka clients are opened inside
``read`` and ``write``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from spark_connector.schema import KAFKA_SOURCE_SCHEMA

__all__ = ["KmqDataSource", "register"]


class KmqDataSource(DataSource):
    """``format("kmq")``: batch and streaming reads and writes of kmq queues."""

    @classmethod
    def name(cls) -> str:
        """The format name Spark knows it by: ``kmq``."""
        return "kmq"

    def schema(self) -> StructType:
        """Reads always have Spark's Kafka-source schema."""
        return KAFKA_SOURCE_SCHEMA

    def reader(self, schema: StructType) -> Any:
        """Batch reader (``spark.read.format("kmq")``)."""
        from spark_connector.source import KmqBatchReader

        return KmqBatchReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> Any:  # noqa: N802 - PySpark's hook name
        """Streaming reader (``spark.readStream.format("kmq")``)."""
        from spark_connector.source import KmqStreamReader

        return KmqStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        """Batch writer (``df.write.format("kmq")``)."""
        from spark_connector.sink import KmqBatchWriter

        return KmqBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:  # noqa: N802
        """Streaming writer (``df.writeStream.format("kmq")``)."""
        from spark_connector.sink import KmqStreamWriter

        return KmqStreamWriter(dict(self.options), schema)


def register(spark: Any) -> None:
    """Register ``format("kmq")`` with ``spark`` (idempotent)."""
    spark.dataSource.register(KmqDataSource)
