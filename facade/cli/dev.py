"""``kmq dev``: the local dev stack (loopback broker and embedded directory)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table

if TYPE_CHECKING:
    from facade.devstack import DevStatus


def _stack():  # noqa: ANN202 - DevStack, imported when a command runs (start-up time)
    from facade.config import KmqConfig
    from facade.devstack import DevStack

    return DevStack(KmqConfig.load())


app = typer.Typer(help="Start, stop and inspect the local dev stack (broker + embedded directory).",
                  no_args_is_help=True)


def _render(status: DevStatus):
    broker = status.broker
    rows = [
        ("broker", f"running, pid {broker.pid}" if broker else "not running"),
        ("bootstrap servers", broker.bootstrap_servers if broker else "-"),
        ("broker log", broker.log_path if broker else "-"),
        ("directory", f"embedded, {status.directory_path}"
         + ("" if status.directory_initialized else " (not initialised)")),
    ]
    rows += [("warning", w) for w in status.warnings]
    return key_value_table("kmq dev stack", rows)


@app.command()
def up(as_json: bool = JsonOption) -> None:
    """Start the local broker on a free 127.0.0.1 port and initialise the embedded directory.

    Example: kmq dev up && kmq dev status
    """
    with fail_on_errors(as_json):
        status = _stack().up()
    emit(status.to_dict(), as_json, lambda _: _render(status))


@app.command()
def down(as_json: bool = JsonOption) -> None:
    """Stop the local broker (its queues and messages are lost: it keeps them in memory)."""
    with fail_on_errors(as_json):
        stopped = _stack().down()
    emit({"stopped": stopped}, as_json,
         lambda _: "local broker stopped" if stopped else "no local broker was running")


@app.command()
def status(as_json: bool = JsonOption) -> None:
    """Show what runs where: broker pid and port, directory file, warnings."""
    with fail_on_errors(as_json):
        current = _stack().status()
    emit(current.to_dict(), as_json, lambda _: _render(current))
