"""``kmq bench``: the facade against raw confluent-kafka on the same broker (see facade.bench)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from facade.benchnames import DEFAULT_SCENARIOS, SCENARIO_NAMES
from facade.cli._options import text_option
from facade.cli._output import EXIT_USAGE, JsonOption, fail_on_errors, stdout_console

if TYPE_CHECKING:  # facade.bench loads the Kafka client and fastavro: only when the bench runs
    from rich.table import Table

    from facade.bench import BenchReport

#: Largest --payload: MSMQ's message size limit, 4 MB.
MAX_PAYLOAD = 4 * 1024 * 1024


def _table(report: BenchReport) -> Table:
    from rich.table import Table

    broker = report.broker
    name = broker.get("version") or broker.get("kind") or broker.get("cluster_id")
    table = Table(title=f"kmq vs raw confluent-kafka: {report.messages} messages x "
                        f"{report.payload} B, median of {report.rounds} round(s), broker {name} "
                        f"at {broker['bootstrap_servers']}")
    table.add_column("scenario")
    table.add_column("kmq msg/s", justify="right")
    table.add_column("raw msg/s", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("target", justify="right")
    for result in report.results:
        if result.skipped:
            table.add_row(result.description, "-", "-", "-", f"skipped: {result.skipped}")
            continue
        ratio = result.ratio or 0.0
        target = "-" if result.target is None else f"{result.target:.2f}"
        style = "" if result.target is None else ("green" if ratio >= result.target else "red")
        table.add_row(result.description, f"{result.kmq_median:,.0f}", f"{result.raw_median:,.0f}",
                      f"[{style}]{ratio:.3f}[/{style}]" if style else f"{ratio:.3f}", target)
        if result.figures:
            table.add_row(f"  {result.figures_text()}", "", "", "", "")
    machine = report.machine
    table.caption = (f"{machine['cpus']} x {machine['cpu_model']}, Python {machine['python']}, "
                     f"librdkafka {machine['librdkafka']}, load {machine['load_average_1m']}")
    return table


def bench(
    messages: int = typer.Option(2000, "--messages", "-n", min=1, help="Messages per timed loop."),
    rounds: int = typer.Option(3, "--rounds", "-r", min=1, help="Rounds; medians are reported."),
    # Bounded: the bench allocates the body up front, so --payload 1e15 would be a MemoryError.
    payload: int = typer.Option(200, "--payload", min=0, max=MAX_PAYLOAD,
                                help=f"Body size in bytes (0 to {MAX_PAYLOAD})."),
    scenario: list[str] = text_option(
        None, "--scenario", "-s",
        help=f"Scenario to run (repeatable): {', '.join(SCENARIO_NAMES)}. Default: "
             f"{', '.join(DEFAULT_SCENARIOS)} (spark-decode starts a JVM: name it to run it)."),
    as_json: bool = JsonOption,
) -> None:
    """Benchmark the facade against raw confluent-kafka on the same broker, in the same run.

    Prints kmq msg/s, raw msg/s and their ratio per scenario (medians of --rounds), as a table
    or as JSON. Needs a broker: KMQ_BOOTSTRAP_SERVERS, or the dev stack (`kmq dev up`). Uses a
    throwaway queue manager and directory under KMQ_HOME and deletes its queues afterwards.

    Example: kmq bench --messages 5000 --rounds 5 --scenario express-send --scenario receive
    """
    from rich.console import Console  # here, not at the top: the CLI starts without rich

    chosen = list(scenario or DEFAULT_SCENARIOS)
    unknown = [s for s in chosen if s not in SCENARIO_NAMES]
    if unknown:
        Console(stderr=True).print(f"[red]error:[/red] unknown scenario {', '.join(unknown)}; "
                                   f"choose from {', '.join(SCENARIO_NAMES)}", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    progress = Console(stderr=True)
    from facade.bench import run_benchmarks

    with fail_on_errors(as_json):
        report = run_benchmarks(messages=messages, rounds=rounds, payload=payload,
                                scenarios=chosen,
                                progress=lambda line: progress.print(line, highlight=False))
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        stdout_console().print(_table(report))
