"""Unit tests for facade.model.receipts: the receipt record and its Avro encoding."""

from __future__ import annotations

import io
import json
import re
import time
import uuid
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from facade.model import avro, envelope
from facade.model.envelope import decode_message, register_writer_schema
from facade.errors import EnvelopeError, InvalidParameter
from facade.model.message import Message, MessageId
from facade.model.receipts import (
    LOCK_ACTIONS,
    RECEIPT_SCHEMA_NAME,
    RECEIPT_VERSION,
    SYSTEM_ACTIONS,
    Receipt,
    ReceiptAction,
    decode_receipt,
    encode_receipt,
    make_claimant,
    new_claim,
)

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
T_MS = 1714564800123
A = ReceiptAction


def _schema_json(name: str = "receipt.avsc") -> dict:
    return json.loads((SCHEMAS / name).read_text())


def _raw(schema_json: dict | None = None, **overrides: object) -> bytes:
    """Encode a receipt record directly with fastavro, bypassing Receipt validation."""
    schema_json = schema_json or _schema_json()
    record = {
        "claim_id": "a" * 32,
        "action": 1,
        "offsets": [5],
        "purge_below": None,
        "claimant": "qm:1:00",
        "time": T_MS,
        "transaction_id": None,
        "completes": None,
        "target": None,
        "reason": None,
        "lease_ms": None,
    } | overrides
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema_json), record)
    fp = avro.make_writer(schema_json).fingerprint
    return b"\xc3\x01" + fp + out.getvalue()


RECEIPTS = [
    Receipt("c1", A.RECEIVE, (3,), claimant="qm:12:ab", time_ms=T_MS),
    Receipt("c2", A.RECEIVE, (1, 2, 9), time_ms=T_MS, transaction_id="tx-1"),
    Receipt("c3", A.PURGE, (), purge_below=1000, time_ms=T_MS, reason="MQPurgeQueue"),
    Receipt("c4", A.EXPIRE, (7,), time_ms=T_MS, target="kmq.qm.system.deadletter"),
    Receipt("c5", A.MOVE, (8,), time_ms=T_MS, target="poison"),
    Receipt("c6", A.REJECT, (9,), time_ms=T_MS, target="kmq.qm.system.deadletter", reason="x"),
    Receipt("c7", A.POISON, (10, 11), time_ms=T_MS, reason="kmq.id header missing"),
    Receipt("c8", A.COMPLETED, (), time_ms=T_MS, completes="c4"),
    Receipt("c9", A.LOCK, (12,), time_ms=T_MS, lease_ms=30_000),
    Receipt("c10", A.RELEASE, (12,), time_ms=T_MS, completes="c9", reason="lease expired"),
    Receipt("c11", A.PREFETCH, (13, 14, 15), time_ms=T_MS, lease_ms=60_000),
    Receipt("c12", A.COMPLETED, (13, 14), time_ms=T_MS, completes="c11"),
    Receipt("c13", A.REJECT, (15,), time_ms=T_MS, completes="c11", target="dlq"),
    Receipt("c14", A.RELEASE, (), time_ms=T_MS, completes="c9"),
    Receipt("c15", A.RECEIVE_FIRST, (16, 17, 18), time_ms=T_MS),
    Receipt("c16", A.LOCK_FIRST, (19, 20), time_ms=T_MS, lease_ms=30_000),
]


@pytest.mark.parametrize("receipt", RECEIPTS, ids=lambda r: r.action.name)
def test_round_trip(receipt: Receipt) -> None:
    value = encode_receipt(receipt)
    assert value[:2] == b"\xc3\x01"
    assert decode_receipt(value) == receipt


def test_every_action_has_a_round_trip_example() -> None:
    assert {r.action for r in RECEIPTS} == set(ReceiptAction)


def test_offsets_are_normalised_to_a_tuple() -> None:
    receipt = Receipt("c", A.RECEIVE, [4, 2])  # type: ignore[arg-type]
    assert receipt.offsets == (4, 2)
    assert Receipt("c", 1, (4,)).action is A.RECEIVE  # type: ignore[arg-type]


def test_new_claim_fills_id_and_time() -> None:
    before = time.time_ns() // 1_000_000
    claim = new_claim(A.RECEIVE, [42], "qm:1:ff")
    after = time.time_ns() // 1_000_000
    assert re.fullmatch(r"[0-9a-f]{32}", claim.claim_id)
    assert uuid.UUID(hex=claim.claim_id).version == 4
    assert before <= claim.time_ms <= after
    assert claim.offsets == (42,) and claim.claimant == "qm:1:ff"
    assert new_claim(A.RECEIVE, [42], "x").claim_id != claim.claim_id
    purge = new_claim(A.PURGE, (), "x", purge_below=10, time_ms=5)
    assert purge.purge_below == 10 and purge.time_ms == 5


def test_make_claimant_names_queue_manager_and_pid() -> None:
    import os

    label = make_claimant("host1")
    assert re.fullmatch(rf"host1:{os.getpid()}:[0-9a-f]{{8}}", label)
    assert make_claimant("host1") != label


def test_system_actions() -> None:
    assert SYSTEM_ACTIONS == {A.EXPIRE, A.MOVE, A.REJECT, A.POISON}
    assert A.EXPIRE.is_system and not A.RECEIVE.is_system and not A.COMPLETED.is_system


def test_lock_actions() -> None:
    assert LOCK_ACTIONS == {A.LOCK, A.PREFETCH, A.LOCK_FIRST}
    assert (A.LOCK, A.RELEASE, A.PREFETCH, A.RECEIVE_FIRST, A.LOCK_FIRST) == (8, 9, 10, 11, 12)
    assert A.LOCK.is_lock and A.PREFETCH.is_lock and A.LOCK_FIRST.is_lock
    assert not A.RELEASE.is_lock and not A.RECEIVE_FIRST.is_lock
    assert not A.LOCK.is_system and not A.RELEASE.is_system


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"claim_id": "", "action": A.RECEIVE, "offsets": (1,)}, "claim_id must not be empty"),
        ({"claim_id": 5, "action": A.RECEIVE, "offsets": (1,)}, "claim_id must be a str"),
        ({"claim_id": "c", "action": 0, "offsets": (1,)}, "action must be"),
        ({"claim_id": "c", "action": "RECEIVE", "offsets": (1,)}, "action must be"),
        ({"claim_id": "c", "action": A.RECEIVE, "offsets": (-1,)}, "offsets must be an int"),
        ({"claim_id": "c", "action": A.RECEIVE, "offsets": (True,)}, "offsets must be an int"),
        ({"claim_id": "c", "action": A.RECEIVE, "offsets": 5}, "sequence of ints"),
        ({"claim_id": "c", "action": A.RECEIVE, "offsets": ()}, "at least one offset"),
        ({"claim_id": "c", "action": A.EXPIRE, "offsets": ()}, "at least one offset"),
        ({"claim_id": "c", "action": A.PURGE}, "needs purge_below"),
        ({"claim_id": "c", "action": A.PURGE, "purge_below": -1}, "purge_below must be"),
        (
            {"claim_id": "c", "action": A.RECEIVE, "offsets": (1,), "purge_below": 3},
            "only allowed on PURGE",
        ),
        ({"claim_id": "c", "action": A.COMPLETED}, "needs completes"),
        ({"claim_id": "c", "action": A.RELEASE, "offsets": (1,)}, "needs completes"),
        (
            {"claim_id": "c", "action": A.RECEIVE, "offsets": (1,), "completes": "d"},
            "completes is not allowed on RECEIVE",
        ),
        (
            {"claim_id": "c", "action": A.LOCK, "offsets": (1,), "lease_ms": 5, "completes": "d"},
            "completes is not allowed on LOCK",
        ),
        ({"claim_id": "c", "action": A.PURGE, "purge_below": 1, "completes": "d"}, "PURGE"),
        ({"claim_id": "c", "action": A.LOCK, "offsets": (1,)}, "needs lease_ms"),
        ({"claim_id": "c", "action": A.PREFETCH, "offsets": (1,)}, "needs lease_ms"),
        ({"claim_id": "c", "action": A.LOCK, "lease_ms": 5}, "at least one offset"),
        ({"claim_id": "c", "action": A.LOCK, "offsets": (1,), "lease_ms": 0}, "lease_ms must be"),
        ({"claim_id": "c", "action": A.LOCK, "offsets": (1,), "lease_ms": 1.5}, "lease_ms"),
        (
            {"claim_id": "c", "action": A.RECEIVE, "offsets": (1,), "lease_ms": 5},
            "lease_ms is only allowed on LOCK, LOCK_FIRST and PREFETCH",
        ),
        ({"claim_id": "c", "action": A.MOVE, "offsets": (1,)}, "needs target"),
        ({"claim_id": "c", "action": A.RECEIVE, "offsets": (1,), "time_ms": -5}, "time_ms"),
        ({"claim_id": "c", "action": A.RECEIVE, "offsets": (1,), "reason": ""}, "reason"),
        ({"claim_id": "c", "action": A.RECEIVE, "offsets": (1,), "target": "x" * 2000}, "1024"),
    ],
)
def test_invalid_receipts_are_rejected(kwargs: dict, fragment: str) -> None:
    with pytest.raises(InvalidParameter, match=re.escape(fragment)):
        Receipt(**kwargs)


def test_receipts_without_a_lease_are_written_as_version_1() -> None:
    """Processes that only know version 1 keep reading every receipt of a queue nobody locks."""
    v1 = avro.family("receipt.avsc").version(1)
    v2 = avro.family("receipt.avsc").current
    assert RECEIPT_VERSION == 2 and v1.fingerprint != v2.fingerprint
    # An old reader: a family that has only the frozen version 1 file.
    old_reader = avro.SchemaFamily(SCHEMAS, "receipt.v1.avsc")
    assert old_reader.current.version == 1 and len(old_reader.writers) == 1
    for receipt in RECEIPTS:
        value = encode_receipt(receipt)
        if receipt.lease_ms is None:
            assert value[2:10] == v1.fingerprint
            assert old_reader.decode(value)["claim_id"] == receipt.claim_id
        else:
            assert value[2:10] == v2.fingerprint
            with pytest.raises(avro.DecodeFailure, match="unknown writer schema"):
                old_reader.decode(value)


def test_version_1_records_decode_with_no_lease() -> None:
    value = _raw(_schema_json("receipt.v1.avsc"), action=7, offsets=[], completes="x")
    assert value[2:10] == avro.family("receipt.avsc").version(1).fingerprint
    assert decode_receipt(value) == Receipt("a" * 32, A.COMPLETED, claimant="qm:1:00",
                                            time_ms=T_MS, completes="x")


def test_the_frozen_version_1_schema_is_the_previous_schema() -> None:
    """The frozen file must keep its fingerprint: records already in Kafka name it."""
    assert avro.family("receipt.avsc").version(1).fingerprint.hex(" ") == "72 2c f8 04 58 04 5c ab"
    current = [f["name"] for f in _schema_json()["fields"]]
    assert current == [f["name"] for f in _schema_json("receipt.v1.avsc")["fields"]] + ["lease_ms"]


def test_unknown_action_from_a_newer_writer_is_kept() -> None:
    receipt = decode_receipt(_raw(action=42, offsets=[3, 4], purge_below=9))
    assert receipt.action == 42 and isinstance(receipt.action, ReceiptAction)
    assert not receipt.action.is_known and not receipt.action.is_system
    assert receipt.action.name == "UNKNOWN_42"
    assert receipt.offsets == (3, 4) and receipt.purge_below == 9
    assert decode_receipt(encode_receipt(receipt)) == receipt


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (b"", "shorter than"),
        (None, "None"),
        (b"\x00\x01" + bytes(20), "marker"),
        (
            envelope.encode_message(Message(id=MessageId(uuid.UUID(int=1), 1))).value,
            "is a kmq.MessageEnvelope, not a kmq.Receipt",
        ),
        (_raw()[:-1], "truncated"),
        (_raw() + b"\x00", "unexpected bytes"),
        (_raw(action=0), "action must be"),
        (_raw(action=-3), "action must be"),
        (_raw(offsets=[-1]), "offsets"),
        (_raw(action=2, offsets=[]), "needs purge_below"),
        (_raw(claim_id=""), "claim_id"),
        (_raw(action=8), "needs lease_ms"),
        (_raw(action=8, lease_ms=0), "lease_ms must be"),
        (_raw(action=9, offsets=[1]), "needs completes"),
    ],
)
def test_decode_errors_are_envelope_errors(value: bytes, fragment: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        decode_receipt(value, topic="kmq.qm.private.q.receipts", partition=0, offset=17)
    assert fragment in str(info.value)
    assert info.value.topic == "kmq.qm.private.q.receipts" and info.value.offset == 17
    assert info.value.raw == (None if value is None else bytes(value))


def test_a_receipt_read_as_a_message_is_named() -> None:
    with pytest.raises(EnvelopeError, match="is a kmq.Receipt, not a kmq.MessageEnvelope"):
        decode_message(encode_receipt(RECEIPTS[0]))


def test_older_receipt_versions_are_read_with_defaults() -> None:
    older = _schema_json()
    older["fields"] = [f for f in older["fields"] if f["name"] != "reason"]
    fp = register_writer_schema(older)
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out,
        fastavro.parse_schema(older),
        {
            "claim_id": "old",
            "action": 1,
            "offsets": [1],
            "purge_below": None,
            "claimant": "",
            "time": T_MS,
            "transaction_id": None,
            "completes": None,
            "target": None,
        },
    )
    receipt = decode_receipt(b"\xc3\x01" + fp + out.getvalue())
    assert receipt == Receipt("old", A.RECEIVE, (1,), time_ms=T_MS)


def test_encode_rejects_non_receipts_and_bad_text() -> None:
    with pytest.raises(InvalidParameter, match="expected a Receipt"):
        encode_receipt("nope")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="surrogate"):
        encode_receipt(Receipt("c", A.RECEIVE, (1,), reason="\ud800"))


def test_schema_name_and_readme_fingerprint() -> None:
    family = avro.family("receipt.avsc")
    assert family.current.name == RECEIPT_SCHEMA_NAME
    readme = (SCHEMAS / "README.md").read_text()
    assert family.current.fingerprint.hex(" ") in readme
    assert family.version(1).fingerprint.hex(" ") in readme


_chars = st.characters(exclude_categories=("Cs",))  # lone surrogates cannot be UTF-8
_text = st.text(_chars, min_size=1, max_size=30)
_offsets = st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=5).map(tuple)


@st.composite
def receipts(draw: st.DrawFn) -> Receipt:
    action = draw(st.sampled_from(list(ReceiptAction)))
    kw: dict = {
        "claimant": draw(st.text(_chars, max_size=20)),
        "time_ms": draw(st.integers(0, 253_402_300_799_999)),
        "transaction_id": draw(st.none() | _text),
        "reason": draw(st.none() | _text),
    }
    offsets: tuple[int, ...] = ()
    if action is A.PURGE:
        kw["purge_below"] = draw(st.integers(0, 2**63 - 1))
    elif action in (A.COMPLETED, A.RELEASE):
        kw["completes"] = draw(_text)
        offsets = draw(st.just(()) | _offsets)
    else:
        offsets = draw(_offsets)
    if action.is_lock:
        kw["lease_ms"] = draw(st.integers(1, 2**63 - 1))
    if action.is_system:
        kw["completes"] = draw(st.none() | _text)
    if action is A.MOVE:
        kw["target"] = draw(_text)
    elif action not in (A.COMPLETED, A.RELEASE):
        kw["target"] = draw(st.none() | _text)
    return Receipt(draw(_text), action, offsets, **kw)


@settings(max_examples=200)
@given(receipts())
def test_random_receipts_round_trip(receipt: Receipt) -> None:
    assert decode_receipt(encode_receipt(receipt)) == receipt


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_envelope_error(data: bytes) -> None:
    fp = avro.family("receipt.avsc").current.fingerprint
    for value in (data, b"\xc3\x01" + fp + data):
        try:
            decode_receipt(value)
        except EnvelopeError:
            pass


def _resolved(value: bytes, writer_json: dict) -> dict:
    """What Avro's schema resolution (fastavro's) reads from ``value``: the reference the
    family's shortcut for prefix writers must match."""
    plain = frozenset({"timestamp-millis"})
    stream = io.BytesIO(value[10:])
    return fastavro.schemaless_reader(
        stream, fastavro.parse_schema(avro._without_logical_types(writer_json, plain)),
        fastavro.parse_schema(avro._without_logical_types(_schema_json(), plain)))


@settings(max_examples=200)
@given(receipts())
def test_version_1_is_read_as_schema_resolution_reads_it(receipt: Receipt) -> None:
    """Version 1 (most receipts) is read with its own schema plus a null lease_ms, not
    resolved: the record must be exactly what resolution gives, time as epoch ms."""
    value = encode_receipt(receipt)
    family = avro.family("receipt.avsc")
    record = family.decode(value)
    writer_json = _schema_json("receipt.v1.avsc" if receipt.lease_ms is None else "receipt.avsc")
    assert record == _resolved(value, writer_json)
    assert list(record) == [f["name"] for f in _schema_json()["fields"]]
    assert record["time"] == receipt.time_ms and type(record["time"]) is int


def test_only_writers_that_the_current_schema_extends_with_nulls_skip_resolution() -> None:
    current = _schema_json()
    v1 = _schema_json("receipt.v1.avsc")
    assert avro._nulls_appended(v1, current) == {"lease_ms": None}
    assert avro._nulls_appended(current, current) == {}
    without_reason = dict(current, fields=[f for f in current["fields"] if f["name"] != "reason"])
    assert avro._nulls_appended(without_reason, current) is None  # a field missing inside
    other_type = dict(v1, fields=[dict(f, type="int") if f["name"] == "time" else f
                                  for f in v1["fields"]])
    assert avro._nulls_appended(other_type, current) is None  # a shared field changed type
    defaulted = dict(current, fields=[*current["fields"][:-1],
                                      dict(current["fields"][-1], type="long", default=7)])
    assert avro._nulls_appended(v1, defaulted) is None  # the appended field is not null
    other_doc = dict(v1, fields=[dict(f, doc="reworded") for f in v1["fields"]])
    assert avro._nulls_appended(other_doc, current) == {"lease_ms": None}  # docs do not count
