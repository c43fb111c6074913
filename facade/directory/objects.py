"""MSMQ's public objects as Python values, and their LDAP attribute form.

Each class is one entry kind of the directory (see :mod:`facade.directory.layout`): a queue
manager (``mSMQConfiguration``), a public queue (``mSMQQueue``), a queue alias
(``msMQ-Custom-Recipient``) and a distribution list (AD ``group``). ``from_entry`` reads an
ldap3 search result; ``to_attributes`` gives the attributes to add. Both backends (embedded and
slapd) return typed values because both know the schema, so conversion here is by attribute.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from facade.security.acl import ObjectKind, SecurityDescriptor
from facade.directory.layout import Attr, ObjectClass, normalize_dn

__all__ = [
    "DirectoryObject",
    "DistributionListEntry",
    "GroupScope",
    "PublicQueueEntry",
    "QueueAliasEntry",
    "QueueManagerEntry",
]


class GroupScope:
    """AD ``groupType`` scope flags of a distribution list (seed 000, "Distribution list scope").

    kmq keeps one directory per base DN, so the scope is recorded, not enforced.
    """

    GLOBAL = 2
    DOMAIN_LOCAL = 4
    UNIVERSAL = 8
    BY_NAME: ClassVar[dict[str, int]] = {"global": 2, "domain": 4, "universal": 8}


def _one(attrs: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """A single-valued attribute (ldap3 gives scalars for SINGLE-VALUE, lists otherwise)."""
    value = attrs.get(name, default)
    if isinstance(value, list):
        return value[0] if value else default
    return default if value in (None, "") else value


def _many(attrs: Mapping[str, Any], name: str) -> tuple[Any, ...]:
    value = attrs.get(name)
    if value is None:
        return ()
    return tuple(value) if isinstance(value, list | tuple) else (value,)


def _guid(value: Any) -> uuid.UUID | None:
    return None if value in (None, "") else uuid.UUID(str(value))


#: Owner assumed for entries written by other tools without kmqOwner.
DEFAULT_OWNER = "Administrators"


def _security(attrs: Mapping[str, Any], kind: ObjectKind) -> SecurityDescriptor:
    owner = _one(attrs, Attr.OWNER, "") or DEFAULT_OWNER
    values = _many(attrs, Attr.SECURITY_DESCRIPTOR)
    if not values:  # written by another tool: MSMQ's defaults apply
        return SecurityDescriptor.default_for(kind, owner)
    return SecurityDescriptor.from_values(owner, values)


def _common(classes: list[str], guid: uuid.UUID, security: SecurityDescriptor | None,
            description: str) -> dict[str, Any]:
    if security is None:
        raise ValueError("a directory entry needs a security descriptor before it is stored")
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    attrs: dict[str, Any] = {
        Attr.OBJECT_CLASS: [ObjectClass.TOP, *classes],
        Attr.GUID: str(guid),
        Attr.OWNER: security.owner,
        Attr.SECURITY_DESCRIPTOR: security.to_values(),
        Attr.WHEN_CREATED: now,
        Attr.WHEN_CHANGED: now,
    }
    if description:
        attrs[Attr.DESCRIPTION] = description
    return attrs


@dataclass(frozen=True)
class QueueManagerEntry:
    """A queue manager published in the directory (``mSMQConfiguration``).

    Attributes:
        name (str): the queue manager's (MSMQ computer's) name.
        guid (uuid.UUID): its QMID, the GUID in message ids and ``MACHINE=`` names.
        dn (str): the entry's DN.
    """

    name: str
    guid: uuid.UUID
    dn: str = ""

    kind: ClassVar[str] = "queue manager"

    @classmethod
    def from_entry(cls, name: str, dn: str, attrs: Mapping[str, Any]) -> QueueManagerEntry:
        """Build from an ldap3 result entry of the ``cn=msmq`` entry under computer ``name``."""
        return cls(name=name, guid=uuid.UUID(str(_one(attrs, Attr.GUID))), dn=normalize_dn(dn))


@dataclass(frozen=True)
class PublicQueueEntry:
    """A public queue (``mSMQQueue``): its ``PUBLIC=`` GUID and its properties (PROPID_Q_*).

    Attributes:
        guid (uuid.UUID): PROPID_Q_INSTANCE, the GUID of ``PUBLIC=<guid>``.
        queue_manager (str): name of the queue manager holding the queue.
        queue_name (str): the queue name (lowercase, as in path names).
        label (str): PROPID_Q_LABEL (mSMQLabelEx).
        type_id (uuid.UUID | None): PROPID_Q_TYPE (mSMQQueueType).
        transactional, journal, authenticate (bool): PROPID_Q_TRANSACTION, _JOURNAL,
            _AUTHENTICATE.
        quota_kb, journal_quota_kb (int | None): PROPID_Q_QUOTA, _JOURNAL_QUOTA in KB; None is
            unlimited.
        base_priority (int): PROPID_Q_BASEPRIORITY.
        privacy_level (int): PROPID_Q_PRIV_LEVEL (0 NONE, 1 OPTIONAL, 2 BODY).
        security (SecurityDescriptor | None): owner and access list (Send To, Add/Remove
            Self...); None until stored (the creator becomes the owner).
        description (str): free text.
        dn (str): the entry's DN (empty before it is added).
        created, changed (datetime | None): whenCreated / whenChanged (PROPID_Q_CREATE_TIME,
            PROPID_Q_MODIFY_TIME).
    """

    guid: uuid.UUID
    queue_manager: str
    queue_name: str
    label: str = ""
    type_id: uuid.UUID | None = None
    transactional: bool = False
    journal: bool = False
    quota_kb: int | None = None
    journal_quota_kb: int | None = None
    base_priority: int = 0
    authenticate: bool = False
    privacy_level: int = 0
    security: SecurityDescriptor | None = None
    description: str = ""
    dn: str = ""
    created: dt.datetime | None = None
    changed: dt.datetime | None = None

    kind: ClassVar[str] = "public queue"

    #: Property name -> LDAP attribute, for the properties kept as directory attributes.
    PROPERTY_ATTRIBUTES: ClassVar[dict[str, str]] = {
        "label": Attr.LABEL, "type_id": Attr.QUEUE_TYPE, "transactional": Attr.TRANSACTIONAL,
        "journal": Attr.JOURNAL, "quota_kb": Attr.QUEUE_QUOTA,
        "journal_quota_kb": Attr.QUEUE_JOURNAL_QUOTA, "base_priority": Attr.BASE_PRIORITY,
        "authenticate": Attr.AUTHENTICATE, "privacy_level": Attr.PRIVACY_LEVEL,
        "description": Attr.DESCRIPTION,
    }

    @property
    def path_name(self) -> str:
        """The MSMQ path name, ``<queue manager>\\<queue>``."""
        return f"{self.queue_manager}\\{self.queue_name}"

    @property
    def format_name(self) -> str:
        """``PUBLIC=<guid>``."""
        return f"PUBLIC={self.guid}"

    @property
    def name(self) -> str:
        """Display name: the path name."""
        return self.path_name

    def to_attributes(self) -> dict[str, Any]:
        """Attributes of a new entry (classes, GUID, security, the set properties)."""
        attrs = _common([ObjectClass.QUEUE], self.guid, self.security, self.description)
        attrs[Attr.CN] = self.queue_name
        for name, attribute in self.PROPERTY_ATTRIBUTES.items():
            value = property_value(name, getattr(self, name))
            if value is not None and name != "description":
                attrs[attribute] = value
        return attrs

    @classmethod
    def from_entry(cls, dn: str, attrs: Mapping[str, Any], queue_manager: str) -> PublicQueueEntry:
        """Build from an ldap3 result entry; ``queue_manager`` comes from the DN."""
        return cls(
            guid=uuid.UUID(str(_one(attrs, Attr.GUID))),
            queue_manager=queue_manager,
            queue_name=str(_one(attrs, Attr.CN)).lower(),
            label=_one(attrs, Attr.LABEL, "") or "",
            type_id=_guid(_one(attrs, Attr.QUEUE_TYPE)),
            transactional=bool(_one(attrs, Attr.TRANSACTIONAL, False)),
            journal=bool(_one(attrs, Attr.JOURNAL, False)),
            quota_kb=_one(attrs, Attr.QUEUE_QUOTA),
            journal_quota_kb=_one(attrs, Attr.QUEUE_JOURNAL_QUOTA),
            base_priority=int(_one(attrs, Attr.BASE_PRIORITY, 0) or 0),
            authenticate=bool(_one(attrs, Attr.AUTHENTICATE, False)),
            privacy_level=int(_one(attrs, Attr.PRIVACY_LEVEL, 0) or 0),
            security=_security(attrs, ObjectKind.QUEUE),
            description=_one(attrs, Attr.DESCRIPTION, "") or "",
            dn=normalize_dn(dn),
            created=_one(attrs, Attr.WHEN_CREATED),
            changed=_one(attrs, Attr.WHEN_CHANGED),
        )


def property_value(name: str, value: Any) -> Any:
    """The LDAP value of a public-queue property (None: the attribute is absent)."""
    if value is None or (name in ("label", "description") and value == ""):
        return None
    if name == "type_id":
        return str(value)
    return value


@dataclass(frozen=True)
class QueueAliasEntry:
    """A queue alias (``msMQ-Custom-Recipient``): a directory name for any queue's format name.

    Aliases let a distribution list reach private queues and URL-named queues, which cannot be
    members themselves, and let the target change without editing the lists.

    Attributes:
        guid (uuid.UUID): the alias's GUID.
        name (str): its name (cn), as created; compared case-insensitively.
        recipient_format_name (str): msMQ-Recipient-FormatName, the queue it stands for.
        security (SecurityDescriptor | None): owner and access list; None until stored.
        description (str): free text.
        dn (str): the entry's DN.
    """

    guid: uuid.UUID
    name: str
    recipient_format_name: str
    security: SecurityDescriptor | None = None
    description: str = ""
    dn: str = ""

    kind: ClassVar[str] = "queue alias"

    def to_attributes(self) -> dict[str, Any]:
        """Attributes of a new entry."""
        attrs = _common([ObjectClass.ALIAS], self.guid, self.security, self.description)
        attrs[Attr.CN] = self.name
        attrs[Attr.RECIPIENT_FORMAT_NAME] = self.recipient_format_name
        return attrs

    @classmethod
    def from_entry(cls, dn: str, attrs: Mapping[str, Any]) -> QueueAliasEntry:
        """Build from an ldap3 result entry."""
        return cls(
            guid=uuid.UUID(str(_one(attrs, Attr.GUID))),
            name=str(_one(attrs, Attr.CN)),
            recipient_format_name=str(_one(attrs, Attr.RECIPIENT_FORMAT_NAME, "")),
            security=_security(attrs, ObjectKind.ALIAS),
            description=_one(attrs, Attr.DESCRIPTION, "") or "",
            dn=normalize_dn(dn),
        )


@dataclass(frozen=True)
class DistributionListEntry:
    """A distribution list (AD ``group``): its ``DL=`` GUID and its members' DNs.

    Attributes:
        guid (uuid.UUID): the GUID of ``DL=<guid>``.
        name (str): its name (cn), as created; compared case-insensitively.
        members (tuple[str, ...]): DNs of the top-level members (public queues, queue aliases,
            other lists), in the order the directory returns them.
        scope (int): AD groupType scope flag (:class:`GroupScope`).
        security (SecurityDescriptor | None): owner and access list; None until stored.
        description (str): free text.
        dn (str): the entry's DN.
        domain (str | None): the directory's DNS domain (from its ``dc=`` base), for
            ``DL=<guid>@<domain>``.
    """

    guid: uuid.UUID
    name: str
    members: tuple[str, ...] = ()
    scope: int = GroupScope.UNIVERSAL
    security: SecurityDescriptor | None = None
    description: str = ""
    dn: str = ""
    domain: str | None = None

    kind: ClassVar[str] = "distribution list"

    @property
    def format_name(self) -> str:
        """``DL=<guid>`` (``@domain`` omitted: kmq has one directory per base DN)."""
        return f"DL={self.guid}"

    def to_attributes(self) -> dict[str, Any]:
        """Attributes of a new entry (members included)."""
        attrs = _common([ObjectClass.DISTRIBUTION_LIST], self.guid, self.security,
                        self.description)
        attrs[Attr.CN] = self.name
        attrs[Attr.GROUP_TYPE] = self.scope
        if self.members:
            attrs[Attr.MEMBER] = list(self.members)
        return attrs

    @classmethod
    def from_entry(cls, dn: str, attrs: Mapping[str, Any],
                   domain: str | None = None) -> DistributionListEntry:
        """Build from an ldap3 result entry."""
        return cls(
            guid=uuid.UUID(str(_one(attrs, Attr.GUID))),
            name=str(_one(attrs, Attr.CN)),
            members=tuple(normalize_dn(m) for m in _many(attrs, Attr.MEMBER)),
            scope=int(_one(attrs, Attr.GROUP_TYPE, GroupScope.UNIVERSAL) or GroupScope.UNIVERSAL),
            security=_security(attrs, ObjectKind.DISTRIBUTION_LIST),
            description=_one(attrs, Attr.DESCRIPTION, "") or "",
            dn=normalize_dn(dn),
            domain=domain,
        )


#: Any object that can be a member of a distribution list.
DirectoryObject = PublicQueueEntry | QueueAliasEntry | DistributionListEntry
