"""Message-id sequence numbers that stay unique across every process and host of a queue manager.

An MSMQ message id is the sending queue manager's GUID plus a 32-bit sequence number. Every kmq
process that uses a queue-manager name shares its GUID (from the queue-manager registry), on one
host or on many, so no two of them may draw the same sequence number: receivers drop a message
whose id they have seen as a duplicate (see :mod:`facade.state.queuestate`), which would lose it
silently.

**Blocks are leased through Kafka.** To lease a block, a process appends one record to the
queue manager's single-partition topic ``kmq.<qm>.system.idblocks``
(:func:`facade.model.topics.id_block_topic`) with ``acks=all``, and takes the offset the broker
acknowledges. The producer is not idempotent: a lease that a retry wrote twice only leaves a
block nobody draws from, while an idempotent producer's first record waits for its producer id
(about 0.5 s with librdkafka 2.16 on Apache Kafka 4.4), which every ``QueueManager.open``
paid. Block ``o`` is the sequence numbers
``[o * BLOCK_SIZE, (o + 1) * BLOCK_SIZE)`` modulo 2**32. Kafka gives every record of a partition
its own offset and never reuses one, after retention or compaction either, so no two leases,
in any process on any host, get the same block. Nothing is read back. The topic is compacted on
one fixed key, so it stays one record long; compaction removes records, never offsets.

What follows from that:

* **Broker down.** :meth:`QueueManager.open <facade.manager.QueueManager.open>` leases the first
  block (through :meth:`MessageIdAllocator.prepare`), and the next block is requested in the
  background once half of the current one is used. So a process whose broker goes away can
  usually still draw between ``BLOCK_SIZE / 2`` and ``1.5 * BLOCK_SIZE`` ids (a RECOVERABLE send
  then waits in the outgoing queue). When a block is needed and no lease is acknowledged within
  :data:`LEASE_TIMEOUT` seconds, :meth:`MessageIdAllocator.new` raises ``BrokerUnavailable``:
  the send fails with that error and no id is ever repeated.
* **Wrap.** Sequence numbers wrap after 2**32, as MSMQ's do. Since every lease takes a whole
  block, the wrap comes after 2**32 / BLOCK_SIZE = 4,194,304 leases: one per process that opens
  the queue manager, plus one per further BLOCK_SIZE ids it draws. A repeated id is dropped
  only if the first message with it is still among the last ``DEDUPE_WINDOW`` (2**18) records
  of the same queue, so a wrap can lose a message only on a queue that received fewer than
  2**18 messages while 4 million leases were taken.
* **Block size.** Larger blocks mean fewer leases (one acknowledged produce each, hidden by
  the background request) and a longer outage a sender rides out; smaller blocks mean that
  short-lived processes, which use one block each, waste fewer ids, so the wrap comes later.
  1024 keeps a lease under 1 % of the produce work of a sender at 10,000 msg/s and the wrap
  4 million process starts away. BLOCK_SIZE is part of the wire contract: every process of a
  queue manager must use the same one.
* **Do not delete the topic.** A deleted and recreated topic starts again at offset 0 and
  hands out the blocks of its first life again. A process that sees the offsets go backwards
  refuses the block (``BrokerError``), but processes that start afterwards cannot tell. So the
  topic is queue-manager state like the registries: keep it as long as the queue manager's
  GUID is in use. (A cluster that loses all its data loses the queue-manager registry too, and
  the next ``open()`` registers a new GUID.)
* **No local file.** A counter file per host would give each host its own counter (so hosts
  sharing a queue manager would collide), and a corrupt or truncated file would restart it at
  0. A ``$KMQ_HOME/<qm>.sequence`` file is never read.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Protocol

from facade.errors import (
    BrokerError,
    BrokerUnavailable,
    MessageQueueError,
    QueueNotFound,
    TransientQueueError,
)
from facade.kafka.librdkafka import NO_LINGER, PendingRecord, produce_async
from facade.kafka.kafkaseam import KafkaSession
from facade.model.message import Delivery, MessageId
from facade.model.topics import id_block_topic

__all__ = ["BLOCK_SIZE", "LEASE_TIMEOUT", "BlockLease", "BlockSource", "KafkaBlockSource",
           "MessageIdAllocator"]

log = logging.getLogger("kmq.sequence")

#: Sequence numbers per leased block. Part of the wire contract: every process of a queue
#: manager must use the same value. Divides 2**32, so no block straddles the wrap.
BLOCK_SIZE = 1024
#: Seconds a block lease may take before the id (and so the send) fails with BrokerUnavailable.
LEASE_TIMEOUT = 10.0
_MODULUS = 2**32
#: One record per key is all the topic needs to hold; compaction never lowers the next offset.
_TOPIC_CONFIG = {"cleanup.policy": "compact"}


class BlockLease(Protocol):
    """A block requested from a :class:`BlockSource`, not yet acknowledged."""

    def wait(self, timeout: float) -> int:
        """Wait for the lease and return the block number (>= 0; distinct for every lease).

        Raises:
            MessageQueueError: the lease failed or was not acknowledged within ``timeout`` s.
        """
        ...


class BlockSource(Protocol):
    """Where a :class:`MessageIdAllocator` leases blocks (:class:`KafkaBlockSource`)."""

    def request(self) -> BlockLease:
        """Start leasing one block; return at once.

        Raises:
            MessageQueueError: the request could not be started.
        """
        ...

    def close(self) -> None:
        """Release what the source holds."""
        ...


class _KafkaLease:
    __slots__ = ("_pending", "_topic", "_session")

    def __init__(self, pending: PendingRecord, topic: str, session: KafkaSession):
        self._pending = pending
        self._topic = topic
        self._session = session

    def wait(self, timeout: float) -> int:
        try:
            offset = self._pending.wait(timeout)
        except (BrokerUnavailable, BrokerError) as exc:
            if isinstance(exc, BrokerError) and exc.kafka_code != "_MSG_TIMED_OUT":
                raise
            # Not acknowledged in time, by the wait or by the record's own timeout: the
            # producer retried in silence, so the cluster is asked why.
            problem = self._session.write_problem(self._topic)
            why = f": {problem[0]}" if problem else ""
            raise BrokerUnavailable(
                f"lease a message-id block (topic {self._topic!r}) not acknowledged within "
                f"{timeout:.2g} s{why}; no message id can be drawn until one is",
                hint=problem[1] if problem else "check that the Kafka brokers are running "
                "and reachable") from exc
        except QueueNotFound as exc:
            raise BrokerError(
                f"the message-id block topic {self._topic!r} does not exist",
                kafka_code="UNKNOWN_TOPIC_OR_PART",
                hint="open the queue manager again (QueueManager.open, `kmq qm init`), which "
                "creates it; never delete it while the queue manager's GUID is in use",
            ) from exc
        if offset < 0:
            raise BrokerError(f"the broker acknowledged a message-id block lease on "
                              f"{self._topic!r} without an offset ({offset})",
                              hint="kmq needs acks=all; check the broker")
        return offset


class KafkaBlockSource:
    """Leases message-id blocks on a queue manager's ``kmq.<qm>.system.idblocks`` topic.

    Each lease appends one small record (key: the queue-manager name; value: JSON naming the
    host, process and time, for people reading the topic; nothing reads it back). The
    record's offset is the block number.

    Args:
        session (KafkaSession): the Kafka clients to use.
        queue_manager (str): the queue manager's name.
        timeout (float): seconds librdkafka keeps trying to deliver one lease record.

    Raises:
        InvalidParameter: ``queue_manager`` gives no legal topic name.
    """

    def __init__(self, session: KafkaSession, queue_manager: str, *,
                 timeout: float = LEASE_TIMEOUT):
        self.topic = id_block_topic(queue_manager)
        self._session = session
        self._key = queue_manager.encode("utf-8")
        self._timeout = timeout
        self._producer: Any = None

    def ensure_topic(self) -> None:
        """Create the topic (one partition, compacted) if it does not exist.

        Raises:
            BrokerUnavailable, AccessDenied, BrokerError: as mapped from Kafka.
        """
        self._session.create_topics([self.topic], _TOPIC_CONFIG, exist_ok=True)

    def request(self) -> BlockLease:
        """Append one lease record and return at once (see :class:`BlockSource`).

        Raises:
            BrokerError (or a more specific MessageQueueError): the producer refused the record.
        """
        if self._producer is None:
            # Records not delivered within the timeout are dropped, not sent after the caller
            # has given up on them (which would only waste a block). acks=all without
            # idempotence: a duplicate lease wastes a block, and idempotence costs the first
            # lease a producer-id round of about 0.5 s (see the module docstring).
            self._producer = self._session.producer(
                Delivery.RECOVERABLE,
                extra={**NO_LINGER, "message.timeout.ms": int(self._timeout * 1000),
                       "enable.idempotence": False})
        value = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                            "time": time.time()}).encode()
        pending = produce_async(self._producer, self.topic, value, key=self._key,
                                operation="lease a message-id block")
        return _KafkaLease(pending, self.topic, self._session)

    def close(self) -> None:
        """Wait (up to the timeout) for a lease still in flight, then release the producer."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(self._timeout)


class MessageIdAllocator:
    """Hands out :class:`MessageId` values for one queue manager, unique across all its
    processes and hosts (see the module docstring). Thread-safe.

    Build it with :meth:`on_kafka`, or with any :class:`BlockSource`.

    Args:
        machine_guid (uuid.UUID): the queue manager's GUID.
        blocks (BlockSource): where blocks are leased.
        timeout (float): seconds to wait for a lease when a block is needed.
    """

    def __init__(self, machine_guid: uuid.UUID, blocks: BlockSource, *,
                 timeout: float = LEASE_TIMEOUT):
        self.machine_guid = machine_guid
        self.timeout = timeout
        self._blocks = blocks
        self._lock = threading.Lock()
        self._next = 0  # the next sequence number, not yet reduced modulo 2**32
        self._end = 0   # the end of the current block
        self._pending: BlockLease | None = None
        self._last_block = -1

    @classmethod
    def on_kafka(cls, session: KafkaSession, queue_manager: str,
                 machine_guid: uuid.UUID) -> MessageIdAllocator:
        """An allocator leasing blocks on ``queue_manager``'s id-block topic.

        Raises:
            InvalidParameter: ``queue_manager`` gives no legal topic name.
        """
        return cls(machine_guid, KafkaBlockSource(session, queue_manager))

    def prepare(self) -> None:
        """Create the block topic if missing and lease the first block now, so that ids can be
        drawn while the broker is away later.

        Raises:
            BrokerUnavailable: the lease was not acknowledged within :attr:`timeout` seconds.
            BrokerError, AccessDenied: the broker refused the topic or the lease.
        """
        ensure_topic = getattr(self._blocks, "ensure_topic", None)
        if ensure_topic is not None:
            ensure_topic()
        with self._lock:
            if self._next >= self._end:
                self._take_block()

    def new(self) -> MessageId:
        """The next unique id.

        Raises:
            BrokerUnavailable: a new block was needed and its lease was not acknowledged within
                :attr:`timeout` seconds (the broker is unreachable); no id is handed out.
            BrokerError: the lease was refused, the block topic is missing, or its offsets
                went backwards (the topic was deleted and recreated).
        """
        with self._lock:
            if self._next >= self._end:
                self._take_block()
            sequence = self._next % _MODULUS
            self._next += 1
            if self._pending is None and self._end - self._next <= BLOCK_SIZE // 2:
                self._request_next()
        return MessageId(self.machine_guid, sequence)

    def close(self) -> None:
        """Release the block source; ids left in the current block are never used."""
        with self._lock:
            self._pending = None
            self._blocks.close()

    def _take_block(self) -> None:
        deadline = time.monotonic() + self.timeout
        lease, self._pending = self._pending, None
        block = None
        if lease is not None:
            try:
                block = lease.wait(self.timeout)
            except TransientQueueError:
                # Asked for in advance, it may have failed long ago, while the broker was away:
                # that says nothing of now, so it is asked for again (a failure of the lease
                # asked for now reaches the caller; the next need asks anew). One that failed
                # while this need waited for it did say so.
                if time.monotonic() > deadline - self.timeout / 2:
                    raise
        if block is None:
            block = self._blocks.request().wait(max(deadline - time.monotonic(), 0.0))
        if block <= self._last_block:
            raise BrokerError(
                f"message-id block {block} leased after block {self._last_block}: the block "
                "topic was deleted and recreated, so its blocks could repeat ids already used",
                hint="close every process of this queue manager; ids stay unique only while "
                "the block topic lives as long as the queue manager's GUID")
        self._last_block = block
        self._next = block * BLOCK_SIZE
        self._end = self._next + BLOCK_SIZE

    def _request_next(self) -> None:
        try:
            self._pending = self._blocks.request()
        except MessageQueueError as exc:
            # Not this id's problem: the block it came from is leased. The next block is asked
            # for again when it is needed, and that failure reaches the caller.
            log.warning("could not request the next message-id block in advance: %s", exc)
