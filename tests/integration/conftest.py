"""Fixtures shared by the integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from facade.config import KmqConfig
from facade.manager import QueueManager
from tests.support.kafka import BrokerEndpoint


@pytest.fixture
def qm(broker: BrokerEndpoint, kmq_home: Path) -> Iterator[QueueManager]:
    """A queue manager with a fresh name on the session broker, so each test has its own topics."""
    name = f"qm-{uuid.uuid4().hex[:10]}"
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers, queue_manager=name)
    with QueueManager.open(config) as manager:
        yield manager


@pytest.fixture
def cli_qm(broker: BrokerEndpoint, kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CLI's environment: the session broker and a fresh queue manager name (returned)."""
    name = f"cli-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", name)
    return name
