"""Garbage that the garbage fault scenario (``tests/faults/test_garbage.py``) writes, one case
at a time on a real broker.

* A record whose kmq headers are valid but whose value is no envelope (truncated, or another
  schema): a peek dead-letters it as poison, as a receive does. Were the peek to raise
  ``EnvelopeError``, ``kmq dlq list`` and ``kmq journal list`` would fail for good on such a
  record in a dead-letter queue or a journal, which nothing receives from.
* A damaged row in the durable outgoing store (headers that are not JSON, a value stored as
  text, text that is not UTF-8...), or a row whose value is no envelope: recovery dead-letters
  both as poison and removes them, so ``QueueManager.open()`` does not raise in every process
  of the queue manager on that host and no row is logged at every recovery for good. A row
  whose envelope names no valid destination fails at its deadline like the copy of a queue
  that is gone.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from facade import Message, MessageAlreadyReceived, MessageNotFound
from facade.cli._messages import peek_messages
from facade.config import KmqConfig
from facade.model.envelope import encode_message
from facade.manager import QueueManager
from facade.model.message import JournalLevel, MessageClass, MessageId
from facade.state.outgoingqueue import OutgoingRecord
from tests.support.kafka import BrokerEndpoint
from tests.support.outgoing import damage_outgoing_store, dead_pid

pytestmark = pytest.mark.integration


def _poison_copies(qm: QueueManager) -> dict[str, Message]:
    """The dead-letter queue's poison copies by ``kmq.source``."""
    messages, _ = peek_messages(qm.open_queue(f"MACHINE={qm.guid};DEADLETTER"), None)
    return {m.properties["kmq.source"]: m for m in messages if "kmq.source" in m.properties}


def test_a_peek_dead_letters_a_record_with_valid_headers_and_a_broken_value(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    q = qm.create_queue(r".\private$\headed-garbage")
    valid = encode_message(Message(id=MessageId(uuid.uuid4(), 1), body=b"cut short"))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                         "allow.auto.create.topics": False})
    for topic in (q._opened.single().topics.data, qm.dead_letter_topic):
        producer.produce(topic, value=valid.value[:-5], key=valid.key, headers=valid.headers)
    producer.flush(30)
    q.send(Message(body=b"after it"), wait=True)

    assert q.peek(timeout=10).body == b"after it"
    with pytest.raises(MessageAlreadyReceived):
        q.peek_by_lookup_id(0)
    # The dead-letter queue lists: its own broken record is wrapped as poison in it, too, at its
    # end, which the listing that wrapped it may have passed already; the next one shows it.
    _poison_copies(qm)
    poison = _poison_copies(qm)
    for topic in (q._opened.single().topics.data, qm.dead_letter_topic):
        copy = poison[f"{topic}@0:0"]
        assert copy.message_class is MessageClass.NACK_RECEIVE_REJECTED
        assert "truncated" in copy.properties["kmq.reason"]
        assert copy.body == valid.value[:-5]
    assert q.receive(timeout=10).body == b"after it"


def test_damaged_outgoing_rows_are_dead_lettered_and_the_queue_manager_opens(
        qm: QueueManager) -> None:
    topic = qm.create_queue(r".\private$\damaged-store")._opened.single().topics.data
    path = qm.transmitter.outgoing.path
    ids = damage_outgoing_store(path, topic)
    # A valid envelope whose destination is no format name, past its deadline: it fails as a
    # vanished queue's copy rather than stay for good ("cannot be recovered now" at every open).
    lost = Message(id=MessageId(uuid.uuid4(), 9), body=b"nowhere", destination_queue="no::where",
                   journal=JournalLevel.DEADLETTER)
    record = encode_message(lost)
    qm.transmitter.outgoing.put(OutgoingRecord(topic, record.key, record.value, tuple(record.headers),
                                          str(lost.id), 1, f"message:{dead_pid()}", 0))

    config = KmqConfig.load(bootstrap_servers=qm.session.bootstrap_servers,
                            queue_manager=qm.name)
    with QueueManager.open(config) as again:
        assert again.transmitter.outgoing.count() == 0
    poison = _poison_copies(qm)
    for row in ids:
        copy = poison[f"{path} row {row}"]
        assert copy.message_class is MessageClass.NACK_RECEIVE_REJECTED
        assert "cannot be decoded" in copy.properties["kmq.reason"]
    messages, _ = peek_messages(qm.open_queue(f"MACHINE={qm.guid};DEADLETTER"), None)
    (failed,) = [m for m in messages if m.id == lost.id]
    assert failed.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    with QueueManager.open(config):  # nothing is replayed: no new copy
        pass
    assert len(_poison_copies(qm)) == len(ids)


@pytest.mark.parametrize("action", ["move", "mark_rejected"])
def test_moving_or_rejecting_a_broken_record_says_it_went_to_the_dead_letter_queue(
        qm: QueueManager, broker: BrokerEndpoint, action: str) -> None:
    # For a record whose value is no envelope, move() and mark_rejected() have no Message to
    # return: they raise MessageNotFound saying the record went to the dead-letter queue.
    q = qm.create_queue(rf".\private$\broken-{action.replace('_', '-')}")
    valid = encode_message(Message(id=MessageId(uuid.uuid4(), 1), body=b"cut short"))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                         "allow.auto.create.topics": False})
    producer.produce(q._opened.single().topics.data, value=valid.value[:-5], key=valid.key,
                     headers=valid.headers)
    producer.flush(30)

    with pytest.raises(MessageNotFound, match="dead-letter queue as poison"):
        if action == "move":
            q.move(0, "poison")
        else:
            q.mark_rejected(0)
    assert _poison_copies(qm)[f"{q._opened.single().topics.data}@0:0"].body == valid.value[:-5]
