"""``Cursor``: walk an opened queue in receive order, peeking and removing (MSMQ cursors).

A cursor is MSMQ's ``MQCreateCursor`` handle, or System.Messaging's ``GetMessageEnumerator2``:
a position in the queue's receive order (highest priority first, then arrival order), as seen
by this process's queue view. It implements the cursor actions of ``MQReceiveMessage``:

======================  ===============================  ==========================================
kmq                     MSMQ action                      what it does
======================  ===============================  ==========================================
``peek_current()``      ``MQ_ACTION_PEEK_CURRENT``       return the message under the cursor; on a
                                                         new cursor, move to the first message
``peek_next()``         ``MQ_ACTION_PEEK_NEXT``          move to the next message and return it
``receive_current()``   ``MQ_ACTION_RECEIVE`` + cursor   remove the message under the cursor; the
                                                         cursor then points at the next message
``move_next()``         ``MessageEnumerator.MoveNext``   PEEK_CURRENT on a new cursor (or at the
                                                         end after a receive), else PEEK_NEXT;
                                                         None at the end instead of raising
``for m in cursor``     ``foreach`` over an enumerator   ``move_next(0)`` until None: every message
                                                         from the position to the end, no raise
======================  ===============================  ==========================================

The MSMQ semantics kmq follows (documented for ``MQReceiveMessage``):

* A new cursor is before the first message. Its first PEEK_CURRENT moves it onto the first
  message (waiting up to the timeout for one). PEEK_NEXT needs a current message, so on a new
  cursor it is ``MQ_ERROR_ILLEGAL_CURSOR_ACTION`` (:class:`~facade.errors.IllegalCursorAction`);
  System.Messaging's enumerator likewise starts with PEEK_CURRENT. kmq also refuses RECEIVE on
  a new cursor: peek first, so that the application knows what it removes.
* When the message under the cursor was removed by someone else (another receiver, in this
  process or another, a purge, or its time-to-be-received ran out), PEEK_CURRENT and RECEIVE
  fail with ``MQ_ERROR_MESSAGE_ALREADY_RECEIVED``
  (:class:`~facade.errors.MessageAlreadyReceived`) and the cursor stays where it is; PEEK_NEXT
  still moves on from that position.
* After RECEIVE the cursor points at the message that followed the removed one; the next
  PEEK_CURRENT returns it (PEEK_NEXT would skip it). When the removed message was the last one,
  the cursor is at the end: PEEK_CURRENT and RECEIVE wait up to their timeout for the next
  message to arrive, and PEEK_NEXT, having no current message to step over, is
  ``MQ_ERROR_ILLEGAL_CURSOR_ACTION``.
* A timeout (``MQ_ERROR_IO_TIMEOUT``, :class:`~facade.errors.ReceiveTimeout`) leaves the cursor
  where it was, so a later PEEK_NEXT finds a message that arrives afterwards.
* A cursor only moves forward. Its position is the ``(-priority, lookup id)`` receive-order key
  of its message, which stays valid while messages are removed or arrive: a message that arrives
  *after* the position (lower priority, or same priority and later) is found by PEEK_NEXT, one
  that arrives *before* it (higher priority than the cursor's message) is not.

A cursor uses its queue's view, so it sees what the handle sees; messages sent by other
processes become visible as the view reads them, which every action does before answering.
Cursors are not thread-safe: use one per thread, or lock around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from enum import Enum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from facade.errors import (
    IllegalCursorAction,
    InvalidParameter,
    MessageAlreadyReceived,
    ReceiveTimeout,
)
from facade.state.queuestate import IndexEntry, OffsetState
from facade.state.queueview import QueueView
from facade.timeouts import receive_timeout

if TYPE_CHECKING:
    from facade.model.message import Message

__all__ = ["Cursor", "CursorSource", "QueueReader"]


class QueueReader(Protocol):
    """The receive steps of the handle a cursor walks (``MessageQueue.reader``): the handle's
    view of its queue and the one wait loop, claim and peek that ``receive`` and ``peek`` use,
    so a cursor removes, expires and dead-letters exactly as the handle does (one
    receive path, and no calls into the handle's internals, so the two cannot drift apart)."""

    format_name: str

    def authorize(self, remove: bool) -> None:
        """Check the caller's right to receive (``remove``) or peek the queue.

        Raises:
            AccessDenied: the right is missing.
        """
        ...

    def open_view(self) -> QueueView:
        """The handle's view of its one queue, opened on first use.

        Raises:
            UnsupportedFormatNameOperation: the handle names several queues.
        """
        ...

    def peek_entry(self, view: QueueView, entry: IndexEntry) -> Message | None:
        """A pending entry's message, for a peek; None if it was poison (dead-lettered)."""
        ...

    def take_entry(self, view: QueueView, entry: IndexEntry) -> Message | None:
        """Claim ``entry`` with a RECEIVE receipt; the message if the claim won, else None.

        Raises:
            BrokerUnavailable, BrokerError: the verdict could not be read, or an output failed.
        """
        ...

    def wait_for(self, pick: Callable[[QueueView, int], IndexEntry | None], *, remove: bool,
                 timeout: float | None, what: str = "message") -> tuple[IndexEntry, Message]:
        """Poll the view until ``pick(view, now_ms)`` finds an entry that :meth:`take_entry`
        (``remove``) or :meth:`peek_entry` turns into a message; poison records, expired
        messages and expired locks are settled on the way.

        Returns:
            tuple[IndexEntry, Message]: the entry and its message.

        Raises:
            ReceiveTimeout: no ``what`` within ``timeout`` seconds (None waits forever).
        """
        ...


@runtime_checkable
class CursorSource(Protocol):
    """What :class:`Cursor` takes: an opened queue (:class:`facade.queues.queue.MessageQueue`);
    runtime-checkable, so that anything else is refused with InvalidParameter."""

    format_name: str

    @property
    def reader(self) -> QueueReader:
        """The queue's receive steps."""
        ...


class _Where(Enum):
    """Where a cursor is."""

    BEFORE_FIRST = "before the first message"  # new: no current message yet
    ON = "on a message"  # ``_position`` is the current message's key (it may have been removed)
    AFTER = "after a received message"  # received the last message: waits for the next arrival
    CLOSED = "closed"


class Cursor:
    """A cursor on one opened queue (``MQCreateCursor`` / ``GetMessageEnumerator2``).

    Use it as a context manager, or call :meth:`close`. See the module docstring for the MSMQ
    semantics of each action.

    Example::

        with Cursor(queue) as cursor:
            message = cursor.peek_current(timeout=5)
            while True:
                if wanted(message):
                    cursor.receive_current()
                    message = cursor.peek_current(timeout=5)
                else:
                    message = cursor.peek_next(timeout=5)

    Args:
        queue (CursorSource): the opened queue (a :class:`~facade.queues.queue.MessageQueue`); a single queue, not a multiple-element format
            name. The cursor uses the queue's view and does not own it: closing the cursor
            leaves the queue open; closing the queue first is fine too (the next action reopens
            the view, reading the queue afresh).

    Raises:
        UnsupportedFormatNameOperation: ``queue`` names several queues (it can only be sent
            to); open one queue to read it.
        InvalidParameter: ``queue`` is not an opened queue.
    """

    def __init__(self, queue: CursorSource):
        if not isinstance(queue, CursorSource):
            raise InvalidParameter.wrong_type("queue", "an opened MessageQueue", queue,
                                              hint="queue.cursor() opens a cursor on it")
        self._reader = queue.reader
        self._where = _Where.BEFORE_FIRST
        #: ``(-priority, lookup id)`` of the current (ON) or last received (AFTER) message.
        self._position: tuple[int, int] | None = None
        #: True when a receive moved the cursor onto a message no action has returned yet.
        self._unseen = False
        self._reader.open_view()  # fail now, not at the first action, for a multiple-element name

    # -- state ---------------------------------------------------------------------------------

    @property
    def lookup_id(self) -> int | None:
        """int | None: lookup id (PROPID_M_LOOKUPID) of the message under the cursor; None when
        the cursor is before the first message, at the end after a receive, or closed."""
        return self._position[1] if self._where is _Where.ON and self._position else None

    @property
    def closed(self) -> bool:
        """bool: True once :meth:`close` was called."""
        return self._where is _Where.CLOSED

    # -- actions -------------------------------------------------------------------------------

    def peek_current(self, timeout: float | None = 0) -> Message:
        """Return the message under the cursor without removing it (``MQ_ACTION_PEEK_CURRENT``).

        On a new cursor this moves the cursor onto the first message in receive order, waiting
        for one to arrive. After :meth:`receive_current` removed the last message, it waits for
        the next message to arrive and moves onto it. Otherwise it returns the current message
        at once, and ``timeout`` is not used.

        Args:
            timeout (float | None): seconds to wait when the cursor has no current message yet;
                None waits forever, 0 (the default) does not wait.

        Returns:
            Message: the message, with ``lookup_id`` and ``arrived_time`` set.

        Raises:
            ReceiveTimeout: no message arrived within ``timeout`` seconds
                (MQ_ERROR_IO_TIMEOUT); the cursor did not move. Retry with a longer timeout.
            MessageAlreadyReceived: the message under the cursor was removed by someone else
                (received, purged, expired) (MQ_ERROR_MESSAGE_ALREADY_RECEIVED). Call
                :meth:`peek_next` to move on to the message after it.
            IllegalCursorAction: the cursor is closed; create a new one.
            BrokerUnavailable: the view could not read the queue up to its end in time; check
                that the Kafka broker is running, then retry.
        """
        self._reader.authorize(remove=False)
        timeout = receive_timeout(timeout)
        self._check_open("peek_current")
        view = self._reader.open_view()
        if self._where is not _Where.ON:
            return self._move_forward(view, timeout, remove=False)
        _sync(view, settle=True)
        entry = self._current_entry(view)
        message = self._reader.peek_entry(view, entry)
        if message is None:  # its value is not an envelope: dead-lettered as poison
            raise self._already_received("is not a valid message and was dead-lettered")
        self._unseen = False
        return message

    def peek_next(self, timeout: float | None = 0) -> Message:
        """Move to the next message in receive order and return it (``MQ_ACTION_PEEK_NEXT``).

        The next message is the first one after the cursor's position: the rest of the cursor
        message's priority in arrival order, then lower priorities. It works also when the
        current message has been removed by someone else. Nothing is removed.

        Args:
            timeout (float | None): seconds to wait for a next message to arrive; None waits
                forever, 0 (the default) does not wait.

        Returns:
            Message: the next message, now the current one.

        Raises:
            ReceiveTimeout: there is no next message within ``timeout`` seconds
                (MQ_ERROR_IO_TIMEOUT); the cursor stays on its message, so a later call finds a
                message that arrives afterwards. Retry, or wait longer.
            IllegalCursorAction: the cursor has no current message to step over
                (MQ_ERROR_ILLEGAL_CURSOR_ACTION): it is new (call :meth:`peek_current` first,
                which moves it to the first message), it is at the end after
                :meth:`receive_current` removed the last message (call :meth:`peek_current`,
                which waits for the next one), or it is closed (create a new cursor).
            BrokerUnavailable: the broker did not answer while reading the queue; check that it
                is running, then retry.
        """
        self._reader.authorize(remove=False)
        timeout = receive_timeout(timeout)
        self._check_open("peek_next")
        if self._where is _Where.BEFORE_FIRST:
            raise IllegalCursorAction(
                f"peek_next on a new cursor of {self._reader.format_name!r}: the cursor has no "
                "current message yet", queue=self._reader.format_name,
                hint="call peek_current() first; it moves the cursor to the first message")
        if self._where is _Where.AFTER:
            raise IllegalCursorAction(
                f"peek_next after the last message of {self._reader.format_name!r} was received: "
                "the cursor has no current message", queue=self._reader.format_name,
                hint="call peek_current(timeout) to wait for the next message")
        view = self._reader.open_view()
        return self._move_forward(view, timeout, remove=False)

    def receive_current(self, timeout: float | None = 0) -> Message:
        """Remove and return the message under the cursor (``MQ_ACTION_RECEIVE`` with a cursor).

        Removal is arbitrated like :meth:`MessageQueue.receive` (the first receipt naming the
        message wins), so no other receiver gets it. Afterwards the cursor points at the message
        that followed it in receive order, which :meth:`peek_current` returns; when there is
        none, the cursor is at the end and waits for the next arrival. ``timeout`` is used only
        in that case: the cursor has no current message and waits for one, then removes it.

        Args:
            timeout (float | None): seconds to wait when the cursor is at the end after a
                receive; None waits forever, 0 (the default) does not wait.

        Returns:
            Message: the removed message.

        Raises:
            MessageAlreadyReceived: the message under the cursor was removed by someone else
                (MQ_ERROR_MESSAGE_ALREADY_RECEIVED); the cursor stays. Call :meth:`peek_next`
                to move on.
            ReceiveTimeout: the cursor is at the end and no message arrived within ``timeout``
                seconds (MQ_ERROR_IO_TIMEOUT).
            IllegalCursorAction: the cursor is new (call :meth:`peek_current` first, so you know
                which message you remove) or closed (MQ_ERROR_ILLEGAL_CURSOR_ACTION).
            BrokerUnavailable: the receipt was not acknowledged or read back in time; whether
                the message was removed is unknown until the broker answers again.
        """
        self._reader.authorize(remove=True)
        timeout = receive_timeout(timeout)
        self._check_open("receive_current")
        if self._where is _Where.BEFORE_FIRST:
            raise IllegalCursorAction(
                f"receive_current on a new cursor of {self._reader.format_name!r}: the cursor "
                "is not on a message", queue=self._reader.format_name,
                hint="call peek_current() first; it moves the cursor to the first message")
        view = self._reader.open_view()
        if self._where is _Where.AFTER:
            message = self._move_forward(view, timeout, remove=True)
        else:
            _sync(view)  # the claim below is authoritative: no need to settle
            entry = self._current_entry(view)
            taken = self._reader.take_entry(view, entry)
            if taken is None:
                raise self._already_received("was removed by another receiver")
            message = taken
        self._step_past_received(view)
        return message

    def move_next(self, timeout: float | None = 0) -> Message | None:
        """Move to the next message and return it, or None at the end of the queue: the form of
        System.Messaging's ``MessageEnumerator.MoveNext()``, which returns false at the end
        instead of raising.

        On a new cursor, or at the end after :meth:`receive_current` removed the last message,
        this is :meth:`peek_current`; otherwise :meth:`peek_next`. Nothing is removed. A timeout
        leaves the cursor where it was, so a later call finds a message that arrives afterwards.

        Args:
            timeout (float | None): seconds to wait for a message to arrive; None waits forever,
                0 (the default) does not wait.

        Returns:
            Message | None: the message now under the cursor; None when none came within
            ``timeout`` (the end of the queue, MQ_ERROR_IO_TIMEOUT).

        Raises:
            IllegalCursorAction: the cursor is closed; create a new one.
            BrokerUnavailable: the broker did not answer while reading the queue.
        """
        try:
            if self._where is _Where.ON and self._unseen:
                try:  # a receive moved the cursor here: this message was not returned yet
                    return self.peek_current(timeout)
                except MessageAlreadyReceived:
                    pass  # removed meanwhile: PEEK_NEXT moves on from its position
            if self._where is _Where.ON:
                return self.peek_next(timeout)
            return self.peek_current(timeout)
        except ReceiveTimeout:
            return None

    def __iter__(self) -> Iterator[Message]:
        """Peek every message from the cursor's position to the end of the queue, in receive
        order, without removing any (System.Messaging's ``foreach`` over a message enumerator).

        Iteration does not wait: it ends at the last message the view sees now, without
        raising. Each step is :meth:`move_next` with timeout 0; :meth:`receive_current` may be
        called on a yielded message, and iteration goes on with the one after it.

        Yields:
            Message: each message; the cursor is on it while the loop body runs.

        Raises:
            IllegalCursorAction: the cursor is closed.
            BrokerUnavailable: the broker did not answer while reading the queue.
        """
        while (message := self.move_next(0)) is not None:
            yield message

    def close(self) -> None:
        """Close the cursor (``MQCloseCursor``). The queue stays open; closing twice is fine."""
        self._where = _Where.CLOSED
        self._position = None

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self._where.value
        if self._position is not None:
            where += f" (priority {-self._position[0]}, lookup id {self._position[1]})"
        return f"<Cursor on {self._reader.format_name!r}, {where}>"

    # -- internals -----------------------------------------------------------------------------

    def _check_open(self, action: str) -> None:
        if self._where is _Where.CLOSED:
            raise IllegalCursorAction(f"{action} on a closed cursor of {self._reader.format_name!r}",
                                      queue=self._reader.format_name,
                                      hint="create a new cursor with Cursor(queue)")

    def _already_received(self, how: str) -> MessageAlreadyReceived:
        lookup_id = self._position[1] if self._position else None
        return MessageAlreadyReceived(
            f"the message under the cursor (lookup id {lookup_id}) in "
            f"{self._reader.format_name!r} {how}", queue=self._reader.format_name,
            hint="call peek_next() to move the cursor to the message after it")

    def _current_entry(self, view: QueueView) -> IndexEntry:
        """The pending, unexpired entry under an ON cursor, or MessageAlreadyReceived."""
        assert self._position is not None
        lookup_id = self._position[1]
        status = view.state.status(lookup_id)
        entry = status.entry
        if status.state is not OffsetState.PENDING or entry is None:
            # REMOVED / DUPLICATE; UNKNOWN only when the view was reopened and lost it.
            raise self._already_received("was removed (received, purged or expired)")
        if entry.expires_ms is not None and entry.expires_ms <= _now_ms():
            raise self._already_received("reached its time-to-be-received and expired")
        return entry

    def _move_forward(self, view: QueueView, timeout: float | None, *, remove: bool) -> Message:
        """Wait for the first message after the position, move onto it, peek or remove it.

        The position is None on a new cursor (the first message in receive order), the current
        message's key for PEEK_NEXT, or the received message's key at the end after a receive.
        """
        position = self._position if self._where is not _Where.BEFORE_FIRST else None
        return self._wait(view, lambda now: view.state.next_after(position, now), remove, timeout)

    def _wait(self, view: QueueView, pick: Callable[[int], IndexEntry | None], remove: bool,
              timeout: float | None) -> Message:
        """Wait for ``pick`` to find a message through the handle's wait loop, take or peek it,
        and move onto it. A message lost to another receiver while removing is skipped (the
        cursor was not on it).
        """
        _sync(view)
        entry, message = self._reader.wait_for(
            lambda _view, now: pick(now), remove=remove, timeout=timeout,
            what="next message" if self._position else "message")
        self._where, self._position = _Where.ON, entry.position
        self._unseen = False
        return message

    def _step_past_received(self, view: QueueView) -> None:
        """After RECEIVE: point at the message that followed the removed one, or at the end."""
        following = view.state.next_after(self._position, _now_ms())
        if following is None:
            self._where = _Where.AFTER  # keep the received key: the next arrival after it
        else:
            self._where, self._position = _Where.ON, following.position
            self._unseen = True


def _sync(view: QueueView, *, settle: bool = False) -> None:
    """Read what has arrived on the queue's data and receipts topics before answering.

    With ``settle``, and always for a view that has read nothing yet (new, or reopened after
    ``MessageQueue.close``), the view catches up to what the broker holds (``QueueView.catch_up``,
    as the lookup-id actions do): the answer then reflects every send and removal acknowledged
    before the call, so PEEK_CURRENT reports MESSAGE_ALREADY_RECEIVED for a message another
    receiver has just removed, and an action with timeout 0 sees what the queue already holds.
    Otherwise one non-blocking read picks up what the background fetch has brought in, as
    ``MessageQueue.receive`` does; waiting loops then poll in slices.
    """
    state = view.state
    if settle or (state.data_offset == 0 and state.receipts_offset == 0):
        view.catch_up()
    else:
        view.refresh(0)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
