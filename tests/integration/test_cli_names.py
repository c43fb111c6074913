r"""One resolver of queue names for every CLI command (facade.cli._names).

Bare names, path names with and without ``.\``, format names, ``dl:NAME``, ``DL=NAME`` and
``alias:NAME`` are accepted alike by send, receive, peek, queue show/set/purge/delete and journal
list; the embedded directory of the test's KMQ_HOME serves the directory names.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app
from tests.support.cli import run_json

pytestmark = pytest.mark.integration


_run = run_json


def _fails(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return result.output


def test_bare_names_reach_private_and_public_queues(cli_qm: str) -> None:
    _run("queue", "create", "payments")
    _run("queue", "create", "orders-west", "--public")
    _run("send", "payments", "--body", "p")
    _run("send", "orders-west", "--body", "o")
    assert _run("peek", "payments")["body"] == "p"
    assert _run("queue", "show", "orders-west")["messages"] == 1
    assert _run("queue", "show", r".\orders-west")["messages"] == 1
    assert _run("queue", "show", rf"{cli_qm}\private$\payments")["messages"] == 1
    assert _run("queue", "set", "payments", "--label", "Pay")["label"] == "Pay"
    assert _run("receive", "orders-west", "--timeout", "0")["body"] == "o"
    assert _run("queue", "purge", "payments", "--yes") == {"purged": 1}
    assert _run("journal", "list", "payments") == []
    _run("queue", "delete", "payments", "--yes")
    error = _fails("peek", "payments", "--timeout", "0")
    assert "MQ_ERROR_QUEUE_NOT_FOUND" in error and len(error.strip().splitlines()) == 2
    assert r"looked for .\private$\payments and .\payments" in error
    assert "kmq queue create payments" in error


def test_directory_names_reach_their_queues(cli_qm: str) -> None:
    _run("queue", "create", "pay")
    _run("queue", "create", "west", "--public")
    _run("dl", "create", "all-west")
    _run("dl", "add", "all-west", r".\west")
    _run("alias", "create", "payalias", rf"DIRECT=OS:{cli_qm}\private$\pay")
    _run("send", "dl:all-west", "--body", "by dl:")
    _run("send", "DL=all-west", "--body", "by DL=name")
    _run("send", "alias:payalias", "--body", "by alias")
    assert _run("queue", "show", "west")["messages"] == 2
    assert _run("receive", "alias:payalias", "--timeout", "0")["body"] == "by alias"
    missing = _fails("send", "dl:nope", "--body", "x")
    assert "MQDS_OBJECT_NOT_FOUND" in missing and "computer name" not in missing


def test_dl_list_shows_the_whole_guid(kmq_home: Path) -> None:
    created = _run("dl", "create", "a-list-with-a-long-name", "--description", "x " * 30)
    result = CliRunner().invoke(app, ["dl", "list"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    assert created["format_name"] in result.output


def test_hints_name_commands_that_exist(cli_qm: str) -> None:
    error = _fails("queue", "create", "DIRECT=OS:x\\private$\\q")
    assert "parse_format_name" not in error and "MQ_ERROR_ILLEGAL_QUEUE_PATHNAME" in error
    missing = _fails("peek", f"PUBLIC={uuid.uuid4()}", "--timeout", "0")
    assert "kmq queue locate" in missing and "--public" not in missing
