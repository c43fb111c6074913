r"""Decoding kmq envelopes on the JVM with spark-avro's ``from_avro``, for the Kafka-source path.

:func:`check_on_jvm` checks the value's single-object header (``C3 01`` + the current
``kmq.MessageEnvelope`` fingerprint), cuts it off, decodes the rest with ``from_avro`` and
``schemas/message_envelope.avsc`` into a struct column, and gives each row a verdict: whether
the JVM's decoding stands. :func:`jvm_columns` computes each
:data:`~spark_connector.schema.MESSAGE_SCHEMA` column from that struct as
:func:`spark_connector.decode.decode_messages` computes it (message ids as ``guid\seq`` text,
enum names, milliseconds as seconds...). No row goes through Python for that.

Python's decoder (:func:`facade.model.envelope.decode_message`) stays the authority. A row is decoded
on the JVM only when it provably reads as Python reads it (:func:`fast_path_conditions`):

* the header is the current envelope schema's, and ``from_avro`` decoded the rest;
* the canonical Avro encoding of the decoded values (``to_avro``: Avro's Java writer, minimal
  varints, a map as one block) is exactly as long as the bytes read, so nothing was left over
  (trailing bytes) and nothing was read leniently; map keys are unique;
* every property is in its MSMQ range, as :meth:`facade.model.message.Message.validate` checks it
  (enums and flags from the property declarations, int ranges, label length, non-empty format
  names, timers, canonical GUID text, valid UTF-8, the transaction flags);
* the message is not an acknowledgment (ACK/NACK class), whose body is a nested
  ``kmq.Acknowledgment`` that Python decodes.

Every other row (poison records, older writer schemas, acknowledgments, anything unusual) is
handed, undecoded, to the Python decoder in the decode step that follows the queue view
(:class:`spark_connector.read.KafkaRowFinisher`), which gives it the ``error`` and
``raw_value`` columns, dead-letters it or fails the task exactly as the Python path does.

The expressions are kept compilable and small, because that is where the time goes: Spark
compiles the scan, the decode and the checks of a stage into one Java method. The verdict
alone is most of the 8,000 bytes HotSpot compiles, so
:class:`spark_connector.read.KafkaRowFinisher` computes it in a stage of its own (between its
two Python steps) and the columns a query reads in the next; checks of one kind share one
expression, and a set of allowed values is one ``array_contains``. A higher-order
function (``aggregate``, ``forall``, ``transform``) is never compiled (``CodegenFallback``)
and makes Spark interpret the whole projection it is in; an expression repeated under a
``CASE WHEN`` branch is not shared, so each repetition is computed; and a method of more than
8,000 bytes of bytecode is not compiled by the JIT at all (HotSpot's
``DontCompileHugeMethods``). Hence one ``to_avro`` for the canonical length rather than a
size rule per field, and one regular expression per message id rather than one ``substring``
per byte.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag
from typing import TYPE_CHECKING, Any, cast

from facade.model import avro as kmq_avro
from facade.model.message import MAX_LABEL_LENGTH, Message, MessageClass
from facade.model.propertyspec import specs
from facade.model.timers import TIMER_RANGES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["ENVELOPE", "ENVELOPE_SCHEMA_FILE", "FAST_PATH", "check_on_jvm", "envelope_schema_json",
           "fast_path_conditions", "jvm_columns"]

ENVELOPE_SCHEMA_FILE = "message_envelope.avsc"
#: The boolean column saying a row was decoded on the JVM (dropped by the Python steps).
FAST_PATH = "_kmq_fast"
#: The struct column ``from_avro`` decodes the envelope into (null where the header is not
#: the current schema's or the bytes are not an envelope).
ENVELOPE = "_kmq_env"

_UINT32_MAX = 0xFFFFFFFF
#: Int-ranged properties (Message declares them with _int_check): (lowest, highest).
_INT_RANGES = {
    "priority": (0, 7),
    "body_type": (0, _UINT32_MAX),
    "app_specific": (0, _UINT32_MAX),
    "abort_count": (0, _UINT32_MAX),
    "move_count": (0, _UINT32_MAX),
}
#: Optional format-name and id text: None or non-empty.
_TEXT = ("admin_queue", "response_queue", "destination_queue", "destination_format_name",
         "dead_letter_queue", "transaction_id")
#: Properties whose Avro value is always acceptable once decoded (bytes, instants, booleans,
#: ids of 20 bytes by the schema's fixed type, the string map: checked below for UTF-8).
_ANY = ("body", "extension", "sender_id", "sender_certificate", "signature",
        "destination_symmetric_key", "id", "correlation_id", "first_in_transaction",
        "last_in_transaction", "properties")
#: Instants (timestamp-millis): checked together against Python's datetime range.
_INSTANTS = ("sent_time", "arrived_time", "not_before")
#: The GUID text fastavro's uuid logical type turns into the same text through uuid.UUID.
_CANONICAL_GUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
#: Python datetimes run from year 1 to 9999: fastavro fails on a timestamp-millis outside.
#: (Epoch milliseconds: independent of the session's time zone.)
_FIRST_INSTANT = "timestamp_millis(-62135596800000)"
_LAST_INSTANT = "timestamp_millis(253402300799999)"


def envelope_schema_json() -> str:
    """The text of ``schemas/message_envelope.avsc`` (what ``from_avro`` reads with)."""
    return (kmq_avro.schema_dir() / ENVELOPE_SCHEMA_FILE).read_text("utf-8")


def _prefix() -> bytes:
    """Marker and fingerprint in front of every record written with the current schema."""
    return kmq_avro.family(ENVELOPE_SCHEMA_FILE).current.prefix


#: The 40 hex digits of an MSGID in groups: GUID bytes 0-3, 4-5, 6-7 (each little-endian),
#: 8-9, 10-15, then the sequence number's four bytes (little-endian).
_MSGID_HEX = "^" + "(..)" * 8 + "(.{4})(.{12})" + "(..)" * 4 + "$"
#: The GUID text, a backslash, then the sequence number's hex digits in big-endian order.
_MSGID_ORDER = "$4$3$2$1-$6$5-$8$7-$9-$10\\\\$14$13$12$11"


def _message_id(column: Column) -> Column:
    """``guid\\seq`` text of a 20-byte MSMQ MSGID (null stays null): the GUID in Windows
    byte order (first three groups little-endian), then a little-endian uint32 in decimal.

    One ``hex`` and one regular expression per id: Spark does not share a subexpression
    under a ``CASE WHEN`` branch, so an expression taking each byte apart separately
    recomputes the hex text for each of the 20 bytes."""
    from pyspark.sql import functions as F

    ordered = F.regexp_replace(F.hex(column), _MSGID_HEX, _MSGID_ORDER)
    return F.concat(F.lower(F.substring(ordered, 1, 37)),
                    F.conv(F.substring(ordered, 38, 8), 16, 10))


def _enum_names(kind: type[IntEnum]) -> Column:
    from pyspark.sql import functions as F

    return F.create_map(*[item for member in kind
                          for item in (F.lit(member.value), F.lit(member.name))])


def fast_path_conditions(env: Column) -> list[tuple[str, Column]]:
    """(what is checked, the boolean expression) for every property of the decoded record
    ``env`` (a ``from_avro`` struct): all true means Python would accept the record's
    values as they are (see the module docs). Built from the property declarations, so a
    property added to :class:`facade.model.message.Message` without a rule here is an error.

    Checks of one kind share one expression (the texts' UTF-8, the instants' range, the
    non-empty format names), and a value set is one ``array_contains`` of a literal array:
    the generated code stays small enough for the JIT (see the module docs).

    Raises:
        NotImplementedError: a declared envelope property has no rule here.
    """
    from pyspark.sql import functions as F

    conditions: list[tuple[str, Column]] = []
    texts: list[Column] = []  # the label: its UTF-8 checked with the optional texts'
    optional_texts: list[Column] = []  # None or at least one character
    instants: list[Column] = []
    for field, spec in specs(Message):
        if spec.avro is None:
            continue
        name, value = field.name, env[spec.avro.name]
        members: list[Any] = list(cast(Any, spec.enum)) if spec.enum is not None else []
        if spec.enum is not None and issubclass(spec.enum, IntFlag):
            mask = 0
            for member in members:
                mask |= member.value
            conditions.append((name, (value >= 0) & ((value.bitwiseAND(F.lit(~mask))) == 0)))
        elif name == "message_class":
            # Acknowledgments carry a nested kmq.Acknowledgment body that Python decodes.
            classes = [m.value for m in members if not m.is_acknowledgment]
            conditions.append((f"{name} (not an acknowledgment)", _one_of(value, classes)))
        elif spec.enum is not None:
            conditions.append((name, _one_of(value, [m.value for m in members])))
        elif name in _INT_RANGES:
            low, high = _INT_RANGES[name]
            conditions.append((name, value.between(low, high)))
        elif name == "label":
            conditions.append((name, F.char_length(value) <= MAX_LABEL_LENGTH))
            texts.append(value)
        elif name in _TEXT:
            optional_texts.append(value)
        elif name in TIMER_RANGES:
            seconds = value.cast("double") / 1000.0
            conditions.append((name, value.isNull()
                               | seconds.between(0.0, float(TIMER_RANGES[name].maximum))))
        elif name == "source_machine_id":
            conditions.append((name, value.isNull() | value.rlike(_CANONICAL_GUID)))
        elif name in _INSTANTS:
            instants.append(value)
        elif name in _ANY:
            pass
        else:
            raise NotImplementedError(f"message property {name} has no JVM decoding rule: "
                                      "add one to spark_connector.jvmdecode")
    # least/greatest skip nulls: null only when every instant is null, which is in range.
    conditions.append((", ".join(_INSTANTS), F.coalesce(
        (F.least(*instants) >= F.expr(_FIRST_INSTANT))
        & (F.greatest(*instants) <= F.expr(_LAST_INSTANT)), F.lit(True))))
    # One array of the optional texts serves both checks (Spark computes it once).
    optional = F.array(*optional_texts)
    conditions.append(("non-empty " + ", ".join(_TEXT),
                       ~F.coalesce(F.array_contains(optional, F.lit("")), F.lit(False))))
    properties = env["properties"]
    keys, values = F.map_keys(properties), F.map_values(properties)
    conditions.append(("properties (unique keys)", F.size(F.array_distinct(keys)) == F.size(keys)))
    # Every text is valid UTF-8 exactly when they are, joined by an ASCII byte: no byte of a
    # multi-byte UTF-8 sequence is ASCII, so validity never spans the separator.
    # (F.forall would say the same, but see the module docs on higher-order functions.)
    conditions.append(("UTF-8 text (label, " + ", ".join(_TEXT) + ", properties)",
                       F.is_valid_utf8(F.concat_ws(",", *texts, optional, keys, values))))
    in_transaction = env["transaction_id"].isNotNull()
    conditions.append(("transaction", in_transaction
                       | ~(env["first_in_transaction"] | env["last_in_transaction"])))
    return conditions


def _one_of(value: Column, allowed: list[int]) -> Column:
    """``value`` is one of ``allowed``: ``array_contains`` of a literal array is a loop in
    the generated code, where ``isin`` is one comparison per value."""
    from pyspark.sql import functions as F

    return F.array_contains(F.array(*[F.lit(v) for v in allowed]), value)


def jvm_columns(env: Column, record_timestamp: Column) -> dict[str, Column]:
    """The envelope columns of MESSAGE_SCHEMA computed from a decoded record (meaningful
    where :data:`FAST_PATH` is true): column name -> expression.

    Args:
        env (Column): the ``from_avro`` struct (:data:`ENVELOPE`).
        record_timestamp (Column): the Kafka record's timestamp (MSMQ's arrived time here).
    """
    from pyspark.sql import functions as F

    from spark_connector.schema import ACK_COLUMNS, property_columns

    by_property = {f.name: spec for f, spec in specs(Message)}
    columns: dict[str, Column] = {}
    for name, column in property_columns():
        spec = by_property[name]
        avro = spec.avro
        if column.codec == "record_timestamp":
            columns[name] = record_timestamp
        elif column.codec == "false":
            columns[name] = F.lit(False)
        elif avro is None:
            raise NotImplementedError(f"column {name} has no JVM decoding rule")
        elif avro.codec == "message_id":
            columns[name] = _message_id(env[avro.name])
        elif column.codec == "name" and spec.enum is not None:
            columns[name] = F.element_at(_enum_names(spec.enum), env[avro.name])
        elif avro.codec == "duration_ms":
            columns[name] = env[avro.name].cast("double") / 1000.0
        else:
            columns[name] = env[avro.name]
    for ack in ACK_COLUMNS:  # acknowledgments take the Python path: null here
        columns[ack.name] = F.lit(None).cast(ack.dataType)
    return columns


def check_on_jvm(df: DataFrame) -> DataFrame:
    """Kafka-source rows plus the decoded envelope (:data:`ENVELOPE`), the verdict
    (:data:`FAST_PATH`) and, for the rows the JVM cannot decode, the value (``_kmq_value``).

    The message columns are left to :func:`jvm_columns`, so that a query computes only the
    ones it reads, and outside the expression that holds the verdict: Spark compiles the
    projections of a stage into one method, and the verdict alone is most of HotSpot's limit.

    Args:
        df (DataFrame): Spark's Kafka-source columns (``format("kafka")``), possibly more.

    Returns:
        DataFrame: ``df``'s columns, then ``_kmq_env``, ``_kmq_fast`` and ``_kmq_value``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    schema = envelope_schema_json()
    prefix = _prefix()
    value = F.col("value")
    header_ok = F.coalesce(F.substring(value, 1, len(prefix)) == F.lit(prefix), F.lit(False))
    body = F.when(header_ok, F.expr(f"substr(value, {len(prefix) + 1})"))
    staged = df.select("*", body.alias("_kmq_body"))
    decoded = staged.select(
        "*", from_avro(F.col("_kmq_body"), schema, {"mode": "PERMISSIVE"}).alias(ENVELOPE))
    env = F.col(ENVELOPE)
    # Read exactly as Python reads it: nothing after the record, nothing encoded leniently.
    # to_avro writes the decoded values canonically (Avro's Java writer: minimal varints, a
    # map as one block), so the same length means nothing was left over or read leniently.
    # (Lengths, not bytes: a map's entries may come back in another order.)
    fast = env.isNotNull() & (F.octet_length(to_avro(env, schema))
                              == F.octet_length(F.col("_kmq_body")))
    for _what, condition in fast_path_conditions(env):
        fast = fast & F.coalesce(condition, F.lit(False))
    checked = decoded.select("*", F.coalesce(fast, F.lit(False)).alias(FAST_PATH)).drop("_kmq_body")
    return checked.select("*", F.when(~F.col(FAST_PATH), value).alias("_kmq_value"))
