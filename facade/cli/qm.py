"""``kmq qm``: the queue manager: init, info, the long-running service, the outgoing queue."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import typer

from facade.cli._options import seconds_option
from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table

if TYPE_CHECKING:  # kmq's API is imported when a command runs, not for --help
    from rich.table import Table

    from facade.manager import QueueManager
    from facade.state.outgoingqueue import StoredRecord
    from facade.service import SweepReport

app = typer.Typer(help="Initialise, inspect and run the queue manager; view its outgoing queue.",
                  no_args_is_help=True)


def _info(qm: QueueManager) -> dict:
    from facade.model.formatnames import SystemQueue

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
    from rich.console import Console

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


@app.command()
def outgoing(limit: int = typer.Option(100, "--limit", min=1,
                                       help="List at most this many records."),
             as_json: bool = JsonOption) -> None:
    """List the outgoing queue: RECOVERABLE messages (and acknowledgments, dead-letter copies)
    sent but not yet acknowledged by the broker, waiting for their destination.

    Read from the file under KMQ_HOME without connecting, so it works while the broker is
    down; the queue manager delivers them when it next opens, or dead-letters them when their
    time-to-reach-queue (deadline) passes. --json prints {"records": [...], "unreadable":
    [...]}.

    Example: kmq qm outgoing --limit 20
    """
    with fail_on_errors(as_json):
        data = _outgoing(limit)

    def render(d: dict) -> Table | str:
        if not d["records"] and not d["unreadable"]:
            return "the outgoing queue is empty: every message sent has reached its topic"
        from rich.table import Table

        table = Table(title="outgoing queue", caption=f"{len(d['records'])} record(s)"
                      + (f", {len(d['unreadable'])} unreadable" if d["unreadable"] else ""))
        for column in ("message_id", "label", "topic", "purpose", "deadline"):
            table.add_column(column, no_wrap=column == "message_id", overflow="fold")
        for row in d["records"]:
            table.add_row(*("" if row[c] is None else str(row[c]) for c in (
                "message_id", "label", "topic", "purpose", "deadline")))
        return table
    emit(data, as_json, render)


def _outgoing(limit: int) -> dict[str, list[dict]]:
    """The outgoing queue file's records (oldest first, at most ``limit``) and unreadable rows;
    empty lists when the file does not exist (nothing was ever stored)."""
    from facade.config import KmqConfig
    from facade.state.outgoingqueue import OutgoingQueue, outgoing_queue_path

    config = KmqConfig.load()
    path = outgoing_queue_path(config.home, config.queue_manager)
    if not path.exists():  # opening would create it: a listing changes nothing
        return {"records": [], "unreadable": []}
    store = OutgoingQueue(path)
    try:
        records = [_outgoing_row(stored) for stored in store.pending(limit)]
        unreadable = [{"row_id": row_id, "error": str(error)}
                      for row_id, error in store.unreadable()]
    finally:
        store.close()
    return {"records": records, "unreadable": unreadable}


def _outgoing_row(stored: StoredRecord) -> dict:
    """One outgoing record: its ids, topic, purpose, times (ISO 8601 UTC) and the message's
    label, destination and size (None when the value is not a message envelope)."""
    import datetime as dt

    from facade.model.envelope import decode_message
    from facade.errors import EnvelopeError

    record = stored.record

    def iso(ms: int | None) -> str | None:
        return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()

    try:
        message = decode_message(record.value, record.headers, topic=record.topic)
    except EnvelopeError:
        message = None
    return {"row_id": stored.row_id, "message_id": record.message_id, "topic": record.topic,
            "purpose": record.purpose, "created": iso(record.created_ms),
            "deadline": iso(record.deadline_ms),
            "label": message.label if message else None,
            "destination_queue": message.destination_queue if message else None,
            "size": len(record.value)}
