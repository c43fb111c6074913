"""Retention of receipts (facade.state.retention and QueueView): receipts below snapshots of two
buckets are deleted, and every handle opened or lagging afterwards still sees exactly the
pending messages: none back, none lost.

The queue manager's real code runs on the in-memory Kafka, which supports DeleteRecords and
log start offsets (on a broker without them kmq never deletes; see docs/design.md, "Retention").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from facade import Message, ReceiveTimeout
from facade.state import queueview, retention
from facade.config import KmqConfig
from facade.errors import BrokerError
from facade.manager import QueueManager
from facade.model.message import Delivery
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.queues.queue import MessageQueue
from facade.state.retention import ReceiptsRetention, snapshot_bucket, snapshot_key
from facade.model.topics import snapshot_topic

WAIT = 10.0
PATH = r".\private$\retained"


# -- the rule, without Kafka ---------------------------------------------------------------------


def test_snapshot_keys_name_buckets_and_the_plain_key_is_bucket_minus_one() -> None:
    assert snapshot_key("kmq.qm.private.q", 123_456, 50_000) == b"kmq.qm.private.q@2"
    assert snapshot_bucket(b"kmq.qm.private.q@2", "kmq.qm.private.q") == 2
    assert snapshot_bucket(b"kmq.qm.private.q", "kmq.qm.private.q") == -1
    assert snapshot_bucket(b"kmq.qm.private.q2@1", "kmq.qm.private.q") is None
    assert snapshot_bucket(b"kmq.qm.private.q@x", "kmq.qm.private.q") is None
    assert snapshot_bucket(None, "kmq.qm.private.q") is None


def test_nothing_is_deleted_before_snapshots_of_two_buckets_exist() -> None:
    rule = ReceiptsRetention("kmq.qm.private.q", step=10, lag=0)
    for offset in range(35):
        rule.saw_receipt(offset, 0)
    rule.saw_snapshot(34)  # bucket 3 only
    assert rule.floor(now=100.0) == 0
    rule.saw_snapshot(25)  # bucket 2: the older of the two newest buckets starts at 20
    assert rule.floor(now=100.0) == 20


def test_receipts_younger_than_the_lag_are_kept() -> None:
    rule = ReceiptsRetention("kmq.qm.private.q", step=10, lag=60)
    for offset in range(35):
        rule.saw_receipt(offset, offset * 1000)  # one receipt a second
    rule.saw_snapshot(15)
    rule.saw_snapshot(34)
    assert rule.floor(now=30.0) == 0, "bucket 1 starts at receipt 10, written at 10 s"
    assert rule.floor(now=75.0) == 10
    assert rule.floor(now=1000.0) == 10, "never above what two buckets cover"


def test_snapshot_keys_below_the_kept_buckets_are_tombstoned_once() -> None:
    rule = ReceiptsRetention("q", step=10, lag=0)
    for offset in range(45):
        rule.saw_receipt(offset, 0)
    for covered in (5, 15, 25, 44):
        rule.saw_snapshot(covered)
    assert rule.floor(now=1.0) == 20
    assert rule.doomed_keys() == [], "nothing deleted yet"
    rule.deleted(20)
    assert rule.doomed_keys() == [b"q", b"q@0", b"q@1"]
    assert rule.doomed_keys() == []


# -- on the queue manager's real code ------------------------------------------------------------


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots every 20 records applied, buckets of 10 receipts, no age lag."""
    monkeypatch.setattr(queueview, "SNAPSHOT_EVERY", 20)
    monkeypatch.setattr(retention, "RECEIPTS_RETENTION_STEP", 10)
    monkeypatch.setattr(retention, "RECEIPTS_RETENTION_LAG", 0.0)


@pytest.fixture
def qm(kmq_home: Path) -> Iterator[QueueManager]:
    config = KmqConfig.load(queue_manager="retainqm")
    with QueueManager.open(config, session=MemoryKafkaSession()) as manager:
        yield manager


def _another_manager(qm: QueueManager) -> QueueManager:
    assert isinstance(qm.session, MemoryKafkaSession)
    return QueueManager.open(KmqConfig.load(queue_manager="retainqm"),
                             session=MemoryKafkaSession(qm.session.cluster))


def _receipts_start(qm: QueueManager, q: MessageQueue) -> int:
    topic = q._opened.single().topics.receipts
    return qm.session.watermarks([topic])[topic][0]


def _drain(q: MessageQueue) -> list[object]:
    got = []
    while True:
        try:
            got.append(q.receive(timeout=0.5).id)
        except ReceiveTimeout:
            return got


def _send(q: MessageQueue, count: int) -> list[object]:
    return [m.id for m in q.send_many([Message(body=b"m%d" % i) for i in range(count)],
                                      wait=True)]


def test_receipts_below_two_buckets_of_snapshots_are_deleted_and_a_new_handle_sees_the_rest(
        qm: QueueManager, small_steps: None) -> None:
    q = qm.create_queue(PATH)
    sent = _send(q, 200)
    received = [q.receive(timeout=WAIT).id for _ in range(150)]
    assert received == sent[:150]
    assert _receipts_start(qm, q) >= 100, "receipts below the older bucket were deleted"
    with _another_manager(qm) as other:
        assert _drain(other.open_queue(PATH)) == sent[150:]


def test_a_handle_that_lagged_behind_the_deleted_receipts_opens_again_and_loses_nothing(
        qm: QueueManager, small_steps: None) -> None:
    q = qm.create_queue(PATH)
    sent = _send(q, 200)
    with _another_manager(qm) as other:
        lagging = other.open_queue(PATH)
        assert lagging.peek(timeout=WAIT).id == sent[0]  # loaded, then left behind
        assert [q.receive(timeout=WAIT).id for _ in range(150)] == sent[:150]
        assert _receipts_start(qm, q) > 0
        assert lagging.receive(timeout=WAIT).id == sent[150], "no message came back"
        assert _drain(lagging) == sent[151:]
        assert _drain(q) == []


def test_a_handle_whose_claim_is_not_acknowledged_yet_stops_when_receipts_are_gone(
        qm: QueueManager, small_steps: None) -> None:
    q = qm.create_queue(PATH)
    view = q._opened.open_view()
    view._awaiting["a claim of this view"] = None  # its receipt's offset is not known yet
    with pytest.raises(BrokerError, match="one of its claims was not acknowledged yet"):
        view._reopen(10)


def test_a_garbage_record_under_the_newest_snapshot_key_does_not_lock_the_queue_out(
        qm: QueueManager, small_steps: None) -> None:
    q = qm.create_queue(PATH)
    sent = _send(q, 120)
    assert [q.receive(timeout=WAIT).id for _ in range(100)] == sent[:100]
    assert _receipts_start(qm, q) > 0
    data = q._opened.single().topics.data
    topic = snapshot_topic(data)
    newest = max(b for b in (snapshot_bucket(r.key, data) for r in _records(qm, topic))
                 if b is not None)
    producer = qm.session.producer(Delivery.RECOVERABLE)
    producer.produce(topic, b"not a snapshot", key=snapshot_key(data, newest * 10, 10))
    producer.flush(WAIT)
    with _another_manager(qm) as other:
        assert _drain(other.open_queue(PATH)) == sent[100:]


def test_stale_snapshot_keys_are_tombstoned(qm: QueueManager, small_steps: None) -> None:
    q = qm.create_queue(PATH)
    _send(q, 200)
    for _ in range(150):
        q.receive(timeout=WAIT)
    topic = snapshot_topic(q._opened.single().topics.data)
    tombstones = [r.key for r in _records(qm, topic) if r.value is None]
    assert tombstones, "old buckets' snapshot keys were deleted with tombstones"


def test_without_the_age_lag_passing_no_receipt_is_deleted(
        qm: QueueManager, small_steps: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "RECEIPTS_RETENTION_LAG", 3600.0)
    q = qm.create_queue(PATH)
    _send(q, 100)
    for _ in range(80):
        q.receive(timeout=WAIT)
    assert _receipts_start(qm, q) == 0


def _records(qm: QueueManager, topic: str) -> list:
    reader = qm.session.reader()
    try:
        reader.assign({topic: 0})
        return [r for batch in reader.read_to_end((topic,), WAIT) for r in batch]
    finally:
        reader.close()


@pytest.mark.parametrize("seed", range(4))
def test_random_receivers_with_retention_deliver_every_message_exactly_once(
        qm: QueueManager, small_steps: None, seed: int) -> None:
    """Two queue managers on one cluster send and receive in a random order, with handles
    opened late, one left idle while the other's receipts are deleted, and peek-lock receives
    abandoned or completed: every message is delivered exactly once."""
    import random

    rng = random.Random(seed)
    sent: list[object] = []
    delivered: list[object] = []
    with _another_manager(qm) as other:
        handles = [qm.create_queue(PATH), other.open_queue(PATH)]
        for _ in range(60):
            q = rng.choice(handles)
            roll = rng.random()
            if roll < 0.3:
                sent += _send(q, rng.randint(1, 12))
            elif roll < 0.8:
                try:
                    delivered.append(q.receive(timeout=0.05).id)
                except ReceiveTimeout:
                    pass
            elif roll < 0.9:
                try:
                    locked = q.receive(timeout=0.05, lock=True)
                except ReceiveTimeout:
                    continue
                if rng.random() < 0.5:
                    q.complete(locked)
                    delivered.append(locked.id)
                else:
                    q.abandon(locked)
            else:
                handles[handles.index(q)] = (qm if q.manager is qm else other).open_queue(PATH)
        for q in handles:
            delivered += _drain(q)
    assert _receipts_start(qm, handles[0]) > 0, "receipts were deleted along the way"
    assert sorted(map(str, delivered)) == sorted(map(str, sent))
    assert len(set(map(str, delivered))) == len(delivered)


def test_receipts_deleted_with_no_snapshot_covering_them_are_a_clear_error(
        qm: QueueManager) -> None:
    """Receipts gone without a snapshot (a topic with time retention, not kmq's settings):
    opening stops with BrokerError instead of handing received messages out again."""
    q = qm.create_queue(PATH)
    _send(q, 5)
    for _ in range(3):
        q.receive(timeout=WAIT)
    qm.session.delete_records(q._opened.single().topics.receipts, 2)
    with _another_manager(qm) as other:
        with pytest.raises(BrokerError, match="receipts below offset 2 .* were deleted"):
            other.open_queue(PATH).receive(timeout=WAIT)
