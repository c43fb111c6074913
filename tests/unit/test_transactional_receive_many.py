"""``receive_many(n, timeout, transaction=tx)`` on the in-memory Kafka (facade.kafka.memorykafka):
a batch of a transactional queue locked by one LOCK receipt, removed exactly once at commit in
queue order, returned whole at abort with the abort count raised, journaled with the commit.
tests/integration/test_transactions.py runs it on a broker process, with a mover SIGKILLed
inside its transactions."""

from __future__ import annotations


import pytest

from facade import Delivery, JournalLevel, Message, MessageClass, ReceiveTimeout, TransactionUsage
from facade.model.envelope import encode_message
from facade.manager import QueueManager
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.queues.queue import MessageQueue
from facade.model.receipts import ReceiptAction, decode_receipt
from facade.queues.systemactions import SystemActions

WAIT = 10.0


@pytest.fixture
def qm(memory_qm: QueueManager) -> QueueManager:
    """A queue manager on its own in-memory Kafka."""
    return memory_qm


def _filled(qm: QueueManager, name: str, count: int, **properties: object) -> MessageQueue:
    q = qm.create_queue(rf".\private$\{name}", transactional=True, **properties)
    q.send_many([Message(body=str(i).encode()) for i in range(count)], transaction="single")
    return q


def _receipts(qm: QueueManager, q: MessageQueue) -> list[tuple[ReceiptAction, tuple[int, ...]]]:
    """(action, offsets) of every committed receipt of ``q``, in log order."""
    assert isinstance(qm.session, MemoryKafkaSession)
    log = qm.session.cluster.logs()[q._opened.single().topics.receipts]
    found = []
    for offset in range(log.high_watermark):
        if log.visible(offset):
            receipt = decode_receipt(log.record(offset).value)
            found.append((receipt.action, tuple(receipt.offsets)))
    return found


def test_a_committed_batch_is_removed_once_in_order_with_one_lock_and_one_completion(
        qm: QueueManager) -> None:
    q = _filled(qm, "batch", 7)
    with qm.begin_transaction() as tx:
        first = q.receive_many(5, timeout=WAIT, transaction=tx)
        rest = q.receive_many(5, timeout=WAIT, transaction=tx)
    assert [int(m.body) for m in first + rest] == list(range(7))
    assert [m.lookup_id for m in first + rest] == sorted(m.lookup_id for m in first + rest)
    assert all(type(m) is Message for m in first + rest), "the transaction keeps the locks"
    assert qm.open_queue(q.format_name).count() == 0
    receipts = _receipts(qm, q)
    locks = [offsets for action, offsets in receipts if action is ReceiptAction.LOCK]
    completions = [offsets for action, offsets in receipts if action is ReceiptAction.COMPLETED]
    assert [len(offsets) for offsets in locks] == [5, 2]
    assert sorted(completions) == sorted(locks), "one COMPLETED per lock, naming its offsets"
    with pytest.raises(ReceiveTimeout):
        q.receive_many(5, timeout=0.2, transaction="single")


def test_an_aborted_batch_comes_back_whole_in_its_place_with_the_abort_count_raised(
        qm: QueueManager) -> None:
    q = _filled(qm, "aborted", 4)
    tx = qm.begin_transaction()
    taken = q.receive_many(3, timeout=WAIT, transaction=tx)
    assert [int(m.body) for m in taken] == [0, 1, 2]
    other = qm.open_queue(q.format_name)
    assert int(other.receive(timeout=WAIT, transaction="single").body) == 3, \
        "the locked batch is not receivable while its transaction is open"
    tx.abort()
    releases = [o for action, o in _receipts(qm, q) if action is ReceiptAction.RELEASE]
    assert releases == [tuple(m.lookup_id for m in taken)], "one RELEASE for the batch's lock"
    again = q.receive_many(10, timeout=WAIT, transaction="single")
    assert [(int(m.body), m.abort_count) for m in again] == [(0, 1), (1, 1), (2, 1)]
    assert [m.id for m in again] == [m.id for m in taken]


def test_single_takes_what_the_queue_holds_and_commits_before_returning(
        qm: QueueManager) -> None:
    q = _filled(qm, "single", 3)
    got = q.receive_many(100, timeout=WAIT, transaction="single")
    assert [int(m.body) for m in got] == [0, 1, 2]
    assert qm.open_queue(q.format_name).count() == 0


def test_the_commit_journals_the_batch(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\journaled", transactional=True, journal=True)
    q.send_many([Message(body=str(i).encode(), journal=JournalLevel.JOURNAL) for i in range(3)],
                transaction="single")
    with qm.begin_transaction() as tx:
        got = q.receive_many(3, timeout=WAIT, transaction=tx)
        journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\journaled;JOURNAL")
        assert journal.count() == 0, "journal copies are written at commit"
    kept = journal.receive_many(10, timeout=WAIT)
    assert [m.id for m in kept] == [m.id for m in got]


def test_refused_where_receive_with_a_transaction_is_refused(qm: QueueManager) -> None:
    plain = qm.create_queue(r".\private$\plain")
    plain.send(Message(body=b"x"), wait=True)
    with pytest.raises(TransactionUsage, match="not a transactional queue"):
        plain.receive_many(5, timeout=WAIT, transaction="single")
    assert plain.count() == 1, "nothing was taken"
    q = _filled(qm, "ended", 1)
    tx = qm.begin_transaction()
    tx.commit()
    with pytest.raises(TransactionUsage):
        q.receive_many(5, timeout=WAIT, transaction=tx)
    assert q.count() == 1


def test_a_record_that_is_not_an_envelope_in_a_batch_is_dead_lettered_and_the_rest_received(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    poisoned: list[int] = []
    dead_letter = SystemActions.dead_letter_record

    def recorded(self: SystemActions, record: object, reason: str) -> None:
        poisoned.append(record.offset)  # type: ignore[attr-defined]
        dead_letter(self, record, reason)

    monkeypatch.setattr(SystemActions, "dead_letter_record", recorded)
    q = _filled(qm, "poisoned", 2)
    valid = encode_message(Message(body=b"template", id=qm.ids.new()))
    producer = qm.session.producer(Delivery.EXPRESS)
    # kmq headers of a valid message, so the index takes it; the value is not an envelope
    producer.produce(q._opened.single().topics.data, value=valid.value[:10] + b"garbage",
                     key=valid.key, headers=valid.headers)
    producer.flush()
    q.send(Message(body=b"2"), transaction="single")
    with qm.begin_transaction() as tx:
        got = q.receive_many(10, timeout=WAIT, transaction=tx)
    assert [int(m.body) for m in got] == [0, 1, 2]
    assert poisoned == [3], "judged when its batch was decoded, under the lock"
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive_many(10, timeout=WAIT)
    assert len(dead) == 1 and dead[0].message_class is MessageClass.NACK_RECEIVE_REJECTED
    assert qm.open_queue(q.format_name).count() == 0
