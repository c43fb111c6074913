"""Every test that starts a broker or slapd is marked ``integration`` (tests/conftest.py), so
``make test-unit`` (``pytest -m "not integration"``) starts neither."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import starts_a_process

ROOT = Path(__file__).resolve().parents[2]


def _item(fixtures: list[str], path: Path = Path(__file__), **params: str) -> SimpleNamespace:
    return SimpleNamespace(fixturenames=fixtures, fspath=path,
                           callspec=SimpleNamespace(params=params) if params else None)


def test_broker_and_slapd_fixtures_make_a_test_integration() -> None:
    assert starts_a_process(_item(["kmq_home", "broker", "qm"]))
    assert starts_a_process(_item(["slapd_server"]))
    assert starts_a_process(_item(["private_broker"]))
    assert starts_a_process(_item(["directory_settings"], directory_settings="slapd"))
    assert not starts_a_process(_item(["directory_settings"], directory_settings="embedded"))
    assert not starts_a_process(_item(["tmp_path"]))


def test_a_module_that_starts_a_broker_itself_is_integration() -> None:
    devstack_tests = ROOT / "tests" / "integration" / "test_devstack.py"
    assert starts_a_process(_item(["kmq_home"], devstack_tests))


def test_unit_selection_has_no_slapd_variant() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         "-m", "not integration", "tests/directory/test_directory.py"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=300)
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert collected and all("[embedded]" in line for line in collected), done.stdout[-2000:]
