"""`kmq dev up | status | down` start Apache Kafka (one node or three) and the embedded directory;
its data survives a stop and a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from facade.cli import app
from facade.config import KmqConfig
from facade.kafka.devstack import DevStack

pytestmark = pytest.mark.integration


def _kmq(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KMQ_HOME": str(home)}
    env.pop("KMQ_BOOTSTRAP_SERVERS", None)
    return subprocess.run(
        [sys.executable, "-m", "facade.cli", *args], capture_output=True, text=True, env=env,
        timeout=300, check=False,
    )


def _produce(bootstrap: str, topic: str, value: bytes, replicas: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(topic, 1, replicas)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, value)
    assert producer.flush(30) == 0


def _read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(300):
            record = consumer.poll(0.2)
            if record is None:
                continue
            if record.error():
                if record.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise AssertionError(record.error())
            values.append(record.value())
    finally:
        consumer.close()
    raise AssertionError(f"no end of {topic} after {values}")


def test_dev_up_status_down_in_a_subprocess_keeps_the_data(kmq_home: Path) -> None:
    up = _kmq("dev", "up", "--json", home=kmq_home)
    assert up.returncode == 0, up.stderr
    state = json.loads(up.stdout)
    topic = f"devstack-{uuid.uuid4().hex[:8]}"
    try:
        broker = state["broker"]
        assert broker["bootstrap_servers"].startswith("127.0.0.1:")
        assert broker["kind"] == "apache-kafka" and broker["version"].startswith("4.")
        assert [node["alive"] for node in broker["nodes"]] == [True]
        assert broker["ready_seconds"] > 0
        assert state["directory_initialized"] is True
        assert not any("memory" in w for w in state["warnings"])
        _produce(broker["bootstrap_servers"], topic, b"hello")

        again = _kmq("dev", "up", "--json", home=kmq_home)
        assert json.loads(again.stdout)["broker"]["nodes"] == broker["nodes"], "up is idempotent"

        status = _kmq("dev", "status", home=kmq_home)
        assert status.returncode == 0
        assert "Apache Kafka 4." in status.stdout and "running, pid" in status.stdout

        down = _kmq("dev", "down", "--json", home=kmq_home)
        assert down.returncode == 0 and json.loads(down.stdout) == {"stopped": True}
        assert DevStack(KmqConfig.load()).running_broker() is None
        assert json.loads(_kmq("dev", "status", "--json", home=kmq_home).stdout)["broker"] is None

        # The log dirs are under KMQ_HOME: the record is there after down and up.
        up = _kmq("dev", "up", "--json", home=kmq_home)
        assert up.returncode == 0, up.stderr
        restarted = json.loads(up.stdout)["broker"]
        assert restarted["bootstrap_servers"] == broker["bootstrap_servers"]
        assert _read_all(restarted["bootstrap_servers"], topic) == [b"hello"]
    finally:
        _kmq("dev", "down", home=kmq_home)


def test_a_crashed_dev_broker_keeps_its_data(kmq_home: Path) -> None:
    stack = DevStack(KmqConfig.load())
    stack.up()
    try:
        broker = stack.running_broker()
        assert broker is not None
        _produce(broker.bootstrap_servers, "crash", b"acknowledged")
        broker.stop(hard=True)  # SIGKILL: no controlled shutdown
        assert stack.status().broker is None
        stack.up()
        assert _read_all(broker.bootstrap_servers, "crash") == [b"acknowledged"]
    finally:
        stack.down()


def test_three_brokers_replicate_kmqs_topics(kmq_home: Path) -> None:
    up = _kmq("dev", "up", "--brokers", "3", "--json", home=kmq_home)
    assert up.returncode == 0, up.stderr
    try:
        broker = json.loads(up.stdout)["broker"]
        assert [node["node_id"] for node in broker["nodes"]] == [1, 2, 3]
        assert all(node["alive"] for node in broker["nodes"])
        config = KmqConfig.load(bootstrap_servers=broker["bootstrap_servers"],
                                queue_manager=f"three-{uuid.uuid4().hex[:6]}")
        from facade.manager import QueueManager

        with QueueManager.open(config) as qm:
            assert qm.session.topic_durability() == (3, 2)
        refused = _kmq("dev", "up", "--brokers", "1", home=kmq_home)
        assert refused.returncode == 1 and "3-node cluster" in refused.stdout + refused.stderr
    finally:
        _kmq("dev", "down", home=kmq_home)


def test_cli_runner_reports_errors_as_one_line(kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_DIRECTORY_URL", "ftp://nowhere")
    result = CliRunner().invoke(app, ["dev", "status"])
    assert result.exit_code == 1
    assert "ftp://nowhere" in result.output
    assert "Traceback" not in result.output


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["dev", "sideways"])
    assert result.exit_code == 2
