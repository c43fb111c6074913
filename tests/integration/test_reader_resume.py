"""A TopicReader fetching again after a rest or a pause goes on exactly where it stood.

Resuming seeks each topic to the reader's position, so that the fetch starts at once instead
of after librdkafka's delayed restart (docs/performance.md, "Resuming a reader"); a seek to a
wrong position would skip or repeat records, which these tests would see.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from facade.kafka.librdkafka import TopicReader
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(broker: BrokerEndpoint) -> Iterator[str]:
    name = f"kmq-test-resume-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    yield name
    admin.delete_topics([name])[name].result(30)


@pytest.fixture
def reader(broker: BrokerEndpoint) -> Iterator[TopicReader]:
    made = TopicReader({"bootstrap.servers": broker.bootstrap_servers})
    yield made
    made.close()


def _write(broker: BrokerEndpoint, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for value in values:
        producer.produce(topic, str(value).encode())
    assert producer.flush(30) == 0


def _read(reader: TopicReader, count: int) -> list[int]:
    """The next ``count`` values, asking for one record at a time (60 s at most)."""
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {got} of {count} records within 60 s"
        got += [int(record.value or b"") for record in reader.poll(0.1, max_records=1)]
    return got


def _read_rest(reader: TopicReader) -> list[int]:
    """What the reader reads until a poll of 2 s brings nothing more."""
    got: list[int] = []
    while batch := reader.poll(2.0):
        got += [int(record.value or b"") for record in batch]
    return got


def test_a_rested_reader_goes_on_from_its_position(broker: BrokerEndpoint, topic: str,
                                                   reader: TopicReader) -> None:
    _write(broker, topic, range(10))
    reader.assign({topic: 0})
    assert _read(reader, 4) == [0, 1, 2, 3]
    assert reader.rest()  # as the rester thread does after REST_AFTER unused
    assert not reader.fetching()
    _write(broker, topic, range(10, 12))
    assert _read(reader, 8) == [4, 5, 6, 7, 8, 9, 10, 11]
    assert _read_rest(reader) == []


def test_a_reader_rested_before_its_first_record_reads_from_the_log_start(
        broker: BrokerEndpoint, topic: str, reader: TopicReader) -> None:
    reader.assign({topic: -1})  # the log start, before anything was read
    assert reader.rest()
    _write(broker, topic, range(5))
    assert _read(reader, 5) == [0, 1, 2, 3, 4]


def test_a_paused_topic_goes_on_from_its_position(broker: BrokerEndpoint, topic: str,
                                                  reader: TopicReader) -> None:
    _write(broker, topic, range(10))
    reader.assign({topic: 2})
    assert _read(reader, 3) == [2, 3, 4]
    reader.pause(topic)
    assert reader.poll(0.5) == []
    reader.resume(topic)
    assert _read(reader, 5) == [5, 6, 7, 8, 9]
    assert _read_rest(reader) == []
