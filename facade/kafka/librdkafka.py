"""The Kafka adapter: the only kmq module that imports ``confluent_kafka``.

It builds librdkafka configurations from :class:`~facade.config.KmqConfig`, maps Kafka errors to
kmq's error tree at this one boundary (:func:`map_kafka_errors`), and offers the few primitives the
queue manager needs: topic administration, producers per MSMQ delivery mode, and readers that
``assign()`` single-partition topics at explicit offsets (no consumer group: kmq keeps queue state
in receipts topics, not in committed offsets).
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    AcknowledgeType,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from facade.config import DEFAULT_REPLICATION_FACTOR, KmqConfig, replication_settings
from facade.errors import (
    AccessDenied,
    BrokerError,
    BrokerUnavailable,
    ConfigurationError,
    MessageQueueError,
    QueueExists,
    QueueNotFound,
    TransactionAborted,
)
from facade.kafka import kafkaseam
from facade.kafka.kafkaseam import (
    ACCEPT,
    RELEASE,
    KafkaRecord,
    RecordProducer,
    SharedRecord,
    TopicDescription,
)
from facade.model.message import Delivery
from facade.model.topics import QUEUE_REGISTRY_TOPIC
from facade.model.topicsettings import MAX_MESSAGE_BYTES, topic_config

__all__ = [
    "NO_LINGER",
    "KafkaRecord",
    "KafkaSession",
    "PendingRecord",
    "Refusal",
    "TopicDescription",
    "TopicReader",
    "TransactionalProducer",
    "is_fatal",
    "map_kafka_errors",
    "poll_producer",
    "produce",
    "produce_to_current_topic",
    "produce_and_wait",
    "produce_async",
    "client_logging",
    "refusal",
    "readers_at_rest",
    "refused_bootstrap_servers",
    "resolve_bootstrap_servers",
    "stop_reading",
]

log = logging.getLogger("kmq.kafka")

#: Where librdkafka's own log lines go (every kmq client sets it as ``logger``), instead of
#: straight to stderr: an unreachable broker would print some 200 ``FAIL ... Connection refused``
#: lines before kmq's one-line error. Quiet by default (level above CRITICAL, no handler of its
#: own); to see them: ``logging.getLogger("kmq.librdkafka").setLevel(logging.DEBUG)`` and a handler
#: (or ``KMQ_LIBRDKAFKA_LOG=DEBUG`` for the CLI).
LIBRDKAFKA_LOG = logging.getLogger("kmq.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
if LIBRDKAFKA_LOG.level == logging.NOTSET:
    LIBRDKAFKA_LOG.setLevel(logging.CRITICAL + 1)


def client_logging() -> dict[str, Any]:
    """librdkafka settings that route a client's logs to :data:`LIBRDKAFKA_LOG` (see there)."""
    return {"logger": LIBRDKAFKA_LOG}
#: (bootstrap servers, replicas given, replicas configured) already warned about.
_WARNED_LESS_DURABLE: set[tuple[str, int, int]] = set()

#: Seconds an administrative request (create, delete, metadata) may take.
ADMIN_TIMEOUT = 15.0
#: Seconds a topic must be reported missing before a read believes it (brokers learn a new
#: topic from the KRaft controller one after another, within milliseconds).
MISSING_GRACE = 2.0
#: Seconds of one metadata request of KafkaSession.ping, which repeats it until its timeout.
_PING_STEP = 1.0
#: librdkafka ``fetch.wait.max.ms`` a reader starts with: the longest a broker may hold a fetch
#: that finds nothing new. Apache Kafka answers a waiting fetch as soon as a record arrives, but
#: librdkafka fetches a newly assigned, sought or resumed position only once the fetch in flight
#: returns, and kmq's readers reposition all the time (claims, receipts, catch-up): on Apache
#: Kafka 4.4, ``kmq bench`` gave 1,247 receives/s with 2 ms, 1,370 with 20 ms and 243 with
#: librdkafka's default of 500 ms (docs/performance.md).
TAIL_FETCH_WAIT_MS = 2
#: The longest fetch wait a starved reader goes up to (librdkafka's default).
MAX_FETCH_WAIT_MS = 500
#: Seconds of empty polls after which a reader checks whether it is starved (TopicReader).
STARVED_AFTER = 0.25
#: Starvation checks in a row that may find a reader at the end librdkafka last reported, or
#: at most SHORT_BACKLOG records behind the broker's end offset, before the reader is taken as
#: starved anyway (see TopicReader._check_starved).
AT_END_CHECKS = 8
#: Records behind the end offset that a short fetch wait cannot be what keeps a reader from:
#: starvation is a long log of small batches (tens of thousands of records).
SHORT_BACKLOG = 500
#: Seconds a lengthened fetch wait lasts at least before a reader at the end goes back to
#: the short one (see TopicReader._relax_fetch_wait).
RELAX_AFTER = 2.0
#: Seconds ``read_to_end`` always reads first: a few fetch cycles, so watermarks are current.
_SETTLE = 0.03
#: Seconds a reader may go unused before it stops fetching (see :class:`TopicReader`).
REST_AFTER = 0.5
#: Seconds ``read_to_end`` waits at a topic's last stable offset for an open Kafka transaction
#: before it takes that offset as the end (see :meth:`TopicReader.read_to_end`).
OPEN_TRANSACTION_GRACE = 10.0

_UNAVAILABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    # A request that was never sent: its broker's connection was down for its whole timeout.
    KafkaError._TIMED_OUT_QUEUE,
    KafkaError._RESOLVE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    # librdkafka dropped its handle of a broker that left the cluster's metadata (a crashed
    # broker once the controller fenced it) with this request still on it.
    KafkaError._DESTROY_BROKER,
    # A new leader answers offset queries so until its high watermark has caught up.
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
}
#: What to do when the cluster's ACLs refuse a request (docs/design.md, "Security model").
_KAFKA_ACL_HINT = ("the Kafka cluster's ACLs refuse this principal: an administrator runs "
                   "kmq acl sync (it mirrors queue rights), or grants the right with kafka-acls "
                   "(registry writes, topic creation)")
#: Errors of a request to a partition whose leader is moving (see TopicReader._worth_retrying).
_LEADER_MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError._TRANSPORT, KafkaError._DESTROY_BROKER,
                  KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
                  KafkaError.UNKNOWN_LEADER_EPOCH}
#: The leader has fewer in-sync replicas than the topic's ``min.insync.replicas``.
_TOO_FEW_REPLICAS = {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
_NOT_FOUND = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
_DENIED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
}


class Refusal(enum.Enum):
    """Why the broker (or the producer, before sending) will never accept a record: a retry of
    the same record to the same topic fails the same way until an administrator changes the
    topic, its ACLs or the producer's limits.

    Attributes:
        TOO_LARGE: the record exceeds the producer's ``message.max.bytes`` or the topic's
            ``max.message.bytes`` (MSG_SIZE_TOO_LARGE, RECORD_LIST_TOO_LARGE).
        ACCESS_DENIED: the principal may not write the topic (TOPIC_AUTHORIZATION_FAILED).
        INVALID: the broker refuses the record itself: INVALID_RECORD, an invalid topic
            (TOPIC_EXCEPTION), a policy violation, a timestamp outside the topic's
            ``message.timestamp.*`` window, a record format the topic cannot store, or an
            argument the producer rejects (``_INVALID_ARG``).
    """

    TOO_LARGE = "too large"
    ACCESS_DENIED = "access denied"
    INVALID = "invalid"


_REFUSALS = {
    KafkaError.MSG_SIZE_TOO_LARGE: Refusal.TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE: Refusal.TOO_LARGE,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: Refusal.ACCESS_DENIED,
    KafkaError.INVALID_RECORD: Refusal.INVALID,
    KafkaError.TOPIC_EXCEPTION: Refusal.INVALID,
    KafkaError.POLICY_VIOLATION: Refusal.INVALID,
    KafkaError.INVALID_TIMESTAMP: Refusal.INVALID,
    KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT: Refusal.INVALID,
    KafkaError._INVALID_ARG: Refusal.INVALID,
}


def refusal(error: Any) -> Refusal | None:
    """Whether ``error`` means the record can never be written, and why.

    Everything else (broker unreachable, leader moving, not enough replicas, TTRQ elapsed,
    a missing topic, a producer that failed fatally) may succeed on a retry or with a new
    producer, and gives None.

    Args:
        error (Any): a delivery-report ``KafkaError``, or a :class:`MessageQueueError` raised
            from :func:`map_kafka_errors` (the ``KafkaException`` it chains is read).

    Returns:
        Refusal | None: the kind of refusal, or None for a failure a retry may fix.
    """
    if isinstance(error, MessageQueueError):
        cause = error.__cause__
        error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
    if not isinstance(error, KafkaError) or error.fatal():
        return None
    return _REFUSALS.get(error.code())


def _nodes(ids: Iterable[int]) -> str:
    """Broker ids as text: ``1, 3``."""
    return ", ".join(str(node) for node in sorted(ids))


def kafka_error_to_queue_error(error: KafkaError, operation: str, topic: str | None = None,
                               servers: str | None = None) -> MessageQueueError:
    """Translate one ``KafkaError`` into the most specific kmq error.

    Args:
        error (KafkaError): what librdkafka reported.
        operation (str): what kmq was doing, for the message ("send to queue", "create queue").
        topic (str | None): the topic concerned.
        servers (str | None): the ``bootstrap.servers`` of the client that failed, named in a
            :class:`BrokerUnavailable` so that an outage reads as one.

    Returns:
        MessageQueueError: BrokerUnavailable, QueueNotFound, QueueExists, AccessDenied or
        BrokerError (everything else, with ``kafka_code``).
    """
    code = error.code()
    where = f" (topic {topic!r})" if topic else ""
    text = f"{operation}{where} failed: {error.str()}"
    if code in _TOO_FEW_REPLICAS:
        return BrokerUnavailable(
            f"{text} ({error.name()}): fewer replicas of the partition are in sync than the "
            "topic's min.insync.replicas, so the leader refuses acks=all writes",
            hint="start the Kafka brokers that are down, or let the lagging replicas catch up; "
                 "writes are acknowledged again once enough replicas are in sync")
    if code in _UNAVAILABLE:
        at = f" at {servers}" if servers else ""
        return BrokerUnavailable(text, hint=f"check that the Kafka brokers{at} are running and "
                                            "reachable")
    if code in _NOT_FOUND:
        return QueueNotFound(text, queue=topic, hint="create the queue first (kmq queue create)")
    if code == KafkaError.TOPIC_ALREADY_EXISTS:
        return QueueExists(text, queue=topic)
    if code in _DENIED:
        return AccessDenied(text, queue=topic, hint=_KAFKA_ACL_HINT)
    return BrokerError(text, kafka_code=error.name())


@contextmanager
def map_kafka_errors(operation: str, topic: str | None = None,
                     servers: str | None = None) -> Iterator[None]:
    """Re-raise ``KafkaException`` as the matching :class:`MessageQueueError`, chained, and an
    admin request's future that got no result in time (``TimeoutError``) as
    :class:`BrokerUnavailable` (``servers``: see :func:`kafka_error_to_queue_error`)."""
    try:
        yield
    except KafkaException as exc:
        raise _queue_error(exc, operation, topic, servers) from exc
    except TimeoutError as exc:
        if isinstance(exc, MessageQueueError):
            raise  # ReceiveTimeout is a TimeoutError too, and already kmq's
        where = f" (topic {topic!r})" if topic else ""
        at = f" at {servers}" if servers else ""
        raise BrokerUnavailable(f"{operation}{where} failed: the Kafka cluster{at} did not "
                                "answer in time", hint="check that the Kafka brokers are running "
                                "and that most of the KRaft controllers are") from exc


def _error_of(exc: KafkaException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries, or None when it carries none."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


def _queue_error(exc: KafkaException, operation: str, topic: str | None,
                 servers: str | None = None) -> MessageQueueError:
    error = _error_of(exc)
    if error is None:
        return BrokerError(f"{operation} failed: {exc}")
    return kafka_error_to_queue_error(error, operation, topic, servers)


def produce(producer: RecordProducer, topic: str, value: bytes | None, key: bytes | None,
            headers: list[tuple[str, bytes]] | None,
            on_delivery: Callable[[Any, Any], None] | None,
            operation: str = "send to queue") -> None:
    """``producer.produce()`` one record, with the errors of :func:`map_kafka_errors` (the
    send path and every receipt call it once per record: a plain ``try`` costs less than the
    context manager).

    Args:
        producer (RecordProducer): the producer.
        topic (str): the topic (Kafka) the record goes to.
        value (bytes | None): the record value (None: a tombstone).
        key (bytes | None): the record key.
        headers (list[tuple[str, bytes]] | None): the record headers.
        on_delivery (Callable | None): librdkafka's delivery report callback ``(err, msg)``.
        operation (str): what failed, for the error message.

    Raises:
        BrokerError (or a more specific MessageQueueError): the producer refused the record.
    """
    try:
        produce_to_current_topic(producer, topic, lambda: producer.produce(
            topic, value=value, key=key, headers=cast(Any, headers), on_delivery=on_delivery))
    except KafkaException as exc:
        raise _queue_error(exc, operation, topic) from exc


def produce_to_current_topic(producer: Any, topic: str, produce: Callable[[], None]) -> None:
    """Run ``produce`` (one ``producer.produce()`` to ``topic``); when librdkafka refuses it at
    once as ``_UNKNOWN_TOPIC``, ask the cluster for ``topic`` through ``producer`` and, if the
    topic exists, run ``produce`` once more.

    A producer that has seen a topic deleted keeps it as non-existent until its next metadata
    refresh (``topic.metadata.refresh.interval.ms``, 5 minutes by default) and refuses every
    record for it at once, so a queue deleted and created again under its name would refuse
    sends and receipts for minutes. The metadata request updates the producer's cache.

    Args:
        producer (Any): the confluent-kafka ``Producer`` ``produce`` uses.
        topic (str): the topic ``produce`` writes to.
        produce (Callable[[], None]): the call; run at most twice.

    Raises:
        KafkaException: ``produce`` refused the record (``_UNKNOWN_TOPIC`` when the cluster
            does not have the topic either), or the metadata request failed.
    """
    try:
        produce()
        return
    except KafkaException as exc:
        error = _error_of(exc)
        if error is None or error.code() != KafkaError._UNKNOWN_TOPIC:
            raise
        described = producer.list_topics(topic, timeout=ADMIN_TIMEOUT).topics.get(topic)
        if described is None or described.error is not None:
            raise
    produce()


def refused_bootstrap_servers(bootstrap_servers: str, timeout: float = 1.0) -> str | None:
    """Why no bootstrap server can be reached at all, or None when one may be.

    A quick TCP connect to each ``host:port``: a refused connection or a name that does not
    resolve is final, so the caller fails at once instead of waiting out librdkafka's retries.
    Anything else (a connect that times out, a server that accepts) is left to the Kafka client.

    Args:
        bootstrap_servers (str): librdkafka ``bootstrap.servers`` (``host:port,...``, optionally
            ``PROTOCOL://host:port``).
        timeout (float): seconds per connect attempt.

    Returns:
        str | None: the reason for each server (``127.0.0.1:1: connection refused``), or None.
    """
    import socket

    reasons = []
    for server in filter(None, (s.strip() for s in bootstrap_servers.split(","))):
        address = server.rsplit("://", 1)[-1]
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            return None  # not ours to judge: librdkafka reports it
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except ConnectionRefusedError:
            reasons.append(f"{server}: connection refused")
        except socket.gaierror as exc:
            reasons.append(f"{server}: host name does not resolve ({exc.strerror})")
        except OSError:
            return None  # a timeout or a route problem may pass: let the client retry
        else:
            return None
    return "; ".join(reasons) or None


def resolve_bootstrap_servers(config: KmqConfig) -> str:
    """The brokers to use: configured ones, else the running dev stack broker.

    Raises:
        BrokerUnavailable: nothing is configured and no dev broker runs.
    """
    if config.bootstrap_servers:
        return config.bootstrap_servers
    from facade.kafka.devstack import DevStack

    broker = DevStack(config).running_broker()
    if broker is None:
        raise BrokerUnavailable(
            "no Kafka broker configured and the local dev broker is not running",
            hint="run `kmq dev up`, or set KMQ_BOOTSTRAP_SERVERS / bootstrap_servers in kmq.toml",
        )
    return broker.bootstrap_servers


class KafkaSession:
    """Kafka clients for one queue manager, all built from the same configuration.

    Args:
        bootstrap_servers (str): Kafka ``bootstrap.servers``.
        options (Mapping[str, str]): extra librdkafka properties (TLS, SASL) for every client.
        client_id (str): ``client.id`` prefix, shown in broker logs.
        replication_factor (int): replication factor of the topics :meth:`create_topics`
            makes (>= 1), capped at the cluster's broker count.
        min_insync_replicas (int | None): their ``min.insync.replicas``; None: 2, or the
            replication factor if smaller. Capped at the replication factor they get.

    Raises:
        ConfigurationError: a replication setting is not a whole number >= 1, or
            ``min_insync_replicas`` exceeds ``replication_factor``.
    """

    def __init__(self, bootstrap_servers: str, options: Mapping[str, str] | None = None,
                 client_id: str = "kmq", *, replication_factor: int = DEFAULT_REPLICATION_FACTOR,
                 min_insync_replicas: int | None = None):
        self.bootstrap_servers = bootstrap_servers
        self._base = {"bootstrap.servers": bootstrap_servers, "client.id": client_id,
                      **client_logging(), **(options or {})}
        self._admin: AdminClient | None = None
        # The broker's last refusal of this session's credentials (librdkafka's error_cb).
        self._authentication_error: KafkaError | None = None
        self._delete_records: tuple[bool, str] | None = None
        self.replication_factor, self.min_insync_replicas = replication_settings(
            replication_factor, min_insync_replicas)

    @classmethod
    def from_config(cls, config: KmqConfig, client_id: str | None = None) -> KafkaSession:
        """A session for ``config``: its brokers (or the running dev stack broker), librdkafka
        options and topic replication settings.

        Args:
            config (KmqConfig): the resolved configuration.
            client_id (str | None): ``client.id``; default ``kmq-<queue manager>``.

        Raises:
            BrokerUnavailable: no broker configured and no dev stack broker running.
        """
        replication = (config.replication_factor, config.min_insync_replicas)
        if not config.bootstrap_servers:
            # The local dev stack is one memory-only broker by design (kmq dev up, kmq demo):
            # one replica is all it can give, and warning about it on every command is noise.
            replication = (1, 1)
        return cls(resolve_bootstrap_servers(config), config.kafka_options,
                   client_id=client_id or f"kmq-{config.queue_manager}",
                   replication_factor=replication[0], min_insync_replicas=replication[1])

    # -- configuration -------------------------------------------------------------------------

    def producer_config(self, delivery: Delivery, transactional_id: str | None = None,
                        extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """librdkafka producer settings for an MSMQ delivery mode.

        EXPRESS: ``acks=1``, not idempotent (at most once, lowest latency). RECOVERABLE:
        ``acks=all`` and idempotence (no loss once acknowledged, no duplicates from retries).
        ``transactional_id`` adds Kafka transactions (implies RECOVERABLE settings).
        """
        # message.max.bytes: room for MSMQ's 4 MB bodies (facade.model.topicsettings); a [kafka]
        # option may lower it, and sends then check against the lower value.
        config = {"message.max.bytes": MAX_MESSAGE_BYTES, **self._base,
                  "allow.auto.create.topics": False, "linger.ms": 5}
        if delivery is Delivery.RECOVERABLE or transactional_id:
            config.update({"acks": "all", "enable.idempotence": True})
        else:
            config.update({"acks": 1, "enable.idempotence": False})
        if transactional_id:
            config["transactional.id"] = transactional_id
        if extra:
            config.update(extra)
        timeout = config.get("message.timeout.ms")
        if timeout is not None:
            # librdkafka rejects a request timeout longer than the message timeout.
            config["request.timeout.ms"] = min(30000, int(timeout))
        return config

    @property
    def message_max_bytes(self) -> int:
        """The producers' ``message.max.bytes`` (bytes): :data:`MAX_MESSAGE_BYTES` unless the
        ``[kafka]`` options set another value."""
        return int(self._base.get("message.max.bytes", MAX_MESSAGE_BYTES))

    def producer(self, delivery: Delivery, transactional_id: str | None = None,
                 extra: Mapping[str, Any] | None = None) -> Producer:
        """A new producer for ``delivery`` (see :meth:`producer_config`); ``extra`` adds
        librdkafka settings such as ``message.timeout.ms`` (TTRQ)."""
        with map_kafka_errors("create producer", servers=self.bootstrap_servers):
            return Producer(self.producer_config(delivery, transactional_id, extra))

    def reader(self, extra: Mapping[str, Any] | None = None) -> TopicReader:
        """A new :class:`TopicReader` (an unsubscribed consumer: assign-only, no commits);
        ``extra`` adds librdkafka consumer settings (e.g. a smaller prefetch queue)."""
        return TopicReader({**self._base, **(extra or {})})

    def watermarks(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, tuple[int, int]]:
        """``(low, high)`` offsets of each single-partition topic, read by a throwaway reader
        (see :meth:`TopicReader.watermarks`).

        Raises:
            QueueNotFound: a topic does not exist.
            BrokerUnavailable: no answer within ``timeout`` seconds.
        """
        reader = self.reader()
        try:
            return reader.watermarks(topics, timeout)
        finally:
            reader.close()

    def offset_bounds(self, topics: Sequence[str],
                      timeout: float = ADMIN_TIMEOUT) -> dict[str, tuple[int, int]]:
        """``(log start, end offset)`` of each single-partition topic: two ListOffsets
        requests per broker (earliest, then latest, read_committed: the end is the last stable
        offset), whatever the number of topics, where a reader's :meth:`TopicReader.end_offsets`
        asks topic by topic. Topics that do not exist are left out.

        Apache Kafka answers ListOffsets exactly; :meth:`TopicReader.watermarks` reads fetch
        responses instead for brokers that may not.

        Raises:
            BrokerUnavailable: no answer within ``timeout`` seconds.
            BrokerError: as mapped from Kafka.
        """
        deadline = time.monotonic() + timeout
        ends = self._list_offsets(dict.fromkeys(topics), OffsetSpec.latest(), deadline)
        starts = self._list_offsets(dict.fromkeys(ends), OffsetSpec.earliest(), deadline)
        return {topic: (starts[topic], ends[topic]) for topic in ends if topic in starts}

    def _list_offsets(self, topics: Mapping[str, None], spec: OffsetSpec,
                      deadline: float) -> dict[str, int]:
        """One batched ListOffsets for ``topics`` (partition 0), asked again for partitions
        whose leader is moving; missing topics are left out."""
        found: dict[str, int] = {}
        todo = list(topics)
        while todo:
            remaining = max(deadline - time.monotonic(), 0.1)
            with map_kafka_errors("read end offsets", servers=self.bootstrap_servers):
                futures = self.admin.list_offsets(
                    {TopicPartition(topic, 0): spec for topic in todo},
                    isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=remaining)
            retry = []
            for part, future in futures.items():
                try:
                    found[part.topic] = max(future.result(remaining).offset, 0)
                except KafkaException as exc:
                    error = _error_of(exc)
                    code = None if error is None else error.code()
                    if code in _NOT_FOUND:
                        continue
                    if code in _LEADER_MOVING and time.monotonic() < deadline:
                        retry.append(part.topic)
                        continue
                    with map_kafka_errors("read end offsets", part.topic,
                                          servers=self.bootstrap_servers):
                        raise
            if retry:
                time.sleep(0.05)
            todo = retry
        return found

    @property
    def client_config(self) -> dict[str, Any]:
        """The librdkafka properties every client of this session starts from (brokers,
        ``client.id``, logging, TLS/SASL options); a copy."""
        return dict(self._base)

    # -- administration ------------------------------------------------------------------------

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            config: dict[str, Any] = {**self._base, "allow.auto.create.topics": False,
                                      "error_cb": self._client_error}
            self._admin = AdminClient(config)
        return self._admin

    def _client_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            self._authentication_error = error

    def ping(self, timeout: float = 10.0) -> None:
        """Check that the brokers answer a metadata request.

        Raises:
            BrokerUnavailable: no answer within ``timeout`` seconds; names the bootstrap servers.
            ConfigurationError: librdkafka refuses a client setting (an unknown property or a
                bad value in ``[kafka]`` / ``KMQ_KAFKA_*``), or the broker refused the
                credentials (a wrong SASL user name or password: Kafka's authentication
                failure).
        """
        try:
            self.admin  # noqa: B018 - librdkafka checks the settings when the client is made
        except KafkaException as exc:
            raise ConfigurationError(
                f"the Kafka client settings are refused: {exc.args[0].str() if exc.args else exc}",
                hint="fix the [kafka] table of kmq.toml or the KMQ_KAFKA_* variables") from exc
        refused = refused_bootstrap_servers(self.bootstrap_servers)
        if refused:
            raise BrokerUnavailable(
                f"Kafka broker {self.bootstrap_servers} refused the connection ({refused})",
                hint="start it (`kmq dev up` for the local one) or fix KMQ_BOOTSTRAP_SERVERS",
            )
        # Short metadata requests, so that a refusal of the credentials (reported through
        # error_cb, which poll serves) ends the wait at once instead of after ``timeout``.
        deadline = time.monotonic() + timeout
        while True:
            try:
                step = min(_PING_STEP, max(deadline - time.monotonic(), 0.1))
                # One topic's metadata: the answer for every topic grows with the queues.
                self.admin.list_topics(topic=QUEUE_REGISTRY_TOPIC, timeout=step)
                return
            except KafkaException as exc:
                self.admin.poll(0)
                refusal = self._authentication_error
                if refusal is not None:
                    user = self._base.get("sasl.username")
                    raise ConfigurationError(
                        f"the Kafka cluster at {self.bootstrap_servers} refused this client's "
                        f"credentials{f' (sasl.username {user!r})' if user else ''}: "
                        f"{refusal.str()}",
                        hint="fix KMQ_KAFKA_SASL_USERNAME / KMQ_KAFKA_SASL_PASSWORD (or the "
                             "[kafka] table of kmq.toml), or the TLS client certificate") from exc
                if time.monotonic() >= deadline:
                    raise BrokerUnavailable(
                        f"Kafka broker {self.bootstrap_servers} did not answer within "
                        f"{timeout:g} s",
                        hint="start it (`kmq dev up` for the local one) or fix "
                             "KMQ_BOOTSTRAP_SERVERS",
                    ) from exc

    def create_topics(self, names: Sequence[str], config: Mapping[str, str] | None = None,
                      exist_ok: bool = False) -> list[str]:
        """Create single-partition topics with kmq's settings (``facade.model.topicsettings``).

        Each topic gets the retention, cleanup and size configs of its role (queue data,
        receipts, registry), :attr:`replication_factor` replicas and ``min.insync.replicas``
        :attr:`min_insync_replicas`, both capped at the cluster's broker count; a topic created
        with fewer than configured is logged at WARNING. Existing topics are left as they are
        (``kmq doctor`` checks them).

        With ``exist_ok``, only the topics this principal cannot see (DescribeTopics) are asked
        for: Kafka refuses CreateTopics without the Create right even for a topic that exists,
        so a principal that may use but not create kmq's topics opens a queue manager whose
        topics an administrator created. Returns once the cluster lists every created topic
        this principal may describe: Kafka answers CreateTopics when the controller has
        committed it, which may be before the broker a client asks next knows the topic (it
        would call it unknown).

        Args:
            names (Sequence[str]): topic names.
            config (Mapping[str, str] | None): topic configs that override kmq's.
            exist_ok (bool): an existing topic is not an error.

        Returns:
            list[str]: the names actually created (not already existing).

        Raises:
            QueueExists: a topic exists and ``exist_ok`` is false.
            AccessDenied: a topic to create is missing (or hidden from this principal) and the
                principal lacks the Create right (Kafka ACLs).
            BrokerUnavailable: no answer, or a created topic not listed within
                :data:`ADMIN_TIMEOUT` seconds.
            BrokerError: as mapped from Kafka.
        """
        if exist_ok:
            unknown, unseen = self._unlisted_topics(names)
            names = [name for name in names if name in unknown | unseen]
        if not names:
            return []
        replicas, min_insync = self.topic_durability()
        new = [NewTopic(name, num_partitions=1, replication_factor=replicas,
                        config={**topic_config(name, min_insync), **(config or {})})
               for name in names]
        created = []
        for name, future in self.admin.create_topics(new, request_timeout=ADMIN_TIMEOUT).items():
            try:
                with map_kafka_errors("create topic", name, servers=self.bootstrap_servers):
                    future.result(ADMIN_TIMEOUT)
                created.append(name)
            except QueueExists:
                if not exist_ok:
                    raise
            except AccessDenied as exc:
                nor_see = ", nor see it if it exists" if exist_ok else ""
                raise AccessDenied(
                    f"Kafka refused to create topic {name!r}: this principal may not create "
                    f"it{nor_see}", queue=name,
                    hint="on a cluster with an authorizer, an administrator (a Kafka super "
                         "user) opens the queue manager first (kmq qm init), creates its queues "
                         "and runs kmq acl sync, which lets every principal see kmq's topics",
                ) from exc
        if created and replicas < self.replication_factor:
            self._warn_less_durable(created[0], replicas, min_insync)
        self._await_listed(created)
        return created

    def _unlisted_topics(self, names: Iterable[str]) -> tuple[set[str], set[str]]:
        """Those of ``names`` the cluster does not list (one DescribeTopics request): the ones
        it calls unknown, and the ones hidden from this principal (TOPIC_AUTHORIZATION_FAILED,
        which Kafka answers without Describe on a topic, whether it exists or not)."""
        names = list(names)
        unknown: set[str] = set()
        hidden: set[str] = set()
        if not names:
            return unknown, hidden
        futures = self.admin.describe_topics(TopicCollection(names), request_timeout=ADMIN_TIMEOUT)
        for name, future in futures.items():
            try:
                future.result(ADMIN_TIMEOUT)
            except KafkaException as exc:
                error = _error_of(exc)
                code = None if error is None else error.code()
                if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    unknown.add(name)
                    continue
                if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    hidden.add(name)
                    continue
                with map_kafka_errors("describe topic", name, servers=self.bootstrap_servers):
                    raise
        return unknown, hidden

    def _await_listed(self, names: Sequence[str]) -> None:
        """Wait (bounded poll) until the cluster lists every topic of ``names`` this principal
        may describe; one hidden from it is taken as created, as CreateTopics said."""
        deadline = time.monotonic() + ADMIN_TIMEOUT
        missing = set(names)
        pause = 0.005  # the brokers usually list a topic within milliseconds of its creation
        while missing:
            missing, _hidden = self._unlisted_topics(sorted(missing))
            if not missing:
                return
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"created the topics {sorted(missing)}, but the Kafka cluster at "
                    f"{self.bootstrap_servers} did not list them within {ADMIN_TIMEOUT:g} s",
                    hint="check the brokers' logs: their metadata lags the controller")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _warn_less_durable(self, topic: str, replicas: int, min_insync: int) -> None:
        """Log once per process and cluster that topics get fewer replicas than configured."""
        key = (self.bootstrap_servers, replicas, self.replication_factor)
        if key in _WARNED_LESS_DURABLE:
            return
        _WARNED_LESS_DURABLE.add(key)
        log.warning(
            "the Kafka cluster at %s has %d broker(s): topics such as %s are created with "
            "replication factor %d and min.insync.replicas %d instead of the configured %d and "
            "%d, so they are less durable than configured (losing a broker can lose "
            "acknowledged messages); add brokers, or set KMQ_REPLICATION_FACTOR and "
            "KMQ_MIN_INSYNC_REPLICAS to what the cluster can give",
            self.bootstrap_servers, replicas, topic, replicas, min_insync,
            self.replication_factor, self.min_insync_replicas)

    def topic_durability(self) -> tuple[int, int]:
        """The replication factor and ``min.insync.replicas`` new topics get: the configured
        ones, capped at the cluster's broker count (read from metadata).

        Returns:
            tuple[int, int]: (replication factor, min.insync.replicas), both >= 1.

        Raises:
            BrokerUnavailable: no metadata within the admin timeout.
        """
        replicas = max(1, min(self.replication_factor, self.broker_count()))
        return replicas, min(self.min_insync_replicas, replicas)

    def broker_count(self) -> int:
        """How many brokers the cluster's metadata lists.

        Asks for the metadata of one topic (every answer lists the brokers): the metadata of
        all topics grows with the number of queues, and every queue creation asks.

        Raises:
            BrokerUnavailable: no metadata within the admin timeout.
        """
        with map_kafka_errors("read cluster metadata", servers=self.bootstrap_servers):
            return len(self.admin.list_topics(topic=QUEUE_REGISTRY_TOPIC,
                                              timeout=ADMIN_TIMEOUT).brokers)

    def write_problem(self, topic: str, timeout: float = 5.0) -> tuple[str, str] | None:
        """Why the cluster cannot acknowledge an ``acks=all`` write to ``topic`` now, as its
        metadata shows: no leader, fewer in-sync replicas than the topic's
        ``min.insync.replicas`` (the leader answers NOT_ENOUGH_REPLICAS, which producers retry
        silently until their ``message.timeout.ms``), or in-sync replicas whose brokers refuse
        connections (the leader waits for them until the KRaft controller drops them from the
        in-sync replicas, which it cannot do while most controllers are down).

        For the error of a write that was not acknowledged in time: best effort, it never
        raises, and a cluster that does not answer gives None.

        Args:
            topic (str): a single-partition topic.
            timeout (float): seconds for each metadata request.

        Returns:
            tuple[str, str] | None: (the cause, the fix), or None when the metadata shows
            nothing that blocks a write.
        """
        try:
            metadata = self.admin.list_topics(topic=topic, timeout=timeout)
        except KafkaException:
            return None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or 0 not in found.partitions:
            return None
        partition = found.partitions[0]
        replicas, in_sync = list(partition.replicas), list(partition.isrs)
        down = [node for node in replicas if node not in metadata.brokers
                or refused_bootstrap_servers(f"{metadata.brokers[node].host}:"
                                             f"{metadata.brokers[node].port}", 0.5)]
        restart = (f"start the Kafka brokers that are down (nodes {_nodes(down)})" if down
                   else "bring the other replicas' brokers back in sync")
        if partition.leader < 0:
            return (f"partition 0 of topic {topic!r} has no leader (replicas on nodes "
                    f"{_nodes(replicas)}, in sync: {_nodes(in_sync) or 'none'})",
                    f"{restart}: a leader is elected once an in-sync replica is back")
        try:
            value = self.topic_configs([topic], timeout)[topic].get("min.insync.replicas", "")
            min_insync = int(value) if value.isdigit() else None
        except MessageQueueError:
            min_insync = None
        if min_insync is not None and len(in_sync) < min_insync:
            return (f"topic {topic!r} has {len(in_sync)} in-sync replica(s) (nodes "
                    f"{_nodes(in_sync)}) of {len(replicas)}, fewer than its "
                    f"min.insync.replicas={min_insync}: its leader, node {partition.leader}, "
                    "refuses acks=all writes (NOT_ENOUGH_REPLICAS)",
                    f"{restart}; writes are acknowledged again once {min_insync} replicas are "
                    "in sync")
        silent = [node for node in in_sync if node in down]
        if silent:
            return (f"the in-sync replicas of topic {topic!r} on nodes {_nodes(silent)} do not "
                    f"answer: its leader, node {partition.leader}, waits for them before it "
                    "acknowledges an acks=all write, until the KRaft controller drops them from "
                    "the in-sync replicas (which needs most controllers running)", restart)
        return None

    def delete_records_support(self) -> tuple[bool, str]:
        """Whether the broker deletes records below an offset (Kafka's DeleteRecords), which kmq
        uses to free what every process has removed (docs/design.md, "Retention").

        The broker is asked to delete the records of the queue registry below offset 0, which
        deletes nothing: an answer means it handles the request, an unsupported request or
        version means it does not (a Kafka-API broker that is not Apache Kafka may not).
        Answered once per session.

        Returns:
            tuple[bool, str]: whether it is supported, and why not (empty when supported).

        Raises:
            BrokerUnavailable: the broker did not answer.
        """
        if self._delete_records is None:
            self._delete_records = self._probe_delete_records()
        return self._delete_records

    def _probe_delete_records(self) -> tuple[bool, str]:
        probe = TopicPartition(QUEUE_REGISTRY_TOPIC, 0, 0)  # below offset 0: deletes nothing
        future = self.admin.delete_records([probe], request_timeout=ADMIN_TIMEOUT)[probe]
        try:
            future.result(ADMIN_TIMEOUT)
        except KafkaException as exc:
            error = _error_of(exc)
            code = None if error is None else error.code()
            if error is not None and code in (KafkaError._UNSUPPORTED_FEATURE,
                                              KafkaError.UNSUPPORTED_VERSION,
                                              KafkaError.INVALID_REQUEST):
                return (False, f"the broker refuses DeleteRecords ({error.name()})")
            if code == KafkaError.POLICY_VIOLATION:
                # Kafka refuses DeleteRecords on a compacted topic (the registry is one): the
                # request is implemented, which is all the probe asks.
                return (True, "")
            if code in (KafkaError._NOENT, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return (False, f"not probed: {QUEUE_REGISTRY_TOPIC} does not exist yet "
                               "(open a queue manager first)")
            with map_kafka_errors("probe DeleteRecords", servers=self.bootstrap_servers):
                raise
        return (True, "")

    def delete_records(self, topic: str, before: int) -> int:
        """Delete the records of ``topic`` (partition 0) below offset ``before`` (Kafka
        DeleteRecords); call only where :meth:`delete_records_support` says yes.

        Returns:
            int: the partition's new log start offset.

        Raises:
            BrokerUnavailable, AccessDenied, BrokerError: as mapped from Kafka.
        """
        part = TopicPartition(topic, 0, before)
        with map_kafka_errors("delete records", topic, servers=self.bootstrap_servers):
            result = self.admin.delete_records([part], request_timeout=ADMIN_TIMEOUT)[part]
            return int(result.result(ADMIN_TIMEOUT).low_watermark)

    def describe_topics(self, names: Iterable[str] | None = None) -> dict[str, TopicDescription]:
        """Partitions, replication and configs of existing topics.

        Args:
            names (Iterable[str] | None): the topics; None for every topic of the cluster.
                Names that do not exist are left out of the result.

        Returns:
            dict[str, TopicDescription]: by topic name.

        Raises:
            BrokerUnavailable, AccessDenied, BrokerError: as mapped from Kafka (e.g. no
                DescribeConfigs right on a topic).
        """
        with map_kafka_errors("describe topics", servers=self.bootstrap_servers):
            topics = self.admin.list_topics(timeout=ADMIN_TIMEOUT).topics
        wanted = sorted(topics if names is None else set(names) & set(topics))
        configs = self.topic_configs(wanted)
        described = {}
        for name in wanted:
            partitions = topics[name].partitions
            replicas = min((len(p.replicas) for p in partitions.values()), default=0)
            described[name] = TopicDescription(name, len(partitions), replicas, configs[name])
        return described

    def topic_configs(self, names: Sequence[str],
                      timeout: float = ADMIN_TIMEOUT) -> dict[str, dict[str, str]]:
        """The topic configs the broker reports for each topic (DescribeConfigs).

        Args:
            names (Sequence[str]): existing topics.
            timeout (float): seconds the request may take.

        Returns:
            dict[str, dict[str, str]]: config name -> value per topic; configs whose value the
            broker withholds (sensitive ones) are left out.

        Raises:
            QueueNotFound: a topic does not exist.
            BrokerUnavailable, AccessDenied, BrokerError: as mapped from Kafka.
        """
        if not names:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        result = {}
        futures = self.admin.describe_configs(resources, request_timeout=timeout)
        for resource, future in futures.items():
            with map_kafka_errors("describe topic configs", resource.name, servers=self.bootstrap_servers):
                entries = future.result(timeout)
            result[resource.name] = {key: entry.value for key, entry in entries.items()
                                     if entry.value is not None}
        return result

    def validates_topic_configs(self) -> bool:
        """Whether the broker checks topic configs: a validate-only CreateTopics with an
        invalid ``retention.ms`` must be refused, as Kafka refuses it (INVALID_CONFIG). A
        broker that accepts it neither checks nor, in all likelihood, applies topic configs.

        Nothing is created on a broker that honours validate-only; a probe topic a broker
        created anyway is deleted again.

        Returns:
            bool: True when the invalid config was refused.

        Raises:
            BrokerUnavailable, AccessDenied: as mapped from Kafka (CreateTopics needs the
                CREATE right on the cluster or the probe's name).
        """
        probe = f"__kmq.probe-{uuid.uuid4().hex[:12]}"
        new = NewTopic(probe, num_partitions=1, replication_factor=-1,
                       config={"retention.ms": "not-a-number"})
        future = self.admin.create_topics([new], validate_only=True,
                                          request_timeout=ADMIN_TIMEOUT)[probe]
        try:
            with map_kafka_errors("validate a topic config", probe, servers=self.bootstrap_servers):
                future.result(ADMIN_TIMEOUT)
        except (BrokerUnavailable, AccessDenied):
            raise
        except BrokerError as exc:
            if exc.kafka_code in ("INVALID_CONFIG", "POLICY_VIOLATION"):
                return True
            raise
        if self.topic_exists(probe):
            self.delete_topics([probe])
        return False

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete topics; topics that do not exist are ignored.

        Returns once the brokers' metadata no longer lists them: DeleteTopics returns when the
        KRaft controller has committed the deletion, and until the brokers apply it a produce
        to the topic still succeeds (and is deleted with it) and creating it again fails.

        Raises:
            BrokerUnavailable: a topic was still listed :data:`ADMIN_TIMEOUT` seconds later.
        """
        names = list(names)
        if not names:
            return
        for name, future in self.admin.delete_topics(names, request_timeout=ADMIN_TIMEOUT).items():
            try:
                with map_kafka_errors("delete topic", name, servers=self.bootstrap_servers):
                    future.result(ADMIN_TIMEOUT)
            except QueueNotFound:
                pass
        deadline = time.monotonic() + ADMIN_TIMEOUT
        for name in names:
            while self.topic_exists(name):
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(
                        f"topic {name!r} was deleted but the brokers still list it after "
                        f"{ADMIN_TIMEOUT:g} s", hint="check the Kafka brokers' logs")
                time.sleep(0.02)

    def list_topics(self) -> set[str]:
        """Names of every topic in the cluster."""
        with map_kafka_errors("list topics", servers=self.bootstrap_servers):
            return set(self.admin.list_topics(timeout=ADMIN_TIMEOUT).topics)

    def topic_exists(self, name: str) -> bool:
        """True if ``name`` exists (one metadata request for that topic only)."""
        with map_kafka_errors("describe topic", name, servers=self.bootstrap_servers):
            metadata = self.admin.list_topics(topic=name, timeout=ADMIN_TIMEOUT)
        topic = metadata.topics.get(name)
        return topic is not None and topic.error is None

    # -- share groups (KIP-932) -----------------------------------------------------------------

    def share_consumer(self, group: str, topic: str,
                       extra: Mapping[str, Any] | None = None) -> TopicShareConsumer:
        """A new :class:`TopicShareConsumer` of ``group`` on ``topic`` (explicit
        acknowledgement); ``extra`` adds librdkafka settings (``max.poll.records``).

        Raises:
            BrokerError: librdkafka refused the settings.
        """
        config = {**self._base, "group.id": group, "share.acknowledgement.mode": "explicit",
                  **(extra or {})}
        with map_kafka_errors("create share consumer", topic, servers=self.bootstrap_servers):
            return TopicShareConsumer(ShareConsumer(config), topic, self.bootstrap_servers)

    def set_group_configs(self, group: str, settings: Mapping[str, str]) -> dict[str, str]:
        """Set dynamic configs of group ``group`` (IncrementalAlterConfigs on the GROUP config
        resource, accepted before the group exists) and read them back (DescribeConfigs),
        until the broker reports them or :data:`ADMIN_TIMEOUT` seconds pass.

        Returns:
            dict[str, str]: the value the broker reports for each name of ``settings`` (a name
            it does not report is missing).

        Raises:
            BrokerError: a name or value refused; BrokerUnavailable: no answer.
        """
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in settings.items()])
        for future in self.admin.incremental_alter_configs(
                [resource], request_timeout=ADMIN_TIMEOUT).values():
            with map_kafka_errors(f"set configs of group {group!r}",
                                  servers=self.bootstrap_servers):
                future.result(ADMIN_TIMEOUT)
        # The broker applies a group config through the metadata log: a DescribeConfigs right
        # after the alter may still report the old values (seen on Kafka 4.4), so read until
        # it reports what was set or ADMIN_TIMEOUT passes, and return what it reports then.
        deadline = time.monotonic() + ADMIN_TIMEOUT
        while True:
            described = self.admin.describe_configs(
                [ConfigResource(ResourceType.GROUP, group)], request_timeout=ADMIN_TIMEOUT)
            with map_kafka_errors(f"describe configs of group {group!r}",
                                  servers=self.bootstrap_servers):
                entries = next(iter(described.values())).result(ADMIN_TIMEOUT)
            reported = {key: entries[key].value for key in settings
                        if key in entries and entries[key].value is not None}
            if reported == dict(settings) or time.monotonic() >= deadline:
                return reported
            time.sleep(0.2)

    def delete_groups(self, groups: Iterable[str]) -> list[str]:
        """Delete empty groups of any type (DeleteGroups, which deletes a share group too);
        groups that do not exist are ignored.

        Returns:
            list[str]: the groups left because members are still in them (NON_EMPTY_GROUP).

        Raises:
            BrokerError: another refusal (e.g. GROUP_AUTHORIZATION_FAILED).
            BrokerUnavailable: no answer within :data:`ADMIN_TIMEOUT` seconds.
        """
        groups = list(groups)
        if not groups:
            return []
        busy = []
        futures = self.admin.delete_consumer_groups(groups, request_timeout=ADMIN_TIMEOUT)
        for group, future in futures.items():
            with map_kafka_errors(f"delete group {group!r}", servers=self.bootstrap_servers):
                try:
                    future.result(ADMIN_TIMEOUT)
                except KafkaException as exc:
                    error = _error_of(exc)
                    code = None if error is None else error.code()
                    if code == KafkaError.NON_EMPTY_GROUP:
                        busy.append(group)
                    elif code != KafkaError.GROUP_ID_NOT_FOUND:
                        raise
        return busy

    def broker_config(self, name: str) -> str | None:
        """The value of broker config ``name`` on the first broker the cluster lists.

        Raises:
            BrokerUnavailable, BrokerError: as mapped from Kafka.
        """
        with map_kafka_errors("describe broker configs", servers=self.bootstrap_servers):
            brokers = sorted(self.admin.list_topics(timeout=ADMIN_TIMEOUT).brokers)
            if not brokers:
                raise BrokerUnavailable("describe broker configs failed: the cluster lists no "
                                        "broker", hint="check that the Kafka brokers at "
                                        f"{self.bootstrap_servers} are running")
            futures = self.admin.describe_configs(
                [ConfigResource(ResourceType.BROKER, str(brokers[0]))],
                request_timeout=ADMIN_TIMEOUT)
            entries = next(iter(futures.values())).result(ADMIN_TIMEOUT)
        entry = entries.get(name)
        return None if entry is None else entry.value

    def close(self) -> None:
        """Release the admin client (producers and readers are closed by their owners)."""
        self._admin = None


_ACK_TYPES = {ACCEPT: AcknowledgeType.ACCEPT, RELEASE: AcknowledgeType.RELEASE}


class TopicShareConsumer:
    """A librdkafka ``ShareConsumer`` (Preview in confluent-kafka 2.16) subscribed to one
    single-partition topic, explicit acknowledgement (satisfies
    :class:`facade.kafka.kafkaseam.ShareRecordConsumer`).

    Args:
        consumer (ShareConsumer): a new share consumer in explicit acknowledgement mode.
        topic (str): the topic it subscribes to.
        servers (str): ``bootstrap.servers``, named in errors.
    """

    def __init__(self, consumer: ShareConsumer, topic: str, servers: str):
        self._consumer = consumer
        self._topic = topic
        self._servers = servers
        #: The client's Message objects of the last poll, by offset: acknowledge() takes them.
        self._in_flight: dict[int, Any] = {}
        with map_kafka_errors("subscribe share consumer", topic, servers=servers):
            consumer.subscribe([topic])

    def poll(self, timeout: float) -> list[SharedRecord]:
        """Records acquired within ``timeout`` seconds.

        Raises:
            BrokerUnavailable, QueueNotFound, BrokerError: a non-retriable error event.
        """
        with map_kafka_errors("poll share group", self._topic, servers=self._servers):
            batch = self._consumer.poll(timeout)
        acquired_at = time.monotonic()
        records = []
        for msg in batch:
            error = msg.error()
            if error is not None:
                if error.retriable() or error.code() in _SHARE_TRANSIENT:
                    continue  # a coordinator still loading: the next poll retries
                raise kafka_error_to_queue_error(error, "poll share group", self._topic,
                                                 self._servers)
            _, timestamp = msg.timestamp()
            offset = cast(int, msg.offset())
            self._in_flight[offset] = msg
            records.append(SharedRecord(
                KafkaRecord(cast(str, msg.topic()), cast(int, msg.partition()), offset,
                            timestamp, msg.key(), msg.value(),
                            tuple(cast("list[tuple[str, bytes]]", msg.headers() or ()))),
                int(msg.delivery_count() or 1), acquired_at))
        return records

    def acknowledge(self, shared: SharedRecord, kind: str) -> None:
        """Record ACCEPT or RELEASE for ``shared`` (sent by :meth:`commit_sync`).

        Raises:
            BrokerError: the record is not in flight with this consumer.
        """
        msg = self._in_flight.pop(shared.record.offset, None)
        if msg is None:
            raise BrokerError(f"offset {shared.record.offset} of {self._topic!r} is not in "
                              "flight with this share consumer")
        try:
            self._consumer.acknowledge(msg, _ACK_TYPES[kind])
        except (KafkaException, RuntimeError) as exc:  # IllegalStateException
            raise BrokerError(f"acknowledge offset {shared.record.offset} of "
                              f"{self._topic!r} failed: {exc}") from exc

    def commit_sync(self, timeout: float) -> str | None:
        """Send pending acknowledgements; None on success for the partition, else the Kafka
        error name (see :meth:`facade.kafka.kafkaseam.ShareRecordConsumer.commit_sync`).

        Raises:
            BrokerUnavailable, BrokerError: no answer within ``timeout`` (outcome unknown).
        """
        with map_kafka_errors("commit share acknowledgements", self._topic,
                              servers=self._servers):
            result = self._consumer.commit_sync(timeout)
        if not result:
            raise BrokerError(f"commit share acknowledgements ({self._topic!r}) returned no "
                              "result for the partition: its outcome is unknown")
        for partition, error in result.items():
            if error is not None:
                inner = error.args[0] if getattr(error, "args", None) else None
                name = inner.name() if isinstance(inner, KafkaError) else str(error)
                return name
        return None

    def close(self) -> None:
        """Leave the group; unacknowledged records are released by the broker."""
        self._in_flight.clear()
        with map_kafka_errors("close share consumer", self._topic, servers=self._servers):
            self._consumer.close()


#: Error codes a fresh broker reports while its share coordinators load.
_SHARE_TRANSIENT = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._PARTITION_EOF}


def _in_use(method: Any) -> Any:
    """Run a :class:`TopicReader` method as one call (see ``TopicReader._enter``)."""
    @functools.wraps(method)
    def call(self: TopicReader, *args: Any, **kwargs: Any) -> Any:
        self._enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._leave()
    return call


def _describe_lag(lagging: Mapping[str, tuple[int, int]]) -> str:
    """``topic at offset P of H`` per lagging topic, for logs and errors."""
    return "; ".join(f"{topic} at offset {position} of "
                     f"{high if high >= 0 else 'an unknown end (no fetch response yet)'}"
                     for topic, (position, high) in lagging.items())


class TopicReader:
    """Reads single-partition topics from explicit offsets, without a consumer group.

    **Resting.** librdkafka fetches assigned partitions in the background, between calls too,
    and librdkafka 2.16 can crash the whole process (SIGSEGV in
    ``rd_kafka_metadata_update_op``) on a Fetch response for a topic deleted under it (an
    unknown topic id with a KIP-951 ``CurrentLeader`` hint, as other Kafka-API brokers send;
    guarded against on every broker, because deleting a topic under a live reader is not worth
    a crash). Queues are
    deleted by other processes at any time (``kmq queue delete``), so a reader unused for
    :data:`REST_AFTER` seconds stops fetching (its partitions are paused, positions kept),
    and the next call checks with one metadata request that its topics still exist before
    fetching again; :meth:`stop_reading` stops it at once for topics about to be deleted in this
    process. A deletion while a call is reading remains exposed to that librdkafka bug.

    Args:
        base (Mapping[str, Any]): common librdkafka settings (bootstrap servers, security).
    """

    def __init__(self, base: Mapping[str, Any]):
        self._base = base
        #: Kafka ``bootstrap.servers``, named in errors of an outage.
        self.bootstrap_servers = str(base.get("bootstrap.servers", ""))
        self._wait_ms = TAIL_FETCH_WAIT_MS
        self._consumer = self._new_consumer()
        #: Per assigned topic: the offset of the next record to hand out (< 0: the log start).
        self._next: dict[str, int] = {}
        self._paused: set[str] = set()
        #: Seconds spent waiting in polls that brought no record since the last one did.
        self._idle_waited = 0.0
        #: When the fetch wait was last lengthened (time.monotonic()).
        self._lengthened_at = 0.0
        #: Starvation checks in a row that found the reader at its reported end (see
        #: _check_starved).
        self._at_end_checks = 0
        #: Topics paused because the reader rested (see :meth:`rest`), not by :meth:`pause`.
        self._rested: set[str] = set()
        #: Topics :meth:`stop_reading` named: never fetched again.
        self._deleted: set[str] = set()
        #: Guards _rested and the consumer's pause state: :meth:`rest` runs on other threads.
        self._state_lock = threading.Lock()
        self._busy = 0
        self._last_used = time.monotonic()
        self._closed = False
        #: Per topic: the offset where librdkafka last reported the end of what a read_committed
        #: reader may read (the last stable offset: below the high watermark while a Kafka
        #: transaction is open).
        self._stable_end: dict[str, int] = {}
        _RESTER.watch(self)

    def _new_consumer(self) -> Consumer:
        return Consumer({
            **self._base,
            # librdkafka wants a group id even for assign(); nothing is ever committed to it.
            "group.id": f"kmq-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "allow.auto.create.topics": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            # Reports the last stable offset (see read_to_end).
            "enable.partition.eof": True,
            # Receives wait on other processes' receipts: start with a short broker-side fetch
            # wait (see _check_starved for when it grows).
            "fetch.wait.max.ms": self._wait_ms,
            "fetch.queue.backoff.ms": 1,
        })

    @_in_use
    def assign(self, positions: Mapping[str, int]) -> None:
        """Read each topic (partition 0) from the given offset; replaces earlier assignments."""
        with self._state_lock:
            deleted = sorted(self._deleted & set(positions))
            if deleted:
                raise _deleted_error(deleted)
            self._next = dict(positions)
            self._paused.clear()
            self._rested.clear()
            self._assign(self._next)

    def _assign(self, positions: Mapping[str, int]) -> None:
        parts = [TopicPartition(t, 0, o if o >= 0 else OFFSET_BEGINNING) for t, o in positions.items()]
        with map_kafka_errors("assign topics", servers=self.bootstrap_servers):
            self._consumer.assign(parts)

    @_in_use
    def poll(self, timeout: float, max_records: int = 1000) -> list[KafkaRecord]:
        """Records available within ``timeout`` seconds (may be empty).

        Raises:
            QueueNotFound: an assigned topic was deleted.
            BrokerUnavailable, BrokerError: as mapped from Kafka.
        """
        waited = 0.0
        with map_kafka_errors("read topics", servers=self.bootstrap_servers):
            # consume() waits for max_records or the whole timeout; a receive waiting for one
            # receipt must wake on the first record, so drain what is there, then block in poll().
            batch = self._consumer.consume(max_records, 0)
            if not batch and timeout > 0:
                started = time.monotonic()
                first = self._consumer.poll(timeout)
                waited = time.monotonic() - started
                if first is not None:
                    batch = [first, *self._consumer.consume(max_records - 1, 0)]
        if self._deleted:
            self._wake()  # stop_reading() was called during this poll
        records = []
        at_end = False
        for msg in batch:
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._stable_end[cast(str, msg.topic())] = cast(int, msg.offset())
                    at_end = True
                    continue
                raise kafka_error_to_queue_error(error, "read topic", msg.topic(),
                                                 self.bootstrap_servers)
            _, timestamp = msg.timestamp()
            # A consumed record without an error has all three (the stubs allow None).
            topic, offset = cast(str, msg.topic()), cast(int, msg.offset())
            records.append(KafkaRecord(
                topic, cast(int, msg.partition()), offset, timestamp, msg.key(), msg.value(),
                tuple(cast("list[tuple[str, bytes]]", msg.headers() or ())),
            ))
            self._next[topic] = offset + 1
        if records:
            self._idle_waited = 0.0
            self._at_end_checks = 0
        elif timeout > 0 or batch:
            self._check_starved(waited)
        if at_end and self._wait_ms > TAIL_FETCH_WAIT_MS:
            self._relax_fetch_wait()
        return records

    def _relax_fetch_wait(self) -> None:
        """Go back to the short fetch wait once a reader whose wait was lengthened has read every
        topic it fetches to the end (librdkafka reported the end of each).

        At the end of a log a short wait is what keeps reads prompt: librdkafka fetches a
        position the reader just moved to only after the fetch in flight returns, so with
        500 ms every receipt's verdict and every record just written could take up to half a
        second to read, which starves a competing receiver (see :data:`TAIL_FETCH_WAIT_MS`). Starvation is a reader far
        behind, so a reader at the end has none. At most once per :data:`RELAX_AFTER` seconds
        after the wait was lengthened, so a reader that falls behind again is not replaced
        over and over.
        """
        if time.monotonic() - self._lengthened_at < RELAX_AFTER:
            return
        with self._state_lock:
            fetching = [t for t in self._next if t not in self._paused and t not in self._rested]
        if not fetching or any(self._stable_end.get(t, -1) < self._next[t] for t in fetching):
            return
        log.info("reader of %s is at the end: fetch.wait.max.ms back to %d",
                 ", ".join(sorted(self._next)), TAIL_FETCH_WAIT_MS)
        self._wait_ms = TAIL_FETCH_WAIT_MS
        self._replace_consumer()

    def _check_starved(self, waited: float) -> None:
        """Lengthen the broker-side fetch wait when short fetches bring nothing although the
        reader is behind.

        A short ``fetch.wait.max.ms`` keeps the tail of a log at low latency on brokers that do
        not answer a waiting fetch as soon as a record arrives, but a broker whose fetch takes
        longer than that wait (a long log of small batches) then answers every fetch empty, and
        the reader never catches up. Checked after :data:`STARVED_AFTER` seconds spent waiting
        in polls that brought nothing (the time between polls does not count: a receiver
        that polls, works for a while and polls again was not waiting for the broker), with one
        end-offset query; each step multiplies the wait by 8, up to librdkafka's
        default of 500 ms. Apache Kafka answers a waiting fetch at once, so there a short wait
        never starves and this never triggers.

        A reader that stands exactly where librdkafka last reported the end of the partition
        (the end of a fetch response: for this read_committed reader the last stable offset),
        or only a few records (:data:`SHORT_BACKLOG`) behind the end offset the broker gives,
        is most likely at the end and not starved: a Kafka transaction still open holds the
        last stable offset below the end offset, and a broker may answer the end-offset query
        ahead of the fetch responses a reader has had. Raising the wait
        there makes every later read wait out the longer fetch (measured: 128 ms per receive
        from a transactional queue while a transactional sender wrote to it, 1,654 demo messages
        in 223 s instead of 14 s). Only after :data:`AT_END_CHECKS` such checks in a row (records
        arriving reset the count), about 2 s of empty polls, is such a reader taken as starved
        after all, so that one starved there still recovers.
        """
        self._idle_waited += waited
        if self._idle_waited < STARVED_AFTER or self._wait_ms >= MAX_FETCH_WAIT_MS:
            return
        self._idle_waited = 0.0
        fetching = [t for t in self._next if t not in self._paused]
        if not fetching:
            return
        try:
            ends = self.end_offsets(fetching, timeout=1.0)
        except BrokerUnavailable:
            return  # no answer, so no evidence of starvation: the poll's result stands
        positions = self._positions(fetching)
        behind = [t for t in fetching
                  if (positions[t] >= 0 or ends[t] > 0) and positions[t] < ends[t]]
        if not behind:
            return
        if all(positions[t] == self._stable_end.get(t) or ends[t] - positions[t] <= SHORT_BACKLOG
               for t in behind):
            self._at_end_checks += 1
            if self._at_end_checks <= AT_END_CHECKS:
                return
        self._at_end_checks = 0
        self._lengthen_fetch_wait("got nothing")

    def _positions(self, topics: Iterable[str]) -> dict[str, int]:
        """Per topic, the next offset to read: the consumer's position, which also moves past
        transaction markers, or (before the consumer hands out anything) the offset assigned or
        the last record handed out + 1; < 0 means the log start."""
        with map_kafka_errors("read positions", servers=self.bootstrap_servers):
            parts = self._consumer.position([TopicPartition(t, 0) for t in topics])
        return {part.topic: max(part.offset, self._next.get(part.topic, -1)) for part in parts}

    def _lengthen_fetch_wait(self, why: str) -> None:
        """Replace the consumer by one with an 8 times longer fetch wait, at the same positions."""
        if self._wait_ms >= MAX_FETCH_WAIT_MS:
            return
        self._wait_ms = min(self._wait_ms * 8, MAX_FETCH_WAIT_MS)
        self._lengthened_at = time.monotonic()
        log.info("reader of %s %s for %.2f s while behind: fetch.wait.max.ms raised to %d",
                 ", ".join(sorted(self._next)), why, STARVED_AFTER, self._wait_ms)
        self._replace_consumer()

    def _replace_consumer(self) -> None:
        """A new consumer with the current fetch wait, at the same positions and pauses."""
        with self._state_lock:
            if self._closed:
                return
            self._consumer.close()
            self._consumer = self._new_consumer()
            self._assign(self._next)
            for topic in self._paused | self._rested:
                self._consumer.pause([TopicPartition(topic, 0)])

    @_in_use
    def seek(self, topic: str, offset: int) -> None:
        """Read ``topic`` (partition 0) again from ``offset``; records already fetched past it
        are dropped and fetched again.

        Raises:
            BrokerError: the partition is not assigned to this reader.
        """
        with map_kafka_errors("seek", topic, servers=self.bootstrap_servers):
            self._consumer.seek(TopicPartition(topic, 0, offset))
        self._next[topic] = offset

    @_in_use
    def pause(self, topic: str) -> None:
        """Stop fetching ``topic`` (partition 0) until :meth:`resume`; the position is kept.

        Raises:
            BrokerError: the partition is not assigned to this reader.
        """
        with self._state_lock, map_kafka_errors("pause", topic, servers=self.bootstrap_servers):
            if topic not in self._rested:
                self._consumer.pause([TopicPartition(topic, 0)])
            self._paused.add(topic)

    @_in_use
    def resume(self, topic: str) -> None:
        """Fetch ``topic`` (partition 0) again after :meth:`pause`, from where it stopped.

        Raises:
            BrokerError: the partition is not assigned to this reader.
        """
        with self._state_lock, map_kafka_errors("resume", topic, servers=self.bootstrap_servers):
            if topic not in self._rested:
                self._resume_consumer([topic])
            self._paused.discard(topic)

    def _resume_consumer(self, topics: Sequence[str]) -> None:
        """Fetch paused ``topics`` again from where this reader stands.

        Each is sought to its position right after the resume, which changes no position
        (librdkafka resumes from the position the application reached) but starts the fetch at
        once: a plain resume of librdkafka 2.16 fetched the first record 90-100 ms later on
        Apache Kafka 4.4 (a seek, 2-5 ms), and a receiver draining a long queue resumes its
        body-fetching reader at every cache fill.
        """
        parts = [TopicPartition(topic, 0) for topic in topics]
        self._consumer.resume(parts)
        for topic in topics:
            position = self._next.get(topic, -1)
            self._consumer.seek(TopicPartition(topic, 0,
                                               position if position >= 0 else OFFSET_BEGINNING))

    @_in_use
    def caught_up(self, topics: Iterable[str]) -> bool:
        """True when every topic has been read up to the high watermark of its latest fetch
        response (a watermark is known only after the first fetch response for the topic).

        The fetch-response watermark is used, not a separate query, because it is what the
        consumer has actually been offered (and some Kafka-API brokers answer watermark queries
        inexactly). ``position()`` skips transaction control records, so gaps are not waited on.
        """
        return not self._lagging(topics)

    def _lagging(self, topics: Iterable[str],
                 floors: Mapping[str, int] | None = None) -> dict[str, tuple[int, int]]:
        """The topics not read up to their high watermark: ``topic -> (position, high)``,
        high < 0 while no fetch response is known. ``floors`` raises a topic's end to at least
        the given offset (an end offset queried from the broker)."""
        lagging = {}
        with map_kafka_errors("read positions", servers=self.bootstrap_servers):
            for topic, position in self._positions(topics).items():
                low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, 0),
                                                                 cached=True)
                if high >= 0 and floors:
                    high = max(high, floors.get(topic, 0))
                if high < 0 or position < 0 and high > 0 or 0 <= position < high:
                    lagging[topic] = (max(position, low, 0), high)
        return lagging

    def _held_by_transaction(self, lagging: Mapping[str, tuple[int, int]]) -> bool:
        """True when every lagging topic is read up to its last stable offset: what is left
        belongs to an open Kafka transaction, invisible to read_committed readers until it ends."""
        return bool(lagging) and all(
            high >= 0 and self._stable_end.get(topic) == position
            for topic, (position, high) in lagging.items())

    def _fetch_state(self, topics: Iterable[str]) -> str:
        """What the reader knows of each topic's fetching, for an error that says it is stuck:
        the last stable offset librdkafka last reported the end at, pause state, fetch wait."""
        with self._state_lock:
            parts = [f"{topic}: end last reported at {self._stable_end.get(topic, 'none')}"
                     f"{', paused' if topic in self._paused else ''}"
                     f"{', resting' if topic in self._rested else ''}" for topic in topics]
        return f"{'; '.join(parts)}; fetch.wait.max.ms {self._wait_ms}"

    def log_start(self, topic: str) -> int:
        """The log start offset of ``topic`` (partition 0) from the latest fetch response, 0
        while none is known: records below it were deleted."""
        with map_kafka_errors("read positions", topic, servers=self.bootstrap_servers):
            low, _high = self._consumer.get_watermark_offsets(TopicPartition(topic, 0),
                                                              cached=True)
        return max(low, 0)

    @_in_use
    def end_offsets(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, int]:
        """The offset the next record of each topic (partition 0) will get, from a ListOffsets
        query to the broker (not the cached fetch watermark).

        Exact for topics written one record per batch (the registries); some Kafka-API brokers
        answer it inexactly after multi-record batches, where :meth:`watermarks` is needed.

        Raises:
            QueueNotFound: a topic does not exist.
            BrokerUnavailable: no answer within ``timeout`` seconds.
        """
        ends = {}
        missing_since: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        with map_kafka_errors("read end offsets", servers=self.bootstrap_servers):
            for topic in topics:
                while True:
                    try:
                        _low, high = self._consumer.get_watermark_offsets(
                            TopicPartition(topic, 0), timeout=max(deadline - time.monotonic(), 0.1),
                            cached=False)
                        break
                    except KafkaException as exc:
                        if time.monotonic() <= deadline and self._worth_retrying(
                                exc, topic, deadline, missing_since):
                            time.sleep(0.05)
                            continue
                        error = _error_of(exc)
                        if error is not None and error.code() in _NOT_FOUND:
                            self._missing_past_deadline(exc, topic, missing_since)
                        raise
                ends[topic] = max(high, 0)
        return ends

    def _missing_past_deadline(self, exc: KafkaException, topic: str,
                               missing_since: dict[str, float]) -> None:
        """Past the deadline, librdkafka still says "unknown partition" for ``topic``: that is
        its metadata cache (say, right after a broker restart), not the cluster. The cluster is
        asked once more: QueueNotFound if it says the topic does not exist, else
        BrokerUnavailable (no answer in time), never "not found" on librdkafka's word alone.

        Raises:
            QueueNotFound: the cluster answered that ``topic`` does not exist.
            BrokerUnavailable: otherwise.
        """
        self._worth_retrying(exc, topic, time.monotonic(), missing_since)
        raise BrokerUnavailable(
            f"read end offsets (topic {topic!r}) failed: the Kafka cluster at "
            f"{self.bootstrap_servers} lists the topic but gave no end offset in time "
            f"({exc.args[0].str()})",
            hint="check that the Kafka brokers are running and reachable") from exc

    def _worth_retrying(self, exc: KafkaException, topic: str, deadline: float,
                        missing_since: dict[str, float]) -> bool:
        """Whether an offsets query that failed with ``exc`` may succeed if asked again.

        A new topic's leader, or one that just moved, answers NOT_LEADER until the brokers have
        the metadata, and OFFSET_NOT_AVAILABLE until its high watermark has caught up (Kafka's
        clients retry those). A query sent to a leader that just crashed fails with a transport
        error, or with a destroyed broker handle once the crashed broker left the metadata:
        asked again, it goes to the new leader. librdkafka's "unknown partition" only says that
        its metadata cache lacks the topic: the cluster is asked. A topic it knows is retried;
        one it says does not exist is :class:`QueueNotFound` once it has said so for
        :data:`MISSING_GRACE` seconds (``missing_since``: when each topic was first said
        missing in this query), because on several brokers one may still lack a topic another
        has just listed; no answer is :class:`BrokerUnavailable`, never "not found".

        Raises:
            QueueNotFound: the cluster answered that ``topic`` does not exist.
            BrokerUnavailable: the cluster did not answer.
        """
        error = _error_of(exc)
        if error is None:
            return False
        if error.code() in _LEADER_MOVING:
            return True
        if error.code() not in _NOT_FOUND:
            return False
        servers = self.bootstrap_servers
        try:
            metadata = self._consumer.list_topics(topic, timeout=max(deadline - time.monotonic(), 1.0))
        except KafkaException as down:
            raise BrokerUnavailable(
                f"read end offsets (topic {topic!r}) failed: the Kafka cluster at {servers} did "
                f"not answer ({down.args[0].str() if down.args else down})",
                hint="check that the Kafka brokers are running and reachable") from down
        found = metadata.topics.get(topic)
        if found is None or (found.error is not None
                             and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            first = missing_since.setdefault(topic, time.monotonic())
            if time.monotonic() - first < MISSING_GRACE and time.monotonic() < deadline:
                return True
            raise QueueNotFound(f"topic {topic!r} does not exist on the Kafka cluster at {servers}",
                                queue=topic, hint="create the queue first (kmq queue create)") from exc
        return True

    @_in_use
    def watermarks(self, topics: Sequence[str], timeout: float = 10.0) -> dict[str, tuple[int, int]]:
        """The log start and end offsets of each topic (partition 0), from a fetch response.

        A ListOffsets query only gives the starting point (some Kafka-API brokers answer it
        inexactly after multi-record batches); the reader then fetches from just before that
        end, and the watermarks of the fetch response are returned, as :meth:`caught_up` uses.
        Replaces this reader's assignment; the records fetched are discarded.

        Args:
            topics (Sequence[str]): single-partition topics.
            timeout (float): seconds for the whole operation.

        Returns:
            dict[str, tuple[int, int]]: per topic, ``(low, high)``: the first offset still
            stored and the offset the next record will get.

        Raises:
            QueueNotFound: a topic does not exist.
            BrokerUnavailable: no fetch response within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        hints = self.end_offsets(topics, timeout)
        # Fetch the last record the query reported: its response carries the true watermarks.
        self.assign({topic: max(high - 1, 0) for topic, high in hints.items()})
        found: dict[str, tuple[int, int]] = {}
        while len(found) < len(hints):
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"no fetch response for {', '.join(sorted(set(hints) - set(found)))} "
                                        f"within {timeout:g} s", hint="check that the Kafka broker is running")
            self.poll(0.01)
            with map_kafka_errors("read end offsets", servers=self.bootstrap_servers):
                for topic in hints.keys() - found.keys():
                    low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=True)
                    if high >= 0:
                        found[topic] = (max(low, 0), max(high, hints[topic]))
        return found

    def read_to_end(self, topics: Sequence[str], timeout: float, *,
                    ends: Mapping[str, int] | None = None) -> Iterator[list[KafkaRecord]]:
        """Yield batches of records until every topic is read up to what the broker holds now.

        The end is the later of the watermark of the latest fetch response and the end offset
        the broker gives at the start of the call (one ListOffsets query per topic). The
        watermark alone can predate the call: a reader that rested fetched nothing meanwhile,
        and a reader whose fetch wait was lengthened last heard from the broker up to that
        wait ago. The queried end alone can fall short (some Kafka-API brokers answer with the
        first offset of the last multi-record batch), so the reader also reads at least
        ``_SETTLE`` seconds and up to a fetch response's watermark.

        A Kafka transaction that is open (a producer between its first write and its commit or
        abort) holds its records, and every record after them, back from read_committed readers.
        A commit takes milliseconds, so the reader first waits for it: a transaction committed
        just before the call is read. Held for :data:`OPEN_TRANSACTION_GRACE` seconds at the last
        stable offset, the reader takes that offset as the end (logged): a producer that died
        inside a transaction holds records until the broker aborts it after its
        ``transaction.timeout.ms``, and readers must not be locked out meanwhile. Its records
        are read later, once it is committed.

        ``ends``: the end offsets, queried by the caller just before (one batched query for
        many topics: :meth:`KafkaSession.offset_bounds`), instead of one query per topic here.

        Raises:
            BrokerUnavailable: not caught up within ``timeout`` seconds; the message gives each
                topic's position and high watermark.
            QueueNotFound: a topic does not exist.
        """
        started = time.monotonic()
        floors = dict(ends) if ends is not None else self.end_offsets(topics, timeout)
        checked = started
        held_since: float | None = None
        positions = dict(self._next)
        while True:
            now = time.monotonic()
            if now - started >= _SETTLE:
                lagging = self._lagging(topics, floors)
                if not lagging:
                    return
                if not self._held_by_transaction(lagging):
                    held_since = None
                elif held_since is None:
                    held_since = now
                elif now - held_since >= OPEN_TRANSACTION_GRACE:
                    log.warning("an open Kafka transaction holds back records of %s; read up "
                                "to the last stable offset after %g s",
                                _describe_lag(lagging), OPEN_TRANSACTION_GRACE)
                    return
                if now - started > timeout:
                    raise BrokerUnavailable(
                        f"could not read {', '.join(topics)} up to the end within {timeout:g} s "
                        f"({_describe_lag(lagging)}; {self._fetch_state(lagging)})",
                        hint="check that the Kafka broker is running")
            if now - checked > STARVED_AFTER:
                # Still behind and no record came: short fetch waits are what keeps a slow
                # broker from answering (see _check_starved). A reader that moves is not
                # starved: a longer wait would only slow it.
                checked = now
                if self._next == positions:
                    self._lengthen_fetch_wait("did not catch up")
                positions = dict(self._next)
            yield self.poll(0.01)

    def close(self) -> None:
        """Leave and release the consumer."""
        with self._state_lock:
            self._closed = True
            self._consumer.close()

    # -- resting (see the class docstring) ------------------------------------------------------

    # A view's reader is called several times per receive: entering and leaving a call are
    # plain methods (no generator-based context manager) and skip the wake-up when nothing rests.

    def _enter(self) -> None:
        """Mark the reader in use for one call; wake it first if it rested (the caller must
        call :meth:`_leave` after, also when this raises)."""
        with self._state_lock:
            self._busy += 1
            awake = not self._rested and not self._deleted
        if not awake:
            try:
                self._wake()
            except BaseException:
                self._leave()
                raise

    def _leave(self) -> None:
        """End a call begun by :meth:`_enter`."""
        with self._state_lock:
            self._busy -= 1
            self._last_used = time.monotonic()

    def _wake(self) -> None:
        """Fetch the rested topics again, once a metadata request shows they still exist.

        Raises:
            QueueNotFound: a topic was deleted (or :meth:`stop_reading` named it); it stays
                paused, so every later call raises the same.
        """
        with self._state_lock:
            rested, deleted = set(self._rested), set(self._deleted)
        if not rested and not deleted:
            return
        gone = deleted | {topic for topic in rested - deleted if not self._topic_exists(topic)}
        if gone:
            raise _deleted_error(sorted(gone))
        with self._state_lock, map_kafka_errors("resume", ", ".join(sorted(rested)),
                                                  servers=self.bootstrap_servers):
            resumed = rested & self._rested - self._paused
            if resumed:
                self._resume_consumer(sorted(resumed))
            self._rested -= rested

    def _topic_exists(self, topic: str) -> bool:
        """One metadata request for ``topic`` (never creates it: auto-creation is off)."""
        with map_kafka_errors("describe topic", topic, servers=self.bootstrap_servers):
            found = self._consumer.list_topics(topic=topic, timeout=ADMIN_TIMEOUT).topics.get(topic)
        return found is not None and found.error is None

    def rest(self, *, idle_for: float = 0.0) -> bool:
        """Stop fetching every assigned topic if no call is under way and the last one ended
        ``idle_for`` seconds ago or more; the next call fetches again (see the class docstring).

        Thread-safe: called by the process's rester thread.

        Returns:
            bool: whether the reader rests now.
        """
        with self._state_lock:
            if self._closed or self._busy or time.monotonic() - self._last_used < idle_for:
                return bool(self._rested)
            awake = set(self._next) - self._paused - self._rested
            if awake:
                self._consumer.pause([TopicPartition(topic, 0) for topic in awake])
                self._rested |= awake
            return bool(self._rested)

    @_in_use
    def wake(self) -> None:
        """Fetch again now if the reader rested (every other call does it too).

        Raises:
            QueueNotFound: one of its topics was deleted meanwhile.
        """

    def fetching(self) -> bool:
        """Whether librdkafka fetches any of this reader's topics in the background now."""
        with self._state_lock:
            return not self._closed and bool(set(self._next) - self._paused - self._rested)

    def stop_reading(self, topics: Iterable[str]) -> None:
        """Stop fetching ``topics`` for good, because they are about to be deleted: every later
        call (and a :meth:`poll` under way) raises QueueNotFound naming them. Thread-safe.
        """
        with self._state_lock:
            doomed = set(topics) & set(self._next)
            if self._closed or not doomed:
                return
            awake = doomed - self._paused - self._rested
            if awake:
                self._consumer.pause([TopicPartition(topic, 0) for topic in awake])
            self._rested |= doomed
            self._deleted |= doomed


def _deleted_error(topics: Sequence[str]) -> QueueNotFound:
    return QueueNotFound(f"topic {', '.join(map(repr, topics))} was deleted while this process "
                         "was reading it: its queue no longer exists", queue=topics[0],
                         hint="the queue was deleted (kmq queue delete); open or create it again")


class _Rester:
    """The process's one thread that lets unused readers rest (see :class:`TopicReader`)."""

    def __init__(self) -> None:
        self._readers: weakref.WeakSet[TopicReader] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, reader: TopicReader) -> None:
        with self._lock:
            self._readers.add(reader)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kmq-reader-rest",
                                                daemon=True)
                self._thread.start()

    def readers(self) -> list[TopicReader]:
        with self._lock:
            return list(self._readers)

    def _run(self) -> None:
        while True:
            time.sleep(REST_AFTER / 5)
            for reader in self.readers():
                try:
                    reader.rest(idle_for=REST_AFTER)
                except Exception:  # noqa: BLE001 - a daemon thread must outlive any one reader
                    log.exception("could not let an unused Kafka reader rest")


_RESTER = _Rester()


def stop_reading(topics: Iterable[str]) -> None:
    """Stop every reader of this process from fetching ``topics``, which are about to be
    deleted (see :meth:`TopicReader.stop_reading`)."""
    topics = set(topics)
    for reader in _RESTER.readers():
        reader.stop_reading(topics)


def readers_at_rest() -> bool:
    """True when no reader of this process fetches in the background now: every open reader
    rests (or reads nothing). A process waits for this before a queue it reads may be
    deleted safely (tests do)."""
    return not any(reader.fetching() for reader in _RESTER.readers())


def produce_and_wait(producer: RecordProducer, topic: str, value: bytes | None, *, key: bytes | None = None,
                     headers: Sequence[tuple[str, bytes]] | None = None, timeout: float = 30.0,
                     operation: str = "write") -> int:
    """Produce one record and wait for the broker's acknowledgment.

    Returns:
        int: the record's offset.

    Raises:
        BrokerUnavailable: not acknowledged within ``timeout`` seconds.
        BrokerError (or a more specific MessageQueueError): the broker rejected the record.
    """
    return produce_async(producer, topic, value, key=key, headers=headers,
                         operation=operation).wait(timeout)


#: Seconds one poll may block while :meth:`PendingRecord.wait` waits for its record.
WAIT_POLL_SLICE = 0.005
#: librdkafka settings of a producer whose records are waited for as they are written (one
#: record, or one batch handed over whole): lingering would only add to every wait.
NO_LINGER = {"linger.ms": 0}


class PendingRecord:
    """A record handed to a producer whose acknowledgment has not been waited for yet
    (see :func:`produce_async`); the caller may do other work before :meth:`wait`."""

    __slots__ = ("_producer", "_topic", "_operation", "_outcome")

    def __init__(self, producer: RecordProducer, topic: str, operation: str):
        self._producer = producer
        self._topic = topic
        self._operation = operation
        self._outcome: list[Any] = []

    def _delivered(self, err: Any, msg: Any) -> None:
        self._outcome.append((err, msg))

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the broker's verdict on this record only (other records of the producer,
        of this thread or another, are not waited for). The producer's ``linger.ms`` delays the
        verdict: producers whose records are waited for one batch at a time use 0.

        Args:
            timeout (float): seconds.

        Returns:
            int: the record's offset.

        Raises:
            BrokerUnavailable: not acknowledged within ``timeout`` seconds.
            BrokerError (or a more specific MessageQueueError): the broker rejected the record.
        """
        deadline = time.monotonic() + timeout
        while not self._outcome:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerUnavailable(f"{self._operation} to {self._topic!r} not acknowledged "
                                        f"within {timeout:g} s",
                                        hint="check that the Kafka broker is running")
            # Not flush(): it waits for every record in the producer, and on a producer that
            # several threads write to (the queue manager's system copies: every receiver's
            # journal copies), for the records the others keep adding meanwhile. Another
            # thread's poll may serve this record's report, so one poll waits only a slice.
            self._producer.poll(min(left, WAIT_POLL_SLICE))
        err, msg = self._outcome[0]
        if err is not None:
            raise kafka_error_to_queue_error(err, self._operation, self._topic)
        return int(msg.offset())


def produce_async(producer: RecordProducer, topic: str, value: bytes | None, *, key: bytes | None = None,
                  headers: Sequence[tuple[str, bytes]] | None = None,
                  operation: str = "write") -> PendingRecord:
    """Hand one record to ``producer`` and return at once; :meth:`PendingRecord.wait` gets the
    broker's acknowledgment. The producer must not be polled by another thread.

    Raises:
        BrokerError (or a more specific MessageQueueError): the producer refused the record.
    """
    pending = PendingRecord(producer, topic, operation)
    produce(producer, topic, value, key, None if headers is None else list(headers),
            pending._delivered, operation)
    return pending


def is_fatal(error: Any) -> bool:
    """True when ``error`` (a delivery-report ``KafkaError``, or a :class:`BrokerError` from
    :func:`map_kafka_errors`) leaves its producer unusable: librdkafka's fatal errors, after
    which every produce fails until the producer is replaced (e.g. an idempotent producer whose
    sequence numbers the broker no longer knows)."""
    if isinstance(error, BrokerError):
        return error.kafka_code == "_FATAL"
    if isinstance(error, KafkaError):
        return error.fatal() or error.code() == KafkaError._FATAL
    return False


def poll_producer(producer: RecordProducer) -> BrokerError | None:
    """Serve ``producer``'s delivery callbacks without blocking.

    Returns:
        BrokerError | None: the fatal error ``poll`` reported, if any (replace the producer);
        None otherwise. Never raises, so a background poller survives a fatal producer.
    """
    try:
        producer.poll(0)
    except KafkaException as exc:
        error = _error_of(exc)
        return BrokerError(f"producer failed: {exc}",
                           kafka_code="_FATAL" if error is None or error.fatal() else error.name())
    return None


#: Seconds a transactional producer waits for the broker (initialisation, commit).
TRANSACTION_TIMEOUT = 60.0
#: Claimants of transactional LOCK receipts start with this, then ``transactional.id@incarnation``.
OWNER_PREFIX = "xact:"
#: Kafka ``transaction.timeout.ms`` (seconds): a Kafka transaction lasts only while a commit
#: runs, since sends are buffered until then. If its process dies mid-commit, read_committed
#: readers of the topics it wrote wait until the broker aborts it after this long, or until a
#: process with the same ``transactional.id`` starts (which aborts it at once).
KAFKA_TRANSACTION_TIMEOUT = 60.0


class TransactionalProducer:
    """The queue manager's Kafka transactional producer; one commit at a time.

    ``transactional.id`` is the sender's identity for Kafka's zombie fencing: a producer that
    starts with the same id (``init_transactions``) aborts what an earlier incarnation left open
    and fences it, so the old one's commit fails. Two live processes must therefore not share it;
    the default id is unique per process.

    Args:
        session (kafkaseam.KafkaSession): the Kafka clients (the librdkafka ones, or the
            in-memory ones of :mod:`facade.kafka.memorykafka`).
        transactional_id (str): Kafka ``transactional.id``.
    """

    def __init__(self, session: kafkaseam.KafkaSession, transactional_id: str):
        self.transactional_id = transactional_id
        #: The claimant of this process's transactional LOCK receipts: the ``transactional.id``
        #: and this incarnation. A later incarnation releases the locks of earlier ones.
        self.owner = f"{OWNER_PREFIX}{transactional_id}@{uuid.uuid4().hex[:12]}"
        self._session = session
        self._producer: Any = None
        self._lock = threading.Lock()

    def commit(self, produce: Callable[[Any], list[Any]],
               timeout: float = TRANSACTION_TIMEOUT) -> list[Any]:
        """Run ``produce(producer)`` inside one Kafka transaction and commit it.

        Args:
            produce (Callable[[Producer], list]): hands the transaction's records to the
                producer (it must not flush or poll); its return value is passed back.
            timeout (float): seconds for initialisation and for the commit.

        Returns:
            list: what ``produce`` returned (pending deliveries, all acknowledged by now).

        Raises:
            TransactionAborted: the broker refused the transaction or this producer was fenced
                by another one with the same ``transactional.id``; nothing of it is visible.
            BrokerUnavailable: the broker did not answer; the transaction was aborted, or, if
                not even the abort got through, the broker aborts it after
                ``transaction.timeout.ms``.
        """
        with self._lock:
            producer = self._ready(timeout)
            try:
                with map_kafka_errors("begin transaction"):
                    producer.begin_transaction()
            except kafkaseam.ProducerFenced as exc:
                self._fenced(exc)
            try:
                result = produce(producer)
                producer.commit_transaction(timeout)
            except kafkaseam.ProducerFenced as exc:
                self._fenced(exc)
            except KafkaException as exc:
                self._abort_after(producer, exc, timeout)
                raise AssertionError("unreachable") from exc  # _abort_after always raises
            except BaseException:
                self._abort(producer, timeout)
                raise
            return result

    def start(self, timeout: float = TRANSACTION_TIMEOUT) -> None:
        """Initialise the producer now (``init_transactions``), which fences every earlier
        incarnation with the same ``transactional.id``: their open Kafka transaction is aborted
        and their later commits fail.

        Raises:
            BrokerUnavailable: the broker did not answer within ``timeout`` seconds.
        """
        with self._lock:
            self._ready(timeout)

    def is_fenced_owner(self, claimant: str) -> bool:
        """Whether ``claimant`` is an earlier incarnation of this sender (same
        ``transactional.id``, another process): its locks are released when this one starts."""
        prefix = f"{OWNER_PREFIX}{self.transactional_id}@"
        return claimant.startswith(prefix) and claimant != self.owner

    def _ready(self, timeout: float) -> Any:
        if self._producer is None:
            producer = self._session.producer(
                Delivery.RECOVERABLE, transactional_id=self.transactional_id,
                # linger.ms 0: the records of a commit are all handed over before it, so
                # waiting for more only delays the commit.
                extra={"transaction.timeout.ms": int(KAFKA_TRANSACTION_TIMEOUT * 1000),
                       "linger.ms": 0})
            try:
                producer.init_transactions(timeout)
            except KafkaException as exc:
                raise BrokerUnavailable(
                    f"could not start Kafka transactions for transactional.id "
                    f"{self.transactional_id!r}: {exc.args[0]}",
                    hint="check that the broker is running and supports transactions") from exc
            self._producer = producer
        return self._producer

    def _abort_after(self, producer: Any, exc: KafkaException, timeout: float) -> None:
        error = _error_of(exc)
        if error is not None and error.fatal():
            # Fenced (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH) or another fatal error: the
            # producer is unusable and the broker aborts what it had open.
            self._fenced(exc, f"{error.name()}: {error.str()}")
        self._abort(producer, timeout)
        if error is not None and error.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                                                  KafkaError._ALL_BROKERS_DOWN):
            raise BrokerUnavailable(f"transaction aborted: the broker did not answer ({error.str()})",
                                    hint="check that the Kafka broker is running") from exc
        raise TransactionAborted(f"transaction aborted by the broker: {exc.args[0]}") from exc

    def _fenced(self, exc: Exception, why: str | None = None) -> NoReturn:
        """Drop the unusable producer (the next commit makes a new one) and say why."""
        self._producer = None
        raise TransactionAborted(
            f"transaction aborted: the Kafka producer with transactional.id "
            f"{self.transactional_id!r} failed ({why or exc}); a newer "
            "process with the same identity fences this one", hint="nothing it sent is "
            "visible; start a new transaction (a new producer is created)") from exc

    def _abort(self, producer: Any, timeout: float) -> None:
        try:
            producer.abort_transaction(timeout)
        except KafkaException as exc:
            # The broker aborts it after transaction.timeout.ms; a new producer fences it too.
            log.warning("abort of a Kafka transaction (transactional.id %r) failed: %s; the "
                        "broker aborts it when its timeout passes", self.transactional_id, exc)
            self._producer = None

    def close(self) -> None:
        """Release the producer (an open transaction is aborted by the broker)."""
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(5.0)


if TYPE_CHECKING:
    def _conforms(session: KafkaSession) -> kafkaseam.KafkaSession:
        """mypy checks here that the librdkafka session satisfies the seam."""
        return session
