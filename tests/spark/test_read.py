"""Reading kmq queues with Spark (local mode) on a real broker process: queues, lists, the
dead-letter and admin queues, batch and streaming with checkpoint restarts, per-trigger limits,
poison records and receive mode. ``path="auto"`` reads through Spark's Kafka source (its jars
are on the test session's ``spark.jars``) except in receive mode; tests/spark/test_kafka_path.py
compares that path with kmq's Python data source."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from facade import Acknowledgment, JournalLevel, Message
from facade.model.envelope import encode_message
from facade.errors import InvalidParameter
from facade.kafka.librdkafka import produce_and_wait
from facade.manager import QueueManager
from facade.model.message import BodyType, Delivery
from spark_connector import kafka_source_available, kafka_source_options, read_queue, resolve
from spark_connector.read import QueueViewFilter
from spark_connector.resolve import QueueTarget, Resolution

pytestmark = pytest.mark.integration



# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _read(spark: Any, qm: QueueManager, name: str | list[str], streaming: bool = False,
          **options: Any) -> Any:
    """read_queue with the test's queue manager configuration."""
    return read_queue(spark, name, streaming=streaming,
                      bootstrap_servers=qm.session.bootstrap_servers, queue_manager=qm.name,
                      **options)


def _private(qm: QueueManager, name: str) -> tuple[Any, str]:
    queue = qm.create_queue(rf".\private$\{name}")
    return queue, rf"DIRECT=OS:{qm.name}\private$\{name}"


def _run_available_now(df: Any, checkpoint: Path, fail_first: bool = False) -> list[list[Any]]:
    """Run a streaming DataFrame to the end of what is there now; the rows of each batch.

    ``fail_first`` makes the sink fail on its first batch (the query then stops with an error).
    """
    batches: list[list[Any]] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        rows = batch_df.collect()
        if fail_first and not batches and rows:
            batches.append([])  # remember that the failure happened
            raise RuntimeError("sink failure")
        batches.append(rows)

    query = (df.writeStream.option("checkpointLocation", str(checkpoint)).foreachBatch(collect)
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    except Exception:  # noqa: BLE001 - the failing sink's error surfaces here
        if not fail_first:
            raise
    return [b for b in batches if b] if not fail_first else batches


def _wait_count(queue: Any, expected: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while (count := queue.count()) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return count


# --------------------------------------------------------------------------------------------
# The Kafka-source path: options and availability (no broker, no JVM)
# --------------------------------------------------------------------------------------------


def _resolution(**kafka_options: str) -> Resolution:
    return Resolution(
        format_name=r"DIRECT=OS:qm\private$\a,DIRECT=OS:qm\private$\b",
        targets=(QueueTarget(r"DIRECT=OS:qm\private$\a", "kmq.qm.private.a",
                             "kmq.qm.private.a.receipts"),
                 QueueTarget(r"DIRECT=OS:qm\private$\b", "kmq.qm.private.b",
                             "kmq.qm.private.b.receipts")),
        bootstrap_servers="broker1:9092,broker2:9092", kafka_options=dict(kafka_options),
        queue_manager="qm", queue_manager_guid=str(uuid.uuid4()), home="/tmp/kmq")


def test_kafka_source_options_stream() -> None:
    options = kafka_source_options(_resolution(), max_offsets_per_trigger=100)
    assert options == {
        "kafka.bootstrap.servers": "broker1:9092,broker2:9092",
        "assign": json.dumps({"kmq.qm.private.a": [0], "kmq.qm.private.b": [0]}),
        "includeHeaders": "true",
        "startingOffsets": "earliest",
        "failOnDataLoss": "false",
        "kafka.isolation.level": "read_committed",
        "kafka.fetch.max.wait.ms": "10",
        "maxOffsetsPerTrigger": "100",
    }


def test_kafka_source_options_batch_offsets_security_and_passthrough() -> None:
    resolution = _resolution(**{"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
                                "sasl.username": "svc", "sasl.password": "pw",
                                "ssl.ca.location": "/etc/ca.pem"})
    options = kafka_source_options(
        resolution, streaming=False, startingOffsets=json.dumps({"kmq.qm.private.a": 5}),
        ending_offsets="latest", **{"kafka.fetch.max.bytes": "1048576",
                                    "kafka.security.protocol": "SSL", "kmq.mode": "peek",
                                    "kafka.fetch.max.wait.ms": "200"})
    assert json.loads(options["startingOffsets"]) == {"kmq.qm.private.a": {"0": 5}}
    assert options["endingOffsets"] == "latest"
    assert options["kafka.security.protocol"] == "SSL"  # explicit kafka.* wins
    assert options["kafka.sasl.mechanism"] == "PLAIN"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="svc" password="pw";')
    assert options["kafka.ssl.truststore.location"] == "/etc/ca.pem"
    assert options["kafka.fetch.max.bytes"] == "1048576"
    assert options["kafka.fetch.max.wait.ms"] == "200"
    assert not any(key.startswith("kmq.") for key in options)


def test_kafka_source_is_on_the_test_sessions_classpath(spark: Any) -> None:
    assert kafka_source_available(spark) is True


# --------------------------------------------------------------------------------------------
# Batch reads
# --------------------------------------------------------------------------------------------


def test_batch_read_of_a_queue_decodes_every_envelope_column(spark: Any, qm: QueueManager) -> None:
    queue, queue_fn = _private(qm, "orders")
    _admin, admin_fn = _private(qm, "admin")
    first = queue.send(Message(body=b"first", label="one", priority=5, app_specific=42,
                               body_type=BodyType.BYTES, properties={"region": "eu"},
                               response_queue=admin_fn, time_to_be_received=3600.0,
                               delivery=Delivery.RECOVERABLE), wait=True)
    taken = queue.send(Message(body=b"taken"), wait=True)
    third = queue.send(Message(body=b"third", label="three", correlation_id=first.id), wait=True)
    assert queue.receive_by_id(taken.id).body == b"taken"  # removed: not in the view
    # A duplicate copy of an earlier message (same id, as a redone send writes) is not either.
    copy = encode_message(queue.peek_by_id(third.id))
    produce_and_wait(qm.producer(Delivery.RECOVERABLE), queue.destinations[0].topics.data,
                     copy.value, headers=copy.headers)

    rows = sorted(_read(spark, qm, queue_fn).collect(), key=lambda r: r.offset)

    assert [r.id for r in rows] == [str(first.id), str(third.id)]
    one, three = rows
    assert one.offset == queue.peek_by_id(first.id).lookup_id  # offset = PROPID_M_LOOKUPID
    assert (one.label, one.priority, one.body, one.app_specific, one.body_type) == (
        "one", 5, b"first", 42, int(BodyType.BYTES))
    assert one.message_class == "NORMAL" and one.delivery == "RECOVERABLE"
    assert one.properties == {"region": "eu"} and one.response_queue == admin_fn
    assert one.time_to_be_received == 3600.0 and one.correlation_id is None
    assert one.source_machine_id == str(qm.guid)
    assert one.destination_queue == queue_fn and one.destination_format_name == queue.format_name
    # Spark returns naive local-time datetimes; compare instants (envelope times are in ms).
    assert abs(one.sent_time.timestamp() - first.sent_time.timestamp()) < 0.001
    assert one.arrived_time == one.timestamp and one.authenticated is False
    assert one.topic == queue.destinations[0].topics.data and one.partition == 0
    assert one.error is None and one.raw_value is None and one.ack_original_id is None
    assert three.correlation_id == str(first.id) and three.label == "three"

    raw = _read(spark, qm, queue_fn, include_removed=True).collect()
    assert sorted(r.offset for r in raw) == [0, 1, 2, 3]  # the raw log: removed and duplicate too
    assert qm.open_queue(queue_fn).count() == 2  # peeking changed nothing


def test_batch_read_of_a_distribution_list_is_the_union_of_its_queues(
        spark: Any, qm: QueueManager) -> None:
    east, east_fn = _private(qm, "east")
    west = qm.create_queue(r".\west")  # a public queue, a list member by its PUBLIC= name
    west_fn = rf"DIRECT=OS:{qm.name}\west"
    qm.directory.create_alias("east-alias", east_fn)
    members = qm.directory.create_distribution_list("regions")
    qm.directory.add_member("regions", "alias:east-alias")
    qm.directory.add_member("regions", f"PUBLIC={west.properties.instance}")
    both = qm.open_queue(members.format_name).send(Message(body=b"to both"), wait=True)
    only_east = east.send(Message(body=b"east only"), wait=True)

    rows = _read(spark, qm, members.format_name).collect()

    got = sorted((r.destination_queue, r.id) for r in rows)
    assert got == sorted([(east_fn, str(both.id)), (west_fn, str(both.id)),
                          (east_fn, str(only_east.id))])
    assert {r.destination_format_name for r in rows if r.id == str(both.id)} == {
        members.format_name}


def test_batch_read_of_dead_letter_and_admin_queues(spark: Any, qm: QueueManager) -> None:
    queue, queue_fn = _private(qm, "work")
    _admin, admin_fn = _private(qm, "acks")
    wanted = Acknowledgment.POSITIVE_ARRIVAL | Acknowledgment.FULL_RECEIVE
    kept = queue.send(Message(body=b"kept", label="kept", acknowledge=wanted,
                              admin_queue=admin_fn), wait=True)
    stale = queue.send(Message(body=b"stale", label="stale", time_to_be_received=0.2,
                               journal=JournalLevel.DEADLETTER, acknowledge=wanted,
                               admin_queue=admin_fn), wait=True)
    time.sleep(0.4)
    assert queue.receive(timeout=10).id == kept.id  # expires the stale one first (facade)

    dead = _read(spark, qm, f"MACHINE={qm.guid};DEADLETTER").collect()
    assert [(r.id, r.message_class, r.body) for r in dead] == [
        (str(stale.id), "NACK_RECEIVE_TIMEOUT", b"stale")]
    assert dead[0].ack_original_id is None  # a dead-letter copy keeps its own body

    acks = sorted(_read(spark, qm, admin_fn).collect(), key=lambda r: r.offset)
    classes = {(r.correlation_id, r.message_class) for r in acks}
    assert classes == {(str(kept.id), "ACK_REACH_QUEUE"), (str(stale.id), "ACK_REACH_QUEUE"),
                       (str(kept.id), "ACK_RECEIVE"), (str(stale.id), "NACK_RECEIVE_TIMEOUT")}
    for ack in acks:
        assert ack.ack_original_id == ack.correlation_id
        assert ack.ack_queues == [queue_fn] and ack.ack_time is not None


@pytest.mark.parametrize("path", ["kafka", "kmq"])
def test_a_list_of_names_reads_each_queue_once_as_one_source(
        spark: Any, qm: QueueManager, path: str) -> None:
    """A queue, its journal and the dead-letter queue (which no MSMQ multiple-element name may
    list together) in one read: the rows of the separate reads, a queue named twice read once."""
    queue, queue_fn = _private(qm, "listed")
    queue.set_properties(journal=True)
    first = queue.send(Message(body=b"received"), wait=True)
    second = queue.send(Message(body=b"pending"), wait=True)
    stale = queue.send(Message(body=b"stale", time_to_be_received=0.2,
                               journal=JournalLevel.DEADLETTER), wait=True)
    time.sleep(0.4)
    assert queue.receive(timeout=10).id == first.id  # journal copy; the stale one dead-lettered
    names = [queue_fn, queue_fn + ";JOURNAL", f"MACHINE={qm.guid};DEADLETTER"]

    listed = _read(spark, qm, [*names, queue_fn], path=path).collect()

    def key(r: Any) -> tuple[str, int, str]:
        return (r.topic, r.offset, r.id)

    separate = [row for name in names for row in _read(spark, qm, name, path=path).collect()]
    assert sorted(map(key, listed)) == sorted(map(key, separate))
    assert sorted((r.id, r.body) for r in listed) == sorted(
        [(str(second.id), b"pending"), (str(first.id), b"received"), (str(stale.id), b"stale")])
    assert len({r.topic for r in listed}) == 3
    with pytest.raises(InvalidParameter, match="no format name"):
        _read(spark, qm, [])


def test_poison_records_error_column_fail_or_dead_letter(spark: Any, qm: QueueManager) -> None:
    queue, queue_fn = _private(qm, "mixed")
    good = queue.send(Message(body=b"good"), wait=True)
    topic = queue.destinations[0].topics.data
    producer = qm.producer(Delivery.RECOVERABLE)
    produce_and_wait(producer, topic, b"\x00garbage without headers")
    # Valid-looking headers on a value that is not an envelope: caught only by decoding.
    produce_and_wait(producer, topic, b"\xc3\x01" + b"\x00" * 12,
                     headers=[("kmq.version", b"1"), ("kmq.id", f"{uuid.uuid4()}\\7".encode())])

    rows = sorted(_read(spark, qm, queue_fn).collect(), key=lambda r: r.offset)
    assert [(r.offset, r.id) for r in rows][0] == (0, str(good.id))
    assert [r.error is None for r in rows] == [True, False, False]
    assert rows[1].raw_value == b"\x00garbage without headers" and rows[1].body is None
    assert "offset 1" in rows[1].error and rows[1].topic == topic

    with pytest.raises(Exception, match="not a valid kmq message envelope"):
        _read(spark, qm, queue_fn, on_error="fail").collect()

    kept = _read(spark, qm, queue_fn, on_error="dead_letter").collect()
    assert [r.id for r in kept] == [str(good.id)]
    dead = _read(spark, qm, f"MACHINE={qm.guid};DEADLETTER").collect()
    assert sorted((r.message_class, r.properties["kmq.source"], r.body) for r in dead) == [
        ("NACK_RECEIVE_REJECTED", f"{topic}@0:1", b"\x00garbage without headers"),
        ("NACK_RECEIVE_REJECTED", f"{topic}@0:2", b"\xc3\x01" + b"\x00" * 12)]
    assert {r.destination_queue for r in dead} == {queue_fn}
    # Dead-lettering again (a retried task) writes duplicates that the queue view drops.
    _read(spark, qm, queue_fn, on_error="dead_letter").collect()
    assert qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").count() == 2


def test_queue_view_filter_gives_kafka_source_rows_the_queue_view(
        spark: Any, qm: QueueManager) -> None:
    queue, queue_fn = _private(qm, "viewed")
    sent = [queue.send(Message(body=b"%d" % i), wait=True) for i in range(4)]
    queue.receive_by_id(sent[1].id)
    queue.receive_by_id(sent[2].id)
    raw = _read(spark, qm, queue_fn, decode=False, include_removed=True)
    resolution = resolve(queue_fn, bootstrap_servers=qm.session.bootstrap_servers,
                         queue_manager=qm.name)

    filtered = raw.mapInArrow(QueueViewFilter(resolution), raw.schema).collect()

    assert sorted(r.offset for r in filtered) == [0, 3]


# --------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------


def test_stream_restarts_from_checkpoint_and_limits_each_trigger(
        spark: Any, qm: QueueManager, tmp_path: Path) -> None:
    queue, queue_fn = _private(qm, "stream")
    first = [queue.send(Message(body=b"a%d" % i), wait=True) for i in range(5)]
    checkpoint = tmp_path / "checkpoint"

    batches = _run_available_now(_read(spark, qm, queue_fn, streaming=True,
                                       max_offsets_per_trigger=2), checkpoint)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [r.id for b in batches for r in b] == [str(m.id) for m in first]

    later = [queue.send(Message(body=b"b%d" % i), wait=True) for i in range(3)]
    batches = _run_available_now(_read(spark, qm, queue_fn, streaming=True), checkpoint)
    assert [r.id for b in batches for r in b] == [str(m.id) for m in later]
    assert _run_available_now(_read(spark, qm, queue_fn, streaming=True), checkpoint) == []
    assert queue.count() == 8  # peek mode removes nothing


def test_receive_mode_removes_committed_messages_once(
        spark: Any, qm: QueueManager, tmp_path: Path) -> None:
    queue, queue_fn = _private(qm, "jobs")
    queue.set_properties(journal=True)  # a receive-mode removal writes journal copies too
    _admin, admin_fn = _private(qm, "job-acks")
    kept = [queue.send(Message(body=b"job%d" % i, acknowledge=Acknowledgment.POSITIVE_RECEIVE,
                               admin_queue=admin_fn), wait=True) for i in range(3)]
    stale = queue.send(Message(body=b"stale", time_to_be_received=0.2,
                               journal=JournalLevel.DEADLETTER), wait=True)
    time.sleep(0.4)
    checkpoint = tmp_path / "checkpoint"

    def stream() -> Any:
        return _read(spark, qm, queue_fn, streaming=True, mode="receive")

    batches = _run_available_now(stream(), checkpoint)
    assert sorted(r.id for b in batches for r in b) == sorted(str(m.id) for m in kept)
    assert _wait_count(queue, 0) == 0  # removed once the batch committed
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    assert dead.receive(timeout=10).id == stale.id  # expired: skipped into the DLQ
    acks = _read(spark, qm, admin_fn).collect()
    assert sorted(r.correlation_id for r in acks if r.message_class == "ACK_RECEIVE") == sorted(
        str(m.id) for m in kept)
    journal = qm.open_queue(queue_fn + ";JOURNAL")
    assert sorted(str(journal.receive(timeout=10).id) for _ in kept) == sorted(
        str(m.id) for m in kept)

    # A batch whose sink fails is not removed; the restart delivers it again, then removes it.
    retried = queue.send(Message(body=b"retried"), wait=True)
    failed = _run_available_now(stream(), checkpoint, fail_first=True)
    assert failed == [[]] and queue.count() == 1
    batches = _run_available_now(stream(), checkpoint)
    assert [r.id for b in batches for r in b] == [str(retried.id)]
    assert _wait_count(queue, 0) == 0
    assert _run_available_now(stream(), checkpoint) == []  # never twice


def test_receive_mode_needs_a_stream(spark: Any, qm: QueueManager) -> None:
    _queue, queue_fn = _private(qm, "nostream")
    with pytest.raises(InvalidParameter, match="streaming"):
        _read(spark, qm, queue_fn, mode="receive")
    with pytest.raises(InvalidParameter, match="kmq path"):
        _read(spark, qm, queue_fn, streaming=True, mode="receive", path="kafka")
