"""Unit tests for facade.queues.sending: what every send does with a message (stamps, copies and their
records, journal copies, acknowledgments), and that Spark's sink writes what it says."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facade.queues import sending, systemoutputs
from facade.model.envelope import EncodedRecord, decode_acknowledgment, decode_message, encode_message
from facade.errors import InvalidParameter
from facade.model.formatnames import SystemQueue
from facade.model.message import (
    MAX_BODY_BYTES,
    AcknowledgedQueue,
    Acknowledgment,
    JournalLevel,
    Message,
    MessageClass,
    MessageId,
    PrivacyLevel,
)
from facade.queues.sending import (
    ORIGINAL_TTBR_PROPERTY,
    SendCopies,
    acknowledgment,
    check_fan_out,
    kept_copy,
    source_journal_copy,
    stamp_acknowledgment,
    stamp_sent,
)
from facade.model.topics import system_topics
from tests.unit.test_envelope import _sent_messages

T0 = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
MACHINE = uuid.UUID("0f6c8e49-7c57-4a7e-9d3f-6b1a8d7e2c10")
QUEUE_GUID = uuid.UUID("4b1d2c3e-0000-4000-8000-00000000abcd")
ID = MessageId(uuid.UUID("9a1e0f44-5f11-4b7a-8c55-2d7c3f0b9e01"), 7)
QUEUES = ("DIRECT=OS:host\\private$\\a", "DIRECT=OS:host\\private$\\b", "PUBLIC=" + str(QUEUE_GUID))


def _sent(**values: Any) -> Message:
    return stamp_sent(Message(**values), ID, T0, MACHINE, "DL=" + str(QUEUE_GUID))


def _same(record: EncodedRecord, expected: EncodedRecord) -> None:
    assert (record.key, record.value, record.headers) == \
        (expected.key, expected.value, expected.headers)


# ---- stamping ----------------------------------------------------------------------------


def test_stamp_sent_sets_the_queue_managers_stamps_and_leaves_the_message() -> None:
    message = Message(body=b"x", label="l", properties={"k": "v"})
    sent = stamp_sent(message, ID, T0, MACHINE, QUEUES[0], priority=0, transaction_id="t")
    assert (sent.id, sent.sent_time, sent.source_machine_id, sent.destination_format_name) == \
        (ID, T0, MACHINE, QUEUES[0])
    assert sent.priority == 0 and sent.transaction_id == "t"
    assert (sent.body, sent.label, sent.properties) == (b"x", "l", {"k": "v"})
    assert sent.properties is not message.properties
    assert message.id is None and message.sent_time is None and message.transaction_id is None
    assert decode_message(encode_message(sent).value).id == ID


# ---- copies and their records ------------------------------------------------------------


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(message=_sent_messages(),
       queues=st.lists(st.text(min_size=1, max_size=60), min_size=1, max_size=4))
def test_every_copys_record_is_encode_message_of_that_copy(message: Message,
                                                          queues: list[str]) -> None:
    copies = SendCopies(message, len(queues))
    for queue in queues:
        copy = copies.copy(queue)
        assert copy.destination_queue == queue and copy.id == message.id
        _same(copies.record(copy), encode_message(copy, validate=False))
        _same(copies.record(copy, copy), encode_message(copy, validate=False))


def test_the_envelope_is_encoded_once_per_message_when_copies_differ_only_in_queue(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Message] = []
    real = sending.encode_copies

    def counting(message: Message) -> Any:
        calls.append(message)
        return real(message)

    monkeypatch.setattr(sending, "encode_copies", counting)
    sent = _sent(body=b"fan out", label="three queues")
    copies = SendCopies(sent, len(QUEUES))
    records = [copies.record(copies.copy(queue)) for queue in QUEUES]
    assert calls == [sent]
    assert [decode_message(r.value).destination_queue for r in records] == list(QUEUES)
    single = SendCopies(sent, 1)
    _same(single.record(single.copy(QUEUES[0])), encode_message(sent.stamped(
        destination_queue=QUEUES[0])))
    assert len(calls) == 1  # one copy: encoded alone


def test_a_copy_protection_replaced_is_encoded_alone() -> None:
    sent = _sent(body=b"clear")
    copies = SendCopies(sent, 2)
    copy = copies.copy(QUEUES[0])
    sealed = copy.stamped(body=b"sealed for this queue's key")
    _same(copies.record(copy, sealed), encode_message(sealed, validate=False))
    other = copies.copy(QUEUES[1])
    assert decode_message(copies.record(other).value).body == b"clear"


# ---- kept copies (journals, dead-letter queues) ------------------------------------------


def test_kept_copy_no_longer_expires_and_keeps_the_original_ttbr_in_a_property() -> None:
    sent = _sent(body=b"b", time_to_be_received=12.5, properties={"k": "v"})
    kept = kept_copy(sent, message_class=MessageClass.NACK_RECEIVE_TIMEOUT)
    assert kept.time_to_be_received is None
    assert kept.properties == {"k": "v", ORIGINAL_TTBR_PROPERTY: "12.5"}
    assert kept.message_class is MessageClass.NACK_RECEIVE_TIMEOUT and kept.id == sent.id
    assert sent.time_to_be_received == 12.5 and sent.properties == {"k": "v"}
    assert kept_copy(_sent(body=b"b")).properties == {}
    decoded = decode_message(encode_message(kept).value)
    assert float(decoded.properties[ORIGINAL_TTBR_PROPERTY]) == 12.5


def test_the_property_and_helpers_stay_importable_from_systemoutputs() -> None:
    assert systemoutputs.ORIGINAL_TTBR_PROPERTY == "kmq.time_to_be_received" \
        == ORIGINAL_TTBR_PROPERTY
    assert systemoutputs.acknowledgment_requested is sending.acknowledgment_requested


def test_source_journal_copy_only_with_journal_level_journal() -> None:
    assert source_journal_copy(_sent(body=b"b", journal=JournalLevel.DEADLETTER)) is None
    sent = _sent(body=b"b", journal=JournalLevel.JOURNAL | JournalLevel.DEADLETTER,
                 time_to_be_received=3.0)
    copy = source_journal_copy(sent)
    assert copy is not None and copy.id == sent.id and copy.body == b"b"
    assert copy.time_to_be_received is None
    assert copy.properties[ORIGINAL_TTBR_PROPERTY] == "3.0"


# ---- acknowledgments ---------------------------------------------------------------------


def test_acknowledgment_carries_the_original_id_class_label_and_queue() -> None:
    sent = _sent(body=b"b", label="order 7", admin_queue=QUEUES[2],
                 acknowledge=Acknowledgment.FULL_REACH_QUEUE)
    ack = acknowledgment(sent, MessageClass.ACK_REACH_QUEUE, QUEUES[0], QUEUE_GUID)
    assert ack is not None
    assert ack.message_class is MessageClass.ACK_REACH_QUEUE
    assert ack.correlation_id == ID and ack.label == "order 7" and ack.id is None
    info = decode_acknowledgment(ack.body)
    assert info.original_id == ID and info.message_class is MessageClass.ACK_REACH_QUEUE
    assert info.queues == (AcknowledgedQueue(QUEUES[0], QUEUE_GUID),)
    assert info.reason is None and info.original_body is None


def test_a_nack_returns_the_body_unless_it_was_encrypted() -> None:
    sent = _sent(body=b"b", admin_queue=QUEUES[2], acknowledge=Acknowledgment.NACK_REACH_QUEUE)
    nack = acknowledgment(sent, MessageClass.NACK_REACH_QUEUE_TIMEOUT, QUEUES[0], None,
                          reason="late")
    assert nack is not None
    info = decode_acknowledgment(nack.body)
    assert (info.reason, info.original_body, info.queues) == \
        ("late", b"b", (AcknowledgedQueue(QUEUES[0], None),))
    private = sent.stamped(privacy_level=PrivacyLevel.BODY_BASE)
    sealed = acknowledgment(private, MessageClass.NACK_REACH_QUEUE_TIMEOUT, QUEUES[0], None)
    assert sealed is not None and decode_acknowledgment(sealed.body).original_body is None


@pytest.mark.parametrize("case", ["not asked", "other class", "no admin queue", "no id",
                                  "read-only queue"])
def test_no_acknowledgment_when_none_is_due(case: str) -> None:
    values: dict[str, Any] = {"admin_queue": QUEUES[2],
                              "acknowledge": Acknowledgment.POSITIVE_ARRIVAL}
    message_class, read_only = MessageClass.ACK_REACH_QUEUE, False
    if case == "not asked":
        values["acknowledge"] = Acknowledgment.NONE
    elif case == "other class":
        message_class = MessageClass.ACK_RECEIVE
    elif case == "no admin queue":
        del values["admin_queue"]
    elif case == "read-only queue":
        read_only = True
    original = _sent(body=b"b", **values)
    if case == "no id":
        original = original.stamped(id=None)
    assert acknowledgment(original, message_class, QUEUES[0], QUEUE_GUID, read_only) is None


def test_stamp_acknowledgment_one_id_one_copy_per_admin_queue() -> None:
    sent = _sent(body=b"b", admin_queue="DL=" + str(QUEUE_GUID),
                 acknowledge=Acknowledgment.POSITIVE_ARRIVAL)
    ack = acknowledgment(sent, MessageClass.ACK_REACH_QUEUE, QUEUES[0], None)
    assert ack is not None
    ack_id = MessageId(MACHINE, 99)
    copies = stamp_acknowledgment(ack, ack_id, T0, MACHINE, "DL=" + str(QUEUE_GUID), QUEUES[1:])
    assert [c.destination_queue for c in copies] == list(QUEUES[1:])
    for copy in copies:
        assert (copy.id, copy.sent_time, copy.source_machine_id, copy.destination_format_name) \
            == (ack_id, T0, MACHINE, "DL=" + str(QUEUE_GUID))
        assert copy.body == ack.body and copy.correlation_id == ID
    assert ack.id is None


# ---- Spark's sink writes what facade.queues.sending makes -----------------------------------------


class _Output:
    """Stands in for the sink's producer: keeps (topic, record)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, EncodedRecord]] = []

    def send(self, topic: str, record: EncodedRecord) -> None:
        self.sent.append((topic, record))


def test_the_spark_sink_writes_the_copies_journal_copy_and_acks_of_facade_sending() -> None:
    sink = pytest.importorskip("spark_connector.sink")
    from spark_connector.resolve import QueueTarget, Resolution

    targets = tuple(QueueTarget(q, f"topic-{i}", f"receipts-{i}", queue_guid=str(QUEUE_GUID))
                    for i, q in enumerate(QUEUES[:2]))
    admin_target = QueueTarget(QUEUES[2], "admin-topic", "admin-receipts")
    resolution = Resolution("DL=x", targets, "localhost:1", queue_manager="qm",
                            queue_manager_guid=str(MACHINE))
    admin = Resolution(QUEUES[2], (admin_target,), "localhost:1")
    plan = sink._WritePlan(resolution=resolution, defaults={}, body_column_type="binary",
                           fields=("body",), admin={QUEUES[2]: admin}, transactional=False,
                           flush_timeout=1.0, write_id="w")
    scope = sink._TaskScope("batch/w", 0, "tx")
    writer = sink._PartitionWriter(plan, scope)
    output = _Output()
    row = {"body": b"row", "time_to_be_received": 30.0, "journal": "JOURNAL",
           "admin_queue": QUEUES[2], "acknowledge": "POSITIVE_ARRIVAL", "label": "spark"}
    writer._write_row(output, 0, row)
    sent = decode_message(output.sent[0][1].value)
    journal_topic = system_topics("qm", SystemQueue.JOURNAL).data
    assert [topic for topic, _ in output.sent] == ["topic-0", "topic-1", journal_topic]
    assert sent.id == scope.message_id(0, None) and sent.source_machine_id == MACHINE
    assert sent.destination_format_name == "DL=x" and sent.time_to_be_received == 30.0
    for (topic, record), target in zip(output.sent[:2], targets, strict=True):
        assert topic == target.data_topic
        _same(record, encode_message(sent.stamped(destination_queue=target.format_name)))
    journal = decode_message(output.sent[2][1].value)
    # As the facade's journal copies: no TTBR, the original's kept in the property.
    assert journal.id == sent.id and journal.time_to_be_received is None
    assert journal.properties[ORIGINAL_TTBR_PROPERTY] == "30.0"
    assert len(output.sent) == 3 and writer.summary.journal_copies == 1
    writer._acknowledge(output, writer.pending_acks[0])
    acks = [(topic, decode_message(record.value)) for topic, record in output.sent[3:]]
    assert [topic for topic, _ in acks] == ["admin-topic", "admin-topic"]
    for index, ((_, ack), target) in enumerate(zip(acks, targets, strict=True)):
        assert ack.id == sink._ack_id(sent.id, index) and ack.correlation_id == sent.id
        assert ack.destination_queue == QUEUES[2] and ack.label == "spark"
        assert decode_acknowledgment(ack.body).queues == (
            AcknowledgedQueue(target.format_name, QUEUE_GUID),)
    assert writer.summary.acknowledgments == 2


def test_stamping_refuses_a_body_over_msmqs_4_mib_for_every_sender() -> None:
    """Every send path stamps here, the facade's and Spark's sink alike."""
    assert _sent(body=b"x" * MAX_BODY_BYTES).body == b"x" * MAX_BODY_BYTES
    with pytest.raises(InvalidParameter, match=f"{MAX_BODY_BYTES + 1:,} bytes.*"
                                               f"{MAX_BODY_BYTES:,} bytes"):
        _sent(body=b"x" * (MAX_BODY_BYTES + 1))


def test_the_spark_sink_refuses_a_body_over_4_mib_naming_the_row() -> None:
    sink = pytest.importorskip("spark_connector.sink")
    from spark_connector.resolve import QueueTarget, Resolution

    resolution = Resolution(QUEUES[0], (QueueTarget(QUEUES[0], "topic-0", "receipts-0"),),
                            "localhost:1", queue_manager="qm", queue_manager_guid=str(MACHINE))
    plan = sink._WritePlan(resolution=resolution, defaults={}, body_column_type="binary",
                           fields=("body",), admin={}, transactional=False, flush_timeout=1.0,
                           write_id="w")
    writer = sink._PartitionWriter(plan, sink._TaskScope("batch/w", 3, "tx"))
    output = _Output()
    with pytest.raises(InvalidParameter) as info:
        writer._write_row(output, 7, {"body": b"x" * (MAX_BODY_BYTES + 1)})
    text = str(info.value)
    assert f"{MAX_BODY_BYTES + 1:,} bytes" in text and f"{MAX_BODY_BYTES:,} bytes" in text
    assert "row 7" in text, text
    assert output.sent == [] and writer.summary.rows == 0


def test_a_journal_copy_is_the_message_as_received_without_its_ttbr() -> None:
    sent = _sent(body=b"b", time_to_be_received=3.0, properties={"k": "v"})
    kept = kept_copy(sent)
    assert kept == dataclasses.replace(sent, time_to_be_received=None,
                                       properties={"k": "v", ORIGINAL_TTBR_PROPERTY: "3.0"})
    assert sent.time_to_be_received == 3.0 and sent.properties == {"k": "v"}
    kept.properties["extra"] = "x"  # the copy owns its properties
    assert "extra" not in sent.properties


def test_a_journal_copy_that_no_longer_fits_fails_when_it_is_encoded() -> None:
    # Not checked when copied but when encoded: an invalid property on the copy is refused.
    sent = _sent(body=b"b", time_to_be_received=3.0)
    kept = kept_copy(sent)
    kept.properties[7] = "not a name"  # type: ignore[index]
    with pytest.raises(InvalidParameter):
        encode_message(kept)


def test_check_fan_out_bounds_queues_and_bodies_times_queues() -> None:
    small, large = Message(body=b"x" * 100), Message(body=b"y" * 400)
    check_fan_out([large], 1, "q", max_queues=1, max_bytes=1)  # one queue: not bounded here
    check_fan_out([small, large], 2, "DL=x", max_queues=2, max_bytes=1000)  # 1000: at the bound
    with pytest.raises(InvalidParameter, match="reaches 3 queues, over the bound of 2") as many:
        check_fan_out([small], 3, "DL=x", max_queues=2, max_bytes=10**9)
    assert many.value.queue == "DL=x" and "KMQ_MAX_SEND_FANOUT" in many.value.message
    with pytest.raises(InvalidParameter) as big:
        check_fan_out([small, large], 3, "DL=x", max_queues=3, max_bytes=1000)
    assert ("would write 1500 bytes (0.0 MiB) (500 bytes (0.0 MiB) of message bodies x 3 "
            "queues), over the bound of 1000 bytes") in big.value.message
    assert "nothing was sent" in big.value.message and "max_send_bytes" in (big.value.hint or "")


def test_a_spark_row_over_the_send_bound_fails_before_its_copies_are_written() -> None:
    sink = pytest.importorskip("spark_connector.sink")
    from spark_connector.resolve import QueueTarget, Resolution

    targets = tuple(QueueTarget(q, f"topic-{i}", f"receipts-{i}") for i, q in enumerate(QUEUES))
    resolution = Resolution("DL=x", targets, "localhost:1", queue_manager="qm",
                            queue_manager_guid=str(MACHINE))
    plan = sink._WritePlan(resolution=resolution, defaults={}, body_column_type="binary",
                           fields=("body",), admin={}, transactional=False, flush_timeout=1.0,
                           write_id="w", max_send_bytes=3 * 100)
    writer = sink._PartitionWriter(plan, sink._TaskScope("batch/w", 0, "tx"))
    output = _Output()
    writer._write_row(output, 0, {"body": b"x" * 100})  # 300 bytes: at the bound
    assert len(output.sent) == len(QUEUES) == 3
    with pytest.raises(InvalidParameter, match="max_send_bytes") as refused:
        writer._write_row(output, 1, {"body": b"x" * 101})
    assert refused.value.message.startswith("row 1 of partition 0")
    assert len(output.sent) == 3
