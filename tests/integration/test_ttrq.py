"""Time-to-reach-queue and the durable outgoing queue, on real broker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from facade import Acknowledgment, BrokerError, Delivery, JournalLevel, Message, MessageClass
from facade.config import KmqConfig
from facade.model.envelope import encode_message
from facade.manager import QueueManager
from facade.state.outgoingqueue import OutgoingQueue, OutgoingRecord
from tests.support.kafka import BrokerEndpoint, PrivateBroker
from tests.support.outgoing import dead_pid

pytestmark = pytest.mark.integration


def test_missing_destination_topic_is_dead_lettered_and_nacked_after_ttrq(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\vanishing")
    admin = qm.create_queue(r".\private$\admin")
    handle = qm.open_queue(r".\private$\vanishing")
    qm.delete_queue(r".\private$\vanishing")      # the topic is gone; the handle still points at it
    started = time.monotonic()
    with pytest.raises(BrokerError):
        handle.send(Message(body=b"lost", time_to_reach_queue=2.0, journal=JournalLevel.DEADLETTER,
                            acknowledge=Acknowledgment.NACK_REACH_QUEUE,
                            admin_queue=rf"DIRECT=OS:{qm.name}\private$\admin"), wait=True, timeout=30)
    assert time.monotonic() - started < 20
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.body == b"lost" and dead.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    nack = admin.receive(timeout=10)
    assert nack.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    assert nack.correlation_id == dead.id
    assert q is not None


def test_recoverable_record_left_by_a_dead_sender_is_delivered_on_open(
    broker: BrokerEndpoint, qm: QueueManager
) -> None:
    q = qm.create_queue(r".\private$\recover")
    owner = dead_pid()
    message = Message(id=qm.ids.new(), body=b"survivor", delivery=Delivery.RECOVERABLE,
                      sent_time=_utcnow(), destination_queue=q.destinations[0].format_name)
    record = encode_message(message)
    store = OutgoingQueue(qm.config.home / "outgoing" / f"{qm.name}.sqlite")
    store.put(OutgoingRecord(topic=q.destinations[0].topics.data, key=record.key, value=record.value,
                             headers=tuple(record.headers), message_id=str(message.id),
                             deadline_ms=None, purpose=f"message:{owner}", created_ms=0))
    store.close()
    with QueueManager.open(qm.config) as reopened:   # open() runs recovery
        got = reopened.open_queue(r".\private$\recover").receive(timeout=10)
        assert got.id == message.id and got.body == b"survivor"
        assert reopened.transmitter.outgoing.count() == 0 or _eventually(lambda: reopened.transmitter.outgoing.count() == 0)


def test_recoverable_send_survives_sender_kill(broker: BrokerEndpoint, qm: QueueManager) -> None:
    """Whatever the moment of SIGKILL after send() returned, recovery leaves exactly one copy."""
    q = qm.create_queue(r".\private$\killed")
    script = (
        "import os, signal, sys\n"
        "from facade import Delivery, Message\n"
        "from facade.config import KmqConfig\n"
        "from facade.manager import QueueManager\n"
        "qm = QueueManager.open(KmqConfig.load(bootstrap_servers=sys.argv[1], queue_manager=sys.argv[2]))\n"
        "m = qm.open_queue(r'.\\private$\\killed').send(Message(body=b'k', delivery=Delivery.RECOVERABLE))\n"
        "print(m.id, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "KMQ_HOME": str(qm.config.home)}
    result = subprocess.run([sys.executable, "-c", script, broker.bootstrap_servers, qm.name],
                            capture_output=True, text=True, env=env, timeout=120, check=False,
                            cwd=Path(__file__).resolve().parents[2])
    sent_id = result.stdout.strip()
    assert sent_id, result.stderr
    with QueueManager.open(qm.config) as reopened:
        queue = reopened.open_queue(r".\private$\killed")
        assert str(queue.receive(timeout=10).id) == sent_id
        with pytest.raises(Exception, match="no message"):
            queue.receive(timeout=1)
    assert q is not None


def test_unreachable_broker_keeps_recoverable_messages_in_the_outgoing_queue(kmq_home: Path,
                                                                              tmp_path: Path) -> None:
    broker = PrivateBroker(tmp_path)
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:8]}")
    try:
        qm = QueueManager.open(config)
    except BaseException:
        broker.close()
        raise
    try:
        q = qm.create_queue(r".\private$\offline")
        broker.stop(hard=True)
        sent = q.send(Message(body=b"pending", delivery=Delivery.RECOVERABLE,
                              time_to_reach_queue=1.0, journal=JournalLevel.DEADLETTER))
        # send() returned: the copy is in the durable outgoing queue, not lost.
        stored = qm.transmitter.outgoing.pending()
        assert [s.record.message_id for s in stored] == [str(sent.id)]
        # TTRQ elapses; the DLQ copy cannot be written either, so the record stays parked.
        assert _eventually(lambda: sent_id_parked(qm), timeout=20)
        assert [s.record.message_id for s in qm.transmitter.outgoing.pending()] == [str(sent.id)]
    finally:
        qm.transmitter._stop.set()
        qm.transmitter.outgoing.close()
        broker.close()


def sent_id_parked(qm: QueueManager) -> bool:
    return bool(qm.transmitter._parked)


def _eventually(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def _utcnow():
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc)


def test_record_past_ttrq_left_by_a_dead_sender_is_dead_lettered_and_nacked(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\late")
    admin = qm.create_queue(r".\private$\lateadmin")
    message = Message(id=qm.ids.new(), body=b"too late", delivery=Delivery.RECOVERABLE,
                      sent_time=_utcnow(), destination_queue=q.destinations[0].format_name,
                      time_to_reach_queue=1.0, journal=JournalLevel.DEADLETTER,
                      acknowledge=Acknowledgment.NACK_REACH_QUEUE,
                      admin_queue=rf"DIRECT=OS:{qm.name}\private$\lateadmin")
    record = encode_message(message)
    store = OutgoingQueue(qm.config.home / "outgoing" / f"{qm.name}.sqlite")
    store.put(OutgoingRecord(topic=q.destinations[0].topics.data, key=record.key, value=record.value,
                             headers=tuple(record.headers), message_id=str(message.id),
                             deadline_ms=1, purpose=f"message:{dead_pid()}", created_ms=0))
    store.close()
    with QueueManager.open(qm.config) as reopened:
        assert reopened.transmitter.outgoing.count() == 0
    dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=10)
    assert dead.id == message.id and dead.message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    assert admin.receive(timeout=10).message_class is MessageClass.NACK_REACH_QUEUE_TIMEOUT
    with pytest.raises(Exception, match="no message"):
        q.receive(timeout=0.5)
