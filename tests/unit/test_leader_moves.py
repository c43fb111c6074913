"""Errors of reads while a partition's leader moves (a broker crashed or was stopped).

Found by ``tests/faults/test_three_brokers.py`` on a three-node cluster: while a crashed
leader left the metadata, a send failed with "Broker handle destroyed without termination"
(its registry refresh asked the end offsets) and receives with "Leader high watermark is not
caught up" and "Timed out in queue" (their starvation check), all as a BrokerError, which
ended the receiver process; and with two brokers down an admin request's future raised a bare
TimeoutError. Stand-ins replace the broker here; the fault suite drives the real cluster.
"""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from facade.errors import BrokerUnavailable, ReceiveTimeout
from facade.kafka import TopicReader, kafka_error_to_queue_error, map_kafka_errors

TOPIC = "kmq.t.private.q"


@pytest.mark.parametrize("code", [KafkaError._DESTROY_BROKER, KafkaError.OFFSET_NOT_AVAILABLE,
                                  KafkaError._TIMED_OUT_QUEUE])
def test_a_leader_change_is_unavailable_not_a_broker_error(code: int) -> None:
    # A receive's starvation check met OFFSET_NOT_AVAILABLE from a new leader, and "Timed out
    # in queue" while a crashed node's connection was down: as a BrokerError each ended the
    # receive (and the receiver process) for good.
    error = kafka_error_to_queue_error(KafkaError(code), "read end offsets", TOPIC)
    assert isinstance(error, BrokerUnavailable)


def test_an_admin_request_without_an_answer_is_unavailable() -> None:
    # describe_configs' future raised a bare TimeoutError past kmq's error tree while two of
    # three brokers (and so most KRaft controllers) were down.
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
