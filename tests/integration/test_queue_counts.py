"""``kmq queue list`` counts every queue without reading every queue.

``QueueManager.queue_counts`` (``facade.state.queuecounts``) counts from one end-offset query for all
queues, one read of the snapshot topic and the records written since each queue's latest
snapshot. These tests prove, on a real broker, that its counts equal each queue's own
``MessageQueue.counts()`` on queues in every state a count depends on, and that it reads no
log of a queue that is empty or whose snapshot is current (counted by the readers it
assigns, not by time).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from facade import Message
from facade.state import queueview
from facade.cli import app
from facade.kafka.kafkaseam import RecordReader
from facade.manager import QueueManager
from facade.model.message import JournalLevel
from facade.state.queuecounts import QueueCounts
from facade.model.topics import snapshot_topic
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration

#: Seconds of the short time-to-be-received of the messages that must be expired when counted.
_SHORT_TTBR = 0.5


def _send(q: Any, n: int, **properties: Any) -> list[Message]:
    return [q.send(Message(body=b"m%d" % i, **properties), wait=i == n - 1) for i in range(n)]


def _own_counts(qm: QueueManager, path: str) -> QueueCounts:
    with qm.open_queue(path) as handle:
        return QueueCounts(*handle.counts())


def _populate(qm: QueueManager) -> dict[str, str]:
    """Queues in every state a count depends on; returns what each one shows, by path."""
    kinds: dict[str, str] = {}

    def create(name: str, **options: Any) -> Any:
        queue = qm.create_queue(rf".\private$\{name}", **options)
        kinds[queue.properties.path_name] = name
        return queue

    create("empty").close()
    with create("sent") as q:
        _send(q, 5)
    with create("received") as q:  # a plain queue, no journal: removed messages are gone
        sent = _send(q, 8, journal=JournalLevel.NONE)
        q.receive(timeout=10)
        q.receive_by_id(sent[5].id, timeout=10)
        q.receive_many(2, timeout=10)
    with create("journaled", journal=True) as q:  # removed messages go to its journal
        _send(q, 4, journal=JournalLevel.JOURNAL)
        q.receive(timeout=10)
    with create("expired") as q:
        _send(q, 3, time_to_be_received=_SHORT_TTBR)
        _send(q, 2, time_to_be_received=3600)
    with create("purged") as q:
        _send(q, 4)
        q.purge()
        _send(q, 1)
    with create("transactional", transactional=True) as q:  # transaction markers in the log
        for _ in range(3):
            with qm.begin_transaction() as tx:
                q.send(Message(body=b"t"), transaction=tx)
                q.send(Message(body=b"u"), transaction=tx)
        with qm.begin_transaction() as tx:
            q.receive(timeout=10, transaction=tx)
    # Snapshots: written when a handle closes (SNAPSHOT_ON_CLOSE is 1 in these tests).
    with create("snapshot-current") as q:
        _send(q, 6)
        q.receive_many(3, timeout=10)
        _send(q, 6, time_to_be_received=_SHORT_TTBR)
        q.count()  # the handle reads its own sends: its snapshot covers both logs to the end
    with create("snapshot-then-more") as q:
        _send(q, 6)
        q.receive_many(2, timeout=10)
    with qm.open_queue(r".\private$\snapshot-then-more") as q:
        q.count()  # opens from the snapshot
    with qm.open_queue(r".\private$\snapshot-then-more") as sender:
        _send(sender, 3)  # records after the snapshot, read by nobody yet
    time.sleep(_SHORT_TTBR * 2)  # the short-lived messages are past their TTBR now
    return kinds


@pytest.fixture
def locked(qm: QueueManager) -> Iterator[str]:
    """A queue with one message of three held by a peek-lock for the whole test (closing the
    handle would release it); its path."""
    q = qm.create_queue(r".\private$\locked")
    try:
        _send(q, 3)
        q.receive(lock=True, lease=600, timeout=10)
        yield q.properties.path_name
    finally:
        q.close()


@pytest.fixture
def snapshot_on_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every handle that applied a record writes a snapshot when it closes."""
    monkeypatch.setattr(queueview, "SNAPSHOT_ON_CLOSE", 1)


def test_batch_counts_equal_each_queues_own_counts(
        qm: QueueManager, snapshot_on_close: None, locked: str, broker: BrokerEndpoint,
        monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = {**_populate(qm), locked: "locked"}
    batch = qm.queue_counts()
    own = {path: _own_counts(qm, path) for path in kinds}
    assert {kinds[p]: c for p, c in batch.items()} == {kinds[p]: c for p, c in own.items()}
    # The states the test meant to build, so that equality is not between two wrong answers.
    named = {kinds[p]: c for p, c in batch.items()}
    assert named["empty"] == QueueCounts(0, 0)
    assert named["sent"] == QueueCounts(5, 0)
    assert named["received"] == QueueCounts(4, 0)
    assert named["journaled"] == QueueCounts(3, 0)
    assert named["expired"] == QueueCounts(5, 3)
    assert named["locked"] == QueueCounts(3, 0)
    assert named["purged"] == QueueCounts(1, 0)
    assert named["transactional"] == QueueCounts(5, 0)
    assert named["snapshot-current"] == QueueCounts(9, 6)
    assert named["snapshot-then-more"] == QueueCounts(7, 0)
    # Named queues only, and the CLI shows the same numbers (receivable = count - expired).
    some = sorted(kinds)[:3]
    assert qm.queue_counts(some) == {p: batch[p] for p in some}
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", qm.name)
    result = CliRunner().invoke(app, ["queue", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["path_name"]: row for row in json.loads(result.output)}
    assert {p: (rows[p]["messages"], rows[p]["expired"]) for p in kinds} == \
        {p: (c.receivable, c.expired) for p, c in own.items()}


class _ReadersSeen:
    """Wraps a session's ``reader()``: every reader made, and every topic assigned to one."""

    def __init__(self, qm: QueueManager, monkeypatch: pytest.MonkeyPatch):
        self.made = 0
        self.assigned: set[str] = set()
        make = qm.session.reader

        def reader(extra: Any = None) -> RecordReader:
            made = make(extra)
            assign = made.assign

            def recorded(positions: Any) -> None:
                self.assigned.update(positions)
                assign(positions)
            monkeypatch.setattr(made, "assign", recorded)
            self.made += 1
            return made
        monkeypatch.setattr(qm.session, "reader", reader)


def test_counting_reads_no_log_of_an_empty_or_idle_queue(
        qm: QueueManager, snapshot_on_close: None, monkeypatch: pytest.MonkeyPatch) -> None:
    idle = []
    for i in range(6):
        with qm.create_queue(rf".\private$\idle-{i}") as q:
            idle.append(q.properties)
            if i % 2:  # every other one has messages, and a snapshot covering its logs
                _send(q, i)
                q.receive(timeout=10)
    with qm.create_queue(r".\private$\busy") as busy:
        busy_properties = busy.properties
    with qm.open_queue(r".\private$\busy") as sender:  # sends only: no view, no snapshot
        _send(sender, 4)
    seen = _ReadersSeen(qm, monkeypatch)
    counts = qm.queue_counts()
    assert counts[busy_properties.path_name] == QueueCounts(4, 0)
    assert [counts[p.path_name].count for p in idle] == [0, 0, 0, 2, 0, 4]
    # One reader for every queue: the snapshot topic, then the busy queue's logs only.
    assert seen.made == 1
    assert seen.assigned == {snapshot_topic(busy_properties.data_topic),
                             busy_properties.data_topic}
    for properties in idle:
        assert properties.data_topic not in seen.assigned
        assert properties.receipts_topic not in seen.assigned


def test_a_queue_deleted_meanwhile_is_left_out(qm: QueueManager) -> None:
    with qm.create_queue(r".\private$\kept") as q:
        _send(q, 2)
        kept = q.properties.path_name
    with qm.create_queue(r".\private$\doomed") as q:
        _send(q, 1)
        doomed = q.properties
    # Deleted after the listing: its topics are gone when the offsets are asked.
    qm.session.delete_topics([doomed.data_topic, doomed.receipts_topic])
    assert qm.queue_counts([kept, doomed.path_name]) == {kept: QueueCounts(2, 0)}
