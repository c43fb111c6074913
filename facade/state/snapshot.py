r"""Queue snapshots: a queue's state written to a compacted topic, so a handle opens from it.

Every process derives a queue's state (:class:`facade.state.queuestate.QueueState`) from the queue's
data and receipts logs alone, so the state after given log prefixes is the same in every
process. A snapshot (``schemas/queue_snapshot.avsc``) is that state plus the offsets it covers,
written by any handle to ``kmq.<qm>.system.snapshots`` under the key of the queue's data topic
(Kafka keeps the latest record per key). A handle opens from the latest valid snapshot and reads
the logs from its offsets on instead of from offset 0; concurrent writers cannot disagree, they
only write snapshots of different prefixes. A record that does not decode, or describes
another queue or offsets the topics do not hold, is skipped and the handle falls back to an
older snapshot or the log (see ``docs/design.md``, "Bounded state").

Dedupe keys (``guid\seq``, thousands per snapshot) are written as runs of consecutive sequence
numbers with their offsets as differences, one to two bytes per key.
"""

from __future__ import annotations

import time
from datetime import datetime

from facade.model.avro import DecodeFailure, family
from facade.errors import EnvelopeError
from facade.state.queuestate import IndexEntry, StateSnapshot
from facade.model.topics import QueueTopics

__all__ = ["QueueSnapshotRecord", "decode_snapshot", "encode_snapshot"]

_SCHEMA = family("queue_snapshot.avsc")


class QueueSnapshotRecord:
    """A decoded snapshot record: which queue it describes and the state.

    Attributes:
        topics (QueueTopics): the queue's data and receipts topics.
        state (StateSnapshot): the state and the offsets it covers.
        writer (str): who wrote it (diagnostics).
        time_ms (int): when, epoch ms (diagnostics).
    """

    __slots__ = ("state", "time_ms", "topics", "writer")

    def __init__(self, topics: QueueTopics, state: StateSnapshot, writer: str = "",
                 time_ms: int | None = None):
        self.topics = topics
        self.state = state
        self.writer = writer
        self.time_ms = int(time.time() * 1000) if time_ms is None else time_ms


def encode_snapshot(record: QueueSnapshotRecord) -> bytes:
    """Encode a snapshot as the value of a snapshot-topic record (key: the data topic).

    Args:
        record (QueueSnapshotRecord): the snapshot.

    Returns:
        bytes: the Avro single-object encoding of ``kmq.QueueSnapshot``.
    """
    state = record.state
    return _SCHEMA.encode({
        "data_topic": record.topics.data,
        "receipts_topic": record.topics.receipts,
        "data_start": state.data_start,
        "data_offset": state.data_offset,
        "receipts_offset": state.receipts_offset,
        "dedupe_window": state.dedupe_window,
        "purge_floor": state.purge_floor,
        "codes_base": state.codes_base,
        "codes": state.codes,
        "entries": [_entry_record(e) for e in state.entries],
        "abort_counts": [{"offset": o, "count": n} for o, n in state.abort_counts],
        "dedupe_runs": [{"prefix": p, "suffix": x, "first_seq": f, "offsets": list(d)}
                        for p, x, f, d in state.dedupe],
        "lock_ids": list(state.lock_ids),
        "writer": record.writer,
        "time": record.time_ms,
    })


def decode_snapshot(value: bytes | None, *, topic: str | None = None,
                    partition: int | None = None, offset: int | None = None) -> QueueSnapshotRecord:
    """Decode the value of a snapshot-topic record.

    The state is not checked for consistency here; :meth:`QueueState.from_snapshot` does that.

    Args:
        value (bytes | None): the record value.
        topic (str | None), partition (int | None), offset (int | None): where the record
            is, copied into the error.

    Returns:
        QueueSnapshotRecord: the snapshot.

    Raises:
        EnvelopeError: not a valid ``kmq.QueueSnapshot`` (wrong marker, unknown writer schema,
            malformed Avro, a topic name kmq would not use). Nothing else escapes.
    """
    try:
        r = _SCHEMA.decode(value)
        topics = QueueTopics(r["data_topic"], r["receipts_topic"])
        state = StateSnapshot(
            data_start=r["data_start"], data_offset=r["data_offset"],
            receipts_offset=r["receipts_offset"], dedupe_window=r["dedupe_window"],
            purge_floor=r["purge_floor"], codes_base=r["codes_base"], codes=bytes(r["codes"]),
            entries=tuple(_entry(e) for e in r["entries"]),
            abort_counts=tuple((a["offset"], a["count"]) for a in r["abort_counts"]),
            dedupe=tuple((d["prefix"], d["suffix"], d["first_seq"], tuple(d["offsets"]))
                         for d in r["dedupe_runs"]),
            lock_ids=tuple(r["lock_ids"]))
        return QueueSnapshotRecord(topics, state, r["writer"], int(_millis(r["time"])))
    except DecodeFailure as exc:
        raise EnvelopeError(f"not a queue snapshot: {exc}", topic=topic, partition=partition,
                            offset=offset) from None
    except Exception as exc:  # noqa: BLE001 - any invalid field (bad name, wrong type) says the same
        raise EnvelopeError(f"not a valid queue snapshot: {type(exc).__name__}: {exc}",
                            topic=topic, partition=partition, offset=offset) from None


def _millis(value: datetime | int) -> int:
    """fastavro reads a timestamp-millis as a datetime."""
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else int(value)


def _entry_record(entry: IndexEntry) -> dict:
    return {"offset": entry.offset, "priority": entry.priority, "message_id": entry.message_id,
            "correlation_id": entry.correlation_id, "expires_ms": entry.expires_ms,
            "not_before_ms": entry.not_before_ms, "size": entry.size,
            "dedupe_key": None if entry.dedupe_key == entry.message_id else entry.dedupe_key,
            "poison": entry.poison}


def _entry(r: dict) -> IndexEntry:
    key = r["dedupe_key"]
    return IndexEntry(r["offset"], r["priority"], r["message_id"], r["correlation_id"],
                      r["expires_ms"], r["not_before_ms"], r["size"],
                      r["message_id"] if key is None else key, r["poison"])
