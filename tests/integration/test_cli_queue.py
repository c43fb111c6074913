"""`kmq queue | send | receive | peek` against a real broker, through typer's runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app
from facade.config import KmqConfig
from facade.manager import QueueManager
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(cli_qm: str) -> str:
    """The broker and a fresh queue manager name (conftest's cli_qm)."""
    return cli_qm


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
    assert _run("queue", "purge", q, "--yes") == {"purged": 1}
    _run("queue", "delete", q, "--yes")
    assert _run("queue", "list") == []


def test_errors_are_one_line_with_exit_1(cli_env: None) -> None:
    result = CliRunner().invoke(app, ["receive", r".\private$\missing", "--timeout", "0"])
    assert result.exit_code == 1
    assert "MQ_ERROR_QUEUE_NOT_FOUND" in result.output and "Traceback" not in result.output
    bad = CliRunner().invoke(app, ["send", "FOO=bar", "--body", "x"])
    assert bad.exit_code == 1 and "MQ_ERROR_ILLEGAL_FORMATNAME" in bad.output


def _usage_error_naming(result, option: str) -> None:  # noqa: ANN001 (click Result)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    output = " ".join(result.output.replace("│", " ").split())  # undo the panel's wrapping
    assert "Traceback" not in output
    assert f"Invalid value for '{option}'" in output, output


@pytest.mark.timeout(60)  # a wait forever on nan or inf must fail the test, not hang it
@pytest.mark.parametrize("command", ["receive", "peek"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e308"])
def test_receive_and_peek_refuse_a_timeout_that_is_not_seconds(cli_env: None, command: str,
                                                                value: str) -> None:
    # On an existing, empty queue `--timeout nan` (and inf, 1e308) would wait forever and -1
    # would be a receive timeout: each is a usage error naming --timeout.
    q = r".\private$\timeouts"
    _run("queue", "create", q)
    result = CliRunner().invoke(app, [command, q, "--timeout", value])
    _usage_error_naming(result, "--timeout")
    assert "give seconds from 0 to 4294967.294" in " ".join(result.output.split())


def _kmq(*args: str | bytes) -> subprocess.CompletedProcess:
    """``python -m facade.cli ARGS`` in a real process (argv bytes as a shell passes them),
    with this test's KMQ_* environment."""
    return subprocess.run([sys.executable, "-m", "facade.cli", *args], capture_output=True,
                          env=dict(os.environ), timeout=120, check=False)


@pytest.mark.timeout(180)
def test_body_bytes_from_the_command_line_are_sent_as_given(cli_env: None, broker: BrokerEndpoint,
                                                            kmq_home: Path) -> None:
    # `kmq send Q --body $'\xff\xfe'` sends those bytes, not a UnicodeEncodeError traceback.
    q = r".\private$\raw"
    _run("queue", "create", q)
    body = b"\xff\xfe not UTF-8 \x80 \xc3\xa9"
    sent = _kmq("send", q, "--body", body, "--json")
    assert sent.returncode == 0, sent.stderr.decode(errors="replace")
    assert b"Traceback" not in sent.stderr
    # The label is text: undecodable bytes in it are refused, naming --label; nothing is sent.
    refused = _kmq("send", q, "--body", "x", "--label", b"caf\xe9")
    assert refused.returncode == 2, refused.stderr.decode(errors="replace")
    stderr = " ".join(refused.stderr.decode(errors="replace").replace("│", " ").split())
    assert "Traceback" not in stderr and "Invalid value for '--label'" in stderr, stderr
    assert refused.stdout == b""
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=os.environ["KMQ_QUEUE_MANAGER"])
    with QueueManager.open(config) as manager:
        queue = manager.open_queue(q)
        assert queue.count() == 1
        got = queue.receive(timeout=30)
    assert got.body == body and str(got.id) == json.loads(sent.stdout)["id"]
