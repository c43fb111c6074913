"""Signatures and body encryption without a broker: round trips, every field
that must be covered, and fuzzing of the decoders (only the documented errors come out)."""

from __future__ import annotations

import datetime as dt
import os
import stat
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facade.security.certificates import create_identity, load_identity, queue_manager_key
from facade.security.encryption import EncryptionError, open_body, public_bytes, seal_body
from facade.errors import ConfigurationError, InvalidParameter
from facade.model.message import (
    AuthLevel,
    EncryptionAlgorithm,
    HashAlgorithm,
    Message,
    MessageId,
    PrivacyLevel,
)
from facade.queues.protection import MessageProtection, MessageRejected
from facade.security.signing import SignatureError, digest_input, sign, verify

GUID = uuid.UUID("2d0ab4c6-1111-4222-8333-444455556666")
QUEUE = r"DIRECT=OS:qm\private$\q"


@pytest.fixture(scope="module")
def identity(tmp_path_factory: pytest.TempPathFactory):
    return create_identity(tmp_path_factory.mktemp("home"), "alice")


def _message(**fields) -> Message:
    base = dict(id=MessageId(GUID, 7), body=b"body", label="label",
                sent_time=dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.timezone.utc),
                sender_id=b"alice", auth_level=AuthLevel.ALWAYS, destination_queue=QUEUE)
    return Message(**{**base, **fields})


def test_identity_files_are_private_and_reloadable(tmp_path: Path) -> None:
    created = create_identity(tmp_path, "bob")
    key_file = next((tmp_path / "identities").glob("*/key.pem"))
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert load_identity(tmp_path, "bob").certificate_der == created.certificate_der
    with pytest.raises(InvalidParameter, match="already has an identity"):
        create_identity(tmp_path, "bob")
    os.chmod(key_file, 0o644)
    os.utime(key_file)  # a new stamp: the cached identity is not used
    with pytest.raises(ConfigurationError, match="chmod 600"):
        load_identity(tmp_path, "bob")
    with pytest.raises(ConfigurationError, match="kmq cert create"):
        load_identity(tmp_path, "nobody")


def test_queue_manager_key_is_created_once(tmp_path: Path) -> None:
    first, created = queue_manager_key(tmp_path, "qm1")
    again, created_again = queue_manager_key(tmp_path, "qm1")
    assert created and not created_again
    assert public_bytes(first.public_key()) == public_bytes(again.public_key())


def test_signature_verifies_and_survives_what_changes_on_the_way(identity) -> None:
    message = _message()
    signed = message.stamped(signature=sign(message, identity))
    verify(signed, identity.certificate)
    # This copy's queue, arrival, lookup id, counts and a dead-letter class are not signed.
    from facade.model.message import MessageClass

    verify(signed.stamped(destination_queue="elsewhere", lookup_id=5, abort_count=2,
                          move_count=1, time_to_be_received=None,
                          message_class=MessageClass.NACK_BAD_SIGNATURE,
                          properties={"kmq.reason": "x"}), identity.certificate)


@pytest.mark.parametrize("change", [
    {"body": b"Body"}, {"label": "Label"}, {"priority": 7}, {"id": MessageId(GUID, 8)},
    {"sender_id": b"mallory"}, {"app_specific": 1}, {"extension": b"x"},
    {"correlation_id": MessageId(GUID, 1)}, {"response_queue": QUEUE}, {"admin_queue": QUEUE},
    {"properties": {"k": "v"}}, {"hash_algorithm": HashAlgorithm.SHA512},
    {"sent_time": dt.datetime(2026, 1, 2, 3, 4, 6, tzinfo=dt.timezone.utc)},
])
def test_every_signed_field_is_covered(identity, change: dict) -> None:
    message = _message()
    signature = sign(message, identity)
    changed = message.stamped(**change, signature=signature)
    with pytest.raises(SignatureError):
        verify(changed, identity.certificate)


@given(st.binary(max_size=200))
def test_verify_raises_only_signature_error_for_any_signature(identity, signature: bytes) -> None:
    with pytest.raises(SignatureError):
        verify(_message(signature=signature), identity.certificate)


@given(st.text(max_size=40), st.binary(max_size=40), st.text(max_size=40), st.binary(max_size=40))
def test_digest_input_is_unambiguous(label_a: str, body_a: bytes, label_b: str,
                                     body_b: bytes) -> None:
    same = (label_a, body_a) == (label_b, body_b)
    assert (digest_input(_message(label=label_a, body=body_a))
            == digest_input(_message(label=label_b, body=body_b))) == same


def test_sealed_body_opens_only_for_its_key_id_and_queue() -> None:
    own = X25519PrivateKey.generate()
    body, key = seal_body(b"secret", public_bytes(own.public_key()), EncryptionAlgorithm.AES256,
                          MessageId(GUID, 1), QUEUE)
    assert b"secret" not in body
    assert open_body(body, key, own, EncryptionAlgorithm.AES256, MessageId(GUID, 1),
                     QUEUE) == b"secret"
    for args in ((X25519PrivateKey.generate(), EncryptionAlgorithm.AES256, MessageId(GUID, 1), QUEUE),
                 (own, EncryptionAlgorithm.AES256, MessageId(GUID, 2), QUEUE),
                 (own, EncryptionAlgorithm.AES256, MessageId(GUID, 1), QUEUE + "2"),
                 (own, EncryptionAlgorithm.AES128, MessageId(GUID, 1), QUEUE)):
        with pytest.raises(EncryptionError):
            open_body(body, key, *args)
    with pytest.raises(InvalidParameter, match="AES-GCM only"):
        seal_body(b"x", public_bytes(own.public_key()), EncryptionAlgorithm.RC4,
                  MessageId(GUID, 1), QUEUE)


@given(st.binary(max_size=120), st.one_of(st.none(), st.binary(max_size=40)),
       st.sampled_from(EncryptionAlgorithm))
def test_open_body_raises_only_encryption_error(body: bytes, key: bytes | None,
                                                algorithm: EncryptionAlgorithm) -> None:
    with pytest.raises(EncryptionError):
        open_body(body, key, _OWN, algorithm, MessageId(GUID, 1), QUEUE)


_OWN = X25519PrivateKey.generate()


def _protection(home: Path) -> MessageProtection:
    config = SimpleNamespace(home=home, principal="alice",
                             directory=SimpleNamespace(is_workgroup=True))
    return MessageProtection(SimpleNamespace(config=config, name="qm", guid=GUID))  # type: ignore[arg-type]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=150)
@given(certificate=st.one_of(st.none(), st.binary(max_size=300)),
       signature=st.one_of(st.none(), st.binary(max_size=80)),
       symmetric_key=st.one_of(st.none(), st.binary(max_size=40)),
       body=st.binary(max_size=80), sender=st.one_of(st.none(), st.binary(max_size=10)),
       privacy=st.sampled_from([PrivacyLevel.NONE, PrivacyLevel.BODY_AES]))
def test_accept_raises_only_message_rejected(tmp_path: Path, certificate, signature,
                                             symmetric_key, body, sender, privacy) -> None:
    protection = _protection(tmp_path)
    message = _message(body=body, sender_id=sender).stamped(
        sender_certificate=certificate, signature=signature,
        destination_symmetric_key=symmetric_key, privacy_level=privacy)
    queue = SimpleNamespace(authenticate=False, privacy_level=1, path_name="qm\\q")
    with pytest.raises(MessageRejected) as caught:
        protection.accept(message, queue)  # type: ignore[arg-type]
    assert caught.value.stored is message
    # Journals and dead-letter queues hand it out (as stored when it does not decrypt).
    inspected = protection.accept(message, None)
    assert inspected.authenticated is False
    assert inspected is message or privacy is PrivacyLevel.NONE


def _ca_issued(subject: str, key) -> bytes:
    """A certificate for ``key`` issued by a throwaway CA, PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA")]))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(ca_key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.PEM)


def test_imported_ca_issued_rsa_identity_signs_with_pss(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from facade.security.certificates import import_identity

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    imported = import_identity(tmp_path, "carol", _ca_issued("carol", key), key_pem)
    assert load_identity(tmp_path, "carol").certificate_der == imported.certificate_der
    message = _message(sender_id=b"carol")
    verify(message.stamped(signature=sign(message, imported)), imported.certificate)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(InvalidParameter, match="does not belong"):
        import_identity(tmp_path, "dave", _ca_issued("dave", other), key_pem)
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    small_pem = small.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    with pytest.raises(InvalidParameter, match="2048 bits"):
        import_identity(tmp_path, "erin", _ca_issued("erin", small), small_pem)


def test_certificate_of_another_key_type_does_not_take_the_key(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    from facade.security.certificates import import_identity

    key = ec.generate_private_key(ec.SECP256R1())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    ed25519_certificate = _ca_issued("frank", ed25519.Ed25519PrivateKey.generate())
    with pytest.raises(InvalidParameter, match="does not belong"):
        import_identity(tmp_path, "frank", ed25519_certificate, key_pem)


def test_a_private_message_without_id_is_not_sealed(tmp_path: Path) -> None:
    protection = _protection(tmp_path)
    message = _message(id=None, privacy_level=PrivacyLevel.BODY_AES)
    with pytest.raises(EncryptionError, match="without an id"):
        protection.for_storage(message)
