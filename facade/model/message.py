r"""The kmq message model: MSMQ message properties in Python form.

A :class:`Message` carries every MSMQ message property (``PROPID_M_*``) an application can set or
read, with Python types instead of MSMQ's VARIANTs:

* durations are ``float`` seconds and ``None`` means "forever" (never ``-1``);
* instants are timezone-aware :class:`datetime.datetime` (kmq returns them in UTC);
* format names (admin, response, destination, dead-letter queues) are plain ``str`` in canonical
  format-name text; the queue manager parses and checks them at send time;
* MSMQ enumerations are :class:`enum.IntEnum` / :class:`enum.IntFlag` with the MSMQ values, so
  ``int(message.delivery)`` is what MSMQ's ``PROPID_M_DELIVERY`` would hold.

Each property is declared once, at its field (:func:`facade.model.propertyspec.declare`): its
PROPID, its check, its Avro envelope field and its Spark columns. The checks here, the envelope
mapping (:mod:`facade.model.envelope`) and the Spark schema (:mod:`spark_connector.schema`) are derived
from those declarations; a new property is added by declaring one field.

The wire form of a message (the Avro envelope in a Kafka record) lives in :mod:`facade.model.envelope`;
this module has no Kafka or Avro dependency (the declarations name Avro types as plain data).

Example::

    request = Message(body=b"order 42", label="order",
                      response_queue=r"DIRECT=OS:.\private$\replies",
                      acknowledge=Acknowledgment.FULL_RECEIVE, time_to_be_received=30.0)
    reply = Message(body=b"ok", correlation_id=request.id)
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import operator
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from enum import IntEnum, IntFlag
from typing import Any, ClassVar, TypeVar, cast

from facade.errors import InvalidParameter, TransactionUsage
from facade.model.propertyspec import (
    AvroField,
    CheckFactory,
    SparkColumn,
    SparkInput,
    declare,
    specs,
)
from facade.model.timers import TIME_TO_BE_RECEIVED, TIME_TO_REACH_QUEUE, TIMER_RANGES

__all__ = [
    "SECURITY_PROPERTIES",
    "check_body_size",
    "check_enforceable",
    "unsupported_security",
    "DEFAULT_PRIORITY",
    "MAX_BODY_BYTES",
    "MAX_LABEL_LENGTH",
    "AcknowledgedQueue",
    "Acknowledgment",
    "AcknowledgmentInfo",
    "AuthLevel",
    "BodyType",
    "Delivery",
    "EncryptionAlgorithm",
    "HashAlgorithm",
    "JournalLevel",
    "Message",
    "MessageClass",
    "MessageId",
    "PrivacyLevel",
    "SenderIdType",
    "combine_acknowledgments",
]

#: PROPID_M_PRIORITY default (MSMQ's MQ_DEFAULT_PRIORITY).
DEFAULT_PRIORITY = 3
#: Lowest and highest PROPID_M_PRIORITY.
MIN_PRIORITY, MAX_PRIORITY = 0, 7
#: PROPID_M_LABEL limit in characters (MQ_MAX_MSG_LABEL_LEN).
MAX_LABEL_LENGTH = 250
#: PROPID_M_BODY limit in bytes: MSMQ's 4 MB (4 MiB), the largest body a send accepts
#: (:func:`check_body_size`). Not a limit of the model: a NACK returns the body it reports
#: with its own payload, so messages the queue manager writes may hold more.
MAX_BODY_BYTES = 4 * 1024 * 1024

_UINT32_MAX = 0xFFFFFFFF
_UINT64_MAX = 0xFFFFFFFFFFFFFFFF
#: The timer properties' ranges (facade.model.timers), which :meth:`Message._normalize` and the
#: field checks apply.
_TIMER_LIST = (TIME_TO_BE_RECEIVED, TIME_TO_REACH_QUEUE)


# --------------------------------------------------------------------------------------------
# Message id
# --------------------------------------------------------------------------------------------

_MESSAGE_ID_TEXT = re.compile(
    r"\{?([0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})\}?"
    r"\\([0-9]{1,10})"
)


class _SequenceCounter:
    """Process-wide source of 32-bit message-id sequence numbers.

    The counter starts at the current time in milliseconds modulo 2**32 rather than 0 so that a
    restarted process does not hand out the ids of the previous run again (see
    :meth:`MessageId.new` for the exact guarantee). It is reseeded in a forked child so parent and
    child do not continue from the same value.
    """

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        """Restart from the current time; also gives a forked child a lock nobody holds."""
        self._lock = threading.Lock()
        self._count = itertools.count(time.time_ns() // 1_000_000)

    def next(self) -> int:
        # next() on itertools.count is atomic under the GIL; the lock keeps it so without one.
        with self._lock:
            return next(self._count) & _UINT32_MAX


_SEQUENCE = _SequenceCounter()
if hasattr(os, "register_at_fork"):  # pragma: no branch - always true on POSIX
    os.register_at_fork(after_in_child=_SEQUENCE.reseed)


# A queue manager stamps its one GUID on every message id: its text and Windows byte order are
# computed once, not per message (uuid.UUID computes both in Python each time).
#: ``str(guid)``, memoised (the canonical lowercase 8-4-4-4-12 text).
guid_text = functools.lru_cache(maxsize=256)(str)


@functools.lru_cache(maxsize=256)
def _guid_bytes_le(guid: uuid.UUID) -> bytes:
    return guid.bytes_le


#: The GUID of a message id's first 16 bytes, memoised the same way for the receive side:
#: the ids a queue holds come from few sending queue managers.
_guid_from_bytes_le = functools.lru_cache(maxsize=256)(lambda data: uuid.UUID(bytes_le=data))


@dataclass(frozen=True, slots=True)
class MessageId:
    r"""An MSMQ message id (PROPID_M_MSGID), also used for correlation ids (PROPID_M_CORRELATIONID).

    MSMQ's 20-byte MSGID is the 16-byte GUID of the sending queue manager, in Windows GUID byte
    order (``uuid.UUID.bytes_le``), followed by a 4-byte little-endian sequence number. Its text
    form is ``guid\sequence`` with a lowercase GUID and a decimal sequence, e.g.
    ``ae0c5671-f190-12ce-ae10-00dd0114290f\12345``.

    Args:
        machine_guid (uuid.UUID): GUID of the sending queue manager.
        sequence (int): sequence number, 0 to 2**32-1.

    Raises:
        InvalidParameter: ``machine_guid`` is not a UUID or ``sequence`` is outside 0 to 2**32-1;
            pass a :class:`uuid.UUID` and a 32-bit unsigned int.
    """

    machine_guid: uuid.UUID
    sequence: int

    #: Size of the binary form in bytes (PROPID_M_MSGID_SIZE).
    SIZE: ClassVar[int] = 20

    def __post_init__(self) -> None:
        if not isinstance(self.machine_guid, uuid.UUID):
            raise InvalidParameter(
                "message id machine_guid must be a uuid.UUID, "
                f"got {type(self.machine_guid).__name__}",
                hint="pass uuid.UUID('...'), or use MessageId.parse() for 'guid\\seq' text",
            )
        seq = self.sequence
        if type(seq) is not int or not 0 <= seq <= _UINT32_MAX:
            raise InvalidParameter(
                f"message id sequence must be an int 0-{_UINT32_MAX} (4 bytes unsigned), "
                f"got {seq!r}"
            )

    @classmethod
    def new(cls, machine_guid: uuid.UUID) -> MessageId:
        """Return a new id for a message built outside a queue manager (tests, offline tools,
        the README's example); a queue manager assigns ids itself, at send.

        Why two allocators: a :class:`facade.manager.QueueManager` draws ids from its
        :class:`facade.state.sequence.MessageIdAllocator`, which leases blocks of sequence numbers on
        a Kafka topic so that every process and host sharing the queue manager's GUID gets
        unique ids. That needs a broker; this method needs nothing and guarantees less (below),
        which is enough for a message that no queue manager sends, or that one re-stamps.

        Sequence numbers come from one thread-safe, process-wide counter that starts at the
        current Unix time in milliseconds modulo 2**32 (MSMQ uses the queue manager GUID plus a
        persistent counter; kmq has no persistent state here). What that guarantees:

        * within one process, ids are unique until 2**32 ids have been drawn (the sequence then
          wraps, as MSMQ's 32-bit sequence does);
        * a restarted process reuses no id of an earlier run with the same GUID if that run drew
          fewer ids than the milliseconds it lived (under 1,000 ids per second on average) and
          the counter has not gone round since that run started (2**32 ms, about 49.7 days, at
          that rate).

        Several live processes that share one GUID (workers, forked children, which reseed
        from the clock) can draw the same sequence: give each process its own queue manager
        GUID when ids must be unique across them.

        Args:
            machine_guid (uuid.UUID): GUID of the sending queue manager (PROPID_M_SRC_MACHINE_ID).

        Returns:
            MessageId: a fresh id.
        """
        return cls(machine_guid, _SEQUENCE.next())

    def to_bytes(self) -> bytes:
        """Return the 20-byte MSMQ binary form (GUID ``bytes_le`` + sequence little-endian)."""
        return _guid_bytes_le(self.machine_guid) + self.sequence.to_bytes(4, "little")

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> MessageId:
        """Parse the 20-byte MSMQ binary form.

        Args:
            data (bytes): exactly 20 bytes.

        Returns:
            MessageId: the id.

        Raises:
            InvalidParameter: ``data`` is not 20 bytes; pass the value of PROPID_M_MSGID or
                :meth:`to_bytes`.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) != cls.SIZE:
            got = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else type(data)
            raise InvalidParameter(
                f"a message id is {cls.SIZE} bytes (16-byte GUID + 4-byte sequence), got {got!r}"
            )
        data = bytes(data)
        return cls(_guid_from_bytes_le(data[:16]), int.from_bytes(data[16:], "little"))

    @classmethod
    def parse(cls, text: str) -> MessageId:
        r"""Parse the text form ``guid\sequence``.

        Args:
            text (str): e.g. ``ae0c5671-f190-12ce-ae10-00dd0114290f\12345``; the GUID may be
                upper case or in braces.

        Returns:
            MessageId: the id.

        Raises:
            InvalidParameter: ``text`` is not of that form or the sequence exceeds 2**32-1.
        """
        match = _MESSAGE_ID_TEXT.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise InvalidParameter(
                f"message id {text!r} is not of the form 'guid\\sequence'",
                hint="write e.g. 'ae0c5671-f190-12ce-ae10-00dd0114290f\\12345' "
                "(36-character GUID, a backslash, a decimal sequence 0-4294967295)",
            )
        return cls(uuid.UUID(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{guid_text(self.machine_guid)}\\{self.sequence}"


# --------------------------------------------------------------------------------------------
# MSMQ enumerations
# --------------------------------------------------------------------------------------------

_NACK_BIT = 0x8000
_RECEIVE_BIT = 0x4000


class MessageClass(IntEnum):
    """PROPID_M_CLASS: MQMSG_CLASS_* values.

    The 16-bit class has the NACK flag in bit 15 and the receive-phase flag in bit 14; the low
    bits are the class code.
    """

    NORMAL = 0x0000
    REPORT = 0x0001
    ACK_REACH_QUEUE = 0x0002
    ACK_RECEIVE = 0x4000
    NACK_BAD_DST_Q = 0x8000
    NACK_PURGED = 0x8001
    NACK_REACH_QUEUE_TIMEOUT = 0x8002
    NACK_Q_EXCEED_QUOTA = 0x8003
    NACK_ACCESS_DENIED = 0x8004
    NACK_HOP_COUNT_EXCEEDED = 0x8005
    NACK_BAD_SIGNATURE = 0x8006
    NACK_BAD_ENCRYPTION = 0x8007
    NACK_COULD_NOT_ENCRYPT = 0x8008
    NACK_NOT_TRANSACTIONAL_Q = 0x8009
    NACK_NOT_TRANSACTIONAL_MSG = 0x800A
    NACK_UNSUPPORTED_CRYPTO_PROVIDER = 0x800B
    NACK_SOURCE_COMPUTER_GUID_CHANGED = 0x800C
    NACK_MESSAGE_TOO_LARGE = 0x800D
    NACK_Q_DELETED = 0xC000
    NACK_Q_PURGED = 0xC001
    NACK_RECEIVE_TIMEOUT = 0xC002
    NACK_RECEIVE_TIMEOUT_AT_SENDER = 0xC003
    NACK_RECEIVE_REJECTED = 0xC004

    @property
    def is_nack(self) -> bool:
        """True for negative acknowledgments (bit 15, MQCLASS_NACK)."""
        return bool(self.value & _NACK_BIT)

    @property
    def is_receive_phase(self) -> bool:
        """True for acknowledgments about the receive phase (bit 14, MQCLASS_RECEIVE)."""
        return bool(self.value & _RECEIVE_BIT)

    @property
    def is_ack(self) -> bool:
        """True for positive acknowledgments (ACK_REACH_QUEUE, ACK_RECEIVE)."""
        return self is MessageClass.ACK_REACH_QUEUE or self is MessageClass.ACK_RECEIVE

    @property
    def is_acknowledgment(self) -> bool:
        """True for any ACK or NACK class (messages the queue manager sends to admin queues)."""
        return self.is_nack or self.is_ack


class Acknowledgment(IntFlag):
    """PROPID_M_ACKNOWLEDGE: which acknowledgments the sender wants in its admin queue."""

    NONE = 0x00
    POSITIVE_ARRIVAL = 0x01
    POSITIVE_RECEIVE = 0x02
    NEGATIVE_ARRIVAL = 0x04
    NEGATIVE_RECEIVE = 0x08
    #: MQMSG_ACKNOWLEDGMENT_NACK_REACH_QUEUE: NACK if the message cannot reach the queue.
    NACK_REACH_QUEUE = 0x04
    #: MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE: ACK or NACK on arrival.
    FULL_REACH_QUEUE = 0x05
    #: MQMSG_ACKNOWLEDGMENT_NACK_RECEIVE: NACK if not arrived or not received in time.
    NACK_RECEIVE = 0x0C
    #: MQMSG_ACKNOWLEDGMENT_FULL_RECEIVE: ACK on receive, NACK otherwise.
    FULL_RECEIVE = 0x0E


class JournalLevel(IntFlag):
    """PROPID_M_JOURNAL: source journaling and dead-lettering requested by the sender."""

    NONE = 0
    #: MQMSG_DEADLETTER: negative source journaling; expired/undeliverable goes to the DLQ.
    DEADLETTER = 1
    #: MQMSG_JOURNAL: positive source journaling; a copy goes to the sender's journal.
    JOURNAL = 2


class Delivery(IntEnum):
    """PROPID_M_DELIVERY."""

    #: MQMSG_DELIVERY_EXPRESS: kept in memory on the way (on Kafka: acks=1 is acceptable).
    EXPRESS = 0
    #: MQMSG_DELIVERY_RECOVERABLE: persisted at every hop (on Kafka: acks=all).
    RECOVERABLE = 1


class PrivacyLevel(IntEnum):
    """PROPID_M_PRIV_LEVEL: body encryption requested by the sender."""

    NONE = 0
    BODY_BASE = 1
    BODY_ENHANCED = 3
    BODY_AES = 5


class AuthLevel(IntEnum):
    """PROPID_M_AUTH_LEVEL: whether and how the message is signed."""

    NONE = 0
    ALWAYS = 1
    SIG10 = 2
    SIG20 = 4
    SIG30 = 8


class HashAlgorithm(IntEnum):
    """PROPID_M_HASH_ALG: CryptoAPI ALG_ID of the hash signed for authentication."""

    MD5 = 0x8003
    SHA1 = 0x8004
    SHA256 = 0x800C
    SHA384 = 0x800D
    SHA512 = 0x800E


class EncryptionAlgorithm(IntEnum):
    """PROPID_M_ENCRYPTION_ALG: CryptoAPI ALG_ID of the body cipher."""

    RC2 = 0x6602
    RC4 = 0x6801
    AES128 = 0x660E
    AES192 = 0x660F
    AES256 = 0x6610


class SenderIdType(IntEnum):
    """PROPID_M_SENDERID_TYPE."""

    NONE = 0
    SID = 1


class BodyType(IntEnum):
    """PROPID_M_BODY_TYPE: common VARTYPE tags (any 32-bit value is allowed in a message)."""

    #: VT_EMPTY: no type given (MSMQ's default); the body is opaque bytes.
    EMPTY = 0
    I2 = 2
    I4 = 3
    R4 = 4
    R8 = 5
    CY = 6
    DATE = 7
    #: VT_BSTR: text as sent by COM / ActiveXMessageFormatter.
    BSTR = 8
    BOOL = 11
    I1 = 16
    UI1 = 17
    UI2 = 18
    UI4 = 19
    I8 = 20
    UI8 = 21
    #: VT_LPSTR: 8-bit text.
    LPSTR = 0x1E
    #: VT_LPWSTR: UTF-16 text in MSMQ; kmq stores the text encoded as the application chooses.
    STRING = 0x1F
    STREAMED_OBJECT = 0x44
    STORED_OBJECT = 0x45
    #: VT_VECTOR | VT_UI1: a byte array (what the MSMQ C API sends).
    BYTES = 0x1011
    #: VT_ARRAY | VT_UI1: a byte array as sent by COM (SAFEARRAY).
    BYTE_ARRAY = 0x2011


# --------------------------------------------------------------------------------------------
# Validation helpers: each raises InvalidParameter naming the property and the allowed range.
# --------------------------------------------------------------------------------------------


def _invalid(name: str, propid: str, expected: str, value: object) -> InvalidParameter:
    shown = value if not isinstance(value, (bytes, bytearray)) else f"{len(value)} bytes"
    return InvalidParameter(
        f"message property {name} ({propid}) must be {expected}, got {shown!r}",
        hint=f"set {name} to {expected}",
    )


def _check_int(value: object, lo: int, hi: int, name: str, propid: str) -> None:
    # bool is an int subclass; True as a priority is almost certainly a bug.
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise _invalid(name, propid, f"an int {lo}-{hi}", value)


_E = TypeVar("_E", bound=IntEnum)
_F = TypeVar("_F", bound=IntFlag)


def _coerce_enum(enum_cls: type[_E], value: object, name: str, propid: str) -> _E:
    if type(value) is enum_cls:  # fast path: the common case on the hot path
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        # _value2member_map_ is the lookup Enum.__call__ does, without its overhead.
        member = enum_cls._value2member_map_.get(value)
        if member is not None:
            return cast(_E, member)
    allowed = ", ".join(f"{m.name} {m.value:#x}" for m in enum_cls)
    raise _invalid(name, propid, f"one of {enum_cls.__name__} ({allowed})", value)


def _flag_mask(flag_cls: type[IntFlag]) -> int:
    mask = 0
    for member in flag_cls:
        mask |= member.value
    return mask


_FLAG_MASKS: dict[type[IntFlag], int] = {}


def _coerce_flags(flag_cls: type[_F], value: object, name: str, propid: str) -> _F:
    mask = _FLAG_MASKS.get(flag_cls)
    if mask is None:
        mask = _FLAG_MASKS[flag_cls] = _flag_mask(flag_cls)
    if type(value) is flag_cls:  # fast path; _value_ avoids IntFlag's slow operators
        if not value._value_ & ~mask:
            return value
    elif (
        isinstance(value, int) and not isinstance(value, bool) and value >= 0 and not value & ~mask
    ):
        member = flag_cls._value2member_map_.get(value)
        return cast(_F, member) if member is not None else flag_cls(value)
    raise _invalid(name, propid, f"a combination of {flag_cls.__name__} flags (0-{mask:#x})", value)


def _timer_check(name: str, propid: str) -> Callable[[object], None]:
    """The check of a timer property (a :data:`facade.model.propertyspec.CheckFactory`)."""
    return TIMER_RANGES[name].check


def _check_instant(value: object, name: str, propid: str) -> None:
    if value is None:
        return
    if not isinstance(value, _dt.datetime) or value.utcoffset() is None:
        raise _invalid(name, propid, "None or a timezone-aware datetime (UTC)", value)


def _check_bytes(value: object, name: str, propid: str, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, bytes):
        raise _invalid(name, propid, "bytes" + (" or None" if optional else ""), value)


def _check_text(value: object, name: str, propid: str) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise _invalid(name, propid, "None or a non-empty str", value)


_MESSAGE_ID_FORMS = "None, a MessageId, 20 bytes or 'guid\\seq' text"


def _as_message_id(value: object, name: str, propid: str) -> MessageId | None:
    if value is None or isinstance(value, MessageId):
        return value
    try:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return MessageId.from_bytes(value)
        if isinstance(value, str):
            return MessageId.parse(value)
    except InvalidParameter as exc:
        raise _invalid(name, propid, _MESSAGE_ID_FORMS, value) from exc
    raise _invalid(name, propid, _MESSAGE_ID_FORMS, value)


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


# --------------------------------------------------------------------------------------------
# Check factories for the field declarations (facade.model.propertyspec.CheckFactory)
# --------------------------------------------------------------------------------------------


def _check_label(value: object, name: str, propid: str) -> None:
    if not isinstance(value, str) or len(value) > MAX_LABEL_LENGTH:
        raise _invalid(name, propid, f"a str of at most {MAX_LABEL_LENGTH} characters",
                       value if not isinstance(value, str) else f"{len(value)} characters")


def _check_bool(value: object, name: str, propid: str) -> None:
    if not isinstance(value, bool):
        raise _invalid(name, propid, "a bool", value)


def _check_lookup_id(value: object, name: str, propid: str) -> None:
    if value is not None:
        _check_int(value, 0, _UINT64_MAX, name, propid)


def _value_check(check: Callable[[object, str, str], None]) -> CheckFactory:
    """For a check taking (value, name, propid)."""
    return lambda name, propid: lambda v: check(v, name, propid)


def _int_check(lo: int, hi: int) -> CheckFactory:
    return lambda name, propid: lambda v: _check_int(v, lo, hi, name, propid)


def _bytes_check(*, optional: bool) -> CheckFactory:
    return lambda name, propid: lambda v: _check_bytes(v, name, propid, optional=optional)


def _instance_check(cls: type, expected: str) -> CheckFactory:
    def factory(name: str, propid: str) -> Callable[[object], None]:
        def check(value: object) -> None:
            if value is not None and not isinstance(value, cls):
                raise _invalid(name, propid, expected, value)
        return check
    return factory


def _enum_coercion(kind: type, name: str, propid: str) -> Callable[[object], object]:
    """The coercion (and check) of an enum-typed property: an int becomes the member.

    Raises:
        TypeError: ``kind`` is not an IntEnum or IntFlag (a declaration bug).
    """
    if issubclass(kind, IntFlag):
        flags: type[IntFlag] = kind
        return lambda v: _coerce_flags(flags, v, name, propid)
    if issubclass(kind, IntEnum):
        members: type[IntEnum] = kind
        return lambda v: _coerce_enum(members, v, name, propid)
    raise TypeError(f"{name}: enum= must be an IntEnum or IntFlag, got {kind!r}")


# Avro types the field declarations share (the .avsc spells them out; a unit test compares).
_MESSAGE_ID_AVRO = {"type": "fixed", "name": "MessageId", "size": 20}
_OPTIONAL_STRING = ["null", "string"]
_OPTIONAL_BYTES = ["null", "bytes"]
_OPTIONAL_LONG = ["null", "long"]
_OPTIONAL_INSTANT = ["null", {"type": "long", "logicalType": "timestamp-millis"}]


# --------------------------------------------------------------------------------------------
# Message
# --------------------------------------------------------------------------------------------


@dataclass(eq=True, repr=False)
class Message:
    r"""One MSMQ message: every PROPID_M_* property an application can set or read.

    Applications build and edit messages freely (like System.Messaging's ``Message``); values
    are checked when the message is created and again by :meth:`validate` when it is sent.
    Plain ints are accepted for the enum-typed properties and converted; a correlation id may be
    given as a :class:`MessageId`, its 20 raw bytes or its ``guid\seq`` text.

    Properties set by the queue manager (``id``, ``sent_time``, ``arrived_time``,
    ``source_machine_id``, ``destination_queue``, ``lookup_id``, ``authenticated``, ...) are
    ignored or overwritten at send.

    Attributes:
        body (bytes): PROPID_M_BODY, the payload: at most 4 MiB (:data:`MAX_BODY_BYTES`),
            MSMQ's limit, which every send enforces (:func:`check_body_size`: InvalidParameter
            before anything is stored). Default ``b""``.
        label (str): PROPID_M_LABEL, up to 250 characters. Default ``""``.
        body_type (int): PROPID_M_BODY_TYPE, a VARTYPE tag (:class:`BodyType` or any 32-bit
            value). Default ``BodyType.EMPTY`` (0, MSMQ's default).
        id (MessageId | None): PROPID_M_MSGID, assigned by send.
        correlation_id (MessageId | None): PROPID_M_CORRELATIONID; replies set it to the request's
            id, ACK/NACK messages carry the original message's id.
        priority (int): PROPID_M_PRIORITY, 0 (lowest) to 7 (highest), default 3. The queue
            manager forces 0 for transactional messages, as MSMQ does.
        delivery (Delivery): PROPID_M_DELIVERY, default EXPRESS.
        acknowledge (Acknowledgment): PROPID_M_ACKNOWLEDGE, default NONE; needs ``admin_queue``.
        admin_queue (str | None): PROPID_M_ADMIN_QUEUE, format name for ACK/NACK messages.
        response_queue (str | None): PROPID_M_RESP_FORMAT_NAME (PROPID_M_RESP_QUEUE), format name
            for replies; may be a multiple-element name.
        time_to_reach_queue (float | None): PROPID_M_TIME_TO_REACH_QUEUE in seconds, 0 to
            4294967293 (:data:`facade.model.timers.TIME_TO_REACH_QUEUE`); ``None`` = LONG_LIVED, the
            queue manager's default (4 days), also given as 4294967294 (LONG_LIVED) or
            4294967295 (INFINITE). 0: the copy gets one attempt to reach its queue.
        time_to_be_received (float | None): PROPID_M_TIME_TO_BE_RECEIVED in seconds counted
            from ``sent_time``, 0 to 4294967294 (:data:`facade.model.timers.TIME_TO_BE_RECEIVED`);
            ``None`` = INFINITE, also given as 4294967295. Takes precedence over TTRQ; 0
            expires the message as it is sent.
        not_before (datetime | None): kmq extension (timed dequeue): the message stays invisible
            to receivers until this instant. ``None`` = visible at once.
        journal (JournalLevel): PROPID_M_JOURNAL, default NONE.
        app_specific (int): PROPID_M_APPSPECIFIC, 0 to 2**32-1. Default 0.
        extension (bytes): PROPID_M_EXTENSION. Default ``b""``.
        message_class (MessageClass): PROPID_M_CLASS, default NORMAL; set by the queue manager on
            acknowledgments and dead-lettered messages.
        sent_time (datetime | None): PROPID_M_SENTTIME, set by send.
        arrived_time (datetime | None): PROPID_M_ARRIVEDTIME, set when the copy reaches its queue.
        source_machine_id (uuid.UUID | None): PROPID_M_SRC_MACHINE_ID, the sending queue manager.
        destination_queue (str | None): PROPID_M_DEST_QUEUE, format name of this copy's queue.
        destination_format_name (str | None): PROPID_M_DEST_FORMAT_NAME, the format name the
            sender used (maybe a DL= or multiple-element name).
        lookup_id (int | None): PROPID_M_LOOKUPID, per-queue 64-bit key assigned on arrival by
            the queue manager; not part of the envelope.
        sender_id (bytes | None): PROPID_M_SENDERID, the sender's security identifier.
        sender_id_type (SenderIdType): PROPID_M_SENDERID_TYPE, default NONE.
        transaction_id (str | None): PROPID_M_XACTID; ``None`` = not sent in a transaction.
        first_in_transaction (bool): PROPID_M_FIRST_IN_XACT.
        last_in_transaction (bool): PROPID_M_LAST_IN_XACT.
        auth_level (AuthLevel): PROPID_M_AUTH_LEVEL, default NONE.
        privacy_level (PrivacyLevel): PROPID_M_PRIV_LEVEL, default NONE.
        hash_algorithm (HashAlgorithm): PROPID_M_HASH_ALG, default SHA256 (MSMQ 5's default;
            MD5 and SHA1 are accepted for interoperability only).
        encryption_algorithm (EncryptionAlgorithm): PROPID_M_ENCRYPTION_ALG, default AES256
            (MSMQ's default is RC2, which kmq does not recommend).
        sender_certificate (bytes | None): PROPID_M_SENDER_CERT, X.509 certificate, DER.
        signature (bytes | None): PROPID_M_SIGNATURE.
        authenticated (bool): PROPID_M_AUTHENTICATED, set by the receiving side after it
            verified the signature; never taken from the wire (a sender could forge it).
        destination_symmetric_key (bytes | None): PROPID_M_DEST_SYMM_KEY, the body's session key
            encrypted for the destination.
        dead_letter_queue (str | None): PROPID_M_DEADLETTER_QUEUE, per-message custom DLQ.
        abort_count (int): PROPID_M_ABORT_COUNT, aborted transactional receives, 0 to 2**32-1.
        move_count (int): PROPID_M_MOVE_COUNT, moves between queue and subqueues, 0 to 2**32-1.
        properties (dict[str, str]): kmq extension, application-defined string properties.

    Raises:
        InvalidParameter: at construction, a property is outside its MSMQ range; the message
            names the property and the allowed values.
    """

    body: bytes = declare(
        b"", propid="PROPID_M_BODY", check=_bytes_check(optional=False),
        avro=AvroField("body", "bytes", 10), spark=SparkColumn("binary", 5),
        spark_input=SparkInput("bytes", "PROPID_M_BODY; a string is stored UTF-8 encoded"))
    label: str = declare(
        "", propid="PROPID_M_LABEL", check=_value_check(_check_label),
        avro=AvroField("label", "string", 8), spark=SparkColumn("string", 2),
        spark_input=SparkInput("text", "PROPID_M_LABEL, up to 250 characters"))
    body_type: int = declare(
        BodyType.EMPTY, propid="PROPID_M_BODY_TYPE", check=_int_check(0, _UINT32_MAX),
        avro=AvroField("body_type", "long", 9, "int"), spark=SparkColumn("bigint", 6, "int"),
        spark_input=SparkInput("int", "PROPID_M_BODY_TYPE; default BYTES for binary, STRING "
                                      "for string bodies"))
    id: MessageId | None = declare(
        None, propid="PROPID_M_MSGID", check=_instance_check(MessageId, "None or a MessageId"),
        avro=AvroField("id", _MESSAGE_ID_AVRO, 0, "message_id"),
        spark=SparkColumn("string", 0, "text"))
    correlation_id: MessageId | None = declare(
        None, propid="PROPID_M_CORRELATIONID",
        check=_instance_check(MessageId, "None or a MessageId"),
        avro=AvroField("correlation_id", ["null", "MessageId"], 2, "message_id"),
        spark=SparkColumn("string", 1, "text"),
        spark_input=SparkInput("message_id", "PROPID_M_CORRELATIONID, 'guid\\seq' text or "
                                             "20 bytes"))
    priority: int = declare(
        DEFAULT_PRIORITY, propid="PROPID_M_PRIORITY", check=_int_check(MIN_PRIORITY, MAX_PRIORITY),
        avro=AvroField("priority", "int", 3), spark=SparkColumn("int", 3),
        spark_input=SparkInput("int", "PROPID_M_PRIORITY, 0-7 (default 3)"))
    delivery: Delivery = declare(
        Delivery.EXPRESS, propid="PROPID_M_DELIVERY", enum=Delivery,
        avro=AvroField("delivery", "int", 4, "int"), spark=SparkColumn("string", 20, "name"),
        spark_input=SparkInput("named", "PROPID_M_DELIVERY, EXPRESS (0) or RECOVERABLE (1)"))
    acknowledge: Acknowledgment = declare(
        Acknowledgment.NONE, propid="PROPID_M_ACKNOWLEDGE", enum=Acknowledgment,
        avro=AvroField("acknowledge", "int", 5, "int"), spark=SparkColumn("int", 21, "int"),
        spark_input=SparkInput("named", "PROPID_M_ACKNOWLEDGE, flags or names "
                                        "('POSITIVE_ARRIVAL|...')"))
    admin_queue: str | None = declare(
        None, propid="PROPID_M_ADMIN_QUEUE", check=_value_check(_check_text),
        avro=AvroField("admin_queue", _OPTIONAL_STRING, 12), spark=SparkColumn("string", 18),
        spark_input=SparkInput("text", "PROPID_M_ADMIN_QUEUE, a format name"))
    response_queue: str | None = declare(
        None, propid="PROPID_M_RESP_FORMAT_NAME", check=_value_check(_check_text),
        avro=AvroField("response_queue", _OPTIONAL_STRING, 13), spark=SparkColumn("string", 17),
        spark_input=SparkInput("text", "PROPID_M_RESP_FORMAT_NAME, a format name"))
    time_to_reach_queue: float | None = declare(
        None, propid="PROPID_M_TIME_TO_REACH_QUEUE", check=_timer_check,
        avro=AvroField("time_to_reach_queue_ms", _OPTIONAL_LONG, 17, "duration_ms"),
        spark=SparkColumn("double", 12),
        spark_input=SparkInput("seconds", f"PROPID_M_TIME_TO_REACH_QUEUE, "
                                          f"{TIME_TO_REACH_QUEUE.describe()}"))
    time_to_be_received: float | None = declare(
        None, propid="PROPID_M_TIME_TO_BE_RECEIVED", check=_timer_check,
        avro=AvroField("time_to_be_received_ms", _OPTIONAL_LONG, 18, "duration_ms"),
        spark=SparkColumn("double", 13),
        spark_input=SparkInput("seconds", f"PROPID_M_TIME_TO_BE_RECEIVED, "
                                          f"{TIME_TO_BE_RECEIVED.describe()}"))
    not_before: _dt.datetime | None = declare(
        None, propid="kmq not-before time", check=_value_check(_check_instant),
        avro=AvroField("not_before", _OPTIONAL_INSTANT, 21, "instant_ms"),
        spark=SparkColumn("timestamp", 11),
        spark_input=SparkInput("instant", "kmq timed dequeue instant"))
    journal: JournalLevel = declare(
        JournalLevel.NONE, propid="PROPID_M_JOURNAL", enum=JournalLevel,
        avro=AvroField("journal", "int", 6, "int"), spark=SparkColumn("int", 22, "int"),
        spark_input=SparkInput("named", "PROPID_M_JOURNAL, flags or names "
                                        "('DEADLETTER|JOURNAL')"))
    app_specific: int = declare(
        0, propid="PROPID_M_APPSPECIFIC", check=_int_check(0, _UINT32_MAX),
        avro=AvroField("app_specific", "long", 7), spark=SparkColumn("bigint", 7),
        spark_input=SparkInput("int", "PROPID_M_APPSPECIFIC, 0 to 2**32-1"))
    extension: bytes = declare(
        b"", propid="PROPID_M_EXTENSION", check=_bytes_check(optional=False),
        avro=AvroField("extension", "bytes", 11), spark=SparkColumn("binary", 8),
        spark_input=SparkInput("bytes", "PROPID_M_EXTENSION"))
    message_class: MessageClass = declare(
        MessageClass.NORMAL, propid="PROPID_M_CLASS", enum=MessageClass,
        avro=AvroField("message_class", "int", 1, "int"), spark=SparkColumn("string", 4, "name"))
    sent_time: _dt.datetime | None = declare(
        None, propid="PROPID_M_SENTTIME", check=_value_check(_check_instant),
        avro=AvroField("sent_time", _OPTIONAL_INSTANT, 19, "instant_ms"),
        spark=SparkColumn("timestamp", 9))
    arrived_time: _dt.datetime | None = declare(
        None, propid="PROPID_M_ARRIVEDTIME", check=_value_check(_check_instant),
        avro=AvroField("arrived_time", _OPTIONAL_INSTANT, 20, "instant_ms"),
        spark=SparkColumn("timestamp", 10, "record_timestamp"))
    source_machine_id: uuid.UUID | None = declare(
        None, propid="PROPID_M_SRC_MACHINE_ID",
        check=_instance_check(uuid.UUID, "None or a uuid.UUID"),
        avro=AvroField("source_machine_id", ["null", {"type": "string", "logicalType": "uuid"}],
                       22, "guid_text"),
        spark=SparkColumn("string", 14, "text"))
    destination_queue: str | None = declare(
        None, propid="PROPID_M_DEST_QUEUE", check=_value_check(_check_text),
        avro=AvroField("destination_queue", _OPTIONAL_STRING, 14),
        spark=SparkColumn("string", 15))
    destination_format_name: str | None = declare(
        None, propid="PROPID_M_DEST_FORMAT_NAME", check=_value_check(_check_text),
        avro=AvroField("destination_format_name", _OPTIONAL_STRING, 15),
        spark=SparkColumn("string", 16))
    lookup_id: int | None = declare(
        None, propid="PROPID_M_LOOKUPID", check=_value_check(_check_lookup_id))
    sender_id: bytes | None = declare(
        None, propid="PROPID_M_SENDERID", check=_bytes_check(optional=True),
        avro=AvroField("sender_id", _OPTIONAL_BYTES, 23), spark=SparkColumn("binary", 26))
    sender_id_type: SenderIdType = declare(
        SenderIdType.NONE, propid="PROPID_M_SENDERID_TYPE", enum=SenderIdType,
        avro=AvroField("sender_id_type", "int", 24, "int"))
    transaction_id: str | None = declare(
        None, propid="PROPID_M_XACTID",
        avro=AvroField("transaction_id", _OPTIONAL_STRING, 25), spark=SparkColumn("string", 23))
    first_in_transaction: bool = declare(
        False, propid="PROPID_M_FIRST_IN_XACT",
        avro=AvroField("first_in_transaction", "boolean", 26), spark=SparkColumn("boolean", 24))
    last_in_transaction: bool = declare(
        False, propid="PROPID_M_LAST_IN_XACT",
        avro=AvroField("last_in_transaction", "boolean", 27), spark=SparkColumn("boolean", 25))
    auth_level: AuthLevel = declare(
        AuthLevel.NONE, propid="PROPID_M_AUTH_LEVEL", enum=AuthLevel,
        avro=AvroField("auth_level", "int", 28, "int"), spark=SparkColumn("int", 27, "int"))
    privacy_level: PrivacyLevel = declare(
        PrivacyLevel.NONE, propid="PROPID_M_PRIV_LEVEL", enum=PrivacyLevel,
        avro=AvroField("privacy_level", "int", 29, "int"), spark=SparkColumn("int", 28, "int"))
    hash_algorithm: HashAlgorithm = declare(
        HashAlgorithm.SHA256, propid="PROPID_M_HASH_ALG", enum=HashAlgorithm,
        avro=AvroField("hash_algorithm", "int", 30, "int"))
    encryption_algorithm: EncryptionAlgorithm = declare(
        EncryptionAlgorithm.AES256, propid="PROPID_M_ENCRYPTION_ALG", enum=EncryptionAlgorithm,
        avro=AvroField("encryption_algorithm", "int", 31, "int"))
    sender_certificate: bytes | None = declare(
        None, propid="PROPID_M_SENDER_CERT", check=_bytes_check(optional=True),
        avro=AvroField("sender_certificate", _OPTIONAL_BYTES, 32))
    signature: bytes | None = declare(
        None, propid="PROPID_M_SIGNATURE", check=_bytes_check(optional=True),
        avro=AvroField("signature", _OPTIONAL_BYTES, 33))
    authenticated: bool = declare(
        False, propid="PROPID_M_AUTHENTICATED", check=_value_check(_check_bool),
        spark=SparkColumn("boolean", 29, "false"))
    destination_symmetric_key: bytes | None = declare(
        None, propid="PROPID_M_DEST_SYMM_KEY", check=_bytes_check(optional=True),
        avro=AvroField("destination_symmetric_key", _OPTIONAL_BYTES, 34))
    dead_letter_queue: str | None = declare(
        None, propid="PROPID_M_DEADLETTER_QUEUE", check=_value_check(_check_text),
        avro=AvroField("dead_letter_queue", _OPTIONAL_STRING, 16), spark=SparkColumn("string", 19))
    abort_count: int = declare(
        0, propid="PROPID_M_ABORT_COUNT", check=_int_check(0, _UINT32_MAX),
        avro=AvroField("abort_count", "long", 35), spark=SparkColumn("bigint", 30))
    move_count: int = declare(
        0, propid="PROPID_M_MOVE_COUNT", check=_int_check(0, _UINT32_MAX),
        avro=AvroField("move_count", "long", 36), spark=SparkColumn("bigint", 31))
    properties: dict[str, str] = declare(
        propid="kmq application properties", default_factory=dict,
        avro=AvroField("properties", {"type": "map", "values": "string"}, 37),
        spark=SparkColumn("map<string,string>", 32, "pairs"),
        spark_input=SparkInput("properties", "kmq application properties"))

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Normalise and validate in place (what construction does), for a message whose
        properties were edited after it was built.

        Raises:
            InvalidParameter: see :meth:`validate`.
        """
        self._normalize()
        self.validate()
        # What was checked, by identity: unchanged_since_check() compares with it.
        self.__dict__[_CHECKED] = _field_values(self.__dict__)

    def unchanged_since_check(self) -> bool:
        """Whether no property was assigned since the last :meth:`check` (construction does
        one), so that checking again could not fail. The queue manager checks at every send
        because the application may edit a message after building it; this lets it skip
        the repeated check of a message nobody touched.

        Every property value is immutable (bytes, str, int, enum, datetime, UUID, MessageId)
        except ``properties``, which can be edited in place: it is checked again here.
        Copies made by :meth:`stamped` never count as unchanged.

        Returns:
            bool: True when every property is the very object :meth:`check` saw.

        Raises:
            InvalidParameter: ``properties`` was edited in place into something invalid.
        """
        checked = self.__dict__.get(_CHECKED)
        if checked is None or not all(map(operator.is_, checked, _field_values(self.__dict__))):
            return False
        if self.properties:
            self._validate_properties()
        return True

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> Message:
        """Build a message from property values by name, normalised and validated as
        ``Message(**values)`` would be, without the keyword call: decoders build one message
        per record (about 2.5 us less per message, docs/performance.md).

        Args:
            values (dict[str, Any]): property name -> value; a property that is absent gets
                its default. The dict becomes the message's own: do not reuse it.

        Returns:
            Message: the message.

        Raises:
            InvalidParameter: ``values`` is not a dict, or a value is out of its MSMQ range
                (see :meth:`validate`);
            TypeError: a name is not a property (as for ``Message(**values)``).
        """
        if not isinstance(values, dict):
            raise InvalidParameter.wrong_type("values", "a dict of property name -> value",
                                              values)
        if not _FIELD_NAMES.issuperset(values):
            raise TypeError(f"not message properties: {sorted(values.keys() - _FIELD_NAMES)}")
        message = object.__new__(cls)
        state = message.__dict__
        if len(values) != len(_FIELD_NAMES):
            state.update(_PLAIN_DEFAULTS)
            if "properties" not in values:
                state["properties"] = {}
        state.update(values)
        message.check()
        return message

    def stamped(self, **changes: Any) -> Message:
        """A copy with ``changes`` applied, without normalising or validating again.

        For the queue manager's own stamping (id, times, destinations) of a message that was
        checked already; application code should use :func:`dataclasses.replace`, which
        validates. The ``properties`` dict is copied, so the copies never share it.

        Args:
            **changes: field values, already of the right types.
        """
        copy = object.__new__(Message)
        copy.__dict__.update(self.__dict__)
        copy.properties = dict(self.properties)
        copy.__dict__.update(changes)
        return copy

    def _normalize(self) -> None:
        """Convert accepted alternative forms (ints for enums, raw ids, bytearray, MSMQ's
        INFINITE and LONG_LIVED timers) in place."""
        values = self.__dict__
        if isinstance(self.body, (bytearray, memoryview)):
            self.body = bytes(self.body)
        for timer in _TIMER_LIST:
            value = values[timer.name]
            if value is not None and timer.is_unset(value):
                values[timer.name] = None
        if self.correlation_id is not None:
            self.correlation_id = _as_message_id(
                self.correlation_id, "correlation_id", "PROPID_M_CORRELATIONID"
            )
        for name, kind, coerce in _NORMALIZED:
            value = values[name]
            if type(value) is not kind:  # already the enum member: nothing to convert
                values[name] = coerce(value)
        # Known body types become BodyType for readable reprs; other VARTYPEs stay plain ints.
        if type(self.body_type) is int:
            self.body_type = cast(
                int, BodyType._value2member_map_.get(self.body_type, self.body_type)
            )

    def validate(self) -> None:
        """Check every property against its MSMQ range.

        Called at construction and by :func:`facade.model.envelope.encode_message`, so properties
        edited after construction are checked before the message leaves the process.

        Raises:
            InvalidParameter: a property is out of range or of the wrong type; the message names
                the property, its PROPID_M_* and the allowed values.
        """
        values = self.__dict__
        # Most properties keep their (valid) default object: only the others are checked, in
        # field order, which keeps construction and send cheap (docs/performance.md).
        for name, default, check in _PROPERTY_CHECKS:
            value = values[name]
            if value is not default:
                check(value)
        self._validate_transaction()
        if self.properties or not isinstance(self.properties, dict):
            self._validate_properties()

    def _validate_transaction(self) -> None:
        _check_text(self.transaction_id, "transaction_id", "PROPID_M_XACTID")
        for name, propid in (
            ("first_in_transaction", "PROPID_M_FIRST_IN_XACT"),
            ("last_in_transaction", "PROPID_M_LAST_IN_XACT"),
        ):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise _invalid(name, propid, "a bool", value)
            if value and self.transaction_id is None:
                raise _invalid(name, propid, "False when transaction_id is None", value)

    def _validate_properties(self) -> None:
        props = self.properties
        if not isinstance(props, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in props.items()
        ):
            raise _invalid("properties", "kmq application properties", "a dict[str, str]", props)

    # ---- derived values -------------------------------------------------------------------

    @property
    def is_transactional(self) -> bool:
        """True when the message was sent in a transaction (``transaction_id`` is set)."""
        return self.transaction_id is not None

    def receive_deadline(self) -> _dt.datetime | None:
        """Return the instant the message expires from its queue (TTBR counted from send).

        Returns:
            datetime | None: ``sent_time + time_to_be_received``, or ``None`` if either is unset
            (no limit, or not sent yet).
        """
        if self.sent_time is None or self.time_to_be_received is None:
            return None
        return _later(self.sent_time, self.time_to_be_received)

    def reach_queue_deadline(self) -> _dt.datetime | None:
        """Return the instant by which the message must reach its queue.

        TTBR takes precedence over TTRQ (MSMQ): a message that must be received within TTBR
        must also arrive within it, so the effective limit is ``min(TTRQ, TTBR)``.

        Returns:
            datetime | None: ``sent_time + min(TTRQ, TTBR)`` over the limits that are set, or
            ``None`` if neither is set or the message was not sent yet.
        """
        limits = [t for t in (self.time_to_reach_queue, self.time_to_be_received) if t is not None]
        if self.sent_time is None or not limits:
            return None
        return _later(self.sent_time, min(limits))

    def __repr__(self) -> str:
        # Bodies can be megabytes: show their size, and only the properties that identify.
        parts = [f"id={str(self.id) if self.id else None!r}", f"class={self.message_class.name}"]
        if self.label:
            parts.append(f"label={self.label!r}")
        parts.append(f"priority={self.priority}")
        if self.correlation_id is not None:
            parts.append(f"correlation_id={str(self.correlation_id)!r}")
        if self.destination_queue:
            parts.append(f"destination_queue={self.destination_queue!r}")
        parts.append(f"body={len(self.body)} bytes")
        return f"Message({', '.join(parts)})"


# --------------------------------------------------------------------------------------------
# Acknowledgment payload
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AcknowledgedQueue:
    """A queue an acknowledgment concerns.

    Args:
        format_name (str | None): the queue's format name.
        guid (uuid.UUID | None): the queue's GUID (PROPID_Q_INSTANCE), as MSMQ lists in combined
            distribution-list acknowledgments.

    Raises:
        InvalidParameter: neither is given, or one has the wrong type.
    """

    format_name: str | None = None
    guid: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if self.format_name is None and self.guid is None:
            raise InvalidParameter(
                "an acknowledged queue needs a format name, a GUID or both",
                hint="pass format_name='DIRECT=...' and/or guid=uuid.UUID(...)",
            )
        _check_text(self.format_name, "format_name", "acknowledged queue format name")
        if self.guid is not None and not isinstance(self.guid, uuid.UUID):
            raise _invalid(
                "guid", "acknowledged queue GUID (PROPID_Q_INSTANCE)", "a uuid.UUID", self.guid
            )


#: Each property's default object (``properties``, built per message, is checked apart).
_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(Message)
                                if f.default is not MISSING}

#: Message properties that ask for signing or encryption. The queue manager implements them
#: (``facade.queues.protection``); the Spark sink does not sign or encrypt, and refuses the columns of
#: these names with :func:`unsupported_security`.
SECURITY_PROPERTIES = ("auth_level", "privacy_level", "hash_algorithm", "encryption_algorithm",
                       "sender_certificate", "signature", "destination_symmetric_key",
                       "authenticated")


def unsupported_security(names: Iterable[str], hint: str | None = None) -> InvalidParameter:
    """The error for a send that asks for signing or encryption (see
    :data:`SECURITY_PROPERTIES`).

    Args:
        names (Iterable[str]): the properties (or Spark columns) that ask for it.
        hint (str | None): what to do instead; default: leave them at their defaults.
    """
    return InvalidParameter(
        f"message signing and encryption ({', '.join(sorted(names))}) are not supported on "
        "this path: it does not sign or encrypt messages, and will not send one unprotected",
        hint=hint or "send through MessageQueue.send (which signs and encrypts), or leave "
                     "these properties at their defaults")


def check_body_size(message: Message, queue: str | None = None) -> None:
    """Refuse a body larger than MSMQ's 4 MiB (:data:`MAX_BODY_BYTES`), checked by every send
    (:func:`facade.queues.sending.stamp_sent`) before anything is stored or produced.

    Args:
        message (Message): the message being sent.
        queue (str | None): the format name sent to, for the error.

    Raises:
        InvalidParameter: the body is larger; the message names its size and the limit.
    """
    size = len(message.body)
    if size > MAX_BODY_BYTES:
        raise InvalidParameter(
            f"the message body is {size:,} bytes; MSMQ's limit (PROPID_M_BODY) is "
            f"{MAX_BODY_BYTES:,} bytes (4 MiB)", queue=queue,
            hint="send at most 4 MiB per message: split the payload, or keep it elsewhere and "
                 "send a reference")


def check_enforceable(message: Message) -> None:
    """Refuse a message that asks for what kmq does not enforce yet (checked at every send).
    Security properties are checked by ``facade.queues.protection.check_protection``.

    Raises:
        TransactionUsage: ``transaction_id`` is set: the queue manager sets it when the message
            is sent with ``transaction=`` (:mod:`facade.queues.transaction`); a caller's own value
            would claim a transaction that does not hold the message.
    """
    if message.transaction_id is not None:
        raise TransactionUsage(
            f"transaction_id is set ({message.transaction_id!r}): the queue manager sets it when "
            "a message is sent in a transaction, and this send is not in that transaction",
            hint="leave transaction_id unset and send with transaction=qm.begin_transaction() "
                 "(or transaction=\"single\")")


def _derive_checks() -> tuple[tuple[tuple[str, type, Callable[[object], object]], ...],
                               tuple[tuple[str, object, Callable[[object], object]], ...]]:
    """The enum coercions and the property checks, from the field declarations."""
    normalized = []
    checks = []
    for f, spec in specs(Message):
        if spec.enum is not None:
            coerce = _enum_coercion(spec.enum, f.name, spec.propid)
            normalized.append((f.name, spec.enum, coerce))
            checks.append((f.name, _DEFAULTS[f.name], coerce))
        elif spec.check is not None:
            checks.append((f.name, _DEFAULTS[f.name], spec.check(f.name, spec.propid)))
    return tuple(normalized), tuple(checks)


#: (field, enum type, coercion) for :meth:`Message._normalize`: ints become enum members.
#: (field, default object, check) in field order: :meth:`Message.validate` checks a property
#: only when it does not hold its default object (defaults are valid by construction). Enum
#: properties are checked by their coercion, which raises for a value outside the enum.
_NORMALIZED, _PROPERTY_CHECKS = _derive_checks()
#: Where :meth:`Message.check` keeps the property values it checked (not a dataclass field:
#: equality, ``dataclasses.replace`` and the envelope ignore it).
_CHECKED = "_checked_values"
#: Every property's value out of a message's ``__dict__``, in field order.
_field_values = operator.itemgetter(*(f.name for f in fields(Message)))
#: Every property name, and name -> default of those with a plain default (all but
#: ``properties``, whose default is a new dict), for :meth:`Message.from_values`.
_FIELD_NAMES = frozenset(f.name for f in fields(Message))
_PLAIN_DEFAULTS = {f.name: f.default for f in fields(Message) if f.default is not MISSING}


@dataclass(frozen=True)
class AcknowledgmentInfo:
    """What an ACK/NACK message's body carries (see :func:`facade.model.envelope.encode_acknowledgment`).

    The ACK/NACK message itself is an ordinary :class:`Message` whose ``message_class`` is the
    acknowledgment class and whose ``correlation_id`` is the original message's id.

    Args:
        original_id (MessageId): PROPID_M_MSGID of the message acknowledged.
        message_class (MessageClass): an ACK or NACK class (``is_acknowledgment``).
        queues (Iterable[AcknowledgedQueue]): the queue(s) concerned, at least one; several when
            acknowledgments for one distribution-list message are combined.
        time (datetime): when the event happened; timezone-aware. Default: now (UTC).
        reason (str | None): optional human-readable reason.
        original_body (bytes | None): the original body, returned with NACKs as MSMQ does.

    Raises:
        InvalidParameter: a field is invalid (class NORMAL or REPORT, no queues, naive time...).
    """

    original_id: MessageId
    message_class: MessageClass
    queues: tuple[AcknowledgedQueue, ...]
    time: _dt.datetime = field(default_factory=_utcnow)
    reason: str | None = None
    original_body: bytes | None = None

    def __post_init__(self) -> None:
        original_id = _as_message_id(self.original_id, "original_id", "PROPID_M_CORRELATIONID")
        if original_id is None:
            raise _invalid("original_id", "PROPID_M_CORRELATIONID", "a MessageId", None)
        cls = _coerce_enum(MessageClass, self.message_class, "message_class", "PROPID_M_CLASS")
        if not cls.is_acknowledgment:
            raise _invalid("message_class", "PROPID_M_CLASS", "an ACK_* or NACK_* class", cls)
        queues = (tuple(self.queues) if isinstance(self.queues, Iterable)
                  and not isinstance(self.queues, (str, bytes)) else ())
        if not queues or not all(isinstance(q, AcknowledgedQueue) for q in queues):
            raise _invalid(
                "queues",
                "acknowledged queues",
                "a non-empty sequence of AcknowledgedQueue",
                self.queues,
            )
        _check_instant(self.time, "time", "acknowledgment time")
        if self.time is None:
            raise _invalid("time", "acknowledgment time", "a timezone-aware datetime", None)
        if self.reason is not None and not isinstance(self.reason, str):
            raise _invalid("reason", "acknowledgment reason", "None or a str", self.reason)
        _check_bytes(self.original_body, "original_body", "PROPID_M_BODY", optional=True)
        # Frozen dataclass: normalized values go in through object.__setattr__.
        object.__setattr__(self, "original_id", original_id)
        object.__setattr__(self, "message_class", cls)
        object.__setattr__(self, "queues", queues)


def combine_acknowledgments(acks: Iterable[AcknowledgmentInfo]) -> list[AcknowledgmentInfo]:
    """Merge acknowledgments of the same class for the same original message.

    MSMQ may combine the acknowledgments for the copies of one distribution-list message into one
    acknowledgment listing every queue. Queues are kept in first-seen order without duplicates;
    the combined acknowledgment takes the latest time and the first reason and original body.

    Args:
        acks (Iterable[AcknowledgmentInfo]): acknowledgments in any order.

    Returns:
        list[AcknowledgmentInfo]: one per (original id, class), in first-seen order.
    """
    groups: dict[tuple[MessageId, MessageClass], list[AcknowledgmentInfo]] = {}
    for ack in acks:
        groups.setdefault((ack.original_id, ack.message_class), []).append(ack)
    combined = []
    for (original_id, cls), members in groups.items():
        queues = tuple(dict.fromkeys(q for ack in members for q in ack.queues))
        combined.append(
            AcknowledgmentInfo(
                original_id=original_id,
                message_class=cls,
                queues=queues,
                time=max(ack.time for ack in members),
                reason=next((a.reason for a in members if a.reason is not None), None),
                original_body=next(
                    (a.original_body for a in members if a.original_body is not None), None
                ),
            )
        )
    return combined


#: The latest representable instant; a deadline past it is effectively "never".
_END_OF_TIME = _dt.datetime.max.replace(tzinfo=_dt.timezone.utc)


def _later(start: _dt.datetime, seconds: float) -> _dt.datetime:
    """``start + seconds``, saturating at the end of representable time instead of overflowing."""
    try:
        return start + _dt.timedelta(seconds=seconds)
    except OverflowError:
        return _END_OF_TIME
