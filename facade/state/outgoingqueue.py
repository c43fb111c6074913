"""The durable local outgoing queue of recoverable messages.

MSMQ keeps a recoverable message in the sending computer's outgoing queue until the destination
acknowledges it, so a crash of the sender loses nothing. kmq does the same: before producing a
recoverable record to Kafka, the sender puts it here; when the broker acknowledges the write
(``acks=all``), the sender removes it. After a crash, whatever is still pending is produced again,
and queue views drop the duplicate message id.

The store is one SQLite file (normally in ``KMQ_HOME``) in WAL mode with ``synchronous=FULL``:
every record :meth:`OutgoingQueue.put` or :meth:`OutgoingQueue.put_many` stores is committed and
fsync'd before the call returns, so it survives a process crash and a power loss.

**Group commit.** Puts do not pay one fsync each. A batch (``put_many``) is one transaction, and
puts from several threads of one process that arrive while a commit is under way are queued and
written together by the next commit: one ``BEGIN IMMEDIATE ... COMMIT`` and one fsync for all of
them (the first waiting thread does the work, the others wait for its verdict). Every caller
still returns only after its own records are on disk, and a failed commit fails every caller
whose records were in it, with nothing of theirs stored. Removals need no durability (a removed
record that comes back after a crash is resent, and receivers drop the duplicate id), so the
sender removes acknowledged records in batches with :meth:`OutgoingQueue.remove_many`. Several processes may open the
same file; SQLite's file locks serialise their writes, and row ids grow in commit order, so
:meth:`OutgoingQueue.pending` lists records in the order they were put, across processes.

Nothing here talks to Kafka: the sender and the recovery code in the queue manager do.
"""

from __future__ import annotations

import base64
import functools
import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from facade.errors import EnvelopeError, InvalidParameter, MessageQueueError, TransientQueueError
from facade.model.topics import is_topic_name

__all__ = ["BUSY_TIMEOUT_S", "OutgoingQueue", "OutgoingRecord", "StoredRecord", "decode_row",
           "outgoing_queue_path"]

#: How long (seconds) an operation waits for another process's lock on the file before failing.
BUSY_TIMEOUT_S = 10.0

# Bumped when the table layout changes, so an older kmq refuses a file it cannot read.
_SCHEMA_VERSION = 1

# AUTOINCREMENT never reuses a row id, so a late remove() of an already resent and removed
# record can never delete a newer record that happens to get the same id.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outgoing (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    topic       TEXT    NOT NULL,
    key         BLOB,
    value       BLOB    NOT NULL,
    headers     TEXT    NOT NULL,
    message_id  TEXT    NOT NULL,
    deadline_ms INTEGER,
    purpose     TEXT    NOT NULL,
    created_ms  INTEGER NOT NULL
)
"""

_COLUMNS = "topic, key, value, headers, message_id, deadline_ms, purpose, created_ms"
_INSERT = f"INSERT INTO outgoing ({_COLUMNS}) VALUES ({', '.join('?' * 8)})"

# SQLite primary result codes (the low byte of the extended code in sqlite_errorcode).
_SQLITE_PERM, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 3, 5, 6, 8
_SQLITE_IOERR, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 10, 11, 13, 14, 26

Headers = tuple[tuple[str, bytes], ...]


def outgoing_queue_path(home: Path, queue_manager: str) -> Path:
    """The outgoing queue file of a queue manager: ``<KMQ_HOME>/outgoing/<name>.sqlite``.

    Args:
        home (Path): the kmq home directory (``KmqConfig.home``).
        queue_manager (str): the queue manager's name.
    """
    return home / "outgoing" / f"{queue_manager}.sqlite"


@dataclass(frozen=True)
class OutgoingRecord:
    """One Kafka record waiting in the outgoing queue.

    Attributes:
        topic (str): the Kafka topic to produce to (a queue's data topic, a dead-letter queue,
            an admin queue).
        key (bytes | None): the Kafka record key, or None.
        value (bytes): the Kafka record value (the kmq envelope).
        headers (tuple[tuple[str, bytes], ...]): the Kafka record headers, in order; a list of
            pairs is accepted and stored as a tuple.
        message_id (str): the MSMQ message id, which queue views use to drop a resent duplicate.
        deadline_ms (int | None): epoch milliseconds by which the record must reach its topic
            (the message's time-to-reach-queue deadline); None for no limit.
        purpose (str): what the record is, so that recovery knows what to do at the deadline,
            e.g. ``"message"`` (dead-letter it and post a NACK), ``"deadletter"`` or
            ``"acknowledgment"``.
        created_ms (int): epoch milliseconds when the record was made.

    Raises:
        InvalidParameter: a field has the wrong type or is empty (``topic``, ``purpose``).
    """

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers
    message_id: str
    deadline_ms: int | None
    purpose: str
    created_ms: int

    def __post_init__(self) -> None:
        # Checked here, not by SQLite: it would store a str value as TEXT and hand back a str.
        _require(isinstance(self.topic, str) and self.topic, "topic", "a non-empty str")
        _require(self.key is None or isinstance(self.key, bytes), "key", "bytes or None")
        _require(isinstance(self.value, bytes), "value", "bytes")
        _require(isinstance(self.message_id, str), "message_id", "a str")
        _require(_is_int_or_none(self.deadline_ms), "deadline_ms", "an int (epoch ms) or None")
        _require(isinstance(self.purpose, str) and self.purpose, "purpose", "a non-empty str")
        _require(_is_int_or_none(self.created_ms) and self.created_ms is not None,
                 "created_ms", "an int (epoch ms)")
        object.__setattr__(self, "headers", _checked_headers(self.headers))


@dataclass
class _PendingPut:
    """One caller's batch waiting for a group commit, and its verdict."""

    rows: list[tuple[Any, ...]]
    row_ids: list[int] | None = None
    error: MessageQueueError | None = None


@dataclass(frozen=True)
class StoredRecord:
    """A record as kept in the outgoing queue.

    Attributes:
        row_id (int): the record's id in the store; pass it to :meth:`OutgoingQueue.remove` once
            the broker has acknowledged the record.
        record (OutgoingRecord): the record itself.
    """

    row_id: int
    record: OutgoingRecord


class OutgoingQueue:
    """The durable outgoing queue: a SQLite file of records not yet acknowledged by Kafka.

    Thread-safe: one connection is shared under a lock. Several processes may open the same file.
    A child made by ``fork`` must open its own ``OutgoingQueue``, not reuse the parent's.

    Args:
        path (Path): the SQLite file, e.g. ``$KMQ_HOME/outgoing.sqlite3``; it and its parent
            directories are created if missing.

    Raises:
        MessageQueueError: the directory cannot be created or written, the disk is full, or the
            file is not a kmq outgoing queue (corrupt, or written by a newer kmq). The message
            names the path and the hint the fix (free space, a writable ``KMQ_HOME``, moving a
            corrupt file aside). An existing file is never deleted or replaced.
        TransientQueueError: another process held the file locked for longer than
            :data:`BUSY_TIMEOUT_S`; retry.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        #: Group commit: batches waiting for the next commit, and whether one is under way.
        self._group = threading.Condition(threading.Lock())
        self._waiting: list[_PendingPut] = []
        self._committing = False
        #: Transactions that stored records (one fsync each), for tests and diagnostics.
        self.commits = 0
        _make_parent(self.path)
        try:
            # isolation_level=None: autocommit, so each statement is one committed transaction
            # and nothing stays uncommitted in an implicit transaction.
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise _translate(exc, self.path, "open") from exc
        try:
            _prepare(conn, self.path)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def put(self, record: OutgoingRecord) -> int:
        """Store ``record`` durably; when this returns, it survives a crash or power loss.

        Concurrent puts from several threads share one commit and one fsync (see the module
        docstring).

        Args:
            record (OutgoingRecord): the record to keep until the broker acknowledges it.

        Returns:
            int: the row id, for :meth:`remove`. Ids grow in the order records are put.

        Raises:
            MessageQueueError: the record could not be stored (disk full, file unwritable or
                corrupt; the hint says which). The record is not in the queue: do not send it as
                recoverable.
            TransientQueueError: another process held the file locked for longer than
                :data:`BUSY_TIMEOUT_S`.
        """
        return self.put_many([record])[0]

    def put_many(self, records: list[OutgoingRecord]) -> list[int]:
        """Store ``records`` durably in one transaction (all or none); one fsync for the batch,
        shared with the puts of other threads that wait at the same time.

        Args:
            records (list[OutgoingRecord]): the records, in the order they will be produced.

        Returns:
            list[int]: their row ids, in the same order and increasing.

        Raises:
            InvalidParameter: an element is not an :class:`OutgoingRecord`; nothing was stored.
            MessageQueueError: the batch could not be stored (disk full, file unwritable or
                corrupt; the hint says which). None of the records is in the queue.
            TransientQueueError: another process held the file locked for longer than
                :data:`BUSY_TIMEOUT_S`; none of the records is in the queue.
        """
        for record in records:
            if not isinstance(record, OutgoingRecord):
                raise InvalidParameter(
                    f"put() takes an OutgoingRecord, not {type(record).__name__}")
        return self._put_rows([(
            r.topic, r.key, r.value, _encode_headers(r.headers), r.message_id, r.deadline_ms,
            r.purpose, r.created_ms) for r in records])

    def put_copies(self, copies: Sequence[tuple[str, bytes | None, bytes,
                                                Sequence[tuple[str, bytes]], str, int]],
                   purpose: str, created_ms: int) -> list[int]:
        """Store message copies as :meth:`put_many` does, without building and checking an
        :class:`OutgoingRecord` for each: for the sender's own copies, whose key, value and
        headers come from :mod:`facade.model.envelope` (bytes and ``(str, bytes)`` pairs, as
        ``OutgoingRecord`` requires; a wrong type makes SQLite store a value that
        :func:`decode_row` reports as unreadable, never one resent as something else).

        Args:
            copies (Sequence[tuple]): ``(topic, key, value, headers, message_id, deadline_ms)``
                per copy, in the order they will be produced; ``deadline_ms`` in epoch ms.
            purpose (str): what the records are (``OutgoingRecord.purpose``), non-empty.
            created_ms (int): epoch milliseconds when they were made.

        Returns:
            list[int]: their row ids, in the same order and increasing.

        Raises:
            MessageQueueError, TransientQueueError: as :meth:`put_many`; none is stored.
        """
        _require(isinstance(purpose, str) and purpose, "purpose", "a non-empty str")
        return self._put_rows([(topic, key, value, _encode_headers(headers), message_id,
                                deadline_ms, purpose, created_ms)
                               for topic, key, value, headers, message_id, deadline_ms in copies])

    def _put_rows(self, rows: list[tuple[Any, ...]]) -> list[int]:
        """Store rows in the next group commit; see :meth:`put_many`."""
        if not rows:
            return []
        mine = _PendingPut(rows)
        with self._group:
            self._waiting.append(mine)
            while self._committing and mine.row_ids is None and mine.error is None:
                self._group.wait()
            if mine.row_ids is None and mine.error is None:
                self._committing = True  # this thread commits for everyone waiting now
                leader = True
            else:
                leader = False
        if leader:
            self._commit_waiting()
        if mine.error is not None:
            raise mine.error
        assert mine.row_ids is not None
        return mine.row_ids

    def _commit_waiting(self) -> None:
        """Write every waiting batch in one transaction and hand each caller its verdict."""
        batches: list[_PendingPut] = []
        error: MessageQueueError | None = None
        try:
            with self._connection("store records in") as conn:
                # Taken after the connection lock, so puts queued meanwhile join this commit.
                with self._group:
                    batches, self._waiting = self._waiting, []
                results: list[list[int]] = []
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for batch in batches:
                        results.append([int(conn.execute(_INSERT, row).lastrowid)  # type: ignore[arg-type]
                                        for row in batch.rows])
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                self.commits += 1
            for batch, ids in zip(batches, results):
                batch.row_ids = ids
        except MessageQueueError as exc:
            error = exc
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller below
            error = MessageQueueError(f"cannot store records in the outgoing queue {self.path}: "
                                      f"{exc}", hint="check the file, or set KMQ_HOME to "
                                      "another directory")
            error.__cause__ = exc
        finally:
            with self._group:
                if not batches:  # the connection failed before the batches were taken
                    batches, self._waiting = self._waiting, []
                for batch in batches:
                    if batch.row_ids is None:
                        batch.error = error or MessageQueueError(
                            f"the outgoing queue {self.path} did not store the records")
                self._committing = False
                self._group.notify_all()

    def remove(self, row_id: int) -> None:
        """Remove a record, once the broker has acknowledged it (or recovery gave up on it).

        Removing a row id that is not there (another process already resent and removed it) is
        not an error.

        Args:
            row_id (int): the id :meth:`put` or :meth:`pending` returned.

        Raises:
            MessageQueueError: the file could not be written (the hint says why).
            TransientQueueError: the file stayed locked for longer than :data:`BUSY_TIMEOUT_S`.
        """
        with self._connection("remove a record from") as conn:
            conn.execute("DELETE FROM outgoing WHERE id = ?", (row_id,))

    def remove_many(self, row_ids: list[int]) -> None:
        """Remove several records in one transaction (the sender's acknowledged records).

        Args:
            row_ids (list[int]): ids :meth:`put` or :meth:`pending` returned; ids that are not
                there are ignored.

        Raises:
            MessageQueueError: the file could not be written (the hint says why); nothing was
                removed.
            TransientQueueError: the file stayed locked for longer than :data:`BUSY_TIMEOUT_S`.
        """
        if not row_ids:
            return
        with self._connection("remove records from") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("DELETE FROM outgoing WHERE id = ?", [(r,) for r in row_ids])
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def pending(self, limit: int | None = None) -> list[StoredRecord]:
        """The records still waiting, oldest first (in the order they were put).

        A row that cannot be read back as a record (:func:`decode_row`) is left out:
        :meth:`unreadable` lists those.

        Args:
            limit (int | None): at most this many rows (>= 0) are read; None for all of them.

        Returns:
            list[StoredRecord]: the records with their row ids.

        Raises:
            InvalidParameter: ``limit`` is negative.
            MessageQueueError: the file could not be read (the hint says why).
            TransientQueueError: the file stayed locked for longer than :data:`BUSY_TIMEOUT_S`.
        """
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidParameter(f"limit must be None or an int >= 0, not {limit!r}")
        return [stored for stored in map(_readable, self._rows(limit)) if stored is not None]

    def unreadable(self) -> list[tuple[int, EnvelopeError]]:
        """The rows that cannot be read back as a record (damaged on disk, or written by
        something other than kmq), oldest first, each with the error :func:`decode_row` gave
        (its ``topic`` and ``raw`` value set when they could be read). :meth:`remove` one once
        it is dealt with.

        Raises:
            MessageQueueError: the file could not be read (the hint says why).
            TransientQueueError: the file stayed locked for longer than :data:`BUSY_TIMEOUT_S`.
        """
        found = []
        for row in self._rows():
            try:
                decode_row(row)
            except EnvelopeError as exc:
                found.append((row[0], exc))
        return found

    def _rows(self, limit: int | None = None) -> list[Any]:
        """The rows (``id`` then the columns), oldest first; SQLite reads LIMIT -1 as none."""
        with self._connection("read") as conn:
            return conn.execute(f"SELECT id, {_COLUMNS} FROM outgoing ORDER BY id LIMIT ?",
                                (-1 if limit is None else limit,)).fetchall()

    def count(self) -> int:
        """How many records are waiting.

        Returns:
            int: the number of records in the outgoing queue.

        Raises:
            MessageQueueError: the file could not be read (the hint says why).
        """
        with self._connection("count the records of") as conn:
            return int(conn.execute("SELECT COUNT(*) FROM outgoing").fetchone()[0])

    def close(self) -> None:
        """Close the file. Everything put is already on disk; calling close again does nothing."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> OutgoingQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"OutgoingQueue({str(self.path)!r}, {state})"

    def _connection(self, action: str) -> _LockedConnection:
        return _LockedConnection(self, action)


class _LockedConnection:
    """Holds the queue's lock around one operation and turns SQLite errors into kmq errors."""

    def __init__(self, queue: OutgoingQueue, action: str):
        self._queue = queue
        self._action = action

    def __enter__(self) -> sqlite3.Connection:
        self._queue._lock.acquire()
        conn = self._queue._conn
        if conn is None:
            self._queue._lock.release()
            raise MessageQueueError(
                f"the outgoing queue {self._queue.path} is closed",
                hint="open a new OutgoingQueue",
            )
        return conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._queue._lock.release()
        if isinstance(exc, sqlite3.Error):
            raise _translate(exc, self._queue.path, self._action) from exc


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise MessageQueueError(
            f"cannot create the directory of the outgoing queue {path}: "
            f"{_blocking_file(path.parent) or exc.filename or path.parent} exists and is not a "
            "directory",
            hint="set KMQ_HOME to a writable directory",
        ) from exc
    except OSError as exc:
        raise MessageQueueError(
            f"cannot create the directory of the outgoing queue {path}: {exc.strerror or exc}",
            hint="set KMQ_HOME to a writable directory, or free space on its disk",
        ) from exc
    if path.is_dir():
        raise MessageQueueError(
            f"the outgoing queue {path} is a directory, not a file",
            hint="pass a file path such as $KMQ_HOME/outgoing.sqlite3, or set KMQ_HOME to "
            "another directory",
        )


def _blocking_file(directory: Path) -> Path | None:
    """The nearest existing ancestor of ``directory`` (itself included) that is not a
    directory, which is what stops ``mkdir`` (mkdir's error names only the leaf)."""
    for candidate in (directory, *directory.parents):
        if candidate.exists() or candidate.is_symlink():
            return None if candidate.is_dir() else candidate
    return None


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Set the durability pragmas and create or check the table."""
    # Text that is not UTF-8 (a damaged row) must not fail the whole query: decode_row refuses
    # the one row whose text is not (surrogate escapes do not encode back).
    conn.text_factory = _text
    try:
        # Reads the file header first, so a file that is not SQLite fails here, before any write.
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        # FULL: in WAL mode, fsync the log at every commit; NORMAL would lose the latest puts on
        # a power loss. fullfsync asks macOS to flush the drive's cache too (ignored elsewhere).
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA fullfsync = ON")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_SCHEMA)
            conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise _translate(exc, path, "open") from exc
    if str(mode).lower() != "wal":
        raise MessageQueueError(
            f"the outgoing queue {path} cannot use SQLite's write-ahead log (journal mode {mode})",
            hint="put KMQ_HOME on a local file system; SQLite's WAL does not work over NFS or SMB",
        )
    if version not in (0, _SCHEMA_VERSION):
        raise MessageQueueError(
            f"the outgoing queue {path} has layout version {version}; this kmq reads version "
            f"{_SCHEMA_VERSION}",
            hint="use the kmq version that wrote the file, or set KMQ_HOME to another directory",
        )


def _translate(exc: sqlite3.Error, path: Path, action: str) -> MessageQueueError:
    """The kmq error, naming the file and the fix, for a SQLite error."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    what = f"cannot {action} the outgoing queue {path}: {exc}"
    if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return TransientQueueError(
            what, hint=f"another process held the file locked for {BUSY_TIMEOUT_S:g} s; retry"
        )
    if code == _SQLITE_FULL:
        return MessageQueueError(what, hint=f"the disk of {path.parent} is full; free space")
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return MessageQueueError(
            what,
            hint="the file is not a kmq outgoing queue or is damaged; it was left untouched. It "
            "may hold unsent recoverable messages: move it aside and keep it, or set KMQ_HOME to "
            "another directory",
        )
    if code in (_SQLITE_PERM, _SQLITE_READONLY, _SQLITE_CANTOPEN, _SQLITE_IOERR):
        return MessageQueueError(
            what,
            hint=f"make {path.parent} and the file writable, or set KMQ_HOME to a writable "
            "directory on a local disk",
        )
    return MessageQueueError(what, hint="check the file, or set KMQ_HOME to another directory")


def _require(ok: object, field_name: str, expected: str) -> None:
    if not ok:
        raise InvalidParameter(f"OutgoingRecord.{field_name} must be {expected}")


def _is_int_or_none(value: object) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _checked_headers(headers: Iterable[tuple[str, bytes]]) -> Headers:
    try:
        pairs = tuple((name, value) for name, value in headers)
    except (TypeError, ValueError):
        raise InvalidParameter("OutgoingRecord.headers must be (str, bytes) pairs") from None
    for name, value in pairs:
        _require(isinstance(name, str) and isinstance(value, bytes), "headers",
                 f"(str, bytes) pairs, not ({name!r}, {type(value).__name__})")
    return pairs


def _encode_headers(headers: Iterable[tuple[str, bytes]]) -> str:
    # JSON of [name, base64 value] pairs: keeps order and duplicate names, as Kafka headers do.
    # Written by hand (the same text json.dumps writes): base64 needs no JSON escaping, and
    # the few distinct names are JSON-encoded once each.
    pairs = ", ".join(f'[{_json_text(name)}, "{base64.b64encode(value).decode("ascii")}"]'
                     for name, value in headers)
    return f"[{pairs}]"


@functools.lru_cache(maxsize=256)
def _json_text(name: str) -> str:
    return json.dumps(name)


def _decode_headers(text: str) -> Headers:
    return tuple((name, base64.b64decode(value, validate=True)) for name, value in json.loads(text))


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def decode_row(row: Sequence[Any]) -> StoredRecord:
    """Read one row of the store (``id`` and the columns :meth:`OutgoingQueue.put` writes, in
    its order) back as a record. Pure.

    Args:
        row (Sequence[Any]): the row as SQLite returns it.

    Returns:
        StoredRecord: the record and its row id.

    Raises:
        EnvelopeError: the row is not one kmq wrote, and nothing else: not 9 columns, a column
            of the wrong type, a topic that is no legal Kafka topic name, text that is not
            UTF-8, headers that are not JSON ``[name, base64]`` pairs. ``topic`` and ``raw``
            (the value) are set when they could be read, so the record can be dead-lettered.
    """
    try:
        row_id, topic, key, value, headers, message_id, deadline_ms, purpose, created_ms = row
    except (TypeError, ValueError):
        raise EnvelopeError(f"an outgoing record row has {_length(row)} columns, not 9") from None
    where: dict[str, Any] = dict(topic=topic if is_topic_name(topic) else None,
                 raw=value if isinstance(value, bytes) else None)
    try:
        if not isinstance(row_id, int) or not is_topic_name(topic):
            raise InvalidParameter(f"row id {row_id!r:.40} or topic {topic!r:.300} is invalid")
        for text in (headers, message_id, purpose):
            if isinstance(text, str):
                text.encode("utf-8")  # a surrogate escape (text that was not UTF-8) fails
        record = OutgoingRecord(topic, key, value, _decode_headers(headers), message_id,
                                deadline_ms, purpose, created_ms)
    except Exception as exc:  # noqa: BLE001 - the contract is: only EnvelopeError escapes
        raise EnvelopeError(f"outgoing row {row_id!r:.40} is damaged "
                            f"({type(exc).__name__}: {exc!s:.300})", **where) from exc
    return StoredRecord(row_id, record)


def _readable(row: Sequence[Any]) -> StoredRecord | None:
    try:
        return decode_row(row)
    except EnvelopeError:
        return None


def _length(row: object) -> str:
    try:
        return str(len(row))  # type: ignore[arg-type]
    except TypeError:
        return "no"
