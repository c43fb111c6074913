"""Transactions on a real broker: MSMQ's exactly-once, in-order promise on Kafka
transactions (facade.queues.transaction).

The seeds' examples (000, 001): M1 to N1={Q1,Q2}, M2 to N2={Q2,Q3} and M3 to Q2 in one
transaction reach Q2 as M1, M2, M3 exactly once; consecutive transactions arrive in commit order;
a transactional receive and a send in one transaction both happen or neither does; aborts and
crashes give received messages back with their abort count raised; mismatches between
transactional and nontransactional queues and messages are rejected with their NACK classes.

Zombie fencing and the hiding of aborted records are the broker's: these tests run on Apache
Kafka, which does both.
"""

from __future__ import annotations

import subprocess
import sys
import time
import textwrap
from pathlib import Path

import pytest

from facade import (
    Acknowledgment,
    JournalLevel,
    Message,
    MessageClass,
    MessageQueueTransaction,
    ReceiveTimeout,
    TransactionAborted,
    TransactionStatus,
    TransactionUsage,
)
from facade.manager import QueueManager
from tests.support.kafka import BrokerEndpoint
from tests.support.transactions import restart_fences_the_old_sender

pytestmark = pytest.mark.integration

WAIT = 60.0  # seconds a receive may wait for what a commit or a passing lease makes visible


def _tq(qm: QueueManager, name: str):
    return qm.create_queue(rf".\private$\{name}", transactional=True)


def _direct(*queues) -> str:
    """A multiple-element format name of DIRECT= names for ``queues``."""
    return ",".join(f"DIRECT=OS:{q.format_name}" for q in queues)


def _drain(q, expected: int) -> list[Message]:
    """Receive ``expected`` messages (each within WAIT), then check that none is left."""
    got = [q.receive(timeout=WAIT) for _ in range(expected)]
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=1)
    return got


def test_seed_example_three_sends_reach_q2_once_in_order(qm: QueueManager) -> None:
    q1, q2, q3 = (_tq(qm, n) for n in ("q1", "q2", "q3"))
    n1 = qm.open_queue(_direct(q1, q2))
    n2 = qm.open_queue(_direct(q2, q3))
    with qm.begin_transaction() as tx:
        assert tx.status is TransactionStatus.INITIALIZED
        m1 = n1.send(Message(body=b"M1"), transaction=tx)
        m2 = n2.send(Message(body=b"M2"), transaction=tx)
        m3 = q2.send(Message(body=b"M3"), transaction=tx)
        assert tx.status is TransactionStatus.PENDING
        with pytest.raises(ReceiveTimeout):
            qm.open_queue(q2.format_name).peek(timeout=1)  # nothing visible before commit
    assert tx.status is TransactionStatus.COMMITTED
    got = _drain(q2, 3)
    assert [m.body for m in got] == [b"M1", b"M2", b"M3"]
    assert [m.id for m in got] == [m1.id, m2.id, m3.id]
    assert {m.transaction_id for m in got} == {tx.id}
    assert [m.first_in_transaction for m in got] == [True, False, False]
    assert [m.last_in_transaction for m in got] == [False, False, True]
    assert [m.body for m in _drain(q1, 1)] == [b"M1"]
    assert [m.body for m in _drain(q3, 1)] == [b"M2"]


def test_consecutive_transactions_arrive_in_commit_order(qm: QueueManager) -> None:
    q = _tq(qm, "ordered")
    first, second = qm.begin_transaction(), qm.begin_transaction()
    for i in range(3):
        q.send(Message(body=f"A{i}".encode()), transaction=first)
        q.send(Message(body=f"B{i}".encode()), transaction=second)
    second.commit()  # begun second, committed first
    first.commit()
    assert [m.body for m in _drain(q, 6)] == [b"B0", b"B1", b"B2", b"A0", b"A1", b"A2"]


def test_transactional_messages_get_priority_0_and_the_first_messages_timers(qm: QueueManager) -> None:
    q = _tq(qm, "timers")
    with qm.begin_transaction() as tx:
        q.send(Message(body=b"first", priority=7, time_to_be_received=3600), transaction=tx)
        q.send(Message(body=b"second", priority=1, time_to_be_received=5), transaction=tx)
    got = _drain(q, 2)
    assert [m.body for m in got] == [b"first", b"second"]
    assert {m.priority for m in got} == {0}
    assert {m.time_to_be_received for m in got} == {got[0].time_to_be_received}


def test_abort_sends_nothing_and_returns_receives_with_abort_count(qm: QueueManager) -> None:
    inbound, outbound = _tq(qm, "in"), _tq(qm, "out")
    inbound.send(Message(body=b"work"), transaction="single")
    tx = qm.begin_transaction()
    got = inbound.receive(timeout=WAIT, transaction=tx)
    assert got.body == b"work"
    outbound.send(Message(body=b"reply"), transaction=tx)
    with pytest.raises(ReceiveTimeout):
        qm.open_queue(inbound.format_name).receive(timeout=1)  # locked by the transaction
    tx.abort()
    assert tx.status is TransactionStatus.ABORTED
    again = inbound.receive(timeout=WAIT)
    assert again.id == got.id and again.abort_count == 1
    with pytest.raises(ReceiveTimeout):
        outbound.receive(timeout=1)
    tx.abort()  # a second abort does nothing
    with pytest.raises(TransactionUsage):
        outbound.send(Message(body=b"late"), transaction=tx)


def test_an_exception_in_the_block_aborts_and_is_not_swallowed(qm: QueueManager) -> None:
    q = _tq(qm, "raising")
    with pytest.raises(RuntimeError, match="application failed"):
        with qm.begin_transaction() as tx:
            q.send(Message(body=b"never"), transaction=tx)
            raise RuntimeError("application failed")
    assert tx.status is TransactionStatus.ABORTED
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=1)


def test_receive_and_send_in_one_transaction_both_happen(qm: QueueManager) -> None:
    inbound, outbound = _tq(qm, "req"), _tq(qm, "resp")
    admin = qm.create_queue(r".\private$\admin")
    inbound.send(Message(body=b"request", admin_queue=admin.format_name,
                         acknowledge=Acknowledgment.POSITIVE_RECEIVE), transaction="single")
    with qm.begin_transaction() as tx:
        request = inbound.receive(timeout=WAIT, transaction=tx)
        outbound.send(Message(body=b"response to " + request.body), transaction=tx)
    assert [m.body for m in _drain(outbound, 1)] == [b"response to request"]
    fresh = qm.open_queue(inbound.format_name)
    with pytest.raises(ReceiveTimeout):
        fresh.receive(timeout=1)
    assert fresh.count() == 0
    ack = admin.receive(timeout=WAIT)
    assert ack.message_class is MessageClass.ACK_RECEIVE and ack.correlation_id == request.id


def test_single_message_transactions(qm: QueueManager) -> None:
    q = _tq(qm, "single")
    sent = q.send(Message(body=b"one"), transaction="single")
    assert sent.transaction_id is not None
    got = q.receive(timeout=WAIT, transaction="single")
    assert got.id == sent.id and got.first_in_transaction and got.last_in_transaction
    assert qm.open_queue(q.format_name).count() == 0


def test_end_states_are_final(qm: QueueManager) -> None:
    q = _tq(qm, "final")
    tx = qm.begin_transaction()
    assert isinstance(tx, MessageQueueTransaction)
    tx.commit()  # an empty transaction commits
    assert tx.status is TransactionStatus.COMMITTED
    with pytest.raises(TransactionUsage):
        tx.commit()
    with pytest.raises(TransactionUsage):
        tx.abort()
    with pytest.raises(TransactionUsage):
        q.send(Message(body=b"x"), transaction=tx)
    with pytest.raises(TransactionUsage):
        q.receive(timeout=0, transaction=tx)


def test_bad_transaction_arguments_are_refused(qm: QueueManager) -> None:
    q = _tq(qm, "args")
    with pytest.raises(ValueError, match="MessageQueueTransaction"):
        q.send(Message(body=b"x"), transaction="yes")
    with pytest.raises(ValueError, match="lock=True or a transaction"):
        q.receive(timeout=0, lock=True, transaction="single")
    with pytest.raises(ValueError, match="lease"):
        qm.begin_transaction(lease=0)


def test_nontransactional_send_to_transactional_queue_is_rejected(qm: QueueManager) -> None:
    q = _tq(qm, "strict")
    with pytest.raises(TransactionUsage, match="NACK_NOT_TRANSACTIONAL_MSG"):
        q.send(Message(body=b"plain"))
    sent = q.send(Message(body=b"plain", journal=JournalLevel.DEADLETTER), wait=True)
    dlq = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    dead = dlq.receive(timeout=WAIT)
    assert dead.id == sent.id and dead.message_class is MessageClass.NACK_NOT_TRANSACTIONAL_MSG
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=1)


def test_transactional_send_to_nontransactional_queue_is_rejected_at_commit(qm: QueueManager) -> None:
    plain = qm.create_queue(r".\private$\plain")
    admin = qm.create_queue(r".\private$\admin")
    with qm.begin_transaction() as tx:
        with pytest.raises(TransactionUsage, match="NACK_NOT_TRANSACTIONAL_Q"):
            plain.send(Message(body=b"lost?"), transaction=tx)
        sent = plain.send(Message(body=b"rejected", journal=JournalLevel.DEADLETTER,
                                  admin_queue=admin.format_name,
                                  acknowledge=Acknowledgment.NEGATIVE_ARRIVAL), transaction=tx)
        deadxact = qm.open_queue(f"MACHINE={qm.guid};DEADXACT")
        with pytest.raises(ReceiveTimeout):
            deadxact.peek(timeout=1)  # rejected on arrival, which is at commit
    dead = deadxact.receive(timeout=WAIT)
    assert dead.id == sent.id and dead.message_class is MessageClass.NACK_NOT_TRANSACTIONAL_Q
    nack = admin.receive(timeout=WAIT)
    assert nack.message_class is MessageClass.NACK_NOT_TRANSACTIONAL_Q and nack.correlation_id == sent.id
    with pytest.raises(ReceiveTimeout):
        plain.receive(timeout=1)


def test_mixed_targets_deliver_to_matching_queues_and_reject_the_others(qm: QueueManager) -> None:
    strict, plain = _tq(qm, "strict2"), qm.create_queue(r".\private$\plain2")
    both = qm.open_queue(_direct(strict, plain))
    with qm.begin_transaction() as tx:
        sent = both.send(Message(body=b"mixed", journal=JournalLevel.DEADLETTER), transaction=tx)
    assert strict.receive(timeout=WAIT).id == sent.id
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADXACT").receive(timeout=WAIT)
    assert dead.id == sent.id and dead.destination_queue.endswith(r"\private$\plain2")
    with pytest.raises(ReceiveTimeout):
        plain.receive(timeout=1)


def test_transactional_receive_from_nontransactional_queue_is_refused(qm: QueueManager) -> None:
    plain = qm.create_queue(r".\private$\plain3")
    plain.send(Message(body=b"x"), wait=True)
    with pytest.raises(TransactionUsage, match="not a transactional queue"):
        plain.receive(timeout=WAIT, transaction="single")
    assert plain.receive(timeout=WAIT).body == b"x"  # nothing was taken


def test_a_receiver_killed_inside_a_transaction_leaves_the_message(
        qm: QueueManager, broker: BrokerEndpoint, kmq_home: Path) -> None:
    q = _tq(qm, "crash")
    sent = q.send(Message(body=b"survives"), transaction="single")
    script = textwrap.dedent(f"""
        import os, signal
        from facade.manager import QueueManager
        qm = QueueManager.open(bootstrap_servers={broker.bootstrap_servers!r})
        tx = qm.begin_transaction(lease=3)
        m = qm.open_queue({q.format_name!r}).receive(timeout=60, transaction=tx)
        print(m.body.decode(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "survives", done.stderr
    again = q.receive(timeout=WAIT)  # back once the dead receiver's lease passed
    assert again.id == sent.id and again.abort_count == 1


def test_commit_after_the_lease_ran_short_aborts(qm: QueueManager) -> None:
    q, out = _tq(qm, "slow"), _tq(qm, "slow-out")
    q.send(Message(body=b"work"), transaction="single")
    tx = qm.begin_transaction(lease=1)
    q.receive(timeout=WAIT, transaction=tx)
    out.send(Message(body=b"reply"), transaction=tx)
    again = q.receive(timeout=WAIT)  # the lease passed: another receiver takes it
    assert again.body == b"work" and again.abort_count == 1
    with pytest.raises(TransactionAborted, match="locked only until"):
        tx.commit()
    assert tx.status is TransactionStatus.ABORTED
    with pytest.raises(ReceiveTimeout):
        out.receive(timeout=1)


def test_a_restarted_sender_fences_the_old_one(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    q = _tq(qm, "fenced")
    restart_fences_the_old_sender(
        qm, q, lambda: QueueManager.open(bootstrap_servers=broker.bootstrap_servers))
    assert [m.body for m in _drain(q, 2)] == [b"old 1", b"new"]


MOVER = """
import os, signal, sys
from facade.manager import QueueManager
from facade.errors import ReceiveTimeout
source, target, die_at = sys.argv[1], sys.argv[2], {int(n) for n in sys.argv[3].split(",") if n}
with QueueManager.open(bootstrap_servers=sys.argv[4]) as qm:
    qm.transactional_id = "kmq-test-mover"  # a restarted mover fences the one it replaces
    a, b = qm.open_queue(source), qm.open_queue(target)
    while True:
        tx = qm.begin_transaction(lease=2)
        try:
            m = a.receive(timeout=5, transaction=tx)
        except ReceiveTimeout:
            tx.abort()
            break
        b.send(type(m)(body=m.body), transaction=tx)
        if int(m.body) in die_at and m.abort_count == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # inside the transaction, before commit
        tx.commit()
"""


def _check_restarted_mover(qm: QueueManager, broker: BrokerEndpoint, script: str, name: str, *,
                           count: int, die_at: str, kills: int) -> None:
    """Move ``count`` messages from ``<name>-a`` to ``<name>-b`` with ``script``, restarting it
    after each SIGKILL it gives itself (at the bodies in ``die_at``); B must end with every
    message once, in A's order, after exactly ``kills`` kills."""
    a, b = _tq(qm, f"{name}-a"), _tq(qm, f"{name}-b")
    a.send_many([Message(body=str(i).encode()) for i in range(count)], transaction="single")
    killed = 0
    for _ in range(10):
        run = subprocess.run([sys.executable, "-c", script, a.format_name, b.format_name,
                              die_at, broker.bootstrap_servers],
                             capture_output=True, text=True, timeout=300)
        if run.returncode == 0:
            break
        assert run.returncode == -9, run.stderr
        killed += 1
    assert killed == kills
    got = _drain(b, count)
    assert [int(m.body) for m in got] == list(range(count))
    assert qm.open_queue(a.format_name).count() == 0


def test_a_mover_killed_inside_its_transactions_moves_each_message_once_in_order(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    """Kafka's transactions system test in small: messages move A -> B by transactional
    receive + send; the mover is SIGKILLed inside a transaction several times and restarted.
    B ends with every message of A exactly once and in A's order."""
    _check_restarted_mover(qm, broker, MOVER, "move", count=12, die_at="3,7,8", kills=3)


MOVER_MANY = """
import os, signal, sys
from facade.manager import QueueManager
from facade.errors import ReceiveTimeout
source, target, die_at = sys.argv[1], sys.argv[2], {int(n) for n in sys.argv[3].split(",") if n}
with QueueManager.open(bootstrap_servers=sys.argv[4]) as qm:
    qm.transactional_id = "kmq-test-batch-mover"
    a, b = qm.open_queue(source), qm.open_queue(target)
    while True:
        tx = qm.begin_transaction(lease=2)
        try:
            batch = a.receive_many(4, timeout=5, transaction=tx)
        except ReceiveTimeout:
            tx.abort()
            break
        b.send_many([type(m)(body=m.body) for m in batch], transaction=tx)
        if any(int(m.body) in die_at and m.abort_count == 0 for m in batch):
            os.kill(os.getpid(), signal.SIGKILL)  # inside the transaction, before commit
        tx.commit()
"""


def test_a_batch_mover_killed_inside_its_transactions_moves_each_message_once_in_order(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    """The mover above with ``receive_many(4, transaction=tx)``: one LOCK per batch; a kill
    returns the whole batch (abort count + 1) and B still gets every message once, in order."""
    _check_restarted_mover(qm, broker, MOVER_MANY, "batch", count=20, die_at="5,13", kills=2)


def test_lists_deliver_exactly_once_inside_a_transaction(qm: QueueManager) -> None:
    """Seed 001: DL1={Q1} and DL2={Q1} in one transaction give Q1 each message exactly once
    (MSMQ promises no order across different lists; kmq happens to keep send order)."""
    q1 = qm.create_queue(r".\dl-target", transactional=True)
    member = f"PUBLIC={q1.properties.instance}"
    for name in ("DL1", "DL2"):
        qm.directory.create_distribution_list(name)
        qm.directory.add_member(name, member)
    dl1 = qm.open_queue(qm.directory.distribution_list("DL1").format_name)
    dl2 = qm.open_queue(qm.directory.distribution_list("DL2").format_name)
    both = qm.open_queue(f"{dl1.format_name},{dl2.format_name}")
    with qm.begin_transaction() as tx:
        sent = [dl1.send(Message(body=b"via DL1"), transaction=tx),
                dl2.send(Message(body=b"via DL2"), transaction=tx),
                both.send(Message(body=b"via both"), transaction=tx)]
    got = _drain(q1, 3)
    assert sorted(str(m.id) for m in got) == sorted(str(m.id) for m in sent)  # once each


def test_expired_transactional_message_goes_to_deadxact(qm: QueueManager) -> None:
    q = _tq(qm, "expiring")
    with qm.begin_transaction() as tx:
        sent = q.send(Message(body=b"late", time_to_be_received=1,
                              journal=JournalLevel.DEADLETTER), transaction=tx)
        q.send(Message(body=b"same timers"), transaction=tx)  # the first message's TTBR
    time.sleep(2)  # both are past their TTBR now, however slow the machine
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=1)  # notices the expiry
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADXACT").receive(timeout=WAIT)
    assert dead.id == sent.id and dead.message_class is MessageClass.NACK_RECEIVE_TIMEOUT
    assert dead.transaction_id == tx.id


def test_acknowledgments_and_journals_inside_a_transaction(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\journaled", transactional=True, journal=True)
    admin = qm.create_queue(r".\private$\tx-admin")
    with qm.begin_transaction() as tx:
        sent = q.send(Message(body=b"tracked", admin_queue=admin.format_name,
                              acknowledge=Acknowledgment.FULL_REACH_QUEUE,
                              journal=JournalLevel.JOURNAL), transaction=tx)
    ack = admin.receive(timeout=WAIT)
    assert ack.message_class is MessageClass.ACK_REACH_QUEUE and ack.correlation_id == sent.id
    source_journal = qm.open_queue(f"MACHINE={qm.guid};JOURNAL").receive(timeout=WAIT)
    assert source_journal.id == sent.id
    with qm.begin_transaction() as tx:
        assert q.receive(timeout=WAIT, transaction=tx).id == sent.id
    journal = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\journaled;JOURNAL")
    assert journal.receive(timeout=WAIT).id == sent.id


def test_a_mover_killed_at_random_moments_moves_each_message_once_in_order(
        qm: QueueManager, broker: BrokerEndpoint) -> None:
    """As Kafka's transactions system test: the mover is SIGKILLed at random moments, also in
    the middle of a commit, and restarted; B ends with A's messages exactly once, in order."""
    import random

    a, b = _tq(qm, "chaos-a"), _tq(qm, "chaos-b")
    count = 200
    a.send_many([Message(body=str(i).encode()) for i in range(count)], transaction="single")
    rng = random.Random(14)
    for _ in range(4):
        mover = subprocess.Popen([sys.executable, "-c", MOVER, a.format_name, b.format_name, "",
                                  broker.bootstrap_servers])
        time.sleep(rng.uniform(1.0, 3.0))
        mover.kill()
        mover.wait(30)
    final = subprocess.run([sys.executable, "-c", MOVER, a.format_name, b.format_name, "",
                            broker.bootstrap_servers], capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr
    got = _drain(b, count)
    assert [int(m.body) for m in got] == list(range(count))


def test_a_copy_whose_ttrq_passed_before_commit_is_dead_lettered(qm: QueueManager) -> None:
    q = _tq(qm, "ttrq")
    admin = qm.create_queue(r".\private$\ttrq-admin")
    tx = qm.begin_transaction()
    sent = q.send(Message(body=b"too late", time_to_reach_queue=1,
                          journal=JournalLevel.DEADLETTER, admin_queue=admin.format_name,
                          acknowledge=Acknowledgment.FULL_REACH_QUEUE), transaction=tx)
    time.sleep(2)  # the commit comes after the TTRQ, however fast the machine
    tx.commit()
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADXACT").receive(timeout=WAIT)
    assert dead.id == sent.id and dead.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    nack = admin.receive(timeout=WAIT)
    assert nack.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=1)
