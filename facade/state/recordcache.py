"""Records of a queue's data topic fetched by offset, with a small cache near the head.

A queue view indexes every pending message (:class:`facade.state.queuestate.IndexEntry`, a few hundred
bytes) but keeps no message bodies: a body is read from the data topic by its offset (the
message's lookup id) when the message is handed out. Records close to the head of the queue are
kept in a bounded cache, so a receiver draining the queue pays one fetch per cache fill, not one
per message (see ``docs/design.md``, "Bounded state").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from facade.errors import BrokerUnavailable, MessageNotFound
from facade.kafka.kafkaseam import KafkaRecord, KafkaSession
from facade.kafka.kafkaseam import RecordReader as TopicReader

__all__ = ["CACHE_BYTES", "CACHE_RECORDS", "FETCH_TIMEOUT", "RecordCache"]

#: Most records the cache holds (a fill reads up to this many from the wanted offset on).
CACHE_RECORDS = 1000
#: Most bytes of record values the cache holds (large bodies: fewer records).
CACHE_BYTES = 8 * 1024 * 1024
#: Seconds a fetch may take to bring the wanted record before it counts as missing.
FETCH_TIMEOUT = 10.0
#: librdkafka settings of the fetching reader: it reads a cache fill, not the whole topic, so
#: it must not prefetch the default 64 MiB ahead of what is asked.
_FETCH_SETTINGS = {"queued.max.messages.kbytes": 2048, "fetch.max.bytes": 2 * 1024 * 1024}


class RecordCache:
    """The records of one data topic, by offset: cached near the head, else fetched.

    Args:
        session (KafkaSession): Kafka clients (a fetching reader is created on first miss).
        topic (str): the data topic (one partition).
        max_records (int): see :data:`CACHE_RECORDS`.
        max_bytes (int): see :data:`CACHE_BYTES`.
    """

    def __init__(self, session: KafkaSession, topic: str, *, max_records: int = CACHE_RECORDS,
                 max_bytes: int = CACHE_BYTES):
        self.topic = topic
        self._session = session
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._records: dict[int, KafkaRecord] = {}
        self._bytes = 0
        self._reader: TopicReader | None = None
        #: Offset of the next record the fetching reader hands out; None: unknown (assign).
        self._position: int | None = None
        #: Fills so far (diagnostics and tests).
        self.fills = 0

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, offset: int) -> bool:
        return offset in self._records

    def offer(self, record: KafkaRecord) -> None:
        """Keep ``record`` (read by the view's reader, still in the queue) if there is room."""
        if len(self._records) < self._max_records and self._bytes < self._max_bytes:
            self._put(record)

    def discard(self, offset: int) -> None:
        """Forget the record at ``offset`` (it left the queue)."""
        record = self._records.pop(offset, None)
        if record is not None:
            self._bytes -= len(record.value or b"")

    def retain(self, keep: Callable[[int], bool]) -> None:
        """Forget every cached record whose offset ``keep`` rejects (after a purge)."""
        for offset in [o for o in self._records if not keep(o)]:
            self.discard(offset)

    def get(self, offset: int, keep: Callable[[int], bool], end: int) -> KafkaRecord:
        """The record at ``offset``: cached, or fetched with the records after it.

        On a miss the cache is refilled from ``offset`` on: records whose offset ``keep``
        accepts (still in the queue), up to the cache's limits or ``end``.

        Args:
            offset (int): a data offset the caller knows holds a record.
            keep (Callable[[int], bool]): whether an offset is still in the queue.
            end (int): the view's data position; records from here on are not indexed yet.

        Returns:
            KafkaRecord: the record.

        Raises:
            MessageNotFound: no record at ``offset`` (deleted, or never written).
            BrokerUnavailable, BrokerError: the fetch failed or took longer than
                :data:`FETCH_TIMEOUT`.
        """
        record = self._records.get(offset)
        if record is not None:
            return record
        self._evict_for_fill(keep)
        wanted = None
        for found in self._read(offset, end, indexed=offset < end):
            if found.offset == offset:
                wanted = found
            elif not keep(found.offset):
                continue
            if found.offset == offset or self._has_room():
                self._put(found)
        self.fills += 1
        if wanted is None:
            raise self._missing(offset)
        return wanted

    def fetch(self, offset: int) -> KafkaRecord:
        """The record at ``offset``, cached or read alone, even one no longer in the queue
        (recovery redoes the outputs of claims); nothing is added to the cache.

        Raises:
            MessageNotFound: no record at ``offset`` (deleted, or never written).
        """
        record = self._records.get(offset)
        if record is not None:
            return record
        for found in self._read(offset, offset + 1):
            if found.offset == offset:
                return found
        raise self._missing(offset)

    def close(self) -> None:
        """Release the fetching reader."""
        reader, self._reader = self._reader, None
        self._position = None
        if reader is not None:
            reader.close()

    # -- internals -----------------------------------------------------------------------------

    def _missing(self, offset: int) -> MessageNotFound:
        return MessageNotFound(
            f"no record at offset {offset} of {self.topic!r}: deleted from the log, or never "
            "written", queue=self.topic,
            hint="a record is deleted only once the queue no longer needs it; run `kmq doctor`")

    def _has_room(self) -> bool:
        return len(self._records) < self._max_records and self._bytes < self._max_bytes

    def _put(self, record: KafkaRecord) -> None:
        old = self._records.get(record.offset)
        if old is not None:
            self._bytes -= len(old.value or b"")
        self._records[record.offset] = record
        self._bytes += len(record.value or b"")

    def _evict_for_fill(self, keep: Callable[[int], bool]) -> None:
        """Make room for a fill: drop records no longer in the queue, then, if the cache is
        still more than half full, everything (the head moved elsewhere)."""
        self.retain(keep)
        if len(self._records) * 2 > self._max_records or self._bytes * 2 > self._max_bytes:
            self._records.clear()
            self._bytes = 0

    def _read(self, start: int, end: int, *, indexed: bool = False) -> Iterator[KafkaRecord]:
        """Yield records of the topic from ``start`` until ``end`` (exclusive), a full cache,
        or the log's end; stops early at :data:`FETCH_TIMEOUT`.

        ``indexed``: the view has read the record at ``start``, so it exists unless it was
        deleted: the reader having caught up with its latest fetch response proves nothing
        then, because that response's high watermark can predate the record (a fill that took
        that for the end would find "nothing" at an offset the view has just indexed, and
        raise MessageNotFound; the demo hit it). Only a log start above ``start`` ends such a read
        early.

        A receiver draining the queue asks for the record right after the last fill, so the
        reader goes on from where it stopped, with what librdkafka prefetched meanwhile; it is
        assigned again only to go back or to jump far ahead. Assigning drops the prefetched
        records, which made every fill of a drain fetch again, about 10 us of CPU per record.

        Raises:
            BrokerUnavailable: no record read within :data:`FETCH_TIMEOUT` although the log
                was not read to its end.
        """
        reader = self._reader
        if reader is None:
            reader = self._reader = self._session.reader(extra=_FETCH_SETTINGS)
        position = self._position
        if position is None or not position <= start < position + self._max_records:
            reader.assign({self.topic: start})
            position = start
        deadline = time.monotonic() + FETCH_TIMEOUT
        read_any = False
        while time.monotonic() < deadline:
            self._position = None  # unknown should the poll raise
            # No more than the cache takes: records polled and dropped would be fetched again.
            room = max(1, self._max_records - len(self._records))
            batch = reader.poll(0.05, max_records=room)
            if batch:
                position = batch[-1].offset + 1
            self._position = position
            if not batch:
                if reader.caught_up((self.topic,)) and (
                        read_any or not indexed or reader.log_start(self.topic) > start):
                    return  # nothing at or after ``start`` (any more)
                continue
            for record in batch:
                if record.offset < start:
                    continue
                read_any = True
                yield record
                if record.offset + 1 >= end or not self._has_room():
                    return
        if not read_any:  # a slow broker, not a missing record
            raise BrokerUnavailable(f"no record of {self.topic!r} from offset {start} on within "
                                    f"{FETCH_TIMEOUT:g} s", hint="check that the Kafka broker is running")
