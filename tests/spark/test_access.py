r"""Queue access lists on every Spark path, for the principal of the driver.

alice owns the queue manager and the queues; mallory is the driver's principal, set with
``KMQ_PRINCIPAL`` after the Spark session started (so the data source's driver-side Python
processes, which inherit the JVM's environment, do not know it: only the resolution carries
it). A refusal is ``AccessDenied`` naming the queue, the right and the principal, raised before
any row is read, removed or written; a DataFrame or writer planned after a revocation is
refused then too.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from facade.security.acl import AccessRight
from facade.config import KmqConfig
from facade.errors import AccessDenied, InvalidParameter
from facade.kafka.librdkafka import KafkaSession
from facade.manager import QueueManager
from facade.model.message import Message, MessageClass
from spark_connector import read_queue, resolve, write_messages
from spark_connector._receive import BatchRemover
from spark_connector.schema import KAFKA_SOURCE_SCHEMA
from spark_connector.sink import KmqBatchWriter, KmqStreamWriter, writer_options
from spark_connector.source import KmqBatchReader, KmqStreamReader
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration

BODY_ONLY = StructType([StructField("body", BinaryType())])


@pytest.fixture
def alice(broker: BrokerEndpoint, kmq_home: Path) -> Iterator[QueueManager]:
    """alice's queue manager (a fresh name: she owns its access list) on the session broker."""
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}", principal="alice")
    with QueueManager.open(config) as manager:
        yield manager


def _as_mallory(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on the driver's configuration names mallory (KMQ_PRINCIPAL)."""
    monkeypatch.setenv("KMQ_PRINCIPAL", "mallory")


def _target(qm: QueueManager) -> dict[str, str]:
    return {"bootstrap_servers": qm.config.bootstrap_servers, "queue_manager": qm.name}


def _queue(qm: QueueManager, name: str, messages: int = 0) -> tuple[Any, str]:
    queue = qm.create_queue(rf".\private$\{name}")
    for i in range(messages):
        queue.send(Message(body=b"%s %d" % (name.encode(), i)), wait=True)
    return queue, rf"DIRECT=OS:{qm.name}\private$\{name}"


def _change(qm: QueueManager, format_name: str, change: Any) -> None:
    qm.set_queue_security(format_name, change(qm.queue_security(format_name)))


def _records(qm: QueueManager, queue: Any) -> int:
    """Records physically in the queue's data topic (anything a job wrote, removed or not)."""
    topic = queue.destinations[0].topics.data
    session = KafkaSession(qm.config.bootstrap_servers)
    try:
        return session.watermarks([topic])[topic][1]
    finally:
        session.close()


def _refusal(refused: pytest.ExceptionInfo[AccessDenied], right: str, queue: str) -> None:
    text = str(refused.value)
    assert "'mallory'" in text and right in text and queue in text, text


def _wait_count(queue: Any, expected: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while (count := queue.count()) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return count


# --------------------------------------------------------------------------------------------
# Reads
# --------------------------------------------------------------------------------------------


def test_reads_are_refused_without_the_peek_right(
        spark: Any, alice: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe: batch and streaming reads of alice's queue, its journal, a multiple-element
    name reaching it and her dead-letter queue all returned rows to mallory."""
    queue, queue_fn = _queue(alice, "orders", 3)
    queue.set_properties(journal=True)
    queue.receive(timeout=10)  # a journal copy to read
    _own, own_fn = _queue(alice, "mallorys")
    _change(alice, own_fn, lambda d: d.grant("mallory", AccessRight.RECEIVE_MESSAGE))
    alice.set_queue_manager_security(
        alice.queue_manager_security().deny("mallory", AccessRight.PEEK_MESSAGE))
    _as_mallory(monkeypatch)

    for streaming in (False, True):
        with pytest.raises(AccessDenied) as refused:
            read_queue(spark, queue_fn, streaming=streaming, **_target(alice))
        _refusal(refused, "PEEK_MESSAGE", queue_fn)
    with pytest.raises(AccessDenied) as refused:
        read_queue(spark, queue_fn + ";JOURNAL", streaming=False, **_target(alice))
    _refusal(refused, "PEEK_MESSAGE", queue_fn + ";JOURNAL")
    with pytest.raises(AccessDenied) as refused:  # one refused queue refuses the whole name
        read_queue(spark, f"{own_fn},{queue_fn}", streaming=False, **_target(alice))
    _refusal(refused, "PEEK_MESSAGE", queue_fn)
    for streaming in (False, True):  # ... and the whole list of names
        with pytest.raises(AccessDenied) as refused:
            read_queue(spark, [own_fn, queue_fn + ";JOURNAL"], streaming=streaming,
                       **_target(alice))
        _refusal(refused, "PEEK_MESSAGE", queue_fn + ";JOURNAL")
    dead_letters = f"MACHINE={alice.guid};DEADLETTER"
    with pytest.raises(AccessDenied) as refused:
        read_queue(spark, dead_letters, streaming=False, **_target(alice))
    _refusal(refused, "PEEK_MESSAGE", dead_letters)
    assert queue.count() == 2


def test_the_kafka_source_path_is_refused_as_the_python_path_is(
        spark: Any, alice: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's own Kafka source (path="kafka", and "auto", which takes it here) is planned by
    Spark, not by kmq: read_queue's check is what stands before its rows."""
    queue, queue_fn = _queue(alice, "kafka-orders", 3)
    _change(alice, queue_fn, lambda d: d.deny("mallory", AccessRight.PEEK_MESSAGE))
    _granted, granted_fn = _queue(alice, "kafka-granted", 2)
    _change(alice, granted_fn, lambda d: d.grant("mallory", AccessRight.PEEK_MESSAGE))
    _as_mallory(monkeypatch)

    for path in ("kafka", "auto"):
        for streaming in (False, True):
            with pytest.raises(AccessDenied) as refused:
                read_queue(spark, queue_fn, streaming=streaming, path=path, **_target(alice))
            _refusal(refused, "PEEK_MESSAGE", queue_fn)
        with pytest.raises(AccessDenied) as refused:  # one refused queue refuses the name
            read_queue(spark, f"{granted_fn},{queue_fn}", streaming=False, path=path,
                       **_target(alice))
        _refusal(refused, "PEEK_MESSAGE", queue_fn)
    # Receive mode never takes the Kafka source, which cannot remove messages.
    with pytest.raises(InvalidParameter, match="kmq path"):
        read_queue(spark, granted_fn, streaming=True, path="kafka", mode="receive",
                   **_target(alice))
    with pytest.raises(AccessDenied) as refused:
        read_queue(spark, granted_fn, streaming=True, path="auto", mode="receive",
                   **_target(alice))
    _refusal(refused, "DELETE_MESSAGE", granted_fn)
    rows = read_queue(spark, granted_fn, streaming=False, path="kafka",
                      **_target(alice)).collect()
    assert sorted(r.body for r in rows) == [b"kafka-granted 0", b"kafka-granted 1"]
    assert queue.count() == 3 and _granted.count() == 2


def test_receive_mode_is_refused_without_the_receive_right_and_removes_nothing(
        spark: Any, alice: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's receive-mode stream removed all 11 messages; peeking is not receiving."""
    queue, queue_fn = _queue(alice, "jobs", 11)
    queue.set_properties(journal=True)
    _change(alice, queue_fn, lambda d: d.grant("mallory", AccessRight.PEEK_MESSAGE))
    _as_mallory(monkeypatch)

    with pytest.raises(AccessDenied) as refused:
        read_queue(spark, queue_fn, streaming=True, mode="receive", **_target(alice))
    _refusal(refused, "DELETE_MESSAGE", queue_fn)
    with pytest.raises(AccessDenied) as refused:
        read_queue(spark, queue_fn + ";JOURNAL", streaming=True, mode="receive",
                   **_target(alice))
    _refusal(refused, "DELETE_JOURNAL_MESSAGE", queue_fn + ";JOURNAL")

    rows = read_queue(spark, queue_fn, streaming=False, **_target(alice)).collect()
    assert len(rows) == 11  # PEEK_MESSAGE was granted: peeking works
    assert queue.count() == 11


def test_a_job_planned_after_a_revocation_is_refused(
        alice: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolution (what a DataFrame or writer carries) checked while mallory had the rights
    is checked again when Spark plans a batch, a micro-batch, a removal or a writer."""
    queue, queue_fn = _queue(alice, "revoked", 3)
    _change(alice, queue_fn, lambda d: d.grant("mallory", AccessRight.RECEIVE_MESSAGE))
    _as_mallory(monkeypatch)
    peek = resolve(queue_fn, **_target(alice))
    receive = resolve(queue_fn, operation="receive", **_target(alice))
    send = writer_options(BODY_ONLY, queue_fn, **_target(alice))
    assert peek.principal == receive.principal == "mallory"
    _change(alice, queue_fn,
            lambda d: d.revoke("mallory").deny("mallory", AccessRight.WRITE_MESSAGE))

    with pytest.raises(AccessDenied) as refused:
        KmqBatchReader({"kmq.resolution": peek.to_json()}, KAFKA_SOURCE_SCHEMA).partitions()
    _refusal(refused, "PEEK_MESSAGE", queue_fn)
    topic = peek.topics[0]
    stream = KmqStreamReader({"kmq.resolution": receive.to_json(), "kmq.mode": "receive"},
                             KAFKA_SOURCE_SCHEMA)
    try:
        with pytest.raises(AccessDenied) as refused:
            stream.partitions({"offsets": {topic: 0}},
                              {"offsets": {topic: 3}, "from": {topic: 0}, "at_ms": 0})
        _refusal(refused, "DELETE_MESSAGE", queue_fn)
    finally:
        stream.stop()
    remover = BatchRemover(receive)
    try:
        with pytest.raises(AccessDenied) as refused:
            remover.remove({topic: 0}, {topic: 3}, time.time_ns() // 1_000_000)
        _refusal(refused, "DELETE_MESSAGE", queue_fn)
    finally:
        remover.close()
    for writer in (KmqBatchWriter, KmqStreamWriter):  # planning; a micro-batch's commit
        with pytest.raises(AccessDenied) as refused:
            writer(send, BODY_ONLY)
        _refusal(refused, "WRITE_MESSAGE", queue_fn)
    assert queue.count() == 3 and _records(alice, queue) == 3


# --------------------------------------------------------------------------------------------
# Writes
# --------------------------------------------------------------------------------------------


def test_writes_are_refused_before_anything_is_written(
        spark: Any, alice: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """WRITE_MESSAGE on every queue the name reaches, and on the admin queue of messages that
    ask for acknowledgments; a row may name only an admin queue the driver checked."""
    queue, queue_fn = _queue(alice, "inbox")
    _change(alice, queue_fn, lambda d: d.deny("mallory", AccessRight.WRITE_MESSAGE))
    acks, acks_fn = _queue(alice, "alice-acks")
    _change(alice, acks_fn, lambda d: d.deny("mallory", AccessRight.WRITE_MESSAGE))
    open_queue, open_fn = _queue(alice, "open")  # Everyone may send (MSMQ's default)
    _as_mallory(monkeypatch)
    rows = spark.createDataFrame([(b"x",)], "body binary")

    with pytest.raises(AccessDenied) as refused:
        write_messages(rows, queue_fn, **_target(alice))
    _refusal(refused, "WRITE_MESSAGE", queue_fn)
    with pytest.raises(AccessDenied) as refused:
        write_messages(rows, f"{open_fn},{queue_fn}", **_target(alice))
    _refusal(refused, "WRITE_MESSAGE", queue_fn)
    with pytest.raises(AccessDenied) as refused:
        write_messages(rows, open_fn, acknowledge="POSITIVE_ARRIVAL", admin_queue=acks_fn,
                       **_target(alice))
    _refusal(refused, "WRITE_MESSAGE", acks_fn)
    with pytest.raises(AccessDenied) as refused:
        write_messages(rows, open_fn, admin_queues=[acks_fn], **_target(alice))
    _refusal(refused, "WRITE_MESSAGE", acks_fn)

    asking = spark.createDataFrame([(b"y", "FULL_RECEIVE", acks_fn)],
                                   "body binary, acknowledge string, admin_queue string")
    with pytest.raises(Exception, match="was not checked") as failed:
        write_messages(asking, open_fn, **_target(alice))
    assert "mallory" in str(failed.value)
    assert [_records(alice, q) for q in (queue, acks, open_queue)] == [0, 0, 0]


def test_a_permitted_principal_reads_receives_and_writes(
        spark: Any, alice: QueueManager, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """Granted rights still work end to end; the receive-mode removal runs in the data
    source's driver process as mallory, the principal the resolution carries."""
    queue, queue_fn = _queue(alice, "shared", 11)
    _change(alice, queue_fn, lambda d: d.grant("mallory", AccessRight.RECEIVE_MESSAGE))
    replies, replies_fn = _queue(alice, "replies")
    _as_mallory(monkeypatch)

    assert len(read_queue(spark, queue_fn, streaming=False, **_target(alice)).collect()) == 11
    seen: list[Any] = []
    query = (read_queue(spark, queue_fn, streaming=True, mode="receive", **_target(alice))
             .writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
             .foreachBatch(lambda batch, _id: seen.extend(batch.collect()))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert len(seen) == 11
    assert _wait_count(queue, 0) == 0

    rows = spark.createDataFrame([(b"z", "POSITIVE_ARRIVAL", replies_fn)],
                                 "body binary, acknowledge string, admin_queue string")
    write_messages(rows, queue_fn, admin_queues=[replies_fn], **_target(alice))
    assert queue.receive(timeout=30).body == b"z"
    assert replies.receive(timeout=30).message_class is MessageClass.ACK_REACH_QUEUE
