"""Tests for facade.state.outgoingqueue: the durable local outgoing queue of recoverable messages."""

from __future__ import annotations

import base64
import dataclasses
import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from facade.errors import EnvelopeError, InvalidParameter, MessageQueueError, TransientQueueError
from facade.state.outgoingqueue import (
    OutgoingQueue,
    OutgoingRecord,
    StoredRecord,
    _decode_headers,
    _encode_headers,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def record(n: int = 1, **changes: object) -> OutgoingRecord:
    fields: dict[str, object] = {
        "topic": "kmq.qm1.private.orders",
        "key": None,
        "value": b"envelope-%d" % n,
        "headers": (("kmq.id", b"\x00\x01"), ("kmq.id", b"dup"), ("kmq.priority", b"3")),
        "message_id": f"0b1e8d2a-0000-0000-0000-000000000000\\{n}",
        "deadline_ms": 1_700_000_060_000,
        "purpose": "message",
        "created_ms": 1_700_000_000_000 + n,
    }
    fields.update(changes)
    return OutgoingRecord(**fields)  # type: ignore[arg-type]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "kmq-home" / "outgoing.sqlite3"


# --- round trip ----------------------------------------------------------------------------------


def test_copies_stored_without_records_read_back_as_records(db_path: Path) -> None:
    # put_copies is the sender's path (no OutgoingRecord per copy): same rows as put_many.
    records = [record(1), record(2, key=b"k", headers=[("kmq.\u00e9\"x", b"\x00\xff")]),
               record(3, value=b"", headers=())]
    with OutgoingQueue(db_path) as queue:
        rows = queue.put_copies(
            [(r.topic, r.key, r.value, list(r.headers), r.message_id, r.deadline_ms)
             for r in records], "message", 1_700_000_000_001)
        assert rows == sorted(rows) and queue.commits == 1
        expected = [dataclasses.replace(r, created_ms=1_700_000_000_001) for r in records]
        assert queue.pending() == [StoredRecord(row, r) for row, r in zip(rows, expected)]
        with pytest.raises(InvalidParameter, match="purpose"):
            queue.put_copies([], "", 0)


@given(st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=40)), max_size=6))
def test_headers_are_stored_as_the_json_they_always_were(
        headers: list[tuple[str, bytes]]) -> None:
    expected = json.dumps([[name, base64.b64encode(value).decode("ascii")]
                           for name, value in headers])
    assert _encode_headers(headers) == expected
    assert _decode_headers(expected) == tuple(headers)


def test_put_pending_remove_round_trip(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        assert queue.count() == 0
        assert queue.pending() == []
        first = queue.put(record(1))
        second = queue.put(record(2, key=b"k", deadline_ms=None, purpose="acknowledgment"))
        third = queue.put(record(3, value=b"", headers=(), purpose="deadletter"))
        assert first < second < third
        assert queue.count() == 3
        assert queue.pending() == [
            StoredRecord(first, record(1)),
            StoredRecord(second, record(2, key=b"k", deadline_ms=None, purpose="acknowledgment")),
            StoredRecord(third, record(3, value=b"", headers=(), purpose="deadletter")),
        ]
        assert [s.row_id for s in queue.pending(limit=2)] == [first, second]
        assert queue.pending(limit=0) == []

        queue.remove(second)
        assert [s.row_id for s in queue.pending()] == [first, third]
        queue.remove(second)  # already gone: not an error
        queue.remove(first)
        queue.remove(third)
        assert queue.count() == 0


def test_binary_values_and_headers_keep_every_byte(db_path: Path) -> None:
    every_byte = bytes(range(256))
    original = record(key=every_byte, value=every_byte * 10, headers=[("h", every_byte), ("", b"")])
    with OutgoingQueue(db_path) as queue:
        queue.put(original)
        (stored,) = queue.pending()
    assert stored.record == original
    assert stored.record.headers == (("h", every_byte), ("", b""))


def test_row_ids_are_never_reused(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        old = queue.put(record(1))
        queue.remove(old)
        assert queue.put(record(2)) > old


def test_creates_missing_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "outgoing.sqlite3"
    with OutgoingQueue(path) as queue:
        queue.put(record())
    assert path.is_file()


def test_file_is_in_wal_mode_with_a_user_version(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        conn = queue._conn
        assert conn is not None
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: fsync every commit
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    finally:
        conn.close()


def test_negative_limit_is_refused(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue, pytest.raises(InvalidParameter):
        queue.pending(limit=-1)


def test_put_takes_only_outgoing_records(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue, pytest.raises(InvalidParameter):
        queue.put({"topic": "t"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {"topic": ""},
        {"key": "text"},
        {"value": "text"},
        {"value": bytearray(b"x")},
        {"headers": (("h", "text"),)},
        {"headers": (("h",),)},
        {"message_id": None},
        {"deadline_ms": 1.5},
        {"deadline_ms": True},
        {"purpose": ""},
        {"created_ms": None},
    ],
)
def test_record_fields_are_checked(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidParameter):
        record(**changes)


def test_closed_queue_refuses_operations(db_path: Path) -> None:
    queue = OutgoingQueue(db_path)
    queue.close()
    queue.close()  # idempotent
    with pytest.raises(MessageQueueError, match="closed"):
        queue.put(record())
    assert "closed" in repr(queue)


# --- durability and sharing ----------------------------------------------------------------------


def test_records_survive_close_and_reopen(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        kept = queue.put(record(1))
        queue.remove(queue.put(record(2)))
    with OutgoingQueue(db_path) as queue:
        assert queue.pending() == [StoredRecord(kept, record(1))]


def test_two_openers_of_one_file_see_each_others_puts(db_path: Path) -> None:
    with OutgoingQueue(db_path) as a, OutgoingQueue(db_path) as b:
        first = a.put(record(1))
        second = b.put(record(2))
        assert first < second
        assert a.pending() == b.pending()
        assert [s.record for s in a.pending()] == [record(1), record(2)]
        a.remove(second)
        assert [s.row_id for s in b.pending()] == [first]


def test_a_put_survives_a_crash_of_the_process(db_path: Path) -> None:
    # The child puts and dies at once: no close(), no checkpoint, no interpreter cleanup.
    script = f"""
import os
from pathlib import Path
from facade.state.outgoingqueue import OutgoingQueue, OutgoingRecord
queue = OutgoingQueue(Path({str(db_path)!r}))
row = queue.put(OutgoingRecord("kmq.qm1.private.orders", b"k", b"crash", (("h", b"v"),),
                               "id-1", None, "message", 42))
print(row, flush=True)
os._exit(0)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    with OutgoingQueue(db_path) as queue:
        (stored,) = queue.pending()
    assert stored.row_id == int(done.stdout)
    assert stored.record == OutgoingRecord(
        "kmq.qm1.private.orders", b"k", b"crash", (("h", b"v"),), "id-1", None, "message", 42
    )


def test_concurrent_processes_and_threads_lose_no_put(db_path: Path) -> None:
    script = f"""
from pathlib import Path
from facade.state.outgoingqueue import OutgoingQueue, OutgoingRecord
with OutgoingQueue(Path({str(db_path)!r})) as queue:
    for n in range(50):
        queue.put(OutgoingRecord("t", None, b"child", (), str(n), None, "message", n))
"""
    OutgoingQueue(db_path).close()  # create the file before the writers race
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT)
    with OutgoingQueue(db_path) as queue:
        threads = [
            threading.Thread(target=lambda: [queue.put(record(n)) for n in range(50)])
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert child.wait(timeout=60) == 0
        pending = queue.pending()
    assert len(pending) == 250
    assert sum(s.record.value == b"child" for s in pending) == 50
    assert [s.row_id for s in pending] == sorted(s.row_id for s in pending)


# --- failures ------------------------------------------------------------------------------------


def test_unwritable_location_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file where KMQ_HOME should be")
    path = blocker / "outgoing.sqlite3"
    with pytest.raises(MessageQueueError) as info:
        OutgoingQueue(path)
    message = str(info.value)
    assert str(path) in message
    assert "KMQ_HOME" in message
    assert blocker.read_text() == "a regular file where KMQ_HOME should be"


def test_path_that_is_a_directory_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "outgoing.sqlite3"
    path.mkdir()
    with pytest.raises(MessageQueueError) as info:
        OutgoingQueue(path)
    assert str(path) in str(info.value)
    assert "KMQ_HOME" in str(info.value)


def test_corrupt_file_gives_a_clear_error_and_is_left_as_it_was(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    garbage = b"this is not a database\x00" * 200
    db_path.write_bytes(garbage)
    with pytest.raises(MessageQueueError) as info:
        OutgoingQueue(db_path)
    assert str(db_path) in str(info.value)
    assert "move it aside" in str(info.value)
    assert not isinstance(info.value, TransientQueueError)
    assert db_path.read_bytes() == garbage
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


def test_file_of_a_newer_layout_is_refused_and_kept(db_path: Path) -> None:
    OutgoingQueue(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(MessageQueueError, match="version 99"):
        OutgoingQueue(db_path)
    assert db_path.read_bytes() == before


def _cap_at_current_size(queue: OutgoingQueue) -> sqlite3.Connection:
    """Cap the database at its current size: SQLite then fails exactly as on a full disk."""
    conn = queue._conn
    assert conn is not None
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    return conn


def test_full_disk_on_put_is_a_clear_error_and_stores_nothing(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        queue.put(record(1))
        _cap_at_current_size(queue)
        with pytest.raises(MessageQueueError) as info:
            queue.put(record(2, value=b"x" * 1_000_000))
        assert "full" in str(info.value)
        assert str(db_path) in str(info.value)
        assert [s.record for s in queue.pending()] == [record(1)]


def test_lock_held_too_long_is_a_transient_error(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("facade.state.outgoingqueue.BUSY_TIMEOUT_S", 0.1)
    with OutgoingQueue(db_path) as queue:
        blocker = sqlite3.connect(db_path, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            with pytest.raises(TransientQueueError, match="retry"):
                queue.put(record())
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        queue.put(record())
        assert queue.count() == 1


# --- damaged rows ---------------------------------------------------------------------------------


def test_damaged_rows_are_left_out_of_pending_and_listed_as_unreadable(db_path: Path) -> None:
    # Written behind the store's back (a damaged disk, another program): reading them must not
    # fail, or the queue manager could not open (tests/faults/test_garbage.py writes such rows).
    with OutgoingQueue(db_path) as queue:
        good = queue.put(record(1))
        conn = sqlite3.connect(db_path, isolation_level=None)
        insert = ("INSERT INTO outgoing (topic, key, value, headers, message_id, deadline_ms, "
                  "purpose, created_ms) VALUES ({}, NULL, ?, ?, 'id', NULL, 'message', 1)")
        conn.execute(insert.format("CAST(? AS TEXT)"), (b"\xff\xfe", b"v", "[]"))
        conn.execute(insert.format("?"), ("kmq.qm1.private.orders", b"v", "not json"))
        conn.execute(insert.format("?"), ("kmq.qm1.private.orders", "text, not bytes", "[]"))
        conn.close()
        assert [s.row_id for s in queue.pending()] == [good]
        unreadable = queue.unreadable()
        assert [row for row, _ in unreadable] == [good + 1, good + 2, good + 3]
        assert all(isinstance(error, EnvelopeError) for _, error in unreadable)
        (_, bad_topic), (_, bad_headers), (_, bad_value) = unreadable
        assert bad_topic.topic is None and bad_topic.raw == b"v"
        assert bad_headers.topic == "kmq.qm1.private.orders" and bad_headers.raw == b"v"
        assert "JSONDecodeError" in bad_headers.message
        assert bad_value.raw is None and "value must be bytes" in bad_value.message
        for row, _ in unreadable:
            queue.remove(row)
        assert queue.unreadable() == [] and queue.count() == 1


# --- batches and group commit ----------------------------------------------------------------


def test_put_many_stores_a_batch_in_one_commit_in_order(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        before = queue.commits
        rows = queue.put_many([record(n) for n in range(1, 101)])
        assert queue.commits == before + 1
        assert rows == sorted(rows) and len(set(rows)) == 100
        assert [s.record for s in queue.pending()] == [record(n) for n in range(1, 101)]
        assert queue.put_many([]) == [] and queue.commits == before + 1
        queue.remove_many(rows[:50] + [10**9])  # an id that is not there is ignored
        assert [s.row_id for s in queue.pending()] == rows[50:]


def test_put_many_refuses_a_non_record_and_stores_nothing(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        with pytest.raises(InvalidParameter, match="OutgoingRecord"):
            queue.put_many([record(1), b"not a record"])  # type: ignore[list-item]
        assert queue.count() == 0


def _hold_while_threads_queue(queue: OutgoingQueue, puts: list[list[OutgoingRecord]],
                              ) -> tuple[list[list[int]], list[BaseException]]:
    """Hold the connection (as a commit in progress does) while every thread queues its put,
    then let them go: returns each thread's row ids and the errors raised."""
    results: list[list[int]] = [[] for _ in puts]
    errors: list[BaseException] = []

    def put(index: int) -> None:
        try:
            results[index] = queue.put_many(puts[index])
        except BaseException as exc:  # noqa: BLE001 - collected for the test
            errors.append(exc)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(len(puts))]
    with queue._lock:
        for thread in threads:
            thread.start()
        while len(queue._waiting) < len(puts):  # every put has queued itself
            time.sleep(0.001)
    for thread in threads:
        thread.join()
    return results, errors


def test_concurrent_puts_of_several_threads_share_one_commit(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        before = queue.commits
        puts = [[record(10 * t + n) for n in range(3)] for t in range(8)]
        results, errors = _hold_while_threads_queue(queue, puts)
        assert errors == []
        assert queue.commits == before + 1  # one transaction, one fsync, for 8 callers
        assert all(rows == sorted(rows) and len(rows) == 3 for rows in results)
        assert len({row for rows in results for row in rows}) == 24
        stored = {s.row_id: s.record for s in queue.pending()}
        for rows, records in zip(results, puts):
            assert [stored[row] for row in rows] == records


def test_a_failed_group_commit_fails_every_caller_and_stores_none_of_them(db_path: Path) -> None:
    with OutgoingQueue(db_path) as queue:
        queue.put(record(1))
        conn = _cap_at_current_size(queue)
        puts = [[record(2)], [record(3, value=b"x" * 1_000_000)], [record(4)]]
        results, errors = _hold_while_threads_queue(queue, puts)
        assert len(errors) == 3 and all("full" in str(e) for e in errors)
        assert [s.record for s in queue.pending()] == [record(1)]
        conn.execute("PRAGMA max_page_count = 1073741823")
        assert queue.put(record(5)) > 0  # the next commit works
