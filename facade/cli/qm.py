"""``kmq qm``: the queue manager: init, info, and the long-running service."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from facade.cli._options import seconds_option
from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table

if TYPE_CHECKING:  # kmq's API is imported when a command runs, not for --help
    from facade.manager import QueueManager
    from facade.service import SweepReport

app = typer.Typer(help="Initialise, inspect and run the queue manager.", no_args_is_help=True)


def _info(qm: QueueManager) -> dict:
    from facade.formatnames import SystemQueue

    return {
        "name": qm.name, "guid": str(qm.guid), "bootstrap_servers": qm.session.bootstrap_servers,
        # Who access checks are made for, and whether that identity was proven or declared.
        "principal": qm.principal.name, "principal_source": qm.principal.source.value,
        "queues": len(qm.list_queues()),
        # Read after list_queues(), which brought the registry view up to date.
        "malformed_registry_records": qm.registry.malformed,
        **{f"{q.name.lower()}_queue": f"MACHINE={qm.guid};{q.name}" for q in SystemQueue},
    }


@app.command()
def init(as_json: bool = JsonOption) -> None:
    """Register this queue manager (name and GUID) and create its system queues."""
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open() as qm:
        data = _info(qm)
    emit(data, as_json, lambda d: key_value_table("queue manager", d))


@app.command()
def info(as_json: bool = JsonOption) -> None:
    """Show the queue manager's name, GUID, broker and system queues, and how many malformed
    records the registries hold (skipped by every process; see `kmq queue set` to repair a
    queue's)."""
    init(as_json)


@app.command()
def run(interval: float = seconds_option(1.0, "--interval", positive=True,
                                         help="Seconds between sweeps"),
        once: bool = typer.Option(False, "--once", help="Sweep once and exit."),
        as_json: bool = JsonOption) -> None:
    """Run the queue-manager service: expire messages past their time-to-be-received into the
    dead-letter queue (with NACKs) and move poison records out, even when nobody receives.

    Example: kmq qm run --interval 2
    """
    console = Console(stderr=True)

    def report(sweep: SweepReport) -> None:
        if once:
            emit(dataclasses.asdict(sweep), as_json,
                 lambda d: f"swept {d['queues']} queue(s), expired {d['expired']}")
        elif sweep.expired:
            console.print(f"expired {sweep.expired} message(s) in {sweep.queues} queue(s)")

    from facade.manager import QueueManager
    from facade.service import QueueManagerService

    with fail_on_errors(as_json), QueueManager.open() as qm:
        service = QueueManagerService(qm)
        try:
            service.run(interval, sweeps=1 if once else None, on_sweep=report)
        except KeyboardInterrupt:
            console.print("stopped")
        finally:
            service.close()
