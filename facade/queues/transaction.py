"""MSMQ transactions on Kafka transactions: :class:`MessageQueueTransaction`.

MSMQ's strongest promise (seeds 000 and 001): the messages a transaction sends arrive exactly once
and in order, or not at all; a message received in a transaction is removed only if the
transaction commits, and goes back to its queue (abort count + 1) if it aborts. kmq keeps it on
Kafka this way:

* **Sends are buffered until commit.** ``queue.send(m, transaction=tx)`` checks and stamps the
  message and keeps its copies in the transaction; nothing reaches Kafka before
  :meth:`MessageQueueTransaction.commit`. An abort therefore writes nothing at all.
* **A transactional receive is a peek-lock** (:mod:`facade.queues.peeklock`): one LOCK receipt, with a
  lease of :data:`TRANSACTION_LEASE`, takes the message from every other receiver at once
  (``queue.receive_many(n, transaction=tx)``: one LOCK for the batch). The COMPLETED receipt
  that removes it for good is written at commit, one per lock.
* **Commit is one Kafka transaction** (Kafka's consume-transform-produce pattern): every buffered
  copy and every COMPLETED receipt is produced by the queue manager's transactional producer
  (``transactional.id``, see :class:`TransactionalProducer`) between ``begin_transaction`` and
  ``commit_transaction``. Readers use ``isolation.level=read_committed``, so either all of it
  becomes visible or none of it does: a message received and a reply sent in one transaction
  both happen or neither does. Commits of one queue manager are serialised, so transactions to
  one queue land in commit order.
* **Abort releases the receives** with one RELEASE receipt per lock (abort count + 1;
  ``;poison`` after the queue's ``receive_retry_count``). A process that dies inside a transaction leaves its locks to
  their lease: the messages come back for the next receiver.

What needs the broker: a Kafka transaction that fails or is cut off *during* commit is aborted
by the broker (after ``transaction.timeout.ms``, or at once when a producer with the same
``transactional.id`` starts), and Kafka hides aborted records from read_committed readers, which
every kmq reader is. A broker that showed them would make a crash in the middle of a commit
leave part of a transaction visible.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from facade.errors import (
    InvalidParameter,
    LockLost,
    TransactionAborted,
    TransactionUsage,
)
from facade.kafka.librdkafka import TransactionalProducer, produce
from facade.model.envelope import EncodedRecord, encode_message
from facade.model.message import Message, MessageClass
from facade.timeouts import wait_seconds

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    
__all__ = [
    "COMMIT_MARGIN",
    "TRANSACTION_LEASE",
    "MessageQueueTransaction",
    "TransactionStatus",
]

log = logging.getLogger("kmq.transaction")

#: Seconds a message received in a transaction stays locked: MSMQ holds it until commit or
#: abort; kmq needs a bound so that a crashed receiver's messages come back.
TRANSACTION_LEASE = 300.0
#: Seconds of lease a received message must still have when commit starts (at most a tenth of
#: the lease); a transaction older than that aborts instead of racing its leases.
COMMIT_MARGIN = 30.0
#: Seconds commit waits for the broker.
COMMIT_TIMEOUT = 60.0


class TransactionStatus(enum.Enum):
    """Where a :class:`MessageQueueTransaction` is (System.Messaging's ``MessageQueueTransactionStatus``)."""

    INITIALIZED = "initialized"
    """Begun; nothing sent or received in it yet."""
    PENDING = "pending"
    """Holds sends or receives; neither committed nor aborted yet."""
    COMMITTED = "committed"
    """Committed: its sends are in their queues and its receives are removed."""
    ABORTED = "aborted"
    """Aborted: nothing it sent was written; what it received is back in its queue."""


@dataclass(frozen=True)
class _Send:
    destination: Destination
    copy: Message


@dataclass(frozen=True)
class _Receive:
    handle: Any  # the PeekLocks (facade.queues.peeklock) of the queue handle that took the lock
    locked: Any  # the LockedMessage it holds


class MessageQueueTransaction:
    """An MSMQ internal transaction (System.Messaging's ``MessageQueueTransaction``).

    Begin one with :meth:`QueueManager.begin_transaction`; pass it to
    ``MessageQueue.send(message, transaction=tx)``, ``MessageQueue.receive(timeout,
    transaction=tx)`` and ``MessageQueue.receive_many(n, timeout, transaction=tx)``; end it
    with :meth:`commit` or :meth:`abort`. As a context manager it commits when the block ends
    normally and aborts when it raises (the exception is not swallowed).

    Guarantees (see the module text for how): its sends become visible together and exactly once
    at commit, in send order per queue, and transactions of one queue manager land in commit
    order; its receives are removed at commit, or returned to their queues (abort count + 1) at
    abort, or when the process dies, once their lease (:data:`TRANSACTION_LEASE`) passes.
    Within a transaction the first message's time-to-reach-queue and time-to-be-received apply
    to all its messages, and every message is sent with priority 0 (MSMQ's rule).

    Args:
        manager (QueueManager): the queue manager whose producer commits it.
        producer (TransactionalProducer): that producer.
        lease (float): seconds its receives stay locked when it never ends (its process died);
            default :data:`TRANSACTION_LEASE`.

    Attributes:
        id (str): the transaction id (PROPID_M_XACTID of its messages).
        status (TransactionStatus): where it is.
        lease (float): see Args.
    """

    def __init__(self, manager: Any, producer: TransactionalProducer,
                 lease: float = TRANSACTION_LEASE):
        self.id = str(uuid.uuid4())
        #: Seconds a message received in this transaction stays locked if the transaction
        #: neither commits nor aborts (its process died): then it returns to its queue.
        self.lease = lease
        self._manager = manager
        self._producer = producer
        self._status = TransactionStatus.INITIALIZED
        self._sends: list[_Send] = []
        self._receives: list[_Receive] = []
        self._rejections: list[Callable[[], object]] = []
        self._first: Message | None = None
        self._lock = threading.RLock()

    @property
    def producer(self) -> TransactionalProducer:
        """The queue manager's transactional producer that commits this transaction."""
        return self._producer

    @property
    def status(self) -> TransactionStatus:
        """Where the transaction is (:class:`TransactionStatus`)."""
        return self._status

    def __enter__(self) -> MessageQueueTransaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._status not in (TransactionStatus.INITIALIZED, TransactionStatus.PENDING):
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def __repr__(self) -> str:
        return (f"<MessageQueueTransaction {self.id} {self._status.value}: "
                f"{len(self._sends)} copies to send, {len(self._receives)} received>")

    # -- enlisting (called by MessageQueue) -----------------------------------------------------

    def timers(self, message: Message) -> dict[str, object]:
        """The timers ``message`` is sent with: MSMQ applies the first message's
        time-to-reach-queue and time-to-be-received to every message of a transaction.

        Returns:
            dict[str, object]: ``{}`` for the first message (it keeps its own), else the first
            message's two timers as :meth:`Message.stamped` arguments.
        """
        with self._lock:
            if self._first is None:
                self._first = message
                return {}
            first = self._first
        return {"time_to_reach_queue": first.time_to_reach_queue,
                "time_to_be_received": first.time_to_be_received}

    def enlist_sends(self, sends: list[tuple[Destination, Message]],
                     rejections: Sequence[Callable[[], object]] = ()) -> None:
        """Add checked, stamped copies to send at commit (MessageQueue.send calls this).

        Args:
            sends (list[tuple[Destination, Message]]): the copies, in send order.
            rejections (Sequence[Callable[[], object]]): what to do after commit for copies their
                queue rejects (dead-letter copy, NACK); dropped at abort.

        Raises:
            TransactionUsage: the transaction is committed or aborted already.
        """
        with self._lock:
            self._require_active()
            self._sends.extend(_Send(destination, copy) for destination, copy in sends)
            self._rejections.extend(rejections)
            if sends or rejections:
                self._status = TransactionStatus.PENDING

    def enlist_receives(self, handle: Any, locked: Sequence[Message]) -> None:
        """Add messages received under this transaction's lock, all or none (a queue handle's
        peek-locks, :class:`facade.queues.peeklock.PeekLocks`, call this for ``MessageQueue.receive``
        and ``receive_many``; ``handle`` is that object, which settles them at the end).

        Raises:
            TransactionUsage: the transaction is committed or aborted already.
        """
        with self._lock:
            self._require_active()
            self._receives.extend(_Receive(handle, message) for message in locked)
            self._status = TransactionStatus.PENDING

    def require_active(self) -> None:
        """Raise unless sends and receives may still join the transaction.

        Raises:
            TransactionUsage: it is committed or aborted already.
        """
        with self._lock:
            self._require_active()

    def _require_active(self) -> None:
        if self._status in (TransactionStatus.COMMITTED, TransactionStatus.ABORTED):
            raise TransactionUsage(
                f"transaction {self.id} is {self._status.value}: nothing more can join it",
                hint="begin a new transaction (QueueManager.begin_transaction())")

    # -- ending ---------------------------------------------------------------------------------

    def commit(self, timeout: float = COMMIT_TIMEOUT) -> None:
        """Commit: make every send visible and remove every receive, atomically.

        Args:
            timeout (float): seconds (>= 0) to wait for the broker.

        Raises:
            InvalidParameter: ``timeout`` is not finite seconds >= 0; nothing was committed.
            TransactionUsage: already committed or aborted.
            TransactionAborted: the transaction could not commit and was aborted instead (a
                received message's lease was too close to its end, the producer was fenced,
                or the broker refused it); nothing it sent is visible and its receives are
                back in their queues.
            BrokerUnavailable: the broker did not answer; the transaction was aborted.
            LockLost: (only after a commit) a receipt of another process settled a received
                message first, so it may be delivered again; the sends are committed.
        """
        if timeout is not COMMIT_TIMEOUT:
            timeout = wait_seconds(timeout, "timeout")
        with self._lock:
            self._require_active()
            if not self._sends and not self._receives:
                self._status = TransactionStatus.COMMITTED
                self._run_rejections()
                return
            try:
                self._check_leases()
                self._journal_receives()
                records = self._encode_sends()
                completions = self._producer.commit(
                    lambda producer: self._produce(producer, records), timeout)
            except BaseException:
                self._end_aborted()
                raise
            self._status = TransactionStatus.COMMITTED
        self._after_commit(completions)

    def abort(self) -> None:
        """Abort: discard every send and return every received message to its queue.

        Each received message goes back with its abort count raised by one (``;poison`` after
        the queue's ``receive_retry_count``). A release the broker does not take now happens
        when the message's lease passes. Aborting an aborted transaction does nothing.

        Raises:
            TransactionUsage: the transaction is committed already.
        """
        with self._lock:
            if self._status is TransactionStatus.ABORTED:
                return
            if self._status is TransactionStatus.COMMITTED:
                raise TransactionUsage(f"transaction {self.id} is committed: it cannot abort")
            self._end_aborted()

    def _end_aborted(self) -> None:
        self._status = TransactionStatus.ABORTED
        self._sends.clear()
        self._rejections.clear()
        receives, self._receives = self._receives, []
        for handle, messages in _by_handle(receives):
            for message, exc in handle.release_aborted(messages, "its transaction aborted"):
                log.warning("transaction %s: message %s stays locked in %s until its lease "
                            "passes (%s), then returns to the queue", self.id, message.id,
                            handle.format_name, exc)

    def _run_rejections(self) -> None:
        # The destination rejects such copies on arrival, which happens only at commit.
        rejections, self._rejections = self._rejections, []
        for reject in rejections:
            reject()

    def _check_leases(self) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        for receive in self._receives:
            expires = receive.locked.lease_expires
            if expires is not None and (expires - now).total_seconds() < self._margin():
                raise TransactionAborted(
                    f"transaction {self.id} aborted: message {receive.locked.id} received in it "
                    f"from {receive.handle.format_name!r} is locked only until "
                    f"{expires.isoformat()}; committing now could race its release",
                    hint=f"commit within {self.lease - self._margin():g} s of the receive")

    def _margin(self) -> float:
        return min(COMMIT_MARGIN, self.lease / 10)

    def _journal_receives(self) -> None:
        # The queue journal copy is written before the removal, as complete() does: a failed
        # journal write aborts the transaction instead of losing the copy.
        for handle, messages in _by_handle(self._receives):
            handle.journal_locked(messages)

    def _encode_sends(self) -> list[tuple[str, EncodedRecord]]:
        # PROPID_M_FIRST_IN_XACT / LAST_IN_XACT are known only now, so copies are encoded here.
        # A copy whose time-to-reach-queue passed before the commit never reaches its queue:
        # it is dead-lettered (DEADXACT) and NACKed after the commit instead of being written.
        records = []
        first_id = self._sends[0].copy.id if self._sends else None
        last_id = self._sends[-1].copy.id if self._sends else None
        now = dt.datetime.now(dt.timezone.utc)
        written: list[_Send] = []  # what the commit writes (acknowledged and journaled after it)
        for send in self._sends:
            copy = send.copy.stamped(first_in_transaction=send.copy.id == first_id,
                                     last_in_transaction=send.copy.id == last_id)
            if _past_ttrq(copy, now):
                self._rejections.append(functools.partial(self._too_late, copy, send.destination))
                continue
            records.append((send.destination.topics.data, encode_message(copy, validate=False)))
            written.append(send)
        self._sends = written
        return records

    def _too_late(self, copy: Message, destination: Destination) -> None:
        self._manager.outputs.reject(copy, MessageClass.NACK_REACH_QUEUE_TIMEOUT, destination,
                                     "its transaction committed after its time-to-reach-queue")

    def _produce(self, producer: Any, records: list[tuple[str, EncodedRecord]]) -> list[Any]:
        for topic, record in records:
            produce(producer, topic, record.value, record.key, record.headers, None,
                    "send in transaction")
        return [(handle, handle.start_complete(messages, producer, self.id))
                for handle, messages in _by_handle(self._receives)]

    def _after_commit(self, completions: list[tuple[Any, Any]]) -> None:
        outputs = self._manager.outputs
        lost = []
        for handle, started in completions:
            lost += [(handle, message) for message in handle.finish_complete(started)]
        journaled: set[object] = set()
        for send in self._sends:
            outputs.acknowledge(send.copy, MessageClass.ACK_REACH_QUEUE, send.destination)
            if send.copy.id not in journaled:
                journaled.add(send.copy.id)
                outputs.source_journal(send.copy)
        self._sends.clear()
        self._receives.clear()
        self._run_rejections()
        if lost:
            raise LockLost(
                f"transaction {self.id} committed, but {len(lost)} of its receives had been "
                "released by another process first (their leases passed): those messages may "
                "be delivered again", queue=lost[0][0].format_name)


def _by_handle(receives: list[_Receive]) -> list[tuple[Any, list[Message]]]:
    """The received messages grouped by the handle that locked them, in receive order."""
    groups: dict[int, tuple[Any, list[Message]]] = {}
    for receive in receives:
        groups.setdefault(id(receive.handle), (receive.handle, []))[1].append(receive.locked)
    return list(groups.values())


def check_transaction(transaction: object) -> MessageQueueTransaction | str | None:
    """Validate a ``transaction=`` argument of send or receive.

    Returns:
        MessageQueueTransaction | str | None: the transaction, ``"single"``, or None.

    Raises:
        InvalidParameter: anything else.
    """
    if transaction is None or isinstance(transaction, MessageQueueTransaction):
        return transaction
    if transaction == "single":
        return "single"
    raise InvalidParameter(
        f"transaction must be a MessageQueueTransaction, \"single\" or None, not {transaction!r}",
        hint="tx = qm.begin_transaction(); q.send(m, transaction=tx); tx.commit()")


def _past_ttrq(copy: Message, now: dt.datetime) -> bool:
    """Whether ``copy``'s time-to-reach-queue (from its sent time) has passed at ``now``."""
    if copy.time_to_reach_queue is None or copy.sent_time is None:
        return False
    return now > copy.sent_time + dt.timedelta(seconds=copy.time_to_reach_queue)
