"""Unit tests for facade.model.envelope: the Avro wire format of messages and acknowledgments."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import shutil
import uuid
from pathlib import Path

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facade.model import envelope
from facade.model.envelope import (
    EncodedRecord,
    RecordHeaders,
    acknowledgment_message,
    decode_acknowledgment,
    decode_message,
    encode_acknowledgment,
    encode_copies,
    encode_message,
    read_headers,
    record_key,
    register_writer_schema,
)
from facade.errors import EnvelopeError, InvalidParameter
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
)
from facade.model.timers import TIME_TO_BE_RECEIVED, TIME_TO_REACH_QUEUE

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"
GUID = uuid.UUID("ae0c5671-f190-12ce-ae10-00dd0114290f")
UTC = dt.UTC
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
T0_MS = 1714564800123


def full_message() -> Message:
    """A message with every property set to a non-default value."""
    return Message(
        body=b"\x00\x01 body \xff",
        label="Заказ 42",  # labels are Unicode (MSMQ: UTF-16)
        body_type=BodyType.BYTES,
        id=MessageId(GUID, 12345),
        correlation_id=MessageId(uuid.UUID(int=7), 99),
        priority=6,
        delivery=Delivery.RECOVERABLE,
        acknowledge=Acknowledgment.FULL_RECEIVE,
        admin_queue="DIRECT=OS:client\\private$\\admin",
        response_queue=(
            "DIRECT=OS:client\\private$\\replies,PUBLIC=2d0ab4c6-0000-4000-8000-000000000001"
        ),
        time_to_reach_queue=3600.5,
        time_to_be_received=86400.001,
        not_before=T0 + dt.timedelta(minutes=5),
        journal=JournalLevel.DEADLETTER | JournalLevel.JOURNAL,
        app_specific=2**32 - 1,
        extension=b"ext",
        message_class=MessageClass.NACK_RECEIVE_TIMEOUT,
        sent_time=T0,
        arrived_time=T0 + dt.timedelta(seconds=1),
        source_machine_id=GUID,
        destination_queue="DIRECT=OS:server\\private$\\orders",
        destination_format_name="DL=ae0c5671-f190-12ce-ae10-00dd0114290f@corp.example",
        lookup_id=None,
        sender_id=b"\x01\x01\x00\x00\x00\x00\x00\x05\x12\x00\x00\x00",  # S-1-5-18
        sender_id_type=SenderIdType.SID,
        transaction_id="txn-0001",
        first_in_transaction=True,
        last_in_transaction=True,
        auth_level=AuthLevel.SIG30,
        privacy_level=PrivacyLevel.BODY_AES,
        hash_algorithm=HashAlgorithm.SHA512,
        encryption_algorithm=EncryptionAlgorithm.AES128,
        sender_certificate=b"0\x82\x01\x0adummy-der",
        signature=b"sig" * 20,
        authenticated=False,
        destination_symmetric_key=b"k" * 32,
        dead_letter_queue="DIRECT=OS:server\\private$\\orders-dlq",
        abort_count=2,
        move_count=3,
        properties={"tenant": "acme", "ünïcode": "✓"},
    )


def receive_side_reset(m: Message) -> Message:
    """What decode gives back: receive-side state (lookup id, authenticated) is not on the wire."""
    return dataclasses.replace(m, lookup_id=None, authenticated=False)


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------


def test_round_trip_with_every_property_set() -> None:
    m = full_message()
    decoded = decode_message(encode_message(m).value)
    assert decoded == m
    assert decoded.sent_time.tzinfo is not None and decoded.sent_time.utcoffset() == dt.timedelta(0)
    assert decoded.delivery is Delivery.RECOVERABLE
    assert decoded.message_class is MessageClass.NACK_RECEIVE_TIMEOUT


def test_round_trip_with_defaults_only() -> None:
    m = Message(id=MessageId(GUID, 1))
    decoded = decode_message(encode_message(m).value)
    assert decoded == m
    assert decoded.time_to_be_received is None and decoded.time_to_reach_queue is None


def test_receive_side_state_is_not_encoded() -> None:
    m = Message(id=MessageId(GUID, 1), lookup_id=42, authenticated=True)
    decoded = decode_message(encode_message(m).value)
    # A sender must not be able to claim "authenticated": only the receiving side sets it.
    assert decoded.authenticated is False and decoded.lookup_id is None


def test_times_are_truncated_to_milliseconds_and_returned_in_utc() -> None:
    plus3 = dt.timezone(dt.timedelta(hours=3))
    sent = dt.datetime(2024, 5, 1, 15, 0, 0, 123999, tzinfo=plus3)
    decoded = decode_message(encode_message(Message(id=MessageId(GUID, 1), sent_time=sent)).value)
    assert decoded.sent_time == dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert decoded.sent_time.tzinfo == UTC


def test_sub_millisecond_durations_round_to_at_least_one_millisecond() -> None:
    m = Message(id=MessageId(GUID, 1), time_to_be_received=0.0001, time_to_reach_queue=1.0004)
    decoded = decode_message(encode_message(m).value)
    assert decoded.time_to_be_received == 0.001
    assert decoded.time_to_reach_queue == 1.0


def test_seed_002_properties_round_trip() -> None:
    """Seed 002's properties: TTBR, TTRQ, Acknowledge, Admin Queue, Arrived Time, Journal,
    Priority, Response Queue, Message ID, Correlation ID, then signing and encryption."""
    request = Message(
        body=b"<order id='42'/>",
        id=MessageId(GUID, 1000),
        time_to_be_received=300.0,  # received within 5 min or MSMQ destroys it
        time_to_reach_queue=60.0,  # must reach the destination queue within 1 min
        acknowledge=Acknowledgment.FULL_RECEIVE,  # notify on receipt, or on loss
        admin_queue="DIRECT=OS:sender\\private$\\admin",
        arrived_time=T0 + dt.timedelta(seconds=2),
        journal=JournalLevel.JOURNAL,  # keep a copy on the sender's machine
        priority=7,
        response_queue="DIRECT=OS:sender\\private$\\replies",
        sent_time=T0,
        # Signing: certificate attached, hash algorithm named, signature, sender SID.
        auth_level=AuthLevel.ALWAYS,
        hash_algorithm=HashAlgorithm.SHA256,
        sender_certificate=b"0\x82internal-certificate",
        signature=b"\x5a" * 256,
        sender_id=b"\x01\x05\x00\x00\x00\x00\x00\x05\x15\x00\x00\x00",
        sender_id_type=SenderIdType.SID,
        # Encryption of the body for the destination.
        privacy_level=PrivacyLevel.BODY_ENHANCED,
        encryption_algorithm=EncryptionAlgorithm.RC4,
        destination_symmetric_key=b"\x11" * 16,
    )
    received = decode_message(encode_message(request).value)
    assert received == request
    # TTBR takes precedence over TTRQ: here TTRQ is shorter and stays the reach-queue limit.
    assert received.reach_queue_deadline() == T0 + dt.timedelta(seconds=60)
    reply = Message(body=b"ok", id=MessageId(GUID, 1001), correlation_id=received.id)
    assert decode_message(encode_message(reply).value).correlation_id == request.id


# ---------------------------------------------------------------------------------------------
# Framing, fingerprints, headers, key
# ---------------------------------------------------------------------------------------------


def _crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO exactly as the Avro specification's reference code computes it."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def test_crc64_reference_vector() -> None:
    # Avro's own test vector: the schema "null" has fingerprint 7195948357588979594.
    assert _crc64_avro(b'"null"') == 7195948357588979594


@pytest.mark.parametrize("filename", ["message_envelope.avsc", "acknowledgment.avsc"])
def test_value_framing_is_avro_single_object_encoding(filename: str) -> None:
    schema = fastavro.parse_schema(json.loads((SCHEMAS / filename).read_text()))
    canonical = fastavro.schema.to_parsing_canonical_form(schema)
    expected_fp = _crc64_avro(canonical.encode()).to_bytes(8, "little")
    if filename == "message_envelope.avsc":
        value = encode_message(Message(id=MessageId(GUID, 1))).value
    else:
        value = encode_acknowledgment(
            AcknowledgmentInfo(
                MessageId(GUID, 1),
                MessageClass.ACK_RECEIVE,
                [AcknowledgedQueue(guid=GUID)],
                time=T0,
            )
        )
    assert value[:2] == b"\xc3\x01"
    assert value[2:10] == expected_fp
    # The body is plain Avro binary of the .avsc schema: any Avro library can read it.
    record = fastavro.schemaless_reader(io.BytesIO(value[10:]), schema)
    assert isinstance(record, dict)


def test_envelope_version_is_1() -> None:
    assert envelope.ENVELOPE_VERSION == 1


def test_headers_are_derived_from_the_envelope() -> None:
    m = full_message()
    rec = encode_message(m)
    assert rec.headers == [
        ("kmq.version", b"1"),
        ("kmq.id", b"ae0c5671-f190-12ce-ae10-00dd0114290f\\12345"),
        ("kmq.class", b"%d" % 0xC002),
        ("kmq.priority", b"6"),
        ("kmq.expires", b"%d" % (T0_MS + 86400001)),
        ("kmq.not_before", b"%d" % (T0_MS + 300000)),
        ("kmq.correlation_id", b"00000000-0000-0000-0000-000000000007\\99"),
        ("kmq.txn", b"txn-0001"),
    ]
    assert read_headers(rec.headers) == RecordHeaders(
        version=1,
        id=str(m.id),
        message_class=0xC002,
        priority=6,
        expires_ms=T0_MS + 86400001,
        not_before_ms=T0_MS + 300000,
        correlation_id=str(m.correlation_id),
        transaction_id="txn-0001",
    )


def test_default_message_has_only_the_mandatory_headers() -> None:
    rec = encode_message(Message(id=MessageId(GUID, 1), time_to_be_received=5))
    # No sent_time: no absolute expiry can be derived.
    names = [name for name, _ in rec.headers]
    assert names == ["kmq.version", "kmq.id", "kmq.class", "kmq.priority"]


def test_read_headers_tolerates_missing_malformed_and_foreign_headers() -> None:
    parsed = read_headers(
        [
            ("kmq.priority", b"x"),
            ("kmq.class", None),
            ("other", b"1"),
            ("kmq.id", b"\xff"),
            ("kmq.expires", b"17"),
            ("kmq.expires", b"18"),
        ]
    )
    assert parsed == RecordHeaders(expires_ms=17)
    assert read_headers(None) == RecordHeaders()


def test_record_key_groups_one_senders_transactional_messages() -> None:
    plain = encode_message(Message(id=MessageId(GUID, 1)))
    txn = encode_message(Message(id=MessageId(GUID, 2), transaction_id="t"))
    assert plain.key is None
    assert txn.key == MessageId(GUID, 2).to_bytes()[:16] == GUID.bytes_le
    assert record_key(Message(transaction_id="t")) is None  # no id yet: nothing to key by
    assert isinstance(txn, EncodedRecord)


# ---------------------------------------------------------------------------------------------
# Encoding errors
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Copies of one send encoded once (encode_copies): byte-identical to encode_message
# ---------------------------------------------------------------------------------------------

_TEXT = st.text(max_size=40)
_OPTIONAL_NAME = st.none() | st.text(min_size=1, max_size=60)


@st.composite
def _sent_messages(draw: st.DrawFn) -> Message:
    """Messages as the queue manager sends them: every envelope field may vary."""
    transaction_id = draw(st.none() | st.text(min_size=1, max_size=20))
    in_txn = transaction_id is not None
    return Message(
        id=MessageId(draw(st.uuids()), draw(st.integers(0, 2**32 - 1))),
        body=draw(st.binary(max_size=300)),
        label=draw(_TEXT),
        priority=draw(st.integers(0, 7)),
        delivery=draw(st.sampled_from(Delivery)),
        correlation_id=draw(st.none() | st.builds(MessageId, st.uuids(),
                                                 st.integers(0, 2**32 - 1))),
        admin_queue=draw(_OPTIONAL_NAME),
        response_queue=draw(_OPTIONAL_NAME),
        destination_format_name=draw(_OPTIONAL_NAME),
        time_to_reach_queue=draw(st.none() | st.floats(0.001, 10**6)),
        time_to_be_received=draw(st.none() | st.floats(0.001, 10**6)),
        sent_time=draw(st.none() | st.just(T0)),
        not_before=draw(st.none() | st.just(T0 + dt.timedelta(seconds=3))),
        app_specific=draw(st.integers(0, 2**32 - 1)),
        extension=draw(st.binary(max_size=20)),
        source_machine_id=draw(st.none() | st.uuids()),
        transaction_id=transaction_id,
        first_in_transaction=in_txn and draw(st.booleans()),
        last_in_transaction=in_txn and draw(st.booleans()),
        abort_count=draw(st.integers(0, 2**32 - 1)),
        properties=draw(st.dictionaries(_TEXT, _TEXT, max_size=4)),
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(message=_sent_messages(),
       queues=st.lists(st.none() | st.text(max_size=80), min_size=1, max_size=5))
def test_copies_encoded_once_are_byte_identical_to_encode_message(
        message: Message, queues: list[str | None]) -> None:
    shared = encode_copies(message)
    for queue in queues:
        plain = encode_message(message.stamped(destination_queue=queue), validate=False)
        copy = shared.record(queue)
        assert (copy.key, copy.value, copy.headers) == (plain.key, plain.value, plain.headers)


def test_copies_encoded_once_of_a_full_message_decode_to_each_destination() -> None:
    shared = encode_copies(full_message())
    for queue in ("DIRECT=OS:a\\q", "PUBLIC=2d0ab4c6-0000-4000-8000-000000000001", None):
        expected = receive_side_reset(full_message().stamped(destination_queue=queue))
        assert decode_message(shared.record(queue).value) == expected


def test_copies_get_their_own_header_lists() -> None:
    shared = encode_copies(Message(id=MessageId(GUID, 1)))
    first = shared.record("DIRECT=OS:a\\q")
    first.headers.append(("x", b"y"))
    assert ("x", b"y") not in shared.record("DIRECT=OS:b\\q").headers


def test_copies_need_an_id_and_name_text_that_is_not_utf8() -> None:
    with pytest.raises(InvalidParameter, match="needs an id"):
        encode_copies(Message())
    with pytest.raises(InvalidParameter, match="label"):
        encode_copies(Message(id=MessageId(GUID, 1), label="bad \udc80"))
    with pytest.raises(InvalidParameter, match="destination_queue"):
        encode_copies(Message(id=MessageId(GUID, 1))).record("bad \udc80")


def test_encode_requires_a_message_id() -> None:
    with pytest.raises(InvalidParameter, match="PROPID_M_MSGID"):
        encode_message(Message())


def test_encode_revalidates_edited_messages() -> None:
    m = Message(id=MessageId(GUID, 1))
    m.priority = 9
    with pytest.raises(InvalidParameter, match="priority.*PROPID_M_PRIORITY.*0-7"):
        encode_message(m)


@pytest.mark.parametrize("name", ["label", "admin_queue", "transaction_id"])
def test_encode_names_text_that_is_not_utf8(name: str) -> None:
    m = Message(id=MessageId(GUID, 1), transaction_id="t")
    setattr(m, name, "bad \ud800 surrogate")
    with pytest.raises(InvalidParameter, match=name):
        encode_message(m)


def test_encode_names_application_property_that_is_not_utf8() -> None:
    m = Message(id=MessageId(GUID, 1), properties={"k": "\udfff"})
    with pytest.raises(InvalidParameter, match="'k'"):
        encode_message(m)


def test_encode_rejects_non_messages() -> None:
    with pytest.raises(InvalidParameter, match="expected a Message"):
        encode_message(b"raw")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Decoding errors: only EnvelopeError, with the record's coordinates
# ---------------------------------------------------------------------------------------------

VALID = encode_message(full_message()).value
ENVELOPE_FP = VALID[2:10]


def _raw_envelope(**overrides: object) -> bytes:
    """An envelope written straight with fastavro, bypassing Message validation."""
    schema = fastavro.parse_schema(json.loads((SCHEMAS / "message_envelope.avsc").read_text()))
    record = envelope._envelope_record(Message(id=MessageId(GUID, 1))) | overrides
    out = io.BytesIO()
    out.write(b"\xc3\x01" + ENVELOPE_FP)
    fastavro.schemaless_writer(out, schema, record)
    return out.getvalue()


BAD_VALUES = [
    pytest.param(None, "None", id="none"),
    pytest.param("text", "str", id="str"),
    pytest.param(b"", "shorter than", id="empty"),
    pytest.param(b"\xc3\x01\x00", "shorter than", id="short-header"),
    pytest.param(b"garbage that is long enough", "marker", id="garbage"),
    pytest.param(b"\x00\x01" + VALID[2:], "marker", id="wrong-marker"),
    pytest.param(b'{"json": "envelope"}', "marker", id="json"),
    pytest.param(b"\xc3\x01" + b"\x00" * 8 + VALID[10:], "unknown writer schema", id="unknown-fp"),
    pytest.param(VALID[:-1], "truncated", id="truncated"),
    pytest.param(VALID[:10], "truncated", id="header-only"),
    pytest.param(VALID + b"\x00", "unexpected bytes", id="trailing"),
    pytest.param(_raw_envelope(priority=9), "priority", id="priority-9"),
    pytest.param(_raw_envelope(message_class=0x1234), "PROPID_M_CLASS", id="bad-class"),
    pytest.param(_raw_envelope(app_specific=2**32), "app_specific", id="app-specific"),
    pytest.param(_raw_envelope(time_to_be_received_ms=-1), "time_to_be_received", id="ttbr-neg"),
    pytest.param(_raw_envelope(time_to_reach_queue_ms=-5), "time_to_reach_queue", id="ttrq-neg"),
    pytest.param(_raw_envelope(first_in_transaction=True), "FIRST_IN_XACT", id="first-no-txn"),
    pytest.param(_raw_envelope(admin_queue=""), "admin_queue", id="empty-admin-queue"),
    pytest.param(_raw_envelope(source_machine_id="not-a-guid"), "malformed", id="bad-uuid"),
    pytest.param(_raw_envelope(sent_time=2**62), "malformed", id="time-overflow"),
]


@pytest.mark.parametrize(("value", "fragment"), BAD_VALUES)
def test_decode_rejects_invalid_records_with_envelope_error(value: object, fragment: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        decode_message(
            value,  # type: ignore[arg-type]
            [("kmq.version", b"1")],
            topic="kmq.q.orders",
            partition=3,
            offset=77,
        )
    err = info.value
    assert fragment in str(err)
    assert (err.topic, err.partition, err.offset) == ("kmq.q.orders", 3, 77)
    assert "offset 77" in str(err)
    assert err.raw == (bytes(value) if isinstance(value, bytes) else None)
    assert err.hint and "dead-letter" in err.hint


def test_decode_error_without_topic_still_names_the_offset() -> None:
    with pytest.raises(EnvelopeError, match="at offset 5"):
        decode_message(b"junk-junk-junk", offset=5)


@pytest.mark.parametrize("cut", range(len(VALID)))
def test_every_truncation_raises_envelope_error(cut: int) -> None:
    with pytest.raises(EnvelopeError):
        decode_message(VALID[:cut])


def test_acknowledgment_payload_is_not_a_message_envelope() -> None:
    payload = encode_acknowledgment(
        AcknowledgmentInfo(
            MessageId(GUID, 1), MessageClass.ACK_RECEIVE, [AcknowledgedQueue(guid=GUID)]
        )
    )
    with pytest.raises(EnvelopeError, match="is a kmq.Acknowledgment, not a kmq.MessageEnvelope"):
        decode_message(payload)


def test_decode_accepts_memoryview_and_bytearray() -> None:
    assert decode_message(memoryview(VALID)) == decode_message(bytearray(VALID))


# ---------------------------------------------------------------------------------------------
# Versioning: older and newer writer schemas
# ---------------------------------------------------------------------------------------------


def _current_schema_json() -> dict:
    return json.loads((SCHEMAS / "message_envelope.avsc").read_text())


def _write_with(schema_json: dict, record: dict) -> bytes:
    fp = register_writer_schema(schema_json)
    out = io.BytesIO()
    out.write(b"\xc3\x01" + fp)
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema_json), record)
    return out.getvalue()


def test_records_of_an_older_envelope_version_are_read_with_defaults() -> None:
    older = _current_schema_json()
    older["fields"] = [f for f in older["fields"] if f["name"] not in ("not_before", "properties")]
    record = envelope._envelope_record(Message(id=MessageId(GUID, 5), label="old"))
    del record["not_before"], record["properties"]
    decoded = decode_message(_write_with(older, record))
    assert decoded.label == "old" and decoded.not_before is None and decoded.properties == {}


def test_records_of_a_newer_envelope_version_drop_unknown_fields() -> None:
    newer = _current_schema_json()
    newer["fields"].append({"name": "future", "type": "string", "default": ""})
    record = envelope._envelope_record(Message(id=MessageId(GUID, 6), priority=5)) | {"future": "x"}
    decoded = decode_message(_write_with(newer, record))
    assert decoded.id == MessageId(GUID, 6) and decoded.priority == 5


def test_incompatible_writer_schema_gives_envelope_error_on_decode() -> None:
    broken = _current_schema_json()
    for f in broken["fields"]:
        if f["name"] == "priority":
            f["type"], f["default"] = "string", "3"
    record = envelope._envelope_record(Message(id=MessageId(GUID, 7))) | {"priority": "high"}
    with pytest.raises(EnvelopeError, match="malformed"):
        decode_message(_write_with(broken, record))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "Other", "namespace": "kmq", "fields": []},
        {"type": "record", "name": "MessageEnvelope", "fields": []},  # no namespace
        {"type": "record", "name": "kmq.MessageEnvelope", "fields": [{"name": "x"}]},
    ],
)
def test_register_writer_schema_rejects_foreign_or_invalid_schemas(schema: dict) -> None:
    with pytest.raises(InvalidParameter):
        register_writer_schema(schema)


def test_frozen_older_versions_in_the_schema_directory_are_registered(tmp_path: Path) -> None:
    shutil.copy(SCHEMAS / "message_envelope.avsc", tmp_path / "message_envelope.avsc")
    older = _current_schema_json()
    older["kmq.version"] = 0
    older["fields"] = older["fields"][:-1]
    (tmp_path / "message_envelope.v0.avsc").write_text(json.dumps(older))
    family = envelope._SchemaFamily(tmp_path, "message_envelope.avsc")
    assert len(family.writers) == 2
    assert {w.version for w in family.writers.values()} == {0, 1}


def test_schemas_are_loaded_from_the_package_or_the_source_tree() -> None:
    package = Path(envelope.__file__).resolve().parents[1]  # facade/
    assert envelope._SCHEMA_DIR in (package / "_schemas", package.parent / "schemas")


# ---------------------------------------------------------------------------------------------
# Schema files and documentation stay in step with the model
# ---------------------------------------------------------------------------------------------

RENAMED = {
    "time_to_reach_queue": "time_to_reach_queue_ms",
    "time_to_be_received": "time_to_be_received_ms",
}
RECEIVE_SIDE = {"lookup_id", "authenticated"}


def test_every_message_property_has_an_envelope_field() -> None:
    fields = [f["name"] for f in _current_schema_json()["fields"]]
    expected = {RENAMED.get(f.name, f.name) for f in dataclasses.fields(Message)} - RECEIVE_SIDE
    assert set(fields) == expected and len(fields) == len(expected)


def test_every_envelope_field_is_documented_with_a_default() -> None:
    readme = (SCHEMAS / "README.md").read_text()
    for f in _current_schema_json()["fields"]:
        assert "PROPID_M_" in f["doc"] or "kmq extension" in f["doc"], f["name"]
        assert f"`{f['name']}`" in readme, f["name"]
        # Every field but the id has a default, so a future reader can drop or add around it.
        assert f["name"] == "id" or "default" in f, f["name"]
    for header in (
        "kmq.version",
        "kmq.id",
        "kmq.class",
        "kmq.priority",
        "kmq.expires",
        "kmq.not_before",
        "kmq.correlation_id",
        "kmq.txn",
    ):
        assert f"`{header}`" in readme


# ---------------------------------------------------------------------------------------------
# Acknowledgment payload
# ---------------------------------------------------------------------------------------------


def test_acknowledgment_round_trip_with_several_queue_guids() -> None:
    queues = [
        AcknowledgedQueue("PUBLIC=2d0ab4c6-0000-4000-8000-000000000001", uuid.UUID(int=1)),
        AcknowledgedQueue(guid=uuid.UUID("308fb580-1eb2-11ca-923b-08002b1075a7")),
        AcknowledgedQueue(guid=uuid.uuid4()),
        AcknowledgedQueue(format_name="DIRECT=TCP:10.0.0.5\\private$\\q"),
    ]
    info = AcknowledgmentInfo(
        MessageId(GUID, 42),
        MessageClass.NACK_RECEIVE_TIMEOUT,
        queues,
        time=T0,
        reason="TTBR elapsed in the destination queue",
        original_body=b"original",
    )
    assert decode_acknowledgment(encode_acknowledgment(info)) == info


def test_acknowledgment_message_carries_the_payload() -> None:
    info = AcknowledgmentInfo(
        MessageId(GUID, 42), MessageClass.ACK_REACH_QUEUE, [AcknowledgedQueue(guid=GUID)], time=T0
    )
    ack = acknowledgment_message(info, label="order")
    assert ack.message_class is MessageClass.ACK_REACH_QUEUE
    assert ack.correlation_id == MessageId(GUID, 42)
    assert ack.time_to_be_received is None  # acknowledgments never expire
    assert ack.label == "order" and ack.body_type is BodyType.BYTES
    ack.id = MessageId(uuid.UUID(int=9), 1)
    received = decode_message(encode_message(ack).value)
    assert decode_acknowledgment(received.body) == info


def _raw_ack(**overrides: object) -> bytes:
    schema = fastavro.parse_schema(json.loads((SCHEMAS / "acknowledgment.avsc").read_text()))
    record = {
        "original_id": MessageId(GUID, 1).to_bytes(),
        "message_class": 0x4000,
        "queues": [{"format_name": None, "guid": str(GUID)}],
        "time": T0_MS,
        "reason": None,
        "original_body": None,
    } | overrides
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    fp = envelope._ACKNOWLEDGMENT.current.fingerprint
    return b"\xc3\x01" + fp + out.getvalue()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"", "shorter than"),
        (None, "None"),
        (VALID, "is a kmq.MessageEnvelope, not a kmq.Acknowledgment"),
        (_raw_ack(message_class=0), "ACK_* or NACK_*"),
        (_raw_ack(queues=[]), "non-empty"),
        (_raw_ack(queues=[{"format_name": None, "guid": None}]), "format name, a GUID or both"),
        (_raw_ack()[:-1], "truncated"),
    ],
)
def test_decode_acknowledgment_raises_envelope_error(body: bytes, fragment: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        decode_acknowledgment(
            body,
            topic="kmq.q.admin",
            partition=0,
            offset=9,  # type: ignore[arg-type]
        )
    assert fragment in str(info.value)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("kmq.q.admin", 0, 9)


def test_acknowledgment_encoding_rejects_bad_input() -> None:
    with pytest.raises(InvalidParameter, match="AcknowledgmentInfo"):
        encode_acknowledgment("ack")  # type: ignore[arg-type]
    info = AcknowledgmentInfo(
        MessageId(GUID, 1),
        MessageClass.ACK_RECEIVE,
        [AcknowledgedQueue(guid=GUID)],
        reason="\ud800",
    )
    with pytest.raises(InvalidParameter, match="surrogate"):
        encode_acknowledgment(info)


# ---------------------------------------------------------------------------------------------
# Property-based tests
# ---------------------------------------------------------------------------------------------

MIN_MS, MAX_MS = -62135596800000, 253402300799999  # datetime.min / datetime.max in UTC, ms
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)

instants = st.builds(
    lambda ms, minutes: (EPOCH + dt.timedelta(milliseconds=ms)).astimezone(
        dt.timezone(dt.timedelta(minutes=minutes))
    ),
    st.integers(MIN_MS + 86400000, MAX_MS - 86400000),
    st.integers(-14 * 60, 14 * 60),
)
ttbrs = st.integers(0, TIME_TO_BE_RECEIVED.maximum * 1000).map(lambda ms: ms / 1000)
ttrqs = st.integers(0, TIME_TO_REACH_QUEUE.maximum * 1000).map(lambda ms: ms / 1000)
message_ids = st.builds(MessageId, st.uuids(), st.integers(0, 2**32 - 1))
names = st.text(min_size=1, max_size=300)
u32 = st.integers(0, 2**32 - 1)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    txn = draw(st.none() | st.text(min_size=1, max_size=40))
    return Message(
        body=draw(st.binary(max_size=512)),
        label=draw(st.text(max_size=250)),
        body_type=draw(st.sampled_from(list(BodyType)) | u32),
        id=draw(message_ids),
        correlation_id=draw(st.none() | message_ids),
        priority=draw(st.integers(0, 7)),
        delivery=draw(st.sampled_from(Delivery)),
        acknowledge=Acknowledgment(draw(st.integers(0, 15))),
        admin_queue=draw(st.none() | names),
        response_queue=draw(st.none() | names),
        time_to_reach_queue=draw(st.none() | ttrqs),
        time_to_be_received=draw(st.none() | ttbrs),
        not_before=draw(st.none() | instants),
        journal=JournalLevel(draw(st.integers(0, 3))),
        app_specific=draw(u32),
        extension=draw(st.binary(max_size=64)),
        message_class=draw(st.sampled_from(MessageClass)),
        sent_time=draw(st.none() | instants),
        arrived_time=draw(st.none() | instants),
        source_machine_id=draw(st.none() | st.uuids()),
        destination_queue=draw(st.none() | names),
        destination_format_name=draw(st.none() | names),
        sender_id=draw(st.none() | st.binary(max_size=68)),
        sender_id_type=draw(st.sampled_from(SenderIdType)),
        transaction_id=txn,
        first_in_transaction=txn is not None and draw(st.booleans()),
        last_in_transaction=txn is not None and draw(st.booleans()),
        auth_level=draw(st.sampled_from(AuthLevel)),
        privacy_level=draw(st.sampled_from(PrivacyLevel)),
        hash_algorithm=draw(st.sampled_from(HashAlgorithm)),
        encryption_algorithm=draw(st.sampled_from(EncryptionAlgorithm)),
        sender_certificate=draw(st.none() | st.binary(max_size=128)),
        signature=draw(st.none() | st.binary(max_size=128)),
        destination_symmetric_key=draw(st.none() | st.binary(max_size=64)),
        dead_letter_queue=draw(st.none() | names),
        abort_count=draw(u32),
        move_count=draw(u32),
        properties=draw(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=5)),
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
def test_random_valid_messages_round_trip(m: Message) -> None:
    record = encode_message(m)
    decoded = decode_message(record.value)
    assert decoded == m
    # Equal and of the same types: enum members stay enum members (an IntEnum equals its int).
    for f in dataclasses.fields(Message):
        assert type(getattr(decoded, f.name)) is type(getattr(m, f.name)), f.name
    headers = read_headers(record.headers)
    assert headers.id == str(m.id) and headers.priority == m.priority
    assert headers.message_class == m.message_class
    deadline = m.receive_deadline()
    # receive_deadline saturates at datetime.max; the header keeps the exact millisecond sum.
    if deadline is not None and deadline != dt.datetime.max.replace(tzinfo=dt.timezone.utc):
        assert headers.expires_ms == (deadline - EPOCH) // dt.timedelta(milliseconds=1)


@settings(max_examples=500)
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_envelope_error(data: bytes) -> None:
    try:
        decode_message(data, offset=1)
    except EnvelopeError as err:
        assert err.offset == 1 and err.raw == data


@settings(max_examples=500)
@given(st.binary(max_size=400))
def test_random_bodies_behind_a_valid_header_raise_only_envelope_error(data: bytes) -> None:
    # The marker and fingerprint are right, so these reach the Avro decoder and the validation.
    try:
        decode_message(b"\xc3\x01" + ENVELOPE_FP + data)
    except EnvelopeError:
        pass


@settings(max_examples=300)
@given(st.data())
def test_corrupted_valid_records_raise_only_envelope_error(data: st.DataObject) -> None:
    value = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 4))):
        value[data.draw(st.integers(10, len(value) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_message(bytes(value))
    except EnvelopeError:
        pass


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_acknowledgment_bodies_raise_only_envelope_error(data: bytes) -> None:
    fp = envelope._ACKNOWLEDGMENT.current.fingerprint
    for body in (data, b"\xc3\x01" + fp + data):
        try:
            decode_acknowledgment(body)
        except EnvelopeError:
            pass


@pytest.mark.parametrize("family", ["_ENVELOPE", "_ACKNOWLEDGMENT"])
def test_readme_lists_the_current_fingerprints(family: str) -> None:
    fp = getattr(envelope, family).current.fingerprint
    assert fp.hex(" ") in (SCHEMAS / "README.md").read_text()
