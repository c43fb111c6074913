"""Cursors on a real broker process: walking a queue in receive order with PEEK_CURRENT /
PEEK_NEXT, RECEIVE at the cursor, messages removed under the cursor by another handle, waiting
at the end, and MSMQ's illegal cursor actions."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from facade import (
    IllegalCursorAction,
    Message,
    MessageAlreadyReceived,
    ReceiveTimeout,
    UnsupportedFormatNameOperation,
)
from facade.queues.cursor import Cursor
from facade.manager import QueueManager
from facade.queues.queue import MessageQueue

pytestmark = pytest.mark.integration




def _send_all(q: MessageQueue, bodies: list[bytes], priorities: list[int] | None = None) -> None:
    """Send express messages; waiting for the last flushes the producer, so all are queued."""
    priorities = priorities or [3] * len(bodies)
    for i, (body, priority) in enumerate(zip(bodies, priorities, strict=True)):
        q.send(Message(body=body, priority=priority), wait=i == len(bodies) - 1)


def test_walk_sees_every_message_in_priority_then_fifo_order_and_removes_none(
    qm: QueueManager,
) -> None:
    q = qm.create_queue(r".\private$\walk")
    priorities = [3, 0, 7, 3, 5, 7, 0, 3]
    _send_all(q, [str(i).encode() for i in range(len(priorities))], priorities)
    with Cursor(q) as cursor:
        assert cursor.lookup_id is None
        first = cursor.peek_current(timeout=10)
        assert cursor.lookup_id == first.lookup_id
        assert cursor.peek_current().lookup_id == first.lookup_id  # PEEK_CURRENT does not move
        seen = [first]
        while True:
            try:
                seen.append(cursor.peek_next())
            except ReceiveTimeout:
                break
        assert cursor.lookup_id == seen[-1].lookup_id  # the timeout left the cursor in place
    expected = sorted(range(len(priorities)), key=lambda i: (-priorities[i], i))
    assert [m.body for m in seen] == [str(i).encode() for i in expected]
    assert [m.priority for m in seen] == sorted(priorities, reverse=True)
    assert q.count() == len(priorities)
    # A plain receive still gets them all, in the same order.
    assert [q.receive(timeout=10).body for _ in seen] == [m.body for m in seen]


def test_receive_current_removes_exactly_that_message_and_moves_to_the_next(
    qm: QueueManager,
) -> None:
    q = qm.create_queue(r".\private$\take")
    _send_all(q, [b"a", b"b", b"c"])
    with q.cursor() as cursor:  # the MessageQueue factory gives the same Cursor
        assert cursor.peek_current(timeout=10).body == b"a"
        b = cursor.peek_next()
        assert b.body == b"b"
        taken = cursor.receive_current()
        assert taken.body == b"b" and taken.id == b.id and taken.lookup_id == b.lookup_id
        assert q.count() == 2
        # The cursor now points at the message that followed: PEEK_CURRENT returns it.
        c = cursor.peek_current()
        assert c.body == b"c" and cursor.lookup_id == c.lookup_id
        assert q.peek(timeout=10).body == b"a"  # the message before the cursor is untouched
        # Receiving the last message leaves the cursor at the end ...
        assert cursor.receive_current().body == b"c"
        assert cursor.lookup_id is None
        with pytest.raises(IllegalCursorAction, match="no current message"):
            cursor.peek_next()
        with pytest.raises(ReceiveTimeout):
            cursor.peek_current(timeout=0.3)
        with pytest.raises(ReceiveTimeout):
            cursor.receive_current(timeout=0.3)
        # ... where the next arrival becomes the current message.
        q.send(Message(body=b"d"), wait=True)
        assert cursor.peek_current(timeout=10).body == b"d"
        assert cursor.receive_current().body == b"d"
        q.send(Message(body=b"e"), wait=True)
        assert cursor.receive_current(timeout=10).body == b"e"
    assert q.count() == 1
    assert q.receive(timeout=10).body == b"a"


def test_message_removed_by_another_handle_is_already_received(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\shared")
    other = qm.open_queue(r".\private$\shared")  # its own queue view, like another process
    assert other is not q
    _send_all(q, [b"a", b"b", b"c", b"d"])
    with Cursor(q) as cursor:
        a = cursor.peek_current(timeout=10)
        assert a.body == b"a"
        assert other.receive_by_lookup_id(a.lookup_id).body == b"a"
        with pytest.raises(MessageAlreadyReceived) as info:
            cursor.peek_current()
        assert info.value.error_code == "MQ_ERROR_MESSAGE_ALREADY_RECEIVED"
        with pytest.raises(MessageAlreadyReceived):
            cursor.receive_current()
        assert cursor.lookup_id == a.lookup_id  # the failure left the cursor in place
        # PEEK_NEXT still moves on from the removed message's position.
        b = cursor.peek_next()
        assert b.body == b"b"
        # A plain receive on the other handle takes the message under the cursor.
        assert other.receive(timeout=10).body == b"b"
        with pytest.raises(MessageAlreadyReceived):
            cursor.receive_current()
        assert cursor.peek_next().body == b"c"
        # A purge removes everything, the message under the cursor included.
        assert other.purge() == 2
        with pytest.raises(MessageAlreadyReceived):
            cursor.peek_current()
        with pytest.raises(ReceiveTimeout):
            cursor.peek_next()
    assert q.count() == 0


def test_peek_next_at_the_end_times_out_then_finds_a_later_message(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\tail")
    _send_all(q, [b"a"])
    with Cursor(q) as cursor:
        a = cursor.peek_current(timeout=10)
        with pytest.raises(ReceiveTimeout) as info:
            cursor.peek_next(timeout=0.3)
        assert info.value.error_code == "MQ_ERROR_IO_TIMEOUT"
        assert cursor.lookup_id == a.lookup_id
        q.send(Message(body=b"b"), wait=True)
        assert cursor.peek_next(timeout=10).body == b"b"
        # A cursor only moves forward: a higher-priority message arriving now sorts before the
        # cursor's position and is not seen; a same-priority one after it is.
        q.send(Message(body=b"urgent", priority=7))
        q.send(Message(body=b"c"), wait=True)
        assert cursor.peek_next(timeout=10).body == b"c"
        with pytest.raises(ReceiveTimeout):
            cursor.peek_next()
    # A new cursor starts at the front again and sees the urgent message first.
    with Cursor(q) as fresh:
        assert fresh.peek_current(timeout=10).body == b"urgent"
    assert q.count() == 4


def test_peek_next_waits_for_a_message_sent_while_waiting(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\waiting")
    sender = qm.open_queue(r".\private$\waiting")
    _send_all(q, [b"a"])
    timer = threading.Timer(0.5, lambda: sender.send(Message(body=b"b"), wait=True))
    with Cursor(q) as cursor:
        assert cursor.peek_current(timeout=10).body == b"a"
        timer.start()
        try:
            assert cursor.peek_next(timeout=15).body == b"b"
        finally:
            timer.join()


def test_illegal_cursor_actions(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\illegal")
    cursor = Cursor(q)
    # An empty queue: the first PEEK_CURRENT times out and the cursor stays new.
    with pytest.raises(ReceiveTimeout):
        cursor.peek_current(timeout=0.2)
    _send_all(q, [b"a", b"b"])
    with pytest.raises(IllegalCursorAction, match="peek_current") as info:
        cursor.peek_next()  # MSMQ: PEEK_NEXT needs a current message
    assert info.value.error_code == "MQ_ERROR_ILLEGAL_CURSOR_ACTION"
    with pytest.raises(IllegalCursorAction):
        cursor.receive_current()  # not on a message yet
    assert q.count() == 2
    assert cursor.peek_current(timeout=10).body == b"a"
    cursor.close()
    cursor.close()  # closing twice is fine
    assert cursor.closed
    for action in (cursor.peek_current, cursor.peek_next, cursor.receive_current):
        with pytest.raises(IllegalCursorAction, match="closed"):
            action()
    with Cursor(q) as scoped:
        assert scoped.peek_current(timeout=10).body == b"a"
    assert scoped.closed
    assert q.count() == 2


def test_cursor_needs_a_single_queue(qm: QueueManager) -> None:
    qm.create_queue(r".\private$\x")
    qm.create_queue(r".\private$\y")
    both = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\x,DIRECT=OS:{qm.name}\private$\y")
    with pytest.raises(UnsupportedFormatNameOperation):
        Cursor(both)


def test_cursor_survives_the_queue_handle_reopening_its_view(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\reopen")
    _send_all(q, [b"a", b"b"])
    with Cursor(q) as cursor:
        assert cursor.peek_current(timeout=10).body == b"a"
        q.close()  # drops the view; the next action reads the queue afresh
        assert cursor.peek_current().body == b"a"
        assert cursor.peek_next().body == b"b"


def test_message_expiring_under_the_cursor_is_already_received(qm: QueueManager) -> None:
    # The cursor must reach the message before its TTBR runs out, however busy the machine:
    # each try gives it a longer TTBR (in seconds), and the test waits only for what is left.
    for attempt, ttbr in enumerate((3.0, 10.0, 30.0)):
        q = qm.create_queue(rf".\private$\ttbr-{attempt}")
        # wait=True: a message with a TTBR travels through its own producer (one per TTRQ
        # setting), so without the wait the plain message after it can arrive first.
        sent = q.send(Message(body=b"short-lived", time_to_be_received=ttbr), wait=True)
        q.send(Message(body=b"b"), wait=True)
        cursor = Cursor(q)
        if cursor.peek_current(timeout=10).body == b"short-lived":
            break
        cursor.close()  # it expired before the first peek: try again with a longer TTBR
    else:
        pytest.fail("the cursor never reached a message within a 30 s time-to-be-received")
    with cursor:
        expires = sent.sent_time + dt.timedelta(seconds=ttbr)
        time.sleep(max(0.0, (expires - dt.datetime.now(dt.timezone.utc)).total_seconds()) + 0.2)
        # MSMQ: a message whose time-to-be-received ran out is gone, as if received.
        with pytest.raises(MessageAlreadyReceived, match="time-to-be-received"):
            cursor.peek_current()
        with pytest.raises(MessageAlreadyReceived):
            cursor.receive_current()
        assert cursor.peek_next().body == b"b"
