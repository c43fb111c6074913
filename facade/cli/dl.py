"""``kmq dl``: distribution lists (AD groups), addressed as ``DL=<guid>``.

A list's members are public queues, queue aliases and other lists. Sending to ``DL=<guid>``
reaches every queue the list expands to at send time, each once (cycles are broken). Private
and URL-named queues join a list only through a queue alias (``kmq alias create``).
Only the directory is needed, not the broker.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import typer

from facade.cli._options import text_argument, text_option
from facade.cli._output import JsonOption, emit, key_value_table
from facade.cli.directory import acl_text, open_directory, security_dict

if TYPE_CHECKING:  # rich and kmq's API are imported when a command runs, not for --help
    from rich.table import Table

    from facade.directory import DirectoryObject, DistributionListEntry, Recipient

app = typer.Typer(help="Create distribution lists, change their members and expand them.",
                  no_args_is_help=True)

ListArg = text_argument(..., metavar="LIST",
                        help="The list: NAME, dl:NAME, DL=<guid> or DL=<guid>@domain.")
MembersArg = text_argument(
    ..., metavar="MEMBER",
    help=r"Members: PUBLIC=<guid>, a public queue path (qm\orders, .\orders), alias:NAME, "
         "dl:NAME or DL=<guid>.")


class Scope(str, enum.Enum):
    """A distribution list's group scope (recorded as AD groupType, not enforced)."""

    universal = "universal"
    global_ = "global"
    domain = "domain"


ScopeOption = typer.Option(Scope.universal, help="Group scope (recorded, not enforced).")

_SCOPE_NAMES = {2: "global", 4: "domain", 8: "universal"}


def list_dict(entry: DistributionListEntry) -> dict[str, Any]:
    """A distribution list as ``--json`` prints it (member count, not the members)."""
    return {"name": entry.name, "guid": str(entry.guid), "format_name": entry.format_name,
            "reference": f"dl:{entry.name}", "scope": _SCOPE_NAMES.get(entry.scope, entry.scope),
            "description": entry.description, "member_count": len(entry.members),
            **security_dict(entry.security)}


def member_dict(entry: DirectoryObject) -> dict[str, str]:
    """A top-level member: its kind, the name to give ``dl add/remove`` and its format name
    (a queue alias's is its target's)."""
    from facade.directory.objects import PublicQueueEntry, QueueAliasEntry

    if isinstance(entry, PublicQueueEntry):
        return {"kind": entry.kind, "name": entry.path_name, "format_name": entry.format_name}
    if isinstance(entry, QueueAliasEntry):
        return {"kind": entry.kind, "name": f"alias:{entry.name}",
                "format_name": entry.recipient_format_name}
    return {"kind": entry.kind, "name": f"dl:{entry.name}", "format_name": entry.format_name}


def _table(title: str, data: dict[str, Any]) -> Table:
    rows = {**data, "acl": acl_text(data["acl"])}
    if "members" in rows:
        rows["members"] = "\n".join(m["name"] for m in rows["members"])
    return key_value_table(title, rows)


#: Columns shown whole whatever the width: a cut GUID cannot be copied into a command.
_WHOLE = frozenset({"format_name", "name", "source"})
_HEADINGS = {"member_count": "members"}


def _rows_table(title: str, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> Table:
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(_HEADINGS.get(column, column), no_wrap=column in _WHOLE,
                         overflow="fold")
    for row in rows:
        table.add_row(*("" if row[c] is None else str(row[c]) for c in columns))
    return table


@app.command()
def create(name: str = text_argument(..., help="List name (1-64 characters)."),
           description: str = text_option("", help="Free text."),
           scope: Scope = ScopeOption,
           as_json: bool = JsonOption) -> None:
    """Create an empty distribution list owned by you and print its DL= format name.

    Example: kmq dl create all-orders --description 'every order queue'
    """
    with open_directory(as_json) as directory:
        entry = directory.create_distribution_list(name, description=description,
                                                   scope=scope.value)
    emit(list_dict(entry), as_json, lambda d: _table("distribution list created", d))


@app.command()
def delete(list_ref: str = ListArg, as_json: bool = JsonOption) -> None:
    """Delete a distribution list; it leaves every list that contained it.

    Example: kmq dl delete all-orders
    """
    with open_directory(as_json) as directory:
        entry = directory.distribution_list(list_ref)
        directory.delete_distribution_list(list_ref)
    emit({"deleted": f"dl:{entry.name}", "format_name": entry.format_name}, as_json,
         lambda d: f"deleted {d['deleted']} ({d['format_name']})")


@app.command("list")
def list_lists(as_json: bool = JsonOption) -> None:
    """List every distribution list with its DL= format name and member count.

    Example: kmq dl list --json
    """
    with open_directory(as_json) as directory:
        rows = [list_dict(e) for e in directory.distribution_lists()]
    # Scope and owner are in `dl show` and --json: at 80 columns the GUID needs the room.
    emit(rows, as_json, lambda d: _rows_table(
        "distribution lists", ("name", "format_name", "member_count", "description"), d))


@app.command()
def show(list_ref: str = ListArg, as_json: bool = JsonOption) -> None:
    """Show a distribution list: GUID, DL= format name, scope, owner, access list, members.

    Example: kmq dl show all-orders
    """
    with open_directory(as_json) as directory:
        entry = directory.distribution_list(list_ref)
        data = {**list_dict(entry),
                "members": [member_dict(m) for m in directory.members(list_ref)]}
    emit(data, as_json, lambda d: _table(f"dl:{d['name']}", d))


def _check_member(member: str) -> None:
    """A bare word could be a list, an alias or a queue: make the caller say which (exit 2)."""
    text = member.strip()
    if "\\" not in text and "=" not in text and ":" not in text:
        raise typer.BadParameter(
            f"{member!r} names no kind of member: write dl:{text}, alias:{text}, "
            f".\\{text} (a public queue here) or a PUBLIC=/DL= format name",
            param_hint="MEMBER")


def _change(list_ref: str, members: list[str], adding: bool, as_json: bool) -> None:
    for member in members:
        _check_member(member)
    with open_directory(as_json) as directory:
        entry = directory.distribution_list(list_ref)
        change = directory.add_member if adding else directory.remove_member
        results = [{"member": m, "changed": change(list_ref, m)} for m in members]
    verb = "added" if adding else "removed"
    data = {"list": f"dl:{entry.name}", "format_name": entry.format_name,
            "members": [{"member": r["member"], verb: r["changed"]} for r in results]}

    def render(d: dict[str, Any]) -> str:
        lines = []
        for row in d["members"]:
            if row[verb]:
                lines.append(f"{verb} {row['member']} {'to' if adding else 'from'} {d['list']}")
            else:
                lines.append(f"{row['member']} {'was already' if adding else 'was not'} in "
                             f"{d['list']}")
        return "\n".join(lines)
    emit(data, as_json, render)


@app.command()
def add(list_ref: str = ListArg, members: list[str] = MembersArg,
        as_json: bool = JsonOption) -> None:
    r"""Add members to a distribution list, in order; stops at the first that fails.

    Needs Add/Remove Element on the list and Add/Remove Self on each member.

    Example: kmq dl add all-orders 'qm1\orders' alias:orders-eu dl:eu-orders
    """
    _change(list_ref, members, True, as_json)


@app.command()
def remove(list_ref: str = ListArg, members: list[str] = MembersArg,
           as_json: bool = JsonOption) -> None:
    """Remove members from a distribution list, in order; stops at the first that fails.

    Example: kmq dl remove all-orders alias:orders-eu
    """
    _change(list_ref, members, False, as_json)


@app.command()
def members(list_ref: str = ListArg, as_json: bool = JsonOption) -> None:
    """List a distribution list's top-level members: kind, name and format name.

    Example: kmq dl members all-orders
    """
    with open_directory(as_json) as directory:
        rows = [member_dict(m) for m in directory.members(list_ref)]
    emit(rows, as_json, lambda d: _rows_table(f"members of {list_ref}",
                                              ("kind", "name", "format_name"), d))


def recipient_dict(recipient: Recipient) -> dict[str, str]:
    """One expansion result: the format name a send reaches and the object it came from."""
    source = member_dict(recipient.source)
    return {"format_name": recipient.format_name, "source": source["name"],
            "source_kind": source["kind"]}


@app.command()
def expand(list_ref: str = ListArg,
           check_send: bool = typer.Option(
               True, "--check-send/--no-check-send",
               help="Require Send To on the list and its top-level members, as a send does."),
           as_json: bool = JsonOption) -> None:
    """Show the queues a send to the list would reach now (nested lists expanded, aliases
    translated, each queue once).

    Example: kmq dl expand all-orders --json
    """
    with open_directory(as_json) as directory:
        rows = [recipient_dict(r) for r in directory.expand(list_ref, check_send=check_send)]
    emit(rows, as_json, lambda d: _rows_table(f"recipients of {list_ref}",
                                              ("format_name", "source", "source_kind"), d))
