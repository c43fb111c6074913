"""Peek-lock receive and the leases that hold messages for one receiver.

A receive mode besides MSMQ's nontransactional receive, built on the receipts protocol
(``docs/design.md``, "Receive modes"; ``schemas/README.md`` section 6):

* **Peek-lock** (``receive(lock=True, lease=s)``): one LOCK receipt holds the message under a
  lease of ``s`` seconds; ``MessageQueue.complete`` removes it for good with one COMPLETED
  receipt (the journal copy and ACK_RECEIVE happen then, as at the commit of a transactional
  receive); ``MessageQueue.abandon``, a clean ``close()`` or the lease passing gives it back
  (RELEASE) with its abort count (PROPID_M_ABORT_COUNT) raised. At least once. A message
  released more often than the queue's ``receive_retry_count`` is moved to the ``;poison``
  subqueue instead of being handed out again (MSMQ 4.0 poison handling,
  :mod:`facade.queues.systemactions`).
* **Transactional receive** (``receive(transaction=tx)``, :mod:`facade.queues.transaction`) is a
  peek-lock too: one LOCK for the batch, named by the transaction's producer; the transaction
  journals, completes (inside its Kafka transaction) or releases it through
  :class:`PeekLocks`, which is why the transaction's receive side lives here.

Prefetch (``open_queue(name, prefetch=k)``) holds its batch with a PREFETCH lease of the same
kind (:mod:`facade.queues.prefetch`, which uses :func:`hold`, :func:`batch_from` and
:func:`verdict`).

Lease expiry is noticed by every receive and peek before its pick and by ``kmq qm run``
(``MessageQueue.expire_due``, :mod:`facade.queues.systemactions`): the clock decides whether to
write a RELEASE (or, for a PREFETCH, a REJECT into the dead-letter queue); which settle
receipt wins is the log's order. Not thread-safe, like the queue handle.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol, cast

from facade.errors import (
    BrokerUnavailable,
    EnvelopeError,
    InvalidParameter,
    LockLost,
    MessageQueueError,
    TransactionUsage,
)
from facade.model.message import Message, MessageClass
from facade.state.queuestate import ClaimOutcome, IndexEntry, OffsetState
from facade.state.queueview import PendingClaim, QueueView
from facade.model.receipts import ReceiptAction
from facade.timeouts import DEFAULT_LEASE, DEFAULT_PREFETCH_LEASE, lease_to_ms
from facade.queues.transaction import MessageQueueTransaction
from facade.queues.waitloop import first_pending

if TYPE_CHECKING:
    from facade.queues.openedqueue import OpenedQueue
    from facade.queues.systemactions import SystemActions
    from facade.queues.waitloop import WaitLoop

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_PREFETCH_LEASE",
    "MAX_PREFETCH",
    "LockedMessage",
    "PeekLocks",
    "Settles",
]

log = logging.getLogger("kmq.queue")

#: Most messages one prefetch may hold (offsets named by one PREFETCH receipt).
MAX_PREFETCH = 1_000


class Settles(Protocol):
    """What settles a peek-lock: the queue handle that handed the message out
    (``MessageQueue.complete`` and ``abandon``, which also serve share-arbitrated queues)."""

    def complete(self, message: Message) -> None: ...

    def abandon(self, message: Message) -> bool: ...


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
    _queue: Settles | None = None
    #: A settle receipt of this message whose verdict could not be read (retried first), with
    #: the view that wrote it.
    _settling: tuple[QueueView, PendingClaim] | None = None

    @classmethod
    def adopt(cls, message: Message, token: str, lease_expires: dt.datetime,
              queue: Settles) -> LockedMessage:
        """The decoded ``message`` as a locked message (no copy of its properties is checked
        again: it was validated when decoded)."""
        locked = object.__new__(cls)
        locked.__dict__.update(message.__dict__)
        locked.lock_token = token
        locked.lease_expires = lease_expires
        locked._queue = queue
        return locked

    def complete(self) -> None:
        """Remove the message for good; see :meth:`PeekLocks.complete`.

        Raises:
            LockLost: the lock was settled by someone else first.
            BrokerUnavailable: the verdict could not be read: call again.
        """
        self._handle().complete(self)

    def abandon(self) -> bool:
        """Give the message back to the queue; see :meth:`PeekLocks.abandon`.

        Returns:
            bool: True if this call released it, False if the lock was settled already.
        """
        return self._handle().abandon(self)

    def _handle(self) -> Settles:
        if self._queue is None:
            raise InvalidParameter("this message carries no peek-lock",
                                   hint="receive it with receive(lock=True)")
        return self._queue


@dataclass(frozen=True)
class _Completion:
    """The COMPLETED receipt a committing transaction wrote for the messages of one lock."""

    messages: list[Message]
    view: QueueView
    pending: PendingClaim



class PeekLocks:
    """The peek-locks of one opened queue: LOCK claims, their settling (complete, abandon, a
    transaction's commit or abort) and their release when the handle closes.

    Args:
        opened (OpenedQueue): the queue and its view.
        waits (WaitLoop): how a receive waits for a message.
        system (SystemActions): ``;poison`` moves and dead-lettering of what a lock won.
        settler (Settles): the handle; a :class:`LockedMessage` settles through it.

    Attributes:
        format_name (str): the queue's format name (a transaction's messages name it).
    """

    def __init__(self, opened: OpenedQueue, waits: WaitLoop, system: SystemActions,
                 settler: Settles):
        self._opened = opened
        self._waits = waits
        self._system = system
        self._settler = settler
        self.format_name = opened.format_name
        #: Peek-locked messages this handle handed out and nobody settled through it yet.
        self._peek_locks: dict[tuple[str, int], LockedMessage] = {}
        #: Transactional senders whose earlier incarnations' locks this handle released.
        self._fenced_for: set[str] = set()

    # -- receive ---------------------------------------------------------------------------

    def receive(self, timeout: float | None, lease: float,
                claimant: str | None = None) -> LockedMessage:
        """``receive(lock=True)``: the first message, held by a LOCK for ``lease`` seconds
        (``claimant``: see :meth:`QueueView.start_claim`)."""
        lease_ms = lease_to_ms(lease, "lease")
        message = self._waits.first(
            lambda view, entry: self._take(view, entry, lease_ms, claimant), first_pending,
            remove=True, timeout=timeout)
        return cast(LockedMessage, message)

    def receive_in_transaction(self, timeout: float | None,
                               transaction: MessageQueueTransaction | str,
                               max_messages: int) -> list[Message]:
        """A transactional receive of up to ``max_messages``: a peek-lock (one LOCK receipt
        for the batch) enlisted in ``transaction``.

        Raises:
            TransactionUsage: not a transactional queue, or ``transaction`` ended.
        """
        if not isinstance(transaction, MessageQueueTransaction):  # "single"
            with self._opened.manager.begin_transaction() as single:
                return self.receive_in_transaction(timeout, single, max_messages)
        transaction.require_active()
        destination = self._opened.single()
        if destination.properties is not None and not destination.properties.transactional:
            raise TransactionUsage(
                f"{self.format_name!r} is not a transactional queue: MSMQ receives from it only "
                "outside transactions", queue=self.format_name,
                hint="receive without transaction=, or use a queue created with transactional=True")
        producer = transaction.producer
        if producer.owner not in self._fenced_for:
            producer.start()  # fences the earlier incarnations before their locks are released
            self._release_fenced(producer.is_fenced_owner)
            self._fenced_for.add(producer.owner)
        locked = self._receive_many(max_messages, timeout, transaction.lease, producer.owner)
        try:
            transaction.enlist_receives(self, locked)
        except TransactionUsage:
            # Ended meanwhile (another thread): give the messages back, one RELEASE per lock.
            for message, exc in self.release_aborted(
                    list(locked), "its transaction ended before the receive joined it"):
                log.warning("message %s stays locked in %s until its lease passes (%s)",
                            message.id, self.format_name, exc)
            raise
        return [unlocked(message) for message in locked]

    def _receive_many(self, max_messages: int, timeout: float | None, lease: float,
                      claimant: str | None = None) -> list[LockedMessage]:
        """Up to ``max_messages`` of the first messages, held by one LOCK for ``lease`` seconds
        (one broker round trip for the batch); one message takes :meth:`receive`'s path.
        Waits up to ``timeout`` for the first, then takes what the queue holds now."""
        lease_ms = lease_to_ms(lease, "lease")
        limit = min(max_messages, MAX_PREFETCH)
        taken = self._waits.first(
            lambda view, entry: self._take_many(view, entry, limit, lease_ms, claimant),
            first_pending, remove=True, timeout=timeout)
        return cast(list[LockedMessage], list(taken))

    def _take_many(self, view: QueueView, first: IndexEntry, limit: int, lease_ms: int,
                   claimant: str | None) -> list[LockedMessage]:
        """Claim ``first`` and the candidates after it, ``limit`` in all, with one LOCK and hand
        out the messages it won, in receive order (an empty list if it won none).

        Raises:
            BrokerUnavailable: the verdict could not be read. Nothing is held: if the lock
                won, its lease passes and the messages are released and received again.
        """
        if limit == 1:
            locked = self._take(view, first, lease_ms, claimant)
            return [] if locked is None else [locked]
        records = {e.offset: view.record(e) for e in batch_from(view, first, limit)}
        pending, outcome = hold(view, ReceiptAction.LOCK, tuple(records), lease_ms, claimant)
        token = pending.receipt.claim_id
        decoded: list[tuple[int, Message]] = []
        poison: list[int] = []
        read = self._opened.message_reader()
        for offset in self._system.keep_receivable(view, outcome, token):
            try:
                decoded.append((offset, read(records[offset], offset)))
            except EnvelopeError as exc:
                self._system.dead_letter_record(records[offset], str(exc))
                poison.append(offset)
        if poison:  # dead-lettered: end their part of the lock (see _take)
            view.claim(ReceiptAction.COMPLETED, tuple(poison), completes=token)
        expires = _utc(pending.receipt.time_ms + lease_ms)
        taken = []
        for offset, message in decoded:
            message.abort_count += outcome.abort_count(offset)
            locked = LockedMessage.adopt(message, token, expires, self._settler)
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
        view = self._opened.open_view()
        view.load()
        released = 0
        for lock in view.state.locks():
            if is_fenced(lock.receipt.claimant):
                outcome = view.claim(ReceiptAction.RELEASE, lock.offsets, completes=lock.claim_id,
                                     reason=f"fenced: {lock.receipt.claimant} was replaced by a "
                                            "process with the same transactional.id")
                released += len(outcome.won)
        return released

    def _take(self, view: QueueView, entry: IndexEntry,
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
        pending, outcome = hold(view, action, tuple(records), lease_ms, claimant)
        token = pending.receipt.claim_id
        won = self._system.keep_receivable(view, outcome, token)
        if not won:
            return None
        offset = won[0]
        record = records[offset]
        try:
            message = self._opened.message(record, offset)
        except EnvelopeError as exc:
            # Headers looked valid but the value is not an envelope: dead-letter it, then end
            # the lock (if this process dies in between, the lease passes and it comes back).
            self._system.dead_letter_record(record, str(exc))
            view.claim(ReceiptAction.COMPLETED, (offset,), completes=token)
            return None
        message.abort_count += outcome.abort_count(offset)
        expires = _utc(pending.receipt.time_ms + lease_ms)
        locked = LockedMessage.adopt(message, token, expires, self._settler)
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
        destination = self._opened.single()
        outputs = self._opened.manager.outputs
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

    # -- a transaction's receives (facade.queues.transaction) -----------------------------------------

    def journal_locked(self, messages: list[Message]) -> None:
        """Write the queue journal copies of locked messages about to be removed at commit,
        with one wait for the broker (:meth:`SystemOutputs.journal_removed_many`)."""
        for message in messages:
            _lock_of(message)
        self._opened.manager.outputs.journal_removed_many([unlocked(m) for m in messages],
                                                          self._opened.single())

    def release_aborted(self, messages: list[Message],
                         reason: str) -> list[tuple[Message, MessageQueueError]]:
        """Give back locked messages whose transaction aborted: one RELEASE receipt per lock,
        naming its messages (pending again in their place, abort count + 1; ``;poison`` after
        ``receive_retry_count``).

        Returns:
            list[tuple[Message, MessageQueueError]]: the messages not released now, with why;
            each comes back when its lease passes.
        """
        failed = []
        view = self._opened.open_view()
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

    def start_complete(self, messages: list[Message], producer: Any,
                        transaction_id: str) -> list[_Completion]:
        """Append the COMPLETED receipts of locked messages with ``producer``, inside its Kafka
        transaction: one receipt per lock, naming the offsets of ``messages`` it holds;
        :meth:`finish_complete` reads the verdicts once the transaction commits."""
        view = self._opened.open_view()
        return [_Completion(group, view, view.start_claim(
                    ReceiptAction.COMPLETED, tuple(cast(int, m.lookup_id) for m in group),
                    producer=producer, completes=token, transaction_id=transaction_id))
                for token, group in _by_lock(messages).items()]

    def finish_complete(self, completions: list[_Completion]) -> list[Message]:
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
                    self._opened.manager.outputs.acknowledge(message, MessageClass.ACK_RECEIVE,
                                                             self._opened.single())
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
            view = self._opened.open_view()
            earlier = view, view.start_claim(action, (offset,), completes=token, reason=reason)
            message._settling = earlier  # type: ignore[attr-defined]
        outcome = self._verdict(message, *earlier)
        self._peek_locks.pop((token, offset), None)
        return outcome

    @staticmethod
    def _verdict(message: Message, view: QueueView, pending: PendingClaim) -> ClaimOutcome:
        """The verdict of a settle receipt; kept on the message if it cannot be read yet."""
        return verdict(view, pending, lambda: setattr(message, "_settling", None))

    def _lost_text(self, offset: int, token: str) -> str:
        state = self._opened.open_view().state
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

    def release_on_close(self, problems: list[str]) -> None:
        """On close: release the peek-locks handed out through this handle and not settled
        (their abort count goes up: they were delivered and not completed).

        Args:
            problems (list[str]): what the handle's close could not settle before (its
                prefetched batch), reported with these.

        Raises:
            BrokerUnavailable: some could not be settled; the error names them (their lease
                passes and they come back, or for a batch go to the dead-letter queue).
        """
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


def batch_from(view: QueueView, first: IndexEntry, limit: int) -> list[IndexEntry]:
    """``first`` and the candidates after it in receive order, ``limit`` in all: what one
    LOCK or PREFETCH of a batch names."""
    return [first] + [e for e in islice(view.state.candidates(_now_ms(), start=first), limit)
                      if e.offset != first.offset][:limit - 1]


def hold(view: QueueView, action: ReceiptAction, offsets: tuple[int, ...], lease_ms: int,
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


def verdict(view: QueueView, pending: PendingClaim, done: Callable[[], object]) -> ClaimOutcome:
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


def _utc(epoch_ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch_ms / 1000, dt.timezone.utc)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
