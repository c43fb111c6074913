"""The demo's report as a Spark Structured Streaming job over the run's queues.

One streaming query reads every source of :class:`~facade.demo.report.ReportSources` (the
queues' journals, the dead-letter queue, the admin queue) through one
``spark_connector.read_queue`` of the list of their format names, on Spark's own Kafka source
(``path="kafka"``: the envelopes are decoded on the JVM by spark-avro's ``from_avro``;
``local_session`` puts both jars on ``spark.jars``), labels each row with a ``source`` column
from its topic, and runs once with
``trigger(availableNow=True)`` into an in-memory table. Batch aggregations over that table give
the report's figures (:class:`SparkFigures`): messages per queue and class, top senders,
acknowledgment classes and latencies (sent time to the journal copy's record time, i.e. to the
receive), for the throughput run (backlog) and for the paced run (the probe queue's journal).
:func:`facade.demo.report.spark_report` turns them into the report; this module does not import
the report module (no import cycle).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["SparkFigures", "run_report_job"]

log = logging.getLogger(__name__)

#: The changelog maintainer, a message property the demo sets.
_SENDER_PROPERTY = "debian.maintainer"


#: Seconds the report's streaming query may run: a wide margin over what the whole corpus takes
#: on a loaded 2-core machine (docs/performance.md).
REPORT_TIMEOUT = 1800.0


#: JVM options of the report's Spark session: HotSpot's C1 compiler alone (no C2). The report
#: is a short job over some 40,000 rows: C2's compilations would cost more CPU than its faster
#: code saves on a 2-core machine (the whole corpus: 16.0-17.0 s against 19.8-22.1 s,
#: docs/performance.md). Long reads keep the default tiered compilation.
REPORT_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


#: Seconds one aggregation of the in-memory table may take before its Spark job is cancelled
#: and run again. They take seconds; but once (2026-11-26, a quiet machine) a collect waited
#: forever on a job with no task left running, which would hang the demo and CI with it.
COLLECT_TIMEOUT = 300.0
#: Runs of one aggregation before the report gives up.
COLLECT_ATTEMPTS = 2


class _Sources(Protocol):
    """What the job reads from :class:`~facade.demo.report.ReportSources`."""

    @property
    def config(self) -> Any:
        """The run's KmqConfig."""
        ...

    @property
    def report_dir(self) -> Path:
        """Where the report's files (and the job's checkpoint) go."""
        ...

    @property
    def all_queues(self) -> Mapping[str, str]:
        """Source label -> format name."""
        ...


@dataclass
class SparkFigures:
    """The aggregations of one report job (see :class:`~facade.demo.report.Report`).

    Attributes:
        queue_classes (list[dict]): ``{"queue", "class", "count"}`` rows.
        top_senders (list[dict]): ``{"sender", "messages"}``, most first.
        acknowledgments (dict[str, int]): admin-queue messages per class.
        latencies (list[float]): milliseconds from sent time to the journal copy (the receive),
            of the throughput run (backlog).
        paced_latencies (list[float]): the same for the paced run's probe queue.
    """

    queue_classes: list[dict[str, Any]]
    top_senders: list[dict[str, Any]]
    acknowledgments: dict[str, int]
    latencies: list[float]
    paced_latencies: list[float]


def run_report_job(sources: _Sources, *, top_senders: int, probe_source: str,
                   timeout: float = REPORT_TIMEOUT) -> SparkFigures:
    """Run the report's streaming query and aggregate its output.

    Args:
        sources (ReportSources): what to read, and the configuration to resolve it with.
        top_senders (int): how many senders to rank.
        probe_source (str): the source label of the paced run's probe journal.
        timeout (float): seconds the streaming query may run.

    Returns:
        SparkFigures: the aggregations.

    Raises:
        RuntimeError: the query did not finish within ``timeout``, or failed (its exception is
            chained).
    """
    from pyspark.sql import SparkSession

    from spark_connector import local_session

    owned = SparkSession.getActiveSession() is None  # stop only a session this job started
    settings: dict[str, Any] = {"spark.driver.extraJavaOptions": REPORT_JAVA_OPTIONS}
    spark = local_session("kmq-demo-report", **settings)
    try:
        table = _stream_into_memory(spark, sources, timeout)
        rows = spark.table(table)
        # Three Spark jobs: each costs about a second beyond its work on this table.
        counted = _collect(rows.groupBy("source", "message_class").count(),
                           "messages per class")
        latencies, paced_latencies = _latencies(rows, probe_source)
        return SparkFigures(queue_classes=_queue_classes(counted),
                            top_senders=_top_senders(rows, top_senders, probe_source),
                            acknowledgments=_acknowledgments(counted),
                            latencies=latencies, paced_latencies=paced_latencies)
    finally:
        if owned:
            spark.stop()


def _stream_into_memory(spark: Any, sources: _Sources, timeout: float) -> str:
    """Run one query over every source once (availableNow) into a memory table; its name."""
    from pyspark.sql import functions as F

    from spark_connector import read_queue

    config = sources.config
    labels = _topic_labels(config, sources.all_queues)
    # One source over every queue rather than a union of one per queue: each branch of a
    # union is a stage of its own, whose generated code Spark compiles again.
    stream = read_queue(spark, list(sources.all_queues.values()), streaming=True,
                        path="kafka", config=config)
    by_topic = F.create_map(*[F.lit(x) for pair in labels.items() for x in pair])
    # Only what the aggregations read: the memory table lives in the driver's heap, and every
    # aggregation serializes it into its tasks: with every column, bodies included, the whole
    # corpus ran the driver (1 GB heap by default) out of memory.
    labelled = stream.select(
        by_topic[F.col("topic")].alias("source"), "message_class", "id", "sent_time",
        "timestamp", F.col("properties").getItem(_SENDER_PROPERTY).alias("sender"))
    table = f"kmq_demo_{uuid.uuid4().hex[:8]}"
    query = (labelled.writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(sources.report_dir / "spark-checkpoint" / table))
             .trigger(availableNow=True).start())
    if not query.awaitTermination(timeout):
        query.stop()
        raise RuntimeError(f"the report's streaming query did not finish within {timeout:g} s")
    if query.exception() is not None:
        raise RuntimeError(f"the report's streaming query failed: {query.exception()}")
    return table


def _topic_labels(config: Any, queues: Mapping[str, str]) -> dict[str, str]:
    """Data topic -> source label of each queue a report reads (``queues``: label -> format
    name), resolved as ``read_queue`` resolves them."""
    from facade.manager import QueueManager
    from spark_connector.resolve import Operation, resolve_with

    labels: dict[str, str] = {}
    with QueueManager.open(config, lease_ids=False) as manager:
        for label, format_name in queues.items():
            for topic in resolve_with(manager, format_name, Operation.PEEK).topics:
                labels[topic] = label
    return labels


def _collect(frame: Any, what: str, timeout: float | None = None) -> list[Any]:
    """``frame.collect()`` under a watchdog: a Spark job that has not finished within
    ``timeout`` seconds is cancelled (by its job tag) and run again, up to
    :data:`COLLECT_ATTEMPTS` times.

    Args:
        frame (pyspark.sql.DataFrame): the aggregation to run.
        what (str): names it in the log and the error.
        timeout (float | None): seconds per run; None: :data:`COLLECT_TIMEOUT`.

    Returns:
        list[pyspark.sql.Row]: the rows.

    Raises:
        RuntimeError: no run finished in time (the last cancellation is chained).
        Exception: a run failed for another reason (Spark's error, unchanged).
    """
    limit = COLLECT_TIMEOUT if timeout is None else timeout
    context = frame.sparkSession.sparkContext
    for attempt in range(1, COLLECT_ATTEMPTS + 1):
        tag = f"kmq-demo-report-{uuid.uuid4().hex[:12]}"
        cancelled = threading.Event()

        def cancel(tag: str = tag, cancelled: threading.Event = cancelled) -> None:
            cancelled.set()
            context.cancelJobsWithTag(tag)

        watchdog = threading.Timer(limit, cancel)
        watchdog.daemon = True
        context.addJobTag(tag)
        watchdog.start()
        try:
            return list(frame.collect())
        except Exception as exc:
            if not cancelled.is_set():
                raise
            if attempt == COLLECT_ATTEMPTS:
                raise RuntimeError(
                    f"the report's Spark job for {what} did not finish within {limit:g} s, "
                    f"{COLLECT_ATTEMPTS} times (Spark lost track of its tasks, or the machine is "
                    "overloaded); run `kmq demo` again") from exc
            log.warning("the report's Spark job for %s did not finish within %g s: cancelled, "
                        "running it again", what, limit)
        finally:
            watchdog.cancel()
            context.removeJobTag(tag)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _queue_classes(counted: list[Any]) -> list[dict[str, Any]]:
    """``{"queue", "class", "count"}`` from the (source, message_class, count) rows."""
    # A journal counts as its queue: it holds that queue's received messages.
    result = [{"queue": r["source"].split(";")[0], "class": r["message_class"] or "POISON",
               "count": r["count"]} for r in counted]
    return sorted(result, key=lambda r: (r["queue"], r["class"]))


def _top_senders(rows: Any, limit: int, probe_source: str) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    # The paced run resends corpus entries: its copies would count their senders twice.
    journals = rows.where(F.col("source").endswith(";journal")
                          & (F.col("source") != probe_source))
    senders = (journals.select("sender", "id").where(F.col("sender").isNotNull())
               .groupBy("sender").agg(F.countDistinct("id").alias("messages"))
               .orderBy(F.desc("messages"), "sender").limit(limit))
    senders = _collect(senders, "top senders")
    return [{"sender": r["sender"], "messages": r["messages"]} for r in senders]


def _acknowledgments(counted: list[Any]) -> dict[str, int]:
    """The admin queue's messages per class, from the (source, message_class, count) rows."""
    return dict(sorted((r["message_class"], r["count"]) for r in counted
                       if r["source"] == "admin"))


def _latencies(rows: Any, probe_source: str) -> tuple[list[float], list[float]]:
    """Send to journal-copy time, ms: of every queue but the paced run's probe queue, and of
    the probe queue."""
    from pyspark.sql import functions as F

    journals = rows.where(F.col("source").endswith(";journal") & F.col("sent_time").isNotNull())
    millis = (F.col("timestamp").cast("double") - F.col("sent_time").cast("double")) * 1000.0
    measured = _collect(journals.select(millis.alias("ms"),
                                        (F.col("source") == probe_source).alias("paced")),
                        "latencies")
    return ([r["ms"] for r in measured if not r["paced"]],
            [r["ms"] for r in measured if r["paced"]])
