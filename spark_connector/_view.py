"""Queue-view filtering of raw data records, on executors (shared by both read paths).

A kmq queue's data topic is an append-only log; which of its records are still *in the queue*
is decided by the queue's receipts topic (the first receipt naming an offset removes it) and by
duplicate detection over the data log itself (:mod:`facade.state.queuestate`). Every facade process
builds that view the same way, and so does this module, per Spark task:

1. read the receipts topic to its current end into a :class:`~facade.state.queuestate.QueueState`;
2. feed the data records in offset order, starting :data:`~facade.state.queuestate.DEDUPE_WINDOW`
   offsets before the first offset of interest so duplicates are judged as every other process
   judges them.

Because every receipt is applied before the data records arrive, each record's status is final
when it is fed, so records can be streamed out one by one with bounded memory. The view is a
snapshot as of step 1: a message removed later is still shown (as an MSMQ peek would have).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from facade.errors import BrokerUnavailable
from facade.kafka.librdkafka import KafkaRecord, KafkaSession, TopicReader
from facade.state.queuestate import DEDUPE_WINDOW, IndexEntry, OffsetState, OffsetStatus, QueueState
from facade.model.receipts import decode_receipt

__all__ = ["TopicView", "data_records"]

#: Seconds a read may go without receiving anything before the broker is deemed gone.
DEFAULT_STALL_TIMEOUT = 60.0


class TopicView:
    """The queue view of one queue's data topic, from ``first_offset`` on.

    Args:
        session (KafkaSession): Kafka clients for the broker.
        data_topic (str): the queue's data topic.
        receipts_topic (str): its receipts topic.
        first_offset (int): the lowest data offset whose status will be asked.
        timeout (float): seconds reading the receipts may stall.

    Raises:
        BrokerUnavailable: the receipts could not be read to their end in time.
        QueueNotFound: a topic does not exist.
        EnvelopeError: a receipts record is not a valid receipt (as in every queue view).
    """

    def __init__(self, session: KafkaSession, data_topic: str, receipts_topic: str,
                 first_offset: int, timeout: float = DEFAULT_STALL_TIMEOUT):
        self.data_topic = data_topic
        #: Where the data must be fed from: early enough to judge duplicates of first_offset.
        self.feed_from = max(0, first_offset - DEDUPE_WINDOW)
        self.state = QueueState(data_start=self.feed_from)
        reader = session.reader()
        try:
            reader.assign({receipts_topic: 0})
            for batch in reader.read_to_end((receipts_topic,), timeout):
                for record in batch:
                    receipt = decode_receipt(record.value or b"", topic=record.topic,
                                             partition=record.partition, offset=record.offset)
                    self.state.apply(receipt, record.offset)
        finally:
            reader.close()

    def add(self, record: KafkaRecord) -> OffsetStatus:
        """Feed the next data record (increasing offsets) and return its final status.

        Args:
            record (KafkaRecord): a record of the data topic at or after :attr:`feed_from`.

        Returns:
            OffsetStatus: PENDING (a message in the queue), POISON (a record whose headers are
            not a kmq envelope's, waiting to be dead-lettered), REMOVED or DUPLICATE.
        """
        return self.add_entry(record.offset, len(record.value or b""), record.headers)

    def add_entry(self, offset: int, size: int,
                  headers: Iterable[tuple[str, bytes | None]] | None) -> OffsetStatus:
        """:meth:`add` from a record's parts (a Spark Kafka-source row's offset, value length
        in bytes and headers), for records this process did not read itself."""
        self.state.add(IndexEntry.from_record(offset, size, headers))
        return self.state.status(offset)


def in_view(status: OffsetStatus, receive_at_ms: int | None) -> bool:
    """Whether a record with ``status`` is delivered.

    Args:
        status (OffsetStatus): from :meth:`TopicView.add`.
        receive_at_ms (int | None): None for a peek (every pending message and poison record);
            for a receive, the planning instant (epoch ms): messages not yet visible then
            (timed dequeue) or expired then (time-to-be-received) are left out, as a facade
            receive would skip them.

    Returns:
        bool: True to deliver the record.
    """
    if status.state is OffsetState.POISON:
        return True  # never hidden: the decoder reports or dead-letters it
    if status.state is not OffsetState.PENDING:
        return False
    return receive_at_ms is None or status.entry is None or status.entry.visible(receive_at_ms)


def data_records(reader: TopicReader, topic: str, start: int, end: int,
                 stall_timeout: float = DEFAULT_STALL_TIMEOUT) -> Iterator[list[KafkaRecord]]:
    """Yield the records of ``topic`` in ``[start, end)`` in batches, in offset order.

    Stops at ``end``, or once the reader has caught up with the end of the topic as of its
    latest fetch response (which is at least ``end`` when ``end`` was read from the broker
    before). Offsets without a record (transaction markers, aborted records) are skipped by
    the consumer.

    Args:
        reader (TopicReader): a reader; it is reassigned.
        topic (str): a single-partition topic.
        start (int): first offset.
        end (int): offset to stop before.
        stall_timeout (float): seconds without progress before giving up.

    Raises:
        BrokerUnavailable: no progress for ``stall_timeout`` seconds (e.g. an open transaction
            holds back the records before ``end`` for read_committed readers).
    """
    if start >= end:
        return
    reader.assign({topic: start})
    last_progress = time.monotonic()
    while True:
        records = reader.poll(0.05)
        if records:
            last_progress = time.monotonic()
            if records[-1].offset >= end:
                records = [r for r in records if r.offset < end]
                if records:
                    yield records
                return
            yield records
            if records[-1].offset == end - 1:
                return
        elif reader.caught_up((topic,)):
            return  # everything up to the fetch-response end, which is >= end, has been read
        elif time.monotonic() - last_progress > stall_timeout:
            raise BrokerUnavailable(
                f"reading {topic!r} from offset {start} stalled for {stall_timeout:g} s",
                hint="check the broker; an open transaction holds back later records")
