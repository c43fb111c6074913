"""Running ``kmq`` in-process (typer's runner) for the CLI tests."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from facade.cli import app

__all__ = ["run_json"]


def run_json(*args: str, stdin: bytes | None = None) -> Any:
    """``kmq ARGS --json``: asserts exit code 0 and returns the JSON it printed on stdout."""
    result = CliRunner().invoke(app, [*args, "--json"], input=stdin)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
