"""``kmq dlq``: list, show, requeue, delete and purge this queue manager's dead letters.

The dead-letter queue is ``MACHINE=<guid>;DEADLETTER``; transactional messages go to
``MACHINE=<guid>;DEADXACT`` (``--transactional``). Each message's class is the reason it was
dead-lettered (NACK_RECEIVE_TIMEOUT, NACK_RECEIVE_REJECTED...). Applications may read and delete
dead-letter messages but never send to them (MSMQ's rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from facade.cli._confirm import YesOption, confirm
from facade.cli._options import text_option
from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table

if TYPE_CHECKING:  # kmq's API is imported when a command runs, not for --help
    from facade.manager import QueueManager

app = typer.Typer(help="Inspect, requeue, delete and purge dead-letter messages.",
                  no_args_is_help=True)

TransactionalOption = typer.Option(
    False, "--transactional", help="Use the transactional dead-letter queue (DEADXACT).")
LimitOption = typer.Option(100, "--limit", min=1, help="List at most this many messages.")
LookupIdArg = typer.Argument(..., min=0, help="The message's lookup id (from dlq list).")


def dead_letter_format_name(manager: QueueManager, transactional: bool) -> str:
    """``MACHINE=<guid>;DEADLETTER`` (or ``;DEADXACT``) of ``manager``."""
    from facade.model.formatnames import SystemQueue

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
    from facade.cli._messages import emit_listing
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        emit_listing(qm, dead_letter_format_name(qm, transactional), limit, as_json)


@app.command()
def show(lookup_id: int = LookupIdArg,
         transactional: bool = TransactionalOption, as_json: bool = JsonOption) -> None:
    """Show one dead-letter message in full (every property; body as UTF-8 and its size).

    An encrypted body is shown decrypted only to a principal who may peek at or receive from
    the queue the message was sent to; anyone else sees it encrypted, and body_encrypted says
    which right is missing.

    Example: kmq dlq show 3
    """
    from facade.cli._messages import encrypted_because, message_detail
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        fn = dead_letter_format_name(qm, transactional)
        message = qm.open_queue(fn).peek_by_lookup_id(lookup_id)
        data = message_detail(message, encrypted_because(qm, message))
    emit(data, as_json, lambda d: key_value_table(f"{fn} lookup id {lookup_id}", d))


@app.command()
def purge(transactional: bool = TransactionalOption, yes: bool = YesOption,
          as_json: bool = JsonOption) -> None:
    """Remove every message now in the dead-letter queue and print how many (asks first;
    --yes does not).

    Example: kmq dlq purge --transactional --yes
    """
    from facade.manager import QueueManager

    confirm(f"purge every message of the {_which(transactional)} dead-letter queue", yes)
    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        fn = dead_letter_format_name(qm, transactional)
        removed = qm.open_queue(fn).purge()
    emit({"purged": removed, "queue": fn}, as_json,
         lambda d: f"purged {d['purged']} message(s) from {d['queue']}")


def _which(transactional: bool) -> str:
    return "transactional" if transactional else "nontransactional"


@app.command()
def requeue(lookup_id: int = LookupIdArg,
            to: str = text_option(None, "--to", metavar="QUEUE",
                                  help="Send it here instead of its original queue (any queue "
                                       "name form)."),
            keep_ttbr: bool = typer.Option(
                True, "--keep-ttbr/--no-ttbr",
                help="Send it with its original time-to-be-received, counted again from now "
                     "(default), or with none, so it cannot expire again."),
            transactional: bool = TransactionalOption, as_json: bool = JsonOption) -> None:
    """Send a dead letter back to the queue it was for, then remove it from the dead-letter queue.

    At least once, never lost: the copy is sent (and acknowledged) before the dead letter is
    removed; a crash in between leaves a duplicate, never a loss. The copy is a new send with a
    new message id, class NORMAL and the original's body, label, priority and other sender
    properties.

    Example: kmq dlq requeue 3   (or: kmq dlq requeue 3 --to orders-retry --no-ttbr)
    """
    from facade.cli._names import resolve_queue_name
    from facade.cli._transfer import transfer
    from facade.errors import InvalidParameter
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open() as qm:
        fn = dead_letter_format_name(qm, transactional)
        if to is not None:
            target = resolve_queue_name(qm, to)
        else:
            target = qm.open_queue(fn).peek_by_lookup_id(lookup_id).destination_queue
            if target is None:
                raise InvalidParameter(
                    f"dead letter {lookup_id} of {fn} names no destination queue", queue=fn,
                    hint=f"give one: kmq dlq requeue {lookup_id} --to QUEUE")
        data = transfer(qm, fn, lookup_id, target, keep_ttbr)
    emit(data, as_json, lambda d: f"requeued {d['id']} to {d['to']} as {d['new_id']}")


@app.command()
def delete(lookup_id: int = LookupIdArg, transactional: bool = TransactionalOption,
           yes: bool = YesOption, as_json: bool = JsonOption) -> None:
    """Remove one dead letter by its lookup id (asks first; --yes does not).

    Example: kmq dlq delete 3 --yes
    """
    from facade.manager import QueueManager

    confirm(f"delete dead letter {lookup_id} of the {_which(transactional)} dead-letter queue",
            yes)
    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        fn = dead_letter_format_name(qm, transactional)
        removed = qm.open_queue(fn).receive_by_lookup_id(lookup_id)
    emit({"deleted": str(removed.id), "lookup_id": lookup_id, "queue": fn}, as_json,
         lambda d: f"deleted {d['deleted']} from {d['queue']}")
