"""``kmq journal``: list a queue's journal or the machine journal without removing anything.

A queue created with ``--journal`` keeps a copy of every message removed from it in
``<format name>;JOURNAL``; messages sent with journal level JOURNAL are copied to the machine
journal ``MACHINE=<guid>;JOURNAL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from facade.cli._names import resolve_queue_name
from facade.cli._options import text_argument
from facade.cli._output import JsonOption, fail_on_errors

if TYPE_CHECKING:  # kmq's API is imported when a command runs, not for --help
    from facade.manager import QueueManager

app = typer.Typer(help="List queue journals and the machine journal.", no_args_is_help=True)


def journal_format_name(manager: QueueManager, queue: str) -> str:
    r"""The journal of ``queue`` as a format name: ``.\private$\orders`` gives
    ``DIRECT=OS:<qm name>\private$\orders;JOURNAL``; a format name gets ``;JOURNAL``.

    Raises:
        FormatNameError: ``queue`` is neither a path name nor a format name.
        UnsupportedFormatNameOperation: ``queue`` is a system queue or several queues, which
            have no journal.
    """
    from facade.errors import UnsupportedFormatNameOperation
    from facade.formatnames import QueuePath, parse_queue_reference, path_to_format_name

    reference = parse_queue_reference(resolve_queue_name(manager, queue))
    if isinstance(reference, QueuePath):
        reference = path_to_format_name(reference, machine=manager.name)
    with_journal = getattr(reference, "with_journal", None)
    if with_journal is None:
        raise UnsupportedFormatNameOperation(
            f"{queue!r} has no journal: only a queue has one", queue=queue,
            hint="name a queue, or use `kmq journal list --machine` for the machine journal")
    return str(with_journal())


@app.command("list")
def list_messages(
        queue: str = text_argument(None, show_default=False,
                                   help=r"Queue whose journal to list: NAME, path name "
                                        r"(.\private$\orders), format name or alias:NAME."),
        machine: bool = typer.Option(False, "--machine",
                                     help="List the machine journal (MACHINE=<guid>;JOURNAL)."),
        limit: int = typer.Option(100, "--limit", min=1, help="List at most this many messages."),
        as_json: bool = JsonOption) -> None:
    r"""List a queue's journal, or the machine journal (--machine), without removing anything.

    Columns: lookup id, message id, class, label, destination queue, sent time, kmq.reason.
    --json prints a list of objects.

    Example: kmq journal list '.\private$\orders' --limit 20   (or: kmq journal list --machine)
    """
    if machine == (queue is not None):
        raise typer.BadParameter("give either a QUEUE or --machine (exactly one)",
                                 param_hint="QUEUE / --machine")
    from facade.cli._messages import emit_listing
    from facade.formatnames import SystemQueue
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        fn = (f"MACHINE={qm.guid};{SystemQueue.JOURNAL.value}" if machine
              else journal_format_name(qm, queue))
        emit_listing(qm, fn, limit, as_json)
