"""Receive modes on a real broker: peek-lock (complete, abandon, lease expiry after a
SIGKILL, lock lost), poison after too many releases, and prefetch (two handles, close, crash).

Waits are generous: a lease of 2 s is waited for by receivers with timeouts of a minute, never
by sleeping for a tight deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from facade import (
    Acknowledgment,
    BrokerUnavailable,
    InvalidParameter,
    LockLost,
    Message,
    MessageClass,
    MessageLockedUnderTransaction,
    ReceiveTimeout,
)
from facade.manager import QueueManager
from facade.queues.peeklock import LockedMessage
from facade.state.queuestate import OffsetState
from facade.state.queueview import QueueView
from facade.model.receipts import ReceiptAction, decode_receipt
from facade.service import QueueManagerService
from facade.queues.systemactions import SystemActions
from tests.support.journal import fail_next_journal_write
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration

WAIT = 60.0  # seconds a receiver may wait for a lease of a few seconds to pass


def _send(q, *bodies: bytes, priority: int = 3) -> list[Message]:
    sent = [q.send(Message(body=body, priority=priority)) for body in bodies]
    q.send(Message(body=b"flush", priority=0), wait=True)  # the others are acknowledged too
    return sent


def _receipts(qm: QueueManager, q) -> list:
    """Every receipt of the queue, decoded, in log order (read by a fresh handle)."""
    view = qm.open_queue(q.format_name)._opened.open_view()
    view.catch_up()
    reader = qm.session.reader()
    reader.assign({q.destinations[0].topics.receipts: 0})
    found = []
    deadline = time.monotonic() + 30
    while len(found) < view.state.receipts_offset and time.monotonic() < deadline:
        found += [decode_receipt(r.value) for r in reader.poll(0.1)]
    reader.close()
    return found


def test_lock_then_complete_removes_it_with_one_receipt_each(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\locked", journal=True)
    admin = qm.create_queue(r".\private$\admin")
    sent = q.send(Message(body=b"work", admin_queue=admin.format_name,
                          acknowledge=Acknowledgment.POSITIVE_RECEIVE), wait=True)
    got = q.receive(timeout=10, lock=True, lease=30)
    assert isinstance(got, LockedMessage) and isinstance(got, Message)
    assert got.id == sent.id and got.body == b"work" and got.abort_count == 0
    assert got.lock_token and got.lease_expires is not None and got.lookup_id == 0
    other = qm.open_queue(r".\private$\locked")
    assert other.count() == 1  # still in the queue until completed ...
    with pytest.raises(ReceiveTimeout):
        other.receive(timeout=0.5)  # ... but nobody else gets it
    with pytest.raises(ReceiveTimeout):
        other.peek(timeout=0.5)
    with pytest.raises(MessageLockedUnderTransaction):
        other.receive_by_lookup_id(0)
    with pytest.raises(ReceiveTimeout):  # nothing was journaled or acknowledged yet
        admin.receive(timeout=0.5)
    q.complete(got)
    assert other.count() == 0
    journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\locked;JOURNAL")
    assert journal.receive(timeout=10).id == sent.id
    ack = admin.receive(timeout=10)
    assert ack.message_class is MessageClass.ACK_RECEIVE and ack.correlation_id == sent.id
    receipts = _receipts(qm, q)
    assert [r.action for r in receipts] == [ReceiptAction.LOCK, ReceiptAction.COMPLETED]
    assert receipts[0].lease_ms == 30_000 and receipts[1].completes == receipts[0].claim_id
    with pytest.raises(LockLost, match="removed by LOCK"):
        got.complete()  # settled already


def test_abandon_puts_it_back_in_its_place_with_abort_count_1(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\abandoned")
    first, second, third = _send(q, b"first", b"second", b"third")
    locked = q.receive(timeout=10, lock=True)
    assert locked.id == first.id
    other = qm.open_queue(r".\private$\abandoned")
    assert other.receive(timeout=10).id == second.id  # the lock does not block the others
    assert locked.abandon() is True
    fresh = qm.open_queue(r".\private$\abandoned")
    assert fresh.peek(timeout=10).id == first.id  # back in its MSMQ place: before "third"
    again = q.receive(timeout=10)
    assert again.id == first.id and again.abort_count == 1
    assert q.receive(timeout=10).id == third.id
    assert q.abandon(locked) is False  # its lock was settled already
    with pytest.raises(InvalidParameter, match="not received with receive\\(lock=True\\)"):
        q.complete(again)


def test_a_receiver_waiting_on_a_locked_message_gets_it_when_it_is_abandoned(
        qm: QueueManager) -> None:
    """A receive-only view stops reading receipts while its claims go uncontended; while it
    knows of a lock it keeps reading them, or it would only see the release when the lease
    passes."""
    q = qm.create_queue(r".\private$\waiting")
    first, second = _send(q, b"first", b"second")[:2]
    locked = q.receive(timeout=10, lock=True, lease=120)
    waiter = qm.open_queue(r".\private$\waiting")
    assert waiter.receive(timeout=10).id == second.id  # uncontended: would pause receipts
    assert waiter.receive(timeout=10).body == b"flush"
    with pytest.raises(ReceiveTimeout):
        waiter.receive(timeout=0.5)
    locked.abandon()
    started = time.monotonic()
    assert waiter.receive(timeout=WAIT).id == first.id
    assert time.monotonic() - started < 60, "the waiter only saw the release at lease expiry"


def test_a_complete_whose_verdict_was_not_read_is_finished_by_calling_it_again(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry reads the verdict of the COMPLETED already in the log: no second receipt,
    no false LockLost."""
    q = qm.create_queue(r".\private$\retried")
    q.send(Message(body=b"work"), wait=True)
    got = q.receive(timeout=10, lock=True)
    real_settle = QueueView.settle
    failed: list[str] = []

    def settle(view: QueueView, pending):  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(pending.receipt.claim_id)
            pending.record.wait(30)  # appended and acknowledged: it wins for every reader
            raise BrokerUnavailable("simulated: the verdict could not be read back")
        return real_settle(view, pending)

    monkeypatch.setattr(QueueView, "settle", settle)
    with pytest.raises(BrokerUnavailable):
        got.complete()
    got.complete()
    assert q.count() == 0
    actions = [r.action for r in _receipts(qm, q)]
    assert actions == [ReceiptAction.LOCK, ReceiptAction.COMPLETED]


def test_a_purge_leaves_a_locked_message_alone(qm: QueueManager) -> None:
    """MSMQ does not purge a message locked by a receive that is not committed."""
    q = qm.create_queue(r".\private$\purged")
    sent = _send(q, b"locked", b"other")[0]
    locked = q.receive(timeout=10, lock=True)
    assert locked.id == sent.id
    assert qm.open_queue(q.format_name).purge() == 2  # "other" and "flush"
    assert q.count() == 1
    locked.abandon()
    again = qm.open_queue(q.format_name).receive(timeout=10)
    assert again.id == sent.id and again.abort_count == 1


_LOCKER = textwrap.dedent("""
    import sys, time
    from facade.config import KmqConfig
    from facade.manager import QueueManager

    bootstrap, name, queue, mode = sys.argv[1:5]
    qm = QueueManager.open(KmqConfig.load(bootstrap_servers=bootstrap, queue_manager=name))
    if mode == "lock":
        q = qm.open_queue(queue)
        print(q.receive(timeout=60, lock=True, lease=2.0).body.decode(), flush=True)
    else:
        q = qm.open_queue(queue, prefetch=5, prefetch_lease=2.0)
        for _ in range(2):
            print(q.receive(timeout=60).body.decode(), flush=True)
    print("ready", flush=True)
    time.sleep(600)
""")


def _killed_after_taking(broker: BrokerEndpoint, qm: QueueManager, queue: str,
                         mode: str) -> list[str]:
    """Run a receiver process that locks (or prefetches) and SIGKILL it once it has; return
    the bodies it was handed."""
    process = subprocess.Popen(
        [sys.executable, "-c", _LOCKER, broker.bootstrap_servers, qm.name, queue, mode],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()},
        cwd=Path(__file__).resolve().parents[2])
    assert process.stdout is not None
    got = []
    while (line := process.stdout.readline().strip()) != "ready":
        assert line, "the receiver process died"
        got.append(line)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    return got


def test_a_lock_of_a_killed_receiver_is_released_after_its_lease(
        broker: BrokerEndpoint, qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\crash")
    sent, _ = _send(q, b"in flight", b"next")
    assert _killed_after_taking(broker, qm, q.format_name, "lock") == ["in flight"]
    survivor = qm.open_queue(r".\private$\crash")
    # The survivor notices the lease passed (before its pick) and releases it: at least once.
    others = []
    got = survivor.receive(timeout=WAIT, lock=True)
    while got.id != sent.id:  # it takes the others first while the lease runs
        others.append(got.body)
        got.complete()
        got = survivor.receive(timeout=WAIT, lock=True)
    assert others == [b"next", b"flush"][: len(others)]
    assert got.abort_count == 1
    got.complete()
    release = [r for r in _receipts(qm, q) if r.action is ReceiptAction.RELEASE]
    assert len(release) == 1 and release[0].reason.startswith("lease expired")


def test_complete_after_the_lease_passed_and_another_took_it_raises(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\late")
    sent = q.send(Message(body=b"slow work"), wait=True)
    slow = q.receive(timeout=10, lock=True, lease=2.0)
    other = qm.open_queue(r".\private$\late")
    taken = other.receive(timeout=WAIT, lock=True)  # waits until the lease passes
    assert taken.id == sent.id and taken.abort_count == 1
    with pytest.raises(LockLost, match="another receiver holds it now") as info:
        slow.complete()
    assert info.value.lookup_id == slow.lookup_id
    taken.complete()
    # Neither lost nor duplicated: gone from the queue, nothing in the dead-letter queue.
    assert other.count() == 0
    with pytest.raises(ReceiveTimeout):
        qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=0.5)


def test_a_message_released_too_often_goes_to_the_poison_subqueue(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\fragile", receive_retry_count=2)
    assert q.properties.receive_retry_count == 2
    sent = _send(q, b"poison pill", priority=7)[0]
    for attempt in range(3):  # delivered receive_retry_count + 1 times
        got = q.receive(timeout=10, lock=True)
        assert got.id == sent.id and got.abort_count == attempt
        got.abandon()
    # Released 3 times > 2: moved to ;poison by the next receiver (of any mode: this is a
    # plain receive) before its pick, instead of handed out.
    assert q.receive(timeout=10).body == b"flush"
    poison = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\fragile;poison")
    moved = poison.receive(timeout=10)
    assert moved.id == sent.id and moved.abort_count == 3 and moved.move_count == 1
    assert q.count() == 0


def test_a_lock_that_wins_a_message_released_too_often_moves_it(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver that picked before reading the last release (its check before the pick
    missed it) learns the count from its LOCK's verdict and moves the message instead."""
    monkeypatch.setattr(SystemActions, "poison_exhausted", lambda self, view: 0)
    q = qm.create_queue(r".\private$\raced", receive_retry_count=0)
    sent = _send(q, b"fragile", priority=7)[0]
    q.receive(timeout=10, lock=True).abandon()  # released once: > 0
    assert q.receive(timeout=10, lock=True).body == b"flush"
    moved = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\raced;poison").receive(timeout=10)
    assert moved.id == sent.id and moved.abort_count == 1 and moved.move_count == 1


def test_the_retry_limit_is_a_queue_property(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\limits")
    assert q.properties.receive_retry_count == 5  # WCF's ReceiveRetryCount default
    assert q.set_properties(receive_retry_count=None).receive_retry_count is None
    with pytest.raises(InvalidParameter, match="receive_retry_count"):
        q.set_properties(receive_retry_count=-1)
    with pytest.raises(InvalidParameter, match="receive_retry_count"):
        qm.create_queue(r".\private$\bad-limit", receive_retry_count="5")  # type: ignore[arg-type]


def test_prefetch_two_handles_share_a_queue_and_close_gives_back_the_rest(
        qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\prefetched")
    total = 50
    _send(q, *(f"{i:02}".encode() for i in range(total)))
    one = qm.open_queue(r".\private$\prefetched", prefetch=10)
    two = qm.open_queue(r".\private$\prefetched", prefetch=10)
    got_one, got_two = [], []
    for _ in range(15):
        got_one.append(one.receive(timeout=10).body)
        got_two.append(two.receive(timeout=10).body)
    assert not set(got_one) & set(got_two), "a message was delivered twice"
    assert len(set(got_one + got_two)) == 30
    watcher = qm.open_queue(r".\private$\prefetched")
    # Held by the two live batches until they are settled: 2 x 10, 5 of each handed out.
    assert watcher.count() == total + 1 - 20
    one.close()
    two.close()
    third = qm.open_queue(r".\private$\prefetched")
    rest = [third.receive(timeout=10) for _ in range(total + 1 - 30)]
    bodies = [m.body for m in rest]
    assert set(bodies) | set(got_one) | set(got_two) == {f"{i:02}".encode() for i in
                                                        range(total)} | {b"flush"}
    assert len(set(bodies)) == len(bodies) and not set(bodies) & set(got_one + got_two)
    assert bodies[:-1] == sorted(bodies[:-1])  # released ones are back in their place
    assert all(m.abort_count == 0 for m in rest)  # never handed out: no aborted delivery
    with pytest.raises(ReceiveTimeout):
        third.receive(timeout=0.5)
    actions = [r.action for r in _receipts(qm, q)]
    # One PREFETCH per batch of 10 (plus one per batch that lost the race for the same head to
    # the other handle and was taken again), one RELEASE per close.
    assert actions.count(ReceiptAction.PREFETCH) >= 4
    assert actions.count(ReceiptAction.RELEASE) == 2



def test_receive_many_on_a_prefetching_handle_journals_and_acknowledges_each_once(
        qm: QueueManager) -> None:
    """receive_many on a handle opened with prefetch hands out what its batches hold, in
    order, writing the journal copies and ACK_RECEIVEs of each hand-out together: every
    message once, one journal copy and one acknowledgment each."""
    q = qm.create_queue(r".\private$\prefetch-many", journal=True)
    admin = qm.create_queue(r".\private$\prefetch-many-admin")
    sent = [q.send(Message(body=b"%02d" % i, admin_queue=admin.format_name,
                           acknowledge=Acknowledgment.FULL_RECEIVE), wait=True).id
            for i in range(25)]
    receiver = qm.open_queue(q.format_name, prefetch=10)
    got: list[object] = []
    while len(got) < 25:
        got += [m.id for m in receiver.receive_many(7, timeout=10)]
    assert got == sent
    with pytest.raises(ReceiveTimeout):
        receiver.receive_many(5, timeout=0.5)
    journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\prefetch-many;JOURNAL")
    copies: list[object] = []
    while len(copies) < 25:
        copies += [m.id for m in journal.receive_many(25, timeout=10)]
    assert copies == sent
    acks = []
    while len(acks) < 25:
        acks += admin.receive_many(25, timeout=10)
    assert all(a.message_class is MessageClass.ACK_RECEIVE for a in acks)
    assert sorted(str(a.correlation_id) for a in acks) == sorted(map(str, sent))
    with pytest.raises(ReceiveTimeout):  # none for reading the journal copies either
        admin.receive(timeout=0.5)


def test_a_prefetched_receive_many_whose_journal_write_fails_keeps_its_messages(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal copies of a prefetched hand-out are written before the messages are handed
    out; when that write fails, the messages stay held and the next receive hands them out."""
    q = qm.create_queue(r".\private$\prefetch-journal-fails", journal=True)
    sent = [q.send(Message(body=b"%d" % i), wait=True).id for i in range(6)]
    receiver = qm.open_queue(q.format_name, prefetch=6)
    failed = fail_next_journal_write(qm, monkeypatch)
    with pytest.raises(BrokerUnavailable):
        receiver.receive_many(6, timeout=10)
    assert failed == [6]
    got: list[object] = []
    while len(got) < 6:
        got += [m.id for m in receiver.receive_many(6, timeout=10)]
    assert got == sent
    receiver.close()
    with pytest.raises(ReceiveTimeout):
        qm.open_queue(q.format_name).receive(timeout=0.5)

def test_a_crashed_prefetcher_loses_nothing_silently(
        broker: BrokerEndpoint, qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\prefetch-crash")
    _send(q, *(f"{i}".encode() for i in range(8)))
    handed = _killed_after_taking(broker, qm, q.format_name, "prefetch")
    assert handed == ["0", "1"]
    # kmq qm run's sweep notices the batch's lease passed and dead-letters what it holds.
    service = QueueManagerService(qm)
    deadline = time.monotonic() + WAIT
    while service.sweep().expired < 5 and time.monotonic() < deadline:
        time.sleep(0.2)
    service.close()
    dlq = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    dead = sorted(dlq.receive(timeout=10).body.decode() for _ in range(5))
    assert dead == ["0", "1", "2", "3", "4"]  # the 2 handed out may have been used: said so
    survivor = qm.open_queue(q.format_name)
    rest = [survivor.receive(timeout=10).body.decode() for _ in range(4)]
    assert rest == ["5", "6", "7", "flush"]


def test_the_reason_of_an_expired_prefetch_says_it_may_have_been_handed_out(
        qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\idle-prefetch")
    _send(q, b"a", b"b")
    idle = qm.open_queue(q.format_name, prefetch=5, prefetch_lease=1.0)
    assert idle.receive(timeout=10).body == b"a"
    sweeper = qm.open_queue(q.format_name)
    deadline = time.monotonic() + WAIT
    while sweeper.expire_due() == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.message_class is MessageClass.NACK_RECEIVE_REJECTED
    assert "may have been handed out" in dead.properties["kmq.reason"]
    view = sweeper._opened.open_view()
    assert view.state.status(0).state is OffsetState.REMOVED
    idle.close()  # its batch was settled by the sweeper: nothing left to release, no error
