"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from facade.config import KmqConfig
from facade.manager import QueueManager
from facade.kafka.memorykafka import MemoryKafkaSession


@pytest.fixture
def memory_qm(kmq_home: Path) -> Iterator[QueueManager]:
    """A queue manager named ``memqm`` on its own in-memory Kafka (facade.kafka.memorykafka)."""
    config = KmqConfig.load(queue_manager="memqm")
    with QueueManager.open(config, session=MemoryKafkaSession()) as manager:
        yield manager
