"""A live view of one queue: its data and receipts topics read into a :class:`QueueState`.

Each process that peeks or receives holds one view per queue. The view reads both topics from
the start (``assign()``, no consumer group) into an index of the pending messages, without
their bodies: a record is fetched by offset when it is handed out, with a bounded cache of the
records near the head (:class:`~facade.state.recordcache.RecordCache`). It appends receipts to claim
messages. A claim's outcome
is known once the view has read the receipts topic up to the claim's own offset: the first
receipt naming an offset wins (see ``docs/design.md``).
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from itertools import islice
from dataclasses import dataclass
from typing import Any, cast

from facade.errors import (
    AccessDenied,
    BrokerError,
    BrokerUnavailable,
    EnvelopeError,
    MessageAlreadyReceived,
    MessageQueueError,
)
from facade.kafka.librdkafka import PendingRecord, Refusal, map_kafka_errors, produce_async, refusal
from facade.kafka.kafkaseam import KafkaRecord, KafkaSession
from facade.kafka.kafkaseam import RecordReader as TopicReader
from facade.model.message import Delivery
from facade.state.queuestate import ClaimOutcome, IndexEntry, OffsetState, QueueState, check_snapshot
from facade.state.recordcache import RecordCache
from facade.state.retention import ReceiptsRetention, snapshot_bucket
from facade.model.receipts import Receipt, ReceiptAction, decode_receipt, encode_receipt, new_claim
from facade.state.snapshot import QueueSnapshotRecord, decode_snapshot, encode_snapshot
from facade.model.topics import QueueTopics, snapshot_topic
from facade.model.topicsettings import KAFKA_DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["PendingClaim", "QueueView", "best_snapshot", "check_covered", "snapshot_candidates",
           "snapshot_owner", "valid_snapshots"]

log = logging.getLogger("kmq.queueview")

#: Seconds a claim may wait for its own receipt to come back before the broker is deemed gone.
CLAIM_TIMEOUT = 30.0
#: librdkafka delivery errors after which a record may or may not be in the log: the producer
#: gave up waiting (``message.timeout.ms``), possibly after the broker appended it.
_OUTCOME_UNKNOWN = frozenset({"_MSG_TIMED_OUT"})
#: Seconds a view may take to read its topics to their end (a queue's whole history on open).
CATCH_UP_TIMEOUT = 60.0
#: librdkafka settings of the view's reader. It keeps no bodies, so what librdkafka fetches
#: ahead is most of its memory while it reads a long queue: the default prefetch (64 MiB) cost
#: about 400 bytes per pending message of RSS in ``benchmarks/state_bench.py``, a 1 MiB prefetch
#: about 80, and 256 KiB fetches about 25 less again (docs/performance.md); reading 200,000
#: records is no slower. A larger record still arrives whole (a fetch returns at least the
#: first batch, KIP-74); ``message.max.bytes`` only bounds this client's requests and must not
#: exceed ``fetch.max.bytes``.
_READER_SETTINGS = {"queued.max.messages.kbytes": 256, "fetch.max.bytes": 256 * 1024,
                    "max.partition.fetch.bytes": 256 * 1024, "message.max.bytes": 256 * 1024}
#: Records a view applies between two snapshots it writes (see docs/design.md, "Snapshots").
SNAPSHOT_EVERY = 10_000
#: Records applied since the last snapshot for which close() writes one.
SNAPSHOT_ON_CLOSE = 1_000
#: Most messages a snapshot lists: a longer queue is opened from the log.
SNAPSHOT_MAX_ENTRIES = 10_000
#: Largest snapshot record written, bytes: within Kafka's default record limit.
SNAPSHOT_MAX_BYTES = KAFKA_DEFAULT_MAX_MESSAGE_BYTES - 4096
#: Snapshots of one queue kept in memory while the snapshot topic is read on open (newest).
_SNAPSHOT_CANDIDATES = 3
#: Seconds a view counts as contended after one of its claims lost an offset (see pick_head),
#: and keeps fetching receipts after one of its claims found other receipts before its own
#: (see start_claim).
CONTENTION_MEMORY = 1.0
#: How many head candidates a contended view spreads its by-head claims over (see pick_head).
CONTENTION_SPREAD = 8
#: Candidates a contended receive of the head names in one RECEIVE_FIRST or LOCK_FIRST
#: receipt: up to this many receivers competing for one queue each get a message from one
#: receipt (docs/design.md, "Contended receives").
FIRST_OF = 8


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
        guard (Callable[[], None] | None): called before every receipt is appended; raises
            (``QueueNotFound``) when the queue this view was opened on is gone, so that no
            receipt of it lands in a queue created again under its name (see
            :func:`facade.queues.destination.incarnation_guard`). None: no check (system queues).
    """

    def __init__(self, session: KafkaSession, topics: QueueTopics, claimant: str | None = None,
                 guard: Callable[[], None] | None = None):
        self.topics = topics
        self._guard = guard
        self.claimant = claimant or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._session = session
        #: Records of the snapshot topic that are not valid snapshots of this queue (skipped).
        self.malformed_snapshots = 0
        self.snapshot_topic = snapshot_topic(topics.data)
        self._snapshot_topic_ready = False
        #: Why this principal may not write snapshots (Kafka ACLs), once the broker said so:
        #: this view writes none from then on.
        self.snapshots_refused: str | None = None
        #: Data records below this offset were deleted by this view or need no deleting.
        self._deleted_below = 0
        #: What bounds the receipts this view may delete (snapshot buckets, receipt ages).
        self._retention = ReceiptsRetention(topics.data)
        #: Records applied since the snapshot this view opened from or last wrote (a receipt
        #: counts once per offset it names).
        self._since_snapshot = 0
        self.state = self._open_state()
        #: Records of pending and held messages near the head; the rest is fetched by offset.
        self.records = RecordCache(session, topics.data)
        #: Claims of this view waiting for their verdict -> their receipt's offset, once known.
        self._awaiting: dict[str, int | None] = {}
        #: Own receipts applied at their acknowledged offset before being read back.
        self._applied_ahead: dict[int, _OwnReceipt] = {}
        self._outcomes: dict[str, ClaimOutcome] = {}
        self._reader = session.reader(extra=_READER_SETTINGS)
        self._reader.assign({topics.data: self.state.data_offset,
                             topics.receipts: self.state.receipts_offset})
        #: True while the receipts topic is not fetched (see start_claim).
        self._receipts_paused = False
        #: Whether this view has only received so far: then uncontended claims pause receipts.
        self._receive_only = True
        #: Whether both topics were read to their end once (see load()).
        self._loaded = False
        #: Receipts-topic records that are not valid receipts, skipped by every process alike.
        self.malformed_receipts = 0
        #: time.monotonic() of this view's last claim that lost an offset (see pick_head).
        self._lost_at: float | None = None
        #: time.monotonic() of this view's last claim whose verdict had to wait for other
        #: receipts before its own (see start_claim).
        self._interleaved_at: float | None = None
        # Receipts are single, latency-critical records: no batching delay. acks=all makes an
        # acknowledged receipt durable. Idempotence keeps a retried receipt from being written
        # twice: a request that timed out or met a leader change may have been appended before
        # it was sent again, and a second copy of a claim could take another message (a
        # first-of receipt) or one released since (docs/design.md, "A receipt is written once").
        self._producer = session.producer(Delivery.RECOVERABLE, extra={"linger.ms": 0})

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
        applied = self._apply(self._reader.poll(timeout))
        self._snapshot_if_due(SNAPSHOT_EVERY)
        return applied

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
        for record in records:
            topic = record.topic
            data = topic == self.topics.data
            expected = self.state.data_offset if data else self.state.receipts_offset
            if record.offset > expected and self._reopen_after_gap(topic, expected):
                break  # opened again from a snapshot: the rest is read again from there
            if data:
                self._add_data(record)
            else:
                self._add_receipt(record)
        return len(records)

    def _reopen_after_gap(self, topic: str, expected: int) -> bool:
        """Handle a record that follows a gap in ``topic``'s offsets from ``expected`` on.

        Apache Kafka never shows a read_committed reader a record before an earlier one: below
        the last stable offset, the holes in an uncompacted log are the markers that end
        transactions and the records of aborted transactions, and they never fill. Such a gap
        is skipped. Offsets below the topic's log start (from the fetch response that brought
        the record) were deleted: a data gap there is skipped too, but receipts this view had
        not read were deleted by retention while it lagged behind, and skipping them could let
        two receivers win one message, so the view opens again from the newest snapshot (see
        _reopen).

        Returns:
            bool: True when the view opened again (drop the rest of the batch: it is read
            again from the snapshot's offsets).

        Raises:
            BrokerError: receipts this view had not read were deleted and it cannot open again
                (see _reopen).
        """
        if topic != self.topics.receipts:
            return False
        log_start = self._reader.log_start(topic)
        if expected >= log_start:
            return False
        self._reopen(log_start)
        return True

    def catch_up(self, timeout: float = CATCH_UP_TIMEOUT, *, for_good: bool = True) -> None:
        """Read both topics up to what the broker holds now (count, purge, lookups need this).

        Args:
            timeout (float): seconds.
            for_good (bool): fetch the receipts continuously from now on (peeks, cursors,
                lookups and purges must show other receivers' removals each time). False for a
                one-off read such as a count: a receive-only view stays receive-only, so a
                receiver that counts now and then does not fetch every other receiver's
                receipts for good.

        Raises:
            BrokerUnavailable: not caught up within ``timeout`` seconds.
        """
        if for_good:
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
        self._snapshot_if_due(SNAPSHOT_EVERY)

    def record(self, entry: IndexEntry) -> KafkaRecord:
        """The record of a pending entry: from the cache, else fetched by offset.

        Raises:
            MessageAlreadyReceived: the entry is no longer pending (a receipt applied since it
                was picked removed it).
            MessageNotFound: the record is no longer in the data topic (deleted).
        """
        if not self.is_pending(entry):
            raise MessageAlreadyReceived(
                f"message with lookup id {entry.offset} was removed from {self.topics.data!r}",
                queue=self.topics.data)
        return self.records.get(entry.offset, self._in_queue, self.state.data_offset)

    def is_pending(self, entry: IndexEntry) -> bool:
        """Whether ``entry`` still waits in the queue (no receipt removed it since it was picked)."""
        return self.state.is_pending(entry.offset)

    def held_record(self, offset: int) -> KafkaRecord:
        """The record of an offset a lock holds (to dead-letter or move it).

        Raises:
            MessageAlreadyReceived: no lock holds ``offset`` now, as far as this view has read.
            MessageNotFound: the record is no longer in the data topic (deleted).
        """
        status = self.state.status(offset)
        if status.state is not OffsetState.LOCKED or status.entry is None:
            raise MessageAlreadyReceived(
                f"message with lookup id {offset} is not locked in {self.topics.data!r}",
                queue=self.topics.data)
        return self.records.get(offset, self._in_queue, self.state.data_offset)

    def fetch(self, offset: int) -> KafkaRecord:
        """Read one data record by offset, even one already removed (recovery redoes claims).

        Raises:
            MessageNotFound: no record at ``offset`` (deleted by retention, or never written).
        """
        return self.records.fetch(offset)

    def _in_queue(self, offset: int) -> bool:
        """Whether the record at ``offset`` may still be handed out: pending or held."""
        return self.state.in_queue(offset)

    def _add_data(self, record: KafkaRecord) -> None:
        entry = IndexEntry.from_record(record.offset, len(record.value or b""), record.headers)
        self.state.add(entry)
        self._since_snapshot += 1
        if self._in_queue(record.offset):
            self.records.offer(record)

    def _add_receipt(self, record: KafkaRecord) -> None:
        self._retention.saw_receipt(record.offset, record.timestamp_ms)
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

    def _skip_malformed(self, record: KafkaRecord, error: EnvelopeError) -> None:
        """Skip a receipts record that is not a receipt (written by something else than kmq).

        Every process skips it alike, so arbitration stays consistent; a receive must never
        wedge on it. Logged once per view, counted in :attr:`malformed_receipts` (``kmq queue
        show``)."""
        self.malformed_receipts += 1
        self._since_snapshot += 1
        self.state.advance_receipts_to(record.offset + 1)
        log.warning("skipped a malformed record in %s [%d] at offset %d (%s); every kmq process "
                    "skips it", record.topic, record.partition, record.offset, error.message)

    def _apply_receipt(self, receipt: Receipt, receipt_offset: int) -> None:
        outcome = self.state.apply(receipt, receipt_offset)
        # A receipt counts once per message it names: one receive_many receipt changes as
        # much state as a hundred single receives.
        self._since_snapshot += max(1, len(receipt.offsets))
        for offset in outcome.won:
            # Locks and settle receipts may keep a record in the queue (held, or pending again).
            if not self._in_queue(offset):
                self.records.discard(offset)
        if receipt.purge_below is not None:
            # A purge removes a range rather than naming offsets: free the records it removed.
            self.records.retain(self._in_queue)
        # Keep only the verdicts this view is waiting for: other processes' receipts flow
        # through here too, and storing theirs would grow without bound. The first copy of a
        # receipt decides its claim: a copy a producer retry wrote again comes later and loses
        # what the first won, and taking its verdict would drop a message the claim removed.
        if receipt.claim_id in self._awaiting and receipt.claim_id not in self._outcomes:
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
        view applied): a receiver alone on its queue then reads no receipts at all. A claim that
        finds other receipts before its own fetches and reads them, and the view keeps fetching
        them for :data:`CONTENTION_MEMORY` seconds after such a claim: librdkafka fetches a
        resumed partition only once the fetch in flight returns, so pausing and resuming at
        every claim would add up to a whole fetch wait to each contended verdict. The first
        peek, cursor move, lookup, count or purge resumes fetching for good. While the view
        knows of a lock that holds messages it does not pause: a RELEASE puts messages back,
        and a paused view would not see it before its next contended claim (a receiver waiting
        on a locked message would wait for the lease). A view learns of other processes' locks
        only with receipts fetched, so it is fetching then; its own locks need no fetching (it
        applies its own settle receipts).

        ``producer`` appends with another producer than the view's own: a transactional one
        inside a Kafka transaction (:mod:`facade.queues.transaction`), whose commit must come before
        :meth:`settle`. ``claimant`` replaces the view's own (a transactional receive names its
        sender's ``transactional.id`` there).

        Raises:
            BrokerError: the producer refused the receipt (nothing was appended).
            QueueNotFound: the view's guard says the queue was deleted (nothing was appended).
        """
        if self._guard is not None:
            self._guard()
        receipt = new_claim(action, offsets, claimant or self.claimant, **fields)
        self._awaiting[receipt.claim_id] = None
        if self._receive_only and not self.state.has_locks and not self._interleaved:
            self._pause_receipts()
        value = encode_receipt(receipt)
        try:
            record = produce_async(producer or self._producer, self.topics.receipts, value,
                                   operation="append receipt")
        except BaseException:
            del self._awaiting[receipt.claim_id]
            raise
        return PendingClaim(receipt, value, record)

    def settle(self, pending: PendingClaim) -> ClaimOutcome:
        """Wait for the verdict of a claim begun by :meth:`start_claim`.

        The verdict is known once every receipt before the claim's own is applied: the first
        receipt naming an offset wins, for every reader of the log. When this raises
        BrokerUnavailable the receipt may still be in the log: call ``settle`` again later for
        the verdict (the claim stays awaited until then).

        Raises:
            BrokerUnavailable: the receipt was not acknowledged, or not read back, in time, or
                reading back failed otherwise (the message names that error).
            BrokerError: the broker refused the receipt (nothing was appended).
        """
        claim_id = pending.receipt.claim_id
        try:
            offset = pending.record.wait(CLAIM_TIMEOUT)
        except BrokerUnavailable:
            raise
        except BrokerError as exc:
            if exc.kafka_code not in _OUTCOME_UNKNOWN:
                self._awaiting.pop(claim_id, None)  # refused: the receipt is not in the log
                raise
            return self._verdict_from_log(claim_id, exc)
        except BaseException:
            self._awaiting.pop(claim_id, None)
            raise
        self._awaiting[claim_id] = offset
        deadline = time.monotonic() + CLAIM_TIMEOUT
        while claim_id not in self._outcomes:
            if self.state.receipts_offset == offset:
                # Every receipt before ours is applied, and ours is at ``offset``: the verdict
                # is decided now, exactly as every reader of the log will decide it, without
                # waiting for our own receipt to come back (one round trip less).
                self._applied_ahead[offset] = _OwnReceipt(claim_id, pending.value)
                self._retention.saw_receipt(offset, int(time.time() * 1000))  # acknowledged now
                self._apply_receipt(pending.receipt, offset)
                break
            self._interleaved_at = time.monotonic()
            if self._interleaved_at > deadline:
                raise BrokerUnavailable(
                    f"receipt {claim_id} for {self.topics.data!r} was not read back "
                    f"within {CLAIM_TIMEOUT:g} s", hint="check that the Kafka broker is running")
            # Contended: read the receipts before ours (fetching them again if paused).
            try:
                self._resume_receipts()
                self._apply(self._reader.poll(0.05))
            except BrokerUnavailable:
                raise
            except MessageQueueError as exc:
                # Ours is in the log and may have won: the caller must keep the claim and ask
                # again, as for a verdict not read in time, or the message it won is lost.
                raise BrokerUnavailable(
                    f"receipt {claim_id} for {self.topics.data!r} is in the log but its verdict "
                    f"could not be read: {exc.message}", hint=exc.hint) from exc
        self._awaiting.pop(claim_id, None)
        outcome = self._outcomes.pop(claim_id)
        if outcome.lost:
            self._lost_at = time.monotonic()
        return outcome

    def _verdict_from_log(self, claim_id: str, error: BrokerError) -> ClaimOutcome:
        """The verdict of a claim whose receipt the producer gave up on without knowing
        whether the broker appended it (librdkafka's message timeout, ``message.timeout.ms``):
        read the receipts to their end and look for it. Taking it as refused would lose what
        it won if it was appended after all: every reader would apply it, and no one would
        hand the messages out.

        Raises:
            BrokerUnavailable: the receipts could not be read to their end (the claim stays
                awaited: call :meth:`settle` again).
            BrokerError: the receipt is not in the log: it removed nothing.
        """
        self._read_to_end(CLAIM_TIMEOUT)
        outcome = self._outcomes.pop(claim_id, None)
        self._awaiting.pop(claim_id, None)
        if outcome is None:
            raise BrokerError(f"receipt {claim_id} for {self.topics.data!r} timed out in the "
                              f"producer and is not in the log, so it removed nothing "
                              f"({error.message})", kafka_code=error.kafka_code, hint=error.hint)
        if outcome.lost:
            self._lost_at = time.monotonic()
        return outcome

    @property
    def _interleaved(self) -> bool:
        """Whether a claim of this view found other receipts before its own within the last
        :data:`CONTENTION_MEMORY` seconds."""
        return self._interleaved_at is not None \
            and time.monotonic() - self._interleaved_at < CONTENTION_MEMORY

    @property
    def contended(self) -> bool:
        """bool: whether a claim of this view lost an offset within the last
        :data:`CONTENTION_MEMORY` seconds (another receiver took it first)."""
        return self._lost_at is not None \
            and time.monotonic() - self._lost_at < CONTENTION_MEMORY

    def pick_head(self, now_ms: int, *, spread: bool = False) -> IndexEntry | None:
        """The entry a by-head receive (``receive()``, ``receive_many``, prefetch) claims next.

        The head in MSMQ order (priority, then arrival) unless ``spread`` (the handle was
        opened with ``spread_picks=True``) and this view is contended. Then, within
        :data:`CONTENTION_MEMORY` seconds of one of its claims losing an offset, a random one
        of the first :data:`CONTENTION_SPREAD` candidates of the highest pending priority: the
        competing receivers then mostly claim different messages instead of all claiming the
        head, of which one wins and the others read back and try again (``docs/design.md``,
        "Contended receives"). Safety does not depend on the pick: the first receipt naming an
        offset wins, whatever each receiver claimed.

        Args:
            now_ms (int): the current time, epoch ms.
            spread (bool): whether the handle trades per-receiver order for throughput
                under contention (``MessageQueue(spread_picks=True)``).

        Returns:
            IndexEntry | None: the entry to claim; None when the queue has no candidate.
        """
        if not (spread and self.contended):
            return self.state.peek_first(now_ms)
        head = self.state.head_candidates(now_ms, CONTENTION_SPREAD)
        # Not a secret: any spread works for safety, random just keeps receivers apart.
        return random.choice(head) if head else None  # noqa: S311

    def first_candidates(self, first: IndexEntry) -> list[IndexEntry]:
        """The entries a receive of the head names in one claim: ``first`` alone while this
        view is uncontended (a receiver alone on its queue gains nothing from more, and each
        costs a record lookup), else ``first`` and the candidates after it in receive order, up
        to :data:`FIRST_OF`, for a RECEIVE_FIRST or LOCK_FIRST receipt.

        Args:
            first (IndexEntry): the picked entry (the head, or a spread pick).

        Returns:
            list[IndexEntry]: ``first`` first, never empty.
        """
        if not self.contended:
            return [first]
        now_ms = int(time.time() * 1000)
        return list(islice(self.state.candidates(now_ms, start=first), FIRST_OF)) or [first]

    def forget(self, pending: PendingClaim) -> None:
        """Stop waiting for the verdict of a claim begun by :meth:`start_claim` (instead of
        :meth:`settle`), e.g. a lock whose lease will settle it if it won."""
        self._awaiting.pop(pending.receipt.claim_id, None)
        self._outcomes.pop(pending.receipt.claim_id, None)

    def wake(self) -> None:
        """Fetch the queue's topics again if the view's reader rested while unused (see
        :class:`~facade.kafka.librdkafka.TopicReader`).

        Raises:
            QueueNotFound: the queue's topics were deleted meanwhile.
        """
        self._reader.wake()

    def close(self) -> None:
        """Write a snapshot if enough was applied since the last one, close the readers and
        flush the producer."""
        try:
            self._snapshot_if_due(SNAPSHOT_ON_CLOSE)
        except MessageQueueError as exc:  # the queue is whole without it; say so and go on
            log.warning("no snapshot of %s written on close: %s", self.topics.data, exc)
        self._producer.flush(5.0)
        self._reader.close()
        self.records.close()

    # -- snapshots -----------------------------------------------------------------------------

    def _open_state(self, covering_at_most: int | None = None) -> QueueState:
        """The state from the valid snapshot of this queue that covers the most, else an
        empty state. Invalid and stale snapshots are skipped (see _skip_snapshot). Without a
        snapshot the logs are read from offset 0; a log start above it shows up as a gap below
        the log start (see _reopen_after_gap), so a plain open costs no extra round trip.

        Args:
            covering_at_most (int | None): use only snapshots covering receipts below this
                offset or less (see _reopen); None: any.

        Raises:
            BrokerError: receipts below the receipts topic's log start are gone and no valid
                snapshot covers them (the verdicts cannot be rebuilt).
        """
        if not self._session.topic_exists(self.snapshot_topic):
            return QueueState()
        self._snapshot_topic_ready = True
        reader = self._session.reader(extra=_READER_SETTINGS)  # one for both questions
        try:
            candidates = snapshot_candidates(reader, self.snapshot_topic,
                                             {self.topics.data}).get(self.topics.data)
            if not candidates:
                return QueueState()
            bounds = reader.watermarks((self.topics.data, self.topics.receipts), CLAIM_TIMEOUT)
        finally:
            reader.close()
        valid = valid_snapshots(candidates, self.topics, bounds, self._skip_snapshot,
                                covering_at_most)
        for snapshot in valid:
            self._retention.saw_snapshot(snapshot.state.receipts_offset)
        best = best_snapshot(valid)
        if best is None:
            return self._state_at_log_start(bounds)
        return QueueState.from_snapshot(best.state)

    def _reopen(self, receipts_start: int) -> None:
        """Open the state again from a snapshot: receipts this view had not read yet were
        deleted by retention (it lagged more than ``RECEIPTS_RETENTION_LAG`` behind, e.g. an
        idle receive-only handle that does not fetch other receivers' receipts).

        Every process reaches the same verdicts from a snapshot plus the log after it, so the
        new state is as right as the old one; locks this handle held are judged by the log
        like any lock (one settled meanwhile is lost, as after a lease expiry). A claim of this
        view still waiting for its verdict is decided by reading its receipt again, so the
        snapshot must not cover it: the newest one below the lowest such receipt is used.
        Own receipts applied ahead are applied again as they are read.

        Raises:
            BrokerError: a claim's receipt offset is not known yet, or no valid snapshot
                covers the deleted receipts without covering such a claim.
        """
        offsets = list(self._awaiting.values())
        if None in offsets:
            raise BrokerError(
                f"receipts below offset {receipts_start} of {self.topics.receipts!r} were "
                "deleted by retention before this handle read them, while one of its claims "
                "was not acknowledged yet: its outcome cannot be decided",
                hint="close the queue handle and open it again (docs/design.md, \"Retention\")")
        log.warning("receipts of %s below offset %d were deleted while this view lagged "
                    "behind: opened again from a snapshot", self.topics.receipts,
                    receipts_start)
        state = self._open_state(covering_at_most=min(
            (o for o in offsets if o is not None), default=None))
        if state.receipts_offset < receipts_start:
            raise self._receipts_missing(receipts_start)
        self.state = state
        self._applied_ahead.clear()
        self.records.retain(self._in_queue)
        self._reader.seek(self.topics.data, self.state.data_offset)
        self._reader.seek(self.topics.receipts, self.state.receipts_offset)
        self._since_snapshot = 0

    def _state_at_log_start(self, bounds: dict[str, tuple[int, int]]) -> QueueState:
        """An empty state for reading the logs from their start. Data records below the data
        topic's log start were deleted because every process had removed them (retention:
        below the retention floor), so they count as removed. kmq deletes receipts only below
        snapshots that cover them (:mod:`facade.state.retention`); if some are gone with no valid
        snapshot left (a topic with time retention), the state cannot be rebuilt."""
        receipts_start = bounds[self.topics.receipts][0]
        if receipts_start > 0:
            raise self._receipts_missing(receipts_start)
        return QueueState(data_start=bounds[self.topics.data][0])

    def _receipts_missing(self, receipts_start: int) -> BrokerError:
        return BrokerError(
            f"receipts below offset {receipts_start} of {self.topics.receipts!r} were deleted "
            f"and no snapshot of {self.topics.data!r} covers them: which messages they removed "
            "is lost", hint="set retention.ms=-1 on the receipts topic (`kmq doctor` says "
            "how); messages removed by the lost receipts would come back")

    def _skip_snapshot(self, record: KafkaRecord, error: Exception) -> None:
        """Skip a snapshot record that cannot be used; the view falls back to an older one or
        the logs, so nothing wedges. Logged once per view and record, counted in
        :attr:`malformed_snapshots`."""
        self.malformed_snapshots += 1
        text = error.message if isinstance(error, EnvelopeError) else str(error)
        log.warning("skipped the snapshot of %s in %s [%d] at offset %d (%s); the queue is "
                    "read from an older snapshot or the log", self.topics.data, record.topic,
                    record.partition, record.offset, text)

    def _snapshot_if_due(self, threshold: int) -> None:
        """Write a snapshot once ``threshold`` records were applied since the last one, if the
        state can be captured now (no locks held, no claim ahead of the data, no incomplete
        system claim) and is small enough; otherwise try again later."""
        if self._since_snapshot < threshold or not self.state.exportable \
                or self.snapshots_refused is not None:
            return
        if self.state.pending_count() + len(self.state.poisoned()) > SNAPSHOT_MAX_ENTRIES:
            return  # a long queue: opened from the log; written once it is short enough
        snapshot = self.state.export()
        if snapshot is None:
            return
        value = encode_snapshot(QueueSnapshotRecord(self.topics, snapshot, self.claimant))
        self._since_snapshot = 0
        if len(value) > SNAPSHOT_MAX_BYTES:
            log.info("snapshot of %s is %d bytes, over %d: not written", self.topics.data,
                     len(value), SNAPSHOT_MAX_BYTES)
            return
        covered = snapshot.receipts_offset
        try:
            if not self._snapshot_topic_ready:
                self._session.create_topics([self.snapshot_topic], exist_ok=True)
                self._snapshot_topic_ready = True
            # librdkafka refuses at once a record for a topic whose last write was refused.
            with map_kafka_errors("write a queue snapshot", self.snapshot_topic):
                self._producer.produce(
                    self.snapshot_topic, value, key=self._retention.key(covered),
                    on_delivery=lambda error, message: self._snapshot_delivered(error, covered))
        except AccessDenied as exc:
            self._refuse_snapshots(exc.message)
            return
        self._delete_removed()
        self._delete_receipts()

    def _refuse_snapshots(self, why: str) -> None:
        """The broker refuses this principal's snapshots (Kafka ACLs: only the queue manager's
        owner may write them): log it once and write none from now on. The queue is whole
        without them; it opens from an older snapshot or the log."""
        if self.snapshots_refused is not None:
            return
        self.snapshots_refused = why
        log.warning("snapshots of %s are not written to %s: the Kafka cluster refuses this "
                    "principal (%s); the queue is whole without them. On a cluster with Kafka "
                    "ACLs the queue manager's owner writes them (kmq qm run, kmq acl sync)",
                    self.topics.data, self.snapshot_topic, why)

    def _delete_removed(self) -> None:
        """Retention: delete the data records below the retention floor, where every record
        is removed and no process needs it any more (``QueueState.retention_floor``: below the
        floor, outside the dedupe window, not named by an incomplete system claim), on
        brokers that support DeleteRecords (``KafkaSession.delete_records_support``). A
        failure is logged and retried with the next snapshot; the queue is whole without it."""
        floor = self.state.retention_floor()
        if floor <= self._deleted_below:
            return
        try:
            supported, _why = self._session.delete_records_support()
            if supported:
                floor = self._session.delete_records(self.topics.data, floor)
        except MessageQueueError as exc:
            log.warning("records of %s below offset %d not deleted: %s", self.topics.data,
                        floor, exc)
            return
        self._deleted_below = floor

    def _delete_receipts(self) -> None:
        """Retention of receipts: delete the receipts that acknowledged snapshots of two
        buckets cover and that are older than ``RECEIPTS_RETENTION_LAG``
        (:class:`~facade.state.retention.ReceiptsRetention`), then tombstone the snapshot keys of
        the buckets below, on brokers that support DeleteRecords. A failure is logged and
        retried with the next snapshot; the queue is whole without it."""
        floor = self._retention.floor(time.time())
        if floor <= self._retention.deleted_below:
            return
        try:
            supported, _why = self._session.delete_records_support()
            if not supported:
                return
            self._retention.deleted(self._session.delete_records(self.topics.receipts, floor))
        except MessageQueueError as exc:
            log.warning("receipts of %s below offset %d not deleted: %s", self.topics.data,
                        floor, exc)
            return
        for key in self._retention.doomed_keys():
            try:
                with map_kafka_errors("delete a stale queue snapshot", self.snapshot_topic):
                    self._producer.produce(self.snapshot_topic, None, key=key,
                                           on_delivery=self._tombstone_delivered)
            except AccessDenied as exc:
                self._refuse_snapshots(exc.message)
                return

    def _snapshot_delivered(self, error: object, covered: int) -> None:
        if error is not None and refusal(error) is Refusal.ACCESS_DENIED:
            self._refuse_snapshots(str(error))
            return
        if error is not None:  # the queue is whole without it; a later snapshot replaces it
            log.warning("snapshot of %s not written to %s: %s", self.topics.data,
                        self.snapshot_topic, error)
            return
        self._retention.saw_snapshot(covered)  # acknowledged (acks=all): it bounds deletion

    def _tombstone_delivered(self, error: object, message: object) -> None:
        if error is not None:  # the stale snapshot stays in the topic; readers skip it
            log.warning("stale snapshot of %s not deleted from %s: %s", self.topics.data,
                        self.snapshot_topic, error)


def _coverage(snapshot: QueueSnapshotRecord) -> tuple[int, int]:
    """How far a snapshot reaches: the later of two snapshots of a queue covers more."""
    return (snapshot.state.receipts_offset, snapshot.state.data_offset)


def snapshot_owner(key: bytes | None) -> str | None:
    """The data topic a snapshot-topic key belongs to (``<data topic>@<bucket>``, or the plain
    ``<data topic>`` of snapshots written before buckets), or None for a key no queue has."""
    if key is None:
        return None
    try:
        data_topic = key.partition(b"@")[0].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data_topic if snapshot_bucket(key, data_topic) is not None else None


def snapshot_candidates(reader: TopicReader, topic: str, data_topics: Collection[str],
                        timeout: float = CATCH_UP_TIMEOUT
                        ) -> dict[str, dict[bytes, list[KafkaRecord]]]:
    """Read a queue manager's snapshot topic once, for one queue or many: per data topic of
    ``data_topics``, the newest few records (:data:`_SNAPSHOT_CANDIDATES`) of each of its
    snapshot keys (its buckets, see :mod:`facade.state.retention`, and the plain key of snapshots
    written before them). A tombstone drops its key's records.

    Args:
        reader (TopicReader): a reader of this session; its assignment is replaced.
        topic (str): the snapshot topic (:func:`facade.model.topics.snapshot_topic`).
        data_topics (Collection[str]): the queues wanted, by data topic.
        timeout (float): seconds to read the topic to its end.

    Returns:
        dict[str, dict[bytes, list[KafkaRecord]]]: data topic -> key -> records, oldest first;
        a queue without a snapshot record is left out.

    Raises:
        BrokerUnavailable: the topic was not read to its end within ``timeout`` seconds.
    """
    found: dict[str, dict[bytes, list[KafkaRecord]]] = {}
    reader.assign({topic: 0})
    for batch in reader.read_to_end((topic,), timeout):
        for record in batch:
            owner = snapshot_owner(record.key)
            if owner is None or owner not in data_topics:
                continue
            by_key = found.setdefault(owner, {})
            key = cast(bytes, record.key)
            if record.value is None:
                by_key.pop(key, None)
                continue
            records = by_key.setdefault(key, [])
            records.append(record)
            del records[:-_SNAPSHOT_CANDIDATES]
    return {owner: by_key for owner, by_key in found.items() if by_key}


def valid_snapshots(candidates: Mapping[bytes, list[KafkaRecord]], topics: QueueTopics,
                    bounds: Mapping[str, tuple[int, int]],
                    skip: Callable[[KafkaRecord, Exception], None],
                    covering_at_most: int | None = None) -> list[QueueSnapshotRecord]:
    """Per snapshot key of one queue, the newest record that is a valid snapshot covering
    offsets its topics hold (and receipts below ``covering_at_most`` at most); ``skip`` is
    called with each record passed over and why (it does not decode, describes another queue,
    is stale (see :func:`check_covered`) or is inconsistent (see
    :func:`facade.state.queuestate.check_snapshot`), so an older record of its key is tried).

    Args:
        candidates (Mapping[bytes, list[KafkaRecord]]): the queue's records by key, oldest
            first (from :func:`snapshot_candidates`).
        topics (QueueTopics): the queue.
        bounds (Mapping[str, tuple[int, int]]): ``(log start, end offset)`` of its data and
            receipts topics.
        skip (Callable[[KafkaRecord, Exception], None]): told of each record passed over.
        covering_at_most (int | None): a receipts offset no snapshot used may pass; None: any.

    Returns:
        list[QueueSnapshotRecord]: at most one per key.
    """
    valid = []
    for records in candidates.values():
        for record in reversed(records):
            try:
                snapshot = decode_snapshot(record.value, topic=record.topic,
                                           partition=record.partition, offset=record.offset)
                check_covered(snapshot, topics, bounds)
                check_snapshot(snapshot.state)
            except (EnvelopeError, ValueError) as exc:
                skip(record, exc)
                continue
            if covering_at_most is None or snapshot.state.receipts_offset <= covering_at_most:
                valid.append(snapshot)
                break
    return valid


def best_snapshot(valid: Iterable[QueueSnapshotRecord]) -> QueueSnapshotRecord | None:
    """The snapshot that covers the most (the first of equals), or None."""
    best: QueueSnapshotRecord | None = None
    for snapshot in valid:
        if best is None or _coverage(snapshot) > _coverage(best):
            best = snapshot
    return best


def check_covered(snapshot: QueueSnapshotRecord, topics: QueueTopics,
                  bounds: Mapping[str, tuple[int, int]]) -> None:
    """Raise ValueError unless ``snapshot`` describes the queue of ``topics`` at offsets its
    topics hold: not past their ends (a topic deleted and created again), not below a log
    start that passed what it covers (the records in between are gone).

    Args:
        snapshot (QueueSnapshotRecord): a decoded snapshot.
        topics (QueueTopics): the queue it is keyed under.
        bounds (Mapping[str, tuple[int, int]]): ``(log start, end offset)`` of both topics.
    """
    if snapshot.topics != topics:
        raise ValueError(f"it describes {snapshot.topics.data!r}, keyed as {topics.data!r}")
    state = snapshot.state
    for topic, covered in ((topics.data, state.data_offset),
                           (topics.receipts, state.receipts_offset)):
        low, high = bounds[topic]
        if covered > high:
            raise ValueError(f"stale: it covers {topic!r} up to offset {covered}, which "
                             f"ends at {high} (the topic was created again)")
        if covered < low:
            raise ValueError(f"stale: it covers {topic!r} up to offset {covered}, below its "
                             f"log start {low}")
