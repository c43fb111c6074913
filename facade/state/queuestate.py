r"""Queue state: the in-memory view of one queue that every process builds the same way.

A kmq queue is a one-partition data topic plus a one-partition receipts topic
(``docs/design.md``). A :class:`QueueState` is fed both logs, each in offset order, by the
queue manager (this module does no Kafka I/O):

* :meth:`QueueState.add` takes one :class:`IndexEntry` per data record, built from the record's
  headers (:meth:`IndexEntry.from_record`) without decoding Avro;
* :meth:`QueueState.apply` takes one :class:`~facade.model.receipts.Receipt` per receipts record and
  returns the verdict: **the first receipt that names a pending offset takes it**, later
  receipts naming it lose it; a PURGE removes every pending offset below ``purge_below``.

A LOCK or PREFETCH takes offsets without removing them: it *holds* them (peek-lock receive,
MSMQ's receive inside a transaction not committed yet). A held offset is not pending for
receivers and a PURGE leaves it alone. It stays held until a receipt that names the lock in
``completes`` settles it, the first such receipt winning it: COMPLETED removes it for good,
RELEASE makes it pending again in its place in receive order with its abort count
(PROPID_M_ABORT_COUNT) raised by one (not for PREFETCH, whose released messages were never
handed out), a system action (EXPIRE, MOVE, REJECT, POISON) takes it over. A settle receipt
for a lock that no longer holds the offset (already settled, a duplicate from a producer retry,
another lock's) changes nothing and loses. Abort counts live in the state, derived from the log
alone, while the message is pending or held.

Verdicts depend only on the receipts log, never on how far the data log has been read, so every
process reaches the same verdicts in whatever order it interleaves its reads of the two logs.
Duplicates are decided from the data log alone: a record whose dedupe key (message id + origin)
appeared at most :data:`DEDUPE_WINDOW` offsets earlier is excluded, in every process alike.

The view answers MSMQ's receive order (priority 7 first, then arrival order), lookups by
message id, correlation id and lookup id (the offset), cursor steps, TTBR expiry, timed dequeue
(not-before) and the poison records to dead-letter.

Memory: a pending message costs one compact :class:`IndexEntry` (64 bytes; its message id an
int of 32, its offset an int of 32), a slot in the chunked array of pending entries by offset
(about 9), its dedupe key's slot in the dedupe dict (which also answers lookups by message id),
its slot in its priority lane (9) and its state code (1): about 200 bytes in all
(``benchmarks/state_bench.py``, docs/performance.md). A removed one costs one byte (its state
code) until the floor passes it, plus its dedupe key while inside the dedupe window. A held
offset keeps its entry (so a release needs no re-fetch) until its lock is settled; the claim
ids of the last :data:`LOCK_MEMORY` locks and first-of receipts are kept to ignore their
duplicates.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from operator import attrgetter, itemgetter
from typing import Any, TypeVar

from facade.model.avro import HEADER_SIZE
from facade.model.envelope import read_headers
from facade.model.receipts import FIRST_OF_ACTIONS, Receipt, ReceiptAction

__all__ = [
    "DEDUPE_WINDOW",
    "LOCK_MEMORY",
    "ClaimOutcome",
    "HeldLock",
    "IncompleteClaim",
    "IndexEntry",
    "OffsetState",
    "OffsetStatus",
    "QueueState",
    "StateSnapshot",
]

#: Dedupe window, in data offsets: a record is a duplicate when a record with the same dedupe
#: key is at most this many offsets earlier. Part of the protocol: every process must use the
#: same value, or they disagree about duplicates. Worst case about 150 bytes per key held.
DEDUPE_WINDOW = 1 << 18
#: How many of the latest LOCK/PREFETCH and first-of (RECEIVE_FIRST, LOCK_FIRST) claim ids a
#: state remembers: such a receipt whose claim id is among them is a duplicate (a producer
#: retry) and takes nothing, even after the first copy's lock was released or while offsets it
#: names are still pending. Part of the protocol, like :data:`DEDUPE_WINDOW`.
LOCK_MEMORY = 1 << 14

_PRIORITIES = 8  # MSMQ priorities 0 (lowest) to 7 (highest)
_DEFAULT_PRIORITY = 3  # MSMQ_DEFAULT_PRIORITY, used when a record has no kmq.priority header

# Per-offset state codes, one byte each in QueueState._codes.
_GAP = 0  # no record at this offset (e.g. a transaction marker)
_PENDING = 1  # a pending message or poison record (it is in QueueState._entries)
_DUPLICATE = 2  # a duplicate record, never pending
_LOCKED = 3  # held by a LOCK or PREFETCH (see QueueState._held)
_UNREAD = 4  # in a hold: the data record is not read yet
_REMOVED = 16  # + action value: removed by a receipt with that action
_REMOVED_OTHER = 255  # removed by an action number too large to store in one byte
# bytes.translate table for a purge: anything not yet removed nor held becomes "removed by PURGE".
_PURGE_CODE = _REMOVED + ReceiptAction.PURGE
_PURGE_TABLE = bytes(_PURGE_CODE if c < _REMOVED and c != _LOCKED else c for c in range(256))

# Codes below the floor are dropped once this many settled offsets have piled up (bytes).
_TRIM_MIN = 1 << 16

_ID_TEXT = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\\(?:0|[1-9][0-9]{0,9})",
    re.ASCII | re.IGNORECASE,
)
_UINT32_MAX = 2**32 - 1
_offset_of = attrgetter("offset")
# (size << 3 | priority) values seen, to share one int object per value among index entries
# (memory).
_SIZES: dict[int, int] = {}
_SIZES_KEPT = 1 << 16
# Interned message-id prefixes (``guid\``, or ``guid\`` + "@origin" suffix pairs) for _ident.
_PREFIXES: dict[tuple[str, str], int] = {}
_PREFIX_TEXT: list[tuple[str, str]] = []
_PREFIXES_KEPT = 1 << 20
_SEQ_BITS = 32
_SEQ_MASK = (1 << _SEQ_BITS) - 1
_ID_PARTS = re.compile(r"(.+\\)(0|[1-9][0-9]{0,9})(@.*)?", re.DOTALL)


def _ident(text: str, *, add: bool = True) -> int | str:
    r"""A message id or dedupe key (``guid\seq`` or ``guid\seq@origin``) as one int: the index
    of its interned prefix and suffix, shifted, plus the sequence number. 32 bytes instead of
    about 96 for the text, and the same object serves as the key of every index. Text of
    another shape (tests, poison ids "") stays text. ``add=False`` only looks up (None-safe
    for lookups of ids no record had: returns the text)."""
    match = _ID_PARTS.fullmatch(text)
    if match is None or int(match.group(2)) > _SEQ_MASK:
        return text
    prefix, suffix = match.group(1), match.group(3) or ""
    index = _intern(prefix, suffix) if add else _PREFIXES.get((prefix, suffix))
    if index is None:
        return text
    return (index << _SEQ_BITS) | int(match.group(2))


def _intern(prefix: str, suffix: str) -> int | None:
    """The index of an id prefix and suffix, added if new; None once the table is full."""
    pair = (prefix, suffix)
    index = _PREFIXES.get(pair)
    if index is None and len(_PREFIX_TEXT) < _PREFIXES_KEPT:
        index = _PREFIXES[pair] = len(_PREFIX_TEXT)
        _PREFIX_TEXT.append(pair)
    return index


def _ident_text(ident: int | str) -> str:
    """The text of an :func:`_ident`."""
    if isinstance(ident, str):
        return ident
    prefix, suffix = _PREFIX_TEXT[ident >> _SEQ_BITS]
    return f"{prefix}{ident & _SEQ_MASK}{suffix}"


# --------------------------------------------------------------------------------------------
# Entries and results
# --------------------------------------------------------------------------------------------


class IndexEntry:
    r"""What the queue view knows of one data record, from its headers.

    Immutable. Kept compact, because a view holds one per message in the queue: the message id
    and dedupe key are stored as one int each (an interned ``guid\`` prefix and the sequence
    number, see :func:`_ident`), the rarely set fields in one optional tuple.

    Args and attributes:
        offset (int): the data-topic offset, which is the message's lookup id
            (PROPID_M_LOOKUPID).
        priority (int): 0 (lowest) to 7 (highest), PROPID_M_PRIORITY.
        message_id (str): ``guid\seq`` text of PROPID_M_MSGID (lowercase); "" for a poison
            record without a usable id.
        correlation_id (str | None): PROPID_M_CORRELATIONID text, if any.
        expires_ms (int | None): TTBR deadline, epoch ms; expired when ``expires_ms <= now``.
        not_before_ms (int | None): timed dequeue, epoch ms; invisible while ``now <
            not_before_ms``.
        size (int): bytes of the record value, for quotas.
        dedupe_key (str): message id, plus ``@origin`` when the record says which queue it
            comes from; "" for poison records, which are never duplicates.
        poison (bool): the headers are missing or invalid: the record must be dead-lettered
            (claimed with POISON), never handed to an application.

    Raises:
        ValueError: ``priority`` outside 0-7 or a negative ``size``.
    """

    __slots__ = ("_extra", "_id", "_sized", "offset")
    # Declared for type checkers: __slots__ alone gives mypy no attribute types.
    offset: int
    _sized: int  # size << 3 | priority, one shared int per value seen (see _SIZES)
    _id: int | str
    # (correlation_id, expires_ms, not_before_ms, dedupe ident, poison), None when all unset.
    _extra: tuple[str | None, int | None, int | None, int | str, bool] | None

    def __init__(self, offset: int, priority: int, message_id: str,
                 correlation_id: str | None, expires_ms: int | None,
                 not_before_ms: int | None, size: int, dedupe_key: str, poison: bool = False):
        ident = _ident(message_id)
        set_ = object.__setattr__
        set_(self, "offset", offset)
        if not 0 <= priority < _PRIORITIES or size < 0:
            raise ValueError(f"IndexEntry priority {priority} is not 0-7, or size {size} < 0")
        sized = size << 3 | priority
        set_(self, "_sized",
             _SIZES.setdefault(sized, sized) if len(_SIZES) < _SIZES_KEPT else sized)
        set_(self, "_id", ident)
        dedupe = ident if dedupe_key == message_id else _ident(dedupe_key)
        if correlation_id is None and expires_ms is None and not_before_ms is None \
                and dedupe is ident and not poison:
            set_(self, "_extra", None)
        else:
            set_(self, "_extra", (correlation_id, expires_ms, not_before_ms, dedupe, poison))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"IndexEntry is immutable (cannot set {name!r})")

    @property
    def priority(self) -> int:
        """int: 0 (lowest) to 7 (highest), PROPID_M_PRIORITY."""
        return self._sized & 7

    @property
    def size(self) -> int:
        """int: bytes of the record value, for quotas."""
        return self._sized >> 3

    @property
    def message_id(self) -> str:
        r"""str: ``guid\seq`` text of PROPID_M_MSGID, "" for a poison record without one."""
        return _ident_text(self._id)

    @property
    def correlation_id(self) -> str | None:
        """str | None: PROPID_M_CORRELATIONID text, if any."""
        return None if self._extra is None else self._extra[0]

    @property
    def expires_ms(self) -> int | None:
        """int | None: TTBR deadline, epoch ms."""
        return None if self._extra is None else self._extra[1]

    @property
    def not_before_ms(self) -> int | None:
        """int | None: timed dequeue, epoch ms."""
        return None if self._extra is None else self._extra[2]

    @property
    def dedupe_key(self) -> str:
        """str: message id (plus ``@origin``); "" for poison records."""
        return _ident_text(self.dedupe_ident)

    @property
    def dedupe_ident(self) -> int | str:
        """int | str: the dedupe key in the compact form the state indexes it by."""
        return self._id if self._extra is None else self._extra[3]

    @property
    def poison(self) -> bool:
        """bool: the record must be dead-lettered, never handed to an application."""
        return self._extra is not None and self._extra[4]

    def _key(self) -> tuple:
        return (self.offset, self.priority, self.size, self._id, self._extra)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexEntry):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"IndexEntry(offset={self.offset}, priority={self.priority}, "
                f"message_id={self.message_id!r}, correlation_id={self.correlation_id!r}, "
                f"expires_ms={self.expires_ms}, not_before_ms={self.not_before_ms}, "
                f"size={self.size}, dedupe_key={self.dedupe_key!r}, poison={self.poison})")

    def __reduce__(self) -> tuple:
        return (IndexEntry, (self.offset, self.priority, self.message_id, self.correlation_id,
                             self.expires_ms, self.not_before_ms, self.size, self.dedupe_key,
                             self.poison))

    @classmethod
    def from_record(
        cls,
        offset: int,
        value_size: int,
        headers: Iterable[tuple[str, bytes | None]] | None,
        *,
        origin: str | None = None,
    ) -> IndexEntry:
        r"""Index a data record from its headers (``kmq.version``, ``kmq.id``, ...).

        The record is poison when its value is shorter than the Avro single-object header
        (10 bytes, including a missing value), the ``kmq.version`` or ``kmq.id`` header is
        missing or unparsable, or ``kmq.priority`` is outside 0-7. A missing ``kmq.priority``
        means the MSMQ default, 3; a malformed ``kmq.correlation_id`` is ignored.

        Args:
            offset (int): the record's offset (>= 0).
            value_size (int): bytes of the record value; 0 when it has none.
            headers (Iterable[tuple[str, bytes | None]] | None): the record headers.
            origin (str | None): the queue this copy comes from, for queues that may hold copies
                of one message from several queues (dead-letter, journal): copies from
                different origins are not duplicates of each other.

        Returns:
            IndexEntry: the entry; ``poison`` is set instead of raising.
        """
        h = read_headers(headers)
        message_id = _canonical_id(h.id)
        priority = _DEFAULT_PRIORITY if h.priority is None else h.priority
        if (
            value_size < HEADER_SIZE
            or h.version is None
            or h.version < 1
            or message_id is None
            or not 0 <= priority < _PRIORITIES
        ):
            return cls(offset, 0, message_id or "", None, None, None, value_size, "", True)
        key = message_id if origin is None else f"{message_id}@{origin}"
        correlation_id = _canonical_id(h.correlation_id)
        return cls(
            offset,
            priority,
            message_id,
            correlation_id,
            h.expires_ms,
            h.not_before_ms,
            value_size,
            key,
        )

    @property
    def position(self) -> tuple[int, int]:
        """tuple[int, int]: the receive-order sort key ``(-priority, offset)``, for cursors."""
        return (-self.priority, self.offset)

    def visible(self, now_ms: int) -> bool:
        """Whether a receiver may get it now: not before its not-before, not expired.

        Args:
            now_ms (int): the current time, epoch ms.

        Returns:
            bool: True when ``not_before_ms <= now_ms < expires_ms`` (absent bounds pass).
        """
        extra = self._extra
        if extra is None:
            return True
        ex, nb = extra[1], extra[2]
        return (nb is None or nb <= now_ms) and (ex is None or ex > now_ms)


def _canonical_id(text: str | None) -> str | None:
    """Return the lowercase ``guid\\seq`` form, or None when ``text`` is not a message id."""
    if text is None or _ID_TEXT.fullmatch(text) is None:
        return None
    if int(text[37:]) > _UINT32_MAX:
        return None
    return text.lower()


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """The verdict of one receipt.

    Attributes:
        claim_id (str): the receipt's claim id.
        won (tuple[int, ...]): offsets this receipt removed (first to name them).
        lost (tuple[int, ...]): offsets it named that an earlier receipt had already removed
            or purged. A PURGE's range is not listed, only offsets it names explicitly. A
            RECEIVE_FIRST lists the ones before the offset it won (those after it it left
            alone).
        purged (int): PURGE: how many pending messages of this view the range removed (poison
            records excluded). Unlike ``won``/``lost`` it depends on how far this process has
            read the data log; for the purging process, which read up to ``purge_below``, it is
            the number of messages MQPurgeQueue removed.
        abort_counts (tuple[int, ...]): the abort count (PROPID_M_ABORT_COUNT: releases of a
            peek-lock so far) of each won offset, parallel to ``won``, as it is once the
            receipt is applied (a RELEASE: the raised count); empty when every count is 0.

    For a receipt that settles a lock, ``won`` lists the offsets it settled and ``lost`` those
    it named that the lock no longer holds (the lock was settled first by someone else).
    """

    claim_id: str
    won: tuple[int, ...]
    lost: tuple[int, ...]
    purged: int = 0
    abort_counts: tuple[int, ...] = ()

    def abort_count(self, offset: int) -> int:
        """The abort count of a won offset (0 when it was not won or never released).

        Args:
            offset (int): a data offset.

        Returns:
            int: the count.
        """
        if not self.abort_counts or offset not in self.won:
            return 0
        return self.abort_counts[self.won.index(offset)]


@dataclass(frozen=True, slots=True)
class IncompleteClaim:
    """A system claim (EXPIRE, MOVE, REJECT, POISON) with no COMPLETED receipt yet.

    Recovery (``kmq qm run``) redoes its outputs: the data records at ``offsets`` are still in
    the data topic, because :meth:`QueueState.retention_floor` stays below them.

    Attributes:
        receipt (Receipt): the claim (action, target, reason, time_ms, claimant...).
        offsets (tuple[int, ...]): the offsets it won, in the order it named them.
        receipt_offset (int): its offset in the receipts topic.
        abort_counts (tuple[int, ...]): their abort counts when the claim won them, parallel to
            ``offsets`` (a MOVE to ``;poison`` writes them into the copy); empty when all 0.
    """

    receipt: Receipt
    offsets: tuple[int, ...]
    receipt_offset: int
    abort_counts: tuple[int, ...] = ()

    def abort_count(self, offset: int) -> int:
        """The abort count of one of :attr:`offsets` when the claim won it (0 otherwise)."""
        if not self.abort_counts or offset not in self.offsets:
            return 0
        return self.abort_counts[self.offsets.index(offset)]


@dataclass(frozen=True, slots=True)
class HeldLock:
    """A LOCK or PREFETCH that still holds offsets (:meth:`QueueState.locks`).

    Attributes:
        receipt (Receipt): the lock receipt (claim id, action, claimant, time_ms, lease_ms).
        offsets (tuple[int, ...]): the offsets it still holds, in the order it named them.
        receipt_offset (int): its offset in the receipts topic.
    """

    receipt: Receipt
    offsets: tuple[int, ...]
    receipt_offset: int

    @property
    def claim_id(self) -> str:
        """str: the lock's claim id, which settle receipts name in ``completes``."""
        return self.receipt.claim_id

    @property
    def deadline_ms(self) -> int:
        """int: when the lease passes, epoch ms: the lock receipt's own ``time_ms`` plus
        ``lease_ms``. Anyone may settle the lock from then on (by their own clock)."""
        return self.receipt.time_ms + (self.receipt.lease_ms or 0)


class _Lock:
    """A lock that holds offsets: its receipt and the offsets it still holds (named order)."""

    __slots__ = ("offsets", "receipt", "receipt_offset")

    def __init__(self, receipt: Receipt, receipt_offset: int):
        self.receipt = receipt
        self.receipt_offset = receipt_offset
        self.offsets: dict[int, None] = {}

    def public(self) -> HeldLock:
        return HeldLock(self.receipt, tuple(self.offsets), self.receipt_offset)


class _Hold:
    """One held offset: its lock, what the offset is underneath (``code``: _PENDING with the
    ``entry``, _DUPLICATE, _GAP, or _UNREAD while its data record is not read) and its abort
    count, restored as it was when the lock is released."""

    __slots__ = ("aborts", "code", "entry", "lock")

    def __init__(self, lock: _Lock, entry: IndexEntry | None, code: int, aborts: int):
        self.lock = lock
        self.entry = entry
        self.code = code
        self.aborts = aborts


class OffsetState(Enum):
    """What is at a data offset, as :meth:`QueueState.status` reports it."""

    PENDING = "pending"  #: a message in the queue
    POISON = "poison"  #: a poison record waiting to be dead-lettered; not a message
    LOCKED = "locked"  #: held by a LOCK or PREFETCH (peek-lock): in the queue, not receivable
    REMOVED = "removed"  #: removed by a receipt (or below the floor / log start)
    DUPLICATE = "duplicate"  #: a second copy of an earlier message; never in the queue
    UNKNOWN = "unknown"  #: no record here (a gap) or not read yet (offset >= data_offset)


@dataclass(frozen=True, slots=True)
class OffsetStatus:
    """Answer of :meth:`QueueState.status`.

    The queue API maps it to MSMQ errors: REMOVED and DUPLICATE to
    MQ_ERROR_MESSAGE_ALREADY_RECEIVED, UNKNOWN and POISON to MQ_ERROR_MESSAGE_NOT_FOUND, LOCKED
    to MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION.

    Attributes:
        state (OffsetState): see :class:`OffsetState`.
        action (ReceiptAction | None): REMOVED: the winning receipt's action (for a completed
            lock, LOCK or PREFETCH); None when the offset is below the floor or the log start,
            where that is no longer kept. LOCKED: LOCK or PREFETCH.
        entry (IndexEntry | None): PENDING and POISON: the entry; LOCKED: the held message's
            or poison record's entry once its data record is read, else None.
    """

    state: OffsetState
    action: ReceiptAction | None = None
    entry: IndexEntry | None = None

    @property
    def is_pending(self) -> bool:
        """bool: True for PENDING and POISON: the record still waits for a claim."""
        return self.state is OffsetState.PENDING or self.state is OffsetState.POISON


_UNKNOWN = OffsetStatus(OffsetState.UNKNOWN)
_SETTLED = OffsetStatus(OffsetState.REMOVED)
_DUPLICATE_STATUS = OffsetStatus(OffsetState.DUPLICATE)


def _removed_code(action: ReceiptAction) -> int:
    return _REMOVED + action if action < _REMOVED_OTHER - _REMOVED else _REMOVED_OTHER


def _removed_status(code: int) -> OffsetStatus:
    action = None if code == _REMOVED_OTHER else ReceiptAction(code - _REMOVED)
    return OffsetStatus(OffsetState.REMOVED, action)


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """A :class:`QueueState` as plain data (:meth:`QueueState.export`), which
    :meth:`QueueState.from_snapshot` turns back into an equal state. ``facade.state.snapshot`` writes
    it as a ``kmq.QueueSnapshot`` record (``schemas/queue_snapshot.avsc``, where each field is
    described).

    Attributes:
        data_start (int), data_offset (int), receipts_offset (int), dedupe_window (int),
            purge_floor (int), codes_base (int): offsets, see the schema.
        codes (bytes): one state code per data offset in ``[codes_base, data_offset)``.
        entries (tuple[IndexEntry, ...]): the records in the queue, in offset order.
        abort_counts (tuple[tuple[int, int], ...]): ``(offset, count)`` pairs, offset order.
        dedupe (tuple[tuple[str, str, int, tuple[int, ...]], ...]): the dedupe keys seen within
            the window with the offset of their latest record, as runs ``(prefix, suffix,
            first_seq, offset_deltas)``: keys ``prefix + str(first_seq + i) + suffix`` at
            offsets given as differences from the previous one (the first from 0); a
            ``first_seq`` of -1 means the key is ``prefix`` alone.
        lock_ids (tuple[str, ...]): the latest lock claim ids, oldest first.
    """

    data_start: int
    data_offset: int
    receipts_offset: int
    dedupe_window: int
    purge_floor: int
    codes_base: int
    codes: bytes
    entries: tuple[IndexEntry, ...]
    abort_counts: tuple[tuple[int, int], ...]
    dedupe: tuple[tuple[str, str, int, tuple[int, ...]], ...]
    lock_ids: tuple[str, ...]


# --------------------------------------------------------------------------------------------
# Pending entries by offset
# --------------------------------------------------------------------------------------------

_CHUNK_BITS = 6
_CHUNK = 1 << _CHUNK_BITS
_CHUNK_MASK = _CHUNK - 1


class _PendingByOffset:
    """The pending entries by data offset, as a sparse array in chunks of 64 offsets.

    Pending messages lie close together in offset order (a queue is received from its head),
    so a chunk costs about 9 bytes per offset where a dict costs about 50 per entry (at
    200,000 entries). A chunk is freed when its last entry leaves, so a message left behind
    far below the head costs one chunk (about 600 bytes), not the span since.
    """

    __slots__ = ("_chunks",)

    def __init__(self) -> None:
        # chunk number -> 64 slots (an entry or None) and, last, how many are entries (> 0)
        self._chunks: dict[int, list[Any]] = {}

    def get(self, offset: int) -> IndexEntry | None:
        """The pending entry at ``offset``, or None."""
        chunk = self._chunks.get(offset >> _CHUNK_BITS)
        return None if chunk is None else chunk[offset & _CHUNK_MASK]

    def __contains__(self, offset: int) -> bool:
        chunk = self._chunks.get(offset >> _CHUNK_BITS)
        return chunk is not None and chunk[offset & _CHUNK_MASK] is not None

    def __getitem__(self, offset: int) -> IndexEntry:
        chunk = self._chunks.get(offset >> _CHUNK_BITS)
        entry = None if chunk is None else chunk[offset & _CHUNK_MASK]
        if entry is None:
            raise KeyError(offset)
        return entry

    def __setitem__(self, offset: int, entry: IndexEntry) -> None:
        chunk = self._chunks.get(offset >> _CHUNK_BITS)
        if chunk is None:
            chunk = self._chunks[offset >> _CHUNK_BITS] = [None] * _CHUNK + [0]
        slot = offset & _CHUNK_MASK
        if chunk[slot] is None:
            chunk[_CHUNK] += 1
        chunk[slot] = entry

    def __delitem__(self, offset: int) -> None:
        chunk = self._chunks.get(offset >> _CHUNK_BITS)
        slot = offset & _CHUNK_MASK
        if chunk is None or chunk[slot] is None:
            raise KeyError(offset)
        chunk[slot] = None
        chunk[_CHUNK] -= 1
        if not chunk[_CHUNK]:
            del self._chunks[offset >> _CHUNK_BITS]

    def values(self) -> Iterator[IndexEntry]:
        """Every pending entry, in offset order."""
        for number in sorted(self._chunks):
            yield from (entry for entry in self._chunks[number][:_CHUNK] if entry is not None)


# --------------------------------------------------------------------------------------------
# Per-priority lanes
# --------------------------------------------------------------------------------------------


class _Lane:
    """The pending messages of one priority, in offset order, with lazy deletion.

    ``entries[head:]`` holds every pending entry of the priority plus ``dead`` removed ones.
    Removed entries are skipped, dropped from the head as it advances, and compacted away when
    they are the majority; compaction bumps ``version`` so scans in progress re-find their
    place by offset.
    """

    __slots__ = ("dead", "entries", "head", "version")

    def __init__(self) -> None:
        self.entries: list[IndexEntry] = []
        self.head = 0
        self.dead = 0
        self.version = 0

    def index_after(self, offset: int) -> int:
        """Index of the first entry with an offset greater than ``offset``."""
        return bisect_right(self.entries, offset, lo=self.head, key=_offset_of)

    def restore(self, entry: IndexEntry) -> None:
        """Put a released entry back in its place (offset order); the caller made it pending.

        If its removed copy is still in the list it simply counts as live again; otherwise it
        is inserted, and ``version`` is bumped so scans in progress re-find their place.
        """
        entries = self.entries
        index = bisect_left(entries, entry.offset, lo=self.head, key=_offset_of)
        if index < len(entries) and entries[index].offset == entry.offset:
            self.dead -= 1
            return
        entries.insert(index, entry)
        self.version += 1

    def trim(self, pending: _PendingByOffset) -> None:
        """Advance the head past removed entries and compact when removed ones dominate."""
        entries, head = self.entries, self.head
        while head < len(entries) and entries[head].offset not in pending:
            head += 1
            self.dead -= 1
        self.head = head
        live = len(entries) - head
        if (head > 1024 and head * 2 > len(entries)) or (self.dead > 64 and self.dead * 2 > live):
            self.entries = [e for e in entries[head:] if e.offset in pending]
            self.head = 0
            self.dead = 0
            self.version += 1


# --------------------------------------------------------------------------------------------
# Multi-valued index helpers (message id and correlation id -> offsets)
# --------------------------------------------------------------------------------------------
# A key usually maps to one offset; storing a bare int then saves a list per entry.

_K = TypeVar("_K", bound=Hashable)  # a message-id ident (int | str) or correlation-id text


def _index_add(index: dict[_K, int | list[int]], key: _K, offset: int) -> None:
    current = index.get(key)
    if current is None:
        index[key] = offset
    elif isinstance(current, int):
        index[key] = [current, offset]
    else:
        current.append(offset)


def _index_remove(index: dict[_K, int | list[int]], key: _K, offset: int) -> None:
    """Remove ``offset`` under ``key`` if it is there (the message-id index holds only some
    pending offsets, see QueueState._findable)."""
    current = index.get(key)
    if current == offset:
        del index[key]
    elif isinstance(current, list) and offset in current:
        current.remove(offset)
        if len(current) == 1:
            index[key] = current[0]


def _index_get(index: dict[_K, int | list[int]], key: _K) -> tuple[int, ...]:
    current = index.get(key)
    if current is None:
        return ()
    return (current,) if isinstance(current, int) else tuple(current)


# --------------------------------------------------------------------------------------------
# The queue state
# --------------------------------------------------------------------------------------------


class QueueState:
    """In-memory index of one queue, built from its data and receipts logs.

    One instance per queue per process. Feed it the data topic's records with :meth:`add` and
    the receipts topic's records with :meth:`apply`, each log in offset order; the two logs may
    be interleaved in any way (receipts may be read ahead of the data they name).

    Args:
        data_start (int): first data offset that will be fed (the data topic's log start
            offset); offsets below it count as removed.
        receipts_start (int): first receipts offset that will be fed.
        dedupe_window (int): see :data:`DEDUPE_WINDOW`; every process must use the same value.

    Raises:
        ValueError: a negative start offset or a window < 1.
    """

    def __init__(
        self, *, data_start: int = 0, receipts_start: int = 0, dedupe_window: int = DEDUPE_WINDOW
    ):
        if data_start < 0 or receipts_start < 0 or dedupe_window < 1:
            raise ValueError("start offsets must be >= 0 and dedupe_window >= 1")
        self._data_start = data_start
        self._data_offset = data_start
        self._receipts_offset = receipts_start
        self._dedupe_window = dedupe_window
        # Pending entries (messages and poison records) by offset.
        self._entries = _PendingByOffset()
        self._lanes = [_Lane() for _ in range(_PRIORITIES)]
        self._poison: dict[int, IndexEntry] = {}  # insertion order = offset order
        # Message id -> pending offsets the dedupe index does not give (see _findable): a
        # pending message is usually its id's latest record in the window, and then a second
        # dict slot for it would cost about 50 bytes per message.
        self._by_id: dict[int | str, int | list[int]] = {}  # by IndexEntry._id
        self._by_cid: dict[str, int | list[int]] = {}
        self._expiry: list[tuple[int, int]] = []  # heap of (expires_ms, offset), lazy
        self._not_before: list[tuple[int, int]] = []  # heap of (not_before_ms, offset), lazy
        self._count = 0  # pending messages (poison records excluded)
        self._bytes = 0
        # One state code per data offset in [_base, _data_offset).
        self._codes = bytearray()
        self._base = data_start
        self._floor = data_start  # no pending offset below this one (lower bound)
        # Receipts read ahead of the data: offset -> removed code, and a min-heap of those offsets.
        self._ahead: dict[int, int] = {}
        self._ahead_heap: list[int] = []
        self._purge_floor = 0  # every offset below is removed (max purge_below seen)
        # Dedupe key -> offset of its latest record. A key counts only while that offset is
        # within the window (>= _dedupe_low); older keys are pruned in bulk every quarter
        # window, so no per-key expiry queue is needed (it cost 16 bytes per key).
        self._dedupe: dict[int | str, int] = {}  # by IndexEntry.dedupe_ident
        self._dedupe_low = 0  # the window's lowest offset at the latest add
        self._dedupe_prune_at = dedupe_window
        self._incomplete: dict[str, IncompleteClaim] = {}
        self._adds = 0
        # Locks: held offset -> its hold; lock claim id -> the lock, for those still holding
        # offsets; a lazy min-heap of (deadline_ms, receipts offset, claim id); the latest lock
        # claim ids (duplicates take nothing).
        self._held: dict[int, _Hold] = {}
        self._locks: dict[str, _Lock] = {}
        self._lock_deadlines: list[tuple[int, int, str]] = []
        self._lock_ids: OrderedDict[str, None] = OrderedDict()
        self._locked_count = 0  # held messages (poison records, duplicates and gaps excluded)
        self._locked_bytes = 0
        # Abort counts (> 0) of pending offsets, read or not, whatever their record is (so they
        # depend on the receipts alone); held offsets keep theirs in _Hold.
        self._aborts: dict[int, int] = {}
        # Offsets not read yet, below the purge floor, pending again: a lock held them when a
        # PURGE passed and released them since, so their arrival must not count as purged.
        self._unpurged: set[int] = set()
        self._admitted = False  # fed with admit(): nothing indexed, nothing else answered

    # ----------------------------------------------------------------------------------------
    # Positions
    # ----------------------------------------------------------------------------------------

    @property
    def data_offset(self) -> int:
        """int: the next data offset expected, where the data reader resumes."""
        return self._data_offset

    @property
    def receipts_offset(self) -> int:
        """int: the next receipts offset expected, where the receipts reader resumes."""
        return self._receipts_offset

    # ----------------------------------------------------------------------------------------
    # Feeding the data log
    # ----------------------------------------------------------------------------------------

    def add(self, entry: IndexEntry) -> None:
        """Index the next data record (MSMQ: a message arrives in the queue).

        The record is excluded if a receipt already removed its offset, if it is a duplicate
        (its dedupe key appeared within the dedupe window), or, for poison records, kept only
        for :meth:`poisoned`.

        Args:
            entry (IndexEntry): the record's entry; offsets must increase (gaps are allowed,
                e.g. transaction markers).

        Raises:
            ValueError: ``entry.offset`` is below :attr:`data_offset` (a reader bug).
        """
        if self._admitted:
            self._indexed("add")
        offset = entry.offset
        if offset < self._data_offset:
            raise ValueError(
                f"data record at offset {offset} fed after offset {self._data_offset - 1}: "
                "data records must be added in increasing offset order"
            )
        self._fill_gap(offset)
        removed = self._arrival_code(offset)
        duplicate = not entry.poison and self._seen(entry.dedupe_ident, offset)
        self._data_offset = offset + 1
        if removed is not None:
            self._codes.append(removed)
            if removed == _LOCKED:  # a lock read ahead of the data holds it: keep the entry
                hold = self._held[offset]
                hold.code = _DUPLICATE if duplicate else _PENDING
                if not duplicate:
                    hold.entry = entry
                    self._count_held(entry, 1)
        elif duplicate:
            self._codes.append(_DUPLICATE)
        else:
            self._codes.append(_PENDING)
            self._index(entry)
        self._adds += 1
        if not self._adds % _TRIM_MIN:
            self.floor()  # keeps the code array bounded even if nobody asks for the floor

    def admit(self, offset: int, dedupe_key: int | str, poison: bool) -> bool:
        """Feed the next data record to a one-pass reader and say whether it is in the queue.

        For a reader that applies every receipt first, then walks the data log once and only
        asks, per record, whether a peek shows it (Spark's queue view): the verdict of
        :meth:`add` followed by :meth:`status`, by the same receipt and dedupe rules, without
        indexing the record (no entry, no lookup by id, no counts). A state fed this way
        answers nothing else: :meth:`add`, :meth:`apply` and :meth:`status` raise afterwards.

        Args:
            offset (int): the record's offset; offsets must increase (gaps are allowed).
            dedupe_key (int | str): :attr:`IndexEntry.dedupe_key` or its
                :attr:`IndexEntry.dedupe_ident`, the same form for every record of this state.
            poison (bool): :attr:`IndexEntry.poison`.

        Returns:
            bool: True for a pending message or a poison record (a peek shows both); False
            for a record a receipt removed or holds (a lock), or a duplicate.

        Raises:
            ValueError: ``offset`` is below :attr:`data_offset` (a reader bug).
        """
        if offset < self._data_offset:
            raise ValueError(f"data record at offset {offset} fed after offset "
                             f"{self._data_offset - 1}: records must come in offset order")
        self._admitted = True
        removed = self._arrival_code(offset)
        duplicate = not poison and self._seen(dedupe_key, offset)
        self._data_offset = offset + 1
        return removed is None and (poison or not duplicate)

    def _indexed(self, what: str) -> None:
        raise ValueError(f"QueueState.{what}: this state was fed with admit(), which "
                         "indexes nothing; build another state to ask it")

    def advance_data_to(self, next_offset: int) -> None:
        """Record that the data log has no records below ``next_offset`` beyond those added.

        For readers whose position moved past non-data records (transaction markers).

        Args:
            next_offset (int): the data reader's position.

        Raises:
            ValueError: ``next_offset`` is below :attr:`data_offset`.
        """
        if next_offset < self._data_offset:
            raise ValueError(f"data position {next_offset} is behind {self._data_offset}")
        self._fill_gap(next_offset)
        self._data_offset = next_offset

    def _fill_gap(self, offset: int) -> None:
        """Give offsets in [data_offset, offset) the gap code, or the receipt that removed them."""
        start = self._data_offset
        if offset <= start:
            return
        codes, base = self._codes, self._base
        codes.extend(bytes(offset - start))
        purged_to = min(offset, self._purge_floor)
        if purged_to > start:
            codes[start - base : purged_to - base] = bytes([_PURGE_CODE]) * (purged_to - start)
            for gap in [o for o in self._unpurged if o < offset]:
                codes[gap - base] = _GAP  # released after the purge: a plain gap
                self._unpurged.discard(gap)
        heap = self._ahead_heap
        while heap and heap[0] < offset:
            gap = heapq.heappop(heap)
            code = self._ahead.pop(gap, None)
            if code is None:
                continue  # released since it was claimed ahead: stays a gap
            codes[gap - base] = code
            if code == _LOCKED:
                self._held[gap].code = _GAP

    def _arrival_code(self, offset: int) -> int | None:
        """The removed (or held) code of a record arriving after a receipt named or purged it,
        else None."""
        heap = self._ahead_heap
        while heap and heap[0] == offset:  # more than one copy after a release and a re-claim
            heapq.heappop(heap)
        code = self._ahead.pop(offset, None)
        if code is not None:
            return code
        if offset in self._unpurged:
            self._unpurged.discard(offset)
            return None
        return _PURGE_CODE if offset < self._purge_floor else None

    def _seen(self, key: int | str, offset: int) -> bool:
        """Record ``key`` at ``offset``; True if it appeared within the dedupe window."""
        self._dedupe_low = oldest_kept = offset - self._dedupe_window
        if offset >= self._dedupe_prune_at:
            self._prune_dedupe(oldest_kept)
            self._dedupe_prune_at = offset + max(self._dedupe_window // 4, 1)
        dedupe = self._dedupe
        previous = dedupe.get(key)
        dedupe[key] = offset
        if previous is None:
            return False
        self._keep_findable(previous)
        return previous >= oldest_kept

    def _prune_dedupe(self, oldest_kept: int) -> None:
        """Drop the dedupe keys whose latest offset left the window (memory only: _seen
        compares offsets, so verdicts do not depend on when this runs)."""
        dedupe = self._dedupe
        for key in [k for k, o in dedupe.items() if o < oldest_kept]:
            self._keep_findable(dedupe.pop(key))

    def _findable(self, entry: IndexEntry) -> bool:
        """Whether the dedupe index gives ``entry`` by its message id: its dedupe key is its
        message id and it is that key's latest record in the window."""
        return self._dedupe.get(entry._id) == entry.offset and entry.dedupe_ident == entry._id

    def _keep_findable(self, offset: int) -> None:
        """The dedupe index stops giving ``offset``: if a pending message it gave by id is
        there, index it in ``_by_id`` instead (held ones are checked when released)."""
        entry = self._entries.get(offset)
        if entry is not None and not entry.poison and entry.dedupe_ident == entry._id:
            _index_add(self._by_id, entry._id, offset)

    def _index(self, entry: IndexEntry, *, restore: bool = False) -> None:
        """Make ``entry`` pending in every index; ``restore``: a released entry, which goes
        back to its place in offset order rather than at the end."""
        offset = entry.offset
        self._entries[offset] = entry
        if entry.poison:
            self._poison[offset] = entry
            if restore:  # keep offset order (poisoned() lists them so)
                self._poison = dict(sorted(self._poison.items()))
            return
        lane = self._lanes[entry.priority]
        if restore:
            lane.restore(entry)
        else:
            lane.entries.append(entry)
        self._count += 1
        self._bytes += entry.size
        if not self._findable(entry):
            _index_add(self._by_id, entry._id, offset)
        if entry.correlation_id is not None:
            _index_add(self._by_cid, entry.correlation_id, offset)
        if entry.expires_ms is not None:
            heapq.heappush(self._expiry, (entry.expires_ms, offset))
        if entry.not_before_ms is not None:
            heapq.heappush(self._not_before, (entry.not_before_ms, offset))

    # ----------------------------------------------------------------------------------------
    # Feeding the receipts log
    # ----------------------------------------------------------------------------------------

    def apply(self, receipt: Receipt, receipt_offset: int) -> ClaimOutcome:
        """Apply the next receipt and return its verdict (arbitration of destructive receives).

        Each offset the receipt names is won if it is pending when the receipt is applied (no
        earlier receipt took it, or the lock that took it released it since) and no earlier
        PURGE covered it; the winner removes it from the queue, or holds it for a LOCK or
        PREFETCH (whether or not its data record has been read). A PURGE then removes every
        pending offset below ``purge_below``, leaving held ones alone. A receipt that names a
        lock in ``completes`` settles the offsets that lock still holds (see the module
        docstring). A system claim (EXPIRE, MOVE, REJECT, POISON) that won offsets stays in
        :meth:`incomplete_claims` until a COMPLETED receipt names it. A LOCK, PREFETCH,
        RECEIVE_FIRST or LOCK_FIRST whose claim id is among the last :data:`LOCK_MEMORY` of
        those is a duplicate and loses everything. Offsets below the floor are settled: naming
        one loses. A RECEIVE_FIRST or LOCK_FIRST takes only the first offset it names that is
        pending, as a RECEIVE or LOCK would; the ones before it are lost, the ones after it
        left alone.

        Args:
            receipt (Receipt): the decoded receipt.
            receipt_offset (int): its offset in the receipts topic; offsets must increase.

        Returns:
            ClaimOutcome: offsets won and lost (a repeated offset counts once).

        Raises:
            ValueError: ``receipt_offset`` is below :attr:`receipts_offset` (a reader bug).
        """
        if self._admitted:
            self._indexed("apply")
        if receipt_offset < self._receipts_offset:
            raise ValueError(
                f"receipt at offset {receipt_offset} fed after offset "
                f"{self._receipts_offset - 1}: receipts must be applied in offset order"
            )
        self._receipts_offset = receipt_offset + 1
        action = receipt.action
        named = tuple(dict.fromkeys(receipt.offsets))
        if receipt.completes is not None and action.is_known:
            lock = self._locks.get(receipt.completes)
            if lock is not None:
                return self._settle(receipt, receipt_offset, lock)
            if action is ReceiptAction.COMPLETED:
                self._incomplete.pop(receipt.completes, None)
            # A lock settled already (or never taken): nothing to settle, every offset lost.
            return ClaimOutcome(receipt.claim_id, (), named)
        lock = None
        first_only = action in FIRST_OF_ACTIONS
        if action.is_lock or first_only:
            # A claim that may take again once its first copy is applied (a lock after its
            # release, a first-of receipt the next pending offset it names) takes nothing as
            # a duplicate, which a producer retry can write.
            if receipt.claim_id in self._lock_ids:
                return ClaimOutcome(receipt.claim_id, (), named)
            self._remember_lock(receipt.claim_id)
            if action.is_lock:
                lock = _Lock(receipt, receipt_offset)
        code = _LOCKED if lock is not None else _removed_code(
            ReceiptAction.RECEIVE if first_only else action)
        won: list[int] = []
        lost: list[int] = []
        counts: list[int] = []
        for offset in named:
            aborts = self._take(offset, code, lock)
            if aborts is None:
                lost.append(offset)
            else:
                won.append(offset)
                counts.append(aborts)
                if first_only:  # the ones named after it are left alone
                    break
        purged = 0
        if receipt.purge_below is not None:
            purged = self._purge(receipt.purge_below)
        abort_counts = tuple(counts) if any(counts) else ()
        if won and lock is not None:
            self._locks[receipt.claim_id] = lock
            heapq.heappush(self._lock_deadlines,
                           (lock.receipt.time_ms + (receipt.lease_ms or 0), receipt_offset,
                            receipt.claim_id))
        elif won and action.is_system:
            self._incomplete[receipt.claim_id] = IncompleteClaim(
                receipt, tuple(won), receipt_offset, abort_counts
            )
        return ClaimOutcome(receipt.claim_id, tuple(won), tuple(lost), purged, abort_counts)

    def _remember_lock(self, claim_id: str) -> None:
        ids = self._lock_ids
        ids[claim_id] = None
        if len(ids) > LOCK_MEMORY:
            ids.popitem(last=False)

    def _settle(self, receipt: Receipt, receipt_offset: int, lock: _Lock) -> ClaimOutcome:
        """Apply a receipt that names ``lock`` in ``completes``: COMPLETED removes the offsets
        it names (none: all) that the lock still holds, RELEASE makes them pending again, a
        system action takes them over; offsets the lock does not hold are lost."""
        action = receipt.action
        held = lock.offsets
        named = dict.fromkeys(receipt.offsets) if receipt.offsets else dict(held)
        # A LOCK_FIRST is a LOCK that chose its offset: settled, it reads as one.
        lock_action = (ReceiptAction.LOCK if lock.receipt.action is ReceiptAction.LOCK_FIRST
                       else lock.receipt.action)
        won: list[int] = []
        lost: list[int] = []
        counts: list[int] = []
        for offset in named:
            if offset not in held:
                lost.append(offset)
                continue
            del held[offset]
            hold = self._held.pop(offset)
            won.append(offset)
            if action is ReceiptAction.RELEASE:
                # A released PREFETCH was never handed out: no aborted delivery to count.
                aborts = hold.aborts + (lock_action is not ReceiptAction.PREFETCH)
                self._reinstate(offset, hold, aborts)
            else:
                aborts = hold.aborts
                self._drop_hold(offset, hold, _removed_code(
                    lock_action if action is ReceiptAction.COMPLETED else action))
            counts.append(aborts)
        if not held:
            del self._locks[lock.receipt.claim_id]
        abort_counts = tuple(counts) if any(counts) else ()
        if won and action.is_system:
            self._incomplete[receipt.claim_id] = IncompleteClaim(
                receipt, tuple(won), receipt_offset, abort_counts
            )
        return ClaimOutcome(receipt.claim_id, tuple(won), tuple(lost), 0, abort_counts)

    def _count_held(self, entry: IndexEntry | None, sign: int) -> None:
        """Add (sign 1) or remove (-1) a held message in the locked count and bytes."""
        if entry is not None and not entry.poison:
            self._locked_count += sign
            self._locked_bytes += sign * entry.size

    def _drop_hold(self, offset: int, hold: _Hold, code: int) -> None:
        """A held offset is removed for good with ``code``."""
        if offset < self._data_offset:
            self._codes[offset - self._base] = code
            self._count_held(hold.entry, -1)
        else:
            self._ahead[offset] = code  # its heap slot is still there

    def _reinstate(self, offset: int, hold: _Hold, aborts: int) -> None:
        """A released offset is what it was before the lock took it: a pending message (back
        in its place in receive order, with ``aborts``), a poison record, a duplicate, a gap;
        or, not read yet, an offset that is pending when its record arrives."""
        if offset >= self._data_offset:
            del self._ahead[offset]  # its heap slot goes stale
            if offset < self._purge_floor:
                self._unpurged.add(offset)
            if aborts:
                self._aborts[offset] = aborts
            return
        self._codes[offset - self._base] = hold.code
        if aborts:  # kept whatever the record is, so the count never depends on the data read
            self._aborts[offset] = aborts
        if hold.code == _PENDING:
            self._count_held(hold.entry, -1)
            self._index(hold.entry, restore=True)  # type: ignore[arg-type]

    def advance_receipts_to(self, next_offset: int) -> None:
        """Record that the receipts log has nothing more below ``next_offset`` (markers).

        Args:
            next_offset (int): the receipts reader's position.

        Raises:
            ValueError: ``next_offset`` is below :attr:`receipts_offset`.
        """
        if next_offset < self._receipts_offset:
            raise ValueError(f"receipts position {next_offset} is behind {self._receipts_offset}")
        self._receipts_offset = next_offset

    def _take(self, offset: int, code: int, lock: _Lock | None) -> int | None:
        """Take ``offset`` if it is pending: remove it with ``code``, or hold it for ``lock``
        (``code`` _LOCKED).

        Returns:
            int | None: None if the offset was not pending (this claim loses it); else its
            abort count, which moves into the hold for a lock.
        """
        if offset < self._base:
            return None
        if offset >= self._data_offset:  # data not read yet: remember the claim
            if offset in self._ahead or (
                offset < self._purge_floor and offset not in self._unpurged
            ):
                return None
            self._unpurged.discard(offset)
            self._ahead[offset] = code
            heapq.heappush(self._ahead_heap, offset)
            aborts = self._aborts.pop(offset, 0)
            if lock is not None:
                self._held[offset] = _Hold(lock, None, _UNREAD, aborts)
                lock.offsets[offset] = None
            return aborts
        index = offset - self._base
        current = self._codes[index]
        if current >= _REMOVED or current == _LOCKED:
            return None
        entry = None
        if current == _PENDING:
            entry = self._entries[offset]
            self._unindex(entry)
        aborts = self._aborts.pop(offset, 0) if self._aborts else 0
        # Duplicates and gaps are won too: the verdict must not depend on the data read so far.
        self._codes[index] = code
        if lock is not None:
            self._held[offset] = _Hold(lock, entry, current, aborts)
            lock.offsets[offset] = None
            self._count_held(entry, 1)
        return aborts

    def _purge(self, below: int) -> int:
        """Remove every pending offset < ``below`` (MSMQ MQPurgeQueue); held ones stay held.

        As in MSMQ, a message locked by a receive not settled yet is not purged; if its lock
        releases it later it is pending again, below the purge floor, and a later purge
        removes it.

        Returns:
            int: the number of pending messages (poison excluded) removed.
        """
        self._purge_floor = max(self._purge_floor, below)
        pending = self._entries
        before = self._count
        for lane in self._lanes:
            end = bisect_right(lane.entries, below - 1, lo=lane.head, key=_offset_of)
            for entry in lane.entries[lane.head : end]:
                if entry.offset in pending:
                    self._unindex(entry, trim=False)
            lane.trim(pending)
        for entry in [e for o, e in self._poison.items() if o < below]:
            self._unindex(entry)
        stop = min(below, self._data_offset) - self._base
        if stop > 0:
            codes = self._codes
            codes[:stop] = codes[:stop].translate(_PURGE_TABLE)
        if self._unpurged:
            self._unpurged = {o for o in self._unpurged if o >= below}
        if self._aborts:
            for offset in [o for o in self._aborts if o < below]:
                del self._aborts[offset]
        return before - self._count

    def _unindex(self, entry: IndexEntry, *, trim: bool = True) -> None:
        """Drop a pending entry from every index (the caller records its state code)."""
        offset = entry.offset
        del self._entries[offset]
        if entry.poison:
            del self._poison[offset]
            return
        self._count -= 1
        self._bytes -= entry.size
        _index_remove(self._by_id, entry._id, offset)
        if entry.correlation_id is not None:
            _index_remove(self._by_cid, entry.correlation_id, offset)
        lane = self._lanes[entry.priority]
        lane.dead += 1
        if trim:
            lane.trim(self._entries)

    # ----------------------------------------------------------------------------------------
    # Receive order
    # ----------------------------------------------------------------------------------------

    def candidates(self, now_ms: int, start: IndexEntry | None = None) -> Iterator[IndexEntry]:
        """Yield the messages a receiver may get now, in MSMQ receive order.

        Highest priority first, arrival (offset) order within a priority; removed, duplicate,
        poison, not-yet-visible and expired entries are skipped. The iterator stays valid while
        the state changes (it resumes after the last offset it yielded).

        Args:
            now_ms (int): the current time, epoch ms.
            start (IndexEntry | None): begin at this entry (yielded first if still a
                candidate) instead of the head: a batch that starts at a spread pick
                (:meth:`head_candidates`).

        Yields:
            IndexEntry: pending, visible, unexpired messages.
        """
        if start is None:
            return self._scan(_PRIORITIES - 1, -1, now_ms)
        return self._scan(start.priority, start.offset - 1, now_ms)

    def head_candidates(self, now_ms: int, limit: int) -> list[IndexEntry]:
        """Return the first ``limit`` candidates of the highest priority that has one.

        The choice a contended receiver spreads its claims over (``docs/design.md``,
        "Contended receives"): never a lower priority while a higher one is pending.

        Args:
            now_ms (int): the current time, epoch ms.
            limit (int): at most this many (>= 1).

        Returns:
            list[IndexEntry]: in receive order, all of one priority; empty when the queue has
            no candidate.
        """
        head: list[IndexEntry] = []
        for entry in self._scan(_PRIORITIES - 1, -1, now_ms):
            if len(head) == limit or (head and entry.priority != head[0].priority):
                break
            head.append(entry)
        return head

    def peek_first(self, now_ms: int) -> IndexEntry | None:
        """Return the message MQReceiveMessage / MQPeekMessage would get now, if any.

        Args:
            now_ms (int): the current time, epoch ms.

        Returns:
            IndexEntry | None: the first candidate.
        """
        return next(self._scan(_PRIORITIES - 1, -1, now_ms), None)

    def next_after(self, position: tuple[int, int] | None, now_ms: int) -> IndexEntry | None:
        """Return the message after a cursor position (MQ_ACTION_PEEK_NEXT / cursor receive).

        A position is the ``(-priority, offset)`` key of the entry the cursor is on
        (:attr:`IndexEntry.position`); it stays valid when that or other entries are removed.

        Args:
            position (tuple[int, int] | None): the cursor's position; None = before the first.
            now_ms (int): the current time, epoch ms.

        Returns:
            IndexEntry | None: the next visible message in receive order, or None at the end.
        """
        if position is None:
            return self.peek_first(now_ms)
        neg_priority, offset = position
        priority = min(max(-neg_priority, 0), _PRIORITIES - 1)
        return next(self._scan(priority, offset, now_ms), None)

    def _scan(self, priority: int, after: int, now_ms: int) -> Iterator[IndexEntry]:
        """Yield visible entries from (priority, offsets > after) on, in receive order."""
        pending = self._entries
        for p in range(priority, -1, -1):
            lane = self._lanes[p]
            if lane.head >= len(lane.entries):
                continue  # empty: the common case for unused priorities, keep it cheap
            lane.trim(pending)
            last = after if p == priority else -1
            index = lane.index_after(last) if last >= 0 else lane.head
            version = lane.version
            while True:
                if lane.version != version:  # compacted while we were suspended
                    index, version = lane.index_after(last), lane.version
                entries = lane.entries
                if index >= len(entries):
                    break
                entry = entries[index]
                index += 1
                last = entry.offset
                if last in pending and entry.visible(now_ms):
                    yield entry

    # ----------------------------------------------------------------------------------------
    # System work: expiry and poison
    # ----------------------------------------------------------------------------------------

    def expired(self, now_ms: int) -> list[IndexEntry]:
        """Return pending messages whose TTBR deadline has passed, to claim with EXPIRE.

        Args:
            now_ms (int): the current time, epoch ms.

        Returns:
            list[IndexEntry]: entries with ``expires_ms <= now_ms``, in offset order.
        """
        heap, pending = self._expiry, self._entries
        found: dict[int, IndexEntry] = {}  # a released entry may be in the heap twice
        while heap and heap[0][0] <= now_ms:
            _, offset = heapq.heappop(heap)
            entry = pending.get(offset)
            if entry is not None:
                found[offset] = entry
        for entry in found.values():  # still pending until the EXPIRE claim is applied
            heapq.heappush(heap, (entry.expires_ms, entry.offset))  # type: ignore[misc]
        return sorted(found.values(), key=_offset_of)

    def poisoned(self) -> list[IndexEntry]:
        """Return pending poison records, to claim with POISON and dead-letter.

        Returns:
            list[IndexEntry]: in offset order.
        """
        return list(self._poison.values())

    def next_visible_ms(self, now_ms: int) -> int | None:
        """Return when the next not-yet-visible message becomes visible (timed dequeue).

        A receiver with nothing to receive waits at most until then.

        Args:
            now_ms (int): the current time, epoch ms.

        Returns:
            int | None: the earliest ``not_before_ms > now_ms`` of a pending message, or None.
        """
        heap, pending = self._not_before, self._entries
        while heap and (heap[0][0] <= now_ms or heap[0][1] not in pending):
            heapq.heappop(heap)  # visible already (for good) or removed
        return heap[0][0] if heap else None

    def next_expiry_ms(self) -> int | None:
        """Return the earliest TTBR deadline of a pending message (for the expiry sweeper).

        Returns:
            int | None: epoch ms, or None when no pending message has a deadline.
        """
        heap, pending = self._expiry, self._entries
        while heap and heap[0][1] not in pending:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def incomplete_claims(self) -> list[IncompleteClaim]:
        """Return system claims without a COMPLETED receipt, oldest first (recovery redoes them).

        Returns:
            list[IncompleteClaim]: in receipts-topic order.
        """
        return sorted(self._incomplete.values(), key=attrgetter("receipt_offset"))

    # ----------------------------------------------------------------------------------------
    # Locks (peek-lock receive, prefetch) and abort counts
    # ----------------------------------------------------------------------------------------

    def locks(self) -> list[HeldLock]:
        """Return the LOCK and PREFETCH claims that still hold offsets, oldest first.

        Returns:
            list[HeldLock]: in receipts-topic order.
        """
        return [lock.public() for lock in self._locks.values()]

    def lock(self, claim_id: str) -> HeldLock | None:
        """Return the lock with this claim id if it still holds offsets.

        Args:
            claim_id (str): the LOCK or PREFETCH receipt's claim id.

        Returns:
            HeldLock | None: what it holds now; None once it holds nothing (settled).
        """
        lock = self._locks.get(claim_id)
        return None if lock is None else lock.public()

    def expired_locks(self, now_ms: int) -> list[HeldLock]:
        """Return the locks whose lease has passed, to settle (``kmq qm run``, receivers).

        A lease passes at the lock receipt's own ``time_ms`` plus ``lease_ms``, compared with
        the caller's clock: that only decides whether to *write* a settle receipt; which of
        the holder's and the expirer's receipts wins is the log's order.

        Args:
            now_ms (int): the current time, epoch ms.

        Returns:
            list[HeldLock]: locks with ``deadline_ms <= now_ms``, oldest first.
        """
        heap, locks = self._lock_deadlines, self._locks
        while heap and heap[0][2] not in locks:
            heapq.heappop(heap)  # settled
        due = [entry for entry in heap if entry[0] <= now_ms and entry[2] in locks]
        return [locks[claim_id].public() for _, _, claim_id in sorted(due, key=itemgetter(1))]

    def next_lock_deadline_ms(self) -> int | None:
        """Return the earliest lease deadline of a lock that still holds offsets.

        Returns:
            int | None: epoch ms, or None without locks.
        """
        heap, locks = self._lock_deadlines, self._locks
        while heap and heap[0][2] not in locks:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def abort_count(self, offset: int) -> int:
        """Return how often the message at ``offset`` was released from a peek-lock
        (PROPID_M_ABORT_COUNT on top of the envelope's), while it is pending or held.

        Args:
            offset (int): a data offset.

        Returns:
            int: the count; 0 for a message never released, or one no longer in the queue.
        """
        hold = self._held.get(offset)
        return hold.aborts if hold is not None else self._aborts.get(offset, 0)

    def retries_exhausted(self, retry_count: int) -> list[IndexEntry]:
        """Return pending messages released more than ``retry_count`` times, to move to the
        ``;poison`` subqueue instead of handing them out again (MSMQ 4.0 poison handling).

        Args:
            retry_count (int): the queue's ``receive_retry_count``.

        Returns:
            list[IndexEntry]: in offset order (only messages whose data record is read).
        """
        entries = self._entries
        found = [entries[o] for o, n in self._aborts.items() if n > retry_count and o in entries]
        return sorted((entry for entry in found if not entry.poison), key=_offset_of)

    @property
    def has_abort_counts(self) -> bool:
        """bool: whether some pending offset was released from a peek-lock (the usual answer,
        False, lets receivers skip the ``;poison`` check)."""
        return bool(self._aborts)

    @property
    def has_locks(self) -> bool:
        """bool: whether some LOCK or PREFETCH holds offsets (a release may put them back)."""
        return bool(self._locks)

    @property
    def locked_count(self) -> int:
        """int: messages held by locks (included in :meth:`pending_count`)."""
        return self._locked_count

    # ----------------------------------------------------------------------------------------
    # Lookups
    # ----------------------------------------------------------------------------------------

    def by_message_id(self, message_id: str, now_ms: int | None = None) -> IndexEntry | None:
        r"""Find a pending message by message id (ReceiveById / PeekById).

        Args:
            message_id (str): ``guid\seq`` text.
            now_ms (int | None): when given, not-yet-visible and expired messages are skipped.

        Returns:
            IndexEntry | None: the first match in receive order (copies from several origins
            can share an id), or None.
        """
        key = _ident(_canonical_id(message_id) or message_id, add=False)
        offsets = _index_get(self._by_id, key)
        latest = self._dedupe.get(key)
        if latest is not None and latest not in offsets:
            entry = self._entries.get(latest)
            if entry is not None and not entry.poison and entry._id == key:
                offsets += (latest,)
        return self._first(offsets, now_ms)

    def by_correlation_id(
        self, correlation_id: str, now_ms: int | None = None
    ) -> IndexEntry | None:
        r"""Find the first pending message with a correlation id (ReceiveByCorrelationId).

        MSMQ scans the queue in receive order and takes the first match; so does this.

        Args:
            correlation_id (str): ``guid\seq`` text.
            now_ms (int | None): when given, not-yet-visible and expired messages are skipped.

        Returns:
            IndexEntry | None: the first match in receive order, or None.
        """
        key = _canonical_id(correlation_id) or correlation_id
        return self._first(_index_get(self._by_cid, key), now_ms)

    def by_lookup_id(self, lookup_id: int, now_ms: int | None = None) -> IndexEntry | None:
        """Find a pending message by lookup id, i.e. offset (MQReceiveMessageByLookupId).

        Args:
            lookup_id (int): the data offset.
            now_ms (int | None): when given, a not-yet-visible or expired message is not found.

        Returns:
            IndexEntry | None: the message, or None (use :meth:`status` to say why).
        """
        entry = self._entries.get(lookup_id)
        if entry is None or entry.poison:
            return None
        if now_ms is not None and not entry.visible(now_ms):
            return None
        return entry

    def _first(self, offsets: tuple[int, ...], now_ms: int | None) -> IndexEntry | None:
        matches = [self._entries[o] for o in offsets]
        if now_ms is not None:
            matches = [e for e in matches if e.visible(now_ms)]
        return min(matches, key=attrgetter("position"), default=None)

    def is_pending(self, offset: int) -> bool:
        """Whether :meth:`status` would say PENDING or POISON, without building the status
        (the receive path asks this of every message it hands out).

        Args:
            offset (int): a data offset (lookup id).

        Returns:
            bool: True when the record at ``offset`` waits for a claim.
        """
        index = offset - self._base
        return 0 <= index and offset < self._data_offset and self._codes[index] == _PENDING

    def in_queue(self, offset: int) -> bool:
        """Whether :meth:`status` would say PENDING, POISON or LOCKED (the record is still in
        the queue: waiting, or held by a lock), without building the status.

        Args:
            offset (int): a data offset (lookup id).

        Returns:
            bool: True when the record at ``offset`` may still be handed out.
        """
        if offset < self._base:
            return False
        if offset < self._data_offset:
            code = self._codes[offset - self._base]
            return code == _PENDING or code == _LOCKED
        return self._ahead.get(offset) == _LOCKED

    def status(self, offset: int) -> OffsetStatus:
        """Say what is at a data offset, so the API can pick MSMQ's error for a failed lookup.

        Args:
            offset (int): a data offset (lookup id).

        Returns:
            OffsetStatus: PENDING / POISON with the entry, REMOVED with the winning action,
            DUPLICATE, or UNKNOWN (a gap, or not read yet). A receipt's removal takes
            precedence over duplicate. Below the floor the action is no longer known.
        """
        if self._admitted:
            self._indexed("status")
        if offset < 0:
            return _UNKNOWN
        if offset < self._base:
            return _SETTLED
        if offset < self._data_offset:
            code = self._codes[offset - self._base]
            if code == _PENDING:
                entry = self._entries[offset]
                state = OffsetState.POISON if entry.poison else OffsetState.PENDING
                return OffsetStatus(state, entry=entry)
            if code == _DUPLICATE:
                return _DUPLICATE_STATUS
            if code == _LOCKED:
                return self._held_status(offset)
            return _UNKNOWN if code == _GAP else _removed_status(code)
        ahead = self._ahead.get(offset)
        if ahead == _LOCKED:
            return self._held_status(offset)
        if ahead is not None:
            return _removed_status(ahead)
        if offset < self._purge_floor and offset not in self._unpurged:
            return OffsetStatus(OffsetState.REMOVED, ReceiptAction.PURGE)
        return _UNKNOWN

    def _held_status(self, offset: int) -> OffsetStatus:
        hold = self._held[offset]
        return OffsetStatus(OffsetState.LOCKED, hold.lock.receipt.action, hold.entry)

    # ----------------------------------------------------------------------------------------
    # Statistics and retention
    # ----------------------------------------------------------------------------------------

    def pending_count(self, now_ms: int | None = None) -> int:
        """Count the messages in the queue (MQMgmtGetInfo PROPID_MGMT_QUEUE_MESSAGE_COUNT).

        Args:
            now_ms (int | None): None counts every message in the queue: pending ones and those
                held by locks, which are still in the queue until completed and may come back
                (poison records excluded); a time counts only those a receiver may get then
                (held ones excluded; O(n) scan).

        Returns:
            int: the count.
        """
        if now_ms is None:
            return self._count + self._locked_count
        return sum(1 for _ in self.candidates(now_ms))

    @property
    def pending_bytes(self) -> int:
        """int: bytes of the record values of the messages in the queue, held ones included
        (queue quota, PROPID_Q_QUOTA)."""
        return self._bytes + self._locked_bytes

    def floor(self) -> int:
        """Return the lowest offset that may still be pending.

        Every offset below is removed, a duplicate or a gap. Also drops the per-offset state
        kept for offsets below it once enough have piled up.

        Returns:
            int: the floor.
        """
        codes, base = self._codes, self._base
        start = self._floor - base
        found = codes.find(_PENDING, start)
        if found < 0:
            self._floor = self._data_offset
            result = max(self._data_offset, self._purge_floor)
        else:
            self._floor = result = base + found
        if self._held or self._unpurged:
            # A held offset may come back (and keeps its code), as may one a release made
            # pending before its record was read.
            result = min(result, *self._held, *self._unpurged)
            self._floor = min(self._floor, result)
        if self._floor - base >= _TRIM_MIN:
            del codes[: self._floor - base]
            self._base = self._floor
        return result

    def retention_floor(self) -> int:
        """Return the data offset below which records may be deleted (Kafka delete_records).

        Lower than :meth:`floor` where needed: the records of incomplete system claims must
        stay for recovery, and the last ``dedupe_window`` offsets must stay so that a process
        starting from the log start judges duplicates like the others.

        Returns:
            int: the retention floor (>= ``data_start``).
        """
        limit = min(self.floor(), self._data_offset - self._dedupe_window)
        for claim in self._incomplete.values():
            limit = min(limit, *claim.offsets)
        return max(limit, self._data_start)

    # ----------------------------------------------------------------------------------------
    # Snapshots
    # ----------------------------------------------------------------------------------------

    @property
    def exportable(self) -> bool:
        """bool: whether :meth:`export` can capture the state now: no lock holds offsets, no
        receipt names data not read yet, no system claim waits for its COMPLETED. Those parts
        of the state are short-lived; a snapshot waits until they are settled."""
        return not (self._held or self._locks or self._ahead or self._incomplete
                    or self._unpurged)

    def export(self) -> StateSnapshot | None:
        """Capture the state as plain data (a queue snapshot).

        The result is a function of the log prefixes read (data offsets below
        :attr:`data_offset`, receipts below :attr:`receipts_offset`), so two processes that
        read the same prefixes export equal snapshots. Per-offset codes below the floor are
        left out: those offsets are settled (removed, duplicates or gaps) either way.

        Returns:
            StateSnapshot | None: None while :attr:`exportable` is False.
        """
        if not self.exportable:
            return None
        self.floor()
        start = max(self._floor, self._base)
        entries = tuple(self._entries.values())
        return StateSnapshot(
            data_start=self._data_start, data_offset=self._data_offset,
            receipts_offset=self._receipts_offset, dedupe_window=self._dedupe_window,
            purge_floor=self._purge_floor, codes_base=start,
            codes=bytes(self._codes[start - self._base:]), entries=entries,
            abort_counts=tuple(sorted(self._aborts.items())),
            dedupe=_dedupe_runs({k: o for k, o in self._dedupe.items()
                                 if o >= self._dedupe_low}),
            lock_ids=tuple(self._lock_ids))

    @classmethod
    def from_snapshot(cls, snapshot: StateSnapshot,
                      dedupe_window: int = DEDUPE_WINDOW) -> QueueState:
        """Rebuild the state a snapshot captured; feed it the logs from its offsets on.

        Args:
            snapshot (StateSnapshot): from :meth:`export` (possibly another process's).
            dedupe_window (int): this process's window; a snapshot built with another one
                is refused (duplicates would be judged differently).

        Returns:
            QueueState: equal in every verdict to one fed the same prefixes from offset 0.

        Raises:
            ValueError: the snapshot is inconsistent (offsets out of order or range, codes
                that disagree with the entries, an unknown code, another dedupe window).
        """
        check_snapshot(snapshot, dedupe_window)
        state = cls(data_start=snapshot.data_start, receipts_start=snapshot.receipts_offset,
                    dedupe_window=dedupe_window)
        state._data_offset = snapshot.data_offset
        state._base = state._floor = snapshot.codes_base
        state._codes = bytearray(snapshot.codes)
        state._purge_floor = snapshot.purge_floor
        pairs = sorted(_dedupe_pairs(snapshot.dedupe), key=itemgetter(1))
        state._dedupe = dict(pairs)  # before the entries, which _index checks against it
        state._dedupe_prune_at = snapshot.data_offset + dedupe_window // 4
        for entry in snapshot.entries:
            state._index(entry)
        state._aborts = dict(snapshot.abort_counts)
        state._lock_ids = OrderedDict.fromkeys(snapshot.lock_ids)
        return state


_SNAPSHOT_CODES = frozenset({_GAP, _PENDING, _DUPLICATE, *range(_REMOVED, 256)})


def check_snapshot(snap: StateSnapshot, dedupe_window: int = DEDUPE_WINDOW) -> None:
    """Raise ValueError unless :meth:`QueueState.from_snapshot` would accept ``snap``.

    Args:
        snap (StateSnapshot): a decoded state, possibly written by another process.
        dedupe_window (int): this process's dedupe window (records).

    Raises:
        ValueError: the snapshot is inconsistent; the message says how.
    """
    if snap.dedupe_window != dedupe_window:
        raise ValueError(f"built with dedupe window {snap.dedupe_window}, not {dedupe_window}")
    if not 0 <= snap.data_start <= snap.codes_base <= snap.data_offset or snap.receipts_offset < 0:
        raise ValueError("offsets out of order")
    if len(snap.codes) != snap.data_offset - snap.codes_base:
        raise ValueError(f"{len(snap.codes)} codes for {snap.data_offset - snap.codes_base} offsets")
    if not _SNAPSHOT_CODES.issuperset(set(snap.codes)):
        raise ValueError("unknown offset code")
    offsets = [e.offset for e in snap.entries]
    if offsets != sorted(set(offsets)) or snap.codes.count(_PENDING) != len(offsets):
        raise ValueError("entries disagree with the codes")
    for entry in snap.entries:
        if not snap.codes_base <= entry.offset < snap.data_offset \
                or snap.codes[entry.offset - snap.codes_base] != _PENDING \
                or not 0 <= entry.priority < _PRIORITIES:
            raise ValueError(f"entry at offset {entry.offset} is not a record in the queue")
    for prefix, suffix, first, deltas in snap.dedupe:
        if first >= 0 and (not prefix.endswith("\\") or suffix[:1] not in ("", "@")
                           or first + len(deltas) - 1 > _SEQ_MASK):
            raise ValueError(f"dedupe run {prefix!r}...{suffix!r} is not of message ids")
        if not deltas or (first < 0 and len(deltas) != 1) or deltas[0] < 0 \
                or any(d < 1 for d in deltas[1:]) or sum(deltas) >= snap.data_offset:
            raise ValueError("dedupe offsets out of order or range")
    if any(offset < 0 or count < 1 for offset, count in snap.abort_counts):
        raise ValueError("abort count out of range")


def _dedupe_runs(dedupe: dict[int | str, int]) -> tuple[tuple[str, str, int, tuple[int, ...]], ...]:
    """The dedupe keys as runs of consecutive sequence numbers (see StateSnapshot.dedupe),
    in the order of their first offset; computed from the interned ints, without text."""
    runs: list[tuple[str, str, int, list[int]]] = []
    open_runs: dict[int, list] = {}  # prefix index -> [run, next seq, last offset]
    for ident, offset in sorted(dedupe.items(), key=itemgetter(1)):
        if isinstance(ident, str):
            runs.append((ident, "", -1, [offset]))
            continue
        index, seq = ident >> _SEQ_BITS, ident & _SEQ_MASK
        current = open_runs.get(index)
        if current is not None and current[1] == seq:
            current[0][3].append(offset - current[2])
            current[1], current[2] = seq + 1, offset
            continue
        prefix, suffix = _PREFIX_TEXT[index]
        run = (prefix, suffix, seq, [offset])
        runs.append(run)
        open_runs[index] = [run, seq + 1, offset]
    return tuple((prefix, suffix, first, tuple(deltas)) for prefix, suffix, first, deltas in runs)


def _dedupe_pairs(runs: Iterable[tuple[str, str, int, tuple[int, ...]]]) -> Iterator[tuple[int | str, int]]:
    """(ident, offset) pairs of :func:`_dedupe_runs`' runs."""
    for prefix, suffix, first, deltas in runs:
        index = None if first < 0 else _intern(prefix, suffix)
        offset = 0
        for i, delta in enumerate(deltas):
            offset += delta
            if first < 0:
                yield _ident(prefix), offset
            elif index is None:  # the intern table is full: text, as _ident gives then
                yield f"{prefix}{first + i}{suffix}", offset
            else:
                yield (index << _SEQ_BITS) | (first + i), offset
