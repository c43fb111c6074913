"""``kmq dlq``: list, show and purge this queue manager's dead-letter queues.

The dead-letter queue is ``MACHINE=<guid>;DEADLETTER``; transactional messages go to
``MACHINE=<guid>;DEADXACT`` (``--transactional``). Each message's class is the reason it was
dead-lettered (NACK_RECEIVE_TIMEOUT, NACK_RECEIVE_REJECTED...). Applications may read and delete
dead-letter messages but never send to them (MSMQ's rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table

if TYPE_CHECKING:  # kmq's API is imported when a command runs, not for --help
    from facade.manager import QueueManager

app = typer.Typer(help="Inspect and empty the dead-letter queues.", no_args_is_help=True)

TransactionalOption = typer.Option(
    False, "--transactional", help="Use the transactional dead-letter queue (DEADXACT).")
LimitOption = typer.Option(100, "--limit", min=1, help="List at most this many messages.")


def dead_letter_format_name(manager: QueueManager, transactional: bool) -> str:
    """``MACHINE=<guid>;DEADLETTER`` (or ``;DEADXACT``) of ``manager``."""
    from facade.formatnames import SystemQueue

    queue = SystemQueue.DEADXACT if transactional else SystemQueue.DEADLETTER
    return f"MACHINE={manager.guid};{queue.value}"


@app.command("list")
def list_messages(transactional: bool = TransactionalOption, limit: int = LimitOption,
                  as_json: bool = JsonOption) -> None:
    """List the dead-letter messages without removing them.

    Columns: lookup id, message id, class (the reason), label, destination queue, sent time,
    kmq.reason. --json prints a list of objects.

    Example: kmq dlq list --limit 20
    """
    from facade.cli._messages import emit_listing, message_detail
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        emit_listing(qm, dead_letter_format_name(qm, transactional), limit, as_json)


@app.command()
def show(lookup_id: int = typer.Argument(..., min=0, help="The message's lookup id (from dlq list)."),
         transactional: bool = TransactionalOption, as_json: bool = JsonOption) -> None:
    """Show one dead-letter message in full (every property; body as UTF-8 and its size).

    Example: kmq dlq show 3
    """
    from facade.cli._messages import emit_listing, message_detail
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        fn = dead_letter_format_name(qm, transactional)
        data = message_detail(qm.open_queue(fn).peek_by_lookup_id(lookup_id))
    emit(data, as_json, lambda d: key_value_table(f"{fn} lookup id {lookup_id}", d))


@app.command()
def purge(transactional: bool = TransactionalOption, as_json: bool = JsonOption) -> None:
    """Remove every message now in the dead-letter queue and print how many.

    Example: kmq dlq purge --transactional
    """
    from facade.cli._messages import emit_listing, message_detail
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        fn = dead_letter_format_name(qm, transactional)
        removed = qm.open_queue(fn).purge()
    emit({"purged": removed, "queue": fn}, as_json,
         lambda d: f"purged {d['purged']} message(s) from {d['queue']}")
