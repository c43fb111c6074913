"""`kmq dev up | status | down` start a real broker process and the embedded directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from facade.cli import app
from facade.config import KmqConfig
from facade.devstack import DevStack

pytestmark = pytest.mark.integration


def _kmq(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KMQ_HOME": str(home)}
    env.pop("KMQ_BOOTSTRAP_SERVERS", None)
    return subprocess.run(
        [sys.executable, "-m", "facade.cli", *args], capture_output=True, text=True, env=env,
        timeout=60, check=False,
    )


def _round_trip(bootstrap: str) -> bytes:
    topic = f"devstack-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"hello")
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        for _ in range(50):
            record = consumer.poll(0.2)
            if record is not None and not record.error():
                return record.value()
    finally:
        consumer.close()
    raise AssertionError("no record read back from the dev broker")


def test_dev_up_status_down_in_a_subprocess(kmq_home: Path) -> None:
    up = _kmq("dev", "up", "--json", home=kmq_home)
    assert up.returncode == 0, up.stderr
    state = json.loads(up.stdout)
    try:
        assert state["broker"]["bootstrap_servers"].startswith("127.0.0.1:")
        assert state["directory_initialized"] is True
        assert any("memory only" in w for w in state["warnings"])
        assert _round_trip(state["broker"]["bootstrap_servers"]) == b"hello"

        again = _kmq("dev", "up", "--json", home=kmq_home)
        assert json.loads(again.stdout)["broker"]["pid"] == state["broker"]["pid"], "up is idempotent"

        status = _kmq("dev", "status", home=kmq_home)
        assert status.returncode == 0
        assert "running, pid" in status.stdout and "memory only" in status.stdout
    finally:
        down = _kmq("dev", "down", "--json", home=kmq_home)
    assert down.returncode == 0
    assert json.loads(down.stdout) == {"stopped": True}
    assert DevStack(KmqConfig.load()).running_broker() is None
    after = _kmq("dev", "status", "--json", home=kmq_home)
    assert json.loads(after.stdout)["broker"] is None


def test_status_forgets_a_dead_broker(kmq_home: Path) -> None:
    stack = DevStack(KmqConfig.load())
    stack.up()
    broker = stack.running_broker()
    assert broker is not None
    broker.stop()
    assert stack.status().broker is None
    assert not (stack.state_dir / "broker.json").exists()


def test_cli_runner_reports_errors_as_one_line(kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_DIRECTORY_URL", "ftp://nowhere")
    result = CliRunner().invoke(app, ["dev", "status"])
    assert result.exit_code == 1
    assert "ftp://nowhere" in result.output
    assert "Traceback" not in result.output


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["dev", "sideways"])
    assert result.exit_code == 2
