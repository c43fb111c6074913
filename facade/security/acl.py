"""Access control: MSMQ security descriptors for queues, aliases, distribution lists and queue
managers.

MSMQ gives every queue, queue alias, distribution list and queue manager a security descriptor:
an **owner** plus a discretionary access-control list of **allow** and **deny** entries, each
naming a principal (user or group) and a set of ``MQSEC_*`` rights (:class:`AccessRight`).
kmq keeps the descriptor on the object's directory entry: the owner in ``kmqOwner`` and one
access-control entry per value of ``kmqSecurityDescriptor``, written as
``allow;<principal>;<RIGHT|RIGHT...>`` or ``deny;...`` (:meth:`AccessControlEntry.to_text`).

Evaluation (:meth:`SecurityDescriptor.granted`) is Windows' canonical order whatever the stored
order: a caller gets the union of the rights of every allow entry that matches it minus the
union of the rights of every deny entry that matches it, so **deny wins**. An entry matches the
principal it names (compared case-insensitively) and the well-known :data:`EVERYONE` entry
matches every caller. kmq has no group membership of its own: a group is just a principal name.
The **owner** implicitly has ``GET_PERMISSIONS | CHANGE_PERMISSIONS`` (Windows' READ_CONTROL and
WRITE_DAC for the owner), with no entry and despite deny entries, so an owner can always repair
a descriptor.

Default descriptors (:meth:`SecurityDescriptor.default_for`) follow "Distribution list
security" (seed 000) but for one right: everyone may send to a queue or a distribution list
("Send To" is ``WRITE_MESSAGE``); only the owner of a list may change its member list, and only
the owner of a queue, alias or list holds its Add/Remove Self right (MSMQ gives everyone that
right on queues and aliases). MSMQ's membership rule is kept as seed 000 states it
(:func:`may_change_membership`): adding needs both sides' consent, removing either side's; with
MSMQ's default a stranger could therefore remove any queue from any list, which kmq's default
does not allow.

Pure Python, no I/O.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from facade.arguments import require_iterable
from facade.errors import AccessDenied, InvalidParameter

__all__ = [
    "EVERYONE",
    "QUEUE_MANAGER_RIGHTS",
    "AccessControlEntry",
    "AccessRight",
    "ObjectKind",
    "SecurityDescriptor",
    "may_change_membership",
    "require_membership_change",
]

#: The well-known principal that matches every caller (compared case-insensitively).
EVERYONE = "Everyone"
_EVERYONE_KEY = EVERYONE.casefold()

_ALLOW = "allow"
_DENY = "deny"
_ACE_FORM = "'allow;<principal>;<RIGHT|RIGHT...>' or 'deny;<principal>;<RIGHT|RIGHT...>'"
_SEPARATORS = re.compile(r"[|,+]")
_INNER_SPACE = re.compile(r"[\s\-]+")


class AccessRight(enum.IntFlag):
    """A set of MSMQ access rights (``MQSEC_*``), as granted or denied by an access-control entry.

    The single-bit rights carry MSMQ's values, so a mask read from an MSMQ descriptor means the
    same here. kmq adds two bits, outside MSMQ's range, for distribution-list membership (seed
    000, "Distribution list security").

    Attributes:
        DELETE_MESSAGE (0x1): MQSEC_DELETE_MESSAGE, receive (remove) messages.
        PEEK_MESSAGE (0x2): MQSEC_PEEK_MESSAGE, peek at messages.
        WRITE_MESSAGE (0x4): MQSEC_WRITE_MESSAGE, send messages; on a distribution list this
            is MSMQ's "Send To" permission (alias :attr:`SEND_TO`).
        DELETE_JOURNAL_MESSAGE (0x8): MQSEC_DELETE_JOURNAL_MESSAGE, receive from the journal.
        SET_PROPERTIES (0x10): MQSEC_SET_QUEUE_PROPERTIES.
        GET_PROPERTIES (0x20): MQSEC_GET_QUEUE_PROPERTIES.
        DELETE (0x10000): MQSEC_DELETE_QUEUE, delete the object.
        GET_PERMISSIONS (0x20000): MQSEC_GET_QUEUE_PERMISSIONS, read the descriptor.
        CHANGE_PERMISSIONS (0x40000): MQSEC_CHANGE_QUEUE_PERMISSIONS, change the entries.
        TAKE_OWNERSHIP (0x80000): MQSEC_TAKE_QUEUE_OWNERSHIP, become the owner.
        ADD_REMOVE_ELEMENT (0x100000): kmq; on a distribution list, change its member list
            (MSMQ's "Add/Remove-Element").
        ADD_REMOVE_SELF (0x200000): kmq; on a queue, alias or distribution list, be added to or
            removed from a distribution list (MSMQ's "Add/Remove Self as Member", the
            container permission).
        CREATE_QUEUE (0x400000): kmq; on a queue manager, create queues (seed 004's "Queue
            Creation"; MSMQ's MQSEC_CREATE_QUEUE, a machine right).
        QUEUE_STATUS (0x800000): kmq; on a queue manager, list its queues and their state
            (seed 004's "Queue Status Query").
        TEST (0x1000000): kmq; on a queue manager, read its attributes and check its health
            (seed 004's "Test").
        CONTROL, MANAGE: seed 004's queue-manager "Control" and "Queue Management", the same
            bits as CHANGE_PERMISSIONS and SET_PROPERTIES (MSMQ reuses bit values per object
            kind), so they are aliases of those members.
        RECEIVE_MESSAGE, RECEIVE_JOURNAL_MESSAGE, GENERIC_READ, GENERIC_WRITE, GENERIC_ALL:
            MSMQ's composite masks; FULL_CONTROL is GENERIC_ALL plus the two distribution-list
            bits: every right on a queue, alias or list. The queue-manager-only bits
            (CREATE_QUEUE, QUEUE_STATUS, TEST) are outside it.

    :meth:`parse` reads the text form and :meth:`names` writes it.
    """

    DELETE_MESSAGE = 0x1
    PEEK_MESSAGE = 0x2
    WRITE_MESSAGE = 0x4
    DELETE_JOURNAL_MESSAGE = 0x8
    SET_PROPERTIES = 0x10
    GET_PROPERTIES = 0x20
    DELETE = 0x10000
    GET_PERMISSIONS = 0x20000
    CHANGE_PERMISSIONS = 0x40000
    TAKE_OWNERSHIP = 0x80000
    ADD_REMOVE_ELEMENT = 0x100000
    ADD_REMOVE_SELF = 0x200000
    CREATE_QUEUE = 0x400000
    QUEUE_STATUS = 0x800000
    TEST = 0x1000000
    # Seed 004's queue-manager rights that are MSMQ queue bits on a queue-manager object.
    CONTROL = 0x40000  # alias of CHANGE_PERMISSIONS: modify the queue manager's access list
    MANAGE = 0x10  # alias of SET_PROPERTIES: change the queue manager's settings
    # Composites (MSMQ's MQSEC_* composite values, plus kmq's FULL_CONTROL).
    RECEIVE_MESSAGE = 0x3  # DELETE_MESSAGE | PEEK_MESSAGE
    RECEIVE_JOURNAL_MESSAGE = 0xA  # DELETE_JOURNAL_MESSAGE | PEEK_MESSAGE
    GENERIC_READ = 0x2002B  # RECEIVE_MESSAGE | RECEIVE_JOURNAL_MESSAGE | GET_PROPERTIES | GET_PERM..
    GENERIC_WRITE = 0x20024  # WRITE_MESSAGE | GET_PROPERTIES | GET_PERMISSIONS
    GENERIC_ALL = 0xF003F  # every MSMQ bit
    FULL_CONTROL = 0x3F003F  # GENERIC_ALL | ADD_REMOVE_ELEMENT | ADD_REMOVE_SELF
    SEND_TO = 0x4  # alias of WRITE_MESSAGE: MSMQ's distribution-list "Send To" permission

    @classmethod
    def parse(cls, text: str) -> AccessRight:
        """Read rights from text: names or numbers separated by ``|``, ``,`` or ``+``.

        Names are case-insensitive and may be any member name (``WRITE_MESSAGE``, ``send_to``,
        ``generic_read``, ``full_control``), with or without MSMQ's ``MQSEC_`` prefix; MSMQ's
        long names (``GET_QUEUE_PROPERTIES``, ``DELETE_QUEUE``, ...) and ``ADD_REMOVE_CONTAINER``
        (seed 000's word for :attr:`ADD_REMOVE_SELF`) are accepted too. Numbers are Python
        integer literals (``0x4``, ``4``) whose bits must all be known rights.

        Args:
            text (str): e.g. ``"WRITE_MESSAGE|get_properties"``, ``"send_to"``, ``"0x4"``.

        Returns:
            AccessRight: the union of the rights named; never empty.

        Raises:
            InvalidParameter: ``text`` is not a str, names no right, or has a word that is not
                a right (the message names the word and the hint lists the valid names).
        """
        if not isinstance(text, str):
            raise InvalidParameter(f"access rights must be text, not {type(text).__name__}")
        result = cls(0)
        for raw in _SEPARATORS.split(text):
            word = raw.strip()
            if not word:
                continue
            result |= _parse_word(word)
        if not result:
            raise InvalidParameter(
                f"no access right named in {text!r}",
                hint=f"name one or more of {', '.join(_valid_names())}, separated by '|'",
            )
        return result

    def names(self) -> list[str]:
        """The single-bit right names this set is made of, in MSMQ's order (ascending value).

        Composites are decomposed (``RECEIVE_MESSAGE`` gives ``["DELETE_MESSAGE",
        "PEEK_MESSAGE"]``) so the text form is stable; ``"|".join(r.names())`` parses back to
        ``r`` with :meth:`parse`. The empty set gives ``[]``.

        Returns:
            list[str]: member names, e.g. ``["WRITE_MESSAGE", "GET_PROPERTIES"]``.
        """
        return [bit.name for bit in _SINGLE_BITS if self & bit]  # type: ignore[misc]


# The single-bit rights, ascending (aliases such as SEND_TO are the same member, kept once).
_SINGLE_BITS: tuple[AccessRight, ...] = tuple(
    sorted(
        {r for r in AccessRight.__members__.values() if r.value.bit_count() == 1},
        key=lambda r: r.value,
    )
)
#: Rights only a queue manager's descriptor grants (seed 004's queue-manager ACL).
QUEUE_MANAGER_RIGHTS = AccessRight.CREATE_QUEUE | AccessRight.QUEUE_STATUS | AccessRight.TEST
_ALL_BITS = (AccessRight.FULL_CONTROL | QUEUE_MANAGER_RIGHTS).value
# Parse-only synonyms: MSMQ's own long names and seed 000's wording.
_SYNONYMS: dict[str, AccessRight] = {
    "SET_QUEUE_PROPERTIES": AccessRight.SET_PROPERTIES,
    "GET_QUEUE_PROPERTIES": AccessRight.GET_PROPERTIES,
    "DELETE_QUEUE": AccessRight.DELETE,
    "GET_QUEUE_PERMISSIONS": AccessRight.GET_PERMISSIONS,
    "CHANGE_QUEUE_PERMISSIONS": AccessRight.CHANGE_PERMISSIONS,
    "TAKE_QUEUE_OWNERSHIP": AccessRight.TAKE_OWNERSHIP,
    "ADD_REMOVE_CONTAINER": AccessRight.ADD_REMOVE_SELF,
}


def _valid_names() -> list[str]:
    return list(AccessRight.__members__)


def _parse_word(word: str) -> AccessRight:
    if word[0].isdigit():
        try:
            value = int(word, 0)
        except ValueError:
            value = -1
        if value < 0 or value & ~_ALL_BITS:
            raise InvalidParameter(
                f"{word!r} is not a valid access-right mask",
                hint=f"numbers may only use the bits of the access rights ({_ALL_BITS:#x})",
            )
        return AccessRight(value)
    key = _INNER_SPACE.sub("_", word).upper()
    key = key.removeprefix("MQSEC_")
    member = AccessRight.__members__.get(key) or _SYNONYMS.get(key)
    if member is None:
        raise InvalidParameter(
            f"unknown access right {word!r}",
            hint=f"valid names: {', '.join(_valid_names())}",
        )
    return member


def _check_rights(rights: object, what: str) -> AccessRight:
    """Coerce an int to AccessRight, rejecting non-ints and unknown bits."""
    if isinstance(rights, bool) or not isinstance(rights, int):
        raise InvalidParameter(f"{what} must be an AccessRight, not {type(rights).__name__}")
    if rights < 0 or rights & ~_ALL_BITS:
        raise InvalidParameter(
            f"{what} {int(rights):#x} has bits that are not access rights",
            hint=f"use AccessRight members (all bits: {_ALL_BITS:#x})",
        )
    return AccessRight(rights)


def _check_principal(principal: object, what: str = "principal") -> str:
    """Return the principal stripped, or raise InvalidParameter."""
    if not isinstance(principal, str):
        raise InvalidParameter(f"{what} must be text, not {type(principal).__name__}")
    name = principal.strip()
    if not name:
        raise InvalidParameter(
            f"{what} is empty",
            hint=f"name a user or group, or {EVERYONE!r} for every caller",
        )
    if ";" in name:
        raise InvalidParameter(
            f"{what} {name!r} contains ';'",
            hint="';' separates the fields of an access-control entry; a principal cannot hold it",
        )
    for char in name:
        if unicodedata.category(char) in ("Cc", "Cs"):
            raise InvalidParameter(
                f"{what} {name!r} contains the control character {char!r}",
                hint="principals are printable names",
            )
    return name


def _same(a: str, b: str) -> bool:
    return a.casefold() == b.casefold()


class ObjectKind(enum.Enum):
    """The kinds of directory object that carry a security descriptor.

    Attributes:
        QUEUE: a public queue (MSMQ ``msMQQueue``).
        ALIAS: a queue alias (``msMQ-Custom-Recipient``).
        DISTRIBUTION_LIST: a distribution list (an Active Directory group of queues).
        QUEUE_MANAGER: a queue manager (``mSMQConfiguration``).
    """

    QUEUE = "queue"
    ALIAS = "alias"
    DISTRIBUTION_LIST = "distribution list"
    QUEUE_MANAGER = "queue manager"


@dataclass(frozen=True)
class AccessControlEntry:
    """One entry of a discretionary access-control list: allow or deny rights to a principal.

    Stored as one value of the ``kmqSecurityDescriptor`` attribute (:meth:`to_text`).

    Attributes:
        allow (bool): True for an access-allowed entry, False for an access-denied entry.
        principal (str): a user or group name, or :data:`EVERYONE`. Stripped of surrounding
            white space; non-empty, without ``;`` or control characters. Compared
            case-insensitively (the spelling is kept).
        rights (AccessRight): the rights allowed or denied; not empty. A plain int is
            converted.

    Raises:
        InvalidParameter: a principal, rights or allow flag out of range.
    """

    allow: bool
    principal: str
    rights: AccessRight

    def __post_init__(self) -> None:
        if not isinstance(self.allow, bool):
            raise InvalidParameter(
                f"allow must be True or False, not {type(self.allow).__name__}"
            )
        # Frozen dataclass: normalized values go in through object.__setattr__.
        object.__setattr__(self, "principal", _check_principal(self.principal))
        rights = _check_rights(self.rights, "rights")
        if not rights:
            raise InvalidParameter(
                f"access-control entry for {self.principal!r} names no right",
                hint="drop the entry instead (SecurityDescriptor.revoke)",
            )
        object.__setattr__(self, "rights", rights)

    def to_text(self) -> str:
        """The attribute-value form: ``allow;alice;WRITE_MESSAGE|GET_PROPERTIES``.

        Rights are written as single-bit names (:meth:`AccessRight.names`), so
        :meth:`from_text` reads the same entry back.

        Returns:
            str: ``<allow|deny>;<principal>;<RIGHT|RIGHT...>``.
        """
        kind = _ALLOW if self.allow else _DENY
        return f"{kind};{self.principal};{'|'.join(self.rights.names())}"

    @classmethod
    def from_text(cls, text: str) -> AccessControlEntry:
        """Read an entry from its attribute-value form (:meth:`to_text`).

        The kind word (``allow``/``deny``) and right names are case-insensitive; white space
        around fields is ignored. Rights are read with :meth:`AccessRight.parse`.

        Args:
            text (str): e.g. ``"deny;Everyone;ADD_REMOVE_SELF"``.

        Returns:
            AccessControlEntry: the entry.

        Raises:
            InvalidParameter: not three ``;``-separated fields, a kind other than allow/deny,
                an invalid principal or an unknown right; the message quotes the bad part and
                the hint gives the expected form.
        """
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        if not isinstance(text, str):
            raise InvalidParameter(
                f"access-control entry must be text, not {type(text).__name__}"
            )
        fields = text.split(";")
        if len(fields) != 3:
            raise InvalidParameter(
                f"access-control entry {text!r} has {len(fields)} field(s), expected 3",
                hint=f"write {_ACE_FORM}",
            )
        kind_text, principal, rights_text = (f.strip() for f in fields)
        kind = kind_text.lower()
        if kind not in (_ALLOW, _DENY):
            raise InvalidParameter(
                f"access-control entry {text!r} starts with {kind_text!r}, not allow or deny",
                hint=f"write {_ACE_FORM}",
            )
        try:
            rights = AccessRight.parse(rights_text)
            return cls(kind == _ALLOW, principal, rights)
        except InvalidParameter as error:
            raise InvalidParameter(
                f"access-control entry {text!r}: {error.message}", hint=error.hint
            ) from None

    def matches(self, principal: str) -> bool:
        """Whether this entry applies to a caller.

        Args:
            principal (str): the caller's name.

        Returns:
            bool: the entry names ``principal`` (case-insensitively) or names
            :data:`EVERYONE`.
        """
        key = self.principal.casefold()
        return key == _EVERYONE_KEY or key == principal.strip().casefold()

    def __str__(self) -> str:
        return self.to_text()


#: Rights the owner of an object always has (Windows: READ_CONTROL | WRITE_DAC for the owner).
_OWNER_RIGHTS = AccessRight.GET_PERMISSIONS | AccessRight.CHANGE_PERMISSIONS


@dataclass(frozen=True)
class SecurityDescriptor:
    """An MSMQ security descriptor: an owner and a discretionary access-control list.

    Immutable: :meth:`grant`, :meth:`deny`, :meth:`revoke` and :meth:`with_owner` return new
    descriptors. Stored on a directory entry as ``kmqOwner`` (:attr:`owner`) and
    ``kmqSecurityDescriptor`` (:meth:`to_values`, one entry per value).

    Attributes:
        owner (str): the owning principal (validated like an entry's principal); implicitly
            has ``GET_PERMISSIONS | CHANGE_PERMISSIONS``.
        entries (tuple[AccessControlEntry, ...]): the entries, in stored order (the order does
            not change the outcome: deny always wins). Any iterable is converted to a tuple.

    Raises:
        InvalidParameter: an invalid owner, or an entry that is not an AccessControlEntry.
    """

    owner: str
    entries: tuple[AccessControlEntry, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "owner", _check_principal(self.owner, "owner"))
        entries = tuple(require_iterable(self.entries, "entries", "AccessControlEntry objects"))
        for entry in entries:
            if not isinstance(entry, AccessControlEntry):
                raise InvalidParameter(
                    f"security descriptor entries must be AccessControlEntry, "
                    f"not {type(entry).__name__}"
                )
        object.__setattr__(self, "entries", entries)

    # -- evaluation ------------------------------------------------------------------------

    def _allowed_denied(self, principal: str) -> tuple[AccessRight, AccessRight]:
        allowed = denied = AccessRight(0)
        for entry in self.entries:
            if entry.matches(principal):
                if entry.allow:
                    allowed |= entry.rights
                else:
                    denied |= entry.rights
        return allowed, denied

    def granted(self, principal: str) -> AccessRight:
        """The rights a caller has on the object (Windows canonical evaluation).

        The union of the matching allow entries minus the union of the matching deny entries,
        whatever their order; then the owner's implicit ``GET_PERMISSIONS |
        CHANGE_PERMISSIONS``, which deny entries do not take away.

        Args:
            principal (str): the caller's name.

        Returns:
            AccessRight: the effective rights (possibly empty).

        Raises:
            InvalidParameter: ``principal`` is not a valid principal.
        """
        principal = _check_principal(principal)
        allowed, denied = self._allowed_denied(principal)
        rights = allowed & ~denied
        if _same(principal, self.owner):
            rights |= _OWNER_RIGHTS
        return rights

    def allows(self, principal: str, rights: AccessRight) -> bool:
        """Whether a caller has every one of ``rights`` (MSMQ's access check).

        Args:
            principal (str): the caller's name.
            rights (AccessRight): the rights the operation needs; empty is always allowed.

        Returns:
            bool: all bits of ``rights`` are in :meth:`granted`.

        Raises:
            InvalidParameter: an invalid principal or rights.
        """
        needed = _check_rights(rights, "rights")
        return needed & ~self.granted(principal) == 0

    def require(self, principal: str, rights: AccessRight, object_name: str) -> None:
        """Raise unless a caller has every one of ``rights`` (MQ_ERROR_ACCESS_DENIED).

        Args:
            principal (str): the caller's name.
            rights (AccessRight): the rights the operation needs.
            object_name (str): the queue, alias, list or queue manager, for the message.

        Raises:
            AccessDenied: some of ``rights`` are not granted; the message names the missing
                rights, ``queue`` is ``object_name`` and the hint says whom to ask (and that
                a deny entry must be removed, when one is the cause).
            InvalidParameter: an invalid principal or rights, or ``object_name`` is not a str.
        """
        needed = _check_rights(rights, "rights")
        if not isinstance(object_name, str):
            raise InvalidParameter.wrong_type("object_name", "a str (the object's name)",
                                              object_name)
        missing = needed & ~self.granted(principal)
        if not missing:
            return
        names = "|".join(missing.names())
        _, denied = self._allowed_denied(principal)
        if missing & denied:
            hint = (
                f"a deny entry refuses {'|'.join((missing & denied).names())}; ask the owner "
                f"({self.owner}) to remove it (kmq acl revoke) and grant {names}"
            )
        else:
            hint = f"ask the owner ({self.owner}) to grant {names} to {principal.strip()}"
        raise AccessDenied(
            f"{principal.strip()!r} lacks {names} on {object_name}", queue=object_name, hint=hint
        )

    # -- editing ---------------------------------------------------------------------------

    def _merge(self, allow: bool, principal: str, rights: AccessRight) -> SecurityDescriptor:
        principal = _check_principal(principal)
        rights = _check_rights(rights, "rights")
        if not rights:
            return self
        entries = list(self.entries)
        for index, entry in enumerate(entries):
            if entry.allow is allow and _same(entry.principal, principal):
                entries[index] = replace(entry, rights=entry.rights | rights)
                break
        else:
            entries.append(AccessControlEntry(allow, principal, rights))
        return replace(self, entries=tuple(entries))

    def grant(self, principal: str, rights: AccessRight) -> SecurityDescriptor:
        """Allow ``rights`` to ``principal`` (MQSetQueueSecurity with an access-allowed entry).

        The rights are merged into the principal's first allow entry, or a new allow entry is
        appended. A deny entry of the same principal still wins: :meth:`revoke` it first.

        Args:
            principal (str): a user or group, or :data:`EVERYONE`.
            rights (AccessRight): rights to add; empty returns ``self``.

        Returns:
            SecurityDescriptor: the new descriptor.

        Raises:
            InvalidParameter: an invalid principal or rights.
        """
        return self._merge(True, principal, rights)

    def deny(self, principal: str, rights: AccessRight) -> SecurityDescriptor:
        """Deny ``rights`` to ``principal`` (an access-denied entry, which beats every allow).

        The rights are merged into the principal's first deny entry, or a new deny entry is
        appended.

        Args:
            principal (str): a user or group, or :data:`EVERYONE`.
            rights (AccessRight): rights to refuse; empty returns ``self``.

        Returns:
            SecurityDescriptor: the new descriptor.

        Raises:
            InvalidParameter: an invalid principal or rights.
        """
        return self._merge(False, principal, rights)

    def revoke(self, principal: str) -> SecurityDescriptor:
        """Drop every entry, allow and deny, that names ``principal`` (case-insensitively).

        Only entries naming exactly that principal go: revoking ``alice`` leaves the
        :data:`EVERYONE` entries, which still apply to her.

        Args:
            principal (str): a user or group, or :data:`EVERYONE`.

        Returns:
            SecurityDescriptor: the new descriptor (equal to ``self`` if nothing matched).

        Raises:
            InvalidParameter: an invalid principal.
        """
        principal = _check_principal(principal)
        kept = tuple(e for e in self.entries if not _same(e.principal, principal))
        return replace(self, entries=kept)

    def with_owner(self, owner: str) -> SecurityDescriptor:
        """The same entries with another owner (MSMQ's take-ownership; the caller checks
        ``TAKE_OWNERSHIP``).

        Args:
            owner (str): the new owner.

        Returns:
            SecurityDescriptor: the new descriptor.

        Raises:
            InvalidParameter: an invalid owner.
        """
        return replace(self, owner=owner)

    # -- storage ---------------------------------------------------------------------------

    def to_values(self) -> list[str]:
        """The ``kmqSecurityDescriptor`` attribute values: one :meth:`AccessControlEntry.to_text`
        per entry, in order.

        Returns:
            list[str]: the entry texts (``[]`` for an empty list).
        """
        return [entry.to_text() for entry in self.entries]

    @classmethod
    def from_values(cls, owner: str, values: Iterable[str]) -> SecurityDescriptor:
        """Read a descriptor from its directory attributes.

        Args:
            owner (str): the ``kmqOwner`` value.
            values (Iterable[str]): the ``kmqSecurityDescriptor`` values, one entry each
                (``bytes`` values are decoded as UTF-8).

        Returns:
            SecurityDescriptor: equal to the one :meth:`to_values` was called on.

        Raises:
            InvalidParameter: an invalid owner or entry (see
                :meth:`AccessControlEntry.from_text`).
        """
        return cls(owner, tuple(AccessControlEntry.from_text(value)
                                for value in require_iterable(values, "values", "entry texts")))

    @classmethod
    def default_for(cls, kind: ObjectKind, owner: str) -> SecurityDescriptor:
        """The descriptor a new object gets (seed 000, "Distribution list security").

        * QUEUE and ALIAS: the owner has FULL_CONTROL; everyone has ``WRITE_MESSAGE |
          GET_PROPERTIES | GET_PERMISSIONS`` (any user may send to it). ADD_REMOVE_SELF stays
          with the owner, unlike MSMQ's default: removal from a list needs only one side's
          right (:func:`may_change_membership`), so a self right held by everyone would let
          anyone take the queue out of anyone's list. A queue joins a list its owner does not
          edit when both owners agree: the list's owner adds it after the queue's owner grants
          ADD_REMOVE_SELF (to that user, or to Everyone for MSMQ's default).
        * DISTRIBUTION_LIST: the owner has FULL_CONTROL; everyone has ``WRITE_MESSAGE``
          ("Send To") ``| GET_PROPERTIES | GET_PERMISSIONS``: only the owner may add the list
          to another list or change its member list.
        * QUEUE_MANAGER: the owner has FULL_CONTROL and the queue-manager rights
          (:data:`QUEUE_MANAGER_RIGHTS`); everyone has ``CREATE_QUEUE |
          QUEUE_STATUS | TEST | GET_PROPERTIES | GET_PERMISSIONS | PEEK_MESSAGE`` (MSMQ lets
          any user create queues and read the machine's properties; on a queue manager,
          PEEK_MESSAGE and DELETE_MESSAGE are peeking at and receiving from its dead-letter
          queues and machine journal, so everyone may browse dead letters, and only the
          owner may remove them).

        Args:
            kind (ObjectKind): the kind of object.
            owner (str): its creator.

        Returns:
            SecurityDescriptor: the default descriptor.

        Raises:
            InvalidParameter: an invalid owner or an unknown kind.
        """
        owner = _check_principal(owner, "owner")
        R = AccessRight
        if kind in (ObjectKind.QUEUE, ObjectKind.ALIAS, ObjectKind.DISTRIBUTION_LIST):
            everyone = R.WRITE_MESSAGE | R.GET_PROPERTIES | R.GET_PERMISSIONS  # Send To
        elif kind is ObjectKind.QUEUE_MANAGER:
            everyone = (R.CREATE_QUEUE | R.QUEUE_STATUS | R.TEST | R.GET_PROPERTIES
                        | R.GET_PERMISSIONS | R.PEEK_MESSAGE)
        else:
            raise InvalidParameter(f"unknown object kind {kind!r}")
        owner_rights = R.FULL_CONTROL
        if kind is ObjectKind.QUEUE_MANAGER:
            owner_rights |= QUEUE_MANAGER_RIGHTS
        return cls(
            owner,
            (
                AccessControlEntry(True, owner, owner_rights),
                AccessControlEntry(True, EVERYONE, everyone),
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, for ``--json`` output.

        Returns:
            dict: ``{"owner": str, "entries": [{"allow": bool, "principal": str,
            "rights": [right names]}]}``.
        """
        return {
            "owner": self.owner,
            "entries": [
                {"allow": e.allow, "principal": e.principal, "rights": e.rights.names()}
                for e in self.entries
            ],
        }


# ------------------------------------------------------------------------------------------
# Distribution-list membership (seed 000: both sides must agree)
# ------------------------------------------------------------------------------------------


def _membership_sides(
    container: SecurityDescriptor, member: SecurityDescriptor, principal: str
) -> tuple[bool, bool]:
    return (
        container.allows(principal, AccessRight.ADD_REMOVE_ELEMENT),
        member.allows(principal, AccessRight.ADD_REMOVE_SELF),
    )


def may_change_membership(
    container: SecurityDescriptor,
    member: SecurityDescriptor,
    principal: str,
    *,
    adding: bool,
) -> bool:
    """Whether a caller may add a member to, or remove it from, a distribution list.

    Membership is bidirectional in MSMQ, so both sides must agree (seed 000): adding member M
    to list D needs ``ADD_REMOVE_ELEMENT`` on D **and** ``ADD_REMOVE_SELF`` on M; removing
    needs **either** one. With :meth:`SecurityDescriptor.default_for` only the owners hold
    these rights, so a stranger can neither add to nor remove from someone else's list.

    Args:
        container (SecurityDescriptor): the distribution list's descriptor.
        member (SecurityDescriptor): the queue's, alias's or distribution list's descriptor.
        principal (str): the caller.
        adding (bool): True to add, False to remove.

    Returns:
        bool: the change is allowed.

    Raises:
        InvalidParameter: an invalid principal.
    """
    element, self_ = _membership_sides(container, member, principal)
    return (element and self_) if adding else (element or self_)


def require_membership_change(
    container: SecurityDescriptor,
    member: SecurityDescriptor,
    principal: str,
    *,
    adding: bool,
    container_name: str,
    member_name: str,
) -> None:
    """Raise unless :func:`may_change_membership` allows the change.

    Args:
        container (SecurityDescriptor): the distribution list's descriptor.
        member (SecurityDescriptor): the member's descriptor.
        principal (str): the caller.
        adding (bool): True to add, False to remove.
        container_name (str): the list's name, for the message (and ``AccessDenied.queue``).
        member_name (str): the member's name, for the message.

    Raises:
        AccessDenied: the change is refused; the message says which side refused (the list,
            lacking ``ADD_REMOVE_ELEMENT``, and/or the member, lacking ``ADD_REMOVE_SELF``)
            and the hint names the owner(s) to ask.
        InvalidParameter: an invalid principal.
    """
    element, self_ = _membership_sides(container, member, principal)
    if (element and self_) if adding else (element or self_):
        return
    who = principal.strip()
    refusals = []
    asks = []
    if not element:
        refusals.append(f"lacks ADD_REMOVE_ELEMENT on the list {container_name}")
        asks.append(f"the owner of {container_name} ({container.owner}) for ADD_REMOVE_ELEMENT")
    if not self_:
        refusals.append(f"lacks ADD_REMOVE_SELF on the member {member_name}")
        asks.append(f"the owner of {member_name} ({member.owner}) for ADD_REMOVE_SELF")
    if adding:
        message = (
            f"{who!r} may not add {member_name} to {container_name}: both the list and the "
            f"member must agree, and {who!r} {' and '.join(refusals)}"
        )
        hint = f"ask {' and '.join(asks)}"
    else:
        message = (
            f"{who!r} may not remove {member_name} from {container_name}: that needs "
            f"ADD_REMOVE_ELEMENT on the list or ADD_REMOVE_SELF on the member, and {who!r} "
            f"{' and '.join(refusals)}"
        )
        hint = f"ask {' or '.join(asks)}"
    raise AccessDenied(message, queue=container_name, hint=hint)
