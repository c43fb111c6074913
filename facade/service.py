"""``kmq qm run``: the long-running queue-manager service.

MSMQ's service expires messages whose time-to-be-received elapsed even when no application
receives from their queue. kmq's equivalent sweeps every queue of the queue manager on an
interval: TTBR expiry into the dead-letter queue (with NACKs), poison records out of the
queue, peek-locks whose lease passed (released) and prefetched batches whose lease passed
(dead-lettered), and messages released more often than the queue's ``receive_retry_count``
(moved to ``;poison``). Several services may run for one queue manager: receipts decide who
handles each message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from facade.errors import QueueNotFound
from facade.manager import QueueManager
from facade.queues.queue import CLAIM_GRACE, MessageQueue

__all__ = ["QueueManagerService", "SweepReport"]


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did.

    Attributes:
        queues (int): queues swept.
        expired (int): messages moved out because their TTBR elapsed, plus poison records moved
            to the dead-letter queue, plus messages whose lock's lease passed (released, or
            dead-lettered for a prefetch) and messages moved to ``;poison``.
        seconds (float): how long the sweep took.
    """

    queues: int
    expired: int
    seconds: float


class QueueManagerService:
    """Sweeps a queue manager's queues.

    Args:
        manager (QueueManager): the queue manager to serve.
    """

    def __init__(self, manager: QueueManager, claim_grace: float = CLAIM_GRACE):
        self.manager = manager
        #: Seconds before a system claim without COMPLETED is considered abandoned and redone.
        self.claim_grace = claim_grace
        self._queues: dict[str, MessageQueue] = {}

    def sweep(self) -> SweepReport:
        """Expire due messages, dead-letter poison records and redo abandoned system claims in
        every queue, once."""
        started = time.monotonic()
        expired = 0
        current = {p.path_name for p in self.manager.list_queues()}
        for path in list(self._queues):
            if path not in current:
                self._queues.pop(path).close()
        for path in sorted(current):
            try:
                queue = self._queues.get(path) or self._queues.setdefault(
                    path, self.manager.open_queue(path))
                expired += queue.expire_due()
                queue.recover_claims(self.claim_grace)
            except QueueNotFound:
                # Deleted between listing and sweeping: nothing left to expire.
                self._queues.pop(path, None)
        return SweepReport(len(current), expired, time.monotonic() - started)

    def run(self, interval: float = 1.0, stop: threading.Event | None = None,
            sweeps: int | None = None,
            on_sweep: Callable[[SweepReport], None] | None = None) -> None:
        """Sweep every ``interval`` seconds until ``stop`` is set or ``sweeps`` sweeps are done,
        passing each report to ``on_sweep``."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set():
            report = self.sweep()
            done += 1
            if on_sweep is not None:
                on_sweep(report)
            if sweeps is not None and done >= sweeps:
                return
            stop.wait(interval)

    def close(self) -> None:
        """Close the queue handles the service opened."""
        for queue in self._queues.values():
            queue.close()
        self._queues.clear()
