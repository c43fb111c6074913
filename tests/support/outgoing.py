"""The durable outgoing store as recovery finds it after a crash: records of dead processes, and
rows damaged on disk or written by something other than kmq."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["damage_outgoing_store", "dead_pid"]


def dead_pid() -> int:
    """The id of a process that has exited (an outgoing record's owner that is gone)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def damage_outgoing_store(path: Path, topic: str) -> list[int]:
    """Write rows into the store at ``path`` behind its back that recovery cannot decode, each
    owned by a dead process (or naming no usable owner); returns their row ids.

    The rows: a value that is no envelope, headers that are not JSON, a value stored as text, a
    topic that is not UTF-8, a key of the wrong type with headers that are not base64 and a
    deadline that is text, and purposes naming pid 0 or a non-ASCII digit (once taken for a
    live owner, or a crash of recovery).
    """
    now = int(time.time() * 1000)
    owner = f"message:{dead_pid()}"
    columns = "topic, key, value, headers, message_id, deadline_ms, purpose, created_ms"
    rows = [  # (SQL of the topic, then topic, key, value, headers, message id, deadline, purpose)
        ("?", topic, None, b"\xc3\x01 not an envelope", "[]", "x", now + 600_000, owner),
        ("?", topic, None, b"\xc3\x01", "{not json", "x", now + 600_000, owner),
        ("?", topic, None, "a text value", "[]", "x", now + 600_000, owner),
        ("CAST(? AS TEXT)", b"\xff\xfe" + topic.encode(), None, b"v", "[]", "x", None, owner),
        ("?", topic, 42, b"v", '[["kmq.id", "!!"]]', "x", "soon", owner),
        ("?", topic, None, b"\xc3\x01 pid 0", "[]", "x", None, "message:0"),
        ("?", topic, None, b"\xc3\x01 pid 2", "[]", "x", None, "message:\u00b2"),
    ]
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return [conn.execute(f"INSERT INTO outgoing ({columns}) VALUES "
                             f"({topic_sql}, ?, ?, ?, ?, ?, ?, ?)", (*row, now)).lastrowid
                for topic_sql, *row in rows]
    finally:
        conn.close()
