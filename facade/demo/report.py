"""The demo's report: run parameters, totals and the accounting verdict; counts per queue and
class, top senders, acknowledgment classes, latency percentiles; and a PNG chart whose figures
each say in words what they measure.

Two latencies are reported, and the report says which is which:

* ``sent_to_received`` (**backlog**): the throughput run sends every entry as fast as it can,
  so most copies wait in their queue behind others; this is mostly queueing time and grows
  with the corpus, it is not what one message takes.
* ``paced_sent_to_received`` (**end-to-end**): a paced run after it sends PACED_MESSAGES
  messages at PACED_RATE per second (well below capacity) to the ``latency-probe`` queue,
  drained by competing receivers: what one message takes from send to receive when nothing
  is queued ahead of it.

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
import textwrap
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
#: The paced run: messages sent, at this many per second, to the PROBE_QUEUE.
PACED_MESSAGES, PACED_RATE = 200, 40.0
#: The queue of the paced run (its short name, as :func:`queue_label` gives it).
PROBE_QUEUE = "latency-probe"
#: Latency keys: the throughput run's (backlog) and the paced run's (end-to-end).
BACKLOG, PACED = "sent_to_received", "paced_sent_to_received"


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
            each body is an acknowledgment (``facade.model.envelope.decode_acknowledgment``).
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
        latency_ms (dict[str, dict[str, float]]): ``sent_to_received`` (PROPID_M_SENTTIME to
            the receive, throughput run: backlog), ``paced_sent_to_received`` (the same on the
            paced run: end-to-end), and in the Python report ``sent_to_arrived`` (to the
            broker's record time, throughput run); each with ``count``, ``p50``, ``p90``,
            ``p99``, ``max`` in milliseconds.
        chart (str | None): path of the PNG chart, once drawn.
        notes (list[str]): how the report was made (fallbacks, missing pieces).
        run (dict[str, Any]): what the demo ran and found (set by the demo, not the engine):
            ``parameters``, ``totals``, ``guarantees`` (the security and transactional
            promises, one sentence each), ``verdict`` and ``explanations`` (sentences, e.g. why
            ``security`` and ``security-replies`` differ).
    """

    engine: str
    queue_classes: list[dict[str, Any]]
    top_senders: list[dict[str, Any]]
    acknowledgments: dict[str, int]
    latency_ms: dict[str, dict[str, float]]
    chart: str | None = None
    notes: list[str] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def spark_report(sources: ReportSources) -> Report:
    """Build the report with a Spark Structured Streaming job over the queues
    (:mod:`facade.demo.spark_job`): ``spark_connector.read_queue`` over every source of
    ``sources.all_queues``, once with ``trigger(availableNow=True)``. Drawing the chart and
    writing the files is done by the caller (:func:`make_chart`, :func:`write_report`).
    ``KMQ_DEMO_REPORT=python`` selects the Python report instead (faster, for tests).

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

    figures = run_report_job(sources, top_senders=TOP_SENDERS,
                             probe_source=f"{PROBE_QUEUE};journal")
    return Report(
        engine=ENGINE_SPARK,
        queue_classes=figures.queue_classes,
        top_senders=figures.top_senders,
        acknowledgments=figures.acknowledgments,
        latency_ms={BACKLOG: percentiles(figures.latencies),
                    PACED: percentiles(figures.paced_latencies)},
        notes=["computed by a Spark Structured Streaming job (spark_connector.read_queue "
               "on Spark's Kafka source, envelopes decoded by from_avro, over the journals, "
               "the dead-letter queue and the admin queue, trigger availableNow)",
               "latency is sent time to the journal copy's record time (the receive); the "
               "time a copy reached its queue is not kept in the journal"],
    )


def build_report(sources: ReportSources, ledger: Ledger,
                 run: dict[str, Any] | None = None) -> Report:
    """The run's report: from Spark when available, else the Python fallback; with its chart.

    Args:
        sources (ReportSources): passed to :func:`spark_report`.
        ledger (Ledger): what the demo observed, for the fallback.
        run (dict[str, Any] | None): the run's parameters, totals, verdict and explanations
            (:attr:`Report.run`); None: none shown.

    Raises:
        Exception: whatever :func:`spark_report` raises other than SparkReportUnavailable.
    """
    try:
        report = spark_report(sources)
    except SparkReportUnavailable as exc:
        report = python_report(ledger)
        report.notes.append(f"Spark report unavailable ({exc}): computed in Python from what "
                            "the demo's receivers and cursors observed")
    report.run = run or {}
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
        if record.kind == "entry" and record.sender and not _paced(record):
            senders.setdefault(record.sender, set()).add(record.message_id)
    top = sorted(((s, len(ids)) for s, ids in senders.items()), key=lambda t: (-t[1], t[0]))
    return Report(
        engine=ENGINE_PYTHON,
        queue_classes=[{"queue": q, "class": c, "count": n} for (q, c), n in sorted(rows.items())],
        top_senders=[{"sender": s, "messages": n} for s, n in top[:TOP_SENDERS]],
        acknowledgments=dict(sorted(acknowledgments.items())),
        latency_ms={
            "sent_to_arrived": percentiles(_millis(r.sent_time, r.arrived_time)
                                           for r in ledger.received_records if not _paced(r)),
            BACKLOG: percentiles(_millis(r.sent_time, r.received_time)
                                 for r in ledger.received_records if not _paced(r)),
            PACED: percentiles(_millis(r.sent_time, r.received_time)
                               for r in ledger.received_records if _paced(r)),
        },
    )


def _paced(record: Any) -> bool:
    return queue_label(record.queue) == PROBE_QUEUE


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
    """Draw the report's PNG: a header with the run's parameters, totals and verdict, then four
    figures on linear axes, each with a sentence under it saying what it measures: messages
    per queue and class, dead-letter and admin queue classes, backlog latency, end-to-end
    (paced) latency.

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
    header = _header_text(report)
    queues = len({row["queue"] for row in report.queue_classes})
    outcomes = len([r for r in report.queue_classes if r["queue"] in ("deadletter", "admin")])
    # Laid out in inches, top down: header, counts (tall as the queues need), latencies; each
    # figure keeps room below for its x label and caption.
    header_h = 0.2 * (header.count("\n") + 1) + 0.2
    counts_h = 0.3 * max(queues, outcomes, 6) + 0.4
    latency_h = 2.8
    caption_h = 1.5
    width, height = 16.0, 0.3 + header_h + 0.5 + counts_h + caption_h + 0.5 + latency_h + caption_h
    figure = plt.figure(figsize=(width, height))

    def axes(x: float, top: float, w: float, h: float) -> Any:
        return figure.add_axes((x / width, (height - top - h) / height, w / width, h / height))

    figure.text(0.3 / width, 1 - 0.3 / height, header, va="top", ha="left", fontsize=10,
                family="monospace")
    top = 0.3 + header_h + 0.5
    _queue_bars(axes(2.4, top, 6.6, counts_h), report)
    _outcome_bars(axes(12.2, top, 3.5, counts_h), report)
    top += counts_h + caption_h + 0.5
    _latency_bars(axes(1.0, top, 8.0, latency_h), report, BACKLOG)
    _latency_bars(axes(10.2, top, 5.5, latency_h), report, PACED)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return str(path)


#: What each figure measures, printed under it.
_CAPTIONS = {
    "queues": "Messages each queue received, by message class: the journal copies of the "
              "receiving queues (one per received copy), and what the dead-letter and admin "
              "queues hold. The number is the bar's total.",
    "outcomes": "Dead-letter queue (why each copy was dead-lettered) and admin queue (ACKs and "
                "NACKs) by class, counted one by one: small counts such as the one poison "
                "record (NACK_RECEIVE_REJECTED) are labelled, not lost in a bar.",
    BACKLOG: "Backlog, not latency: the throughput run sends the whole corpus as fast as it "
             "can, so most copies wait in their queue behind earlier ones. Time from send "
             "(PROPID_M_SENTTIME) to receive, per received copy.",
    PACED: "End-to-end latency: the paced run sends {n} messages at {rate:g} per second (below "
           "capacity) to latency-probe while competing receivers wait. Time from send "
           "(PROPID_M_SENTTIME) to receive, per message.",
}


def _caption(axes: Any, text: str) -> None:
    """A caption under the axes (below the x label), wrapped to the axes' width."""
    inches = axes.get_position().width * axes.figure.get_figwidth()
    axes.annotate("\n".join(textwrap.wrap(text, int(inches * 12))),
                  xy=(0, 0), xycoords="axes fraction", xytext=(0, -34),
                  textcoords="offset points", va="top", ha="left", fontsize=9, style="italic")


def _header_text(report: Report, *, notes: bool = True) -> str:
    """The run's parameters, totals and verdict (and with ``notes`` its explanations), a few
    lines of monospace text."""
    run = report.run
    verdict = run.get("verdict", {})
    status = ("PASSED: every copy accounted for" if verdict.get("ok")
              else f"FAILED: {verdict.get('unaccounted', '?')} copies unaccounted for"
              + "".join(f", {kind} {n}" for kind, n in verdict.get("problems", {}).items()))
    lines = [f"kmq demo report ({report.engine}): {status}"]
    for title in ("parameters", "totals"):
        pairs = [f"{k} {v}" for k, v in run.get(title, {}).items()]
        lines += _wrap_pairs(f"{title}:", pairs)
    lines += [f"{k}: {v}" for k, v in run.get("guarantees", {}).items()]
    outcomes = [f"{k} {v}" for k, v in sorted(verdict.get("outcomes", {}).items())]
    lines += _wrap_pairs("outcome per copy:", outcomes)
    for sentence in run.get("explanations", []) if notes else []:
        lines += textwrap.wrap(f"note: {sentence}", 150, subsequent_indent="    ")
    return "\n".join(lines)


def _wrap_pairs(title: str, pairs: list[str], width: int = 150) -> list[str]:
    return textwrap.wrap(f"{title} " + ", ".join(pairs), width, subsequent_indent="    ")


def _queue_bars(axes: Any, report: Report) -> None:
    """Horizontal bars per queue, one stacked segment per message class, total at the end."""
    queues = sorted({row["queue"] for row in report.queue_classes}, reverse=True)
    classes = sorted({row["class"] for row in report.queue_classes})
    counts = {(row["queue"], row["class"]): row["count"] for row in report.queue_classes}
    left = [0] * len(queues)
    for cls in classes:
        widths = [counts.get((q, cls), 0) for q in queues]
        axes.barh(queues, widths, left=left, label=cls)
        left = [a + b for a, b in zip(left, widths)]
    for y, total in enumerate(left):
        axes.text(total, y, f" {total:,}", va="center", fontsize=8)
    axes.set_xlim(0, max(left, default=1) * 1.12 or 1)
    axes.set_xlabel("messages (linear)")
    axes.set_title("messages per queue and class")
    if classes:
        axes.legend(fontsize="x-small", loc="lower right")
    _caption(axes, _CAPTIONS["queues"])


def _outcome_bars(axes: Any, report: Report) -> None:
    """One labelled bar per dead-letter class and per admin-queue class."""
    rows = [(f"{row['queue']}: {row['class']}", row["count"]) for row in report.queue_classes
            if row["queue"] in ("deadletter", "admin")]
    rows.sort(reverse=True)
    names = [name for name, _ in rows]
    bars = axes.barh(names, [n for _, n in rows],
                     color=["tab:red" if "NACK" in n or "POISON" in n else "tab:green"
                            for n in names])
    axes.bar_label(bars, labels=[f" {n:,}" for _, n in rows], fontsize=9)
    axes.set_xlim(0, max((n for _, n in rows), default=1) * 1.2)
    axes.tick_params(axis="y", labelsize=8)
    axes.set_xlabel("messages (linear)")
    axes.set_title("dead letters and acknowledgments, by class")
    _caption(axes, _CAPTIONS["outcomes"])


def _latency_bars(axes: Any, report: Report, kind: str) -> None:
    """Bars of one latency's percentiles on a linear axis from 0, each labelled."""
    stats = report.latency_ms.get(kind, {"count": 0})
    names = [f"p{p}" for p in _PERCENTILES] + ["max"]
    values = [stats.get(n, 0.0) for n in names]
    seconds = max(values, default=0.0) >= 10_000  # long waits read better in seconds
    heights = [v / 1000 for v in values] if seconds else values
    bars = axes.bar(names, heights, color="tab:orange" if kind == BACKLOG else "tab:blue")
    axes.bar_label(bars, labels=[_duration(v) for v in values], fontsize=9)
    axes.set_ylim(0, max(heights, default=0) * 1.15 or 1)
    axes.set_ylabel("seconds (linear)" if seconds else "milliseconds (linear)")
    title = "backlog: send to receive, throughput run" if kind == BACKLOG else \
        "end-to-end latency: send to receive, paced run"
    axes.set_title(f"{title} (n={int(stats.get('count', 0)):,})")
    _caption(axes, _CAPTIONS[kind].format(n=PACED_MESSAGES, rate=PACED_RATE))


def _duration(millis: float) -> str:
    return f"{millis / 1000:.1f} s" if millis >= 10_000 else f"{millis:,.0f} ms"


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
    lines += [_header_text(report, notes=False).replace("\n", "  \n"), ""]
    lines += [f"- {sentence}" for sentence in report.run.get("explanations", [])]
    lines += ["", "## Messages per queue and class", "", _CAPTIONS["queues"], "",
              "| queue | class | messages |", "|---|---|---:|"]
    lines += [f"| {r['queue']} | {r['class']} | {r['count']} |" for r in report.queue_classes]
    lines += ["", "## Top senders", "", "| sender | messages |", "|---|---:|"]
    lines += [f"| {r['sender']} | {r['messages']} |" for r in report.top_senders]
    lines += ["", "## Acknowledgments", "", "| class | messages |", "|---|---:|"]
    lines += [f"| {c} | {n} |" for c, n in report.acknowledgments.items()]
    lines += ["", "## Latency (ms)", "", _CAPTIONS[BACKLOG], "",
              _CAPTIONS[PACED].format(n=PACED_MESSAGES, rate=PACED_RATE), "",
              "| latency | count | p50 | p90 | p99 | max |", "|---|---:|---:|---:|---:|---:|"]
    for kind, s in report.latency_ms.items():
        cells = [str(s.get(k, "")) for k in ("count", "p50", "p90", "p99", "max")]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    if report.chart:
        lines += ["", f"![chart]({Path(report.chart).name})"]
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"
