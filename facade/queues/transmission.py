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
record stays in the outgoing queue and :meth:`Transmitter.recover` (run when a queue manager opens and
by ``kmq qm run``) finishes the job: resend what is still within TTRQ, fail what is past it.
Kafka reports a timed-out copy as "possibly persisted": a copy that was in flight when TTRQ
elapsed may have arrived as well as been NACKed.

A copy the broker can never accept must not wait in the outgoing queue, or every recovery would
replay it. So a copy larger than the limits (``facade.model.topicsettings``) is refused before it is
stored (``InvalidParameter``), and a copy the producer or broker refuses for good anyway
(:class:`~facade.kafka.librdkafka.Refusal`: too large for a topic whose limit was lowered, access denied,
invalid) is failed at once, not retried: the sender gets the error when the refusal comes
while it sends, and otherwise the copy is dead-lettered and NACKed with the class of the
refusal (see :data:`_REFUSAL_CLASSES`), as a TTRQ failure is. Either way it leaves the
outgoing queue.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from facade._process import pid_alive
from facade.queues.destination import Destination
from facade.model.envelope import EncodedRecord, decode_message
from facade.errors import (
    AccessDenied,
    BrokerError,
    EnvelopeError,
    FormatNameError,
    InvalidParameter,
    MessageQueueError,
    QueueNotFound,
    TransientQueueError,
)
from facade.kafka.librdkafka import Refusal, is_fatal, poll_producer, produce, refusal
from facade.model.message import Delivery, JournalLevel, Message, MessageClass
from facade.state.outgoingqueue import OutgoingQueue, StoredRecord, outgoing_queue_path
from facade.model.timers import LONG_LIVED_SECONDS
from facade.queues.interfaces import QueueResolver, SystemQueueWriter
from facade.model.topics import QueueTopics
from facade.model.topicsettings import (
    KAFKA_DEFAULT_MAX_MESSAGE_BYTES,
    MAX_BODY_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_RECORD_BYTES,
    record_size,
)

if TYPE_CHECKING:
    from facade.config import KmqConfig
    from facade.kafka.kafkaseam import KafkaSession
    from facade.queues.systemoutputs import SystemOutputs

__all__ = ["LONG_LIVED", "SendTracker", "Transmitter", "TransmitterHost"]

log = logging.getLogger("kmq.transmission")

#: MSMQ's default time-to-reach-queue (LONG_LIVED), in seconds: the message model's.
LONG_LIVED = LONG_LIVED_SECONDS
#: Producers kept at once (one per distinct delivery mode and TTRQ in use).
_MAX_PRODUCERS = 8
_POLL_INTERVAL = 0.05
#: librdkafka's largest ``message.timeout.ms`` (TTRQs up to MSMQ's ~136 years are clamped).
_MAX_TIMEOUT_MS = 2**31 - 1
#: Seconds the failure path waits for the DLQ copy and the NACK to be acknowledged.
_SETTLE_TIMEOUT = 5.0
#: The NACK class of a copy refused for good. Each is an arrival-phase class MSMQ posts when a
#: message cannot enter its queue for a reason no retry fixes: NACK_MESSAGE_TOO_LARGE (0x800D,
#: the message is too large for the destination queue) for Kafka's size limits,
#: NACK_ACCESS_DENIED (0x8004) when the principal may not write the topic, and NACK_BAD_DST_Q
#: (0x8000, the destination queue is not available to the sending application) when the topic
#: refuses the record for another reason (invalid record or topic, policy, timestamp). Not
#: NACK_REACH_QUEUE_TIMEOUT: no time ran out, and that class tells the sender that the
#: message might still arrive if it waited longer.
_REFUSAL_CLASSES = {
    Refusal.TOO_LARGE: MessageClass.NACK_MESSAGE_TOO_LARGE,
    Refusal.ACCESS_DENIED: MessageClass.NACK_ACCESS_DENIED,
    Refusal.INVALID: MessageClass.NACK_BAD_DST_Q,
}
#: Longest ``kmq.reason`` property kept on a dead-letter copy, in characters.
_MAX_REASON = 1000
_UNKNOWN = object()


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

    def finish(self, queue: str, error: str | None,
               before_done: Callable[[], None] | None = None) -> None:
        """Record one copy's verdict; ``before_done`` runs before the waiter is woken by the
        last one (the sender removes the batch's acknowledged records from the outgoing queue
        there, so a waiting send returns with them gone)."""
        with self._lock:
            if error is not None:
                self.errors[queue] = error
            self.pending -= 1
            last = self.pending <= 0
        if last:
            if before_done is not None:
                before_done()
            self._done.set()

    def wait(self, timeout: float | None) -> bool:
        """True when every copy has a verdict (delivered or failed) within ``timeout`` seconds."""
        return self.pending <= 0 or self._done.wait(timeout)


class TransmitterHost(QueueResolver, SystemQueueWriter, Protocol):
    """What a :class:`Transmitter` needs from its queue manager: its name and configuration (the
    outgoing queue's file), its Kafka session (producers), the system outputs (ACK/NACK,
    dead-letter copies), resolution of stored copies and the system-queue writer."""

    @property
    def name(self) -> str:
        """The queue manager's name."""
        ...

    @property
    def config(self) -> KmqConfig:
        """The resolved configuration (``home`` holds the outgoing queue)."""
        ...

    @property
    def session(self) -> KafkaSession:
        """The queue manager's Kafka clients."""
        ...

    @property
    def outputs(self) -> SystemOutputs:
        """The queue manager's acknowledgments, dead-letter and journal copies."""
        ...


class Transmitter:
    """Produces message copies for one queue manager and settles their outcome.

    Args:
        manager (TransmitterHost): the owning queue manager (outputs, producers' configuration).
    """

    def __init__(self, manager: TransmitterHost):
        self.manager = manager
        self.outgoing = OutgoingQueue(outgoing_queue_path(manager.config.home, manager.name))
        self._producers: OrderedDict[tuple[Delivery, int], Any] = OrderedDict()
        self._lock = threading.Lock()
        self._parked: set[int] = set()
        #: Producers replaced after a fatal error, still polled until their callbacks are served.
        self._retired: list[Any] = []
        self._stop = threading.Event()
        #: Row ids of acknowledged or settled records, removed from the outgoing queue in one
        #: transaction per poll round (a removal needs no fsync of its own: a record that
        #: comes back after a crash is resent and its duplicate dropped by receivers).
        self._removals: list[int] = []
        self._removals_lock = threading.Lock()
        #: ``max.message.bytes`` per topic, as last described (None: not reported); only read
        #: for records that may exceed Kafka's default limit.
        self._topic_limits: dict[str, int | None] = {}
        #: Records of at most this many bytes pass every limit (see :meth:`check_size`).
        self._always_fits: int | None = None
        self._poller = threading.Thread(target=self._poll_loop, name="kmq-sender", daemon=True)
        self._poller.start()

    # -- sending -------------------------------------------------------------------------------

    def submit(self, destination: Destination, copy: Message, record: EncodedRecord,
               tracker: SendTracker | None,
               on_delivered: Callable[[], object] | None = None) -> None:
        """Produce one copy. RECOVERABLE copies are stored in the outgoing queue first.

        The same as :meth:`submit_many` with one copy.
        """
        self.submit_many([(destination, copy, record, on_delivered)], tracker)

    def submit_many(self, copies: list[tuple[Destination, Message, EncodedRecord,
                                            Callable[[], object] | None]],
                    tracker: SendTracker | None) -> None:
        """Produce copies in order: ``(destination, copy, record, on_delivered)`` each.

        Every copy is size-checked first. The RECOVERABLE copies are then stored in the
        outgoing queue in one transaction and one fsync (group commit, shared with concurrent
        sends of other threads), and only then are the copies handed to their producers.

        Args:
            copies (list[tuple[Destination, Message, EncodedRecord, Callable | None]]): each
                copy with where it goes, its encoded Kafka record and what to run once the
                broker acknowledges it (source journaling).
            tracker (SendTracker | None): counts the verdicts when the caller waits.

        Raises:
            InvalidParameter: a record is larger than kmq's limit (a body of at most
                :data:`~facade.model.topicsettings.MAX_BODY_BYTES` plus its envelope), the producers'
                ``message.max.bytes`` or the destination topic's ``max.message.bytes``; the
                message names the size and the limit. Nothing was stored or produced.
            MessageQueueError: the outgoing queue cannot be written (names the file); nothing
                was stored or produced.
            BrokerError: the producer refused a record outright (e.g. its queue is full). The
                copies before it were handed over; its stored record is removed when no retry
                can fix the refusal (:func:`~facade.kafka.librdkafka.refusal`), and the stored records of
                the copies after it are removed (they were not sent). The message says how
                many copies were handed over.
        """
        for destination, copy, record, _ in copies:
            self.check_size(destination, copy, record)
        rows: list[int | None] = [None] * len(copies)
        deadlines = [0] * len(copies)  # only a stored copy is produced again, so needs one
        stored = [i for i, item in enumerate(copies) if item[1].delivery is Delivery.RECOVERABLE]
        if stored:
            rows_of = []
            for i in stored:
                destination, copy, record, _ = copies[i]
                deadlines[i] = _deadline_ms(copy)
                # The key, value and headers come from facade.model.envelope: no OutgoingRecord
                # (and its checks of every field) is needed to store them.
                rows_of.append((destination.topics.data, record.key, record.value,
                                record.headers, str(copy.id), deadlines[i]))
            for i, row in zip(stored, self.outgoing.put_copies(rows_of, _owner_tag(),
                                                               _now_ms())):
                rows[i] = row
        for index, (destination, copy, record, on_delivered) in enumerate(copies):
            try:
                self._produce(destination, copy, record, deadlines[index], rows[index], tracker,
                              on_delivered)
            except MessageQueueError as exc:
                unsent = [r for r in rows[index + 1:] if r is not None]
                if rows[index] is not None and refusal(exc) is not None:
                    unsent.insert(0, rows[index])  # type: ignore[arg-type]
                self.outgoing.remove_many(unsent)
                if len(copies) > 1:
                    exc.message = (f"{exc.message} ({index} of {len(copies)} copies were "
                                   "handed to the producer before it)")
                raise

    def check_size(self, destination: Destination, copy: Message, record: EncodedRecord) -> None:
        """Refuse a record no broker set up for kmq would accept, before it is stored.

        Checked against :data:`~facade.model.topicsettings.MAX_RECORD_BYTES` (at most the producers'
        ``message.max.bytes``), and, for a record larger than Kafka's default limit, against
        the destination topic's ``max.message.bytes`` as the broker describes it (read once per
        topic, and again before a refusal).

        Args:
            destination (Destination): where the copy goes.
            copy (Message): the copy, for the error message.
            record (EncodedRecord): its Kafka record.

        Raises:
            InvalidParameter: the record is too large; names its size, the limit and the fix.
        """
        size = record_size(record.key, record.value, record.headers)
        if self._always_fits is not None and size <= self._always_fits:
            return  # the usual case: under every limit, nothing to describe
        session = self.manager.session
        limit = min(MAX_RECORD_BYTES, session.message_max_bytes)
        self._always_fits = min(limit, KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
        what = (f"message to {destination.format_name!r} is {size:,} bytes as a Kafka record "
                f"(body {len(copy.body):,} bytes)")
        if size > limit:
            hint = (f"send a body of at most {MAX_BODY_BYTES:,} bytes (4 MiB, MSMQ's limit) with "
                    "a small envelope, or keep large payloads elsewhere and send a reference")
            if limit < MAX_RECORD_BYTES:
                hint += ("; or remove the lower message.max.bytes from kmq.toml's [kafka] table "
                         f"(kmq uses {MAX_MESSAGE_BYTES:,})")
            raise InvalidParameter(f"{what}; kmq sends records of at most {limit:,} bytes",
                                   queue=destination.format_name, hint=hint)
        if size <= KAFKA_DEFAULT_MAX_MESSAGE_BYTES:
            return
        topic = destination.topics.data
        topic_limit = self._topic_limit(topic, size)
        if topic_limit is not None and size > topic_limit:
            raise InvalidParameter(
                f"{what}, but its topic {topic!r} accepts at most {topic_limit:,} bytes "
                "(max.message.bytes)", queue=destination.format_name,
                hint=f"raise the topic's limit: kafka-configs --bootstrap-server "
                f"{session.bootstrap_servers} --alter --entity-type topics --entity-name {topic} "
                f"--add-config max.message.bytes={MAX_MESSAGE_BYTES} (`kmq doctor` lists every "
                "kmq topic that needs it)")

    def _topic_limit(self, topic: str, size: int) -> int | None:
        """The topic's ``max.message.bytes``, described again when the cached value would
        refuse ``size``; None when the broker does not report it or the topic is missing."""
        cached = self._topic_limits.get(topic, _UNKNOWN)
        if cached is None or (isinstance(cached, int) and size <= cached):
            return cached
        try:
            value = self.manager.session.topic_configs([topic])[topic].get("max.message.bytes")
        except (QueueNotFound, AccessDenied) as exc:
            # A missing topic fails the send later like any missing topic (TTRQ); without the
            # DescribeConfigs right the broker's verdict is the check.
            log.warning("cannot read max.message.bytes of %s (%s): the broker's verdict decides",
                        topic, exc)
            value = None
        limit = int(value) if value is not None and value.lstrip("-").isdigit() else None
        self._topic_limits[topic] = limit
        return limit

    def _produce(self, destination: Destination, copy: Message, record: EncodedRecord,
                 deadline_ms: int, row: int | None, tracker: SendTracker | None,
                 on_delivered: Callable[[], object] | None) -> None:
        ttrq_ms = _ttrq_ms(copy)
        if row is None and tracker is None and on_delivered is None and not _wants_verdict(copy):
            # Fire and forget: an EXPRESS copy nobody waits for, that asked for no ACK/NACK and
            # no dead-lettering, has nothing to settle; a failure loses it, as in MSMQ. Skipping
            # the delivery report saves a Python callback per message on the poller thread.
            self._hand_over(copy.delivery, ttrq_ms, destination, record, None, [])
            return

        def on_delivery(err: Any, _msg: Any) -> None:
            error = None if err is None else err.str()
            refused = None if err is None else refusal(err)
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
                    refused = refusal(exc)
            try:
                self._settle(destination, copy, row, error, on_delivered, refused)
            finally:
                if tracker is not None:
                    tracker.finish(destination.format_name, error,
                                   before_done=self._flush_removals)

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
        topic = destination.topics.data
        try:
            produce(producer, topic, record.value, record.key, record.headers, on_delivery)
        except BrokerError as exc:
            if not is_fatal(exc):
                raise
            # The producer is unusable (e.g. the broker forgot its producer id): replace it.
            self._retire(producer)
            producer = self._producer(delivery, ttrq_ms)
            used.append(producer)
            produce(producer, topic, record.value, record.key, record.headers, on_delivery)

    def _settle(self, destination: Destination, copy: Message, row: int | None,
                error: str | None, on_delivered: Callable[[], object] | None,
                refused: Refusal | None = None) -> None:
        outputs = self.manager.outputs
        try:
            if error is None:
                outputs.acknowledge(copy, MessageClass.ACK_REACH_QUEUE, destination)
                if on_delivered is not None:
                    on_delivered()
            elif refused is not None:
                self._refuse(copy, destination, refused, error)
            else:
                self._fail(copy, destination, error)
        except MessageQueueError as exc:
            # The DLQ copy could not be written: the broker is unreachable (a transient error),
            # or the dead-letter queue refuses it too. Keep the record so recover() finishes
            # the job later. Express copies have no record and are lost, as in MSMQ.
            transient = isinstance(exc, TransientQueueError)
            log.log(logging.WARNING if transient else logging.ERROR,
                    "could not settle message %s for %s: %s", copy.id, destination.format_name,
                    exc)
            if row is not None:
                self._parked.add(row)
            return
        if row is not None:
            with self._removals_lock:
                self._removals.append(row)

    def _flush_removals(self) -> None:
        """Remove the settled records from the outgoing queue, in one transaction."""
        with self._removals_lock:
            rows, self._removals = self._removals, []
        if not rows:
            return
        try:
            self.outgoing.remove_many(rows)
        except MessageQueueError as exc:
            # They stay and are resent by a later recovery; receivers drop the duplicates.
            log.warning("could not remove %d delivered record(s) from %s: %s", len(rows),
                        self.outgoing.path, exc)

    def _fail(self, copy: Message, destination: Destination, reason: str) -> None:
        """Dead-letter and NACK a copy that did not arrive within TTRQ."""
        self._dead_letter(copy, destination, MessageClass.NACK_REACH_QUEUE_TIMEOUT,
                          f"not delivered to {destination.format_name} within "
                          f"time-to-reach-queue: {reason}")

    def _refuse(self, copy: Message, destination: Destination, refused: Refusal,
                error: str) -> None:
        """Dead-letter and NACK a copy its destination refuses for good."""
        self._dead_letter(copy, destination, _REFUSAL_CLASSES[refused],
                          f"{destination.format_name} refuses it ({refused.value}): {error}")

    def _dead_letter(self, copy: Message, destination: Destination, message_class: MessageClass,
                     reason: str) -> None:
        """Write the DLQ copy (when the journal level asks for it) and post the NACK (when
        asked for).

        A copy whose body is the reason it failed (NACK_MESSAGE_TOO_LARGE, or a body past
        :data:`MAX_BODY_BYTES` left by another kmq) cannot be written anywhere whole: both go
        without the body, and ``kmq.reason`` on the DLQ copy names its size. A refusal also
        puts its reason in ``kmq.reason``.

        Raises:
            BrokerUnavailable, BrokerError: the DLQ copy was not acknowledged.
        """
        outputs = self.manager.outputs
        if message_class is MessageClass.NACK_MESSAGE_TOO_LARGE or len(copy.body) > MAX_BODY_BYTES:
            reason = f"{reason}; the body of {len(copy.body):,} bytes was dropped"
            copy = copy.stamped(body=b"", properties=_with_reason(copy, reason))
        elif message_class is not MessageClass.NACK_REACH_QUEUE_TIMEOUT:
            copy = copy.stamped(properties=_with_reason(copy, reason))
        # Short timeouts: this runs on the poller thread, and a broker that is down must not
        # stall every other delivery verdict; recover() retries parked records.
        outputs.reject(copy, message_class, destination, reason, timeout=_SETTLE_TIMEOUT)

    # -- recovery ------------------------------------------------------------------------------

    def recover(self) -> int:
        """Finish the outgoing records left by dead processes (and this one's parked ones).

        Records still within TTRQ are produced again (queue views drop the duplicate if the
        first attempt had arrived); records past TTRQ are failed (DLQ and NACK).

        Returns:
            int: records handled.
        """
        handled = 0
        for row_id, error in self.outgoing.unreadable():
            handled += self._poison(row_id, error.topic, error.raw, error.message)
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
        """Resend, fail or keep one record; never raises for the record's own sake, so a record
        nothing can deliver cannot stop a queue manager from opening."""
        record = stored.record
        expired = record.deadline_ms is not None and record.deadline_ms <= _now_ms()
        try:
            copy = decode_message(record.value, record.headers, topic=record.topic)
        except EnvelopeError as exc:
            return self._poison(stored.row_id, record.topic, record.value, exc.message)
        try:
            destination = self.manager.resolve_topic(record.topic, copy)
        except (QueueNotFound, FormatNameError) as exc:
            # FormatNameError: its destination_queue is not a format name (a damaged record):
            # no queue will ever take it, so it fails at its deadline like a vanished queue's
            # copy, instead of being retried at every recovery for good.
            if not expired:
                log.warning("outgoing record %d for %s waits for its queue until its "
                            "time-to-reach-queue: %s", stored.row_id, record.topic, exc)
                return 0
            # The queue is gone for good: fail the copy for where it was sent.
            destination = _vanished(record.topic, copy)
        except MessageQueueError as exc:
            log.warning("outgoing record %d for %s cannot be recovered now: %s", stored.row_id,
                        record.topic, exc)
            return 0
        if expired:
            return self._finish(stored.row_id, record.topic, lambda: self._fail(
                copy, destination, "time-to-reach-queue elapsed before delivery"))
        encoded = EncodedRecord(record.key, record.value, list(record.headers))
        try:
            self._produce(destination, copy, encoded, record.deadline_ms or _deadline_ms(copy),
                          stored.row_id, None, None)
        except MessageQueueError as exc:
            refused = refusal(exc)
            if refused is None:
                log.warning("outgoing record %d for %s stays for a later recovery: %s",
                            stored.row_id, destination.format_name, exc)
                return 0
            error = str(exc)
            return self._finish(stored.row_id, record.topic, lambda: self._refuse(
                copy, destination, refused, error))
        return 1

    def _poison(self, row_id: int, topic: str | None, raw: bytes | None, why: str) -> int:
        """Dead-letter an outgoing record that cannot be decoded, and remove it.

        It goes to the dead-letter queue as a poison record does (its raw value as the body,
        class NACK_RECEIVE_REJECTED, ``kmq.reason``, ``kmq.source`` naming the file and row):
        resent, it could only be a poison record in its queue, and kept, it would fail every
        recovery again (and every ``QueueManager.open()`` would raise on it;
        tests/faults/test_garbage.py writes such rows). It stays only while the dead-letter
        queue cannot be written, for the next recovery.
        """
        where = f"{self.outgoing.path} row {row_id}"
        reason = f"outgoing record for {topic or 'an unknown topic'} cannot be decoded: {why}"
        log.error("%s (%s); it goes to the dead-letter queue", reason, where)
        manager = self.manager
        return self._finish(row_id, topic or where, lambda: manager.dead_letter(
            manager.poison_message(raw, reason, topic or where, where), timeout=_SETTLE_TIMEOUT))

    def _finish(self, row_id: int, topic: str, fail: Callable[[], None]) -> int:
        """Run ``fail`` (dead-letter and NACK) and remove the record; keep it when that fails."""
        try:
            fail()
        except MessageQueueError as exc:
            transient = isinstance(exc, TransientQueueError)
            log.log(logging.WARNING if transient else logging.ERROR,
                    "outgoing record %d for %s could not be dead-lettered and stays: %s",
                    row_id, topic, exc)
            return 0
        self.outgoing.remove(row_id)
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
            self._flush_removals()
            self._stop.wait(_POLL_INTERVAL)

    def close(self, timeout: float = 10.0) -> None:
        """Flush, stop the poller and close the outgoing queue."""
        self.flush(timeout)
        self._stop.set()
        self._poller.join(timeout)
        with self._lock:
            self._producers.clear()
            self._retired.clear()
        self._flush_removals()
        self.outgoing.close()


def _with_reason(copy: Message, reason: str) -> dict[str, str]:
    """``copy``'s properties plus ``kmq.reason`` (as poison records carry it)."""
    return {**copy.properties, "kmq.reason": reason[:_MAX_REASON]}


def _vanished(topic: str, copy: Message) -> Destination:
    """The destination of a copy whose queue no longer exists, for its DLQ copy and NACK."""
    return Destination(copy.destination_queue or topic, QueueTopics(topic), None, read_only=False)


def _wants_verdict(message: Message) -> bool:
    """Whether a copy's delivery verdict leads anywhere: an ACK/NACK to its admin queue, or a
    dead-letter copy (NACK_REACH_QUEUE_TIMEOUT) when its journal level has DEADLETTER."""
    # int.__and__: IntFlag's own operator is Python code, and this runs once per copy.
    return bool((message.admin_queue and message.acknowledge)
                or int.__and__(message.journal, JournalLevel.DEADLETTER))


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
    buckets and let two producers race (``tests/faults/test_sender_kills.py`` checks the order). The
    cost: a record resent by recovery gets its full TTRQ again from the resend, so it may
    arrive up to its age at recovery past its deadline (records already past it are failed,
    not resent).
    """
    ttrq, ttbr = message.time_to_reach_queue, message.time_to_be_received
    if ttrq is None:
        seconds = LONG_LIVED if ttbr is None else ttbr
    else:
        seconds = ttrq if ttbr is None else min(ttrq, ttbr)
    return max(1, min(int(seconds * 1000), _MAX_TIMEOUT_MS))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _owner_tag() -> str:
    return f"message:{os.getpid()}"


def _owner_pid(purpose: str) -> int | None:
    _, _, pid_text = purpose.partition(":")
    # ASCII digits of a pid the system can have: a damaged purpose ("message:²", "message:0", a
    # number past a C long) must neither make recovery raise nor pass for a live owner for good.
    if not (pid_text.isascii() and pid_text.isdigit()):
        return None
    pid = int(pid_text)
    return pid if 0 < pid < 2**31 else None
