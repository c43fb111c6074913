"""Unit tests for queue snapshots: QueueState.export / from_snapshot and the Avro codec."""

from __future__ import annotations

import random

import pytest

from facade.errors import EnvelopeError
from facade.kafka.kafkaseam import KafkaRecord
from facade.state.queuestate import DEDUPE_WINDOW, IndexEntry, OffsetState, QueueState
from facade.state.queueview import valid_snapshots
from facade.model.receipts import ReceiptAction, new_claim
from facade.state.snapshot import QueueSnapshotRecord, decode_snapshot, encode_snapshot
from facade.model.topics import QueueTopics

A = ReceiptAction
TOPICS = QueueTopics("kmq.qm.private.q")
GUIDS = ("ae0c5671-f190-12ce-ae10-00dd0114290f", "0b4c5671-f190-12ce-ae10-00dd0114290f")


def _entry(offset: int, seq: int, guid: str = GUIDS[0], *, priority: int = 3,
           origin: str | None = None, poison: bool = False) -> IndexEntry:
    if poison:
        return IndexEntry(offset, 0, "", None, None, None, 5, "", True)
    mid = f"{guid}\\{seq}"
    key = mid if origin is None else f"{mid}@{origin}"
    return IndexEntry(offset, priority, mid, None, None, None, 100 + offset, key)


def _history(seed: int, n: int = 400) -> list[tuple[str, object]]:
    """A random log: data entries (two senders, duplicates, poison, priorities) and receipts
    (receives, purges, locks settled), as ("data", entry) / ("receipt", receipt) steps."""
    rng = random.Random(seed)
    seqs = [0, 0]
    steps: list[tuple[str, object]] = []
    data = 0
    for _ in range(n):
        roll = rng.random()
        if roll < 0.6:
            sender = rng.randrange(2)
            seqs[sender] += 1
            seq = seqs[sender] - (rng.random() < 0.05)  # now and then a duplicate
            steps.append(("data", _entry(data, seq, GUIDS[sender], priority=rng.randrange(8),
                                         origin="o" if rng.random() < 0.1 else None,
                                         poison=rng.random() < 0.03)))
            data += 1
        elif roll < 0.95 and data:
            offsets = tuple(rng.randrange(data) for _ in range(rng.randrange(1, 3)))
            steps.append(("receipt", new_claim(A.RECEIVE, offsets, "t")))
        elif data:
            steps.append(("receipt", new_claim(A.PURGE, (), "t", purge_below=rng.randrange(data))))
    return steps


def _feed(state: QueueState, steps) -> None:
    receipts = state.receipts_offset
    for kind, item in steps:
        if kind == "data":
            state.add(item)
        else:
            state.apply(item, receipts)
            receipts += 1


def _verdicts(state: QueueState) -> tuple:
    """Everything a receiver can observe of the state."""
    order = [e.offset for e in state.candidates(0)]
    statuses = [state.status(o).state for o in range(state.data_offset + 5)]
    return order, statuses, state.pending_count(), state.pending_bytes, \
        [e.offset for e in state.poisoned()], state.data_offset, state.receipts_offset


@pytest.mark.parametrize("seed", range(20))
def test_a_state_restored_from_a_snapshot_reaches_the_same_verdicts(seed: int) -> None:
    steps = _history(seed)
    cut = len(steps) // 2
    full = QueueState()
    _feed(full, steps[:cut])
    snapshot = full.export()
    assert snapshot is not None
    record = decode_snapshot(encode_snapshot(QueueSnapshotRecord(TOPICS, snapshot, "w")))
    assert record.topics == TOPICS and record.state == snapshot
    restored = QueueState.from_snapshot(record.state)
    _feed(full, steps[cut:])
    _feed(restored, steps[cut:])
    a, b = _verdicts(full), _verdicts(restored)
    # Below the floor a restored state no longer knows which action removed an offset.
    settled = {OffsetState.REMOVED, OffsetState.DUPLICATE, OffsetState.UNKNOWN}
    assert a[0] == b[0] and a[2:] == b[2:]
    for x, y in zip(a[1], b[1]):
        assert x == y or (x in settled and y is OffsetState.REMOVED)
    # A receipt naming every offset wins exactly the same ones in both.
    claim = new_claim(A.RECEIVE, tuple(range(full.data_offset)), "t")
    assert full.apply(claim, full.receipts_offset).won == \
        restored.apply(claim, restored.receipts_offset).won


def test_two_writers_of_the_same_prefix_write_equal_snapshots() -> None:
    steps = _history(7)
    first, second = QueueState(), QueueState()
    _feed(first, steps)
    _feed(second, steps)
    second.floor()  # a different trim history must not change the snapshot
    assert encode_snapshot(QueueSnapshotRecord(TOPICS, first.export(), "a", 1)) == \
        encode_snapshot(QueueSnapshotRecord(TOPICS, second.export(), "a", 1))


def test_dedupe_keys_of_one_sender_cost_about_a_byte_each() -> None:
    state = QueueState()
    for offset in range(10_000):
        state.add(_entry(offset, offset + 1))
    state.apply(new_claim(A.PURGE, (), "t", purge_below=10_000), 0)
    value = encode_snapshot(QueueSnapshotRecord(TOPICS, state.export()))
    assert len(value) < 15_000
    assert decode_snapshot(value).state.dedupe == state.export().dedupe


def test_a_state_with_a_lock_is_not_exported() -> None:
    state = QueueState()
    state.add(_entry(0, 1))
    state.apply(new_claim(A.LOCK, (0,), "t", lease_ms=1000), 0)
    assert not state.exportable and state.export() is None


@pytest.mark.parametrize("value", [b"", b"garbage", b"\xc3\x01" + bytes(8) + b"x", None])
def test_garbage_is_not_a_snapshot(value) -> None:
    with pytest.raises(EnvelopeError):
        decode_snapshot(value, topic="kmq.qm.system.snapshots", partition=0, offset=3)


def test_an_inconsistent_snapshot_is_refused() -> None:
    state = QueueState()
    for offset in range(3):
        state.add(_entry(offset, offset + 1))
    good = state.export()
    for bad in (
        good.__class__(**{**_fields(good), "codes": b"\x01\x01"}),
        good.__class__(**{**_fields(good), "entries": good.entries[:2]}),
        good.__class__(**{**_fields(good), "dedupe_window": DEDUPE_WINDOW + 1}),
        good.__class__(**{**_fields(good), "codes": b"\x01\x03\x01"}),
        good.__class__(**{**_fields(good), "dedupe": (("no-backslash", "", 1, (0,)),)}),
        good.__class__(**{**_fields(good), "dedupe": ((GUIDS[0] + "\\", "", 1, (0, 0)),)}),
        good.__class__(**{**_fields(good), "dedupe": ((GUIDS[0] + "\\", "", 1, (7,)),)}),
    ):
        with pytest.raises(ValueError):
            QueueState.from_snapshot(bad)


def _fields(snapshot) -> dict:
    return {name: getattr(snapshot, name) for name in snapshot.__slots__}


def test_an_inconsistent_snapshot_record_is_passed_over_for_an_older_one() -> None:
    """A snapshot record that decodes but describes no possible state (anyone who may write
    the snapshot topic can write one) is skipped like garbage, and the view opens from the
    next older record of its key instead of failing to open."""
    state = QueueState()
    for offset in range(3):
        state.add(_entry(offset, offset + 1))
    good = state.export()
    bad = good.__class__(**{**_fields(good), "codes": b"\x01\x01"})
    records = [KafkaRecord("kmq.qm.system.snapshots", 0, offset, 0, b"k",
                           encode_snapshot(QueueSnapshotRecord(TOPICS, snap)), ())
               for offset, snap in enumerate((good, bad))]
    bounds = {TOPICS.data: (0, 3), TOPICS.receipts: (0, 0)}
    skipped: list[tuple[int, str]] = []

    valid = valid_snapshots({b"k": records}, TOPICS, bounds,
                            lambda record, exc: skipped.append((record.offset, str(exc))))

    assert [s.state.codes for s in valid] == [good.codes]
    assert skipped == [(1, "2 codes for 3 offsets")]
    assert QueueState.from_snapshot(valid[0].state).pending_count() == 3
