"""Batch send (``MessageQueue.send_many``) and group commit of recoverable sends, on a real broker.

What is proven: a batch reaches every destination in order with one id per message and one copy
per queue; it is all or nothing at validation; the queue quota holds within a batch (a refused
copy raises unless dead-lettered); a recoverable batch is stored with one outgoing-queue commit
(one fsync) before ``send_many`` returns; and concurrent ``send()`` calls of several threads
share commits.
"""

from __future__ import annotations

import threading

import pytest

from facade.errors import InvalidParameter, QueueQuotaExceeded, UnsupportedFormatNameOperation
from facade.manager import QueueManager
from facade.model.message import Delivery, JournalLevel, Message

pytestmark = pytest.mark.integration


def _drain(queue, n: int) -> list[Message]:
    return [queue.receive(timeout=30) for _ in range(n)]


@pytest.mark.parametrize("delivery", [Delivery.EXPRESS, Delivery.RECOVERABLE])
def test_a_batch_arrives_in_order_with_one_id_per_message(qm: QueueManager,
                                                          delivery: Delivery) -> None:
    q = qm.create_queue(r".\private$\batch")
    sent = q.send_many([Message(body=b"m%d" % i, delivery=delivery) for i in range(50)],
                       wait=True)
    assert len({m.id for m in sent}) == 50
    assert [m.sent_time for m in sent] == [sent[0].sent_time] * 50
    got = _drain(q, 50)
    assert [m.body for m in got] == [b"m%d" % i for i in range(50)]
    assert [m.id for m in got] == [m.id for m in sent]
    assert q.send_many([]) == []
    # A waiting batch returns with its acknowledged records out of the outgoing queue.
    assert qm.transmitter.outgoing.count() == 0


def test_a_recoverable_batch_is_one_commit_and_stored_before_it_returns(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\groupcommit")
    outgoing = qm.transmitter.outgoing
    sender = qm.transmitter
    # Hold the poller's removals back so the stored records can be seen after the return.
    flush = sender._flush_removals
    sender._flush_removals = lambda: None  # type: ignore[method-assign]
    try:
        before = outgoing.commits
        sent = q.send_many([Message(body=b"r%d" % i, delivery=Delivery.RECOVERABLE)
                            for i in range(100)])
        assert outgoing.commits == before + 1
        stored = [s.record.message_id for s in outgoing.pending()]
        assert stored[-100:] == [str(m.id) for m in sent]
    finally:
        sender._flush_removals = flush  # type: ignore[method-assign]
    assert [m.id for m in _drain(q, 100)] == [m.id for m in sent]


def test_a_batch_to_a_multiple_element_name_gives_each_queue_every_message(
        qm: QueueManager) -> None:
    a, b = (qm.create_queue(rf".\private$\batch-{n}") for n in "ab")
    both = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\batch-a,"
                         rf"DIRECT=OS:{qm.name}\private$\batch-b")
    sent = both.send_many([Message(body=b"x%d" % i) for i in range(20)], wait=True)
    for queue in (a, b):
        got = _drain(queue, 20)
        assert [m.id for m in got] == [m.id for m in sent]
        assert {m.destination_format_name for m in got} == {both.format_name}


def test_a_batch_with_an_invalid_message_sends_nothing(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\allornothing")
    bad = Message(body=b"bad")
    bad.priority = 9  # edited after construction: caught by the check at send
    with pytest.raises(InvalidParameter):
        q.send_many([Message(body=b"ok"), bad], wait=True)
    with pytest.raises(InvalidParameter, match="Message"):
        q.send_many([Message(body=b"ok"), "text, not bytes"])  # type: ignore[list-item]
    with pytest.raises(UnsupportedFormatNameOperation):
        qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").send_many([Message(body=b"no")])
    assert q.count() == 0


def test_the_quota_holds_within_a_batch(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\batchquota", quota_kb=2)
    with pytest.raises(QueueQuotaExceeded, match="quota") as info:
        q.send_many([Message(body=b"q" * 600) for _ in range(6)], wait=True)
    sent = info.value.sent  # type: ignore[attr-defined]
    assert len(sent) == 6
    kept = q.count()
    assert 1 <= kept < 6  # what fits went, the rest was refused and reported
    assert [m.id for m in _drain(q, kept)] == [m.id for m in sent[:kept]]
    # Dead-lettered copies do not raise: they are not lost without a trace.
    q.send_many([Message(body=b"q" * 600) for _ in range(kept)], wait=True)
    over = q.send_many([Message(body=b"d" * 600, journal=JournalLevel.DEADLETTER)
                        for _ in range(2)], wait=True)
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    assert {dead.receive(timeout=10).id for _ in over} == {m.id for m in over}


def test_concurrent_recoverable_sends_of_several_threads_share_commits(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\threads")
    outgoing = qm.transmitter.outgoing
    before = outgoing.commits
    threads, per_thread = 8, 25

    def send_some(t: int) -> None:
        for i in range(per_thread):
            q.send(Message(body=b"%d:%d" % (t, i), delivery=Delivery.RECOVERABLE))

    workers = [threading.Thread(target=send_some, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    commits = outgoing.commits - before
    assert commits < threads * per_thread, "every send paid its own commit and fsync"
    got = _drain(q, threads * per_thread)
    for t in range(threads):  # each thread's messages arrive in its order
        mine = [m.body for m in got if m.body.startswith(b"%d:" % t)]
        assert mine == [b"%d:%d" % (t, i) for i in range(per_thread)]
