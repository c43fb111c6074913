"""Delivery of messages to queue topics: the outgoing queue, time-to-reach-queue, arrival verdicts.

MSMQ keeps a sent message in the sender's outgoing queue until the destination has it. kmq does
the same for RECOVERABLE messages: each copy is written to a durable SQLite outgoing queue under
``KMQ_HOME`` before it is produced, and removed when the broker acknowledges it, or when its
failure has been dealt with. EXPRESS messages are not stored: a crash loses them, as in MSMQ.

Time-to-reach-queue (TTRQ) is librdkafka's ``message.timeout.ms``, which is a producer setting,
so producers are kept per (delivery mode, TTRQ). A copy the broker has not acknowledged within
TTRQ, for whatever reason (broker unreachable, topic missing), fails with NACK_REACH_QUEUE_TIMEOUT:
it goes to the dead-letter queue when its journal level has DEADLETTER, and the NACK to its admin
queue when NEGATIVE_ARRIVAL was requested. If the broker is unreachable even for those, the
record stays in the outgoing queue and :meth:`Sender.recover` (run when a queue manager opens and
by ``kmq qm run``) finishes the job: resend what is still within TTRQ, fail what is past it.
Kafka reports a timed-out copy as "possibly persisted": a copy that was in flight when TTRQ
elapsed may have arrived as well as been NACKed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from facade._process import pid_alive
from facade.envelope import EncodedRecord, decode_message
from facade.errors import BrokerError, MessageQueueError, TransientQueueError
from facade.kafka import is_fatal, map_kafka_errors, poll_producer
from facade.message import Delivery, JournalLevel, Message, MessageClass
from facade.outgoing import OutgoingQueue, OutgoingRecord, StoredRecord

if TYPE_CHECKING:
    from facade.manager import Destination, QueueManager

__all__ = ["LONG_LIVED", "SendTracker", "Sender"]

log = logging.getLogger("kmq.sender")

#: MSMQ's default time-to-reach-queue (LONG_LIVED: 4 days in MSMQ 3.0 and later), in seconds.
LONG_LIVED = 4 * 24 * 3600.0
#: Producers kept at once (one per distinct delivery mode and TTRQ in use).
_MAX_PRODUCERS = 8
_POLL_INTERVAL = 0.05
#: librdkafka's largest ``message.timeout.ms`` (TTRQs up to MSMQ's ~136 years are clamped).
_MAX_TIMEOUT_MS = 2**31 - 1
#: Seconds the failure path waits for the DLQ copy and the NACK to be acknowledged.
_SETTLE_TIMEOUT = 5.0


@dataclass
class SendTracker:
    """Completion of the copies of one send.

    Attributes:
        errors (dict[str, str]): failed destinations (format name -> reason).
    """

    pending: int
    errors: dict[str, str] = field(default_factory=dict)
    _done: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def finish(self, queue: str, error: str | None) -> None:
        with self._lock:
            if error is not None:
                self.errors[queue] = error
            self.pending -= 1
            if self.pending <= 0:
                self._done.set()

    def wait(self, timeout: float | None) -> bool:
        """True when every copy has a verdict (delivered or failed) within ``timeout`` seconds."""
        return self.pending <= 0 or self._done.wait(timeout)


class Sender:
    """Produces message copies for one queue manager and settles their outcome.

    Args:
        manager (QueueManager): the owning queue manager (outputs, producers' configuration).
    """

    def __init__(self, manager: QueueManager):
        self.manager = manager
        self.outgoing = OutgoingQueue(manager.config.home / "outgoing" / f"{manager.name}.sqlite")
        self._producers: OrderedDict[tuple[Delivery, int], Any] = OrderedDict()
        self._lock = threading.Lock()
        self._parked: set[int] = set()
        #: Producers replaced after a fatal error, still polled until their callbacks are served.
        self._retired: list[Any] = []
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="kmq-sender", daemon=True)
        self._poller.start()

    # -- sending -------------------------------------------------------------------------------

    def submit(self, destination: Destination, copy: Message, record: EncodedRecord,
               tracker: SendTracker | None,
               on_delivered: Callable[[], None] | None = None) -> None:
        """Produce one copy. RECOVERABLE copies are stored in the outgoing queue first.

        Raises:
            MessageQueueError: the outgoing queue cannot be written (names the file).
            BrokerError: the producer refused the record outright (e.g. its queue is full).
        """
        row = None
        deadline_ms = 0  # only a stored copy is produced again, so only it needs its deadline
        if copy.delivery is Delivery.RECOVERABLE:
            deadline_ms = _deadline_ms(copy)
            row = self.outgoing.put(OutgoingRecord(
                topic=destination.topics.data, key=record.key, value=record.value,
                headers=tuple(record.headers), message_id=str(copy.id), deadline_ms=deadline_ms,
                purpose=_owner_tag(), created_ms=_now_ms(),
            ))
        self._produce(destination, copy, record, deadline_ms, row, tracker, on_delivered)

    def _produce(self, destination: Destination, copy: Message, record: EncodedRecord,
                 deadline_ms: int, row: int | None, tracker: SendTracker | None,
                 on_delivered: Callable[[], None] | None) -> None:
        ttrq_ms = _ttrq_ms(copy)
        if row is None and tracker is None and on_delivered is None and not _wants_verdict(copy):
            # Fire and forget: an EXPRESS copy nobody waits for, that asked for no ACK/NACK and
            # no dead-lettering, has nothing to settle; a failure loses it, as in MSMQ. Skipping
            # the delivery report saves a Python callback per message on the poller thread.
            self._hand_over(copy.delivery, ttrq_ms, destination, record, None, [])
            return

        def on_delivery(err: Any, _msg: Any) -> None:
            error = None if err is None else err.str()
            if err is not None and row is not None and is_fatal(err) and deadline_ms > _now_ms():
                # The producer failed, not this copy: a stored copy is produced again by a new
                # producer (queue views drop the duplicate if the first attempt had arrived).
                self._retire(used[-1])
                try:
                    self._produce(destination, copy, record, deadline_ms, row, tracker,
                                  on_delivered)
                    return
                except MessageQueueError as exc:
                    error = f"{error}; resending failed: {exc}"
            try:
                self._settle(destination, copy, row, error, on_delivered)
            finally:
                if tracker is not None:
                    tracker.finish(destination.format_name, error)

        used: list[Any] = []  # the producer, known before its callback can run
        self._hand_over(copy.delivery, ttrq_ms, destination, record, on_delivery, used)

    def _hand_over(self, delivery: Delivery, ttrq_ms: int, destination: Destination,
                   record: EncodedRecord, on_delivery: Callable[[Any, Any], None] | None,
                   used: list[Any]) -> None:
        """``produce()`` the record on the producer for (delivery, TTRQ), appended to ``used``
        before the record is handed over.

        Raises:
            BrokerError: the producer refused the record (a producer that failed fatally is
                replaced and the record handed to the new one first).
        """
        producer = self._producer(delivery, ttrq_ms)
        used.append(producer)
        try:
            with map_kafka_errors("send to queue", destination.topics.data):
                producer.produce(destination.topics.data, value=record.value, key=record.key,
                                 headers=record.headers, on_delivery=on_delivery)
        except BrokerError as exc:
            if not is_fatal(exc):
                raise
            # The producer is unusable (e.g. the broker forgot its producer id): replace it.
            self._retire(producer)
            producer = self._producer(delivery, ttrq_ms)
            used.append(producer)
            with map_kafka_errors("send to queue", destination.topics.data):
                producer.produce(destination.topics.data, value=record.value, key=record.key,
                                 headers=record.headers, on_delivery=on_delivery)

    def _settle(self, destination: Destination, copy: Message, row: int | None,
                error: str | None, on_delivered: Callable[[], None] | None) -> None:
        outputs = self.manager.outputs
        try:
            if error is None:
                outputs.acknowledge(copy, MessageClass.ACK_REACH_QUEUE, destination)
                if on_delivered is not None:
                    on_delivered()
            else:
                self._fail(copy, destination, error)
        except TransientQueueError as exc:
            # The broker is unreachable for the DLQ copy too: keep the record so recover()
            # finishes the job later. Express copies have no record and are lost, as in MSMQ.
            log.warning("could not settle message %s for %s: %s", copy.id,
                        destination.format_name, exc)
            if row is not None:
                self._parked.add(row)
            return
        if row is not None:
            self.outgoing.remove(row)

    def _fail(self, copy: Message, destination: Destination, reason: str) -> None:
        outputs = self.manager.outputs
        # Short timeouts: this runs on the poller thread, and a broker that is down must not
        # stall every other delivery verdict; recover() retries parked records.
        outputs.dead_letter(copy, MessageClass.NACK_REACH_QUEUE_TIMEOUT, timeout=_SETTLE_TIMEOUT)
        outputs.acknowledge(copy, MessageClass.NACK_REACH_QUEUE_TIMEOUT, destination,
                            reason=f"not delivered to {destination.format_name} within "
                            f"time-to-reach-queue: {reason}", timeout=_SETTLE_TIMEOUT)

    # -- recovery ------------------------------------------------------------------------------

    def recover(self) -> int:
        """Finish the outgoing records left by dead processes (and this one's parked ones).

        Records still within TTRQ are produced again (queue views drop the duplicate if the
        first attempt had arrived); records past TTRQ are failed (DLQ and NACK).

        Returns:
            int: records handled.
        """
        handled = 0
        for stored in self.outgoing.pending():
            owner = _owner_pid(stored.record.purpose)
            if owner == os.getpid() and stored.row_id not in self._parked:
                continue  # in flight in this process: its delivery callback settles it
            if owner != os.getpid() and pid_alive(owner):
                continue  # another live sender settles its own records
            self._parked.discard(stored.row_id)
            handled += self._recover_one(stored)
        return handled

    def _recover_one(self, stored: StoredRecord) -> int:
        record = stored.record
        try:
            copy = decode_message(record.value, record.headers, topic=record.topic)
            destination = self.manager.resolve_topic(record.topic, copy)
        except MessageQueueError as exc:
            log.warning("outgoing record %d for %s cannot be recovered: %s", stored.row_id,
                        record.topic, exc)
            return 0
        if record.deadline_ms is not None and record.deadline_ms <= _now_ms():
            try:
                self._fail(copy, destination, "time-to-reach-queue elapsed before delivery")
            except TransientQueueError:
                return 0
            self.outgoing.remove(stored.row_id)
            return 1
        encoded = EncodedRecord(record.key, record.value, list(record.headers))
        self._produce(destination, copy, encoded, record.deadline_ms or _deadline_ms(copy),
                      stored.row_id, None, None)
        return 1

    # -- producers -----------------------------------------------------------------------------

    def _producer(self, delivery: Delivery, timeout_ms: int) -> Any:
        # Round TTRQ up to whole seconds so nearby values share a producer.
        bucket = min(-(-timeout_ms // 1000) * 1000, _MAX_TIMEOUT_MS)
        key = (delivery, bucket)
        with self._lock:
            producer = self._producers.get(key)
            if producer is None:
                config = {"message.timeout.ms": bucket}
                producer = self.manager.session.producer(delivery, extra=config)
                self._producers[key] = producer
                if len(self._producers) > _MAX_PRODUCERS:
                    _old_key, old = self._producers.popitem(last=False)
                    old.flush(30.0)
            self._producers.move_to_end(key)
            return producer

    def _retire(self, producer: Any) -> None:
        """Stop using a producer that failed fatally; the next copy gets a new one."""
        with self._lock:
            for key, candidate in list(self._producers.items()):
                if candidate is producer:
                    del self._producers[key]
                    self._retired.append(producer)
                    log.warning("a %s producer failed fatally and was replaced", key[0].name)

    def flush(self, timeout: float) -> int:
        """Flush every producer; returns how many records are still undelivered."""
        with self._lock:
            producers = list(self._producers.values()) + self._retired
        left = 0
        for producer in producers:
            try:
                left += producer.flush(timeout)
            except Exception as exc:  # noqa: BLE001 - a fatally failed producer's flush raises
                # (confluent-kafka even raises SystemError there); its records stay in the
                # outgoing queue for recovery, so report them as undelivered and go on.
                log.warning("flushing a failed producer: %s", exc)
                left += len(producer)
        return left

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                producers = list(self._producers.values()) + self._retired
            for producer in producers:
                # A fatal producer error, or a failing delivery callback, must not stop the
                # poller: every later delivery verdict of the process depends on it.
                try:
                    error = poll_producer(producer)
                except Exception:  # noqa: BLE001 - logged; the next poll goes on
                    log.exception("a delivery callback failed")
                    continue
                if error is not None:
                    log.warning("producer error: %s", error)
                    self._retire(producer)
            with self._lock:
                self._retired = [p for p in self._retired if len(p)]
            self._stop.wait(_POLL_INTERVAL)

    def close(self, timeout: float = 10.0) -> None:
        """Flush, stop the poller and close the outgoing queue."""
        self.flush(timeout)
        self._stop.set()
        self._poller.join(timeout)
        with self._lock:
            self._producers.clear()
            self._retired.clear()
        self.outgoing.close()


def _wants_verdict(message: Message) -> bool:
    """Whether a copy's delivery verdict leads anywhere: an ACK/NACK to its admin queue, or a
    dead-letter copy (NACK_REACH_QUEUE_TIMEOUT) when its journal level has DEADLETTER."""
    return bool((message.admin_queue and message.acknowledge)
                or message.journal & JournalLevel.DEADLETTER)


def _deadline_ms(message: Message) -> int:
    """Absolute TTRQ deadline: sent time + min(TTRQ, TTBR) (TTBR takes precedence), else
    LONG_LIVED."""
    deadline = message.reach_queue_deadline()
    if deadline is None:
        return _now_ms() + int(LONG_LIVED * 1000)
    return int(deadline.timestamp() * 1000)


def _ttrq_ms(message: Message) -> int:
    """The copy's time-to-reach-queue as set on the message, min(TTRQ, TTBR), else LONG_LIVED,
    in ms: it selects the copy's producer (whose ``message.timeout.ms`` it becomes).

    Keyed by the setting, not by the time left: one sender's copies with the same setting then
    share one producer and keep their order, even when a slow outgoing-queue write (a busy disk)
    or a recovery of records of different ages would have put them in different one-second
    buckets and let two producers race (found by ``tests/faults/test_sender_kills.py``). The
    cost: a record resent by recovery gets its full TTRQ again from the resend, so it may
    arrive up to its age at recovery past its deadline (records already past it are failed,
    not resent).
    """
    limits = [t for t in (message.time_to_reach_queue, message.time_to_be_received)
              if t is not None]
    seconds = min(limits) if limits else LONG_LIVED
    return max(1, min(int(seconds * 1000), _MAX_TIMEOUT_MS))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _owner_tag() -> str:
    return f"message:{os.getpid()}"


def _owner_pid(purpose: str) -> int | None:
    _, _, pid_text = purpose.partition(":")
    return int(pid_text) if pid_text.isdigit() else None
