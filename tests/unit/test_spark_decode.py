"""The Spark connector's pure parts, without Spark or a broker: envelope decoding of Arrow
batches, poison handling, offsets and option parsing."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pyarrow as pa
import pytest

from facade.model.envelope import acknowledgment_message, encode_message
from facade.errors import EnvelopeError, InvalidParameter
from facade.model.message import (
    AcknowledgedQueue,
    Acknowledgment,
    AcknowledgmentInfo,
    BodyType,
    Delivery,
    JournalLevel,
    Message,
    MessageClass,
    MessageId,
)
from spark_connector.decode import DeadLetterTarget, decode_batch, poison_copy
from spark_connector.resolve import QueueTarget, Resolution
from spark_connector.schema import MESSAGE_SCHEMA
from spark_connector.source import SourceOptions, allot, resolve_positions

UTC = dt.timezone.utc
SENT = dt.datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
ARRIVED = dt.datetime(2026, 3, 1, 12, 0, 1, 456789, tzinfo=UTC)
QM_GUID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def _message(**changes: object) -> Message:
    fields = {"id": MessageId(QM_GUID, 7), "sent_time": SENT, "source_machine_id": QM_GUID,
              "destination_queue": r"DIRECT=OS:qm\private$\q",
              "destination_format_name": r"DIRECT=OS:qm\private$\q"}
    fields.update(changes)
    return Message(**fields)


def _batch(values: list[bytes | None], timestamp_type: pa.DataType | None = None) -> pa.RecordBatch:
    n = len(values)
    ts_type = timestamp_type or pa.timestamp("us", tz="UTC")
    stamps = pa.array([ARRIVED] * n, pa.timestamp("us", tz="UTC")).cast(ts_type)
    return pa.RecordBatch.from_arrays(
        [pa.array(values, pa.binary()), pa.array(["kmq.qm.private.q"] * n),
         pa.array([0] * n, pa.int32()), pa.array(range(10, 10 + n), pa.int64()), stamps],
        names=["value", "topic", "partition", "offset", "timestamp"])


def test_every_envelope_column_is_decoded() -> None:
    message = _message(
        body=b"payload", label="order 42", priority=6, body_type=BodyType.STRING,
        app_specific=2**32 - 1, extension=b"ext", correlation_id=MessageId(QM_GUID, 3),
        response_queue=r"DIRECT=OS:qm\private$\replies",
        admin_queue=r"DIRECT=OS:qm\private$\admin", acknowledge=Acknowledgment.FULL_RECEIVE,
        time_to_reach_queue=30.0, time_to_be_received=60.5, journal=JournalLevel.DEADLETTER,
        delivery=Delivery.RECOVERABLE, properties={"k": "v", "x": "y"},
        not_before=SENT + dt.timedelta(seconds=5), abort_count=2, move_count=1)

    row = decode_batch(_batch([encode_message(message).value])).to_pylist()[0]

    assert row["id"] == f"{QM_GUID}\\7" and row["correlation_id"] == f"{QM_GUID}\\3"
    assert (row["label"], row["priority"], row["body"], row["body_type"]) == (
        "order 42", 6, b"payload", int(BodyType.STRING))
    assert row["app_specific"] == 2**32 - 1 and row["extension"] == b"ext"
    assert row["message_class"] == "NORMAL" and row["delivery"] == "RECOVERABLE"
    assert row["acknowledge"] == int(Acknowledgment.FULL_RECEIVE)
    assert row["journal"] == int(JournalLevel.DEADLETTER)
    assert row["sent_time"] == SENT and row["not_before"] == SENT + dt.timedelta(seconds=5)
    assert row["arrived_time"] == ARRIVED == row["timestamp"]  # PROPID_M_ARRIVEDTIME
    assert (row["time_to_reach_queue"], row["time_to_be_received"]) == (30.0, 60.5)
    assert row["source_machine_id"] == str(QM_GUID)
    assert row["response_queue"] == r"DIRECT=OS:qm\private$\replies"
    assert row["admin_queue"] == r"DIRECT=OS:qm\private$\admin"
    assert sorted(row["properties"]) == [("k", "v"), ("x", "y")]
    assert (row["abort_count"], row["move_count"]) == (2, 1)
    assert row["authenticated"] is False and row["error"] is None and row["raw_value"] is None
    assert (row["topic"], row["partition"], row["offset"]) == ("kmq.qm.private.q", 0, 10)
    assert row["ack_original_id"] is None


def test_output_schema_is_message_schema() -> None:
    batch = decode_batch(_batch([encode_message(_message()).value, b"junk"]))
    assert batch.schema.names == MESSAGE_SCHEMA.fieldNames()
    empty = decode_batch(_batch([]))
    assert empty.num_rows == 0 and empty.schema == batch.schema


def test_naive_timestamps_are_read_as_utc_instants() -> None:
    batch = _batch([encode_message(_message()).value], timestamp_type=pa.timestamp("us"))
    assert decode_batch(batch).to_pylist()[0]["timestamp"] == ARRIVED


def test_acknowledgment_payload_columns() -> None:
    info = AcknowledgmentInfo(original_id=MessageId(QM_GUID, 99),
                              message_class=MessageClass.ACK_RECEIVE,
                              queues=(AcknowledgedQueue(r"DIRECT=OS:qm\private$\q"),),
                              time=SENT, reason="received")
    ack = acknowledgment_message(info, label="order")
    ack.id, ack.sent_time = MessageId(QM_GUID, 100), SENT

    row = decode_batch(_batch([encode_message(ack).value])).to_pylist()[0]

    assert row["message_class"] == "ACK_RECEIVE" and row["correlation_id"] == f"{QM_GUID}\\99"
    assert row["ack_original_id"] == f"{QM_GUID}\\99"
    assert row["ack_queues"] == [r"DIRECT=OS:qm\private$\q"]
    assert (row["ack_reason"], row["ack_time"]) == ("received", SENT)


def test_dead_letter_copy_keeps_its_body_without_ack_columns() -> None:
    copy = _message(body=b"original body", message_class=MessageClass.NACK_RECEIVE_TIMEOUT)
    row = decode_batch(_batch([encode_message(copy).value])).to_pylist()[0]
    assert row["message_class"] == "NACK_RECEIVE_TIMEOUT" and row["body"] == b"original body"
    assert row["ack_original_id"] is None and row["error"] is None


def test_poison_rows_in_the_error_column() -> None:
    good = encode_message(_message()).value
    rows = decode_batch(_batch([b"junk", good, None])).to_pylist()
    assert [r["error"] is None for r in rows] == [False, True, False]
    assert rows[0]["raw_value"] == b"junk" and rows[0]["id"] is None
    assert rows[0]["offset"] == 10 and "offset 10" in rows[0]["error"]
    assert rows[0]["arrived_time"] is None and rows[0]["timestamp"] == ARRIVED


def test_poison_fails_the_batch_with_its_position() -> None:
    with pytest.raises(EnvelopeError, match="offset 11") as caught:
        decode_batch(_batch([encode_message(_message()).value, b"junk"]), on_error="fail")
    assert (caught.value.topic, caught.value.partition, caught.value.offset) == (
        "kmq.qm.private.q", 0, 11)


def test_poison_goes_to_the_sink_and_the_row_is_dropped() -> None:
    seen = []
    batch = decode_batch(_batch([b"junk", encode_message(_message()).value]),
                         on_error="dead_letter", poison=lambda *args: seen.append(args))
    assert batch.column("offset").to_pylist() == [11]
    assert [(value, offset) for value, _t, _p, offset, _reason in seen] == [(b"junk", 10)]
    with pytest.raises(InvalidParameter):
        decode_batch(_batch([b"junk"]), on_error="dead_letter")
    # Receive mode's internal choice: the removal dead-letters, so the decoder only drops.
    assert decode_batch(_batch([b"junk"]), on_error="drop").num_rows == 0


def test_poison_copy_is_the_facade_poison_message_with_a_stable_id() -> None:
    target = DeadLetterTarget(topic="kmq.qm.system.deadletter", bootstrap_servers="b:9092",
                              queue_manager_guid=str(QM_GUID),
                              queues={"kmq.qm.private.q": r"DIRECT=OS:qm\private$\q"})
    first = poison_copy(target, b"junk", "kmq.qm.private.q", 0, 10, "bad", now=SENT)
    again = poison_copy(target, b"junk", "kmq.qm.private.q", 0, 10, "bad")
    other = poison_copy(target, b"junk", "kmq.qm.private.q", 0, 11, "bad")
    assert first.id == again.id != other.id  # a retried task writes a duplicate, not a message
    assert first.message_class is MessageClass.NACK_RECEIVE_REJECTED and first.body == b"junk"
    assert first.properties == {"kmq.reason": "bad", "kmq.source": "kmq.qm.private.q@0:10"}
    assert first.destination_queue == r"DIRECT=OS:qm\private$\q"
    assert first.source_machine_id == QM_GUID
    assert first.label == r"poison record from DIRECT=OS:qm\private$\q"


def test_dead_letter_target_from_a_resolution() -> None:
    resolution = Resolution(r"DIRECT=OS:qm\private$\q",
                            (QueueTarget(r"DIRECT=OS:qm\private$\q", "kmq.qm.private.q",
                                         "kmq.qm.private.q.receipts"),),
                            "b:9092", {"security.protocol": "SSL"}, "qm", str(QM_GUID), "/tmp")
    target = DeadLetterTarget.from_resolution(resolution)
    assert target.topic == "kmq.qm.system.deadletter"
    assert target.kafka_options == {"security.protocol": "SSL"}
    assert target.queues == {"kmq.qm.private.q": r"DIRECT=OS:qm\private$\q"}


# --------------------------------------------------------------------------------------------
# Offsets and options
# --------------------------------------------------------------------------------------------


def test_allot_splits_the_budget_by_backlog() -> None:
    start = {"a": 0, "b": 100, "c": 5}
    assert allot(start, {"a": 10, "b": 100, "c": 5}, None) == {"a": 10, "b": 100, "c": 5}
    assert allot(start, {"a": 30, "b": 110, "c": 5}, 8) == {"a": 6, "b": 102, "c": 5}
    assert allot(start, {"a": 1000, "b": 101, "c": 5}, 2) == {"a": 1, "b": 101, "c": 5}
    ends = allot(start, {"a": 30, "b": 130, "c": 35}, 10)
    assert sum(ends[t] - start[t] for t in start) <= 10
    assert all(ends[t] > start[t] for t in start)  # every backlog makes progress


def test_resolve_positions() -> None:
    marks = {"a": (5, 50), "b": (0, 7)}
    assert resolve_positions("earliest", ["a", "b"], marks, "earliest") == {"a": 5, "b": 0}
    assert resolve_positions("latest", ["a", "b"], marks, "earliest") == {"a": 50, "b": 7}
    assert resolve_positions({"a": 3, "b": -1}, ["a", "b"], marks, "earliest") == {"a": 5, "b": 7}
    assert resolve_positions({"a": 20}, ["a", "b"], marks, "latest") == {"a": 20, "b": 7}


def _options(**extra: str) -> dict[str, str]:
    resolution = Resolution("fn", (QueueTarget("fn", "t", "t.receipts"),), "b:9092",
                            {"security.protocol": "SSL"}, "qm", str(QM_GUID), "/tmp")
    return {"kmq.resolution": resolution.to_json(), **extra}


def test_source_options_parse() -> None:
    parsed = SourceOptions.parse({k.lower(): v for k, v in _options(**{
        "startingOffsets": json.dumps({"t": {"0": 4}}), "maxOffsetsPerTrigger": "50",
        "kmq.mode": "RECEIVE", "kafka.bootstrap.servers": "other:9092",
        "kafka.fetch.wait.max.ms": "10"}).items()})
    assert parsed.receive and parsed.max_offsets_per_trigger == 50
    assert parsed.resolution.bootstrap_servers == "other:9092"
    assert parsed.kafka_options == {"security.protocol": "SSL", "fetch.wait.max.ms": "10"}


@pytest.mark.parametrize("bad", [
    {"kmq.mode": "take"}, {"maxOffsetsPerTrigger": "0"}, {"maxOffsetsPerTrigger": "many"},
    {"kmq.includeRemoved": "yes"}, {"startingOffsets": "[1]"}, {"endingOffsets": "soon"},
    {"kmq.mode": "receive", "kmq.includeRemoved": "true"},
])
def test_source_options_reject(bad: dict[str, str]) -> None:
    with pytest.raises(InvalidParameter):
        SourceOptions.parse(_options(**bad))
    with pytest.raises(InvalidParameter, match="kmq.resolution"):
        SourceOptions.parse({})
