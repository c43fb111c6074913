r"""The demo's workload: queues and directory objects, senders, receivers, a responder.

Topology (one run; ``<qm>`` is the run's queue manager, ``<run>`` its id):

============================== ===============================================================
Object                         Role
============================== ===============================================================
``<qm>\changes-<dist>``        public queue per frequent target distribution, plus
                               ``changes-other``; journal on, so received messages stay
                               readable in ``;JOURNAL``
``.\private$\bugs``            entries that close bugs also go here (multiple-element send)
``.\private$\security``        urgent entries (high, critical, emergency), signed and encrypted;
                               the responder reads it and verifies them
``.\private$\security-replies`` the responder's answers (correlation id = request id)
``.\private$\changes-held``    entries with a 1 s time-to-be-received that nobody reads: they
                               expire into the dead-letter queue (``expire_due``)
``.\private$\releases``        transactional queue, journal on: a slice of the direct entries, sent
                               in transactions of TRANSACTION_SIZE and received in transactions
                               of up to RECEIVE_TRANSACTION_SIZE
``.\private$\admin``           acknowledgments (ACK/NACK) of every copy that asked for them
``.\private$\latency-probe``   the paced run's messages (:func:`send_paced`), journal on
alias ``kmq-demo-<run>-security`` directory alias for the security queue (a private queue:
                               lists reach it only through an alias)
list ``kmq-demo-<run>-announce`` distribution list: every distribution queue + the alias
============================== ===============================================================

Routing of entry *i* (first match wins): every 100th entry is **held** (TTBR 1 s); urgent
entries go to the **security** queue, found through the directory alias, sent recoverable with a
response queue, signed by the run's principal and encrypted for the queue manager
(:func:`enable_message_security` gives both their keys); every 200th entry is **announced** to the distribution list (one copy per member,
ACK_REACH_QUEUE asked for every 1000th); entries closing bugs go to the **multiple-element** name
``PUBLIC=<its queue>,DIRECT=OS:<qm>\private$\bugs``; every TRANSACTIONAL_EVERY-th of the
rest is **transactional**: sent to ``releases`` in transactions of TRANSACTION_SIZE messages
(``send_many(batch, transaction="single")``); the rest go **direct** to their distribution
queue. Every 200th entry (and every held or security one) asks for FULL_RECEIVE
acknowledgments. Every entry has journal level DEADLETTER, so any copy that fails lands in the
dead-letter queue and stays accountable.

Receiving: a :class:`ReceiverPool` of a few threads drains the queues, a few at a time, with
competing receivers: each queue gets RECEIVERS_PER_QUEUE drains (:class:`QueueDrain`; the
security queue's are :class:`SecurityDesk`, which answer requests), each with its own handle
opened with ``prefetch`` (one PREFETCH receipt takes up to PREFETCH messages), so competing
receivers take disjoint batches instead of all claiming the same head message. The
transactional queue has one :class:`TransactionalDrain`, which receives what the queue holds
(up to RECEIVE_TRANSACTION_SIZE) per transaction with one ``receive_many``: one receiver, so
the order it sees is the queue's order.

Arbitration, the best mode for each queue: every queue is arbitrated by receipts (the
default), each for a reason of its own:

* the distribution queues and ``bugs`` (most of the copies) promise no order and need nothing
  a share queue refuses, so ``arbitration="share"`` could serve them; measured on the whole
  corpus it was not faster (docs/performance.md, "The demo"): a share consumer gets its first
  records only after its group's assignment, about 5 s after it joins (the broker's share
  heartbeat interval), and every queue's receivers join when a worker reaches it, which adds
  that wait to each small queue drained after the sender is done;
* ``releases`` is transactional (a share group has no transactional acknowledgement) and
  promises its send order;
* ``changes-held`` is counted and swept by ``expire_due``, ``admin`` and the dead-letter
  queue are read with cursors: a share queue refuses both;
* ``security`` and ``security-replies`` are a few percent of the copies, and
  ``latency-probe`` measures one message's end-to-end latency, which the share consumer's
  join would add to.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from facade.security.certificates import create_identity, identity_names, load_identity
from facade.demo.corpus import ChangelogEntry
from facade.demo.ledger import Ledger, SentMessage
from facade.directory.certificates import register_certificate
from facade.demo.mapping import (
    QueueLayout,
    entry_label,
    entry_properties,
    is_urgent,
    priority_for,
    queue_name,
)
from facade.errors import MessageQueueError, QueueNotFound, ReceiveTimeout, TransientQueueError
from facade.model.formatnames import SystemQueue, parse_queue_reference
from facade.kafka.librdkafka import produce_and_wait
from facade.model.message import (
    Acknowledgment,
    AuthLevel,
    Delivery,
    JournalLevel,
    Message,
    PrivacyLevel,
)

__all__ = [
    "EntrySender",
    "QueueDrain",
    "PREFETCH",
    "RECEIVERS_PER_QUEUE",
    "ReceiverPool",
    "SEND_BATCH",
    "SecurityDesk",
    "RECEIVE_TRANSACTION_SIZE",
    "TRANSACTION_SIZE",
    "Topology",
    "TransactionalDrain",
    "acknowledgment_for",
    "create_topology",
    "delete_directory_objects",
    "delete_topology",
    "enable_message_security",
    "entry_message",
    "plan_route",
    "read_all",
    "send_paced",
    "write_poison_record",
]

log = logging.getLogger("kmq.demo")

# How often each route and acknowledgment is taken. The admin queue gets one record per
# acknowledgment, so acknowledgments are asked for sparingly: the demo shows each kind without
# making the acknowledgment traffic the bulk of the run.
#: Every HELD_EVERY-th entry (at offset HELD_OFFSET) is held: short TTBR, nobody receives it.
HELD_EVERY, HELD_OFFSET = 100, 25
#: Time-to-be-received of held entries, seconds.
HELD_TTBR = 1.0
#: Every BROADCAST_EVERY-th entry is sent to the distribution list.
BROADCAST_EVERY = 200
#: List sends at multiples of LIST_ACK_EVERY ask for FULL_REACH_QUEUE (an ACK per list copy).
LIST_ACK_EVERY = 1000
#: Every ACK_EVERY-th entry (at offset ACK_OFFSET) asks for FULL_RECEIVE acknowledgments.
ACK_EVERY, ACK_OFFSET = 200, 3
#: Every TRANSACTIONAL_EVERY-th entry (at offset TRANSACTIONAL_OFFSET) that would go direct
#: goes to the transactional queue instead (the offset keeps it clear of ACK_OFFSET).
TRANSACTIONAL_EVERY, TRANSACTIONAL_OFFSET = 10, 7
#: Messages per transaction on the send side.
TRANSACTION_SIZE = 5
#: Most messages per transaction on the receive side: one ``receive_many`` takes what the
#: queue holds, up to this many, with one LOCK receipt (one lock per message, five per
#: transaction, made this queue the last one drained: about 200 messages/s).
RECEIVE_TRANSACTION_SIZE = 50
#: Messages the sender gathers per send handle before one ``send_many`` (held entries, whose
#: expiry is timed from their send, go one at a time). One batch is one outgoing-queue commit
#: (one fsync) for recoverable messages and one pass of stamping and encoding.
SEND_BATCH = 20
#: Competing receivers (drains, each with its own handle) per queue.
RECEIVERS_PER_QUEUE = 2
#: Messages one PREFETCH receipt takes for a receiver (``open_queue(name, prefetch=k)``): with
#: competing receivers each takes a disjoint batch, instead of every receiver claiming the same
#: head message one receipt at a time.
PREFETCH = 50
#: Seconds a receive waits before the receiver checks whether it is done.
_RECEIVE_SLICE = 0.25
#: Consecutive transient receive failures (broker overloaded or away) before a receiver fails.
_MAX_TRANSIENT_FAILURES = 10

ROUTE_DIRECT = "direct"
ROUTE_MULTI = "multiple-element"
ROUTE_LIST = "distribution-list"
ROUTE_SECURITY = "security"
ROUTE_HELD = "held"
ROUTE_TRANSACTIONAL = "transactional"
ROUTE_RESPONSE = "response"
ROUTE_PACED = "paced"


@dataclass(frozen=True)
class Topology:
    """The queues and directory objects of one run, by canonical format name.

    Attributes:
        run_id (str): short id naming the directory objects.
        distributions (dict[str, str]): distribution key -> its queue
            (``DIRECT=OS:<qm>\\changes-<key>``).
        public (dict[str, str]): distribution queue format name -> ``PUBLIC=<guid>``.
        paths (dict[str, str]): format name -> path name of every queue created (to delete).
        bugs (str): the bugs queue.
        security, replies, held, admin, probe, releases (str): the other private queues'
            format names (``probe``: the paced run's ``latency-probe``; ``releases``: the
            transactional queue).
        alias_name (str): the directory alias of the security queue.
        list_name (str), list_format_name (str): the distribution list and its ``DL=<guid>``.
        dead_letter (str): ``MACHINE=<guid>;DEADLETTER`` of the run's queue manager.
        layout (QueueLayout): which distributions have a queue.
    """

    run_id: str
    distributions: dict[str, str]
    public: dict[str, str]
    paths: dict[str, str]
    bugs: str
    security: str
    replies: str
    held: str
    admin: str
    probe: str
    releases: str
    alias_name: str
    list_name: str
    list_format_name: str
    dead_letter: str
    layout: QueueLayout

    def queue_for(self, entry: ChangelogEntry) -> str:
        """The distribution queue of ``entry``: its distribution's (rare ones: ``other``)."""
        return self.distributions[self.layout.distribution_of(entry)]

    @property
    def distribution_queues(self) -> list[str]:
        """Every distribution queue, biggest distribution first."""
        return list(self.distributions.values())

    @property
    def journaled(self) -> list[str]:
        """Format names of the queues whose received messages stay in their journal."""
        return [*self.distribution_queues, self.bugs, self.security, self.replies, self.probe,
                self.releases]


def create_topology(qm: Any, layout: QueueLayout, run_id: str) -> Topology:
    """Create the run's queues, alias and distribution list (see the module doc).

    Args:
        qm (QueueManager): the run's queue manager (needs a directory).
        layout (QueueLayout): the distributions (``other`` included) that get a queue.
        run_id (str): names the alias and the list, which are global in the directory.

    Raises:
        DirectoryUnavailable: no directory (workgroup mode): public queues, aliases and lists
            need one.
        MessageQueueError: the broker refused a queue.
    """
    paths: dict[str, str] = {}

    def create(path: str, label: str, journal: bool,
               transactional: bool = False) -> tuple[str, Any]:
        """Create a queue; returns its canonical format name (what copies carry as
        PROPID_M_DEST_QUEUE) and its properties."""
        with qm.create_queue(path, label=label, journal=journal,
                             transactional=transactional) as queue:
            format_name, properties = queue.destinations[0].format_name, queue.properties
        paths[format_name] = path
        return format_name, properties

    distributions: dict[str, str] = {}
    public: dict[str, str] = {}
    for key in layout.distributions:
        format_name, properties = create(rf".\{queue_name(key)}",
                                         f"Debian changelog entries for {key}"[:124], True)
        distributions[key] = format_name
        public[format_name] = f"PUBLIC={properties.instance}"
    bugs = create(r".\private$\bugs", "entries that close bugs", True)[0]
    releases = create(r".\private$\releases", "entries sent in transactions", True,
                      transactional=True)[0]
    private = {name: create(rf".\private$\{name}", label, journal)[0]
               for name, label, journal in (
        ("security", "urgent entries for the security desk", True),
        ("security-replies", "the security desk's answers", True),
        ("changes-held", "entries nobody receives in time", False),
        ("admin", "acknowledgments", False),
        ("latency-probe", "the paced run: end-to-end latency", True),
    )}
    directory = qm.directory
    alias = directory.create_alias(f"kmq-demo-{run_id}-security", private["security"],
                                   description="kmq demo: the security desk's queue")
    dl = directory.create_distribution_list(f"kmq-demo-{run_id}-announce",
                                            description="kmq demo: every distribution queue")
    for reference in public.values():
        directory.add_member(dl.name, reference)
    directory.add_member(dl.name, f"alias:{alias.name}")
    return Topology(
        run_id=run_id, distributions=distributions, public=public, paths=paths, bugs=bugs,
        security=private["security"], replies=private["security-replies"],
        held=private["changes-held"], admin=private["admin"], probe=private["latency-probe"],
        releases=releases, alias_name=alias.name, list_name=dl.name, list_format_name=dl.format_name,
        dead_letter=f"MACHINE={qm.guid};{SystemQueue.DEADLETTER.value}", layout=layout)


def enable_message_security(qm: Any) -> str:
    """Give the run's principal a signing identity and the queue manager its encryption key,
    as ``kmq cert create``, ``kmq cert register`` and ``kmq cert qm-key`` do (MSMQ: the sender's
    certificate registered in the directory; the destination queue manager's public key).

    An identity the principal already has under ``KMQ_HOME`` is kept and reused; a new one is
    left in place after the run (as ``kmq cert create`` would).

    Args:
        qm (QueueManager): the run's queue manager (needs a directory).

    Returns:
        str: the principal's certificate digest (``mSMQDigests``).

    Raises:
        DirectoryUnavailable: no directory.
        ConfigurationError: the identity or key files cannot be read or written.
        InvalidParameter: the principal is not a valid sender id.
    """
    home, principal = qm.config.home, qm.config.principal
    identity = (load_identity(home, principal) if principal in identity_names(home)
                else create_identity(home, principal))
    register_certificate(qm.directory, identity.sender_id, identity.certificate_der,
                         identity.digest)
    qm.protection.publish_key()
    return identity.digest


def delete_topology(qm: Any, topology: Topology) -> list[str]:
    """Delete the run's list, alias and queues, best effort.

    Returns:
        list[str]: what could not be deleted, with the reason (empty when all went).
    """
    failures = _run_steps(_directory_steps(qm.directory, topology))
    paths = list(topology.paths.values())
    if _run_steps([("queues", functools.partial(qm.delete_queues, paths))]):
        # One queue refused or a step failed: the others one by one, to say which is left.
        failures += _run_steps([(path, functools.partial(_delete_if_there, qm, path))
                                for path in paths])
    return failures


def _delete_if_there(qm: Any, path: str) -> None:
    try:
        qm.delete_queue(path)
    except QueueNotFound:
        pass  # deleted already: what teardown wants


def delete_directory_objects(config: Any, topology: Topology) -> list[str]:
    """Delete only the run's directory objects: list, alias and public-queue entries (for a
    directory that outlives a broker the demo started and stopped).

    Returns:
        list[str]: what could not be deleted, with the reason.
    """
    from facade.directory import Directory

    try:
        directory = Directory.open(config)
    except MessageQueueError as exc:
        return [f"directory: {exc.message}"]
    try:
        steps = _directory_steps(directory, topology)
        guids = [public.removeprefix("PUBLIC=") for public in topology.public.values()]
        steps += [(f"public queue {guid}", functools.partial(directory.delete_public_queue, guid))
                  for guid in guids]
        return _run_steps(steps)
    finally:
        directory.close()


def _directory_steps(directory: Any, topology: Topology) -> list[tuple[str, Callable[[], Any]]]:
    """The list first, so deleting the alias has no list membership left to clean up."""
    return [(f"list {topology.list_name}",
             lambda: directory.delete_distribution_list(topology.list_name)),
            (f"alias {topology.alias_name}", lambda: directory.delete_alias(topology.alias_name))]


def _run_steps(steps: list[tuple[str, Callable[[], Any]]]) -> list[str]:
    """Run each step; collect ``what: why`` for those that failed."""
    failures = []
    for what, step in steps:
        try:
            step()
        except MessageQueueError as exc:
            failures.append(f"{what}: {exc.message}")
    return failures


def plan_route(index: int, entry: ChangelogEntry) -> str:
    """How entry number ``index`` is addressed (see the module doc; first match wins)."""
    if index % HELD_EVERY == HELD_OFFSET:
        return ROUTE_HELD
    if is_urgent(entry):
        return ROUTE_SECURITY
    if index % BROADCAST_EVERY == 0:
        return ROUTE_LIST
    if entry.closed_bugs:
        return ROUTE_MULTI
    if index % TRANSACTIONAL_EVERY == TRANSACTIONAL_OFFSET:
        return ROUTE_TRANSACTIONAL
    return ROUTE_DIRECT


def acknowledgment_for(index: int, route: str) -> Acknowledgment:
    """The acknowledgments entry ``index`` asks for: FULL_RECEIVE for held and security
    entries and every ACK_EVERY-th one, FULL_REACH_QUEUE for every LIST_ACK_EVERY-th entry
    sent to the list, none otherwise."""
    if route in (ROUTE_HELD, ROUTE_SECURITY) or index % ACK_EVERY == ACK_OFFSET:
        return Acknowledgment.FULL_RECEIVE
    if route == ROUTE_LIST and index % LIST_ACK_EVERY == 0:
        return Acknowledgment.FULL_REACH_QUEUE
    return Acknowledgment.NONE


def entry_message(entry: ChangelogEntry, index: int, route: str, topology: Topology) -> Message:
    """The message for one changelog entry (mapping in :mod:`facade.demo.mapping`); a
    security request is signed (AuthLevel.ALWAYS) and its body encrypted (BODY_AES)."""
    acknowledge = acknowledgment_for(index, route)
    secure = route == ROUTE_SECURITY
    return Message(
        body=entry.text.encode("utf-8", "replace"),
        label=entry_label(entry),
        priority=priority_for(entry.urgency),
        app_specific=entry.closed_bugs[0] if entry.closed_bugs else 0,
        properties=entry_properties(entry),
        acknowledge=acknowledge,
        admin_queue=topology.admin if acknowledge else None,
        # Urgent entries must survive a sender crash: recoverable (durable outgoing queue).
        delivery=Delivery.RECOVERABLE if secure else Delivery.EXPRESS,
        response_queue=topology.replies if secure else None,
        auth_level=AuthLevel.ALWAYS if secure else AuthLevel.NONE,
        privacy_level=PrivacyLevel.BODY_AES if secure else PrivacyLevel.NONE,
        time_to_be_received=HELD_TTBR if route == ROUTE_HELD else None,
        journal=JournalLevel.DEADLETTER,
    )


class EntrySender:
    """Sends changelog entries along their routes and records each send in the ledger.

    Handles are opened once and reused (one thread: the caller's). Sends do not wait for the
    broker: copies are accounted by their outcome, not by the send's return. Entries are
    gathered per handle and sent SEND_BATCH at a time with ``send_many`` (one stamping pass,
    one outgoing-queue commit), except held entries, which go at once; transactional entries
    are held until TRANSACTION_SIZE of them are ready, then sent in one transaction. Each is
    recorded in the ledger once sent, in send order; :meth:`flush` sends what is left.

    Args:
        qm (QueueManager): the run's queue manager.
        topology (Topology): the run's queues.
        ledger (Ledger): where sends are recorded.
    """

    def __init__(self, qm: Any, topology: Topology, ledger: Ledger):
        self.qm = qm
        self.topology = topology
        self.ledger = ledger
        self._handles: dict[str, Any] = {}  # format name -> send handle, opened on first use
        self._list = qm.open_queue(topology.list_format_name)
        # Membership does not change during the run, so one expansion names every list copy.
        self._list_queues = tuple(d.format_name for d in qm.destinations(
            parse_queue_reference(topology.list_format_name)))
        # The security desk is found the MSMQ way: through its alias in the directory.
        security = qm.directory.alias(topology.alias_name).recipient_format_name
        self._security = qm.open_queue(security)
        self._held = qm.open_queue(topology.held)
        self._releases = qm.open_queue(topology.releases)
        self._batch: list[tuple[Message, str]] = []  # (message, maintainer), not sent yet
        #: format name -> (handle, [(message, route, maintainer)]) gathered for one send_many.
        self._gathered: dict[str, tuple[Any, list[tuple[Message, str, str]]]] = {}

    def send(self, index: int, entry: ChangelogEntry) -> str:
        """Send entry number ``index`` and record it (a transactional entry: once its
        transaction is full and committed).

        Returns:
            str: the route taken (``ROUTE_*``).

        Raises:
            MessageQueueError: the send was refused (resolution, quota, broker), or the
                transaction could not commit (TransactionAborted: none of it was sent).
        """
        route = plan_route(index, entry)
        message = entry_message(entry, index, route, self.topology)
        if route == ROUTE_TRANSACTIONAL:
            self._batch.append((message, entry.maintainer))
            if len(self._batch) >= TRANSACTION_SIZE:
                self.flush_transaction()
            return route
        handle = self._handle(route, entry)
        if route == ROUTE_HELD:  # its 1 s TTBR runs from its send: no waiting in a batch
            self._record(handle, handle.send(message), route, entry.maintainer)
            return route
        _, gathered = self._gathered.setdefault(handle.format_name, (handle, []))
        gathered.append((message, route, entry.maintainer))
        if len(gathered) >= SEND_BATCH:
            self._send_gathered(handle.format_name)
        return route

    def flush(self) -> None:
        """Send every gathered entry and the last, shorter transaction.

        Raises:
            MessageQueueError: as for :meth:`send`.
        """
        for format_name in list(self._gathered):
            self._send_gathered(format_name)
        self.flush_transaction()

    def _send_gathered(self, format_name: str) -> None:
        handle, gathered = self._gathered.pop(format_name)
        sent = handle.send_many([message for message, _, _ in gathered])
        for message, (_, route, maintainer) in zip(sent, gathered):
            queues = self._list_queues if route == ROUTE_LIST else None
            self._record(handle, message, route, maintainer, queues)

    def flush_transaction(self) -> None:
        """Send the transactional entries held so far in one transaction (MSMQ: exactly once,
        in order) and record them in that order; nothing when none are held.

        Raises:
            MessageQueueError: as for :meth:`send`.
        """
        batch, self._batch = self._batch, []
        if not batch:
            return
        sent = self._releases.send_many([m for m, _ in batch], transaction="single")
        for message, (_, maintainer) in zip(sent, batch):
            self._record(self._releases, message, ROUTE_TRANSACTIONAL, maintainer)

    def _record(self, handle: Any, sent: Message, route: str, sender: str,
                queues: tuple[str, ...] | None = None) -> None:
        """Record ``sent`` (the message as stamped by the send) in the ledger."""
        self.ledger.record_send(SentMessage(
            message_id=str(sent.id), kind="entry", route=route, label=sent.label,
            format_name=handle.format_name,
            queues=queues or tuple(d.format_name for d in handle.destinations),
            expect="expire" if route == ROUTE_HELD else "receive",
            acknowledge=int(sent.acknowledge), sender=sender,
            wants_response=sent.response_queue is not None,
            signed=sent.auth_level is not AuthLevel.NONE, transaction=sent.transaction_id))

    def _handle(self, route: str, entry: ChangelogEntry) -> Any:
        if route == ROUTE_HELD:
            return self._held
        if route == ROUTE_SECURITY:
            return self._security
        if route == ROUTE_LIST:
            return self._list
        queue = self.topology.queue_for(entry)
        if route == ROUTE_MULTI:
            # PUBLIC= for the distribution queue (through the directory), DIRECT= for bugs.
            return self._open(f"{self.topology.public[queue]},{self.topology.bugs}")
        return self._open(queue)

    def _open(self, format_name: str) -> Any:
        handle = self._handles.get(format_name)
        if handle is None:
            handle = self._handles[format_name] = self.qm.open_queue(format_name)
        return handle

    def close(self) -> None:
        """Close the send handles."""
        for handle in [*self._handles.values(), self._list, self._security, self._held,
                       self._releases]:
            handle.close()


def send_paced(handle: Any, ledger: Ledger, entries: list[ChangelogEntry], count: int,
               rate: float, abort: threading.Event) -> int:
    """The paced run: send ``count`` messages (changelog entries, cycled) to ``handle``'s queue
    at a fixed ``rate``, each at its own time slot, and record each in the ledger (kind
    ``probe``, route ``paced``). Receivers must already be waiting: the report's end-to-end
    latency is send to receive of these messages.

    Args:
        handle (MessageQueue): the opened ``latency-probe`` queue.
        ledger (Ledger): where sends are recorded.
        entries (list[ChangelogEntry]): the corpus (non-empty).
        count (int): messages to send.
        rate (float): messages per second.
        abort (threading.Event): stops sending when set.

    Returns:
        int: messages sent.

    Raises:
        MessageQueueError: a send was refused.
    """
    started = time.monotonic()
    for index in range(count):
        if abort.is_set():
            return index
        time.sleep(max(0.0, started + index / rate - time.monotonic()))
        entry = entries[index % len(entries)]
        message = Message(body=entry.text.encode("utf-8", "replace"), label=entry_label(entry),
                          properties=entry_properties(entry), journal=JournalLevel.DEADLETTER)
        sent = handle.send(message)
        ledger.record_send(SentMessage(
            message_id=str(sent.id), kind="probe", route=ROUTE_PACED, label=message.label,
            format_name=handle.format_name,
            queues=tuple(d.format_name for d in handle.destinations), expect="receive",
            acknowledge=0, sender=entry.maintainer))
    return count


def write_poison_record(qm: Any, format_name: str, ledger: Ledger) -> str:
    """Produce one raw record that is not a kmq envelope into a queue's data topic.

    Receivers must move it to the dead-letter queue (NACK_RECEIVE_REJECTED, ``kmq.reason``)
    and go on; the ledger expects it there.

    Returns:
        str: where it was written (``topic@partition:offset``).

    Raises:
        BrokerUnavailable, BrokerError: the broker did not take it.
    """
    topic = qm.resolve(parse_queue_reference(format_name)).topics.data
    value = b"\x00\xffkmq demo poison: not an Avro envelope \xde\xad\xbe\xef"
    offset = produce_and_wait(qm.producer(Delivery.RECOVERABLE), topic, value,
                              operation="write poison record")
    return ledger.record_poison(topic, 0, offset, format_name)


class QueueDrain:
    """One receiver on one queue: receives until its upstream is done and nothing is outstanding.

    Several drains of one queue compete for its messages, each with its own handle opened with
    ``prefetch`` (MSMQ's competing receivers; the queue arbitrates, so each copy goes to one).
    A drain stops when ``upstream_done()`` is true and either every copy the ledger expects in the
    queue has been received, or nothing arrived for ``idle_limit`` seconds (a lost copy must not
    hang the demo: the verdict reports it). A :class:`ReceiverPool` worker runs it.

    Args:
        qm (QueueManager): opens the drain's own handle (handles are one-thread objects).
        format_name (str): the queue.
        ledger (Ledger): receives are reported here.
        upstream_done (Callable[[], bool]): true once nothing more will be sent to the queue.
        idle_limit (float): seconds without a message, after upstream is done, before giving up.
        prefetch (int): the handle's ``prefetch`` (0: one RECEIVE receipt per message).

    Attributes:
        received (int): messages received.
        transient_errors (int): receives that failed with a transient broker error and were
            retried.
        ready (threading.Event): set once the drain's handle is open (it receives from then).
        done (threading.Event): set when the drain has finished (or failed).
    """

    def __init__(self, qm: Any, format_name: str, ledger: Ledger,
                 upstream_done: Callable[[], bool], idle_limit: float = 10.0,
                 prefetch: int = PREFETCH):
        self.qm = qm
        self.prefetch = prefetch
        self.format_name = format_name
        self.ledger = ledger
        self.upstream_done = upstream_done
        self.idle_limit = idle_limit
        self.received = 0
        self.transient_errors = 0
        self.ready = threading.Event()
        self.done = threading.Event()

    def run(self, abort: threading.Event) -> None:
        """Receive until finished or ``abort`` is set; the handle is closed on the way out.

        Raises:
            MessageQueueError: a receive failed for good (more than _MAX_TRANSIENT_FAILURES
                transient failures in a row, or a permanent error).
        """
        try:
            with self.qm.open_queue(self.format_name, prefetch=self.prefetch) as queue:
                queue.count()  # reads the queue up to its end now, not at the first receive
                self.ready.set()
                self._loop(queue, abort)
        finally:
            self.done.set()

    def _loop(self, queue: Any, abort: threading.Event) -> None:
        idle_since = time.monotonic()
        failures = 0
        while not abort.is_set():
            try:
                messages = self.take(queue)
            except TransientQueueError as exc:
                # An overloaded broker can let a receipt come back late; receive again rather
                # than stop. A message whose receipt won meanwhile is lost (at-most-once
                # receive), and the verdict will say so.
                failures += 1
                self.transient_errors += 1
                if failures > _MAX_TRANSIENT_FAILURES:
                    raise
                log.warning("receive from %s failed (%s); retrying", self.format_name, exc)
                time.sleep(0.5)
                continue
            failures = 0
            if not messages:
                if self._finished(idle_since):
                    return
                continue
            for message in messages:
                self.ledger.observe_received(message, self.format_name)
                self.received += 1
                self.handle(message)
            idle_since = time.monotonic()

    def take(self, queue: Any) -> list[Message]:
        """The next messages received from ``queue``: up to ``prefetch`` with one
        ``receive_many`` (what the prefetched batch holds, with one journal write for all of
        them), one without prefetch, or none within _RECEIVE_SLICE seconds.

        Raises:
            TransientQueueError: the broker is overloaded or away (retried by the loop).
            MessageQueueError: the receive failed for good.
        """
        try:
            if self.prefetch > 1:
                return queue.receive_many(self.prefetch, timeout=_RECEIVE_SLICE)
            return [queue.receive(timeout=_RECEIVE_SLICE)]
        except ReceiveTimeout:
            return []

    def _finished(self, idle_since: float) -> bool:
        if not self.upstream_done():
            return False
        return (self.ledger.outstanding(self.format_name) <= 0
                or time.monotonic() - idle_since > self.idle_limit)

    def handle(self, message: Message) -> None:
        """Act on a received message (nothing here; the security desk answers requests)."""


class TransactionalDrain(QueueDrain):
    """The one receiver of the transactional queue: receives up to RECEIVE_TRANSACTION_SIZE
    messages per transaction with one ``receive_many(n, transaction=tx)`` (one LOCK receipt for
    the batch) and commits, so each is removed exactly once; the ledger hears of them after the
    commit, in receive order (one receiver: the queue's order). Its handle does not prefetch
    (the transaction holds its own lock).
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **{**kwargs, "prefetch": 0})

    def take(self, queue: Any) -> list[Message]:
        """What the queue holds now, up to RECEIVE_TRANSACTION_SIZE messages, received in one
        committed transaction (none when nothing comes within _RECEIVE_SLICE seconds; an
        empty transaction commits nothing).

        Raises:
            TransientQueueError: the broker is overloaded or away: the transaction is aborted,
                its messages go back to the queue (abort count + 1) for the retry.
            TransactionAborted: the commit failed; the messages are back in the queue.
        """
        with self.qm.begin_transaction() as transaction:
            try:
                return list(queue.receive_many(RECEIVE_TRANSACTION_SIZE, timeout=_RECEIVE_SLICE,
                                               transaction=transaction))
            except ReceiveTimeout:
                return []


class SecurityDesk(QueueDrain):
    """The responder: receives urgent entries and answers each request that names a response
    queue, with ``correlation_id`` = the request's id (MSMQ request/response). Requests are
    signed; it counts those whose signature the receive verified (``message.authenticated``).

    Attributes:
        responses (int): responses sent.
        verified (int): requests received with ``authenticated`` True.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.responses = 0
        self.verified = 0
        self._reply_handles: dict[str, Any] = {}

    def handle(self, message: Message) -> None:
        if not message.response_queue:
            return  # a list announcement, not a request
        if message.authenticated:
            self.verified += 1
        handle = self._reply_handles.get(message.response_queue)
        if handle is None:
            handle = self._reply_handles[message.response_queue] = self.qm.open_queue(
                message.response_queue)
        reply = Message(
            body=f"triaged {message.label} (priority {message.priority})".encode(),
            label=f"re: {message.label}"[:250], correlation_id=message.id,
            priority=message.priority, journal=JournalLevel.DEADLETTER,
            properties={"kmq.demo.role": "security desk"})
        sent = handle.send(reply)
        self.ledger.record_send(SentMessage(
            message_id=str(sent.id), kind="response", route=ROUTE_RESPONSE, label=reply.label,
            format_name=handle.format_name,
            queues=tuple(d.format_name for d in handle.destinations), expect="receive",
            acknowledge=0, sender="security desk", correlation_id=str(message.id)))
        self.responses += 1

    def run(self, abort: threading.Event) -> None:
        try:
            super().run(abort)
        finally:
            for handle in self._reply_handles.values():
                handle.close()


class ReceiverPool:
    """A few worker threads that run drains in the order given, each until it ends; the
    drains of one queue are next to each other, so their workers compete on it together.

    Why a pool and not a thread per drain: each open queue view is a Kafka consumer fetching in
    the background, and each receiving thread holds the GIL while it works; a handful of busy
    views is what a 2-core machine sustains, more only add fetches and contention.

    Args:
        drains (list[QueueDrain]): in the order workers should take them (a drain whose
            upstream is another drain must come after it).
        workers (int): threads.
        abort (threading.Event): set to stop every worker after its current receive; a
            worker's failure sets it too.

    Attributes:
        errors (list[BaseException]): what failed.
    """

    def __init__(self, drains: list[QueueDrain], workers: int, abort: threading.Event):
        self.drains = drains
        self.abort = abort
        self.errors: list[BaseException] = []
        self._next = iter(drains)
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, name=f"kmq-demo-receiver-{i}",
                                          daemon=True) for i in range(max(1, workers))]

    def start(self) -> None:
        """Start the workers."""
        for thread in self._threads:
            thread.start()

    def alive(self) -> bool:
        """True while a worker is still draining."""
        return any(thread.is_alive() for thread in self._threads)

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds in all for the workers; True if they all ended."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not self.alive()

    def _work(self) -> None:
        while not self.abort.is_set():
            with self._lock:
                drain = next(self._next, None)
            if drain is None:
                return
            try:
                drain.run(self.abort)
            except BaseException as exc:  # noqa: BLE001 - reported to the runner, which fails
                self.errors.append(exc)
                self.abort.set()


def read_all(qm: Any, format_name: str, observe: Callable[[Message], None]) -> int:
    """Peek every message of a queue with a cursor (nothing is removed: the report reads the
    same messages later) and pass each to ``observe``.

    Returns:
        int: messages read.
    """
    count = 0
    with qm.open_queue(format_name) as queue, queue.cursor() as cursor:
        for message in cursor:  # ends at the last message, without raising
            observe(message)
            count += 1
    return count
