"""The history checker fails on a lost and on a duplicated message.

Synthetic histories pin down each rule of the model; then deliberately broken receivers on a
real broker show that the checker catches what a buggy receiver does: one that drops messages
(takes them from the queue and never hands them on), one that hands a message on twice (peeks,
records, and receives only later), and one whose receives come out of order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from facade.errors import ReceiveTimeout
from facade.manager import QueueManager
from facade.model.message import Delivery, Message
from tests.faults.history import ACKNOWLEDGED, AT_MOST_ONCE, ATTEMPTED, REFUSED, History, Recorder

# -- the rules, on synthetic histories ---------------------------------------------------------


def _sent(h: History, n: int, queue: str = "q", outcome: str = ACKNOWLEDGED,
          sender: str = "s") -> None:
    for i in range(n):
        h.send(f"{sender}:{i}", queue, sender=sender, seq=i, outcome=outcome)


def test_a_complete_history_passes() -> None:
    h = History()
    _sent(h, 5)
    for i in range(5):
        h.receive(f"s:{i}", "q", receiver="r")
    assert h.verdict().ok, h.verdict().summary()


def test_a_lost_acknowledged_message_fails() -> None:
    h = History()
    _sent(h, 3)
    h.receive("s:0", "q")
    h.receive("s:2", "q")
    v = h.verdict()
    assert not v.ok and v.lost == ["s:1@q"], v.summary()


def test_a_duplicate_fails_even_across_receivers() -> None:
    h = History()
    _sent(h, 2)
    h.receive("s:0", "q", receiver="r1")
    h.receive("s:1", "q", receiver="r1")
    h.receive("s:1", "q", receiver="r2")
    v = h.verdict()
    assert not v.ok and v.duplicates == {"s:1@q": 2}, v.summary()


def test_dead_lettered_or_nacked_is_not_lost() -> None:
    h = History()
    _sent(h, 3)
    h.receive("s:0", "q")
    h.dead_letter("s:1", "q", "NACK_RECEIVE_TIMEOUT")
    h.nack("s:2", "q", "NACK_REACH_QUEUE_TIMEOUT")
    assert h.verdict().ok


def test_express_without_wait_may_be_lost_but_not_duplicated() -> None:
    h = History()
    _sent(h, 2, outcome=AT_MOST_ONCE)
    h.receive("s:0", "q")
    assert h.verdict().ok
    h.receive("s:0", "q")
    assert h.verdict().duplicates == {"s:0@q": 2}


def test_a_killed_receiver_excuses_only_what_it_claimed_and_at_most_its_in_flight() -> None:
    h = History()
    _sent(h, 4)
    h.receive("s:0", "q", receiver="r1")
    h.receiver_killed("r1", in_flight=1)
    # s:1 was claimed by r1 (killed: excused), s:2 by r1 too (one too many), s:3 by r2 (alive).
    h.claimed({("s:1", "q"): "r1", ("s:2", "q"): "r1", ("s:3", "q"): "r2"})
    v = h.verdict()
    assert v.excused == {"s:1@q": "at-most-once receive: claimed by r1, killed"}
    assert sorted(v.lost) == ["s:2@q", "s:3@q"]


def test_without_the_receipts_log_kills_excuse_a_count() -> None:
    h = History()
    _sent(h, 3)
    h.receive("s:0", "q")
    h.receiver_killed("r1")
    v = h.verdict()
    assert len(v.excused) == 1 and len(v.lost) == 1


def test_phantoms_refusals_and_attempts() -> None:
    h = History()
    h.send("s:0", "q", outcome=ATTEMPTED)   # sender killed before recording the outcome
    h.send("s:1", "q", outcome=REFUSED)     # refused at resolution: must not arrive
    h.receive("s:0", "q")
    assert h.verdict().ok
    h.receive("s:1", "q")
    h.receive("nobody:0", "q")
    assert sorted(h.verdict().phantoms) == ["nobody:0@q", "s:1@q"]


def test_order_is_per_sender_queue_priority_and_receiver() -> None:
    h = History()
    _sent(h, 3, sender="a")
    _sent(h, 2, sender="b")
    h.send("a:9", "q", sender="a", seq=9, priority=7)
    for key, receiver in [("a:0", "r1"), ("b:1", "r1"), ("a:9", "r1"), ("a:2", "r1"),
                          ("b:0", "r2"), ("a:1", "r2")]:
        h.receive(key, "q", receiver=receiver)
    assert h.verdict().ok  # interleaving across senders, priorities and receivers is fine
    h.receive("a:0", "q2", receiver="r1")  # another queue: its own stream
    h.send("a:0", "q2", sender="a", seq=0)
    assert h.verdict().ok
    h2 = History()
    _sent(h2, 3, sender="a")
    for key in ("a:0", "a:2", "a:1"):
        h2.receive(key, "q", receiver="r1")
    assert len(h2.verdict().out_of_order) == 1


def test_recorder_files_round_trip_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "s.jsonl", "s")
    rec.attempt("s:0", "q", seq=0)
    rec.sent("s:0", "q", seq=0, outcome=ACKNOWLEDGED, message_id="m0")
    rec.close()
    with (tmp_path / "r.jsonl").open("w") as fh:
        fh.write('{"kind": "receive", "actor": "r", "t": 1, "key": "s:0", "queue": "q"}\n')
        fh.write('{"kind": "receive", "actor": "r", "t": 2, "key": "s:')  # killed mid-line
    h = History().load(tmp_path)
    assert h.sends[("s:0", "q")].outcome == ACKNOWLEDGED
    assert len(h.receives) == 1 and h.verdict().ok


# -- deliberately broken receivers, on a real broker ------------------------------------------


class DroppingReceiver:
    """Bug: takes every third message from the queue and never hands it on (records nothing)."""

    def __init__(self, queue, history: History, name: str = "dropper"):
        self.queue, self.history, self.name, self.n = queue, history, name, 0

    def run(self) -> None:
        while True:
            try:
                message = self.queue.receive(timeout=0.3)
            except ReceiveTimeout:
                return
            self.n += 1
            if self.n % 3:
                self.history.receive(message.body.decode(), "broken", receiver=self.name)


class DoublingReceiver:
    """Bug: records the peeked message, then records it again when it really receives it."""

    def __init__(self, queue, history: History, name: str = "doubler"):
        self.queue, self.history, self.name = queue, history, name

    def run(self) -> None:
        while True:
            try:
                peeked = self.queue.peek(timeout=0.3)
            except ReceiveTimeout:
                return
            self.history.receive(peeked.body.decode(), "broken", receiver=self.name)
            message = self.queue.receive(timeout=0.5)
            self.history.receive(message.body.decode(), "broken", receiver=self.name)


class ReorderingReceiver:
    """Bug: buffers two messages and hands them on in reverse."""

    def __init__(self, queue, history: History, name: str = "reorderer"):
        self.queue, self.history, self.name = queue, history, name

    def run(self) -> None:
        buffer = []
        while True:
            try:
                buffer.append(self.queue.receive(timeout=0.3))
            except ReceiveTimeout:
                break
            if len(buffer) == 2:
                for message in reversed(buffer):
                    self.history.receive(message.body.decode(), "broken", receiver=self.name)
                buffer.clear()
        for message in buffer:
            self.history.receive(message.body.decode(), "broken", receiver=self.name)


def _send(qm: QueueManager, history: History, n: int):
    queue = qm.create_queue(r".\private$\broken")
    for i in range(n):
        key = f"s:{i}"
        sent = queue.send(Message(body=key.encode(), delivery=Delivery.RECOVERABLE),
                          wait=i == n - 1)
        history.send(key, "broken", sender="s", seq=i, message_id=str(sent.id),
                     delivery="recoverable")
    return queue


@pytest.mark.integration
@pytest.mark.parametrize("broken", [DroppingReceiver, DoublingReceiver, ReorderingReceiver])
def test_the_checker_catches_a_broken_receiver(fault_qm: QueueManager, history: History,
                                               broken) -> None:
    queue = _send(fault_qm, history, 9)
    broken(queue, history).run()
    verdict = history.verdict()
    assert not verdict.ok, f"{broken.__name__} went unnoticed: {verdict.summary()}"
    if broken is DroppingReceiver:
        assert sorted(verdict.lost) == ["s:2@broken", "s:5@broken", "s:8@broken"]
        assert not verdict.duplicates
    elif broken is DoublingReceiver:
        assert len(verdict.duplicates) == 9 and not verdict.lost
    else:
        assert verdict.out_of_order and not verdict.lost and not verdict.duplicates
