"""Acknowledgments, request/response, TTBR expiry into the DLQ (also with no receiver running),
journals and timed dequeue, on a real broker process."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from facade import (
    Acknowledgment,
    JournalLevel,
    Message,
    MessageClass,
    ReceiveTimeout,
    UnsupportedFormatNameOperation,
)
from facade.model.envelope import decode_acknowledgment
from facade.manager import QueueManager
from facade.service import QueueManagerService
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration




def _admin(qm: QueueManager, name: str = "admin"):
    queue = qm.create_queue(rf".\private$\{name}")
    return queue, rf"DIRECT=OS:{qm.name}\private$\{name}"


def test_reach_queue_and_receive_acknowledgments(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\orders")
    admin, admin_fn = _admin(qm)
    sent = q.send(Message(body=b"o1", label="order",
                          acknowledge=Acknowledgment.POSITIVE_ARRIVAL | Acknowledgment.POSITIVE_RECEIVE,
                          admin_queue=admin_fn))
    reach = admin.receive(timeout=10)
    assert reach.message_class is MessageClass.ACK_REACH_QUEUE
    assert reach.correlation_id == sent.id and reach.label == "order"
    info = decode_acknowledgment(reach.body)
    assert info.original_id == sent.id
    assert [a.format_name for a in info.queues] == [rf"DIRECT=OS:{qm.name}\private$\orders"]
    assert q.receive(timeout=10).id == sent.id
    got = admin.receive(timeout=10)
    assert got.message_class is MessageClass.ACK_RECEIVE and got.correlation_id == sent.id
    with pytest.raises(ReceiveTimeout):
        admin.receive(timeout=0.3)


def test_no_acknowledgment_unless_requested(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\quiet")
    admin, admin_fn = _admin(qm)
    # NACK_RECEIVE asks only for negative acknowledgments: a normal receive posts nothing.
    q.send(Message(body=b"x", acknowledge=Acknowledgment.NACK_RECEIVE, admin_queue=admin_fn), wait=True)
    q.receive(timeout=10)
    with pytest.raises(ReceiveTimeout):
        admin.receive(timeout=0.5)


def test_request_response_with_correlation(qm: QueueManager) -> None:
    service = qm.create_queue(r".\private$\service")
    replies = qm.create_queue(r".\private$\replies")
    request = service.send(Message(body=b"2+2", response_queue=rf"DIRECT=OS:{qm.name}\private$\replies"),
                           wait=True)
    got = service.receive(timeout=10)
    qm.open_queue(got.response_queue).send(Message(body=b"4", correlation_id=got.id), wait=True)
    assert replies.receive_by_correlation_id(request.id, timeout=10).body == b"4"


def test_expiry_without_deadletter_flag_drops_the_message(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\drop")
    q.send(Message(body=b"gone", time_to_be_received=0.2), wait=True)
    time.sleep(0.4)
    assert q.expire_due() == 1
    assert q.count() == 0
    with pytest.raises(ReceiveTimeout):
        qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=0.5)


def test_qm_run_expires_messages_when_nobody_receives(broker: BrokerEndpoint, qm: QueueManager,
                                                       kmq_home: Path) -> None:
    q = qm.create_queue(r".\private$\unread")
    sent = q.send(Message(body=b"expires", time_to_be_received=0.2,
                          journal=JournalLevel.DEADLETTER), wait=True)
    time.sleep(0.4)
    env = {**os.environ, "KMQ_HOME": str(kmq_home), "KMQ_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "KMQ_QUEUE_MANAGER": qm.name}
    result = subprocess.run([sys.executable, "-m", "facade.cli", "qm", "run", "--once", "--json"],
                            capture_output=True, text=True, env=env, timeout=120, check=False,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["expired"] == 1 and report["queues"] >= 1
    assert qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10).id == sent.id
    assert q.count() == 0


def test_service_run_loop_sweeps(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\loop")
    q.send(Message(body=b"x", time_to_be_received=0.1), wait=True)
    time.sleep(0.3)
    service = QueueManagerService(qm)
    service.run(interval=0.05, sweeps=2)
    service.close()
    assert q.count() == 0


def test_queue_journal_and_source_journal(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\journaled", journal=True)
    sent = q.send(Message(body=b"keep", journal=JournalLevel.JOURNAL), wait=True)
    assert q.receive(timeout=10).id == sent.id
    queue_journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\journaled;JOURNAL")
    assert queue_journal.receive(timeout=10).id == sent.id
    machine_journal = qm.open_queue(f"MACHINE={qm.guid};JOURNAL")
    assert machine_journal.receive(timeout=10).id == sent.id
    plain = qm.create_queue(r".\private$\plain")
    plain.send(Message(body=b"no copy"), wait=True)
    plain.receive(timeout=10)
    with pytest.raises(ReceiveTimeout):
        machine_journal.receive(timeout=0.5)


def test_timed_dequeue_not_before(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\later")
    due = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1.5)
    q.send(Message(body=b"later", not_before=due), wait=True)
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=0.3)
    got = q.receive(timeout=10)
    assert got.body == b"later"
    assert dt.datetime.now(dt.timezone.utc) >= due


def test_move_to_subqueue(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\work")
    first = q.send(Message(body=b"poisonous"))
    q.send(Message(body=b"fine"), wait=True)
    lookup = q.peek_by_id(first.id, timeout=10).lookup_id
    moved = q.move(lookup, "poison")
    assert moved.id == first.id and moved.move_count == 1
    poison = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\work;poison")
    got = poison.receive(timeout=10)
    assert got.id == first.id and got.body == b"poisonous" and got.move_count == 1
    assert q.receive(timeout=10).body == b"fine"
    with pytest.raises(UnsupportedFormatNameOperation, match="subqueue"):
        poison.send(Message(body=b"direct"))


def test_mark_rejected_nacks_and_dead_letters(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\rej")
    admin, admin_fn = _admin(qm)
    sent = q.send(Message(body=b"bad", journal=JournalLevel.DEADLETTER,
                          acknowledge=Acknowledgment.NEGATIVE_RECEIVE, admin_queue=admin_fn), wait=True)
    q.mark_rejected(q.peek(timeout=10).lookup_id, reason="cannot parse")
    assert q.count() == 0
    nack = admin.receive(timeout=10)
    assert nack.message_class is MessageClass.NACK_RECEIVE_REJECTED and nack.correlation_id == sent.id
    assert decode_acknowledgment(nack.body).reason == "cannot parse"
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.id == sent.id and dead.message_class is MessageClass.NACK_RECEIVE_REJECTED


def test_journaling_turned_on_applies_to_the_next_receive_of_an_open_handle(
        qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\journal-later")
    first = q.send(Message(body=b"not kept"), wait=True)
    assert q.receive(timeout=10).id == first.id
    q.set_properties(journal=True)
    kept = q.send(Message(body=b"kept"), wait=True)
    assert q.receive(timeout=10).id == kept.id
    journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\journal-later;JOURNAL")
    assert journal.receive(timeout=10).id == kept.id
    with pytest.raises(ReceiveTimeout):
        journal.receive(timeout=0.5)


def test_journal_copies_do_not_expire(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\keepjournal", journal=True)
    sent = q.send(Message(body=b"j", time_to_be_received=3.0,
                          journal=JournalLevel.JOURNAL | JournalLevel.DEADLETTER), wait=True)
    assert q.receive(timeout=2).id == sent.id
    time.sleep(3.2)   # past the original TTBR: the journal copies must still be there
    for journal in (rf"DIRECT=OS:{qm.name}\private$\keepjournal;JOURNAL", f"MACHINE={qm.guid};JOURNAL"):
        kept = qm.open_queue(journal).peek(timeout=10)
        assert kept.id == sent.id and kept.time_to_be_received is None
    with pytest.raises(ReceiveTimeout):
        qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=0.5)


def test_recovery_completes_system_claims_left_by_a_crashed_process(qm: QueueManager) -> None:
    from facade.state.queueview import QueueView
    from facade.model.receipts import ReceiptAction

    q = qm.create_queue(r".\private$\crashy")
    expiring = q.send(Message(body=b"e", time_to_be_received=0.2, journal=JournalLevel.DEADLETTER),
                      wait=True)
    moving = q.send(Message(body=b"m"), wait=True)
    time.sleep(0.4)
    # A process that claimed both and died before writing the outputs (no COMPLETED receipt).
    crashed = QueueView(qm.session, q.destinations[0].topics, claimant="crashed")
    crashed.catch_up()
    offsets = {e.message_id: e.offset for e in crashed.state.expired(10**15)}
    crashed.claim(ReceiptAction.EXPIRE, (offsets[str(expiring.id)],),
                  target=qm.dead_letter_topic, reason="time-to-be-received elapsed")
    move_offset = crashed.state.by_message_id(str(moving.id)).offset
    crashed.claim(ReceiptAction.MOVE, (move_offset,), target="poison")
    crashed.close()

    assert q.recover_claims(grace=3600) == 0, "young claims belong to their (maybe live) owner"
    assert q.recover_claims(grace=0) == 2
    assert q.recover_claims(grace=0) == 0, "completed claims are not redone"
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.id == expiring.id and dead.message_class is MessageClass.NACK_RECEIVE_TIMEOUT
    sub = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\crashy;poison").receive(timeout=10)
    assert sub.id == moving.id and sub.move_count == 1
    assert q.count() == 0


def test_a_waiting_receive_recovers_a_batch_a_dead_receiver_was_dead_lettering(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver that died between its REJECT and the dead-letter copies of a batch: any
    handle waiting on the queue redoes the claim once it is older than the grace, without
    ``kmq qm run``."""
    import facade.queues.systemactions
    from facade.state.queueview import QueueView
    from facade.model.receipts import ReceiptAction

    q = qm.create_queue(r".\private$\orphaned")
    sent = q.send_many([Message(body=b"%d" % i) for i in range(5)], wait=True)
    crashed = QueueView(qm.session, q.destinations[0].topics, claimant="crashed")
    crashed.catch_up()
    offsets = tuple(crashed.state.by_message_id(str(m.id)).offset for m in sent)
    # It prefetched the batch, its lease ran out, and it died between the REJECT that takes
    # the batch from its PREFETCH lock and the dead-letter copies.
    held = crashed.claim(ReceiptAction.PREFETCH, offsets, lease_ms=60_000)
    crashed.claim(ReceiptAction.REJECT, offsets, completes=held.claim_id,
                  target=qm.dead_letter_topic, reason="lease expired")
    crashed.close()

    monkeypatch.setattr(facade.queues.systemactions, "CLAIM_GRACE", 0.0)
    receiver = qm.open_queue(r".\private$\orphaned")
    with pytest.raises(ReceiveTimeout):
        receiver.receive(timeout=2)  # waits, and meanwhile redoes the abandoned claim
    dead_letters = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    got = {str(dead_letters.receive(timeout=10).id) for _ in sent}
    assert got == {str(m.id) for m in sent}
    assert receiver.recover_claims(grace=0) == 0, "completed once, not redone"
