"""The end of the queue without an exception: ``Cursor.move_next`` returns None and iterating a
cursor stops there (System.Messaging's ``MessageEnumerator``), on a real broker process. The
raising form (``peek_next`` -> ReceiveTimeout) keeps working alongside."""

from __future__ import annotations

import pytest

from facade import IllegalCursorAction, Message, ReceiveTimeout
from facade.manager import QueueManager

pytestmark = pytest.mark.integration


def _queue_with(qm: QueueManager, name: str, priorities: list[int]):
    q = qm.create_queue(rf".\private$\{name}")
    for i, priority in enumerate(priorities):
        q.send(Message(body=b"%d" % i, priority=priority), wait=i == len(priorities) - 1)
    return q


def test_iterating_a_cursor_peeks_everything_in_receive_order_and_stops_at_the_end(
    qm: QueueManager,
) -> None:
    q = _queue_with(qm, "iterate", [3, 7, 0, 3])
    with q.cursor() as cursor:
        assert [m.body for m in cursor] == [b"1", b"0", b"3", b"2"]  # priority, then FIFO
        assert cursor.move_next() is None  # still at the end: None again, no exception
        with pytest.raises(ReceiveTimeout):
            cursor.peek_next(timeout=0)  # the raising form is unchanged
    assert q.count() == 4  # nothing removed


def test_move_next_on_an_empty_queue_returns_none_then_finds_a_later_message(
    qm: QueueManager,
) -> None:
    q = qm.create_queue(r".\private$\move-next")
    with q.cursor() as cursor:
        assert cursor.move_next(timeout=0) is None
        q.send(Message(body=b"late"), wait=True)
        assert cursor.move_next(timeout=10).body == b"late"
        assert cursor.move_next(timeout=0) is None


def test_receive_current_while_iterating_goes_on_with_the_following_message(
    qm: QueueManager,
) -> None:
    q = _queue_with(qm, "iterate-receive", [3, 3, 3, 3])
    kept = []
    with q.cursor() as cursor:
        for message in cursor:
            if message.body in (b"1", b"2"):
                assert cursor.receive_current().body == message.body
            else:
                kept.append(message.body)
    assert kept == [b"0", b"3"]  # the message after each removed one was not skipped
    assert [q.receive(timeout=10).body for _ in range(2)] == [b"0", b"3"]


def test_move_next_on_a_closed_cursor_is_an_illegal_action(qm: QueueManager) -> None:
    q = _queue_with(qm, "closed-cursor", [3])
    cursor = q.cursor()
    cursor.close()
    with pytest.raises(IllegalCursorAction):
        cursor.move_next()
