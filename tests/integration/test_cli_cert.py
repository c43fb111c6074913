"""`kmq cert create|register|list|revoke|qm-key` through typer's runner, on the embedded
directory in the test's KMQ_HOME (qm-key also needs the broker)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app

pytestmark = pytest.mark.integration


def _run(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _fails(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def test_create_register_list_revoke(kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_PRINCIPAL", "alice")
    created = _run("cert", "create")
    assert created["sender"] == "alice" and created["subject"] == "CN=alice"
    key = kmq_home / "identities" / "alice" / "key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert "already has an identity" in _fails("cert", "create")
    assert _run("cert", "register")["new"] is True
    assert _run("cert", "register")["new"] is False
    listed = _run("cert", "list")
    assert [r["digest"] for r in listed["registered"]] == [created["digest"]]
    assert listed["local_identities"] == ["alice"]
    monkeypatch.setenv("KMQ_PRINCIPAL", "bob")
    assert "only its own" in _fails("cert", "revoke", "--sender", "alice")
    monkeypatch.setenv("KMQ_PRINCIPAL", "alice")
    assert _run("cert", "revoke")["revoked"] is True
    assert _run("cert", "list")["registered"] == []
    assert "kmq cert list" in _fails("cert", "revoke")


def test_register_without_an_identity_says_how_to_make_one(kmq_home: Path) -> None:
    assert "kmq cert create" in _fails("cert", "register", "--sender", "nobody")


def test_qm_key_is_published(cli_qm: str) -> None:
    published = _run("cert", "qm-key")
    assert published["queue_manager"] == cli_qm and len(published["public_key"]) == 64
    assert _run("cert", "qm-key")["public_key"] == published["public_key"]  # kept, not replaced
