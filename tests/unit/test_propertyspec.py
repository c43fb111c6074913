"""Each message property is declared once (facade.model.propertyspec on facade.model.message.Message):
the checks, the Avro envelope mapping and schema, and the Spark columns are derived from the
declarations. These tests hold the derived forms to the stored ones so they cannot drift."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from facade.model.envelope import (
    declared_envelope_schema,
    decode_message,
    encode_message,
    envelope_record,
)
from facade.errors import InvalidParameter
from facade.model import message as m
from facade.model.message import Message, MessageId
from facade.model.propertyspec import declare, specs
from spark_connector.decode import decode_batch
from spark_connector.schema import ACK_COLUMNS, MESSAGE_SCHEMA, RECORD_COLUMNS, property_columns
from spark_connector.sink import MESSAGE_COLUMNS

ENVELOPE_AVSC = Path(__file__).resolve().parents[2] / "schemas" / "message_envelope.avsc"
GUID = uuid.UUID("ae0c5671-f190-12ce-ae10-00dd0114290f")
INSTANT = dt.datetime(2026, 11, 23, 18, 0, 0, 123000, tzinfo=dt.UTC)

#: The envelope of :func:`populated`, byte for byte as the wire format fixes it: the
#: declarations must encode exactly this.
GOLDEN_VALUE = bytes.fromhex(
    "c301893b43ee82ae136c71560cae90f1ce12ae1000dd0114290f070000008280040271560cae90f1ce12ae10"
    "00dd0114290f060000000a021c06c6010a6f72646572a240106f726465722034320665787402344449524543"
    "543d4f533a2e5c70726976617465245c61646d696e02384449524543543d4f533a2e5c70726976617465245c"
    "7265706c696573022c4449524543543d4f533a2e5c70726976617465245c71024e444c3d3366656432313638"
    "2d623930322d346462662d613938652d34656262323634613436316202304449524543543d4f533a2e5c7072"
    "6976617465245c646c7102c8dc0302b4ad0702f6d58499c16802c6e58499c1680286a48599c1680248616530"
    "63353637312d663139302d313263652d616531302d303064643031313432393066020673696402020874782d"
    "310101020a9c80049c9803020863657274020673696702066b6579040604026102620263026400"
)


def populated() -> Message:
    """A message with every property set to something other than its default."""
    return Message(
        body=b"order 42", label="order", body_type=m.BodyType.BYTES, id=MessageId(GUID, 7),
        correlation_id=MessageId(GUID, 6), priority=5, delivery=m.Delivery.RECOVERABLE,
        acknowledge=m.Acknowledgment.FULL_RECEIVE, admin_queue=r"DIRECT=OS:.\private$\admin",
        response_queue=r"DIRECT=OS:.\private$\replies", time_to_reach_queue=30.5,
        time_to_be_received=60.25, not_before=INSTANT + dt.timedelta(seconds=5),
        journal=m.JournalLevel.DEADLETTER | m.JournalLevel.JOURNAL, app_specific=99,
        extension=b"ext", message_class=m.MessageClass.NACK_PURGED, sent_time=INSTANT,
        arrived_time=INSTANT + dt.timedelta(seconds=1), source_machine_id=GUID,
        destination_queue=r"DIRECT=OS:.\private$\q",
        destination_format_name="DL=3fed2168-b902-4dbf-a98e-4ebb264a461b", lookup_id=12,
        sender_id=b"sid", sender_id_type=m.SenderIdType.SID, transaction_id="tx-1",
        first_in_transaction=True, last_in_transaction=True, auth_level=m.AuthLevel.ALWAYS,
        privacy_level=m.PrivacyLevel.BODY_AES, hash_algorithm=m.HashAlgorithm.SHA512,
        encryption_algorithm=m.EncryptionAlgorithm.AES128, sender_certificate=b"cert",
        signature=b"sig", authenticated=True, destination_symmetric_key=b"key",
        dead_letter_queue=r"DIRECT=OS:.\private$\dlq", abort_count=2, move_count=3,
        properties={"a": "b", "c": "d"})


def _without_docs(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_docs(v) for k, v in value.items() if k != "doc"}
    if isinstance(value, list):
        return [_without_docs(v) for v in value]
    return value


# ---- declarations ---------------------------------------------------------------------------


def test_populated_message_sets_every_property_apart_from_its_default() -> None:
    message = populated()
    for f in dataclasses.fields(Message):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        assert getattr(message, f.name) != default, f.name


def test_every_message_field_is_declared_with_a_propid() -> None:
    declared = specs(Message)
    assert [f.name for f, _ in declared] == [f.name for f in dataclasses.fields(Message)]
    assert all(spec.propid for _, spec in declared)


def test_a_field_without_a_declaration_is_refused() -> None:
    @dataclasses.dataclass
    class Partly:
        declared: int = declare(0, propid="PROPID_M_APPSPECIFIC")
        forgotten: int = 0

    with pytest.raises(TypeError, match="Partly.forgotten is not declared"):
        specs(Partly)


def test_positions_are_unique_and_contiguous() -> None:
    avro = sorted(spec.avro.position for _, spec in specs(Message) if spec.avro)
    spark = sorted(spec.spark.position for _, spec in specs(Message) if spec.spark)
    assert avro == list(range(len(avro)))
    assert spark == list(range(len(spark)))


@pytest.mark.parametrize("name", [f.name for f, spec in specs(Message)
                                  if spec.check is not None or spec.enum is not None])
def test_each_declared_check_refuses_a_wrong_value_naming_the_property(name: str) -> None:
    propid = dict((f.name, spec.propid) for f, spec in specs(Message))[name]
    with pytest.raises(InvalidParameter) as raised:
        Message(**{name: object()})
    assert name in raised.value.message and propid in raised.value.message


# ---- Avro envelope ---------------------------------------------------------------------------


def test_declared_avro_schema_equals_the_avsc_file() -> None:
    stored = _without_docs(json.loads(ENVELOPE_AVSC.read_text()))
    derived = declared_envelope_schema()
    # Field names, types, defaults and order; plus the record's own name.
    assert derived["fields"] == stored["fields"]
    assert (derived["name"], derived["namespace"]) == (stored["name"], stored["namespace"])


def test_envelope_record_has_the_avro_fields_in_schema_order() -> None:
    stored = json.loads(ENVELOPE_AVSC.read_text())
    assert list(envelope_record(populated())) == [f["name"] for f in stored["fields"]]


def test_wire_format_is_byte_identical_to_the_hand_written_mapping() -> None:
    assert encode_message(populated()).value == GOLDEN_VALUE


def test_golden_record_decodes_to_every_property() -> None:
    # lookup_id and authenticated are receive-side state, never taken from the wire.
    expected = dataclasses.replace(populated(), lookup_id=None, authenticated=False)
    assert decode_message(GOLDEN_VALUE) == expected


# ---- Spark -----------------------------------------------------------------------------------


def test_spark_schema_is_the_declared_columns_then_ack_and_record_columns() -> None:
    declared = property_columns()
    names = [f.name for f in MESSAGE_SCHEMA.fields]
    assert names == ([name for name, _ in declared] + [f.name for f in ACK_COLUMNS]
                     + [f.name for f in RECORD_COLUMNS])
    for (name, column), field in zip(declared, MESSAGE_SCHEMA.fields):
        assert (field.name, field.dataType.simpleString()) == (name, column.type)


def test_spark_decoded_row_shows_each_declared_column() -> None:
    message = populated()
    batch = pa.RecordBatch.from_pydict({
        "value": [encode_message(message).value], "topic": ["t"], "partition": [0],
        "offset": [41], "timestamp": pa.array([INSTANT], pa.timestamp("us", tz="UTC"))})
    row = decode_batch(batch).to_pylist()[0]
    assert row["error"] is None
    assert row["id"] == str(message.id) and row["correlation_id"] == str(message.correlation_id)
    assert row["message_class"] == "NACK_PURGED" and row["delivery"] == "RECOVERABLE"
    assert row["source_machine_id"] == str(GUID)
    assert row["arrived_time"] == INSTANT  # the record timestamp, not the envelope's
    assert row["authenticated"] is False  # never taken from the wire
    assert dict(row["properties"]) == message.properties
    for name in ("label", "priority", "body", "body_type", "app_specific", "extension",
                 "sent_time", "not_before", "time_to_reach_queue", "time_to_be_received",
                 "destination_queue", "destination_format_name", "response_queue",
                 "admin_queue", "dead_letter_queue", "acknowledge", "journal",
                 "transaction_id", "first_in_transaction", "last_in_transaction", "sender_id",
                 "auth_level", "privacy_level", "abort_count", "move_count"):
        assert row[name] == getattr(message, name), name


def test_spark_writer_columns_are_the_declared_inputs() -> None:
    declared = [f.name for f, spec in specs(Message) if spec.spark_input is not None]
    assert list(MESSAGE_COLUMNS) == [*declared, "message_key"]
    assert all(MESSAGE_COLUMNS[name].meaning for name in declared)
