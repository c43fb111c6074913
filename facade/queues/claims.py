"""Receive claims: how an opened queue takes messages with RECEIVE receipts and hands them out.

MSMQ's nontransactional receive removes a message for good as it hands it out; kmq removes it
by the first receipt that names it (``docs/design.md``): a RECEIVE (or RECEIVE_FIRST, naming
the first candidates of a contended head) is written, its verdict read, and what it won is
handed out with its receive outputs (journal copy, ACK_RECEIVE: :mod:`facade.queues.receiving`).

What a claim won is never lost: when its verdict cannot be read, or an output fails, the
messages stay with this handle and the next receive hands them out first (``held``); the
handle's close dead-letters what is still held then. Prefetched batches
(:mod:`facade.queues.prefetch`) hand out through the same delivery, so that both keep this promise
the same way. Peeks and the selective receives (by id, by lookup id) take or decode one
named entry here as well, and :class:`HandleReader` gives a cursor these steps.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from facade.errors import (
    BrokerUnavailable,
    EnvelopeError,
    MessageAlreadyReceived,
    MessageQueueError,
)
from facade.model.message import Message
from facade.state.queuestate import ClaimOutcome, IndexEntry
from facade.state.queueview import PendingClaim, QueueView
from facade.model.receipts import ReceiptAction
from facade.queues.receiving import count_aborts, write_receive_outputs
from facade.timeouts import receive_timeout

if TYPE_CHECKING:
    from facade.queues.openedqueue import OpenedQueue
    from facade.queues.systemactions import SystemActions
    from facade.queues.waitloop import WaitLoop

__all__ = ["HandleReader", "ReceiveClaims"]


class ReceiveClaims:
    """The RECEIVE claims of one opened queue and the messages they won (see the module text).

    Args:
        opened (OpenedQueue): the queue and its view.
        waits (WaitLoop): how a receive waits for a message.
        system (SystemActions): dead-letters what cannot be handed out.
    """

    def __init__(self, opened: OpenedQueue, waits: WaitLoop, system: SystemActions):
        self._opened = opened
        self._waits = waits
        self._system = system
        #: Receive claims whose verdict could not be read (the receive raised): resolved first
        #: by the next receive, which hands out the messages the claim won.
        self._unsettled: list[tuple[tuple[tuple[IndexEntry, Any], ...], PendingClaim]] = []
        #: Messages this handle won whose receive outputs (journal copy) are still to write.
        self._undelivered: list[Message] = []
        #: By lookup id, the records of undelivered messages that are their journal copy as
        #: they are (see stored_record_is_kept_copy): written again, not encoded again.
        self._stored: dict[int, Any] = {}
        #: Messages this handle won, outputs written, not handed out yet (a batch receive
        #: raised part-way, or a prefetched batch handed out several at once). The next
        #: receive returns these first.
        self.ready: list[Message] = []

    # -- receives --------------------------------------------------------------------------

    def receive(self, timeout: float | None) -> Message:
        """A nontransactional receive by head: what is held first, else the next message.

        Raises:
            InvalidParameter: a bad ``timeout`` (before anything held is handed out).
        """
        timeout = receive_timeout(timeout)
        with self._opened.lock:
            held = self.take_held(1)
            if held:
                return held[0]
            message: Message = self._waits.first(self._take_first, self._opened.pick_head,
                                                  remove=True, timeout=timeout)
            return message

    def receive_many(self, max_messages: int, timeout: float | None) -> list[Message]:
        """Up to ``max_messages`` with one RECEIVE receipt: what is held first, else the head
        and the candidates after it."""
        with self._opened.lock:
            held = self.take_held(max_messages)
            if held:
                return held
            batch: list[Message] = self._waits.first(
                lambda view, first: self._take_batch(view, first, max_messages),
                self._opened.pick_head, remove=True, timeout=timeout)
            return batch

    def _take_batch(self, view: QueueView, first: IndexEntry, size: int) -> list[Message]:
        """Claim ``first`` and the candidates after it, ``size`` in all, with one receipt
        (``first`` is the head unless the view spreads contended picks)."""
        batch = list(itertools.islice(view.state.candidates(_now_ms(), start=first), size))
        return self._take_many(view, batch or [first])

    def by_lookup_id(self, lookup_id: int, remove: bool) -> Message:
        """Receive (``remove``) or peek the message with this lookup id.

        Raises:
            MessageAlreadyReceived: it was removed (received, purged, expired).
            MessageNotFound: no message ever had this lookup id.
        """
        view = self._opened.open_view()
        entry = self._opened.pending_entry(view, lookup_id)
        message = self.take(view, entry) if remove else self.peek(view, entry)
        if message is None:
            raise MessageAlreadyReceived(f"message with lookup id {lookup_id} was removed by "
                                         "another receiver", queue=self._opened.format_name)
        return message

    # -- taking one entry ------------------------------------------------------------------

    def take(self, view: QueueView, entry: IndexEntry) -> Message | None:
        """Claim ``entry`` with a RECEIVE receipt and hand it out if the claim won.

        Returns:
            Message | None: the message; None if another receipt removed it first, or if it was
            a poison record (dead-lettered here).

        Raises:
            BrokerUnavailable, BrokerError: the verdict could not be read, or an output failed;
                the message is held for the next receive (see ``MessageQueue.receive``).
        """
        taken = self._take_many(view, [entry])
        return taken[0] if taken else None

    def peek(self, view: QueueView, entry: IndexEntry) -> Message | None:
        """The message of a pending entry, for a peek; None if its value is not an envelope.

        Such a record (valid kmq headers, garbage value) is dead-lettered as poison, as a
        receive does with it: otherwise every peek, cursor and listing (``kmq dlq list``,
        ``kmq journal list``) would raise on it for good, since nothing receives from journals
        or dead-letter queues (tests/faults/test_garbage.py writes such records).
        """
        record = view.record(entry)
        try:
            return self._opened.message(record, entry.offset)
        except EnvelopeError as exc:
            try:
                self._system.take(view, entry, ReceiptAction.POISON,
                                  target=self._opened.manager.dead_letter_topic, reason=str(exc))
            except MessageAlreadyReceived:
                pass  # removed by someone else meanwhile
            return None

    def _take_first(self, view: QueueView, first: IndexEntry) -> Message | None:
        """Receive the current head: claim ``first`` and, while this view is contended, the
        candidates after it (up to :data:`FIRST_OF`, in receive order) with one RECEIVE_FIRST
        receipt, which takes the first of them still pending when the log reaches it.

        Competing receivers that all see the same head then each get one message, the head as
        of their receipt's place in the log, instead of all but one losing and trying again
        (docs/design.md, "Contended receives"); each still gets its messages in queue order.

        Returns:
            Message | None: the message; None if every candidate was removed first, or if the
            one won was a poison record (dead-lettered here).

        Raises:
            BrokerUnavailable, BrokerError: the verdict could not be read, or an output failed;
                the message is held for the next receive.
        """
        entries = view.first_candidates(first)
        action = ReceiptAction.RECEIVE_FIRST if len(entries) > 1 else ReceiptAction.RECEIVE
        taken = self._claim(view, action, entries, decode_first=1, limit=1)
        return taken[0] if taken else None

    def _take_many(self, view: QueueView, entries: list[IndexEntry]) -> list[Message]:
        """Claim ``entries`` with one RECEIVE receipt and hand out the ones it won, in order.

        Raises:
            BrokerUnavailable, BrokerError: the verdict could not be read, or an output failed;
                what was won is held for the next receive.
        """
        return self._claim(view, ReceiptAction.RECEIVE, entries, decode_first=len(entries),
                           limit=len(entries))

    def _claim(self, view: QueueView, action: ReceiptAction, entries: list[IndexEntry], *,
               decode_first: int, limit: int) -> list[Message]:
        """Claim ``entries`` with one ``action`` receipt and hand out up to ``limit`` of the
        messages it won, in order; the first ``decode_first`` are decoded while the broker
        acknowledges the receipt (the verdict is what takes time), the others if they win."""
        records = tuple((entry, view.record(entry)) for entry in entries)
        read = self._opened.message_reader()
        pending = view.start_claim(action, tuple(e.offset for e in entries))
        decoded: list[Message | EnvelopeError | None] = [
            _decoded(read, record, entry.offset) if index < decode_first else None
            for index, (entry, record) in enumerate(records)]
        try:
            outcome = view.settle(pending)
        except BrokerUnavailable:
            # The receipt may be in the log and may have won: keep the claim, so the next
            # receive reads its verdict and hands the messages out instead of losing them.
            self._unsettled.append((records, pending))
            raise
        self._undelivered.extend(self._won_messages(records, outcome, decoded))
        return self._deliver_all(limit)

    def _won_messages(self, records: tuple[tuple[IndexEntry, Any], ...], outcome: ClaimOutcome,
                      decoded: Sequence[Message | EnvelopeError | None] | None = None
                      ) -> list[Message]:
        """The messages of the records a claim won (``decoded`` where given, else decoded now),
        with their abort counts (releases of peek-locks on them); poison among them is
        dead-lettered (the receipt already removed it, so it must not be lost or handed to the
        application)."""
        messages = []
        read = None
        for index, (entry, record) in enumerate(records):
            if entry.offset not in outcome.won:
                continue
            message = decoded[index] if decoded is not None else None
            if message is None:
                read = read or self._opened.message_reader()
                message = _decoded(read, record, entry.offset)
            if isinstance(message, EnvelopeError):
                self._system.dead_letter_record(record, str(message))
                continue
            stored = count_aborts(message, outcome.abort_count(entry.offset), record)
            if stored is not None:
                self._stored[entry.offset] = stored  # it joins _undelivered right away
            messages.append(message)
        return messages

    # -- delivery --------------------------------------------------------------------------

    def deliver(self, message: Message, stored: Any | None = None) -> Message:
        """Write one won message's receive outputs and hand it out (held if an output fails);
        ``stored``: its record, if that is its journal copy as it is."""
        return self.deliver_many([message], None if stored is None else
                                 {cast(int, message.lookup_id): stored})[0]

    def deliver_many(self, messages: list[Message],
                     stored: dict[int, Any] | None = None) -> list[Message]:
        """Write won messages' receive outputs together and hand them out (held if an output
        fails; messages held from an earlier failure go first). ``stored``: by lookup id, the
        records that are their message's journal copy as they are."""
        if stored:
            self._stored.update(stored)
        self._undelivered.extend(messages)
        return self._deliver_all(len(messages))

    def _deliver_all(self, limit: int) -> list[Message]:
        """Hand out up to ``limit`` won messages: first those ready, then those whose receive
        outputs (journal copy, ACK_RECEIVE) are written now.

        Raises:
            MessageQueueError: a journal copy failed; the messages of this batch stay held
                (those ready before wait in ``ready``) and their copies are written again by
                the next receive (a copy written twice keeps its id: views drop it).
        """
        handed = self.ready[:limit]
        del self.ready[:limit]
        batch = self._undelivered[:max(limit - len(handed), 0)]
        if batch:
            stored = {m.lookup_id: self._stored[m.lookup_id] for m in batch
                      if m.lookup_id in self._stored}
            try:
                write_receive_outputs(self._opened.manager, batch, self._opened.single(), stored)
            except MessageQueueError:
                self.ready[:0] = handed
                raise
            del self._undelivered[:len(batch)]
            for lookup_id in stored:
                del self._stored[lookup_id]
            handed.extend(batch)
        return handed

    # -- held messages ---------------------------------------------------------------------

    def take_held(self, limit: int) -> list[Message]:
        """Up to ``limit`` messages earlier, failed receives of this handle won but did not hand
        out (resolving claims whose verdict was not read yet); empty if none.

        Raises:
            BrokerUnavailable: a held claim's verdict still cannot be read.
        """
        self._resolve_unsettled(self._opened.open_view())
        return self._deliver_all(limit)

    def _resolve_unsettled(self, view: QueueView, *, closing: bool = False) -> list[str]:
        """Read the verdicts of claims whose receive raised; what they won joins the messages
        held for the next receive. A receipt the broker refused removed nothing: dropped.

        Args:
            view (QueueView): this handle's view.
            closing (bool): keep going past a verdict that still cannot be read (the claim is
                given up and described in the result) instead of raising.

        Returns:
            list[str]: the claims given up (only when ``closing``).

        Raises:
            BrokerUnavailable: a verdict still cannot be read (not ``closing``; the claim stays).
        """
        unknown = []
        while self._unsettled:
            records, pending = self._unsettled[0]
            try:
                outcome = view.settle(pending)
            except BrokerUnavailable as exc:
                if not closing:
                    raise
                ids = ", ".join(str(entry.offset) for entry, _ in records)
                unknown.append(f"lookup ids {ids}: verdict of their receive unknown ({exc})")
                del self._unsettled[0]
                continue
            except MessageQueueError:
                del self._unsettled[0]  # refused by the broker: the receipt removed nothing
                continue
            del self._unsettled[0]
            self._undelivered.extend(self._won_messages(records, outcome))
        return unknown

    def release_held(self) -> None:
        """On close: dead-letter what this handle won but never handed out (its receive failed
        and no later receive came), so no message is lost without a trace.

        Raises:
            BrokerUnavailable: a held message could not be dead-lettered, or a held claim's
                verdict could not be read; the error names the lookup ids.
        """
        view = self._opened.view
        problems = [] if view is None else self._resolve_unsettled(view, closing=True)
        held, self.ready, self._undelivered = self.ready + self._undelivered, [], []
        self._stored.clear()
        for message in held:
            reason = ("received by a handle whose receive failed and that was closed before "
                      "handing the message out")
            try:
                self._system.dead_letter_because(message, reason)
            except MessageQueueError as exc:
                problems.append(f"lookup id {message.lookup_id}: not dead-lettered ({exc})")
        if problems:
            raise BrokerUnavailable(f"closing {self._opened.format_name!r}: held messages may "
                                    "be lost: " + "; ".join(problems),
                                    queue=self._opened.format_name)


class HandleReader:
    """A :class:`~facade.queues.queue.MessageQueue`'s receive steps as a cursor sees them
    (``cursor.QueueReader``).

    Each step holds the handle's lock, so a cursor and the handle's own receives (other
    threads, ``begin_receive``) never use the view at the same time.
    """

    def __init__(self, opened: OpenedQueue, waits: WaitLoop, claims: ReceiveClaims):
        self._opened = opened
        self._waits = waits
        self._claims = claims
        self.format_name = opened.format_name

    def authorize(self, remove: bool) -> None:
        self._opened.authorize(remove)

    def open_view(self) -> QueueView:
        with self._opened.lock:
            return self._opened.open_view()

    def peek_entry(self, view: QueueView, entry: IndexEntry) -> Message | None:
        with self._opened.lock:
            return self._claims.peek(view, entry)

    def take_entry(self, view: QueueView, entry: IndexEntry) -> Message | None:
        with self._opened.lock:
            return self._claims.take(view, entry)

    def wait_for(self, pick: Callable[[QueueView, int], IndexEntry | None], *, remove: bool,
                 timeout: float | None, what: str = "message") -> tuple[IndexEntry, Message]:
        act = self._claims.take if remove else self._claims.peek
        with self._opened.lock:
            entry, message = self._waits.wait(act, pick, remove, timeout, what)
            return entry, message


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _decoded(read: Callable[[Any, int], Message], record: Any,
             lookup_id: int) -> Message | EnvelopeError:
    """``read(record, lookup_id)`` (an ``OpenedQueue.message_reader``), or the EnvelopeError
    that says why the record is poison."""
    try:
        return read(record, lookup_id)
    except EnvelopeError as exc:
        return exc
