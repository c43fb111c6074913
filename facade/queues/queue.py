"""``MessageQueue``: send, receive and peek on one opened queue (MSMQ's queue handle).

Receive order is highest priority first, then arrival order. Receive is destructive and shared
across processes: a message is removed by the first receipt that names it (see
``docs/design.md``), so two receivers never get the same message. A nontransactional receive is
at-most-once, as in MSMQ: once the receipt is acknowledged the message is gone from the queue,
even if the receiving process dies before using it. Peek-lock receive (``receive(lock=True)``,
at least once) and prefetch (``open_queue(name, prefetch=k)``) are in :mod:`facade.queues.peeklock`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

from facade.security.acl import AccessRight
from facade.arguments import require_bool, require_iterable
from facade.queues.authorization import receive_right
from facade.queues.cursor import Cursor, QueueReader
from facade.model.envelope import EncodedRecord
from facade.model.formatnames import (
    DirectFormatName,
    FormatName,
    PrivateFormatName,
    PublicFormatName,
    QueuePath,
    parse_format_name,
)
from facade.errors import (
    BrokerError,
    BrokerUnavailable,
    EnvelopeError,
    InvalidParameter,
    LockLost,
    MessageAlreadyReceived,
    MessageLockedUnderTransaction,
    MessageNotFound,
    MessageQueueError,
    QueueNotFound,
    QueueQuotaExceeded,
    ReceiveTimeout,
    TransactionUsage,
    UnsupportedFormatNameOperation,
)
from facade.model.message import (
    Delivery,
    JournalLevel,
    Message,
    MessageClass,
    MessageId,
    check_enforceable,
)
from facade.queues.peeklock import (
    DEFAULT_LEASE,
    DEFAULT_PREFETCH_LEASE,
    LockedMessage,
    PeekLockReceives,
    unlocked,
)
from facade.queues.protection import ProtectionLevel
from facade.state.queuestate import ClaimOutcome, IndexEntry, OffsetState
from facade.state.queueview import PendingClaim, QueueView
from facade.queues.transmission import SendTracker
from facade.queues.transaction import MessageQueueTransaction, check_transaction
from facade.model.receipts import ReceiptAction
from facade.queues.sending import SendCopies, acknowledgment_requested, check_fan_out, stamp_sent
from facade.queues.receiving import (
    count_aborts,
    dead_letter_unreceivable,
    message_of,
    write_receive_outputs,
)
from facade.queues.resolution import elements_of, is_dynamic, needs_directory
from facade.queues.sharequeue import ShareReceiver
from facade.timeouts import lease_to_ms, receive_timeout, wait_seconds

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.queues.queuehost import QueueHost
    from facade.state.registry import QueueProperties

__all__ = ["MessageQueue"]

log = logging.getLogger("kmq.queue")

#: Seconds between polls while a receive or peek waits for a message.
_WAIT_SLICE = 0.05
#: Seconds between tries of a waiting receive while the broker does not answer.
_OUTAGE_RETRY = 0.5
#: Seconds a system claim (expire, move, reject, a prefetched batch's dead-lettering) may go
#: without its COMPLETED receipt before another process takes it as abandoned and redoes it.
CLAIM_GRACE = 30.0
#: Seconds between a waiting handle's looks for abandoned claims (see recover_claims).
_RECOVERY_INTERVAL = 5.0
#: Seconds a waiting send waits for its verdicts unless told otherwise.
_SEND_TIMEOUT = 30.0
#: What a send takes as a body alone (System.Messaging's ``Send(object)``).
_BODY_TYPES = (bytes, bytearray, memoryview)
#: The largest PROPID_M_LOOKUPID (a 64-bit unsigned key).
_MAX_LOOKUP_ID = 2**64 - 1
#: ``kmq.reason`` of a poison record found by its headers (a POISON claim's own reason, e.g. the
#: decode error a peek met, takes precedence).
_BAD_HEADERS = "record headers are not a kmq envelope's"
#: What a share-arbitrated queue lacks for counting (MessageQueue.count and friends).
_NO_COUNT = ("message count (the group's start offset bounds the queue's length only from "
             "above)")
#: Destinations whose topics a send not acknowledged in time asks the cluster about (each
#: question may take seconds while brokers are down).
_EXPLAINED_TOPICS = 3


class MessageQueue(PeekLockReceives):
    """An opened queue. Get one from :meth:`QueueManager.open_queue` or ``create_queue``.

    Args:
        manager (QueueHost): the owning queue manager.
        reference (FormatName | QueuePath): what it was opened with, parsed.
        destinations (list[Destination]): the queue(s) it resolves to now (several for a
            distribution list or multiple-element format name, which can only be sent to).
        prefetch (int): ``receive()`` takes up to this many messages with one PREFETCH receipt
            and hands them out from memory (see :mod:`facade.queues.peeklock`); 0 = off.
        prefetch_lease (float): seconds a prefetched batch is held.
        spread_picks (bool): False (default): every receive by head takes the current head, so
            each of several competing receivers gets its messages in queue order (MSMQ's
            rule). True: after one of its claims lost to another receiver (within
            ``CONTENTION_MEMORY``, 1 s), ``receive()``, ``receive_many`` and prefetch claim a
            random one of the first ``CONTENTION_SPREAD`` (8) messages of the highest pending
            priority instead: about 1.2x the throughput of 4 competing default receivers, no
            per-receiver arrival order while they compete (docs/design.md, "Spread picks").

    Raises:
        InvalidParameter: ``prefetch`` or ``prefetch_lease`` out of range, ``spread_picks`` not
            a bool.

    Attributes:
        format_name (str): the canonical text of ``reference`` (PROPID_M_DEST_FORMAT_NAME of
            what is sent through this handle).
        protection_level (ProtectionLevel): seed 004, the protection this receiver requires
            (default NONE); a message below it is never returned: it is refused as on arrival
            (NACK, dead-lettered if it asks), see :mod:`facade.queues.protection`.
    """

    protection_level: ProtectionLevel = ProtectionLevel.NONE

    def __init__(self, manager: QueueHost, reference: FormatName | QueuePath,
                 destinations: list[Destination], *, prefetch: int = 0,
                 prefetch_lease: float = DEFAULT_PREFETCH_LEASE, spread_picks: bool = False):
        require_bool(spread_picks, "spread_picks")
        self.manager = manager
        self._spread_picks = spread_picks
        self.reference = reference
        self.format_name = str(reference)
        self.destinations = destinations
        # A list's members are read at each send; a PUBLIC= queue's Send To right once.
        self._dynamic = is_dynamic(reference)
        self._send_checked = not needs_directory(reference)
        self._view: QueueView | None = None
        self._quota_views: dict[str, QueueView] = {}
        #: Receive claims whose verdict could not be read (the receive raised): resolved first
        #: by the next receive, which hands out the messages the claim won.
        self._unsettled: list[tuple[tuple[tuple[IndexEntry, Any], ...], PendingClaim]] = []
        #: Messages this handle won whose receive outputs (journal copy) are still to write.
        self._undelivered: list[Message] = []
        #: By lookup id, the records of undelivered messages that are their journal copy as
        #: they are (see stored_record_is_kept_copy): written again, not encoded again.
        self._stored: dict[int, Any] = {}
        #: Messages this handle won, outputs written, not handed out yet (a batch receive
        #: raised part-way). The next receive returns these first.
        self._ready: list[Message] = []
        #: One receive at a time per handle (begin_receive runs receives on a worker thread).
        self._lock = threading.RLock()
        self._worker: ThreadPoolExecutor | None = None
        self._batch_size = 1  # receive_many's max_messages, for _take_receive_batch
        self._recovered_at = float("-inf")
        #: Transactional senders whose earlier incarnations' locks this handle released.
        self._fenced_for: set[str] = set()
        #: The share consumer of a share-arbitrated queue (made at the first receive).
        self._share: ShareReceiver | None = None
        self._init_locks(prefetch, prefetch_lease)
        if prefetch and self.arbitration == "share":
            self._refuse_share("prefetch handles", "a prefetching handle (prefetch=k)",
                               why="the share consumer batches already: use prefetch=0")

    @property
    def arbitration(self) -> str:
        """str: who arbitrates this handle's queue: ``"share"`` for a queue created with
        ``arbitration="share"`` (not its journal or subqueues, which are receipts queues),
        else ``"receipts"`` (a list or multiple-element name, which is only sent to,
        included)."""
        if len(self.destinations) != 1 or self._dynamic:
            return "receipts"
        destination = self.destinations[0]
        properties = destination.properties
        shared = (properties is not None and properties.arbitration == "share"
                  and not destination.read_only and not destination.is_subqueue)
        return "share" if shared else "receipts"

    def _refuse_share(self, what: str, operation: str, *, why: str | None = None) -> None:
        """Raise UnsupportedFormatNameOperation when this handle's queue is share-arbitrated
        (docs/design.md, "Share-group arbitration": what a share queue refuses)."""
        if self.arbitration != "share":
            return
        raise UnsupportedFormatNameOperation(
            f"queue {self.format_name!r} is arbitrated by a Kafka share group, which has no "
            f"{what}; use a queue created with arbitration='receipts' for {operation}",
            queue=self.format_name, hint=why)

    # -- properties ----------------------------------------------------------------------------

    @property
    def properties(self) -> QueueProperties:
        """The queue's properties (PROPID_Q_*), read fresh from the registry."""
        return self.manager.get_properties(self._single().format_name)

    def set_properties(self, **changes: Any) -> QueueProperties:
        """Change queue properties (label, journal, quota_kb...); see QueueManager.set_properties."""
        return self.manager.set_properties(self._single().format_name, **changes)

    # -- send ----------------------------------------------------------------------------------

    def send(self, message: Message | bytes, *, wait: bool = False,
             timeout: float = _SEND_TIMEOUT,
             transaction: MessageQueueTransaction | str | None = None) -> Message:
        """Send ``message`` to every destination of this queue (MSMQ ``MQSendMessage``).

        ``message`` may also be a body alone (``bytes``, ``bytearray`` or ``memoryview``):
        ``q.send(b"raw")`` sends ``Message(body=b"raw")``, a message with MSMQ's default
        properties, as System.Messaging's ``Send(object)`` takes any object as the body (kmq
        has no formatters: a body is bytes, and text must be encoded by the caller).

        The queue manager assigns ``id``, ``sent_time``, ``source_machine_id``,
        ``destination_queue`` and ``destination_format_name``; every copy of one send carries the
        same id. EXPRESS copies are handed to the producer (``acks=1``) and may still be in flight
        when this returns; RECOVERABLE copies are first stored in the durable outgoing queue, then
        produced with ``acks=all`` (see :mod:`facade.queues.transmission`). A copy not delivered within
        time-to-reach-queue is dead-lettered and NACKed (NACK_REACH_QUEUE_TIMEOUT); a queue over
        its quota gets NACK_Q_EXCEED_QUOTA instead of the copy. Concurrent RECOVERABLE sends
        from several threads share the outgoing queue's commits (one fsync for all of them).

        Args:
            message (Message | bytes): the message (it is not modified), or a body alone.
            wait (bool): wait until every copy has the broker's verdict ("queued"), and raise if
                one failed.
            timeout (float): seconds (>= 0) to wait when ``wait`` is true.
            transaction (MessageQueueTransaction | str | None): send within this transaction
                (:mod:`facade.queues.transaction`: written at its commit, exactly once, in order, or
                not at all); ``"single"`` is MSMQ's single-message transaction (committed
                before this returns); None (default) sends outside any transaction. A
                transactional send needs transactional queues: a nontransactional destination
                rejects its copy with NACK_NOT_TRANSACTIONAL_Q (at commit), and a
                nontransactional send to a transactional queue is rejected with
                NACK_NOT_TRANSACTIONAL_MSG. A rejected copy is dead-lettered when the journal
                level has DEADLETTER and NACKed when asked for; when neither would tell the
                sender, the send raises TransactionUsage and sends nothing.

        Returns:
            Message: the message as sent (with its id).

        Raises:
            UnsupportedFormatNameOperation: a destination is read-only (journal, dead-letter).
            InvalidParameter: ``message`` is neither a Message nor bytes, another argument
                has the wrong type, a property is outside its range, the body is larger than
                MSMQ's 4 MiB (:data:`~facade.model.message.MAX_BODY_BYTES`), or a security property
                kmq does not implement (refused, never sent unprotected); or a send to several
                queues over the queue manager's bounds (``max_send_fanout`` queues,
                ``max_send_bytes`` of body size x queues; :func:`facade.queues.sending.check_fan_out`):
                nothing was sent.
            TransactionUsage: a copy would be rejected for a transaction mismatch (see
                ``transaction``) without telling the sender; ``transaction`` is committed or
                aborted already; or the caller set ``transaction_id`` itself.
            BrokerUnavailable: ``wait`` and the broker did not acknowledge in time.
            QueueQuotaExceeded: a copy would take its queue past its quota and was not
                dead-lettered (the other copies were sent).
            AccessDenied: a destination's access list refuses the caller WRITE_MESSAGE: that
                copy was not written, NACK_ACCESS_DENIED went to the admin queue (if asked
                for) and a dead-letter copy was kept (journal level DEADLETTER); the other
                copies were sent (``sent`` on the error lists the messages as sent). Or the
                message asks for acknowledgments and its admin queue refuses the caller
                WRITE_MESSAGE: nothing was sent (the error names the admin queue).
            QueueNotFound, DirectoryUnavailable: a destination, or the admin queue of a message
                that asks for acknowledgments, does not resolve; nothing was sent.
        """
        return self._send((_as_message(message, "message"),), wait, timeout, transaction)[0]

    def send_many(self, messages: Iterable[Message | bytes], *, wait: bool = False,
                  timeout: float = _SEND_TIMEOUT,
                  transaction: MessageQueueTransaction | str | None = None) -> list[Message]:
        """Send several messages to every destination of this queue, as one batch.

        Each message gets what :meth:`send` gives it (its own id, one copy per destination);
        the batch shares the work: a distribution list or multiple-element name is resolved
        once (membership and Send To rights as of this call), every message is checked before
        anything is sent, the RECOVERABLE copies are stored in the outgoing queue in one
        transaction with one fsync (group commit), and ``wait`` waits once for every
        verdict. Messages to one queue arrive in the order given. MSMQ has no batch send:
        this is ``MQSendMessage`` in a loop, minus the per-message overhead.

        Args:
            messages (Iterable[Message | bytes]): the messages, in send order; none is
                modified. A body alone (bytes) is a message with default properties, as for
                :meth:`send`.
            wait (bool): wait until every copy of every message has the broker's verdict, and
                raise if one failed.
            timeout (float): seconds to wait (for the whole batch) when ``wait`` is true.
            transaction (MessageQueueTransaction | str | None): as for :meth:`send`;
                ``"single"`` sends the whole batch in one transaction.

        Returns:
            list[Message]: the messages as sent (with their ids), in the same order. When it
            returns, every RECOVERABLE copy is fsync'd in the outgoing queue (or, with
            ``wait``, acknowledged by the broker).

        Raises:
            InvalidParameter: ``messages`` is not an iterable of :class:`Message` objects or
                bodies, another argument has the wrong type, a property is outside its range,
                a body is larger than 4 MiB, or the batch is over the send bounds (as for
                :meth:`send`: the bodies of the whole batch x queues count); nothing was sent.
            UnsupportedFormatNameOperation: a destination is read-only (journal, dead-letter)
                or a subqueue; nothing was sent.
            MessageQueueError: the outgoing queue cannot be written; nothing was sent.
            BrokerError: the producer refused a copy; the message says how many copies were
                handed over before it (those may arrive; the rest were not sent).
            BrokerUnavailable: ``wait`` and the broker did not acknowledge in time.
            QueueQuotaExceeded: some copies would take their queue past its quota and were not
                dead-lettered (every other copy was sent); ``sent`` on the error lists the
                messages as sent.
            AccessDenied: as for :meth:`send`; an admin queue that refuses the caller refuses
                the whole batch before anything is sent.
        """
        items = require_iterable(messages, "messages", "Message objects (or bodies)")
        batch = tuple(_as_message(message, "each of messages") for message in items)
        return self._send(batch, wait, timeout, transaction) if batch else []

    def _send(self, messages: tuple[Message, ...], wait: bool, timeout: float,
              transaction: object = None) -> list[Message]:
        """Stamp, check, quota-check, encode and submit ``messages``; see :meth:`send_many`."""
        require_bool(wait, "wait")
        if timeout is not _SEND_TIMEOUT:
            timeout = wait_seconds(timeout, "timeout")
        transaction = check_transaction(transaction)
        if transaction == "single":
            with self.manager.begin_transaction() as single:
                return self._send(messages, wait, timeout, single)
        destinations = self._send_destinations()
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

    # -- receive and peek ----------------------------------------------------------------------

    def receive(self, timeout: float | None = None, *, lock: bool = False,
                lease: float = DEFAULT_LEASE,
                transaction: MessageQueueTransaction | str | None = None) -> Message:
        """Remove and return the first message: highest priority, then oldest (``MQReceiveMessage``).

        Args:
            timeout (float | None): seconds to wait for a message; None waits forever, 0 does
                not wait.
            lock (bool): peek-lock receive (at least once): the message is only locked, by one
                LOCK receipt, and returned as a :class:`~facade.queues.peeklock.LockedMessage`; settle
                it with :meth:`complete` (removed for good) or :meth:`abandon` (back in the
                queue, ``abort_count`` + 1). If neither happens within ``lease`` it is released
                too. Default False: MSMQ's nontransactional receive (at most once).
            lease (float): with ``lock``, seconds the lock lasts (default 30; on a
                share-arbitrated queue default 20 and at most 25, the broker's acquisition
                lock being 30 s from the fetch and not renewable).
            transaction (MessageQueueTransaction | str | None): a transactional receive
                (exactly once with the transaction's sends, :mod:`facade.queues.transaction`): the
                message is locked now and removed when the transaction commits; an abort, or
                the death of this process, returns it to the queue with ``abort_count`` + 1.
                ``"single"`` receives in a transaction of its own, committed before this
                returns. Only from a transactional queue, and not with ``lock``.

        On a handle opened with ``prefetch=k``, a receive without ``lock`` hands out the next of
        up to ``k`` messages taken with one PREFETCH receipt (see :mod:`facade.queues.peeklock`).

        On a queue created with ``arbitration="share"`` a Kafka share group decides who gets
        each message (:mod:`facade.queues.sharequeue`): in no order; at most once and never twice
        as above; peek-lock by the broker's acquisition lock; ``transaction`` refused.

        A receive that raises removes nothing it does not hand out later: if the verdict of
        its claim could not be read (broker unreachable) or an output of the receive (journal
        copy) failed, the message stays with this handle and the next ``receive`` returns it
        first; :meth:`close` dead-letters what is still held then (see ``docs/design.md``).

        Raises:
            ReceiveTimeout: no message within ``timeout`` (MQ_ERROR_IO_TIMEOUT).
            AccessDenied: the caller lacks DELETE_MESSAGE (DELETE_JOURNAL_MESSAGE on a
                journal); see :mod:`facade.queues.authorization`.
            InvalidParameter: ``timeout`` is negative, NaN or infinite, or ``lease`` is not
                seconds in (0, 604800].
            BrokerUnavailable: the broker did not answer; nothing was lost (see above; a
                lock whose verdict was not read is released when its lease passes). A receive
                that is waiting for a message rides out an outage shorter than ``timeout``
                and raises this, naming the bootstrap servers, only if the broker is still
                away when ``timeout`` ends.
            TransactionUsage: ``transaction`` on a nontransactional queue, or one that is
                committed or aborted already.
            InvalidParameter: on a share-arbitrated queue, ``transaction``, or ``lease`` above
                25 with ``lock``.
        """
        require_bool(lock, "lock")
        if lease is not DEFAULT_LEASE:
            lease_to_ms(lease, "lease")  # checked even without lock: a bad lease is a bug
        self._authorize(remove=True)
        if self.arbitration == "share":
            return self._receive_shared(timeout, lock, lease, transaction, 1)[0]
        transaction = check_transaction(transaction)
        if transaction is not None:
            if lock:
                raise InvalidParameter(
                    "receive() takes lock=True or a transaction, not both: a transactional "
                    "receive is locked until its transaction ends", queue=self.format_name)
            return self._receive_in_transaction(timeout, transaction, 1)[0]
        if lock:
            return self._receive_locked(timeout, lease)
        if self._prefetch:
            return self._receive_prefetched(receive_timeout(timeout))
        return self._wait(self._pick_head, remove=True, timeout=timeout)

    def _receive_shared(self, timeout: float | None, lock: bool, lease: float,
                        transaction: object, max_messages: int) -> list[Message]:
        """receive / receive_many on a share-arbitrated queue (:mod:`facade.queues.sharequeue`):
        ACCEPT and ``commit_sync`` before a message is handed out (at most once, never twice).

        Raises:
            InvalidParameter: ``transaction`` given (KIP-932 has no transactional
                acknowledgement).
        """
        if transaction is not None:
            raise InvalidParameter(
                f"queue {self.format_name!r} is arbitrated by a Kafka share group, which has "
                "no transactional acknowledgement: receive without transaction=",
                queue=self.format_name,
                hint="use a queue created with transactional=True and arbitration='receipts' "
                     "for transactional receives")
        with self._lock:
            if self._share is None:
                destination = self._single()
                self._share = ShareReceiver(self.manager, destination,
                                            self._subqueue_destination("poison"),
                                            self.protection_level)
            if lock:
                message, token, ends = self._share.receive_locked(
                    timeout, None if lease is DEFAULT_LEASE else lease)
                return [LockedMessage.adopt(
                    message, token, dt.datetime.fromtimestamp(ends, dt.timezone.utc), self)]
            return self._share.receive_many(max_messages, timeout)

    def complete(self, message: Message) -> None:
        """Finish a peek-lock receive: remove the message for good (see
        :meth:`PeekLockReceives.complete`). On a share-arbitrated queue: the journal copy,
        ACCEPT and ``commit_sync``, then ACK_RECEIVE.

        Raises:
            InvalidParameter: ``message`` was not received with ``lock=True`` through this
                handle.
            LockLost: the lock was settled by someone else first (on a share queue: the
                acquisition lock lapsed, or the handle left the group after a failed receive).
            BrokerUnavailable, BrokerError: no answer; on a share queue the message may have
                been removed or will be delivered again (at least once).
        """
        if self.arbitration != "share":
            super().complete(message)
            return
        with self._lock:
            self._share_receiver_of(message).complete(self._share_token(message),
                                                      unlocked(message), message)

    def abandon(self, message: Message) -> bool:
        """Give a peek-locked message back to the queue (see :meth:`PeekLockReceives.abandon`);
        on a share-arbitrated queue a RELEASE (its delivery count goes up by one).

        Returns:
            bool: True if this call released it, False if its lock had been settled already.

        Raises:
            InvalidParameter: ``message`` was not received with ``lock=True``.
            BrokerUnavailable: the verdict could not be read (the lock lapses all the same).
        """
        if self.arbitration != "share":
            return super().abandon(message)
        with self._lock:
            return self._share_receiver_of(message).abandon(self._share_token(message),
                                                            message)

    def _share_token(self, message: Message) -> str:
        token = getattr(message, "lock_token", None)
        if not isinstance(token, str) or not token.startswith("share:") \
                or message.lookup_id is None:
            raise InvalidParameter("this message was not received with receive(lock=True) "
                                   "from a share-arbitrated queue: it has no peek-lock here",
                                   queue=self.format_name,
                                   hint="pass the message object that receive(lock=True) "
                                        "returned")
        return token

    def _share_receiver_of(self, message: Message) -> ShareReceiver:
        if self._share is None:
            raise LockLost(f"lookup id {message.lookup_id} of {self.format_name!r} is not "
                           "locked by this handle (closed since)", lookup_id=message.lookup_id,
                           queue=self.format_name)
        return self._share

    def _receive_in_transaction(self, timeout: float | None,
                                transaction: MessageQueueTransaction | str,
                                max_messages: int) -> list[Message]:
        """A transactional receive of up to ``max_messages``: a peek-lock (one LOCK receipt
        for the batch) enlisted in ``transaction``."""
        if not isinstance(transaction, MessageQueueTransaction):  # "single"
            with self.manager.begin_transaction() as single:
                return self._receive_in_transaction(timeout, single, max_messages)
        transaction.require_active()
        destination = self._single()
        if destination.properties is not None and not destination.properties.transactional:
            raise TransactionUsage(
                f"{self.format_name!r} is not a transactional queue: MSMQ receives from it only "
                "outside transactions", queue=self.format_name,
                hint="receive without transaction=, or use a queue created with transactional=True")
        producer = transaction.producer
        if producer.owner not in self._fenced_for:
            producer.start()  # fences the earlier incarnations before their locks are released
            self._release_fenced(producer.is_fenced_owner)
            self._fenced_for.add(producer.owner)
        locked = self._receive_locked_many(max_messages, timeout, transaction.lease,
                                           producer.owner)
        try:
            transaction.enlist_receives(self, locked)
        except TransactionUsage:
            # Ended meanwhile (another thread): give the messages back, one RELEASE per lock.
            for message, exc in self._release_aborted(
                    list(locked), "its transaction ended before the receive joined it"):
                log.warning("message %s stays locked in %s until its lease passes (%s)",
                            message.id, self.format_name, exc)
            raise
        return [unlocked(message) for message in locked]

    def peek(self, timeout: float | None = None) -> Message:
        """Return the first message without removing it (``MQ_ACTION_PEEK_CURRENT``).

        Raises:
            ReceiveTimeout: no message within ``timeout`` seconds.
            AccessDenied: the caller lacks PEEK_MESSAGE.
            UnsupportedFormatNameOperation: a share-arbitrated queue (no peek).
        """
        self._refuse_share("peek", "peek")
        self._authorize(remove=False)
        return self._wait(lambda view, now: view.state.peek_first(now), remove=False, timeout=timeout)

    def receive_many(self, max_messages: int, timeout: float | None = None, *,
                     transaction: MessageQueueTransaction | str | None = None) -> list[Message]:
        """Remove and return up to ``max_messages`` messages with one claim, in receive order.

        Waits up to ``timeout`` for the first message, then takes what the queue holds now, up
        to ``max_messages``, with a single RECEIVE receipt (one broker round trip for the
        batch). The guarantee is the one of :meth:`receive`, per message: at most once, never
        twice; a crash after the claim loses the batch.

        With ``transaction``, the batch is a transactional receive (the guarantee of
        ``receive(transaction=...)``, per message: removed exactly once, when the transaction
        commits, in queue order): one LOCK receipt holds the whole batch (at most
        :data:`~facade.queues.peeklock.MAX_PREFETCH` messages) until the commit removes it or an
        abort returns it (abort count + 1). One broker round trip locks the batch instead of
        one per message; the commit writes the batch's journal copies with one wait and one
        COMPLETED receipt for it.

        Args:
            max_messages (int): 1 or more.
            timeout (float | None): seconds to wait for the first message; None waits forever,
                0 does not wait.
            transaction (MessageQueueTransaction | str | None): receive in this transaction
                (``"single"``: in one of its own, committed before this returns). Only from a
                transactional queue.

        Returns:
            list[Message]: 1 to ``max_messages`` messages, highest priority first, then oldest.

        Raises:
            ReceiveTimeout: no message within ``timeout`` (MQ_ERROR_IO_TIMEOUT).
            InvalidParameter: ``max_messages`` < 1, or a bad ``timeout``.
            BrokerUnavailable: the broker did not answer; what the claim won is held for the
                next receive (see :meth:`receive`). In a transaction nothing is held: a lock
                whose verdict was not read is released when its lease passes.
            TransactionUsage: ``transaction`` on a nontransactional queue, or one that is
                committed or aborted already.
        """
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise InvalidParameter(f"max_messages must be an int >= 1, not {max_messages!r}")
        timeout = receive_timeout(timeout)
        self._authorize(remove=True)
        if self.arbitration == "share":
            return self._receive_shared(timeout, False, DEFAULT_LEASE, transaction,
                                        max_messages)
        transaction = check_transaction(transaction)
        if transaction is not None:
            return self._receive_in_transaction(timeout, transaction, max_messages)
        with self._lock:
            held = self._take_held(self._open_view(), max_messages)
            if held:
                return held
            if self._prefetch:
                return self._receive_prefetched_many(max_messages, timeout)
            self._batch_size = max_messages
            batch: list[Message] = self._wait_for(
                self._take_receive_batch, self._pick_head, True, timeout)
            return batch

    def _receive_prefetched_many(self, max_messages: int, timeout: float | None) -> list[Message]:
        """receive_many on a prefetching handle (nothing held: receive_many checked): what the
        prefetched batch holds, then new batches, the first wait up to ``timeout``; the
        messages handed out together get their receive outputs with one write.

        Raises:
            ReceiveTimeout: no message within ``timeout``.
        """
        messages: list[Message] = []
        wait = timeout
        while len(messages) < max_messages:
            more = self._receive_prefetched_more(max_messages - len(messages))
            if more:
                messages += more
                continue
            self._hand_out_at_once = max_messages - len(messages)
            try:
                messages.append(self.receive(wait))
            except ReceiveTimeout:
                if not messages:
                    raise
                break
            finally:
                self._hand_out_at_once = 1
            # The rest of a new batch, handed out with the first (see _take_batch).
            messages += self._take_held(self._open_view(), max_messages - len(messages))
            wait = 0
        return messages

    def _take_receive_batch(self, view: QueueView, first: IndexEntry) -> list[Message]:
        """Claim ``first`` and the candidates after it, ``_batch_size`` in all, with one
        receipt (``first`` is the head unless the view spreads contended picks)."""
        batch = list(itertools.islice(view.state.candidates(_now_ms(), start=first),
                                      self._batch_size))
        return self._take_many(view, batch or [first])

    def messages(self, timeout: float | None = None) -> Iterator[Message]:
        """Receive messages one by one until none arrives within ``timeout`` seconds.

        ``for message in queue.messages(timeout=5): ...`` is a receive loop (each message is
        removed, as by :meth:`receive`); ``timeout=None`` loops forever. Iterating the queue
        itself (``for message in queue``) is ``messages(timeout=0)``: it drains what the queue
        holds now and stops.

        Yields:
            Message: the next message in receive order.

        Raises:
            InvalidParameter: a bad ``timeout``.
        """
        timeout = receive_timeout(timeout)
        while True:
            try:
                yield self.receive(timeout=timeout)
            except ReceiveTimeout:
                return

    def __iter__(self) -> Iterator[Message]:
        return self.messages(timeout=0)

    def begin_receive(self, timeout: float | None = None,
                      callback: Callable[[Future[Message]], object] | None = None) -> Future[Message]:
        """Start a receive in the background (MSMQ's asynchronous receive, System.Messaging's
        ``BeginReceive``/``ReceiveCompleted``).

        Receives of one handle run one at a time on the handle's worker thread, in the order
        begun. The future's result is the message, or it raises what :meth:`receive` raises
        (``ReceiveTimeout`` after ``timeout`` seconds).

        Args:
            timeout (float | None): seconds to wait for a message; None waits forever.
            callback (Callable[[Future[Message]], object] | None): called with the future when
                it completes (on the worker thread; keep it short).

        Returns:
            concurrent.futures.Future[Message]: ``future.result()`` gives the message.

        Raises:
            InvalidParameter: a bad ``timeout``, or ``callback`` is not callable (raised here,
                not by the future).
        """
        timeout = receive_timeout(timeout)
        return self._submit(lambda: self.receive(timeout=timeout), callback)

    def begin_peek(self, timeout: float | None = None,
                   callback: Callable[[Future[Message]], object] | None = None) -> Future[Message]:
        """Start a peek in the background (``BeginPeek``/``PeekCompleted``); see
        :meth:`begin_receive`."""
        timeout = receive_timeout(timeout)
        return self._submit(lambda: self.peek(timeout=timeout), callback)

    async def receive_async(self, timeout: float | None = None) -> Message:
        """``await queue.receive_async(5)``: :meth:`receive` without blocking the event loop.

        Raises:
            ReceiveTimeout, InvalidParameter, BrokerUnavailable: as :meth:`receive`.
        """
        return await asyncio.wrap_future(self.begin_receive(timeout))

    async def peek_async(self, timeout: float | None = None) -> Message:
        """``await queue.peek_async(5)``: :meth:`peek` without blocking the event loop."""
        return await asyncio.wrap_future(self.begin_peek(timeout))

    def _submit(self, work: Callable[[], Message],
                callback: Callable[[Future[Message]], object] | None) -> Future[Message]:
        if callback is not None and not callable(callback):
            raise InvalidParameter.wrong_type("callback", "None or a callable taking the future",
                                              callback)
        with self._lock:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="kmq-receive")
            future = self._worker.submit(work)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def receive_by_id(self, message_id: MessageId | str, timeout: float | None = 0) -> Message:
        """Remove and return the message with this id (``ReceiveById``).

        Args:
            message_id (MessageId | str): the id, or its ``guid\\seq`` text.
            timeout (float | None): seconds to wait for it; None waits forever.

        Raises:
            MessageAlreadyReceived: it was in the queue but someone removed it.
            MessageNotFound: no such message within ``timeout`` seconds.
            InvalidParameter: ``message_id`` is neither a MessageId nor a str, or a bad
                ``timeout``.
        """
        key = _id_text(message_id, "message_id")
        self._refuse_share("selective receive", "receive by id")
        return self._by(lambda state: state.by_message_id(key), True, timeout, f"id {key}")

    def peek_by_id(self, message_id: MessageId | str, timeout: float | None = 0) -> Message:
        """Return the message with this id without removing it (``PeekById``); arguments and
        errors as :meth:`receive_by_id`."""
        key = _id_text(message_id, "message_id")
        self._refuse_share("peek", "peek by id")
        return self._by(lambda state: state.by_message_id(key), False, timeout, f"id {key}")

    def receive_by_correlation_id(self, correlation_id: MessageId | str,
                                  timeout: float | None = 0) -> Message:
        """Remove and return the first message with this correlation id; arguments and errors
        as :meth:`receive_by_id` (InvalidParameter names ``correlation_id``)."""
        key = _id_text(correlation_id, "correlation_id")
        self._refuse_share("selective receive", "receive by correlation id")
        return self._by(lambda state: state.by_correlation_id(key), True, timeout,
                        f"correlation id {key}")

    def peek_by_correlation_id(self, correlation_id: MessageId | str,
                               timeout: float | None = 0) -> Message:
        """Return the first message with this correlation id without removing it; arguments
        and errors as :meth:`receive_by_id`."""
        key = _id_text(correlation_id, "correlation_id")
        self._refuse_share("peek", "peek by correlation id")
        return self._by(lambda state: state.by_correlation_id(key), False, timeout,
                        f"correlation id {key}")

    def receive_by_lookup_id(self, lookup_id: int) -> Message:
        """Remove and return the message with this lookup id (``MQ_LOOKUP_RECEIVE_CURRENT``).

        Raises:
            MessageAlreadyReceived: the message was removed (received, purged, expired).
            MessageNotFound: no message ever had this lookup id.
            InvalidParameter: ``lookup_id`` is not an int 0 to 2**64-1.
            UnsupportedFormatNameOperation: a share-arbitrated queue.
        """
        self._refuse_share("selective receive", "receive by lookup id")
        return self._by_lookup_id(lookup_id, remove=True)

    def peek_by_lookup_id(self, lookup_id: int) -> Message:
        """Return the message with this lookup id without removing it (``MQ_LOOKUP_PEEK_CURRENT``).

        Raises:
            MessageAlreadyReceived: the message was removed (received, purged, expired).
            MessageNotFound: no message ever had this lookup id.
            InvalidParameter: ``lookup_id`` is not an int 0 to 2**64-1.
            UnsupportedFormatNameOperation: a share-arbitrated queue.
        """
        self._refuse_share("peek", "peek by lookup id")
        return self._by_lookup_id(lookup_id, remove=False)

    def move(self, lookup_id: int, subqueue: str) -> Message:
        """Move a message into a subqueue of this queue (MSMQ ``MQMoveMessage``).

        The message leaves this queue and is appended to ``<queue>;<subqueue>`` with
        ``move_count`` incremented and the same id. Applications cannot send to subqueues;
        moving is how messages get there (e.g. ``;poison``).

        Args:
            lookup_id (int): the message's lookup id in this queue.
            subqueue (str): the subqueue name (1-32 characters).

        Returns:
            Message: the message as written to the subqueue.

        Raises:
            MessageAlreadyReceived: someone removed the message first.
            MessageNotFound: no message with that lookup id, or its record is not a valid
                envelope (it went to the dead-letter queue as poison instead).
            FormatNameError: invalid subqueue name.
            InvalidParameter: ``lookup_id`` is not an int 0 to 2**64-1, or ``subqueue`` is not
                a str.
        """
        _check_lookup_id(lookup_id)
        self._refuse_share("selective receive", "move by lookup id")
        # Resolve first: a bad subqueue name fails before anything is claimed.
        self._subqueue_destination(subqueue)
        self._authorize(remove=True)
        view = self._open_view()
        entry = self._pending_by_lookup_id(view, lookup_id)
        return self._acted_on(self._system_action(view, entry, ReceiptAction.MOVE,
                                                  target=subqueue), lookup_id)

    def mark_rejected(self, lookup_id: int, reason: str = "rejected by the receiving application") -> Message:
        """Reject a message (MSMQ ``MQMarkMessageRejected``, poison-message handling).

        The message is removed from the queue; a NACK_RECEIVE_REJECTED goes to its admin queue
        when NEGATIVE_RECEIVE was requested, and a dead-letter copy with that class is written
        when its journal level has DEADLETTER.

        Args:
            lookup_id (int): the message's lookup id in this queue.
            reason (str): why, kept in the dead-letter copy's ``kmq.reason`` (first 1,000
                characters).

        Raises:
            MessageAlreadyReceived: someone removed the message first.
            MessageNotFound: no message with that lookup id, or its record is not a valid
                envelope (it went to the dead-letter queue as poison instead).
            InvalidParameter: ``lookup_id`` is not an int 0 to 2**64-1, or ``reason`` is not
                a str.
        """
        _check_lookup_id(lookup_id)
        self._refuse_share("selective receive", "mark_rejected by lookup id")
        if not isinstance(reason, str):
            raise InvalidParameter.wrong_type("reason", "a str", reason)
        self._authorize(remove=True)
        view = self._open_view()
        entry = self._pending_by_lookup_id(view, lookup_id)
        return self._acted_on(self._system_action(
            view, entry, ReceiptAction.REJECT, target=self.manager.dead_letter_topic,
            reason=reason[:1000]), lookup_id)

    def _acted_on(self, message: Message | None, lookup_id: int) -> Message:
        """The message a system action took; a poison record (None) is reported, not
        returned as a message the caller would take for the one it named."""
        if message is None:
            raise MessageNotFound(f"the record with lookup id {lookup_id} is not a valid kmq "
                                  "message: it went to the dead-letter queue as poison",
                                  queue=self.format_name)
        return message

    @property
    def reader(self) -> QueueReader:
        """QueueReader: this handle's receive steps (its view, wait loop, claim and peek), what
        its cursors (:class:`facade.queues.cursor.Cursor`) walk the queue with. Applications call
        :meth:`receive`, :meth:`peek` and :meth:`cursor` instead."""
        self._refuse_share("cursor", "cursors")
        return _HandleReader(self)

    def cursor(self) -> Cursor:
        """A cursor over this queue (``MQCreateCursor``): peek_current, peek_next,
        receive_current. See :class:`facade.queues.cursor.Cursor`.

        Raises:
            UnsupportedFormatNameOperation: a share-arbitrated queue (no cursors).
        """
        self._refuse_share("cursor", "cursors")
        self._authorize(remove=False)
        return Cursor(self)

    def purge(self) -> int:
        """Remove every message now in the queue (``MQPurgeQueue``).

        Returns:
            int: how many messages the purge removed.

        Raises:
            AccessDenied: the caller lacks DELETE_MESSAGE (MQSEC_DELETE_MESSAGE).
            UnsupportedFormatNameOperation: a share-arbitrated queue (a share group cannot
                accept records it has not acquired).
        """
        self._refuse_share("purge (a share group cannot accept records it has not acquired)",
                           "purge")
        self._authorize(remove=True)
        view = self._open_view()
        view.catch_up()
        outcome = view.claim(ReceiptAction.PURGE, purge_below=view.state.data_offset)
        return outcome.purged

    def count(self) -> int:
        """Messages in the queue now, including ones not yet visible (not-before) or expired.

        Raises:
            AccessDenied: the caller lacks GET_PROPERTIES.
            UnsupportedFormatNameOperation: a share-arbitrated queue (no count).
        """
        self._refuse_share(_NO_COUNT, "count")
        self.manager.access.require(self._single(), AccessRight.GET_PROPERTIES)
        view = self._open_view()
        view.catch_up(for_good=False)
        return view.state.pending_count()

    def expired_count(self) -> int:
        """Messages counted by :meth:`count` whose time-to-be-received has passed: no receiver
        gets them, and the next sweep (``kmq qm run``) or receive dead-letters them.

        Returns:
            int: how many, now (0 or more).

        Raises:
            UnsupportedFormatNameOperation: a share-arbitrated queue (no count).
        """
        self._refuse_share(_NO_COUNT, "expired_count")
        view = self._open_view()
        view.catch_up(for_good=False)
        return len(view.state.expired(_now_ms()))

    def counts(self) -> tuple[int, int]:
        """:meth:`count` and :meth:`expired_count` from one read of the queue (each of them
        reads it to the end, which takes a few fetch cycles). To count many queues, use
        :meth:`QueueManager.queue_counts <facade.manager.QueueManager.queue_counts>`, which
        gives the same counts for all of them with a few requests in all.

        Returns:
            tuple[int, int]: messages in the queue now (as :meth:`count`), and how many of
            them are past their time-to-be-received (as :meth:`expired_count`).

        Raises:
            AccessDenied: the caller lacks GET_PROPERTIES.
            UnsupportedFormatNameOperation: a share-arbitrated queue (no count).
        """
        self._refuse_share(_NO_COUNT, "counts")
        self.manager.access.require(self._single(), AccessRight.GET_PROPERTIES)
        view = self._open_view()
        view.catch_up(for_good=False)
        return view.state.pending_count(), len(view.state.expired(_now_ms()))

    def __len__(self) -> int:
        return self.count()

    def malformed_receipts(self) -> int:
        """Records of this queue's receipts topic that are not kmq receipts, read up to now.

        Every process skips them alike (they remove nothing); a count above 0 means something
        other than kmq writes to the topic (``kmq queue show`` reports it).

        Raises:
            UnsupportedFormatNameOperation: a share-arbitrated queue (no receipts).
        """
        self._refuse_share("receipts log", "receipts")
        view = self._open_view()
        view.catch_up()
        return view.malformed_receipts

    def malformed_snapshots(self) -> int:
        """Records of the queue manager's snapshot topic under this queue's key that this
        handle skipped when it opened: not valid snapshots of this queue, or stale ones (see
        ``docs/design.md``, "Bounded state"); the handle read the logs instead.

        Raises:
            UnsupportedFormatNameOperation: a share-arbitrated queue (no snapshots).
        """
        self._refuse_share("snapshots", "snapshots")
        return self._open_view().malformed_snapshots

    def close(self) -> None:
        """Release this handle's Kafka reader and producer.

        A message a failed receive of this handle still holds is dead-lettered first (class
        NACK_RECEIVE_REJECTED, ``kmq.reason`` says why).

        Peek-locked messages handed out through this handle and not settled are released
        (abort count + 1); a prefetched batch is settled: COMPLETED for what was handed out,
        RELEASE for the rest (see :mod:`facade.queues.peeklock`).

        Raises:
            BrokerUnavailable: a held message could not be dead-lettered, or a lock could not
                be settled (the clients are closed all the same).
        """
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=True, cancel_futures=True)
        try:
            try:
                self._release_locks()
            finally:
                try:
                    self._release_held()
                finally:
                    share, self._share = self._share, None
                    if share is not None:
                        share.close()
        finally:
            if self._view is not None:
                self._view.close()
                self._view = None
            for view in self._quota_views.values():
                view.close()
            self._quota_views.clear()

    def __enter__(self) -> MessageQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _send_destinations(self) -> list[Destination]:
        """The queues a send goes to: re-resolved for a list, Send To checked once otherwise."""
        if self._dynamic or not self._send_checked:
            destinations = self.manager.destinations(self.reference, for_send=True)
            if not self._dynamic:
                self.destinations, self._send_checked = destinations, True
            return destinations
        return self.destinations

    def _single(self) -> Destination:
        """The one queue this handle reads, with its properties as the registry holds them
        now: a change made after the handle opened (journal, authenticate, privacy level,
        quota) applies to its next receive, as the access lists already do."""
        if self._dynamic or len(elements_of(self.reference)) != 1 or len(self.destinations) != 1:
            raise UnsupportedFormatNameOperation(
                f"{self.format_name!r} names several queues: it can only be sent to",
                queue=self.format_name)
        destination = self.destinations[0]
        known = destination.properties
        if known is not None:
            current = self.manager.access.current(known)
            if current is not known and current.data_topic == known.data_topic:
                destination = dataclasses.replace(destination, properties=current)
                self.destinations = [destination]
        return destination

    def _authorize(self, remove: bool) -> None:
        """Raise AccessDenied unless the caller may receive (``remove``) or peek here
        (:func:`facade.queues.authorization.receive_right`)."""
        destination = self._single()
        self.manager.access.require(destination, receive_right(destination, remove))

    def _open_view(self) -> QueueView:
        if self._view is None:
            self._view = QueueView(self.manager.session, self._single().topics)
            return self._view
        try:
            self._view.wake()
        except QueueNotFound as exc:
            raise QueueNotFound(f"queue {self.format_name!r} was deleted", queue=self.format_name,
                                hint="create it again (kmq queue create) and open it again") from exc
        return self._view

    def _pick_head(self, view: QueueView, now_ms: int) -> IndexEntry | None:
        """The entry a receive by head claims: the head, or a spread pick when this handle was
        opened with ``spread_picks=True`` and lost a claim lately (:meth:`QueueView.pick_head`)."""
        return view.pick_head(now_ms, spread=self._spread_picks)

    def _wait(self, pick: Callable[[QueueView, int], IndexEntry | None], remove: bool,
              timeout: float | None,
              take: Callable[[QueueView, IndexEntry], Message | None] | None = None) -> Message:
        """Pick and take (or peek) until a message comes or ``timeout`` passes.

        ``take`` claims a picked entry (default :meth:`_take`, a RECEIVE); a custom one (peek-
        lock, prefetch) does not hand out messages held by failed receives."""
        timeout = receive_timeout(timeout)
        with self._lock:
            message: Message = self._wait_locked(pick, remove, timeout, take)
            return message

    def _wait_many(self, pick: Callable[[QueueView, int], IndexEntry | None],
                   timeout: float | None,
                   take: Callable[[QueueView, IndexEntry], Sequence[Message]]) -> list[Message]:
        """:meth:`_wait` for a ``take`` that claims several messages at once (one batch)."""
        timeout = receive_timeout(timeout)
        with self._lock:
            return list(self._wait_for(take, pick, True, timeout))

    def _wait_locked(self, pick: Callable[[QueueView, int], IndexEntry | None], remove: bool,
                     timeout: float | None,
                     take: Callable[[QueueView, IndexEntry], Any] | None = None) -> Any:
        if remove and take is None:
            held = self._take_held(self._open_view(), 1)
            if held:
                return held[0]
        return self._wait_for((take or self._take_first) if remove else self._decode, pick,
                              remove, timeout)

    def _wait_for(self, act: Callable[[QueueView, IndexEntry], Any],
                  pick: Callable[[QueueView, int], IndexEntry | None], remove: bool,
                  timeout: float | None) -> Any:
        """Poll until ``pick`` finds an entry and ``act`` on it gives a result (not None/empty).

        Raises:
            ReceiveTimeout: nothing within ``timeout`` seconds.
        """
        return self._wait_entry(act, pick, remove, timeout)[1]

    def _wait_entry(self, act: Callable[[QueueView, IndexEntry], Any],
                    pick: Callable[[QueueView, int], IndexEntry | None], remove: bool,
                    timeout: float | None, what: str = "message") -> tuple[IndexEntry, Any]:
        """The one wait loop of every receive and peek, the handle's and its cursors': poll
        until ``pick`` finds an entry and ``act`` on it gives a result (not None/empty).

        Poison records are dead-lettered, expired messages expired and expired locks settled on
        the way.

        Returns:
            tuple[IndexEntry, Any]: the entry acted on and what ``act`` gave.

        Raises:
            ReceiveTimeout: no ``what`` within ``timeout`` seconds.
        """
        view = self._open_view()
        deadline = None if timeout is None else time.monotonic() + timeout
        view.load()
        # A peek must reflect other receivers' removals; a receive learns of them from its claim.
        receipts = not remove
        view.refresh(0, receipts=receipts)
        outage: BrokerUnavailable | None = None
        while True:
            self._dead_letter_poison(view)
            self._expire(view)
            self._lock_housekeeping(view)
            self._recover_abandoned(view)
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
                        f"{self.manager.session.bootstrap_servers} did not answer before the "
                        f"receive's timeout ({timeout:g} s) ended", queue=self.format_name,
                        hint="check that the Kafka brokers are running and reachable") from outage
                raise ReceiveTimeout(f"no {what} in {self.format_name!r} within {timeout:g} s",
                                     queue=self.format_name,
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
                                "or the timeout ends", self.format_name, exc)
                outage = exc
                time.sleep(_OUTAGE_RETRY if remaining is None else min(_OUTAGE_RETRY, remaining))
                continue
            if outage is not None:
                log.warning("waiting receive on %s: the broker answers again", self.format_name)
                outage = None

    def _by(self, find: Callable[[Any], IndexEntry | None], remove: bool,
            timeout: float | None, what: str) -> Message:
        timeout = receive_timeout(timeout)
        self._authorize(remove)
        view = self._open_view()
        view.catch_up()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            entry = find(view.state)
            if entry is not None:
                message = self._take(view, entry) if remove else self._decode(view, entry)
                if message is not None:
                    return message
                raise MessageAlreadyReceived(f"message with {what} was removed by another receiver",
                                             queue=self.format_name)
            if deadline is not None and time.monotonic() >= deadline:
                raise MessageNotFound(f"no message with {what} in {self.format_name!r}",
                                      queue=self.format_name)
            view.refresh(_WAIT_SLICE)

    def _pending_by_lookup_id(self, view: QueueView, lookup_id: int) -> IndexEntry:
        view.catch_up()
        status = view.state.status(lookup_id)
        if status.state in (OffsetState.REMOVED, OffsetState.DUPLICATE):
            raise MessageAlreadyReceived(f"message with lookup id {lookup_id} was already removed "
                                         f"from {self.format_name!r}", queue=self.format_name)
        if status.state is OffsetState.LOCKED:
            raise MessageLockedUnderTransaction(
                f"message with lookup id {lookup_id} in {self.format_name!r} is locked by a "
                "peek-lock receive", queue=self.format_name,
                hint="it comes back if its receiver abandons it or its lease passes")
        entry = view.state.by_lookup_id(lookup_id)
        if entry is None:
            raise MessageNotFound(f"no message with lookup id {lookup_id} in {self.format_name!r}",
                                  queue=self.format_name)
        return entry

    def _by_lookup_id(self, lookup_id: int, remove: bool) -> Message:
        _check_lookup_id(lookup_id)
        self._authorize(remove)
        view = self._open_view()
        entry = self._pending_by_lookup_id(view, lookup_id)
        message = self._take(view, entry) if remove else self._decode(view, entry)
        if message is None:
            raise MessageAlreadyReceived(f"message with lookup id {lookup_id} was removed by "
                                         "another receiver", queue=self.format_name)
        return message

    def _take(self, view: QueueView, entry: IndexEntry) -> Message | None:
        """Claim ``entry`` with a RECEIVE receipt and hand it out if the claim won.

        Returns:
            Message | None: the message; None if another receipt removed it first, or if it was
            a poison record (dead-lettered here).

        Raises:
            BrokerUnavailable, BrokerError: the verdict could not be read, or an output failed;
                the message is held for the next receive (see :meth:`receive`).
        """
        taken = self._take_many(view, [entry])
        return taken[0] if taken else None

    def _take_first(self, view: QueueView, first: IndexEntry) -> Message | None:
        """Receive the current head: claim ``first`` and, while this view is contended, the
        candidates after it (up to :data:`FIRST_OF`, in receive order) with one RECEIVE_FIRST
        receipt, which takes the first of them still pending when the log reaches it.

        Competing receivers that all see the same head then each get one message, the head as
        of their receipt's place in the log, instead of all but one losing and trying again
        (docs/design.md, "Contended receives"); each still gets its messages in queue order.

        Returns:
            Message | None: the message; None if every candidate was removed first, or if the
            one won was a poison record (dead-lettered here).

        Raises:
            BrokerUnavailable, BrokerError: the verdict could not be read, or an output failed;
                the message is held for the next receive (see :meth:`receive`).
        """
        entries = view.first_candidates(first)
        action = ReceiptAction.RECEIVE_FIRST if len(entries) > 1 else ReceiptAction.RECEIVE
        taken = self._claim(view, action, entries, decode_first=1, limit=1)
        return taken[0] if taken else None

    def _take_many(self, view: QueueView, entries: list[IndexEntry]) -> list[Message]:
        """Claim ``entries`` with one RECEIVE receipt and hand out the ones it won, in order.

        Raises:
            BrokerUnavailable, BrokerError: the verdict could not be read, or an output failed;
                what was won is held for the next receive.
        """
        return self._claim(view, ReceiptAction.RECEIVE, entries, decode_first=len(entries),
                           limit=len(entries))

    def _claim(self, view: QueueView, action: ReceiptAction, entries: list[IndexEntry], *,
               decode_first: int, limit: int) -> list[Message]:
        """Claim ``entries`` with one ``action`` receipt and hand out up to ``limit`` of the
        messages it won, in order; the first ``decode_first`` are decoded while the broker
        acknowledges the receipt (the verdict is what takes time), the others if they win."""
        records = tuple((entry, view.record(entry)) for entry in entries)
        pending = view.start_claim(action, tuple(e.offset for e in entries))
        decoded: list[Message | EnvelopeError | None] = [
            self._decoded(record, entry.offset) if index < decode_first else None
            for index, (entry, record) in enumerate(records)]
        try:
            outcome = view.settle(pending)
        except BrokerUnavailable:
            # The receipt may be in the log and may have won: keep the claim, so the next
            # receive reads its verdict and hands the messages out instead of losing them.
            self._unsettled.append((records, pending))
            raise
        self._undelivered.extend(self._won_messages(records, outcome, decoded))
        return self._deliver_all(limit)

    def _decoded(self, record: Any, lookup_id: int) -> Message | EnvelopeError:
        try:
            return self._message(record, lookup_id)
        except EnvelopeError as exc:
            return exc

    def _won_messages(self, records: tuple[tuple[IndexEntry, Any], ...], outcome: ClaimOutcome,
                      decoded: Sequence[Message | EnvelopeError | None] | None = None
                      ) -> list[Message]:
        """The messages of the records a claim won (``decoded`` where given, else decoded now),
        with their abort counts (releases of peek-locks on them); poison among them is
        dead-lettered (the receipt already removed it, so it must not be lost or handed to the
        application)."""
        messages = []
        for index, (entry, record) in enumerate(records):
            if entry.offset not in outcome.won:
                continue
            message = decoded[index] if decoded is not None else None
            if message is None:
                message = self._decoded(record, entry.offset)
            if isinstance(message, EnvelopeError):
                self._send_poison_to_dead_letter(record, str(message))
                continue
            stored = count_aborts(message, outcome.abort_count(entry.offset), record)
            if stored is not None:
                self._stored[entry.offset] = stored  # it joins _undelivered right away
            messages.append(message)
        return messages

    def _deliver(self, message: Message, stored: Any | None = None) -> Message:
        """Write one won message's receive outputs and hand it out (held if an output fails);
        ``stored``: its record, if that is its journal copy as it is."""
        return self._deliver_many([message], None if stored is None else
                                  {cast(int, message.lookup_id): stored})[0]

    def _deliver_many(self, messages: list[Message],
                      stored: dict[int, Any] | None = None) -> list[Message]:
        """Write won messages' receive outputs together and hand them out (held if an output
        fails; messages held from an earlier failure go first). ``stored``: by lookup id, the
        records that are their message's journal copy as they are."""
        if stored:
            self._stored.update(stored)
        self._undelivered.extend(messages)
        return self._deliver_all(len(messages))

    def _deliver_all(self, limit: int) -> list[Message]:
        """Hand out up to ``limit`` won messages: first those ready, then those whose receive
        outputs (journal copy, ACK_RECEIVE) are written now.

        Raises:
            MessageQueueError: a journal copy failed; the messages of this batch stay held
                (those ready before wait in ``_ready``) and their copies are written again by
                the next receive (a copy written twice keeps its id: views drop it).
        """
        handed = self._ready[:limit]
        del self._ready[:limit]
        batch = self._undelivered[:max(limit - len(handed), 0)]
        if batch:
            stored = {m.lookup_id: self._stored[m.lookup_id] for m in batch
                      if m.lookup_id in self._stored}
            try:
                write_receive_outputs(self.manager, batch, self._single(), stored)
            except MessageQueueError:
                self._ready[:0] = handed
                raise
            del self._undelivered[:len(batch)]
            for lookup_id in stored:
                del self._stored[lookup_id]
            handed.extend(batch)
        return handed

    def _take_held(self, view: QueueView, limit: int) -> list[Message]:
        """Up to ``limit`` messages earlier, failed receives of this handle won but did not hand
        out (resolving claims whose verdict was not read yet); empty if none.

        Raises:
            BrokerUnavailable: a held claim's verdict still cannot be read.
        """
        self._resolve_unsettled(view)
        return self._deliver_all(limit)

    def _resolve_unsettled(self, view: QueueView, *, closing: bool = False) -> list[str]:
        """Read the verdicts of claims whose receive raised; what they won joins the messages
        held for the next receive. A receipt the broker refused removed nothing: dropped.

        Args:
            view (QueueView): this handle's view.
            closing (bool): keep going past a verdict that still cannot be read (the claim is
                given up and described in the result) instead of raising.

        Returns:
            list[str]: the claims given up (only when ``closing``).

        Raises:
            BrokerUnavailable: a verdict still cannot be read (not ``closing``; the claim stays).
        """
        unknown = []
        while self._unsettled:
            records, pending = self._unsettled[0]
            try:
                outcome = view.settle(pending)
            except BrokerUnavailable as exc:
                if not closing:
                    raise
                ids = ", ".join(str(entry.offset) for entry, _ in records)
                unknown.append(f"lookup ids {ids}: verdict of their receive unknown ({exc})")
                del self._unsettled[0]
                continue
            except MessageQueueError:
                del self._unsettled[0]  # refused by the broker: the receipt removed nothing
                continue
            del self._unsettled[0]
            self._undelivered.extend(self._won_messages(records, outcome))
        return unknown

    def _release_held(self) -> None:
        """On close: dead-letter what this handle won but never handed out (its receive failed
        and no later receive came), so no message is lost without a trace.

        Raises:
            MessageQueueError: a held message could not be dead-lettered, or a held claim's
                verdict could not be read; the error names the lookup ids.
        """
        problems = [] if self._view is None else self._resolve_unsettled(self._view, closing=True)
        held, self._ready, self._undelivered = self._ready + self._undelivered, [], []
        self._stored.clear()
        for message in held:
            reason = ("received by a handle whose receive failed and that was closed before "
                      "handing the message out")
            try:
                self._dead_letter_because(message, reason)
            except MessageQueueError as exc:
                problems.append(f"lookup id {message.lookup_id}: not dead-lettered ({exc})")
        if problems:
            raise BrokerUnavailable(f"closing {self.format_name!r}: held messages may be lost: "
                                    + "; ".join(problems), queue=self.format_name)

    def _dead_letter_because(self, message: Message, reason: str) -> None:
        """Copy ``message`` to the dead-letter queue whatever its journal level (a kmq failure,
        not an MSMQ one), class NACK_RECEIVE_REJECTED, ``kmq.reason`` saying why.

        Raises:
            BrokerUnavailable, BrokerError: the copy was not acknowledged.
        """
        self.manager.dead_letter(dataclasses.replace(
            message, message_class=MessageClass.NACK_RECEIVE_REJECTED, time_to_be_received=None,
            properties={**message.properties, "kmq.reason": reason}))

    def expire_due(self) -> int:
        """Dead-letter the messages whose time-to-be-received has elapsed (MSMQ's TTBR expiry).

        Each expired message is claimed with an EXPIRE receipt; the winner copies it to the
        dead-letter queue with class NACK_RECEIVE_TIMEOUT when its journal level has DEADLETTER,
        posts a NACK_RECEIVE_TIMEOUT to its admin queue when NEGATIVE_RECEIVE was requested, and
        closes the claim with COMPLETED. Receivers call this before every pick; ``kmq qm run``
        calls it for every queue, so expiry happens even when nobody receives. The same sweep
        settles peek-locks and prefetched batches whose lease passed and moves messages
        released too often to ``;poison`` (see :mod:`facade.queues.peeklock`).

        Returns:
            int: messages this call expired, dead-lettered as poison records, released or
            dead-lettered after their lease, or moved to ``;poison``. 0 on a share-arbitrated
            queue: its receivers expire and move messages as they acquire them, and the
            broker keeps the locks.
        """
        if self.arbitration == "share":
            return 0
        view = self._open_view()
        view.catch_up()
        return (self._expire(view) + len(self._dead_letter_poison(view))
                + self._lock_housekeeping(view))

    def _expire(self, view: QueueView) -> int:
        now = _now_ms()
        due = view.state.next_expiry_ms()
        if due is None or due > now:
            return 0
        done = self._system_actions(view, view.state.expired(now), ReceiptAction.EXPIRE,
                                    self.manager.dead_letter_topic, "time-to-be-received elapsed")
        return sum(1 for _, message in done if message is not None)

    def _dead_letter_poison(self, view: QueueView) -> list[int]:
        """Move records that are not valid envelopes to the dead-letter queue, never stopping.

        Returns:
            list[int]: offsets this call moved.
        """
        done = self._system_actions(view, view.state.poisoned(), ReceiptAction.POISON,
                                    self.manager.dead_letter_topic, _BAD_HEADERS)
        return [offset for offset, _ in done]

    def _system_actions(self, view: QueueView, entries: list[IndexEntry], action: ReceiptAction,
                        target: str, reason: str) -> list[tuple[int, Message | None]]:
        """Claim each of ``entries`` that is still pending with a system action (expiry, poison
        records, ``;poison`` moves), skipping those another receipt removed first.

        Returns:
            list[tuple[int, Message | None]]: the offsets this process won, with the result of
            :meth:`_system_action` for each.
        """
        done = []
        for entry in entries:
            if not view.is_pending(entry):
                continue  # an earlier claim of this loop applied a receipt that removed it
            try:
                done.append((entry.offset, self._system_action(view, entry, action,
                                                               target=target, reason=reason)))
            except MessageAlreadyReceived:
                continue  # another process took it first
        return done

    def _system_action(self, view: QueueView, entry: IndexEntry, action: ReceiptAction,
                       target: str | None = None, reason: str | None = None) -> Message | None:
        """Claim ``entry`` for a system action, perform its outputs, then close the claim.

        Raises:
            MessageAlreadyReceived: another receipt removed the message first.
        """
        record = view.record(entry)
        outcome = view.claim(action, (entry.offset,), target=target, reason=reason)
        if entry.offset not in outcome.won:
            raise MessageAlreadyReceived(f"message with lookup id {entry.offset} was removed by "
                                         "another receiver", queue=self.format_name)
        result = self._perform(action, record, target, reason,
                               aborts=outcome.abort_count(entry.offset))
        view.claim(ReceiptAction.COMPLETED, completes=outcome.claim_id)
        return result

    def _perform(self, action: ReceiptAction, record: Any, target: str | None,
                 reason: str | None, *, aborts: int = 0,
                 settles_lock: bool = False) -> Message | None:
        """The outputs of a won system claim; recovery calls this again for claims a crashed
        process left without COMPLETED (copies keep their id, so a redone copy is a duplicate
        that queue views drop).

        Args:
            aborts (int): the message's abort count in the queue state (releases of peek-locks),
                added to the envelope's in the subqueue or dead-letter copy.
            settles_lock (bool): the claim took the message from a lock (``completes``): a
                REJECT then dead-letters it whatever its journal level (an expired prefetch).

        Returns:
            Message | None: the message (MOVE: as written to the subqueue); None for poison.
        """
        if action is ReceiptAction.POISON:
            self._send_poison_to_dead_letter(record, reason or _BAD_HEADERS)
            return None
        try:
            message = self._message(record, record.offset)
        except EnvelopeError as exc:
            self._send_poison_to_dead_letter(record, str(exc))
            return None
        message.abort_count += aborts
        outputs = self.manager.outputs
        if action is ReceiptAction.MOVE:
            moved = _copy(message, move_count=message.move_count + 1, lookup_id=None,
                          arrived_time=None)
            self.manager.write_system_copy(self._subqueue_destination(target or "").topics.data, moved)
            return moved
        if settles_lock and action is ReceiptAction.REJECT:
            self._dead_letter_because(message, reason or "taken from a lock")
            return message
        message_class = (MessageClass.NACK_RECEIVE_TIMEOUT if action is ReceiptAction.EXPIRE
                         else MessageClass.NACK_RECEIVE_REJECTED)
        outputs.reject(message, message_class, self._single(), reason)
        return message

    def _subqueue_destination(self, subqueue: str) -> Destination:
        parent = parse_format_name(self._single().format_name)
        if not isinstance(parent, (PrivateFormatName, PublicFormatName, DirectFormatName)):
            raise UnsupportedFormatNameOperation(
                f"{self.format_name!r} has no subqueues", queue=self.format_name,
                hint="move messages only within an application queue")
        return self.manager.resolve(parent.with_subqueue(subqueue))

    def recover_claims(self, grace: float = CLAIM_GRACE) -> int:
        """Redo the outputs of system claims (expire, move, reject, poison) that a crashed
        process left without a COMPLETED receipt, once they are ``grace`` seconds old.

        ``kmq qm run`` calls it on every queue; a handle waiting in a receive or peek also
        does, every few seconds with :data:`CLAIM_GRACE`, for the claims its view knows of,
        so a batch a dead receiver held reaches the dead-letter queue wherever the queue is
        read, service or not.

        Args:
            grace (float): seconds (>= 0) a claim's owner gets to finish it itself.

        Returns:
            int: claims completed.

        Raises:
            InvalidParameter: ``grace`` is not finite seconds >= 0.

        A share-arbitrated queue has no claims: 0.
        """
        grace = wait_seconds(grace, "grace")
        if self.arbitration == "share":
            return 0
        view = self._open_view()
        view.catch_up()
        return self._complete_abandoned(view, grace)

    def _recover_abandoned(self, view: QueueView) -> None:
        """In a waiting receive or peek: the claims a dead process left, at most once every
        :data:`_RECOVERY_INTERVAL` seconds (see :meth:`recover_claims`)."""
        now = time.monotonic()
        if now - self._recovered_at < _RECOVERY_INTERVAL:
            return
        self._recovered_at = now
        self._complete_abandoned(view, CLAIM_GRACE)

    def _complete_abandoned(self, view: QueueView, grace: float) -> int:
        cutoff = _now_ms() - int(grace * 1000)
        done = 0
        for claim in view.state.incomplete_claims():
            if claim.receipt.time_ms > cutoff:
                continue  # its owner may still be working on it
            for offset in claim.offsets:
                self._perform(claim.receipt.action, view.fetch(offset), claim.receipt.target,
                              claim.receipt.reason, aborts=claim.abort_count(offset),
                              settles_lock=claim.receipt.completes is not None)
            view.claim(ReceiptAction.COMPLETED, completes=claim.receipt.claim_id)
            done += 1
        return done

    def _send_poison_to_dead_letter(self, record: Any, reason: str) -> None:
        dead_letter_unreceivable(self.manager, record, reason, self._single(),
                                 self.protection_level)

    def _decode(self, view: QueueView, entry: IndexEntry) -> Message | None:
        """The message of a pending entry, for a peek; None if its value is not an envelope.

        Such a record (valid kmq headers, garbage value) is dead-lettered as poison, as a
        receive does with it: otherwise every peek, cursor and listing (``kmq dlq list``,
        ``kmq journal list``) raised on it for good, since nothing receives from journals or
        dead-letter queues (found by tests/faults/test_garbage.py).
        """
        record = view.record(entry)
        try:
            return self._message(record, entry.offset)
        except EnvelopeError as exc:
            try:
                self._system_action(view, entry, ReceiptAction.POISON,
                                    target=self.manager.dead_letter_topic, reason=str(exc))
            except MessageAlreadyReceived:
                pass  # removed by someone else meanwhile
            return None

    def _message(self, record: Any, lookup_id: int) -> Message:
        return message_of(self.manager, record, lookup_id, self._single(), self.protection_level)


class _HandleReader:
    """A :class:`MessageQueue`'s receive steps as a cursor sees them (``cursor.QueueReader``).

    Each step holds the handle's lock, so a cursor and the handle's own receives (other
    threads, ``begin_receive``) never use the view at the same time.
    """

    def __init__(self, queue: MessageQueue):
        self._queue = queue
        self.format_name = queue.format_name

    def authorize(self, remove: bool) -> None:
        self._queue._authorize(remove)

    def open_view(self) -> QueueView:
        with self._queue._lock:
            return self._queue._open_view()

    def peek_entry(self, view: QueueView, entry: IndexEntry) -> Message | None:
        with self._queue._lock:
            return self._queue._decode(view, entry)

    def take_entry(self, view: QueueView, entry: IndexEntry) -> Message | None:
        with self._queue._lock:
            return self._queue._take(view, entry)

    def wait_for(self, pick: Callable[[QueueView, int], IndexEntry | None], *, remove: bool,
                 timeout: float | None, what: str = "message") -> tuple[IndexEntry, Message]:
        queue = self._queue
        act = queue._take if remove else queue._decode
        with queue._lock:
            entry, message = queue._wait_entry(act, pick, remove, timeout, what)
            return entry, message


def _as_message(value: object, name: str) -> Message:
    """A send's message: a :class:`Message`, or a body alone as a message with default
    properties (see :meth:`MessageQueue.send`).

    Raises:
        InvalidParameter: ``value`` is neither (``name`` says which argument).
    """
    if isinstance(value, Message):
        return value
    if isinstance(value, _BODY_TYPES):
        return Message(body=bytes(value))
    raise InvalidParameter.wrong_type(
        name, "a Message, or bytes for the body of a message with default properties", value,
        hint="send Message(body=..., label=...); encode text first (text.encode())")


def _id_text(value: object, name: str) -> str:
    """The text of a message or correlation id given to a receive or peek by id (text that is
    no id matches no message: MessageNotFound, as before any check).

    Raises:
        InvalidParameter: ``value`` is neither a MessageId nor a str.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, MessageId):
        return str(value)
    raise InvalidParameter.wrong_type(name, "a MessageId or its 'guid\\seq' text", value)


def _check_lookup_id(lookup_id: object) -> None:
    """Raise InvalidParameter unless ``lookup_id`` is a PROPID_M_LOOKUPID: an int 0-2**64-1."""
    if isinstance(lookup_id, bool) or not isinstance(lookup_id, int) \
            or not 0 <= lookup_id <= _MAX_LOOKUP_ID:
        raise InvalidParameter.wrong_type("lookup_id", f"an int 0-{_MAX_LOOKUP_ID}", lookup_id,
                                          hint="use a message's lookup_id (kmq queue browse "
                                               "lists them)")


def _copy(message: Message, **changes: Any) -> Message:
    return dataclasses.replace(message, **changes)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


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
