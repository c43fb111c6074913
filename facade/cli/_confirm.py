"""The confirmation every destructive ``kmq`` command asks for (purge, delete), and ``--yes``.

A person at a terminal is asked ``... [y/N]``; anything but yes aborts (exit 1, nothing
removed). A script says ``--yes``. Without a terminal to ask on (stdin is a pipe or a file) and
without ``--yes`` the command is refused as a usage error (exit 2) before anything is opened:
it never waits for an answer nobody can give, and never removes without consent.
"""

from __future__ import annotations

import sys

import typer

__all__ = ["YesOption", "confirm"]

YesOption = typer.Option(False, "--yes", "-y",
                         help="Do not ask for confirmation (needed when stdin is not a terminal).")


def _stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def confirm(action: str, yes: bool) -> None:
    """Ask before ``action`` unless ``yes``.

    Args:
        action (str): what will be removed, as a question without "?", e.g. ``purge every
            message of orders``.
        yes (bool): the command was given ``--yes``.

    Raises:
        typer.BadParameter: no ``--yes`` and stdin is not a terminal (usage error, exit 2).
        typer.Abort: the person answered no (exit 1, "Aborted").
    """
    if yes:
        return
    if not _stdin_is_terminal():
        raise typer.BadParameter(f"refusing to {action} without confirmation: stdin is not a "
                                 "terminal to ask on; add --yes", param_hint="'--yes'")
    typer.confirm(f"{action[0].upper()}{action[1:]}?", default=False, abort=True, err=True)
