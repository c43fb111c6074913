"""Unit tests for facade.state.queuestate: the arbitration state machine and queue view."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from facade.state import queuestate
from facade.model.envelope import HEADER_ID, HEADER_PRIORITY, HEADER_VERSION, encode_message
from facade.model.message import Message, MessageId
from facade.state.queuestate import (
    DEDUPE_WINDOW,
    ClaimOutcome,
    IndexEntry,
    OffsetState,
    OffsetStatus,
    QueueState,
)
from facade.model.receipts import Receipt, ReceiptAction

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

    def complete(self, claim_id: str, *offsets: int) -> ClaimOutcome:
        self.counter += 1
        return self.apply(Receipt(f"d{self.counter}", A.COMPLETED, offsets, completes=claim_id))

    def lock(self, *offsets: int, lease: int = 1000, action: ReceiptAction = A.LOCK,
             time_ms: int = NOW) -> ClaimOutcome:
        self.counter += 1
        return self.apply(Receipt(f"l{self.counter}", action, offsets, time_ms=time_ms,
                                  lease_ms=lease))

    def release(self, lock_id: str, *offsets: int) -> ClaimOutcome:
        self.counter += 1
        return self.apply(Receipt(f"u{self.counter}", A.RELEASE, offsets, completes=lock_id,
                                  time_ms=NOW, reason="test"))

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


def test_head_candidates_stay_within_the_highest_pending_priority() -> None:
    """A contended receiver spreads over these (QueueView.pick_head): never a lower priority
    while a higher one is pending, at most ``limit``, in receive order."""
    f = Feeder()
    f.add(entry(0, 3), entry(1, 7), entry(2, 3), entry(3, 7), entry(4, 7), entry(5, 3))
    assert [e.offset for e in f.state.head_candidates(NOW, 8)] == [1, 3, 4]
    assert [e.offset for e in f.state.head_candidates(NOW, 2)] == [1, 3]
    f.claim(1, 3, 4)
    assert [e.offset for e in f.state.head_candidates(NOW, 8)] == [0, 2, 5]
    f.claim(0, 2, 5)
    assert f.state.head_candidates(NOW, 8) == []


def test_candidates_from_a_start_continue_in_receive_order() -> None:
    """A batch that starts at a spread pick takes it and what follows it in receive order."""
    f = Feeder()
    f.add(entry(0, 3), entry(1, 7), entry(2, 3), entry(3, 7), entry(4, 3))
    start = f.state.by_lookup_id(3)
    assert [e.offset for e in f.state.candidates(NOW, start=start)] == [3, 0, 2, 4]
    first = f.state.by_lookup_id(0)
    assert [e.offset for e in f.state.candidates(NOW, start=first)] == [0, 2, 4]


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


def test_receive_first_takes_the_first_pending_of_its_list_and_leaves_the_rest() -> None:
    """Competing receivers that name the same head candidates each get one: the head as of
    their receipt's place in the log (RECEIVE_FIRST)."""
    f = Feeder()
    f.add(*(entry(n) for n in range(5)))
    outcomes = [f.claim(0, 1, 2, 3, action=A.RECEIVE_FIRST) for _ in range(4)]
    assert [o.won for o in outcomes] == [(0,), (1,), (2,), (3,)]
    assert [o.lost for o in outcomes] == [(), (0,), (0, 1), (0, 1, 2)]
    assert f.order() == [4]  # untouched though named after a winner
    assert f.state.status(2) == OffsetStatus(OffsetState.REMOVED, A.RECEIVE)
    assert f.claim(0, 1, 2, 3, action=A.RECEIVE_FIRST) == ClaimOutcome("c5", (), (0, 1, 2, 3))


def test_receive_first_takes_a_released_message_back_with_its_abort_count() -> None:
    f = Feeder()
    f.add(entry(0), entry(1))
    lock = f.lock(0)
    assert f.claim(0, 1, action=A.RECEIVE_FIRST).won == (1,)
    f.release(lock.claim_id)
    again = f.claim(0, action=A.RECEIVE_FIRST)
    assert again.won == (0,) and again.abort_count(0) == 1


def test_lock_first_holds_the_first_pending_of_its_list_and_settles_like_a_lock() -> None:
    f = Feeder()
    f.add(*(entry(n) for n in range(4)))
    first = f.lock(0, 1, 2, action=A.LOCK_FIRST)
    second = f.lock(0, 1, 2, action=A.LOCK_FIRST)
    assert (first.won, first.lost) == ((0,), ())
    assert (second.won, second.lost) == ((1,), (0,))
    assert f.order() == [2, 3]  # named after the winners, left alone
    assert f.state.status(0).state is OffsetState.LOCKED
    f.release(first.claim_id)  # an aborted delivery: the count rises, as for a LOCK
    again = f.lock(0, 2, action=A.LOCK_FIRST)
    assert again.won == (0,) and again.abort_count(0) == 1
    f.complete(second.claim_id)
    assert f.state.status(1) == OffsetStatus(OffsetState.REMOVED, A.LOCK)


def test_receive_first_verdict_does_not_depend_on_the_data_read() -> None:
    """A process that has not read the data records yet reaches the same verdicts."""
    ahead, read = Feeder(), Feeder()
    read.add(*(entry(n) for n in range(4)))
    for f in (ahead, read):
        f.claim(1)
    verdicts = [[f.claim(0, 1, 2, action=A.RECEIVE_FIRST).won for _ in range(3)]
                for f in (ahead, read)]
    assert verdicts[0] == verdicts[1] == [(0,), (2,), ()]
    ahead.add(*(entry(n) for n in range(4)))
    assert ahead.order() == read.order() == [3]


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


def test_dedupe_keys_that_left_the_window_are_dropped_and_their_messages_still_found() -> None:
    window = 100
    f = Feeder(QueueState(dedupe_window=window))
    f.add(*(entry(o) for o in range(10 * window)))
    # Pruned in bulk every quarter window: never more than 1.25 windows of keys.
    assert len(f.state._dedupe) <= window + window // 4 + 1
    for offset in (0, 5 * window, 10 * window - 1):  # far out of the window, and inside it
        found = f.state.by_message_id(mid(offset))
        assert found is not None and found.offset == offset
    f.add(entry(10 * window, key=0))  # key 0 again, long after the window: not a duplicate
    assert f.state.status(10 * window).state is OffsetState.PENDING
    assert f.state.by_message_id(mid(0)).offset == 0  # type: ignore[union-attr]
    f.claim(0)
    assert f.state.by_message_id(mid(0)).offset == 10 * window  # type: ignore[union-attr]


def test_a_message_left_far_behind_keeps_one_chunk_of_the_pending_index() -> None:
    f = Feeder()
    f.add(*(entry(o) for o in range(1000)))
    assert len(f.state._entries._chunks) == 1000 // 64 + 1
    f.claim(*[o for o in range(1000) if o != 5])
    assert len(f.state._entries._chunks) == 1  # the chunk of offset 5 alone
    assert [e.offset for e in f.state._entries.values()] == [5]
    assert f.state.by_lookup_id(5) is not None and f.state.by_lookup_id(6) is None
    f.claim(5)
    assert not f.state._entries._chunks


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
# Locks: peek-lock receive and prefetch
# ---------------------------------------------------------------------------------------------


def test_a_lock_holds_the_message_until_completed() -> None:
    f = Feeder()
    f.add(entry(0), entry(1), entry(2, 7))
    lock = f.lock(2)
    assert lock.won == (2,) and lock.abort_counts == ()
    assert f.order() == [0, 1]  # held: not receivable, not peekable
    assert f.state.pending_count() == 3 and f.state.locked_count == 1  # still in the queue
    assert f.state.pending_bytes == 300
    assert f.state.status(2) == OffsetStatus(OffsetState.LOCKED, A.LOCK, entry(2, 7))
    assert f.state.by_lookup_id(2) is None and f.state.by_message_id(mid(2)) is None
    assert f.claim(2).lost == (2,)  # nobody else gets it
    assert f.lock(2).lost == (2,)
    (held,) = f.state.locks()
    assert held.claim_id == lock.claim_id and held.offsets == (2,)
    assert held.deadline_ms == NOW + 1000 and f.state.next_lock_deadline_ms() == NOW + 1000
    done = f.complete(lock.claim_id, 2)
    assert done.won == (2,) and done.lost == ()
    assert f.state.status(2) == OffsetStatus(OffsetState.REMOVED, A.LOCK)
    assert f.state.pending_count() == 2 and f.state.locked_count == 0
    assert f.state.locks() == [] and f.state.next_lock_deadline_ms() is None
    assert f.state.incomplete_claims() == []


def test_a_release_puts_the_message_back_in_its_place_with_its_abort_count() -> None:
    f = Feeder()
    f.add(entry(0, 3), entry(1, 3), entry(2, 3), entry(3, 5))
    first = f.lock(3)
    second = f.lock(1)
    assert f.order() == [0, 2]
    released = f.release(second.claim_id, 1)
    assert released.won == (1,) and released.abort_counts == (1,)
    assert f.order() == [0, 1, 2]  # back between 0 and 2, not at the end
    assert f.state.abort_count(1) == 1 and f.state.status(1).state is OffsetState.PENDING
    again = f.lock(1)
    assert again.abort_counts == (1,) and f.state.abort_count(1) == 1
    assert f.release(again.claim_id).abort_counts == (2,)  # no offsets named: all it holds
    f.release(first.claim_id, 3)
    assert f.order() == [3, 0, 1, 2]
    received = f.claim(1)
    assert received.abort_count(1) == 2 and received.abort_count(0) == 0
    assert f.state.abort_count(1) == 0  # gone with the message


def test_a_released_prefetch_keeps_its_abort_count() -> None:
    """Prefetched messages released by a clean close were never handed out."""
    f = Feeder()
    f.add(entry(0), entry(1), entry(2))
    batch = f.lock(0, 1, 2, action=A.PREFETCH)
    assert f.complete(batch.claim_id, 0).won == (0,)
    back = f.release(batch.claim_id, 1, 2)
    assert back.won == (1, 2) and back.abort_counts == ()
    assert f.order() == [1, 2] and f.state.abort_count(1) == 0
    assert f.state.status(0) == OffsetStatus(OffsetState.REMOVED, A.PREFETCH)


def test_settling_a_lock_that_no_longer_holds_the_offset_loses() -> None:
    f = Feeder()
    f.add(entry(0), entry(1))
    lock = f.lock(0)
    other = f.lock(1)
    assert f.release(other.claim_id, 0).lost == (0,)  # another lock's offset
    assert f.release("no-such-lock", 0) == ClaimOutcome(f"u{f.counter}", (), (0,))
    assert f.complete(lock.claim_id, 0).won == (0,)
    assert f.complete(lock.claim_id, 0).lost == (0,)  # duplicate from a producer retry
    assert f.release(lock.claim_id, 0).lost == (0,)  # the holder's late release
    assert f.state.status(0).action is A.LOCK


@pytest.mark.parametrize("holder_first", [True, False])
def test_holder_completion_and_expiry_release_race_in_log_order(holder_first: bool) -> None:
    f = Feeder()
    f.add(entry(0))
    lock = f.lock(0, lease=10)
    assert [h.claim_id for h in f.state.expired_locks(NOW + 9)] == []
    assert [h.claim_id for h in f.state.expired_locks(NOW + 10)] == [lock.claim_id]
    complete = Receipt("holder", A.COMPLETED, (0,), completes=lock.claim_id)
    release = Receipt("expirer", A.RELEASE, (0,), completes=lock.claim_id,
                      reason="lease expired")
    first, second = (complete, release) if holder_first else (release, complete)
    assert f.apply(first).won == (0,)
    assert f.apply(second).lost == (0,)
    assert f.state.expired_locks(NOW + 10) == []
    if holder_first:
        assert f.state.status(0).state is OffsetState.REMOVED and f.order() == []
    else:
        assert f.order() == [0] and f.state.abort_count(0) == 1


def test_a_duplicated_lock_receipt_takes_nothing_even_after_a_release() -> None:
    f = Feeder()
    f.add(entry(0))
    lock = Receipt("l", A.LOCK, (0,), time_ms=NOW, lease_ms=100)
    assert f.apply(lock).won == (0,)
    f.release("l", 0)
    assert f.apply(lock) == ClaimOutcome("l", (), (0,))  # the producer's retry, applied later
    assert f.order() == [0]


def test_the_lock_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queuestate, "LOCK_MEMORY", 2)
    f = Feeder()
    f.add(entry(0), entry(1))
    first = Receipt("first", A.LOCK, (0,), lease_ms=5)
    f.apply(first)
    f.release("first")
    f.apply(Receipt("b", A.LOCK, (1,), lease_ms=5))
    f.apply(Receipt("c", A.LOCK, (1,), lease_ms=5))
    assert f.apply(first).won == (0,)  # forgotten: only the last LOCK_MEMORY ids are kept


def test_purge_leaves_locked_messages_alone() -> None:
    f = Feeder()
    f.add(entry(0), entry(1), entry(2))
    lock = f.lock(1)
    assert f.purge(3).purged == 2
    assert f.state.status(1).state is OffsetState.LOCKED and f.state.pending_count() == 1
    f.release(lock.claim_id, 1)
    assert f.order() == [1]  # back, below the purge floor
    f2 = Feeder()
    f2.add(entry(0), entry(1))
    lock = f2.lock(0)
    f2.purge(2)
    f2.release(lock.claim_id)
    assert f2.purge(2).purged == 1  # a second MQPurgeQueue removes it
    assert f2.order() == [] and f2.state.status(0).action is A.PURGE


def test_lock_and_release_read_before_the_data_after_a_purge() -> None:
    """Receipts may run ahead of the data: the held, purged-around, released offset is
    pending when its record arrives, exactly as for a reader that read the data first."""
    early = Feeder()
    lock = early.lock(1, 3)
    early.purge(5)
    early.release(lock.claim_id, 1)
    assert early.state.status(1) == OffsetStatus(OffsetState.UNKNOWN)
    assert early.state.status(3).state is OffsetState.LOCKED
    assert early.state.status(2) == OffsetStatus(OffsetState.REMOVED, A.PURGE)
    assert early.state.floor() == 1
    early.add(entry(0), entry(1), entry(3), entry(6))
    assert early.order() == [1, 6]
    assert early.state.status(3) == OffsetStatus(OffsetState.LOCKED, A.LOCK, entry(3))
    assert early.state.abort_count(1) == 1
    late = Feeder()
    late.add(entry(0), entry(1), entry(3), entry(6))
    lock = late.lock(1, 3)
    late.purge(5)
    late.release(lock.claim_id, 1)
    assert late.order() == early.order()
    assert [late.state.status(o) for o in range(8)] == [early.state.status(o) for o in range(8)]
    assert late.state.pending_count() == early.state.pending_count() == 3


def test_a_lock_settled_by_a_system_claim() -> None:
    """An expired PREFETCH is dead-lettered by a REJECT naming it."""
    f = Feeder()
    f.add(entry(0), entry(1))
    batch = f.lock(0, 1, action=A.PREFETCH)
    reject = f.apply(Receipt("r", A.REJECT, (0, 1), completes=batch.claim_id, target="dlq"))
    assert reject.won == (0, 1)
    (claim,) = f.state.incomplete_claims()
    assert claim.receipt.claim_id == "r" and claim.offsets == (0, 1)
    assert f.state.status(0) == OffsetStatus(OffsetState.REMOVED, A.REJECT)
    f.complete("r")
    assert f.state.incomplete_claims() == [] and f.state.pending_count() == 0


def test_retries_exhausted_and_the_move_keeps_the_count() -> None:
    f = Feeder()
    f.add(entry(0), entry(1), entry(2, poison=True))
    for _ in range(3):
        f.release(f.lock(0).claim_id)
    f.release(f.lock(1).claim_id)
    f.release(f.lock(2).claim_id)
    assert [e.offset for e in f.state.retries_exhausted(2)] == [0]
    assert [e.offset for e in f.state.retries_exhausted(0)] == [0, 1]  # not the poison record
    move = f.claim(0, action=A.MOVE, target="poison")
    (claim,) = f.state.incomplete_claims()
    assert move.abort_counts == (3,) and claim.abort_count(0) == 3 and claim.abort_count(5) == 0


def test_held_offsets_hold_the_floors() -> None:
    f = Feeder(QueueState(dedupe_window=1))
    f.add(*(entry(i) for i in range(5)))
    lock = f.lock(1)
    f.claim(0, 2, 3, 4)
    assert f.state.floor() == 1 and f.state.retention_floor() == 1
    f.complete(lock.claim_id)
    assert f.state.floor() == 5


def test_a_held_duplicate_below_the_floor_holds_it_back() -> None:
    f = Feeder()
    f.add(entry(0, key=1), entry(1, key=1), *(entry(i) for i in range(2, 12)))
    f.claim(0, *range(2, 12))
    assert f.state.floor() == 12  # 1 is a duplicate: not pending
    lock = f.lock(1)  # receipts may name any offset: a duplicate is won
    assert lock.won == (1,) and f.state.floor() == 1
    f.release(lock.claim_id)
    assert f.state.status(1) == OffsetStatus(OffsetState.DUPLICATE)
    assert f.state.floor() == 12


def test_held_offsets_keep_their_codes_when_the_floor_trims(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queuestate, "_TRIM_MIN", 4)
    f = Feeder()
    f.add(entry(0, key=1), entry(1, key=1), entry(2), *(entry(i) for i in range(3, 12)))
    lock = f.lock(1, 2)
    f.claim(0, *range(3, 12))
    assert f.state.floor() == 1
    f.release(lock.claim_id)
    assert f.state.status(1) == OffsetStatus(OffsetState.DUPLICATE)
    assert f.order() == [2] and f.state.floor() == 2


def test_a_released_entry_is_reinserted_after_its_lane_was_compacted() -> None:
    f = Feeder()
    f.add(*(entry(i, 3) for i in range(300)))
    lock = f.lock(5)
    it = f.state.candidates(NOW)
    assert [next(it).offset for _ in range(3)] == [0, 1, 2]
    f.claim(*(o for o in range(3, 250) if o != 5))  # compacts the lane: 5 is no longer in it
    f.release(lock.claim_id)
    assert [e.offset for e in it] == [5, *range(250, 300)]  # a scan in progress sees it
    assert f.order() == [0, 1, 2, 5, *range(250, 300)]


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
UNIVERSE = 64  # the model's offsets: beyond every offset a scenario names
RETRIES = 1  # receive_retry_count for the model's retries_exhausted check


@dataclass(frozen=True)
class Rec:
    offset: int
    priority: int
    key: int
    poison: bool
    not_before: int | None
    expires: int | None
    origin: str | None = None  # a copy from another queue: dedupe key ``id@origin``

    def entry(self) -> IndexEntry:
        if self.poison:
            return entry(self.offset, poison=True)
        if self.origin is not None:
            return IndexEntry(self.offset, self.priority, mid(self.key), None, self.expires,
                              self.not_before, self.offset + 1,
                              f"{mid(self.key)}@{self.origin}")
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
    """The reference: recomputed from scratch over the log prefixes read so far.

    Every offset of a small universe has an explicit state (pending with an abort count, held
    by a lock, or removed by an action), so purges of offsets not written yet need no floor."""

    data: list[Rec] = field(default_factory=list)
    receipts: list[Receipt] = field(default_factory=list)

    def run(self) -> dict:
        aborts = dict.fromkeys(range(UNIVERSE), 0)
        holder: dict[int, str] = {}  # offset -> lock claim id
        removed: dict[int, ReceiptAction] = {}
        locks: dict[str, tuple[Receipt, dict[int, None]]] = {}
        seen_locks: set[str] = set()
        verdicts = []
        incomplete: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}

        def counts(values: list[int]) -> tuple[int, ...]:
            return tuple(values) if any(values) else ()

        for r in self.receipts:
            named = tuple(dict.fromkeys(r.offsets))
            if r.completes is not None:
                if r.completes not in locks:
                    if r.action is A.COMPLETED:
                        incomplete.pop(r.completes, None)
                    verdicts.append(((), named, ()))
                    continue
                lock, held = locks[r.completes]
                won, lost, got = [], [], []
                for o in named or tuple(held):
                    if o not in held:
                        lost.append(o)
                        continue
                    del held[o]
                    del holder[o]
                    won.append(o)
                    if r.action is A.RELEASE:
                        aborts[o] += lock.action is A.LOCK
                        got.append(aborts[o])
                    else:
                        removed[o] = lock.action if r.action is A.COMPLETED else r.action
                        got.append(aborts[o])
                        aborts[o] = 0
                if not held:
                    del locks[r.completes]
                if won and r.action.is_system:
                    incomplete[r.claim_id] = (tuple(won), counts(got))
                verdicts.append((tuple(won), tuple(lost), counts(got)))
                continue
            if r.action.is_lock:
                if r.claim_id in seen_locks:
                    verdicts.append(((), named, ()))
                    continue
                seen_locks.add(r.claim_id)
            won, lost, got = [], [], []
            for o in named:
                if o in removed or o in holder:
                    lost.append(o)
                    continue
                won.append(o)
                got.append(aborts[o])
                if r.action.is_lock:
                    holder[o] = r.claim_id
                else:
                    removed[o] = r.action
                    aborts[o] = 0
            if r.purge_below is not None:
                for o in range(min(r.purge_below, UNIVERSE)):
                    if o not in removed and o not in holder:
                        removed[o] = A.PURGE
                        aborts[o] = 0
            if won and r.action.is_lock:
                locks[r.claim_id] = (r, dict.fromkeys(won))
            elif won and r.action.is_system:
                incomplete[r.claim_id] = (tuple(won), counts(got))
            verdicts.append((tuple(won), tuple(lost), counts(got)))

        dups = set()
        for i, rec in enumerate(self.data):
            if rec.poison:
                continue
            if any(
                not p.poison and (p.key, p.origin) == (rec.key, rec.origin) and rec.offset - p.offset <= WINDOW
                for p in self.data[:i]
            ):
                dups.add(rec.offset)

        by_offset = {r.offset: r for r in self.data}
        pending = [r for r in self.data
                   if r.offset not in dups and r.offset not in removed and r.offset not in holder]
        held_messages = [by_offset[o] for o in holder
                         if o in by_offset and o not in dups and not by_offset[o].poison]
        messages = [r for r in pending if not r.poison]
        visible = [
            r
            for r in messages
            if (r.not_before is None or r.not_before <= MODEL_NOW)
            and (r.expires is None or r.expires > MODEL_NOW)
        ]
        named_anywhere = [o for r in self.receipts for o in r.offsets]
        purges = [min(r.purge_below, UNIVERSE) for r in self.receipts if r.purge_below is not None]
        top = max([r.offset for r in self.data] + named_anywhere + purges + [0]) + 3
        status = {}
        for o in range(top):
            if o in removed:
                status[o] = (OffsetState.REMOVED, removed[o])
            elif o in holder:
                status[o] = (OffsetState.LOCKED, locks[holder[o]][0].action)
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
            "count": len(messages) + len(held_messages),
            "locked": len(held_messages),
            "bytes": sum(r.offset + 1 for r in messages + held_messages),
            "incomplete": incomplete,
            "status": status,
            "aborts": {o: aborts[o] for o in range(top) if aborts[o]},
            "locks": {c: tuple(held) for c, (_, held) in locks.items()},
            "expired_locks": [
                c for c, (lock, _) in locks.items()
                if lock.time_ms + (lock.lease_ms or 0) <= MODEL_NOW
            ],
            "exhausted": sorted(r.offset for r in messages if aborts[r.offset] > RETRIES),
        }


def observe(state: QueueState, verdicts: list[ClaimOutcome], top: int) -> dict:
    return {
        "verdicts": [(v.won, v.lost, v.abort_counts) for v in verdicts],
        "candidates": [e.offset for e in state.candidates(MODEL_NOW)],
        "expired": [e.offset for e in state.expired(MODEL_NOW)],
        "poisoned": [e.offset for e in state.poisoned()],
        "count": state.pending_count(),
        "locked": state.locked_count,
        "bytes": state.pending_bytes,
        "incomplete": {c.receipt.claim_id: (c.offsets, c.abort_counts)
                       for c in state.incomplete_claims()},
        "status": {o: (s.state, s.action) for o in range(top) for s in [state.status(o)]},
        "aborts": {o: n for o in range(top) if (n := state.abort_count(o))},
        "locks": {lock.claim_id: lock.offsets for lock in state.locks()},
        "expired_locks": [lock.claim_id for lock in state.expired_locks(MODEL_NOW)],
        "exhausted": [e.offset for e in state.retries_exhausted(RETRIES)],
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
                draw(st.sampled_from([None] * 6 + ["a", "b"])),  # copies of one id
            )
        )
    return records


@st.composite
def receipt_logs(draw: st.DrawFn, top: int) -> list[Receipt]:
    receipts: list[Receipt] = []
    kinds = (["claim"] * 6 + ["system"] * 2 + ["purge", "completed"] + ["lock"] * 3
             + ["prefetch", "release", "release", "complete_lock", "settle", "duplicate_lock"])
    offsets_of = st.lists(st.integers(0, top), min_size=1, max_size=3).map(tuple)
    for i in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(kinds))
        locks = [r for r in receipts if r.action.is_lock]
        lock_id = draw(st.sampled_from([r.claim_id for r in locks] + ["none"]))
        if kind == "purge":
            receipts.append(Receipt(f"r{i}", A.PURGE, purge_below=draw(st.integers(0, top))))
        elif kind == "completed":
            system = [r.claim_id for r in receipts if r.action.is_system]
            target = draw(st.sampled_from(system)) if system else "none"
            receipts.append(Receipt(f"r{i}", A.COMPLETED, completes=target))
        elif kind in ("lock", "prefetch"):
            receipts.append(Receipt(
                f"r{i}", A.LOCK if kind == "lock" else A.PREFETCH, draw(offsets_of),
                time_ms=draw(st.sampled_from([0, 60])), lease_ms=draw(st.sampled_from([10, 80]))))
        elif kind == "duplicate_lock" and locks:
            receipts.append(draw(st.sampled_from(locks)))  # a producer retry: same claim id
        elif kind in ("release", "complete_lock"):
            offsets = draw(st.just(()) | offsets_of)
            action = A.RELEASE if kind == "release" else A.COMPLETED
            receipts.append(Receipt(f"r{i}", action, offsets, completes=lock_id))
        elif kind == "settle":
            action = draw(st.sampled_from([A.EXPIRE, A.MOVE, A.REJECT, A.POISON]))
            receipts.append(Receipt(f"r{i}", action, draw(offsets_of), completes=lock_id,
                                    target="t"))
        else:
            action = (
                A.RECEIVE
                if kind == "claim"
                else draw(st.sampled_from([A.EXPIRE, A.MOVE, A.REJECT, A.POISON]))
            )
            receipts.append(Receipt(f"r{i}", action, draw(offsets_of), target="t"))
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
            assert_lookups_by_id_agree(state, top)
    return state, verdicts


def assert_lookups_by_id_agree(state: QueueState, top: int) -> None:
    """is_pending and in_queue agree with status() at every offset, and by_message_id gives, for each key, the first pending message with that id in receive
    order, as status() lists them: the id index must follow duplicates, dedupe-window
    expiry, locks and their releases, purges and snapshots."""
    for offset in range(-1, top + 3):
        status = state.status(offset)
        assert state.is_pending(offset) == status.is_pending, offset
        assert state.in_queue(offset) == (status.is_pending
                                          or status.state is OffsetState.LOCKED), offset
    pending = [s.entry for o in range(top) for s in [state.status(o)]
               if s.state is OffsetState.PENDING and s.entry is not None]
    for key in range(8):
        matches = [e for e in pending if e.message_id == mid(key)]
        expected = min(matches, key=lambda e: e.position).offset if matches else None
        found = state.by_message_id(mid(key))
        assert (found.offset if found else None) == expected, key


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
    assert_lookups_by_id_agree(state_a, top)
    assert_lookups_by_id_agree(state_b, top)
    if state_a.exportable:
        snapshot = state_a.export()
        assert snapshot is not None
        assert_lookups_by_id_agree(QueueState.from_snapshot(snapshot, WINDOW), top)
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
