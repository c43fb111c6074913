"""``kmq demo``: an end-to-end workload on the Debian changelogs installed on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from facade.cli._output import EXIT_FAILED, JsonOption, emit, fail_on_errors, stderr_console

__all__ = ["demo"]


def demo(
    corpus: Path = typer.Option(
        Path("/usr/share/doc"), "--corpus",
        help="Directory holding */changelog.Debian.gz, or one changelog file."),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Send at most this many entries (default: all)."),
    report_dir: Path = typer.Option(
        Path("kmq-demo-report"), "--report-dir", help="Where the report's files go."),
    keep: bool = typer.Option(
        False, "--keep",
        help="Leave the queues, directory objects and a broker the demo started in place."),
    receivers: int = typer.Option(
        4, "--receivers", min=2,
        help="Receiver threads; two compete on each queue, each taking prefetched batches "
        "(more need more cores)."),
    as_json: bool = JsonOption,
) -> None:
    r"""Run an end-to-end workload on the Debian changelogs installed here.

Mapping: each entry of /usr/share/doc/*/changelog.Debian.gz is a message.
label "<package> <version>"; body the entry text (UTF-8);
priority from urgency: low 1, medium 3, high 5, critical/emergency 7, else 3;
app_specific the first closed bug; properties debian.maintainer (the sender),
debian.date (the changelog date: the queue manager stamps sent_time at send,
as MSMQ does), debian.closes, debian.urgency, debian.distributions.

Queues: a public queue per frequent distribution (changes-unstable, ...;
rare ones share changes-other), journals on; private queues bugs,
security, security-replies, changes-held, admin, latency-probe; a directory
alias for security and a distribution list over the distribution queues and
the alias. Two competing receivers drain each queue, each taking prefetched
batches (prefetch 50).

Routes: every 100th entry has a 1 s time-to-be-received and is not received
(it expires into the dead-letter queue); urgent entries go to security via
the alias (recoverable, response queue answered by a responder); every 200th
goes to the list; entries closing bugs go to "<their queue>,bugs"
(multiple-element); the rest to their queue. ACKs/NACKs go to admin. One raw
poison record is written into a queue half-way. Then a paced run sends 200
messages at 40/s to latency-probe, for the end-to-end latency.

Verdict: every copy must be received, dead-lettered with its class, or
NACKed; otherwise the exit code is 1. The report (run parameters, totals and
verdict, counts per queue and class, top senders, acknowledgments, backlog
and paced end-to-end latency percentiles, PNG chart) goes to --report-dir;
a Spark Structured Streaming job makes it (KMQ_DEMO_REPORT=python: Python).

Brokers: KMQ_BOOTSTRAP_SERVERS if set, else a running `kmq dev up` stack,
else a local broker and embedded directory in a temporary KMQ_HOME, stopped
at the end (--keep leaves it running).

Example: kmq demo --limit 2000
"""
    with fail_on_errors(as_json):  # also a missing extra (python-debian: kmq[demo])
        from facade.demo.runner import DemoOptions, run_demo

        options = DemoOptions(corpus=corpus, limit=limit, report_dir=report_dir, keep=keep,
                              receivers=receivers)
        result = run_demo(options, stderr_console())
    emit(result.summary, as_json, render_summary)
    if result.exit_code:
        _explain_failure(result.summary)
        raise typer.Exit(EXIT_FAILED)


def render_summary(summary: dict[str, Any]) -> Any:
    """The summary as rich tables: totals, outcomes, and where the report is."""
    from rich.console import Group
    from rich.table import Table

    table = Table(title="kmq demo: summary", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    corpus = summary["corpus"]
    env = summary["environment"]
    rows = [
        ("verdict", "[green]every copy accounted for[/green]" if summary["ok"]
         else "[red]FAILED: see below[/red]"),
        ("corpus", (f"{corpus['entries_used']} of {corpus['entries']} entries from "
                    f"{corpus['files'] - corpus['files_skipped']} files ({corpus['path']}); "
                    f"skipped {corpus['files_skipped']} files, "
                    f"{corpus['entries_skipped']} entries")),
        ("brokers", f"{env['mode']}: {env['bootstrap_servers']}"),
        ("queue manager", env["queue_manager"]),
        ("sent", (f"{summary['sent']['messages']} messages ({summary['sent']['entries']} "
                  f"entries, {summary['sent']['responses']} responses)")),
        ("routes", _pairs(summary["sent"]["by_route"])),
        ("copies", f"{summary['copies']} (+{summary['poison']['written']} poison record)"),
        ("received", str(summary["received"])),
        ("dead-lettered", _pairs(summary["dead_lettered"]) or "0"),
        ("NACKs", _pairs(summary["nacks"]) or "0"),
        ("ACKs", _pairs(summary["acks"]) or "0"),
        ("request/response", (f"{summary['requests']['sent']} requests, "
                              f"{summary['requests']['answered']} answered")),
        *((what, text) for what, text in summary["guarantees"].items()),
        ("poison", (f"{summary['poison']['written']} written, "
                    f"{summary['poison']['dead_lettered']} dead-lettered")),
        ("unaccounted", str(summary["accounting"]["unaccounted"])),
        ("receivers", (f"{summary['receivers']['workers']} threads draining "
                       f"{summary['receivers']['queues']} queues, "
                       f"{summary['receivers']['per_queue']} competing on each "
                       f"(prefetch {summary['receivers']['prefetch']})"
                       + (f"; {summary['receivers']['retried']} receives retried after broker "
                          "errors" if summary["receivers"]["retried"] else ""))),
        ("time", ", ".join(f"{k} {v:.1f}s" for k, v in summary["timings_s"].items())),
        ("report", f"{summary['report']['dir']} ({summary['report']['engine']})"),
    ]
    teardown = summary.get("teardown", {})
    if teardown.get("kept"):
        rows.append(("kept", f"queues of {env['queue_manager']} (KMQ_QUEUE_MANAGER="
                             f"{env['queue_manager']} KMQ_HOME={env['kmq_home']} kmq dlq list)"))
    if teardown.get("broker_left_running"):
        rows.append(("broker", teardown["broker_left_running"]))
    if teardown.get("left_over"):
        rows.append(("not deleted", "; ".join(teardown["left_over"])))
    for key, value in rows:
        table.add_row(key, value)
    outcomes = Table(title="outcome per copy")
    outcomes.add_column("outcome")
    outcomes.add_column("copies", justify="right")
    for outcome, count in sorted(summary["accounting"]["outcomes"].items()):
        outcomes.add_row(outcome, str(count))
    return Group(table, outcomes)


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _explain_failure(summary: dict[str, Any]) -> None:
    """One error line with the count, then samples of what is missing, on stderr."""
    accounting = summary["accounting"]
    err_console = stderr_console()
    err_console.print(
        f"[red]error:[/red] {accounting['unaccounted']} cop(ies) unaccounted for, problems: "
        f"{accounting['problems'] or 'none'}", highlight=False)
    for line in accounting["unaccounted_sample"]:
        err_console.print(f"  unaccounted: {line}", highlight=False, markup=False)
    for kind, sample in accounting["problem_samples"].items():
        for line in sample:
            err_console.print(f"  {kind}: {line}", highlight=False, markup=False)
    env = summary["environment"]
    err_console.print(f"[dim]hint:[/dim] rerun with --keep, then inspect the queues with "
                      f"KMQ_HOME={env['kmq_home']} KMQ_QUEUE_MANAGER={env['queue_manager']} "
                      "kmq dlq list", highlight=False)
