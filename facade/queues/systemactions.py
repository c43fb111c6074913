"""What the system, not the application, does to a queue's messages: system claims.

MSMQ removes messages on its own: expired ones (time-to-be-received) go to the dead-letter
queue, a message released too often goes to the ``;poison`` subqueue, a rejected one is
dead-lettered; kmq adds poison records (not kmq envelopes) and the leases of peek-locks and
prefetched batches that pass. Each of these is a *system claim* in the queue's receipts log
(EXPIRE, POISON, MOVE, REJECT, RELEASE), won by one process, followed by its outputs and a
COMPLETED receipt; a claim its owner left without COMPLETED is redone by whoever finds it
(:meth:`SystemActions.recover`). Every process may do all of this for every queue: each
waiting receive sweeps before its pick, and ``kmq qm run`` sweeps all queues.

One home for these claims, whoever triggers them (a receive, a peek, a peek-lock's verdict,
``MessageQueue.move`` / ``mark_rejected``, the sweeper), so that their outputs and their
recovery are the same everywhere.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from facade.errors import EnvelopeError, MessageAlreadyReceived, MessageNotFound
from facade.model.message import Message, MessageClass
from facade.state.queuestate import ClaimOutcome, IndexEntry
from facade.state.queueview import QueueView
from facade.model.receipts import ReceiptAction
from facade.queues.receiving import dead_letter_unreceivable

if TYPE_CHECKING:
    from facade.queues.openedqueue import OpenedQueue

__all__ = ["CLAIM_GRACE", "POISON_SUBQUEUE", "SystemActions"]

#: Seconds a system claim (expire, move, reject, a prefetched batch's dead-lettering) may go
#: without its COMPLETED receipt before another process takes it as abandoned and redoes it.
CLAIM_GRACE = 30.0
#: Seconds between a waiting handle's looks for abandoned claims (see SystemActions.recover).
_RECOVERY_INTERVAL = 5.0
#: ``kmq.reason`` of a poison record found by its headers (a POISON claim's own reason, e.g. the
#: decode error a peek met, takes precedence).
_BAD_HEADERS = "record headers are not a kmq envelope's"
#: Where a message released more often than ``receive_retry_count`` goes (MSMQ 4.0).
POISON_SUBQUEUE = "poison"


class SystemActions:
    """The system claims of one opened queue (see the module text).

    Args:
        opened (OpenedQueue): the queue and its view.
    """

    def __init__(self, opened: OpenedQueue):
        self._opened = opened
        self._recovered_at = float("-inf")

    # -- the sweep -------------------------------------------------------------------------

    def sweep(self, view: QueueView) -> None:
        """Before every pick of a waiting receive or peek: dead-letter poison records and
        expired messages, settle locks whose lease passed, move messages released too often
        to ``;poison``, and every few seconds redo the claims a dead process left."""
        self.dead_letter_poison(view)
        self.expire(view)
        self.settle_expired_locks(view)
        self.poison_exhausted(view)
        self.recover_abandoned(view)

    def expire_due(self, view: QueueView) -> int:
        """``kmq qm run``'s sweep of one queue (``MessageQueue.expire_due``): expiry, poison
        records, passed leases and ``;poison`` moves.

        Returns:
            int: messages expired, dead-lettered, released or moved.
        """
        view.catch_up()
        return (self.expire(view) + len(self.dead_letter_poison(view))
                + self.settle_expired_locks(view) + self.poison_exhausted(view))

    def expire(self, view: QueueView) -> int:
        """Dead-letter (EXPIRE) the messages whose time-to-be-received has passed.

        Returns:
            int: messages this call expired.
        """
        now = _now_ms()
        due = view.state.next_expiry_ms()
        if due is None or due > now:
            return 0
        done = self.take_each(view, view.state.expired(now), ReceiptAction.EXPIRE,
                              self._opened.manager.dead_letter_topic,
                              "time-to-be-received elapsed")
        return sum(1 for _, message in done if message is not None)

    def dead_letter_poison(self, view: QueueView) -> list[int]:
        """Move records that are not valid envelopes to the dead-letter queue, never stopping.

        Returns:
            list[int]: offsets this call moved.
        """
        done = self.take_each(view, view.state.poisoned(), ReceiptAction.POISON,
                              self._opened.manager.dead_letter_topic, _BAD_HEADERS)
        return [offset for offset, _ in done]

    # -- claims ----------------------------------------------------------------------------

    def take_each(self, view: QueueView, entries: list[IndexEntry], action: ReceiptAction,
                  target: str, reason: str) -> list[tuple[int, Message | None]]:
        """Claim each of ``entries`` that is still pending with a system action (expiry, poison
        records, ``;poison`` moves), skipping those another receipt removed first.

        Returns:
            list[tuple[int, Message | None]]: the offsets this process won, with the result of
            :meth:`take` for each.
        """
        done = []
        for entry in entries:
            if not view.is_pending(entry):
                continue  # an earlier claim of this loop applied a receipt that removed it
            try:
                done.append((entry.offset, self.take(view, entry, action,
                                                     target=target, reason=reason)))
            except MessageAlreadyReceived:
                continue  # another process took it first
        return done

    def take(self, view: QueueView, entry: IndexEntry, action: ReceiptAction,
             target: str | None = None, reason: str | None = None) -> Message | None:
        """Claim ``entry`` for a system action, perform its outputs, then close the claim.

        Returns:
            Message | None: what :meth:`perform` gives.

        Raises:
            MessageAlreadyReceived: another receipt removed the message first.
        """
        record = view.record(entry)
        outcome = view.claim(action, (entry.offset,), target=target, reason=reason)
        if entry.offset not in outcome.won:
            raise MessageAlreadyReceived(f"message with lookup id {entry.offset} was removed by "
                                         "another receiver", queue=self._opened.format_name)
        result = self.perform(action, record, target, reason,
                              aborts=outcome.abort_count(entry.offset))
        view.claim(ReceiptAction.COMPLETED, completes=outcome.claim_id)
        return result

    def take_named(self, lookup_id: int, action: ReceiptAction, target: str,
                   reason: str | None = None) -> Message:
        """An application's system action on one message (``MessageQueue.move``,
        ``mark_rejected``): the message as the action took it.

        Raises:
            MessageAlreadyReceived: someone removed the message first.
            MessageNotFound: no message with that lookup id, or its record is not a valid
                envelope (it went to the dead-letter queue as poison instead: reported, not
                returned as a message the caller would take for the one it named).
        """
        view = self._opened.open_view()
        entry = self._opened.pending_entry(view, lookup_id)
        message = self.take(view, entry, action, target=target, reason=reason)
        if message is None:
            raise MessageNotFound(f"the record with lookup id {lookup_id} is not a valid kmq "
                                  "message: it went to the dead-letter queue as poison",
                                  queue=self._opened.format_name)
        return message

    def perform(self, action: ReceiptAction, record: Any, target: str | None,
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
            self.dead_letter_record(record, reason or _BAD_HEADERS)
            return None
        try:
            message = self._opened.message(record, record.offset)
        except EnvelopeError as exc:
            self.dead_letter_record(record, str(exc))
            return None
        message.abort_count += aborts
        manager = self._opened.manager
        if action is ReceiptAction.MOVE:
            moved = dataclasses.replace(message, move_count=message.move_count + 1,
                                        lookup_id=None, arrived_time=None)
            manager.write_system_copy(
                self._opened.subqueue_destination(target or "").topics.data, moved)
            return moved
        if settles_lock and action is ReceiptAction.REJECT:
            self.dead_letter_because(message, reason or "taken from a lock")
            return message
        message_class = (MessageClass.NACK_RECEIVE_TIMEOUT if action is ReceiptAction.EXPIRE
                         else MessageClass.NACK_RECEIVE_REJECTED)
        manager.outputs.reject(message, message_class, self._opened.single(), reason)
        return message

    def dead_letter_record(self, record: Any, reason: str) -> None:
        """Dead-letter a record of this queue that cannot be handed out (poison, or refused
        by the receiver's protection level): :func:`facade.queues.receiving.dead_letter_unreceivable`."""
        opened = self._opened
        dead_letter_unreceivable(opened.manager, record, reason, opened.single(),
                                 opened.protection_level())

    def dead_letter_because(self, message: Message, reason: str) -> None:
        """Copy ``message`` to the dead-letter queue whatever its journal level (a kmq failure,
        not an MSMQ one), class NACK_RECEIVE_REJECTED, ``kmq.reason`` saying why.

        Raises:
            BrokerUnavailable, BrokerError: the copy was not acknowledged.
        """
        self._opened.manager.dead_letter(dataclasses.replace(
            message, message_class=MessageClass.NACK_RECEIVE_REJECTED, time_to_be_received=None,
            properties={**message.properties, "kmq.reason": reason}))

    # -- recovery of abandoned claims ------------------------------------------------------

    def recover(self, view: QueueView, grace: float) -> int:
        """Redo the outputs of system claims left without COMPLETED for ``grace`` seconds.

        Returns:
            int: claims completed.
        """
        cutoff = _now_ms() - int(grace * 1000)
        done = 0
        for claim in view.state.incomplete_claims():
            if claim.receipt.time_ms > cutoff:
                continue  # its owner may still be working on it
            for offset in claim.offsets:
                self.perform(claim.receipt.action, view.fetch(offset), claim.receipt.target,
                             claim.receipt.reason, aborts=claim.abort_count(offset),
                             settles_lock=claim.receipt.completes is not None)
            view.claim(ReceiptAction.COMPLETED, completes=claim.receipt.claim_id)
            done += 1
        return done

    def recover_abandoned(self, view: QueueView) -> None:
        """In a waiting receive or peek: the claims a dead process left, at most once every
        :data:`_RECOVERY_INTERVAL` seconds (see ``MessageQueue.recover_claims``)."""
        now = time.monotonic()
        if now - self._recovered_at < _RECOVERY_INTERVAL:
            return
        self._recovered_at = now
        self.recover(view, CLAIM_GRACE)

    # -- poison after too many releases ----------------------------------------------------

    def keep_receivable(self, view: QueueView, outcome: ClaimOutcome,
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
            self.settle_by_system(view, over, token, ReceiptAction.MOVE, POISON_SUBQUEUE,
                                  _poison_reason(limit))
        return tuple(o for o in outcome.won if o not in over)

    def _retry_limit(self) -> int | None:
        """The queue's ``receive_retry_count`` (None: no limit, or not a queue that has one:
        journals, subqueues and system queues never move messages to ``;poison``)."""
        destination = self._opened.single()
        known = destination.properties
        if known is None or destination.topics.data != known.data_topic:
            return None
        return self._opened.properties().receive_retry_count  # fresh: it may have been changed

    def poison_exhausted(self, view: QueueView) -> int:
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
        return len(self.take_each(view, view.state.retries_exhausted(limit),
                                  ReceiptAction.MOVE, POISON_SUBQUEUE, _poison_reason(limit)))

    # -- lease expiry ----------------------------------------------------------------------

    def settle_expired_locks(self, view: QueueView) -> int:
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
        own = self._opened.held_batch
        settled = 0
        for lock in view.state.expired_locks(now):
            if lock.claim_id == own or view.state.lock(lock.claim_id) is None:
                continue  # ours, or settled by a receipt an earlier claim of this loop read
            lease = (lock.receipt.lease_ms or 0) / 1000
            reason = (f"lease expired ({lease:g} s, taken by {lock.receipt.claimant})")[:1000]
            if lock.receipt.action is ReceiptAction.PREFETCH:
                settled += self.settle_by_system(
                    view, lock.offsets, lock.claim_id, ReceiptAction.REJECT,
                    self._opened.manager.dead_letter_topic,
                    f"prefetched, not settled before its {reason}: it may have been handed "
                    "out once")
            else:
                outcome = view.claim(ReceiptAction.RELEASE, lock.offsets,
                                     completes=lock.claim_id, reason=reason)
                settled += len(outcome.won)
        return settled

    def settle_by_system(self, view: QueueView, offsets: tuple[int, ...], token: str,
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
            self.perform(action, record, target, reason, aborts=outcome.abort_count(offset),
                         settles_lock=True)
        if outcome.won:
            view.claim(ReceiptAction.COMPLETED, completes=outcome.claim_id)
        return len(outcome.won)


def _poison_reason(limit: int) -> str:
    return f"released more than receive_retry_count ({limit}) times"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
