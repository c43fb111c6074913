"""Registry records: the pure decoders, and how the view skips, counts and repairs bad records.

No broker: ``Registry._apply`` is fed records directly. The broker-backed behaviour (a poison
record written to the real registry topics) is in ``tests/integration/test_registry_poison.py``;
random input is fuzzed in ``tests/faults/test_fuzz.py``.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest

from facade.errors import EnvelopeError
from facade.kafka.librdkafka import KafkaRecord
from facade.state.registry import (
    QueueManagerRecord,
    QueueProperties,
    Registry,
    decode_queue_manager_record,
    decode_queue_record,
    decode_registry_key,
)
from facade.model.topics import QUEUE_MANAGER_REGISTRY_TOPIC, QUEUE_REGISTRY_TOPIC

PATH = "qm1\\private$\\orders"
KEY = PATH.encode()


def _properties(**changes) -> QueueProperties:
    base = QueueProperties(path_name=PATH, queue_manager="qm1", queue_name="orders", private=True,
                           data_topic="kmq.qm1.private.orders",
                           receipts_topic="kmq.qm1.private.orders.receipts",
                           instance="6f1c1b7e-4f34-4f59-9a51-3f1d2c3b4a59", label="Orders",
                           quota_kb=10, create_time=1.5, modify_time=2.5)
    return QueueProperties(**{**base.__dict__, **changes})


def _doc(**changes) -> bytes:
    doc = {**json.loads(_properties().to_json()), **changes}
    return json.dumps({k: v for k, v in doc.items() if v is not _DROP}).encode()


_DROP = object()
_MANAGER = QueueManagerRecord("qm1", "0f8fad5b-d9cb-469f-a165-70867728950e", 3.0)


# -- queue records ------------------------------------------------------------------------------


def test_a_written_queue_record_decodes_to_the_same_properties() -> None:
    properties = _properties()
    assert decode_queue_record(KEY, properties.to_json()) == properties
    public = _properties(path_name="qm1\\orders", private=False, data_topic="kmq.qm1.public.orders",
                         receipts_topic="kmq.qm1.public.orders.receipts", quota_kb=None,
                         type_id=str(uuid.uuid4()), journal=True, base_priority=-5)
    assert decode_queue_record(b"qm1\\orders", public.to_json()) == public


def test_unknown_fields_and_a_higher_version_are_read() -> None:
    got = decode_queue_record(KEY, _doc(version=7, colour="blue", nested={"a": [1]}))
    assert got == _properties()
    # Records of version 1 always carried "version"; a missing one is read as version 1.
    assert decode_queue_record(KEY, _doc(version=_DROP)) == _properties()


def test_receive_retry_count_defaults_to_5_and_records_without_it_read_as_5() -> None:
    assert _properties().receive_retry_count == 5
    assert decode_queue_record(KEY, _doc(receive_retry_count=_DROP)) == _properties()
    for value in (None, 0, 12):
        properties = _properties(receive_retry_count=value)
        assert decode_queue_record(KEY, properties.to_json()).receive_retry_count == value


@pytest.mark.parametrize("value, why", [
    (b"not json", "not JSON"),
    (b'{"version":1}', "field 'path_name' is missing"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[1, 2]", "must be a JSON object"),
    (b"NaN", "not JSON"),
    (b"[" * 50_000, "not JSON"),
    (_doc(quota_kb="x"), "'quota_kb' must be int or null"),
    (_doc(private="yes"), "'private' must be bool"),
    (_doc(journal=1), "'journal' must be bool"),
    (_doc(base_priority=True), "'base_priority' must be int"),
    (_doc(base_priority=1.0), "'base_priority' must be int"),
    (_doc(create_time="now"), "'create_time' must be int or float"),
    (_doc(create_time=10**400), "'create_time' is out of range"),
    (_doc(label=None), "'label' must be str"),
    (_doc(instance="not-a-guid"), "'instance' must be a GUID"),
    (_doc(instance=_DROP), "'instance' is missing"),
    (_doc(version=0), "'version' must be an integer >= 1"),
    (_doc(version="2"), "'version' must be an integer >= 1"),
    (_doc(version=True), "'version' must be an integer >= 1"),
    (_doc(quota_kb=-1), "quota_kb must be a positive number"),
    (_doc(privacy_level=7), "privacy_level"),
    (_doc(label="x" * 125), "PROPID_Q_LABEL"),
    (_doc(data_topic="no spaces allowed"), "not a legal Kafka topic name"),
    (_doc(path_name="qm2\\private$\\orders"), "is not the record's path_name"),
    (_doc(queue_name="other"), "do not match path_name"),
    (_doc(private=False), "do not match path_name"),
    (_doc(receive_retry_count="5"), "'receive_retry_count' must be int or null"),
    (_doc(receive_retry_count=-1), "receive_retry_count must be a number of releases"),
    (_doc(receive_retry_count=2**32), "receive_retry_count must be a number of releases"),
])
def test_bad_queue_records_raise_envelope_error_naming_the_problem(value: bytes, why: str) -> None:
    with pytest.raises(EnvelopeError) as caught:
        decode_queue_record(KEY, value, partition=0, offset=42)
    error = caught.value
    assert why in str(error)
    assert (error.topic, error.partition, error.offset) == (QUEUE_REGISTRY_TOPIC, 0, 42)
    assert error.raw == value and "repairs" in (error.hint or "") and "kmq queue set" in error.hint


def test_a_path_name_must_be_the_canonical_name_of_a_queue() -> None:
    for key, path in [("QM1\\private$\\orders", "QM1\\private$\\orders"),
                      (".\\private$\\orders", ".\\private$\\orders"),
                      ("qm1\\private$\\orders;poison", "qm1\\private$\\orders;poison")]:
        with pytest.raises(EnvelopeError):
            decode_queue_record(key.encode(), _doc(path_name=path))


@pytest.mark.parametrize("key", [None, b"", b"\xff\xfeq", "text", 3])
def test_bad_keys_raise_envelope_error(key) -> None:
    with pytest.raises(EnvelopeError, match="key"):
        decode_queue_record(key, _properties().to_json())
    with pytest.raises(EnvelopeError, match="key"):
        decode_registry_key(key, topic=QUEUE_MANAGER_REGISTRY_TOPIC)


@pytest.mark.parametrize("value", [None, "text", 3, bytearray(b"{}")])
def test_values_that_are_not_bytes_raise_envelope_error(value) -> None:
    with pytest.raises(EnvelopeError):
        decode_queue_record(KEY, value)
    with pytest.raises(EnvelopeError):
        decode_queue_manager_record(b"qm1", value)


def test_from_json_raises_envelope_error() -> None:
    assert QueueProperties.from_json(_properties().to_json()) == _properties()
    with pytest.raises(EnvelopeError):
        QueueProperties.from_json(b"not json")


# -- queue-manager records ----------------------------------------------------------------------


def test_queue_manager_records_old_and_new_decode() -> None:
    assert decode_queue_manager_record(b"qm1", _MANAGER.to_json()) == _MANAGER
    legacy = json.dumps({"name": "qm1", "guid": _MANAGER.guid, "create_time": 3}).encode()
    assert decode_queue_manager_record(b"qm1", legacy) == _MANAGER
    upper = json.dumps({"version": 3, "name": "qm1", "guid": _MANAGER.guid.upper(),
                        "create_time": 3.0, "site": "x"}).encode()
    assert decode_queue_manager_record(b"qm1", upper) == _MANAGER


@pytest.mark.parametrize("doc, why", [
    ({"version": 1}, "'name' is missing"),
    ({"name": "qm1", "guid": "nope", "create_time": 1}, "'guid' must be a GUID"),
    ({"name": "qm1", "guid": 5, "create_time": 1}, "'guid' must be str"),
    ({"name": "qm2", "guid": _MANAGER.guid, "create_time": 1}, "is not the record's name"),
    ({"name": "", "guid": _MANAGER.guid, "create_time": 1}, "is empty"),
    ({"name": "qm1", "guid": _MANAGER.guid, "create_time": None}, "'create_time' must be"),
    ({"name": "qm1", "guid": _MANAGER.guid, "create_time": 1, "version": -1}, "'version'"),
])
def test_bad_queue_manager_records_raise_envelope_error(doc: dict, why: str) -> None:
    with pytest.raises(EnvelopeError, match=why) as caught:
        decode_queue_manager_record(b"qm1", json.dumps(doc).encode(), offset=3)
    assert caught.value.topic == QUEUE_MANAGER_REGISTRY_TOPIC and caught.value.offset == 3


# -- the view ------------------------------------------------------------------------------------


class _Feed:
    """Feeds records to a Registry view in offset order, per topic."""

    def __init__(self) -> None:
        self.registry = Registry(session=None)  # type: ignore[arg-type] - never used here
        self.offsets = {QUEUE_REGISTRY_TOPIC: 0, QUEUE_MANAGER_REGISTRY_TOPIC: 0}

    def __call__(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        offset = self.offsets[topic]
        self.offsets[topic] += 1
        self.registry._apply(KafkaRecord(topic, 0, offset, 0, key, value, ()))


def test_malformed_queue_records_are_skipped_logged_once_counted_and_repaired(
        caplog: pytest.LogCaptureFixture) -> None:
    feed = _Feed()
    view = feed.registry
    good = _properties()
    caplog.set_level(logging.WARNING, logger="kmq.registry")
    feed(QUEUE_REGISTRY_TOPIC, KEY, good.to_json())
    feed(QUEUE_REGISTRY_TOPIC, KEY, b"not json")                     # offset 1
    feed(QUEUE_REGISTRY_TOPIC, b"qm1\\private$\\new", b'{"version":1}')  # offset 2
    feed(QUEUE_REGISTRY_TOPIC, b"\xff\xfe", good.to_json())           # offset 3
    feed(QUEUE_REGISTRY_TOPIC, None, good.to_json())                  # offset 4
    # The key keeps its last valid value; nothing else appears.
    assert view._queues == {PATH: good}
    assert view.malformed == 4
    logged = [r.getMessage() for r in caplog.records if r.name == "kmq.registry"]
    assert len(logged) == 4
    for offset, why in zip((1, 2, 3, 4), ("not JSON", "'path_name' is missing", "not UTF-8",
                                          "missing or empty")):
        line = logged[offset - 1]
        assert f"topic '{QUEUE_REGISTRY_TOPIC}', partition 0, offset {offset}" in line
        assert why in line
    # A later valid record repairs a key; a tombstone does too.
    new = _properties(path_name="qm1\\private$\\new", queue_name="new",
                      data_topic="kmq.qm1.private.new",
                      receipts_topic="kmq.qm1.private.new.receipts")
    feed(QUEUE_REGISTRY_TOPIC, b"qm1\\private$\\new", new.to_json())
    changed = good.with_changes(label="changed")
    feed(QUEUE_REGISTRY_TOPIC, KEY, changed.to_json())
    assert view._queues == {PATH: changed, "qm1\\private$\\new": new}
    feed(QUEUE_REGISTRY_TOPIC, b"qm1\\private$\\new", None)
    assert view._queues == {PATH: changed} and view.malformed == 4


def test_queue_manager_registry_first_valid_record_wins_and_marks_later_ones() -> None:
    feed = _Feed()
    view = feed.registry
    topic = QUEUE_MANAGER_REGISTRY_TOPIC
    feed(topic, b"qm1", b"not json")
    feed(topic, b"qm1", json.dumps({"version": 1}).encode())
    assert view._managers == {} and view.malformed == 2
    feed(topic, b"qm1", _MANAGER.to_json())                       # the first valid record wins
    assert view._managers == {"qm1": _MANAGER} and not view._reaffirm
    other = QueueManagerRecord("qm1", str(uuid.uuid4()), 9.0)
    feed(topic, b"qm1", other.to_json())                           # a race's losing GUID
    assert view._managers == {"qm1": _MANAGER} and view._reaffirm == {"qm1"}
    feed(topic, b"qm1", _MANAGER.to_json())                       # the winner written again
    assert not view._reaffirm
    feed(topic, b"qm1", b"\x00garbage")                            # compaction could keep this
    assert view._reaffirm == {"qm1"} and view.malformed == 3
    feed(topic, b"qm1", _MANAGER.to_json())
    feed(topic, b"qm1", None)                                      # so could this tombstone
    assert view._reaffirm == {"qm1"} and view._managers == {"qm1": _MANAGER}
    feed(topic, b"\xff", b"x")                                     # no queue manager's key
    assert view._reaffirm == {"qm1"} and view.malformed == 4
