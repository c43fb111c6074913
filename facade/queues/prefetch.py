"""Prefetch: one PREFETCH receipt holds a batch that receives hand out from memory.

``QueueManager.open_queue(name, prefetch=k)``: one PREFETCH receipt holds up to ``k``
messages under a lease (``docs/design.md``, "Receive modes"); ``receive()`` hands them out one
by one from memory, at most once, each with its receive outputs (:mod:`facade.queues.claims`). One
COMPLETED receipt settles the handed-out ones when the batch is used up (or taken again
because its lease is running out), and a clean ``close()`` RELEASEs the others, which never
raises their abort count. If the process dies, the batch's lease passes and whoever notices
dead-letters what it still holds, with a reason saying it may have been handed out
(:mod:`facade.queues.systemactions`): at most ``k`` messages are lost to the application, none
silently.

A PREFETCH is a lease like a peek-lock's LOCK and is written and read the same way
(:func:`facade.queues.peeklock.hold`); what differs is who settles it and when, which is this
module. Not thread-safe, like the queue handle.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from facade.errors import EnvelopeError, InvalidParameter, MessageQueueError, ReceiveTimeout
from facade.model.message import Message
from facade.queues.peeklock import MAX_PREFETCH, batch_from, hold, verdict
from facade.state.queuestate import IndexEntry
from facade.state.queueview import PendingClaim, QueueView
from facade.model.receipts import ReceiptAction
from facade.queues.receiving import count_aborts
from facade.timeouts import lease_to_ms

if TYPE_CHECKING:
    from facade.queues.claims import ReceiveClaims
    from facade.queues.openedqueue import OpenedQueue
    from facade.queues.systemactions import SystemActions
    from facade.queues.waitloop import WaitLoop

__all__ = ["Prefetcher"]

log = logging.getLogger("kmq.queue")

#: A prefetched message is handed out only while more than this share of the batch's lease is
#: left; past it the batch is settled and a new one taken, so that the handed-out messages are
#: completed well before anyone may consider the lease passed.
_PREFETCH_MARGIN = 0.25


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


class Prefetcher:
    """The prefetched batch of one opened queue (see the module text).

    Args:
        opened (OpenedQueue): the queue and its view.
        waits (WaitLoop): how a receive waits for a message.
        claims (ReceiveClaims): hands out what the batch holds (and holds what fails).
        system (SystemActions): ``;poison`` moves and dead-lettering of what a batch won.
        prefetch (int): messages to prefetch per PREFETCH receipt; 0 = no prefetch.
        prefetch_lease (float): seconds a prefetched batch is held.

    Raises:
        InvalidParameter: ``prefetch`` is not an int 0-:data:`MAX_PREFETCH`, or the lease
            is not finite seconds in (0, :data:`MAX_LEASE`].
    """

    def __init__(self, opened: OpenedQueue, waits: WaitLoop, claims: ReceiveClaims,
                 system: SystemActions, prefetch: int, prefetch_lease: float):
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) \
                or not 0 <= prefetch <= MAX_PREFETCH:
            raise InvalidParameter(f"prefetch must be a number of messages 0-{MAX_PREFETCH} "
                                   f"(0 = none), not {prefetch!r}", hint="e.g. prefetch=10")
        self._opened = opened
        self._waits = waits
        self._claims = claims
        self._system = system
        #: Messages per PREFETCH receipt (0: this handle does not prefetch).
        self.size = prefetch
        self._lease_ms = lease_to_ms(prefetch_lease, "prefetch_lease")
        self._current: _Batch | None = None
        #: Messages a new prefetched batch hands out at once (receive_many sets it, see there).
        self._hand_out_at_once = 1

    @property
    def _batch(self) -> _Batch | None:
        return self._current

    @_batch.setter
    def _batch(self, batch: _Batch | None) -> None:
        # The lease sweeps of this handle leave its own batch to it (OpenedQueue.held_batch).
        self._current = batch
        self._opened.held_batch = None if batch is None else batch.claim_id

    def receive_many(self, max_messages: int, timeout: float | None) -> list[Message]:
        """receive_many on a prefetching handle: what is held first, else what the prefetched
        batch holds, then new batches, the first wait up to ``timeout``; the messages handed
        out together get their receive outputs with one write.

        Raises:
            ReceiveTimeout: no message within ``timeout``.
        """
        with self._opened.lock:
            messages = self._claims.take_held(max_messages)
            if messages:
                return messages
            wait = timeout
            while len(messages) < max_messages:
                more = self.more(max_messages - len(messages))
                if more:
                    messages += more
                    continue
                self._hand_out_at_once = max_messages - len(messages)
                try:
                    messages.append(self.receive(wait))
                except ReceiveTimeout:
                    if not messages:
                        raise
                    break
                finally:
                    self._hand_out_at_once = 1
                # The rest of a new batch, handed out with the first (see _take_batch).
                messages += self._claims.take_held(max_messages - len(messages))
                wait = 0
            return messages

    def receive(self, timeout: float | None) -> Message:
        """``receive()`` on a handle opened with ``prefetch=k``: the next prefetched message,
        taking a new batch of up to ``k`` with one PREFETCH receipt when needed."""
        held = self._claims.take_held(1)
        if held:
            return held[0]
        batch = self._usable_batch()
        if batch is not None:
            return self._hand_out_prefetched(batch)
        self._settle_batch()  # used up, or its lease is running out
        message: Message = self._waits.first(self._take_batch, self._opened.pick_head,
                                             remove=True, timeout=timeout)
        return message

    def more(self, limit: int) -> list[Message]:
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
            return self._claims.deliver_many(taken, stored)
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
        records = {e.offset: view.record(e) for e in batch_from(view, first, self.size)}
        lease_ms = self._lease_ms
        # If the verdict cannot be read and it won, the lease passes and the batch is
        # dead-lettered.
        pending, outcome = hold(view, ReceiptAction.PREFETCH, tuple(records), lease_ms)
        token = pending.receipt.claim_id
        won = self._system.keep_receivable(view, outcome, token)
        if not won:
            return None
        batch = _Batch(token, pending.receipt.time_ms + lease_ms,
                       int(lease_ms * _PREFETCH_MARGIN), [])
        read = self._opened.message_reader()
        for offset in won:
            try:
                message = read(records[offset], offset)
            except EnvelopeError as exc:
                self._system.dead_letter_record(records[offset], str(exc))
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
            handed = self.more(self._hand_out_at_once)
            if handed:
                self._claims.ready.extend(handed[1:])  # handed out by the same receive_many
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
            return self._claims.deliver(message, batch.stored.pop(offset, None))
        finally:
            if not batch.waiting:
                self._finish_batch()

    def _finish_batch(self) -> None:
        """Settle a used-up batch now; on failure leave it for the next receive or close()."""
        try:
            self._settle_batch()
        except MessageQueueError as exc:
            log.warning("prefetched batch on %s not completed yet (%s): retried at the next "
                        "receive or close", self._opened.format_name, exc)

    def _settle_batch(self) -> None:
        """COMPLETED for the batch's handed-out messages, RELEASE for the others.

        Raises:
            BrokerUnavailable, BrokerError: a receipt or its verdict failed; the batch stays
                and the next call finishes it (no receipt is written twice).
        """
        batch = self._batch
        if batch is None:
            return
        view = self._opened.open_view()
        if batch.handed and batch.completing is None:
            batch.completing = view.start_claim(ReceiptAction.COMPLETED, tuple(batch.handed),
                                                completes=batch.claim_id)
        if batch.completing is not None:
            outcome = verdict(view, batch.completing, lambda: setattr(batch, "completing", None))
            batch.handed = []
            if outcome.lost:
                log.warning("prefetched messages %s of %s were handed out, but the batch's "
                            "lease passed before it was completed: they were also "
                            "dead-lettered", list(outcome.lost), self._opened.format_name)
        if batch.waiting and batch.releasing is None:
            waiting = tuple(cast(int, m.lookup_id) for m in batch.waiting)
            batch.releasing = view.start_claim(ReceiptAction.RELEASE, waiting,
                                               completes=batch.claim_id,
                                               reason="prefetched and not handed out")
        if batch.releasing is not None:
            outcome = verdict(view, batch.releasing, lambda: setattr(batch, "releasing", None))
            batch.waiting = []
            if outcome.lost:
                log.warning("prefetched messages %s of %s were not handed out, but the batch's "
                            "lease passed first: they went to the dead-letter queue",
                            list(outcome.lost), self._opened.format_name)
        self._batch = None

    def settle_on_close(self) -> list[str]:
        """On close: settle the prefetched batch (COMPLETED for what was handed out, RELEASE
        for the rest).

        Returns:
            list[str]: what could not be settled (its lease will pass and what it holds will
            be dead-lettered); empty when all went well.
        """
        if self._batch is None:
            return []
        try:
            self._settle_batch()
        except MessageQueueError as exc:
            claim_id, self._batch = self._batch.claim_id, None
            return [f"prefetched batch {claim_id}: not settled ({exc}); "
                    "its lease will pass and what it holds will be dead-lettered"]
        return []


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
