"""Receipts: the records of a queue's receipts topic, and their Avro encoding.

Kafka cannot delete one record, so kmq removes a message from a queue by appending a receipt
to the queue's receipts topic (``<queue topic>.receipts``, one partition). The topic's single
total order arbitrates between processes: the **first** receipt that names a data offset
removes it, every later receipt that names it loses it (see ``docs/design.md``, "Destructive
receive shared across processes: receipts", and :mod:`facade.queuestate`, which applies them).

A receipt is written as the Avro single-object encoding of ``kmq.Receipt``
(``schemas/receipt.avsc``; framing in ``schemas/README.md``). Pure Python, no I/O.
"""

from __future__ import annotations

import datetime as _dt
import os
import secrets
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from facade import avro as _avro
from facade.errors import EnvelopeError, InvalidParameter

__all__ = [
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
#: Version of the receipt schema this module writes (``kmq.version`` in the .avsc).
RECEIPT_VERSION: int = _RECEIPT.current.version or 1

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# Latest instant Python's datetime (and so fastavro's timestamp-millis reader) can represent.
_MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_MAX_TEXT = 1024  # characters; receipts are small bookkeeping records, not payload carriers
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_MS = _dt.timedelta(milliseconds=1)


class ReceiptAction(IntEnum):
    """What a receipt does to the offsets it names.

    Values are Avro ``int``\\ s, not an Avro enum, and numbers from 8 on are free for later
    actions. A reader that meets a number it does not know still gets a member (named
    ``UNKNOWN_<n>``): the removal rule only looks at ``offsets`` and ``purge_below``, so an older
    process keeps arbitrating exactly like a newer one.

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
    """

    RECEIVE = 1
    PURGE = 2
    EXPIRE = 3
    MOVE = 4
    REJECT = 5
    POISON = 6
    COMPLETED = 7

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


#: Actions whose outputs (DLQ copy, NACK, subqueue copy) are written after the claim and
#: confirmed by a COMPLETED receipt; recovery redoes the ones left without it.
SYSTEM_ACTIONS = frozenset(
    {ReceiptAction.EXPIRE, ReceiptAction.MOVE, ReceiptAction.REJECT, ReceiptAction.POISON}
)
# Known actions that remove named offsets and must therefore name at least one.
_OFFSET_ACTIONS = SYSTEM_ACTIONS | {ReceiptAction.RECEIVE}


@dataclass(frozen=True, slots=True)
class Receipt:
    """One record of a receipts topic: a claim on data offsets, a purge, or a completion.

    Args:
        claim_id (str): unique id of this receipt, 32 lowercase hex digits of a random UUID
            (:func:`new_claim` makes one).
        action (ReceiptAction | int): what the receipt does.
        offsets (Iterable[int]): data-topic offsets (lookup ids) claimed, each >= 0; stored as a
            tuple in the given order. At least one for RECEIVE, EXPIRE, MOVE, REJECT and POISON;
            none for COMPLETED.
        purge_below (int | None): PURGE only (required there): every data offset < this is
            removed, including offsets not written yet.
        claimant (str): who wrote it (queue manager, pid, random suffix), for diagnostics.
        time_ms (int): when it was written, epoch milliseconds (up to year 9999).
        transaction_id (str | None): the transaction the claim belongs to, if any.
        completes (str | None): COMPLETED only (required there): the completed claim's id.
        target (str | None): MOVE (required): the subqueue name; EXPIRE/REJECT/POISON: the
            dead-letter topic the records go to.
        reason (str | None): optional human-readable reason.

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
        if action is ReceiptAction.COMPLETED:
            if not self.completes:
                raise _invalid("a COMPLETED receipt needs completes (the completed claim_id)")
            if self.offsets:
                raise _invalid("a COMPLETED receipt names no offsets; it only completes a claim")
        elif self.completes is not None:
            raise _invalid(f"completes is only allowed on COMPLETED receipts, not {action.name}")
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


def _check_long(value: object, name: str, maximum: int = _INT64_MAX) -> None:
    if type(value) is not int or not 0 <= value <= maximum:
        raise _invalid(f"{name} must be an int 0-{maximum}, got {value!r}")


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
            ``completes``, ``target``, ``reason``, or ``time_ms`` to override the clock).

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
    try:
        return _RECEIPT.encode(record)
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
            time_ms=_to_ms(r["time"]),
            transaction_id=r["transaction_id"],
            completes=r["completes"],
            target=r["target"],
            reason=r["reason"],
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


def _to_ms(value: object) -> int:
    # fastavro turns timestamp-millis into an aware datetime; integer arithmetic keeps exact ms.
    if isinstance(value, _dt.datetime):
        return (value - _EPOCH) // _ONE_MS
    if type(value) is int:
        return value
    raise TypeError(f"time is a {type(value).__name__}")


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
