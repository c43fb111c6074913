"""TopicReader's starvation check (``_check_starved``): a reader whose short fetches bring
nothing lengthens its broker-side fetch wait only when it is really behind, not when it stands at
the end librdkafka reported (an open Kafka transaction, or an end offset the broker answers
ahead of its fetch responses)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from facade import kafka
from facade.kafka import AT_END_CHECKS, SHORT_BACKLOG, TopicReader

TOPIC = "kmq.t.private.q"


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Iterator[TopicReader]:
    # No broker: librdkafka connects lazily, and the checks' broker calls are replaced below.
    made = TopicReader({"bootstrap.servers": "127.0.0.1:9"})
    made._next = {TOPIC: 0}
    made.lengthened = []  # type: ignore[attr-defined]
    monkeypatch.setattr(made, "_lengthen_fetch_wait", made.lengthened.append)  # type: ignore[attr-defined]
    monkeypatch.setattr(kafka, "STARVED_AFTER", 0.0)
    yield made
    made.close()


def _check(reader: TopicReader, monkeypatch: pytest.MonkeyPatch, position: int, end: int) -> None:
    monkeypatch.setattr(reader, "end_offsets", lambda topics, timeout: {TOPIC: end})
    monkeypatch.setattr(reader, "_positions", lambda topics: {TOPIC: position})
    reader._idle_since = 0.0  # empty polls since long ago
    reader._check_starved()


def test_a_reader_far_behind_is_starved_at_once(reader: TopicReader,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _check(reader, monkeypatch, 10, 10 + SHORT_BACKLOG + 1)
    assert reader.lengthened == ["got nothing"]  # type: ignore[attr-defined]


def test_a_reader_at_its_reported_end_waits_before_it_is_taken_as_starved(
        reader: TopicReader, monkeypatch: pytest.MonkeyPatch) -> None:
    # librdkafka reported the end (partition EOF, the last stable offset) at 10, while the end
    # offset is far ahead: an open transaction, or a broker whose answer runs ahead.
    reader._stable_end[TOPIC] = 10
    for _ in range(AT_END_CHECKS):
        _check(reader, monkeypatch, 10, 10 + 10 * SHORT_BACKLOG)
    assert reader.lengthened == []  # type: ignore[attr-defined]
    _check(reader, monkeypatch, 10, 10 + 10 * SHORT_BACKLOG)  # still nothing: starved after all
    assert reader.lengthened == ["got nothing"]  # type: ignore[attr-defined]


def test_a_short_backlog_is_not_starvation_at_first(reader: TopicReader,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _check(reader, monkeypatch, 4, 11)
    assert reader.lengthened == []  # type: ignore[attr-defined]
    assert reader._at_end_checks == 1


def test_a_reader_at_the_end_offset_is_never_starved(reader: TopicReader,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(3 * AT_END_CHECKS):
        _check(reader, monkeypatch, 42, 42)
    assert reader.lengthened == []  # type: ignore[attr-defined]
