r"""Retention of a queue's receipts: which receipts may be deleted, and when.

A queue's receipts are its verdicts (who received what). A process rebuilds a queue's state
from a snapshot plus the receipts after it, so receipts below offset ``R`` may be deleted with
Kafka's DeleteRecords only when two things hold (docs/design.md, "Retention"):

1. **A snapshot covering at least R always exists**, even after the compacted snapshot topic
   drops all but the latest record per key, and even if a process that lags behind writes an
   older snapshot later. Snapshots are therefore keyed per *bucket* of receipts offsets,
   ``<data topic>@<receipts offset // RECEIPTS_RETENTION_STEP>``: a later record under the
   same key is a snapshot of the same bucket (it covers at least the bucket's start), and a
   lagging writer's snapshot of an older bucket has another key and replaces nothing. Receipts
   are deleted only below the start of the *second-newest* bucket whose snapshot this process
   saw acknowledged (or read when it opened): two keys hold covering snapshots, so one record
   that does not decode (garbage written by something else than kmq) cannot lock the queue out.
2. **They are older than RECEIPTS_RETENTION_LAG.** A handle that fell behind by less than that
   still reads every receipt it has not applied; one that fell behind by more opens again from
   the newest snapshot, or stops with a clear error if it held something
   (``QueueView._reopen``).

Buckets below the second-newest are deleted from the snapshot topic with tombstones once the
receipts they covered are gone, so compaction keeps about two snapshots per queue.
"""

from __future__ import annotations

from collections import deque

__all__ = [
    "RECEIPTS_RETENTION_LAG",
    "RECEIPTS_RETENTION_STEP",
    "ReceiptsRetention",
    "snapshot_bucket",
    "snapshot_key",
]

#: Receipts offsets per snapshot bucket; receipts are deleted in steps of this many.
RECEIPTS_RETENTION_STEP = 50_000
#: Seconds a receipt is kept at least (by its Kafka timestamp), whatever the snapshots cover.
RECEIPTS_RETENTION_LAG = 3600.0


def snapshot_key(data_topic: str, receipts_offset: int, step: int | None = None) -> bytes:
    """The snapshot-topic key of a snapshot of ``data_topic`` covering receipts below
    ``receipts_offset``: ``<data topic>@<bucket>`` (``@`` cannot occur in a topic name).

    Args:
        data_topic (str): the queue's data topic.
        receipts_offset (int): the receipts offset the snapshot covers.
        step (int | None): receipts offsets per bucket; None: :data:`RECEIPTS_RETENTION_STEP`.

    Returns:
        bytes: the record key (UTF-8).
    """
    return f"{data_topic}@{receipts_offset // (step or RECEIPTS_RETENTION_STEP)}".encode()


def snapshot_bucket(key: bytes | None, data_topic: str) -> int | None:
    """The bucket a snapshot-topic key names for ``data_topic``, -1 for the plain key written
    before buckets (``<data topic>``), None for a key of another queue or no valid key.

    Args:
        key (bytes | None): a snapshot-topic record key.
        data_topic (str): the queue's data topic.
    """
    if key is None:
        return None
    plain = data_topic.encode()
    if key == plain:
        return -1
    prefix = plain + b"@"
    if not key.startswith(prefix):
        return None
    digits = key[len(prefix):]
    return int(digits) if digits.isdigit() else None


class ReceiptsRetention:
    """What one queue view knows that bounds the receipts it may delete.

    Args:
        data_topic (str): the queue's data topic (names the snapshot keys).
        step (int | None): receipts offsets per bucket; None: :data:`RECEIPTS_RETENTION_STEP`
            at construction time.
        lag (float | None): seconds a receipt is kept at least; None:
            :data:`RECEIPTS_RETENTION_LAG` at construction time.
    """

    def __init__(self, data_topic: str, step: int | None = None, lag: float | None = None):
        self.data_topic = data_topic
        self.step = step or RECEIPTS_RETENTION_STEP
        self.lag = RECEIPTS_RETENTION_LAG if lag is None else lag
        #: Buckets with an acknowledged (or read) valid snapshot.
        self._buckets: set[int] = set()
        #: (offset, timestamp in seconds) of the first receipt seen in each bucket, oldest first.
        self._marks: deque[tuple[int, float]] = deque()
        #: Receipts below this offset were deleted (by this view, as far as it knows).
        self.deleted_below = 0
        self._tombstoned: set[int] = set()

    def key(self, receipts_offset: int) -> bytes:
        """The snapshot key for a snapshot covering receipts below ``receipts_offset``."""
        return snapshot_key(self.data_topic, receipts_offset, self.step)

    def bucket(self, key: bytes | None) -> int | None:
        """The bucket ``key`` names for this queue (-1: the plain key), or None."""
        return snapshot_bucket(key, self.data_topic)

    def saw_snapshot(self, receipts_offset: int) -> None:
        """A valid snapshot covering receipts below ``receipts_offset`` exists: it was
        acknowledged by the broker (acks=all) or read when the view opened."""
        self._buckets.add(receipts_offset // self.step)

    def saw_receipt(self, offset: int, timestamp_ms: int) -> None:
        """The view read the receipt at ``offset`` with Kafka timestamp ``timestamp_ms``."""
        bucket = offset // self.step
        if not self._marks or bucket > self._marks[-1][0] // self.step:
            self._marks.append((offset, timestamp_ms / 1000.0))

    def floor(self, now: float) -> int:
        """The receipts offset below which receipts may be deleted now (0: none).

        Args:
            now (float): time.time(), seconds.
        """
        buckets = sorted(self._buckets)
        if len(buckets) < 2:
            return 0
        covered = buckets[-2] * self.step
        aged = 0
        for offset, written in self._marks:
            if offset > covered or written > now - self.lag:
                break
            aged = offset
        return min(covered, aged)

    def deleted(self, below: int) -> None:
        """Receipts below ``below`` were deleted; forget what no longer bounds anything."""
        self.deleted_below = max(self.deleted_below, below)
        while len(self._marks) > 1 and self._marks[1][0] <= self.deleted_below:
            self._marks.popleft()

    def doomed_keys(self) -> list[bytes]:
        """Snapshot keys to delete with a tombstone: the plain key and every bucket below the
        second-newest, once their receipts are deleted (each is returned once)."""
        buckets = sorted(self._buckets)
        if len(buckets) < 2 or self.deleted_below == 0:
            return []
        keep = buckets[-2]
        doomed = [b for b in [-1, *buckets] if b < keep and b not in self._tombstoned
                  and (b + 1) * self.step <= self.deleted_below]
        self._tombstoned.update(doomed)
        self._buckets.difference_update(doomed)
        return [self.data_topic.encode() if b == -1 else snapshot_key(
            self.data_topic, b * self.step, self.step) for b in doomed]
