"""``MessageQueue``: send, receive and peek on one opened queue (MSMQ's queue handle).

Receive order is highest priority first, then arrival order. Receive is destructive and shared
across processes: a message is removed by the first receipt that names it (see
``docs/design.md``), so two receivers never get the same message. A nontransactional receive is
at-most-once, as in MSMQ: once the receipt is acknowledged the message is gone from the queue,
even if the receiving process dies before using it. Peek-lock receive (``receive(lock=True)``,
at least once) and prefetch (``open_queue(name, prefetch=k)``) are in :mod:`facade.peeklock`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from facade.envelope import decode_message, encode_message
from facade.formatnames import FormatName, QueuePath, parse_format_name
from facade.errors import (
    BrokerError,
    EnvelopeError,
    BrokerUnavailable,
    InvalidParameter,
    MessageAlreadyReceived,
    MessageLockedUnderTransaction,
    MessageQueueError,
    MessageNotFound,
    ReceiveTimeout,
    UnsupportedFormatNameOperation,
)
from facade.message import JournalLevel, Message, MessageClass, MessageId
from facade.peeklock import DEFAULT_LEASE, DEFAULT_PREFETCH_LEASE, PeekLockReceives
from facade.queuestate import IndexEntry, OffsetState
from facade.queueview import PendingClaim, QueueView
from facade.sender import SendTracker
from facade.receipts import ReceiptAction
from facade.resolution import elements_of, is_dynamic, needs_directory

if TYPE_CHECKING:
    from facade.cursor import Cursor
    from facade.manager import Destination, QueueManager
    from facade.registry import QueueProperties

__all__ = ["MessageQueue"]

log = logging.getLogger("kmq.queue")

#: Seconds between polls while a receive or peek waits for a message.
_WAIT_SLICE = 0.05


class MessageQueue(PeekLockReceives):
    """An opened queue. Get one from :meth:`QueueManager.open_queue` or ``create_queue``.

    Args:
        manager (QueueManager): the owning queue manager.
        reference (FormatName | QueuePath): what it was opened with, parsed.
        destinations (list[Destination]): the queue(s) it resolves to now (several for a
            distribution list or multiple-element format name, which can only be sent to).
        prefetch (int): ``receive()`` takes up to this many messages with one PREFETCH receipt
            and hands them out from memory (see :mod:`facade.peeklock`); 0 = off.
        prefetch_lease (float): seconds a prefetched batch is held.

    Raises:
        InvalidParameter: ``prefetch`` or ``prefetch_lease`` out of range.

    Attributes:
        format_name (str): the canonical text of ``reference`` (PROPID_M_DEST_FORMAT_NAME of
            what is sent through this handle).
    """

    def __init__(self, manager: QueueManager, reference: FormatName | QueuePath,
                 destinations: list[Destination], *, prefetch: int = 0,
                 prefetch_lease: float = DEFAULT_PREFETCH_LEASE):
        self.manager = manager
        self.reference = reference
        self.format_name = str(reference)
        self.destinations = destinations
        # A list's members are read at each send; a PUBLIC= queue's Send To right once.
        self._dynamic = is_dynamic(reference)
        self._send_checked = not needs_directory(reference)
        self._view: QueueView | None = None
        self._quota_views: dict[str, QueueView] = {}
        #: Receive claims whose verdict could not be read (the receive raised): resolved first
        #: by the next receive, which hands out the message if the claim won.
        self._unsettled: list[tuple[IndexEntry, Any, PendingClaim]] = []
        #: Messages this handle won but could not hand out (an output failed): the next receive
        #: returns them first.
        self._undelivered: list[Message] = []
        self._init_locks(prefetch, prefetch_lease)

    # -- properties ----------------------------------------------------------------------------

    @property
    def properties(self) -> QueueProperties:
        """The queue's properties (PROPID_Q_*), read fresh from the registry."""
        return self.manager.get_properties(self._single().format_name)

    def set_properties(self, **changes: Any) -> QueueProperties:
        """Change queue properties (label, journal, quota_kb...); see QueueManager.set_properties."""
        return self.manager.set_properties(self._single().format_name, **changes)

    # -- send ----------------------------------------------------------------------------------

    def send(self, message: Message, *, wait: bool = False, timeout: float = 30.0) -> Message:
        """Send ``message`` to every destination of this queue (MSMQ ``MQSendMessage``).

        The queue manager assigns ``id``, ``sent_time``, ``source_machine_id``,
        ``destination_queue`` and ``destination_format_name``; every copy of one send carries the
        same id. EXPRESS copies are handed to the producer (``acks=1``) and may still be in flight
        when this returns; RECOVERABLE copies are first stored in the durable outgoing queue, then
        produced with ``acks=all`` (see :mod:`facade.sender`). A copy not delivered within
        time-to-reach-queue is dead-lettered and NACKed (NACK_REACH_QUEUE_TIMEOUT); a queue over
        its quota gets NACK_Q_EXCEED_QUOTA instead of the copy.

        Args:
            message (Message): the message; it is not modified.
            wait (bool): wait until every copy has the broker's verdict ("queued"), and raise if
                one failed.
            timeout (float): seconds to wait when ``wait`` is true.

        Returns:
            Message: the message as sent (with its id).

        Raises:
            UnsupportedFormatNameOperation: a destination is read-only (journal, dead-letter).
            InvalidParameter: a property outside its range.
            BrokerUnavailable: ``wait`` and the broker did not acknowledge in time.
        """
        destinations = self._send_destinations()
        for destination in destinations:
            if destination.read_only:
                raise UnsupportedFormatNameOperation(
                    f"{destination.format_name!r} is read-only: only the system writes to "
                    "journals and dead-letter queues", queue=destination.format_name)
            if destination.is_subqueue:
                raise UnsupportedFormatNameOperation(
                    f"{destination.format_name!r} is a subqueue: messages enter it only by "
                    "being moved", queue=destination.format_name, hint="use MessageQueue.move")
        sent = message.stamped(id=self.manager.ids.new(), sent_time=_now(),
                               source_machine_id=self.manager.guid,
                               destination_format_name=self.format_name)
        sent.check()  # once per send: the application may have edited it since construction
        outputs = self.manager.outputs
        accepted = []
        for destination in destinations:
            copy = sent.stamped(destination_queue=destination.format_name)
            record = encode_message(copy, validate=False)
            if self._over_quota(destination, len(record.value)):
                outputs.dead_letter(copy, MessageClass.NACK_Q_EXCEED_QUOTA)
                outputs.acknowledge(copy, MessageClass.NACK_Q_EXCEED_QUOTA, destination,
                                    reason=f"queue quota of {destination.properties.quota_kb} KB reached")
            else:
                accepted.append((destination, copy, record))
        # Only a waiting send needs to count verdicts (an Event and a Lock per send otherwise).
        tracker = SendTracker(len(accepted)) if wait else None
        for index, (destination, copy, record) in enumerate(accepted):
            # Source journaling keeps one copy per send, once the first copy is delivered.
            journal = ((lambda: outputs.source_journal(sent))
                       if index == 0 and sent.journal & JournalLevel.JOURNAL else None)
            self.manager.sender.submit(destination, copy, record, tracker, on_delivered=journal)
        if tracker is not None:
            if not tracker.wait(timeout):
                raise BrokerUnavailable(f"send to {self.format_name!r} not acknowledged within "
                                        f"{timeout:g} s", queue=self.format_name)
            if tracker.errors:
                raise BrokerError(f"send to {self.format_name!r} failed: "
                                  + "; ".join(f"{q}: {e}" for q, e in tracker.errors.items()),
                                  queue=self.format_name)
        return sent

    def _over_quota(self, destination: Destination, size: int) -> bool:
        """Whether adding ``size`` bytes would take the queue past PROPID_Q_QUOTA.

        The sender reads the queue up to its end before each check; senders racing each other
        can overshoot by what they have in flight (documented in design.md).
        """
        quota_kb = destination.properties.quota_kb if destination.properties else None
        if quota_kb is None:
            return False
        view = self._quota_views.get(destination.topics.data)
        if view is None:
            view = self._quota_views[destination.topics.data] = QueueView(
                self.manager.session, destination.topics)
        # Exact, not cached: a quota is a promise, so only queues that have one pay this read.
        view.catch_up()
        return view.state.pending_bytes + size > quota_kb * 1024

    # -- receive and peek ----------------------------------------------------------------------

    def receive(self, timeout: float | None = None, *, lock: bool = False,
                lease: float = DEFAULT_LEASE) -> Message:
        """Remove and return the first message: highest priority, then oldest (``MQReceiveMessage``).

        Args:
            timeout (float | None): seconds to wait for a message; None waits forever, 0 does
                not wait.
            lock (bool): peek-lock receive (at least once): the message is only locked, by one
                LOCK receipt, and returned as a :class:`~facade.peeklock.LockedMessage`; settle
                it with :meth:`complete` (removed for good) or :meth:`abandon` (back in the
                queue, ``abort_count`` + 1). If neither happens within ``lease`` it is released
                too. Default False: MSMQ's nontransactional receive (at most once).
            lease (float): with ``lock``, seconds the lock lasts (default 30).

        On a handle opened with ``prefetch=k``, a receive without ``lock`` hands out the next of
        up to ``k`` messages taken with one PREFETCH receipt (see :mod:`facade.peeklock`).

        A receive that raises removes nothing it does not hand out later: if the verdict of
        its claim could not be read (broker unreachable) or an output of the receive (journal
        copy) failed, the message stays with this handle and the next ``receive`` returns it
        first; :meth:`close` dead-letters what is still held then (see ``docs/design.md``).

        Raises:
            ReceiveTimeout: no message within ``timeout`` (MQ_ERROR_IO_TIMEOUT).
            InvalidParameter: ``timeout`` is negative, NaN or infinite, or ``lease`` is not
                seconds in (0, 604800].
            BrokerUnavailable: the broker did not answer; nothing was lost (see above; a
                lock whose verdict was not read is released when its lease passes).
        """
        if lock:
            return self._receive_locked(timeout, lease)
        if self._prefetch:
            return self._receive_prefetched(_seconds(timeout))
        return self._wait(lambda view, now: view.state.peek_first(now), remove=True, timeout=timeout)

    def peek(self, timeout: float | None = None) -> Message:
        """Return the first message without removing it (``MQ_ACTION_PEEK_CURRENT``).

        Raises:
            ReceiveTimeout: no message within ``timeout`` seconds.
        """
        return self._wait(lambda view, now: view.state.peek_first(now), remove=False, timeout=timeout)

    def receive_by_id(self, message_id: MessageId | str, timeout: float | None = 0) -> Message:
        """Remove and return the message with this id (``ReceiveById``).

        Raises:
            MessageAlreadyReceived: it was in the queue but someone removed it.
            MessageNotFound: no such message within ``timeout`` seconds.
        """
        key = str(message_id)
        return self._by(lambda state: state.by_message_id(key), True, timeout, f"id {key}")

    def peek_by_id(self, message_id: MessageId | str, timeout: float | None = 0) -> Message:
        """Return the message with this id without removing it (``PeekById``)."""
        key = str(message_id)
        return self._by(lambda state: state.by_message_id(key), False, timeout, f"id {key}")

    def receive_by_correlation_id(self, correlation_id: MessageId | str,
                                  timeout: float | None = 0) -> Message:
        """Remove and return the first message with this correlation id."""
        key = str(correlation_id)
        return self._by(lambda state: state.by_correlation_id(key), True, timeout,
                        f"correlation id {key}")

    def peek_by_correlation_id(self, correlation_id: MessageId | str,
                               timeout: float | None = 0) -> Message:
        """Return the first message with this correlation id without removing it."""
        key = str(correlation_id)
        return self._by(lambda state: state.by_correlation_id(key), False, timeout,
                        f"correlation id {key}")

    def receive_by_lookup_id(self, lookup_id: int) -> Message:
        """Remove and return the message with this lookup id (``MQ_LOOKUP_RECEIVE_CURRENT``).

        Raises:
            MessageAlreadyReceived: the message was removed (received, purged, expired).
            MessageNotFound: no message ever had this lookup id.
        """
        return self._by_lookup_id(lookup_id, remove=True)

    def peek_by_lookup_id(self, lookup_id: int) -> Message:
        """Return the message with this lookup id without removing it (``MQ_LOOKUP_PEEK_CURRENT``).

        Raises:
            MessageAlreadyReceived: the message was removed (received, purged, expired).
            MessageNotFound: no message ever had this lookup id.
        """
        return self._by_lookup_id(lookup_id, remove=False)

    def move(self, lookup_id: int, subqueue: str) -> Message:
        """Move a message into a subqueue of this queue (MSMQ ``MQMoveMessage``).

        The message leaves this queue and is appended to ``<queue>;<subqueue>`` with
        ``move_count`` incremented and the same id. Applications cannot send to subqueues;
        moving is how messages get there (e.g. ``;poison``).

        Args:
            lookup_id (int): the message's lookup id in this queue.
            subqueue (str): the subqueue name (1-32 characters).

        Returns:
            Message: the message as written to the subqueue.

        Raises:
            MessageAlreadyReceived: someone removed the message first.
            MessageNotFound: no message with that lookup id.
            FormatNameError: invalid subqueue name.
        """
        # Resolve first: a bad subqueue name fails before anything is claimed.
        self._subqueue_destination(subqueue)
        view = self._open_view()
        entry = self._pending_by_lookup_id(view, lookup_id)
        return self._system_action(view, entry, ReceiptAction.MOVE, target=subqueue)

    def mark_rejected(self, lookup_id: int, reason: str = "rejected by the receiving application") -> Message:
        """Reject a message (MSMQ ``MQMarkMessageRejected``, poison-message handling).

        The message is removed from the queue; a NACK_RECEIVE_REJECTED goes to its admin queue
        when NEGATIVE_RECEIVE was requested, and a dead-letter copy with that class is written
        when its journal level has DEADLETTER.

        Raises:
            MessageAlreadyReceived: someone removed the message first.
            MessageNotFound: no message with that lookup id.
        """
        view = self._open_view()
        entry = self._pending_by_lookup_id(view, lookup_id)
        return self._system_action(view, entry, ReceiptAction.REJECT,
                                   target=self.manager.dead_letter_topic, reason=reason[:1000])

    def cursor(self) -> Cursor:
        """A cursor over this queue (``MQCreateCursor``): peek_current, peek_next,
        receive_current. See :class:`facade.cursor.Cursor`."""
        from facade.cursor import Cursor

        return Cursor(self)

    def purge(self) -> int:
        """Remove every message now in the queue (``MQPurgeQueue``).

        Returns:
            int: how many messages the purge removed.
        """
        view = self._open_view()
        view.catch_up()
        outcome = view.claim(ReceiptAction.PURGE, purge_below=view.state.data_offset)
        return outcome.purged

    def count(self) -> int:
        """Messages in the queue now, including ones not yet visible (not-before) or expired."""
        view = self._open_view()
        view.catch_up()
        return view.state.pending_count()

    def __len__(self) -> int:
        return self.count()

    def malformed_receipts(self) -> int:
        """Records of this queue's receipts topic that are not kmq receipts, read up to now.

        Every process skips them alike (they remove nothing); a count above 0 means something
        other than kmq writes to the topic (``kmq queue show`` reports it).
        """
        view = self._open_view()
        view.catch_up()
        return view.malformed_receipts

    def close(self) -> None:
        """Release this handle's Kafka reader and producer.

        A message a failed receive of this handle still holds is dead-lettered first (class
        NACK_RECEIVE_REJECTED, ``kmq.reason`` says why).

        Peek-locked messages handed out through this handle and not settled are released
        (abort count + 1); a prefetched batch is settled: COMPLETED for what was handed out,
        RELEASE for the rest (see :mod:`facade.peeklock`).

        Raises:
            BrokerUnavailable: a held message could not be dead-lettered, or a lock could not
                be settled (the clients are closed all the same).
        """
        try:
            try:
                self._release_locks()
            finally:
                self._release_held()
        finally:
            if self._view is not None:
                self._view.close()
                self._view = None
            for view in self._quota_views.values():
                view.close()
            self._quota_views.clear()

    def __enter__(self) -> MessageQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _send_destinations(self) -> list[Destination]:
        """The queues a send goes to: re-resolved for a list, Send To checked once otherwise."""
        if self._dynamic or not self._send_checked:
            destinations = self.manager.destinations(self.reference, for_send=True)
            if not self._dynamic:
                self.destinations, self._send_checked = destinations, True
            return destinations
        return self.destinations

    def _single(self) -> Destination:
        if self._dynamic or len(elements_of(self.reference)) != 1 or len(self.destinations) != 1:
            raise UnsupportedFormatNameOperation(
                f"{self.format_name!r} names several queues: it can only be sent to",
                queue=self.format_name)
        return self.destinations[0]

    def _open_view(self) -> QueueView:
        if self._view is None:
            self._view = QueueView(self.manager.session, self._single().topics)
        return self._view

    def _wait(self, pick: Callable[[QueueView, int], IndexEntry | None], remove: bool,
              timeout: float | None,
              take: Callable[[QueueView, IndexEntry], Message | None] | None = None) -> Message:
        """Pick and take (or peek) until a message comes or ``timeout`` passes.

        ``take`` claims a picked entry (default :meth:`_take`, a RECEIVE); a custom one (peek-
        lock, prefetch) does not hand out messages held by failed receives."""
        timeout = _seconds(timeout)
        view = self._open_view()
        if remove and take is None:
            held = self._take_held(view)
            if held is not None:
                return held
        deadline = None if timeout is None else time.monotonic() + timeout
        view.load()
        # A peek must reflect other receivers' removals; a receive learns of them from its claim.
        receipts = not remove
        view.refresh(0, receipts=receipts)
        while True:
            self._dead_letter_poison(view)
            self._expire(view)
            self._lock_housekeeping(view)
            entry = pick(view, _now_ms())
            if entry is not None:
                message = ((take or self._take)(view, entry) if remove
                           else self._decode(view, entry))
                if message is not None:
                    return message
                continue
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise ReceiveTimeout(f"no message in {self.format_name!r} within {timeout:g} s",
                                     queue=self.format_name)
            view.refresh(_WAIT_SLICE if remaining is None else min(_WAIT_SLICE, remaining),
                         receipts=receipts)

    def _by(self, find: Callable[[Any], IndexEntry | None], remove: bool,
            timeout: float | None, what: str) -> Message:
        timeout = _seconds(timeout)
        view = self._open_view()
        view.catch_up()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            entry = find(view.state)
            if entry is not None:
                message = self._take(view, entry) if remove else self._decode(view, entry)
                if message is not None:
                    return message
                raise MessageAlreadyReceived(f"message with {what} was removed by another receiver",
                                             queue=self.format_name)
            if deadline is not None and time.monotonic() >= deadline:
                raise MessageNotFound(f"no message with {what} in {self.format_name!r}",
                                      queue=self.format_name)
            view.refresh(_WAIT_SLICE)

    def _pending_by_lookup_id(self, view: QueueView, lookup_id: int) -> IndexEntry:
        view.catch_up()
        status = view.state.status(lookup_id)
        if status.state in (OffsetState.REMOVED, OffsetState.DUPLICATE):
            raise MessageAlreadyReceived(f"message with lookup id {lookup_id} was already removed "
                                         f"from {self.format_name!r}", queue=self.format_name)
        if status.state is OffsetState.LOCKED:
            raise MessageLockedUnderTransaction(
                f"message with lookup id {lookup_id} in {self.format_name!r} is locked by a "
                "peek-lock receive", queue=self.format_name,
                hint="it comes back if its receiver abandons it or its lease passes")
        entry = view.state.by_lookup_id(lookup_id)
        if entry is None:
            raise MessageNotFound(f"no message with lookup id {lookup_id} in {self.format_name!r}",
                                  queue=self.format_name)
        return entry

    def _by_lookup_id(self, lookup_id: int, remove: bool) -> Message:
        view = self._open_view()
        entry = self._pending_by_lookup_id(view, lookup_id)
        message = self._take(view, entry) if remove else self._decode(view, entry)
        if message is None:
            raise MessageAlreadyReceived(f"message with lookup id {lookup_id} was removed by "
                                         "another receiver", queue=self.format_name)
        return message

    def _take(self, view: QueueView, entry: IndexEntry) -> Message | None:
        """Claim ``entry`` with a RECEIVE receipt and hand it out if the claim won.

        Returns:
            Message | None: the message; None if another receipt removed it first, or if it was
            a poison record (dead-lettered here).

        Raises:
            BrokerUnavailable, BrokerError: the verdict could not be read, or an output failed;
                the message is held for the next receive (see :meth:`receive`).
        """
        record = view.record(entry)
        pending = view.start_claim(ReceiptAction.RECEIVE, (entry.offset,))
        try:
            outcome = view.settle(pending)
        except BrokerUnavailable:
            # The receipt may be in the log and may have won: keep the claim, so the next
            # receive reads its verdict and hands the message out instead of losing it.
            self._unsettled.append((entry, record, pending))
            raise
        if entry.offset not in outcome.won:
            return None
        return self._hand_out(record, entry.offset, outcome.abort_count(entry.offset))

    def _hand_out(self, record: Any, lookup_id: int, aborts: int = 0) -> Message | None:
        """Decode a won record and write the receive's outputs (journal copy, ACK_RECEIVE).

        Raises:
            MessageQueueError: an output failed; the message is held for the next receive.
        """
        try:
            message = self._message(record, lookup_id)
        except EnvelopeError as exc:
            # Headers looked valid but the value is not an envelope: the receipt already removed
            # it, so dead-letter it now rather than lose it or hand garbage to the application.
            self._send_poison_to_dead_letter(record, str(exc))
            return None
        message.abort_count += aborts  # releases of peek-locks on it so far
        return self._deliver(message)

    def _deliver(self, message: Message) -> Message:
        destination = self._single()
        try:
            self.manager.outputs.journal_removed(message, destination)
        except MessageQueueError:
            self._undelivered.append(message)
            raise
        self.manager.outputs.acknowledge(message, MessageClass.ACK_RECEIVE, destination)
        return message

    def _take_held(self, view: QueueView) -> Message | None:
        """The first message an earlier, failed receive of this handle won but did not hand
        out, if any (resolving claims whose verdict was not read yet).

        Raises:
            BrokerUnavailable: a held claim's verdict still cannot be read.
        """
        if self._undelivered:
            return self._deliver(self._undelivered.pop(0))
        while self._unsettled:
            entry, record, pending = self._unsettled[0]
            try:
                outcome = view.settle(pending)
            except BrokerUnavailable:
                raise
            except MessageQueueError:
                del self._unsettled[0]  # refused by the broker: the receipt removed nothing
                continue
            del self._unsettled[0]
            if entry.offset in outcome.won:
                message = self._hand_out(record, entry.offset, outcome.abort_count(entry.offset))
                if message is not None:
                    return message
        return None

    def _release_held(self) -> None:
        """On close: dead-letter what this handle won but never handed out (its receive failed
        and no later receive came), so no message is lost without a trace.

        Raises:
            MessageQueueError: a held message could not be dead-lettered, or a held claim's
                verdict could not be read; the error names the lookup ids.
        """
        view = self._view
        problems = []
        while self._unsettled and view is not None:
            entry, record, pending = self._unsettled.pop(0)
            try:
                outcome = view.settle(pending)
            except MessageQueueError as exc:
                problems.append(f"lookup id {entry.offset}: verdict of its receive unknown ({exc})")
                continue
            if entry.offset in outcome.won:
                try:
                    self._undelivered.append(self._message(record, entry.offset))
                except EnvelopeError as exc:
                    self._send_poison_to_dead_letter(record, str(exc))
        while self._undelivered:
            message = self._undelivered.pop(0)
            reason = ("received by a handle whose receive failed and that was closed before "
                      "handing the message out")
            try:
                self._dead_letter_because(message, reason)
            except MessageQueueError as exc:
                problems.append(f"lookup id {message.lookup_id}: not dead-lettered ({exc})")
        if problems:
            raise BrokerUnavailable(f"closing {self.format_name!r}: held messages may be lost: "
                                    + "; ".join(problems), queue=self.format_name)

    def _dead_letter_because(self, message: Message, reason: str) -> None:
        """Copy ``message`` to the dead-letter queue whatever its journal level (a kmq failure,
        not an MSMQ one), class NACK_RECEIVE_REJECTED, ``kmq.reason`` saying why.

        Raises:
            BrokerUnavailable, BrokerError: the copy was not acknowledged.
        """
        self.manager.dead_letter(dataclasses.replace(
            message, message_class=MessageClass.NACK_RECEIVE_REJECTED, time_to_be_received=None,
            properties={**message.properties, "kmq.reason": reason}))

    def expire_due(self) -> int:
        """Dead-letter the messages whose time-to-be-received has elapsed (MSMQ's TTBR expiry).

        Each expired message is claimed with an EXPIRE receipt; the winner copies it to the
        dead-letter queue with class NACK_RECEIVE_TIMEOUT when its journal level has DEADLETTER,
        posts a NACK_RECEIVE_TIMEOUT to its admin queue when NEGATIVE_RECEIVE was requested, and
        closes the claim with COMPLETED. Receivers call this before every pick; ``kmq qm run``
        calls it for every queue, so expiry happens even when nobody receives. The same sweep
        settles peek-locks and prefetched batches whose lease passed and moves messages
        released too often to ``;poison`` (see :mod:`facade.peeklock`).

        Returns:
            int: messages this call expired, dead-lettered as poison records, released or
            dead-lettered after their lease, or moved to ``;poison``.
        """
        view = self._open_view()
        view.catch_up()
        return (self._expire(view) + len(self._dead_letter_poison(view))
                + self._lock_housekeeping(view))

    def _expire(self, view: QueueView) -> int:
        now = _now_ms()
        due = view.state.next_expiry_ms()
        if due is None or due > now:
            return 0
        done = self._system_actions(view, view.state.expired(now), ReceiptAction.EXPIRE,
                                    self.manager.dead_letter_topic, "time-to-be-received elapsed")
        return sum(1 for _, message in done if message is not None)

    def _dead_letter_poison(self, view: QueueView) -> list[int]:
        """Move records that are not valid envelopes to the dead-letter queue, never stopping.

        Returns:
            list[int]: offsets this call moved.
        """
        done = self._system_actions(view, view.state.poisoned(), ReceiptAction.POISON,
                                    self.manager.dead_letter_topic, "invalid envelope")
        return [offset for offset, _ in done]

    def _system_actions(self, view: QueueView, entries: list[IndexEntry], action: ReceiptAction,
                        target: str, reason: str) -> list[tuple[int, Message | None]]:
        """Claim each of ``entries`` that is still pending with a system action (expiry, poison
        records, ``;poison`` moves), skipping those another receipt removed first.

        Returns:
            list[tuple[int, Message | None]]: the offsets this process won, with the result of
            :meth:`_system_action` for each.
        """
        done = []
        for entry in entries:
            if not view.is_pending(entry):
                continue  # an earlier claim of this loop applied a receipt that removed it
            try:
                done.append((entry.offset, self._system_action(view, entry, action,
                                                               target=target, reason=reason)))
            except MessageAlreadyReceived:
                continue  # another process took it first
        return done

    def _system_action(self, view: QueueView, entry: IndexEntry, action: ReceiptAction,
                       target: str | None = None, reason: str | None = None) -> Message | None:
        """Claim ``entry`` for a system action, perform its outputs, then close the claim.

        Raises:
            MessageAlreadyReceived: another receipt removed the message first.
        """
        record = view.record(entry)
        outcome = view.claim(action, (entry.offset,), target=target, reason=reason)
        if entry.offset not in outcome.won:
            raise MessageAlreadyReceived(f"message with lookup id {entry.offset} was removed by "
                                         "another receiver", queue=self.format_name)
        result = self._perform(action, record, target, reason,
                               aborts=outcome.abort_count(entry.offset))
        view.claim(ReceiptAction.COMPLETED, completes=outcome.claim_id)
        return result

    def _perform(self, action: ReceiptAction, record: Any, target: str | None,
                 reason: str | None, *, aborts: int = 0,
                 settles_lock: bool = False) -> Message | None:
        """The outputs of a won system claim; recovery calls this again for claims a crashed
        process left without COMPLETED (copies keep their id, so a redone copy is a duplicate
        that queue views drop).

        Args:
            aborts (int): the message's abort count in the queue state (releases of peek-locks),
                added to the envelope's in the subqueue or dead-letter copy.
            settles_lock (bool): the claim took the message from a lock (``completes``): a
                REJECT then dead-letters it whatever its journal level (an expired prefetch).

        Returns:
            Message | None: the message (MOVE: as written to the subqueue); None for poison.
        """
        if action is ReceiptAction.POISON:
            self._send_poison_to_dead_letter(record, "record headers are not a kmq envelope's")
            return None
        try:
            message = self._message(record, record.offset)
        except EnvelopeError as exc:
            self._send_poison_to_dead_letter(record, str(exc))
            return None
        message.abort_count += aborts
        outputs = self.manager.outputs
        if action is ReceiptAction.MOVE:
            moved = _copy(message, move_count=message.move_count + 1, lookup_id=None,
                          arrived_time=None)
            self.manager.write_system_copy(self._subqueue_destination(target or "").topics.data, moved)
            return moved
        if settles_lock and action is ReceiptAction.REJECT:
            self._dead_letter_because(message, reason or "taken from a lock")
            return message
        message_class = (MessageClass.NACK_RECEIVE_TIMEOUT if action is ReceiptAction.EXPIRE
                         else MessageClass.NACK_RECEIVE_REJECTED)
        outputs.dead_letter(message, message_class)
        outputs.acknowledge(message, message_class, self._single(), reason=reason)
        return message

    def _subqueue_destination(self, subqueue: str) -> Destination:
        parent = parse_format_name(self._single().format_name)
        return self.manager.resolve(parent.with_subqueue(subqueue))

    def recover_claims(self, grace: float = 30.0) -> int:
        """Redo the outputs of system claims (expire, move, reject, poison) that a crashed
        process left without a COMPLETED receipt, once they are ``grace`` seconds old.

        Returns:
            int: claims completed.
        """
        view = self._open_view()
        view.catch_up()
        cutoff = _now_ms() - int(grace * 1000)
        done = 0
        for claim in view.state.incomplete_claims():
            if claim.receipt.time_ms > cutoff:
                continue  # its owner may still be working on it
            for offset in claim.offsets:
                self._perform(claim.receipt.action, view.fetch(offset), claim.receipt.target,
                              claim.receipt.reason, aborts=claim.abort_count(offset),
                              settles_lock=claim.receipt.completes is not None)
            view.claim(ReceiptAction.COMPLETED, completes=claim.receipt.claim_id)
            done += 1
        return done

    def _send_poison_to_dead_letter(self, record: Any, reason: str) -> None:
        where = f"{record.topic}@{record.partition}:{record.offset}"
        self.manager.dead_letter(
            self.manager.poison_message(record.value, reason, self._single(), where))

    def _decode(self, view: QueueView, entry: IndexEntry) -> Message:
        return self._message(view.record(entry), entry.offset)

    def _message(self, record: Any, lookup_id: int) -> Message:
        message = decode_message(record.value, record.headers, topic=record.topic,
                                 partition=record.partition, offset=record.offset)
        message.lookup_id = lookup_id
        message.arrived_time = dt.datetime.fromtimestamp(record.timestamp_ms / 1000, dt.timezone.utc)
        return message


def _copy(message: Message, **changes: Any) -> Message:
    return dataclasses.replace(message, **changes)


def _seconds(timeout: float | None) -> float | None:
    """Check a receive or peek timeout: None (wait forever) or finite seconds >= 0.

    Raises:
        InvalidParameter: negative, NaN, infinite or not a number.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not math.isfinite(timeout) or timeout < 0:
        raise InvalidParameter(f"timeout must be seconds >= 0 (or None to wait forever), "
                               f"not {timeout!r}", hint="pass e.g. timeout=5.0")
    return float(timeout)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


