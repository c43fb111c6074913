"""Shared CLI output: rich tables for people, ``--json`` for scripts, one-line errors.

Exit codes (documented in ``kmq --help``): 0 success, 1 the operation failed, 2 usage error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table


__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "JsonOption", "emit", "fail_on_errors"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

console = Console()
#: soft_wrap: an error is one line however long, never folded at the terminal's width.
err_console = Console(stderr=True, soft_wrap=True)

JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")


def emit(data: Any, as_json: bool, render: Callable[[Any], Any] | None = None) -> None:
    """Print ``data`` as JSON (``--json``) or through ``render`` (a rich renderable factory)."""
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif render is not None:
        console.print(render(data))
    else:
        console.print(data)


def key_value_table(title: str, rows: Mapping[str, Any] | Sequence[tuple[str, Any]]) -> Table:
    """A two-column table of ``name: value`` rows."""
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
    from facade.errors import MessageQueueError  # here: importing kmq's API costs start-up time

    try:
        yield
    except MessageQueueError as exc:
        if as_json:
            typer.echo(json.dumps({"error": {"code": exc.error_code, "message": exc.message,
                                             "hint": exc.hint}}, indent=2, sort_keys=True))
        code = f" [{exc.error_code}]" if exc.error_code else ""
        # escape: a message or hint holding "[...]" (a queue name, a list) is text, not markup
        err_console.print(f"[red]error{code}:[/red] {escape(exc.message)}", highlight=False)
        if exc.hint:
            err_console.print(f"[dim]hint:[/dim] {escape(exc.hint)}", highlight=False)
        raise typer.Exit(EXIT_FAILED) from exc
