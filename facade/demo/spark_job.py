"""The demo's report as a Spark Structured Streaming job over the run's queues.

One streaming query reads every source of :class:`~facade.demo.report.ReportSources` (the
queues' journals, the dead-letter queue, the admin queue) through
``spark_connector.read_queue``, unions them with a ``source`` column, and runs once with
``trigger(availableNow=True)`` into an in-memory table. Batch aggregations over that table give
the report: messages per queue and class, top senders, acknowledgment classes and latency
percentiles (sent time to the journal copy's record time, i.e. to the receive), for the
throughput run (backlog) and for the paced run (the ``latency-probe`` queue's journal).
"""

from __future__ import annotations

import uuid
from functools import reduce
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from facade.demo.report import Report, ReportSources

__all__ = ["run_report_job"]

#: The changelog maintainer, a message property the demo sets.
_SENDER_PROPERTY = "debian.maintainer"


#: Seconds the report's streaming query may run: on Tansu it took 345 s for the whole corpus on
#: a loaded 2-core machine (long journals read slowly), so leave a wide margin.
REPORT_TIMEOUT = 1800.0


def run_report_job(sources: ReportSources, *, timeout: float = REPORT_TIMEOUT) -> Report:
    """Run the report's streaming query and aggregate its output.

    Args:
        sources (ReportSources): what to read, and the configuration to resolve it with.
        timeout (float): seconds the streaming query may run.

    Returns:
        Report: with ``engine="spark"``.

    Raises:
        RuntimeError: the query did not finish within ``timeout``, or failed (its exception is
            chained).
    """
    from pyspark.sql import SparkSession

    from facade.demo.report import BACKLOG, ENGINE_SPARK, PACED, TOP_SENDERS, Report, percentiles
    from spark_connector import local_session

    owned = SparkSession.getActiveSession() is None  # stop only a session this job started
    spark = local_session("kmq-demo-report")
    try:
        table = _stream_into_memory(spark, sources, timeout)
        rows = spark.table(table)
        return Report(
            engine=ENGINE_SPARK,
            queue_classes=_queue_classes(rows),
            top_senders=_top_senders(rows, TOP_SENDERS),
            acknowledgments=_acknowledgments(rows),
            latency_ms={BACKLOG: percentiles(_latencies(rows, paced=False)),
                        PACED: percentiles(_latencies(rows, paced=True))},
            notes=["computed by a Spark Structured Streaming job (spark_connector.read_queue "
                   "over the journals, the dead-letter queue and the admin queue, "
                   "trigger availableNow)",
                   "latency is sent time to the journal copy's record time (the receive); the "
                   "time a copy reached its queue is not kept in the journal"],
        )
    finally:
        if owned:
            spark.stop()


def _stream_into_memory(spark: Any, sources: ReportSources, timeout: float) -> str:
    """Run the union of every source once (availableNow) into a memory table; its name."""
    from pyspark.sql import functions as F

    from spark_connector import read_queue

    config = sources.config
    streams = [
        read_queue(spark, format_name, streaming=True, config=config).withColumn(
            "source", F.lit(label))
        for label, format_name in sources.all_queues.items()
    ]
    union = reduce(lambda a, b: a.unionByName(b), streams)
    table = f"kmq_demo_{uuid.uuid4().hex[:8]}"
    query = (union.writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(sources.report_dir / "spark-checkpoint" / table))
             .trigger(availableNow=True).start())
    if not query.awaitTermination(timeout):
        query.stop()
        raise RuntimeError(f"the report's streaming query did not finish within {timeout:g} s")
    if query.exception() is not None:
        raise RuntimeError(f"the report's streaming query failed: {query.exception()}")
    return table


def _queue_classes(rows: Any) -> list[dict[str, Any]]:
    counted = rows.groupBy("source", "message_class").count().collect()
    # A journal counts as its queue: it holds that queue's received messages.
    result = [{"queue": r["source"].split(";")[0], "class": r["message_class"] or "POISON",
               "count": r["count"]} for r in counted]
    return sorted(result, key=lambda r: (r["queue"], r["class"]))


def _top_senders(rows: Any, limit: int) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    from facade.demo.report import PROBE_QUEUE

    # The paced run resends corpus entries: its copies would count their senders twice.
    journals = rows.where(F.col("source").endswith(";journal")
                          & (F.col("source") != f"{PROBE_QUEUE};journal"))
    senders = (journals.select(F.col("properties").getItem(_SENDER_PROPERTY).alias("sender"), "id")
               .where(F.col("sender").isNotNull())
               .groupBy("sender").agg(F.countDistinct("id").alias("messages"))
               .orderBy(F.desc("messages"), "sender").limit(limit).collect())
    return [{"sender": r["sender"], "messages": r["messages"]} for r in senders]


def _acknowledgments(rows: Any) -> dict[str, int]:
    from pyspark.sql import functions as F

    counted = rows.where(F.col("source") == "admin").groupBy("message_class").count().collect()
    return dict(sorted((r["message_class"], r["count"]) for r in counted))


def _latencies(rows: Any, *, paced: bool) -> list[float]:
    """Send to journal-copy time, ms: of the paced run's probe queue, or of every other queue."""
    from pyspark.sql import functions as F

    from facade.demo.report import PROBE_QUEUE

    probe = F.col("source") == f"{PROBE_QUEUE};journal"
    journals = rows.where(F.col("source").endswith(";journal") & F.col("sent_time").isNotNull()
                          & (probe if paced else ~probe))
    millis = (F.col("timestamp").cast("double") - F.col("sent_time").cast("double")) * 1000.0
    return [r["ms"] for r in journals.select(millis.alias("ms")).collect()]
