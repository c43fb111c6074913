"""Queue semantics on the in-memory Kafka (facade.kafka.memorykafka): the queue manager's real code,
no broker process. Cursor moves, the journal quota, acknowledgments (ACK_REACH_QUEUE,
ACK_RECEIVE and a NACK), journal copies, TTBR expiry into the dead-letter queue, a purge and
a transaction. The broker-process tests (tests/integration) stay for what only a broker shows:
replication and acks, broker failures, retention, several processes, librdkafka itself."""

from __future__ import annotations

import time

import pytest

from facade import (
    Acknowledgment,
    IllegalCursorAction,
    JournalLevel,
    Message,
    MessageClass,
    ReceiveTimeout,
)
from facade.config import KmqConfig
from facade.model.envelope import decode_acknowledgment
from facade.manager import QueueManager
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.queues.queue import MessageQueue
from tests.support.transactions import restart_fences_the_old_sender

WAIT = 10.0


@pytest.fixture
def qm(memory_qm: QueueManager) -> QueueManager:
    """A queue manager on its own in-memory Kafka."""
    return memory_qm


def _admin(qm: QueueManager) -> tuple[MessageQueue, str]:
    return qm.create_queue(r".\private$\admin"), rf"DIRECT=OS:{qm.name}\private$\admin"


def test_the_session_is_the_one_given(qm: QueueManager) -> None:
    assert isinstance(qm.session, MemoryKafkaSession)
    assert qm.session.topic_exists(qm.dead_letter_topic)


def test_cursor_walks_in_priority_order_and_receive_current_moves_to_the_next(
        qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\walk")
    for body, priority in ((b"a", 3), (b"b", 7), (b"c", 3)):
        q.send(Message(body=body, priority=priority), wait=True)
    with q.cursor() as cursor:
        assert cursor.peek_current(timeout=WAIT).body == b"b"
        assert cursor.peek_next().body == b"a"
        assert cursor.receive_current().body == b"a"
        assert cursor.peek_current().body == b"c", "the cursor moved to the message that followed"
        assert cursor.receive_current().body == b"c"
        assert cursor.lookup_id is None
        with pytest.raises(IllegalCursorAction, match="no current message"):
            cursor.peek_next()
        q.send(Message(body=b"d"), wait=True)
        assert cursor.peek_current(timeout=WAIT).body == b"d", "a later arrival becomes current"
    assert [q.receive(timeout=WAIT).body for _ in range(2)] == [b"b", b"d"]


def test_reach_queue_and_receive_acknowledgments(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\orders")
    admin, admin_fn = _admin(qm)
    sent = q.send(Message(body=b"o1", label="order", admin_queue=admin_fn,
                          acknowledge=Acknowledgment.POSITIVE_ARRIVAL
                          | Acknowledgment.POSITIVE_RECEIVE))
    reach = admin.receive(timeout=WAIT)
    assert reach.message_class is MessageClass.ACK_REACH_QUEUE and reach.correlation_id == sent.id
    assert decode_acknowledgment(reach.body).original_id == sent.id
    assert q.receive(timeout=WAIT).id == sent.id
    received = admin.receive(timeout=WAIT)
    assert received.message_class is MessageClass.ACK_RECEIVE
    assert received.correlation_id == sent.id


def test_mark_rejected_sends_a_nack_and_a_dead_letter_copy(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\rejects")
    admin, admin_fn = _admin(qm)
    sent = q.send(Message(body=b"bad", journal=JournalLevel.DEADLETTER, admin_queue=admin_fn,
                          acknowledge=Acknowledgment.NEGATIVE_RECEIVE), wait=True)
    q.mark_rejected(q.peek(timeout=WAIT).lookup_id, reason="cannot parse")
    assert q.count() == 0
    nack = admin.receive(timeout=WAIT)
    assert nack.message_class is MessageClass.NACK_RECEIVE_REJECTED
    assert decode_acknowledgment(nack.body).reason == "cannot parse"
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=WAIT)
    assert dead.id == sent.id and dead.message_class is MessageClass.NACK_RECEIVE_REJECTED


def test_queue_journal_and_source_journal_copies(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\journaled", journal=True)
    sent = q.send(Message(body=b"keep", journal=JournalLevel.JOURNAL), wait=True)
    assert q.receive(timeout=WAIT).id == sent.id
    queue_journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\journaled;JOURNAL")
    assert queue_journal.receive(timeout=WAIT).id == sent.id
    assert qm.open_queue(f"MACHINE={qm.guid};JOURNAL").receive(timeout=WAIT).id == sent.id


def test_journal_quota_stops_journaling_not_receiving(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\jq", journal=True, journal_quota_kb=1)
    first = q.send(Message(body=b"a" * 600), wait=True)
    second = q.send(Message(body=b"b" * 600), wait=True)
    assert [q.receive(timeout=WAIT).id for _ in range(2)] == [first.id, second.id]
    journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\jq;JOURNAL")
    assert journal.receive(timeout=WAIT).id == first.id
    with pytest.raises(ReceiveTimeout):
        journal.receive(timeout=0.2)


def test_queue_quota_refuses_with_nack_q_exceed_quota(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\small", quota_kb=1)
    admin, admin_fn = _admin(qm)
    q.send(Message(body=b"a" * 600), wait=True)
    over = q.send(Message(body=b"b" * 600, acknowledge=Acknowledgment.NACK_REACH_QUEUE,
                          admin_queue=admin_fn, journal=JournalLevel.DEADLETTER), wait=True)
    assert q.count() == 1
    nack = admin.receive(timeout=WAIT)
    assert nack.message_class is MessageClass.NACK_Q_EXCEED_QUOTA and nack.correlation_id == over.id
    assert qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=WAIT).id == over.id
    q.receive(timeout=WAIT)
    q.send(Message(body=b"c" * 600), wait=True)  # room again once the first one is gone
    assert q.count() == 1


def test_ttbr_expiry_dead_letters_with_a_nack_and_is_never_delivered(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\ttbr")
    admin, admin_fn = _admin(qm)
    # Only ever waited past, never raced: a busy machine makes it more expired, not less.
    sent = q.send(Message(body=b"stale", time_to_be_received=0.2, journal=JournalLevel.DEADLETTER,
                          acknowledge=Acknowledgment.NACK_RECEIVE, admin_queue=admin_fn), wait=True)
    q.send(Message(body=b"fresh"), wait=True)
    time.sleep(0.5)
    assert q.receive(timeout=WAIT).body == b"fresh"
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=0.2)
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=WAIT)
    assert dead.id == sent.id and dead.message_class is MessageClass.NACK_RECEIVE_TIMEOUT
    nack = admin.receive(timeout=WAIT)
    assert nack.message_class is MessageClass.NACK_RECEIVE_TIMEOUT and nack.correlation_id == sent.id
    assert decode_acknowledgment(nack.body).original_body == b"stale"


def test_purge_removes_what_is_there_and_not_what_comes_after(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\purged")
    for i in range(3):
        q.send(Message(body=bytes([i])), wait=True)
    assert q.purge() == 3
    assert q.count() == 0
    q.send(Message(body=b"later"), wait=True)
    assert q.receive(timeout=WAIT).body == b"later"


def test_transaction_is_invisible_until_commit_and_abort_sends_nothing(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\xact", transactional=True)
    with qm.begin_transaction() as tx:
        q.send(Message(body=b"one"), transaction=tx)
        q.send(Message(body=b"two"), transaction=tx)
        with pytest.raises(ReceiveTimeout):
            qm.open_queue(q.format_name).peek(timeout=0.2)
    aborted = qm.begin_transaction()
    q.send(Message(body=b"never"), transaction=aborted)
    aborted.abort()
    got = [q.receive(timeout=WAIT, transaction="single").body for _ in range(2)]
    assert got == [b"one", b"two"]
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=0.2, transaction="single")


def test_a_restarted_sender_fences_the_old_one(qm: QueueManager) -> None:
    """Kafka's zombie fencing on the in-memory Kafka (tests/integration/test_transactions.py
    runs it on Apache Kafka): a second queue manager with the same transactional.id aborts what
    the first one has open, and the first one's commit fails; a later transaction of it works
    again."""
    assert isinstance(qm.session, MemoryKafkaSession)
    q = qm.create_queue(r".\private$\fenced", transactional=True)
    restart_fences_the_old_sender(qm, q, lambda: QueueManager.open(
        KmqConfig.load(queue_manager="restarted"),
        session=MemoryKafkaSession(qm.session.cluster)))
    with qm.begin_transaction() as tx:  # a new producer, which fences the restarted one
        q.send(Message(body=b"old 2"), transaction=tx)
    got = [q.receive(timeout=WAIT, transaction="single").body for _ in range(3)]
    assert got == [b"old 1", b"new", b"old 2"]
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=0.2, transaction="single")
