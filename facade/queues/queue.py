"""``MessageQueue``: send, receive and peek on one opened queue (MSMQ's queue handle).

Receive order is highest priority first, then arrival order. Receive is destructive and shared
across processes: a message is removed by the first receipt that names it (see
``docs/design.md``), so two receivers never get the same message. A nontransactional receive is
at-most-once, as in MSMQ: once the receipt is acknowledged the message is gone from the queue,
even if the receiving process dies before using it. Peek-lock receive (``receive(lock=True)``,
at least once) is in :mod:`facade.queues.peeklock` and prefetch (``open_queue(name, prefetch=k)``) in
:mod:`facade.queues.prefetch`.

The handle reads like System.Messaging's ``MessageQueue``: each public method checks its
arguments and rights and hands the work to the mechanism that owns it, one object each, all
sharing the queue and its view (:class:`~facade.queues.openedqueue.OpenedQueue`): sending
(:mod:`facade.queues.sendpath`), the wait loop (:mod:`facade.queues.waitloop`), receive claims and the
messages they hold (:mod:`facade.queues.claims`), peek-locks and a transaction's receives
(:mod:`facade.queues.peeklock`), prefetched batches (:mod:`facade.queues.prefetch`), system actions such as
expiry, poison and moves (:mod:`facade.queues.systemactions`), and the receives of a queue a Kafka
share group arbitrates (:mod:`facade.queues.sharereceives`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from facade.security.acl import AccessRight
from facade.arguments import require_bool, require_iterable
from facade.queues.claims import HandleReader, ReceiveClaims
from facade.queues.cursor import Cursor, QueueReader
from facade.errors import InvalidParameter, ReceiveTimeout
from facade.model.formatnames import FormatName, QueuePath
from facade.model.message import Message, MessageId
from facade.queues.openedqueue import OpenedQueue
from facade.queues.peeklock import DEFAULT_LEASE, DEFAULT_PREFETCH_LEASE, PeekLocks
from facade.queues.prefetch import Prefetcher
from facade.queues.protection import ProtectionLevel
from facade.model.receipts import ReceiptAction
from facade.queues.sendpath import SEND_TIMEOUT, SendPath
from facade.queues.sharereceives import ShareReceives
from facade.queues.systemactions import CLAIM_GRACE, SystemActions
from facade.timeouts import lease_to_ms, receive_timeout, wait_seconds
from facade.queues.transaction import MessageQueueTransaction, check_transaction
from facade.queues.waitloop import WaitLoop, first_pending

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.queues.queuehost import QueueHost
    from facade.state.registry import QueueProperties

__all__ = ["CLAIM_GRACE", "MessageQueue"]

#: What a send takes as a body alone (System.Messaging's ``Send(object)``).
_BODY_TYPES = (bytes, bytearray, memoryview)
#: The largest PROPID_M_LOOKUPID (a 64-bit unsigned key).
_MAX_LOOKUP_ID = 2**64 - 1
#: What a share-arbitrated queue lacks for counting (MessageQueue.count and friends).
_NO_COUNT = ("message count (the group's start offset bounds the queue's length only from "
             "above)")


class MessageQueue:
    """An opened queue. Get one from :meth:`QueueManager.open_queue` or ``create_queue``.

    Args:
        manager (QueueHost): the owning queue manager.
        reference (FormatName | QueuePath): what it was opened with, parsed.
        destinations (list[Destination]): the queue(s) it resolves to now (several for a
            distribution list or multiple-element format name, which can only be sent to).
        prefetch (int): ``receive()`` takes up to this many messages with one PREFETCH receipt
            and hands them out from memory (see :mod:`facade.queues.prefetch`); 0 = off.
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
        self.reference = reference
        self.format_name = str(reference)
        opened = self._opened = OpenedQueue(manager, reference, destinations,
                                            lambda: self.protection_level, spread_picks)
        self._system = system = SystemActions(opened)
        self._waits = waits = WaitLoop(opened, system.sweep)
        self._claims = claims = ReceiveClaims(opened, waits, system)
        self._locks = PeekLocks(opened, waits, system, self)
        self._prefetch = Prefetcher(opened, waits, claims, system, prefetch, prefetch_lease)
        self._shared = ShareReceives(opened, self)
        self._sends = SendPath(opened)
        #: Runs begin_receive / begin_peek, one at a time (made at the first of them).
        self._worker: ThreadPoolExecutor | None = None
        if prefetch and self.arbitration == "share":
            opened.refuse_share("prefetch handles", "a prefetching handle (prefetch=k)",
                                why="the share consumer batches already: use prefetch=0")

    @property
    def destinations(self) -> list[Destination]:
        """list[Destination]: the queue(s) this handle resolves to now (a list's members are
        resolved again at each send)."""
        return self._opened.destinations

    @destinations.setter
    def destinations(self, destinations: list[Destination]) -> None:
        self._opened.destinations = destinations

    @property
    def arbitration(self) -> str:
        """str: who arbitrates this handle's queue: ``"share"`` for a queue created with
        ``arbitration="share"`` (not its journal or subqueues, which are receipts queues),
        else ``"receipts"`` (a list or multiple-element name, which is only sent to,
        included)."""
        return self._opened.arbitration

    # -- properties ------------------------------------------------------------------------

    @property
    def properties(self) -> QueueProperties:
        """The queue's properties (PROPID_Q_*), read fresh from the registry."""
        return self._opened.properties()

    def set_properties(self, **changes: Any) -> QueueProperties:
        """Change queue properties (label, journal, quota_kb...); see QueueManager.set_properties."""
        return self.manager.set_properties(self._opened.single().format_name, **changes)

    # -- send ------------------------------------------------------------------------------

    def send(self, message: Message | bytes, *, wait: bool = False,
             timeout: float = SEND_TIMEOUT,
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
        return self._sends.send((_as_message(message, "message"),), wait, timeout, transaction)[0]

    def send_many(self, messages: Iterable[Message | bytes], *, wait: bool = False,
                  timeout: float = SEND_TIMEOUT,
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
        return self._sends.send(batch, wait, timeout, transaction) if batch else []

    # -- receive and peek ------------------------------------------------------------------

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
        up to ``k`` messages taken with one PREFETCH receipt (see :mod:`facade.queues.prefetch`).

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
        self._opened.authorize(remove=True)
        if self.arbitration == "share":
            return self._shared.receive(timeout, lock, lease, transaction, 1)[0]
        transaction = check_transaction(transaction)
        if transaction is not None:
            if lock:
                raise InvalidParameter(
                    "receive() takes lock=True or a transaction, not both: a transactional "
                    "receive is locked until its transaction ends", queue=self.format_name)
            return self._locks.receive_in_transaction(timeout, transaction, 1)[0]
        if lock:
            return self._locks.receive(timeout, lease)
        if self._prefetch.size:
            return self._prefetch.receive(receive_timeout(timeout))
        return self._claims.receive(timeout)

    def complete(self, message: Message) -> None:
        """Finish a peek-lock receive: remove the message for good (see
        :meth:`facade.queues.peeklock.PeekLocks.complete`). On a share-arbitrated queue: the journal
        copy, ACCEPT and ``commit_sync``, then ACK_RECEIVE.

        Raises:
            InvalidParameter: ``message`` was not received with ``lock=True`` through this
                handle.
            LockLost: the lock was settled by someone else first (on a share queue: the
                acquisition lock lapsed, or the handle left the group after a failed receive).
            BrokerUnavailable, BrokerError: no answer; on a share queue the message may have
                been removed or will be delivered again (at least once).
        """
        if self.arbitration != "share":
            self._locks.complete(message)
            return
        self._shared.complete(message)

    def abandon(self, message: Message) -> bool:
        """Give a peek-locked message back to the queue (see
        :meth:`facade.queues.peeklock.PeekLocks.abandon`); on a share-arbitrated queue a RELEASE (its
        delivery count goes up by one).

        Returns:
            bool: True if this call released it, False if its lock had been settled already.

        Raises:
            InvalidParameter: ``message`` was not received with ``lock=True``.
            BrokerUnavailable: the verdict could not be read (the lock lapses all the same).
        """
        if self.arbitration != "share":
            return self._locks.abandon(message)
        return self._shared.abandon(message)

    def peek(self, timeout: float | None = None) -> Message:
        """Return the first message without removing it (``MQ_ACTION_PEEK_CURRENT``).

        Raises:
            ReceiveTimeout: no message within ``timeout`` seconds.
            AccessDenied: the caller lacks PEEK_MESSAGE.
            UnsupportedFormatNameOperation: a share-arbitrated queue (no peek).
        """
        self._opened.refuse_share("peek", "peek")
        self._opened.authorize(remove=False)
        message: Message = self._waits.first(self._claims.peek, first_pending, remove=False,
                                             timeout=timeout)
        return message

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
        self._opened.authorize(remove=True)
        if self.arbitration == "share":
            return self._shared.receive(timeout, False, DEFAULT_LEASE, transaction, max_messages)
        transaction = check_transaction(transaction)
        if transaction is not None:
            return self._locks.receive_in_transaction(timeout, transaction, max_messages)
        if self._prefetch.size:
            return self._prefetch.receive_many(max_messages, timeout)
        return self._claims.receive_many(max_messages, timeout)

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
        with self._opened.lock:
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
        self._opened.refuse_share("selective receive", "receive by id")
        return self._by(lambda state: state.by_message_id(key), True, timeout, f"id {key}")

    def peek_by_id(self, message_id: MessageId | str, timeout: float | None = 0) -> Message:
        """Return the message with this id without removing it (``PeekById``); arguments and
        errors as :meth:`receive_by_id`."""
        key = _id_text(message_id, "message_id")
        self._opened.refuse_share("peek", "peek by id")
        return self._by(lambda state: state.by_message_id(key), False, timeout, f"id {key}")

    def receive_by_correlation_id(self, correlation_id: MessageId | str,
                                  timeout: float | None = 0) -> Message:
        """Remove and return the first message with this correlation id; arguments and errors
        as :meth:`receive_by_id` (InvalidParameter names ``correlation_id``)."""
        key = _id_text(correlation_id, "correlation_id")
        self._opened.refuse_share("selective receive", "receive by correlation id")
        return self._by(lambda state: state.by_correlation_id(key), True, timeout,
                        f"correlation id {key}")

    def peek_by_correlation_id(self, correlation_id: MessageId | str,
                               timeout: float | None = 0) -> Message:
        """Return the first message with this correlation id without removing it; arguments
        and errors as :meth:`receive_by_id`."""
        key = _id_text(correlation_id, "correlation_id")
        self._opened.refuse_share("peek", "peek by correlation id")
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
        self._opened.refuse_share("selective receive", "receive by lookup id")
        return self._by_lookup_id(lookup_id, remove=True)

    def peek_by_lookup_id(self, lookup_id: int) -> Message:
        """Return the message with this lookup id without removing it (``MQ_LOOKUP_PEEK_CURRENT``).

        Raises:
            MessageAlreadyReceived: the message was removed (received, purged, expired).
            MessageNotFound: no message ever had this lookup id.
            InvalidParameter: ``lookup_id`` is not an int 0 to 2**64-1.
            UnsupportedFormatNameOperation: a share-arbitrated queue.
        """
        self._opened.refuse_share("peek", "peek by lookup id")
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
        self._opened.refuse_share("selective receive", "move by lookup id")
        # Resolve first: a bad subqueue name fails before anything is claimed.
        self._opened.subqueue_destination(subqueue)
        self._opened.authorize(remove=True)
        return self._system.take_named(lookup_id, ReceiptAction.MOVE, target=subqueue)

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
        self._opened.refuse_share("selective receive", "mark_rejected by lookup id")
        if not isinstance(reason, str):
            raise InvalidParameter.wrong_type("reason", "a str", reason)
        self._opened.authorize(remove=True)
        return self._system.take_named(lookup_id, ReceiptAction.REJECT,
                                       target=self.manager.dead_letter_topic, reason=reason[:1000])

    @property
    def reader(self) -> QueueReader:
        """QueueReader: this handle's receive steps (its view, wait loop, claim and peek), what
        its cursors (:class:`facade.queues.cursor.Cursor`) walk the queue with. Applications call
        :meth:`receive`, :meth:`peek` and :meth:`cursor` instead."""
        self._opened.refuse_share("cursor", "cursors")
        return HandleReader(self._opened, self._waits, self._claims)

    def cursor(self) -> Cursor:
        """A cursor over this queue (``MQCreateCursor``): peek_current, peek_next,
        receive_current. See :class:`facade.queues.cursor.Cursor`.

        Raises:
            UnsupportedFormatNameOperation: a share-arbitrated queue (no cursors).
        """
        self._opened.refuse_share("cursor", "cursors")
        self._opened.authorize(remove=False)
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
        self._opened.refuse_share("purge (a share group cannot accept records it has not acquired)",
                                  "purge")
        self._opened.authorize(remove=True)
        view = self._opened.open_view()
        view.catch_up()
        outcome = view.claim(ReceiptAction.PURGE, purge_below=view.state.data_offset)
        return outcome.purged

    def count(self) -> int:
        """Messages in the queue now, including ones not yet visible (not-before) or expired.

        Raises:
            AccessDenied: the caller lacks GET_PROPERTIES.
            UnsupportedFormatNameOperation: a share-arbitrated queue (no count).
        """
        self._opened.refuse_share(_NO_COUNT, "count")
        self.manager.access.require(self._opened.single(), AccessRight.GET_PROPERTIES)
        view = self._opened.open_view()
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
        self._opened.refuse_share(_NO_COUNT, "expired_count")
        view = self._opened.open_view()
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
        self._opened.refuse_share(_NO_COUNT, "counts")
        self.manager.access.require(self._opened.single(), AccessRight.GET_PROPERTIES)
        view = self._opened.open_view()
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
        self._opened.refuse_share("receipts log", "receipts")
        view = self._opened.open_view()
        view.catch_up()
        return view.malformed_receipts

    def malformed_snapshots(self) -> int:
        """Records of the queue manager's snapshot topic under this queue's key that this
        handle skipped when it opened: not valid snapshots of this queue, or stale ones (see
        ``docs/design.md``, "Bounded state"); the handle read the logs instead.

        Raises:
            UnsupportedFormatNameOperation: a share-arbitrated queue (no snapshots).
        """
        self._opened.refuse_share("snapshots", "snapshots")
        return self._opened.open_view().malformed_snapshots

    def expire_due(self) -> int:
        """Dead-letter the messages whose time-to-be-received has elapsed (MSMQ's TTBR expiry).

        Each expired message is claimed with an EXPIRE receipt; the winner copies it to the
        dead-letter queue with class NACK_RECEIVE_TIMEOUT when its journal level has DEADLETTER,
        posts a NACK_RECEIVE_TIMEOUT to its admin queue when NEGATIVE_RECEIVE was requested, and
        closes the claim with COMPLETED. Receivers call this before every pick; ``kmq qm run``
        calls it for every queue, so expiry happens even when nobody receives. The same sweep
        settles peek-locks and prefetched batches whose lease passed and moves messages
        released too often to ``;poison`` (see :mod:`facade.queues.systemactions`).

        Returns:
            int: messages this call expired, dead-lettered as poison records, released or
            dead-lettered after their lease, or moved to ``;poison``. 0 on a share-arbitrated
            queue: its receivers expire and move messages as they acquire them, and the
            broker keeps the locks.
        """
        if self.arbitration == "share":
            return 0
        return self._system.expire_due(self._opened.open_view())

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
        view = self._opened.open_view()
        view.catch_up()
        return self._system.recover(view, grace)

    def close(self) -> None:
        """Release this handle's Kafka reader and producer.

        A message a failed receive of this handle still holds is dead-lettered first (class
        NACK_RECEIVE_REJECTED, ``kmq.reason`` says why).

        Peek-locked messages handed out through this handle and not settled are released
        (abort count + 1); a prefetched batch is settled: COMPLETED for what was handed out,
        RELEASE for the rest (see :mod:`facade.queues.peeklock`, :mod:`facade.queues.prefetch`).

        Raises:
            BrokerUnavailable: a held message could not be dead-lettered, or a lock could not
                be settled (the clients are closed all the same).
        """
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=True, cancel_futures=True)
        try:
            try:
                self._locks.release_on_close(self._prefetch.settle_on_close())
            finally:
                try:
                    self._claims.release_held()
                finally:
                    self._shared.close()
        finally:
            self._opened.close_view()
            self._sends.close()

    def __enter__(self) -> MessageQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- selective receives ------------------------------------------------------------------

    def _by(self, find: Callable[[Any], Any], remove: bool, timeout: float | None,
            what: str) -> Message:
        """Receive (``remove``) or peek the message ``find`` names, waiting up to ``timeout``."""
        timeout = receive_timeout(timeout)
        self._opened.authorize(remove)
        return self._waits.until_found(find, self._claims.take if remove else self._claims.peek,
                                       timeout, what)

    def _by_lookup_id(self, lookup_id: int, remove: bool) -> Message:
        _check_lookup_id(lookup_id)
        self._opened.authorize(remove)
        return self._claims.by_lookup_id(lookup_id, remove)


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
    """The text of a message or correlation id given to a receive or peek by id. Text that is
    no valid id is passed on: it matches no message, so the receive raises MessageNotFound,
    as MSMQ does for an unknown id, not InvalidParameter.

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


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
