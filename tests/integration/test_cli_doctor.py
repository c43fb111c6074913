"""`kmq doctor` against the real test broker, through typer's runner."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from facade.cli import app
from facade.config import KmqConfig
from facade.kafka.librdkafka import KafkaSession
from facade.manager import QueueManager
from facade.model.topicsettings import MAX_MESSAGE_BYTES
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration


@pytest.fixture
def doctor_qm(broker: BrokerEndpoint, kmq_home: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[QueueManager]:
    """A queue manager with a queue, its journal and a subqueue, set up by kmq itself."""
    name = f"doc-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", name)
    with QueueManager.open() as qm:
        qm.create_queue(r".\private$\orders", journal=True)
        qm.open_queue(r".\private$\orders;poison")   # creates the subqueue's topics
        yield qm


def _doctor(qm: QueueManager, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["doctor", "--queue-manager", qm.name, "--json", *args])
    return result.exit_code, json.loads(result.output)


def test_a_setup_made_by_kmq_passes(doctor_qm: QueueManager) -> None:
    code, report = _doctor(doctor_qm)
    assert code == 0, report
    assert report["ok"] is True
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    # queue, receipts, journal (+ receipts), subqueue (+ receipts), 3 system queues (+ receipts),
    # and the three registries (queues, queue managers, queue-manager security)
    assert report["topics_checked"] == 15
    # The topics really were created with kmq's settings, as the broker describes them.
    session = KafkaSession.from_config(KmqConfig.load())
    data = f"kmq.{doctor_qm.name}.private.orders"
    try:
        configs = session.topic_configs([data, data + ".receipts", "__kmq.queues"])
    finally:
        session.close()
    assert configs[data]["retention.ms"] == "-1"
    assert configs[data]["cleanup.policy"] == "delete"
    assert configs[data]["max.message.bytes"] == str(MAX_MESSAGE_BYTES)
    assert configs[data + ".receipts"]["retention.ms"] == "-1"
    assert configs["__kmq.queues"]["cleanup.policy"] == "compact"
    assert int(configs[data]["min.insync.replicas"]) == report["min_insync_replicas"]


def test_a_queue_topic_made_by_hand_is_reported(broker: BrokerEndpoint,
                                                doctor_qm: QueueManager) -> None:
    topic = f"kmq.{doctor_qm.name}.private.handmade"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "retention.ms": "604800000", "cleanup.policy": "delete",
        "max.message.bytes": str(MAX_MESSAGE_BYTES)})])[topic].result(30)
    try:
        code, report = _doctor(doctor_qm)
        assert code == 1 and report["ok"] is False
        errors = [f for f in report["findings"] if f["severity"] == "error"]
        assert [(f["subject"], f["setting"], f["found"], f["expected"]) for f in errors] == [
            (topic, "retention.ms", "604800000", "-1")]
        assert errors[0]["fix"] == (
            f"kafka-configs --bootstrap-server {broker.bootstrap_servers} --alter --entity-type "
            f"topics --entity-name {topic} --add-config retention.ms=-1")
        # Without --json: one line per finding, naming the topic and the fix; exit code 1.
        result = CliRunner().invoke(app, ["doctor", "-m", doctor_qm.name])
        assert result.exit_code == 1
        line = next(x for x in result.output.splitlines() if x.startswith("ERROR"))
        assert topic in line and "retention.ms = 604800000" in line and "kafka-configs" in line
    finally:
        admin.delete_topics([topic])[topic].result(30)


def test_a_broker_without_delete_records_is_reported(doctor_qm: QueueManager) -> None:
    supported, why = doctor_qm.session.delete_records_support()
    _code, report = _doctor(doctor_qm)
    found = [f for f in report["findings"] if f["setting"] == "delete_records"]
    if supported:
        assert found == []
    else:
        assert [(f["severity"], f["found"]) for f in found] == [("warning", "unsupported")]
        assert why in found[0]["why"]
