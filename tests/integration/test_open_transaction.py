"""A Kafka transaction left open in a queue's topic does not lock receivers out.

A producer that dies inside a transaction holds its records, and every record after them, back
from read_committed readers until the broker aborts it (``transaction.timeout.ms``, up to 15
minutes on Kafka). ``TopicReader.read_to_end`` waits ``OPEN_TRANSACTION_GRACE`` seconds at the
last stable offset, then takes it as the end: the messages before the transaction are received,
the rest once the transaction ends.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from confluent_kafka import Producer

import facade.kafka.librdkafka
from facade import Message
from facade.model.envelope import encode_message
from facade.manager import QueueManager

pytestmark = pytest.mark.integration


def _message(qm: QueueManager, queue, body: bytes) -> Message:
    return Message(id=qm.ids.new(), body=body, sent_time=dt.datetime.now(dt.UTC),
                   destination_queue=queue.destinations[0].format_name)


def test_receive_is_not_locked_out_by_an_open_transaction(qm: QueueManager, monkeypatch) -> None:
    # A shorter grace keeps the test short; nothing here depends on how long it is.
    monkeypatch.setattr(facade.kafka.librdkafka, "OPEN_TRANSACTION_GRACE", 2.0)
    q = qm.create_queue(r".\private$\heldback")
    q.send(Message(body=b"before"), wait=True)

    producer = Producer({"bootstrap.servers": qm.config.bootstrap_servers,
                         "transactional.id": f"kmq-test-open-{uuid.uuid4().hex}",
                         "allow.auto.create.topics": False})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        record = encode_message(_message(qm, q, b"in the transaction"))
        producer.produce(q.destinations[0].topics.data, value=record.value, key=record.key,
                         headers=list(record.headers))
        assert producer.flush(30) == 0
        q.send(Message(body=b"after"), wait=True)   # behind the open transaction

        assert q.receive(timeout=60).body == b"before"

        producer.commit_transaction(30)
        assert [q.receive(timeout=60).body for _ in range(2)] == [b"in the transaction", b"after"]
    finally:
        producer.close()
