"""LDAP operations shared by every directory call: result codes to kmq errors, one place.

Both stores hand out an ldap3 connection created with ``raise_exceptions=False``, so each
operation's LDAP result code is checked here: "no such object" becomes None or a not-found
answer, and any other refusal becomes :class:`~facade.errors.DirectoryUnavailable` naming the
directory and the operation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import ldap3
from ldap3.utils.conv import escape_filter_chars

from facade.directory.layout import Attr, ObjectClass, distribution_lists_dn, dn_key, normalize_dn
from facade.errors import DirectoryUnavailable, QueueExists

__all__ = ["LdapOperations"]

#: LDAP result codes kmq tells apart (RFC 4511).
SUCCESS, NO_SUCH_ATTRIBUTE, NO_SUCH_OBJECT, ENTRY_ALREADY_EXISTS = 0, 16, 32, 68


class LdapOperations:
    """Search, add, modify and delete with kmq's error handling.

    Args:
        base_dn (str): the directory suffix (default search base).
        describe (Callable[[], str]): the directory's description, for error messages.
    """

    def __init__(self, base_dn: str, describe: Callable[[], str]):
        self.base_dn = base_dn
        self._describe = describe

    @property
    def description(self) -> str:
        """Which directory this is, for messages."""
        return self._describe()

    def base(self, conn: ldap3.Connection, dn: str) -> dict[str, Any] | None:
        """The attributes of entry ``dn``, or None when it does not exist."""
        if not conn.search(normalize_dn(dn), "(objectClass=*)", ldap3.BASE, attributes=["*"]):
            if conn.result.get("result") in (SUCCESS, NO_SUCH_OBJECT):  # success with no entry / noSuchObject
                return None
            raise self.failure(conn, f"read {dn}")
        return dict(conn.response[0]["attributes"]) if conn.response else None

    def exists(self, conn: ldap3.Connection, dn: str) -> bool:
        """True when entry ``dn`` exists."""
        return self.base(conn, dn) is not None

    def search(self, conn: ldap3.Connection, ldap_filter: str, *, base: str | None = None,
                missing_ok: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """Subtree search below ``base`` (default: the suffix): [(dn, attributes)].

        Raises:
            DirectoryUnavailable: the server refused; a missing base too unless ``missing_ok``.
        """
        if not conn.search(base or self.base_dn, ldap_filter, ldap3.SUBTREE, attributes=["*"]):
            code = conn.result.get("result")
            if code == SUCCESS or (code == NO_SUCH_OBJECT and missing_ok):
                return []
            raise self.failure(conn, f"search {ldap_filter}")
        return [(entry["dn"], dict(entry["attributes"])) for entry in conn.response
                if entry.get("type") == "searchResEntry"]

    def add(self, conn: ldap3.Connection, dn: str, attributes: dict[str, Any]) -> None:
        """Add an entry.

        Raises:
            QueueExists: it exists already (another creator won).
            DirectoryUnavailable: any other refusal.
        """
        if not conn.add(normalize_dn(dn), attributes=attributes):
            if conn.result.get("result") == ENTRY_ALREADY_EXISTS:  # entryAlreadyExists: a concurrent creator
                raise QueueExists(f"{dn} already exists in the {self.description}", queue=dn)
            raise self.failure(conn, f"add {dn}")

    def modify(self, conn: ldap3.Connection, dn: str, changes: dict[str, Any], *,
                tolerate_missing: bool = False) -> None:
        """Apply ldap3 ``changes`` to ``dn`` and stamp whenChanged; with ``tolerate_missing``
        deleting an attribute that is not set is not an error.

        Raises:
            DirectoryUnavailable: the server refused.
        """
        now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        changes = {**changes, Attr.WHEN_CHANGED: [(ldap3.MODIFY_REPLACE, [now])]}
        if not conn.modify(normalize_dn(dn), changes):
            # noSuchAttribute: deleting a property that was never set
            if tolerate_missing and conn.result.get("result") == NO_SUCH_ATTRIBUTE:
                for attribute, ops in changes.items():
                    if ops[0][0] != ldap3.MODIFY_DELETE:
                        self.modify(conn, dn, {attribute: ops})
                    elif not conn.modify(normalize_dn(dn), {attribute: ops}) and \
                            conn.result.get("result") != NO_SUCH_ATTRIBUTE:
                        raise self.failure(conn, f"modify {dn}")
                return
            raise self.failure(conn, f"modify {dn}")

    def delete(self, conn: ldap3.Connection, dn: str) -> None:
        """Delete ``dn`` (already gone is fine).

        Raises:
            DirectoryUnavailable: the server refused.
        """
        if not conn.delete(normalize_dn(dn)) and conn.result.get("result") != NO_SUCH_OBJECT:
            raise self.failure(conn, f"delete {dn}")

    def remove_from_lists(self, conn: ldap3.Connection, dn: str) -> None:
        """Drop ``dn`` from every list's member attribute (refint's job, done by kmq too)."""
        target = normalize_dn(dn)
        holders = self.search(conn, f"(&(objectClass={ObjectClass.DISTRIBUTION_LIST})"
                                     f"({Attr.MEMBER}={escape_filter_chars(target)}))",
                               base=distribution_lists_dn(self.base_dn), missing_ok=True)
        for holder_dn, attrs in holders:
            stored = [m for m in _members(attrs)
                      if dn_key(m) == dn_key(target)]
            if stored and not conn.modify(holder_dn, {Attr.MEMBER: [(ldap3.MODIFY_DELETE, stored)]}):
                if conn.result.get("result") != NO_SUCH_ATTRIBUTE:  # already gone (refint got there first)
                    raise self.failure(conn, f"remove {dn} from {holder_dn}")

    def require_container(self, conn: ldap3.Connection, dn: str) -> None:
        """Raise DirectoryUnavailable ("run `kmq directory init`") when ``dn`` is missing."""
        if not self.exists(conn, dn):
            raise DirectoryUnavailable(
                f"the {self.description} is not initialized ({dn} is missing)",
                hint="run `kmq directory init`")

    def failure(self, conn: ldap3.Connection, operation: str) -> DirectoryUnavailable:
        """The error for a refused ``operation``, with the server's result."""
        result = conn.result or {}
        return DirectoryUnavailable(
            f"the {self.description} refused to {operation}: {result.get('description')} "
            f"({result.get('message') or 'no detail'})",
            hint="check that the server has deploy/ldap/kmq.schema loaded and that the bind DN "
            "may write (see deploy/ldap/README.md)")


def _members(attrs: dict[str, Any]) -> list[str]:
    values = attrs.get(Attr.MEMBER) or []
    return [normalize_dn(v) for v in ([values] if isinstance(values, str) else values)]
