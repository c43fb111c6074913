"""The queue manager: MSMQ's per-machine service, on Kafka.

A :class:`QueueManager` owns the Kafka clients, the registries, the message-id allocator and the
system queues (dead-letter, transactional dead-letter, machine journal) of one queue-manager name.
Queues are created, deleted, listed and opened through it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from facade.security.acl import AccessRight, ObjectKind, SecurityDescriptor
from facade.arguments import require_bool
from facade.queues.authorization import QueueAccess
from facade.config import KmqConfig
from facade.queues.destination import Destination
from facade.model.envelope import EncodedRecord, encode_message
from facade.errors import (
    ConfigurationError,
    DirectoryObjectNotFound,
    DirectoryUnavailable,
    InvalidParameter,
    QueueExists,
    QueueNotFound,
    UnsupportedFormatNameOperation,
)
from facade.model.formatnames import (
    DirectFormatName,
    DirectProtocol,
    DistributionListFormatName,
    FormatName,
    MachineFormatName,
    PrivateFormatName,
    PublicFormatName,
    QueuePath,
    SystemQueue,
    parse_path_name,
    parse_queue_reference,
)
from facade.kafka.librdkafka import KafkaSession as BrokerSession
from facade.kafka.librdkafka import NO_LINGER, TransactionalProducer, produce_async, stop_reading
from facade.kafka.kafkaseam import KafkaRecord, KafkaSession, RecordProducer
from facade.security.locality import is_loopback_host
from facade.model.message import Delivery, Message, MessageClass
from facade.security.principal import PrincipalSource, resolve_principal, unproven_directory_bind
from facade.queues.qmsecurity import QueueManagerSecurity
from facade.state.registry import (
    DEFAULT_RECEIVE_RETRY_COUNT,
    REFRESH_INTERVAL,
    QueueManagerRecord,
    QueueProperties,
    Registry,
)
from facade.queues.resolution import Resolver, is_local_address
from facade.queues.transmission import Transmitter
from facade.state.sequence import MessageIdAllocator
from facade.queues.systemoutputs import SystemOutputs
from facade.timeouts import DEFAULT_PREFETCH_LEASE, lease_to_ms
from facade.model.topics import QueueTopics, queue_topics, system_topics, transactional_id_prefix
from facade.queues.transaction import TRANSACTION_LEASE, MessageQueueTransaction

if TYPE_CHECKING:
    from facade.directory import Directory, PublicQueueEntry
    from facade.queues.protection import MessageProtection
    from facade.queues.queue import MessageQueue
    from facade.state.queuecounts import QueueCounts

__all__ = ["DELETE_GRACE", "Destination", "QueueManager"]

#: Seconds ``delete_queue`` waits between unregistering a queue and deleting its topics: twice
#: what a registry view may lag (REFRESH_INTERVAL), so that a handle of another process sees
#: the queue gone before any receipt of it could land in a queue created again with the name
#: (facade.queues.destination.incarnation_guard).
DELETE_GRACE = 2 * REFRESH_INTERVAL

log = logging.getLogger("kmq.manager")


class QueueManager:
    """An MSMQ queue manager on a Kafka cluster.

    Build one with :meth:`open`. Thread-safe for administration; each opened
    :class:`~facade.queues.queue.MessageQueue` is meant for one thread at a time.

    Args:
        config (KmqConfig): resolved configuration.
        session (KafkaSession): Kafka clients.
        record (QueueManagerRecord): this queue manager's name and GUID.
        registry (Registry | None): the registries' reader, reused from :meth:`open`.
    """

    def __init__(self, config: KmqConfig, session: KafkaSession, record: QueueManagerRecord,
                 registry: Registry | None = None):
        #: The caller access checks are made for (see :mod:`facade.security.principal`).
        self.principal = resolve_principal(config)
        # The directory's own checks (Send To, lists) use the same name.
        self.config = dataclasses.replace(config, principal=self.principal.name)
        self.session = session
        self.name = record.name
        self.guid = uuid.UUID(record.guid)
        self.registry = registry or Registry(session)
        self.ids = MessageIdAllocator.on_kafka(session, self.name, self.guid)
        self._producers: dict[Delivery, RecordProducer] = {}
        self._lock = threading.Lock()
        self._open_queues: weakref.WeakSet[MessageQueue] = weakref.WeakSet()
        self._directory: Directory | None = None
        # Its own lock: opening an LDAP directory may take seconds, and must not hold up
        # producer creation.
        self._directory_lock = threading.Lock()
        self.resolver = Resolver(self)
        self.outputs = SystemOutputs(self)
        self.transmitter = Transmitter(self)
        #: Kafka ``transactional.id`` of this queue manager's transactions: the sender identity
        #: Kafka fences zombies by. Unique per process by default; set it (before the first
        #: :meth:`begin_transaction`) to a stable name so that a restarted sender fences the
        #: process it replaces. Two live processes must never share one.
        self.transactional_id = f"{transactional_id_prefix(self.name)}{uuid.uuid4().hex}"
        self._transactions: TransactionalProducer | None = None
        self._protection: MessageProtection | None = None
        self._protection_lock = threading.Lock()
        self.access = QueueAccess(self)
        self.qm_security = QueueManagerSecurity(self)

    @classmethod
    def open(cls, config: KmqConfig | None = None, *, lease_ids: bool = True,
             session: KafkaSession | None = None, **overrides: Any) -> QueueManager:
        """Connect to the configured broker (or the dev stack) and initialise the queue manager.

        Creates the registry topics and the system queues if they are missing, and registers
        the queue manager's GUID on first use (``kmq qm init``).

        Args:
            config (KmqConfig | None): configuration; default :meth:`KmqConfig.load`.
            lease_ids (bool): lease the first block of message ids now, so sends can draw ids
                while the broker is away later; False leaves it to the first send (an admin
                command that sends nothing saves a producer and a round trip, about 0.5 s).
            session (KafkaSession | None): the Kafka clients to use (the protocol of
                :mod:`facade.kafka.kafkaseam`), e.g. a :class:`facade.kafka.memorykafka.MemoryKafkaSession`
                for unit tests; None: librdkafka clients for the configured brokers. The
                manager closes it with itself.
            **overrides: passed to :meth:`KmqConfig.load` (``bootstrap_servers=``, ...).

        Raises:
            BrokerUnavailable: no broker configured or running, or it does not answer.
            ConfigurationError: invalid configuration; a declared principal (``KMQ_PRINCIPAL``)
                that contradicts the authenticated identity, or no authenticated identity
                against a cluster that is not local (see :mod:`facade.security.principal`); credentials
                the broker refuses.
            InvalidParameter: ``config``, ``lease_ids`` or ``session`` of the wrong type.
        """
        if config is not None and not isinstance(config, KmqConfig):
            raise InvalidParameter.wrong_type("config", "None or a KmqConfig", config,
                                              hint="KmqConfig.load(...), or keyword settings")
        require_bool(lease_ids, "lease_ids")
        if session is not None and not isinstance(session, KafkaSession):
            raise InvalidParameter.wrong_type(
                "session", "None or a KafkaSession (facade.kafka.kafkaseam)", session,
                hint="e.g. facade.kafka.memorykafka.MemoryKafkaSession() for tests")
        config = config or KmqConfig.load(**overrides)
        # Before any request: a declared principal that contradicts the authenticated one (or
        # none where one is required) is refused, not acted on.
        resolve_principal(config)
        if session is None:
            session = BrokerSession.from_config(config)
        session.ping()
        registry = Registry(session)
        try:
            registry.ensure_topics()
            record = registry.ensure_queue_manager(config.queue_manager)
            manager = cls(config, session, record, registry)
        except BaseException:
            # e.g. an unwritable KMQ_HOME: release the registry reader, not leak it per retry
            registry.close()
            session.close()
            raise
        try:
            # First: an unproven identity must not claim the queue manager's descriptor.
            manager._prove_principal()
            manager._ensure_system_queues()
            manager.qm_security.claim_if_unset()
            if lease_ids:
                manager.ids.prepare()  # the first message-id block, leased while the broker answers
            manager.transmitter.recover()
        except BaseException:
            manager.close()
            raise
        return manager

    def _prove_principal(self) -> None:
        """Bind to the directory now when its bind identity is the principal: only the LDAP
        server's acceptance proves it (:func:`facade.security.principal.unproven_directory_bind` says
        what a failed bind leaves).

        Raises:
            ConfigurationError: the bind failed and the Kafka cluster is not local.
        """
        if self.principal.source is not PrincipalSource.DIRECTORY_BIND:
            return
        try:
            self.directory  # noqa: B018 - opening the LDAP store binds
        except (DirectoryUnavailable, ConfigurationError) as exc:
            self.principal = unproven_directory_bind(self.config, self.principal, exc)
            log.warning("directory bind as %r did not succeed (%s): acting as that name, not "
                        "authenticated (development mode)", self.principal.name, exc.message)

    @property
    def protection(self) -> MessageProtection:
        """This queue manager's signing, encryption and arrival checks
        (:class:`~facade.queues.protection.MessageProtection`), made on first use: it loads the X.509
        code of ``cryptography``, which an admin command such as ``kmq queue list`` does not
        need (start-up time)."""
        with self._protection_lock:
            if self._protection is None:
                from facade.queues.protection import MessageProtection

                self._protection = MessageProtection(self)
            return self._protection

    # -- directory -----------------------------------------------------------------------------

    @property
    def directory(self) -> Directory:
        """The directory of public objects (:class:`~facade.directory.Directory`), opened on
        first use, so direct and private names work without one.

        Raises:
            DirectoryUnavailable: workgroup mode (``KMQ_DIRECTORY_URL=none``) or the directory
                cannot be reached; tried again on the next use.
            ConfigurationError: bad directory settings.
        """
        with self._directory_lock:
            if self._directory is None:
                from facade.directory import Directory

                self._directory = Directory.open(self.config)
            return self._directory

    def destinations(self, reference: FormatName | QueuePath, *,
                     for_send: bool = False) -> list[Destination]:
        """Every queue a path or format name resolves to (see :mod:`facade.queues.resolution`).

        Raises:
            DirectoryUnavailable, DirectoryObjectNotFound, QueueNotFound, AccessDenied: see
                :meth:`facade.queues.resolution.Resolver.destinations`.
        """
        return self.resolver.destinations(reference, for_send=for_send)

    # -- queues --------------------------------------------------------------------------------

    def create_queue(self, path: str, *, transactional: bool = False, label: str = "",
                     journal: bool = False, quota_kb: int | None = None,
                     journal_quota_kb: int | None = None, base_priority: int = 0,
                     type_id: str | None = None, authenticate: bool = False,
                     privacy_level: int = 1,
                     receive_retry_count: int | None = DEFAULT_RECEIVE_RETRY_COUNT,
                     arbitration: str = "receipts") -> MessageQueue:
        """Create a queue (MSMQ ``MQCreateQueue`` / ``MessageQueue.Create``).

        Args:
            path (str): path name, e.g. ``.\\private$\\orders`` (``.`` = this queue manager).
            transactional (bool): PROPID_Q_TRANSACTION.
            label (str): PROPID_Q_LABEL (<= 124 characters).
            journal (bool): keep a copy of every removed message in the queue journal.
            quota_kb (int | None): PROPID_Q_QUOTA in KB; None = unlimited.
            journal_quota_kb (int | None): PROPID_Q_JOURNAL_QUOTA in KB; None = unlimited.
            base_priority (int): PROPID_Q_BASEPRIORITY.
            type_id (str | None): PROPID_Q_TYPE GUID.
            authenticate (bool): PROPID_Q_AUTHENTICATE: accept only authenticated (signed and
                verified) messages; others are refused on arrival (NACK_BAD_SIGNATURE).
            privacy_level (int): PROPID_Q_PRIV_LEVEL: 0 NONE (clear text only), 1 OPTIONAL
                (MSMQ's default), 2 BODY (encrypted only); refused: NACK_BAD_ENCRYPTION.
            receive_retry_count (int | None): poison-message handling for peek-lock receives:
                a message released more than this many times goes to ``;poison`` (default 5,
                None = no limit; see :class:`~facade.state.registry.QueueProperties`).
            arbitration (str): who decides which receiver gets a message, fixed for the
                queue's life. ``"receipts"`` (default): the queue's receipts log, with every
                MSMQ operation, highest priority first, then arrival order. ``"share"``: a
                Kafka share group (KIP-932), so receivers scale out, but **messages are
                received in no order** (neither priority nor arrival), and peek, cursors,
                receive by id / correlation id / lookup id, purge, count, prefetch and
                transactions are refused on the queue (docs/design.md, "Share-group
                arbitration"). Needs a broker with share groups and KIP-1191 dead-letter
                topics (Apache Kafka 4.4); ``receive_retry_count`` 0-8.

        Returns:
            MessageQueue: the new queue, opened.

        Raises:
            QueuePathNameError: ``path`` is not a valid path name.
            QueueExists: a queue with that path exists.
            UnsupportedFormatNameOperation: the path names a journal, subqueue or system queue,
                or another queue manager.
            InvalidParameter: a property outside its range; ``arbitration`` unknown, or
                ``"share"`` with ``transactional=True`` or ``receive_retry_count`` None or
                above 8.
            BrokerUnavailable: ``arbitration="share"`` and the broker did not keep a share
                group or dead-letter topic setting as set (named); nothing is left created.
            BrokerError: ``arbitration="share"`` on a Kafka without share groups (the
                in-memory one).
            DirectoryUnavailable: a public queue (a path without ``private$``) and no directory
                (workgroup mode) or it is down; nothing is created.
            AccessDenied: the caller lacks CREATE_QUEUE on the queue manager.

        A public queue is published in the directory (an ``mSMQQueue`` entry whose GUID is the
        queue's PROPID_Q_INSTANCE, so ``PUBLIC=<guid>`` names it) with its properties as
        attributes; the queue manager is published first if needed.
        """
        queue_path, queue_name = self._local_path(path)
        self.qm_security.require(AccessRight.CREATE_QUEUE)
        topics = queue_topics(self.name, queue_name, private=queue_path.private)
        properties = QueueProperties(
            path_name=str(queue_path), queue_manager=self.name, queue_name=queue_name,
            private=queue_path.private, data_topic=topics.data, receipts_topic=topics.receipts,
            type_id=type_id, label=label, transactional=transactional, journal=journal,
            quota_kb=quota_kb, journal_quota_kb=journal_quota_kb, base_priority=base_priority,
            authenticate=authenticate, privacy_level=privacy_level,
            receive_retry_count=receive_retry_count, arbitration=arbitration,
            **_default_security(self.principal.name),
        ).validate()
        share = properties.arbitration == "share"
        if share:
            # Imported here: facade.queues.sharequeue brings in the receive path and its crypto,
            # which `kmq queue list` and every other command that creates no queue skip.
            from facade.queues.sharequeue import (
                check_share_properties,
                prepare_share_queue,
                share_receipts_topic,
            )

            check_share_properties(properties)
            properties = dataclasses.replace(
                properties, receipts_topic=share_receipts_topic(properties.data_topic))
        registered = self.registry.queues()
        if properties.path_name in registered:
            raise QueueExists(f"queue {properties.path_name!r} already exists", queue=properties.path_name)
        if properties.private:
            properties = _unique_queue_number(properties, registered.values())
        else:
            self._prepare_public(properties)
        # CreateTopics is atomic: of two processes creating the same queue, one gets QueueExists.
        try:
            self.session.create_topics([topics.data])
        except QueueExists:
            raise QueueExists(f"queue {properties.path_name!r} already exists",
                              queue=properties.path_name) from None
        journal_topics = topics.journal()
        all_topics = [topics.data, topics.receipts, journal_topics.data, journal_topics.receipts]
        if share:
            all_topics.remove(topics.receipts)  # a share queue's receipts topic never exists
        try:
            self.session.create_topics(all_topics[1:], exist_ok=True)
            if share:
                all_topics.append(prepare_share_queue(self.session, properties))
            if not properties.private:
                self.directory.create_public_queue(public_entry(properties))
        except BaseException:
            self.session.delete_topics(all_topics)  # nothing half-created stays behind
            raise
        self.registry.put_queue(properties)
        return self.open_queue(properties.path_name)

    def _prepare_public(self, properties: QueueProperties) -> None:
        """Check, before creating anything, that a public queue can be published."""
        directory = self.directory  # workgroup mode: public queues do not exist
        directory.publish_queue_manager(self.name, self.guid)
        if directory.find_public_queue(properties.path_name) is not None:
            raise QueueExists(f"public queue {properties.path_name!r} is already published in "
                              f"the {directory.description}", queue=properties.path_name,
                              hint="delete the stale entry or pick another name")

    def delete_queue(self, path_or_format_name: str) -> None:
        """Delete a queue, its journal and every message in them (``MQDeleteQueue``).

        Takes :data:`DELETE_GRACE` seconds or more: handles of the queue in other processes
        must see it unregistered before its topics go, and from then on their receives raise
        ``QueueNotFound`` (handles of this process are closed at once). To delete several
        queues, :meth:`delete_queues` waits once for all of them.

        Raises:
            QueueNotFound: no such queue.
            AccessDenied: the caller lacks DELETE (MQSEC_DELETE_QUEUE).
        """
        self._delete_queues([path_or_format_name])

    def delete_queues(self, paths_or_format_names: Iterable[str]) -> None:
        """Delete several queues as :meth:`delete_queue` does each, waiting
        :data:`DELETE_GRACE` once for all of them instead of once per queue.

        Every queue is looked up and its DELETE right checked before anything is deleted.
        Then each is unpublished and unregistered in turn, and after the grace their topics
        (and share groups) go.

        Args:
            paths_or_format_names (Iterable[str]): path names or format names, as for
                :meth:`delete_queue`; a name given twice is deleted once.

        Raises:
            InvalidParameter: not an iterable of names (one name: :meth:`delete_queue`).
            QueueNotFound: one of them does not exist (nothing is deleted).
            AccessDenied: the caller lacks DELETE on one of them (nothing is deleted).
            DirectoryUnavailable, BrokerUnavailable: a step failed; the queues unregistered
                before it are deleted, the others are left as they were.
        """
        self._delete_queues(_queue_names("paths_or_format_names", paths_or_format_names,
                                         "delete_queues", "an iterable of queue names (str)"))

    def _delete_queues(self, names: list[Any]) -> None:
        doomed: dict[str, QueueProperties] = {}
        for name in names:
            properties = self._properties(name)
            self.access.require_queue(properties, AccessRight.DELETE)
            doomed.setdefault(properties.path_name, properties)
        unregistered: list[QueueProperties] = []
        try:
            for properties in doomed.values():
                if not properties.private:
                    # The directory first: if it is down, nothing of this queue is deleted.
                    try:
                        self.directory.delete_public_queue(properties.instance)
                    except DirectoryObjectNotFound:
                        pass  # already unpublished (a previous delete stopped half-way)
                self.registry.remove_queue(properties.path_name)
                unregistered.append(properties)
        finally:
            if unregistered:
                self._delete_unregistered(unregistered, time.monotonic())

    def _delete_unregistered(self, queues: list[QueueProperties], unregistered: float) -> None:
        """Delete the topics (and share groups) of queues unregistered at ``unregistered``
        (``time.monotonic()``), once :data:`DELETE_GRACE` has passed since."""
        doomed: list[str] = []
        for properties in queues:
            topics = QueueTopics(properties.data_topic, properties.receipts_topic)
            journal = topics.journal()
            doomed += [topics.data, topics.receipts, journal.data, journal.receipts]
            if properties.arbitration == "share":
                from facade.queues.sharequeue import share_topics  # see create_queue

                doomed += share_topics(self.session, topics.data)
        # Handles on the queue stop reading it first: librdkafka can crash when a topic a
        # consumer is assigned to disappears under it (seen with librdkafka 2.16). Readers of
        # other queue managers of this process stop too, and raise QueueNotFound from then
        # on; other processes' readers rest while unused (see facade.kafka.librdkafka.TopicReader).
        for queue in list(self._open_queues):
            if any(d.topics.data in doomed for d in queue.destinations):
                queue.close()
        self.outputs.forget(doomed)
        stop_reading(doomed)
        time.sleep(max(0.0, unregistered + DELETE_GRACE - time.monotonic()))
        shared = [properties for properties in queues if properties.arbitration == "share"]
        if shared:
            from facade.queues.sharequeue import share_groups
        for properties in shared:
            # A share group outlives its topics on the broker (with its configs and state);
            # one that a receiver in another process still belongs to stays until it leaves.
            # The group goes before its topics: Kafka's share coordinator deletes the group's
            # state partition by partition, and retries (for longer than the admin timeout)
            # while a partition's topic is already gone from its metadata image.
            for group in self.session.delete_groups(share_groups(properties.data_topic)):
                log.warning("queue %s is deleted, but Kafka share group %r still has members "
                            "(receivers of the queue in other processes), so it stays on the "
                            "broker; delete it once they stop: kafka-share-groups.sh "
                            "--bootstrap-server %s --delete --group %s", properties.path_name,
                            group, self.session.bootstrap_servers, group)
        self.session.delete_topics(doomed)

    def queue_exists(self, path_or_format_name: str) -> bool:
        """True if the queue exists (``MessageQueue.Exists``).

        Raises:
            AccessDenied: the caller lacks TEST on the queue manager.
        """
        self.qm_security.require(AccessRight.TEST)
        try:
            self._properties(path_or_format_name)
        except QueueNotFound:
            return False
        return True

    def list_queues(self) -> list[QueueProperties]:
        """This queue manager's queues, sorted by path name (``GetPrivateQueuesByMachine``).

        Raises:
            AccessDenied: the caller lacks QUEUE_STATUS on the queue manager.
        """
        self.qm_security.require(AccessRight.QUEUE_STATUS)
        return sorted((p for p in self.registry.queues().values() if p.queue_manager == self.name),
                      key=lambda p: p.path_name)

    def queue_counts(self, path_names: Iterable[str] | None = None) -> dict[str, QueueCounts]:
        """Message counts of many queues at once (MSMQ's ``MQMgmtGetInfo``
        PROPID_MGMT_QUEUE_MESSAGE_COUNT for each, as the MSMQ snap-in lists them).

        Each count equals the queue's own :meth:`MessageQueue.counts
        <facade.queues.queue.MessageQueue.counts>` at the moment of the query, but is found without
        opening the queue: from one batched end-offset query for all queues, one read of the
        snapshot topic, and the records written since each queue's latest snapshot
        (:mod:`facade.state.queuecounts`); an idle queue whose snapshot is current, or an empty one,
        costs no read. A queue the batch cannot count that way is counted with its own handle.

        Args:
            path_names (Iterable[str] | None): queues by path or format name; None: every
                queue of this queue manager (:meth:`list_queues`).

        Returns:
            dict[str, QueueCounts]: by canonical path name; a queue deleted meanwhile, and a
            queue arbitrated by a share group (which has no count), are left out.

        Raises:
            QueueNotFound: a named queue does not exist.
            AccessDenied: the caller lacks QUEUE_STATUS on the queue manager (all queues) or
                GET_PROPERTIES on a queue.
            BrokerUnavailable: the cluster did not answer.
        """
        from facade.state.queuecounts import QueueCounts, count_queues

        if path_names is None:
            listed = self.list_queues()
        else:
            names = _queue_names("path_names", path_names, "queue_counts",
                                 "None or an iterable of queue names (str)")
            listed = [self.get_properties(name) for name in names]
        for properties in listed:
            self.access.require_queue(properties, AccessRight.GET_PROPERTIES)
        # A share queue has no count (MessageQueue.count refuses it): its group's start
        # offset bounds its length only from above.
        topics = {p.path_name: QueueTopics(p.data_topic, p.receipts_topic) for p in listed
                  if p.arbitration == "receipts"}
        found = count_queues(self.session, topics.values())
        counts: dict[str, QueueCounts] = {}
        for path, where in topics.items():
            if where.data in found.counts:
                counts[path] = found.counts[where.data]
            elif where.data in found.unresolved:
                try:
                    with self.open_queue(path) as handle:
                        counts[path] = QueueCounts(*handle.counts())
                except QueueNotFound:
                    continue  # deleted meanwhile
        return counts

    def open_queue(self, path_or_format_name: str, *, prefetch: int = 0,
                   prefetch_lease: float = DEFAULT_PREFETCH_LEASE,
                   spread_picks: bool = False) -> MessageQueue:
        """Open a queue, list or set of queues by path name or format name (``MQOpenQueue``).

        A ``DL=`` name or a multiple-element name can only be sent to; a distribution list is
        expanded again at every send, so membership changes apply to later messages.

        Args:
            path_or_format_name (str): e.g. ``.\\private$\\orders``, ``PUBLIC=<guid>``,
                ``DL=<guid>``, ``DIRECT=OS:qm\\private$\\a,PUBLIC=<guid>``.
            prefetch (int): 0 (default) or up to 1000: ``receive()`` then takes up to this many
                messages with one PREFETCH receipt and hands them out one by one from memory,
                at most once; ``close()`` gives back the ones not handed out, and if the
                process dies they are dead-lettered once ``prefetch_lease`` passes (see
                :mod:`facade.queues.prefetch`).
            prefetch_lease (float): seconds a prefetched batch is held (default 60).
            spread_picks (bool): True lets competing receivers spread their receives over the
                first pending messages instead of starting at the head: about 1.2x faster
                under contention, without per-receiver queue order (see
                :class:`~facade.queues.queue.MessageQueue`). Default False: MSMQ order.

        Raises:
            FormatNameError: malformed text.
            QueueNotFound: the queue does not exist (DirectoryObjectNotFound for a PUBLIC= or
                DL= GUID the directory does not know).
            DirectoryUnavailable: a PUBLIC= or DL= element and no reachable directory: the
                whole name fails (MSMQ's offline rule).
            UnsupportedFormatNameOperation: a kind of format name this version cannot open.
            InvalidParameter: ``prefetch``, ``prefetch_lease`` or ``spread_picks`` out of range.
        """
        from facade.queues.queue import MessageQueue

        reference = parse_queue_reference(path_or_format_name)
        destinations = self.destinations(reference)
        queue = MessageQueue(self, reference, destinations, prefetch=prefetch,
                             prefetch_lease=prefetch_lease, spread_picks=spread_picks)
        self._open_queues.add(queue)
        return queue

    def get_properties(self, path_or_format_name: str) -> QueueProperties:
        """A queue's properties (``MQGetQueueProperties``).

        Raises:
            QueueNotFound: no such queue.
            AccessDenied: the caller lacks GET_PROPERTIES.
        """
        properties = self._properties(path_or_format_name)
        self.access.require_queue(properties, AccessRight.GET_PROPERTIES)
        return properties

    def queue_manager_security(self) -> SecurityDescriptor:
        """This queue manager's own descriptor (seed 004's queue-manager rights: CONTROL,
        CREATE_QUEUE, MANAGE, QUEUE_STATUS, TEST; see :mod:`facade.queues.qmsecurity`).

        Raises:
            AccessDenied: the caller lacks GET_PERMISSIONS on the queue manager.
        """
        self.qm_security.require(AccessRight.GET_PERMISSIONS)
        return self.qm_security.descriptor()

    def set_queue_manager_security(self, descriptor: SecurityDescriptor) -> SecurityDescriptor:
        """Replace this queue manager's descriptor.

        Raises:
            InvalidParameter: ``descriptor`` is not a SecurityDescriptor.
            AccessDenied: the caller lacks CONTROL (TAKE_OWNERSHIP to change the owner).
        """
        return self.qm_security.replace(descriptor)

    def queue_security(self, path_or_format_name: str) -> SecurityDescriptor:
        """A queue's security descriptor: owner and access list (``MQGetQueueSecurity``).

        Args:
            path_or_format_name (str): the queue, by any single-queue name.

        Returns:
            SecurityDescriptor: see :mod:`facade.security.acl`.

        Raises:
            QueueNotFound: no such queue (system queues have no descriptor of their own).
            AccessDenied: the caller lacks GET_PERMISSIONS.
        """
        return self.access.queue_security(self._properties(path_or_format_name))

    def set_queue_security(self, path_or_format_name: str,
                           descriptor: SecurityDescriptor) -> SecurityDescriptor:
        """Replace a queue's owner and access list (``MQSetQueueSecurity``), stored with its
        properties (and on a public queue's directory entry).

        Args:
            path_or_format_name (str): the queue, by any single-queue name.
            descriptor (SecurityDescriptor): the new descriptor, e.g.
                ``qm.queue_security(p).grant("bob", AccessRight.RECEIVE_MESSAGE)``.

        Returns:
            SecurityDescriptor: the descriptor stored.

        Raises:
            QueueNotFound: no such queue.
            InvalidParameter: ``descriptor`` is not a SecurityDescriptor.
            AccessDenied: the caller lacks CHANGE_PERMISSIONS (TAKE_OWNERSHIP to change the
                owner).
            DirectoryUnavailable: a public queue and no reachable directory; nothing changed.
        """
        return self.access.set_queue_security(self._properties(path_or_format_name), descriptor)

    def set_properties(self, path_or_format_name: str, **changes: Any) -> QueueProperties:
        """Change a queue's properties (``MQSetQueueProperties``): label, journal, quotas...

        Raises:
            QueueNotFound: no such queue.
            InvalidParameter: an unknown property or a value outside its range.
            AccessDenied: the caller lacks SET_PROPERTIES.
        """
        fixed = {"path_name", "queue_manager", "queue_name", "private", "data_topic",
                 "receipts_topic", "instance", "create_time", "modify_time", "transactional",
                 "owner", "access_list",  # the descriptor changes with set_queue_security
                 "arbitration"}  # a queue never changes arbiter while receivers run on it
        bad = set(changes) & fixed | set(changes) - set(QueueProperties.__dataclass_fields__)
        if bad:
            raise InvalidParameter(f"queue properties {sorted(bad)} cannot be set",
                                   hint="settable: label, journal, quota_kb, journal_quota_kb, "
                                   "base_priority, type_id, authenticate, privacy_level, "
                                   "receive_retry_count")
        current = self._properties(path_or_format_name)
        self.access.require_queue(current, AccessRight.SET_PROPERTIES)
        if current.arbitration == "share" and "receive_retry_count" in changes:
            raise InvalidParameter(
                f"queue {current.path_name!r} is arbitrated by a Kafka share group, whose "
                "delivery limit was set from receive_retry_count at creation: it cannot be "
                "changed", queue=current.path_name,
                hint="recreate the queue with the receive_retry_count wanted")
        updated = current.with_changes(**changes)
        if not updated.private:
            published = {name: getattr(updated, name) for name in changes
                          if name in PUBLISHED_PROPERTIES}
            if published:
                self.directory.update_public_queue(updated.instance, **published)
        self.registry.put_queue(updated)
        return updated

    # -- resolution ----------------------------------------------------------------------------

    def resolve(self, reference: FormatName | QueuePath) -> Destination:
        """Resolve a path name or single-queue format name to its queue.

        Queues of every queue manager on the cluster are reachable (the registry is shared).

        Raises:
            QueueNotFound: the queue is not registered.
            DirectoryObjectNotFound: a ``PUBLIC=`` GUID not in the directory.
            DirectoryUnavailable: ``PUBLIC=`` without a reachable directory.
            UnsupportedFormatNameOperation: ``DL=``, ``MULTICAST=`` or a multiple-element name
                (several queues: use :meth:`destinations`), or an unreachable ``DIRECT=``.
        """
        if isinstance(reference, QueuePath):
            return self._resolve_path(reference)
        if isinstance(reference, DirectFormatName):
            return self._resolve_direct(reference)
        if isinstance(reference, PublicFormatName):
            return self.resolver.destinations(reference, for_send=False)[0]
        if isinstance(reference, PrivateFormatName):
            return self._resolve_private(reference)
        if isinstance(reference, MachineFormatName):
            return self._system(reference.system_queue, self._manager_name(reference.machine_id))
        kind = ("a distribution list" if isinstance(reference, DistributionListFormatName)
                else f"a {type(reference).__name__}")
        raise UnsupportedFormatNameOperation(
            f"{str(reference)!r} is {kind}, not one queue", queue=str(reference),
            hint="open it with open_queue() to send to it; MULTICAST= is not supported")

    def resolve_topic(self, topic: str, message: Message) -> Destination:
        """The destination a stored copy was produced for (its PROPID_M_DEST_QUEUE).

        Raises:
            QueueNotFound: the queue no longer exists, or ``topic`` is not its topic.
        """
        destination = self.resolve(parse_queue_reference(message.destination_queue or ""))
        if destination.topics.data != topic:
            raise QueueNotFound(f"queue {message.destination_queue!r} no longer uses topic {topic!r}",
                                queue=message.destination_queue)
        return destination

    def _resolve_path(self, path: QueuePath) -> Destination:
        machine = self.name if path.is_local else path.machine
        if path.system_queue is not None:
            return self._system(path.system_queue, machine)
        base = path.with_machine(machine)
        key = str(base.without_suffix()) if (path.journal or path.subqueue) else str(base)
        properties = self.registry.get_queue(key)
        if properties is None:
            raise QueueNotFound(f"queue {key!r} not found", queue=key,
                                hint="create it with `kmq queue create` or check the name")
        topics = QueueTopics(properties.data_topic, properties.receipts_topic)
        if path.journal:
            return Destination(str(base.to_format_name()), topics.journal(), properties, True)
        if path.subqueue:
            sub = topics.subqueue(path.subqueue)
            # Subqueues exist implicitly (MSMQ creates them on the first move): make the topics.
            self.session.create_topics([sub.data, sub.receipts], exist_ok=True)
            return Destination(str(base.to_format_name()), sub, properties, False, is_subqueue=True)
        return Destination(str(base.to_format_name()), topics, properties, False)

    def _resolve_private(self, fn: PrivateFormatName) -> Destination:
        machine = self._manager_name(fn.machine_id)
        for properties in self.registry.queues().values():
            if (properties.private and properties.queue_manager == machine
                    and properties.queue_number == fn.queue_number):
                path = QueuePath(machine, properties.queue_name, private=True,
                                 journal=fn.journal, subqueue=fn.subqueue)
                return self._resolve_path(path)
        raise QueueNotFound(f"queue manager {machine!r} has no private queue number "
                            f"{fn.queue_number:08x}", queue=str(fn))

    def _manager_name(self, guid: uuid.UUID) -> str:
        if guid == self.guid:
            return self.name
        for record in self.registry.queue_managers().values():
            if uuid.UUID(record.guid) == guid:
                return record.name
        raise QueueNotFound(f"no queue manager with GUID {guid} is registered on this cluster",
                            queue=str(guid))

    def _resolve_direct(self, fn: DirectFormatName) -> Destination:
        if fn.is_url or fn.protocol not in (DirectProtocol.OS, DirectProtocol.TCP):
            raise UnsupportedFormatNameOperation(
                f"{str(fn)!r}: only DIRECT=OS: and DIRECT=TCP: are supported", queue=str(fn))
        local = is_local_address(fn)
        if fn.protocol is DirectProtocol.TCP and not local:
            raise QueueNotFound(f"no queue manager is known at TCP address {fn.address}",
                                queue=str(fn), hint="use DIRECT=OS:<queue manager name>")
        machine = self.name if local else fn.address
        if fn.system_queue is not None:
            return self._system(fn.system_queue, machine)
        path = QueuePath(machine, fn.queue_name, private=fn.private, journal=fn.journal,
                         subqueue=fn.subqueue)
        return self._resolve_path(path)

    def _system(self, queue: SystemQueue, machine: str | None = None) -> Destination:
        machine = machine or self.name
        if machine == self.name:
            guid = self.guid
        else:
            record = self.registry.queue_managers().get(machine)
            if record is None:
                raise QueueNotFound(f"no queue manager {machine!r} is registered on this "
                                    "cluster", queue=f"{machine}\\{queue.path_keyword}")
            guid = uuid.UUID(record.guid)
        return Destination(f"MACHINE={guid};{queue.name}", system_topics(machine, queue), None, True,
                           system_of=machine)

    def _properties(self, path_or_format_name: str) -> QueueProperties:
        destination = self.resolve(parse_queue_reference(path_or_format_name))
        if destination.properties is None:
            raise QueueNotFound(f"{path_or_format_name!r} is a system queue, not a queue with "
                                "properties", queue=path_or_format_name)
        return destination.properties

    def _local_path(self, path: str) -> tuple[QueuePath, str]:
        """The path of a queue to create here, and its queue name."""
        queue_path = parse_path_name(path)
        if queue_path.queue_name is None or queue_path.system_queue is not None \
                or queue_path.journal or queue_path.subqueue:
            raise UnsupportedFormatNameOperation(
                f"{path!r} names a journal, subqueue or system queue: those exist with their queue",
                queue=path, hint="create the parent queue instead")
        if not queue_path.is_local and queue_path.machine != self.name:
            raise UnsupportedFormatNameOperation(
                f"{path!r} belongs to queue manager {queue_path.machine!r}, not {self.name!r}",
                queue=path, hint=f"use .\\... or {self.name}\\...")
        return queue_path.with_machine(self.name), queue_path.queue_name

    def _ensure_system_queues(self) -> None:
        names = []
        for queue in SystemQueue:
            topics = system_topics(self.name, queue)
            names += [topics.data, topics.receipts]
        self.session.create_topics(names, exist_ok=True)

    # -- system queues -------------------------------------------------------------------------

    def dead_letter(self, message: Message, *, transactional: bool = False, timeout: float = 30.0) -> None:
        """Write ``message`` to this queue manager's dead-letter queue (DEADLETTER or DEADXACT).

        Only the system writes to dead-letter queues; the caller has already set the class to
        the reason (NACK_RECEIVE_TIMEOUT, NACK_RECEIVE_REJECTED...).

        Raises:
            BrokerUnavailable: not acknowledged within ``timeout`` seconds.
            BrokerError: the broker rejected the record.
        """
        queue = SystemQueue.DEADXACT if transactional else SystemQueue.DEADLETTER
        self.write_system_copy(self.system_topic(queue), message, timeout)

    def write_system_copy(self, topic: str, message: Message, timeout: float = 30.0) -> None:
        """Write a message the system produces (dead-letter or journal copy) with ``acks=all``.

        The copy keeps the original id, so a redone copy is recognised as a duplicate.

        Raises:
            BrokerUnavailable: not acknowledged within ``timeout`` seconds.
            BrokerError: the broker rejected the record.
        """
        self.write_system_copies(((topic, message),), timeout)

    def write_system_copies(self, copies: Sequence[tuple[str, Message]],
                            timeout: float = 30.0) -> None:
        """Write system copies (the journal copies or acknowledgments of one batch of
        receives), each ``(topic, message)``, with ``acks=all``, in order, all handed to the
        producer before one wait for the broker: one round trip for the batch instead of one
        per copy.

        Raises:
            BrokerUnavailable: a copy was not acknowledged within ``timeout`` seconds.
            BrokerError: the broker rejected a copy. Copies before and after it may be
                written: a copy written again keeps its id, so queue views drop the duplicate.
        """
        self.write_system_records([(topic, self.encode_system_copy(m)) for topic, m in copies],
                                  timeout)

    def encode_system_copy(self, message: Message) -> EncodedRecord:
        """``message`` as the record a system copy is written as: a private message encrypted
        again for this queue manager (:meth:`MessageProtection.for_storage`), then encoded.

        Raises:
            InvalidParameter: the message is not valid (see :meth:`Message.validate`).
        """
        return encode_message(self.protection.for_storage(message))

    def write_system_records(self, records: Sequence[tuple[str, EncodedRecord | KafkaRecord]],
                             timeout: float = 30.0) -> None:
        """Write system copies already in record form, each ``(topic, record)``: encoded
        copies, or a stored record written again unchanged (a journal copy, see
        :func:`facade.queues.sending.stored_record_is_kept_copy`), as :meth:`write_system_copies`
        does: ``acks=all``, in order, one wait.

        Raises:
            BrokerUnavailable: a record was not acknowledged within ``timeout`` seconds.
            BrokerError: the broker rejected a record (others may be written).
        """
        producer = self.producer(Delivery.RECOVERABLE)
        pending = [produce_async(producer, topic, r.value, key=r.key, headers=r.headers,
                                 operation="write system queue") for topic, r in records]
        for record in pending:
            record.wait(timeout)

    def system_topic(self, queue: SystemQueue) -> str:
        """The data topic of one of this queue manager's system queues."""
        return system_topics(self.name, queue).data

    @property
    def dead_letter_topic(self) -> str:
        """The Kafka topic of this queue manager's nontransactional dead-letter queue."""
        return self.system_topic(SystemQueue.DEADLETTER)

    def poison_message(self, raw: bytes | None, reason: str, source: Destination | str,
                       where: str) -> Message:
        """Wrap a record that is not a valid envelope as a dead-letter message.

        The raw value becomes the body, unchanged; the class is NACK_RECEIVE_REJECTED and the
        ``kmq.reason`` / ``kmq.source`` properties say what was wrong and where it was.
        ``source`` is the queue it was in, or the text naming where it was going (a damaged
        outgoing record knows only its topic).
        """
        name = source if isinstance(source, str) else source.format_name
        return Message(
            id=self.ids.new(), body=raw or b"", label=f"poison record from {name}"[:250],
            message_class=MessageClass.NACK_RECEIVE_REJECTED, sent_time=_utcnow(),
            source_machine_id=self.guid, destination_queue=name,
            properties={"kmq.reason": reason[:1000], "kmq.source": where},
        )

    # -- producers -----------------------------------------------------------------------------

    def producer(self, delivery: Delivery) -> RecordProducer:
        """The shared producer for a delivery mode (created on first use): it writes system
        copies (journal, dead-letter, acknowledgments), whose writers wait for each batch."""
        with self._lock:
            if delivery not in self._producers:
                self._producers[delivery] = self.session.producer(delivery, extra=NO_LINGER)
            return self._producers[delivery]

    def begin_transaction(self, *, lease: float = TRANSACTION_LEASE) -> MessageQueueTransaction:
        """Begin an MSMQ internal transaction (``MQBeginTransaction``).

        Pass it to ``send(..., transaction=tx)`` and ``receive(..., transaction=tx)``, then
        ``tx.commit()`` or ``tx.abort()``, or use it as a context manager (commit at the end of
        the block, abort if it raises). See :mod:`facade.queues.transaction` for the guarantees.

        Args:
            lease (float): seconds a message received in the transaction stays locked if the
                transaction never ends (its process died); default 300.

        Returns:
            MessageQueueTransaction: a new transaction in status INITIALIZED.

        Raises:
            InvalidParameter: ``lease`` is not seconds in (0, 604800].
        """
        lease_to_ms(lease, "lease")
        with self._lock:
            if self._transactions is None:
                self._transactions = TransactionalProducer(self.session, self.transactional_id)
            producer = self._transactions
        return MessageQueueTransaction(self, producer, lease)

    def close(self) -> None:
        """Close every queue opened through this manager, then flush and release the producers."""
        for queue in list(self._open_queues):
            queue.close()
        if self._transactions is not None:
            self._transactions.close()
        self.outputs.close()
        self.transmitter.close()
        for producer in self._producers.values():
            producer.flush(10.0)
        self._producers.clear()
        self.ids.close()
        self.qm_security.close()
        self.registry.close()
        with self._directory_lock:
            directory, self._directory = self._directory, None
        if directory is not None:
            directory.close()
        self.session.close()

    def __enter__(self) -> QueueManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)



#: Queue properties that are also directory attributes of a public queue.
PUBLISHED_PROPERTIES = ("label", "type_id", "transactional", "journal", "quota_kb",
                        "journal_quota_kb", "base_priority", "authenticate", "privacy_level")


def public_entry(properties: QueueProperties) -> PublicQueueEntry:
    """The directory entry publishing a public queue (same GUID as PROPID_Q_INSTANCE)."""
    from facade.directory import PublicQueueEntry

    values = {name: getattr(properties, name) for name in PUBLISHED_PROPERTIES}
    values["type_id"] = uuid.UUID(properties.type_id) if properties.type_id else None
    return PublicQueueEntry(guid=uuid.UUID(properties.instance),
                            queue_manager=properties.queue_manager,
                            queue_name=properties.queue_name, **values)


def _default_security(owner: str) -> dict[str, Any]:
    """The owner and access list of a new queue: MSMQ's default descriptor (the creator has
    full control; everyone may send, get properties and get permissions)."""
    default = SecurityDescriptor.default_for(ObjectKind.QUEUE, owner)
    return {"owner": default.owner, "access_list": tuple(default.to_values())}


def _unique_queue_number(properties: QueueProperties,
                         existing: Iterable[QueueProperties]) -> QueueProperties:
    """A private queue whose ``PRIVATE=`` number no other private queue of its manager has."""
    taken = {p.queue_number for p in existing
             if p.private and p.queue_manager == properties.queue_manager}
    while properties.queue_number in taken:
        properties = dataclasses.replace(properties, instance=str(uuid.uuid4()))
    return properties


def _queue_names(parameter: str, names: Any, method: str, expected: str) -> list[str]:
    """``names`` as a list of queue names.

    Raises:
        InvalidParameter: a single string, or not an iterable of str.
    """
    if isinstance(names, (str, bytes, bytearray, memoryview)) or not isinstance(names, Iterable):
        raise InvalidParameter.wrong_type(parameter, expected, names,
                                          hint=f"one queue: {method}([name])")
    listed = list(names)
    for name in listed:
        if not isinstance(name, str):
            raise InvalidParameter.wrong_type(parameter, expected, name)
    return listed
