"""Gaps in a queue topic's offsets, as a queue view meets them.

Apache Kafka never shows a read_committed reader a record before an earlier one: the holes below
the last stable offset are transaction markers and the records of aborted transactions, and
they never fill, so a view skips them without reading again. Offsets below the log start were
deleted: a data gap there is skipped too, but receipts a view had not read make it open again
from a snapshot (or fail clearly), because skipping them could let two receivers win one
message. These tests feed a view gaps through a stand-in reader, so the broker's timing does not
decide the outcome.
"""

from __future__ import annotations

import pytest

from facade.errors import BrokerError
from facade.kafka.librdkafka import KafkaRecord
from facade.state.queuestate import QueueState
from facade.state.queueview import QueueView
from facade.state.recordcache import RecordCache
from facade.model.receipts import ReceiptAction, encode_receipt, new_claim
from facade.state.retention import ReceiptsRetention
from facade.model.topics import QueueTopics

TOPICS = QueueTopics("kmq.qm.private.q", "kmq.qm.private.q.receipts")


class _Reader:
    """Hands out scripted batches and records seeks."""

    def __init__(self, batches, log_starts=None):
        self.batches = list(batches)
        self.seeks: list[tuple[str, int]] = []
        self.log_starts = log_starts or {}

    def poll(self, timeout: float, max_records: int = 1000):
        return self.batches.pop(0) if self.batches else []

    def seek(self, topic: str, offset: int) -> None:
        self.seeks.append((topic, offset))

    def log_start(self, topic: str) -> int:
        return self.log_starts.get(topic, 0)


def _view(reader: _Reader) -> QueueView:
    view = object.__new__(QueueView)
    view.topics = TOPICS
    view.claimant = "test"
    view.state = QueueState()
    view.records = RecordCache(None, TOPICS.data)
    view._awaiting, view._outcomes, view._since_snapshot = {}, {}, 0
    view._retention = ReceiptsRetention(TOPICS.data)
    view._applied_ahead = {}
    view._receipts_paused, view._receive_only = False, True
    view._reader = reader
    view._session = _NoSnapshots()
    view.snapshot_topic = "kmq.qm.system.snapshots"
    return view


class _NoSnapshots:
    """A session whose queue manager has no snapshot topic."""

    def topic_exists(self, name: str) -> bool:
        return False


def _receipt(offset: int, data_offset: int, claim=None) -> KafkaRecord:
    claim = claim or new_claim(ReceiptAction.RECEIVE, (data_offset,), f"r{offset}")
    return KafkaRecord(TOPICS.receipts, 0, offset, 0, None, encode_receipt(claim), ())


def test_a_gap_above_the_log_start_is_skipped_without_reading_again() -> None:
    # Offsets 0-2 of the receipts are the marker and records of an aborted transaction.
    reader = _Reader([[_receipt(3, 1)]])
    view = _view(reader)
    view.refresh()
    assert reader.seeks == [] and view.state.receipts_offset == 4


def _data(offset: int) -> KafkaRecord:
    mid = f"ae0c5671-f190-12ce-ae10-00dd0114290f\\{offset}".encode()
    return KafkaRecord(TOPICS.data, 0, offset, 0, None, b"\xc3\x01" + bytes(20),
                       (("kmq.version", b"1"), ("kmq.id", mid)))


def test_a_gap_below_the_log_start_is_real_at_once() -> None:
    # Records 0-4 were deleted (retention): no rewind, no waiting.
    reader = _Reader([[_data(5), _data(6)]], log_starts={TOPICS.data: 5})
    view = _view(reader)
    view.refresh()
    assert reader.seeks == [] and view.state.data_offset == 7
    assert view.state.status(5).is_pending


def test_receipts_missing_below_the_log_start_are_a_clear_error() -> None:
    reader = _Reader([[_receipt(3, 1)]], log_starts={TOPICS.receipts: 3})
    view = _view(reader)
    with pytest.raises(BrokerError, match="receipts below offset 3 .* were deleted"):
        view.refresh()
