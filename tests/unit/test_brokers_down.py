"""Writes the cluster cannot acknowledge (too few in-sync replicas, brokers down) say why.

On a three-node cluster with two brokers stopped (``tests/faults/test_three_brokers.py``) the
broker answers NOT_ENOUGH_REPLICAS, which the producer retries in silence, so a send would
end in "not acknowledged within 5 s" or "lease a message-id block ... failed: Local: Message
timed out", naming neither the cause nor the fix. Stand-ins replace the broker here; the fault
suite drives the real cluster.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError

from facade.errors import BrokerError, BrokerUnavailable
from facade.kafka.librdkafka import kafka_error_to_queue_error
from facade.manager import QueueManager
from facade.model.message import Delivery, Message
from facade.state.sequence import MessageIdAllocator

TOPIC = "kmq.t.private.q"
CAUSE = ("topic 'x' has 1 in-sync replica(s) (nodes 2) of 3, fewer than its "
         "min.insync.replicas=2: its leader, node 2, refuses acks=all writes (NOT_ENOUGH_REPLICAS)")
FIX = "start the Kafka brokers that are down (nodes 1, 3)"


@pytest.mark.parametrize("code", [KafkaError.NOT_ENOUGH_REPLICAS,
                                  KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND])
def test_too_few_in_sync_replicas_is_unavailable_and_says_why(code: int) -> None:
    error = kafka_error_to_queue_error(KafkaError(code), "append receipt", TOPIC)
    assert isinstance(error, BrokerUnavailable)
    assert "NOT_ENOUGH_REPLICAS" in error.message and "min.insync.replicas" in error.message
    assert error.hint is not None and "brokers that are down" in error.hint


class _Session:
    """Leases through a producer that never acknowledges; the cluster knows why."""

    def __init__(self, report: KafkaError | None):
        self.report = report
        self.asked: list[str] = []

    def producer(self, delivery: Delivery, transactional_id: str | None = None,
                 extra: Any = None) -> Any:
        session = self

        class Producer:
            def produce(self, topic: str, value: Any = None, key: Any = None, *,
                        headers: Any = None, on_delivery: Any = None) -> None:
                self.callback = on_delivery

            def poll(self, timeout: float = -1) -> int:
                if session.report is not None:
                    self.callback(session.report, None)
                    session.report = None
                return 0

            def flush(self, timeout: float = -1) -> int:
                return 0

        return Producer()

    def write_problem(self, topic: str, timeout: float = 5.0) -> tuple[str, str] | None:
        self.asked.append(topic)
        return CAUSE, FIX


@pytest.mark.parametrize("report", [None, KafkaError(KafkaError._MSG_TIMED_OUT)],
                         ids=["wait-timed-out", "record-timed-out"])
def test_an_unacknowledged_id_lease_says_why(report: KafkaError | None) -> None:
    session = _Session(report)
    allocator = MessageIdAllocator.on_kafka(session, "qm", uuid.uuid4())  # type: ignore[arg-type]
    allocator.timeout = 0.05
    with pytest.raises(BrokerUnavailable) as raised:
        allocator.new()
    assert CAUSE in raised.value.message and raised.value.hint == FIX
    assert session.asked == ["kmq.qm.system.idblocks"]


def test_a_refused_id_lease_stays_a_broker_error() -> None:
    session = _Session(KafkaError(KafkaError.POLICY_VIOLATION))
    allocator = MessageIdAllocator.on_kafka(session, "qm", uuid.uuid4())  # type: ignore[arg-type]
    with pytest.raises(BrokerError) as raised:
        allocator.new()
    assert raised.value.kafka_code == "POLICY_VIOLATION" and session.asked == []


def test_a_waiting_send_not_acknowledged_says_why_and_what_becomes_of_it(
        memory_qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = memory_qm.create_queue(r".\private$\stalled")
    # Copies handed to no producer are never acknowledged: the wait runs out.
    monkeypatch.setattr(memory_qm.transmitter, "submit_many", lambda copies, tracker: None)
    monkeypatch.setattr(memory_qm.session, "write_problem", lambda topic, timeout=5.0: (CAUSE, FIX))
    with pytest.raises(BrokerUnavailable) as raised:
        queue.send(Message(body=b"x", delivery=Delivery.RECOVERABLE), wait=True, timeout=0.05)
    text = str(raised.value)
    assert "not acknowledged within 0.05 s" in text and CAUSE in text and FIX in text
    assert "stay in the outgoing queue" in text
