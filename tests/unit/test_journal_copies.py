"""Queue-journal copies of received messages (PROPID_Q_JOURNAL), on the in-memory Kafka
(facade.kafka.memorykafka): a message that a receive leaves as it was stored is journaled as its
stored record, unchanged; one the copy must change (time-to-be-received, an abort count, a
private body) is encoded again, as before. The journal read back holds the same messages
either way."""

from __future__ import annotations

from typing import Any

import pytest

from facade import JournalLevel, Message
from facade.manager import QueueManager
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.queues.queue import MessageQueue
from facade.queues.sending import ORIGINAL_TTBR_PROPERTY

WAIT = 10.0


@pytest.fixture
def qm(memory_qm: QueueManager) -> QueueManager:
    """A queue manager on its own in-memory Kafka."""
    return memory_qm


def _records(qm: QueueManager, topic: str) -> list[Any]:
    """Every record of ``topic``, in log order."""
    assert isinstance(qm.session, MemoryKafkaSession)
    log = qm.session.cluster.logs()[topic]
    return [log.record(offset) for offset in range(log.high_watermark)]


def _journaled(qm: QueueManager, name: str) -> MessageQueue:
    return qm.create_queue(rf".\private$\{name}", journal=True)


def _journal(qm: QueueManager, name: str) -> MessageQueue:
    return qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\{name};JOURNAL")


@pytest.mark.parametrize("prefetch", [0, 10])
def test_a_message_received_as_stored_is_journaled_as_its_stored_record(
        qm: QueueManager, prefetch: int) -> None:
    q = _journaled(qm, f"plain{prefetch}")
    sent = [q.send(Message(body=f"m{i}".encode(), label=f"l{i}", app_specific=i,
                           properties={"k": str(i)}, journal=JournalLevel.DEADLETTER))
            for i in range(3)]
    receiver = qm.open_queue(q.format_name, prefetch=prefetch)
    received = [receiver.receive(timeout=WAIT) for _ in sent]
    stored = _records(qm, q._opened.single().topics.data)
    copies = _records(qm, q._opened.single().topics.journal().data)
    assert [(c.key, c.value, c.headers) for c in copies] == \
        [(s.key, s.value, s.headers) for s in stored], "the copies are the stored records"
    journal = _journal(qm, f"plain{prefetch}")
    for message in received:
        copy = journal.receive(timeout=WAIT)
        assert (copy.id, copy.body, copy.label, copy.app_specific, copy.properties) == \
            (message.id, message.body, message.label, message.app_specific, message.properties)


def test_a_message_with_a_time_to_be_received_is_journaled_without_it(qm: QueueManager) -> None:
    q = _journaled(qm, "ttbr")
    q.send(Message(body=b"timed", time_to_be_received=3600.0))
    q.receive(timeout=WAIT)
    copy = _journal(qm, "ttbr").receive(timeout=WAIT)
    assert copy.time_to_be_received is None, "a journal copy does not expire"
    assert copy.properties[ORIGINAL_TTBR_PROPERTY] == repr(3600.0)
    [stored] = _records(qm, q._opened.single().topics.data)
    [journaled] = _records(qm, q._opened.single().topics.journal().data)
    assert journaled.value != stored.value


def test_a_message_whose_lock_was_released_is_journaled_with_its_abort_count(
        qm: QueueManager) -> None:
    q = _journaled(qm, "aborted")
    q.send(Message(body=b"again"))
    locked = q.receive(timeout=WAIT, lock=True)
    locked.abandon()
    received = qm.open_queue(q.format_name).receive(timeout=WAIT)
    assert received.abort_count == 1
    copy = _journal(qm, "aborted").receive(timeout=WAIT)
    assert (copy.id, copy.abort_count) == (received.id, 1)


def test_a_batch_mixing_both_kinds_is_journaled_in_receive_order(qm: QueueManager) -> None:
    q = _journaled(qm, "mixed")
    bodies = [b"as stored", b"timed", b"as stored too"]
    q.send(Message(body=bodies[0]))
    q.send(Message(body=bodies[1], time_to_be_received=3600.0))
    q.send(Message(body=bodies[2]))
    assert [m.body for m in qm.open_queue(q.format_name, prefetch=3).receive_many(3, WAIT)] \
        == bodies
    journal = _journal(qm, "mixed")
    copies = [journal.receive(timeout=WAIT) for _ in bodies]
    assert [c.body for c in copies] == bodies
    assert [c.time_to_be_received for c in copies] == [None, None, None]
