"""Certificates and encryption keys in the directory (AD's ``mSMQSignCertificates``,
``mSMQDigests`` and ``mSMQEncryptKey``).

A sender registers its signing certificate on its user entry
(``cn=<sender id>,ou=Users,<base>``, auxiliary class ``kmqMessageSender``), one DER certificate
per ``mSMQSignCertificates`` value and its MD5 index in ``mSMQDigests``. The receiving queue
manager accepts a signed message only when the certificate it carries is registered there for the
sender id the message names (seed 002: nobody can register a key under someone else's id, so a
message re-signed with another key under a stolen sender id is caught). Revoking removes the
certificate from the entry.

A queue manager publishes its X25519 public key on its ``mSMQConfiguration`` entry
(``mSMQEncryptKey``); senders on other queue managers encrypt bodies for it.

Every function raises :class:`~facade.errors.DirectoryUnavailable` when the store cannot be
reached or refuses, and changes nothing then.
"""

from __future__ import annotations

import uuid
from typing import Any

import ldap3
from ldap3.utils.dn import escape_rdn

from facade.errors import AccessDenied, InvalidParameter
from facade.directory.client import Directory
from facade.directory.layout import Attr, ObjectClass, queue_manager_dn, users_dn

__all__ = [
    "encryption_key",
    "is_registered",
    "publish_encryption_key",
    "register_certificate",
    "registered_certificates",
    "revoke_certificate",
    "sender_dn",
]

_PERSON = "inetOrgPerson"
_SURNAME = "sn"
#: Length of an X25519 public key, bytes.
_KEY_BYTES = 32


def sender_dn(directory: Directory, sender_id: str) -> str:
    """``cn=<sender id>,ou=Users,<base>``: the user entry of a message sender."""
    return f"cn={escape_rdn(sender_id)},{users_dn(directory.base_dn)}"


def register_certificate(directory: Directory, sender_id: str, der: bytes, digest: str) -> bool:
    """Register a signing certificate for ``sender_id`` (``kmq cert register``), creating the
    user entry if it is missing.

    Only the sender itself may register its certificates: the directory's principal must be
    ``sender_id`` (MSMQ: a user registers certificates on its own user object).

    Args:
        directory (Directory): the directory, bound for the caller.
        sender_id (str): the sender id.
        der (bytes): the certificate, DER.
        digest (str): its ``mSMQDigests`` value (``facade.security.certificates.certificate_digest``).

    Returns:
        bool: False if it was registered already.

    Raises:
        AccessDenied: the caller is not ``sender_id``.
        DirectoryUnavailable: the directory is not initialized, unreachable or refused.
    """
    _require_self(directory, sender_id, "register a certificate for")
    dn = sender_dn(directory, sender_id)
    ops = directory._ops
    with directory.store.write() as conn:
        ops.require_container(conn, users_dn(directory.base_dn))
        attrs = ops.base(conn, dn)
        if attrs is None:
            ops.add(conn, dn, {Attr.OBJECT_CLASS: [ObjectClass.TOP, _PERSON,
                                                   ObjectClass.MESSAGE_SENDER],
                               Attr.CN: sender_id, _SURNAME: sender_id,
                               Attr.SIGN_CERTIFICATES: [der], Attr.DIGESTS: [digest]})
            return True
        if any(bytes(value) == der for value in _values(attrs, Attr.SIGN_CERTIFICATES)):
            return False
        changes: dict[str, Any] = {
            Attr.SIGN_CERTIFICATES: [(ldap3.MODIFY_ADD, [der])],
            Attr.DIGESTS: [(ldap3.MODIFY_ADD, [digest])],
        }
        if ObjectClass.MESSAGE_SENDER.lower() not in {
                str(c).lower() for c in _values(attrs, Attr.OBJECT_CLASS)}:
            changes[Attr.OBJECT_CLASS] = [(ldap3.MODIFY_ADD, [ObjectClass.MESSAGE_SENDER])]
        ops.modify(conn, dn, changes)
        return True


def registered_certificates(directory: Directory, sender_id: str) -> list[bytes]:
    """The certificates (DER) registered for ``sender_id``; empty if it has none or no entry."""
    with directory.store.read() as conn:
        attrs = directory._ops.base(conn, sender_dn(directory, sender_id))
    return [] if attrs is None else [bytes(v) for v in _values(attrs, Attr.SIGN_CERTIFICATES)]


def is_registered(directory: Directory, sender_id: str, der: bytes) -> bool:
    """Whether the certificate ``der`` is registered for ``sender_id`` (the whole certificate is
    compared, not its digest)."""
    return der in registered_certificates(directory, sender_id)


def revoke_certificate(directory: Directory, sender_id: str, digest: str) -> bool:
    """Remove the certificate with ``mSMQDigests`` value ``digest`` from ``sender_id``
    (``kmq cert revoke``): messages signed with it are no longer authenticated.

    Returns:
        bool: False if no such certificate was registered.

    Raises:
        AccessDenied: the caller is not ``sender_id``.
        DirectoryUnavailable: unreachable or refused.
    """
    from facade.security.certificates import certificate_digest

    _require_self(directory, sender_id, "revoke a certificate of")
    dn = sender_dn(directory, sender_id)
    wanted = digest.strip().lower()
    with directory.store.write() as conn:
        attrs = directory._ops.base(conn, dn)
        if attrs is None:
            return False
        matching = [bytes(v) for v in _values(attrs, Attr.SIGN_CERTIFICATES)
                    if certificate_digest(bytes(v)) == wanted]
        if not matching:
            return False
        digests = [str(v) for v in _values(attrs, Attr.DIGESTS) if str(v).lower() == wanted]
        changes: dict[str, Any] = {Attr.SIGN_CERTIFICATES: [(ldap3.MODIFY_DELETE, matching)]}
        if digests:
            changes[Attr.DIGESTS] = [(ldap3.MODIFY_DELETE, digests)]
        directory._ops.modify(conn, dn, changes)
        return True


def publish_encryption_key(directory: Directory, queue_manager: str, guid: uuid.UUID,
                           public_key: bytes) -> None:
    """Publish a queue manager's X25519 public key (``mSMQEncryptKey``), publishing the queue
    manager itself first if needed.

    Raises:
        InvalidParameter: ``public_key`` is not 32 bytes.
        DirectoryUnavailable: unreachable or refused.
    """
    if len(public_key) != _KEY_BYTES:
        raise InvalidParameter(f"an X25519 public key has {_KEY_BYTES} bytes, not {len(public_key)}")
    directory.publish_queue_manager(queue_manager, guid)
    dn = queue_manager_dn(queue_manager, directory.base_dn)
    with directory.store.write() as conn:
        directory._ops.modify(conn, dn, {Attr.ENCRYPT_KEY: [(ldap3.MODIFY_REPLACE, [public_key])]})


def encryption_key(directory: Directory, queue_manager: str) -> bytes | None:
    """The X25519 public key ``queue_manager`` published, or None (not published, or not 32
    bytes)."""
    with directory.store.read() as conn:
        attrs = directory._ops.base(conn, queue_manager_dn(queue_manager, directory.base_dn))
    values = [] if attrs is None else _values(attrs, Attr.ENCRYPT_KEY)
    key = bytes(values[0]) if values else None
    return key if key is not None and len(key) == _KEY_BYTES else None


def _require_self(directory: Directory, sender_id: str, what: str) -> None:
    if directory.principal.casefold() != sender_id.casefold():
        raise AccessDenied(
            f"{directory.principal!r} may not {what} sender {sender_id!r}: a sender registers "
            "and revokes only its own certificates", queue=sender_id,
            hint="run the command as that sender (its principal)")


def _values(attrs: dict[str, Any], name: str) -> list[Any]:
    for key, value in attrs.items():
        if key.lower() == name.lower():
            return list(value) if isinstance(value, list | tuple) else [value]
    return []
