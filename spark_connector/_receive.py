"""Receive mode: removing the messages a committed micro-batch processed, on the driver.

A batch of a receive-mode stream covers, per queue topic, the offsets ``[from, to)`` planned at
an instant ``at_ms`` (both kept in Spark's offset log, see :mod:`spark_connector.source`). The
batch delivered the records of that range that were in the queue when it read them and, for
messages, visible at ``at_ms`` (not before their not-before time, not past their
time-to-be-received). Removal is therefore decidable from the range alone, after any crash: a
message still pending now and visible at ``at_ms`` was delivered (pending-ness only ever goes
from pending to removed).

Removal does what a facade receive does, in bulk:

1. one RECEIVE receipt per chunk of offsets (the first receipt naming an offset wins, so a
   message another receiver took meanwhile is lost to us, and a repeated removal after a restart
   finds everything gone and writes nothing);
2. for each offset won, the queue-journal copy and the ACK_RECEIVE (when asked for), and for a
   record whose value turns out not to be an envelope, a dead-letter copy;
3. :meth:`facade.queues.queue.MessageQueue.expire_due`: TTBR-expired messages go to the dead-letter
   queue with NACK_RECEIVE_TIMEOUT, poison records (invalid headers) with
   NACK_RECEIVE_REJECTED.

Each removal first checks, as the facade's receive does, that the query's principal (the
driver's, carried by the resolution) still has the receive right on every queue: a query whose
right was revoked fails before it writes a receipt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from facade.errors import EnvelopeError
from facade.kafka.librdkafka import KafkaRecord
from facade.state.queueview import QueueView
from facade.model.receipts import ReceiptAction
from facade.queues.destination import incarnation_guard
from facade.queues.receiving import dead_letter_unreceivable, message_of, write_receive_outputs
from spark_connector.resolve import DriverQueues, Operation, QueueTarget, Resolution

__all__ = ["BatchRemover", "RemovalStats"]

log = logging.getLogger("kmq.spark")

#: Offsets named by one RECEIVE receipt (keeps receipts far below Kafka's record size limit).
CLAIM_CHUNK = 500


@dataclass
class RemovalStats:
    """What one removal did.

    Attributes:
        received (int): messages this removal took out of the queue (RECEIVE won).
        taken_by_others (int): delivered messages another receiver removed first (they were
            processed by the batch and by that receiver: at-least-once towards concurrent
            receivers).
        expired (int): messages and poison records :meth:`MessageQueue.expire_due` moved to
            the dead-letter queue.
        per_topic (dict[str, int]): received, per data topic.
    """

    received: int = 0
    taken_by_others: int = 0
    expired: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)


class BatchRemover:
    """Removes committed batches' messages through a queue manager opened on the driver.

    Opened lazily (the first removal), with the configuration and principal the query was
    resolved with (:class:`~spark_connector.resolve.DriverQueues`), and kept for the life of
    the query.

    Args:
        resolution (Resolution): the query's queues, queue manager and principal.
        queues (DriverQueues | None): the query's driver-side queues, shared with its other
            checks (closed by their owner); None opens them here (closed by :meth:`close`).
    """

    def __init__(self, resolution: Resolution, queues: DriverQueues | None = None):
        self.resolution = resolution
        self._owned = queues is None
        self.queues = queues if queues is not None else DriverQueues(resolution)
        self._views: dict[str, QueueView] = {}
        self._queues: dict[str, Any] = {}

    def remove(self, start: dict[str, int], end: dict[str, int], at_ms: int) -> RemovalStats:
        """Remove the messages a batch ``[start, end)`` planned at ``at_ms`` delivered.

        Args:
            start (dict[str, int]): first offset per data topic.
            end (dict[str, int]): offset after the last, per data topic.
            at_ms (int): the batch's planning instant, epoch milliseconds.

        Returns:
            RemovalStats: counts.

        Raises:
            AccessDenied: the principal lacks the receive right (DELETE_MESSAGE, or
                DELETE_JOURNAL_MESSAGE on a journal) on a queue now: nothing was removed.
            BrokerUnavailable: a receipt or copy was not acknowledged in time (Spark fails the
                query; the removal is redone on restart and takes what is still pending).
            QueueNotFound: a queue was deleted or recreated since the query started.
        """
        self.queues.require(Operation.RECEIVE)
        stats = RemovalStats()
        for target in self.resolution.targets:
            first, stop = start.get(target.data_topic, 0), end.get(target.data_topic, 0)
            if stop > first:
                won = self._receive_range(target, first, stop, at_ms, stats)
                stats.per_topic[target.data_topic] = won
        for target in self.resolution.targets:
            stats.expired += self._queue(target).expire_due()
        log.info("receive mode: removed %d, taken by others %d, expired %d", stats.received,
                 stats.taken_by_others, stats.expired)
        return stats

    def _receive_range(self, target: QueueTarget, first: int, stop: int, at_ms: int,
                       stats: RemovalStats) -> int:
        view = self._view(target)
        view.catch_up()
        delivered = []
        for offset in range(first, stop):
            entry = view.state.by_lookup_id(offset)
            if entry is not None and entry.visible(at_ms):
                # Keep the record now: a won claim drops it from the view.
                delivered.append((offset, view.record(entry)))
        won_total = 0
        for i in range(0, len(delivered), CLAIM_CHUNK):
            chunk = dict(delivered[i:i + CLAIM_CHUNK])
            outcome = view.claim(ReceiptAction.RECEIVE, tuple(chunk))
            stats.taken_by_others += len(outcome.lost)
            self._after_receive(target, [chunk[offset] for offset in outcome.won])
            won_total += len(outcome.won)
        stats.received += won_total
        return won_total

    def _after_receive(self, target: QueueTarget, records: list[KafkaRecord]) -> None:
        """What a facade receive does with the records it won (:mod:`facade.queues.receiving`): the
        journal copies and ACK_RECEIVEs of the messages, written together; a poison record is
        dead-lettered as NACK_RECEIVE_REJECTED. The batch handed its rows out as stored
        (docs/spark.md), so the protection rules refuse nothing here."""
        manager = self.queues.manager
        destination = self.queues.destination(target)
        messages = []
        for record in records:
            try:
                messages.append(message_of(manager, record, record.offset, destination,
                                           refuse=False))
            except EnvelopeError as exc:  # not an envelope (never MessageRejected here)
                dead_letter_unreceivable(manager, record, str(exc), destination)
        write_receive_outputs(manager, messages, destination)

    # -- facade objects, opened once per query ----------------------------------------------

    def _view(self, target: QueueTarget) -> QueueView:
        view = self._views.get(target.data_topic)
        if view is None:
            manager, destination = self.queues.manager, self.queues.destination(target)
            view = QueueView(manager.session, destination.topics,
                             guard=incarnation_guard(manager.registry, destination))
            self._views[target.data_topic] = view
        return view

    def _queue(self, target: QueueTarget) -> Any:
        queue = self._queues.get(target.data_topic)
        if queue is None:
            queue = self.queues.manager.open_queue(target.format_name)
            self._queues[target.data_topic] = queue
        return queue

    def close(self) -> None:
        """Close the views, and the queue manager if this remover opened it."""
        for view in self._views.values():
            view.close()
        self._views.clear()
        self._queues.clear()
        if self._owned:
            self.queues.close()
