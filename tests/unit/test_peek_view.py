"""Spark's Kafka-source queue view (spark_connector._view.PeekView and plain_message_ids)
gives every record the verdict of the full queue view (QueueState.add + status + in_view),
whatever the headers and receipts: the plain-header shortcut and QueueState.admit change the
cost, never the answer."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from facade.model.receipts import Receipt, ReceiptAction
from facade.state.queuestate import IndexEntry, QueueState
from spark_connector._view import PeekView, in_view, plain_message_ids

GUID = "ae0c5671-f190-12ce-ae10-00dd0114290f"
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _plain(seq: int, priority: int | None = 3) -> list[tuple[str, bytes | None]]:
    pairs: list[tuple[str, bytes | None]] = [("kmq.version", b"1"),
                                             ("kmq.id", f"{GUID}\\{seq}".encode())]
    if priority is not None:
        pairs.append(("kmq.priority", str(priority).encode()))
    return pairs


#: Header sets: kmq's plain form (ids from a small pool, so duplicates happen) and every way
#: off it that the shortcut must leave to IndexEntry.from_record.
_SEQ = st.integers(0, 5)
HEADER_SETS = st.one_of(
    _SEQ.map(_plain),
    st.tuples(_SEQ, st.integers(0, 7)).map(lambda a: _plain(a[0], a[1])),
    _SEQ.map(lambda n: _plain(n, None)),
    _SEQ.map(lambda n: [("kmq.version", b"1"), ("kmq.id", f"{GUID.upper()}\\{n}".encode())]),
    _SEQ.map(lambda n: [*_plain(n), ("kmq.id", f"{GUID}\\{n + 1}".encode())]),  # repeated id
    _SEQ.map(lambda n: [("kmq.id", None), *_plain(n)]),                          # null value
    st.sampled_from([b"2", b"0", b"x", b" 1", b"01"]).flatmap(
        lambda v: _SEQ.map(lambda n: [("kmq.version", v), ("kmq.id", f"{GUID}\\{n}".encode())])),
    st.sampled_from([b"8", b"-1", b" 3", b"3 ", b"x"]).flatmap(
        lambda p: _SEQ.map(lambda n: [*_plain(n, None), ("kmq.priority", p)])),
    _SEQ.map(lambda n: [*_plain(n), ("kmq.priority", b"5")]),                    # two priorities
    st.sampled_from([4294967295, 4294967296, 9999999999, 1000000000]).map(_plain),
    st.sampled_from([f"{GUID}\\007", f"{GUID}\\", "not an id", ""]).map(
        lambda text: [("kmq.version", b"1"), ("kmq.id", text.encode())]),
    st.just([]),
)
RECORDS = st.lists(st.tuples(st.integers(1, 3), HEADER_SETS,
                             st.sampled_from([None, 0, 9, 10, 200])), min_size=1, max_size=40)
RECEIPTS = st.lists(st.tuples(st.sampled_from([ReceiptAction.RECEIVE, ReceiptAction.LOCK,
                                               ReceiptAction.PURGE]),
                              st.lists(st.integers(0, 90), min_size=1, max_size=3)),
                    max_size=6)


def _with(receipts: list[tuple[ReceiptAction, list[int]]]) -> QueueState:
    state = QueueState()
    for n, (action, offsets) in enumerate(receipts):
        if action is ReceiptAction.PURGE:
            receipt = Receipt(f"p{n}", action, purge_below=min(offsets), time_ms=1_000)
        elif action is ReceiptAction.LOCK:
            receipt = Receipt(f"l{n}", action, tuple(offsets), time_ms=1_000, lease_ms=10**9)
        else:
            receipt = Receipt(f"r{n}", action, tuple(offsets), time_ms=1_000)
        state.apply(receipt, n)
    return state


@settings(max_examples=300, deadline=None)
@given(records=RECORDS, receipts=RECEIPTS)
def test_the_peek_view_agrees_with_the_full_queue_view(records: list[Any],
                                                       receipts: list[Any]) -> None:
    offsets, offset = [], 0
    for gap, _headers, _size in records:
        offset += gap
        offsets.append(offset)
    headers = pa.array([[{"key": k, "value": v} for k, v in pairs] for _, pairs, _ in records],
                       type=HEADERS)
    sizes = pa.array([size for _, _, size in records], type=pa.int32())

    full = _with(receipts)
    expected = []
    for o, (_, pairs, size) in zip(offsets, records):
        full.add(IndexEntry.from_record(o, size or 0, pairs))
        expected.append(in_view(full.status(o), None))

    view = PeekView("topic", _with(receipts), 0)
    got = []
    for o, message_id, (_, pairs, size) in zip(offsets, plain_message_ids(headers, sizes),
                                               records):
        got.append(view.add_entry(o, size or 0, pairs) if message_id is None
                   else view.add_plain(o, message_id))
    assert got == expected


def test_plain_ids_are_read_only_from_kmqs_own_header_form() -> None:
    rows = [_plain(7), _plain(4294967295), _plain(4294967296), [],
            [("kmq.version", b"1"), ("kmq.id", f"{GUID.upper()}\\1".encode())]]
    headers = pa.array([[{"key": k, "value": v} for k, v in pairs] for pairs in rows],
                       type=HEADERS)
    ids = plain_message_ids(headers, pa.array([200, 200, 200, 200, 200], pa.int32()))
    assert ids == [f"{GUID}\\7", f"{GUID}\\4294967295", None, None, None]
    assert plain_message_ids(headers.slice(1, 2), pa.array([200, 9], pa.int32())) == [
        f"{GUID}\\4294967295", None]


def test_a_state_fed_with_admit_answers_nothing_else() -> None:
    state = QueueState()
    assert state.admit(0, f"{GUID}\\1", False) is True
    assert state.admit(1, f"{GUID}\\1", False) is False  # a duplicate
    with pytest.raises(ValueError, match="admit"):
        state.status(0)
    with pytest.raises(ValueError, match="admit"):
        state.add(IndexEntry.from_record(2, 200, _plain(2)))
    with pytest.raises(ValueError, match="offset order"):
        state.admit(1, f"{GUID}\\3", False)
