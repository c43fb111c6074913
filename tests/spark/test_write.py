r"""Writing messages from Spark (``spark_connector.sink``) against the session's real broker.

Every test sends with Spark and receives with the facade. Exactly-once is shown twice: a batch
write replayed with the same write id, and a streaming copy job killed (SIGKILL of its whole
process group) between producing a micro-batch and Spark's commit of it, then restarted from
its checkpoint: the topic holds the replayed copies, receivers see every row once.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import pytest

from facade.model.envelope import decode_acknowledgment
from facade.errors import InvalidParameter, ReceiveTimeout
from facade.kafka.librdkafka import KafkaSession
from facade.manager import QueueManager
from facade.model.message import (
    Acknowledgment,
    BodyType,
    Delivery,
    JournalLevel,
    Message,
    MessageClass,
    MessageId,
)
from spark_connector.sink import (
    KmqBatchWriter,
    message_from_row,
    normalize_defaults,
)
from spark_connector.write import write_messages

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]



def _target(qm: QueueManager) -> dict[str, str]:
    return {"bootstrap_servers": qm.config.bootstrap_servers, "queue_manager": qm.name}


def _drain(queue, first_timeout: float = 15.0) -> list[Message]:
    """Receive until the queue stays empty for a moment."""
    got, timeout = [], first_timeout
    while True:
        try:
            got.append(queue.receive(timeout=timeout))
        except ReceiveTimeout:
            return got
        timeout = 1.0


def _raw_count(qm: QueueManager, topic: str) -> int:
    """The topic's end offset: records physically in ``topic``, duplicates and transaction
    markers included (from a fetch response: some Kafka-API brokers answer ListOffsets
    inexactly)."""
    session = KafkaSession(qm.config.bootstrap_servers)
    try:
        return session.watermarks([topic])[topic][1]
    finally:
        session.close()


# --------------------------------------------------------------------------------------------
# Batch writes
# --------------------------------------------------------------------------------------------


def test_batch_write_maps_every_column(spark, qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\sparkin")
    admin = qm.create_queue(r".\private$\sparkreply")
    fmt = q.format_name
    reply_fn = rf"DIRECT=OS:{qm.name}\private$\sparkreply"
    corr = MessageId(uuid.uuid4(), 42)
    rows = [
        (b"low", "first", 1, None, 7, 3600.0, 120.0, "DEADLETTER", {"k": "v"}, b"ext", reply_fn,
         "RECOVERABLE", 0),
        (b"high", "second", 7, str(corr), 2**32 - 1, None, None, None, None, None, None, None,
         Acknowledgment.NACK_RECEIVE.value),
        (b"mid", "third", 3, None, 0, None, None, None, {}, None, None, "EXPRESS", None),
    ]
    schema = ("body binary, label string, priority int, correlation_id string, app_specific long,"
              " time_to_be_received double, time_to_reach_queue double, journal string,"
              " properties map<string,string>, extension binary, response_queue string,"
              " delivery string, acknowledge int")
    df = spark.createDataFrame(rows, schema).coalesce(1)
    write_messages(df, fmt, admin_queue=reply_fn, **_target(qm))

    got = _drain(q)
    assert [m.body for m in got] == [b"high", b"mid", b"low"]  # priority 7, 3, 1
    high, mid, low = got
    assert (low.label, low.priority, low.app_specific) == ("first", 1, 7)
    assert low.time_to_be_received == 3600.0 and low.time_to_reach_queue == 120.0
    assert low.journal is JournalLevel.DEADLETTER and low.properties == {"k": "v"}
    assert low.extension == b"ext" and low.response_queue == reply_fn
    assert low.delivery is Delivery.RECOVERABLE and mid.delivery is Delivery.EXPRESS
    assert high.correlation_id == corr and high.app_specific == 2**32 - 1
    assert high.acknowledge == Acknowledgment.NACK_RECEIVE and high.admin_queue == reply_fn
    assert mid.journal is JournalLevel.NONE and mid.acknowledge is Acknowledgment.NONE
    for m in got:
        # Stamped as MessageQueue.send does.
        assert m.body_type is BodyType.BYTES and m.message_class is MessageClass.NORMAL
        assert m.source_machine_id == qm.guid
        assert m.destination_format_name == fmt
        assert m.destination_queue == q.destinations[0].format_name
        assert m.sent_time is not None and m.sent_time.tzinfo is not None
    # One partition: one id GUID, sequences = row position + 1.
    assert len({m.id.machine_guid for m in got}) == 1
    assert sorted(m.id.sequence for m in got) == [1, 2, 3]
    assert _drain(admin, 0.5) == []  # NACK_RECEIVE only: nothing on arrival


def test_string_bodies_defaults_and_nulls(spark, qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\defaults")
    when = dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    df = spark.createDataFrame(
        [("héllo", None, None, {"row": "1"}), ("bye", "own", 6, None)],
        "body string, label string, priority int, properties map<string,string>").coalesce(1)
    write_messages(df, q.format_name, label="default", priority=5, delivery=Delivery.RECOVERABLE,
                   properties={"job": "nightly", "row": "0"}, time_to_be_received=600,
                   not_before=when, **_target(qm))
    first, second = sorted(_drain(q), key=lambda m: m.id.sequence)
    assert first.body == "héllo".encode() and first.body_type is BodyType.STRING
    assert (first.label, first.priority) == ("default", 5)
    assert first.properties == {"job": "nightly", "row": "1"}  # row map merged over defaults
    assert (second.label, second.priority) == ("own", 6)
    assert second.properties == {"job": "nightly", "row": "0"}
    for m in (first, second):
        assert m.delivery is Delivery.RECOVERABLE and m.time_to_be_received == 600.0
        assert m.not_before == when


def test_batch_write_to_distribution_list(spark, qm: QueueManager) -> None:
    members = [qm.create_queue(rf".\dlm{i}") for i in range(2)]
    dl = qm.directory.create_distribution_list("sparklist")
    for member in members:
        qm.directory.add_member("sparklist", f"PUBLIC={member.properties.instance}")
    bodies = [f"row-{i}".encode() for i in range(6)]
    df = spark.createDataFrame([(b,) for b in bodies], "body binary").repartition(2)
    write_messages(df, dl.format_name, label="to-dl", **_target(qm))

    ids_per_member = []
    for member in members:
        got = _drain(member)
        assert sorted(m.body for m in got) == sorted(bodies)  # each row once per member
        assert {m.destination_format_name for m in got} == {dl.format_name}
        assert {m.destination_queue for m in got} == {member.destinations[0].format_name}
        ids_per_member.append({m.body: m.id for m in got})
    # Every copy of one row carries the same id (one MQSendMessage, several queues).
    assert ids_per_member[0] == ids_per_member[1]
    assert len(set(ids_per_member[0].values())) == len(bodies)


def test_unknown_and_missing_columns_fail_on_the_driver(spark, qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\bad")
    bad = spark.createDataFrame([(b"x", "y", 1)], "body binary, colour string, size int")
    with pytest.raises(InvalidParameter) as info:
        write_messages(bad, q.format_name, **_target(qm))
    text = str(info.value)
    assert "'colour'" in text and "'size'" in text and "label" in text and "priority" in text
    no_body = spark.createDataFrame([("y",)], "label string")
    with pytest.raises(InvalidParameter, match="needs a 'body' column"):
        write_messages(no_body, q.format_name, **_target(qm))
    wrong_type = spark.createDataFrame([(b"x", "high")], "body binary, priority string")
    with pytest.raises(InvalidParameter, match="'priority' has type string"):
        write_messages(wrong_type, q.format_name, **_target(qm))
    signed = spark.createDataFrame([(b"x", 1)], "body binary, auth_level int")
    with pytest.raises(InvalidParameter, match="signing and encryption"):
        write_messages(signed, q.format_name, **_target(qm))
    with pytest.raises(InvalidParameter, match="unknown message default"):
        write_messages(spark.createDataFrame([(b"x",)], "body binary"), q.format_name,
                       colour="red", **_target(qm))
    with pytest.raises(InvalidParameter, match="PROPID_M_PRIORITY"):
        write_messages(spark.createDataFrame([(b"x",)], "body binary"), q.format_name,
                       priority=9, **_target(qm))


def test_invalid_row_names_its_position(spark, qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\badrow")
    df = spark.createDataFrame([(b"ok", 1), (b"bad", 9)], "body binary, priority int").coalesce(1)
    with pytest.raises(Exception) as info:  # a Spark job failure wrapping InvalidParameter
        write_messages(df, q.format_name, **_target(qm))
    text = str(info.value)
    assert "row 1 of partition 0" in text and "PROPID_M_PRIORITY" in text


@pytest.mark.parametrize("transactional", [False, True])
def test_replayed_batch_write_is_delivered_once(spark, qm: QueueManager,
                                                transactional: bool) -> None:
    q = qm.create_queue(rf".\private$\replay{int(transactional)}")
    admin = qm.create_queue(rf".\private$\replayadmin{int(transactional)}")
    admin_fn = rf"DIRECT=OS:{qm.name}\private$\replayadmin{int(transactional)}"
    # No shuffle: each partition gets the same rows in the same order every time.
    df = spark.createDataFrame([(f"m{i}".encode(),) for i in range(20)], "body binary")
    assert df.rdd.getNumPartitions() == 2
    write_id = str(uuid.uuid4())
    for _ in range(2):  # the second write is what Spark's replay of a failed job would send
        write_messages(df, q.format_name, write_id=write_id, transactional=transactional,
                       acknowledge="POSITIVE_ARRIVAL", admin_queue=admin_fn,
                       journal="JOURNAL", **_target(qm))

    data_topic = q.destinations[0].topics.data
    assert _raw_count(qm, data_topic) >= 40  # both writes are in the topic (plus txn markers)
    got = _drain(q)
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(20))
    acks = _drain(admin)
    assert len(acks) == 20 and {a.message_class for a in acks} == {MessageClass.ACK_REACH_QUEUE}
    assert {a.correlation_id for a in acks} == {m.id for m in got}
    info = decode_acknowledgment(acks[0].body)
    assert [x.format_name for x in info.queues] == [q.destinations[0].format_name]
    journal = _drain(qm.open_queue(f"MACHINE={qm.guid};JOURNAL"))
    assert sorted(m.id.sequence for m in journal) == sorted(m.id.sequence for m in got)


def test_message_key_ids_survive_a_different_partitioning(spark, qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\keyed")
    rows = spark.createDataFrame([(f"k{i}", f"b{i}".encode()) for i in range(30)],
                                 "message_key string, body binary")
    write_id = str(uuid.uuid4())
    # The "replay" shuffles the rows into other partitions, in another order: positional ids
    # would differ, keyed ids do not.
    write_messages(rows.repartition(2), q.format_name, write_id=write_id, **_target(qm))
    write_messages(rows.repartition(3).orderBy("body", ascending=False), q.format_name,
                   write_id=write_id, **_target(qm))
    got = _drain(q)
    assert sorted(m.body for m in got) == sorted(f"b{i}".encode() for i in range(30))
    with pytest.raises(Exception, match="message_key is null"):
        write_messages(spark.createDataFrame([(None, b"x")], "message_key string, body binary"),
                       q.format_name, **_target(qm))


def test_fresh_batch_writes_get_fresh_ids(spark, qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\twice")
    df = spark.createDataFrame([(b"same",)], "body binary")
    write_messages(df, q.format_name, **_target(qm))
    write_messages(df, q.format_name, **_target(qm))  # a new job, not a replay: two messages
    got = _drain(q)
    assert [m.body for m in got] == [b"same", b"same"] and got[0].id != got[1].id


def test_writer_needs_the_resolution_option(spark) -> None:
    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(InvalidParameter, match="kmq.resolution"):
        KmqBatchWriter({}, df.schema)


def test_row_conversion_without_spark() -> None:
    defaults = normalize_defaults({"acknowledge": "POSITIVE_ARRIVAL|NEGATIVE_ARRIVAL",
                                   "journal": JournalLevel.JOURNAL, "extension": b"\x00\x01"})
    message = message_from_row({"body": b"x", "acknowledge": None}, defaults)
    assert message.acknowledge == Acknowledgment.FULL_REACH_QUEUE
    assert message.journal is JournalLevel.JOURNAL and message.extension == b"\x00\x01"
    with pytest.raises(InvalidParameter, match="not a Acknowledgment name"):
        normalize_defaults({"acknowledge": "SOMETIMES"})
    with pytest.raises(InvalidParameter, match="timezone-aware"):
        normalize_defaults({"not_before": dt.datetime(2030, 1, 1)})


# --------------------------------------------------------------------------------------------
# Streaming: kill a copy job between produce and commit, restart it, count
# --------------------------------------------------------------------------------------------

_COPY_JOB = textwrap.dedent(r'''
    """A streaming copy job: JSON files -> kmq queue, optionally dying in a batch's commit."""
    import json
    import os
    import signal
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_connector.datasource import KmqDataSource
    from spark_connector.sink import KmqStreamWriter
    from spark_connector.write import write_stream


    class CrashingWriter(KmqStreamWriter):
        def commit(self, messages, batchId):
            # Every task of this batch has produced and flushed; Spark has not yet recorded
            # the batch in its commit log. SIGKILL the whole job here: the driver and its JVM
            # (the job's process group), then PySpark's daemon and its workers (their own).
            if batchId == int(os.environ.get("CRASH_BATCH", "-1")):
                os.killpg(int(os.environ["JOB_PGID"]), signal.SIGKILL)
                os.killpg(os.getpgid(0), signal.SIGKILL)
            super().commit(messages, batchId)


    class CrashingSource(KmqDataSource):
        def streamWriter(self, schema, overwrite):
            return CrashingWriter(dict(self.options), schema)


    source, checkpoint, format_name, servers, manager = sys.argv[1:6]
    os.environ["JOB_PGID"] = str(os.getpgid(0))  # inherited by the JVM and the Python workers
    spark = (SparkSession.builder.master("local[2]").appName("kmq-copy-job")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             # A short job: start the JVM quickly rather than optimise it for hours.
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(CrashingSource)
    rows = (spark.readStream.schema("n long, body string").option("maxFilesPerTrigger", 1)
            .json(source))
    query = write_stream(rows.select("body"), format_name, checkpoint_location=checkpoint,
                         trigger={"availableNow": True}, label="copied",
                         bootstrap_servers=servers, queue_manager=manager)
    query.awaitTermination()
    print(json.dumps({"query_id": str(query.id), "batches": query.lastProgress["batchId"]}))
    spark.stop()
''')


def _run_copy_job(tmp_path: Path, args: list[str],
                  crash_batch: int | None) -> subprocess.CompletedProcess:
    script = tmp_path / "copy_job.py"
    script.write_text(_COPY_JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    env.pop("CRASH_BATCH", None)
    if crash_batch is not None:
        env["CRASH_BATCH"] = str(crash_batch)
    # Its own session (process group), so the job can SIGKILL all of itself and only itself.
    return subprocess.run([sys.executable, str(script), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=150, start_new_session=True)


def test_streaming_copy_killed_and_restarted_delivers_each_row_once(
        qm: QueueManager, tmp_path: Path) -> None:
    q = qm.create_queue(r".\private$\streamcopy")
    source = tmp_path / "in"
    source.mkdir()
    files, per_file = 3, 20
    for f in range(files):
        lines = [json.dumps({"n": f * per_file + i, "body": f"row-{f * per_file + i}"})
                 for i in range(per_file)]
        (source / f"part-{f}.json").write_text("\n".join(lines) + "\n")
    args = [str(source), str(tmp_path / "checkpoint"), q.format_name,
            qm.config.bootstrap_servers, qm.name]

    crashed = _run_copy_job(tmp_path, args, crash_batch=1)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    topic = q.destinations[0].topics.data
    assert _raw_count(qm, topic) == 2 * per_file  # batches 0 and 1 produced, 1 not committed

    finished = _run_copy_job(tmp_path, args, crash_batch=None)
    assert finished.returncode == 0, finished.stderr[-3000:]
    # Batch 1 was replayed: its records are in the topic twice...
    assert _raw_count(qm, topic) == (files + 1) * per_file
    # ...and receivers see every row exactly once.
    got = _drain(q)
    counts = Counter(m.body.decode() for m in got)
    assert len(got) == files * per_file and max(counts.values()) == 1
    assert set(counts) == {f"row-{n}" for n in range(files * per_file)}
    assert {m.label for m in got} == {"copied"}
