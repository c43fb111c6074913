"""Message size limits and records the broker refuses for good, on a real broker.

A record the broker can never accept must not lock out the queue manager: it is refused before
it is stored, and one that reaches the outgoing queue anyway (left by a kmq with other limits,
or refused by the broker's verdict) is dead-lettered with a NACK and removed, never replayed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from facade import (
    Acknowledgment,
    BrokerError,
    Delivery,
    InvalidParameter,
    JournalLevel,
    Message,
    MessageClass,
    ReceiveTimeout,
)
from facade.model.envelope import decode_acknowledgment, encode_message
from facade.manager import QueueManager
from facade.state.outgoingqueue import OutgoingQueue, OutgoingRecord
from facade.model.topicsettings import MAX_BODY_BYTES, MAX_MESSAGE_BYTES
from tests.support.kafka import BrokerEndpoint
from tests.support.outgoing import dead_pid

pytestmark = pytest.mark.integration

_REPO = Path(__file__).resolve().parents[2]


def _alter_topic(broker: BrokerEndpoint, topic: str, configs: dict[str, str]) -> None:
    """Change a topic's configs as an operator would, and wait until the broker applies them.

    The controller acknowledges an IncrementalAlterConfigs once it is committed to the metadata
    log; the broker applies it when it replays that log, a moment later (KRaft). Until then the
    broker still describes and enforces the old value, so a test must wait for the new one."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()])
    admin.incremental_alter_configs([change])[change].result(30)
    deadline = time.monotonic() + 60
    while True:
        described = ConfigResource(ResourceType.TOPIC, topic)
        entries = admin.describe_configs([described])[described].result(30)
        applied = {name: entries[name].value for name in configs if name in entries}
        if applied == configs:
            return
        assert time.monotonic() < deadline, f"{topic}: configs {configs} not applied: {applied}"
        time.sleep(0.1)


def _outgoing(qm: QueueManager) -> OutgoingQueue:
    return OutgoingQueue(qm.config.home / "outgoing" / f"{qm.name}.sqlite")


def test_too_large_recoverable_send_is_refused_before_it_is_stored(
    broker: BrokerEndpoint, qm: QueueManager
) -> None:
    """Another process sends a body over the limit, then exits: nothing is stored to replay."""
    qm.create_queue(r".\private$\big")
    script = (
        "import json, sys\n"
        "from facade import Delivery, Message, MessageQueueError\n"
        "from facade.config import KmqConfig\n"
        "from facade.manager import QueueManager\n"
        "with QueueManager.open(KmqConfig.load(bootstrap_servers=sys.argv[1],"
        " queue_manager=sys.argv[2])) as qm:\n"
        "    try:\n"
        "        qm.open_queue(r'.\\private$\\big').send(Message(body=b'x' * 5 * 1024 * 1024,"
        " delivery=Delivery.RECOVERABLE))\n"
        "    except MessageQueueError as exc:\n"
        "        print(json.dumps([type(exc).__name__, str(exc)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script, broker.bootstrap_servers, qm.name],
                            capture_output=True, text=True, timeout=120, check=False, cwd=_REPO,
                            env={**os.environ, "KMQ_HOME": str(qm.config.home)})
    assert result.returncode == 0, result.stderr
    kind, text = json.loads(result.stdout)
    assert kind == "InvalidParameter", text
    # The error names the body's size and MSMQ's limit.
    assert f"{5 * 1024 * 1024:,} bytes" in text and f"{MAX_BODY_BYTES:,} bytes" in text, text
    with _outgoing(qm) as store:
        assert store.count() == 0
    # The queue manager is not locked out: open, send and receive work.
    with QueueManager.open(qm.config) as reopened:
        queue = reopened.open_queue(r".\private$\big")
        sent = queue.send(Message(body=b"small", delivery=Delivery.RECOVERABLE), wait=True)
        got = queue.receive(timeout=10)
        assert got.id == sent.id and got.body == b"small"
        assert reopened.list_queues()[0].queue_name == "big"


@pytest.mark.parametrize("size", [3_500_000, MAX_BODY_BYTES], ids=["3.5MB", "4MiB"])
def test_bodies_up_to_msmq_limit_are_delivered_intact(qm: QueueManager, size: int) -> None:
    q = qm.create_queue(r".\private$\large")
    body = os.urandom(size)
    sent = q.send(Message(body=body, label="L" * 250, delivery=Delivery.RECOVERABLE,
                          properties={"k": "v" * 1000}), wait=True)
    got = q.receive(timeout=30)
    assert got.id == sent.id and got.body == body and got.label == "L" * 250
    assert qm.transmitter.outgoing.count() == 0


def test_record_refused_by_the_producer_is_dead_lettered_on_open(qm: QueueManager) -> None:
    """A record bigger than the producer's limit, as a kmq with other limits would have left."""
    q = qm.create_queue(r".\private$\leftover")
    admin = qm.create_queue(r".\private$\leftoveradmin")
    destination = q.destinations[0]
    body = b"y" * (MAX_MESSAGE_BYTES + 1024)
    message = Message(id=qm.ids.new(), body=body, label="old", delivery=Delivery.RECOVERABLE,
                      sent_time=dt.datetime.now(dt.timezone.utc),
                      destination_queue=destination.format_name,
                      journal=JournalLevel.DEADLETTER, acknowledge=Acknowledgment.NACK_REACH_QUEUE,
                      admin_queue=rf"DIRECT=OS:{qm.name}\private$\leftoveradmin")
    record = encode_message(message)
    with _outgoing(qm) as store:
        store.put(OutgoingRecord(topic=destination.topics.data, key=record.key, value=record.value,
                                 headers=tuple(record.headers), message_id=str(message.id),
                                 deadline_ms=None, purpose=f"message:{dead_pid()}", created_ms=0))
    with QueueManager.open(qm.config) as reopened:   # recovery must not fail the open
        assert reopened.transmitter.outgoing.count() == 0
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.id == message.id and dead.message_class is MessageClass.NACK_MESSAGE_TOO_LARGE
    # The body cannot be kept (it is what the broker refused): the reason says so.
    assert dead.body == b"" and f"{len(body):,}" in dead.properties["kmq.reason"]
    nack = admin.receive(timeout=10)
    assert nack.message_class is MessageClass.NACK_MESSAGE_TOO_LARGE
    assert nack.correlation_id == message.id
    with pytest.raises(ReceiveTimeout):
        q.receive(timeout=0.5)


@pytest.mark.parametrize("configs, first_body, body, message_class, body_kept", [
    # kmq checked the topic's limit with the first send and keeps it; the limit is then lowered
    # behind its back, so only the broker can refuse the second one.
    ({"max.message.bytes": "1100000"}, b"y" * 1_050_000, b"z" * 1_500_000,
     MessageClass.NACK_MESSAGE_TOO_LARGE, False),
    # A compacted topic takes no record without a key: INVALID_RECORD.
    ({"cleanup.policy": "compact"}, None, b"refused body", MessageClass.NACK_BAD_DST_Q, True),
], ids=["too-large", "invalid"])
def test_a_copy_the_broker_refuses_is_dead_lettered_and_removed(
    broker: BrokerEndpoint, qm: QueueManager, configs: dict[str, str], first_body: bytes | None,
    body: bytes, message_class: MessageClass, body_kept: bool,
) -> None:
    """A topic changed by hand so that the broker refuses kmq's record for good: the sender
    gets the error, the copy is dead-lettered with its NACK class and reason (the body dropped
    only when it was the problem), the NACK reaches the admin queue, and nothing stays in the
    outgoing queue to be retried. (A record refused for the principal's Kafka ACLs:
    tests/integration/test_kafka_sasl.py.)"""
    q = qm.create_queue(r".\private$\refused")
    admin = qm.create_queue(r".\private$\refusedadmin")
    if first_body is not None:
        q.send(Message(body=first_body), wait=True, timeout=30)
        assert q.receive(timeout=10).body == first_body
    topic = q.destinations[0].topics.data
    _alter_topic(broker, topic, configs)
    with pytest.raises(BrokerError):
        q.send(Message(body=body, delivery=Delivery.RECOVERABLE,
                       journal=JournalLevel.DEADLETTER, acknowledge=Acknowledgment.NACK_REACH_QUEUE,
                       admin_queue=rf"DIRECT=OS:{qm.name}\private$\refusedadmin"),
               wait=True, timeout=30)
    assert qm.transmitter.outgoing.count() == 0
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.message_class is message_class
    assert dead.body == (body if body_kept else b"")
    assert "refuses it" in dead.properties["kmq.reason"]
    nack = admin.receive(timeout=10)
    assert nack.message_class is message_class and nack.correlation_id == dead.id
    assert decode_acknowledgment(nack.body).reason


def test_a_topic_with_a_lower_max_message_bytes_refuses_at_send(broker: BrokerEndpoint,
                                                                qm: QueueManager) -> None:
    """A topic made or changed by hand with a lower limit: the send names the topic, its limit
    and the kafka-configs command, and nothing is stored."""
    q = qm.create_queue(r".\private$\narrow")
    topic = q.destinations[0].topics.data
    _alter_topic(broker, topic, {"max.message.bytes": "1500000"})
    with pytest.raises(InvalidParameter) as info:
        q.send(Message(body=b"z" * 2_000_000, delivery=Delivery.RECOVERABLE))
    text = str(info.value)
    assert topic in text and "1,500,000 bytes (max.message.bytes)" in text
    assert f"--entity-name {topic} --add-config max.message.bytes={MAX_MESSAGE_BYTES}" in text
    assert qm.transmitter.outgoing.count() == 0
    # Records within the topic's limit still go.
    sent = q.send(Message(body=b"z" * 1_400_000, delivery=Delivery.RECOVERABLE), wait=True)
    assert q.receive(timeout=30).id == sent.id


def test_record_for_a_deleted_queue_past_ttrq_is_dead_lettered_on_open(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\gone")
    destination = q.destinations[0]
    message = Message(id=qm.ids.new(), body=b"nowhere", delivery=Delivery.RECOVERABLE,
                      sent_time=dt.datetime.now(dt.timezone.utc),
                      destination_queue=destination.format_name, journal=JournalLevel.DEADLETTER)
    record = encode_message(message)
    qm.delete_queue(r".\private$\gone")
    with _outgoing(qm) as store:
        store.put(OutgoingRecord(topic=destination.topics.data, key=record.key, value=record.value,
                                 headers=tuple(record.headers), message_id=str(message.id),
                                 deadline_ms=1, purpose=f"message:{dead_pid()}", created_ms=0))
    with QueueManager.open(qm.config) as reopened:
        assert reopened.transmitter.outgoing.count() == 0
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.id == message.id and dead.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    assert dead.destination_queue == destination.format_name
