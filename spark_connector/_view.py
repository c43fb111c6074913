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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from facade.errors import BrokerUnavailable
from facade.kafka.librdkafka import KafkaRecord, KafkaSession, TopicReader
from facade.model.avro import HEADER_SIZE
from facade.model.envelope import HEADER_ID, HEADER_PRIORITY, HEADER_VERSION
from facade.model.receipts import decode_receipt
from facade.state.queuestate import DEDUPE_WINDOW, IndexEntry, OffsetState, OffsetStatus, QueueState

__all__ = ["PeekView", "TopicView", "data_records", "plain_message_ids"]

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
        self.state = _with_receipts(session, receipts_topic, self.feed_from, timeout)

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


def _with_receipts(session: KafkaSession, receipts_topic: str, data_start: int,
                   timeout: float) -> QueueState:
    """A queue state with every receipt of ``receipts_topic`` applied (read to its end)."""
    state = QueueState(data_start=data_start)
    reader = session.reader()
    try:
        reader.assign({receipts_topic: 0})
        for batch in reader.read_to_end((receipts_topic,), timeout):
            for record in batch:
                receipt = decode_receipt(record.value or b"", topic=record.topic,
                                         partition=record.partition, offset=record.offset)
                state.apply(receipt, record.offset)
    finally:
        reader.close()
    return state


class PeekView:
    """The peek view of one queue's data topic from ``first_offset`` on, for a reader that
    walks the data once and only asks whether each record is shown (Spark's Kafka-source
    path): :class:`TopicView`'s verdicts through :meth:`QueueState.admit`, which indexes
    nothing, about a microsecond per record where :class:`TopicView` spends ten.

    Args:
        data_topic (str): the queue's data topic.
        state (QueueState): every receipt applied, no data fed yet (see :meth:`read`).
        feed_from (int): the first data offset to feed: :data:`DEDUPE_WINDOW` before the
            first offset whose verdict is wanted, so duplicates are judged as everywhere.
    """

    def __init__(self, data_topic: str, state: QueueState, feed_from: int):
        self.data_topic = data_topic
        self.state = state
        self.feed_from = feed_from

    @classmethod
    def read(cls, session: KafkaSession, data_topic: str, receipts_topic: str,
             first_offset: int, timeout: float = DEFAULT_STALL_TIMEOUT) -> PeekView:
        """The view of ``data_topic`` from ``first_offset`` on, its receipts read to their end.

        Args and errors: as :class:`TopicView`.
        """
        feed_from = max(0, first_offset - DEDUPE_WINDOW)
        return cls(data_topic, _with_receipts(session, receipts_topic, feed_from, timeout),
                   feed_from)

    def add(self, record: KafkaRecord) -> bool:
        """Feed the next data record (increasing offsets); True if a peek shows it."""
        return self.add_entry(record.offset, len(record.value or b""), record.headers)

    def add_entry(self, offset: int, size: int,
                  headers: Iterable[tuple[str, bytes | None]] | None) -> bool:
        """:meth:`add` from a record's parts (offset, value length in bytes, headers)."""
        entry = IndexEntry.from_record(offset, size, headers)
        return self.state.admit(offset, entry.dedupe_key, entry.poison)

    def add_plain(self, offset: int, message_id: str) -> bool:
        """:meth:`add` for a record :func:`plain_message_ids` read: not poison, its dedupe key
        ``message_id``."""
        return self.state.admit(offset, message_id, False)


#: A message id in the form kmq writes it (lowercase GUID, a decimal sequence without leading
#: zeros): its own canonical text, so IndexEntry.from_record takes it as is once the sequence
#: is checked to fit 32 bits (ten digits can exceed it). Other valid ids (uppercase) are left
#: to IndexEntry.from_record.
_PLAIN_ID = (r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
             r"\\(?:0|[1-9][0-9]{0,9})$")
#: Length of an id text with a ten-digit sequence (36-character GUID, backslash, ten digits).
_TEN_DIGIT_ID = 47
_UINT32_MAX = 2**32 - 1


def plain_message_ids(headers: pa.Array, sizes: pa.Array) -> list[str | None]:
    """The message id of each Kafka-source row whose kmq headers are in the plain form kmq
    writes, read with Arrow compute instead of row by row; None for every other row.

    A row is plain when its value is at least the 10-byte Avro single-object header, it has
    exactly one ``kmq.version`` header (``1``), exactly one ``kmq.id`` in its canonical form
    (see ``_PLAIN_ID``; a sequence of at most 2**32 - 1) and at most one ``kmq.priority``
    (one digit 0-7). Such a row is what
    :meth:`IndexEntry.from_record` makes a non-poison entry of, with that id as its dedupe key;
    a row with anything else (no or repeated headers, other versions, null values) gets None
    and goes through :meth:`IndexEntry.from_record` itself.

    Args:
        headers (pa.Array): Kafka-source ``headers`` (list of struct ``key`` string, ``value``
            binary).
        sizes (pa.Array): the value lengths in bytes (int), null for no value.

    Returns:
        list[str | None]: one entry per row.
    """
    rows = len(headers)
    if rows == 0:
        return []
    if not isinstance(headers, pa.ListArray):
        headers = headers.cast(pa.list_(headers.type.value_type))
    parents = pc.list_parent_indices(headers).to_numpy(zero_copy_only=False)
    keys, values = headers.flatten().flatten()
    plain = pc.fill_null(pc.greater_equal(sizes, HEADER_SIZE), False).to_numpy(
        zero_copy_only=False).copy()

    def one(name: str, pattern: str,
            required: bool) -> tuple[np.ndarray, np.ndarray, pa.Array]:
        """Rows whose ``name`` header is right (once, matching ``pattern``; or absent when
        not ``required``), and the row and value of every ``name`` header."""
        mask = pc.fill_null(pc.equal(keys, name), False)
        owners = parents[mask.to_numpy(zero_copy_only=False)]
        counts = np.bincount(owners, minlength=rows)
        chosen = values.filter(mask)
        good = np.zeros(rows, dtype=bool)
        good[owners] = pc.fill_null(pc.match_substring_regex(chosen, pattern), False).to_numpy(
            zero_copy_only=False)
        ok = (counts == 1) & good
        return (ok if required else ok | (counts == 0)), owners, chosen

    version_ok, _, _ = one(HEADER_VERSION, "^1$", True)
    priority_ok, _, _ = one(HEADER_PRIORITY, "^[0-7]$", False)
    id_ok, owners, ids = one(HEADER_ID, _PLAIN_ID, True)
    plain &= version_ok & priority_ok & id_ok
    result: list[str | None] = [None] * rows
    kept = plain[owners]  # a plain row has one kmq.id, so it owns one of these
    if kept.any():
        texts = ids.filter(pa.array(kept)).cast(pa.string()).to_pylist()
        for row, text in zip(owners[kept].tolist(), texts):
            if len(text) != _TEN_DIGIT_ID or int(text[37:]) <= _UINT32_MAX:
                result[row] = text
    return result


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
