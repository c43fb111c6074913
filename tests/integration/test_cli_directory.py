"""`kmq directory | alias | dl | queue create --public | queue locate` through typer's runner,
and one real `python -m facade.cli` subprocess.

The directory is the embedded store in the test's own KMQ_HOME; only the tests that create
public queues need the broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(cli_qm: str) -> str:
    """The broker and a fresh queue manager name (conftest's cli_qm)."""
    return cli_qm


def _run(*args: str) -> dict | list:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _fails(*args: str, code: int = 1) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())  # undo rich's line wrapping


def test_directory_init_and_status(kmq_home: Path) -> None:
    init = _run("directory", "init")
    assert init["created"] == 0  # the embedded directory initializes itself when opened
    assert init["initialized"] is True and init["domain"] == "kmq.local"
    assert str(kmq_home / "directory.json") in init["directory"]
    _run("dl", "create", "counted")
    status = _run("directory", "status")
    assert status["base_dn"] == "dc=kmq,dc=local"
    assert (status["distribution_lists"], status["aliases"], status["public_queues"]) == (1, 0, 0)


def test_workgroup_mode_is_one_error_line(kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_DIRECTORY_URL", "none")
    for args in (["directory", "status"], ["dl", "list"], ["alias", "list"],
                 ["queue", "locate"]):
        output = _fails(*args)
        assert "MQ_ERROR_NO_DS" in output and "workgroup" in output and "hint:" in output


def test_alias_lifecycle(kmq_home: Path) -> None:
    target = r"DIRECT=OS:qm1\private$\orders"
    created = _run("alias", "create", "orders-eu", target, "--description", "EU orders")
    assert created["target"] == target and created["reference"] == "alias:orders-eu"
    shown = _run("alias", "show", "alias:orders-eu")
    assert shown["guid"] == created["guid"] and shown["description"] == "EU orders"
    assert shown["owner"] and any(e["principal"] == "Everyone" for e in shown["acl"])
    assert [a["name"] for a in _run("alias", "list")] == ["orders-eu"]
    public = f"PUBLIC={uuid.uuid4()}"
    assert _run("alias", "set", "orders-eu", public)["target"] == public
    assert _run("alias", "show", "orders-eu")["target"] == public
    assert _run("alias", "delete", "orders-eu") == {"deleted": "alias:orders-eu"}
    assert _run("alias", "list") == []
    assert "MQDS_OBJECT_NOT_FOUND" in _fails("alias", "show", "orders-eu")
    assert "MQ_ERROR_ILLEGAL_FORMATNAME" in _fails("alias", "create", "bad", "NOPE=x")


def test_dl_create_show_list_delete(kmq_home: Path) -> None:
    created = _run("dl", "create", "all-orders", "--scope", "global", "--description", "all")
    assert created["format_name"] == f"DL={created['guid']}" and created["scope"] == "global"
    text = CliRunner().invoke(app, ["dl", "create", "other"])
    assert text.exit_code == 0 and "DL=" in text.stdout
    by_guid = f"{created['format_name']}@kmq.local"
    shown = _run("dl", "show", by_guid)
    assert shown["name"] == "all-orders" and shown["members"] == []
    assert [row["name"] for row in _run("dl", "list")] == ["all-orders", "other"]
    assert _run("dl", "delete", "dl:all-orders")["format_name"] == created["format_name"]
    assert [row["name"] for row in _run("dl", "list")] == ["other"]
    assert "MQDS_OBJECT_NOT_FOUND" in _fails("dl", "members", by_guid)
    _fails("dl", "create", "x", "--scope", "galactic", code=2)


def test_private_queue_joins_a_list_only_through_an_alias(kmq_home: Path) -> None:
    _run("dl", "create", "L")
    direct = r"DIRECT=OS:qm1\private$\orders"
    output = _fails("dl", "add", "L", direct)
    assert "MQ_ERROR_INVALID_PARAMETER" in output and "kmq alias create" in output
    _fails("dl", "add", "L", "bare-word", code=2)  # list, alias or queue? say which
    _run("alias", "create", "orders", direct)
    added = _run("dl", "add", "L", "alias:orders")
    assert added["members"] == [{"member": "alias:orders", "added": True}]
    assert _run("dl", "expand", "L") == [
        {"format_name": direct, "source": "alias:orders", "source_kind": "queue alias"}]


def test_deleting_an_alias_removes_it_from_lists(kmq_home: Path) -> None:
    _run("alias", "create", "a1", f"PUBLIC={uuid.uuid4()}")
    _run("alias", "create", "a2", f"PUBLIC={uuid.uuid4()}")
    _run("dl", "create", "L")
    _run("dl", "add", "L", "alias:a1", "alias:a2")
    assert [m["name"] for m in _run("dl", "members", "L")] == ["alias:a1", "alias:a2"]
    _run("alias", "delete", "a1")
    members = _run("dl", "members", "L")
    assert [(m["kind"], m["name"]) for m in members] == [("queue alias", "alias:a2")]
    removed = _run("dl", "remove", "L", "alias:a2", "alias:a2")
    assert [r["removed"] for r in removed["members"]] == [True, False]
    assert _run("dl", "members", "L") == []


def test_public_option_with_a_private_path_is_a_usage_error(kmq_home: Path) -> None:
    output = _fails("queue", "create", r".\private$\orders", "--public", code=2)
    assert "--public" in output


def test_seed_000_cycle_expands_to_each_queue_once(cli_env: str) -> None:
    q1 = _run("queue", "create", "q1", "--public", "--label", "Cycle one")
    assert q1["private"] is False and q1["path_name"] == f"{cli_env}\\q1"
    assert q1["format_name"] == f"PUBLIC={q1['instance']}"
    private = _run("queue", "create", "p1")
    assert private["path_name"] == f"{cli_env}\\private$\\p1" and "format_name" not in private
    _run("dl", "create", "D1")
    _run("dl", "create", "D2")
    _run("dl", "add", "D1", r".\q1", "dl:D2")          # D1 = {Q1, D2}
    _run("dl", "add", "D2", q1["format_name"], "dl:D1")  # D2 = {Q1, D1}
    members = _run("dl", "members", "D1")
    assert [(m["kind"], m["name"], m["format_name"]) for m in members] == [
        ("public queue", q1["path_name"], q1["format_name"]),
        ("distribution list", "dl:D2", _run("dl", "show", "D2")["format_name"])]
    recipients = _run("dl", "expand", "D2")
    assert recipients == [{"format_name": q1["format_name"], "source": q1["path_name"],
                           "source_kind": "public queue"}]
    assert "kmq alias create" in _fails("dl", "add", "D1", private["path_name"])
    located = _run("queue", "locate", "--label", "cycle*", "--queue-manager", cli_env)
    assert [(q["path_name"], q["format_name"], q["label"]) for q in located] == [
        (q1["path_name"], q1["format_name"], "Cycle one")]
    assert _run("queue", "locate", "--transactional") == []


def test_a_stranger_cannot_remove_a_queue_from_someone_elses_list(
        cli_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe: ``KMQ_PRINCIPAL=mallory kmq dl remove <alice's list> <her queue>``."""
    monkeypatch.setenv("KMQ_PRINCIPAL", "alice")
    victim = _run("queue", "create", "victim", "--public")
    _run("dl", "create", "alices")
    _run("dl", "add", "alices", victim["format_name"])
    monkeypatch.setenv("KMQ_PRINCIPAL", "mallory")
    output = _fails("dl", "remove", "alices", victim["format_name"])
    assert "MQ_ERROR_ACCESS_DENIED" in output and "'mallory' may not remove" in output
    assert "ADD_REMOVE_ELEMENT" in output and "ADD_REMOVE_SELF" in output
    monkeypatch.setenv("KMQ_PRINCIPAL", "alice")
    assert [m["format_name"] for m in _run("dl", "members", "alices")] == [
        victim["format_name"]]
    assert _run("dl", "remove", "alices", victim["format_name"])["members"] == [
        {"member": victim["format_name"], "removed": True}]


def test_locate_with_filter_characters_prints_queues_or_none_found(cli_env: str) -> None:
    # Matched literally: on the embedded store "(" must not give an LDAPInvalidFilterError
    # traceback, and "*)(objectClass=*" must not list every public queue.
    eu = _run("queue", "create", "orders-eu", "--public", "--label", "Orders (EU)")
    _run("queue", "create", "secret", "--public", "--label", "Secret")
    located = _run("queue", "locate", "--label", "Orders (EU*")
    assert [q["format_name"] for q in located] == [eu["format_name"]]
    for pattern in ("Secret*)(!(cn=x", "*)(objectClass=*", "Orders (EU"):
        assert _run("queue", "locate", "--label", pattern) == [], pattern
    table = CliRunner().invoke(app, ["queue", "locate", "--label", "Orders (EU*"])
    assert table.exit_code == 0 and "Orders (EU)" in table.stdout, table.output
    none = CliRunner().invoke(app, ["queue", "locate", "--label", "*)(objectClass=*"])
    assert none.exit_code == 0 and none.stdout.strip() == "no public queue matches", none.output
    assert "backslash" in _fails("queue", "locate", "--label", "Orders\\")


def test_cli_in_a_subprocess(kmq_home: Path) -> None:
    def kmq(*args: str, **env: str) -> subprocess.CompletedProcess:
        environ = {**os.environ, "KMQ_HOME": str(kmq_home), **env}
        environ.pop("KMQ_BOOTSTRAP_SERVERS", None)
        return subprocess.run([sys.executable, "-m", "facade.cli", *args], capture_output=True,
                              text=True, env=environ, timeout=60, check=False)

    created = kmq("dl", "create", "sub", "--json")
    assert created.returncode == 0, created.stderr
    guid = json.loads(created.stdout)["guid"]
    listed = kmq("dl", "list", "--json")
    assert [row["guid"] for row in json.loads(listed.stdout)] == [guid]
    workgroup = kmq("directory", "status", KMQ_DIRECTORY_URL="none")
    assert workgroup.returncode == 1 and workgroup.stdout == ""
    assert "workgroup" in workgroup.stderr and "Traceback" not in workgroup.stderr
