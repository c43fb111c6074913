"""``QueueManager.queue_counts`` (facade.state.queuecounts) on the in-memory Kafka: after any mix of
sends, receives, peek-locks, purges and snapshots on several queues, the batch counts equal
each queue's own ``MessageQueue.counts()``. The broker-process test is
tests/integration/test_queue_counts.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facade import BrokerError, InvalidParameter, Message, ReceiveTimeout
from facade.state import queueview
from facade.config import KmqConfig
from facade.manager import QueueManager
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.state.queuecounts import QueueCounts, count_queues
from facade.model.topics import QueueTopics

#: A time-to-be-received that is over when the counts are taken (the test sleeps past it).
_SHORT = 0.005

#: One step on one of the queues: what it does.
_STEPS = st.sampled_from(["send", "send-short", "send-priority", "receive", "receive-many",
                          "lock", "purge", "snapshot", "count"])


@pytest.fixture(scope="module")
def shared_qm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueueManager]:
    """One queue manager for every example (each example makes queues of its own)."""
    home = tmp_path_factory.mktemp("kmq-home")
    config = KmqConfig.load(queue_manager="countqm", home=home)
    with QueueManager.open(config, session=MemoryKafkaSession()) as manager:
        yield manager


def _own(qm: QueueManager, path: str) -> QueueCounts:
    with qm.open_queue(path) as handle:
        return QueueCounts(*handle.counts())


def _play(qm: QueueManager, handles: list[Any], step: str, index: int) -> None:
    q = handles[index]
    if step == "send":
        q.send(Message(body=b"x"), wait=True)
    elif step == "send-short":
        q.send(Message(body=b"s", time_to_be_received=_SHORT), wait=True)
    elif step == "send-priority":
        q.send(Message(body=b"p", priority=6), wait=True)
    elif step in ("receive", "receive-many", "lock"):
        try:
            if step == "receive":
                q.receive(timeout=0)
            elif step == "receive-many":
                q.receive_many(3, timeout=0)
            else:  # held until the handle closes (the snapshot step), counted meanwhile
                q.receive(lock=True, lease=600, timeout=0)
        except ReceiveTimeout:
            pass  # nothing a receiver can get: the queue is empty or every message expired
    elif step == "purge":
        q.purge()
    elif step == "snapshot":  # the handle writes its snapshot as it closes; a new one goes on
        path = q.format_name
        q.close()
        handles[index] = qm.open_queue(path)
    elif step == "count":
        q.count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(_STEPS, st.integers(0, 2)), max_size=30))
def test_batch_counts_equal_each_queues_own_counts(
        shared_qm: QueueManager, monkeypatch: pytest.MonkeyPatch,
        steps: list[tuple[str, int]]) -> None:
    monkeypatch.setattr(queueview, "SNAPSHOT_ON_CLOSE", 1)
    qm = shared_qm
    tag = uuid.uuid4().hex[:8]
    handles = [qm.create_queue(rf".\private$\c{tag}-{i}") for i in range(3)]
    paths = [h.properties.path_name for h in handles]
    try:
        for step, index in steps:
            _play(qm, handles, step, index)
        time.sleep(_SHORT * 2)
        assert qm.queue_counts(paths) == {path: _own(qm, path) for path in paths}
    finally:
        for handle in handles:
            handle.close()


def test_an_idle_queue_with_a_current_snapshot_is_counted_without_reading_its_logs(
        memory_qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queueview, "SNAPSHOT_ON_CLOSE", 1)
    with memory_qm.create_queue(r".\private$\idle") as q:
        for _ in range(4):
            q.send(Message(body=b"x"), wait=True)
        q.receive(timeout=1)
        topics = QueueTopics(q.properties.data_topic, q.properties.receipts_topic)
    with memory_qm.create_queue(r".\private$\empty") as q:
        empty = QueueTopics(q.properties.data_topic, q.properties.receipts_topic)
    found = count_queues(memory_qm.session, [topics, empty])
    assert found.counts == {topics.data: QueueCounts(3, 0), empty.data: QueueCounts(0, 0)}
    assert found.records_read == 0 and not found.unresolved


def test_a_queue_whose_topics_are_gone_is_left_out(memory_qm: QueueManager) -> None:
    found = count_queues(memory_qm.session, [QueueTopics("kmq.memqm.private.never")])
    assert found.counts == {} and not found.unresolved


def test_path_names_must_be_names(memory_qm: QueueManager) -> None:
    with pytest.raises(InvalidParameter, match="path_names"):
        memory_qm.queue_counts(r".\private$\one")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="path_names"):
        memory_qm.queue_counts([3])  # type: ignore[list-item]


def test_a_queue_whose_verdicts_are_gone_is_left_to_its_own_handle(
        memory_qm: QueueManager) -> None:
    """Receipts deleted with no snapshot covering them: the batch does not guess; the queue's
    own handle says why it cannot count it, as it says for a count of that queue alone."""
    with memory_qm.create_queue(r".\private$\lost-verdicts") as q:
        for _ in range(3):
            q.send(Message(body=b"x"), wait=True)
        q.receive(timeout=1)
        q.receive(timeout=1)  # a receipt after the deleted one: the view sees the gap
        topics = QueueTopics(q.properties.data_topic, q.properties.receipts_topic)
        path = q.properties.path_name
    memory_qm.session.delete_records(topics.receipts, 1)
    found = count_queues(memory_qm.session, [topics])
    assert found.unresolved == {topics.data} and found.counts == {}
    with pytest.raises(BrokerError, match="receipts below offset 1"):
        memory_qm.queue_counts([path])
    with pytest.raises(BrokerError, match="receipts below offset 1"), \
            memory_qm.open_queue(path) as handle:
        handle.counts()
