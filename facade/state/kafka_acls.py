"""``kmq acl sync``: queue rights mirrored onto Kafka ACLs, so that a client that bypasses kmq
cannot read or write a queue's topics beyond what the queue's access list gives its principal.

kmq's access checks (:mod:`facade.queues.authorization`) bind clients that go through kmq. On a Kafka
cluster with an authorizer, the same rights become Kafka ACL bindings for the same principals
(``User:<name>``; :data:`~facade.security.acl.EVERYONE` becomes ``User:*``):

======================== ==================================================================
queue right              Kafka operations
======================== ==================================================================
WRITE_MESSAGE            Write, Describe on the data topic
PEEK_MESSAGE             Read, Describe on the data and receipts topics, the journal's
                         topics and the subqueues' topics (prefix ``<data>.sub.``)
DELETE_MESSAGE           Read, Describe on the data topic; Read, Write, Describe on the
                         receipts topic and the subqueues' topics; Write on the journal's
                         data topic (the journal copy of a removed message)
DELETE_JOURNAL_MESSAGE   Read, Describe on the journal's data topic; Read, Write, Describe on
                         the journal's receipts topic
DELETE                   Delete on the queue's four topics
======================== ==================================================================

The queue manager's own access list (:mod:`facade.queues.qmsecurity`) guards its system queues (the
dead-letter queues and the machine journal) the same way: PEEK_MESSAGE is Read and Describe
on their data and receipts topics, DELETE_MESSAGE also Write on the receipts topics
(:func:`queue_manager_acls`). Its owner also gets Write on the queue snapshots topic.

Kafka has no deny-wins evaluation over named and wildcard principals that would match MSMQ's
exactly, so the bindings are computed from the **effective** rights: ``User:*`` is allowed what
Everyone has; a named principal is allowed what it has beyond that and **denied** what Everyone
has and it does not (Kafka's DENY wins over the wildcard ALLOW). Every kmq client also needs a
few bindings that are not per queue (:func:`shared_acls`): Read on the registry topics, Write on
the queue manager's dead-letter and journal topics, Describe on their receipts topics, Read and
Write on its message-id lease topic, Read on its snapshots topic, Read on kmq's reader groups,
and Write on the transactional ids of its MSMQ transactions. An admin queue must allow its
senders WRITE_MESSAGE (MSMQ's default lets Everyone send), because the acknowledgment is
written by the process that caused it.

Not mirrored, because a Kafka binding cannot be narrower than a topic: writing the registries
(creating queues, changing properties or access lists, registering a queue manager, changing
its access list), creating topics, and the queue manager's MANAGE right (deleting and purging
other principals' queues). Those stay with administrators (a Kafka super user, or bindings an
administrator grants with ``kafka-acls``).

Which bindings are kmq's (:func:`managed`): the literal bindings on the queue manager's topics
(``kmq.<qm>.``) and the prefixed ones on its subqueue prefixes. ``kmq acl sync`` deletes those
that no access list asks for (a revoked right, a deleted queue's topics) and leaves every other
binding alone, such as an administrator's Create grant on the prefix ``kmq.<qm>.`` or Write
on ``__kmq.queues``.

The computation here is pure; :mod:`facade.state.kafka_acl_admin` talks to the broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from facade.security.acl import EVERYONE, AccessRight, SecurityDescriptor
from facade.model.formatnames import SystemQueue
from facade.model.topics import (
    QUEUE_MANAGER_REGISTRY_TOPIC,
    QUEUE_MANAGER_SECURITY_TOPIC,
    QUEUE_REGISTRY_TOPIC,
    TOPIC_PREFIX,
    QueueTopics,
    escape_name,
    id_block_topic,
    snapshot_topic,
    system_topics,
    transactional_id_prefix,
)

if TYPE_CHECKING:
    from facade.state.registry import QueueProperties

__all__ = ["KafkaAcl", "SyncPlan", "managed", "plan_sync", "queue_acls",
           "queue_manager_acls", "shared_acls"]

#: Kafka's wildcard principal: MSMQ's Everyone.
ANY_USER = "User:*"
#: Prefix of the consumer groups kmq's readers name (they assign partitions, never commit).
READER_GROUP_PREFIX = "kmq-reader-"
#: The subqueue topics of a queue: a prefixed binding on ``<data>`` + this.
SUBQUEUE_SUFFIX = ".sub."


@dataclass(frozen=True, order=True)
class KafkaAcl:
    """One Kafka ACL binding (the fields of ``confluent_kafka.admin.AclBinding``).

    Attributes:
        resource_type (str): ``"topic"``, ``"group"`` or ``"transactional_id"``.
        resource_name (str): the topic or group name (or prefix).
        pattern (str): ``"literal"`` or ``"prefixed"``.
        principal (str): ``User:<name>`` or ``User:*``.
        operation (str): ``"read"``, ``"write"``, ``"describe"`` or ``"delete"``.
        permission (str): ``"allow"`` or ``"deny"``.
        host (str): the client host; always ``"*"``.
    """

    resource_type: str
    resource_name: str
    pattern: str
    principal: str
    operation: str
    permission: str
    host: str = "*"

    def to_dict(self) -> dict[str, str]:
        """The binding's fields, for ``--json`` output."""
        return {"resource_type": self.resource_type, "resource_name": self.resource_name,
                "pattern": self.pattern, "principal": self.principal,
                "operation": self.operation, "permission": self.permission, "host": self.host}


# A (resource name, pattern, operation) a right needs; names are filled from the queue's topics.
_Need = tuple[str, str, str]


def _needs(rights: AccessRight, topics: QueueTopics) -> set[_Need]:
    """The topic operations ``rights`` need on a queue with ``topics``."""
    journal = topics.journal()
    subqueues = topics.data + SUBQUEUE_SUFFIX
    needs: set[_Need] = set()

    def add(name: str, operations: Iterable[str], pattern: str = "literal") -> None:
        needs.update((name, pattern, operation) for operation in operations)

    if rights & AccessRight.WRITE_MESSAGE:
        add(topics.data, ("write", "describe"))
    if rights & AccessRight.PEEK_MESSAGE:
        for name in (topics.data, topics.receipts, journal.data, journal.receipts):
            add(name, ("read", "describe"))
        add(subqueues, ("read", "describe"), "prefixed")
    if rights & AccessRight.DELETE_MESSAGE:
        add(topics.data, ("read", "describe"))
        add(topics.receipts, ("read", "write", "describe"))
        add(subqueues, ("read", "write", "describe"), "prefixed")
        add(journal.data, ("write",))
    if rights & AccessRight.DELETE_JOURNAL_MESSAGE:
        add(journal.data, ("read", "describe"))
        add(journal.receipts, ("read", "write", "describe"))
    if rights & AccessRight.DELETE:
        for name in (topics.data, topics.receipts, journal.data, journal.receipts):
            add(name, ("delete",))
    return needs


def _everyone_rights(descriptor: SecurityDescriptor) -> AccessRight:
    """What a caller no entry names gets: the Everyone allow entries minus the Everyone deny
    entries (the owner's implicit rights are not topic rights)."""
    allowed = denied = AccessRight(0)
    for entry in descriptor.entries:
        if entry.principal.casefold() == EVERYONE.casefold():
            if entry.allow:
                allowed |= entry.rights
            else:
                denied |= entry.rights
    return allowed & ~denied


def _bindings(principal: str, needs: Iterable[_Need], permission: str) -> set[KafkaAcl]:
    return {KafkaAcl("topic", name, pattern, principal, operation, permission)
            for name, pattern, operation in needs}


def _mirror(descriptor: SecurityDescriptor, needs_of: Callable[[AccessRight], set[_Need]],
            always: frozenset[_Need] = frozenset()) -> set[KafkaAcl]:
    """ALLOW and DENY bindings that give each principal of ``descriptor`` the topic operations
    its effective rights need (module docstring); ``always``: what every principal keeps
    whatever its rights (never denied)."""
    everyone = needs_of(_everyone_rights(descriptor))
    acls = _bindings(ANY_USER, everyone, "allow")
    named = {e.principal for e in descriptor.entries if e.principal.casefold()
             != EVERYONE.casefold()} | {descriptor.owner}
    for principal in sorted(named):
        if principal.casefold() == EVERYONE.casefold():
            continue
        needs = needs_of(descriptor.granted(principal)) | always
        acls |= _bindings(f"User:{principal}", needs - everyone - always, "allow")
        acls |= _bindings(f"User:{principal}", everyone - needs, "deny")
    return acls


def queue_acls(properties: QueueProperties) -> set[KafkaAcl]:
    """The Kafka ACL bindings that mirror one queue's access list (module docstring).

    Args:
        properties (QueueProperties): the queue's record (topics and descriptor).

    Returns:
        set[KafkaAcl]: ALLOW bindings for ``User:*`` and named principals, DENY bindings for
        named principals refused what Everyone has.
    """
    topics = QueueTopics(properties.data_topic, properties.receipts_topic)
    return _mirror(properties.security, lambda rights: _needs(rights, topics))


def _system_needs(rights: AccessRight, queue_manager: str) -> set[_Need]:
    """The topic operations ``rights`` on a queue manager need on its system queues."""
    needs: set[_Need] = set()
    for queue in SystemQueue:
        topics = system_topics(queue_manager, queue)
        if rights & AccessRight.PEEK_MESSAGE:
            needs |= {(name, "literal", op) for name in (topics.data, topics.receipts)
                      for op in ("read", "describe")}
        if rights & AccessRight.DELETE_MESSAGE:
            needs |= {(topics.data, "literal", op) for op in ("read", "describe")}
            needs |= {(topics.receipts, "literal", op) for op in ("read", "write", "describe")}
    return needs


def _shared_system_needs(queue_manager: str) -> set[_Need]:
    """What every client needs on the system queues: writing dead-letter and journal copies,
    and describing their receipts topics (opening a queue manager checks that they exist)."""
    needs: set[_Need] = set()
    for queue in SystemQueue:
        topics = system_topics(queue_manager, queue)
        needs |= {(topics.data, "literal", "write"), (topics.data, "literal", "describe"),
                  (topics.receipts, "literal", "describe")}
    return needs


def queue_manager_acls(queue_manager: str, descriptor: SecurityDescriptor) -> set[KafkaAcl]:
    """The Kafka ACL bindings that mirror a queue manager's own access list: its system queues
    (PEEK_MESSAGE, DELETE_MESSAGE; module docstring), and Write on its snapshots topic for its
    owner, the administrator whose processes (``kmq qm run``) write the queues' snapshots.

    Args:
        queue_manager (str): the queue manager's name.
        descriptor (SecurityDescriptor): its descriptor (``QueueManager.queue_manager_security``).

    Returns:
        set[KafkaAcl]: ALLOW and DENY bindings, as :func:`queue_acls` computes them.
    """
    acls = _mirror(descriptor, lambda rights: _system_needs(rights, queue_manager),
                   frozenset(_shared_system_needs(queue_manager)))
    snapshots = snapshot_topic(system_topics(queue_manager, SystemQueue.JOURNAL).data)
    if descriptor.owner.casefold() != EVERYONE.casefold():
        acls.add(KafkaAcl("topic", snapshots, "literal", f"User:{descriptor.owner}", "write",
                          "allow"))
    return acls


def shared_acls(queue_manager: str) -> set[KafkaAcl]:
    """What every kmq client of ``queue_manager`` needs whatever its queue rights.

    Args:
        queue_manager (str): the queue manager's name.

    Returns:
        set[KafkaAcl]: ALLOW bindings for ``User:*``: Read and Describe on the registries;
        Write on the system queues' data topics and Describe on their receipts topics; Read,
        Write and Describe on the message-id lease topic; Read and Describe on the snapshots
        topic; Read on the groups ``kmq-reader-*``; Write and Describe on the transactional
        ids ``kmq.<qm>.*``.
    """
    needs: set[_Need] = set()
    for registry in (QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC,
                     QUEUE_MANAGER_SECURITY_TOPIC):
        needs |= {(registry, "literal", "read"), (registry, "literal", "describe")}
    needs |= _shared_system_needs(queue_manager)
    # Every sender leases message-id blocks there (read the leases, append its own).
    leases = id_block_topic(queue_manager)
    needs |= {(leases, "literal", op) for op in ("read", "write", "describe")}
    # Every reader opens a queue from its newest snapshot; writing one is the owner's.
    snapshots = snapshot_topic(leases)
    needs |= {(snapshots, "literal", op) for op in ("read", "describe")}
    acls = _bindings(ANY_USER, needs, "allow")
    acls.add(KafkaAcl("group", READER_GROUP_PREFIX, "prefixed", ANY_USER, "read", "allow"))
    # MSMQ transactions (QueueManager.transactional_id: the prefix and a random part).
    transactions = transactional_id_prefix(queue_manager)
    acls |= {KafkaAcl("transactional_id", transactions, "prefixed", ANY_USER, op, "allow")
             for op in ("write", "describe")}
    return acls


def managed(acl: KafkaAcl, queue_manager: str) -> bool:
    """Whether ``kmq acl sync`` owns ``acl`` (module docstring): a literal binding on one of
    the queue manager's topics (``kmq.<qm>.``), or a prefixed one on a subqueue prefix.

    Args:
        acl (KafkaAcl): a binding the broker holds.
        queue_manager (str): the queue manager being synchronised.

    Returns:
        bool: True if sync may delete it when no access list asks for it.
    """
    if acl.resource_type != "topic" or not acl.resource_name.startswith(
            f"{TOPIC_PREFIX}{escape_name(queue_manager)}."):
        return False
    return acl.pattern == "literal" or (acl.pattern == "prefixed"
                                        and acl.resource_name.endswith(SUBQUEUE_SUFFIX))


@dataclass(frozen=True)
class SyncPlan:
    """What ``kmq acl sync`` changes.

    Attributes:
        create (tuple[KafkaAcl, ...]): bindings to add, sorted.
        delete (tuple[KafkaAcl, ...]): bindings on kmq's topics that no access list asks for
            any more, sorted.
        unchanged (int): desired bindings already there.
    """

    create: tuple[KafkaAcl, ...]
    delete: tuple[KafkaAcl, ...]
    unchanged: int

    def to_dict(self) -> dict[str, Any]:
        """For ``--json`` output."""
        return {"create": [a.to_dict() for a in self.create],
                "delete": [a.to_dict() for a in self.delete], "unchanged": self.unchanged}


def plan_sync(desired: set[KafkaAcl], existing: Iterable[KafkaAcl],
              owned: Callable[[KafkaAcl], bool]) -> SyncPlan:
    """Compare the desired bindings with the broker's.

    Args:
        desired (set[KafkaAcl]): every binding the access lists ask for.
        existing (Iterable[KafkaAcl]): the broker's bindings (any resources).
        owned (Callable[[KafkaAcl], bool]): whether a binding is kmq's (:func:`managed`): only
            those are deleted; others are left alone.

    Returns:
        SyncPlan: what to create and delete.
    """
    present = set(existing)
    stale = {acl for acl in present if owned(acl)} - desired
    return SyncPlan(tuple(sorted(desired - present)), tuple(sorted(stale)),
                    len(desired & present))
