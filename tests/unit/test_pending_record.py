"""``PendingRecord.wait``: the wait for one produced record's acknowledgment.

A stand-in producer delivers the reports it is asked to in the order produced, one per
``poll``; the real producer's behaviour (reports served by whichever thread polls) is what the
integration suites drive.
"""

from __future__ import annotations

from typing import Any

import pytest

from confluent_kafka import KafkaError

from facade.errors import BrokerError, BrokerUnavailable
from facade.kafka.librdkafka import produce_async


class _Report:
    def __init__(self, topic: str, offset: int):
        self._topic, self._offset = topic, offset

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return self._topic


class _Producer:
    """Records are acknowledged only when ``acknowledge`` says so; ``poll`` serves one report
    of an acknowledged record, ``flush`` (which waits for every record) is not expected."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, Any]] = []
        self.acknowledged: list[int] = []
        self.served = 0

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
                headers: list[Any] | None = None, on_delivery: Any = None) -> None:
        self.produced.append((topic, on_delivery))

    def acknowledge(self, index: int) -> None:
        self.acknowledged.append(index)

    def poll(self, timeout: float = -1) -> int:
        if self.served < len(self.acknowledged):
            index = self.acknowledged[self.served]
            self.served += 1
            topic, callback = self.produced[index]
            callback(None, _Report(topic, index))
            return 1
        return 0

    def flush(self, timeout: float = -1) -> int:
        raise AssertionError("flush waits for every record of the producer, not this one")


def test_a_wait_ends_with_its_own_record_while_other_records_of_the_producer_are_unacknowledged(
) -> None:
    # Four receivers of one process share the system-copies producer: each waits for its own
    # journal copies, not for those the others keep adding.
    producer = _Producer()
    first = produce_async(producer, "journal", b"a")
    produce_async(producer, "journal", b"b")  # another thread's record, still in flight
    producer.acknowledge(0)
    assert first.wait(5.0) == 0
    assert producer.served == 1


def test_a_record_another_thread_served_is_not_waited_for_again() -> None:
    producer = _Producer()
    first = produce_async(producer, "journal", b"a")
    second = produce_async(producer, "journal", b"b")
    producer.acknowledge(0)
    producer.acknowledge(1)
    assert second.wait(5.0) == 1  # its poll served the first record's report too
    assert first.wait(5.0) == 0
    assert producer.served == 2


def test_an_unacknowledged_record_raises_broker_unavailable_after_the_timeout() -> None:
    producer = _Producer()
    pending = produce_async(producer, "journal", b"a", operation="write journal")
    with pytest.raises(BrokerUnavailable, match="write journal to 'journal' not acknowledged"):
        pending.wait(0.01)


def test_a_refused_record_raises_the_broker_error() -> None:
    producer = _Producer()
    pending = produce_async(producer, "journal", b"a", operation="write journal")
    producer.produced[0][1](KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)
    with pytest.raises(BrokerError, match="write journal"):
        pending.wait(5.0)
