"""The send path of an opened queue: what ``MessageQueue.send`` and ``send_many`` do.

MSMQ's ``MQSendMessage`` checks the destination (a journal or dead-letter queue takes no
sends, a subqueue only moves, a transactional queue only transactional messages), stamps the
message, and puts one copy in every destination queue, each refused or accepted on its own
(quota, access, size). :class:`SendPath` is that for one handle: the destination checks, the
send bounds, the queue manager's stamps and protection (:mod:`facade.queues.sending`,
:mod:`facade.queues.protection`), the quota check against each queue's view, and the hand-over to the
transmitter (:mod:`facade.queues.transmission`) or, for a transactional send, to the transaction
(:mod:`facade.queues.transaction`), whose send side is here as its receive side is in
:mod:`facade.queues.peeklock`. A waiting send waits for the verdicts here and explains a silence.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from facade.arguments import require_bool
from facade.model.envelope import EncodedRecord
from facade.errors import (
    BrokerError,
    BrokerUnavailable,
    InvalidParameter,
    QueueQuotaExceeded,
    TransactionUsage,
    UnsupportedFormatNameOperation,
)
from facade.model.message import Delivery, JournalLevel, Message, MessageClass, check_enforceable
from facade.state.queueview import QueueView
from facade.queues.sending import SendCopies, acknowledgment_requested, check_fan_out, stamp_sent
from facade.timeouts import wait_seconds
from facade.queues.transaction import MessageQueueTransaction, check_transaction
from facade.queues.transmission import SendTracker

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.queues.openedqueue import OpenedQueue

__all__ = ["SEND_TIMEOUT", "SendPath", "require_told"]

#: Seconds a waiting send waits for its verdicts unless told otherwise.
SEND_TIMEOUT = 30.0
#: Destinations whose topics a send not acknowledged in time asks the cluster about (each
#: question may take seconds while brokers are down).
_EXPLAINED_TOPICS = 3


class SendPath:
    """Sends through one opened queue (see the module text).

    Args:
        opened (OpenedQueue): the queue (or list, or multiple-element name) sent to.
    """

    def __init__(self, opened: OpenedQueue):
        self._opened = opened
        self.manager = opened.manager
        self.format_name = opened.format_name
        #: Views of the destinations that have a quota (read to their end before each send).
        self._quota_views: dict[str, QueueView] = {}

    def close(self) -> None:
        """Close the views the quota checks opened."""
        for view in self._quota_views.values():
            view.close()
        self._quota_views.clear()

    def send(self, messages: tuple[Message, ...], wait: bool, timeout: float,
             transaction: object = None) -> list[Message]:
        """Stamp, check, quota-check, encode and submit ``messages``; see
        ``MessageQueue.send_many`` (arguments, result and errors)."""
        require_bool(wait, "wait")
        if timeout is not SEND_TIMEOUT:
            timeout = wait_seconds(timeout, "timeout")
        transaction = check_transaction(transaction)
        if transaction == "single":
            with self.manager.begin_transaction() as single:
                return self.send(messages, wait, timeout, single)
        destinations = self._opened.send_destinations()
        for destination in destinations:
            if destination.read_only:
                raise UnsupportedFormatNameOperation(
                    f"{destination.format_name!r} is read-only: only the system writes to "
                    "journals and dead-letter queues", queue=destination.format_name)
            if destination.is_subqueue:
                raise UnsupportedFormatNameOperation(
                    f"{destination.format_name!r} is a subqueue: messages enter it only by "
                    "being moved", queue=destination.format_name, hint="use MessageQueue.move")
            shared = destination.properties is not None and \
                destination.properties.arbitration == "share"
            if shared and any(message.not_before is not None for message in messages):
                raise InvalidParameter(
                    f"queue {destination.format_name!r} is arbitrated by a Kafka share group, "
                    "which cannot keep a message invisible until its not_before time",
                    queue=destination.format_name,
                    hint="send without not_before, or to a queue created with "
                         "arbitration='receipts'")
        config = self.manager.config
        check_fan_out(messages, len(destinations), self.format_name,
                      max_queues=config.max_send_fanout, max_bytes=config.max_send_bytes)
        self.manager.access.require_admin_queues(messages, self.format_name)
        if isinstance(transaction, MessageQueueTransaction):
            return self._send_in_transaction(messages, destinations, transaction)
        mismatched = [d for d in destinations if _transactional(d)]
        for message in messages:
            require_told(message, mismatched, MessageClass.NACK_NOT_TRANSACTIONAL_MSG,
                         "a transactional queue takes only messages sent in a transaction",
                         'send with transaction=qm.begin_transaction() (or transaction="single")')
        manager, now = self.manager, _now()
        sent_messages = []
        for message in messages:
            sent = stamp_sent(message, manager.ids.new(), now, manager.guid, self.format_name)
            if not message.unchanged_since_check():
                sent.check()  # the application edited it since construction (or last send)
            check_enforceable(sent)  # transactions: refused, never ignored
            sent_messages.append(manager.protection.prepare(sent))  # checked, signed if asked
        outputs = manager.outputs
        accepted: list[tuple[Destination, Message, EncodedRecord, Callable[[], object] | None]] = []
        refused = []  # over quota and not dead-lettered: the sender must hear of it
        batched: dict[str, int] = {}  # bytes this batch adds to each queue with a quota
        denied = manager.access.refused_sends(destinations)  # topic -> why (WRITE_MESSAGE)
        denied_copies = []
        for sent in sent_messages:
            journaled = not sent.journal & JournalLevel.JOURNAL
            copies = SendCopies(sent, len(destinations))
            for destination in destinations:
                copy = copies.copy(destination.format_name)
                if destination.topics.data in denied:
                    denied_copies.append(manager.access.refuse_copy(
                        copy, destination, denied[destination.topics.data]))
                    continue
                # each copy for its own destination's key
                sealed = manager.protection.seal(copy, destination)
                if destination in mismatched:
                    outputs.reject(sealed, MessageClass.NACK_NOT_TRANSACTIONAL_MSG, destination,
                                   "a nontransactional message sent to a transactional queue")
                    continue
                record = copies.record(copy, sealed)
                copy = sealed
                size = len(record.value)
                if self._over_quota(destination, size, batched):
                    quota_kb = destination.properties.quota_kb if destination.properties else None
                    if not outputs.reject(copy, MessageClass.NACK_Q_EXCEED_QUOTA, destination,
                                          f"queue quota of {quota_kb} KB reached"):
                        refused.append((sent.id, destination.format_name))
                    continue
                journal = None
                if not journaled:
                    # Source journaling keeps one copy per send, once its first copy is delivered.
                    journal = functools.partial(outputs.source_journal, sent)
                    journaled = True
                accepted.append((destination, copy, record, journal))
        # Only a waiting send needs to count verdicts (an Event and a Lock per send otherwise).
        tracker = SendTracker(len(accepted)) if wait else None
        if accepted:
            manager.transmitter.submit_many(accepted, tracker)
        if tracker is not None:
            if not tracker.wait(timeout):
                raise self._unacknowledged([item[0] for item in accepted],
                                           [item[1] for item in accepted], timeout)
            if tracker.errors:
                raise BrokerError(f"send to {self.format_name!r} failed: "
                                  + "; ".join(f"{q}: {e}" for q, e in tracker.errors.items()),
                                  queue=self.format_name)
        if denied_copies:
            raise manager.access.send_error(denied_copies, self.format_name, sent_messages,
                                            len(accepted), over_quota=len(refused))
        if refused:
            others = f" ({len(accepted)} other copies were sent)" if accepted else ""
            by_message: dict[Any, list[str]] = {}
            for message_id, queue in refused:
                by_message.setdefault(message_id, []).append(queue)
            what = "; ".join(f"message {message_id} was not written to {', '.join(queues)}"
                             for message_id, queues in itertools.islice(by_message.items(), 5))
            if len(by_message) > 5:
                what += f"; and {len(by_message) - 5} more messages"
            error = QueueQuotaExceeded(
                f"{what}: the queue quota (PROPID_Q_QUOTA) is reached{others}",
                queue=self.format_name,
                hint="receive or purge messages, raise the quota (kmq queue set --quota-kb), or "
                     "send with journal=JournalLevel.DEADLETTER to dead-letter refused copies")
            error.sent = sent_messages  # type: ignore[attr-defined]
            raise error
        return sent_messages

    def _unacknowledged(self, destinations: list[Destination], copies: list[Message],
                        timeout: float) -> BrokerUnavailable:
        """The error of a waiting send not acknowledged within ``timeout`` seconds: why, as the
        cluster's metadata shows it for the first :data:`_EXPLAINED_TOPICS` destinations (the
        producer retries NOT_ENOUGH_REPLICAS and leader changes silently, so only the cluster
        can say), and what becomes of the copies."""
        causes, fixes = [], []
        for topic in list(dict.fromkeys(d.topics.data for d in destinations))[:_EXPLAINED_TOPICS]:
            problem = self.manager.session.write_problem(topic)
            if problem is not None:
                causes.append(problem[0])
                fixes.append(problem[1])
        if any(copy.delivery is Delivery.RECOVERABLE for copy in copies):
            fate = ("the RECOVERABLE copies stay in the outgoing queue and are delivered once the "
                    "broker acknowledges them, or dead-lettered when their time-to-reach-queue "
                    "runs out")
        else:
            fate = ("the EXPRESS copies arrive only if the broker acknowledges them within their "
                    "time-to-reach-queue")
        why = f": {'; '.join(causes)}" if causes else ""
        return BrokerUnavailable(
            f"send to {self.format_name!r} not acknowledged within {timeout:g} s{why}; {fate}",
            queue=self.format_name,
            hint="; ".join(fixes) or "check that the Kafka brokers are running and reachable")

    def _send_in_transaction(self, messages: tuple[Message, ...], destinations: list[Destination],
                             transaction: MessageQueueTransaction) -> list[Message]:
        """Stamp and check ``messages`` and enlist their copies in ``transaction`` (sent at its
        commit); copies to nontransactional queues are rejected at commit (NACK_NOT_TRANSACTIONAL_Q)."""
        transaction.require_active()
        manager, now = self.manager, _now()
        denied = manager.access.refused_sends(destinations)
        if denied:  # the caller is the one denied: an error now, nothing joins the transaction
            raise next(iter(denied.values()))
        mismatched = [d for d in destinations if not _transactional(d)]
        for message in messages:
            check_enforceable(message)  # before it gets its transaction id
            require_told(message, mismatched, MessageClass.NACK_NOT_TRANSACTIONAL_Q,
                         "a nontransactional queue takes no messages sent in a transaction",
                         "send without transaction=, or create the queue with transactional=True")
        sent_messages, enlisted, rejected = [], [], []
        for message in messages:
            # MSMQ sends every message of a transaction with priority 0 and the first
            # message's timers.
            sent = stamp_sent(message, manager.ids.new(), now, manager.guid, self.format_name,
                              transaction_id=transaction.id, priority=0,
                              **transaction.timers(message))
            sent.check()
            sent = manager.protection.prepare(sent)  # checked, signed if asked
            copies = SendCopies(sent, len(destinations))
            for destination in destinations:
                plain = copies.copy(destination.format_name)
                # each copy for its own destination's key
                copy = manager.protection.seal(plain, destination)
                if destination in mismatched:
                    rejected.append((copy, destination))
                    continue
                manager.transmitter.check_size(destination, copy, copies.record(plain, copy))
                enlisted.append((destination, copy))
            sent_messages.append(sent)
        outputs = manager.outputs
        transaction.enlist_sends(enlisted, rejections=[
            functools.partial(outputs.reject, copy, MessageClass.NACK_NOT_TRANSACTIONAL_Q,
                              destination,
                              "a transactional message sent to a nontransactional queue")
            for copy, destination in rejected])
        return sent_messages

    def _over_quota(self, destination: Destination, size: int, batched: dict[str, int]) -> bool:
        """Whether adding ``size`` bytes would take the queue past PROPID_Q_QUOTA.

        The sender reads the queue up to its end before each check; senders racing each other
        can overshoot by what they have in flight (documented in design.md). ``batched`` holds
        the bytes earlier copies of the same batch add to each queue (updated here when the
        copy fits), so a batch cannot overshoot the quota by itself.
        """
        quota_kb = destination.properties.quota_kb if destination.properties else None
        if quota_kb is None:
            return False
        view = self._quota_views.get(destination.topics.data)
        if view is None:
            view = self._quota_views[destination.topics.data] = QueueView(
                self.manager.session, destination.topics)
        # Exact, not cached: a quota is a promise, so only queues that have one pay this read.
        view.catch_up()
        topic = destination.topics.data
        if view.state.pending_bytes + batched.get(topic, 0) + size > quota_kb * 1024:
            return True
        batched[topic] = batched.get(topic, 0) + size
        return False


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _transactional(destination: Destination) -> bool:
    """Whether a destination is a transactional queue (PROPID_Q_TRANSACTION)."""
    return destination.properties is not None and destination.properties.transactional


def require_told(message: Message, mismatched: list[Destination], message_class: MessageClass,
                 why: str, hint: str) -> None:
    """Refuse a send whose copies ``mismatched`` would be rejected without telling the sender.

    A rejected copy is acceptable only if it is dead-lettered (journal level DEADLETTER) or
    NACKed (``message_class`` asked for with an admin queue); otherwise it would vanish.

    Raises:
        TransactionUsage: ``mismatched`` is not empty and neither would happen.
    """
    if not mismatched or message.journal & JournalLevel.DEADLETTER:
        return
    if message.admin_queue and acknowledgment_requested(message.acknowledge, message_class):
        return
    names = ", ".join(repr(d.format_name) for d in mismatched[:3])
    raise TransactionUsage(
        f"{names}: {why}; the copy would be rejected ({message_class.name}) and this message "
        "asks for neither a dead-letter copy nor a negative acknowledgment, so nothing was sent",
        queue=mismatched[0].format_name, hint=hint)
