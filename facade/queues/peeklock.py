"""Peek-lock receive and prefetch for :class:`~facade.queues.queue.MessageQueue` (issue 12).

Two receive modes besides MSMQ's nontransactional receive, built on the receipts protocol
(``docs/design.md``, "Receive modes"; ``schemas/README.md`` section 6):

* **Peek-lock** (``receive(lock=True, lease=s)``): one LOCK receipt holds the message under a
  lease of ``s`` seconds; :meth:`PeekLockReceives.complete` removes it for good with one
  COMPLETED receipt (the journal copy and ACK_RECEIVE happen then, as at the commit of a
  transactional receive); :meth:`PeekLockReceives.abandon`, a clean ``close()`` or the lease
  passing gives it back (RELEASE) with its abort count (PROPID_M_ABORT_COUNT) raised. At least
  once. A message released more often than the queue's ``receive_retry_count`` is moved to the
  ``;poison`` subqueue instead of being handed out again (MSMQ 4.0 poison handling).
* **Prefetch** (``QueueManager.open_queue(name, prefetch=k)``): one PREFETCH receipt holds up
  to ``k`` messages; ``receive()`` hands them out one by one from memory, at most once. One
  COMPLETED receipt settles the handed-out ones when the batch is used up (or taken again
  because its lease is running out), and a clean ``close()`` RELEASEs the others, which never
  raises their abort count. If the process dies, the batch's lease passes and whoever notices
  dead-letters what it still holds, with a reason saying it may have been handed out: at most
  ``k`` messages are lost to the application, none silently.

Lease expiry is noticed by every receive and peek before its pick and by ``kmq qm run``
(:meth:`MessageQueue.expire_due`): the clock decides whether to write a RELEASE (or, for a
PREFETCH, a REJECT into the dead-letter queue); which settle receipt wins is the log's order.

The methods live in a mixin of ``MessageQueue`` so that the nontransactional receive path in
``facade/queues/queue.py`` stays as it was. Not thread-safe, like the queue handle.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

from facade.errors import (
    BrokerUnavailable,
    EnvelopeError,
    InvalidParameter,
    LockLost,
    MessageAlreadyReceived,
    MessageQueueError,
)
from facade.model.message import Message, MessageClass
from facade.state.queuestate import ClaimOutcome, IndexEntry, OffsetState
from facade.state.queueview import PendingClaim, QueueView
from facade.model.receipts import ReceiptAction
from facade.queues.receiving import count_aborts
from facade.timeouts import DEFAULT_LEASE, DEFAULT_PREFETCH_LEASE, lease_to_ms

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.queues.queuehost import QueueHost
    from facade.state.registry import QueueProperties

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_PREFETCH_LEASE",
    "MAX_PREFETCH",
    "LockedMessage",
    "PeekLockReceives",
]

log = logging.getLogger("kmq.queue")

#: Most messages one prefetch may hold (offsets named by one PREFETCH receipt).
MAX_PREFETCH = 1_000
#: A prefetched message is handed out only while more than this share of the batch's lease is
#: left; past it the batch is settled and a new one taken, so that the handed-out messages are
#: completed well before anyone may consider the lease passed.
_PREFETCH_MARGIN = 0.25
_POISON_SUBQUEUE = "poison"


class LockedMessage(Message):
    """A message received under a peek-lock (``receive(lock=True)``): a :class:`Message` that
    also carries its lock. Settle it with :meth:`complete` or :meth:`abandon` (the same as
    ``queue.complete(message)`` / ``queue.abandon(message)``, which are the contract).

    ``lookup_id`` is its lookup id and ``abort_count`` counts the earlier deliveries that were
    released. A copy made with :func:`dataclasses.replace` is a plain message without the lock.

    Attributes:
        lock_token (str | None): the claim id of the LOCK receipt that holds the message.
        lease_expires (datetime | None): when the lease passes (the LOCK receipt's time plus
            the lease, UTC): from then on any process may release the message, after which
            :meth:`complete` raises :class:`~facade.errors.LockLost`.
    """

    lock_token: str | None = None
    lease_expires: dt.datetime | None = None
    _queue: Any = None
    #: A settle receipt of this message whose verdict could not be read (retried first), with
    #: the view that wrote it.
    _settling: tuple[QueueView, PendingClaim] | None = None

    @classmethod
    def adopt(cls, message: Message, token: str, lease_expires: dt.datetime,
              queue: PeekLockReceives) -> LockedMessage:
        """The decoded ``message`` as a locked message (no copy of its properties is checked
        again: it was validated when decoded)."""
        locked = object.__new__(cls)
        locked.__dict__.update(message.__dict__)
        locked.lock_token = token
        locked.lease_expires = lease_expires
        locked._queue = queue
        return locked

    def complete(self) -> None:
        """Remove the message for good; see :meth:`PeekLockReceives.complete`.

        Raises:
            LockLost: the lock was settled by someone else first.
            BrokerUnavailable: the verdict could not be read: call again.
        """
        self._handle().complete(self)

    def abandon(self) -> bool:
        """Give the message back to the queue; see :meth:`PeekLockReceives.abandon`.

        Returns:
            bool: True if this call released it, False if the lock was settled already.
        """
        return self._handle().abandon(self)

    def _handle(self) -> PeekLockReceives:
        if self._queue is None:
            raise InvalidParameter("this message carries no peek-lock",
                                   hint="receive it with receive(lock=True)")
        return self._queue


@dataclass
class _Batch:
    """The messages one PREFETCH holds for this handle."""

    claim_id: str
    deadline_ms: int  # the PREFETCH receipt's time plus its lease
    margin_ms: int
    waiting: list[Message]  # not handed out yet, in receive order
    handed: list[int] = field(default_factory=list)  # offsets handed out (or dead-lettered)
    #: By offset, the records of waiting messages that are their journal copy as they are
    #: (facade.queues.sending.stored_record_is_kept_copy).
    stored: dict[int, Any] = field(default_factory=dict)
    completing: PendingClaim | None = None  # COMPLETED for ``handed``, verdict not read yet
    releasing: PendingClaim | None = None  # RELEASE for the waiting ones, verdict not read yet


@dataclass(frozen=True)
class _Completion:
    """The COMPLETED receipt a committing transaction wrote for the messages of one lock."""

    messages: list[Message]
    view: QueueView
    pending: PendingClaim


class PeekLockReceives:
    """Peek-lock receive, prefetch and lock housekeeping of a :class:`~facade.queues.queue.MessageQueue`.

    A mixin: it uses the queue handle's view, outputs and system actions.
    """

    manager: QueueHost
    format_name: str

    if TYPE_CHECKING:  # provided by MessageQueue
        @property
        def properties(self) -> QueueProperties: ...

        def _open_view(self) -> QueueView: ...
        def _single(self) -> Destination: ...
        def _wait(self, pick: Callable[[QueueView, int], IndexEntry | None], remove: bool,
                  timeout: float | None,
                  take: Callable[[QueueView, IndexEntry], Message | None] | None = None
                  ) -> Message: ...
        def _wait_many(self, pick: Callable[[QueueView, int], IndexEntry | None],
                       timeout: float | None,
                       take: Callable[[QueueView, IndexEntry], list[LockedMessage]]
                       ) -> list[Message]: ...
        def _take_held(self, view: QueueView, limit: int) -> list[Message]: ...
        def _pick_head(self, view: QueueView, now_ms: int) -> IndexEntry | None: ...
        def _deliver(self, message: Message, stored: Any | None = None) -> Message: ...
        def _deliver_many(self, messages: list[Message],
                          stored: dict[int, Any] | None = None) -> list[Message]: ...
        _ready: list[Message]
        def _message(self, record: Any, lookup_id: int) -> Message: ...
        def _send_poison_to_dead_letter(self, record: Any, reason: str) -> None: ...
        def _system_actions(self, view: QueueView, entries: list[IndexEntry],
                            action: ReceiptAction, target: str, reason: str
                            ) -> list[tuple[int, Message | None]]: ...
        def _perform(self, action: ReceiptAction, record: Any, target: str | None,
                     reason: str | None, *, aborts: int = 0,
                     settles_lock: bool = False) -> Message | None: ...

    def _init_locks(self, prefetch: int, prefetch_lease: float) -> None:
        """Set up the handle's lock bookkeeping.

        Args:
            prefetch (int): messages to prefetch per PREFETCH receipt; 0 = no prefetch.
            prefetch_lease (float): seconds a prefetched batch is held.

        Raises:
            InvalidParameter: ``prefetch`` is not an int 0-:data:`MAX_PREFETCH`, or the lease
                is not finite seconds in (0, :data:`MAX_LEASE`].
        """
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) \
                or not 0 <= prefetch <= MAX_PREFETCH:
            raise InvalidParameter(f"prefetch must be a number of messages 0-{MAX_PREFETCH} "
                                   f"(0 = none), not {prefetch!r}", hint="e.g. prefetch=10")
        self._prefetch = prefetch
        self._prefetch_lease_ms = lease_to_ms(prefetch_lease, "prefetch_lease")
        self._batch: _Batch | None = None
        #: Messages a new prefetched batch hands out at once (receive_many sets it, see there).
        self._hand_out_at_once = 1
        #: Peek-locked messages this handle handed out and nobody settled through it yet.
        self._peek_locks: dict[tuple[str, int], LockedMessage] = {}

    # -- peek-lock -------------------------------------------------------------------------

    def _receive_locked(self, timeout: float | None, lease: float,
                        claimant: str | None = None) -> LockedMessage:
        """``receive(lock=True)``: the first message, held by a LOCK for ``lease`` seconds
        (``claimant``: see :meth:`QueueView.start_claim`)."""
        lease_ms = lease_to_ms(lease, "lease")
        message = self._wait(_first, remove=True, timeout=timeout,
                             take=lambda view, entry: self._take_locked(view, entry, lease_ms,
                                                                        claimant))
        return cast(LockedMessage, message)

    def _receive_locked_many(self, max_messages: int, timeout: float | None, lease: float,
                             claimant: str | None = None) -> list[LockedMessage]:
        """Up to ``max_messages`` of the first messages, held by one LOCK for ``lease`` seconds
        (one broker round trip for the batch); one message takes :meth:`_receive_locked`'s
        path. Waits up to ``timeout`` for the first, then takes what the queue holds now."""
        lease_ms = lease_to_ms(lease, "lease")
        limit = min(max_messages, MAX_PREFETCH)
        taken = self._wait_many(_first, timeout, lambda view, entry: self._take_locked_many(
            view, entry, limit, lease_ms, claimant))
        return cast(list[LockedMessage], taken)

    def _take_locked_many(self, view: QueueView, first: IndexEntry, limit: int, lease_ms: int,
                          claimant: str | None) -> list[LockedMessage]:
        """Claim ``first`` and the candidates after it, ``limit`` in all, with one LOCK and hand
        out the messages it won, in receive order (an empty list if it won none).

        Raises:
            BrokerUnavailable: the verdict could not be read. Nothing is held: if the lock
                won, its lease passes and the messages are released and received again.
        """
        if limit == 1:
            locked = self._take_locked(view, first, lease_ms, claimant)
            return [] if locked is None else [locked]
        records = {e.offset: view.record(e) for e in _batch_from(view, first, limit)}
        pending, outcome = _hold(view, ReceiptAction.LOCK, tuple(records), lease_ms, claimant)
        token = pending.receipt.claim_id
        decoded: list[tuple[int, Message]] = []
        poison: list[int] = []
        for offset in self._keep_receivable(view, outcome, token):
            try:
                decoded.append((offset, self._message(records[offset], offset)))
            except EnvelopeError as exc:
                self._send_poison_to_dead_letter(records[offset], str(exc))
                poison.append(offset)
        if poison:  # dead-lettered: end their part of the lock (see _take_locked)
            view.claim(ReceiptAction.COMPLETED, tuple(poison), completes=token)
        expires = _utc(pending.receipt.time_ms + lease_ms)
        taken = []
        for offset, message in decoded:
            message.abort_count += outcome.abort_count(offset)
            locked = LockedMessage.adopt(message, token, expires, self)
            self._peek_locks[(token, offset)] = locked
            taken.append(locked)
        return taken

    def _release_fenced(self, is_fenced: Callable[[str], bool]) -> int:
        """Release the locks of senders fenced by this one (an earlier incarnation with the same
        ``transactional.id``, which died inside a transaction): their messages come back now, in
        their place, instead of when the lease passes, so a restarted mover keeps the order.

        Returns:
            int: messages released.
        """
        view = self._open_view()
        view.load()
        released = 0
        for lock in view.state.locks():
            if is_fenced(lock.receipt.claimant):
                outcome = view.claim(ReceiptAction.RELEASE, lock.offsets, completes=lock.claim_id,
                                     reason=f"fenced: {lock.receipt.claimant} was replaced by a "
                                            "process with the same transactional.id")
                released += len(outcome.won)
        return released

    def _take_locked(self, view: QueueView, entry: IndexEntry,
                     lease_ms: int, claimant: str | None = None) -> LockedMessage | None:
        """Claim ``entry`` with a LOCK receipt (a LOCK_FIRST naming the candidates after it
        too, while the view is contended) and hand out the message the lock won.

        Returns:
            LockedMessage | None: the message; None if another receipt took it first, or it
            went to ``;poison`` or the dead-letter queue instead.

        Raises:
            BrokerUnavailable: the verdict could not be read. Nothing is held: if the lock
                won, its lease passes and the message is released and received again.
        """
        # Contended: one LOCK_FIRST naming the first candidates holds the head as of its place
        # in the log, instead of all competing receivers locking the same head.
        entries = view.first_candidates(entry)
        records = {e.offset: view.record(e) for e in entries}
        action = ReceiptAction.LOCK_FIRST if len(entries) > 1 else ReceiptAction.LOCK
        pending, outcome = _hold(view, action, tuple(records), lease_ms, claimant)
        token = pending.receipt.claim_id
        won = self._keep_receivable(view, outcome, token)
        if not won:
            return None
        offset = won[0]
        record = records[offset]
        try:
            message = self._message(record, offset)
        except EnvelopeError as exc:
            # Headers looked valid but the value is not an envelope: dead-letter it, then end
            # the lock (if this process dies in between, the lease passes and it comes back).
            self._send_poison_to_dead_letter(record, str(exc))
            view.claim(ReceiptAction.COMPLETED, (offset,), completes=token)
            return None
        message.abort_count += outcome.abort_count(offset)
        expires = _utc(pending.receipt.time_ms + lease_ms)
        locked = LockedMessage.adopt(message, token, expires, self)
        self._peek_locks[(token, offset)] = locked
        return locked

    def complete(self, message: Message) -> None:
        """Finish a peek-lock receive: remove the message for good (one COMPLETED receipt).

        MSMQ: the commit of a transactional receive. The queue journal copy is written first
        and ACK_RECEIVE is posted once the completion won, as at commit.

        Args:
            message (Message): a message from ``receive(lock=True)`` (a :class:`LockedMessage`).

        Raises:
            InvalidParameter: ``message`` was not received with ``lock=True``.
            LockLost: the lock was settled by someone else first (usually: its lease passed and
                another process released it, so the message is back in the queue and will be
                delivered again); the text says where the message is now.
            BrokerUnavailable: the journal copy or the verdict could not be written or read;
                the lock is still yours if it has not expired: call ``complete`` again.
        """
        token, offset = _lock_of(message)
        destination = self._single()
        outputs = self.manager.outputs
        outcome = self._settle_lock(
            message, ReceiptAction.COMPLETED, None,
            before=lambda: outputs.journal_removed(unlocked(message), destination))
        if offset not in outcome.won:
            raise LockLost(self._lost_text(offset, token), lookup_id=offset,
                           queue=self.format_name)
        outputs.acknowledge(message, MessageClass.ACK_RECEIVE, destination)

    def abandon(self, message: Message) -> bool:
        """Give a peek-locked message back to the queue (one RELEASE receipt).

        MSMQ: the abort of a transactional receive. It is pending again in its place in
        receive order, with ``abort_count`` one higher; once released more often than the
        queue's ``receive_retry_count`` it goes to ``;poison`` instead of being delivered.

        Args:
            message (Message): a message from ``receive(lock=True)``.

        Returns:
            bool: True if this call released it; False if its lock had been settled already
            (its lease passed and someone released it, or it was completed).

        Raises:
            InvalidParameter: ``message`` was not received with ``lock=True``.
            BrokerUnavailable: the verdict could not be read: call again (or let the lease
                pass, which releases it too).
        """
        _, offset = _lock_of(message)
        outcome = self._settle_lock(message, ReceiptAction.RELEASE, "abandoned by its receiver")
        return offset in outcome.won

    # -- transactional receive (facade.queues.transaction) --------------------------------------------

    def _journal_locked(self, messages: list[Message]) -> None:
        """Write the queue journal copies of locked messages about to be removed at commit,
        with one wait for the broker (:meth:`SystemOutputs.journal_removed_many`)."""
        for message in messages:
            _lock_of(message)
        self.manager.outputs.journal_removed_many([unlocked(m) for m in messages],
                                                  self._single())

    def _release_aborted(self, messages: list[Message],
                         reason: str) -> list[tuple[Message, MessageQueueError]]:
        """Give back locked messages whose transaction aborted: one RELEASE receipt per lock,
        naming its messages (pending again in their place, abort count + 1; ``;poison`` after
        ``receive_retry_count``).

        Returns:
            list[tuple[Message, MessageQueueError]]: the messages not released now, with why;
            each comes back when its lease passes.
        """
        failed = []
        view = self._open_view()
        for token, group in _by_lock(messages).items():
            pending = view.start_claim(ReceiptAction.RELEASE,
                                       tuple(cast(int, m.lookup_id) for m in group),
                                       completes=token, reason=reason)
            try:
                view.settle(pending)
            except MessageQueueError as exc:
                view.forget(pending)  # if it landed, it releases them as it is read back
                failed += [(m, exc) for m in group]
            finally:
                for message in group:
                    self._peek_locks.pop(_lock_of(message), None)
        return failed

    def _start_complete(self, messages: list[Message], producer: Any,
                        transaction_id: str) -> list[_Completion]:
        """Append the COMPLETED receipts of locked messages with ``producer``, inside its Kafka
        transaction: one receipt per lock, naming the offsets of ``messages`` it holds;
        :meth:`_finish_complete` reads the verdicts once the transaction commits."""
        view = self._open_view()
        return [_Completion(group, view, view.start_claim(
                    ReceiptAction.COMPLETED, tuple(cast(int, m.lookup_id) for m in group),
                    producer=producer, completes=token, transaction_id=transaction_id))
                for token, group in _by_lock(messages).items()]

    def _finish_complete(self, completions: list[_Completion]) -> list[Message]:
        """The verdicts of committed COMPLETED receipts; posts ACK_RECEIVE for each message
        whose completion removed it.

        Returns:
            list[Message]: the messages whose lock another receipt had settled first (the
            lease passed and they were released): they may be delivered again.
        """
        lost = []
        for completion in completions:
            try:
                outcome = completion.view.settle(completion.pending)
            finally:
                for message in completion.messages:
                    self._peek_locks.pop(_lock_of(message), None)
            for message in completion.messages:
                if message.lookup_id in outcome.won:
                    self.manager.outputs.acknowledge(message, MessageClass.ACK_RECEIVE,
                                                     self._single())
                else:
                    lost.append(message)
        return lost

    def _settle_lock(self, message: Message, action: ReceiptAction, reason: str | None,
                     before: Callable[[], object] | None = None) -> ClaimOutcome:
        """Write (or, after a failure, finish) the settle receipt of one peek-locked message."""
        token, offset = _lock_of(message)
        earlier: tuple[QueueView, PendingClaim] | None = getattr(message, "_settling", None)
        if earlier is not None and earlier[1].receipt.action is not action:
            self._verdict(message, *earlier)  # an earlier settle of the other kind first
            earlier = None
        if earlier is None:
            if before is not None:
                before()
            view = self._open_view()
            earlier = view, view.start_claim(action, (offset,), completes=token, reason=reason)
            message._settling = earlier  # type: ignore[attr-defined]
        outcome = self._verdict(message, *earlier)
        self._peek_locks.pop((token, offset), None)
        return outcome

    @staticmethod
    def _verdict(message: Message, view: QueueView, pending: PendingClaim) -> ClaimOutcome:
        """The verdict of a settle receipt; kept on the message if it cannot be read yet."""
        return _verdict(view, pending, lambda: setattr(message, "_settling", None))

    def _lost_text(self, offset: int, token: str) -> str:
        state = self._open_view().state
        status = state.status(offset)
        if status.is_pending:
            where = (f"it is back in the queue (released {state.abort_count(offset)} time(s)) "
                     "and will be delivered again")
        elif status.state is OffsetState.LOCKED:
            where = "another receiver holds it now"
        else:
            action = status.action.name if status.action is not None else "a receipt"
            where = f"it was removed by {action}"
        return (f"lock {token} on message with lookup id {offset} in {self.format_name!r} was "
                f"lost before complete() (its lease passed and another process released it, "
                f"or it was settled already): {where}")

    # -- prefetch --------------------------------------------------------------------------

    def _receive_prefetched(self, timeout: float | None) -> Message:
        """``receive()`` on a handle opened with ``prefetch=k``: the next prefetched message,
        taking a new batch of up to ``k`` with one PREFETCH receipt when needed."""
        view = self._open_view()
        held = self._take_held(view, 1)
        if held:
            return held[0]
        batch = self._usable_batch()
        if batch is not None:
            return self._hand_out_prefetched(batch)
        self._settle_batch()  # used up, or its lease is running out
        return self._wait(self._pick_head, remove=True, timeout=timeout,
                          take=self._take_batch)

    def _receive_prefetched_more(self, limit: int) -> list[Message]:
        """Up to ``limit`` more messages of the prefetched batch, without a new claim: their
        receive outputs are written together (one broker wait for all their journal copies),
        as ``receive_many`` does. Empty when the batch is used up or its lease runs out.

        Raises:
            MessageQueueError: an output failed; the messages are held for the next receive.
        """
        batch = self._usable_batch()
        if batch is None or limit < 1:
            return []
        taken = batch.waiting[:limit]
        del batch.waiting[:limit]
        offsets = [cast(int, m.lookup_id) for m in taken]
        batch.handed.extend(offsets)
        stored = {o: batch.stored.pop(o) for o in offsets if o in batch.stored}
        try:
            return self._deliver_many(taken, stored)
        finally:
            if not batch.waiting:
                self._finish_batch()

    def _usable_batch(self) -> _Batch | None:
        """The prefetched batch if it has messages waiting and its lease is not running out."""
        batch = self._batch
        if batch is not None and batch.waiting \
                and _now_ms() < batch.deadline_ms - batch.margin_ms:
            return batch
        return None

    def _take_batch(self, view: QueueView, first: IndexEntry) -> Message | None:
        """Claim ``first`` and the candidates after it (up to ``prefetch``) with one PREFETCH
        (``first`` is the head unless the view spreads contended picks)."""
        records = {e.offset: view.record(e) for e in _batch_from(view, first, self._prefetch)}
        lease_ms = self._prefetch_lease_ms
        # If the verdict cannot be read and it won, the lease passes and the batch is
        # dead-lettered.
        pending, outcome = _hold(view, ReceiptAction.PREFETCH, tuple(records), lease_ms)
        token = pending.receipt.claim_id
        won = self._keep_receivable(view, outcome, token)
        if not won:
            return None
        batch = _Batch(token, pending.receipt.time_ms + lease_ms,
                       int(lease_ms * _PREFETCH_MARGIN), [])
        for offset in won:
            try:
                message = self._message(records[offset], offset)
            except EnvelopeError as exc:
                self._send_poison_to_dead_letter(records[offset], str(exc))
                batch.handed.append(offset)  # completed with the batch
                continue
            stored = count_aborts(message, outcome.abort_count(offset), records[offset])
            if stored is not None:
                batch.stored[offset] = stored
            batch.waiting.append(message)
        self._batch = batch
        if not batch.waiting:
            self._finish_batch()
            return None
        if self._hand_out_at_once > 1:  # receive_many: the outputs of all with one wait
            handed = self._receive_prefetched_more(self._hand_out_at_once)
            if handed:
                self._ready.extend(handed[1:])  # handed out by the same receive_many
                return handed[0]
        return self._hand_out_prefetched(batch)

    def _hand_out_prefetched(self, batch: _Batch) -> Message:
        """Hand out the batch's next message (journal copy, ACK_RECEIVE: a receive's outputs);
        once the batch is used up, complete it at once so no handed-out message is left to the
        lease."""
        message = batch.waiting.pop(0)
        offset = cast(int, message.lookup_id)
        batch.handed.append(offset)
        try:
            # An output failing holds it for the next receive.
            return self._deliver(message, batch.stored.pop(offset, None))
        finally:
            if not batch.waiting:
                self._finish_batch()

    def _finish_batch(self) -> None:
        """Settle a used-up batch now; on failure leave it for the next receive or close()."""
        try:
            self._settle_batch()
        except MessageQueueError as exc:
            log.warning("prefetched batch on %s not completed yet (%s): retried at the next "
                        "receive or close", self.format_name, exc)

    def _settle_batch(self) -> None:
        """COMPLETED for the batch's handed-out messages, RELEASE for the others.

        Raises:
            BrokerUnavailable, BrokerError: a receipt or its verdict failed; the batch stays
                and the next call finishes it (no receipt is written twice).
        """
        batch = self._batch
        if batch is None:
            return
        view = self._open_view()
        if batch.handed and batch.completing is None:
            batch.completing = view.start_claim(ReceiptAction.COMPLETED, tuple(batch.handed),
                                                completes=batch.claim_id)
        if batch.completing is not None:
            outcome = _verdict(view, batch.completing, lambda: setattr(batch, "completing", None))
            batch.handed = []
            if outcome.lost:
                log.warning("prefetched messages %s of %s were handed out, but the batch's "
                            "lease passed before it was completed: they were also "
                            "dead-lettered", list(outcome.lost), self.format_name)
        if batch.waiting and batch.releasing is None:
            waiting = tuple(cast(int, m.lookup_id) for m in batch.waiting)
            batch.releasing = view.start_claim(ReceiptAction.RELEASE, waiting,
                                               completes=batch.claim_id,
                                               reason="prefetched and not handed out")
        if batch.releasing is not None:
            outcome = _verdict(view, batch.releasing, lambda: setattr(batch, "releasing", None))
            batch.waiting = []
            if outcome.lost:
                log.warning("prefetched messages %s of %s were not handed out, but the batch's "
                            "lease passed first: they went to the dead-letter queue",
                            list(outcome.lost), self.format_name)
        self._batch = None


    # -- poison after too many releases ----------------------------------------------------

    def _keep_receivable(self, view: QueueView, outcome: ClaimOutcome,
                         token: str) -> tuple[int, ...]:
        """The offsets a LOCK or PREFETCH won that may be handed out: those released more
        often than ``receive_retry_count`` (a release applied while the claim was in flight)
        are moved to ``;poison`` under the lock instead."""
        if not outcome.abort_counts:
            return outcome.won
        limit = self._retry_limit()
        if limit is None:
            return outcome.won
        over = tuple(o for o in outcome.won if outcome.abort_count(o) > limit)
        if over:
            self._settle_by_system(view, over, token, ReceiptAction.MOVE, _POISON_SUBQUEUE,
                                   _poison_reason(limit))
        return tuple(o for o in outcome.won if o not in over)

    def _retry_limit(self) -> int | None:
        """The queue's ``receive_retry_count`` (None: no limit, or not a queue that has one:
        journals, subqueues and system queues never move messages to ``;poison``)."""
        destination = self._single()
        known = destination.properties
        if known is None or destination.topics.data != known.data_topic:
            return None
        return self.properties.receive_retry_count  # fresh: it may have been changed

    def _poison_exhausted(self, view: QueueView) -> int:
        """Move pending messages released more often than ``receive_retry_count`` to
        ``;poison`` (MOVE, with their abort count and ``move_count`` + 1).

        Returns:
            int: messages this call moved.
        """
        if not view.state.has_abort_counts:  # nothing was released: the usual case
            return 0
        limit = self._retry_limit()
        if limit is None:
            return 0
        return len(self._system_actions(view, view.state.retries_exhausted(limit),
                                        ReceiptAction.MOVE, _POISON_SUBQUEUE,
                                        _poison_reason(limit)))

    # -- lease expiry ----------------------------------------------------------------------

    def _lock_housekeeping(self, view: QueueView) -> int:
        """Before a pick (and in ``kmq qm run``'s sweep): settle locks whose lease passed and
        move messages released too often to ``;poison``.

        Returns:
            int: messages released, dead-lettered or moved.
        """
        return self._settle_expired_locks(view) + self._poison_exhausted(view)

    def _settle_expired_locks(self, view: QueueView) -> int:
        """Settle every lock whose lease passed by this process's clock: RELEASE a LOCK (its
        messages come back, abort count + 1), dead-letter what a PREFETCH still holds.

        This handle's own batch is left to it (its next receive or close settles it exactly).

        Returns:
            int: offsets settled by this call.
        """
        now = _now_ms()
        due = view.state.next_lock_deadline_ms()
        if due is None or due > now:
            return 0
        own = self._batch.claim_id if self._batch is not None else None
        settled = 0
        for lock in view.state.expired_locks(now):
            if lock.claim_id == own or view.state.lock(lock.claim_id) is None:
                continue  # ours, or settled by a receipt an earlier claim of this loop read
            lease = (lock.receipt.lease_ms or 0) / 1000
            reason = (f"lease expired ({lease:g} s, taken by {lock.receipt.claimant})")[:1000]
            if lock.receipt.action is ReceiptAction.PREFETCH:
                settled += self._settle_by_system(
                    view, lock.offsets, lock.claim_id, ReceiptAction.REJECT,
                    self.manager.dead_letter_topic,
                    f"prefetched, not settled before its {reason}: it may have been handed "
                    "out once")
            else:
                outcome = view.claim(ReceiptAction.RELEASE, lock.offsets,
                                     completes=lock.claim_id, reason=reason)
                settled += len(outcome.won)
        return settled

    def _settle_by_system(self, view: QueueView, offsets: tuple[int, ...], token: str,
                          action: ReceiptAction, target: str, reason: str) -> int:
        """Take offsets a lock holds with a system claim naming it (MOVE to ``;poison``, REJECT
        into the dead-letter queue), write the outputs, then COMPLETED. Like every system claim
        it is redone by ``kmq qm run`` if this process dies before COMPLETED.

        Returns:
            int: offsets this claim took.
        """
        records = {}
        for offset in offsets:  # before the claim: a won offset's record leaves the view
            try:
                records[offset] = view.held_record(offset)
            except MessageAlreadyReceived:
                pass  # not read by this view: fetched below if the claim wins it
        outcome = view.claim(action, offsets, completes=token, target=target, reason=reason)
        for offset in outcome.won:
            record = records.get(offset) or view.fetch(offset)
            self._perform(action, record, target, reason, aborts=outcome.abort_count(offset),
                          settles_lock=True)
        if outcome.won:
            view.claim(ReceiptAction.COMPLETED, completes=outcome.claim_id)
        return len(outcome.won)

    # -- close -----------------------------------------------------------------------------

    def _release_locks(self) -> None:
        """On close: settle the prefetched batch (COMPLETED for what was handed out, RELEASE
        for the rest) and release the peek-locks handed out through this handle and not
        settled (their abort count goes up: they were delivered and not completed).

        Raises:
            BrokerUnavailable: some could not be settled; the error names them (their lease
                passes and they come back, or for a batch go to the dead-letter queue).
        """
        problems = []
        if self._batch is not None:
            try:
                self._settle_batch()
            except MessageQueueError as exc:
                problems.append(f"prefetched batch {self._batch.claim_id}: not settled ({exc}); "
                                "its lease will pass and what it holds will be dead-lettered")
                self._batch = None
        for message in list(self._peek_locks.values()):
            try:
                self._settle_lock(message, ReceiptAction.RELEASE,
                                  "released when its receiver closed the queue")
            except MessageQueueError as exc:
                problems.append(f"lookup id {message.lookup_id}: not released ({exc}); it comes "
                                "back when its lease passes")
        self._peek_locks.clear()
        if problems:
            raise BrokerUnavailable(f"closing {self.format_name!r}: " + "; ".join(problems),
                                    queue=self.format_name)


def _first(view: QueueView, now_ms: int) -> IndexEntry | None:
    return view.state.peek_first(now_ms)


def _batch_from(view: QueueView, first: IndexEntry, limit: int) -> list[IndexEntry]:
    """``first`` and the candidates after it in receive order, ``limit`` in all: what one
    LOCK or PREFETCH of a batch names."""
    return [first] + [e for e in islice(view.state.candidates(_now_ms(), start=first), limit)
                      if e.offset != first.offset][:limit - 1]


def _hold(view: QueueView, action: ReceiptAction, offsets: tuple[int, ...], lease_ms: int,
          claimant: str | None = None) -> tuple[PendingClaim, ClaimOutcome]:
    """Write a LOCK, LOCK_FIRST or PREFETCH receipt naming ``offsets`` and read its verdict.

    Raises:
        BrokerUnavailable: the verdict could not be read. The claim is forgotten: if it won,
            its lease passes and what it holds is released (or, for a PREFETCH, dead-lettered).
    """
    pending = view.start_claim(action, offsets, lease_ms=lease_ms, claimant=claimant)
    try:
        return pending, view.settle(pending)
    except BrokerUnavailable:
        view.forget(pending)
        raise


def _verdict(view: QueueView, pending: PendingClaim, done: Callable[[], object]) -> ClaimOutcome:
    """The verdict of a settle receipt written earlier; ``done`` forgets the pending receipt
    once it is known or the broker refused it (then it is not in the log and may be written
    again). On BrokerUnavailable it stays: the receipt may be in the log, and the next attempt
    reads its verdict rather than writing a second receipt."""
    try:
        outcome = view.settle(pending)
    except BrokerUnavailable:
        raise
    except MessageQueueError:
        done()
        raise
    done()
    return outcome


def _by_lock(messages: list[Message]) -> dict[str, list[Message]]:
    """Peek-locked messages grouped by their lock token, in the order given.

    Raises:
        InvalidParameter: a message was not received under a lock.
    """
    groups: dict[str, list[Message]] = {}
    for message in messages:
        groups.setdefault(_lock_of(message)[0], []).append(message)
    return groups


def _lock_of(message: Message) -> tuple[str, int]:
    """The lock token and lookup id of a peek-locked message.

    Raises:
        InvalidParameter: not a message received with ``lock=True``.
    """
    token = getattr(message, "lock_token", None)
    if not isinstance(token, str) or message.lookup_id is None:
        raise InvalidParameter("this message was not received with receive(lock=True): it has "
                               "no peek-lock to complete or abandon",
                               hint="pass the message object that receive(lock=True) returned")
    return token, message.lookup_id


def unlocked(message: Message) -> Message:
    """The message as a plain :class:`Message`, without its lock (for journal copies, and for
    what a transactional receive hands out while its transaction keeps the lock)."""
    plain = object.__new__(Message)
    plain.__dict__.update({k: v for k, v in message.__dict__.items()
                           if k in Message.__dataclass_fields__})
    return plain


def _poison_reason(limit: int) -> str:
    return f"released more than receive_retry_count ({limit}) times"


def _utc(epoch_ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.timezone.utc)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000

