"""The training session of :mod:`spark_connector.classarchive`, run as
``python -m spark_connector.classtraining ARCHIVE``: a local session whose JVM records the
classes it loads into ``ARCHIVE`` when it exits, running queries of the kinds kmq runs (a
batch query with a shuffle and an Arrow Python UDF, a streaming query into a memory table).
It prints the JVM's process id last: the JVM writes the archive after this process exits.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_connector.classarchive import BUILD_TIMEOUT, recording_options
from spark_connector.session import local_session


def _doubled(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
    for batch in batches:
        yield pc.multiply(batch, 2)


def train(recorded: Path) -> int:
    """Run the training queries; the JVM's process id (it records the archive as it exits,
    when this interpreter does)."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import arrow_udf
    from pyspark.sql.types import LongType

    options = {"spark.driver.extraJavaOptions": " ".join(recording_options(recorded))}
    spark = local_session("kmq-class-archive", cores=2, connectors=True, **options)
    udf = arrow_udf(_doubled, LongType()).asNondeterministic()  # type: ignore[call-overload]
    with tempfile.TemporaryDirectory() as work:
        frame = spark.range(0, 10000).select(F.col("id"), (F.col("id") % 8).alias("priority"))
        frame.select(udf(F.col("id")).alias("x"), "priority").groupBy("priority").count().collect()
        frame.write.json(f"{work}/input")
        stream = spark.readStream.schema(frame.schema).json(f"{work}/input")
        query = (stream.groupBy("priority").count().writeStream.format("memory")
                 .queryName("kmq_class_archive").outputMode("complete")
                 .option("checkpointLocation", f"{work}/checkpoint")
                 .trigger(availableNow=True).start())
        if not query.awaitTermination(BUILD_TIMEOUT):
            raise RuntimeError(f"the training query did not finish within {BUILD_TIMEOUT:g} s")
        spark.table("kmq_class_archive").collect()
        pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        spark.stop()
    return pid


if __name__ == "__main__":
    print(train(Path(sys.argv[1])))
