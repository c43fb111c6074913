"""The wait loop of an opened queue: how a receive or peek waits for a message.

MSMQ's ``MQReceiveMessage`` with a timeout blocks until a message arrives; kmq polls its
queue view instead: sweep (system actions, :mod:`facade.queues.systemactions`), pick an entry, act on
it (claim, lock, prefetch or peek), and if the act got nothing (another receiver won) pick
again; when nothing is pending, read the topics for a short slice and look again. Every
receive and peek of a handle, its peek-locks, prefetched batches and cursors waits here, so
that outages, timeouts and the sweeps before a pick are handled the same way for all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from facade.errors import BrokerUnavailable, MessageAlreadyReceived, MessageNotFound, ReceiveTimeout
from facade.model.message import Message
from facade.state.queuestate import IndexEntry
from facade.state.queueview import QueueView
from facade.timeouts import receive_timeout

if TYPE_CHECKING:
    from facade.queues.openedqueue import OpenedQueue

__all__ = ["WaitLoop", "first_pending"]

log = logging.getLogger("kmq.queue")

#: Seconds between polls while a receive or peek waits for a message.
_WAIT_SLICE = 0.05
#: Seconds between tries of a waiting receive while the broker does not answer.
_OUTAGE_RETRY = 0.5

#: Picks an entry of the view at a time in epoch ms (None: nothing to take now).
Pick = Callable[[QueueView, int], "IndexEntry | None"]


class WaitLoop:
    """Waits for messages of one opened queue.

    Args:
        opened (OpenedQueue): the queue and its view.
        sweep (Callable[[QueueView], object]): what to do before each pick (poison records,
            expiry, passed leases, abandoned claims: ``SystemActions.sweep``).
    """

    def __init__(self, opened: OpenedQueue, sweep: Callable[[QueueView], object]):
        self._opened = opened
        self._sweep = sweep

    def first(self, act: Callable[[QueueView, IndexEntry], Any], pick: Pick, *, remove: bool,
              timeout: float | None) -> Any:
        """Under the handle's lock, poll until ``pick`` finds an entry and ``act`` on it gives
        a result (not None/empty); that result.

        Raises:
            ReceiveTimeout: nothing within ``timeout`` seconds.
            InvalidParameter: a bad ``timeout``.
        """
        timeout = receive_timeout(timeout)
        with self._opened.lock:
            return self.wait(act, pick, remove, timeout)[1]

    def wait(self, act: Callable[[QueueView, IndexEntry], Any], pick: Pick, remove: bool,
             timeout: float | None, what: str = "message") -> tuple[IndexEntry, Any]:
        """The one wait loop of every receive and peek, the handle's and its cursors': poll
        until ``pick`` finds an entry and ``act`` on it gives a result (not None/empty).

        Poison records are dead-lettered, expired messages expired and expired locks settled on
        the way.

        Returns:
            tuple[IndexEntry, Any]: the entry acted on and what ``act`` gave.

        Raises:
            ReceiveTimeout: no ``what`` within ``timeout`` seconds.
            BrokerUnavailable: the broker was away when ``timeout`` ended.
        """
        opened = self._opened
        view = opened.open_view()
        deadline = None if timeout is None else time.monotonic() + timeout
        view.load()
        # A peek must reflect other receivers' removals; a receive learns of them from its claim.
        receipts = not remove
        view.refresh(0, receipts=receipts)
        outage: BrokerUnavailable | None = None
        while True:
            self._sweep(view)
            entry = pick(view, _now_ms())
            if entry is not None:
                result = act(view, entry)
                if result:
                    return entry, result
                continue
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if outage is not None:
                    raise BrokerUnavailable(
                        f"{outage.message}; the Kafka cluster at "
                        f"{opened.manager.session.bootstrap_servers} did not answer before the "
                        f"receive's timeout ({timeout:g} s) ended", queue=opened.format_name,
                        hint="check that the Kafka brokers are running and reachable") from outage
                raise ReceiveTimeout(f"no {what} in {opened.format_name!r} within {timeout:g} s",
                                     queue=opened.format_name,
                                     hint="wait longer (timeout in seconds, None waits forever)")
            try:
                view.refresh(_WAIT_SLICE if remaining is None else min(_WAIT_SLICE, remaining),
                             receipts=receipts)
            except BrokerUnavailable as exc:
                # Nothing is claimed while waiting, so a broker outage costs nothing but time:
                # wait it out within the caller's timeout, as an MSMQ receive waits out a
                # restart of its queue manager, and raise the outage (not a timeout) at the end.
                if outage is None:
                    log.warning("waiting receive on %s: %s; retrying until the broker answers "
                                "or the timeout ends", opened.format_name, exc)
                outage = exc
                time.sleep(_OUTAGE_RETRY if remaining is None else min(_OUTAGE_RETRY, remaining))
                continue
            if outage is not None:
                log.warning("waiting receive on %s: the broker answers again", opened.format_name)
                outage = None

    def until_found(self, find: Callable[[Any], IndexEntry | None],
                    act: Callable[[QueueView, IndexEntry], Message | None],
                    timeout: float | None, what: str) -> Message:
        """A selective receive or peek (by id, correlation id): wait until ``find`` names a
        message of the queue's state, then ``act`` on it (take or peek).

        Raises:
            MessageAlreadyReceived: it was in the queue but someone removed it.
            MessageNotFound: no such message within ``timeout`` seconds.
        """
        opened = self._opened
        view = opened.open_view()
        view.catch_up()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            entry = find(view.state)
            if entry is not None:
                message = act(view, entry)
                if message is not None:
                    return message
                raise MessageAlreadyReceived(f"message with {what} was removed by another receiver",
                                             queue=opened.format_name)
            if deadline is not None and time.monotonic() >= deadline:
                raise MessageNotFound(f"no message with {what} in {opened.format_name!r}",
                                      queue=opened.format_name)
            view.refresh(_WAIT_SLICE)


def first_pending(view: QueueView, now_ms: int) -> IndexEntry | None:
    """The first pending message in receive order (what a peek and a peek-lock pick)."""
    return view.state.peek_first(now_ms)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
