"""Unit tests for facade.state.recordcache: bodies fetched by offset with a bounded head cache."""

from __future__ import annotations

import pytest

from facade.state import recordcache
from facade.errors import BrokerUnavailable, MessageNotFound
from facade.kafka.librdkafka import KafkaRecord
from facade.state.recordcache import RecordCache

TOPIC = "kmq.qm.private.q"


def _record(offset: int, size: int = 10) -> KafkaRecord:
    return KafkaRecord(TOPIC, 0, offset, 0, None, b"x" * size, ())


class _Reader:
    """A reader over a log of ``offsets`` (missing ones are gaps), fetched 7 at a time (or
    ``max_records``, if fewer)."""

    def __init__(self, offsets: list[int], answers: bool = True):
        self.log = [_record(o) for o in offsets]
        self.answers = answers
        self.position = 0
        self.assigns: list[int] = []
        self.fail_next_poll = False

    def assign(self, positions: dict[str, int]) -> None:
        self.position = positions[TOPIC]
        self.assigns.append(self.position)

    def poll(self, timeout: float, max_records: int = 1000) -> list[KafkaRecord]:
        if self.fail_next_poll:
            self.fail_next_poll = False
            self.position = -1  # where librdkafka stands after a failure: unknown
            raise BrokerUnavailable("fetch failed")
        if not self.answers:
            return []
        batch = [r for r in self.log if r.offset >= self.position][:min(7, max_records)]
        if batch:
            self.position = batch[-1].offset + 1
        return batch

    def caught_up(self, topics) -> bool:  # type: ignore[no-untyped-def]
        return self.answers and self.position > self.log[-1].offset

    def log_start(self, topic: str) -> int:
        return self.log[0].offset

    def close(self) -> None:
        pass


class _Session:
    def __init__(self, reader: _Reader):
        self.reader_ = reader

    def reader(self, extra=None) -> _Reader:  # type: ignore[no-untyped-def]
        return self.reader_


def test_a_miss_fills_the_cache_from_the_offset_with_records_still_in_the_queue() -> None:
    reader = _Reader(list(range(100)))
    cache = RecordCache(_Session(reader), TOPIC, max_records=20)  # type: ignore[arg-type]
    removed = {11, 12}
    record = cache.get(10, lambda o: o not in removed, end=100)
    assert record.offset == 10 and reader.assigns == [10]
    assert 11 not in cache and 13 in cache and len(cache) == 20
    for offset in range(13, 30):  # served from the cache: no second fetch
        assert cache.get(offset, lambda o: True, end=100).offset == offset
    assert reader.assigns == [10] and cache.fills == 1


def test_a_drain_reads_on_without_assigning_again_and_a_jump_back_assigns() -> None:
    reader = _Reader(list(range(100)))
    cache = RecordCache(_Session(reader), TOPIC, max_records=10)  # type: ignore[arg-type]
    gone: set[int] = set()
    keep = lambda o: o not in gone  # noqa: E731
    for offset in range(0, 30):  # a receiver draining the queue
        assert cache.get(offset, keep, end=100).offset == offset
        gone.add(offset)
        cache.discard(offset)
    # Three fills of 10; the reader read on from where each stopped (no record polled and
    # dropped: a poll asks for no more than the cache takes).
    assert cache.fills == 3 and reader.assigns == [0]
    assert cache.get(35, keep, end=100).offset == 35  # ahead, but near: read on, skip 30-34
    assert reader.assigns == [0]
    assert cache.fetch(2).offset == 2  # behind the reader: assigned again
    assert reader.assigns == [0, 2]
    assert cache.get(90, keep, end=100).offset == 90  # far ahead: assigned again
    assert reader.assigns == [0, 2, 90]


def test_a_failed_poll_makes_the_next_fill_assign_again() -> None:
    reader = _Reader(list(range(100)))
    cache = RecordCache(_Session(reader), TOPIC, max_records=10)  # type: ignore[arg-type]
    cache.get(0, lambda o: True, end=100)
    reader.fail_next_poll = True
    with pytest.raises(BrokerUnavailable):
        cache.get(10, lambda o: o >= 10, end=100)
    assert cache.get(10, lambda o: o >= 10, end=100).offset == 10
    assert reader.assigns == [0, 10]


def test_offer_is_bounded_and_discard_frees() -> None:
    cache = RecordCache(_Session(_Reader([0])), TOPIC, max_records=3, max_bytes=25)  # type: ignore[arg-type]
    for offset in range(5):
        cache.offer(_record(offset))
    assert len(cache) == 3  # 30 bytes > 25 stopped it after the third
    cache.discard(1)
    cache.retain(lambda o: o != 2)
    assert 1 not in cache and 2 not in cache and 0 in cache


def test_a_fill_stops_at_the_view_position() -> None:
    reader = _Reader(list(range(50)))
    cache = RecordCache(_Session(reader), TOPIC, max_records=40)  # type: ignore[arg-type]
    cache.get(5, lambda o: True, end=9)
    assert sorted(o for o in range(50) if o in cache) == [5, 6, 7, 8]


def test_a_deleted_record_is_not_found() -> None:
    cache = RecordCache(_Session(_Reader([0, 1, 5, 6])), TOPIC)  # type: ignore[arg-type]
    with pytest.raises(MessageNotFound, match="offset 3"):
        cache.get(3, lambda o: True, end=7)
    with pytest.raises(MessageNotFound):
        cache.fetch(9)
    assert cache.fetch(5).offset == 5


def test_a_broker_that_does_not_answer_is_unavailable_not_a_missing_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recordcache, "FETCH_TIMEOUT", 0.2)
    cache = RecordCache(_Session(_Reader([0, 1], answers=False)), TOPIC)  # type: ignore[arg-type]
    with pytest.raises(BrokerUnavailable):
        cache.get(1, lambda o: True, end=2)


class _LateReader(_Reader):
    """A reader whose latest fetch response predates the last ``late`` records: its first
    ``empty_polls`` polls bring nothing and it counts as caught up meanwhile."""

    def __init__(self, offsets: list[int], late: int, empty_polls: int):
        super().__init__(offsets)
        self.known_end = offsets[-late]
        self.empty_polls = empty_polls

    def poll(self, timeout: float, max_records: int = 1000) -> list[KafkaRecord]:
        if self.position >= self.known_end and self.empty_polls:
            self.empty_polls -= 1
            return []
        return super().poll(timeout, max_records)

    def caught_up(self, topics) -> bool:  # type: ignore[no-untyped-def]
        return self.position >= (self.known_end if self.empty_polls else self.log[-1].offset + 1)


def test_a_record_the_view_indexed_is_waited_for_past_a_stale_high_watermark() -> None:
    reader = _LateReader(list(range(20)), late=5, empty_polls=3)
    cache = RecordCache(_Session(reader), TOPIC, max_records=100)  # type: ignore[arg-type]
    assert cache.get(10, lambda o: True, end=15).offset == 10  # reads 10-14, up to the end
    assert cache.get(15, lambda o: True, end=20).offset == 15, \
        "the view indexed 15: caught up with a stale watermark is no proof it is missing"
    assert reader.empty_polls == 0
