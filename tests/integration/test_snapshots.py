"""Queue snapshots on a real broker: a handle opens from the latest valid snapshot plus the log
tail and reaches the same verdicts as one that replays the logs from offset 0 (docs/design.md,
"Bounded state")."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Producer

from facade import Message
from facade.state import queueview
from facade.manager import QueueManager
from facade.state.queuestate import QueueState, StateSnapshot
from facade.state.queueview import QueueView
from facade.state.snapshot import QueueSnapshotRecord, encode_snapshot
from facade.state.retention import snapshot_key

pytestmark = pytest.mark.integration


def _fill(q, n: int, start: int = 0) -> None:  # type: ignore[no-untyped-def]
    for i in range(start, start + n):
        q.send(Message(body=b"%d" % i, priority=i % 8, label=f"m{i}"), wait=i == start + n - 1)


def _replayed(q) -> QueueView:  # type: ignore[no-untyped-def]
    """A view that ignores snapshots: reads both logs from offset 0."""
    view = QueueView.__new__(QueueView)
    original = QueueView._open_state
    QueueView._open_state = lambda self: QueueState()  # type: ignore[method-assign]
    try:
        view.__init__(q.manager.session, q._opened.single().topics)
    finally:
        QueueView._open_state = original  # type: ignore[method-assign]
    return view


def _opened(q) -> QueueView:  # type: ignore[no-untyped-def]
    return QueueView(q.manager.session, q._opened.single().topics)


def _verdicts(view: QueueView) -> tuple:
    view.catch_up()
    state = view.state
    order = [e.offset for e in state.candidates(0)]
    ids = [state.by_message_id(state.status(o).entry.message_id).offset for o in order]
    return order, ids, state.pending_count(), state.pending_bytes, state.data_offset


def _assert_snapshot_agrees_with_log(q) -> None:  # type: ignore[no-untyped-def]
    """A handle opened from the latest snapshot and one replaying from offset 0 agree."""
    snapped, replayed = _opened(q), _replayed(q)
    try:
        assert snapped.state.data_offset > 0 and snapped.malformed_snapshots == 0
        assert replayed.state.data_offset == 0
        assert _verdicts(snapped) == _verdicts(replayed)
    finally:
        snapped.close()
        replayed.close()


def _raw_producer(qm: QueueManager) -> Producer:
    return Producer({"bootstrap.servers": qm.session.bootstrap_servers,
                     "allow.auto.create.topics": False})


def test_a_handle_opened_from_a_snapshot_reaches_the_same_verdicts(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queueview, "SNAPSHOT_ON_CLOSE", 1)
    q = qm.create_queue(r".\private$\snap")
    _fill(q, 40)
    taken = [m.body for m in q.receive_many(15, timeout=10)]
    q.close()  # writes a snapshot
    _fill(q, 10, start=40)  # the tail after the snapshot
    _assert_snapshot_agrees_with_log(q)
    # Receive by id and in order through a handle that opens from the snapshot.
    handle = qm.open_queue(r".\private$\snap")
    try:
        first = handle.peek(timeout=10)
        assert handle.receive_by_id(first.id, timeout=10).body == first.body
        rest = [m.body for m in handle.receive_many(100, timeout=10)]
        assert sorted(taken + [first.body] + rest, key=int) == [b"%d" % i for i in range(50)]
    finally:
        handle.close()


def test_a_garbage_snapshot_is_skipped_and_the_handle_uses_the_log(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(queueview, "SNAPSHOT_ON_CLOSE", 1)
    q = qm.create_queue(r".\private$\snap-garbage")
    _fill(q, 10)
    q.receive(timeout=10)
    q.close()  # a valid snapshot
    view = _opened(q)
    valid_offset = view.state.data_offset
    # Under the key of the valid snapshot's bucket (facade.state.retention), so it hides that one.
    topic, key = view.snapshot_topic, snapshot_key(view.topics.data, view.state.receipts_offset)
    view.close()
    producer = _raw_producer(qm)
    producer.produce(topic, b"garbage", key=key)
    producer.flush(10)
    with caplog.at_level(logging.WARNING, logger="kmq.queueview"):
        view = _opened(q)  # the garbage is newest: skipped, the older valid one is used
    try:
        assert view.malformed_snapshots == 1
        assert view.state.data_offset == valid_offset
        assert any("at offset" in r.getMessage() and topic in r.getMessage() for r in caplog.records)
    finally:
        view.close()
    # A stale snapshot (covering offsets the topics never held) and garbage only: the log.
    stale = StateSnapshot(0, 1000, 1000, queueview.QueueState()._dedupe_window, 0, 1000, b"",
                          (), (), (), ())
    producer.produce(topic, encode_snapshot(QueueSnapshotRecord(view.topics, stale)), key=key)
    producer.produce(topic, b"\xc3\x01garbage!", key=key)
    producer.produce(topic, b"", key=key)
    producer.flush(10)
    view = _opened(q)
    try:
        assert view.malformed_snapshots == 3 and view.state.data_offset == 0
    finally:
        view.close()
    handle = qm.open_queue(r".\private$\snap-garbage")
    try:
        assert handle.malformed_snapshots() == 3  # what `kmq queue show` reports
        assert len(handle.receive_many(100, timeout=10)) == 9
    finally:
        handle.close()


def test_two_handles_writing_snapshots_concurrently_agree_with_the_log(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queueview, "SNAPSHOT_EVERY", 3)
    monkeypatch.setattr(queueview, "SNAPSHOT_ON_CLOSE", 1)
    q = qm.create_queue(r".\private$\snap-two")
    _fill(q, 60)
    a, b = qm.open_queue(r".\private$\snap-two"), qm.open_queue(r".\private$\snap-two")
    got: list[bytes] = []
    try:
        for _ in range(20):  # interleaved: each handle applies the other's receipts too
            got.append(a.receive(timeout=10).body)
            got.append(b.peek(timeout=10).body)  # keeps b reading a's receipts
            got.append(b.receive(timeout=10).body)
            got.pop(-2)
        _fill(q, 5, start=60)
    finally:
        a.close()
        b.close()
    _assert_snapshot_agrees_with_log(q)
    handle = qm.open_queue(r".\private$\snap-two")
    try:
        got.extend(m.body for m in handle.receive_many(100, timeout=10))
    finally:
        handle.close()
    assert sorted(got, key=int) == [b"%d" % i for i in range(65)]


def test_the_delete_records_probe_answers_without_crashing_the_broker(qm: QueueManager) -> None:
    supported, why = qm.session.delete_records_support()
    assert supported and why == ""
    qm.session.ping()  # the broker is still there
    q = qm.create_queue(r".\private$\after-probe")
    q.send(Message(body=b"x"), wait=True)
    assert q.receive(timeout=10).body == b"x"
