"""Clock jumps around time-to-be-received and not-before.

TTBR and not-before are wall-clock instants in the record headers (``kmq.expires`` =
sent time + TTBR, ``kmq.not_before``), compared with the reading process's clock. The clock is
not changed on the machine: the tests move the time source kmq reads, which is ``_now_ms`` of
``facade.queues.waitloop`` (receive, peek), ``facade.queues.claims`` (a batch receive's candidates),
``facade.queues.systemactions`` (expiry, passed leases, the ``kmq qm run`` sweeper), ``facade.queues.queue``
(counts), ``facade.queues.cursor`` (cursors) and ``facade.queues.transmission`` (TTRQ deadlines), and
``facade.queues.sendpath._now`` (sent time); ``facade.state.queuestate`` takes "now" as an argument from
those.

What is proven:

* a forward jump past the deadline expires the message into the dead-letter queue
  (NACK_RECEIVE_TIMEOUT, with its NACK) and it is never delivered;
* a backward jump afterwards does not bring it back, nor dead-letter it twice: the EXPIRE
  receipt removed it for every process, whatever their clocks say;
* not-before holds across jumps, and a message delivered once is not delivered again when the
  clock goes back;
* skew between sender and receiver shifts TTBR by the skew (documented behaviour: as in MSMQ,
  TTBR is measured against wall clocks).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

import facade.queues.claims
import facade.queues.cursor
import facade.queues.queue
import facade.queues.sendpath
import facade.queues.systemactions
import facade.queues.transmission
import facade.queues.waitloop
from facade.errors import ReceiveTimeout
from facade.manager import QueueManager
from facade.model.message import Acknowledgment, JournalLevel, Message, MessageClass
from facade.service import QueueManagerService

pytestmark = pytest.mark.integration


class Clock:
    """kmq's wall clock, offset from the real one by ``offset`` seconds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.offset = 0.0
        for module in (facade.queues.waitloop, facade.queues.claims, facade.queues.systemactions, facade.queues.queue,
                       facade.queues.cursor, facade.queues.transmission):
            monkeypatch.setattr(module, "_now_ms", self.now_ms)
        monkeypatch.setattr(facade.queues.sendpath, "_now", self.now)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + int(self.offset * 1000)

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.now_ms() / 1000, dt.timezone.utc)

    def jump(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


def _nothing(queue, timeout: float = 0.2) -> bool:
    try:
        queue.receive(timeout=timeout)
    except ReceiveTimeout:
        return True
    return False


def test_forward_jump_expires_and_backward_jump_does_not_resurrect(
        fault_qm: QueueManager, clock: Clock) -> None:
    queue = fault_qm.create_queue(r".\private$\ttbr")
    admin = fault_qm.create_queue(r".\private$\ttbr-admin")
    dlq = fault_qm.open_queue(f"MACHINE={fault_qm.guid};DEADLETTER")
    sent = queue.send(Message(body=b"ttbr", time_to_be_received=30.0,
                              journal=JournalLevel.DEADLETTER,
                              acknowledge=Acknowledgment.NACK_RECEIVE,
                              admin_queue=admin.destinations[0].format_name), wait=True)
    assert queue.peek(timeout=10).id == sent.id           # visible before the jump

    clock.jump(+60)                                        # past sent + 30 s
    assert _nothing(queue)
    dead = dlq.receive(timeout=10)
    assert (dead.id, dead.message_class) == (sent.id, MessageClass.NACK_RECEIVE_TIMEOUT)
    nack = admin.receive(timeout=10)
    assert (nack.correlation_id, nack.message_class) == (sent.id,
                                                         MessageClass.NACK_RECEIVE_TIMEOUT)

    clock.jump(-120)                                       # now 60 s behind the real clock
    assert _nothing(queue)
    assert _nothing(fault_qm.open_queue(r".\private$\ttbr"))  # a fresh view agrees
    assert QueueManagerService(fault_qm).sweep().expired == 0
    assert _nothing(dlq, 0.5), "expired twice: a second dead-letter copy"
    assert _nothing(admin, 0.3), "a second NACK"


def test_not_before_holds_across_jumps_and_nothing_is_delivered_twice(
        fault_qm: QueueManager, clock: Clock) -> None:
    queue = fault_qm.create_queue(r".\private$\notbefore")
    later = clock.now() + dt.timedelta(seconds=30)
    sent = queue.send(Message(body=b"later", not_before=later), wait=True)
    assert _nothing(queue)                                 # invisible until not-before
    clock.jump(+40)
    assert queue.receive(timeout=10).id == sent.id
    clock.jump(-80)
    assert _nothing(queue)
    assert queue.count() == 0


def test_sender_receiver_skew_shifts_ttbr_by_the_skew(fault_qm: QueueManager,
                                                      clock: Clock) -> None:
    queue = fault_qm.create_queue(r".\private$\skew")
    dlq = fault_qm.open_queue(f"MACHINE={fault_qm.guid};DEADLETTER")
    clock.jump(+3600)                                      # the sender's clock runs an hour ahead
    ahead = queue.send(Message(body=b"ahead", time_to_be_received=60.0,
                               journal=JournalLevel.DEADLETTER), wait=True)
    clock.jump(-7200)                                      # ... and then an hour behind
    behind = queue.send(Message(body=b"behind", time_to_be_received=60.0,
                                journal=JournalLevel.DEADLETTER), wait=True)
    clock.jump(+3600)                                      # the receiver's clock is right
    assert queue.receive(timeout=10).id == ahead.id        # lives an hour longer
    assert _nothing(queue)                                 # expired an hour early
    assert dlq.receive(timeout=10).id == behind.id
