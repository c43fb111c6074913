"""Shared CLI output: rich tables for people, ``--json`` for scripts, one-line errors.

Exit codes (documented in ``kmq --help``): 0 success, 1 the operation failed, 2 usage error.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # rich is imported when a command prints, not for --help (start-up time)
    from rich.console import Console
    from rich.table import Table

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "JsonOption", "emit", "fail_on_errors",
           "quoted", "stderr_console", "stdout_console"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2



@functools.cache
def stdout_console() -> Console:
    """The rich console on standard output (made on first use: importing rich costs start-up
    time that ``--help`` does not need)."""
    from rich.console import Console

    return Console()


@functools.cache
def stderr_console() -> Console:
    """The rich console on standard error; soft_wrap: an error is one line however long, never
    folded at the terminal's width."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")


def emit(data: Any, as_json: bool, render: Callable[[Any], Any] | None = None) -> None:
    """Print ``data`` as JSON (``--json``) or through ``render`` (a rich renderable factory).

    A line of text is printed whole, never folded at the terminal's width: it often ends in a
    message id or queue name that the reader copies into the next command.
    """
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
        return
    shown = render(data) if render is not None else data
    stdout_console().print(shown, soft_wrap=isinstance(shown, str))


def quoted(text: str) -> str:
    r"""``text`` in single quotes, its backslashes single (``repr`` doubles them, so a path
    name ``.\private$\orders`` read ``'.\\private$\\orders'`` and could not be copied back).
    Text that is not printable (a newline, a control character) is shown as ``repr`` gives it,
    so a line stays one line and shows what is really there.
    """
    return f"'{text}'" if text.isprintable() else repr(text)


def _readable(text: str | None, queue: str | None) -> str | None:
    """An error's message or hint with the ``repr`` of its queue name (doubled backslashes)
    shown as :func:`quoted` gives it; every other character unchanged."""
    if text is None or not queue or "\\" not in queue:
        return text
    return text.replace(repr(queue), quoted(queue))


def key_value_table(title: str, rows: Mapping[str, Any] | Sequence[tuple[str, Any]]) -> Table:
    """A two-column table of ``name: value`` rows."""
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("property", style="bold")
    table.add_column("value")
    items = rows.items() if isinstance(rows, Mapping) else rows
    for key, value in items:
        table.add_row(str(key), "" if value is None else str(value))
    return table


@contextmanager
def fail_on_errors(as_json: bool = False) -> Iterator[None]:
    """Turn a :class:`MessageQueueError` into one red line on stderr and exit code 1.

    Args:
        as_json (bool): the command was given ``--json``: stdout also gets the error as JSON,
            ``{"error": {"code": "MQ_ERROR_IO_TIMEOUT", "message": ..., "hint": ...}}``, so a
            script reading stdout always gets one JSON document (a receive that timed out
            printed nothing there).
    """
    from rich.markup import escape

    from facade.errors import MessageQueueError  # here: importing kmq's API costs start-up time

    try:
        yield
    except MessageQueueError as exc:
        message = _readable(exc.message, exc.queue) or ""
        hint = _readable(exc.hint, exc.queue)
        if as_json:
            typer.echo(json.dumps({"error": {"code": exc.error_code, "message": message,
                                             "hint": hint}}, indent=2, sort_keys=True))
        code = f" [{exc.error_code}]" if exc.error_code else ""
        # escape: a message or hint holding "[...]" (a queue name, a list) is text, not markup
        stderr_console().print(f"[red]error{code}:[/red] {escape(message)}", highlight=False)
        if hint:
            stderr_console().print(f"[dim]hint:[/dim] {escape(hint)}", highlight=False)
        raise typer.Exit(EXIT_FAILED) from exc
