"""Message counts of many queues at once, for ``kmq queue list`` (MSMQ's snap-in lists every
queue of a machine with its message count).

A queue's count is a function of its data and receipts logs (:class:`QueueState`), and a
snapshot (:mod:`facade.state.snapshot`) is that state after given prefixes of both logs. So the
count a handle gets by reading the queue (:meth:`MessageQueue.counts`: a view opened from the
queue's best snapshot, then read to the end of both logs) is found here for every queue
together, with what does not grow with the number of queues:

1. One batched ListOffsets request (log start and end, read_committed) for the data and
   receipts topics of every queue (:meth:`KafkaSession.offset_bounds`).
2. A queue whose data log holds no record counts 0: every message is a record of it.
3. One read of each queue manager's snapshot topic, for all its queues at once. A queue whose
   best valid snapshot (chosen as a view chooses it: :func:`facade.state.queueview.valid_snapshots`)
   covers both logs up to their end offsets counts from the snapshot alone.
4. The other queues (records arrived or receipts written since their last snapshot, or none
   yet) have only what follows their snapshot read, by one reader for all of them, and their
   records applied to the state as a view applies them.

The counts are therefore exact, equal to each queue's own :meth:`MessageQueue.counts` at the
moment of the end-offset query; records of a Kafka transaction still open then are not
counted, as no receiver can get them yet. The cost is one request per step plus the records
that arrived since the queues' last snapshots: idle and empty queues cost nothing each.
Apache Kafka answers ListOffsets exactly; a broker whose end offsets can fall short of its log
would make step 3 miss records.

A queue the batch cannot count as a view would (receipts below the receipts topic's log start
with no snapshot covering them, deleted while it read) is returned as unresolved: the caller
counts it with its own handle, which opens from a newer snapshot or says why it cannot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from facade.errors import EnvelopeError, QueueNotFound
from facade.kafka.kafkaseam import KafkaRecord, KafkaSession, RecordReader
from facade.state.queuestate import IndexEntry, QueueState
from facade.state.queueview import (
    CATCH_UP_TIMEOUT,
    best_snapshot,
    snapshot_candidates,
    valid_snapshots,
)
from facade.model.receipts import decode_receipt
from facade.model.topics import QueueTopics, snapshot_topic

__all__ = ["BatchCounts", "QueueCounts", "count_queues"]

log = logging.getLogger("kmq.queuecounts")

#: librdkafka settings of the one reader that reads every queue's snapshot and the logs
#: after it: larger fetches than a view's (it reads many small topics at once), still bounded
#: (bodies are fetched with the headers and dropped at once).
_READER_SETTINGS = {"queued.max.messages.kbytes": 16 * 1024, "fetch.max.bytes": 8 * 1024 * 1024,
                    "max.partition.fetch.bytes": 1024 * 1024}


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """The message counts of one queue (MSMQ's PROPID_MGMT_QUEUE_MESSAGE_COUNT).

    Attributes:
        count (int): messages in the queue (:meth:`MessageQueue.count`): pending ones, ones
            not visible yet (not-before), ones past their time-to-be-received that the next
            sweep dead-letters, and ones a peek-lock or prefetch holds.
        expired (int): of those, the ones past their time-to-be-received
            (:meth:`MessageQueue.expired_count`): no receiver gets them.
    """

    count: int
    expired: int

    @property
    def receivable(self) -> int:
        """int: ``count - expired``: what ``kmq queue list`` shows as "messages"."""
        return self.count - self.expired


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """What :func:`count_queues` found.

    Attributes:
        counts (dict[str, QueueCounts]): by data topic.
        unresolved (set[str]): data topics of queues to count with their own handle (see the
            module docstring).
        records_read (int): log records read after the snapshots (0: every queue was counted
            from end offsets and snapshots alone).
    """

    counts: dict[str, QueueCounts]
    unresolved: set[str]
    records_read: int


def count_queues(session: KafkaSession, queues: Iterable[QueueTopics], *,
                 timeout: float = CATCH_UP_TIMEOUT) -> BatchCounts:
    """Count the messages of many queues with a few requests (see the module docstring).

    Args:
        session (KafkaSession): the Kafka clients.
        queues (Iterable[QueueTopics]): the queues; a queue whose topics do not exist (deleted
            meanwhile) is left out of the result.
        timeout (float): seconds for each read (the snapshot topics, the logs after them).

    Returns:
        BatchCounts: counts by data topic, and the queues left to their own handles.

    Raises:
        BrokerUnavailable: the cluster did not answer, or a read did not reach the end in
            ``timeout`` seconds.
    """
    wanted = list({q.data: q for q in queues}.values())
    bounds = session.offset_bounds([t for q in wanted for t in (q.data, q.receipts)], timeout)
    counts: dict[str, QueueCounts] = {}
    unresolved: set[str] = set()
    to_open: list[QueueTopics] = []
    for topics in wanted:
        if topics.data not in bounds or topics.receipts not in bounds:
            continue  # deleted meanwhile
        low, end = bounds[topics.data]
        if low >= end:
            counts[topics.data] = QueueCounts(0, 0)  # no record: no message
        else:
            to_open.append(topics)
    if not to_open:
        return BatchCounts(counts, unresolved, 0)
    reader = session.reader(extra=_READER_SETTINGS)
    try:
        states = _opened_states(session, reader, to_open, bounds, unresolved)
        tails = _Tails(states, bounds)
        if tails.positions:
            try:
                tails.read(reader, timeout)
            except QueueNotFound:
                # A queue deleted while it was read: its own handle says so (and the others
                # are counted by theirs).
                unresolved.update(topics.data for topics in states)
                return BatchCounts(counts, unresolved, tails.records)
            unresolved.update(tails.unresolved)
    finally:
        reader.close()
    now_ms = int(time.time() * 1000)
    for topics, state in states.items():
        if topics.data not in unresolved:
            counts[topics.data] = QueueCounts(state.pending_count(), len(state.expired(now_ms)))
    return BatchCounts(counts, unresolved, tails.records)


def _opened_states(session: KafkaSession, reader: RecordReader, queues: list[QueueTopics],
                   bounds: dict[str, tuple[int, int]],
                   unresolved: set[str]) -> dict[QueueTopics, QueueState]:
    """Each queue's state as a view opens it: from its best valid snapshot, else empty at the
    log start; a queue whose receipts below the log start no snapshot covers goes to
    ``unresolved`` (its view raises why)."""
    by_snapshot_topic: dict[str, list[QueueTopics]] = {}
    for topics in queues:
        by_snapshot_topic.setdefault(snapshot_topic(topics.data), []).append(topics)
    states: dict[QueueTopics, QueueState] = {}
    for topic, group in by_snapshot_topic.items():
        candidates = (snapshot_candidates(reader, topic, {q.data for q in group})
                      if session.topic_exists(topic) else {})
        for topics in group:
            valid = valid_snapshots(candidates.get(topics.data, {}), topics, bounds, _skipped)
            best = best_snapshot(valid)
            if best is not None:
                states[topics] = QueueState.from_snapshot(best.state)
            elif bounds[topics.receipts][0] > 0:
                unresolved.add(topics.data)  # receipts deleted, no snapshot covers them
            else:
                states[topics] = QueueState(data_start=bounds[topics.data][0])
    return states


def _skipped(record: KafkaRecord, error: Exception) -> None:
    """A snapshot record passed over: the view that opens the queue logs it and counts it
    (``kmq queue show``); here it only costs the queue a longer read."""
    log.debug("snapshot in %s [%d] at offset %d passed over: %s", record.topic,
              record.partition, record.offset, error)


class _Tails:
    """The records after each queue's snapshot, read by one reader and applied to the states
    as :class:`~facade.state.queueview.QueueView` applies them."""

    def __init__(self, states: dict[QueueTopics, QueueState],
                 bounds: dict[str, tuple[int, int]]):
        self.states = states
        self.records = 0
        self.unresolved: set[str] = set()
        #: Topic -> (its queue's state, its queue, whether it is the data topic).
        self._owners: dict[str, tuple[QueueState, QueueTopics, bool]] = {}
        #: Where each topic that holds records past its queue's state is read from.
        self.positions: dict[str, int] = {}
        self.ends: dict[str, int] = {}
        for topics, state in states.items():
            for topic, offset, data in ((topics.data, state.data_offset, True),
                                        (topics.receipts, state.receipts_offset, False)):
                self._owners[topic] = (state, topics, data)
                if offset < bounds[topic][1]:
                    self.positions[topic] = offset
                    self.ends[topic] = bounds[topic][1]

    def read(self, reader: RecordReader, timeout: float) -> None:
        """Read every topic in :attr:`positions` up to its end offset and apply it.

        Raises:
            QueueNotFound: a topic was deleted meanwhile.
            BrokerUnavailable: not read to the end within ``timeout`` seconds.
        """
        reader.assign(self.positions)
        for batch in reader.read_to_end(list(self.positions), timeout, ends=self.ends):
            for record in batch:
                self._apply(reader, record)

    def _apply(self, reader: RecordReader, record: KafkaRecord) -> None:
        state, topics, data = self._owners[record.topic]
        if topics.data in self.unresolved:
            return
        self.records += 1
        if data:
            if record.offset < state.data_offset:
                return  # fetched again
            # A gap before it is final on Kafka: below the end offset a read_committed reader
            # skips only transaction markers, aborted records and deleted ones.
            state.add(IndexEntry.from_record(record.offset, len(record.value or b""),
                                             record.headers))
            return
        expected = state.receipts_offset
        if record.offset < expected:
            return
        if record.offset > expected and expected < reader.log_start(record.topic):
            # Receipts not read yet were deleted by retention meanwhile: the queue's own view
            # opens again from a newer snapshot.
            self.unresolved.add(topics.data)
            return
        try:
            receipt = decode_receipt(record.value or b"", topic=record.topic,
                                     partition=record.partition, offset=record.offset)
        except EnvelopeError:
            state.advance_receipts_to(record.offset + 1)  # every process skips it alike
            return
        state.apply(receipt, record.offset)
