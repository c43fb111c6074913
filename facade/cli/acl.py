"""``kmq acl``: show and change a queue's permissions (MSMQ's queue security descriptor).

Rights are MSMQ's ``MQSEC_*`` names (``WRITE_MESSAGE``, ``RECEIVE_MESSAGE``, ``PEEK_MESSAGE``,
``GET_PROPERTIES``, ``FULL_CONTROL``..., see :class:`facade.acl.AccessRight`) joined by ``|``,
or the words of the MSMQ console: ``send``, ``receive``, ``peek``, ``full``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from facade.cli._names import resolve_queue_name
from facade.cli._options import text_argument
from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table
from facade.cli.directory import acl_text

if TYPE_CHECKING:
    from facade.acl import AccessRight, SecurityDescriptor

app = typer.Typer(help="Show and change queue permissions (owner and access list).",
                  no_args_is_help=True)

QueueArg = text_argument(
    ..., help=r"Queue: NAME, path name (.\private$\orders), PUBLIC=/PRIVATE=/DIRECT= format name "
              "or alias:NAME.")
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
    from facade.acl import AccessRight

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


def _change(queue: str, as_json: bool,
            edit: Callable[[SecurityDescriptor], SecurityDescriptor]) -> None:
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        name = resolve_queue_name(qm, queue)
        stored = qm.set_queue_security(name, edit(qm.queue_security(name)))
        data = acl_dict(name, stored, qm.principal.name)
    emit(data, as_json, _render)


@app.command()
def show(queue: str = QueueArg, as_json: bool = JsonOption) -> None:
    """Show a queue's owner, access list and your effective rights (needs GET_PERMISSIONS).

    Example: kmq acl show orders
    """
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        name = resolve_queue_name(qm, queue)
        data = acl_dict(name, qm.queue_security(name), qm.principal.name)
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
    from facade.kafka_acl_admin import sync_kafka_acls
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        plan = sync_kafka_acls(qm, dry_run=dry_run)
    verb = "would create" if dry_run else "created"
    emit({**plan.to_dict(), "dry_run": dry_run}, as_json,
         lambda d: f"{verb} {len(d['create'])} and "
                   f"{'would delete' if dry_run else 'deleted'} {len(d['delete'])} Kafka ACL "
                   f"binding(s); {d['unchanged']} already in place")
