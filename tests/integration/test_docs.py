"""The README and docs/tour.md run as written: every python and bash block, top to bottom, in a
fresh ``KMQ_HOME`` against the test broker, with the results their comments state checked (see
``tests/support/docs.py`` for the rules and the ``<!-- docs-test: skip (reason) -->`` marker).

The tour's Spark block runs here too when Java is installed; docs/spark.md runs in
``tests/spark/test_docs_spark.py``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.support.docs import code_blocks, run_blocks, with_checks
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TOUR = ROOT / "docs" / "tour.md"


def docs_environment(broker: BrokerEndpoint, kmq_home: Path) -> dict[str, str]:
    """A reader's shell: a fresh KMQ_HOME, the test broker, its own queue manager name (the
    broker is shared with other tests), this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KMQ_")}
    env.update(KMQ_HOME=str(kmq_home), KMQ_BOOTSTRAP_SERVERS=broker.bootstrap_servers,
               KMQ_QUEUE_MANAGER=f"docs-{uuid.uuid4().hex[:8]}", PYTHONPATH=str(ROOT))
    return env


def _spark_blocks(path: Path) -> set[int]:
    return {b.line for b in code_blocks(path) if "spark" in b.code and b.language == "python"}


def test_readme_runs_top_to_bottom(broker: BrokerEndpoint, kmq_home: Path,
                                   tmp_path: Path) -> None:
    ran = run_blocks(README, docs_environment(broker, kmq_home), tmp_path)
    assert [b.language for b in ran] == ["python"]


def test_the_tour_runs_top_to_bottom(broker: BrokerEndpoint, kmq_home: Path,
                                     tmp_path: Path) -> None:
    no_java = shutil.which("java") is None and not os.environ.get("JAVA_HOME")
    leave_out = _spark_blocks(TOUR) if no_java else set()
    ran = run_blocks(TOUR, docs_environment(broker, kmq_home), tmp_path, leave_out=leave_out)
    assert {b.language for b in ran} == {"python", "bash"}
    assert len(ran) >= 6
    if leave_out:
        pytest.skip(f"docs/tour.md blocks at lines {sorted(leave_out)} need Spark, which needs "
                    "Java 17+: install a JDK (apt-get install openjdk-17-jre-headless); the other "
                    f"{len(ran)} blocks ran")


def test_every_skipped_block_says_why() -> None:
    skipped = [b for doc in (README, TOUR) for b in code_blocks(doc) if b.skip is not None]
    assert len(skipped) >= 2, "the set-up blocks (make; kmq dev up) are marked skip"
    assert all(len(b.skip) > 10 for b in skipped)


def test_a_wrong_result_in_a_comment_fails_the_run() -> None:
    checked = with_checks("x = 2\nx + 1   # 4: wrong on purpose\n", first_line=10)
    namespace: dict = {"DOC": "doc"}
    exec("def _docs_check(v, e, line):\n    assert v == e, (line, v, e)\n", namespace)
    with pytest.raises(AssertionError, match=r"\(11, 3, 4\)"):
        exec(checked, namespace)


def test_a_skip_marker_needs_a_reason(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- docs-test: skip -->\n```bash\nfalse\n```\n")
    with pytest.raises(ValueError, match="docs-test: skip \\(reason\\)"):
        code_blocks(doc)
    doc.write_text("<!-- docs-test: skip (needs a GPU) -->\n```bash\nfalse\n```\n"
                   "```python\nx = 1\n```\n```text\nnot collected\n```\n")
    assert [(b.language, b.skip) for b in code_blocks(doc)] == [
        ("bash", "(needs a GPU)"), ("python", None)]
