"""Receipts: the records of a queue's receipts topic, and their Avro encoding.

Kafka cannot delete one record, so kmq removes a message from a queue by appending a receipt
to the queue's receipts topic (``<queue topic>.receipts``, one partition). The topic's single
total order arbitrates between processes: the **first** receipt that names a pending data
offset takes it, every later receipt that names it loses it (see ``docs/design.md``,
"Destructive receive shared across processes: receipts", and :mod:`facade.state.queuestate`, which
applies them). A LOCK or PREFETCH takes offsets without removing them: they are held until a
receipt that names the lock in ``completes`` settles them (COMPLETED removes them, RELEASE gives
them back, a system action takes them over); see "Receive modes" in ``docs/design.md``.

A receipt is written as the Avro single-object encoding of ``kmq.Receipt``
(``schemas/receipt.avsc``; framing in ``schemas/README.md``). Version 2 added ``lease_ms``; a
receipt without a lease is still written with the version 1 schema, so that processes of the
previous kmq version keep reading receipts of queues nobody locks. Pure Python, no I/O.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from facade.model import avro as _avro
from facade.errors import EnvelopeError, InvalidParameter

__all__ = [
    "FIRST_OF_ACTIONS",
    "LOCK_ACTIONS",
    "RECEIPT_SCHEMA_NAME",
    "RECEIPT_VERSION",
    "SYSTEM_ACTIONS",
    "Receipt",
    "ReceiptAction",
    "decode_receipt",
    "encode_receipt",
    "make_claimant",
    "new_claim",
]

RECEIPT_SCHEMA_NAME = "kmq.Receipt"
_RECEIPT = _avro.family("receipt.avsc")
#: Version of the receipt schema this module writes for receipts with a lease (``kmq.version``
#: in the .avsc); the others are written with version 1 (see :func:`encode_receipt`).
RECEIPT_VERSION: int = _RECEIPT.current.version or 1
_RECEIPT_V1 = _RECEIPT.version(1)

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# Latest instant a Python datetime can represent: readers that turn timestamp-millis into a
# datetime (fastavro by default) can read every receipt.
_MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_MAX_TEXT = 1024  # characters; receipts are small bookkeeping records, not payload carriers


class ReceiptAction(IntEnum):
    """What a receipt does to the offsets it names.

    Values are Avro ``int``\\ s, not an Avro enum, and numbers from 11 on are free for later
    actions. A reader that meets a number it does not know still gets a member (named
    ``UNKNOWN_<n>``) and applies it as a removal of its ``offsets`` (plus ``purge_below``), so it
    never hands out what a newer process claimed. (Such a reader treats a LOCK as a removal for
    good and never sees a released message again: every process that receives from a queue
    must know LOCK, RELEASE and PREFETCH before anyone locks on it.)

    Attributes:
        RECEIVE: a destructive receive (MQReceiveMessage, by position, id, correlation id or
            lookup id): the claimant hands the message to its application.
        PURGE: MQPurgeQueue: removes every offset below ``purge_below``.
        EXPIRE: time-to-be-received elapsed: the claimant dead-letters the message
            (NACK_RECEIVE_TIMEOUT). A system action: completed by a COMPLETED receipt.
        MOVE: MQMoveMessage to a subqueue (``target``). A system action.
        REJECT: the message is refused (e.g. access or format checks), dead-lettered with a
            NACK. A system action.
        POISON: the record is not a valid kmq message; it is copied to a dead-letter topic.
            A system action.
        COMPLETED: bookkeeping: the outputs of the system claim ``completes`` are written.
            When ``completes`` names a LOCK or PREFETCH instead, it removes for good the offsets
            it names (none named: all) that the lock still holds: the holder completed a
            peek-lock receive (MSMQ: the receive's transaction committed).
        LOCK: a peek-lock receive: takes pending offsets like RECEIVE, but only holds them
            under a lease of ``lease_ms`` (the message is locked, as under an uncommitted
            transactional receive). Settled by COMPLETED, RELEASE or a system action naming it
            in ``completes``.
        RELEASE: gives back the offsets it names (none named: all) that the lock ``completes``
            still holds: they are pending again, in their place in receive order, with their
            abort count (PROPID_M_ABORT_COUNT) raised by one (MSMQ: the transaction aborted).
            Written by the holder (abandon, clean close) or by anyone once the lease passed.
        PREFETCH: a LOCK taken by a prefetching handle, which hands the messages out at most
            once from memory: a RELEASE of it does not raise the abort count (released
            messages were never handed out), and when its lease passes it is settled by a
            REJECT that dead-letters what it still holds (it may have been handed out).
        RECEIVE_FIRST: a destructive receive by position (MQReceiveMessage of the current
            head) that names the claimant's first candidates in receive order and takes
            exactly one: the first of them still pending when the receipt is applied. Receivers
            that compete for one queue all see the same head; with RECEIVE, all but one claim
            on it lose and try again, with RECEIVE_FIRST each gets the head as of its place in
            the log, which is MSMQ's "a receive takes the current head" decided by the log.
            (A reader older than this action applies it as a removal of every offset it
            names: it never hands out a message twice, but does not see the others until it is
            upgraded, so every process that receives from a queue must know it.)
        LOCK_FIRST: a peek-lock receive of the current head (``receive(lock=True)`` and
            transactional receive): a LOCK that names the claimant's first candidates in
            receive order and holds exactly one, the first still pending when the receipt is
            applied, as RECEIVE_FIRST does for RECEIVE. Settled like a LOCK. (An older reader
            takes it as a removal of every offset it names, see RECEIVE_FIRST.)

    Why completion reuses COMPLETED rather than a new action: a lock is a claim whose outcome
    is pending, like a system claim waiting for its outputs, and COMPLETED already means "the
    claim named in ``completes`` is finished"; one settle rule ("a receipt naming a lock in
    ``completes`` settles the offsets that lock still holds; the first to do so wins them")
    then covers the holder's COMPLETED, anyone's RELEASE and a dead-lettering REJECT alike, and
    a COMPLETED naming a system claim means the same: that claim is finished.
    """

    RECEIVE = 1
    PURGE = 2
    EXPIRE = 3
    MOVE = 4
    REJECT = 5
    POISON = 6
    COMPLETED = 7
    LOCK = 8
    RELEASE = 9
    PREFETCH = 10
    RECEIVE_FIRST = 11
    LOCK_FIRST = 12

    @classmethod
    def _missing_(cls, value: object) -> ReceiptAction | None:
        # Forward compatibility: a positive Avro int from a newer writer becomes a pseudo-member
        # instead of failing the decode (which would make this process skip the receipt and
        # disagree with newer processes about which offsets are removed).
        if type(value) is int and 0 < value <= _INT32_MAX:
            member = int.__new__(cls, value)
            member._name_ = f"UNKNOWN_{value}"
            member._value_ = value
            return member
        return None

    @property
    def is_known(self) -> bool:
        """bool: True for the actions this kmq version defines."""
        return self._name_ in type(self).__members__

    @property
    def is_system(self) -> bool:
        """bool: True for EXPIRE, MOVE, REJECT and POISON, which a COMPLETED receipt completes."""
        return self in SYSTEM_ACTIONS

    @property
    def is_lock(self) -> bool:
        """bool: True for LOCK, LOCK_FIRST and PREFETCH, which hold offsets under a lease."""
        return self in LOCK_ACTIONS


#: Actions whose outputs (DLQ copy, NACK, subqueue copy) are written after the claim and
#: confirmed by a COMPLETED receipt; recovery redoes the ones left without it.
SYSTEM_ACTIONS = frozenset(
    {ReceiptAction.EXPIRE, ReceiptAction.MOVE, ReceiptAction.REJECT, ReceiptAction.POISON}
)
#: Actions that hold offsets under a lease until a receipt naming them in ``completes``
#: settles them.
LOCK_ACTIONS = frozenset({ReceiptAction.LOCK, ReceiptAction.PREFETCH, ReceiptAction.LOCK_FIRST})
#: Actions that take only the first offset they name that is still pending.
FIRST_OF_ACTIONS = frozenset({ReceiptAction.RECEIVE_FIRST, ReceiptAction.LOCK_FIRST})
# Known actions that take named offsets and must therefore name at least one.
_OFFSET_ACTIONS = SYSTEM_ACTIONS | LOCK_ACTIONS | {ReceiptAction.RECEIVE,
                                                  ReceiptAction.RECEIVE_FIRST}
# Known actions that may name a lock in ``completes`` (RELEASE and COMPLETED must name one).
_SETTLE_ACTIONS = SYSTEM_ACTIONS | {ReceiptAction.COMPLETED, ReceiptAction.RELEASE}


@dataclass(frozen=True, slots=True)
class Receipt:
    """One record of a receipts topic: a claim on data offsets, a purge, a lock, or a receipt
    that completes a claim or settles a lock.

    Args:
        claim_id (str): unique id of this receipt, 32 lowercase hex digits of a random UUID
            (:func:`new_claim` makes one).
        action (ReceiptAction | int): what the receipt does.
        offsets (Iterable[int]): data-topic offsets (lookup ids) claimed, each >= 0; stored as a
            tuple in the given order. At least one for RECEIVE, EXPIRE, MOVE, REJECT, POISON,
            LOCK and PREFETCH. COMPLETED and RELEASE naming a lock: the offsets they settle
            (empty = every offset the lock still holds); COMPLETED of a system claim: none.
        purge_below (int | None): PURGE only (required there): every data offset < this is
            removed, including offsets not written yet.
        claimant (str): who wrote it (queue manager, pid, random suffix), for diagnostics.
        time_ms (int): when it was written, epoch milliseconds (up to year 9999).
        transaction_id (str | None): the transaction the claim belongs to, if any.
        completes (str | None): COMPLETED and RELEASE (required there): the id of the claim
            they complete or the lock they settle; EXPIRE, MOVE, REJECT, POISON (optional): the
            lock whose offsets they take over. Not allowed on other actions.
        target (str | None): MOVE (required): the subqueue name; EXPIRE/REJECT/POISON: the
            dead-letter topic the records go to.
        reason (str | None): optional human-readable reason.
        lease_ms (int | None): LOCK, LOCK_FIRST and PREFETCH (required there, >= 1): the lease in
            milliseconds, counted from ``time_ms``; not allowed on other actions.

    Raises:
        InvalidParameter: a field is out of range or not allowed for the action; the message
            names the field.
    """

    claim_id: str
    action: ReceiptAction
    offsets: tuple[int, ...] = ()
    purge_below: int | None = None
    claimant: str = ""
    time_ms: int = 0
    transaction_id: str | None = None
    completes: str | None = None
    target: str | None = None
    reason: str | None = None
    lease_ms: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", _coerce_action(self.action))
        object.__setattr__(self, "offsets", _coerce_offsets(self.offsets))
        _check_text(self.claim_id, "claim_id", optional=False)
        _check_text(self.claimant, "claimant", optional=False, allow_empty=True)
        for name in ("transaction_id", "completes", "target", "reason"):
            _check_text(getattr(self, name), name, optional=True)
        _check_long(self.time_ms, "time_ms", _MAX_TIME_MS)
        if self.purge_below is not None:
            _check_long(self.purge_below, "purge_below")
        if self.lease_ms is not None:
            _check_long(self.lease_ms, "lease_ms", minimum=1)
        if self.action.is_known:
            self._check_action_fields()

    def _check_action_fields(self) -> None:
        """Reject field combinations the action does not allow (known actions only)."""
        action = self.action
        if action is ReceiptAction.PURGE and self.purge_below is None:
            raise _invalid("a PURGE receipt needs purge_below (the first offset it keeps)")
        if action is not ReceiptAction.PURGE and self.purge_below is not None:
            raise _invalid(f"purge_below is only allowed on PURGE receipts, not {action.name}")
        if action in _OFFSET_ACTIONS and not self.offsets:
            raise _invalid(f"a {action.name} receipt must name at least one offset")
        if action in (ReceiptAction.COMPLETED, ReceiptAction.RELEASE) and not self.completes:
            raise _invalid(f"a {action.name} receipt needs completes (the claim_id it "
                           "completes or the lock it settles)")
        if action not in _SETTLE_ACTIONS and self.completes is not None:
            raise _invalid(f"completes is not allowed on {action.name} receipts")
        if action.is_lock and self.lease_ms is None:
            raise _invalid(f"a {action.name} receipt needs lease_ms (the lease in milliseconds)")
        if not action.is_lock and self.lease_ms is not None:
            raise _invalid(f"lease_ms is only allowed on LOCK, LOCK_FIRST and PREFETCH receipts, not "
                           f"{action.name}")
        if action is ReceiptAction.MOVE and not self.target:
            raise _invalid("a MOVE receipt needs target (the subqueue name)")


def _invalid(text: str) -> InvalidParameter:
    return InvalidParameter(f"invalid receipt: {text}")


def _coerce_action(value: object) -> ReceiptAction:
    if isinstance(value, ReceiptAction):
        return value
    try:
        if type(value) is not int:
            raise ValueError
        return ReceiptAction(value)
    except ValueError:
        raise _invalid(
            f"action must be a ReceiptAction or an int 1-{_INT32_MAX}, got {value!r}"
        ) from None


def _coerce_offsets(value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise _invalid(f"offsets must be a sequence of ints, got {type(value).__name__}")
    offsets = tuple(value)
    for offset in offsets:
        _check_long(offset, "offsets")
    return offsets


def _check_long(value: object, name: str, maximum: int = _INT64_MAX, minimum: int = 0) -> None:
    if type(value) is not int or not minimum <= value <= maximum:
        raise _invalid(f"{name} must be an int {minimum}-{maximum}, got {value!r}")


def _check_text(value: object, name: str, *, optional: bool, allow_empty: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise _invalid(f"{name} must be a str, got {type(value).__name__}")
    if not value and not allow_empty:
        raise _invalid(f"{name} must not be empty (use None for no value)")
    if len(value) > _MAX_TEXT:
        raise _invalid(f"{name} is {len(value)} characters, at most {_MAX_TEXT} allowed")


def make_claimant(queue_manager: str) -> str:
    """Return a claimant label for this process: ``<queue manager>:<pid>:<8 hex digits>``.

    The random part tells apart processes that reuse a pid (containers, restarts).

    Args:
        queue_manager (str): the queue manager name (MSMQ machine name).

    Returns:
        str: the label, for the ``claimant`` field (diagnostics only, never compared).
    """
    return f"{queue_manager}:{os.getpid()}:{secrets.token_hex(4)}"


def new_claim(
    action: ReceiptAction | int,
    offsets: Iterable[int],
    claimant: str,
    **kw: Any,
) -> Receipt:
    """Build a receipt with a fresh ``claim_id`` and the current time.

    Args:
        action (ReceiptAction | int): what the receipt does.
        offsets (Iterable[int]): data offsets claimed (empty for PURGE and COMPLETED).
        claimant (str): see :func:`make_claimant`.
        **kw: the other :class:`Receipt` fields (``purge_below``, ``transaction_id``,
            ``completes``, ``target``, ``reason``, ``lease_ms``, or ``time_ms`` to override the
            clock).

    Returns:
        Receipt: the receipt, ready for :func:`encode_receipt`.

    Raises:
        InvalidParameter: a field is invalid for the action.
    """
    kw.setdefault("time_ms", time.time_ns() // 1_000_000)
    claim_id = uuid.uuid4().hex
    return Receipt(claim_id, action, tuple(offsets), claimant=claimant, **kw)  # type: ignore[arg-type]


def encode_receipt(receipt: Receipt) -> bytes:
    """Encode a receipt as the value of a receipts-topic record.

    Args:
        receipt (Receipt): the receipt (validated when it was built).

    A receipt without ``lease_ms`` is written with the version 1 schema, which carries all
    of its fields, so processes that only know version 1 still read it; a receipt with a lease
    (LOCK, PREFETCH) needs version 2.

    Returns:
        bytes: the Avro single-object encoding of ``kmq.Receipt``.

    Raises:
        InvalidParameter: ``receipt`` is not a Receipt, or holds text that is not UTF-8
            (unpaired surrogates).
    """
    if not isinstance(receipt, Receipt):
        raise InvalidParameter(f"expected a Receipt, got {type(receipt).__name__}")
    record = {
        "claim_id": receipt.claim_id,
        "action": int(receipt.action),
        "offsets": list(receipt.offsets),
        "purge_below": receipt.purge_below,
        "claimant": receipt.claimant,
        "time": receipt.time_ms,
        "transaction_id": receipt.transaction_id,
        "completes": receipt.completes,
        "target": receipt.target,
        "reason": receipt.reason,
    }
    writer = _RECEIPT_V1
    if receipt.lease_ms is not None:
        record["lease_ms"] = receipt.lease_ms
        writer = _RECEIPT.current
    try:
        return _RECEIPT.encode(record, writer)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidParameter(
            f"receipt cannot be encoded: {type(exc).__name__}: {exc}",
            hint="check the text fields for unpaired surrogate characters",
        ) from exc


def decode_receipt(
    value: bytes,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> Receipt:
    """Decode the value of a receipts-topic record.

    Args:
        value (bytes): the record value.
        topic (str | None): the receipts topic, copied into the error.
        partition (int | None): its partition, copied into the error.
        offset (int | None): the record's offset, copied into the error.

    Returns:
        Receipt: the receipt. An action number this version does not know gives an
        ``UNKNOWN_<n>`` member (see :class:`ReceiptAction`).

    Raises:
        EnvelopeError: the value is not a valid ``kmq.Receipt`` (wrong marker, unknown writer
            schema, malformed Avro, or a field out of range). Nothing else escapes.
    """
    try:
        r = _RECEIPT.decode(value)
        return Receipt(
            claim_id=r["claim_id"],
            action=r["action"],
            offsets=tuple(r["offsets"]),
            purge_below=r["purge_below"],
            claimant=r["claimant"],
            time_ms=r["time"],  # epoch ms: the family reads timestamp-millis as its long
            transaction_id=r["transaction_id"],
            completes=r["completes"],
            target=r["target"],
            reason=r["reason"],
            lease_ms=r["lease_ms"],
        )
    except _avro.DecodeFailure as exc:
        raise _receipt_error(str(exc), value, topic, partition, offset) from exc
    except InvalidParameter as exc:
        raise _receipt_error(exc.message, value, topic, partition, offset) from exc
    except Exception as exc:  # noqa: BLE001 - the contract is: only EnvelopeError escapes
        raise _receipt_error(
            f"receipt cannot be converted ({type(exc).__name__}: {exc})",
            value,
            topic,
            partition,
            offset,
        ) from exc


def _receipt_error(
    reason: str, value: object, topic: str | None, partition: int | None, offset: int | None
) -> EnvelopeError:
    raw = bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None
    where = f" at offset {offset}" if offset is not None and not topic else ""
    return EnvelopeError(
        f"not a valid kmq receipt{where}: {reason}",
        topic=topic,
        partition=partition,
        offset=offset,
        raw=raw,
        hint="the receipts topic holds a record kmq did not write; it is skipped by every "
        "process alike, so arbitration stays consistent",
    )
