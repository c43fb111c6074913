"""The in-memory Kafka (facade.kafka.memorykafka) keeps Kafka's documented semantics for what kmq
uses: offsets, keys and headers, delivery reports served by poll/flush, transactions whose
markers take offsets and whose open or aborted records read_committed readers never see,
fencing by transactional.id, the log start offset and the high watermark."""

from __future__ import annotations

from typing import Any

import pytest

from facade.errors import BrokerError, QueueExists, QueueNotFound, TransactionAborted
from facade.kafka.kafkaseam import KafkaRecord
from facade.kafka.memorykafka import MemoryKafka, MemoryKafkaSession, MemoryProducer, MemoryReader
from facade.model.message import Delivery


@pytest.fixture
def session() -> MemoryKafkaSession:
    session = MemoryKafkaSession()
    session.create_topics(["t", "u"])
    return session


def _read_all(session: MemoryKafkaSession, topic: str, start: int = -1) -> list[KafkaRecord]:
    reader = session.reader()
    reader.assign({topic: start})
    records = [record for batch in reader.read_to_end([topic], timeout=10) for record in batch]
    reader.close()
    return records


def _in_transaction(session: MemoryKafkaSession, transactional_id: str = "tx") -> MemoryProducer:
    """A transactional producer, initialised, with a transaction begun."""
    producer = session.producer(Delivery.RECOVERABLE, transactional_id=transactional_id)
    producer.init_transactions()
    producer.begin_transaction()
    return producer


def _reader_at_start(session: MemoryKafkaSession, topic: str = "t") -> MemoryReader:
    reader = session.reader()
    reader.assign({topic: 0})
    return reader


def test_records_get_consecutive_offsets_and_keep_key_value_and_headers(
        session: MemoryKafkaSession) -> None:
    producer = session.producer(Delivery.RECOVERABLE)
    reports: list[tuple[Any, Any]] = []
    for i in range(3):
        producer.produce("t", value=f"v{i}".encode(), key=b"k",
                         headers=[("h", b"1"), ("h", b"2")],
                         on_delivery=lambda err, msg: reports.append((err, msg)))
    assert reports == [], "delivery reports are served by poll/flush, never by produce"
    assert producer.flush(10) == 0
    assert [(err, msg.offset()) for err, msg in reports] == [(None, 0), (None, 1), (None, 2)]
    records = _read_all(session, "t")
    assert [(r.offset, r.key, r.value) for r in records] == [(0, b"k", b"v0"), (1, b"k", b"v1"),
                                                             (2, b"k", b"v2")]
    assert records[0].headers == (("h", b"1"), ("h", b"2")) and records[0].topic == "t"
    assert session.watermarks(["t"]) == {"t": (0, 3)}


def test_committed_transaction_is_visible_and_its_markers_take_offsets(
        session: MemoryKafkaSession) -> None:
    producer = _in_transaction(session)
    producer.produce("t", value=b"a")
    producer.produce("u", value=b"b")
    reader = _reader_at_start(session)
    assert reader.poll(0.05) == [], "read_committed hides an open transaction's records"
    assert not reader.caught_up(["t"])
    producer.commit_transaction()
    assert [r.value for r in reader.poll(10)] == [b"a"]
    assert reader.caught_up(["t"])
    # The commit marker took offset 1 in each topic the transaction wrote.
    assert session.watermarks(["t", "u"]) == {"t": (0, 2), "u": (0, 2)}
    plain = session.producer(Delivery.EXPRESS)
    plain.produce("t", value=b"after")
    assert [(r.offset, r.value) for r in _read_all(session, "t")] == [(0, b"a"), (2, b"after")]


def test_aborted_records_are_never_read_and_later_records_are(session: MemoryKafkaSession) -> None:
    producer = _in_transaction(session)
    producer.produce("t", value=b"gone")
    producer.abort_transaction()
    producer.begin_transaction()
    producer.produce("t", value=b"kept")
    producer.commit_transaction()
    assert [(r.offset, r.value) for r in _read_all(session, "t")] == [(2, b"kept")]


def test_an_open_transaction_holds_back_later_records_until_it_ends(
        session: MemoryKafkaSession) -> None:
    transactional = _in_transaction(session)
    transactional.produce("t", value=b"in tx")
    session.producer(Delivery.EXPRESS).produce("t", value=b"plain")
    reader = _reader_at_start(session)
    assert reader.poll(0.05) == [], "nothing past the last stable offset is handed out"
    transactional.commit_transaction()
    assert [r.value for r in reader.poll(10)] == [b"in tx", b"plain"]


def test_init_transactions_fences_the_previous_producer_and_aborts_its_transaction(
        session: MemoryKafkaSession) -> None:
    old = _in_transaction(session, "same")
    old.produce("t", value=b"zombie")
    new = session.producer(Delivery.RECOVERABLE, transactional_id="same")
    new.init_transactions()
    with pytest.raises(TransactionAborted, match="fenced"):
        old.commit_transaction()
    new.begin_transaction()
    new.produce("t", value=b"live")
    new.commit_transaction()
    assert [r.value for r in _read_all(session, "t")] == [b"live"]


def test_transactional_produce_outside_a_transaction_is_refused(session: MemoryKafkaSession) -> None:
    producer = session.producer(Delivery.RECOVERABLE, transactional_id="tx")
    producer.init_transactions()
    with pytest.raises(BrokerError, match="outside a transaction"):
        producer.produce("t", value=b"x")
    assert _read_all(session, "t") == []


def test_delete_records_moves_the_log_start_and_readers_below_it_start_there(
        session: MemoryKafkaSession) -> None:
    producer = session.producer(Delivery.RECOVERABLE)
    for i in range(4):
        producer.produce("t", value=bytes([i]))
    assert session.delete_records_support() == (True, "")
    assert session.delete_records("t", 2) == 2
    assert session.delete_records("t", 99) == 4, "never past the high watermark"
    assert session.watermarks(["t"]) == {"t": (4, 4)}
    producer.produce("t", value=b"new")
    assert [(r.offset, r.value) for r in _read_all(session, "t", start=0)] == [(4, b"new")]


def test_topic_administration_errors_name_the_topic(session: MemoryKafkaSession) -> None:
    with pytest.raises(QueueExists, match="'t'"):
        session.create_topics(["t"])
    assert session.create_topics(["t", "v"], exist_ok=True) == ["v"]
    with pytest.raises(QueueNotFound, match="'missing'"):
        session.producer(Delivery.EXPRESS).produce("missing", value=b"x")
    reader = _reader_at_start(session)
    session.delete_topics(["t", "never-existed"])
    with pytest.raises(QueueNotFound, match="deleted"):
        reader.poll(0)
    assert not session.topic_exists("t") and session.topic_exists("u")


def test_sessions_on_one_cluster_share_topics() -> None:
    cluster = MemoryKafka()
    first, second = MemoryKafkaSession(cluster), MemoryKafkaSession(cluster)
    first.create_topics(["shared"])
    first.producer(Delivery.RECOVERABLE).produce("shared", value=b"hello")
    assert [r.value for r in _read_all(second, "shared")] == [b"hello"]
    assert first.topic_configs(["shared"]) == second.topic_configs(["shared"])
