"""A broker that shows a tailing reader a record before an earlier one (Tansu 0.6 does).

Kafka never exposes a hole below the high watermark except transaction markers, but Tansu 0.6
sometimes answers a fetch with a record written concurrently before an earlier one is
visible, and the consumer moves past the earlier one for good. A queue view that missed a
receipt would let two receivers win one message (the two-receiver test saw it once), and one
that missed a data record would never deliver it. A view therefore re-reads a topic from a gap
until it fills, and takes it as real only after ``GAP_PATIENCE`` seconds. These tests feed a
view a gap through a stand-in reader, so the broker's timing does not decide the outcome.
"""

from __future__ import annotations

import time

import pytest

import facade.queueview as queueview
from facade.errors import BrokerError
from facade.kafka import KafkaRecord
from facade.queuestate import QueueState
from facade.queueview import QueueView
from facade.recordcache import RecordCache
from facade.receipts import ReceiptAction, encode_receipt, new_claim
from facade.retention import ReceiptsRetention
from facade.topics import QueueTopics

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
    view._retention, view._reopened = ReceiptsRetention(TOPICS.data), False
    view._applied_ahead, view._gaps = {}, {}
    view._markers_due, view._last_transaction = {}, {}
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


def test_a_gap_in_the_receipts_is_read_again_and_applied_in_order() -> None:
    # Receipts 0 and 1 both claim data offset 7; the broker shows receipt 1 first.
    first = new_claim(ReceiptAction.RECEIVE, (7,), "receiver-a")
    second = new_claim(ReceiptAction.RECEIVE, (7,), "receiver-b")
    reader = _Reader([[_receipt(1, 7, second)],
                      [_receipt(0, 7, first), _receipt(1, 7, second)]])
    view = _view(reader)
    view._awaiting.update({first.claim_id: None, second.claim_id: None})
    view.refresh()
    assert reader.seeks == [(TOPICS.receipts, 0)]        # rewound; receipt 1 not applied
    assert view.state.receipts_offset == 0 and not view._outcomes
    view.refresh()
    assert view.state.receipts_offset == 2 and not view._gaps
    # The first receipt wins, as in every other view; applied out of order, both would have.
    assert view._outcomes[first.claim_id].won == (7,)
    assert view._outcomes[second.claim_id].won == ()


def test_a_gap_that_stays_is_taken_as_real_after_the_patience(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queueview, "GAP_PATIENCE", 0.05)
    reader = _Reader([[_receipt(3, 1)], [_receipt(3, 1)]])
    view = _view(reader)
    view.refresh()
    assert reader.seeks == [(TOPICS.receipts, 0)] and view.state.receipts_offset == 0
    time.sleep(0.06)
    view.refresh()                                        # still missing: markers, say
    assert view.state.receipts_offset == 4 and len(reader.seeks) == 1


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
