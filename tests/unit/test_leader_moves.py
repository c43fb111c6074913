"""Errors of reads while a partition's leader moves (a broker crashed or was stopped).

As ``tests/faults/test_three_brokers.py`` shows on a three-node cluster: while a crashed
leader leaves the metadata, a send meets "Broker handle destroyed without termination" (its
registry refresh asks the end offsets) and receives meet "Leader high watermark is not caught
up" and "Timed out in queue" (their starvation check). These are BrokerUnavailable, not a
BrokerError that would end the receiver process; and with two brokers down an admin request's
future must not raise a bare TimeoutError. Stand-ins replace the broker here; the fault suite
drives the real cluster.
"""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from facade.errors import BrokerError, BrokerUnavailable, QueueNotFound, ReceiveTimeout
from facade.kafka.librdkafka import TopicReader, kafka_error_to_queue_error, map_kafka_errors
from facade.manager import QueueManager
from facade.model.message import Message

TOPIC = "kmq.t.private.q"


@pytest.mark.parametrize("code", [KafkaError._DESTROY_BROKER, KafkaError.OFFSET_NOT_AVAILABLE,
                                  KafkaError._TIMED_OUT_QUEUE])
def test_a_leader_change_is_unavailable_not_a_broker_error(code: int) -> None:
    # A receive's starvation check meets OFFSET_NOT_AVAILABLE from a new leader, and "Timed out
    # in queue" while a crashed node's connection is down: as a BrokerError each would end the
    # receive (and the receiver process) for good.
    error = kafka_error_to_queue_error(KafkaError(code), "read end offsets", TOPIC)
    assert isinstance(error, BrokerUnavailable)


def test_an_admin_request_without_an_answer_is_unavailable() -> None:
    # describe_configs' future raises a bare TimeoutError, outside kmq's error tree, while two
    # of three brokers (and so most KRaft controllers) are down.
    with pytest.raises(BrokerUnavailable, match="describe topic configs .* did not answer"):
        with map_kafka_errors("describe topic configs", TOPIC):
            raise concurrent.futures.TimeoutError()
    with pytest.raises(ReceiveTimeout):
        with map_kafka_errors("read topics"):
            raise ReceiveTimeout("no message")


@pytest.mark.parametrize("code", [KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT,
                                  KafkaError.OFFSET_NOT_AVAILABLE,
                                  KafkaError.NOT_LEADER_FOR_PARTITION])
def test_end_offsets_ask_again_while_the_leader_moves(code: int) -> None:
    # No broker: librdkafka connects lazily, and the one broker call is replaced below.
    reader = TopicReader({"bootstrap.servers": "127.0.0.1:9"})
    real = reader._consumer
    answers: list[Any] = [KafkaException(KafkaError(code)), (0, 7)]

    def get_watermark_offsets(part: Any, timeout: float, cached: bool) -> tuple[int, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    reader._consumer = SimpleNamespace(  # type: ignore[assignment]
        get_watermark_offsets=get_watermark_offsets)
    try:
        assert reader.end_offsets([TOPIC], timeout=5.0) == {TOPIC: 7}
    finally:
        reader._consumer = real
        reader.close()


@pytest.mark.parametrize(("listed", "raised"), [(True, BrokerUnavailable),
                                                 (False, QueueNotFound)])
def test_end_offsets_past_their_deadline_on_an_unknown_partition(listed: bool,
                                                                 raised: type) -> None:
    # Right after a broker restart librdkafka's metadata cache can lack a topic for longer than
    # a short query's timeout (a receive's starvation check allows 1 s): only the cluster may
    # say "not found"; a topic it lists is an outage.
    reader = TopicReader({"bootstrap.servers": "127.0.0.1:9"})
    real = reader._consumer

    def get_watermark_offsets(part: Any, timeout: float, cached: bool) -> tuple[int, int]:
        raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))

    def list_topics(topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None)} if listed else {})

    reader._consumer = SimpleNamespace(  # type: ignore[assignment]
        get_watermark_offsets=get_watermark_offsets, list_topics=list_topics)
    try:
        with pytest.raises(raised):
            reader.end_offsets([TOPIC], timeout=0.3)
    finally:
        reader._consumer = real
        reader.close()


def test_a_receive_whose_verdict_cannot_be_read_keeps_what_its_receipt_won(
        memory_qm: QueueManager) -> None:
    # The read-back of a receipt already in the log can fail (above): a receive that raised
    # and gave up its claim would leave the message its receipt won removed from the queue
    # and handed to nobody.
    sender = memory_qm.create_queue(r".\private$\readback")
    _, second = sender.send_many([Message(body=b"1"), Message(body=b"2")], wait=True)
    mine, other = (memory_qm.open_queue(r".\private$\readback") for _ in range(2))
    view = mine._opened.open_view()
    start_claim, poll = view.start_claim, view._reader.poll
    failures: list[BrokerError] = []

    def claim_behind_another(*args: Any, **kwargs: Any) -> Any:
        # Another receiver's receipt lands first: this claim's verdict needs it read back.
        assert other.receive(timeout=5).body == b"1"
        failures.append(BrokerError("read topics failed: Local: Broker handle destroyed"))
        view.start_claim = start_claim  # type: ignore[method-assign]
        return start_claim(*args, **kwargs)

    def failing_poll(timeout: float, max_records: int = 1000) -> Any:
        if failures:
            raise failures.pop()
        return poll(timeout, max_records)

    view.start_claim = claim_behind_another  # type: ignore[method-assign]
    view._reader.poll = failing_poll  # type: ignore[method-assign]
    with pytest.raises(BrokerUnavailable, match="is in the log but its verdict could not be"):
        mine.receive_by_id(second.id)
    assert mine.receive(timeout=5).body == b"2"
