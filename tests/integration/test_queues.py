"""Queues on a real broker process: create/open/delete, send, receive, peek, priorities, by-id,
purge, and destructive receive shared by several processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from facade import (
    Message,
    MessageAlreadyReceived,
    MessageNotFound,
    QueueExists,
    QueueNotFound,
    ReceiveTimeout,
    UnsupportedFormatNameOperation,
)
from facade.state import queueview
from facade.manager import QueueManager
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration




def test_create_open_list_delete(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\Orders", label="Orders", journal=True, quota_kb=100)
    assert q.properties.label == "Orders"
    assert q.properties.journal is True and q.properties.quota_kb == 100
    assert qm.queue_exists(r".\private$\orders")
    assert qm.queue_exists(rf"DIRECT=OS:{qm.name}\private$\ORDERS")
    assert [p.path_name for p in qm.list_queues()] == [rf"{qm.name}\private$\orders"]
    with pytest.raises(QueueExists):
        qm.create_queue(r".\private$\orders")
    q.set_properties(label="Renamed")
    assert qm.get_properties(r".\private$\orders").label == "Renamed"
    qm.delete_queue(r".\private$\orders")
    assert not qm.queue_exists(r".\private$\orders")
    with pytest.raises(QueueNotFound, match="not found"):
        qm.open_queue(r".\private$\orders")


def test_send_receive_round_trip_assigns_msmq_properties(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\rt")
    sent = q.send(Message(body=b"hello", label="greeting", app_specific=7), wait=True)
    got = q.receive(timeout=10)
    assert got.id == sent.id and got.body == b"hello" and got.label == "greeting"
    assert got.app_specific == 7
    assert got.source_machine_id == qm.guid
    assert got.destination_queue == rf"DIRECT=OS:{qm.name}\private$\rt"
    assert got.lookup_id is not None and got.arrived_time is not None
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=0.3)


def test_priority_order_then_fifo(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\prio")
    priorities = [3, 0, 7, 3, 5, 7, 0, 3]
    for i, priority in enumerate(priorities):
        q.send(Message(body=str(i).encode(), priority=priority))
    q.send(Message(body=b"flush"), wait=True)
    bodies = [q.receive(timeout=10).body for _ in range(len(priorities) + 1)]
    expected = sorted(range(len(priorities)), key=lambda i: (-priorities[i], i))
    expected_bodies = [str(i).encode() for i in expected]
    # "flush" has the default priority 3 and arrived last among the 3s.
    expected_bodies.insert(expected_bodies.index(b"7") + 1, b"flush")
    assert bodies == expected_bodies


def test_peek_is_not_destructive(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\peek")
    q.send(Message(body=b"a"), wait=True)
    assert q.peek(timeout=10).body == b"a"
    assert q.peek(timeout=10).body == b"a"
    assert q.count() == 1
    assert q.receive(timeout=10).body == b"a"
    assert q.count() == 0


def test_receive_by_id_correlation_and_lookup_leave_the_rest_in_order(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\byid")
    first = q.send(Message(body=b"1"))
    second = q.send(Message(body=b"2", correlation_id=first.id))
    third = q.send(Message(body=b"3"), wait=True)
    taken = q.receive_by_id(second.id, timeout=10)
    assert taken.body == b"2"
    # As in MSMQ, ReceiveById of a message that is gone reports "not found"; a lookup id,
    # which names a position in the queue, reports "already received".
    with pytest.raises(MessageNotFound):
        q.receive_by_id(second.id)
    with pytest.raises(MessageNotFound):
        q.receive_by_correlation_id(first.id)
    with pytest.raises(MessageAlreadyReceived):
        q.peek_by_lookup_id(taken.lookup_id)
    with pytest.raises(MessageNotFound):
        q.peek_by_lookup_id(10**9)
    looked_up = q.peek_by_lookup_id(q.peek_by_id(third.id).lookup_id)
    assert looked_up.id == third.id
    assert [q.receive(timeout=10).body for _ in range(2)] == [b"1", b"3"]


def test_purge_removes_everything_present(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\purge")
    for i in range(5):
        q.send(Message(body=bytes([i])))
    q.send(Message(body=b"last"), wait=True)
    assert q.purge() == 6
    assert q.count() == 0
    q.send(Message(body=b"after"), wait=True)
    assert q.receive(timeout=10).body == b"after"


def test_read_only_queues_refuse_sends(qm: QueueManager) -> None:
    qm.create_queue(r".\private$\ro", journal=True)
    for name in (rf"DIRECT=OS:{qm.name}\private$\ro;JOURNAL", r"DIRECT=OS:.\SYSTEM$;DEADLETTER",
                 f"MACHINE={qm.guid};DEADXACT"):
        with pytest.raises(UnsupportedFormatNameOperation, match="read-only"):
            qm.open_queue(name).send(Message(body=b"x"))


def test_multiple_element_send_gives_every_queue_the_same_id(qm: QueueManager) -> None:
    a = qm.create_queue(r".\private$\a")
    b = qm.create_queue(r".\private$\b")
    both = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\a,DIRECT=OS:{qm.name}\private$\b")
    sent = both.send(Message(body=b"fan"), wait=True)
    got_a, got_b = a.receive(timeout=10), b.receive(timeout=10)
    assert got_a.id == got_b.id == sent.id
    assert got_a.destination_format_name == got_b.destination_format_name == both.format_name
    with pytest.raises(UnsupportedFormatNameOperation):
        both.receive(timeout=0)


_RECEIVER = textwrap.dedent("""
    import sys
    from facade.config import KmqConfig
    from facade.errors import ReceiveTimeout
    from facade.manager import QueueManager

    from pathlib import Path

    bootstrap, name, out, mode, sent = sys.argv[1:6]
    qm = QueueManager.open(KmqConfig.load(bootstrap_servers=bootstrap, queue_manager=name))
    q = qm.open_queue(r".\\private$\\shared", spread_picks=mode == "spread")
    with open(out, "a", buffering=1) as fh:
        print("ready", flush=True)
        sys.stdin.readline()  # every receiver starts at once, whenever each was ready
        while True:
            try:
                m = q.receive(timeout=3, lock=mode == "lock")
            except ReceiveTimeout:
                if Path(sent).exists():  # the sender is done: an empty queue stays empty
                    break
                continue
            if mode == "lock":
                m.complete()
            fh.write(m.body.decode() + "\\n")
""")


def _start_receiver(broker: BrokerEndpoint, qm: QueueManager, out: Path,
                    mode: str = "head", sent: Path | None = None) -> subprocess.Popen:
    """A receiver process: ``mode`` "head" (receive()), "spread" (spread_picks=True) or
    "lock" (receive(lock=True) and complete()). It receives once a line reaches its stdin,
    and stops at the first empty receive after the file ``sent`` exists (default: next to
    ``out``)."""
    sent = sent or out.with_name("sent")
    process = subprocess.Popen(
        [sys.executable, "-c", _RECEIVER, broker.bootstrap_servers, qm.name, str(out), mode,
         str(sent)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def _release(receivers: list[subprocess.Popen]) -> None:
    """Let ready receivers start receiving (all at once: a receiver that started early must
    not give up on an empty queue while a slow one is still starting)."""
    for process in receivers:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()


@pytest.mark.parametrize("mode", ["head", "spread", "lock"])
def test_competing_receiver_processes_never_get_the_same_message(
    broker: BrokerEndpoint, qm: QueueManager, tmp_path: Path, mode: str
) -> None:
    """Four receiver processes drain one queue: none lost, none twice, whatever the
    contended receivers pick (docs/design.md, "Contended receives"), with receive() (RECEIVE
    and RECEIVE_FIRST receipts) and peek-lock receives (LOCK and LOCK_FIRST). Without
    ``spread_picks`` each receiver also gets its messages in the order they were sent."""
    q = qm.create_queue(r".\private$\shared")
    outs = [tmp_path / f"r{n}.txt" for n in range(4)]
    receivers = [_start_receiver(broker, qm, out, mode) for out in outs]
    _release(receivers)
    # Enough messages that the receivers are busy at once (a receive takes a few ms).
    total = 1000
    for i in range(total):
        q.send(Message(body=str(i).encode()))
    q.send(Message(body=b"end"), wait=True)
    (tmp_path / "sent").touch()
    for process in receivers:
        assert process.wait(timeout=120) == 0
    got = [line for out in outs for line in out.read_text().split()]
    assert len(got) == len(set(got)), "a message was received twice"
    assert sorted(got) == sorted([str(i) for i in range(total)] + ["end"]), "a message was lost"
    # The sender is the slow side, so one receiver may find nothing left; several competed.
    assert sum(1 for out in outs if out.read_text()) >= 2, "the receivers did not compete"
    if mode != "spread":  # MSMQ's rule: each receive takes the current head
        for out in outs:
            numbers = [int(line) for line in out.read_text().split() if line != "end"]
            assert numbers == sorted(numbers), f"{out.name} got messages out of queue order"


def test_receiver_killed_mid_stream_loses_at_most_what_it_took(
    broker: BrokerEndpoint, qm: QueueManager, tmp_path: Path
) -> None:
    """MSMQ nontransactional receive: a message is removed when taken. A receiver killed with
    SIGKILL may lose the message it was handling, but nothing else: every other message is
    received exactly once by the survivors."""
    q = qm.create_queue(r".\private$\shared")
    total = 300
    for i in range(total):
        q.send(Message(body=str(i).encode()))
    q.send(Message(body=b"end"), wait=True)
    victim_out, survivor_out = tmp_path / "victim.txt", tmp_path / "survivor.txt"
    (tmp_path / "sent").touch()
    victim = _start_receiver(broker, qm, victim_out)
    _release([victim])
    time.sleep(0.5)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    survivor = _start_receiver(broker, qm, survivor_out)
    _release([survivor])
    assert survivor.wait(timeout=120) == 0
    victim_got = victim_out.read_text().split() if victim_out.exists() else []
    survivor_got = survivor_out.read_text().split()
    everything = [str(i) for i in range(total)] + ["end"]
    assert len(set(victim_got) & set(survivor_got)) == 0, "a message was received twice"
    missing = set(everything) - set(victim_got) - set(survivor_got)
    assert len(missing) <= 1, f"more than the in-flight message was lost: {sorted(missing)}"


def test_poison_records_go_to_the_dead_letter_queue_without_stopping_receive(
    broker: BrokerEndpoint, qm: QueueManager
) -> None:
    from confluent_kafka import Producer

    from facade import MessageClass
    from facade.model.envelope import encode_message

    q = qm.create_queue(r".\private$\poisoned")
    topic = q.destinations[0].topics.data
    valid_headers = encode_message(Message(id=qm.ids.new(), body=b"x")).headers
    raw = Producer({"bootstrap.servers": broker.bootstrap_servers})
    raw.produce(topic, value=b"\x00garbage, not an envelope")              # no kmq headers at all
    raw.produce(topic, value=b"\xc3\x01 truncated", headers=valid_headers)  # headers fine, value not
    assert raw.flush(10) == 0
    q.send(Message(body=b"good"), wait=True)

    assert q.receive(timeout=10).body == b"good"
    dlq = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    dead = sorted((dlq.receive(timeout=10) for _ in range(2)), key=lambda m: m.body)
    assert [m.body for m in dead] == [b"\x00garbage, not an envelope", b"\xc3\x01 truncated"]
    for m in dead:
        assert m.message_class is MessageClass.NACK_RECEIVE_REJECTED
        assert m.destination_queue == q.destinations[0].format_name
        assert m.properties["kmq.reason"] and m.properties["kmq.source"].startswith(topic)
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=0.5)


def test_a_view_keeps_no_verdicts_of_other_receivers_claims(qm: QueueManager) -> None:
    """Receipts of every receiver flow through every view; only awaited verdicts are kept."""
    q = qm.create_queue(r".\private$\verdicts")
    watcher = qm.open_queue(r".\private$\verdicts")
    for i in range(20):
        q.send(Message(body=bytes([i])), wait=i == 19)
    for _ in range(20):
        q.receive(timeout=10)
    view = watcher._opened.open_view()
    view.catch_up()
    assert view.state.pending_count() == 0
    assert view._outcomes == {} and view._awaiting == {}
    assert q._opened.open_view()._outcomes == {}


def test_a_receiver_whose_view_is_behind_never_takes_what_another_took(qm: QueueManager) -> None:
    """A receiver alone on its queue stops reading receipts (docs/design.md); when another
    receiver then takes messages, its next claims must still lose on them, not take them again."""
    path = r".\private$\stale-view"
    first = qm.create_queue(path)
    second = qm.open_queue(path)
    for i in range(12):
        first.send(Message(body=bytes([i])), wait=i == 11)
    got_first = [first.receive(timeout=10).body for _ in range(2)]
    assert first._opened.open_view()._receipts_paused  # uncontended: receipts no longer fetched
    got_second = [second.receive(timeout=10).body for _ in range(5)]
    got_first += [first.receive(timeout=10).body for _ in range(5)]
    taken = got_first + got_second
    assert sorted(taken) == [bytes([i]) for i in range(12)]  # none twice, none lost
    assert got_first[2:] == sorted(got_first[2:])  # still in queue order for each receiver
    with pytest.raises(ReceiveTimeout):
        first.receive(timeout=0.5)


def _first_of_two_receivers(qm: QueueManager, path: str):  # -> MessageQueue
    """A queue of 4 messages at ``path``; a first handle receives message 0 uncontended (its
    receipts pause), a second one receives message 1; returns the first handle."""
    first = qm.create_queue(path)
    second = qm.open_queue(path)
    for i in range(4):
        first.send(Message(body=bytes([i])), wait=i == 3)
    assert first.receive(timeout=10).body == b"\x00"
    assert first._opened.open_view()._receipts_paused
    assert second.receive(timeout=10).body == b"\x01"
    return first


def test_a_count_reads_the_receipts_once_and_leaves_a_receiver_receive_only(
        qm: QueueManager) -> None:
    """count() shows another receiver's removals, and the counting receiver's next
    uncontended claim stops fetching receipts again (a peek would keep them fetched)."""
    first = _first_of_two_receivers(qm, r".\private$\counted")
    assert first.count() == 2
    assert first.receive(timeout=10).body == b"\x02"
    assert first._opened.open_view()._receipts_paused


def test_a_receiver_whose_claim_met_other_receipts_keeps_fetching_them_for_a_while(
        qm: QueueManager) -> None:
    """A receive-only view whose claim had to read another receiver's receipts keeps fetching
    receipts for CONTENTION_MEMORY seconds (pausing and resuming at every contended claim would
    add a fetch wait to each verdict); once that has passed, its next uncontended claim stops
    fetching them again."""
    first = _first_of_two_receivers(qm, r".\private$\interleaved")
    view = first._opened.open_view()
    assert first.receive(timeout=10).body == b"\x02"  # read the other's receipt before its own
    assert not view._receipts_paused
    assert first.receive(timeout=10).body == b"\x03"  # uncontended, but within the memory
    assert not view._receipts_paused
    first.send(Message(body=b"\x04"), wait=True)
    view._interleaved_at = time.monotonic() - queueview.CONTENTION_MEMORY  # the memory passed
    assert first.receive(timeout=10).body == b"\x04"
    assert view._receipts_paused


def test_a_lone_receiver_is_back_to_strict_order_once_its_lost_claim_has_aged_out(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a lost claim a ``spread_picks`` receiver spreads its picks over the first candidates of the
    highest pending priority (never a lower priority while a higher one waits); once
    CONTENTION_MEMORY has passed without another loss, a lone receiver takes messages in strict
    MSMQ order again: priority, then arrival."""
    monkeypatch.setattr(queueview, "CONTENTION_MEMORY", 3600.0)  # contended for the first part
    path = r".\private$\aged-out"
    qm.create_queue(path).close()
    first = qm.open_queue(path, spread_picks=True)
    second = qm.open_queue(path, spread_picks=True)
    for i in range(3):
        first.send(Message(body=bytes([i])), wait=i == 2)
    assert first.receive(timeout=10).body == b"\x00"  # uncontended: its receipts pause
    assert second.receive(timeout=10).body == b"\x01"
    assert first.receive(timeout=10).body == b"\x02"  # its stale claim on 1 lost first
    assert first._opened.open_view().contended
    bodies = [(bytes([i]), 7 if i % 3 == 0 else 3) for i in range(12)]
    for i, (body, priority) in enumerate(bodies):
        first.send(Message(body=body, priority=priority), wait=i == len(bodies) - 1)
    spread = [first.receive(timeout=10) for _ in range(len(bodies))]
    assert [m.priority for m in spread] == sorted((p for _, p in bodies), reverse=True)
    assert sorted(m.body for m in spread) == sorted(b for b, _ in bodies)

    monkeypatch.setattr(queueview, "CONTENTION_MEMORY", 1.0)
    time.sleep(1.1)  # the lost claim ages out (no timing is asserted: a sleep lasts at least this)
    assert not first._opened.open_view().contended
    for i, (body, priority) in enumerate(bodies):
        first.send(Message(body=body, priority=priority), wait=i == len(bodies) - 1)
    strict = [m.body for m in (first.receive(timeout=10) for _ in range(len(bodies)))]
    assert strict == [b for b, p in bodies if p == 7] + [b for b, p in bodies if p == 3]


def test_peek_shows_removals_by_another_receiver_after_uncontended_receives(
        qm: QueueManager) -> None:
    """Peeks read the receipts a receive-only view stopped fetching, so they never show a
    message another receiver has already removed."""
    first = _first_of_two_receivers(qm, r".\private$\stale-peek")
    assert first.peek(timeout=10).body == b"\x02"
    assert first.count() == 2
