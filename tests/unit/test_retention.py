"""Unit tests for retention in the queue view: what is deleted, and opening at a log start > 0.

The broker is a fake here (each case sets whether DeleteRecords is supported and whether it fails);
``tests/integration/test_snapshots.py`` checks the capability probe against the real broker.
"""

from __future__ import annotations

import pytest

from facade.errors import BrokerError, BrokerUnavailable
from facade.state.queuestate import IndexEntry, QueueState
from facade.state.queueview import QueueView
from facade.model.receipts import ReceiptAction, new_claim
from facade.model.topics import QueueTopics

TOPICS = QueueTopics("kmq.qm.private.q")
GUID = "ae0c5671-f190-12ce-ae10-00dd0114290f"


class _Session:
    def __init__(self, supported: bool = True, fail: Exception | None = None):
        self.supported, self.fail = supported, fail
        self.deleted: list[tuple[str, int]] = []

    def delete_records_support(self) -> tuple[bool, str]:
        return (self.supported, "" if self.supported else "not here")

    def delete_records(self, topic: str, before: int) -> int:
        if self.fail is not None:
            raise self.fail
        self.deleted.append((topic, before))
        return before


def _view(session: _Session, window: int = 4) -> QueueView:
    view = object.__new__(QueueView)
    view.topics, view._session, view._deleted_below = TOPICS, session, 0
    view.state = QueueState(dedupe_window=window)
    for offset in range(20):
        view.state.add(IndexEntry(offset, 3, f"{GUID}\\{offset}", None, None, None, 50,
                                  f"{GUID}\\{offset}"))
    return view


def test_records_below_the_retention_floor_are_deleted_once() -> None:
    session = _Session()
    view = _view(session)
    view.state.apply(new_claim(ReceiptAction.RECEIVE, tuple(range(10)), "t"), 0)
    view._delete_removed()
    view._delete_removed()  # nothing new below the floor: no second request
    assert session.deleted == [(TOPICS.data, 10)]
    # Offsets inside the dedupe window stay even when removed.
    view.state.apply(new_claim(ReceiptAction.RECEIVE, tuple(range(10, 20)), "t"), 1)
    view._delete_removed()
    assert session.deleted[-1] == (TOPICS.data, 20 - 4)


def test_nothing_is_deleted_where_the_broker_cannot() -> None:
    session = _Session(supported=False)
    view = _view(session)
    view.state.apply(new_claim(ReceiptAction.RECEIVE, tuple(range(10)), "t"), 0)
    view._delete_removed()
    assert session.deleted == []


def test_a_failed_delete_is_logged_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    session = _Session(fail=BrokerUnavailable("gone"))
    view = _view(session)
    view.state.apply(new_claim(ReceiptAction.RECEIVE, tuple(range(10)), "t"), 0)
    view._delete_removed()
    assert "not deleted" in caplog.text and view._deleted_below == 0
    session.fail = None
    view._delete_removed()
    assert session.deleted == [(TOPICS.data, 10)]


def test_a_handle_opens_at_the_data_log_start() -> None:
    view = _view(_Session())
    state = view._state_at_log_start({TOPICS.data: (7, 30), TOPICS.receipts: (0, 12)})
    assert state.data_offset == 7 and state.receipts_offset == 0
    assert state.status(3).state.value == "removed"


def test_deleted_receipts_without_a_snapshot_are_a_clear_error() -> None:
    view = _view(_Session())
    with pytest.raises(BrokerError, match="receipts below offset 5 .* were deleted"):
        view._state_at_log_start({TOPICS.data: (0, 30), TOPICS.receipts: (5, 12)})
