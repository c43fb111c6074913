"""The directory of public objects: MSMQ's Active Directory role, over any kmq directory store.

:class:`Directory` publishes and finds queue managers, public queues, queue aliases and
distribution lists, expands lists to their recipients, and enforces the permissions seed 000
gives those objects. It talks LDAP through a *store*: the embedded ldap3 mock
(:class:`~facade.directory.embedded.EmbeddedDirectoryStore`) or a real server
(:class:`~facade.directory.ldap.LdapDirectoryStore`), so the same code and the same tests run on
both.

Permissions are attributes on the entries (``kmqOwner``, ``kmqSecurityDescriptor``) and are
enforced here, for the caller named by ``principal``; LDAP ACLs only decide who may write the
entries at all.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from dataclasses import dataclass, replace
from collections.abc import Hashable
from typing import Any, Protocol

import ldap3

from facade.security.acl import AccessRight, ObjectKind, SecurityDescriptor, require_membership_change
from facade.config import KmqConfig
from facade.directory.layout import (
    Attr,
    ObjectClass,
    alias_dn,
    aliases_dn,
    computer_dn,
    computers_dn,
    distribution_list_dn,
    distribution_lists_dn,
    dn_key,
    normalize_dn,
    parent_dn,
    public_queue_dn,
    queue_manager_dn,
    rdn_value,
)
from facade.directory.operations import LdapOperations
from facade.directory.patterns import LabelPattern
from facade.directory.objects import (
    DirectoryObject,
    DistributionListEntry,
    GroupScope,
    PublicQueueEntry,
    QueueAliasEntry,
    QueueManagerEntry,
    property_value,
)
from facade.errors import (
    DirectoryObjectNotFound,
    DirectoryUnavailable,
    InvalidParameter,
    QueueExists,
)
from facade.model.formatnames import (
    DirectFormatName,
    DistributionListFormatName,
    FormatName,
    PrivateFormatName,
    PublicFormatName,
    parse_format_name,
    parse_path_name,
)

__all__ = ["Directory", "DirectoryStore", "Recipient", "open_store"]

log = logging.getLogger("kmq.directory")

#: msMQ-Recipient-FormatName length limits (characters).
MAX_ALIAS_FORMAT_NAME = 255
#: AD limits cn to 64 characters.
MAX_OBJECT_NAME = 64
#: Distribution-list expansions one Directory keeps (validated by the store's change marker).
_MAX_CACHED_EXPANSIONS = 256
_BAD_NAME = re.compile(r"[\x00-\x1f\x7f]")


class DirectoryStore(Protocol):
    """What :class:`Directory` needs from a backend (embedded file or LDAP server)."""

    base_dn: str
    #: False when the server mis-evaluates escaped substring filters (ldap3's mock server):
    #: :meth:`Directory.locate` then leaves the label out of the filter and matches it in Python.
    evaluates_substring_filters: bool

    @property
    def description(self) -> str: ...
    def open(self) -> Any: ...
    def close(self) -> None: ...
    def read(self) -> contextlib.AbstractContextManager[ldap3.Connection]: ...
    def write(self) -> contextlib.AbstractContextManager[ldap3.Connection]: ...
    def initialize(self, base_dn: str | None = None) -> int: ...
    def change_marker(self, connection: ldap3.Connection) -> Hashable | None: ...


def open_store(config: KmqConfig) -> DirectoryStore:
    """Open the store the configuration names: embedded (default) or an LDAP server.

    Raises:
        DirectoryUnavailable: workgroup mode (``KMQ_DIRECTORY_URL=none``), or the store cannot
            be opened (server down, file unreadable).
        ConfigurationError: bad settings (bind DN rejected, bad base DN).
    """
    settings = config.directory
    if getattr(settings, "is_workgroup", False):
        raise DirectoryUnavailable(
            "no directory: kmq runs in workgroup mode (KMQ_DIRECTORY_URL=none), where public "
            "queues, queue aliases and distribution lists do not exist",
            hint="unset KMQ_DIRECTORY_URL to use the embedded directory, or point it at an LDAP "
            "server; direct and private format names work without one")
    if settings.is_embedded:
        from facade.directory.embedded import EmbeddedDirectoryStore

        store: DirectoryStore = EmbeddedDirectoryStore(config.embedded_directory_path,
                                                       base_dn=settings.base_dn)
        store.open()
        # The embedded store is kmq's own: it is ready to use without `kmq directory init`.
        store.initialize()
        return store
    from facade.directory.ldap import LdapDirectoryStore

    store = LdapDirectoryStore(settings)
    store.open()
    return store


@dataclass(frozen=True)
class Recipient:
    """One destination a distribution list expands to.

    Attributes:
        format_name (str): what to send to: ``PUBLIC=<guid>`` for a public queue, the target
            format name for a queue alias.
        source (DirectoryObject): the public queue or alias entry it came from.
    """

    format_name: str
    source: PublicQueueEntry | QueueAliasEntry


class Directory:
    """MSMQ's directory service for one kmq installation.

    Args:
        store (DirectoryStore): an opened embedded or LDAP store.
        principal (str): the caller's identity for permission checks (``KMQ_PRINCIPAL``).
        local_machine (str | None): the queue manager that ``.`` stands for in path names.

    Every method raises :class:`~facade.errors.DirectoryUnavailable` (naming the directory)
    when the store cannot be reached, and changes nothing in that case.
    """

    def __init__(self, store: DirectoryStore, principal: str, local_machine: str | None = None):
        self.store = store
        self.principal = principal
        self.local_machine = local_machine
        self.base_dn = normalize_dn(store.base_dn)
        self._ops = LdapOperations(self.base_dn, lambda: self.store.description)
        #: Expansions validated by the store's change marker: (list reference, check_send,
        #: principal) ->
        #: (marker when read, recipients).
        self._expansions: dict[tuple[str, bool, str],
                               tuple[Hashable, tuple[Recipient, ...]]] = {}

    @classmethod
    def open(cls, config: KmqConfig | None = None) -> Directory:
        """Open the configured directory (see :func:`open_store`) for the configuration's
        principal (:func:`facade.security.principal.resolve_principal`: the authenticated identity, or
        the declared one in development mode).

        Raises:
            DirectoryUnavailable: workgroup mode, or the store cannot be reached.
            ConfigurationError: bad directory settings, or no acceptable principal.
        """
        from facade.security.principal import resolve_principal

        config = config or KmqConfig.load()
        return cls(open_store(config), resolve_principal(config).name, config.queue_manager)

    @property
    def description(self) -> str:
        """Which directory this is, e.g. ``LDAP directory ldap://127.0.0.1:3890``."""
        return self.store.description

    @property
    def domain(self) -> str | None:
        """The DNS domain of the base DN's ``dc=`` parts (``dc=kmq,dc=local`` -> ``kmq.local``)."""
        parts = [p.split("=", 1)[1] for p in self.base_dn.split(",") if p.startswith("dc=")]
        return ".".join(parts).lower() or None

    def close(self) -> None:
        """Release the store (the embedded one saves pending changes)."""
        self.store.close()

    def __enter__(self) -> Directory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- installation --------------------------------------------------------------------------

    def initialize(self) -> int:
        """Create the base entries that are missing (``kmq directory init``); idempotent.

        Returns:
            int: entries created.
        """
        return self.store.initialize(self.base_dn)

    def status(self) -> dict[str, Any]:
        """What ``kmq directory status`` shows: where it is and how many objects it holds.

        Returns:
            dict: ``directory``, ``base_dn``, ``domain``, ``initialized`` (bool), and counts
            ``queue_managers``, ``public_queues``, ``aliases``, ``distribution_lists``.
        """
        with self.store.read() as conn:
            initialized = all(self._ops.exists(conn, dn) for dn in
                              (self.base_dn, computers_dn(self.base_dn),
                               aliases_dn(self.base_dn), distribution_lists_dn(self.base_dn)))
            counts = {
                key: (len(self._ops.search(conn, f"(objectClass={cls})")) if initialized else 0)
                for key, cls in (("queue_managers", ObjectClass.QUEUE_MANAGER),
                                 ("public_queues", ObjectClass.QUEUE),
                                 ("aliases", ObjectClass.ALIAS),
                                 ("distribution_lists", ObjectClass.DISTRIBUTION_LIST))
            }
        return {"directory": self.description, "base_dn": self.base_dn, "domain": self.domain,
                "initialized": initialized, **counts}

    # -- queue managers ------------------------------------------------------------------------

    def publish_queue_manager(self, name: str, guid: uuid.UUID) -> QueueManagerEntry:
        """Publish a queue manager (computer + ``mSMQConfiguration``) if it is not there yet.

        Args:
            name (str): the queue manager (computer) name.
            guid (uuid.UUID): its QMID.

        Returns:
            QueueManagerEntry: the published entry (an existing one keeps its GUID).
        """
        with self.store.write() as conn:
            existing = self._queue_manager(conn, name)
            if existing is not None:
                return existing
            host = computer_dn(name, self.base_dn)
            if not self._ops.exists(conn, host):
                self._ops.add(conn, host, {Attr.OBJECT_CLASS: [ObjectClass.TOP, ObjectClass.COMPUTER],
                                       Attr.CN: name})
            dn = queue_manager_dn(name, self.base_dn)
            security = SecurityDescriptor.default_for(ObjectKind.QUEUE_MANAGER, self.principal)
            self._ops.add(conn, dn, {Attr.OBJECT_CLASS: [ObjectClass.TOP, ObjectClass.QUEUE_MANAGER],
                                 Attr.CN: "msmq", Attr.GUID: str(guid),
                                 Attr.OWNER: security.owner,
                                 Attr.SECURITY_DESCRIPTOR: security.to_values()})
            return QueueManagerEntry(name, guid, dn)

    def queue_manager(self, name: str) -> QueueManagerEntry | None:
        """The published queue manager ``name``, or None."""
        with self.store.read() as conn:
            return self._queue_manager(conn, name)

    def _queue_manager(self, conn: ldap3.Connection, name: str) -> QueueManagerEntry | None:
        dn = queue_manager_dn(name, self.base_dn)
        found = self._ops.base(conn, dn)
        return None if found is None else QueueManagerEntry.from_entry(name, dn, found)

    # -- public queues -------------------------------------------------------------------------

    def create_public_queue(self, entry: PublicQueueEntry) -> PublicQueueEntry:
        """Publish a public queue under its queue manager (which must be published).

        Args:
            entry (PublicQueueEntry): GUID, queue manager, name and properties. Without a
                security descriptor it gets MSMQ's default, owned by the caller.

        Returns:
            PublicQueueEntry: the entry as stored (with its DN).

        Raises:
            QueueExists: a public queue with that path name exists.
            DirectoryObjectNotFound: the queue manager is not published.
        """
        if entry.security is None:
            entry = replace(entry, security=SecurityDescriptor.default_for(
                ObjectKind.QUEUE, self.principal))
        dn = public_queue_dn(entry.queue_manager, entry.queue_name, self.base_dn)
        with self.store.write() as conn:
            if self._queue_manager(conn, entry.queue_manager) is None:
                raise DirectoryObjectNotFound(
                    f"queue manager {entry.queue_manager!r} is not published in the {self.description}",
                    queue=entry.path_name, hint="open the queue manager once with a directory "
                    "configured (QueueManager.open publishes it)")
            if self._ops.exists(conn, dn):
                raise QueueExists(f"public queue {entry.path_name!r} already exists in the "
                                  f"{self.description}", queue=entry.path_name)
            self._ops.add(conn, dn, entry.to_attributes())
        return replace(entry, dn=normalize_dn(dn))

    def public_queue(self, guid: uuid.UUID | str) -> PublicQueueEntry:
        """The public queue ``PUBLIC=<guid>`` (MSMQ: ``MQGetQueueProperties`` via the directory).

        Raises:
            DirectoryObjectNotFound: no public queue has that GUID.
        """
        with self.store.read() as conn:
            return self._public_queue(conn, _as_uuid(guid))

    def find_public_queue(self, path_name: str) -> PublicQueueEntry | None:
        """The public queue with path name ``<queue manager>\\<queue>``, or None.

        Raises:
            QueuePathNameError: malformed path name.
        """
        path = parse_path_name(path_name)
        if path.private or path.queue_name is None or path.is_read_only or path.subqueue:
            return None
        with self.store.read() as conn:
            return self._find_path(conn, path_name)

    def update_public_queue(self, guid: uuid.UUID | str, **changes: Any) -> PublicQueueEntry:
        """Change a public queue's properties in the directory (``MQSetQueueProperties``).

        Args:
            guid: the queue's GUID.
            **changes: PublicQueueEntry property names (label, journal, quota_kb, ...).

        Raises:
            DirectoryObjectNotFound: no such queue.
            InvalidParameter: an unknown property.
            AccessDenied: the caller lacks SET_PROPERTIES.
        """
        unknown = set(changes) - set(PublicQueueEntry.PROPERTY_ATTRIBUTES)
        if unknown:
            raise InvalidParameter(f"public queue properties {sorted(unknown)} are not kept in "
                                   "the directory")
        with self.store.write() as conn:
            entry = self._public_queue(conn, _as_uuid(guid))
            _stored_security(entry).require(self.principal, AccessRight.SET_PROPERTIES,
                                            entry.path_name)
            modification: dict[str, Any] = {}
            for name, value in changes.items():
                ldap_value = property_value(name, value)
                attribute = PublicQueueEntry.PROPERTY_ATTRIBUTES[name]
                modification[attribute] = ([(ldap3.MODIFY_DELETE, [])] if ldap_value is None
                                           else [(ldap3.MODIFY_REPLACE, [ldap_value])])
            self._ops.modify(conn, entry.dn, modification, tolerate_missing=True)
            return self._public_queue(conn, entry.guid)

    def delete_public_queue(self, guid: uuid.UUID | str) -> None:
        """Unpublish a public queue and remove it from every distribution list.

        Raises:
            DirectoryObjectNotFound: no such queue.
            AccessDenied: the caller lacks DELETE on it.
        """
        with self.store.write() as conn:
            self._unpublish(conn, self._public_queue(conn, _as_uuid(guid)))

    def locate(self, *, label: str | None = None, type_id: uuid.UUID | str | None = None,
               queue_manager: str | None = None, **properties: Any) -> list[PublicQueueEntry]:
        """Find public queues (MSMQ ``MQLocateBegin`` / ``MessageQueue.GetPublicQueues``).

        Every restriction given must hold (AND). Matching is case-insensitive.

        Args:
            label (str | None): PROPID_Q_LABEL pattern: ``*`` matches any characters
                (``"Order*"``), ``\\*`` is a literal star and ``\\\\`` a literal backslash;
                every other character matches itself, ignoring case, and the whole label must
                match. ``""`` matches the queues without a label, ``"*"`` every queue (see
                :mod:`facade.directory.patterns`). The same on every store.
            type_id (uuid.UUID | str | None): PROPID_Q_TYPE.
            queue_manager (str | None): only that queue manager's queues.
            **properties: equality on other properties: transactional, journal, authenticate
                (bool), base_priority, privacy_level, quota_kb, journal_quota_kb (int).

        Returns:
            list[PublicQueueEntry]: matches, sorted by path name.

        Raises:
            InvalidParameter: an unknown restriction, or a label pattern ending in a lone
                backslash.
        """
        terms = [f"(objectClass={ObjectClass.QUEUE})"]
        pattern = None if label is None else LabelPattern.parse(label)
        # The pattern is matched in Python below on every store (one answer everywhere); a
        # server that evaluates escaped filters also narrows the search with it.
        label_term = pattern.ldap_filter(Attr.LABEL) if pattern is not None else None
        if label_term is not None and self.store.evaluates_substring_filters:
            terms.append(label_term)
        if type_id is not None:
            terms.append(f"({Attr.QUEUE_TYPE}={_as_uuid(type_id)})")
        allowed = set(PublicQueueEntry.PROPERTY_ATTRIBUTES) - {"label", "type_id", "description"}
        unknown = set(properties) - allowed
        if unknown:
            raise InvalidParameter(f"cannot locate public queues by {sorted(unknown)}",
                                   hint=f"restrictions: label, type_id, queue_manager, "
                                   f"{', '.join(sorted(allowed))}")
        for name, value in properties.items():
            text = ("TRUE" if value else "FALSE") if isinstance(value, bool) else str(int(value))
            terms.append(f"({PublicQueueEntry.PROPERTY_ATTRIBUTES[name]}={text})")
        search_base = (queue_manager_dn(queue_manager, self.base_dn) if queue_manager
                       else computers_dn(self.base_dn))
        with self.store.read() as conn:
            found = self._ops.search(conn, "(&" + "".join(terms) + ")", base=search_base,
                                 missing_ok=queue_manager is not None)
        queues = [PublicQueueEntry.from_entry(dn, attrs, _queue_manager_of(dn))
                  for dn, attrs in found]
        return sorted((q for q in queues if pattern is None or pattern.matches(q.label)),
                      key=lambda q: q.path_name)

    # -- queue aliases -------------------------------------------------------------------------

    def create_alias(self, name: str, recipient_format_name: str,
                     description: str = "") -> QueueAliasEntry:
        """Create a queue alias (``msMQ-Custom-Recipient``) for a queue's format name.

        Args:
            name (str): the alias name (1-64 characters).
            recipient_format_name (str): the queue it stands for: a PUBLIC=, PRIVATE= or DIRECT=
                format name (1-255 characters), not a journal, dead-letter queue or subqueue.
            description (str): free text.

        Raises:
            InvalidParameter: bad name or format name.
            QueueExists: an alias with that name exists.
        """
        target = _alias_target(recipient_format_name)
        entry = QueueAliasEntry(
            guid=uuid.uuid4(), name=_object_name(name, "queue alias"), recipient_format_name=target,
            security=SecurityDescriptor.default_for(ObjectKind.ALIAS, self.principal),
            description=description)
        with self.store.write() as conn:
            return self._publish(conn, entry, alias_dn(entry.name, self.base_dn),
                                 aliases_dn(self.base_dn))

    def alias(self, reference: str) -> QueueAliasEntry:
        """A queue alias by name (``alias:`` prefix optional).

        Raises:
            DirectoryObjectNotFound: no such alias.
        """
        with self.store.read() as conn:
            return self._alias(conn, reference)

    def aliases(self) -> list[QueueAliasEntry]:
        """Every queue alias, sorted by name."""
        with self.store.read() as conn:
            found = self._ops.search(conn, f"(objectClass={ObjectClass.ALIAS})",
                                 base=aliases_dn(self.base_dn), missing_ok=True)
        return sorted((QueueAliasEntry.from_entry(dn, a) for dn, a in found),
                      key=lambda e: e.name.casefold())

    def set_alias_target(self, reference: str, recipient_format_name: str) -> QueueAliasEntry:
        """Point an alias at another queue; lists that hold the alias follow without changes.

        Raises:
            DirectoryObjectNotFound: no such alias.
            InvalidParameter: bad format name.
            AccessDenied: the caller lacks SET_PROPERTIES on the alias.
        """
        target = _alias_target(recipient_format_name)
        with self.store.write() as conn:
            entry = self._alias(conn, reference)
            _stored_security(entry).require(self.principal, AccessRight.SET_PROPERTIES,
                                            entry.name)
            self._ops.modify(conn, entry.dn, {Attr.RECIPIENT_FORMAT_NAME: [(ldap3.MODIFY_REPLACE, [target])]})
            return replace(entry, recipient_format_name=target)

    def delete_alias(self, reference: str) -> None:
        """Delete a queue alias; it is removed from every distribution list (seed 000).

        slapd's refint overlay would do the removal too; doing it here keeps the embedded store
        (which has no referential integrity) and any LDAP server consistent.

        Raises:
            DirectoryObjectNotFound: no such alias.
            AccessDenied: the caller lacks DELETE on it.
        """
        with self.store.write() as conn:
            self._unpublish(conn, self._alias(conn, reference))

    # -- distribution lists --------------------------------------------------------------------

    def create_distribution_list(self, name: str, description: str = "",
                                 scope: str = "universal") -> DistributionListEntry:
        """Create an empty distribution list (an AD ``group``) owned by the caller.

        Args:
            name (str): list name (1-64 characters).
            description (str): free text.
            scope (str): ``universal``, ``global`` or ``domain`` (recorded as groupType).

        Raises:
            InvalidParameter: bad name or scope.
            QueueExists: a list with that name exists.
        """
        if scope not in GroupScope.BY_NAME:
            raise InvalidParameter(f"distribution list scope {scope!r} is unknown",
                                   hint="use universal, global or domain")
        entry = DistributionListEntry(
            guid=uuid.uuid4(), name=_object_name(name, "distribution list"),
            scope=GroupScope.BY_NAME[scope], description=description, domain=self.domain,
            security=SecurityDescriptor.default_for(ObjectKind.DISTRIBUTION_LIST, self.principal))
        with self.store.write() as conn:
            return self._publish(conn, entry, distribution_list_dn(entry.name, self.base_dn),
                                 distribution_lists_dn(self.base_dn))

    def distribution_list(self, reference: str) -> DistributionListEntry:
        """A distribution list by name, ``dl:<name>`` or ``DL=<guid>[@domain]``.

        Raises:
            DirectoryObjectNotFound: no such list, or another domain.
        """
        with self.store.read() as conn:
            return self._list(conn, reference)

    def distribution_lists(self) -> list[DistributionListEntry]:
        """Every distribution list, sorted by name."""
        with self.store.read() as conn:
            found = self._ops.search(conn, f"(objectClass={ObjectClass.DISTRIBUTION_LIST})",
                                 base=distribution_lists_dn(self.base_dn), missing_ok=True)
        return sorted((DistributionListEntry.from_entry(dn, a, self.domain) for dn, a in found),
                      key=lambda e: e.name.casefold())

    def delete_distribution_list(self, reference: str) -> None:
        """Delete a distribution list; it leaves every list that contained it.

        Raises:
            DirectoryObjectNotFound: no such list.
            AccessDenied: the caller lacks DELETE on it.
        """
        with self.store.write() as conn:
            self._unpublish(conn, self._list(conn, reference))

    def add_member(self, list_reference: str, member_reference: str) -> bool:
        """Add a public queue, queue alias or list to a distribution list.

        Both sides must consent (seed 000): the caller needs ADD_REMOVE_ELEMENT on the list and
        ADD_REMOVE_SELF on the member. By default only each object's owner holds them
        (:meth:`facade.security.acl.SecurityDescriptor.default_for`): a queue, alias or list owned by
        someone else joins after its owner grants ADD_REMOVE_SELF.

        Args:
            list_reference (str): the list (name, ``dl:<name>`` or ``DL=<guid>``).
            member_reference (str): ``PUBLIC=<guid>``, a public queue path name
                (``host\\queue``), ``alias:<name>``, ``dl:<name>`` or ``DL=<guid>``.

        Returns:
            bool: False when it was already a member.

        Raises:
            DirectoryObjectNotFound: the list or member does not exist.
            InvalidParameter: the member is a private or URL queue (use an alias) or the list
                itself.
            AccessDenied: one side refused.
        """
        with self.store.write() as conn:
            container = self._list(conn, list_reference)
            member = self._member(conn, member_reference)
            if same_object(member, container):
                raise InvalidParameter(f"distribution list {container.name!r} cannot contain "
                                       "itself", queue=container.name)
            require_membership_change(_stored_security(container), _stored_security(member),
                                      self.principal,
                                      adding=True, container_name=container.name,
                                      member_name=display_name(member))
            if dn_key(member.dn) in {dn_key(m) for m in container.members}:
                return False
            self._ops.modify(conn, container.dn, {Attr.MEMBER: [(ldap3.MODIFY_ADD, [member.dn])]})
            return True

    def remove_member(self, list_reference: str, member_reference: str) -> bool:
        """Remove a member from a distribution list; either side's permission suffices (seed
        000): ADD_REMOVE_ELEMENT on the list (its owner, by default) or ADD_REMOVE_SELF on the
        member (the member's owner, by default).

        Returns:
            bool: False when it was not a member.

        Raises:
            DirectoryObjectNotFound: the list or member does not exist.
            AccessDenied: the caller has neither ADD_REMOVE_ELEMENT on the list nor
                ADD_REMOVE_SELF on the member.
        """
        with self.store.write() as conn:
            container = self._list(conn, list_reference)
            member = self._member(conn, member_reference)
            require_membership_change(_stored_security(container), _stored_security(member),
                                      self.principal,
                                      adding=False, container_name=container.name,
                                      member_name=display_name(member))
            stored = [m for m in container.members if dn_key(m) == dn_key(member.dn)]
            if not stored:
                return False
            self._ops.modify(conn, container.dn, {Attr.MEMBER: [(ldap3.MODIFY_DELETE, stored)]})
            return True

    def members(self, list_reference: str) -> list[DirectoryObject]:
        """The top-level members of a list, in directory order (dangling DNs skipped)."""
        with self.store.read() as conn:
            container = self._list(conn, list_reference)
            return [m for m in (self._by_dn(conn, dn) for dn in container.members) if m is not None]

    def expand(self, list_reference: str | uuid.UUID, *, check_send: bool = True) -> list[Recipient]:
        """Expand a distribution list to its recipients, as MSMQ does at send time.

        Nested lists are expanded, aliases translated to their format names, and each object is
        visited once, so duplicates are dropped and cycles broken (seed 000: D1 = {Q1, D2},
        D2 = {Q1, D1} expands to Q1 once). Membership is read now: a member added later gets
        only later messages.

        Args:
            list_reference: the list (name, ``DL=<guid>[@domain]`` or its GUID).
            check_send (bool): require the Send To right on the list and on each of its
                top-level members (MSMQ checks only the top level).

        Returns:
            list[Recipient]: in depth-first directory order.

        Raises:
            DirectoryObjectNotFound: no such list.
            AccessDenied: the caller lacks Send To on the list or a top-level member.
        """
        reference = f"DL={list_reference}" if isinstance(list_reference, uuid.UUID) else list_reference
        with self.store.read() as conn:
            # Read before the entries: a change after this read gives a new marker, so an
            # expansion is never kept under a marker newer than what it read.
            marker = self.store.change_marker(conn)
            key = (reference, check_send, self.principal)
            cached = self._expansions.get(key) if marker is not None else None
            if cached is not None and cached[0] == marker:
                return list(cached[1])
            recipients = self._expand(conn, reference, check_send)
            if marker is not None:
                if len(self._expansions) >= _MAX_CACHED_EXPANSIONS:
                    self._expansions.clear()
                self._expansions[key] = (marker, tuple(recipients))
            return recipients

    def _expand(self, conn: ldap3.Connection, reference: str,
                check_send: bool) -> list[Recipient]:
        """:meth:`expand` read from the store (no cache)."""
        root = self._list(conn, reference)
        if check_send:
            _stored_security(root).require(self.principal, AccessRight.WRITE_MESSAGE, root.name)
        recipients: list[Recipient] = []
        visited = {dn_key(root.dn)}
        for dn in root.members:
            member = self._by_dn(conn, dn)
            if member is None:
                continue
            if check_send:
                _stored_security(member).require(self.principal, AccessRight.WRITE_MESSAGE,
                                        display_name(member))
            self._expand_into(conn, member, visited, recipients)
        return recipients

    def check_send(self, entry: DirectoryObject) -> None:
        """Require the Send To (WRITE_MESSAGE) right on a directory object.

        Raises:
            AccessDenied: the caller lacks it.
        """
        _stored_security(entry).require(self.principal, AccessRight.WRITE_MESSAGE,
                                        display_name(entry))

    def _expand_into(self, conn: ldap3.Connection, member: DirectoryObject, visited: set[str],
                     recipients: list[Recipient]) -> None:
        key = dn_key(member.dn)
        if key in visited:
            return
        visited.add(key)
        if isinstance(member, PublicQueueEntry):
            recipients.append(Recipient(member.format_name, member))
        elif isinstance(member, QueueAliasEntry):
            recipients.append(Recipient(member.recipient_format_name, member))
        else:
            for dn in member.members:
                child = self._by_dn(conn, dn)
                if child is not None:
                    self._expand_into(conn, child, visited, recipients)

    # -- security ------------------------------------------------------------------------------

    def security(self, reference: str) -> SecurityDescriptor:
        """The security descriptor of a directory object (any member reference form)."""
        with self.store.read() as conn:
            return _stored_security(self._object(conn, reference))

    def set_security(self, reference: str, descriptor: SecurityDescriptor) -> SecurityDescriptor:
        """Replace an object's owner and access list.

        Raises:
            AccessDenied: the caller lacks CHANGE_PERMISSIONS (and, to change the owner,
                TAKE_OWNERSHIP).
        """
        with self.store.write() as conn:
            entry = self._object(conn, reference)
            name = display_name(entry)
            _stored_security(entry).require(self.principal, AccessRight.CHANGE_PERMISSIONS, name)
            if descriptor.owner.casefold() != _stored_security(entry).owner.casefold():
                _stored_security(entry).require(self.principal, AccessRight.TAKE_OWNERSHIP, name)
            self._ops.modify(conn, entry.dn, {
                Attr.OWNER: [(ldap3.MODIFY_REPLACE, [descriptor.owner])],
                Attr.SECURITY_DESCRIPTOR: [(ldap3.MODIFY_REPLACE, descriptor.to_values())],
            })
            return descriptor

    # -- writes shared by every kind ------------------------------------------------------------

    def _publish(self, conn: ldap3.Connection, entry: Any, dn: str, container: str) -> Any:
        """Add a new alias or list entry under ``container``; returns it with its DN."""
        self._ops.require_container(conn, container)
        if self._ops.exists(conn, dn):
            name = display_name(entry)
            raise QueueExists(f"{entry.kind} {name!r} already exists in the {self.description}",
                              queue=name)
        self._ops.add(conn, dn, entry.to_attributes())
        return replace(entry, dn=normalize_dn(dn))

    def _unpublish(self, conn: ldap3.Connection, entry: DirectoryObject) -> None:
        """Delete an entry (DELETE right needed) after taking it out of every list."""
        _stored_security(entry).require(self.principal, AccessRight.DELETE, display_name(entry))
        self._ops.remove_from_lists(conn, entry.dn)
        self._ops.delete(conn, entry.dn)

    # -- lookups -------------------------------------------------------------------------------

    def _object(self, conn: ldap3.Connection, reference: str) -> DirectoryObject:
        text = reference.strip()
        lowered = text.lower()
        if lowered.startswith(("dl:", "dl=")):
            return self._list(conn, text)
        if lowered.startswith("alias:"):
            return self._alias(conn, text)
        if lowered.startswith("public="):
            return self._public_queue(conn, _public_guid(text))
        found = self._find_path(conn, text)
        if found is None:
            raise DirectoryObjectNotFound(f"no public queue {text!r} in the {self.description}",
                                          queue=text)
        return found

    def _member(self, conn: ldap3.Connection, reference: str) -> DirectoryObject:
        text = reference.strip()
        lowered = text.lower()
        if lowered.startswith(("direct=", "private=")) or "\\private$\\" in lowered:
            raise InvalidParameter(
                f"{text!r} cannot be a distribution-list member: private and URL-named queues "
                "join a list only through a queue alias",
                queue=text, hint=f"kmq alias create NAME '{text}', then add alias:NAME")
        return self._object(conn, text)

    def _find_path(self, conn: ldap3.Connection, text: str) -> PublicQueueEntry | None:
        path = parse_path_name(text)
        if path.private or path.queue_name is None or path.journal or path.subqueue:
            raise InvalidParameter(f"{text!r} is not a public queue path name",
                                   queue=text, hint="use HOST\\QUEUE, PUBLIC=<guid>, "
                                   "alias:NAME or dl:NAME")
        machine = self.local_machine if path.is_local and self.local_machine else path.machine
        dn = public_queue_dn(machine, path.queue_name, self.base_dn)
        found = self._ops.base(conn, dn)
        return None if found is None else PublicQueueEntry.from_entry(dn, found, machine)

    def _public_queue(self, conn: ldap3.Connection, guid: uuid.UUID) -> PublicQueueEntry:
        found = self._ops.search(conn, f"(&(objectClass={ObjectClass.QUEUE})({Attr.GUID}={guid}))",
                             base=computers_dn(self.base_dn), missing_ok=True)
        if not found:
            raise DirectoryObjectNotFound(f"no public queue PUBLIC={guid} in the {self.description}",
                                          queue=f"PUBLIC={guid}",
                                          hint="find public queues and their GUIDs with `kmq queue locate`")
        dn, attrs = found[0]
        return PublicQueueEntry.from_entry(dn, attrs, _queue_manager_of(dn))

    def _alias(self, conn: ldap3.Connection, reference: str) -> QueueAliasEntry:
        name = reference.strip()
        name = name[len("alias:"):] if name.lower().startswith("alias:") else name
        dn = alias_dn(_object_name(name, "queue alias"), self.base_dn)
        found = self._ops.base(conn, dn)
        if found is None or not _has_class(found, ObjectClass.ALIAS):
            raise DirectoryObjectNotFound(f"no queue alias {name!r} in the {self.description}",
                                          queue=name, hint="list them with `kmq alias list`")
        return QueueAliasEntry.from_entry(dn, found)

    def _list(self, conn: ldap3.Connection, reference: str) -> DistributionListEntry:
        text = reference.strip()
        if text.lower().startswith("dl="):
            fn = parse_format_name(text)
            assert isinstance(fn, DistributionListFormatName)  # "DL=" parses to nothing else
            return self._list_by_guid(conn, fn)
        name = text[len("dl:"):] if text.lower().startswith("dl:") else text
        dn = distribution_list_dn(_object_name(name, "distribution list"), self.base_dn)
        found = self._ops.base(conn, dn)
        if found is None or not _has_class(found, ObjectClass.DISTRIBUTION_LIST):
            raise DirectoryObjectNotFound(f"no distribution list {name!r} in the {self.description}",
                                          queue=name, hint="list them with `kmq dl list`")
        return DistributionListEntry.from_entry(dn, found, self.domain)

    def _list_by_guid(self, conn: ldap3.Connection,
                      fn: DistributionListFormatName) -> DistributionListEntry:
        if fn.domain is not None and fn.domain != self.domain:
            raise DirectoryObjectNotFound(
                f"{fn} names domain {fn.domain!r}, but the {self.description} holds domain "
                f"{self.domain!r}", queue=str(fn), hint="kmq has one directory per base DN: "
                "drop @domain or use this directory's domain")
        found = self._ops.search(
            conn, f"(&(objectClass={ObjectClass.DISTRIBUTION_LIST})({Attr.GUID}={fn.list_id}))",
            base=distribution_lists_dn(self.base_dn), missing_ok=True)
        if not found:
            raise DirectoryObjectNotFound(f"no distribution list {fn} in the {self.description}",
                                          queue=str(fn), hint="list them with `kmq dl list`")
        dn, attrs = found[0]
        return DistributionListEntry.from_entry(dn, attrs, self.domain)

    def _by_dn(self, conn: ldap3.Connection, dn: str) -> DirectoryObject | None:
        attrs = self._ops.base(conn, dn)
        if attrs is None:
            log.warning("distribution-list member %s no longer exists; skipped", dn)
            return None
        if _has_class(attrs, ObjectClass.QUEUE):
            return PublicQueueEntry.from_entry(dn, attrs, _queue_manager_of(dn))
        if _has_class(attrs, ObjectClass.ALIAS):
            return QueueAliasEntry.from_entry(dn, attrs)
        if _has_class(attrs, ObjectClass.DISTRIBUTION_LIST):
            return DistributionListEntry.from_entry(dn, attrs, self.domain)
        log.warning("distribution-list member %s is not a queue, alias or list; skipped", dn)
        return None

# --- helpers ---------------------------------------------------------------------------------


def display_name(entry: DirectoryObject) -> str:
    """How messages name an object: path name, ``alias:<name>`` or ``dl:<name>``."""
    if isinstance(entry, PublicQueueEntry):
        return entry.path_name
    return f"alias:{entry.name}" if isinstance(entry, QueueAliasEntry) else f"dl:{entry.name}"


def same_object(first: DirectoryObject, second: DirectoryObject) -> bool:
    """True when both are the same entry."""
    return dn_key(first.dn) == dn_key(second.dn)


def _has_class(attrs: dict[str, Any], object_class: str) -> bool:
    classes = attrs.get(Attr.OBJECT_CLASS) or []
    classes = [classes] if isinstance(classes, str) else classes
    return object_class.lower() in {c.lower() for c in classes}


def _queue_manager_of(queue_dn: str) -> str:
    """Computer name of a public queue's DN (``cn=q,cn=msmq,cn=<host>,...``)."""
    return rdn_value(parent_dn(parent_dn(queue_dn))).lower()


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidParameter(f"{value!r} is not a GUID",
                               hint="write it as 8-4-4-4-12 hex digits") from None


def _public_guid(text: str) -> uuid.UUID:
    fn = parse_format_name(text)
    if not isinstance(fn, PublicFormatName) or fn.journal or fn.subqueue:
        raise InvalidParameter(f"{text!r} is not a public queue's format name",
                               hint="use PUBLIC=<guid>")
    return fn.queue_id


def _object_name(name: str, kind: str) -> str:
    cleaned = name.strip()
    if not cleaned or len(cleaned) > MAX_OBJECT_NAME or _BAD_NAME.search(cleaned):
        raise InvalidParameter(f"{kind} name {name!r} must be 1-{MAX_OBJECT_NAME} printable "
                               "characters", queue=name)
    return cleaned


def _alias_target(text: str) -> str:
    if not 1 <= len(text) <= MAX_ALIAS_FORMAT_NAME:
        raise InvalidParameter(f"a queue alias's format name must be 1-{MAX_ALIAS_FORMAT_NAME} "
                               f"characters, not {len(text)}", queue=text)
    fn: FormatName = parse_format_name(text)
    if not isinstance(fn, PublicFormatName | PrivateFormatName | DirectFormatName):
        raise InvalidParameter(f"a queue alias stands for one queue; {text!r} is a "
                               f"{type(fn).__name__}", queue=text,
                               hint="use a PUBLIC=, PRIVATE= or DIRECT= format name")
    if not fn.can_send:
        raise InvalidParameter(f"{text!r} cannot be sent to (journal, dead-letter queue or "
                               "subqueue), so it cannot be an alias's target", queue=text)
    return str(fn)


def _stored_security(entry: Any) -> SecurityDescriptor:
    """The security descriptor of an entry read from the store (it always has one: reading an
    entry without one fails in its ``from_attrs``); None only on an entry not stored yet.

    Raises:
        ValueError: ``entry`` was never stored (a bug in the caller).
    """
    security: SecurityDescriptor | None = entry.security
    if security is None:
        raise ValueError(f"directory entry {entry!r:.200} has no security descriptor: "
                         "it was not read from the directory")
    return security
