"""A receipt a producer retry wrote twice changes nothing (docs/design.md, "A receipt is written
once").

A request that timed out or met a leader change can be appended before a non-idempotent
producer sends it again, as on a three-node cluster whose brokers are stopped under load
(``tests/faults/test_three_brokers.py``). A claimant that took the second copy's verdict
(lost) for its claim would never hand out the message its first copy removed. Here every
receipt is written twice, the delivery report naming the second copy as a retry's does, on
the in-memory Kafka, with one receiver and with two.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from facade.config import KmqConfig
from facade.errors import ReceiveTimeout
from facade.manager import QueueManager
from facade.kafka.librdkafka import KafkaSession
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.model.message import Delivery, Message
from facade.queues.queue import MessageQueue
from facade.state.queuestate import QueueState
from facade.state.queueview import QueueView
from facade.model.receipts import ReceiptAction, new_claim
from facade.model.topics import queue_topics

MESSAGES = 120


class _Twice:
    """A producer that appends every receipt twice and reports the second copy."""

    def __init__(self, inner: Any):
        self._inner = inner

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
                headers: Any = None, on_delivery: Any = None) -> None:
        if topic.endswith(".receipts") and on_delivery is not None:
            self._inner.produce(topic, value, key, headers=headers)
        self._inner.produce(topic, value, key, headers=headers, on_delivery=on_delivery)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def managers(kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[QueueManager]]:
    """Two queue managers of one name on one in-memory Kafka whose receipts go in twice."""
    session = MemoryKafkaSession()
    make = MemoryKafkaSession.producer
    monkeypatch.setattr(MemoryKafkaSession, "producer",
                        lambda self, *args, **kwargs: _Twice(make(self, *args, **kwargs)))
    config = KmqConfig.load(queue_manager="dupqm")
    with QueueManager.open(config, session=session) as one, \
            QueueManager.open(config, session=session) as two:
        yield [one, two]


def _drain(queues: list[MessageQueue]) -> list[str]:
    got: list[str] = []
    lock = threading.Lock()

    def receive(queue: MessageQueue) -> None:
        while True:
            try:
                body = queue.receive(timeout=0.5).body.decode()
            except ReceiveTimeout:
                return
            with lock:
                got.append(body)

    threads = [threading.Thread(target=receive, args=(queue,)) for queue in queues]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return got


@pytest.mark.parametrize("receivers", [1, 2])
def test_every_message_is_received_once_when_every_receipt_is_written_twice(
        managers: list[QueueManager], receivers: int) -> None:
    # Two receivers contend, so their receives write RECEIVE_FIRST receipts.
    queue = managers[0].create_queue(r".\private$\twice")
    queue.send_many([Message(body=str(n).encode()) for n in range(MESSAGES)], wait=True)
    queues = [queue, managers[1].open_queue(r".\private$\twice")][:receivers]
    got = _drain(queues)
    assert sorted(got, key=int) == [str(n) for n in range(MESSAGES)]


@pytest.mark.parametrize("action", [ReceiptAction.RECEIVE_FIRST, ReceiptAction.LOCK_FIRST])
def test_a_first_of_receipt_written_again_takes_nothing(action: ReceiptAction) -> None:
    state = QueueState()
    lease = {"lease_ms": 60_000} if action is ReceiptAction.LOCK_FIRST else {}
    claim = new_claim(action, (0, 1, 2), "receiver", **lease)
    assert state.apply(claim, 0).won == (0,)
    assert state.apply(claim, 1).won == ()  # not offset 1, the next it names
    assert state.apply(new_claim(ReceiptAction.RECEIVE, (1,), "other"), 2).won == (1,)


def test_the_receipts_producer_is_idempotent(monkeypatch: pytest.MonkeyPatch) -> None:
    # The broker then drops a retried copy by its sequence number: none reaches the log.
    asked: list[dict[str, Any]] = []
    make = MemoryKafkaSession.producer

    def producer(self: MemoryKafkaSession, delivery: Delivery, transactional_id: str | None = None,
                 extra: Any = None) -> Any:
        asked.append(KafkaSession("127.0.0.1:9").producer_config(delivery, transactional_id,
                                                                  extra))
        return make(self, delivery, transactional_id, extra)

    monkeypatch.setattr(MemoryKafkaSession, "producer", producer)
    session = MemoryKafkaSession()
    topics = queue_topics("dupqm", "view", private=True)
    session.create_topics([topics.data, topics.receipts])
    view = QueueView(session, topics)
    try:
        assert [config["enable.idempotence"] for config in asked] == [True]
        assert asked[0]["acks"] == "all"
    finally:
        view.close()
