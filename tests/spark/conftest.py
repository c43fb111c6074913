"""A local-mode SparkSession for the connector tests (one per test session)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """``local[2]`` Spark bound to 127.0.0.1, with ``format("kmq")`` registered."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17+: install a JDK (apt-get install openjdk-17-jre-headless)")
    from spark_connector import local_session

    session = local_session("kmq-tests")
    try:
        yield session
    finally:
        session.stop()
