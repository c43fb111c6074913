"""Avro single-object encoding shared by every kmq record type.

kmq writes each of its Avro records (the message envelope, the acknowledgment payload, the
receipt) as an `Avro single-object encoding
<https://avro.apache.org/docs/1.12.0/specification/#single-object-encoding>`_: the marker
``C3 01``, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing
Canonical Form, then the Avro binary body. ``schemas/README.md`` specifies the framing; the
``.avsc`` files next to it are the source of truth.

This module holds the generic machinery: finding the schema directory, one
:class:`SchemaFamily` per record type (its current schema plus the older writers it still
reads, selected by fingerprint), and the registry of kmq's families, so a decoder that meets
another kmq record type can say which one it is. The record-specific modules
(:mod:`facade.model.envelope`, :mod:`facade.model.receipts`) map Python objects to and from Avro records.
Pure Python, no I/O beyond reading the ``.avsc`` files at import.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import fastavro
from fastavro.schema import fingerprint as _avro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from facade.errors import InvalidParameter

__all__ = [
    "HEADER_SIZE",
    "SCHEMA_DIR",
    "SCHEMA_FILES",
    "SINGLE_OBJECT_MARKER",
    "VERSION_ATTRIBUTE",
    "DecodeFailure",
    "SchemaFamily",
    "WriterSchema",
    "family",
    "make_writer",
    "register_writer_schema",
    "schema_dir",
]

#: Avro single-object encoding marker.
SINGLE_OBJECT_MARKER = b"\xc3\x01"
#: Bytes in front of the Avro body: marker (2) + fingerprint (8).
HEADER_SIZE = 10
#: Custom schema attribute with the record version; not part of the canonical form, so it does
#: not change the fingerprint.
VERSION_ATTRIBUTE = "kmq.version"
#: The current schema of every kmq record type, as file names in the schema directory.
SCHEMA_FILES = ("message_envelope.avsc", "acknowledgment.avsc", "receipt.avsc", "queue_snapshot.avsc")


def schema_dir() -> Path:
    """Return the directory holding the ``.avsc`` files.

    A wheel carries them in ``facade/_schemas`` (pyproject force-include); a source tree or an
    editable install has them in ``<repo>/schemas``.

    Returns:
        Path: the first candidate directory that holds every file of :data:`SCHEMA_FILES`.

    Raises:
        FileNotFoundError: neither directory has them (a broken installation).
    """
    package = Path(__file__).resolve().parents[1]  # facade/, above this layer's folder
    candidates = (package / "_schemas", package.parent / "schemas")
    for directory in candidates:
        if all((directory / name).is_file() for name in SCHEMA_FILES):
            return directory
    raise FileNotFoundError(
        f"kmq Avro schemas not found: looked for {', '.join(SCHEMA_FILES)} in "
        + " and ".join(str(d) for d in candidates)
        + "; reinstall kmq (the wheel must include facade/_schemas)"
    )


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """A schema that may have written a record: parsed form, version and framing prefix.

    Attributes:
        name (str): the record's full name, e.g. ``kmq.MessageEnvelope``.
        version (int | None): the ``kmq.version`` attribute, if any.
        parsed (Any): the fastavro-parsed schema.
        fingerprint (bytes): 8-byte CRC-64-AVRO fingerprint, little-endian, as in records.
        prefix (bytes): marker + fingerprint, written in front of every record.
    """

    name: str
    version: int | None
    parsed: Any
    fingerprint: bytes
    prefix: bytes


def make_writer(schema_json: Mapping[str, Any]) -> WriterSchema:
    """Parse a schema and compute its single-object framing.

    Args:
        schema_json (Mapping[str, Any]): the parsed JSON of a ``.avsc`` file.

    Returns:
        WriterSchema: the parsed schema with its fingerprint.

    Raises:
        Exception: whatever fastavro raises for an invalid schema (several types).
    """
    parsed = fastavro.parse_schema(dict(schema_json))
    canonical = to_parsing_canonical_form(parsed)
    # fastavro returns the CRC-64-AVRO fingerprint as little-endian hex, as single-object needs.
    fp = bytes.fromhex(_avro_fingerprint(canonical, "CRC-64-AVRO"))
    name = parsed["name"] if isinstance(parsed, dict) else str(parsed)
    version = schema_json.get(VERSION_ATTRIBUTE)
    return WriterSchema(name, version, parsed, fp, SINGLE_OBJECT_MARKER + fp)


class DecodeFailure(Exception):
    """Why a value is not a valid record; the record module turns it into EnvelopeError."""


class SchemaFamily:
    """One record type: its current schema and the older writers it still reads.

    Args:
        directory (Path): where the ``.avsc`` files are.
        filename (str): the current schema, e.g. ``message_envelope.avsc``; frozen earlier
            versions are ``message_envelope.v<N>.avsc`` in the same directory.
        uuids_as_text (bool): :meth:`decode` returns the fields of Avro's ``uuid`` logical
            type as their text rather than ``uuid.UUID`` (the record module converts them):
            fastavro parses each one anew, about 2 us per field and record, where a decoder
            that sees the same few GUIDs again can reuse the objects it made.
        timestamps_as_ms (bool): :meth:`decode` returns the fields of Avro's
            ``timestamp-millis`` logical type as their int (epoch milliseconds) rather than an
            aware ``datetime``, for record modules that keep milliseconds anyway.

    An older writer whose fields are the current schema's first fields, with the same names
    and types, and whose missing fields all default to null is read with its own schema and
    the nulls added: what Avro's schema resolution gives, at half its cost (a receipt of
    version 1, the version most receipts are written with, 8 us instead of 17 us). Any other
    older writer is resolved by fastavro.

    Raises:
        OSError: a schema file cannot be read.
    """

    def __init__(self, directory: Path, filename: str, *, uuids_as_text: bool = False,
                 timestamps_as_ms: bool = False):
        self._plain_types = frozenset(
            name for name, wanted in (("uuid", uuids_as_text),
                                      ("timestamp-millis", timestamps_as_ms)) if wanted)
        #: Per writer fingerprint: the parsed schema fastavro reads its records with.
        self._reading: dict[bytes, Any] = {}
        #: Per older writer that is a prefix of the current schema: the fields it lacks, null.
        self._appended: dict[bytes, dict[str, None]] = {}
        current_json = json.loads((directory / filename).read_text("utf-8"))
        self._current_json = current_json
        self.current = make_writer(current_json)
        self.writers: dict[bytes, WriterSchema] = {self.current.fingerprint: self.current}
        self._reading[self.current.fingerprint] = self._read_form(current_json, self.current)
        stem = filename.removesuffix(".avsc")
        for older in sorted(directory.glob(f"{stem}.v*.avsc")):
            self.register(json.loads(older.read_text("utf-8")))

    def register(self, schema_json: Mapping[str, Any]) -> bytes:
        """Accept records written with ``schema_json`` (another version of this record).

        Args:
            schema_json (Mapping[str, Any]): the writer schema as parsed JSON.

        Returns:
            bytes: its 8-byte fingerprint as it appears in records.

        Raises:
            InvalidParameter: not valid Avro, or a different record (other full name).
        """
        try:
            writer = make_writer(schema_json)
        except Exception as exc:  # noqa: BLE001 - fastavro raises several types for bad schemas
            raise InvalidParameter(
                f"not a valid Avro schema: {type(exc).__name__}: {exc}",
                hint="pass the parsed JSON of a .avsc file",
            ) from exc
        if writer.name != self.current.name:
            raise InvalidParameter(
                f"writer schema {writer.name!r} is not a version of {self.current.name!r}",
                hint="register only earlier versions of the same record (same full name)",
            )
        if writer.fingerprint not in self.writers:
            self.writers[writer.fingerprint] = writer
            self._reading[writer.fingerprint] = self._read_form(schema_json, writer)
            missing = _nulls_appended(schema_json, self._current_json)
            if missing is not None:
                self._appended[writer.fingerprint] = missing
        return writer.fingerprint

    def _read_form(self, schema_json: Mapping[str, Any], writer: WriterSchema) -> Any:
        """The parsed schema records of ``writer`` are read with: the same, or with the
        logical types of ``uuids_as_text`` and ``timestamps_as_ms`` dropped. The binary form is
        the same: a ``uuid`` is an Avro string, a ``timestamp-millis`` a long."""
        if not self._plain_types:
            return writer.parsed
        return fastavro.parse_schema(_without_logical_types(schema_json, self._plain_types))

    def version(self, number: int) -> WriterSchema:
        """The writer schema of one version of this record (the current one or a frozen one).

        Args:
            number (int): the ``kmq.version`` wanted.

        Returns:
            WriterSchema: that version's schema.

        Raises:
            KeyError: no schema of that version is registered.
        """
        for writer in self.writers.values():
            if writer.version == number:
                return writer
        raise KeyError(f"{self.current.name} has no registered version {number}")

    def encode(self, record: Mapping[str, Any], writer: WriterSchema | None = None) -> bytes:
        """Write ``record`` framed as a single object, with the current schema by default.

        Args:
            record (Mapping[str, Any]): the Avro record as Python values.
            writer (WriterSchema | None): an older version to write instead (see
                :meth:`version`), so that readers of that version can read the record; it must
                be able to carry every value that matters (fields it lacks are not written).

        Returns:
            bytes: marker + fingerprint + Avro binary body.

        Raises:
            ValueError, TypeError, OverflowError: a value does not fit its Avro type.
        """
        writer = writer or self.current
        out = io.BytesIO()
        out.write(writer.prefix)
        fastavro.schemaless_writer(out, writer.parsed, record)
        return out.getvalue()

    def decode(self, value: object) -> dict[str, Any]:
        """Read a single-object-framed record, resolving older writers to the current schema.

        Args:
            value (object): the bytes to decode (anything else is reported, not raised).

        Returns:
            dict[str, Any]: the record, with the current schema's fields.

        Raises:
            DecodeFailure: not bytes, too short, wrong marker, unknown fingerprint, malformed or
                truncated body, or trailing bytes.
        """
        if value is None:
            raise DecodeFailure("record value is None (a tombstone or a record without value)")
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise DecodeFailure(f"record value is a {type(value).__name__}, not bytes")
        size = len(value)
        if size < HEADER_SIZE:
            raise DecodeFailure(
                f"record value is {size} bytes, shorter than the {HEADER_SIZE}-byte Avro "
                "single-object header"
            )
        if value[:2] != SINGLE_OBJECT_MARKER:
            raise DecodeFailure(
                f"record value starts with {bytes(value[:2]).hex(' ')}, not the Avro single-object "
                f"marker c3 01: not written by kmq"
            )
        fp = bytes(value[2:HEADER_SIZE])
        writer = self.writers.get(fp)
        if writer is None:
            raise DecodeFailure(self._unknown_fingerprint(fp))
        stream = io.BytesIO(value)
        stream.seek(HEADER_SIZE)
        try:
            reading = self._reading
            appended = self._appended.get(fp)
            reader = None if writer is self.current or appended is not None \
                else reading[self.current.fingerprint]
            record = cast(dict[str, Any],
                          fastavro.schemaless_reader(stream, reading[fp], reader))
            if appended:
                record.update(appended)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types on bad input
            raise DecodeFailure(
                f"Avro body of {writer.name} is malformed or truncated "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        if stream.tell() != size:
            raise DecodeFailure(
                f"{size - stream.tell()} unexpected bytes after the {writer.name} record"
            )
        return record

    def _unknown_fingerprint(self, fp: bytes) -> str:
        # Name the other kmq record type when a record lands in the wrong decoder (e.g. a
        # receipt read as a message): the usual cause is a wrong topic, not a newer writer.
        for other in _FAMILIES.values():
            if other.current.name != self.current.name and fp in other.writers:
                return (
                    f"record is a {other.current.name}, not a {self.current.name} "
                    f"(writer schema fingerprint {fp.hex()})"
                )
        return (
            f"unknown writer schema fingerprint {fp.hex()} for {self.current.name}: written by a "
            "newer kmq or another application"
        )


def _stripped(schema: Any, drop: Callable[[str, Any], bool]) -> Any:
    """A copy of a schema (parsed JSON) without the attributes ``drop(key, value)`` names."""
    if isinstance(schema, list):
        return [_stripped(item, drop) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    return {key: _stripped(value, drop) for key, value in schema.items() if not drop(key, value)}


def _without_logical_types(schema: Any, names: frozenset[str]) -> Any:
    """A copy of a schema (parsed JSON) whose logical types in ``names`` are their plain
    Avro types (a ``uuid`` a string, a ``timestamp-millis`` a long)."""
    return _stripped(schema, lambda key, value: key == "logicalType" and value in names)


def _without_docs(schema: Any) -> Any:
    """A copy of a schema (parsed JSON) without its ``doc`` attributes (they do not change
    what a record holds)."""
    return _stripped(schema, lambda key, _value: key == "doc")


def _nulls_appended(older: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, None] | None:
    """The fields ``current`` appends to ``older`` when both are records, ``older``'s fields
    are ``current``'s first ones (same names, types, logical types and defaults) and every
    appended field defaults to null: reading with ``older`` and adding those nulls is then
    exactly Avro's resolution of ``older`` to ``current``. None when that does not hold."""
    if older.get("type") != "record" or current.get("type") != "record":
        return None
    old_fields, new_fields = older.get("fields", []), current.get("fields", [])
    if len(old_fields) > len(new_fields):
        return None
    if any(_without_docs(a) != _without_docs(b) for a, b in zip(old_fields, new_fields)):
        return None
    appended = new_fields[len(old_fields):]
    if any("default" not in field or field["default"] is not None for field in appended):
        return None
    return {field["name"]: None for field in appended}


#: The directory the schemas are loaded from.
SCHEMA_DIR = schema_dir()
#: Families whose decoders take ``uuid`` fields as text (see SchemaFamily): the envelope's
#: source_machine_id is one of a few queue manager GUIDs, read once per message received.
_UUIDS_AS_TEXT = frozenset({"message_envelope.avsc"})
#: Families whose decoders take ``timestamp-millis`` fields as their int: a receipt keeps
#: milliseconds, and every receiver of a queue reads every receipt.
_TIMESTAMPS_AS_MS = frozenset({"receipt.avsc"})
_FAMILIES: dict[str, SchemaFamily] = {
    name: SchemaFamily(SCHEMA_DIR, name, uuids_as_text=name in _UUIDS_AS_TEXT,
                       timestamps_as_ms=name in _TIMESTAMPS_AS_MS)
    for name in SCHEMA_FILES}


def family(filename: str) -> SchemaFamily:
    """Return kmq's family for one record type.

    Args:
        filename (str): one of :data:`SCHEMA_FILES`, e.g. ``receipt.avsc``.

    Returns:
        SchemaFamily: the process-wide family (shared, so registered writers are seen by all).

    Raises:
        KeyError: ``filename`` is not a kmq record schema.
    """
    return _FAMILIES[filename]


def register_writer_schema(schema: Mapping[str, Any]) -> bytes:
    """Make records written with another version of a kmq schema readable.

    Args:
        schema (Mapping[str, Any]): the writer schema as parsed JSON; its full name picks the
            family (``kmq.MessageEnvelope``, ``kmq.Acknowledgment``, ``kmq.Receipt``).

    Returns:
        bytes: the schema's 8-byte fingerprint as it appears in records.

    Raises:
        InvalidParameter: the schema is not valid Avro or not a version of a kmq record schema.
    """
    name = schema.get("name", "")
    full = name if "." in name else f"{schema.get('namespace', '')}.{name}"
    for fam in _FAMILIES.values():
        if fam.current.name == full:
            return fam.register(schema)
    known = " or ".join(fam.current.name for fam in _FAMILIES.values())
    raise InvalidParameter(
        f"schema {full!r} is not a kmq record schema",
        hint=f"register a version of {known}",
    )
