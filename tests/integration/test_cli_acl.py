"""`kmq acl show | grant | revoke` against a real broker, through typer's runner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from facade.cli import app
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration


def _run(*args: str, principal: str = "alice", code: int = 0) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"], env={"KMQ_PRINCIPAL": principal})
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_show_grant_revoke(cli_qm: str) -> None:
    q = "acl-cli"
    _run("queue", "create", q)
    shown = _run("acl", "show", q)
    assert shown["owner"] == "alice" and shown["principal"] == "alice"
    assert "RECEIVE_MESSAGE" not in shown["effective_rights"]  # decomposed names only
    assert {"DELETE_MESSAGE", "PEEK_MESSAGE", "WRITE_MESSAGE"} <= set(shown["effective_rights"])
    assert {"allow": True, "principal": "Everyone",
            "rights": ["WRITE_MESSAGE", "GET_PROPERTIES", "GET_PERMISSIONS"]} in shown["entries"]

    # bob may send (Everyone) but not receive, until alice grants it
    _run("send", q, "--body", "one", principal="bob")
    denied = _run("receive", q, "--timeout", "0", principal="bob", code=1)
    assert denied["error"]["code"] == "MQ_ERROR_ACCESS_DENIED"
    assert "bob" in denied["error"]["message"]

    granted = _run("acl", "grant", q, "bob", "receive|peek")
    assert {"allow": True, "principal": "bob",
            "rights": ["DELETE_MESSAGE", "PEEK_MESSAGE"]} in granted["entries"]
    assert _run("receive", q, "--timeout", "10", principal="bob")["body"] == "one"

    # a deny entry wins over the allow entry
    after_deny = _run("acl", "grant", q, "bob", "peek", "--deny")
    assert {"allow": False, "principal": "bob", "rights": ["PEEK_MESSAGE"]} in after_deny["entries"]
    assert _run("peek", q, "--timeout", "0", principal="bob", code=1)["error"]["code"] == (
        "MQ_ERROR_ACCESS_DENIED")

    revoked = _run("acl", "revoke", q, "bob")
    assert all(e["principal"] != "bob" for e in revoked["entries"])
    # bob is not the owner and the default list lets him read the permissions only
    assert _run("acl", "show", q, principal="bob")["effective_rights"] == [
        "WRITE_MESSAGE", "GET_PROPERTIES", "GET_PERMISSIONS"]


def test_errors(cli_qm: str) -> None:
    q = "acl-cli-errors"
    _run("queue", "create", q)
    bad = _run("acl", "grant", q, "bob", "read-everything", code=1)
    assert bad["error"]["code"] == "MQ_ERROR_INVALID_PARAMETER"
    assert "read-everything" in bad["error"]["message"]
    refused = _run("acl", "grant", q, "bob", "full", principal="bob", code=1)
    assert refused["error"]["code"] == "MQ_ERROR_ACCESS_DENIED"
    assert "CHANGE_PERMISSIONS" in refused["error"]["message"]
    missing = _run("acl", "show", "no-such-queue", code=1)
    assert missing["error"]["code"] == "MQ_ERROR_QUEUE_NOT_FOUND"
    # Without --json: one error line and a hint on stderr, exit code 1.
    result = CliRunner().invoke(app, ["acl", "grant", q, "bob", "full"],
                                env={"KMQ_PRINCIPAL": "bob"})
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error [MQ_ERROR_ACCESS_DENIED]")
    assert lines[1].startswith("hint: ask the owner (alice)")


def test_a_send_whose_admin_queue_refuses_the_sender_says_why(cli_qm: str) -> None:
    """``kmq send --acknowledge ... --admin-queue`` naming a queue the sender may not write is
    refused before anything is written, and the error names the admin queue, the missing
    right, the principal and whom to ask (docs/design.md, "Acknowledgments are sends to the
    admin queue")."""
    _run("queue", "create", "acl-open")  # Everyone may send (MSMQ's default)
    _run("queue", "create", "acl-victim")
    _run("acl", "revoke", "acl-victim", "Everyone")  # only alice may write it
    send = ("send", "acl-open", "--body", "mallory's body", "--acknowledge", "NACK_REACH_QUEUE",
            "--admin-queue", "acl-victim")
    error = _run(*send, principal="mallory", code=1)["error"]
    assert error["code"] == "MQ_ERROR_ACCESS_DENIED"
    message = error["message"]
    assert "nothing was sent" in message and "admin queue" in message
    assert "acl-victim" in message and "WRITE_MESSAGE" in message and "'mallory'" in message
    assert "ask the owner (alice)" in error["hint"]
    result = CliRunner().invoke(app, list(send), env={"KMQ_PRINCIPAL": "mallory"})
    lines = result.stderr.splitlines()
    assert result.exit_code == 1 and len(lines) == 2, result.output
    assert lines[0].startswith("error [MQ_ERROR_ACCESS_DENIED]") and "WRITE_MESSAGE" in lines[0]
    assert lines[1].startswith("hint: ask the owner (alice)")
    for queue in ("acl-open", "acl-victim"):  # no copy, and no NACK in the admin queue
        assert _run("queue", "show", queue)["messages"] == 0, queue


def test_qm_info_names_the_principal_source(cli_qm: str) -> None:
    info = _run("qm", "info", principal="carol")
    assert info["principal"] == "carol"
    assert info["principal_source"].startswith("declared")



def test_sync_refuses_a_broker_without_acl_support(cli_qm: str, broker: BrokerEndpoint) -> None:
    """The session's Kafka has no authorizer: sync (and its dry run) refuses with the reason
    and the setting that fixes it, and changes nothing. The cluster with an authorizer is
    tests/integration/test_kafka_sasl.py's."""
    if broker.kind == "external":
        pytest.skip("KMQ_BOOTSTRAP_SERVERS may name a cluster with an authorizer")
    _run("queue", "create", "acl-sync")
    for dry_run in ([], ["--dry-run"]):
        error = _run("acl", "sync", *dry_run, code=1)["error"]
        assert error["message"].startswith("cannot mirror queue rights onto Kafka ACLs: ")
        assert "has no authorizer (broker " in error["message"]
        assert "authorizer.class.name=" in error["hint"]
    assert _run("acl", "show", "acl-sync")["owner"] == "alice"  # still alive and working


def test_lists_and_aliases_through_the_directory(cli_qm: str) -> None:
    _run("dl", "create", "acl-list")
    shown = _run("acl", "show", "dl:acl-list")
    assert shown["owner"] == "alice" and shown["queue"] == "dl:acl-list"
    denied = _run("acl", "grant", "dl:acl-list", "mallory", "send", "--deny")
    assert {"allow": False, "principal": "mallory", "rights": ["WRITE_MESSAGE"]} in (
        denied["entries"])
    # The list's own show command reads the same descriptor.
    assert any(e["principal"] == "mallory" for e in _run("dl", "show", "acl-list")["acl"])
    refused = _run("acl", "revoke", "dl:acl-list", "mallory", principal="mallory", code=1)
    assert refused["error"]["code"] == "MQ_ERROR_ACCESS_DENIED"


def test_queue_manager_permissions_and_owner(cli_qm: str) -> None:
    shown = _run("acl", "show", "qm:")
    assert shown["owner"] == "alice" and shown["queue"] == f"qm:{cli_qm}"
    assert "CREATE_QUEUE" in _run("acl", "show", "qm:", principal="bob")["effective_rights"]
    _run("acl", "grant", "qm:", "bob", "create_queue|queue_status", "--deny")
    refused = _run("queue", "create", "by-bob", principal="bob", code=1)
    assert refused["error"]["code"] == "MQ_ERROR_ACCESS_DENIED"
    assert "CREATE_QUEUE" in refused["error"]["message"]
    assert _run("queue", "list", principal="bob", code=1)["error"]["code"] == (
        "MQ_ERROR_ACCESS_DENIED")
    # The owner hands the queue manager over; the old owner keeps only what the list gives.
    assert _run("acl", "owner", "qm:", "carol")["owner"] == "carol"
    assert _run("acl", "revoke", "qm:", "bob", principal="carol")["owner"] == "carol"
    wrong = _run("acl", "show", "qm:someone-else", code=1)
    assert wrong["error"]["code"] == "MQ_ERROR_INVALID_PARAMETER"
