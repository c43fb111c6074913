"""The type check: mypy with the project's configuration (``[tool.mypy]`` in pyproject.toml:
strict on the public API's modules, mypy's defaults elsewhere) over ``facade`` and
``spark_connector``. Part of ``make test`` and ``.ci/run``; marked ``typecheck`` so
``pytest -m "not typecheck"`` leaves it out while editing.

mypy's cache lives under the test session's temporary directory, shared by the session: a run
re-checks only what changed since the last run of the same session (about 10 s from cold here).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.typecheck


def test_mypy_finds_no_error(tmp_path_factory: pytest.TempPathFactory) -> None:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("mypy is not installed: install the test extra, "
                    "`pip install -e '.[test]'` (or run `make test`)")
    cache = tmp_path_factory.getbasetemp() / "mypy-cache"
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cache), "--no-color-output", "--no-error-summary"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (
            str(ROOT), os.environ.get("PYTHONPATH"))))},
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout}{done.stderr}"
