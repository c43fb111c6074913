"""Where kmq keeps MSMQ's public objects in an LDAP directory, and what they are called.

MSMQ publishes queue managers, public queues, queue aliases and distribution lists in Active
Directory. kmq keeps the same objects in any LDAP directory (a real slapd with
``deploy/ldap/kmq.schema``, or the embedded store) under AD's class and attribute names. This module
is the one place those names and the DN layout are spelled, so the rest of kmq never writes
``"mSMQQueue"`` or ``"ou=Computers"`` itself::

    <base>                                      dc=kmq,dc=local by default
    ├── ou=Computers
    │   └── cn=<computer>                       computer
    │       └── cn=msmq                         mSMQConfiguration  (queue manager, QMID)
    │           └── cn=<queue name>             mSMQQueue          (public queue, PUBLIC=)
    ├── ou=Aliases
    │   └── cn=<alias>                          msMQ-Custom-Recipient (queue alias)
    ├── ou=DistributionLists
    │   └── cn=<list>                           group              (distribution list, DL=)
    └── ou=Users                                message senders (kmqMessageSender)

AD nests the queue manager and its queues under the computer object the same way
(``CN=<queue>,CN=msmq,CN=<computer>,CN=Computers,DC=...``); AD aliases and lists may live in any
container, kmq gives each kind its own OU.

It also reads the packaged ``deploy/ldap`` files (``bootstrap.ldif``, ``kmq.schema``) so that the
embedded store and a real slapd start from the same content.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Final

from ldap3.core.exceptions import LDAPInvalidDnError
from ldap3.utils.dn import escape_rdn, parse_dn

from facade.deployfiles import deploy_file
from facade.errors import ConfigurationError

__all__ = [
    "ALIASES_OU",
    "COMPUTERS_OU",
    "DEFAULT_BASE_DN",
    "DISTRIBUTION_LISTS_OU",
    "QUEUE_MANAGER_CN",
    "USERS_OU",
    "Attr",
    "LdifEntry",
    "ObjectClass",
    "alias_dn",
    "aliases_dn",
    "bootstrap_entries",
    "bootstrap_ldif_path",
    "computer_dn",
    "computers_dn",
    "deploy_file",
    "distribution_list_dn",
    "distribution_lists_dn",
    "dn_key",
    "is_descendant",
    "normalize_dn",
    "parent_dn",
    "parse_ldif",
    "public_queue_dn",
    "queue_manager_dn",
    "rdn_value",
    "rebase_dn",
    "same_dn",
    "schema_path",
    "suffix_entry",
    "users_dn",
    "validate_base_dn",
]

#: Default directory suffix (the one ``deploy/ldap/bootstrap.ldif`` is written for).
DEFAULT_BASE_DN: Final = "dc=kmq,dc=local"

#: OU holding one ``computer`` entry per queue manager host (AD: ``CN=Computers``).
COMPUTERS_OU: Final = "Computers"
#: OU holding queue aliases (``msMQ-Custom-Recipient``).
ALIASES_OU: Final = "Aliases"
#: OU holding distribution lists (``group``).
DISTRIBUTION_LISTS_OU: Final = "DistributionLists"
#: OU holding message senders with registered certificates.
USERS_OU: Final = "Users"
#: cn of the queue manager entry under its computer; AD always names it ``msmq``.
QUEUE_MANAGER_CN: Final = "msmq"


class ObjectClass:
    """Object class names (AD's names; kmq's OIDs, see ``deploy/ldap/kmq.schema``)."""

    #: A queue manager host (AD ``computer``); holds the queue manager entry.
    COMPUTER: Final = "computer"
    #: A queue manager (MSMQ QM); its kmqObjectGUID is the QMID.
    QUEUE_MANAGER: Final = "mSMQConfiguration"
    #: A public queue; its kmqObjectGUID is the ``PUBLIC=`` GUID.
    QUEUE: Final = "mSMQQueue"
    #: A queue alias: a directory name standing for any format name.
    ALIAS: Final = "msMQ-Custom-Recipient"
    #: A distribution list (AD group); its kmqObjectGUID is the ``DL=`` GUID.
    DISTRIBUTION_LIST: Final = "group"
    #: Auxiliary class of a user entry that signs messages (certificates and their digests).
    MESSAGE_SENDER: Final = "kmqMessageSender"
    #: Standard containers used by the layout.
    ORGANIZATIONAL_UNIT: Final = "organizationalUnit"
    TOP: Final = "top"


class Attr:
    """Attribute names (AD's ldapDisplayNames where AD has the attribute)."""

    OBJECT_CLASS: Final = "objectClass"
    CN: Final = "cn"
    OU: Final = "ou"
    DESCRIPTION: Final = "description"

    # Identity and bookkeeping (every kmq object).
    #: MSMQ object GUID as UUID text; AD's objectGUID (binary, server-assigned) in kmq's form.
    GUID: Final = "kmqObjectGUID"
    #: Creation / last-change time, written by kmq (AD: operational whenCreated/whenChanged).
    WHEN_CREATED: Final = "whenCreated"
    WHEN_CHANGED: Final = "whenChanged"
    #: Owner principal and access-control entries (MSMQ security descriptor), kept by kmq.
    OWNER: Final = "kmqOwner"
    SECURITY_DESCRIPTOR: Final = "kmqSecurityDescriptor"

    # Computer.
    DNS_HOST_NAME: Final = "dNSHostName"

    # Queue manager (mSMQConfiguration). Quotas in KB.
    QUOTA: Final = "mSMQQuota"
    JOURNAL_QUOTA: Final = "mSMQJournalQuota"
    #: One DER X.509 certificate per value (AD packs them into one value).
    SIGN_CERTIFICATES: Final = "mSMQSignCertificates"
    #: MD5 of each registered certificate, 32 lowercase hex digits per value (AD: 16 bytes).
    DIGESTS: Final = "mSMQDigests"
    #: Standard certificate attribute; slapd needs the ``;binary`` option to store it.
    USER_CERTIFICATE: Final = "userCertificate"
    #: The queue manager's X25519 public key that bodies are encrypted for (raw 32 bytes).
    ENCRYPT_KEY: Final = "mSMQEncryptKey"

    # Public queue (mSMQQueue). Quotas in KB.
    LABEL: Final = "mSMQLabelEx"
    JOURNAL: Final = "mSMQJournal"
    QUEUE_QUOTA: Final = "mSMQQueueQuota"
    QUEUE_JOURNAL_QUOTA: Final = "mSMQQueueJournalQuota"
    PRIVACY_LEVEL: Final = "mSMQPrivacyLevel"
    TRANSACTIONAL: Final = "mSMQTransactional"
    AUTHENTICATE: Final = "mSMQAuthenticate"
    BASE_PRIORITY: Final = "mSMQBasePriority"
    QUEUE_TYPE: Final = "mSMQQueueType"
    QUEUE_NAME_EXT: Final = "mSMQQueueNameExt"
    MULTICAST_ADDRESS: Final = "MSMQ-MulticastAddress"

    # Queue alias (msMQ-Custom-Recipient).
    RECIPIENT_FORMAT_NAME: Final = "msMQ-Recipient-FormatName"

    # Distribution list (group).
    MEMBER: Final = "member"
    GROUP_TYPE: Final = "groupType"


# --- DN helpers ------------------------------------------------------------------------------

_HEX_ESCAPE = re.compile(r"\\([0-9A-Fa-f]{2})")


def _split_dn(dn: str) -> list[tuple[str, str, str]]:
    """Parse ``dn`` into (type, raw value, separator) triples, raising ConfigurationError."""
    try:
        return parse_dn(dn.strip(), escape=False, strip=True) if dn.strip() else []
    except LDAPInvalidDnError as exc:
        raise ConfigurationError(
            f"not a valid LDAP distinguished name: {dn!r} ({exc})",
            hint="write DNs as attr=value pairs separated by commas, e.g. dc=kmq,dc=local",
        ) from exc


def _unescape_value(value: str) -> str:
    """Turn an RFC 4514 escaped attribute value back into its characters.

    Both ``\\,`` and ``\\2C`` spell a comma; hex escapes are UTF-8 bytes, so runs of them are
    collected and decoded together.
    """
    out = bytearray()
    i = 0
    while i < len(value):
        char = value[i]
        if char == "\\" and i + 1 < len(value):
            match = _HEX_ESCAPE.match(value, i)
            if match:
                out += binascii.unhexlify(match.group(1))
                i += 3
                continue
            out += value[i + 1].encode()
            i += 2
            continue
        out += char.encode()
        i += 1
    return out.decode("utf-8", errors="replace")


def _components(dn: str) -> list[tuple[str, str, str]]:
    """(lowercase type, canonically escaped value, separator) of each RDN component of ``dn``."""
    return [
        (attr_type.lower(), escape_rdn(_unescape_value(value)), separator)
        for attr_type, value, separator in _split_dn(dn)
    ]


def _join(components: list[tuple[str, str, str]]) -> str:
    """Inverse of :func:`_components` (the last separator is dropped)."""
    text = "".join(f"{t}={v}{'+' if sep == '+' else ','}" for t, v, sep in components)
    return text[:-1]


def _rdn_count(components: list[tuple[str, str, str]]) -> int:
    """Number of RDNs (a multi-valued RDN ``a=1+b=2`` counts once)."""
    return sum(1 for _, _, sep in components if sep != "+")


def normalize_dn(dn: str) -> str:
    """Canonical spelling of a DN: lowercase attribute types, no blanks around separators,
    values escaped one way (RFC 4514 minimal escaping). Value case is kept.

    The embedded store (ldap3 MOCK_SYNC) compares DN values as plain strings, so every DN kmq
    stores or compares goes through here first.

    Args:
        dn (str): a distinguished name in any RFC 4514 spelling, e.g. ``"CN=Orders , DC=kmq"``.

    Returns:
        str: e.g. ``"cn=Orders,dc=kmq"``; ``""`` for the root DN.

    Raises:
        ConfigurationError: ``dn`` does not parse; fix its spelling.
    """
    return _join(_components(dn))


def dn_key(dn: str) -> str:
    """Case-folded :func:`normalize_dn`, for dict keys and equality.

    Valid because every naming attribute of the layout (dc, o, ou, cn) matches case-insensitively,
    as MSMQ queue names do.
    """
    return normalize_dn(dn).casefold()


def same_dn(first: str, second: str) -> bool:
    """True when two DNs name the same entry (see :func:`dn_key`)."""
    return dn_key(first) == dn_key(second)


def rdn_value(dn: str) -> str:
    """The unescaped value of the first RDN: ``rdn_value("cn=a\\,b,ou=X")`` is ``"a,b"``.

    Raises:
        ConfigurationError: ``dn`` does not parse or is the root DN.
    """
    parts = _split_dn(dn)
    if not parts:
        raise ConfigurationError("the root DN has no RDN value", hint="pass an entry's DN")
    return _unescape_value(parts[0][1])


def _drop_rdns(components: list[tuple[str, str, str]], count: int) -> list[tuple[str, str, str]]:
    """``components`` without its first ``count`` RDNs."""
    index = 0
    for _ in range(count):
        while index < len(components) and components[index][2] == "+":
            index += 1
        index += 1
    return components[index:]


def parent_dn(dn: str) -> str:
    """The normalized DN of the entry above ``dn`` (``""`` for a top-level entry)."""
    return _join(_drop_rdns(_components(dn), 1))


def is_descendant(dn: str, ancestor: str) -> bool:
    """True when ``dn`` is strictly below ``ancestor`` in the tree."""
    entry, top = _components(dn), _components(ancestor)
    depth = _rdn_count(entry) - _rdn_count(top)
    return depth > 0 and dn_key(_join(_drop_rdns(entry, depth))) == dn_key(_join(top))


def rebase_dn(dn: str, old_base: str, new_base: str) -> str:
    """Move ``dn`` from under ``old_base`` to under ``new_base`` (``old_base`` itself included).

    Raises:
        ConfigurationError: ``dn`` is not ``old_base`` or below it.
    """
    if same_dn(dn, old_base):
        return normalize_dn(new_base)
    if not is_descendant(dn, old_base):
        raise ConfigurationError(f"{dn!r} is not under {old_base!r}")
    entry = _components(dn)
    kept = len(entry) - len(
        _drop_rdns(entry, _rdn_count(entry) - _rdn_count(_components(old_base)))
    )
    head = _join(entry[:kept])
    return f"{head},{normalize_dn(new_base)}" if new_base.strip() else head


def validate_base_dn(base_dn: str) -> str:
    """Check a directory suffix and return it normalized.

    Args:
        base_dn (str): e.g. ``"dc=kmq,dc=local"`` (``KMQ_DIRECTORY_BASE_DN``).

    Raises:
        ConfigurationError: empty or unparsable; set a DN such as ``dc=kmq,dc=local``.
    """
    normalized = normalize_dn(base_dn)
    if not normalized:
        raise ConfigurationError(
            "the directory base DN is empty",
            hint="set KMQ_DIRECTORY_BASE_DN (or directory.base_dn) to e.g. dc=kmq,dc=local",
        )
    return normalized


def _child(rdn_type: str, value: str, parent: str) -> str:
    if not value:
        raise ConfigurationError(f"empty {rdn_type} value below {parent!r}", hint="give a name")
    return f"{rdn_type}={escape_rdn(value)},{normalize_dn(parent)}"


def computers_dn(base_dn: str = DEFAULT_BASE_DN) -> str:
    """``ou=Computers,<base>``: the container of queue manager hosts."""
    return _child("ou", COMPUTERS_OU, base_dn)


def aliases_dn(base_dn: str = DEFAULT_BASE_DN) -> str:
    """``ou=Aliases,<base>``: the container of queue aliases."""
    return _child("ou", ALIASES_OU, base_dn)


def distribution_lists_dn(base_dn: str = DEFAULT_BASE_DN) -> str:
    """``ou=DistributionLists,<base>``: the container of distribution lists."""
    return _child("ou", DISTRIBUTION_LISTS_OU, base_dn)


def users_dn(base_dn: str = DEFAULT_BASE_DN) -> str:
    """``ou=Users,<base>``: the container of message senders."""
    return _child("ou", USERS_OU, base_dn)


def computer_dn(computer: str, base_dn: str = DEFAULT_BASE_DN) -> str:
    """``cn=<computer>,ou=Computers,<base>``: the host entry of a queue manager.

    Args:
        computer (str): the MSMQ computer name (``Computer`` in a ``Computer\\Queue`` path).
        base_dn (str): directory suffix.
    """
    return _child("cn", computer, computers_dn(base_dn))


def queue_manager_dn(name: str, base_dn: str = DEFAULT_BASE_DN) -> str:
    """``cn=msmq,cn=<name>,ou=Computers,<base>``: the mSMQConfiguration entry of a queue manager.

    Args:
        name (str): the queue manager's computer name; MSMQ has one queue manager per computer,
            so the computer name is the queue manager name.
        base_dn (str): directory suffix.
    """
    return _child("cn", QUEUE_MANAGER_CN, computer_dn(name, base_dn))


def public_queue_dn(computer: str, queue: str, base_dn: str = DEFAULT_BASE_DN) -> str:
    """``cn=<queue>,cn=msmq,cn=<computer>,...``: a public queue under its queue manager.

    Args:
        computer (str): the queue manager's computer name.
        queue (str): the queue name (the part after ``Computer\\`` in a path name), whole: unlike
            AD, kmq does not split names longer than 64 characters into mSMQQueueNameExt.
        base_dn (str): directory suffix.
    """
    return _child("cn", queue, queue_manager_dn(computer, base_dn))


def alias_dn(name: str, base_dn: str = DEFAULT_BASE_DN) -> str:
    """``cn=<name>,ou=Aliases,<base>``: a queue alias (msMQ-Custom-Recipient)."""
    return _child("cn", name, aliases_dn(base_dn))


def distribution_list_dn(name: str, base_dn: str = DEFAULT_BASE_DN) -> str:
    """``cn=<name>,ou=DistributionLists,<base>``: a distribution list (group)."""
    return _child("cn", name, distribution_lists_dn(base_dn))


# --- Packaged deploy files and the bootstrap content ----------------------------------------

#: An LDIF record: (DN, {attribute: [values]}); values are str, or bytes when not UTF-8.
LdifEntry = tuple[str, dict[str, list[str | bytes]]]


def bootstrap_ldif_path() -> Path:
    """Path of ``deploy/ldap/bootstrap.ldif`` (base entries for :data:`DEFAULT_BASE_DN`)."""
    return deploy_file("ldap/bootstrap.ldif")


def schema_path() -> Path:
    """Path of ``deploy/ldap/kmq.schema`` (slapd.conf include format)."""
    return deploy_file("ldap/kmq.schema")


def _ldif_logical_lines(text: str) -> list[str]:
    """Unfold LDIF continuation lines (a leading space continues the previous line)."""
    lines: list[str] = []
    for raw in text.splitlines():
        if raw.startswith(" ") and lines and lines[-1]:
            lines[-1] += raw[1:]
        elif raw.startswith("#"):
            continue
        else:
            lines.append(raw.rstrip("\r"))
    return lines


def _ldif_value(line: str, source: str) -> tuple[str, str | bytes]:
    attr, sep, rest = line.partition(":")
    if not sep:
        raise ConfigurationError(f"LDIF line without ':' in {source}: {line!r}")
    if rest.startswith(":"):  # attr:: base64
        data = base64.b64decode(rest[1:].strip())
        try:
            return attr.strip(), data.decode("utf-8")
        except UnicodeDecodeError:
            return attr.strip(), data
    if rest.startswith("<"):
        raise ConfigurationError(f"LDIF URL values are not supported in {source}: {line!r}")
    return attr.strip(), rest.strip()


def parse_ldif(text: str, source: str = "<ldif>") -> list[LdifEntry]:
    """Parse the subset of LDIF (RFC 2849) kmq ships: content records, folding, comments, ``::``
    base64 values. Change records and ``:<`` URLs are rejected.

    Args:
        text (str): LDIF text.
        source (str): name used in error messages.

    Returns:
        list[LdifEntry]: records in file order (parents before children, as LDIF requires).

    Raises:
        ConfigurationError: malformed LDIF; the message names ``source`` and the line.
    """
    entries: list[LdifEntry] = []
    dn: str | None = None
    attrs: dict[str, list[str | bytes]] = {}
    for line in [*_ldif_logical_lines(text), ""]:
        if not line.strip():
            if dn is not None:
                entries.append((dn, attrs))
            dn, attrs = None, {}
            continue
        name, value = _ldif_value(line, source)
        if name.lower() == "version" and dn is None:
            continue
        if name.lower() == "dn":
            dn = value if isinstance(value, str) else value.decode("utf-8", "replace")
        elif dn is None:
            raise ConfigurationError(f"LDIF record without a dn: line in {source}: {line!r}")
        elif name.lower() == "changetype":
            raise ConfigurationError(f"LDIF change records are not supported in {source}")
        else:
            attrs.setdefault(name, []).append(value)
    return entries


def suffix_entry(base_dn: str) -> LdifEntry:
    """The entry for the directory suffix itself, derived from its first RDN.

    Args:
        base_dn (str): ``dc=...`` (dcObject + organization), ``o=...`` (organization) or
            ``ou=...`` (organizationalUnit) at its start.

    Raises:
        ConfigurationError: another naming attribute; use one of the three.
    """
    normalized = validate_base_dn(base_dn)
    attr_type = normalized.split("=", 1)[0]
    value = rdn_value(normalized)
    classes = {
        "dc": ["top", "dcObject", "organization"],
        "o": ["top", "organization"],
        "ou": ["top", ObjectClass.ORGANIZATIONAL_UNIT],
    }.get(attr_type)
    if classes is None:
        raise ConfigurationError(
            f"kmq cannot create a suffix entry named {attr_type}= ({normalized!r})",
            hint="start the base DN with dc=, o= or ou=, or create the suffix entry yourself",
        )
    attrs: dict[str, list[str | bytes]] = {Attr.OBJECT_CLASS: list(classes), attr_type: [value]}
    if attr_type == "dc":
        attrs["o"] = [value]  # organization requires o
    return normalized, attrs


def bootstrap_entries(base_dn: str = DEFAULT_BASE_DN) -> list[LdifEntry]:
    """The base entries of a kmq directory under ``base_dn``, parents first.

    Read from ``deploy/ldap/bootstrap.ldif`` (written for :data:`DEFAULT_BASE_DN`) and moved
    under ``base_dn``; the suffix entry is rebuilt from ``base_dn``'s first RDN (keeping the
    file's description).

    Raises:
        ConfigurationError: bad base DN or a damaged bootstrap.ldif.
    """
    path = bootstrap_ldif_path()
    base = validate_base_dn(base_dn)
    result: list[LdifEntry] = []
    for dn, attrs in parse_ldif(path.read_text(encoding="utf-8"), str(path)):
        if same_dn(dn, DEFAULT_BASE_DN):
            new_dn, new_attrs = suffix_entry(base)
            if Attr.DESCRIPTION in attrs:
                new_attrs[Attr.DESCRIPTION] = attrs[Attr.DESCRIPTION]
            result.append((new_dn, new_attrs))
        else:
            result.append((rebase_dn(dn, DEFAULT_BASE_DN, base), attrs))
    return result
