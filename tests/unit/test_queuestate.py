"""Unit tests for facade.queuestate: the arbitration state machine and queue view."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from facade import queuestate
from facade.envelope import HEADER_ID, HEADER_PRIORITY, HEADER_VERSION, encode_message
from facade.message import Message, MessageId
from facade.queuestate import (
    DEDUPE_WINDOW,
    ClaimOutcome,
    IndexEntry,
    OffsetState,
    OffsetStatus,
    QueueState,
)
from facade.receipts import Receipt, ReceiptAction

A = ReceiptAction
GUID = "ae0c5671-f190-12ce-ae10-00dd0114290f"
NOW = 1_000_000


def mid(n: int) -> str:
    return f"{GUID}\\{n}"


def entry(
    offset: int,
    priority: int = 3,
    *,
    key: int | str | None = None,
    cid: str | None = None,
    expires: int | None = None,
    not_before: int | None = None,
    size: int = 100,
    poison: bool = False,
) -> IndexEntry:
    """An entry whose message id is derived from ``key`` (default: the offset, so unique)."""
    message_id = mid(offset if key is None else key) if not isinstance(key, str) else key
    if poison:
        return IndexEntry(offset, 0, "", None, None, None, size, "", True)
    return IndexEntry(offset, priority, message_id, cid, expires, not_before, size, message_id)


class Feeder:
    """A QueueState plus a receipts-offset counter, so tests read like a log."""

    def __init__(self, state: QueueState | None = None) -> None:
        self.state = state or QueueState()
        self.next_receipt = self.state.receipts_offset
        self.counter = 0

    def add(self, *entries: IndexEntry) -> None:
        for e in entries:
            self.state.add(e)

    def apply(self, receipt: Receipt) -> ClaimOutcome:
        outcome = self.state.apply(receipt, self.next_receipt)
        self.next_receipt += 1
        return outcome

    def claim(self, *offsets: int, action: ReceiptAction = A.RECEIVE, **kw: object) -> ClaimOutcome:
        self.counter += 1
        if action is A.MOVE:
            kw.setdefault("target", "poison")
        return self.apply(Receipt(f"c{self.counter}", action, offsets, time_ms=NOW, **kw))

    def purge(self, below: int) -> ClaimOutcome:
        self.counter += 1
        return self.apply(Receipt(f"p{self.counter}", A.PURGE, purge_below=below, time_ms=NOW))

    def complete(self, claim_id: str) -> ClaimOutcome:
        self.counter += 1
        return self.apply(Receipt(f"d{self.counter}", A.COMPLETED, completes=claim_id))

    def order(self, now: int = NOW) -> list[int]:
        return [e.offset for e in self.state.candidates(now)]


# ---------------------------------------------------------------------------------------------
# Receive order
# ---------------------------------------------------------------------------------------------


def test_priority_first_then_fifo_within_a_priority() -> None:
    f = Feeder()
    f.add(entry(0, 3), entry(1, 7), entry(2, 0), entry(3, 7), entry(4, 3), entry(5, 5))
    assert f.order() == [1, 3, 5, 0, 4, 2]
    assert f.state.peek_first(NOW).offset == 1  # type: ignore[union-attr]
    assert f.state.pending_count() == 6 and f.state.pending_bytes == 600


def test_receive_loop_takes_messages_in_order() -> None:
    f = Feeder()
    f.add(*(entry(i, i % 8) for i in range(40)))
    received = []
    while (first := f.state.peek_first(NOW)) is not None:
        assert f.claim(first.offset).won == (first.offset,)
        received.append(first.offset)
    assert received == sorted(range(40), key=lambda o: (-(o % 8), o))
    assert f.state.pending_count() == 0 and f.state.pending_bytes == 0


def test_receive_by_id_leaves_the_others_in_order() -> None:
    f = Feeder()
    f.add(entry(0, 3), entry(1, 3), entry(2, 5), entry(3, 3))
    target = f.state.by_message_id(mid(1))
    assert target is not None and target.offset == 1
    assert f.claim(1).won == (1,)
    assert f.state.by_message_id(mid(1)) is None
    assert f.order() == [2, 0, 3]


def test_first_claim_wins_later_claims_lose() -> None:
    f = Feeder()
    f.add(entry(0), entry(1))
    first = f.claim(0)
    second = f.claim(0, 1)
    assert first == ClaimOutcome("c1", (0,), ())
    assert second == ClaimOutcome("c2", (1,), (0,))
    assert f.order() == []
    assert f.claim(1, 1).lost == (1,)  # a repeated offset counts once


def test_purge_then_late_claim_loses() -> None:
    f = Feeder()
    f.add(entry(0), entry(1), entry(2, 7), entry(3))
    assert f.claim(1).won == (1,)
    assert f.purge(3) == ClaimOutcome("p2", (), (), purged=2)
    assert f.purge(2).purged == 0
    assert f.order() == [3]
    assert f.claim(0, 2, 3) == ClaimOutcome("c4", (3,), (0, 2))
    assert f.state.status(0) == OffsetStatus(OffsetState.REMOVED, A.PURGE)
    assert f.state.status(1) == OffsetStatus(OffsetState.REMOVED, A.RECEIVE)


def test_purge_covers_records_not_read_yet() -> None:
    f = Feeder()
    f.add(entry(0))
    f.purge(5)
    f.add(entry(3), entry(6))
    assert f.order() == [6]
    assert f.state.status(4) == OffsetStatus(OffsetState.REMOVED, A.PURGE)  # a gap, purged
    assert f.state.status(3).action is A.PURGE
    assert f.claim(4).lost == (4,)
    assert f.state.floor() == 6


def test_receipt_read_before_its_data_record() -> None:
    f = Feeder()
    f.add(entry(0))
    assert f.claim(2).won == (2,)
    assert f.state.status(2) == OffsetStatus(OffsetState.REMOVED, A.RECEIVE)
    assert f.claim(2).lost == (2,)
    f.add(entry(1), entry(2), entry(3))
    assert f.order() == [0, 1, 3]
    assert f.state.status(2).action is A.RECEIVE
    assert f.state.by_lookup_id(2) is None


def test_claim_on_a_gap_read_later() -> None:
    f = Feeder()
    f.claim(1, 2)
    f.add(entry(0), entry(3))  # 1 and 2 are gaps (e.g. transaction markers)
    assert f.order() == [0, 3]
    assert f.state.status(1).state is OffsetState.REMOVED
    f.state.advance_data_to(10)
    assert f.state.data_offset == 10 and f.state.status(7) == OffsetStatus(OffsetState.UNKNOWN)


# ---------------------------------------------------------------------------------------------
# Duplicates, poison, timing
# ---------------------------------------------------------------------------------------------


def test_duplicates_are_excluded() -> None:
    f = Feeder()
    f.add(entry(0, key=1), entry(1, key=2), entry(2, key=1, priority=7))
    assert f.order() == [0, 1]
    assert f.state.status(2) == OffsetStatus(OffsetState.DUPLICATE)
    assert f.state.pending_count() == 2
    f.claim(0)
    f.add(entry(3, key=1))  # the original was received: a resend is still a duplicate
    assert f.order() == [1]
    assert f.state.status(3).state is OffsetState.DUPLICATE


def test_a_claim_on_a_duplicate_wins_and_shows_as_removed() -> None:
    f = Feeder()
    f.add(entry(0, key=1), entry(1, key=1))
    assert f.claim(1).won == (1,)  # as it would if read before the data
    assert f.state.status(1) == OffsetStatus(OffsetState.REMOVED, A.RECEIVE)


def test_dedupe_window_is_counted_in_offsets() -> None:
    f = Feeder(QueueState(dedupe_window=3))
    f.add(entry(0, key=9), entry(3, key=9), entry(7, key=9), entry(9, key=9))
    # 3 is within 3 of 0; 7 is 4 after 3: outside; 9 is within 3 of 7.
    assert [f.state.status(o).state for o in (0, 3, 7, 9)] == [
        OffsetState.PENDING,
        OffsetState.DUPLICATE,
        OffsetState.PENDING,
        OffsetState.DUPLICATE,
    ]
    assert DEDUPE_WINDOW == 1 << 18


def test_copies_from_different_origins_are_not_duplicates() -> None:
    record = encode_message(Message(id=MessageId(uuid.UUID(GUID), 5)))
    size = len(record.value)
    a = IndexEntry.from_record(0, size, record.headers, origin="q1")
    b = IndexEntry.from_record(1, size, record.headers, origin="q2")
    c = IndexEntry.from_record(2, size, record.headers, origin="q1")
    f = Feeder()
    f.add(a, b, c)
    assert f.order() == [0, 1]
    assert f.state.by_message_id(mid(5)).offset == 0  # type: ignore[union-attr]
    f.claim(0)
    assert f.state.by_message_id(mid(5)).offset == 1  # type: ignore[union-attr]


def test_poison_is_excluded_and_listed_until_dead_lettered() -> None:
    f = Feeder()
    f.add(entry(0), entry(1, poison=True), entry(2), entry(3, poison=True))
    assert f.order() == [0, 2]
    assert [e.offset for e in f.state.poisoned()] == [1, 3]
    assert f.state.status(1).state is OffsetState.POISON
    assert f.state.by_lookup_id(1) is None
    assert f.state.pending_count() == 2  # poison records are not messages
    outcome = f.claim(1, 3, action=A.POISON, target="kmq.qm.system.deadletter")
    assert outcome.won == (1, 3) and f.state.poisoned() == []
    (claim,) = f.state.incomplete_claims()
    assert claim.offsets == (1, 3) and claim.receipt.action is A.POISON
    assert claim.receipt.target == "kmq.qm.system.deadletter" and claim.receipt_offset == 0
    assert f.state.retention_floor() == 0  # the poison records stay until completed
    f.complete(outcome.claim_id)
    assert f.state.incomplete_claims() == []


def test_completed_clears_only_its_claim() -> None:
    f = Feeder()
    f.add(*(entry(i, expires=NOW - 1) for i in range(4)))
    e1 = f.claim(0, action=A.EXPIRE)
    m1 = f.claim(1, action=A.MOVE)
    r1 = f.claim(2, action=A.REJECT)
    f.claim(3)  # RECEIVE: not a system action
    f.claim(0, action=A.EXPIRE)  # lost everything: nothing to redo
    assert [c.receipt.claim_id for c in f.state.incomplete_claims()] == [
        e1.claim_id,
        m1.claim_id,
        r1.claim_id,
    ]
    assert f.complete(m1.claim_id) == ClaimOutcome("d6", (), ())
    f.complete("never-seen")
    assert [c.receipt.action for c in f.state.incomplete_claims()] == [A.EXPIRE, A.REJECT]


def test_not_before_is_invisible_until_due() -> None:
    f = Feeder()
    f.add(entry(0, not_before=NOW + 50), entry(1), entry(2, 7, not_before=NOW + 10))
    assert f.order(NOW) == [1]
    assert f.state.next_visible_ms(NOW) == NOW + 10
    assert f.order(NOW + 10) == [2, 1]
    assert f.state.next_visible_ms(NOW + 10) == NOW + 50
    assert f.order(NOW + 50) == [2, 0, 1]
    assert f.state.next_visible_ms(NOW + 50) is None
    assert f.state.pending_count() == 3 and f.state.pending_count(NOW) == 1
    assert f.state.by_lookup_id(0, NOW) is None and f.state.by_lookup_id(0) is not None


def test_expired_is_excluded_and_listed() -> None:
    f = Feeder()
    f.add(entry(0, expires=NOW + 5), entry(1, expires=NOW), entry(2), entry(3, 7, expires=NOW - 9))
    assert f.order(NOW) == [0, 2]
    assert [e.offset for e in f.state.expired(NOW)] == [1, 3]
    assert [e.offset for e in f.state.expired(NOW)] == [1, 3]  # unchanged until claimed
    assert f.state.next_expiry_ms() == NOW - 9
    f.claim(1, 3, action=A.EXPIRE, target="kmq.qm.system.deadletter")
    assert f.state.expired(NOW) == []
    assert f.state.next_expiry_ms() == NOW + 5
    assert [e.offset for e in f.state.expired(NOW + 5)] == [0]


def test_lookups_by_correlation_id_take_the_first_in_receive_order() -> None:
    cid = mid(999)
    f = Feeder()
    f.add(entry(0, 1, cid=cid), entry(1, 6, cid=cid), entry(2, 6, cid=cid), entry(3, cid=mid(5)))
    assert f.state.by_correlation_id(cid).offset == 1  # type: ignore[union-attr]
    f.claim(1)
    assert f.state.by_correlation_id(cid.upper()).offset == 2  # type: ignore[union-attr]
    f.claim(2)
    assert f.state.by_correlation_id(cid).offset == 0  # type: ignore[union-attr]
    f.claim(0)
    assert f.state.by_correlation_id(cid) is None
    assert f.state.by_correlation_id("not an id") is None


def test_correlation_lookup_skips_invisible_matches_when_given_a_time() -> None:
    cid = mid(7)
    f = Feeder()
    f.add(entry(0, 7, cid=cid, expires=NOW - 1), entry(1, 1, cid=cid))
    assert f.state.by_correlation_id(cid).offset == 0  # type: ignore[union-attr]
    assert f.state.by_correlation_id(cid, NOW).offset == 1  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------
# Cursors and iteration under change
# ---------------------------------------------------------------------------------------------


def test_cursor_next_after_is_stable_while_others_are_removed() -> None:
    f = Feeder()
    f.add(*(entry(i, 7 if i % 3 == 0 else 2) for i in range(12)))
    expected = sorted(range(12), key=lambda o: (-(7 if o % 3 == 0 else 2), o))
    cursor = f.state.next_after(None, NOW)
    assert cursor is not None and cursor.offset == expected[0]
    seen = [cursor.offset]
    removed: set[int] = set()
    while True:
        # Remove the current entry and one further on, as other receivers would.
        f.claim(cursor.offset)
        ahead = [o for o in expected if o not in removed and o not in seen]
        if len(ahead) > 1:
            f.claim(ahead[1])
            removed.add(ahead[1])
        nxt = f.state.next_after(cursor.position, NOW)
        if nxt is None:
            break
        assert nxt.position > cursor.position
        cursor = nxt
        seen.append(cursor.offset)
    assert seen == [o for o in expected if o not in removed]


def test_next_after_crosses_priorities_and_skips_invisible() -> None:
    f = Feeder()
    f.add(entry(0, 5), entry(1, 5, not_before=NOW + 1), entry(2, 4), entry(3, 0))
    assert f.state.next_after((-5, 0), NOW).offset == 2  # type: ignore[union-attr]
    assert f.state.next_after((-4, 2), NOW).offset == 3  # type: ignore[union-attr]
    assert f.state.next_after((-0, 3), NOW) is None
    assert f.state.next_after((-6, 99), NOW).offset == 0  # type: ignore[union-attr]


def test_candidates_iterator_survives_removals_and_compaction() -> None:
    f = Feeder()
    f.add(*(entry(i, 3) for i in range(500)))
    it = f.state.candidates(NOW)
    got = [next(it).offset for _ in range(3)]
    for o in range(3, 400):  # a bulk of removals ahead of the iterator compacts the lane
        if o % 7:
            f.claim(o)
    f.add(entry(500, 3))  # appended while iterating: seen too
    got += [e.offset for e in it]
    assert got == [0, 1, 2] + [o for o in range(3, 501) if o >= 400 or not o % 7]


# ---------------------------------------------------------------------------------------------
# Status, stats, ordering errors, memory housekeeping
# ---------------------------------------------------------------------------------------------


def test_status_answers() -> None:
    f = Feeder(QueueState(data_start=10))
    f.add(entry(10), entry(11, poison=True), entry(12, key=10), entry(13), entry(15))
    f.claim(13, action=A.MOVE, target="retry")
    f.claim(20)
    st_ = f.state.status
    assert st_(10) == OffsetStatus(OffsetState.PENDING, entry=f.state.by_lookup_id(10))
    assert st_(11).state is OffsetState.POISON
    assert st_(10).is_pending and st_(11).is_pending and not st_(12).is_pending
    assert st_(12) == OffsetStatus(OffsetState.DUPLICATE)
    assert st_(13) == OffsetStatus(OffsetState.REMOVED, A.MOVE)
    assert st_(14) == OffsetStatus(OffsetState.UNKNOWN)  # gap
    assert st_(16) == OffsetStatus(OffsetState.UNKNOWN)  # not read yet
    assert st_(20) == OffsetStatus(OffsetState.REMOVED, A.RECEIVE)  # claimed ahead
    assert st_(5) == OffsetStatus(OffsetState.REMOVED)  # below the log start
    assert st_(-1) == OffsetStatus(OffsetState.UNKNOWN)
    assert f.claim(5).lost == (5,)


def test_unknown_action_from_a_newer_writer_still_removes() -> None:
    f = Feeder()
    f.add(entry(0), entry(1))
    outcome = f.apply(Receipt("new", ReceiptAction(42), (1,), purge_below=1))
    assert outcome.won == (1,) and f.order() == []
    assert f.state.status(1).action == 42 and f.state.incomplete_claims() == []


def test_stats_and_floors() -> None:
    f = Feeder(QueueState(dedupe_window=2))
    f.add(*(entry(i, size=10 + i) for i in range(6)))
    assert f.state.pending_bytes == sum(10 + i for i in range(6))
    assert f.state.floor() == 0
    f.claim(0, 1, 3)
    assert f.state.floor() == 2 and f.state.pending_count() == 3
    assert f.state.pending_bytes == 12 + 14 + 15
    f.claim(2, 4, 5)
    assert f.state.floor() == 6
    assert f.state.retention_floor() == 4  # keeps the dedupe window
    f.purge(9)
    assert f.state.floor() == 9
    assert f.state.data_offset == 6 and f.state.receipts_offset == 3


def test_retention_floor_keeps_incomplete_claims() -> None:
    f = Feeder(QueueState(dedupe_window=1))
    f.add(*(entry(i, expires=1) for i in range(5)))
    claim = f.claim(1, action=A.EXPIRE)
    f.claim(0, 2, 3, 4)
    assert f.state.floor() == 5 and f.state.retention_floor() == 1
    f.complete(claim.claim_id)
    assert f.state.retention_floor() == 4


def test_logs_must_be_fed_in_order() -> None:
    state = QueueState()
    state.add(entry(5))
    with pytest.raises(ValueError, match="increasing offset order"):
        state.add(entry(5))
    state.apply(Receipt("a", A.RECEIVE, (5,)), 3)
    with pytest.raises(ValueError, match="offset order"):
        state.apply(Receipt("b", A.RECEIVE, (5,)), 3)
    with pytest.raises(ValueError):
        state.advance_data_to(2)
    with pytest.raises(ValueError):
        state.advance_receipts_to(1)
    state.advance_receipts_to(10)
    assert state.receipts_offset == 10
    with pytest.raises(ValueError):
        QueueState(dedupe_window=0)


def test_settled_offsets_below_the_floor_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queuestate, "_TRIM_MIN", 8)
    f = Feeder()
    f.add(*(entry(i) for i in range(30)))
    f.purge(20)
    assert f.state.floor() == 20
    assert len(f.state._codes) == 10  # noqa: SLF001 - memory bound is the point of this test
    assert f.state.status(3) == OffsetStatus(OffsetState.REMOVED)  # action no longer kept
    assert f.state.status(25).state is OffsetState.PENDING
    assert f.claim(3).lost == (3,)
    assert f.order() == list(range(20, 30))


# ---------------------------------------------------------------------------------------------
# Headers -> entries
# ---------------------------------------------------------------------------------------------


def test_from_record_reads_the_envelope_headers() -> None:
    message = Message(
        id=MessageId(uuid.UUID(GUID), 77),
        correlation_id=MessageId(uuid.UUID(GUID), 1),
        priority=6,
        time_to_be_received=2.0,
        sent_time=dt.datetime.fromtimestamp(1_700_000_000, dt.UTC),
        not_before=dt.datetime.fromtimestamp(1_700_000_000.5, dt.UTC),
    )
    record = encode_message(message)
    e = IndexEntry.from_record(42, len(record.value), record.headers)
    assert e == IndexEntry(
        42, 6, mid(77), mid(1), 1_700_000_002_000, 1_700_000_000_500, len(record.value), mid(77)
    )
    assert e.position == (-6, 42) and not e.poison


def _headers(**overrides: bytes | None) -> list[tuple[str, bytes | None]]:
    base = {HEADER_VERSION: b"1", HEADER_ID: mid(3).encode(), HEADER_PRIORITY: b"4"}
    return [(k, v) for k, v in (base | overrides).items() if v is not None]


@pytest.mark.parametrize(
    ("headers", "size", "poison"),
    [
        (_headers(), 50, False),
        (_headers(**{HEADER_PRIORITY: None}), 50, False),  # default priority 3
        (_headers(**{HEADER_VERSION: None}), 50, True),
        (_headers(**{HEADER_VERSION: b"x"}), 50, True),
        (_headers(**{HEADER_VERSION: b"0"}), 50, True),
        (_headers(**{HEADER_ID: None}), 50, True),
        (_headers(**{HEADER_ID: b"not-an-id"}), 50, True),
        (_headers(**{HEADER_ID: f"{GUID}\\4294967296".encode()}), 50, True),
        (_headers(**{HEADER_ID: f"{GUID}\\007".encode()}), 50, True),
        (_headers(**{HEADER_ID: b"\xff\xfe"}), 50, True),
        (_headers(**{HEADER_PRIORITY: b"8"}), 50, True),
        (_headers(), 9, True),  # shorter than the single-object header
        (None, 0, True),
    ],
)
def test_from_record_flags_poison(headers: list | None, size: int, poison: bool) -> None:
    e = IndexEntry.from_record(1, size, headers)
    assert e.poison is poison
    if poison:
        assert e.dedupe_key == "" and e.priority == 0
    else:
        assert e.priority in (3, 4) and e.dedupe_key == mid(3)


def test_from_record_normalises_upper_case_ids() -> None:
    e = IndexEntry.from_record(1, 50, _headers(**{HEADER_ID: mid(3).upper().encode()}))
    assert e.message_id == mid(3) and not e.poison


# ---------------------------------------------------------------------------------------------
# Model-based tests: random logs, random interleavings
# ---------------------------------------------------------------------------------------------

MODEL_NOW = 100
WINDOW = 4


@dataclass(frozen=True)
class Rec:
    offset: int
    priority: int
    key: int
    poison: bool
    not_before: int | None
    expires: int | None

    def entry(self) -> IndexEntry:
        if self.poison:
            return entry(self.offset, poison=True)
        return entry(
            self.offset,
            self.priority,
            key=self.key,
            expires=self.expires,
            not_before=self.not_before,
            size=self.offset + 1,
        )


@dataclass
class Model:
    """The reference: recomputed from scratch over the log prefixes read so far."""

    data: list[Rec] = field(default_factory=list)
    receipts: list[Receipt] = field(default_factory=list)

    def run(self) -> dict:
        named: dict[int, int] = {}
        purge_floor = 0
        verdicts = []
        incomplete: dict[str, tuple[int, ...]] = {}
        for r in self.receipts:
            if r.action is A.COMPLETED:
                incomplete.pop(r.completes, None)  # type: ignore[arg-type]
                verdicts.append(((), ()))
                continue
            won, lost = [], []
            for o in dict.fromkeys(r.offsets):
                if o < purge_floor or o in named:
                    lost.append(o)
                else:
                    won.append(o)
                    named[o] = r.action
            if r.purge_below is not None:
                purge_floor = max(purge_floor, r.purge_below)
            if won and r.action.is_system:
                incomplete[r.claim_id] = tuple(won)
            verdicts.append((tuple(won), tuple(lost)))
        dups = set()
        for i, rec in enumerate(self.data):
            if rec.poison:
                continue
            if any(
                not p.poison and p.key == rec.key and rec.offset - p.offset <= WINDOW
                for p in self.data[:i]
            ):
                dups.add(rec.offset)

        def removed(o: int) -> bool:
            return o in named or o < purge_floor

        pending = [r for r in self.data if r.offset not in dups and not removed(r.offset)]
        messages = [r for r in pending if not r.poison]
        visible = [
            r
            for r in messages
            if (r.not_before is None or r.not_before <= MODEL_NOW)
            and (r.expires is None or r.expires > MODEL_NOW)
        ]
        by_offset = {r.offset: r for r in self.data}
        top = max([r.offset for r in self.data] + list(named) + [purge_floor, 0]) + 3
        status = {}
        for o in range(top):
            if removed(o):
                status[o] = (OffsetState.REMOVED, named.get(o, A.PURGE))
            elif o in by_offset:
                rec = by_offset[o]
                state = (
                    OffsetState.POISON
                    if rec.poison
                    else OffsetState.DUPLICATE
                    if o in dups
                    else OffsetState.PENDING
                )
                status[o] = (state, None)
            else:
                status[o] = (OffsetState.UNKNOWN, None)
        return {
            "verdicts": verdicts,
            "candidates": [
                r.offset for r in sorted(visible, key=lambda r: (-r.priority, r.offset))
            ],
            "expired": sorted(
                r.offset for r in messages if r.expires is not None and r.expires <= MODEL_NOW
            ),
            "poisoned": [r.offset for r in pending if r.poison],
            "count": len(messages),
            "bytes": sum(r.offset + 1 for r in messages),
            "incomplete": incomplete,
            "status": status,
        }


def observe(state: QueueState, verdicts: list[ClaimOutcome], top: int) -> dict:
    return {
        "verdicts": [(v.won, v.lost) for v in verdicts],
        "candidates": [e.offset for e in state.candidates(MODEL_NOW)],
        "expired": [e.offset for e in state.expired(MODEL_NOW)],
        "poisoned": [e.offset for e in state.poisoned()],
        "count": state.pending_count(),
        "bytes": state.pending_bytes,
        "incomplete": {c.receipt.claim_id: c.offsets for c in state.incomplete_claims()},
        "status": {o: (s.state, s.action) for o in range(top) for s in [state.status(o)]},
    }


@st.composite
def data_logs(draw: st.DrawFn) -> list[Rec]:
    records, offset = [], 0
    for _ in range(draw(st.integers(0, 25))):
        offset += draw(st.sampled_from([1, 1, 1, 2]))  # some gaps
        records.append(
            Rec(
                offset - 1,
                draw(st.integers(0, 7)),
                draw(st.integers(0, 6)),  # few keys: duplicates happen
                draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()),
                draw(st.sampled_from([None, None, 50, 150])),
                draw(st.sampled_from([None, None, 80, 200])),
            )
        )
    return records


@st.composite
def receipt_logs(draw: st.DrawFn, top: int) -> list[Receipt]:
    receipts: list[Receipt] = []
    for i in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["claim"] * 6 + ["system"] * 2 + ["purge", "completed"]))
        if kind == "purge":
            receipts.append(Receipt(f"r{i}", A.PURGE, purge_below=draw(st.integers(0, top))))
        elif kind == "completed":
            system = [r.claim_id for r in receipts if r.action.is_system]
            target = draw(st.sampled_from(system)) if system else "none"
            receipts.append(Receipt(f"r{i}", A.COMPLETED, completes=target))
        else:
            offsets = tuple(draw(st.lists(st.integers(0, top), min_size=1, max_size=3)))
            action = (
                A.RECEIVE
                if kind == "claim"
                else draw(st.sampled_from([A.EXPIRE, A.MOVE, A.REJECT, A.POISON]))
            )
            receipts.append(Receipt(f"r{i}", action, offsets, target="t"))
    return receipts


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Rec], list[Receipt], list[bool], list[bool]]:
    data = draw(data_logs())
    top = (data[-1].offset if data else 0) + 4
    receipts = draw(receipt_logs(top))
    n = len(data) + len(receipts)
    order_a = draw(st.permutations([True] * len(data) + [False] * len(receipts)))
    order_b = draw(st.permutations([True] * len(data) + [False] * len(receipts)))
    assert len(order_a) == n
    return data, receipts, list(order_a), list(order_b)


def replay(
    data: list[Rec], receipts: list[Receipt], order: list[bool], check: bool
) -> tuple[QueueState, list[ClaimOutcome]]:
    """Feed both logs in the given interleaving (True = next data record); compare to the model."""
    state = QueueState(dedupe_window=WINDOW)
    model = Model()
    verdicts: list[ClaimOutcome] = []
    data_it: Iterator[Rec] = iter(data)
    receipt_it: Iterator[tuple[int, Receipt]] = iter(enumerate(receipts))
    for is_data in order:
        if is_data:
            rec = next(data_it)
            state.add(rec.entry())
            model.data.append(rec)
        else:
            offset, receipt = next(receipt_it)
            verdicts.append(state.apply(receipt, offset * 2))  # gaps in the receipts log too
            model.receipts.append(receipt)
        if check:
            expected = model.run()
            top = max(expected["status"]) + 1 if expected["status"] else 3
            assert observe(state, verdicts, top) == expected
    return state, verdicts


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_state_matches_the_reference_model_at_every_step(
    scenario: tuple[list[Rec], list[Receipt], list[bool], list[bool]],
) -> None:
    data, receipts, order, _ = scenario
    replay(data, receipts, order, check=True)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_any_interleaving_reaches_the_same_verdicts(
    scenario: tuple[list[Rec], list[Receipt], list[bool], list[bool]],
) -> None:
    data, receipts, order_a, order_b = scenario
    state_a, verdicts_a = replay(data, receipts, order_a, check=False)
    state_b, verdicts_b = replay(data, receipts, order_b, check=False)
    top = (data[-1].offset if data else 0) + 10
    assert observe(state_a, verdicts_a, top) == observe(state_b, verdicts_b, top)
    assert state_a.floor() == state_b.floor()
    assert state_a.data_offset == state_b.data_offset
    assert state_a.receipts_offset == state_b.receipts_offset


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.data())
def test_a_cursor_walk_sees_every_message_that_stays(
    scenario: tuple[list[Rec], list[Receipt], list[bool], list[bool]], data: st.DataObject
) -> None:
    records, _, _, _ = scenario
    f = Feeder(QueueState(dedupe_window=WINDOW))
    f.add(*(r.entry() for r in records))
    start = [e.offset for e in f.state.candidates(MODEL_NOW)]
    walked: list[int] = []
    taken: set[int] = set()
    position = None
    while (current := f.state.next_after(position, MODEL_NOW)) is not None:
        walked.append(current.offset)
        position = current.position
        remaining = [o for o in start if o not in taken and o not in walked]
        if remaining and data.draw(st.booleans()):  # another receiver takes one
            victim = data.draw(st.sampled_from(remaining))
            f.claim(victim)
            taken.add(victim)
    assert walked == [o for o in start if o not in taken]


# ---------------------------------------------------------------------------------------------
# Micro-benchmark (printed, not asserted): pytest -s -k benchmark
# ---------------------------------------------------------------------------------------------


def _bench(n: int) -> Iterable[str]:
    entries = [entry(i, i % 8, size=200) for i in range(n)]
    receipts = [Receipt(f"c{i}", A.RECEIVE, (i,)) for i in range(n)]
    state = QueueState()
    t0 = time.perf_counter()
    for e in entries:
        state.add(e)
    t1 = time.perf_counter()
    first = state.peek_first(NOW)
    t2 = time.perf_counter()
    for i, r in enumerate(receipts):
        state.apply(r, i)
    t3 = time.perf_counter()
    yield f"{n} adds {1e6 * (t1 - t0) / n:.2f} us/op"
    assert first is not None
    yield f"first peek_first over {n} entries {1e6 * (t2 - t1):.1f} us (offset {first.offset})"
    yield f"{n} claims {1e6 * (t3 - t2) / n:.2f} us/op"

    state = QueueState()
    for e in entries:
        state.add(e)
    t4 = time.perf_counter()
    received = 0
    while (head := state.peek_first(NOW)) is not None:
        state.apply(Receipt("x", A.RECEIVE, (head.offset,)), received)
        received += 1
    t5 = time.perf_counter()
    yield f"{received} peek_first+claim in receive order {1e6 * (t5 - t4) / n:.2f} us/op"


def test_benchmark_prints_timings(capsys: pytest.CaptureFixture[str]) -> None:
    lines = list(_bench(100_000))
    with capsys.disabled():
        print("\nqueuestate micro-benchmark:", "; ".join(lines))
