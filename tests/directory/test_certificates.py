"""Seed 002 in the directory: signing certificates on the sender's user entry and the queue
manager's encryption key, on the embedded store and a real slapd."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from facade.security.certificates import certificate_digest, create_identity
from facade.directory import Directory
from facade.directory.certificates import (
    encryption_key,
    is_registered,
    publish_encryption_key,
    register_certificate,
    registered_certificates,
    revoke_certificate,
    sender_dn,
)
from facade.errors import AccessDenied, InvalidParameter


@pytest.fixture
def sender(directory: Directory) -> Iterator[str]:
    """A fresh sender id, the directory's principal for the test; its entry removed after (the
    slapd server is shared by the session)."""
    name = f"sender-{uuid.uuid4().hex[:8]}"
    principal, directory.principal = directory.principal, name
    yield name
    directory.principal = principal
    with directory.store.write() as conn:
        conn.delete(sender_dn(directory, name))


def test_register_list_and_revoke(directory: Directory, sender: str, tmp_path: Path) -> None:
    first = create_identity(tmp_path, sender)
    second = create_identity(tmp_path / "other", sender)
    assert register_certificate(directory, sender, first.certificate_der, first.digest)
    assert not register_certificate(directory, sender, first.certificate_der, first.digest)
    assert register_certificate(directory, sender, second.certificate_der, second.digest)
    assert sorted(registered_certificates(directory, sender)) == sorted(
        [first.certificate_der, second.certificate_der])
    assert is_registered(directory, sender, first.certificate_der)
    assert not is_registered(directory, "someone-else", first.certificate_der)
    assert revoke_certificate(directory, sender, first.digest)
    assert not revoke_certificate(directory, sender, first.digest)
    assert not is_registered(directory, sender, first.certificate_der)
    assert is_registered(directory, sender, second.certificate_der)
    assert certificate_digest(second.certificate_der) == second.digest


def test_only_the_sender_registers_or_revokes_its_certificates(directory: Directory,
                                                               sender: str,
                                                               tmp_path: Path) -> None:
    identity = create_identity(tmp_path, sender)
    register_certificate(directory, sender, identity.certificate_der, identity.digest)
    directory.principal = "mallory"
    with pytest.raises(AccessDenied):
        register_certificate(directory, sender, identity.certificate_der, identity.digest)
    with pytest.raises(AccessDenied):
        revoke_certificate(directory, sender, identity.digest)
    directory.principal = sender
    assert is_registered(directory, sender, identity.certificate_der)


def test_queue_manager_encryption_key(directory: Directory) -> None:
    assert encryption_key(directory, "qm1") is None
    publish_encryption_key(directory, "qm1", uuid.uuid4(), b"k" * 32)
    assert encryption_key(directory, "qm1") == b"k" * 32
    publish_encryption_key(directory, "qm1", uuid.uuid4(), b"n" * 32)
    assert encryption_key(directory, "qm1") == b"n" * 32
    with pytest.raises(InvalidParameter, match="32 bytes"):
        publish_encryption_key(directory, "qm1", uuid.uuid4(), b"short")
