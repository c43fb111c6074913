"""``kmq journal``: list (without removing anything) and purge a queue's journal or the machine
journal.

A queue created with ``--journal`` keeps a copy of every message removed from it in
``<format name>;JOURNAL``; messages sent with journal level JOURNAL are copied to the machine
journal ``MACHINE=<guid>;JOURNAL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from facade.cli._confirm import YesOption, confirm
from facade.cli._names import resolve_queue_name
from facade.cli._options import text_argument
from facade.cli._output import JsonOption, emit, fail_on_errors, quoted

if TYPE_CHECKING:  # kmq's API is imported when a command runs, not for --help
    from facade.manager import QueueManager

app = typer.Typer(help="List and purge queue journals and the machine journal.",
                  no_args_is_help=True)

JournalQueueArg = text_argument(None, show_default=False,
                                help=r"Queue whose journal to use: NAME, path name "
                                     r"(.\private$\orders), format name or alias:NAME.")
MachineOption = typer.Option(False, "--machine",
                             help="The machine journal (MACHINE=<guid>;JOURNAL) instead.")


def journal_format_name(manager: QueueManager, queue: str) -> str:
    r"""The journal of ``queue`` as a format name: ``.\private$\orders`` gives
    ``DIRECT=OS:<qm name>\private$\orders;JOURNAL``; a format name gets ``;JOURNAL``.

    Raises:
        FormatNameError: ``queue`` is neither a path name nor a format name.
        UnsupportedFormatNameOperation: ``queue`` is a system queue or several queues, which
            have no journal.
    """
    from facade.errors import UnsupportedFormatNameOperation
    from facade.model.formatnames import QueuePath, parse_queue_reference, path_to_format_name

    reference = parse_queue_reference(resolve_queue_name(manager, queue))
    if isinstance(reference, QueuePath):
        reference = path_to_format_name(reference, machine=manager.name)
    with_journal = getattr(reference, "with_journal", None)
    if with_journal is None:
        raise UnsupportedFormatNameOperation(
            f"{quoted(queue)} has no journal: only a queue has one", queue=queue,
            hint="name a queue, or use `kmq journal list --machine` for the machine journal")
    return str(with_journal())


def _journal(manager: QueueManager, queue: str | None, machine: bool) -> str:
    """The format name of the journal chosen by QUEUE or --machine (the caller checked that
    exactly one is given)."""
    from facade.model.formatnames import SystemQueue

    if machine:
        return f"MACHINE={manager.guid};{SystemQueue.JOURNAL.value}"
    assert queue is not None  # _one_of checked that QUEUE or --machine is given
    return journal_format_name(manager, queue)


def _one_of(queue: str | None, machine: bool) -> None:
    if machine == (queue is not None):
        raise typer.BadParameter("give either a QUEUE or --machine (exactly one)",
                                 param_hint="QUEUE / --machine")


@app.command("list")
def list_messages(
        queue: str = JournalQueueArg, machine: bool = MachineOption,
        limit: int = typer.Option(100, "--limit", min=1, help="List at most this many messages."),
        as_json: bool = JsonOption) -> None:
    r"""List a queue's journal, or the machine journal (--machine), without removing anything.

    Per message: lookup id, message id, class, label, destination queue, sent time,
    kmq.reason. --json prints a list of objects.

    Example: kmq journal list '.\private$\orders' --limit 20   (or: kmq journal list --machine)
    """
    _one_of(queue, machine)
    from facade.cli._messages import emit_listing
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        emit_listing(qm, _journal(qm, queue, machine), limit, as_json)


@app.command()
def purge(queue: str = JournalQueueArg, machine: bool = MachineOption, yes: bool = YesOption,
          as_json: bool = JsonOption) -> None:
    r"""Remove every message now in a queue's journal, or the machine journal (--machine);
    asks first, --yes does not. The queue itself is untouched.

    Example: kmq journal purge orders --yes   (or: kmq journal purge --machine --yes)
    """
    _one_of(queue, machine)
    confirm("purge the machine journal" if machine else f"purge the journal of {queue}", yes)
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        fn = _journal(qm, queue, machine)
        removed = qm.open_queue(fn).purge()
    emit({"purged": removed, "queue": fn}, as_json,
         lambda d: f"purged {d['purged']} message(s) from {d['queue']}")
