"""Signed and encrypted messages (seed 002), certificates in the directory.

Real broker, embedded directory under the test's KMQ_HOME. Each attack gives the right NACK (or
an error to the sender) and the message is never handed out, lost without a trace, or written in
clear text.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from facade import AuthLevel, Message, PrivacyLevel
from facade.security.certificates import SenderIdentity, create_identity
from facade.config import KmqConfig
from facade.directory.certificates import (
    publish_encryption_key,
    register_certificate,
    revoke_certificate,
)
from facade.model.envelope import decode_acknowledgment
from facade.errors import ConfigurationError, InvalidParameter, ReceiveTimeout
from facade.manager import QueueManager
from facade.model.message import Acknowledgment, JournalLevel, MessageClass
from facade.queues.protection import (
    CouldNotEncrypt,
    ProtectionLevel,
    achieved_level,
    protection_settings,
)
from facade.security.signing import sign
from tests.support.kafka import BrokerEndpoint, raw_values

pytestmark = pytest.mark.integration

SECRET = b"the launch code is 0000"


def _register(qm: QueueManager, sender: str | None = None) -> SenderIdentity:
    identity = create_identity(qm.config.home, sender or qm.config.principal)
    directory = qm.directory
    principal, directory.principal = directory.principal, identity.sender_id
    try:
        register_certificate(directory, identity.sender_id, identity.certificate_der,
                             identity.digest)
    finally:
        directory.principal = principal
    return identity


def _queues(qm: QueueManager, name: str = "secure", **settings):
    queue = qm.create_queue(rf".\private$\{name}", **settings)
    admin = qm.create_queue(rf".\private$\{name}-admin")
    return queue, admin


def _asking_for_nack(admin, **fields) -> Message:
    return Message(admin_queue=admin.format_name, acknowledge=Acknowledgment.NACK_REACH_QUEUE,
                   journal=JournalLevel.DEADLETTER, **fields)


def _expect_rejected(qm: QueueManager, queue, admin, sent_id, nack: MessageClass) -> Message:
    """The message is not handed out; its NACK is in the admin queue and its (still protected)
    copy in the dead-letter queue."""
    with pytest.raises(ReceiveTimeout):
        queue.receive(timeout=3)
    ack = admin.receive(timeout=10)
    assert ack.message_class is nack and ack.correlation_id == sent_id
    info = decode_acknowledgment(ack.body)
    assert info.original_id == sent_id and info.reason
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.id == sent_id and dead.message_class is nack
    assert dead.properties["kmq.reason"] == info.reason
    if dead.privacy_level:  # an encrypted body reaches neither the NACK nor the DLQ in clear
        assert info.original_body is None
        dead_letters = raw_values(qm.config.bootstrap_servers, qm.dead_letter_topic)
        assert dead_letters and not any(SECRET in value for value in dead_letters)
    return dead


def _forge(qm: QueueManager, queue, message: Message,
           tamper: Callable[[Message], Message]) -> Message:
    """Stamp, sign and seal ``message`` as a send does, change it with ``tamper``, and write it
    to the queue's topic (what an attacker with write access to the topic can do)."""
    destination = queue.destinations[0]
    sent = message.stamped(id=qm.ids.new(), sent_time=dt.datetime.now(dt.timezone.utc),
                           source_machine_id=qm.guid, destination_format_name=queue.format_name,
                           destination_queue=destination.format_name)
    sent = qm.protection.seal(qm.protection.prepare(sent), destination)
    forged = tamper(sent)
    qm.write_system_copy(destination.topics.data, forged)
    return forged


# --- signing ---------------------------------------------------------------------------------


def test_signed_message_is_authenticated_and_unsigned_is_not(qm: QueueManager) -> None:
    _register(qm)
    queue, _ = _queues(qm)
    queue.send(Message(body=b"signed", auth_level=AuthLevel.ALWAYS), wait=True)
    queue.send(Message(body=b"plain"), wait=True)
    signed, plain = queue.receive(timeout=10), queue.receive(timeout=10)
    assert signed.body == b"signed" and signed.authenticated is True
    assert signed.sender_id == qm.config.principal.encode() and signed.signature
    assert plain.body == b"plain" and plain.authenticated is False


def test_signing_without_an_identity_is_an_error_and_sends_nothing(qm: QueueManager) -> None:
    queue, _ = _queues(qm)
    with pytest.raises(ConfigurationError, match="kmq cert create"):
        queue.send(Message(body=b"x", auth_level=AuthLevel.ALWAYS), wait=True)
    assert queue.count() == 0


@pytest.mark.parametrize("tamper", [
    pytest.param(lambda m: m.stamped(body=SECRET + b"!"), id="tampered-body"),
    pytest.param(lambda m: m.stamped(label="pay mallory"), id="tampered-label"),
    pytest.param(lambda m: m.stamped(priority=7), id="tampered-priority"),
    pytest.param(lambda m: m.stamped(signature=m.signature[:-2] + b"\0\0"), id="bad-signature"),
])
def test_a_changed_signed_message_gets_nack_bad_signature(qm: QueueManager, tamper) -> None:
    _register(qm)
    queue, admin = _queues(qm)
    forged = _forge(qm, queue, _asking_for_nack(admin, body=SECRET, label="pay alice",
                                                auth_level=AuthLevel.ALWAYS), tamper)
    _expect_rejected(qm, queue, admin, forged.id, MessageClass.NACK_BAD_SIGNATURE)


def test_swapped_certificate_and_re_signing_under_a_stolen_sender_id_are_caught(
        qm: QueueManager) -> None:
    _register(qm)
    mallory = _register(qm, "mallory")  # registered, but for mallory, not for the principal
    queue, admin = _queues(qm)

    def swap(m: Message) -> Message:
        return m.stamped(sender_certificate=mallory.certificate_der)

    def re_sign(m: Message) -> Message:
        changed = m.stamped(body=b"evil", sender_certificate=mallory.certificate_der)
        return changed.stamped(signature=sign(changed, mallory))

    for tamper in (swap, re_sign):
        forged = _forge(qm, queue, _asking_for_nack(admin, body=SECRET,
                                                    auth_level=AuthLevel.ALWAYS), tamper)
        _expect_rejected(qm, queue, admin, forged.id, MessageClass.NACK_BAD_SIGNATURE)


def test_replayed_signature_on_another_message_is_caught(qm: QueueManager) -> None:
    _register(qm)
    queue, admin = _queues(qm)
    original = queue.send(Message(body=SECRET, auth_level=AuthLevel.ALWAYS), wait=True)
    assert queue.receive(timeout=10).authenticated
    forged = _forge(qm, queue, _asking_for_nack(admin, body=SECRET, auth_level=AuthLevel.ALWAYS),
                    lambda m: m.stamped(signature=original.signature))
    _expect_rejected(qm, queue, admin, forged.id, MessageClass.NACK_BAD_SIGNATURE)


def test_unregistered_and_revoked_certificates_are_refused(qm: QueueManager) -> None:
    identity = create_identity(qm.config.home, qm.config.principal)  # never registered
    queue, admin = _queues(qm)
    sent = queue.send(_asking_for_nack(admin, body=SECRET, auth_level=AuthLevel.ALWAYS), wait=True)
    dead = _expect_rejected(qm, queue, admin, sent.id, MessageClass.NACK_BAD_SIGNATURE)
    assert dead.authenticated is False
    register_certificate(qm.directory, identity.sender_id, identity.certificate_der,
                         identity.digest)
    assert revoke_certificate(qm.directory, identity.sender_id, identity.digest)
    sent = queue.send(_asking_for_nack(admin, body=SECRET, auth_level=AuthLevel.ALWAYS), wait=True)
    _expect_rejected(qm, queue, admin, sent.id, MessageClass.NACK_BAD_SIGNATURE)


def test_nobody_registers_a_certificate_for_someone_else(qm: QueueManager) -> None:
    from facade.errors import AccessDenied

    identity = create_identity(qm.config.home, "alice-not-me")
    with pytest.raises(AccessDenied, match="only its own"):
        register_certificate(qm.directory, "alice-not-me", identity.certificate_der,
                             identity.digest)


def test_authenticated_queue_refuses_unsigned_messages(qm: QueueManager) -> None:
    _register(qm)
    queue, admin = _queues(qm, authenticate=True)
    sent = queue.send(_asking_for_nack(admin, body=SECRET), wait=True)
    _expect_rejected(qm, queue, admin, sent.id, MessageClass.NACK_BAD_SIGNATURE)
    queue.send(Message(body=b"signed", auth_level=AuthLevel.ALWAYS), wait=True)
    assert queue.receive(timeout=10).authenticated


def test_a_handle_opened_before_authenticate_was_set_refuses_unsigned_messages(
        qm: QueueManager) -> None:
    """The queue's properties are read when a message arrives, not when the handle opened: a
    handle left open across the change must not hand out what the queue now refuses."""
    _register(qm)
    queue, admin = _queues(qm, "late-auth")
    queue.send(Message(body=b"before"), wait=True)
    assert queue.receive(timeout=10).body == b"before"  # the handle has read the queue
    qm.set_properties(queue.format_name, authenticate=True)
    sent = queue.send(_asking_for_nack(admin, body=SECRET), wait=True)
    _expect_rejected(qm, queue, admin, sent.id, MessageClass.NACK_BAD_SIGNATURE)


# --- encryption ------------------------------------------------------------------------------


def test_encrypted_body_is_never_in_clear_text_in_kafka(qm: QueueManager,
                                                        broker: BrokerEndpoint) -> None:
    _register(qm)
    queue, _ = _queues(qm, journal=True)
    sent = queue.send(Message(body=SECRET, privacy_level=PrivacyLevel.BODY_AES,
                              auth_level=AuthLevel.ALWAYS, journal=JournalLevel.DEADLETTER,
                              time_to_be_received=3600), wait=True)
    assert queue.peek(timeout=10).body == SECRET
    received = queue.receive(timeout=10)
    assert received.body == SECRET and received.authenticated
    journaled = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\secure;JOURNAL").receive(timeout=10)
    assert journaled.id == sent.id and journaled.body == SECRET and journaled.authenticated
    destination = queue.destinations[0]
    for topic in (destination.topics.data, destination.topics.journal().data):
        values = raw_values(broker.bootstrap_servers, topic)
        assert values and not any(SECRET in value for value in values), topic


def test_each_copy_of_a_multiple_element_send_is_encrypted_for_its_destination(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    first, _ = _queues(qm, "first")
    second, _ = _queues(qm, "second")
    both = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\first,DIRECT=OS:{qm.name}\private$\second")
    both.send(Message(body=SECRET, privacy_level=PrivacyLevel.BODY_AES), wait=True)
    for queue in (first, second):
        raw = raw_values(broker.bootstrap_servers, queue.destinations[0].topics.data)
        assert len(raw) == 1 and SECRET not in raw[0]
        received = queue.receive(timeout=10)
        assert received.body == SECRET and received.authenticated is False
    # The same ciphertext cannot be read as the other queue's copy (bound to its queue).
    forged_admin = qm.create_queue(r".\private$\moved-admin")
    stored = _forge(qm, first, _asking_for_nack(forged_admin, body=SECRET,
                                                privacy_level=PrivacyLevel.BODY_AES),
                    lambda m: m.stamped(destination_queue=second.format_name))
    _expect_rejected(qm, first, forged_admin, stored.id, MessageClass.NACK_BAD_ENCRYPTION)


def test_missing_recipient_key_refuses_the_send(qm: QueueManager, broker: BrokerEndpoint,
                                                kmq_home: Path) -> None:
    queue, _ = _queues(qm)
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}")
    with QueueManager.open(config) as other:
        remote = other.open_queue(rf"DIRECT=OS:{qm.name}\private$\secure")
        with pytest.raises(CouldNotEncrypt, match="NACK_COULD_NOT_ENCRYPT"):
            remote.send(Message(body=SECRET, privacy_level=PrivacyLevel.BODY_AES), wait=True)
        assert queue.count() == 0
        qm.protection.publish_key()  # `kmq cert qm-key`: now the other queue manager can
        remote.send(Message(body=SECRET, privacy_level=PrivacyLevel.BODY_AES), wait=True)
    assert queue.receive(timeout=10).body == SECRET


def test_wrong_recipient_key_gets_nack_bad_encryption(qm: QueueManager, broker: BrokerEndpoint,
                                                      kmq_home: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from facade.security.encryption import public_bytes

    queue, admin = _queues(qm)
    stale = public_bytes(X25519PrivateKey.generate().public_key())
    publish_encryption_key(qm.directory, qm.name, qm.guid, stale)
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}")
    with QueueManager.open(config) as other:
        sent = other.open_queue(rf"DIRECT=OS:{qm.name}\private$\secure").send(
            _asking_for_nack(admin, body=SECRET, privacy_level=PrivacyLevel.BODY_AES), wait=True)
    dead = _expect_rejected(qm, queue, admin, sent.id, MessageClass.NACK_BAD_ENCRYPTION)
    assert SECRET not in dead.body  # dead-lettered as stored: still encrypted


@pytest.mark.parametrize("privacy_level, message_level", [
    (2, PrivacyLevel.NONE),      # BODY: encrypted only
    (0, PrivacyLevel.BODY_AES),  # NONE: clear text only
])
def test_queue_privacy_level_is_enforced_on_arrival(qm: QueueManager, privacy_level: int,
                                                    message_level: PrivacyLevel) -> None:
    queue, admin = _queues(qm, privacy_level=privacy_level)
    sent = queue.send(_asking_for_nack(admin, body=SECRET, privacy_level=message_level),
                      wait=True)
    _expect_rejected(qm, queue, admin, sent.id, MessageClass.NACK_BAD_ENCRYPTION)
    allowed = PrivacyLevel.BODY_AES if privacy_level == 2 else PrivacyLevel.NONE
    queue.send(Message(body=b"ok", privacy_level=allowed), wait=True)
    assert queue.receive(timeout=10).body == b"ok"


def test_default_queue_privacy_is_optional(qm: QueueManager) -> None:
    queue, _ = _queues(qm)
    assert queue.properties.privacy_level == 1  # MQ_PRIV_LEVEL_OPTIONAL, MSMQ's default
    queue.send(Message(body=b"clear"), wait=True)
    queue.send(Message(body=b"private", privacy_level=PrivacyLevel.BODY_AES), wait=True)
    assert [queue.receive(timeout=10).body for _ in range(2)] == [b"clear", b"private"]


@pytest.mark.parametrize("properties, named", [
    ({"auth_level": AuthLevel.SIG10}, "SIG10"),
    ({"privacy_level": PrivacyLevel.BODY_BASE}, "BODY_BASE"),
    ({"signature": b"sig"}, "signature"),
    ({"authenticated": True}, "authenticated"),
    ({"sender_certificate": b"cert"}, "sender_certificate"),
])
def test_security_properties_kmq_does_not_implement_are_refused(qm: QueueManager,
                                                                properties: dict,
                                                                named: str) -> None:
    queue, _ = _queues(qm)
    with pytest.raises(InvalidParameter, match=named):
        queue.send(Message(body=b"x", **properties), wait=True)
    assert queue.count() == 0


def test_forwarding_a_received_signed_message_needs_its_protection_cleared(
        qm: QueueManager) -> None:
    _register(qm)
    queue, _ = _queues(qm)
    queue.send(Message(body=b"fwd", auth_level=AuthLevel.ALWAYS), wait=True)
    received = queue.receive(timeout=10)
    with pytest.raises(InvalidParameter, match="set by the queue manager"):
        queue.send(received)
    queue.send(dataclasses.replace(received, sender_certificate=None, signature=None,
                                   authenticated=False), wait=True)
    assert queue.receive(timeout=10).authenticated


@pytest.mark.parametrize("read", [
    pytest.param(lambda q: q.peek(timeout=3), id="peek"),
    pytest.param(lambda q: q.receive(timeout=3, lock=True), id="peek-lock"),
    pytest.param(lambda q: q.cursor().peek_current(timeout=3), id="cursor"),
])
def test_every_read_path_refuses_a_tampered_message(qm: QueueManager, read) -> None:
    _register(qm)
    queue, admin = _queues(qm)
    forged = _forge(qm, queue, _asking_for_nack(admin, body=SECRET, auth_level=AuthLevel.ALWAYS,
                                                privacy_level=PrivacyLevel.BODY_AES),
                    lambda m: m.stamped(label="changed"))
    with pytest.raises(ReceiveTimeout):
        read(queue)
    _expect_rejected(qm, queue, admin, forged.id, MessageClass.NACK_BAD_SIGNATURE)
    assert queue.count() == 0


# --- protection levels (seed 004) -----------------------------------------------------------


@pytest.mark.parametrize("sent_level, required, delivered, nack", [
    (ProtectionLevel.NONE, ProtectionLevel.NONE, True, None),
    (ProtectionLevel.INTEGRITY, ProtectionLevel.NONE, True, None),
    (ProtectionLevel.NONE, ProtectionLevel.AUTHENTICATION, False, MessageClass.NACK_BAD_SIGNATURE),
    (ProtectionLevel.INTEGRITY, ProtectionLevel.INTEGRITY, True, None),
    (ProtectionLevel.INTEGRITY, ProtectionLevel.PRIVACY, False, MessageClass.NACK_BAD_ENCRYPTION),
    (ProtectionLevel.PRIVACY, ProtectionLevel.INTEGRITY, True, None),
    (ProtectionLevel.PRIVACY, ProtectionLevel.PRIVACY, True, None),
])
def test_a_message_is_returned_only_at_the_stronger_of_both_levels(
        qm: QueueManager, sent_level: ProtectionLevel, required: ProtectionLevel,
        delivered: bool, nack: MessageClass | None) -> None:
    _register(qm)
    queue, admin = _queues(qm)
    queue.protection_level = required
    sent = queue.send(_asking_for_nack(admin, body=SECRET, **protection_settings(sent_level)),
                      wait=True)
    if delivered:
        received = queue.receive(timeout=10)
        assert received.id == sent.id and received.body == SECRET
        assert achieved_level(received, sent.privacy_level is not PrivacyLevel.NONE) >= max(
            sent_level, required)
    else:
        _expect_rejected(qm, queue, admin, sent.id, nack)


def test_signed_and_encrypted_with_each_directory_kind(broker: BrokerEndpoint, kmq_home: Path,
                                                       directory_settings) -> None:
    """The same flow with the certificate and the key in the embedded store and in slapd."""
    # The embedded store takes the declared principal (local development); slapd authenticates
    # the bind, and that identity is the sender (a declared one that differs is refused).
    declared = {"principal": f"sender-{uuid.uuid4().hex[:8]}"} \
        if directory_settings.url.startswith("embedded:") else {}
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}",
                            directory=directory_settings, **declared)
    with QueueManager.open(config) as manager:
        principal = manager.access.principal
        manager.directory.initialize()
        queue, admin = _queues(manager)
        unregistered = queue.send(_asking_for_nack(admin, body=SECRET,
                                                   **protection_settings(ProtectionLevel.NONE)),
                                  wait=True)
        assert queue.receive(timeout=10).id == unregistered.id  # plain: no directory needed
        identity = create_identity(manager.config.home, principal)
        sent = queue.send(_asking_for_nack(admin, body=SECRET, auth_level=AuthLevel.ALWAYS,
                                           privacy_level=PrivacyLevel.BODY_AES), wait=True)
        _expect_rejected(manager, queue, admin, sent.id, MessageClass.NACK_BAD_SIGNATURE)
        register_certificate(manager.directory, principal, identity.certificate_der,
                             identity.digest)
        manager.protection.publish_key()
        queue.send(Message(body=SECRET, auth_level=AuthLevel.ALWAYS,
                           privacy_level=PrivacyLevel.BODY_AES), wait=True)
        received = queue.receive(timeout=10)
        assert received.body == SECRET and received.authenticated


# --- the destination a signature binds -------------------------------------------------------


def _copy_records(bootstrap: str, source: str, target: str) -> None:
    """Append the records of ``source`` (partition 0) to ``target``, key, value and headers
    byte for byte: what anyone who may write a queue's topic can do without kmq."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"copy-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "allow.auto.create.topics": False})
    try:
        consumer.assign([TopicPartition(source, 0, 0)])
        while True:
            record = consumer.poll(10)
            assert record is not None, f"{source}: no end of partition"
            if record.error() is not None and record.error().code() == KafkaError._PARTITION_EOF:
                break
            assert record.error() is None, record.error()
            producer.produce(target, value=record.value(), key=record.key(),
                             headers=record.headers())
        assert producer.flush(30) == 0
    finally:
        consumer.close()


@pytest.mark.parametrize("authenticate, how", [
    (True, "byte-for-byte"),
    (True, "destination-queue-rewritten"),
    (False, "byte-for-byte"),
])
def test_a_signed_message_copied_to_another_queue_fails_authentication(
        qm: QueueManager, broker: BrokerEndpoint, authenticate: bool, how: str) -> None:
    """The signature covers the destination the sender named: a copy in any other queue is a
    bad signature there (NACK_BAD_SIGNATURE, dead-lettered), never an authenticated message."""
    _register(qm)
    signed_for, admin = _queues(qm, "signed-for", authenticate=True)
    copied_to = qm.create_queue(r".\private$\copied-to", authenticate=authenticate)
    message = _asking_for_nack(admin, body=SECRET, auth_level=AuthLevel.ALWAYS)
    if how == "byte-for-byte":
        sent = signed_for.send(message, wait=True)
        _copy_records(broker.bootstrap_servers, signed_for.destinations[0].topics.data,
                      copied_to.destinations[0].topics.data)
    else:  # PROPID_M_DEST_QUEUE is not signed: pointing it at the queue changes nothing
        sent = _forge(qm, signed_for, message, lambda m: m.stamped(
            destination_queue=copied_to.destinations[0].format_name))
        qm.write_system_copy(copied_to.destinations[0].topics.data, sent)
    dead = _expect_rejected(qm, copied_to, admin, sent.id, MessageClass.NACK_BAD_SIGNATURE)
    assert dead.destination_format_name == signed_for.format_name
    assert "signed for" in dead.properties["kmq.reason"]
    original = signed_for.receive(timeout=10)  # where it was sent, it is still authenticated
    assert original.id == sent.id and original.authenticated and original.body == SECRET


def test_every_name_that_reaches_a_queue_keeps_its_signature(qm: QueueManager,
                                                            broker: BrokerEndpoint) -> None:
    """Path names, DIRECT=, PRIVATE=, PUBLIC=, multiple-element names and lists (through an
    alias) reach the queue they name; journal, subqueue and dead-letter copies are read there
    as authenticated, and so is a name relative to the sender read by another queue manager."""
    _register(qm)
    tag = uuid.uuid4().hex[:8]
    private = qm.create_queue(rf".\private$\reached-{tag}", authenticate=True, journal=True)
    public = qm.create_queue(rf".\reached-{tag}", authenticate=True)
    other, _ = _queues(qm, f"other-{tag}")
    private_fn = private.destinations[0].format_name
    number = f"{int(uuid.UUID(private.properties.instance).hex[:8], 16):08x}"
    directory = qm.directory
    directory.create_alias(f"alias-{tag}", private_fn)
    dl = directory.create_distribution_list(f"list-{tag}")
    directory.add_member(f"dl:list-{tag}", f"alias:alias-{tag}")
    directory.add_member(f"dl:list-{tag}", f"PUBLIC={public.properties.instance}")
    to_private = [rf".\private$\reached-{tag}", private_fn, f"PRIVATE={qm.guid}\\{number}",
                  f"{private_fn},{other.destinations[0].format_name}", dl.format_name]
    to_public = [dl.format_name, f"PUBLIC={public.properties.instance}"]
    signed = dict(auth_level=AuthLevel.ALWAYS, journal=JournalLevel.DEADLETTER)
    for name in [*to_private, to_public[-1]]:
        qm.open_queue(name).send(Message(body=name.encode(), **signed), wait=True)
    for queue, names in ((private, to_private), (public, to_public)):
        for name in names:
            received = queue.receive(timeout=10)
            assert received.authenticated, name
            assert received.destination_format_name == name and received.body == name.encode()
    journal = qm.open_queue(private_fn + ";JOURNAL")
    assert [m.authenticated for m in (journal.receive(timeout=10) for _ in to_private)] \
        == [True] * len(to_private)

    moved = private.send(Message(body=b"moved", **signed), wait=True)
    private.move(private.peek(timeout=10).lookup_id, "retry")
    in_subqueue = qm.open_queue(private_fn + ";retry").receive(timeout=10)
    assert in_subqueue.id == moved.id and in_subqueue.authenticated

    rejected = private.send(Message(body=b"rejected", **signed), wait=True)
    private.mark_rejected(private.peek(timeout=10).lookup_id)
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.id == rejected.id and dead.authenticated

    # ".\private$\..." meant the sender's queue manager: another one reads it there.
    relative = qm.open_queue(rf".\private$\reached-{tag}").send(
        Message(body=b"relative", **signed), wait=True)
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}")
    with QueueManager.open(config) as reader:
        received = reader.open_queue(private_fn).receive(timeout=10)
    assert received.id == relative.id and received.authenticated
