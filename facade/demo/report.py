"""The demo's report: counts per queue and class, top senders, acknowledgment classes, latency
percentiles, and a PNG chart.

The report comes from a Spark Structured Streaming job over the queues (the
``spark_connector``, :func:`spark_report`). Where pyspark is missing (or with
``KMQ_DEMO_REPORT=python``) :func:`build_report` falls back to :func:`python_report`, which
computes the same :class:`Report` in plain Python from what the demo's own receivers and cursors
observed. The report says which engine made it.

Files written to the report directory: ``report.json`` (the :class:`Report`), ``report.md``
(the same as tables) and ``report.png`` (the chart; needs matplotlib, the ``demo`` extra).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from facade.config import KmqConfig
from facade.demo.ledger import Ledger

__all__ = [
    "Report",
    "ReportSources",
    "SparkReportUnavailable",
    "build_report",
    "make_chart",
    "percentiles",
    "python_report",
    "spark_report",
    "write_report",
]

#: Engine names a report can carry.
ENGINE_SPARK = "spark"
ENGINE_PYTHON = "python (fallback)"
#: Senders listed in the report.
TOP_SENDERS = 10
#: Percentiles reported for each latency.
_PERCENTILES = (50, 90, 99)


class SparkReportUnavailable(Exception):
    """The Spark report cannot run here (not built yet, or pyspark missing); the caller falls
    back to :func:`python_report`."""


@dataclass(frozen=True)
class ReportSources:
    """What a report job reads: the run's queues, by format name, and how to reach them.

    Attributes:
        config (KmqConfig): the run's configuration, with ``bootstrap_servers`` always set
            (also when the demo started its own broker), ``home`` and ``queue_manager``.
        queue_manager (str): the run's queue manager name.
        queues (dict[str, str]): queue name -> format name of each queue that had receivers
            (distribution queues, bugs, security, security-replies); empty at report time:
            everything in them was received.
        journals (dict[str, str]): queue name -> format name of its journal
            (``DIRECT=OS:<qm>\\changes-unstable;JOURNAL``): the received messages of each
            of those queues, each a copy the queue manager wrote when it was received.
        dead_letter (str): ``MACHINE=<guid>;DEADLETTER``: dead-lettered copies (class = reason)
            and the poison record.
        admin (str): the admin queue (``DIRECT=OS:<qm>\\private$\\admin``): ACK/NACK messages;
            each body is an acknowledgment (``facade.envelope.decode_acknowledgment``).
        held (str): the queue whose messages expired (empty at report time).
        report_dir (Path): where the report's files go (exists).
    """

    config: KmqConfig
    queue_manager: str
    queues: dict[str, str]
    journals: dict[str, str]
    dead_letter: str
    admin: str
    held: str
    report_dir: Path

    @property
    def all_queues(self) -> dict[str, str]:
        """What a report reads: the journals (keyed ``<queue>;journal``), ``deadletter``,
        ``admin`` and ``changes-held``."""
        return {**{f"{name};journal": fn for name, fn in self.journals.items()},
                "deadletter": self.dead_letter, "admin": self.admin, "changes-held": self.held}


@dataclass
class Report:
    """The report's content.

    Attributes:
        engine (str): ``spark`` or ``python (fallback)``.
        queue_classes (list[dict]): ``{"queue", "class", "count"}`` rows: messages per queue and
            PROPID_M_CLASS (journals hold the received ones; ``deadletter`` and ``admin`` what
            is in them).
        top_senders (list[dict]): ``{"sender", "messages"}``, most first: changelog maintainers
            by distinct messages received.
        acknowledgments (dict[str, int]): admin-queue messages per class (ACK_* and NACK_*).
        latency_ms (dict[str, dict[str, float]]): ``sent_to_arrived`` (PROPID_M_SENTTIME to the
            broker's record time) and ``sent_to_received`` (to the receive), each with
            ``count``, ``p50``, ``p90``, ``p99``, ``max`` in milliseconds.
        chart (str | None): path of the PNG chart, once drawn.
        notes (list[str]): how the report was made (fallbacks, missing pieces).
    """

    engine: str
    queue_classes: list[dict[str, Any]]
    top_senders: list[dict[str, Any]]
    acknowledgments: dict[str, int]
    latency_ms: dict[str, dict[str, float]]
    chart: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def spark_report(sources: ReportSources) -> Report:
    """Build the report with a Spark Structured Streaming job over the queues
    (:mod:`facade.demo.spark_job`): ``spark_connector.read_queue`` over every source of
    ``sources.all_queues``, once with ``trigger(availableNow=True)``. Drawing the chart and
    writing the files is done by the caller (:func:`make_chart`, :func:`write_report`).
    ``KMQ_DEMO_REPORT=python`` selects the Python report instead (faster, for tests).

    On Tansu, mind its limit: journals, the admin queue, the dead-letter queue and receipts
    topics are written one record per produce request, and Tansu 0.6 reads such a topic fast up
    to about 4,000 records and crawls past that. The demo keeps every topic under about 3,300
    records (queues of 2,500 entries, few acknowledgments), so each can be read in a second.

    Args:
        sources (ReportSources): the run's queues and configuration; the broker is still up.

    Returns:
        Report: with ``engine="spark"``.

    Raises:
        SparkReportUnavailable: pyspark is missing or ``KMQ_DEMO_REPORT=python``; the demo
            then uses :func:`python_report`. Any other exception fails the demo.
    """
    try:
        import pyspark  # noqa: F401 - only to know whether the spark extra is installed
    except ImportError as exc:
        raise SparkReportUnavailable("pyspark is not installed (pip install 'kmq[demo]')") from exc
    if os.environ.get("KMQ_DEMO_REPORT") == "python":
        raise SparkReportUnavailable("KMQ_DEMO_REPORT=python asks for the Python report")
    from facade.demo.spark_job import run_report_job

    figures = run_report_job(sources, top_senders=TOP_SENDERS)
    return Report(
        engine=ENGINE_SPARK,
        queue_classes=figures.queue_classes,
        top_senders=figures.top_senders,
        acknowledgments=figures.acknowledgments,
        latency_ms={"sent_to_received": percentiles(figures.latencies)},
        notes=["computed by a Spark Structured Streaming job (spark_connector.read_queue "
               "over the journals, the dead-letter queue and the admin queue, "
               "trigger availableNow)",
               "latency is sent time to the journal copy's record time (the receive); the "
               "time a copy reached its queue is not kept in the journal"],
    )


def build_report(sources: ReportSources, ledger: Ledger) -> Report:
    """The run's report: from Spark when available, else the Python fallback; with its chart.

    Args:
        sources (ReportSources): passed to :func:`spark_report`.
        ledger (Ledger): what the demo observed, for the fallback.

    Raises:
        Exception: whatever :func:`spark_report` raises other than SparkReportUnavailable.
    """
    try:
        report = spark_report(sources)
    except SparkReportUnavailable as exc:
        report = python_report(ledger)
        report.notes.append(f"Spark report unavailable ({exc}): computed in Python from what "
                            "the demo's receivers and cursors observed")
    if report.chart is None:
        report.chart = make_chart(report, sources.report_dir / "report.png", report.notes)
    return report


def python_report(ledger: Ledger) -> Report:
    """The report computed in plain Python from the ledger's observations (the fallback).

    Args:
        ledger (Ledger): received records, dead-letter and admin messages after the run.
    """
    rows: Counter = Counter()
    for record in ledger.received_records:
        rows[(queue_label(record.queue), record.message_class)] += 1
    for message in ledger.dead_letters:
        rows[("deadletter", message.message_class.name)] += 1
    acknowledgments = Counter(m.message_class.name for m in ledger.admin_messages)
    for cls, count in acknowledgments.items():
        rows[("admin", cls)] += count
    senders: dict[str, set[str]] = {}
    for record in ledger.received_records:
        if record.kind == "entry" and record.sender:
            senders.setdefault(record.sender, set()).add(record.message_id)
    top = sorted(((s, len(ids)) for s, ids in senders.items()), key=lambda t: (-t[1], t[0]))
    return Report(
        engine=ENGINE_PYTHON,
        queue_classes=[{"queue": q, "class": c, "count": n} for (q, c), n in sorted(rows.items())],
        top_senders=[{"sender": s, "messages": n} for s, n in top[:TOP_SENDERS]],
        acknowledgments=dict(sorted(acknowledgments.items())),
        latency_ms={
            "sent_to_arrived": percentiles(_millis(r.sent_time, r.arrived_time)
                                           for r in ledger.received_records),
            "sent_to_received": percentiles(_millis(r.sent_time, r.received_time)
                                            for r in ledger.received_records),
        },
    )


def queue_label(format_name: str) -> str:
    """A short queue name for tables: the last part of the path (``changes-unstable``)."""
    name = format_name.rsplit("\\", 1)[-1]
    return name.split(";", 1)[0] or format_name


def _millis(start: Any, end: Any) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000.0


def percentiles(values: Iterable[float | None]) -> dict[str, float]:
    """``count``, p50, p90, p99 and ``max`` (nearest rank) of the values that are not None.

    Returns:
        dict[str, float]: ``{"count": 0}`` when there are none.
    """
    data = sorted(v for v in values if v is not None)
    if not data:
        return {"count": 0}
    result: dict[str, float] = {"count": len(data)}
    for p in _PERCENTILES:
        rank = max(1, math.ceil(p / 100 * len(data)))
        result[f"p{p}"] = round(data[rank - 1], 3)
    result["max"] = round(data[-1], 3)
    return result


def make_chart(report: Report, path: Path, notes: list[str] | None = None) -> str | None:
    """Draw the report's PNG chart: messages per queue (stacked by class) and the latency
    percentiles.

    Args:
        report (Report): the data.
        path (Path): the PNG to write.
        notes (list[str] | None): a note is added here when matplotlib is missing.

    Returns:
        str | None: the PNG's path, or None without matplotlib (the ``demo`` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: write files only
        import matplotlib.pyplot as plt
    except ImportError:
        if notes is not None:
            notes.append("no chart: matplotlib is not installed (pip install -e '.[demo]')")
        return None
    queues = len({row["queue"] for row in report.queue_classes})
    figure, (left, right) = plt.subplots(1, 2, figsize=(14, max(5.5, 0.28 * queues + 1.5)),
                                         gridspec_kw={"width_ratios": [3, 2]})
    _queue_bars(left, report)
    _latency_bars(right, report)
    figure.suptitle(f"kmq demo ({report.engine})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return str(path)


def _queue_bars(axes: Any, report: Report) -> None:
    """Horizontal bars per queue, one stacked segment per message class."""
    queues = sorted({row["queue"] for row in report.queue_classes})
    classes = sorted({row["class"] for row in report.queue_classes})
    counts = {(row["queue"], row["class"]): row["count"] for row in report.queue_classes}
    left = [0] * len(queues)
    for cls in classes:
        widths = [counts.get((q, cls), 0) for q in queues]
        axes.barh(queues, widths, left=left, label=cls)
        left = [a + b for a, b in zip(left, widths)]
    axes.set_xlabel("messages")
    axes.set_title("messages per queue and class")
    if classes:
        # Below the bars: inside the axes it hides the longest ones.
        axes.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.08),
                    ncol=min(3, len(classes)))


def _latency_bars(axes: Any, report: Report) -> None:
    """Grouped bars of the latency percentiles, in milliseconds (log scale, floored at 0.1 ms:
    a copy can reach the broker within the clock's millisecond)."""
    names = [f"p{p}" for p in _PERCENTILES] + ["max"]
    width = 0.8 / max(1, len(report.latency_ms))
    for i, (kind, stats) in enumerate(sorted(report.latency_ms.items())):
        positions = [x + i * width for x in range(len(names))]
        axes.bar(positions, [max(stats.get(n, 0.0), 0.1) for n in names], width,
                 label=f"{kind} (n={int(stats.get('count', 0))})")
    axes.set_xticks([x + width * (len(report.latency_ms) - 1) / 2 for x in range(len(names))],
                    names)
    axes.set_yscale("log")
    axes.set_ylabel("milliseconds")
    axes.set_title("latency")
    axes.legend(fontsize="small")


def write_report(report: Report, report_dir: Path) -> list[Path]:
    """Write ``report.json`` and ``report.md`` (the chart is already there).

    Returns:
        list[Path]: the files of the report, chart included.
    """
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path = report_dir / "report.json"
    json_path.write_text(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    md_path = report_dir / "report.md"
    md_path.write_text(_markdown(report))
    return [json_path, md_path] + ([Path(report.chart)] if report.chart else [])


def _markdown(report: Report) -> str:
    lines = [f"# kmq demo report ({report.engine})", ""]
    lines += ["## Messages per queue and class", "", "| queue | class | messages |", "|---|---|---:|"]
    lines += [f"| {r['queue']} | {r['class']} | {r['count']} |" for r in report.queue_classes]
    lines += ["", "## Top senders", "", "| sender | messages |", "|---|---:|"]
    lines += [f"| {r['sender']} | {r['messages']} |" for r in report.top_senders]
    lines += ["", "## Acknowledgments", "", "| class | messages |", "|---|---:|"]
    lines += [f"| {c} | {n} |" for c, n in report.acknowledgments.items()]
    lines += ["", "## Latency (ms)", "", "| latency | count | p50 | p90 | p99 | max |",
              "|---|---:|---:|---:|---:|---:|"]
    for kind, s in report.latency_ms.items():
        cells = [str(s.get(k, "")) for k in ("count", "p50", "p90", "p99", "max")]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    if report.chart:
        lines += ["", f"![chart]({Path(report.chart).name})"]
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"
