"""`kmq queue | send | receive | peek` against a real broker, through typer's runner."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(broker: BrokerEndpoint, kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", f"cli-{uuid.uuid4().hex[:8]}")


def _run(*args: str) -> dict | list:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_queue_lifecycle_and_messages(cli_env: None) -> None:
    q = r".\private$\cli"
    assert _run("queue", "create", q, "--label", "CLI")["label"] == "CLI"
    assert [row["queue_name"] for row in _run("queue", "list")] == ["cli"]
    _run("send", q, "--body", "low", "--priority", "1")
    sent = _run("send", q, "--body", "high", "--priority", "6")
    assert _run("queue", "show", q)["messages"] == 2
    assert _run("peek", q)["id"] == sent["id"]
    got = _run("receive", q)
    assert got["body"] == "high" and got["priority"] == 6
    assert _run("queue", "purge", q) == {"purged": 1}
    _run("queue", "delete", q)
    assert _run("queue", "list") == []


def test_errors_are_one_line_with_exit_1(cli_env: None) -> None:
    result = CliRunner().invoke(app, ["receive", r".\private$\missing", "--timeout", "0"])
    assert result.exit_code == 1
    assert "MQ_ERROR_QUEUE_NOT_FOUND" in result.output and "Traceback" not in result.output
    bad = CliRunner().invoke(app, ["send", "FOO=bar", "--body", "x"])
    assert bad.exit_code == 1 and "MQ_ERROR_ILLEGAL_FORMATNAME" in bad.output
