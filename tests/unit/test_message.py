"""Unit tests for facade.model.message: message ids, MSMQ enums, Message validation, ack payloads."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import uuid

import pytest

from facade.model import message as message_module
from facade.model.envelope import decode_message, encode_message
from facade.errors import InvalidParameter
from facade.model.message import (
    AcknowledgedQueue,
    Acknowledgment,
    AcknowledgmentInfo,
    AuthLevel,
    BodyType,
    Delivery,
    EncryptionAlgorithm,
    HashAlgorithm,
    JournalLevel,
    Message,
    MessageClass,
    MessageId,
    PrivacyLevel,
    SenderIdType,
    combine_acknowledgments,
)
from facade.model.timers import TIME_TO_BE_RECEIVED, TIME_TO_REACH_QUEUE, TIMER_RANGES

GUID = uuid.UUID("ae0c5671-f190-12ce-ae10-00dd0114290f")
UTC = dt.UTC
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


# ---------------------------------------------------------------------------------------------
# MessageId
# ---------------------------------------------------------------------------------------------


def test_message_id_binary_layout_matches_msmq() -> None:
    mid = MessageId.parse("ae0c5671-f190-12ce-ae10-00dd0114290f\\12345")
    # GUID in Windows byte order (first three groups little-endian), then the sequence LE.
    assert mid.to_bytes() == bytes.fromhex("71560cae90f1ce12ae1000dd0114290f39300000")
    assert len(mid.to_bytes()) == MessageId.SIZE == 20


@pytest.mark.parametrize(
    ("text", "guid", "sequence"),
    [
        ("ae0c5671-f190-12ce-ae10-00dd0114290f\\12345", GUID, 12345),
        ("ae0c5671-f190-12ce-ae10-00dd0114290f\\0", GUID, 0),
        ("ae0c5671-f190-12ce-ae10-00dd0114290f\\4294967295", GUID, 2**32 - 1),
        ("00000000-0000-0000-0000-000000000000\\1", uuid.UUID(int=0), 1),
    ],
)
def test_message_id_text_round_trip(text: str, guid: uuid.UUID, sequence: int) -> None:
    mid = MessageId.parse(text)
    assert (mid.machine_guid, mid.sequence) == (guid, sequence)
    assert str(mid) == text
    assert MessageId.from_bytes(mid.to_bytes()) == mid


@pytest.mark.parametrize(
    "text",
    ["AE0C5671-F190-12CE-AE10-00DD0114290F\\7", "{ae0c5671-f190-12ce-ae10-00dd0114290f}\\7"],
)
def test_message_id_parse_accepts_upper_case_and_braces_and_prints_canonical(text: str) -> None:
    assert str(MessageId.parse(text)) == "ae0c5671-f190-12ce-ae10-00dd0114290f\\7"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ae0c5671-f190-12ce-ae10-00dd0114290f",  # no sequence
        "ae0c5671-f190-12ce-ae10-00dd0114290f/1",  # wrong separator
        "ae0c5671-f190-12ce-ae10-00dd0114290f\\-1",
        "ae0c5671-f190-12ce-ae10-00dd0114290f\\4294967296",  # > 2**32-1
        "ae0c5671-f190-12ce-ae10-00dd0114290f\\12345678901",  # 11 digits
        "ae0c5671-f190-12ce-ae10-00dd0114290f\\1 ",
        "ae0c5671f19012ceae1000dd0114290f\\1",  # GUID without hyphens
        "zz0c5671-f190-12ce-ae10-00dd0114290f\\1",
        "ae0c5671-f190-12ce-ae10-00dd0114290f\\0x10",
    ],
)
def test_message_id_parse_rejects_bad_text_naming_the_form(text: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        MessageId.parse(text)
    assert "guid\\sequence" in str(info.value) or "0-4294967295" in str(info.value)


def test_message_id_parse_rejects_non_str() -> None:
    with pytest.raises(InvalidParameter, match="guid"):
        MessageId.parse(b"ae0c5671-f190-12ce-ae10-00dd0114290f\\1")  # type: ignore[arg-type]


@pytest.mark.parametrize("data", [b"", b"\x00" * 19, b"\x00" * 21, "x" * 20])
def test_message_id_from_bytes_requires_20_bytes(data: object) -> None:
    with pytest.raises(InvalidParameter, match="20 bytes"):
        MessageId.from_bytes(data)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("guid", "sequence"),
    [(GUID, -1), (GUID, 2**32), (GUID, 1.0), (GUID, True), (str(GUID), 1), (None, 1)],
)
def test_message_id_constructor_checks_types_and_ranges(guid: object, sequence: object) -> None:
    with pytest.raises(InvalidParameter):
        MessageId(guid, sequence)  # type: ignore[arg-type]


def test_message_id_is_hashable_and_immutable() -> None:
    a, b = MessageId(GUID, 5), MessageId(GUID, 5)
    assert a == b and hash(a) == hash(b) and {a, b} == {a}
    with pytest.raises(AttributeError):
        a.sequence = 6  # type: ignore[misc]


def test_message_id_new_is_unique_across_threads() -> None:
    ids: list[MessageId] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [MessageId.new(GUID) for _ in range(2000)]
        with lock:
            ids.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == len(ids) == 16000
    assert all(i.machine_guid == GUID for i in ids)


def test_message_id_new_wraps_at_32_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = message_module._SequenceCounter()
    counter._count = iter([2**32 - 1, 2**32, 2**32 + 1])  # type: ignore[assignment]
    monkeypatch.setattr(message_module, "_SEQUENCE", counter)
    assert [MessageId.new(GUID).sequence for _ in range(3)] == [2**32 - 1, 0, 1]


def test_message_id_sequence_is_seeded_from_time() -> None:
    # A fresh counter starts near "now in ms mod 2**32", so restarts do not begin at 0 again.
    import time

    now = (time.time_ns() // 1_000_000) & 0xFFFFFFFF
    first = message_module._SequenceCounter().next()
    assert (first - now) % 2**32 < 60_000


# ---------------------------------------------------------------------------------------------
# Enumerations: values from the MSMQ reference (mq.h), section 2 and 3
# ---------------------------------------------------------------------------------------------

CLASS_TABLE = [
    ("NORMAL", 0x0000),
    ("REPORT", 0x0001),
    ("ACK_REACH_QUEUE", 0x0002),
    ("ACK_RECEIVE", 0x4000),
    ("NACK_BAD_DST_Q", 0x8000),
    ("NACK_PURGED", 0x8001),
    ("NACK_REACH_QUEUE_TIMEOUT", 0x8002),
    ("NACK_Q_EXCEED_QUOTA", 0x8003),
    ("NACK_ACCESS_DENIED", 0x8004),
    ("NACK_HOP_COUNT_EXCEEDED", 0x8005),
    ("NACK_BAD_SIGNATURE", 0x8006),
    ("NACK_BAD_ENCRYPTION", 0x8007),
    ("NACK_COULD_NOT_ENCRYPT", 0x8008),
    ("NACK_NOT_TRANSACTIONAL_Q", 0x8009),
    ("NACK_NOT_TRANSACTIONAL_MSG", 0x800A),
    ("NACK_UNSUPPORTED_CRYPTO_PROVIDER", 0x800B),
    ("NACK_SOURCE_COMPUTER_GUID_CHANGED", 0x800C),
    ("NACK_MESSAGE_TOO_LARGE", 0x800D),
    ("NACK_Q_DELETED", 0xC000),
    ("NACK_Q_PURGED", 0xC001),
    ("NACK_RECEIVE_TIMEOUT", 0xC002),
    ("NACK_RECEIVE_TIMEOUT_AT_SENDER", 0xC003),
    ("NACK_RECEIVE_REJECTED", 0xC004),
]


@pytest.mark.parametrize(("name", "value"), CLASS_TABLE)
def test_message_class_values_and_flags(name: str, value: int) -> None:
    cls = MessageClass[name]
    assert cls == value
    assert cls.is_nack == bool(value & 0x8000) == name.startswith("NACK_")
    assert cls.is_receive_phase == bool(value & 0x4000)
    assert cls.is_ack == name.startswith("ACK_")
    assert cls.is_acknowledgment == (name.startswith("ACK_") or name.startswith("NACK_"))


def test_message_class_has_exactly_the_reference_classes() -> None:
    assert {(c.name, c.value) for c in MessageClass} == set(CLASS_TABLE)


@pytest.mark.parametrize(
    ("member", "value"),
    [
        (Acknowledgment.NONE, 0x00),
        (Acknowledgment.POSITIVE_ARRIVAL, 0x01),
        (Acknowledgment.POSITIVE_RECEIVE, 0x02),
        (Acknowledgment.NEGATIVE_ARRIVAL, 0x04),
        (Acknowledgment.NEGATIVE_RECEIVE, 0x08),
        (Acknowledgment.NACK_REACH_QUEUE, 0x04),
        (Acknowledgment.FULL_REACH_QUEUE, 0x05),
        (Acknowledgment.NACK_RECEIVE, 0x0C),
        (Acknowledgment.FULL_RECEIVE, 0x0E),
        (JournalLevel.NONE, 0),
        (JournalLevel.DEADLETTER, 1),
        (JournalLevel.JOURNAL, 2),
        (Delivery.EXPRESS, 0),
        (Delivery.RECOVERABLE, 1),
        (PrivacyLevel.NONE, 0),
        (PrivacyLevel.BODY_BASE, 1),
        (PrivacyLevel.BODY_ENHANCED, 3),
        (PrivacyLevel.BODY_AES, 5),
        (AuthLevel.NONE, 0),
        (AuthLevel.ALWAYS, 1),
        (AuthLevel.SIG10, 2),
        (AuthLevel.SIG20, 4),
        (AuthLevel.SIG30, 8),
        (HashAlgorithm.MD5, 0x8003),
        (HashAlgorithm.SHA1, 0x8004),
        (HashAlgorithm.SHA256, 0x800C),
        (HashAlgorithm.SHA384, 0x800D),
        (HashAlgorithm.SHA512, 0x800E),
        (EncryptionAlgorithm.RC2, 0x6602),
        (EncryptionAlgorithm.RC4, 0x6801),
        (EncryptionAlgorithm.AES128, 0x660E),
        (EncryptionAlgorithm.AES192, 0x660F),
        (EncryptionAlgorithm.AES256, 0x6610),
        (SenderIdType.NONE, 0),
        (SenderIdType.SID, 1),
        (BodyType.EMPTY, 0),
        (BodyType.STRING, 0x1F),
        (BodyType.BYTES, 0x1011),
        (BodyType.BYTE_ARRAY, 0x2011),
    ],
)
def test_enum_values_match_msmq(member: int, value: int) -> None:
    assert int(member) == value


def test_acknowledgment_combinations_are_the_documented_unions() -> None:
    A = Acknowledgment
    assert A.FULL_REACH_QUEUE == A.POSITIVE_ARRIVAL | A.NEGATIVE_ARRIVAL
    assert A.NACK_RECEIVE == A.NEGATIVE_ARRIVAL | A.NEGATIVE_RECEIVE
    assert A.FULL_RECEIVE == A.NEGATIVE_ARRIVAL | A.NEGATIVE_RECEIVE | A.POSITIVE_RECEIVE


# ---------------------------------------------------------------------------------------------
# Message: defaults, coercion, validation
# ---------------------------------------------------------------------------------------------


def test_message_defaults_follow_msmq() -> None:
    m = Message()
    assert m.body == b"" and m.label == "" and m.body_type == BodyType.EMPTY
    assert m.priority == 3
    assert m.delivery is Delivery.EXPRESS
    assert m.acknowledge is Acknowledgment.NONE
    assert m.journal is JournalLevel.NONE
    assert m.message_class is MessageClass.NORMAL
    assert m.time_to_reach_queue is None and m.time_to_be_received is None  # LONG_LIVED/INFINITE
    assert m.id is None and m.correlation_id is None and m.lookup_id is None
    assert m.authenticated is False and m.properties == {}
    assert Message().properties is not m.properties  # no shared mutable default


def test_message_accepts_ints_for_enums_and_converts_them() -> None:
    m = Message(
        delivery=1,
        acknowledge=0x0E,
        journal=3,
        message_class=0x8002,
        sender_id_type=1,
        auth_level=4,
        privacy_level=5,
        hash_algorithm=0x800E,
        encryption_algorithm=0x660E,
        body_type=0x1011,
    )
    assert m.delivery is Delivery.RECOVERABLE
    assert m.acknowledge == Acknowledgment.FULL_RECEIVE
    assert isinstance(m.acknowledge, Acknowledgment)
    assert m.journal == JournalLevel.DEADLETTER | JournalLevel.JOURNAL
    assert m.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    assert m.sender_id_type is SenderIdType.SID
    assert m.auth_level is AuthLevel.SIG20
    assert m.privacy_level is PrivacyLevel.BODY_AES
    assert m.hash_algorithm is HashAlgorithm.SHA512
    assert m.encryption_algorithm is EncryptionAlgorithm.AES128
    assert m.body_type is BodyType.BYTES


def test_from_values_builds_what_the_constructor_builds() -> None:
    values = dict(priority=5, message_class=0x8002, label="l", body=bytearray(b"xy"),
                  delivery=1, properties={"k": "v"})
    built = Message.from_values(dict(values))
    assert built == Message(**values)
    assert built.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    assert built.delivery is Delivery.RECOVERABLE and built.body == b"xy"
    assert built.lookup_id is None and built.authenticated is False  # absent: defaults
    assert built.unchanged_since_check()
    assert Message.from_values({}) == Message()
    assert Message.from_values({}).properties is not Message.from_values({}).properties


def test_from_values_checks_like_the_constructor() -> None:
    with pytest.raises(InvalidParameter, match="priority"):
        Message.from_values({"priority": 8})
    with pytest.raises(TypeError, match="colour"):
        Message.from_values({"colour": "red"})


def test_unknown_body_type_stays_a_plain_int() -> None:
    assert Message(body_type=0x4011).body_type == 0x4011


@pytest.mark.parametrize(
    "value",
    [
        MessageId(GUID, 9),
        MessageId(GUID, 9).to_bytes(),
        bytearray(MessageId(GUID, 9).to_bytes()),
        "ae0c5671-f190-12ce-ae10-00dd0114290f\\9",
    ],
)
def test_correlation_id_accepts_id_raw_bytes_and_text(value: object) -> None:
    m = Message(correlation_id=value)  # type: ignore[arg-type]
    assert m.correlation_id == MessageId(GUID, 9)


def test_bytearray_body_is_converted_to_bytes() -> None:
    assert Message(body=bytearray(b"ab")).body == b"ab"


INVALID = [
    ("priority", 8, "PROPID_M_PRIORITY", "0-7"),
    ("priority", -1, "PROPID_M_PRIORITY", "0-7"),
    ("priority", True, "PROPID_M_PRIORITY", "0-7"),
    ("priority", 3.0, "PROPID_M_PRIORITY", "0-7"),
    ("label", "x" * 251, "PROPID_M_LABEL", "250"),
    ("label", None, "PROPID_M_LABEL", "250"),
    ("app_specific", 2**32, "PROPID_M_APPSPECIFIC", "4294967295"),
    ("app_specific", -1, "PROPID_M_APPSPECIFIC", "4294967295"),
    ("time_to_be_received", -1, "PROPID_M_TIME_TO_BE_RECEIVED", "0 to 4294967294 seconds"),
    ("time_to_be_received", float("nan"), "PROPID_M_TIME_TO_BE_RECEIVED", "0 to"),
    ("time_to_be_received", float("inf"), "PROPID_M_TIME_TO_BE_RECEIVED", "None"),
    ("time_to_be_received", 2.0**32, "PROPID_M_TIME_TO_BE_RECEIVED", "to 4294967294"),
    ("time_to_be_received", True, "PROPID_M_TIME_TO_BE_RECEIVED", "4294967295 (INFINITE)"),
    ("time_to_reach_queue", -1, "PROPID_M_TIME_TO_REACH_QUEUE", "0 to 4294967293 seconds"),
    ("time_to_reach_queue", "10", "PROPID_M_TIME_TO_REACH_QUEUE", "0 to"),
    ("time_to_reach_queue", 4294967293.5, "PROPID_M_TIME_TO_REACH_QUEUE", "LONG_LIVED"),
    ("body", "text", "PROPID_M_BODY", "bytes"),
    ("body", None, "PROPID_M_BODY", "bytes"),
    ("extension", None, "PROPID_M_EXTENSION", "bytes"),
    ("body_type", -1, "PROPID_M_BODY_TYPE", "0-4294967295"),
    ("body_type", 2**32, "PROPID_M_BODY_TYPE", "0-4294967295"),
    ("delivery", 2, "PROPID_M_DELIVERY", "RECOVERABLE"),
    ("acknowledge", 0x10, "PROPID_M_ACKNOWLEDGE", "0xf"),
    ("acknowledge", -1, "PROPID_M_ACKNOWLEDGE", "0xf"),
    ("journal", 4, "PROPID_M_JOURNAL", "0x3"),
    ("message_class", 0x1234, "PROPID_M_CLASS", "NACK_RECEIVE_REJECTED"),
    ("sender_id_type", 2, "PROPID_M_SENDERID_TYPE", "SID"),
    ("auth_level", 3, "PROPID_M_AUTH_LEVEL", "SIG30"),
    ("privacy_level", 2, "PROPID_M_PRIV_LEVEL", "BODY_AES"),
    ("hash_algorithm", 0x8001, "PROPID_M_HASH_ALG", "SHA256"),
    ("encryption_algorithm", 0x6601, "PROPID_M_ENCRYPTION_ALG", "AES256"),
    ("sent_time", dt.datetime(2024, 1, 1), "PROPID_M_SENTTIME", "timezone-aware"),
    ("arrived_time", "2024-01-01", "PROPID_M_ARRIVEDTIME", "timezone-aware"),
    ("not_before", dt.datetime(2024, 1, 1), "not-before", "timezone-aware"),
    ("admin_queue", "", "PROPID_M_ADMIN_QUEUE", "non-empty"),
    ("response_queue", 5, "PROPID_M_RESP_FORMAT_NAME", "non-empty"),
    ("destination_queue", b"q", "PROPID_M_DEST_QUEUE", "non-empty"),
    ("destination_format_name", "", "PROPID_M_DEST_FORMAT_NAME", "non-empty"),
    ("dead_letter_queue", "", "PROPID_M_DEADLETTER_QUEUE", "non-empty"),
    ("correlation_id", b"short", "PROPID_M_CORRELATIONID", "20 bytes"),
    ("correlation_id", 5, "PROPID_M_CORRELATIONID", "MessageId"),
    ("id", "ae0c5671-f190-12ce-ae10-00dd0114290f\\1", "PROPID_M_MSGID", "MessageId"),
    ("source_machine_id", str(GUID), "PROPID_M_SRC_MACHINE_ID", "uuid.UUID"),
    ("lookup_id", 2**64, "PROPID_M_LOOKUPID", "18446744073709551615"),
    ("lookup_id", -1, "PROPID_M_LOOKUPID", "18446744073709551615"),
    ("sender_id", "S-1-5-18", "PROPID_M_SENDERID", "bytes"),
    ("sender_certificate", "PEM", "PROPID_M_SENDER_CERT", "bytes"),
    ("signature", 1, "PROPID_M_SIGNATURE", "bytes"),
    ("destination_symmetric_key", "k", "PROPID_M_DEST_SYMM_KEY", "bytes"),
    ("authenticated", 1, "PROPID_M_AUTHENTICATED", "bool"),
    ("transaction_id", "", "PROPID_M_XACTID", "non-empty"),
    ("first_in_transaction", True, "PROPID_M_FIRST_IN_XACT", "transaction_id is None"),
    ("last_in_transaction", 1, "PROPID_M_LAST_IN_XACT", "bool"),
    ("abort_count", -1, "PROPID_M_ABORT_COUNT", "4294967295"),
    ("move_count", 2**32, "PROPID_M_MOVE_COUNT", "4294967295"),
    ("properties", {"a": 1}, "properties", "dict[str, str]"),
    ("properties", [("a", "b")], "properties", "dict[str, str]"),
]


@pytest.mark.parametrize(("name", "value", "propid", "allowed"), INVALID)
def test_invalid_property_raises_naming_property_and_range(
    name: str, value: object, propid: str, allowed: str
) -> None:
    with pytest.raises(InvalidParameter) as info:
        Message(**{name: value})  # type: ignore[arg-type]
    text = str(info.value)
    assert name in text and propid in text and allowed in text
    assert info.value.error_code == "MQ_ERROR_INVALID_PARAMETER"


@pytest.mark.parametrize(("name", "value", "propid", "allowed"), INVALID)
def test_validate_catches_properties_edited_after_construction(
    name: str, value: object, propid: str, allowed: str
) -> None:
    m = Message()
    setattr(m, name, value)
    with pytest.raises(InvalidParameter, match=propid):
        m.validate()


@pytest.mark.parametrize(("name", "value", "propid", "allowed"), INVALID)
def test_an_edited_message_does_not_count_as_checked(
    name: str, value: object, propid: str, allowed: str
) -> None:
    # The queue manager skips the check at send only for messages nobody edited since.
    m = Message(label="built")
    assert m.unchanged_since_check()
    setattr(m, name, value)
    assert not m.unchanged_since_check()


def test_unchanged_since_check_follows_check_and_stamping() -> None:
    m = Message(properties={"a": "b"})
    m.priority = 5
    assert not m.unchanged_since_check()
    m.check()
    assert m.unchanged_since_check()
    assert not m.stamped(priority=6).unchanged_since_check()
    assert dataclasses.replace(m) == m  # the record of the check is no property


def test_unchanged_since_check_checks_properties_edited_in_place() -> None:
    m = Message(properties={"a": "b"})
    m.properties["n"] = 1  # type: ignore[assignment]
    with pytest.raises(InvalidParameter, match="dict\\[str, str\\]"):
        m.unchanged_since_check()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("priority", 0),
        ("priority", 7),
        ("label", "x" * 250),
        ("app_specific", 2**32 - 1),
        ("time_to_be_received", 0.001),
        ("time_to_be_received", 4294967294),
        ("time_to_reach_queue", 1),
        ("lookup_id", 2**64 - 1),
        ("body_type", 2**32 - 1),
        ("sent_time", dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=3)))),
    ],
)
def test_boundary_values_are_accepted(name: str, value: object) -> None:
    Message(**{name: value}).validate()  # type: ignore[arg-type]


def test_timers_take_msmqs_whole_ulong_range_zero_and_its_words_included() -> None:
    """MSMQ's TTBR and TTRQ are ULONG seconds, 0 to 0xFFFFFFFF, where INFINITE (and for
    TTRQ LONG_LIVED) means the default: 0 and the words are taken, not refused."""
    m = Message(time_to_be_received=0, time_to_reach_queue=0.0)
    assert (m.time_to_be_received, m.time_to_reach_queue) == (0, 0.0)
    assert Message(time_to_be_received=0xFFFFFFFE).time_to_be_received == 0xFFFFFFFE
    assert Message(time_to_reach_queue=0xFFFFFFFD).time_to_reach_queue == 0xFFFFFFFD
    # The words mean what None means: no limit, the queue manager's default.
    assert Message(time_to_be_received=0xFFFFFFFF).time_to_be_received is None
    assert Message(time_to_reach_queue=0xFFFFFFFE).time_to_reach_queue is None
    assert Message(time_to_reach_queue=float(0xFFFFFFFF)).time_to_reach_queue is None
    edited = Message()
    edited.time_to_be_received = 0xFFFFFFFF
    edited.check()
    assert edited.time_to_be_received is None
    # A zero timer goes over the wire as zero, not as the smallest positive one.
    sent = Message(id=MessageId(GUID, 1), time_to_be_received=0, time_to_reach_queue=0)
    decoded = decode_message(encode_message(sent).value)
    assert (decoded.time_to_be_received, decoded.time_to_reach_queue) == (0, 0)
    assert decoded.receive_deadline() is None  # not sent: no sent time


def test_the_timer_ranges_are_the_ones_message_checks() -> None:
    """One definition per timer (facade.model.timers), which Message, the CLI and Spark's columns
    share: the error names it in the same words."""
    for timer in TIMER_RANGES.values():
        with pytest.raises(InvalidParameter) as info:
            Message(**{timer.name: timer.maximum + 0.5})  # type: ignore[arg-type]
        assert timer.describe() in str(info.value) and timer.propid in str(info.value)
        timer.check(timer.maximum)
        timer.check(0)
    assert TIME_TO_BE_RECEIVED.maximum == 0xFFFFFFFE
    assert TIME_TO_REACH_QUEUE.maximum == 0xFFFFFFFD


def test_transaction_markers_are_allowed_inside_a_transaction() -> None:
    m = Message(transaction_id="txn-1", first_in_transaction=True, last_in_transaction=True)
    assert m.is_transactional and not Message().is_transactional


def test_repr_shows_body_size_not_body() -> None:
    m = Message(body=b"secret" * 1000, label="l", id=MessageId(GUID, 1))
    text = repr(m)
    assert "secret" not in text and "6000 bytes" in text and "\\\\1" in text


# ---------------------------------------------------------------------------------------------
# Seed 002 semantics: TTBR / TTRQ, request and response
# ---------------------------------------------------------------------------------------------


def test_ttbr_takes_precedence_over_a_longer_ttrq() -> None:
    m = Message(sent_time=T0, time_to_reach_queue=3600.0, time_to_be_received=60.0)
    # The message must be received within 60 s, so it must also reach the queue within 60 s.
    assert m.reach_queue_deadline() == T0 + dt.timedelta(seconds=60)
    assert m.receive_deadline() == T0 + dt.timedelta(seconds=60)


def test_shorter_ttrq_is_kept() -> None:
    m = Message(sent_time=T0, time_to_reach_queue=10.0, time_to_be_received=60.0)
    assert m.reach_queue_deadline() == T0 + dt.timedelta(seconds=10)
    assert m.receive_deadline() == T0 + dt.timedelta(seconds=60)


def test_deadlines_are_none_without_limits_or_before_send() -> None:
    assert Message(sent_time=T0).reach_queue_deadline() is None
    assert Message(sent_time=T0).receive_deadline() is None
    assert Message(time_to_be_received=5).receive_deadline() is None
    assert Message(time_to_reach_queue=5).reach_queue_deadline() is None


def test_reply_correlates_with_request_id() -> None:
    # Seed 002: the receiver puts the request's Message ID in the reply's Correlation ID and sends
    # the reply to the request's Response Queue.
    request = Message(
        body=b"request",
        id=MessageId(GUID, 100),
        response_queue="DIRECT=OS:client\\private$\\replies",
        acknowledge=Acknowledgment.FULL_RECEIVE,
        admin_queue="DIRECT=OS:client\\private$\\admin",
    )
    reply = Message(body=b"reply", correlation_id=request.id)
    assert reply.correlation_id == request.id


# ---------------------------------------------------------------------------------------------
# Acknowledgment payload
# ---------------------------------------------------------------------------------------------

Q1 = AcknowledgedQueue("PUBLIC=2d0ab4c6-0000-4000-8000-000000000001", uuid.UUID(int=1))
Q2 = AcknowledgedQueue(guid=uuid.UUID(int=2))
Q3 = AcknowledgedQueue(format_name="DIRECT=TCP:10.0.0.5\\private$\\q")


def test_acknowledgment_info_normalizes_fields() -> None:
    info = AcknowledgmentInfo(
        MessageId(GUID, 1).to_bytes(),
        0x4000,
        [Q1, Q2],
        time=T0,  # type: ignore[arg-type]
    )
    assert info.original_id == MessageId(GUID, 1)
    assert info.message_class is MessageClass.ACK_RECEIVE
    assert info.queues == (Q1, Q2)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"message_class": MessageClass.NORMAL}, "ACK_* or NACK_*"),
        ({"message_class": MessageClass.REPORT}, "ACK_* or NACK_*"),
        ({"queues": []}, "non-empty"),
        ({"queues": ["DIRECT=OS:x\\q"]}, "AcknowledgedQueue"),
        ({"time": dt.datetime(2024, 1, 1)}, "timezone-aware"),
        ({"original_id": None}, "MessageId"),
        ({"reason": 5}, "reason"),
        ({"original_body": "text"}, "bytes"),
    ],
)
def test_acknowledgment_info_rejects_invalid_fields(kwargs: dict, fragment: str) -> None:
    base = {
        "original_id": MessageId(GUID, 1),
        "message_class": MessageClass.NACK_Q_PURGED,
        "queues": [Q1],
        "time": T0,
    }
    with pytest.raises(InvalidParameter, match=fragment.replace("*", r"\*")):
        AcknowledgmentInfo(**(base | kwargs))


def test_acknowledged_queue_needs_a_format_name_or_guid() -> None:
    with pytest.raises(InvalidParameter, match="format name, a GUID or both"):
        AcknowledgedQueue()
    with pytest.raises(InvalidParameter, match="uuid.UUID"):
        AcknowledgedQueue(guid=str(uuid.UUID(int=1)))  # type: ignore[arg-type]


def test_combine_acknowledgments_merges_per_original_and_class() -> None:
    a, b = MessageId(GUID, 1), MessageId(GUID, 2)
    acks = [
        AcknowledgmentInfo(a, MessageClass.ACK_REACH_QUEUE, [Q1], time=T0),
        AcknowledgmentInfo(a, MessageClass.ACK_REACH_QUEUE, [Q2, Q1], time=T0 + dt.timedelta(1)),
        AcknowledgmentInfo(a, MessageClass.NACK_BAD_DST_Q, [Q3], time=T0, reason="gone"),
        AcknowledgmentInfo(b, MessageClass.ACK_REACH_QUEUE, [Q3], time=T0),
        AcknowledgmentInfo(a, MessageClass.ACK_REACH_QUEUE, [Q3], time=T0, reason="late"),
    ]
    combined = combine_acknowledgments(acks)
    assert [(c.original_id, c.message_class, c.queues) for c in combined] == [
        (a, MessageClass.ACK_REACH_QUEUE, (Q1, Q2, Q3)),
        (a, MessageClass.NACK_BAD_DST_Q, (Q3,)),
        (b, MessageClass.ACK_REACH_QUEUE, (Q3,)),
    ]
    assert combined[0].time == T0 + dt.timedelta(1)
    assert combined[0].reason == "late" and combined[1].reason == "gone"


def test_sequence_counter_reseed_gives_a_fresh_lock_and_clock_start() -> None:
    # What a forked child runs (os.register_at_fork): a lock held by a parent thread at fork
    # time must not deadlock the child.
    counter = message_module._SequenceCounter()
    counter._lock.acquire()
    counter.reseed()
    assert isinstance(counter.next(), int)


def test_deadline_past_the_end_of_time_saturates() -> None:
    import datetime as dt

    m = Message(sent_time=dt.datetime(9999, 12, 1, tzinfo=dt.timezone.utc), time_to_be_received=10**9)
    assert m.receive_deadline() == dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    assert m.reach_queue_deadline() == dt.datetime.max.replace(tzinfo=dt.timezone.utc)
