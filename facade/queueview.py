"""A live view of one queue: its data and receipts topics read into a :class:`QueueState`.

Each process that peeks or receives holds one view per queue. The view reads both topics from
the start (``assign()``, no consumer group), keeps the values of pending records so a won claim
can be decoded without another fetch (and of records held by locks, which a release makes
pending again), and appends receipts to claim messages. A claim's outcome
is known once the view has read the receipts topic up to the claim's own offset: the first
receipt naming an offset wins (see ``docs/design.md``).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from facade.envelope import HEADER_TXN
from facade.errors import BrokerUnavailable, EnvelopeError, MessageAlreadyReceived, MessageNotFound
from facade.kafka import KafkaRecord, KafkaSession, PendingRecord, produce_async
from facade.message import Delivery
from facade.queuestate import ClaimOutcome, IndexEntry, OffsetState, OffsetStatus, QueueState
from facade.receipts import Receipt, ReceiptAction, decode_receipt, encode_receipt, new_claim
from facade.topics import QueueTopics

__all__ = ["PendingClaim", "QueueView"]

log = logging.getLogger("kmq.queueview")

#: Seconds a claim may wait for its own receipt to come back before the broker is deemed gone.
CLAIM_TIMEOUT = 30.0
#: Seconds a view re-reads a topic from a gap in its offsets before taking the gap as real.
GAP_PATIENCE = 1.0
#: Seconds a view may take to read its topics to their end (a queue's whole history on open).
CATCH_UP_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class PendingClaim:
    """A receipt appended by :meth:`QueueView.start_claim` whose verdict is not known yet."""

    receipt: Receipt
    value: bytes
    record: PendingRecord


@dataclass(frozen=True, slots=True)
class _OwnReceipt:
    claim_id: str
    value: bytes


class QueueView:
    """Live view of one queue.

    Args:
        session (KafkaSession): Kafka clients.
        topics (QueueTopics): the queue's data and receipts topics.
        claimant (str): identifies this process in receipts (diagnostics only).
    """

    def __init__(self, session: KafkaSession, topics: QueueTopics, claimant: str | None = None):
        self.topics = topics
        self.claimant = claimant or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.state = QueueState()
        self._values: dict[int, KafkaRecord] = {}  # pending records
        self._held_values: dict[int, KafkaRecord] = {}  # records held by locks
        self._awaiting: set[str] = set()
        #: Own receipts applied at their acknowledged offset before being read back.
        self._applied_ahead: dict[int, _OwnReceipt] = {}
        #: (topic, first missing offset) -> when the gap was first seen (see _rewind).
        self._gaps: dict[tuple[str, int], float] = {}
        #: Per topic: transaction markers due after the transactional records applied (see
        #: _note_transaction), and the transaction of the last such record.
        self._markers_due: dict[str, int] = {}
        self._last_transaction: dict[str, str] = {}
        self._outcomes: dict[str, ClaimOutcome] = {}
        self._session = session
        self._reader = session.reader()
        self._reader.assign({topics.data: 0, topics.receipts: 0})
        #: True while the receipts topic is not fetched (see start_claim).
        self._receipts_paused = False
        #: Whether this view has only received so far: then uncontended claims pause receipts.
        self._receive_only = True
        #: Whether both topics were read to their end once (see load()).
        self._loaded = False
        #: Receipts-topic records that are not valid receipts, skipped by every process alike.
        self.malformed_receipts = 0
        # Receipts are single, latency-critical records: no batching delay. acks=all makes an
        # acknowledged receipt durable; idempotence is not needed, because a claim waits for its
        # receipt before the next one (no reordering) and a retried duplicate is a later receipt
        # naming offsets its first copy already won, so it changes nothing. It costs about 50 us
        # per receipt (docs/performance.md).
        self._producer = session.producer(Delivery.RECOVERABLE, extra={
            "linger.ms": 0, "enable.idempotence": False})

    # -- reading -------------------------------------------------------------------------------

    def refresh(self, timeout: float = 0.0, *, receipts: bool = True) -> int:
        """Read what has arrived on either topic within ``timeout`` seconds.

        Args:
            timeout (float): seconds to wait for the first record.
            receipts (bool): fetch the receipts topic again if an uncontended claim paused it
                (peeks and cursors need other receivers' removals; a receive does not, because
                a claim that lost to one reads the receipts before it returns).

        Returns:
            int: number of records applied.
        """
        if receipts:
            self._want_receipts()
        return self._apply(self._reader.poll(timeout))

    def _want_receipts(self) -> None:
        """From now on fetch the receipts continuously: the view serves peeks, cursors, lookups,
        counts or purges, which must show other receivers' removals. A view that had paused them
        first reads them up to the end, so its first peek is as current as a fresh view's."""
        self._receive_only = False
        if self._receipts_paused:
            self.catch_up()  # resumes fetching them

    def _pause_receipts(self) -> None:
        if not self._receipts_paused:
            self._reader.pause(self.topics.receipts)
            self._receipts_paused = True

    def _resume_receipts(self) -> None:
        if self._receipts_paused:
            self._reader.resume(self.topics.receipts)
            self._receipts_paused = False

    def _apply(self, records: list[KafkaRecord]) -> int:
        rewound: set[str] = set()
        for record in records:
            topic = record.topic
            if topic in rewound:
                continue  # read again, in order, after the rewind
            data = topic == self.topics.data
            expected = self.state.data_offset if data else self.state.receipts_offset
            if record.offset > expected and self._rewind(topic, expected, record.offset):
                rewound.add(topic)
                continue
            if self._gaps:
                self._gaps.pop((topic, record.offset), None)
            if data:
                self._add_data(record)
            else:
                self._add_receipt(record)
        return len(records)

    def _note_transaction(self, topic: str, transaction_id: str | None) -> None:
        """Count the marker a Kafka transaction leaves after its records in ``topic``.

        Every committed (or aborted) Kafka transaction appends one control record to each
        partition it wrote, after its own records; consumers never see it, so it is a one-offset
        gap. Records of one kmq transaction carry its id (``kmq.txn`` / the receipt's
        ``transaction_id``) and are written together, so a change of id is a new marker due.
        """
        if transaction_id is not None and self._last_transaction.get(topic) != transaction_id:
            self._last_transaction[topic] = transaction_id
            self._markers_due[topic] = self._markers_due.get(topic, 0) + 1

    def _rewind(self, topic: str, expected: int, found: int) -> bool:
        """Handle a record that follows a gap: read the topic again from the gap, unless the gap
        is the markers of transactions whose records this view applied (Kafka's only holes in
        an uncompacted log) and a second fetch from the gap skipped it too, or the gap has
        lasted :data:`GAP_PATIENCE` seconds (then it is real).

        Kafka's log has no holes below the high watermark but transaction markers (kmq's queue
        topics are not compacted). Tansu 0.6, though, sometimes hands a tailing consumer a record
        before an earlier one written concurrently is visible, and the consumer moves past it for
        good: a view that missed a receipt would let two receivers win one message, and one that
        missed a data record would never deliver it (found by ``tests/faults`` and the two-
        receiver test). Re-reading from the gap gets the late record once it is visible.

        Returns:
            bool: True when the reader was rewound (drop the rest of this topic's batch).
        """
        key = (topic, expected)
        due = self._markers_due.get(topic, 0)
        if found - expected <= due and key in self._gaps:
            # Markers were due here, and a second fetch from the gap skipped it too.
            self._markers_due[topic] = due - (found - expected)
            del self._gaps[key]
            return False
        now = time.monotonic()
        first = self._gaps.setdefault(key, now)
        if now - first > GAP_PATIENCE:
            del self._gaps[key]
            log.info("offsets %d-%d of %r stay missing; taken as a real gap", expected,
                     found - 1, topic)
            return False
        self._reader.seek(topic, expected)
        return True

    def catch_up(self, timeout: float = CATCH_UP_TIMEOUT) -> None:
        """Read both topics up to what the broker holds now (count, purge, lookups need this).

        Raises:
            BrokerUnavailable: not caught up within ``timeout`` seconds.
        """
        self._receive_only = False
        self._read_to_end(timeout)

    def load(self, timeout: float = CATCH_UP_TIMEOUT) -> None:
        """Read both topics to their end once, before the view's first pick.

        MSMQ's receive order (highest priority first) is only true of a view that has read the
        whole queue: a fresh view that picked from the first records it fetched would hand out
        an old low-priority message ahead of a newer high-priority one. Later picks read what
        arrived since with :meth:`refresh`. A receive-only view stays receive-only.

        Raises:
            BrokerUnavailable: not read to the end within ``timeout`` seconds.
        """
        if not self._loaded:
            self._read_to_end(timeout)

    def _read_to_end(self, timeout: float) -> None:
        self._resume_receipts()
        for batch in self._reader.read_to_end((self.topics.data, self.topics.receipts), timeout):
            self._apply(batch)
        self._loaded = True

    def record(self, entry: IndexEntry) -> KafkaRecord:
        """The stored record of a pending entry.

        Raises:
            MessageAlreadyReceived: the entry is no longer pending (a receipt applied since it
                was picked removed it).
        """
        try:
            return self._values[entry.offset]
        except KeyError:
            raise MessageAlreadyReceived(
                f"message with lookup id {entry.offset} was removed from {self.topics.data!r}",
                queue=self.topics.data) from None

    def is_pending(self, entry: IndexEntry) -> bool:
        """Whether ``entry`` still waits in the queue (no receipt removed it since it was picked)."""
        return entry.offset in self._values

    def held_record(self, offset: int) -> KafkaRecord:
        """The stored record of an offset a lock holds (to dead-letter or move it).

        Raises:
            MessageAlreadyReceived: no lock holds ``offset`` now, as far as this view has read.
        """
        try:
            return self._held_values[offset]
        except KeyError:
            raise MessageAlreadyReceived(
                f"message with lookup id {offset} is not locked in {self.topics.data!r}",
                queue=self.topics.data) from None

    def fetch(self, offset: int, timeout: float = 10.0) -> KafkaRecord:
        """Read one data record by offset, even one already removed (recovery redoes claims).

        Raises:
            MessageNotFound: no record at ``offset`` (deleted by retention, or never written).
        """
        reader = self._session.reader()
        try:
            reader.assign({self.topics.data: offset})
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for record in reader.poll(0.05):
                    if record.offset == offset:
                        return record
                    if record.offset > offset:
                        break
                else:
                    continue
                break
        finally:
            reader.close()
        raise MessageNotFound(f"no record at offset {offset} of {self.topics.data!r}",
                              queue=self.topics.data)

    def _add_data(self, record: KafkaRecord) -> None:
        entry = IndexEntry.from_record(record.offset, len(record.value or b""), record.headers)
        if record.headers:
            self._note_transaction(record.topic, _header(record.headers, HEADER_TXN))
        self.state.add(entry)
        status = self.state.status(record.offset)
        if status.is_pending:
            self._values[record.offset] = record
        elif status.state is OffsetState.LOCKED:
            self._held_values[record.offset] = record

    def _add_receipt(self, record: KafkaRecord) -> None:
        expected = self._applied_ahead.pop(record.offset, None)
        if expected is not None:
            # This view's own receipt, applied when it was acknowledged (see settle()); compared
            # byte for byte rather than decoded again.
            if record.value != expected.value:
                log.error("receipt at offset %d of %r is not %s, which the broker acknowledged "
                          "there: the broker reported a wrong offset", record.offset,
                          record.topic, expected.claim_id)
            return
        try:
            receipt = decode_receipt(record.value or b"", topic=record.topic,
                                     partition=record.partition, offset=record.offset)
        except EnvelopeError as exc:
            self._skip_malformed(record, exc)
            return
        if self._applied_ahead:  # own receipts the broker never showed this reader: forget
            for stale in [o for o in self._applied_ahead if o < record.offset]:
                del self._applied_ahead[stale]
        self._apply_receipt(receipt, record.offset)

    def _keep_as(self, offset: int, status: OffsetStatus) -> None:
        """Keep an offset's record where its new status needs it: with the pending ones, with
        the held ones, or nowhere."""
        record = self._values.pop(offset, None) or self._held_values.pop(offset, None)
        if record is None:
            return
        if status.is_pending:
            self._values[offset] = record
        elif status.state is OffsetState.LOCKED:
            self._held_values[offset] = record

    def _skip_malformed(self, record: KafkaRecord, error: EnvelopeError) -> None:
        """Skip a receipts record that is not a receipt (written by something else than kmq).

        Every process skips it alike, so arbitration stays consistent; a receive must never
        wedge on it. Logged once per view, counted in :attr:`malformed_receipts` (``kmq queue
        show``)."""
        self.malformed_receipts += 1
        self.state.advance_receipts_to(record.offset + 1)
        log.warning("skipped a malformed record in %s [%d] at offset %d (%s); every kmq process "
                    "skips it", record.topic, record.partition, record.offset, error.message)

    def _apply_receipt(self, receipt: Receipt, receipt_offset: int) -> None:
        if receipt.action is ReceiptAction.COMPLETED:  # the only receipts written in a Kafka transaction
            self._note_transaction(self.topics.receipts, receipt.transaction_id)
        outcome = self.state.apply(receipt, receipt_offset)
        if receipt.action.is_lock or receipt.completes is not None:
            # Locks and settle receipts move records between pending, held and removed.
            for offset in outcome.won:
                self._keep_as(offset, self.state.status(offset))
        else:
            for offset in outcome.won:
                self._values.pop(offset, None)
        if receipt.purge_below is not None:
            # A purge removes a range rather than naming offsets: free the records it removed.
            below = receipt.purge_below
            for offset in [o for o in self._values if o < below]:
                if not self.state.status(offset).is_pending:
                    del self._values[offset]
        # Keep only the verdicts this view is waiting for: other processes' receipts flow
        # through here too, and storing theirs would grow without bound.
        if receipt.claim_id in self._awaiting:
            self._outcomes[receipt.claim_id] = outcome

    # -- claiming ------------------------------------------------------------------------------

    def claim(self, action: ReceiptAction, offsets: tuple[int, ...] = (), **fields: object) -> ClaimOutcome:
        """Append a receipt and wait for its verdict (:meth:`start_claim` then :meth:`settle`).

        Args:
            action (ReceiptAction): any action (RECEIVE, PURGE, LOCK, RELEASE, COMPLETED...).
            offsets (tuple[int, ...]): data-topic offsets (lookup ids) to remove.
            **fields: further receipt fields (``purge_below``, ``target``, ``reason``...).

        Returns:
            ClaimOutcome: which offsets this receipt removed (``won``) and which were already gone.

        Raises:
            BrokerUnavailable: the receipt was not acknowledged, or not read back, in time.
        """
        return self.settle(self.start_claim(action, offsets, **fields))  # type: ignore[arg-type]

    def start_claim(self, action: ReceiptAction, offsets: tuple[int, ...] = (), *,
                    producer: Any = None, claimant: str | None = None,
                    **fields: object) -> PendingClaim:
        """Append a receipt without waiting: the caller may work (decode the message) while the
        broker acknowledges it, then must call :meth:`settle` exactly once.

        In a view that has only received so far, the receipts topic is not fetched from here
        on while its claims go uncontended (each receipt lands right after the last one the
        view applied): a receiver alone on its queue then reads no receipts at all. Fetching a
        partition while appending to it also doubles the append's latency on some brokers
        (Tansu 0.6, ``docs/performance.md``). A claim that finds other receipts before its own
        fetches and reads them; the first peek, cursor move, lookup, count or purge resumes
        fetching for good. While the view knows of a lock that holds messages it does not pause:
        a RELEASE puts messages back, and a paused view would not see it before its next
        contended claim (a receiver waiting on a locked message would wait for the lease). A
        view learns of other processes' locks only with receipts fetched, so it is fetching
        then; its own locks need no fetching (it applies its own settle receipts).

        ``producer`` appends with another producer than the view's own: a transactional one
        inside a Kafka transaction (:mod:`facade.transaction`), whose commit must come before
        :meth:`settle`. ``claimant`` replaces the view's own (a transactional receive names its
        sender's ``transactional.id`` there).

        Raises:
            BrokerError: the producer refused the receipt (nothing was appended).
        """
        receipt = new_claim(action, offsets, claimant or self.claimant, **fields)
        self._awaiting.add(receipt.claim_id)
        if self._receive_only and not self.state.has_locks:
            self._pause_receipts()
        value = encode_receipt(receipt)
        try:
            record = produce_async(producer or self._producer, self.topics.receipts, value,
                                   operation="append receipt")
        except BaseException:
            self._awaiting.discard(receipt.claim_id)
            raise
        return PendingClaim(receipt, value, record)

    def settle(self, pending: PendingClaim) -> ClaimOutcome:
        """Wait for the verdict of a claim begun by :meth:`start_claim`.

        The verdict is known once every receipt before the claim's own is applied: the first
        receipt naming an offset wins, for every reader of the log. When this raises
        BrokerUnavailable the receipt may still be in the log: call ``settle`` again later for
        the verdict (the claim stays awaited until then).

        Raises:
            BrokerUnavailable: the receipt was not acknowledged, or not read back, in time.
            BrokerError: the broker refused the receipt (nothing was appended).
        """
        claim_id = pending.receipt.claim_id
        try:
            offset = pending.record.wait(CLAIM_TIMEOUT)
        except BrokerUnavailable:
            raise
        except BaseException:
            self._awaiting.discard(claim_id)  # refused: the receipt is not in the log
            raise
        deadline = time.monotonic() + CLAIM_TIMEOUT
        while claim_id not in self._outcomes:
            if self.state.receipts_offset == offset:
                # Every receipt before ours is applied, and ours is at ``offset``: the verdict
                # is decided now, exactly as every reader of the log will decide it, without
                # waiting for our own receipt to come back (one round trip less).
                self._applied_ahead[offset] = _OwnReceipt(claim_id, pending.value)
                self._apply_receipt(pending.receipt, offset)
                break
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"receipt {claim_id} for {self.topics.data!r} was not read back "
                    f"within {CLAIM_TIMEOUT:g} s", hint="check that the Kafka broker is running")
            # Contended: read the receipts before ours (fetching them again if paused).
            self._resume_receipts()
            self._apply(self._reader.poll(0.05))
        self._awaiting.discard(claim_id)
        return self._outcomes.pop(claim_id)

    def forget(self, pending: PendingClaim) -> None:
        """Stop waiting for the verdict of a claim begun by :meth:`start_claim` (instead of
        :meth:`settle`), e.g. a lock whose lease will settle it if it won."""
        self._awaiting.discard(pending.receipt.claim_id)
        self._outcomes.pop(pending.receipt.claim_id, None)

    def wake(self) -> None:
        """Fetch the queue's topics again if the view's reader rested while unused (see
        :class:`~facade.kafka.TopicReader`).

        Raises:
            QueueNotFound: the queue's topics were deleted meanwhile.
        """
        self._reader.wake()

    def close(self) -> None:
        """Close the reader and flush the producer."""
        self._producer.flush(5.0)
        self._reader.close()


def _header(headers: Iterable[tuple[str, bytes | None]], name: str) -> str | None:
    """The text of header ``name``, or None (also when it is not valid UTF-8)."""
    for key, value in headers:
        if key == name and value is not None:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                return None
    return None
