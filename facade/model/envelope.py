"""Avro envelope: a :class:`~facade.model.message.Message` as the key, value and headers of a record.

The wire format is specified in ``schemas/README.md``; the ``.avsc`` files next to it are the
source of truth. In short:

* **value**: Avro single-object encoding of ``kmq.MessageEnvelope``: the marker ``C3 01``, the
  8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form, then
  the Avro binary body. The fingerprint selects the writer schema, so records written by older
  envelope versions stay readable (resolved against the current schema).
* **headers**: a few ASCII copies of envelope fields (``kmq.id``, ``kmq.class``, ``kmq.priority``,
  ``kmq.expires``...) so consumers and Spark can filter and display without decoding Avro. They are
  derived from the envelope, which is authoritative: decoding ignores them.
* **key**: the 16-byte sending queue manager GUID (the first 16 bytes of the message id) for
  transactional messages, so one sender's transactional messages stay in one partition and in
  order (MSMQ's exactly-once-in-order guarantee); ``None`` otherwise so the producer spreads load.

The record <-> message mapping is generated from the property declarations on
:class:`~facade.model.message.Message` (:mod:`facade.model.propertyspec`): each property's ``avro=`` names
its field and codec. :func:`declared_envelope_schema` is the schema those declarations
describe; a unit test holds the ``.avsc`` to it.

This module produces and consumes plain Python values; the Kafka adapter passes them on.
ACK/NACK messages are ordinary messages whose body is an Avro-encoded ``kmq.Acknowledgment``
(:func:`encode_acknowledgment` / :func:`decode_acknowledgment`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import io
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, dataclass
from typing import Any, cast

import fastavro
from facade.model import avro as _avro
from facade.model.avro import SINGLE_OBJECT_MARKER
from facade.model.avro import DecodeFailure as _DecodeFailure
from facade.model.avro import SchemaFamily as _SchemaFamily  # noqa: F401 - kept for tests and tools
from facade.errors import EnvelopeError, InvalidParameter
from facade.model.message import (
    AcknowledgedQueue,
    AcknowledgmentInfo,
    BodyType,
    Message,
    MessageId,
    guid_text,
)
from facade.model.propertyspec import AvroField, compile_function, specs

__all__ = [
    "ACKNOWLEDGMENT_SCHEMA_NAME",
    "ENVELOPE_SCHEMA_NAME",
    "ENVELOPE_VERSION",
    "HEADER_CLASS",
    "HEADER_CORRELATION_ID",
    "HEADER_EXPIRES",
    "HEADER_ID",
    "HEADER_NOT_BEFORE",
    "HEADER_PRIORITY",
    "HEADER_TXN",
    "HEADER_VERSION",
    "SINGLE_OBJECT_MARKER",
    "EncodedRecord",
    "EnvelopeCopies",
    "RecordHeaders",
    "acknowledgment_message",
    "decode_acknowledgment",
    "declared_envelope_schema",
    "decode_message",
    "encode_acknowledgment",
    "encode_copies",
    "encode_message",
    "envelope_record",
    "envelope_writer",
    "read_headers",
    "record_key",
    "register_writer_schema",
]

ENVELOPE_SCHEMA_NAME = "kmq.MessageEnvelope"
ACKNOWLEDGMENT_SCHEMA_NAME = "kmq.Acknowledgment"
_ENVELOPE_FILE = "message_envelope.avsc"
_ACKNOWLEDGMENT_FILE = "acknowledgment.avsc"

HEADER_VERSION = "kmq.version"
HEADER_ID = "kmq.id"
HEADER_CLASS = "kmq.class"
HEADER_PRIORITY = "kmq.priority"
HEADER_EXPIRES = "kmq.expires"
HEADER_NOT_BEFORE = "kmq.not_before"
HEADER_CORRELATION_ID = "kmq.correlation_id"
HEADER_TXN = "kmq.txn"

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_MS = _dt.timedelta(milliseconds=1)


# --------------------------------------------------------------------------------------------
# Schema families (the generic single-object machinery lives in facade.model.avro)
# --------------------------------------------------------------------------------------------

_SCHEMA_DIR = _avro.SCHEMA_DIR
_ENVELOPE = _avro.family(_ENVELOPE_FILE)
_ACKNOWLEDGMENT = _avro.family(_ACKNOWLEDGMENT_FILE)

#: Version of the envelope schema this module writes (``kmq.version`` in the .avsc).
ENVELOPE_VERSION: int = _ENVELOPE.current.version or 1
_VERSION_BYTES = str(ENVELOPE_VERSION).encode("ascii")


def register_writer_schema(schema: Mapping[str, Any]) -> bytes:
    """Make records written with another version of a kmq schema readable.

    Frozen earlier versions in the schema directory (``message_envelope.v<N>.avsc``,
    ``acknowledgment.v<N>.avsc``, ``receipt.v<N>.avsc``) are registered at import; use this for
    schemas obtained elsewhere (e.g. a newer writer whose extra fields this reader may ignore).

    Args:
        schema (Mapping): the writer schema as parsed JSON; its full name picks the family
            (``kmq.MessageEnvelope``, ``kmq.Acknowledgment`` or ``kmq.Receipt``).

    Returns:
        bytes: the schema's 8-byte fingerprint as it appears in records.

    Raises:
        InvalidParameter: the schema is not valid Avro or not a version of a kmq record schema.
            Whether it resolves against the current schema (no removed or retyped fields, new
            fields with defaults) shows when its records are decoded (EnvelopeError).
    """
    return _avro.register_writer_schema(schema)


# --------------------------------------------------------------------------------------------
# Value conversions
# --------------------------------------------------------------------------------------------


def _instant_to_ms(value: _dt.datetime | None) -> int | None:
    # Integer arithmetic: datetime.timestamp() is a float and can be off by one millisecond.
    return None if value is None else (value - _EPOCH) // _ONE_MS


def _seconds_to_ms(value: float | None) -> int | None:
    # A positive timer never rounds to 0 ms, which is a timer of its own (expired at send).
    if value is None:
        return None
    return max(1, round(value * 1000)) if value else 0


def _ms_to_seconds(value: int | None) -> float | None:
    return None if value is None else value / 1000


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncodedRecord:
    """A message in Kafka record form, ready for the producer.

    Attributes:
        key (bytes | None): the recommended record key (see :func:`record_key`).
        value (bytes): the single-object-encoded envelope.
        headers (list[tuple[str, bytes]]): ASCII headers derived from the envelope.
    """

    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


def record_key(message: Message) -> bytes | None:
    """Return the recommended Kafka record key for ``message``.

    Transactional messages are keyed by the sending queue manager's GUID (the first 16 bytes of
    the message id) so every transactional message of one sender lands in one partition and is
    received in send order, as MSMQ guarantees for transactional queues. Other messages get no
    key: the producer spreads them over the partitions. The key is never read back; queue topics
    must not be compacted (``cleanup.policy=delete``).

    Args:
        message (Message): a message with ``id`` set.

    Returns:
        bytes | None: 16 bytes, or ``None``.
    """
    if message.transaction_id is None or message.id is None:
        return None
    return message.id.machine_guid.bytes_le


# --------------------------------------------------------------------------------------------
# The record <-> message mapping, derived from the property declarations (facade.model.propertyspec)
# --------------------------------------------------------------------------------------------

#: Avro codec -> expression turning the property value ``{v}`` into the record value.
_TO_AVRO = {
    "plain": "{v}",
    "int": "int({v})",
    "message_id": "None if {v} is None else {v}.to_bytes()",
    "duration_ms": "_seconds_to_ms({v})",
    "instant_ms": "_instant_to_ms({v})",
    "guid_text": "None if {v} is None else guid_text({v})",
}
#: Avro codec -> expression turning the record value ``{v}`` back into the property value.
#: fastavro already returns timestamp-millis as an aware datetime; a uuid comes as its text
#: (the envelope family reads uuids as text, see SchemaFamily); ints become enum members in
#: Message's own normalisation.
_FROM_AVRO = {
    "plain": "{v}",
    "int": "{v}",
    "message_id": "None if {v} is None else MessageId.from_bytes({v})",
    "duration_ms": "_ms_to_seconds({v})",
    "instant_ms": "{v}",
    "guid_text": "None if {v} is None else _guid_of_text({v})",
}


@functools.lru_cache(maxsize=256)
def _guid_of_text(text: str) -> uuid.UUID:
    """uuid.UUID of a GUID's text, cached: a queue's messages come from a few queue managers,
    so the same few source_machine_id values repeat (UUID objects are immutable, so shared).

    Raises:
        DecodeFailure: ``text`` is no GUID (decode_message reports it as EnvelopeError, as
            fastavro's own uuid reading did).
    """
    try:
        return uuid.UUID(text)
    except ValueError as exc:
        raise _DecodeFailure(f"Avro body of {ENVELOPE_SCHEMA_NAME} is malformed: a uuid "
                             f"field holds {text!r} ({exc})") from None


def _envelope_fields() -> list[tuple[str, AvroField]]:
    """(property name, its Avro field) for every enveloped property, in Avro field order."""
    found = [(f.name, spec.avro) for f, spec in specs(Message) if spec.avro is not None]
    return sorted(found, key=lambda item: item[1].position)


def _record_builder() -> Any:
    items = ", ".join(
        f"{avro.name!r}: " + _TO_AVRO[avro.codec].format(v=f"m.{attr}")
        for attr, avro in _envelope_fields())
    return compile_function("record_of", "m", "{" + items + "}", globals())


def _message_builder() -> Any:
    """``message_of(record)``: the Message of a decoded envelope record.

    A value equal to its property's default is replaced by the default object itself (the
    enum member for an int, the shared float or string), because :meth:`Message.check`
    converts and validates only what is not the default object: most properties of a
    received message hold their default, and this halves the cost of building it. The
    replacement is what normalisation would have produced (an equal value of the canonical
    type), so the message is the same.
    """
    defaults = {f.name: f.default for f, _spec in specs(Message)}
    namespace = dict(globals())
    arguments = []
    for attr, avro in _envelope_fields():
        value = _FROM_AVRO[avro.codec].format(v=f"r[{avro.name!r}]")
        default = defaults[attr]
        if default is MISSING or default is None or isinstance(default, (bytes, bool)):
            arguments.append(f"{attr!r}: {value}")  # None, b"", False: already shared objects
            continue
        namespace[f"_default_{attr}"] = default
        arguments.append(f"{attr!r}: (_default_{attr} if (_v := {value}) == _default_{attr} "
                         "else _v)")
    items = ", ".join(arguments)
    return compile_function("message_of", "r", f"Message.from_values({{{items}}})", namespace)


_record_of = _record_builder()
_message_of = _message_builder()
#: Properties stored as Avro strings, in field order: the ones a lone surrogate can break.
_TEXT_PROPERTIES = tuple(attr for attr, avro in _envelope_fields()
                         if avro.type in ("string", ["null", "string"]))


def _envelope_record(m: Message) -> dict[str, Any]:
    if m.id is None:
        raise InvalidParameter(
            "message property id (PROPID_M_MSGID) is not set",
            hint="send through the queue manager, which assigns it, or set MessageId.new(guid)",
        )
    return cast(dict[str, Any], _record_of(m))


def declared_envelope_schema() -> dict[str, Any]:
    """The ``kmq.MessageEnvelope`` schema as the property declarations describe it, without
    docs: what ``schemas/message_envelope.avsc`` must hold (field names, types, defaults,
    order). A unit test compares the two; the .avsc stays the schema records are written with.

    Returns:
        dict[str, Any]: the schema as parsed JSON.
    """
    defaults = {f.name: _default_of(f) for f, _spec in specs(Message)}
    fields = []
    for attr, avro in _envelope_fields():
        entry: dict[str, Any] = {"name": avro.name, "type": avro.type}
        default = _avro_default(defaults[attr])
        nullable = isinstance(avro.type, list) and avro.type[0] == "null"
        if default is not None or nullable:
            entry["default"] = default
        fields.append(entry)
    return {"type": "record", "name": "MessageEnvelope", "namespace": "kmq", "fields": fields}


def _default_of(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if callable(f.default_factory) else None


def _avro_default(value: Any) -> Any:
    """A property default in Avro JSON form (bytes as ISO-8859-1 text, enums as ints)."""
    if isinstance(value, bytes):
        return value.decode("iso-8859-1")
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


def envelope_record(message: Message) -> dict[str, Any]:
    """The ``kmq.MessageEnvelope`` record of ``message`` as Python values for an Avro writer
    (ids as bytes, instants and durations as milliseconds), not validated.

    Raises:
        InvalidParameter: ``message.id`` is unset.
    """
    return _envelope_record(message)


def envelope_writer() -> _avro.WriterSchema:
    """The current envelope schema: fastavro-parsed form, fingerprint, single-object prefix."""
    return _ENVELOPE.current


def _headers(m: Message, record: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    # Computed from the envelope record's own values so a header never disagrees with it.
    headers = [
        (HEADER_VERSION, _VERSION_BYTES),
        (HEADER_ID, str(m.id).encode("ascii")),
        (HEADER_CLASS, b"%d" % record["message_class"]),
        (HEADER_PRIORITY, b"%d" % record["priority"]),
    ]
    sent, ttbr = record["sent_time"], record["time_to_be_received_ms"]
    if sent is not None and ttbr is not None:
        headers.append((HEADER_EXPIRES, b"%d" % (sent + ttbr)))
    if record["not_before"] is not None:
        headers.append((HEADER_NOT_BEFORE, b"%d" % record["not_before"]))
    if m.correlation_id is not None:
        headers.append((HEADER_CORRELATION_ID, str(m.correlation_id).encode("ascii")))
    if m.transaction_id is not None:
        headers.append((HEADER_TXN, m.transaction_id.encode("utf-8")))
    return headers


def encode_message(message: Message, *, validate: bool = True) -> EncodedRecord:
    """Encode ``message`` as a Kafka record (key, value, headers).

    Times are stored in epoch milliseconds (sub-millisecond parts are dropped) and durations in
    milliseconds; ``lookup_id`` and ``authenticated`` are receive-side state and not encoded.

    Args:
        message (Message): a message with ``id`` set (the queue manager assigns it at send).
        validate (bool): run :meth:`Message.validate` first; the queue manager passes False
            for copies of a message it has just checked.

    Returns:
        EncodedRecord: the record key, value and headers.

    Raises:
        InvalidParameter: ``message.id`` is unset or a property is invalid; the message names the
            property (PROPID_M_*) and the allowed values.
    """
    if not isinstance(message, Message):
        raise InvalidParameter(f"expected a Message, got {type(message).__name__}")
    if validate:
        message.validate()
    elif message.id is None:
        raise InvalidParameter("a message needs an id to be encoded",
                               hint="send it through a queue, which assigns the id")
    record = _envelope_record(message)
    try:
        value = _ENVELOPE.encode(record)
    except (ValueError, TypeError, OverflowError) as exc:
        raise _encode_failure(message, exc) from exc
    return EncodedRecord(record_key(message), value, _headers(message, record))


# --------------------------------------------------------------------------------------------
# Copies of one message (distribution lists, multiple-element names)
# --------------------------------------------------------------------------------------------

#: The one envelope field that differs between the copies of one send.
_PER_COPY_FIELD = "destination_queue"


def _split_writer() -> tuple[Any, Any, Any]:
    """The envelope schema cut around :data:`_PER_COPY_FIELD`: the fields before it, the field
    itself and the fields after it, each as a fastavro-parsed record schema.

    An Avro binary record is the concatenation of its fields' encodings, with no framing of
    its own, so writing the three records one after the other gives the bytes of the whole
    record (``tests/unit/test_envelope.py`` compares them for many messages).
    """
    fields = _ENVELOPE.current.parsed["fields"]
    cut = next(i for i, f in enumerate(fields) if f["name"] == _PER_COPY_FIELD)
    named: dict[str, Any] = {}  # named types (kmq.MessageId) defined before the cut, used after
    parts = []
    for suffix, part in (("Head", fields[:cut]), ("Copy", fields[cut:cut + 1]),
                         ("Tail", fields[cut + 1:])):
        schema = {"type": "record", "name": f"kmq._Envelope{suffix}", "fields": part}
        parts.append(fastavro.parse_schema(schema, named_schemas=named))
    return parts[0], parts[1], parts[2]


_HEAD, _COPY, _TAIL = _split_writer()


@functools.lru_cache(maxsize=4096)
def _copy_field(destination_queue: str | None) -> bytes:
    """The encoded :data:`_PER_COPY_FIELD` (destinations repeat from send to send: cached)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _COPY, {_PER_COPY_FIELD: destination_queue})
    return out.getvalue()


class EnvelopeCopies:
    """One message's record, encoded once for every copy of a send (MSMQ sends one copy per
    queue of a distribution list or multiple-element format name, each with its own
    PROPID_M_DEST_QUEUE).

    Each copy's value is byte for byte what :func:`encode_message` writes for the message
    with that ``destination_queue``; its key and headers are the same for every copy (none is
    derived from ``destination_queue``). Built by :func:`encode_copies`.

    Attributes:
        key (bytes | None): the record key (see :func:`record_key`).
        headers (list[tuple[str, bytes]]): the headers, shared: :meth:`record` hands out copies.
    """

    __slots__ = ("_head", "_tail", "headers", "key")

    def __init__(self, head: bytes, tail: bytes, key: bytes | None,
                 headers: list[tuple[str, bytes]]):
        self._head, self._tail, self.key, self.headers = head, tail, key, headers

    def record(self, destination_queue: str | None) -> EncodedRecord:
        """The Kafka record of the copy for ``destination_queue``.

        Args:
            destination_queue (str | None): the copy's PROPID_M_DEST_QUEUE (a format name).

        Returns:
            EncodedRecord: its key, value and (a fresh list of) headers.

        Raises:
            InvalidParameter: ``destination_queue`` is not text that UTF-8 can encode.
        """
        try:
            middle = _copy_field(destination_queue)
        except (ValueError, TypeError, OverflowError) as exc:
            raise InvalidParameter(
                f"message property destination_queue cannot be encoded: {exc}",
                hint="pass a format name (text without unpaired surrogates)") from exc
        return EncodedRecord(self.key, self._head + middle + self._tail, list(self.headers))


def encode_copies(message: Message) -> EnvelopeCopies:
    """Encode ``message`` once for all its copies, which differ only in ``destination_queue``
    (the one in ``message`` is ignored).

    Args:
        message (Message): a message with ``id`` set, validated already (as for
            ``encode_message(message, validate=False)``).

    Returns:
        EnvelopeCopies: what makes each copy's record.

    Raises:
        InvalidParameter: ``message.id`` is unset or a property cannot be written (named).
    """
    if message.id is None:
        raise InvalidParameter("a message needs an id to be encoded",
                               hint="send it through a queue, which assigns the id")
    record = _envelope_record(message)
    head, tail = io.BytesIO(), io.BytesIO()
    head.write(_ENVELOPE.current.prefix)
    try:
        fastavro.schemaless_writer(head, _HEAD, record)
        fastavro.schemaless_writer(tail, _TAIL, record)
    except (ValueError, TypeError, OverflowError) as exc:
        raise _encode_failure(message, exc) from exc
    return EnvelopeCopies(head.getvalue(), tail.getvalue(), record_key(message),
                          _headers(message, record))


def _encode_failure(message: Message, exc: Exception) -> InvalidParameter:
    """Name the property that fastavro could not write (validate() covers everything else)."""
    for name in _TEXT_PROPERTIES:
        value = getattr(message, name)
        if isinstance(value, str) and not _is_utf8_encodable(value):
            return InvalidParameter(
                f"message property {name} cannot be encoded as UTF-8 (lone surrogate characters)",
                hint=f"remove the unpaired surrogates from {name}",
            )
    for key, val in message.properties.items():
        if not (_is_utf8_encodable(key) and _is_utf8_encodable(val)):
            return InvalidParameter(
                f"application property {key!r} cannot be encoded as UTF-8 (lone surrogates)",
                hint="remove the unpaired surrogates from the properties",
            )
    return InvalidParameter(f"message cannot be encoded: {type(exc).__name__}: {exc}")


def _is_utf8_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode_message(
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] | None = None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> Message:
    """Decode a Kafka record value into a :class:`Message`.

    Args:
        value (bytes | None): the record value.
        headers (Iterable[tuple[str, bytes]] | None): the record headers; accepted for the
            adapter's convenience and ignored, because the envelope is authoritative.
        topic (str | None): the topic the record was read from, copied into the error.
        partition (int | None): its partition, copied into the error.
        offset (int | None): its offset, copied into the error for dead-lettering.

    Returns:
        Message: the message; ``lookup_id`` is ``None`` and ``authenticated`` is False (the queue
        manager sets them).

    Raises:
        EnvelopeError: the value is not a valid kmq envelope (None, wrong marker, unknown writer
            schema, truncated or malformed Avro, or a property out of its MSMQ range). It carries
            ``topic``, ``partition``, ``offset`` and ``raw``; move the record to a dead-letter
            queue rather than retrying.
    """
    del headers  # the envelope is authoritative; headers are derived copies
    try:
        record = _ENVELOPE.decode(value)
        return _message_from_record(record)
    except _DecodeFailure as exc:
        raise _envelope_error(str(exc), value, topic, partition, offset) from exc
    except InvalidParameter as exc:
        raise _envelope_error(
            f"envelope holds an invalid value: {exc.message}", value, topic, partition, offset
        ) from exc
    except Exception as exc:  # noqa: BLE001 - the contract is: only EnvelopeError escapes
        raise _envelope_error(
            f"envelope cannot be converted to a message ({type(exc).__name__}: {exc})",
            value,
            topic,
            partition,
            offset,
        ) from exc


def _message_from_record(r: Mapping[str, Any]) -> Message:
    return cast(Message, _message_of(r))


def _envelope_error(
    reason: str, value: object, topic: str | None, partition: int | None, offset: int | None
) -> EnvelopeError:
    raw = bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None
    where = f" at offset {offset}" if offset is not None and not topic else ""
    return EnvelopeError(
        f"not a valid kmq message envelope{where}: {reason}",
        topic=topic,
        partition=partition,
        offset=offset,
        raw=raw,
        hint="move the record to a dead-letter queue; it cannot be delivered as a message",
    )


# --------------------------------------------------------------------------------------------
# Headers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordHeaders:
    r"""The kmq headers of a record, parsed. Every field is ``None`` when absent or malformed.

    Headers are hints for filtering before decoding (by id, correlation id, class, expiry);
    :func:`decode_message` is the authority.

    Attributes:
        version (int | None): envelope version (``kmq.version``).
        id (str | None): message id text ``guid\seq`` (``kmq.id``).
        message_class (int | None): PROPID_M_CLASS value (``kmq.class``).
        priority (int | None): 0-7 (``kmq.priority``).
        expires_ms (int | None): TTBR deadline, epoch milliseconds (``kmq.expires``).
        not_before_ms (int | None): timed-dequeue instant, epoch milliseconds (``kmq.not_before``).
        correlation_id (str | None): correlation id text (``kmq.correlation_id``).
        transaction_id (str | None): transaction id (``kmq.txn``).
    """

    version: int | None = None
    id: str | None = None
    message_class: int | None = None
    priority: int | None = None
    expires_ms: int | None = None
    not_before_ms: int | None = None
    correlation_id: str | None = None
    transaction_id: str | None = None


_INT_HEADERS = {
    HEADER_VERSION: "version",
    HEADER_CLASS: "message_class",
    HEADER_PRIORITY: "priority",
    HEADER_EXPIRES: "expires_ms",
    HEADER_NOT_BEFORE: "not_before_ms",
}
_TEXT_HEADERS = {
    HEADER_ID: "id",
    HEADER_CORRELATION_ID: "correlation_id",
    HEADER_TXN: "transaction_id",
}


def read_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> RecordHeaders:
    """Parse the kmq headers of a record without decoding its value; never raises.

    Args:
        headers (Iterable[tuple[str, bytes | None]] | None): the record headers as the Kafka
            client returns them. Unknown headers are skipped; for a repeated header the first
            occurrence wins.

    Returns:
        RecordHeaders: the parsed values (``None`` where absent or malformed).
    """
    found: dict[str, Any] = {}
    for name, raw in headers or ():
        if not isinstance(raw, (bytes, bytearray)):
            continue
        attr = _INT_HEADERS.get(name)
        if attr is not None and attr not in found:
            try:
                found[attr] = int(raw)
            except ValueError:
                pass
            continue
        attr = _TEXT_HEADERS.get(name)
        if attr is not None and attr not in found:
            try:
                found[attr] = raw.decode("utf-8")
            except UnicodeDecodeError:
                pass
    return RecordHeaders(**found)


# --------------------------------------------------------------------------------------------
# Acknowledgments
# --------------------------------------------------------------------------------------------


def encode_acknowledgment(info: AcknowledgmentInfo) -> bytes:
    """Encode an acknowledgment payload (the body of an ACK/NACK message).

    Args:
        info (AcknowledgmentInfo): the payload.

    Returns:
        bytes: the single-object-encoded ``kmq.Acknowledgment``.

    Raises:
        InvalidParameter: ``info`` is not an AcknowledgmentInfo or has text that is not UTF-8.
    """
    if not isinstance(info, AcknowledgmentInfo):
        raise InvalidParameter(f"expected an AcknowledgmentInfo, got {type(info).__name__}")
    record = {
        "original_id": info.original_id.to_bytes(),
        "message_class": int(info.message_class),
        "queues": [{"format_name": q.format_name, "guid": q.guid} for q in info.queues],
        "time": _instant_to_ms(info.time),
        "reason": info.reason,
        "original_body": info.original_body,
    }
    try:
        return _ACKNOWLEDGMENT.encode(record)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidParameter(
            f"acknowledgment cannot be encoded: {type(exc).__name__}: {exc}",
            hint="check reason and queue format names for unpaired surrogate characters",
        ) from exc


def decode_acknowledgment(
    body: bytes,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> AcknowledgmentInfo:
    """Decode the body of an ACK/NACK message.

    Args:
        body (bytes): the message body.
        topic (str | None): the topic of the carrying record, copied into the error.
        partition (int | None): its partition, copied into the error.
        offset (int | None): its offset, copied into the error.

    Returns:
        AcknowledgmentInfo: the payload.

    Raises:
        EnvelopeError: the body is not a valid acknowledgment payload.
    """
    where = (topic, partition, offset)
    try:
        r = _ACKNOWLEDGMENT.decode(body)
        return AcknowledgmentInfo(
            original_id=MessageId.from_bytes(r["original_id"]),
            message_class=r["message_class"],
            queues=tuple(AcknowledgedQueue(q["format_name"], q["guid"]) for q in r["queues"]),
            time=r["time"],
            reason=r["reason"],
            original_body=r["original_body"],
        )
    except _DecodeFailure as exc:
        raise _acknowledgment_error(f"not a valid kmq acknowledgment: {exc}", body, where) from exc
    except InvalidParameter as exc:
        raise _acknowledgment_error(
            f"acknowledgment holds an invalid value: {exc.message}", body, where
        ) from exc
    except Exception as exc:  # noqa: BLE001 - the contract is: only EnvelopeError escapes
        raise _acknowledgment_error(
            f"acknowledgment cannot be converted ({type(exc).__name__}: {exc})", body, where
        ) from exc


def _acknowledgment_error(
    reason: str, body: object, where: tuple[str | None, int | None, int | None]
) -> EnvelopeError:
    topic, partition, offset = where
    return EnvelopeError(
        reason,
        topic=topic,
        partition=partition,
        offset=offset,
        raw=bytes(body) if isinstance(body, (bytes, bytearray, memoryview)) else None,
        hint="the admin queue holds a message that is not a kmq acknowledgment",
    )


def acknowledgment_message(info: AcknowledgmentInfo, *, label: str = "") -> Message:
    """Build the ACK/NACK message that carries ``info`` to an admin queue.

    As in MSMQ, the message class is the acknowledgment class, the correlation id is the
    original message's id and the time-to-be-received is infinite. The queue manager assigns
    ``id``, ``sent_time`` and the destination when it sends it.

    Args:
        info (AcknowledgmentInfo): the payload.
        label (str): the original message's label (MSMQ copies it), at most 250 characters.

    Returns:
        Message: the acknowledgment message, body = :func:`encode_acknowledgment` of ``info``.
    """
    return Message(
        body=encode_acknowledgment(info),
        body_type=BodyType.BYTES,
        label=label,
        message_class=info.message_class,
        correlation_id=info.original_id,
    )
