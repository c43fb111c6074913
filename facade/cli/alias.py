"""``kmq alias``: queue aliases (``msMQ-Custom-Recipient``), directory names for a queue's
format name.

An alias lets a distribution list reach a private or URL-named queue (which cannot be a member
itself) and lets the target change without editing the lists: add it as ``alias:NAME``.
Only the directory is needed, not the broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from facade.cli._options import text_argument, text_option
from facade.cli._output import JsonOption, emit, key_value_table
from facade.cli.directory import acl_text, open_directory, security_dict

if TYPE_CHECKING:  # rich and kmq's API are imported when a command runs, not for --help
    from rich.table import Table

    from facade.directory import QueueAliasEntry

app = typer.Typer(help="Create, show, list, repoint and delete queue aliases.",
                  no_args_is_help=True)

NameArg = text_argument(..., help="Alias name (1-64 characters); 'alias:' prefix optional.")
FormatNameArg = text_argument(
    ..., help=r"The queue it stands for: PUBLIC=<guid>, PRIVATE=<guid>\<n> or DIRECT=... .")


def alias_dict(entry: QueueAliasEntry) -> dict[str, Any]:
    """A queue alias as ``--json`` prints it."""
    return {"name": entry.name, "guid": str(entry.guid), "reference": f"alias:{entry.name}",
            "target": entry.recipient_format_name, "description": entry.description,
            **security_dict(entry.security)}


def _table(title: str, data: dict[str, Any]) -> Table:
    return key_value_table(title, {**data, "acl": acl_text(data["acl"])})


@app.command()
def create(name: str = NameArg, format_name: str = FormatNameArg,
           description: str = text_option("", help="Free text."),
           as_json: bool = JsonOption) -> None:
    r"""Create a queue alias for a queue's format name; you become its owner.

    Example: kmq alias create orders-eu 'DIRECT=OS:qm1\private$\orders'
    """
    with open_directory(as_json) as directory:
        entry = directory.create_alias(name, format_name, description=description)
    emit(alias_dict(entry), as_json, lambda d: _table("queue alias created", d))


@app.command()
def show(name: str = NameArg, as_json: bool = JsonOption) -> None:
    """Show a queue alias: name, GUID, target format name, owner and access list.

    Example: kmq alias show orders-eu
    """
    with open_directory(as_json) as directory:
        entry = directory.alias(name)
    emit(alias_dict(entry), as_json, lambda d: _table(f"alias:{d['name']}", d))


@app.command("list")
def list_aliases(as_json: bool = JsonOption) -> None:
    """List every queue alias with its target.

    Example: kmq alias list --json
    """
    with open_directory(as_json) as directory:
        rows = [alias_dict(e) for e in directory.aliases()]

    def render(data: list[dict[str, Any]]) -> Table:
        from rich.table import Table

        table = Table(title="queue aliases")
        for column in ("name", "target", "description", "owner", "guid"):
            table.add_column(column)
        for row in data:
            table.add_row(*(str(row[c]) for c in ("name", "target", "description", "owner",
                                                 "guid")))
        return table
    emit(rows, as_json, render)


@app.command("set")
def set_target(name: str = NameArg, format_name: str = FormatNameArg,
               as_json: bool = JsonOption) -> None:
    """Point a queue alias at another queue; lists holding the alias follow it.

    Example: kmq alias set orders-eu PUBLIC=1b3c...e9
    """
    with open_directory(as_json) as directory:
        entry = directory.set_alias_target(name, format_name)
    emit(alias_dict(entry), as_json, lambda d: _table("queue alias updated", d))


@app.command()
def delete(name: str = NameArg, as_json: bool = JsonOption) -> None:
    """Delete a queue alias; it leaves every distribution list that held it.

    Example: kmq alias delete orders-eu
    """
    with open_directory(as_json) as directory:
        entry = directory.alias(name)
        directory.delete_alias(name)
    emit({"deleted": f"alias:{entry.name}"}, as_json, lambda d: f"deleted {d['deleted']}")
