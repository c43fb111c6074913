"""docs/spark.md runs as written: its python blocks, in order, in one interpreter (the first
builds the SparkSession the others use), in a fresh ``KMQ_HOME`` against the test broker, with
the results its comments state checked (``tests/support/docs.py``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.integration.test_docs import ROOT, docs_environment
from tests.support.docs import run_blocks
from tests.support.kafka import BrokerEndpoint

SPARK_MD = ROOT / "docs" / "spark.md"


def test_spark_md_runs_top_to_bottom(broker: BrokerEndpoint, kmq_home: Path,
                                     tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17+: install a JDK (apt-get install openjdk-17-jre-headless)")
    ran = run_blocks(SPARK_MD, docs_environment(broker, kmq_home), tmp_path, shared=True)
    assert len(ran) >= 5
