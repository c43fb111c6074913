"""``kmq directory``: the directory of public objects (MSMQ's Active Directory role).

The directory holds queue managers, public queues, queue aliases and distribution lists. It is
the embedded store under ``KMQ_HOME`` unless ``KMQ_DIRECTORY_URL`` names an LDAP server;
``KMQ_DIRECTORY_URL=none`` is MSMQ's workgroup mode, where these commands fail with one line.
No Kafka broker is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table

if TYPE_CHECKING:
    from facade.security.acl import SecurityDescriptor
    from facade.directory import Directory

__all__ = ["acl_text", "app", "open_directory", "security_dict"]

app = typer.Typer(help="Initialise and inspect the directory of public objects.",
                  no_args_is_help=True)


@contextmanager
def open_directory(as_json: bool = False) -> Iterator[Directory]:
    """The configured directory, opened for ``KMQ_PRINCIPAL`` and this queue manager's name.

    A :class:`~facade.errors.MessageQueueError` (workgroup mode, server down, no such object,
    access denied...) becomes one error line with its hint and exit code 1; the directory is
    closed either way; ``as_json`` also prints the error as JSON on stdout.
    """
    from facade.config import KmqConfig
    from facade.directory import Directory  # ldap3 is imported only by directory commands

    with fail_on_errors(as_json), Directory.open(KmqConfig.load()) as directory:
        yield directory


def security_dict(security: SecurityDescriptor | None) -> dict[str, Any]:
    """``{"owner": ..., "acl": [{"allow", "principal", "rights"}]}`` for ``--json`` output."""
    if security is None:
        return {"owner": None, "acl": []}
    data = security.to_dict()
    return {"owner": data["owner"], "acl": data["entries"]}


def acl_text(acl: list[dict[str, Any]]) -> str:
    """One line per access-control entry: ``allow Everyone: WRITE_MESSAGE|GET_PROPERTIES``."""
    return "\n".join(f"{'allow' if e['allow'] else 'deny'} {e['principal']}: "
                     f"{'|'.join(e['rights'])}" for e in acl)


@app.command()
def init(as_json: bool = JsonOption) -> None:
    """Create the directory's base entries (suffix, Computers, Aliases, lists); idempotent.

    The embedded directory initializes itself when first opened, so this reports 0 entries
    created there; run it once against a new LDAP server.

    Example: kmq directory init
    """
    with open_directory(as_json) as directory:
        created = directory.initialize()
        status = directory.status()
    emit({"created": created, **status}, as_json,
         lambda d: key_value_table(f"directory initialized ({d['created']} entries created)", d))


@app.command()
def status(as_json: bool = JsonOption) -> None:
    """Show where the directory is, its base DN and domain, and how many objects it holds.

    Example: kmq directory status --json
    """
    with open_directory(as_json) as directory:
        data = directory.status()
    emit(data, as_json, lambda d: key_value_table("directory", d))
