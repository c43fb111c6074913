"""No silent loss on the receive path: a receive never removes a message it does not hand out, fresh
receivers read long queues and take the highest priority first, malformed records in a
receipts topic never wedge a queue, and bad timeouts are refused."""

from __future__ import annotations

import math
import time

import pytest
from confluent_kafka import Producer

from typer.testing import CliRunner

from facade import (
    BrokerUnavailable,
    InvalidParameter,
    Message,
    MessageId,
    QueueQuotaExceeded,
    ReceiveTimeout,
)
from facade.cli import app
from facade.manager import QueueManager
from facade.model.message import JournalLevel
from facade.state.queueview import QueueView
from facade.model.receipts import ReceiptAction, encode_receipt, new_claim
from tests.support.journal import fail_next_journal_write
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration


def _raw_producer(broker: BrokerEndpoint) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                     "linger.ms": 0, "allow.auto.create.topics": False})


def _fill(q, count: int, priority: int = 3) -> None:
    for _ in range(count):
        q.send(Message(body=b"x" * 200, priority=priority))
    q.send(Message(body=b"last of the batch", priority=priority), wait=True)


# -- a fresh receiver reads a queue with thousands of receipts ------------------------------------


def test_fresh_receiver_reads_a_queue_with_thousands_of_receipts(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    q = qm.create_queue(r".\private$\long-history")
    _fill(q, 5_999)
    receipts = q._opened.single().topics.receipts
    producer = _raw_producer(broker)
    # One receipt per produce request, as receivers write them: many small batches starve a
    # reader whose fetch settings are not made for them.
    for offset in range(5_000):
        claim = new_claim(ReceiptAction.RECEIVE, (offset,), "test:receiver")
        producer.produce(receipts, encode_receipt(claim))
        producer.flush(30)
    q.close()

    fresh = qm.open_queue(r".\private$\long-history")
    assert fresh.count() == 1_000
    assert fresh.receive(timeout=30).lookup_id == 5_000
    other = qm.open_queue(r".\private$\long-history")
    assert other.receive(timeout=30).lookup_id == 5_001


# -- priority order for a fresh receiver ----------------------------------------------------------


@pytest.mark.parametrize("backlog", [1_000, 3_000])
def test_fresh_receiver_takes_the_highest_priority_first(qm: QueueManager, backlog: int) -> None:
    q = qm.create_queue(r".\private$\prio")
    _fill(q, backlog - 1, priority=3)
    urgent = q.send(Message(body=b"urgent", priority=7), wait=True)
    q.close()
    peeker = qm.open_queue(r".\private$\prio")
    assert peeker.peek(timeout=30).id == urgent.id
    receiver = qm.open_queue(r".\private$\prio")
    got = receiver.receive(timeout=30)
    assert got.id == urgent.id and got.priority == 7
    assert receiver.receive(timeout=30).priority == 3


# -- a receive that raises removes nothing it does not hand out -------------------------------


def _fail_first_settle(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the first claim's verdict unreadable: its receipt is appended and acknowledged by
    the broker (so it removes the message for every reader), then settle raises as if the
    broker had stopped answering."""
    real_settle = QueueView.settle
    failed: list[str] = []

    def settle(view: QueueView, pending):  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(pending.receipt.claim_id)
            pending.record.wait(30)
            raise BrokerUnavailable("simulated: the receipt's verdict could not be read back")
        return real_settle(view, pending)

    monkeypatch.setattr(QueueView, "settle", settle)
    return failed


def test_receive_whose_verdict_was_not_read_hands_the_message_out_next_time(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    q = qm.create_queue(r".\private$\unsettled")
    first = q.send(Message(body=b"first", priority=3), wait=True)
    q.send(Message(body=b"second", priority=3), wait=True)
    failed = _fail_first_settle(monkeypatch)
    with pytest.raises(BrokerUnavailable):
        q.receive(timeout=10)
    assert failed
    # The receipt won the message for this handle: the next receive hands it out, before the
    # rest of the queue, and no other receiver can get it.
    assert q.receive(timeout=10).id == first.id
    assert q.receive(timeout=10).body == b"second"
    other = qm.open_queue(r".\private$\unsettled")
    with pytest.raises(ReceiveTimeout):
        other.receive(timeout=1)


def test_closing_a_handle_that_holds_a_message_dead_letters_it(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    q = qm.create_queue(r".\private$\held")
    sent = q.send(Message(body=b"held"), wait=True)
    _fail_first_settle(monkeypatch)
    with pytest.raises(BrokerUnavailable):
        q.receive(timeout=10)
    q.close()
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.id == sent.id and dead.body == b"held"
    assert "closed before" in dead.properties["kmq.reason"]


def test_receive_whose_journal_copy_fails_hands_the_message_out_next_time(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    q = qm.create_queue(r".\private$\journaled", journal=True)
    sent = q.send(Message(body=b"journaled"), wait=True)
    failed = fail_next_journal_write(qm, monkeypatch)
    with pytest.raises(BrokerUnavailable):
        q.receive(timeout=10)
    assert failed == [1]
    assert q.receive(timeout=10).id == sent.id
    journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\journaled;JOURNAL")
    assert journal.receive(timeout=10).id == sent.id



def test_receive_many_whose_journal_batch_fails_keeps_the_whole_batch(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal copies of a receive_many batch are written with one wait; if that wait
    fails, no message of the batch is handed out and the next receive hands all of them out."""
    q = qm.create_queue(r".\private$\journaled-batch", journal=True)
    sent = [q.send(Message(body=b"j%d" % i), wait=True).id for i in range(5)]
    failed = fail_next_journal_write(qm, monkeypatch)
    with pytest.raises(BrokerUnavailable):
        q.receive_many(5, timeout=10)
    assert failed == [5]
    got: list[MessageId] = []
    while len(got) < 5:
        got += [m.id for m in q.receive_many(5 - len(got), timeout=10)]
    assert got == sent
    journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\journaled-batch;JOURNAL")
    copies = []
    while len(copies) < 5:
        copies += [m.id for m in journal.receive_many(5, timeout=10)]
    assert copies == sent


# -- the poison sweep survives receipts that remove records it listed ----------------------------


def test_poison_sweep_skips_records_removed_while_it_runs(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    q = qm.create_queue(r".\private$\poison-race")
    topics = q._opened.single().topics
    producer = _raw_producer(broker)
    for _ in range(3):
        producer.produce(topics.data, b"not an envelope")
    producer.flush(30)
    view = q._opened.open_view()
    view.catch_up()
    assert [e.offset for e in view.state.poisoned()] == [0, 1, 2]
    # Another process dead-letters records 1 and 2 first; this view has not read that yet.
    other = qm.open_queue(r".\private$\poison-race")
    other_view = other._opened.open_view()
    other_view.catch_up()
    for entry in other_view.state.poisoned()[1:]:
        other._system.take(other_view, entry, ReceiptAction.POISON,
                           target=qm.dead_letter_topic, reason="invalid envelope")
    assert q._system.dead_letter_poison(view) == [0]
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=0.5)


# -- receipts topics: a malformed record is skipped, never wedges --------------------------------


def test_malformed_receipt_is_skipped_and_counted(qm: QueueManager, broker: BrokerEndpoint) -> None:
    q = qm.create_queue(r".\private$\bad-receipt")
    for body in (b"one", b"two", b"three"):
        q.send(Message(body=body), wait=True)
    assert q.receive(timeout=10).body == b"one"
    producer = _raw_producer(broker)
    producer.produce(q._opened.single().topics.receipts, b"garbage")
    producer.flush(30)
    assert q.peek(timeout=10).body == b"two"
    assert q.receive(timeout=10).body == b"two"
    fresh = qm.open_queue(r".\private$\bad-receipt")
    assert fresh.count() == 1
    assert fresh.malformed_receipts() == 1
    assert fresh.receive(timeout=10).body == b"three"


def test_garbage_in_the_dead_letter_receipts_does_not_break_listing(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    q = qm.create_queue(r".\private$\to-dlq")
    sent = q.send(Message(body=b"expiring", time_to_be_received=0.2,
                          journal=JournalLevel.DEADLETTER), wait=True)
    time.sleep(0.5)
    q.expire_due()
    producer = _raw_producer(broker)
    producer.produce(f"{qm.dead_letter_topic}.receipts", b"\x00garbage")
    producer.flush(30)
    dlq = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    assert dlq.peek(timeout=10).id == sent.id
    assert dlq.malformed_receipts() == 1


# -- purge frees what it removed ----------------------------------------------------------------


def test_purge_frees_the_records_it_removed(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\purged")
    _fill(q, 99)
    assert q.count() == 100
    assert q.purge() == 100
    assert q._opened.view is not None and len(q._opened.view.records) == 0


# -- timeouts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1.0, "5"])
def test_bad_receive_and_peek_timeouts_are_refused(qm: QueueManager, timeout: object) -> None:
    q = qm.create_queue(r".\private$\timeouts")
    for operation in (q.receive, q.peek):
        with pytest.raises(InvalidParameter, match="timeout"):
            operation(timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="timeout"):
        q.receive_by_id("00000000-0000-0000-0000-000000000000\\1", timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="timeout"):
        q.cursor().peek_current(timeout=timeout)  # type: ignore[arg-type]


# -- a copy refused by the queue quota is never lost without a trace ---------------------------


def test_send_over_the_quota_raises_unless_dead_lettered(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\tiny", quota_kb=1)
    q.send(Message(body=b"a" * 600), wait=True)
    with pytest.raises(QueueQuotaExceeded, match="quota"):
        q.send(Message(body=b"b" * 3000), wait=True)
    kept = q.send(Message(body=b"c" * 3000, journal=JournalLevel.DEADLETTER), wait=True)
    assert qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10).id == kept.id
    assert q.count() == 1


def test_cli_send_over_the_quota_exits_non_zero(qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", qm.name)
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", qm.session.bootstrap_servers)
    qm.create_queue(r".\private$\tiny-cli", quota_kb=1)
    result = CliRunner().invoke(app, ["send", r".\private$\tiny-cli", "--body", "x" * 3000])
    assert result.exit_code != 0
    assert "quota" in result.output and "Traceback" not in result.output
