"""A local-mode SparkSession for the connector tests (one per test session)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from facade.config import KmqConfig
from facade.manager import QueueManager
from tests.support.kafka import BrokerEndpoint


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


@pytest.fixture
def qm(broker: BrokerEndpoint, kmq_home: Path) -> Iterator[QueueManager]:
    """A queue manager with a fresh name (so fresh topics) on the session broker; Spark's
    driver-side resolution shares its KMQ_HOME."""
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}")
    with QueueManager.open(config) as manager:
        yield manager
