"""``read_queue`` through Spark's own Kafka source (spark-sql-kafka-0-10 on ``spark.jars``,
envelopes decoded by spark-avro's ``from_avro``) on a real broker: the same rows, column by
column, as kmq's Python data source on the same queues; streaming restarts from a checkpoint;
poison records handled as on the Python path."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest

from facade import Acknowledgment, Message
from facade.model.envelope import _ENVELOPE, _record_of, encode_message
from facade.kafka.librdkafka import produce_and_wait
from facade.manager import QueueManager
from facade.model.message import BodyType, Delivery, MessageClass, MessageId
from spark_connector import kafka_source_available, kafka_source_options, read_queue, resolve
from spark_connector.jvmdecode import FAST_PATH, check_on_jvm

pytestmark = pytest.mark.integration



def _read(spark: Any, qm: QueueManager, name: str, streaming: bool = False,
          **options: Any) -> Any:
    return read_queue(spark, name, streaming=streaming,
                      bootstrap_servers=qm.session.bootstrap_servers, queue_manager=qm.name,
                      **options)


def _rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in sorted(df.collect(),
                                                     key=lambda r: (r.topic, r.offset))]


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())  # noqa: SLF001


def _mixed_queue(qm: QueueManager) -> tuple[Any, str, str, dict[str, Any]]:
    """A queue with every kind of record, and its admin queue holding acknowledgments."""
    queue = qm.create_queue(r".\private$\mixed")
    queue_fn = rf"DIRECT=OS:{qm.name}\private$\mixed"
    qm.create_queue(r".\private$\mixed-acks")
    admin_fn = rf"DIRECT=OS:{qm.name}\private$\mixed-acks"
    topic = queue.destinations[0].topics.data
    sent: dict[str, Any] = {}
    sent["first"] = queue.send(Message(
        body=b"first", label="one", priority=7, app_specific=42, body_type=BodyType.BYTES,
        properties={"region": "eu", "tier": "gold"}, response_queue=admin_fn,
        time_to_be_received=3600.5, time_to_reach_queue=60.0, delivery=Delivery.RECOVERABLE,
        acknowledge=Acknowledgment.POSITIVE_ARRIVAL, admin_queue=admin_fn,
        extension=b"\x00\x01ext", not_before=dt.datetime(2020, 1, 2, 3, 4, 5, 6000,
                                                          tzinfo=dt.UTC)), wait=True)
    for priority in range(8):
        sent[f"p{priority}"] = queue.send(Message(body=b"p%d" % priority, priority=priority,
                                                  label="ünïcode ✓ %d" % priority),
                                          wait=True)
    sent["taken"] = queue.send(Message(body=b"taken"), wait=True)
    sent["reply"] = queue.send(Message(body=b"", correlation_id=sent["first"].id,
                                       body_type=BodyType.STRING), wait=True)
    assert queue.receive_by_id(sent["taken"].id).body == b"taken"  # removed: not in the view
    producer = qm.producer(Delivery.RECOVERABLE)
    copy = encode_message(queue.peek_by_id(sent["reply"].id))  # a duplicate: not in the view
    produce_and_wait(producer, topic, copy.value, headers=copy.headers)
    # A transactional message's fields, written as a sender in a transaction writes them.
    in_xact = Message(body=b"x", id=MessageId(uuid.uuid4(), 7), transaction_id="xact-1",
                      first_in_transaction=True, last_in_transaction=True, priority=0,
                      sent_time=dt.datetime.now(dt.UTC), destination_queue=queue_fn)
    record = encode_message(in_xact)
    produce_and_wait(producer, topic, record.value, headers=record.headers)
    # Every column filled, its source machine id in capitals: valid, but left to the Python
    # decoder, so its columns come back to the JVM through the decode step.
    full = queue.peek_by_id(sent["first"].id)
    capitals = Message(**{**{f: getattr(full, f) for f in (
        "body", "label", "priority", "app_specific", "body_type", "properties", "response_queue",
        "time_to_be_received", "time_to_reach_queue", "delivery", "acknowledge", "admin_queue",
        "extension", "not_before", "sent_time", "destination_queue")},
        "id": MessageId(uuid.uuid4(), 5), "correlation_id": full.id})
    record = {**_record_of(capitals), "source_machine_id": str(uuid.uuid4()).upper()}
    copy = encode_message(capitals)
    produce_and_wait(producer, topic, _ENVELOPE.encode(record), headers=copy.headers)
    sent["capitals"] = capitals
    # Poison: no envelope at all; a valid envelope with trailing bytes; a priority of 9 (each
    # with the headers of a message of its own id, so the view does not take it for a copy).
    produce_and_wait(producer, topic, b"\x00garbage without headers")
    for sequence, spoil in ((8, lambda value, _record: value + b"\x00"),
                            (9, lambda _value, record: _ENVELOPE.encode({**record, "priority": 9}))):
        own = Message(body=b"spoilt", id=MessageId(uuid.uuid4(), sequence),
                      sent_time=dt.datetime.now(dt.UTC), destination_queue=queue_fn)
        encoded = encode_message(own)
        produce_and_wait(producer, topic, spoil(encoded.value, dict(_record_of(own))),
                         headers=encoded.headers)
    return queue, queue_fn, admin_fn, sent


def test_the_kafka_source_is_on_the_session_and_auto_takes_it(spark: Any, qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\auto")
    queue.send(Message(body=b"a"), wait=True)
    assert kafka_source_available(spark) is True
    auto = _read(spark, qm, rf"DIRECT=OS:{qm.name}\private$\auto")
    assert "from_avro" in _plan(auto)  # only the Kafka-source path decodes on the JVM
    kmq = _read(spark, qm, rf"DIRECT=OS:{qm.name}\private$\auto", path="kmq")
    assert "from_avro" not in _plan(kmq)
    assert [r.body for r in auto.collect()] == [b"a"]


def test_kafka_source_rows_equal_the_python_data_source_rows_column_by_column(
        spark: Any, qm: QueueManager) -> None:
    queue, queue_fn, admin_fn, sent = _mixed_queue(qm)
    both = f"{queue_fn},{admin_fn}"  # a multiple-element name: the queue and its admin queue

    kafka = _rows(_read(spark, qm, both, path="kafka"))
    python = _rows(_read(spark, qm, both, path="kmq"))

    assert len(kafka) == len(python)
    for mine, theirs in zip(kafka, python):
        for column in theirs:
            assert mine[column] == theirs[column], (column, mine["offset"], mine[column],
                                                    theirs[column])
    rows = {r["id"]: r for r in kafka if r["error"] is None}
    # What the comparison covered: the view, priorities, properties, acks, poison records.
    assert str(sent["taken"].id) not in rows
    assert sorted(r["priority"] for r in kafka if (r["label"] or "").startswith("ünïcode")) == list(
        range(8))
    first = rows[str(sent["first"].id)]
    assert first["properties"] == {"region": "eu", "tier": "gold"}
    assert first["offset"] == queue.peek_by_id(sent["first"].id).lookup_id
    assert first["time_to_be_received"] == 3600.5 and first["message_class"] == "NORMAL"
    assert rows[str(sent["reply"].id)]["correlation_id"] == str(sent["first"].id)
    assert [r["id"] for r in kafka].count(str(sent["reply"].id)) == 1
    acks = [r for r in kafka if r["message_class"] == MessageClass.ACK_REACH_QUEUE.name]
    assert acks and all(r["ack_original_id"] is not None for r in acks)
    errors = [r for r in kafka if r["error"] is not None]
    assert len(errors) == 3 and all(r["raw_value"] and r["body"] is None for r in errors)
    assert any("PROPID_M_PRIORITY" in r["error"] for r in errors)
    capitals = rows[str(sent["capitals"].id)]
    assert capitals["properties"] == {"region": "eu", "tier": "gold"}
    assert capitals["correlation_id"] == str(sent["first"].id)
    assert capitals["not_before"] == first["not_before"] and capitals["extension"] == b"\x00\x01ext"
    in_xact = [r for r in kafka if r["transaction_id"] == "xact-1"]
    assert len(in_xact) == 1 and in_xact[0]["first_in_transaction"] is True

    raw_kafka = _rows(_read(spark, qm, queue_fn, path="kafka", include_removed=True))
    raw_python = _rows(_read(spark, qm, queue_fn, path="kmq", include_removed=True))
    assert raw_kafka == raw_python and len(raw_kafka) == len(
        [r for r in kafka if r["topic"] == queue.destinations[0].topics.data]) + 2
    # Every valid record was decoded on the JVM but the one in capitals; the poison ones went
    # to Python.
    options = kafka_source_options(resolve(queue_fn, bootstrap_servers=qm.session.bootstrap_servers,
                                           queue_manager=qm.name), streaming=False)
    fast = {r["offset"]: r[FAST_PATH] for r in check_on_jvm(
        spark.read.format("kafka").options(**options).load()).select("offset", FAST_PATH).collect()}
    assert fast == {r["offset"]: r["error"] is None and r["id"] != str(sent["capitals"].id)
                    for r in raw_python}


def test_poison_records_fail_or_are_dead_lettered_on_the_kafka_path(
        spark: Any, qm: QueueManager) -> None:
    """... and a ``count()``, which reads no message column, counts what ``collect()`` gives:
    the poison rows too with ``on_error="column"``, and with ``"fail"`` and ``"dead_letter"``
    the decoding runs, fails or drops them."""
    _queue, queue_fn, _admin, _sent = _mixed_queue(qm)

    assert _read(spark, qm, queue_fn, path="kafka").count() == 15
    for action in (lambda df: df.collect(), lambda df: df.count()):
        with pytest.raises(Exception, match="not a valid kmq message envelope"):
            action(_read(spark, qm, queue_fn, path="kafka", on_error="fail"))
    assert _read(spark, qm, queue_fn, path="kafka", on_error="dead_letter").count() == 12
    kept = _read(spark, qm, queue_fn, path="kafka", on_error="dead_letter").collect()
    assert all(r.error is None for r in kept) and len(kept) == 12
    dead = _read(spark, qm, f"MACHINE={qm.guid};DEADLETTER", path="kafka").collect()
    # Each poison record dead-lettered once per read (the count and the collect): the queue
    # view of the dead-letter queue drops the second copies as duplicates.
    assert sorted(r.message_class for r in dead) == ["NACK_RECEIVE_REJECTED"] * 3
    assert {r.destination_queue for r in dead} == {queue_fn}


def test_kafka_source_stream_restarts_from_its_checkpoint(
        spark: Any, qm: QueueManager, tmp_path: Path) -> None:
    queue = qm.create_queue(r".\private$\stream")
    queue_fn = rf"DIRECT=OS:{qm.name}\private$\stream"
    first = [queue.send(Message(body=b"a%d" % i), wait=True) for i in range(5)]
    queue.receive_by_id(first[3].id)
    checkpoint = tmp_path / "checkpoint"

    def run() -> list[list[Any]]:
        batches: list[list[Any]] = []
        stream = _read(spark, qm, queue_fn, streaming=True, path="kafka",
                       max_offsets_per_trigger=2)
        assert stream.isStreaming and "from_avro" in str(
            stream._jdf.queryExecution().analyzed().toString())  # noqa: SLF001
        query = (stream.writeStream.option("checkpointLocation", str(checkpoint))
                 .foreachBatch(lambda df, _id: batches.append(df.collect()))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(300)
        assert query.exception() is None
        return [b for b in batches if b]

    batches = run()
    assert [r.id for b in batches for r in b] == [str(m.id) for i, m in enumerate(first)
                                                  if i != 3]
    assert len(batches) >= 2  # two offsets per trigger: the backlog took several batches

    later = [queue.send(Message(body=b"b%d" % i), wait=True) for i in range(3)]
    batches = run()
    assert [r.id for b in batches for r in b] == [str(m.id) for m in later]
    assert run() == []
    assert queue.count() == 7  # peek mode removes nothing


def test_every_stage_of_a_kafka_path_read_compiles_to_methods_the_jit_compiles(
        spark: Any, qm: QueueManager) -> None:
    """HotSpot does not compile a method of more than 8,000 bytes of bytecode
    (``DontCompileHugeMethods``), and Spark compiles a stage into one method: a verdict or a
    set of columns that outgrows it runs interpreted, several times slower. A group-by and the
    demo report's columns stay under it (``spark_connector.jvmdecode``'s module docs; a read of
    every column does not: docs/performance.md)."""
    queue = qm.create_queue(r".\private$\compiled")
    queue.send(Message(body=b"x", priority=5), wait=True)
    df = _read(spark, qm, rf"DIRECT=OS:{qm.name}\private$\compiled", path="kafka")
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # AQE plans stages at run time
    try:
        report = df.select("topic", "message_class", "id", "sent_time", "timestamp",
                           df["properties"].getItem("sender"))
        for query in (df.groupBy("priority").count(), report):
            stages = query._jdf.queryExecution().debug().codegenToSeq()  # noqa: SLF001
            sizes = [stages.apply(i)._3().maxMethodCodeSize() for i in range(stages.size())]
            assert sizes and max(sizes) < 8000, sizes
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)
