"""A receipt whose delivery report says the producer timed out may be in the log anyway.

librdkafka gives up on a record after ``message.timeout.ms`` (300 s by default) of a broker it
cannot reach; the broker may have appended it before the acknowledgment was lost. A receipt
taken as refused then would lose the message it won: every reader applies it, and no receiver
hands the message out. A receive therefore looks for such a receipt in the log. Here, on the
in-memory Kafka, the first receipt's report is a timeout, once with the receipt appended and
once without.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from facade.config import KmqConfig
from facade.errors import BrokerError, ReceiveTimeout
from facade.manager import QueueManager
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.model.message import Message


class _TimesOutFirstReceipt:
    """A producer whose first receipt gets a timeout report, appended or not."""

    timed_out = 0

    def __init__(self, inner: Any, appended: bool):
        self._inner, self._appended = inner, appended

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
                headers: Any = None, on_delivery: Any = None) -> None:
        if topic.endswith(".receipts") and on_delivery is not None \
                and _TimesOutFirstReceipt.timed_out == 0:
            _TimesOutFirstReceipt.timed_out += 1
            if self._appended:
                self._inner.produce(topic, value, key, headers=headers)
            on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), None)
            return
        self._inner.produce(topic, value, key, headers=headers, on_delivery=on_delivery)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture(params=[True, False], ids=["appended", "not-appended"])
def appended(request: pytest.FixtureRequest, kmq_home: Path,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[QueueManager, bool]]:
    _TimesOutFirstReceipt.timed_out = 0
    make = MemoryKafkaSession.producer
    monkeypatch.setattr(MemoryKafkaSession, "producer",
                        lambda self, *args, **kwargs: _TimesOutFirstReceipt(
                            make(self, *args, **kwargs), request.param))
    with QueueManager.open(KmqConfig.load(queue_manager="timeoutqm"),
                           session=MemoryKafkaSession()) as qm:
        yield qm, request.param


def test_a_receipt_that_timed_out_in_the_producer_loses_nothing(
        appended: tuple[QueueManager, bool]) -> None:
    qm, in_log = appended
    queue = qm.create_queue(r".\private$\timeouts")
    queue.send_many([Message(body=b"first"), Message(body=b"second")], wait=True)
    assert _TimesOutFirstReceipt.timed_out == 0
    if in_log:
        # Its receipt is in the log and won the message: it is handed out.
        assert queue.receive(timeout=5).body == b"first"
    else:
        # Not in the log: it removed nothing, the receive says so, the message stays.
        with pytest.raises(BrokerError, match="timed out in the producer and is not in the log"):
            queue.receive(timeout=5)
        assert queue.receive(timeout=5).body == b"first"
    assert _TimesOutFirstReceipt.timed_out == 1
    assert queue.receive(timeout=5).body == b"second"
    with pytest.raises(ReceiveTimeout):
        queue.receive(timeout=0.2)
