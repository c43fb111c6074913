"""TopicReader's starvation check (``_check_starved``): a reader whose short fetches bring
nothing lengthens its broker-side fetch wait only when it is really behind, not when it stands at
the end librdkafka reported (an open Kafka transaction, or an end offset the broker answers
ahead of its fetch responses)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from facade.kafka import librdkafka as kafka
from facade.kafka.librdkafka import AT_END_CHECKS, SHORT_BACKLOG, TopicReader

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
    reader._check_starved(1.0)  # a second of waiting in empty polls


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


def test_only_time_spent_waiting_in_empty_polls_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver that polls, works for a while and polls again was not waiting for the
    broker: the check runs after STARVED_AFTER seconds of waiting, however long between polls
    (judged by the time since their first empty poll, the demo's receivers would raise their
    fetch wait to 500 ms and then wait that long for every receipt's verdict)."""
    made = TopicReader({"bootstrap.servers": "127.0.0.1:9"})
    made._next = {TOPIC: 0}
    queried: list[object] = []
    monkeypatch.setattr(made, "end_offsets",
                        lambda topics, timeout: queried.append(topics) or {TOPIC: 0})
    try:
        for _ in range(4):
            made._check_starved(kafka.STARVED_AFTER / 5)
        assert queried == []
        made._check_starved(kafka.STARVED_AFTER / 5)
        assert queried == [[TOPIC]]
    finally:
        made.close()


def test_a_lengthened_wait_goes_back_to_the_short_one_at_the_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = TopicReader({"bootstrap.servers": "127.0.0.1:9"})
    made._next = {TOPIC: 10}
    replaced: list[int] = []
    monkeypatch.setattr(made, "_replace_consumer", lambda: replaced.append(made._wait_ms))
    try:
        made._lengthen_fetch_wait("got nothing")
        assert made._wait_ms > kafka.TAIL_FETCH_WAIT_MS and replaced == [made._wait_ms]
        made._stable_end[TOPIC] = 10
        made._relax_fetch_wait()
        assert len(replaced) == 1, "not within RELAX_AFTER of lengthening it"
        made._lengthened_at -= kafka.RELAX_AFTER
        made._stable_end[TOPIC] = 9  # an end reported before the last records: not at the end
        made._relax_fetch_wait()
        assert len(replaced) == 1
        made._stable_end[TOPIC] = 10
        made._relax_fetch_wait()
        assert replaced[-1] == kafka.TAIL_FETCH_WAIT_MS == made._wait_ms
    finally:
        made.close()
