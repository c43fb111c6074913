"""Deleting a queue that applications have open: they get QueueNotFound on their next
operation on it and keep working for every other queue; they are never killed.

librdkafka 2.16 can crash a process (SIGSEGV) whose consumer is fetching a topic when it is
deleted, which these tests see as exit status -11; readers rest while unused
(``facade.kafka.librdkafka.TopicReader``) and deletes stop this process's readers first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from facade import Message, QueueNotFound
from facade.config import KmqConfig
from facade.kafka.librdkafka import readers_at_rest
from facade.manager import QueueManager
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

#: What every holder process starts with: its queue manager on the test's broker.
_HOLDER_START = textwrap.dedent(r"""
    import json, sys, time
    from facade.config import KmqConfig
    from facade.errors import MessageQueueError, QueueNotFound
    from facade.kafka.librdkafka import readers_at_rest
    from facade.manager import QueueManager

    bootstrap, name = sys.argv[1:3]
    qm = QueueManager.open(KmqConfig.load(bootstrap_servers=bootstrap, queue_manager=name))
""")
#: Waits (a condition, not a deadline) until no reader fetches in the background, says
#: "ready", then waits for "go".
_AT_REST_THEN_GO = textwrap.dedent(r"""
    deadline = time.monotonic() + 60
    while not readers_at_rest():
        if time.monotonic() > deadline:
            sys.exit("readers still fetching after 60 s unused")
        time.sleep(0.05)
    print("ready", flush=True)
    sys.stdin.readline()
""")

#: Opens the doomed queue, counts it, waits until its readers rest, and after "go" uses its
#: queue manager and handle.
_HOLDER = _HOLDER_START + textwrap.dedent(r"""
    doomed = qm.open_queue(r".\private$\doomed")
    doomed.count()
""") + _AT_REST_THEN_GO + textwrap.dedent(r"""
    report = {"queues": [p.queue_name for p in qm.list_queues()]}
    for attempt in ("first", "second"):
        try:
            doomed.count()
        except QueueNotFound as exc:
            report[attempt] = [type(exc).__name__, exc.queue, str(exc)]
    other = qm.open_queue(r".\private$\other")
    report["other"] = other.receive(timeout=30).body.decode()
    qm.close()
    print(json.dumps(report), flush=True)
""")


def _hold(script: str, broker: BrokerEndpoint, qm: QueueManager,
          meanwhile: Callable[[], None]) -> dict[str, Any]:
    """Run a holder ``script`` in another process until it says "ready", do ``meanwhile``,
    tell it "go", and return the JSON report it prints last."""
    holder = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", script, broker.bootstrap_servers, qm.name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "ready", "the holder failed before deletion"
        meanwhile()
        holder.stdin.write("go\n")
        holder.stdin.flush()
        out = holder.stdout.read()
        assert holder.wait(timeout=300) == 0, f"the holder died (status {holder.returncode})"
    finally:
        if holder.poll() is None:
            holder.kill()
    return cast(dict[str, Any], json.loads(out.strip().splitlines()[-1]))


@pytest.mark.timeout(300)
def test_a_process_with_the_queue_open_gets_queue_not_found_when_another_deletes_it(
    broker: BrokerEndpoint, qm: QueueManager
) -> None:
    qm.create_queue(r".\private$\doomed").close()
    qm.create_queue(r".\private$\other").send(Message(body=b"still here"), wait=True)
    report = _hold(_HOLDER, broker, qm, lambda: qm.delete_queue(r".\private$\doomed"))
    assert report["queues"] == ["other"]
    for attempt in ("first", "second"):
        kind, queue, text = report[attempt]
        assert kind == "QueueNotFound" and queue == r".\private$\doomed"
        assert "deleted" in text
    assert report["other"] == "still here"


def test_a_second_queue_manager_deleting_a_queue_leaves_the_first_one_working(
    broker: BrokerEndpoint, qm: QueueManager
) -> None:
    doomed = qm.create_queue(r".\private$\doomed")
    doomed.send(Message(body=b"gone with the queue"), wait=True)
    assert doomed.count() == 1
    other = qm.create_queue(r".\private$\other")
    other.send(Message(body=b"kept"), wait=True)
    with _another_manager(broker, qm) as admin:
        admin.delete_queue(r".\private$\doomed")
    with pytest.raises(QueueNotFound) as raised:
        doomed.count()
    assert raised.value.queue == doomed.format_name and "deleted" in str(raised.value)
    with pytest.raises(QueueNotFound):
        doomed.receive(timeout=0)
    assert other.receive(timeout=30).body == b"kept"
    assert [p.queue_name for p in qm.list_queues()] == ["other"]


def test_a_receive_waiting_on_a_queue_another_manager_deletes_ends_with_queue_not_found(
    broker: BrokerEndpoint, qm: QueueManager
) -> None:
    doomed = qm.create_queue(r".\private$\doomed")
    doomed.count()
    outcome: list[BaseException] = []
    waiting = threading.Event()

    def receive() -> None:
        waiting.set()
        try:
            doomed.receive(timeout=60)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    receiver = threading.Thread(target=receive)
    receiver.start()
    assert waiting.wait(timeout=30)
    with _another_manager(broker, qm) as admin:
        admin.delete_queue(r".\private$\doomed")
    receiver.join(timeout=60)
    assert not receiver.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], QueueNotFound), outcome


def test_a_handle_whose_reader_rested_reads_what_arrived_meanwhile(
    broker: BrokerEndpoint, qm: QueueManager
) -> None:
    with _another_manager(broker, qm) as other:
        sender = other.create_queue(r".\private$\quiet")
        sender.send(Message(body=b"before"), wait=True)
        q = qm.open_queue(r".\private$\quiet")
        assert q.count() == 1
        _wait_until_readers_rest()
        sender.send(Message(body=b"while resting"), wait=True)
        assert q.count() == 2
        assert [q.receive(timeout=30).body for _ in range(2)] == [b"before", b"while resting"]
        assert q.count() == 0


def _another_manager(broker: BrokerEndpoint, qm: QueueManager) -> QueueManager:
    """A second queue manager object of the same name in this process."""
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers, queue_manager=qm.name)
    return QueueManager.open(config)


def _wait_until_readers_rest() -> None:
    """Wait (a condition, 60 s at most) until no reader of this process fetches."""
    deadline = time.monotonic() + 60
    while not readers_at_rest():
        assert time.monotonic() < deadline, "readers still fetching after 60 s unused"
        time.sleep(0.05)


#: Opens the queue, receives its one message, waits until its readers rest; after "go" (the
#: queue deleted and created again meanwhile) tries to receive from the same handle twice and
#: reports what each attempt gave.
_STALE_HOLDER = _HOLDER_START + textwrap.dedent(r"""
    queue = qm.open_queue(r".\private$\reborn")
    report = {"first": queue.receive(timeout=60).body.decode()}
""") + _AT_REST_THEN_GO + textwrap.dedent(r"""
    for attempt in ("second", "third"):
        try:
            report[attempt] = ["message", queue.receive(timeout=10).body.decode()]
        except MessageQueueError as exc:
            report[attempt] = [type(exc).__name__, str(exc)]
    try:
        qm.close()
    except MessageQueueError as exc:
        report["close"] = [type(exc).__name__, str(exc)]
    print(json.dumps(report), flush=True)
""")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("arbitration", ["receipts", "share"])
def test_a_handle_never_receives_from_a_queue_created_again_with_its_name(
    broker: BrokerEndpoint, qm: QueueManager, arbitration: str
) -> None:
    """A queue deleted and created again has the same topic names. A handle another process
    kept open on the old queue must not append a receipt (or an ACCEPT) to the new queue's log:
    its receipt would remove a new message that it never read and nobody would receive
    (seen: the new queue's second message lost). Its receives raise QueueNotFound instead, and
    every new message is received once, here."""
    qm.create_queue(r".\private$\reborn", arbitration=arbitration).send(
        Message(body=b"old"), wait=True)
    sent = [f"new-{i}" for i in range(5)]
    queues: list[Any] = []

    def delete_and_create_again() -> None:
        qm.delete_queue(r".\private$\reborn")
        queues.append(qm.create_queue(r".\private$\reborn"))
        queues[0].send_many([Message(body=body.encode()) for body in sent], wait=True)

    report = _hold(_STALE_HOLDER, broker, qm, delete_and_create_again)
    reborn = queues[0]
    assert report["first"] == "old"
    for attempt in ("second", "third"):
        kind, text = report[attempt]
        assert kind == "QueueNotFound", report
        assert "deleted and created again" in text
    assert "close" not in report, report
    received: list[str] = []
    while len(received) < len(sent):
        received.append(reborn.receive(timeout=60).body.decode())
    assert sorted(received) == sent
    assert reborn.count() == 0


def test_a_producer_that_saw_a_topic_deleted_writes_to_it_once_it_is_created_again(
        broker: BrokerEndpoint) -> None:
    """librdkafka refuses records at once for a topic it last saw deleted, until its next
    metadata refresh (5 minutes by default): a queue deleted and created again under its name
    refused sends (QueueNotFound) and receipts meanwhile. kmq's produce asks the cluster once
    and writes; a topic still missing stays QueueNotFound."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from facade.kafka.librdkafka import produce, produce_async

    servers = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers})
    topic = f"recreated-{os.getpid()}-{time.monotonic_ns()}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    # A short propagation window: librdkafka waits for a topic it has known for less than
    # this before calling it missing, and the test needs it called missing.
    producer = Producer({"bootstrap.servers": servers, "allow.auto.create.topics": False,
                         "topic.metadata.propagation.max.ms": 100})
    produce(producer, topic, b"before", None, [], None)
    assert producer.flush(60) == 0
    time.sleep(0.5)  # past the propagation window (a lower bound, not a deadline)
    admin.delete_topics([topic])[topic].result(60)
    # The producer learns the deletion from a metadata answer that no longer lists the topic.
    while producer.list_topics(topic, timeout=30).topics[topic].error is None:
        time.sleep(0.1)
    with pytest.raises(QueueNotFound):
        produce(producer, topic, b"missing", None, [], None)

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    produce(producer, topic, b"after", None, [], None)
    assert produce_async(producer, topic, b"receipt").wait(60) == 1
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes | None] = []
        give_up = time.monotonic() + 120
        while len(values) < 2 and time.monotonic() < give_up:
            values += [m.value() for m in consumer.consume(10, 1.0) if m.error() is None]
        assert values == [b"after", b"receipt"]
    finally:
        consumer.close()
        admin.delete_topics([topic])
