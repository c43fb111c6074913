r"""`kmq send` sets every message property an MSMQ sender sets, and `--json` always
prints one JSON document on stdout (the message, or the error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app
from tests.support.cli import run_json

pytestmark = pytest.mark.integration


_run = run_json


def _usage(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return " ".join(result.output.replace("│", " ").split())


def test_send_sets_every_property(cli_qm: str, tmp_path: Path) -> None:
    _run("queue", "create", "orders")
    _run("queue", "create", "acks")
    _run("queue", "create", "replies")
    first = _run("send", "orders", "--body", "first")
    sent = _run("send", "orders", "--body-file", "-", "--label", "L", "--priority", "5",
                "--ttbr", "3600", "--ttrq", "1800", "--acknowledge", "positive_arrival|NACK_RECEIVE",
                "--admin-queue", "acks", "--response-queue", r".\private$\replies",
                "--correlation-id", first["id"], "--recoverable", "--journal", "DEADLETTER",
                "--app-specific", "4294967295", stdin=b'{"order": 1}\xff')
    got = _run("receive", "orders", "--timeout", "0")
    assert got["id"] == sent["id"]
    assert got["body_size"] == 13 and got["label"] == "L" and got["priority"] == 5
    assert got["time_to_be_received"] == 3600 and got["time_to_reach_queue"] == 1800
    assert got["acknowledge"] == "POSITIVE_ARRIVAL|NEGATIVE_ARRIVAL|NEGATIVE_RECEIVE"
    assert got["admin_queue"] == r".\private$\acks"
    assert got["response_queue"] == r".\private$\replies"
    assert got["correlation_id"] == first["id"]
    assert got["delivery"] == "RECOVERABLE" and got["journal"] == "DEADLETTER"
    assert got["app_specific"] == 4294967295
    body = tmp_path / "body.bin"
    body.write_bytes(b"\x00\x01binary")
    _run("send", "orders", "--body-file", str(body))
    assert _run("receive", "orders", "--timeout", "0")["body"] == "first"
    assert _run("receive", "orders", "--timeout", "0")["body_size"] == 8


def test_receive_json_on_timeout_prints_the_error(cli_qm: str) -> None:
    _run("queue", "create", "empty")
    for command in ("receive", "peek"):
        result = CliRunner().invoke(app, [command, "empty", "--timeout", "0", "--json"])
        assert result.exit_code == 1
        error = json.loads(result.stdout)["error"]
        assert error["code"] == "MQ_ERROR_IO_TIMEOUT" and error["message"]
        assert len(result.stderr.strip().splitlines()) <= 2


@pytest.mark.parametrize("args, option", [
    (["--body", "x", "--body-file", "-"], "'--body' / '--body-file'"),
    ([], "'--body' / '--body-file'"),
    (["--body", "x", "--acknowledge", "SOMETIMES"], "'--acknowledge'"),
    (["--body", "x", "--journal", "ALWAYS"], "'--journal'"),
    (["--body", "x", "--correlation-id", "nope"], "'--correlation-id'"),
    (["--body", "x", "--ttbr", "-1"], "'--time-to-be-received'"),
    (["--body", "x", "--app-specific", "4294967296"], "'--app-specific'"),
])
def test_send_usage_errors_name_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           args: list[str], option: str) -> None:
    monkeypatch.setenv("KMQ_HOME", str(tmp_path))  # no broker needed: refused while parsing
    output = _usage("send", "orders", *args)
    assert f"Invalid value for {option}" in output or f"Invalid value for '{option}'" in output
