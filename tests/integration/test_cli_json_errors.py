"""Every ``kmq`` command that fails with ``--json``: exit code 1, stdout one JSON document
``{"error": {"code", "message", "hint"}}`` (so a script reading stdout always gets JSON), and
one ``error [CODE]:`` line on stderr, never a traceback.

Each case names a queue, message, list or alias that does not exist, on a fresh queue manager
(the broker fixture) and the test's own embedded directory.
"""

from __future__ import annotations

import json
import uuid

import pytest
from typer.testing import CliRunner

from facade.cli import app
from facade.config import KmqConfig
from facade.state.outgoingqueue import outgoing_queue_path

pytestmark = pytest.mark.integration

NOT_FOUND = "MQ_ERROR_QUEUE_NOT_FOUND"
NO_MESSAGE = "MQ_ERROR_MESSAGE_NOT_FOUND"
NO_OBJECT = "MQDS_OBJECT_NOT_FOUND"
GUID_ID = f"{uuid.UUID(int=1)}\\7"

CASES = [
    (["send", "nowhere", "--body", "x"], NOT_FOUND),
    (["receive", "nowhere", "--timeout", "0"], NOT_FOUND),
    (["peek", "nowhere", "--timeout", "0"], NOT_FOUND),
    (["receive", "here", "--timeout", "0"], "MQ_ERROR_IO_TIMEOUT"),
    (["peek", "here", "--timeout", "0"], "MQ_ERROR_IO_TIMEOUT"),
    (["receive", "here", "--id", GUID_ID, "--timeout", "0"], NO_MESSAGE),
    (["peek", "here", "--correlation-id", GUID_ID, "--timeout", "0"], NO_MESSAGE),
    (["peek", "here", "--lookup-id", "7"], NO_MESSAGE),
    (["queue", "create", "here"], "MQ_ERROR_QUEUE_EXISTS"),
    (["queue", "show", "nowhere"], NOT_FOUND),
    (["queue", "set", "nowhere", "--label", "x"], NOT_FOUND),
    (["queue", "purge", "nowhere", "--yes"], NOT_FOUND),
    (["queue", "delete", "nowhere", "--yes"], NOT_FOUND),
    (["queue", "browse", "nowhere"], NOT_FOUND),
    (["queue", "move", "here", "0", "--to", "nowhere"], NOT_FOUND),
    (["queue", "move", "here", "0", "--to", "here"], NO_MESSAGE),
    (["queue", "delete-message", "here", "0", "--yes"], NO_MESSAGE),
    (["dlq", "show", "7"], NO_MESSAGE),
    (["dlq", "requeue", "7"], NO_MESSAGE),
    (["dlq", "delete", "7", "--yes"], NO_MESSAGE),
    (["journal", "list", "nowhere"], NOT_FOUND),
    (["journal", "purge", "nowhere", "--yes"], NOT_FOUND),
    (["alias", "show", "alias:nope"], NO_OBJECT),
    (["alias", "delete", "alias:nope"], NO_OBJECT),
    (["dl", "show", "dl:nope"], NO_OBJECT),
    (["dl", "delete", "dl:nope"], NO_OBJECT),
    (["dl", "members", "dl:nope"], NO_OBJECT),
    (["dl", "expand", "dl:nope"], NO_OBJECT),
]


def _assert_json_error(args: list[str], code: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 1, (args, result.output)
    assert "Traceback" not in result.output
    error = json.loads(result.stdout)["error"]
    assert error["code"] == code and error["message"], (args, error)
    assert result.stderr.startswith(f"error [{code}]:"), (args, result.stderr)
    return error


@pytest.mark.parametrize(("args", "code"), CASES, ids=[" ".join(a[:2]) + f" {c}" for a, c in CASES])
def test_failure_with_json_is_exit_1_and_one_json_error(cli_qm: str, args: list[str],
                                                        code: str) -> None:
    result = CliRunner().invoke(app, ["queue", "create", "here", "--json"])
    assert result.exit_code == 0, result.output
    _assert_json_error(args, code)


@pytest.mark.parametrize("args", [["directory", "status"], ["alias", "list"], ["dl", "list"],
                                  ["queue", "locate"]])
def test_workgroup_mode_with_json(kmq_home: object, monkeypatch: pytest.MonkeyPatch,
                                  args: list[str]) -> None:
    monkeypatch.setenv("KMQ_DIRECTORY_URL", "none")
    assert "workgroup" in _assert_json_error(args, "MQ_ERROR_NO_DS")["message"]


def test_unreadable_outgoing_queue_with_json(kmq_home: object,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`kmq qm outgoing` reads the file without a broker; a damaged file is one clear error
    naming it (MSMQ has no code for it: "code" is null, the line says "error:")."""
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", "damaged")
    config = KmqConfig.load()
    path = outgoing_queue_path(config.home, config.queue_manager)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not an SQLite database" * 100)
    result = CliRunner().invoke(app, ["qm", "outgoing", "--json"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert str(path) in error["message"] + (error["hint"] or "")
    assert result.stderr.startswith("error") and "Traceback" not in result.output
    assert path.read_bytes().startswith(b"this is not")  # never deleted or replaced
