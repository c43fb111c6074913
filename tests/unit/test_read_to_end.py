"""TopicReader.read_to_end: the end it reads to is never older than the call (a rested reader's
last fetch response, or one a lengthened fetch wait delayed, can predate records acknowledged
before the call)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from facade.kafka.librdkafka import KafkaRecord, TopicReader

TOPIC = "kmq.t.private.q"


def test_read_to_end_reads_up_to_the_end_offset_queried_at_the_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No broker: librdkafka connects lazily, and every broker call is replaced below.
    reader = TopicReader({"bootstrap.servers": "127.0.0.1:9"})
    real = reader._consumer
    reader._next = {TOPIC: 1}
    # The latest fetch response, from before the call, says the topic ends at 1; the broker's
    # end offset at the call is 2 (a record acknowledged while the reader rested).
    watermark = {TOPIC: 1}
    reader._consumer = SimpleNamespace(  # type: ignore[assignment]
        get_watermark_offsets=lambda part, cached: (0, watermark[part.topic]))
    monkeypatch.setattr(reader, "end_offsets", lambda topics, timeout: {TOPIC: 2})
    monkeypatch.setattr(reader, "_positions", lambda topics: dict(reader._next))
    monkeypatch.setattr(reader, "_lengthen_fetch_wait", lambda why: None)
    polls = []

    def poll(timeout: float, max_records: int = 1000) -> list[KafkaRecord]:
        time.sleep(timeout)
        polls.append(timeout)
        if len(polls) < 6:  # well past _SETTLE: the stale watermark alone would end the read
            return []
        watermark[TOPIC] = 2
        reader._next[TOPIC] = 2
        return [KafkaRecord(TOPIC, 0, 1, 0, None, b"while resting", ())]

    monkeypatch.setattr(reader, "poll", poll)
    try:
        read = [record.value for batch in reader.read_to_end([TOPIC], timeout=60) for record in batch]
    finally:
        reader._consumer = real
        reader.close()
    assert read == [b"while resting"]
