"""``kmq acl``: show and change a queue's permissions (MSMQ's queue security descriptor), those
of a distribution list (``dl:NAME``, ``DL=<guid>``) or queue alias (``alias:NAME``), which the
directory holds, and those of this queue manager (``qm:``; seed 004's queue-manager rights:
``control``, ``create_queue``, ``manage``, ``queue_status``, ``test``).

Rights are MSMQ's ``MQSEC_*`` names (``WRITE_MESSAGE``, ``RECEIVE_MESSAGE``, ``PEEK_MESSAGE``,
``GET_PROPERTIES``, ``FULL_CONTROL``..., see :class:`facade.security.acl.AccessRight`) joined by ``|``,
or the words of the MSMQ console: ``send``, ``receive``, ``peek``, ``full``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from facade.cli._names import resolve_queue_name
from facade.cli._options import text_argument
from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table
from facade.cli.directory import acl_text, open_directory

if TYPE_CHECKING:
    from facade.security.acl import AccessRight, SecurityDescriptor

app = typer.Typer(help="Show and change queue permissions (owner and access list).",
                  no_args_is_help=True)

QueueArg = text_argument(
    ..., help=r"Queue: NAME, path name (.\private$\orders), PUBLIC=/PRIVATE=/DIRECT= format "
              "name; a directory object: dl:NAME, DL=<guid>, alias:NAME; or qm: for this queue "
              "manager.")
PrincipalArg = text_argument(..., help="User or group name, or Everyone.")
RightsArg = text_argument(
    ..., help="Rights joined by '|': send, receive, peek, full, or MSMQ names such as "
              "WRITE_MESSAGE|GET_PROPERTIES.")

#: The MSMQ console's permission words (Send, Receive, Peek, Full Control) as rights.
_WORDS = {"send": "WRITE_MESSAGE", "receive": "RECEIVE_MESSAGE", "peek": "PEEK_MESSAGE",
          "full": "FULL_CONTROL"}


def parse_rights(text: str) -> AccessRight:
    """Rights from the command line: MSMQ names or the console words, joined by ``|``.

    Raises:
        InvalidParameter: a word that is neither (the message lists the valid names).
    """
    from facade.security.acl import AccessRight

    words = [w.strip() for w in text.replace(",", "|").split("|")]
    return AccessRight.parse("|".join(_WORDS.get(w.lower(), w) for w in words))


def acl_dict(queue: str, security: SecurityDescriptor, principal: str) -> dict[str, Any]:
    """A queue's descriptor as ``--json`` prints it, with the caller's effective rights."""
    return {"queue": queue, **security.to_dict(), "principal": principal,
            "effective_rights": security.granted(principal).names()}


def _render(data: dict[str, Any]) -> Any:
    return key_value_table(f"permissions of {data['queue']}", {
        "owner": data["owner"], "access list": acl_text(data["entries"]),
        f"rights of {data['principal']}": "|".join(data["effective_rights"]) or "(none)"})


#: Names of objects whose descriptor the directory holds (not the queue registry).
_DIRECTORY_PREFIXES = ("dl:", "dl=", "alias:")


@dataclass(frozen=True)
class _Secured:
    """An object with a security descriptor, and how to read and replace it."""

    name: str
    principal: str
    read: Callable[[], SecurityDescriptor]
    write: Callable[[SecurityDescriptor], SecurityDescriptor]


@contextmanager
def _secured(text: str, as_json: bool) -> Iterator[_Secured]:
    """A queue (through the queue manager) or a list or alias (through the directory)."""
    if text.strip().lower().startswith(_DIRECTORY_PREFIXES):
        with open_directory(as_json) as directory:
            yield _Secured(text.strip(), directory.principal,
                           lambda: directory.security(text),
                           lambda sd: directory.set_security(text, sd))
        return
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        if text.strip().lower().startswith("qm:"):
            _check_this_queue_manager(text, qm.name)
            yield _Secured(f"qm:{qm.name}", qm.principal.name, qm.queue_manager_security,
                           qm.set_queue_manager_security)
            return
        name = resolve_queue_name(qm, text)
        yield _Secured(name, qm.principal.name, lambda: qm.queue_security(name),
                       lambda sd: qm.set_queue_security(name, sd))


def _check_this_queue_manager(text: str, name: str) -> None:
    from facade.errors import InvalidParameter

    asked = text.strip()[3:].strip().lower()
    if asked not in ("", ".", name):
        raise InvalidParameter(
            f"{text.strip()!r} names queue manager {asked!r}, but this is {name!r}",
            hint="use qm: for this queue manager, or set KMQ_QUEUE_MANAGER to the other one")


def _change(queue: str, as_json: bool,
            edit: Callable[[SecurityDescriptor], SecurityDescriptor]) -> None:
    with _secured(queue, as_json) as target:
        data = acl_dict(target.name, target.write(edit(target.read())), target.principal)
    emit(data, as_json, _render)


@app.command()
def show(queue: str = QueueArg, as_json: bool = JsonOption) -> None:
    """Show a queue's owner, access list and your effective rights (needs GET_PERMISSIONS).

    Example: kmq acl show orders
    """
    with _secured(queue, as_json) as target:
        data = acl_dict(target.name, target.read(), target.principal)
    emit(data, as_json, _render)


@app.command()
def grant(queue: str = QueueArg, principal: str = PrincipalArg, rights: str = RightsArg,
          deny: bool = typer.Option(False, "--deny",
                                    help="Add a deny entry instead (deny always wins)."),
          as_json: bool = JsonOption) -> None:
    """Allow (or with --deny, refuse) rights on a queue to a principal (needs
    CHANGE_PERMISSIONS).

    Example: kmq acl grant orders bob 'receive|peek'
    """
    with fail_on_errors(as_json):
        parsed = parse_rights(rights)
    _change(queue, as_json, lambda sd: sd.deny(principal, parsed) if deny
            else sd.grant(principal, parsed))


@app.command()
def revoke(queue: str = QueueArg, principal: str = PrincipalArg,
           as_json: bool = JsonOption) -> None:
    """Remove every entry (allow and deny) naming a principal (needs CHANGE_PERMISSIONS).
    Entries for Everyone still apply to them.

    Example: kmq acl revoke orders bob
    """
    _change(queue, as_json, lambda sd: sd.revoke(principal))


@app.command()
def sync(dry_run: bool = typer.Option(False, "--dry-run",
                                      help="Show the changes, make none."),
         as_json: bool = JsonOption) -> None:
    """Mirror every queue's rights onto Kafka ACLs for the same principals, so a client that
    bypasses kmq cannot read or write a queue's topics beyond its rights. Needs a Kafka cluster
    with an authorizer and a principal allowed to alter ACLs; refused (exit 1) otherwise.

    Example: kmq acl sync --dry-run
    """
    from facade.state.kafka_acl_admin import sync_kafka_acls
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        plan = sync_kafka_acls(qm, dry_run=dry_run)
    verb = "would create" if dry_run else "created"
    emit({**plan.to_dict(), "dry_run": dry_run}, as_json,
         lambda d: f"{verb} {len(d['create'])} and "
                   f"{'would delete' if dry_run else 'deleted'} {len(d['delete'])} Kafka ACL "
                   f"binding(s); {d['unchanged']} already in place")


@app.command()
def owner(queue: str = QueueArg, principal: str = PrincipalArg,
          as_json: bool = JsonOption) -> None:
    """Make a principal the owner (MSMQ's take ownership; needs TAKE_OWNERSHIP and
    CHANGE_PERMISSIONS).

    Example: kmq acl owner qm: alice
    """
    _change(queue, as_json, lambda sd: sd.with_owner(principal))
