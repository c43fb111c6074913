"""The JVM's verdict on an envelope (:func:`spark_connector.jvmdecode.check_on_jvm`) against
Python's decoder, the authority: for a valid envelope and for envelopes each breaking one rule
of :func:`~spark_connector.jvmdecode.fast_path_conditions`, the JVM decodes only envelopes
Python accepts, and leaves the rest to Python: the invalid ones, and two kinds it could but
does not decode (an acknowledgment's nested body, a GUID not in kmq's canonical lowercase).
No broker: the values are Spark rows."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from facade.errors import EnvelopeError
from facade.model.envelope import _ENVELOPE, _record_of, decode_message, encode_message
from facade.model.message import Message, MessageClass, MessageId
from spark_connector.jvmdecode import FAST_PATH, check_on_jvm

#: Stands for a byte sequence that is not UTF-8: written as this character's two bytes, then
#: its second byte replaced by an ASCII one (a lead byte without its continuation).
_MARK = "Ā"
_MARK_BYTES = _MARK.encode("utf-8")
_BROKEN = _MARK_BYTES[:1] + b"A"


def _full() -> dict[str, Any]:
    """The Avro record of a message with every optional text, instant and a property set."""
    fn = r"DIRECT=OS:qm\private$\q"
    return dict(_record_of(Message(
        body=b"body", label="label", id=MessageId(uuid.uuid4(), 3), priority=5,
        admin_queue=fn, response_queue=fn, destination_queue=fn, destination_format_name=fn,
        dead_letter_queue=fn, transaction_id="xact", first_in_transaction=True,
        time_to_reach_queue=30.0, time_to_be_received=60.0, properties={"k": "v"},
        sent_time=dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
        not_before=dt.datetime(2026, 1, 3, tzinfo=dt.UTC),
        source_machine_id=uuid.uuid4())))


def _spoil(**fields: Any) -> Callable[[dict[str, Any]], bytes]:
    return lambda record: _ENVELOPE.encode({**record, **fields})


def _not_utf8(**fields: Any) -> Callable[[dict[str, Any]], bytes]:
    def spoil(record: dict[str, Any]) -> bytes:
        value = _ENVELOPE.encode({**record, **fields})
        assert value.count(_MARK_BYTES) == 1
        return value.replace(_MARK_BYTES, _BROKEN)
    return spoil


#: Valid envelopes the JVM leaves to Python.
LEFT_TO_PYTHON = ("acknowledgment class", "source machine id in capitals")
#: name -> (how the full record is written, whether the JVM decodes it).
CASES: dict[str, tuple[Callable[[dict[str, Any]], bytes], bool]] = {
    "valid": (_spoil(), True),
    "trailing byte": (lambda record: _ENVELOPE.encode(record) + b"\x00", False),
    "priority 8": (_spoil(priority=8), False),
    "delivery 2": (_spoil(delivery=2), False),
    "acknowledge flag 16": (_spoil(acknowledge=16), False),
    "journal flag 4": (_spoil(journal=4), False),
    "message class 3": (_spoil(message_class=3), False),
    "acknowledgment class": (_spoil(message_class=MessageClass.ACK_REACH_QUEUE.value), False),
    "hash algorithm 1": (_spoil(hash_algorithm=1), False),
    "privacy level 2": (_spoil(privacy_level=2), False),
    "app_specific 2**32": (_spoil(app_specific=2**32), False),
    "label of 251 characters": (_spoil(label="l" * 251), False),
    "label not UTF-8": (_not_utf8(label=_MARK), False),
    "empty admin queue": (_spoil(admin_queue=""), False),
    "empty transaction id": (_spoil(transaction_id=""), False),
    "response queue not UTF-8": (_not_utf8(response_queue=_MARK), False),
    "dead-letter queue not UTF-8": (_not_utf8(dead_letter_queue=_MARK), False),
    "property key not UTF-8": (_not_utf8(properties={_MARK: "v"}), False),
    "property value not UTF-8": (_not_utf8(properties={"k": _MARK}), False),
    "first in transaction without one": (_spoil(transaction_id=None), False),
    "time to be received < 0": (_spoil(time_to_be_received_ms=-1), False),
    "sent after year 9999": (_spoil(sent_time=253402300800000), False),
    "not before year 1": (_spoil(not_before=-62135596800001), False),
    "source machine id in capitals": (
        _spoil(source_machine_id=str(uuid.uuid4()).upper()), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_jvm_decodes_exactly_the_envelopes_python_accepts(spark: Any, case: str) -> None:
    spoil, decoded_on_jvm = CASES[case]
    value = spoil(_full())
    if case in LEFT_TO_PYTHON or decoded_on_jvm:
        decode_message(value)  # Python accepts it
    else:
        with pytest.raises(EnvelopeError):
            decode_message(value)
    rows = check_on_jvm(spark.createDataFrame([(value,)], "value binary")).select(
        FAST_PATH, "_kmq_value").collect()
    assert rows[0][FAST_PATH] is decoded_on_jvm
    assert (rows[0]["_kmq_value"] is None) is decoded_on_jvm  # Python gets the rest


def test_a_valid_record_as_the_facade_writes_it_is_decoded_on_the_jvm(spark: Any) -> None:
    value = encode_message(Message(body=b"x", label="ünïcode ✓", id=MessageId(uuid.uuid4(), 1),
                                   properties={"ключ": "值"})).value
    rows = check_on_jvm(spark.createDataFrame([(value,)], "value binary")).collect()
    assert rows[0][FAST_PATH] is True
