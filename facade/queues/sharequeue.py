"""Share-group arbitration (KIP-932): a queue whose receivers are arbitrated by a Kafka share
group instead of by its receipts log (``create_queue(path, arbitration="share")``).

The broker gives each record a receiver's poll acquires an acquisition lock, counts its
deliveries and removes it from the group's view when the receiver ACCEPTs it. This module is
the queue side of that (docs/design.md, "Share-group arbitration"):

* :func:`check_share_properties` and :func:`prepare_share_queue`: what ``create_queue`` checks
  and sets up (the group configs, the KIP-1191 dead-letter topic), read back and refused when
  the broker does not keep them;
* :class:`ShareReceiver`: the share consumers of one queue handle (one, plus one per poll
  batch with peek-locks out). A message is handed out only after the broker applied its
  ACCEPT (``commit_sync`` success for the partition, within the trusted part of the lock:
  see :func:`_trusted_until`); a refused
  ACCEPT (``INVALID_RECORD_STATE``: the lock lapsed and another receiver has the record) hands
  nothing out; an ACCEPT whose outcome is unknown dead-letters a copy saying it may also be
  received again, then raises. A message delivered for the ``receive_retry_count + 2``-th time
  (``abort_count`` above ``receive_retry_count``, as for receipts queues) is moved to
  ``<queue>;poison`` with its count before its ACCEPT; the broker's own limit is that
  delivery, and a record it archives anyway (a receiver died during its last delivery) reaches
  the dead-letter topic, which every receiver drains into ``;poison``. Peek-lock receives
  hand a record out unaccepted, its acquisition lock as the lease: ``complete`` ACCEPTs it,
  ``abandon`` RELEASEs it (at least once).

Names: the share group is ``<data topic>.share``, the group draining the dead-letter topic
``<data topic>.share-dlq``, the dead-letter topic ``<broker prefix><data topic>`` (the
broker's ``errors.deadletterqueue.topic.name.prefix``, ``dlq.`` by default), and the queue's
registered receipts topic ``<data topic>.share-arbitrated``, which kmq never creates: a kmq
that predates the ``arbitration`` property and would arbitrate the queue by receipts fails on
the missing topic instead of receiving next to the share group.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar, cast

from facade.model.envelope import decode_message
from facade.errors import (
    BrokerError,
    BrokerUnavailable,
    EnvelopeError,
    InvalidParameter,
    LockLost,
    MessageQueueError,
    ReceiveTimeout,
)
from facade.kafka.kafkaseam import ACCEPT, RELEASE, SharedRecord, ShareRecordConsumer
from facade.model.message import Message, MessageClass
from facade.queues.protection import ProtectionLevel
from facade.queues.receiving import count_aborts, dead_letter_unreceivable, message_of
from facade.timeouts import receive_timeout

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.kafka.kafkaseam import KafkaRecord, KafkaSession
    from facade.queues.queuehost import QueueHost
    from facade.state.registry import QueueProperties

__all__ = ["DEFAULT_SHARE_LEASE", "DLQ_PREFIX_CONFIG", "MAX_MEMBERS", "MAX_POLL_RECORDS",
           "MAX_SHARE_LEASE", "MAX_SHARE_RETRY_COUNT", "SHARE_LOCK_MS", "ShareReceiver",
           "check_share_properties", "dead_letter_topic_of", "group_of", "prepare_share_queue",
           "share_receipts_topic", "share_topics"]

log = logging.getLogger("kmq.share")

_T = TypeVar("_T")

#: ``share.record.lock.duration.ms`` set on every share queue's group: a receiver keeps
#: records a poll acquired beyond the one it hands out while at least half of this is left.
SHARE_LOCK_MS = 30_000
#: Seconds of an acquisition lock kmq does not count on: the lock starts on the broker before
#: the poll that acquired the record returns.
_LOCK_MARGIN = 5.0
#: Longest peek-lock lease on a share queue (seconds): the acquisition lock less the margin.
MAX_SHARE_LEASE = SHARE_LOCK_MS / 1000 - _LOCK_MARGIN
#: The lease of ``receive(lock=True)`` on a share queue when none is given (seconds).
DEFAULT_SHARE_LEASE = 20.0
#: Largest ``receive_retry_count`` of a share queue: the group's delivery limit is
#: ``receive_retry_count + 2`` and Kafka allows at most 10 (``group.share.max.delivery.count.limit``).
MAX_SHARE_RETRY_COUNT = 8
#: The dead-letter drain group may retry a failed drain this often before the broker archives
#: the record (the most Kafka allows).
_DRAIN_DELIVERY_LIMIT = 10
#: ``max.poll.records`` of a receiver: records one poll acquires at most (best effort: the
#: broker acquires whole produced batches), held for the next receives.
MAX_POLL_RECORDS = 100
#: Share consumers one handle keeps at most: one polls, the others wait for their peek-locks
#: to be settled (an explicit-mode consumer polls only once its last poll is acknowledged).
MAX_MEMBERS = 8
#: Seconds one poll of a waiting receive waits.
_POLL_SLICE = 0.5
#: Seconds between a receiver's looks at the dead-letter topic.
_DRAIN_INTERVAL = 5.0
#: Seconds a ``commit_sync`` may take.
_COMMIT_TIMEOUT = 30.0
#: The broker config naming the prefix every KIP-1191 dead-letter topic must start with.
DLQ_PREFIX_CONFIG = "errors.deadletterqueue.topic.name.prefix"
#: Lock lapsed, another receiver has (or will have) the record: the ACCEPT was not applied.
_LOST_LOCK = "INVALID_RECORD_STATE"
#: ``kmq.reason`` of a copy whose ACCEPT had an unknown outcome.
_UNKNOWN = ("the outcome of its ACCEPT (share-group receive) is unknown ({}): it may also "
            "be received again from the queue")


def group_of(data_topic: str) -> str:
    """The share group of a share queue: ``<data topic>.share``."""
    return f"{data_topic}.share"


def _drain_group_of(data_topic: str) -> str:
    return f"{data_topic}.share-dlq"


def share_groups(data_topic: str) -> list[str]:
    """The groups a share queue's receivers join: its share group and the group draining its
    dead-letter topic, for ``delete_queue``."""
    return [group_of(data_topic), _drain_group_of(data_topic)]


def dead_letter_topic_of(prefix: str, data_topic: str) -> str:
    """The KIP-1191 dead-letter topic of a share queue: the broker's prefix + the data topic."""
    return f"{prefix}{data_topic}"


def share_receipts_topic(data_topic: str) -> str:
    """The receipts topic a share queue registers and nobody creates (see the module)."""
    return f"{data_topic}.share-arbitrated"


def check_share_properties(properties: QueueProperties) -> None:
    """Refuse the properties a share-arbitrated queue cannot honour.

    Raises:
        InvalidParameter: ``transactional`` (KIP-932 has no transactional acknowledgement),
            ``receive_retry_count`` None (the broker always has a delivery limit) or above
            :data:`MAX_SHARE_RETRY_COUNT`.
    """
    name = properties.path_name
    if properties.transactional:
        raise InvalidParameter(
            f"queue {name!r}: arbitration='share' cannot be transactional: a Kafka share group "
            "has no transactional acknowledgement", queue=name,
            hint="create it with transactional=False, or with arbitration='receipts' for "
                 "transactions")
    retries = properties.receive_retry_count
    if retries is None or retries > MAX_SHARE_RETRY_COUNT:
        raise InvalidParameter(
            f"queue {name!r}: arbitration='share' needs receive_retry_count 0-"
            f"{MAX_SHARE_RETRY_COUNT}, not {retries!r}: the share group's delivery limit is "
            "receive_retry_count + 2 and Kafka allows at most 10", queue=name,
            hint=f"give receive_retry_count 0-{MAX_SHARE_RETRY_COUNT} (default 5), or use "
                 "arbitration='receipts' for no limit")


def _group_settings(retries: int) -> dict[str, str]:
    return {"share.auto.offset.reset": "earliest",
            "share.isolation.level": "read_committed",
            "share.record.lock.duration.ms": str(SHARE_LOCK_MS),
            "share.delivery.count.limit": str(retries + 2)}


def _drain_settings() -> dict[str, str]:
    return {"share.auto.offset.reset": "earliest",
            "share.isolation.level": "read_committed",
            "share.record.lock.duration.ms": str(SHARE_LOCK_MS),
            "share.delivery.count.limit": str(_DRAIN_DELIVERY_LIMIT)}


def share_topics(session: KafkaSession, data_topic: str) -> list[str]:
    """The topics a share queue has beyond a receipts queue's (its dead-letter topic), for
    ``delete_queue``.

    Raises:
        BrokerUnavailable, BrokerError: the broker config could not be read.
    """
    prefix = session.broker_config(DLQ_PREFIX_CONFIG)
    return [dead_letter_topic_of(prefix, data_topic)] if prefix is not None else []


def prepare_share_queue(session: KafkaSession, properties: QueueProperties) -> str:
    """Set up a new share queue's group: its configs (start at the earliest offset, read
    committed, the lock duration, the delivery limit ``receive_retry_count + 2``, the
    dead-letter topic) and the dead-letter topic (created with
    ``errors.deadletterqueue.group.enable=true``), then read both back.

    Args:
        session (KafkaSession): the Kafka clients.
        properties (QueueProperties): the new queue's properties (checked by
            :func:`check_share_properties`); its data topic exists.

    Returns:
        str: the dead-letter topic created (the caller deletes it if creation fails later).

    Raises:
        BrokerUnavailable: the broker does not keep a setting as set, or reports no
            dead-letter prefix; the message names the setting. Nothing would stop the broker
            from archiving records unseen, so the queue must not be used.
        BrokerError: the broker refused a setting (or the in-memory Kafka, which has no share
            groups).
    """
    name = properties.path_name
    retries = properties.receive_retry_count
    assert retries is not None, "check_share_properties refuses None"
    group = group_of(properties.data_topic)
    settings = _group_settings(retries)
    # First, so that a Kafka without share groups is named as such before anything else.
    _require_kept(name, f"share group {group!r}", settings,
                  session.set_group_configs(group, settings))
    prefix = session.broker_config(DLQ_PREFIX_CONFIG)
    if prefix is None:
        raise BrokerUnavailable(
            f"queue {name!r}: the broker reports no {DLQ_PREFIX_CONFIG}: it has no KIP-1191 "
            "dead-letter topics, so records past the delivery limit would be archived unseen",
            queue=name, hint="use Apache Kafka 4.4 or later, or arbitration='receipts'")
    dead_letters = dead_letter_topic_of(prefix, properties.data_topic)
    topic_settings = {"errors.deadletterqueue.group.enable": "true",
                      "cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
    session.create_topics([dead_letters], topic_settings, exist_ok=True)
    _require_kept(name, f"topic {dead_letters!r}",
                  {"errors.deadletterqueue.group.enable": "true"},
                  session.topic_configs([dead_letters])[dead_letters])
    dlq_settings = {"errors.deadletterqueue.topic.name": dead_letters,
                    "errors.deadletterqueue.copy.record.enable": "true"}
    _require_kept(name, f"share group {group!r}", dlq_settings,
                  session.set_group_configs(group, dlq_settings))
    drain = _drain_group_of(properties.data_topic)
    _require_kept(name, f"share group {drain!r}", _drain_settings(),
                  session.set_group_configs(drain, _drain_settings()))
    return dead_letters


def _require_kept(queue: str, where: str, wanted: Mapping[str, str],
                  reported: Mapping[str, str]) -> None:
    for key, value in wanted.items():
        if reported.get(key) != value:
            raise BrokerUnavailable(
                f"queue {queue!r}: {where} reports {key}={reported.get(key)!r} after kmq set "
                f"{value!r}: without it the broker could archive the queue's records unseen",
                queue=queue, hint="check the broker's share-group settings (share.version=2, "
                "group.share.* limits) and create the queue again")


class _Member:
    """One share consumer of a handle, with the records its last poll acquired: ``held`` (not
    handed out yet, oldest first) and ``locked`` (handed out under a peek-lock, by offset). An
    explicit-mode consumer polls again only once every record of its last poll is
    acknowledged, so a member with peek-locks out does not poll until they are settled."""

    def __init__(self, consumer: ShareRecordConsumer):
        self.consumer = consumer
        self.held: list[SharedRecord] = []
        self.locked: dict[int, SharedRecord] = {}


class ShareReceiver:
    """The receiving side of one handle on a share queue: its share consumers of the queue's
    group (one, plus one per poll batch whose peek-locks are still out), the records they
    acquired and not yet handed out, and a consumer of the dead-letter drain group.

    Args:
        host (QueueHost): the queue manager (outputs, protection, dead letters).
        destination (Destination): the share queue (its properties say ``share``).
        poison (Destination): its ``;poison`` subqueue.
        required (ProtectionLevel): the receiver's protection level.
        guard (Callable[[], None] | None): called before records are judged and handed out;
            raises ``QueueNotFound`` once the queue is deleted (see
            :func:`facade.queues.destination.incarnation_guard`): a queue created again with the
            name has the same topic and group, and this handle's records of it are not its own.
    """

    def __init__(self, host: QueueHost, destination: Destination, poison: Destination,
                 required: ProtectionLevel = ProtectionLevel.NONE,
                 guard: Callable[[], None] | None = None):
        self._guard = guard
        properties = destination.properties
        assert properties is not None and properties.receive_retry_count is not None
        self._host = host
        self._destination = destination
        self._poison = poison
        self._required = required
        self._data = properties.data_topic
        #: At this delivery (abort count above receive_retry_count) a message goes to ;poison.
        self._poison_at = properties.receive_retry_count + 2
        self._members: list[_Member] = []
        self._drain: ShareRecordConsumer | None = None
        self._drain_topic: str | None = None
        self._drained_at = float("-inf")

    @property
    def name(self) -> str:
        """The queue's format name, for errors."""
        return self._destination.format_name

    # -- receive -------------------------------------------------------------------------------

    def receive(self, timeout: float | None) -> Message:
        """Take one message: acquire, ACCEPT, hand out on the broker's success.

        Raises:
            ReceiveTimeout: nothing within ``timeout`` seconds.
            BrokerUnavailable, BrokerError: the broker failed; a record whose ACCEPT had an
                unknown outcome was dead-lettered first (it may also be received again).
            MessageQueueError: an output (journal copy, ``;poison`` copy) was not written;
                the record stays acquired and its lock lapses (delivered again).
        """
        return self.receive_many(1, timeout)[0]

    def receive_many(self, max_messages: int, timeout: float | None) -> list[Message]:
        """Take up to ``max_messages``: the first wait up to ``timeout``, then what the last
        poll acquired; their ACCEPTs go in one ``commit_sync``. A result other than success
        leaves unknown which were accepted (the result is per partition): each is
        dead-lettered with a reason saying it may also be received again, then this raises.

        Raises:
            ReceiveTimeout, BrokerUnavailable, BrokerError, MessageQueueError: as
            :meth:`receive`.
        """
        return self._guarded(lambda: self._wait(
            timeout, SHARE_LOCK_MS / 2000,
            lambda member: self._hand_out(member, self._take_held(member, max_messages))))

    def receive_locked(self, timeout: float | None,
                       lease: float | None) -> tuple[Message, str, float]:
        """Peek-lock receive: take one message under its acquisition lock, without ACCEPT.

        Args:
            timeout (float | None): seconds to wait.
            lease (float | None): seconds the lock must still last, at most
                :data:`MAX_SHARE_LEASE` (the client cannot renew a lock); None:
                :data:`DEFAULT_SHARE_LEASE`.

        Returns:
            tuple[Message, str, float]: the message, its lock token (for :meth:`complete` and
            :meth:`abandon`) and ``time.time()`` when the lease ends.

        Raises:
            InvalidParameter: ``lease`` longer than the lock.
            ReceiveTimeout, BrokerUnavailable, BrokerError, MessageQueueError: as
            :meth:`receive`.
        """
        if lease is None:
            lease = DEFAULT_SHARE_LEASE
        if lease > MAX_SHARE_LEASE:
            raise InvalidParameter(
                f"lease {lease} s is longer than a peek-lock on {self.name!r} can last: its "
                f"share group's acquisition lock is {SHARE_LOCK_MS // 1000} s from the fetch "
                "and the client cannot renew it", queue=self.name,
                hint=f"give lease <= {MAX_SHARE_LEASE:g} (default {DEFAULT_SHARE_LEASE:g})")
        wanted = lease

        def take(member: _Member) -> list[tuple[Message, str, float]]:
            taken = self._take_held(member, 1)
            if not taken:
                return []
            shared, message = taken[0]
            member.locked[shared.record.offset] = shared
            return [(message, f"share:{id(member)}:{shared.record.offset}",
                     time.time() + wanted)]

        return self._guarded(lambda: self._wait(timeout, max(wanted, SHARE_LOCK_MS / 2000),
                                                take))[0]

    def complete(self, token: str, journal_copy: Message, message: Message) -> None:
        """Settle a peek-lock by removing the message: its journal copy, ACCEPT and
        ``commit_sync``, then ACK_RECEIVE.

        Raises:
            LockLost: the lock lapsed (the broker refused the ACCEPT) or this handle left the
                group after a failed receive; the message is delivered again.
            BrokerUnavailable, BrokerError: no answer: the message may have been removed or
                will be delivered again (at least once).
            MessageQueueError: the journal copy was not written; the lock is still held.
        """
        member, shared = self._lock(token, message)
        self._host.outputs.journal_removed_many([journal_copy], self._destination, None)
        del member.locked[shared.record.offset]
        if time.monotonic() >= _trusted_until([shared]):
            self._release(member, [shared])  # lets the consumer poll again; nothing else
            raise LockLost(f"the acquisition lock on lookup id {shared.record.offset} of "
                           f"{self.name!r} lapsed (or nearly) before complete(): the message "
                           "is delivered again", lookup_id=shared.record.offset,
                           queue=self.name)
        member.consumer.acknowledge(shared, ACCEPT)
        error = member.consumer.commit_sync(_COMMIT_TIMEOUT)
        if error is None and time.monotonic() >= _trusted_until([shared]):
            raise LockLost(f"complete() on lookup id {shared.record.offset} of {self.name!r} "
                           "finished after its acquisition lock may have lapsed, when the "
                           "broker's success proves nothing: the message may have been "
                           "removed or be delivered again", lookup_id=shared.record.offset,
                           queue=self.name)
        if error == _LOST_LOCK:
            raise LockLost(f"the acquisition lock on lookup id {shared.record.offset} of "
                           f"{self.name!r} lapsed before complete(): the message is back in "
                           "the queue", lookup_id=shared.record.offset, queue=self.name)
        if error is not None:
            raise BrokerError(f"complete() on {self.name!r}: the broker answered {error} to "
                              "the ACCEPT: the message may have been removed or will be "
                              "delivered again", queue=self.name, kafka_code=error)
        self._host.outputs.acknowledge_many([journal_copy], MessageClass.ACK_RECEIVE,
                                            self._destination)

    def abandon(self, token: str, message: Message) -> bool:
        """Settle a peek-lock by giving the message back (RELEASE): True if this call
        released it, False if its lock had lapsed or was settled already.

        Raises:
            BrokerUnavailable, BrokerError: no answer (the lock lapses all the same).
        """
        try:
            member, shared = self._lock(token, message)
        except LockLost:
            return False
        del member.locked[shared.record.offset]
        member.consumer.acknowledge(shared, RELEASE)
        error = member.consumer.commit_sync(_COMMIT_TIMEOUT)
        return error is None

    def _lock(self, token: str, message: Message) -> tuple[_Member, SharedRecord]:
        for member in self._members:
            if token == f"share:{id(member)}:{message.lookup_id}":
                shared = member.locked.get(cast(int, message.lookup_id))
                if shared is not None:
                    return member, shared
        raise LockLost(f"lookup id {message.lookup_id} of {self.name!r} is not locked by this "
                       "handle any more (settled already, or the handle left the share group "
                       "after a failed receive): the message is back in the queue",
                       lookup_id=message.lookup_id, queue=self.name)

    def _guarded(self, receive: Callable[[], list[_T]]) -> list[_T]:
        try:
            return receive()
        except ReceiveTimeout:
            raise  # nothing half-taken then: the consumers stay in the group
        except BaseException:
            # A record taken from a held list and left unacknowledged would make every later
            # poll of its consumer fail (explicit mode): consumers without peek-locks out
            # leave the group, which releases what they hold.
            self._drop_idle()
            raise

    def _wait(self, timeout: float | None, keep: float,
              take: Callable[[_Member], list[_T]]) -> list[_T]:
        """Hand out what ``take`` makes of held records, polling for more until ``timeout``;
        held records with less than ``keep`` seconds of lock left are released first."""
        timeout = receive_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._members:
            self._poller()  # joins the group first: a Kafka without share groups says so here
        while True:
            self._drain_dead_letters()
            self._release_stale(keep)
            member = next((m for m in self._members if m.held), None)
            if member is not None:
                if self._guard is not None:
                    self._guard()
                taken = take(member)
                if taken:
                    return taken
                continue  # every record went elsewhere (poison, lost lock): look again
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise ReceiveTimeout(f"no message in {self.name!r} within {timeout} s",
                                     queue=self.name)
            poller = self._poller()
            poller.held = poller.consumer.poll(_POLL_SLICE if left is None
                                               else min(_POLL_SLICE, max(left, 0.0)))

    def _take_held(self, member: _Member, limit: int) -> list[tuple[SharedRecord, Message]]:
        """Up to ``limit`` of ``member``'s held records that can be handed out, decoded; the
        others are settled on the way (dead-lettered, moved to ``;poison``, expired)."""
        batch: list[tuple[SharedRecord, Message]] = []
        while member.held and len(batch) < limit:
            shared = member.held.pop(0)
            message = self._judge(member, shared)
            if message is not None:
                batch.append((shared, message))
        return batch

    def _judge(self, member: _Member, shared: SharedRecord) -> Message | None:
        """The message of ``shared`` if it may be handed out; otherwise settle it (its copy
        written first, then ACCEPT) and return None."""
        record = shared.record
        aborts = shared.delivery_count - 1
        try:
            message = message_of(self._host, record, record.offset, self._destination,
                                 self._required)
        except EnvelopeError as exc:  # poison or refused by protection: dead-lettered
            dead_letter_unreceivable(self._host, record, str(exc), self._destination,
                                     self._required)
            self._settle(member, shared, "dead-lettered as unreceivable")
            return None
        count_aborts(message, aborts, record)
        if shared.delivery_count >= self._poison_at:
            self._to_poison(message)
            self._settle(member, shared, "moved to ;poison")
            return None
        if message.not_before is not None and message.not_before > _utcnow():
            # Sent by a path that could not refuse it (MessageQueue.send does): a share group
            # cannot keep it invisible, and handing it out early would break its promise.
            self._dead_letter(message, "a share-arbitrated queue cannot keep a message "
                                       "invisible until its not_before time")
            self._settle(member, shared, "not visible yet: dead-lettered")
            return None
        if _expired(message):
            self._host.outputs.reject(message, MessageClass.NACK_RECEIVE_TIMEOUT,
                                      self._destination, "time-to-be-received elapsed")
            self._settle(member, shared, "expired")
            return None
        return message

    def _to_poison(self, message: Message) -> None:
        moved = dataclasses.replace(message, move_count=message.move_count + 1,
                                    lookup_id=None, arrived_time=None)
        self._host.write_system_copy(self._poison.topics.data, moved)
        log.info("message %s of %s moved to ;poison after %d deliveries", message.id,
                 self.name, message.abort_count + 1)

    def _settle(self, member: _Member, shared: SharedRecord, what: str) -> None:
        """ACCEPT a record whose copy is written already. A refused ACCEPT can only leave a
        duplicate copy behind (whoever has the record now writes it again), never a loss, so
        it is logged.

        Raises:
            BrokerUnavailable, BrokerError: no answer; the record is delivered again and its
                copy written again.
        """
        member.consumer.acknowledge(shared, ACCEPT)
        error = member.consumer.commit_sync(_COMMIT_TIMEOUT)
        if error is not None:
            log.warning("%s@%d (%s): ACCEPT refused (%s); a later delivery writes its copy "
                        "again", self._data, shared.record.offset, what, error)

    def _hand_out(self, member: _Member,
                  batch: list[tuple[SharedRecord, Message]]) -> list[Message]:
        """Journal copies, ACCEPTs with one ``commit_sync``, then ACK_RECEIVEs; the messages
        on success, [] when the broker refused the ACCEPT of a single message."""
        if not batch:
            return []
        messages = [message for _, message in batch]
        outputs = self._host.outputs
        try:
            outputs.journal_removed_many(messages, self._destination, None)
        except BaseException:
            # Not accepted: released (or their locks lapse) and delivered again.
            try:
                self._release(member, [shared for shared, _ in batch])
            except MessageQueueError as exc:
                log.warning("%s: RELEASE after a failed journal copy not sent (%s); the locks "
                            "lapse", self._data, exc)
            raise
        trusted = _trusted_until([shared for shared, _ in batch])
        if time.monotonic() >= trusted:
            # Too little lock left to trust the broker's answer (see _trusted_until).
            self._release(member, [shared for shared, _ in batch])
            return []
        for shared, _ in batch:
            member.consumer.acknowledge(shared, ACCEPT)
        try:
            error = member.consumer.commit_sync(_COMMIT_TIMEOUT)
        except MessageQueueError as exc:
            self._dead_letter_unknown(messages, str(exc))
            raise
        if error is None and time.monotonic() >= trusted:
            error = "success after the acquisition lock may have lapsed"
        if error is not None:
            if error == _LOST_LOCK and len(batch) == 1:
                log.info("%s@%d: lock lapsed before the ACCEPT; another receiver has it",
                         self._data, batch[0][0].record.offset)
                return []
            self._dead_letter_unknown(messages, error)
            raise BrokerError(
                f"receive from {self.name!r}: the broker answered {error} to the ACCEPT of "
                f"{len(batch)} message(s); which were accepted is unknown, so each was copied "
                "to the dead-letter queue and may also be received again", queue=self.name,
                kafka_code=error)
        outputs.acknowledge_many(messages, MessageClass.ACK_RECEIVE, self._destination)
        return messages

    def _dead_letter_unknown(self, messages: list[Message], why: str) -> None:
        for message in messages:
            self._dead_letter(message, _UNKNOWN.format(why))

    def _dead_letter(self, message: Message, reason: str) -> None:
        """Copy ``message`` to the dead-letter queue whatever its journal level (a kmq
        failure, not an MSMQ one), class NACK_RECEIVE_REJECTED, ``kmq.reason`` saying why.

        Raises:
            BrokerUnavailable, BrokerError: the copy was not acknowledged.
        """
        self._host.dead_letter(dataclasses.replace(
            message, message_class=MessageClass.NACK_RECEIVE_REJECTED, time_to_be_received=None,
            properties={**message.properties, "kmq.reason": reason}))

    # -- held records and consumers ------------------------------------------------------------

    def _release_stale(self, keep: float) -> None:
        """RELEASE held records with less than ``keep`` seconds of lock left."""
        cutoff = time.monotonic() - (SHARE_LOCK_MS / 1000 - keep)
        for member in self._members:
            stale = [shared for shared in member.held if shared.acquired_at < cutoff]
            if stale:
                member.held = [shared for shared in member.held if shared.acquired_at >= cutoff]
                self._release(member, stale)

    def _release(self, member: _Member, records: list[SharedRecord]) -> None:
        """RELEASE ``records`` in a ``commit_sync`` of their own (never together with an
        ACCEPT, whose per-partition result a refused RELEASE would spoil). A refused RELEASE
        is logged: the locks lapse and the records are delivered again all the same.

        Raises:
            BrokerUnavailable, BrokerError: no answer (the locks lapse all the same).
        """
        if not records:
            return
        for shared in records:
            member.consumer.acknowledge(shared, RELEASE)
        error = member.consumer.commit_sync(_COMMIT_TIMEOUT)
        if error is not None:
            log.info("%s: RELEASE of %d record(s) not applied (%s); their locks lapse",
                     self._data, len(records), error)

    def _poller(self) -> _Member:
        """The member that polls next: one without held records or peek-locks out, a new one
        (joining the group) when every member has peek-locks out.

        Raises:
            InvalidParameter: :data:`MAX_MEMBERS` members all have peek-locks out.
        """
        for member in self._members:
            if not member.held and not member.locked:
                return member
        if len(self._members) >= MAX_MEMBERS:
            raise InvalidParameter(
                f"{self.name!r}: this handle holds peek-locks from {MAX_MEMBERS} share-group "
                "polls; settle them before receiving more", queue=self.name,
                hint="complete() or abandon() the messages received with lock=True")
        member = _Member(self._host.session.share_consumer(
            group_of(self._data), self._data, {"max.poll.records": MAX_POLL_RECORDS}))
        self._members.append(member)
        return member

    def _drop_idle(self) -> None:
        """Leave the queue's group with every consumer that has no peek-lock out, after a
        failed receive (the broker releases what they acquired); the next receive joins
        again. A failure to close is logged: the error being raised is the one the caller
        needs."""
        idle = [member for member in self._members if not member.locked]
        self._members = [member for member in self._members if member.locked]
        for member in idle:
            try:
                member.consumer.close()
            except MessageQueueError as exc:
                log.warning("%s: share consumer not closed cleanly after a failed receive "
                            "(%s); the broker releases its records when its session times out",
                            self._data, exc)

    # -- the dead-letter topic -------------------------------------------------------------------

    def _drain_dead_letters(self) -> None:
        """Move what the broker archived to the dead-letter topic into ``;poison``, at most
        every :data:`_DRAIN_INTERVAL` seconds. The broker drops the record headers, so the
        envelope is decoded from the copied value alone where it can be; otherwise the value
        goes to the dead-letter queue as a poison record."""
        now = time.monotonic()
        if now - self._drained_at < _DRAIN_INTERVAL:
            return
        self._drained_at = now
        if self._drain is None:
            topics = share_topics(self._host.session, self._data)
            if not topics:
                raise BrokerUnavailable(
                    f"receive from {self.name!r}: the broker reports no {DLQ_PREFIX_CONFIG}, "
                    "so the share group's dead-letter topic cannot be drained", queue=self.name,
                    hint="use the Apache Kafka 4.4 broker the queue was created on")
            self._drain_topic = topics[0]
            self._drain = self._host.session.share_consumer(
                _drain_group_of(self._data), self._drain_topic, {"max.poll.records": 10})
        drain = self._drain
        try:
            for shared in drain.poll(0):
                self._drain_one(shared)
                drain.acknowledge(shared, ACCEPT)
                error = drain.commit_sync(_COMMIT_TIMEOUT)
                if error is not None:
                    log.warning("%s@%d: ACCEPT of a drained dead letter refused (%s); it is "
                                "drained again", self._drain_topic, shared.record.offset,
                                error)
        except BaseException:
            # Records of the poll left unacknowledged would make its next poll fail: leave
            # the drain group (they are released and drained again) and join anew later.
            self._drain = None
            try:
                drain.close()
            except MessageQueueError as exc:
                log.warning("%s: drain consumer not closed cleanly (%s)", self._drain_topic, exc)
            raise

    def _drain_one(self, shared: SharedRecord) -> None:
        record = shared.record
        where = _dlq_header(record, "__dlq.errors.offset") or str(record.offset)
        count = _dlq_header(record, "__dlq.errors.delivery.count") or "?"
        try:
            message = decode_message(record.value, (), topic=self._data, partition=0,
                                     offset=int(where) if where.isdigit() else record.offset)
        except EnvelopeError as exc:
            self._host.dead_letter(self._host.poison_message(
                record.value, f"archived by the share group after {count} deliveries; its "
                f"value is not a kmq envelope without the record headers ({exc})",
                self._destination, f"{self._data}@0:{where}"))
            return
        delivered = int(count) if count.isdigit() else self._poison_at
        message.abort_count += delivered - 1
        self._to_poison(message)

    # -- close ---------------------------------------------------------------------------------

    def close(self) -> None:
        """RELEASE what is held and what is peek-locked, and leave both groups.

        Raises:
            BrokerUnavailable, BrokerError: a consumer did not close cleanly (the broker
                releases its records when its session times out).
        """
        members, self._members = self._members, []
        drain, self._drain = self._drain, None
        try:
            for member in members:
                records = member.held + list(member.locked.values())
                member.held, member.locked = [], {}
                if records:
                    self._release(member, records)
        finally:
            for consumer in [m.consumer for m in members] + ([drain] if drain else []):
                consumer.close()


def _trusted_until(records: list[SharedRecord]) -> float:
    """``time.monotonic()`` until which a ``commit_sync`` success for ``records`` proves their
    ACCEPT was applied: their acquisition lock less :data:`_LOCK_MARGIN`. After a lock lapsed
    and another consumer ACCEPTed the record, the first holder's ACCEPT was answered with
    success too (Apache Kafka 4.4, librdkafka 2.16), so a success past the lock proves
    nothing."""
    return min(r.acquired_at for r in records) + SHARE_LOCK_MS / 1000 - _LOCK_MARGIN


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _expired(message: Message) -> bool:
    if message.time_to_be_received is None or message.sent_time is None:
        return False
    deadline = message.sent_time + dt.timedelta(seconds=message.time_to_be_received)
    return deadline <= _utcnow()


def _dlq_header(record: KafkaRecord, name: str) -> str | None:
    for key, value in record.headers:
        if key == name:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None
