"""``kmq acl sync``: queue rights mirrored onto Kafka ACLs, so that a client that bypasses kmq
cannot read or write a queue's topics beyond what the queue's access list gives its principal.

kmq's access checks (:mod:`facade.authorization`) bind clients that go through kmq. On a Kafka
cluster with an authorizer, the same rights become Kafka ACL bindings for the same principals
(``User:<name>``; :data:`~facade.acl.EVERYONE` becomes ``User:*``):

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

Kafka has no deny-wins evaluation over named and wildcard principals that would match MSMQ's
exactly, so the bindings are computed from the **effective** rights: ``User:*`` is allowed what
Everyone has; a named principal is allowed what it has beyond that and **denied** what Everyone
has and it does not (Kafka's DENY wins over the wildcard ALLOW). Every kmq client also needs a
few bindings that are not per queue (:func:`shared_acls`): Read on the registry topics, Write on
the queue manager's dead-letter and journal topics, Read and Write on its message-id lease
topic, Read on kmq's reader groups. An admin
queue must allow its senders WRITE_MESSAGE (MSMQ's default lets Everyone send), because the
acknowledgment is written by the process that caused it. Writing the registry (creating
queues, changing properties or access lists) stays with administrators: grant it with
``kafka-acls``.

The computation here is pure; :mod:`facade.kafka_acl_admin` talks to the broker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from facade.acl import EVERYONE, AccessRight, SecurityDescriptor
from facade.formatnames import SystemQueue
from facade.topics import (
    QUEUE_MANAGER_REGISTRY_TOPIC,
    QUEUE_MANAGER_SECURITY_TOPIC,
    QUEUE_REGISTRY_TOPIC,
    QueueTopics,
    id_block_topic,
    system_topics,
)

if TYPE_CHECKING:
    from facade.registry import QueueProperties

__all__ = ["KafkaAcl", "SyncPlan", "plan_sync", "queue_acls", "shared_acls"]

#: Kafka's wildcard principal: MSMQ's Everyone.
ANY_USER = "User:*"
#: Prefix of the consumer groups kmq's readers name (they assign partitions, never commit).
READER_GROUP_PREFIX = "kmq-reader-"


@dataclass(frozen=True, order=True)
class KafkaAcl:
    """One Kafka ACL binding (the fields of ``confluent_kafka.admin.AclBinding``).

    Attributes:
        resource_type (str): ``"topic"`` or ``"group"``.
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
    subqueues = topics.data + ".sub."
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


def queue_acls(properties: QueueProperties) -> set[KafkaAcl]:
    """The Kafka ACL bindings that mirror one queue's access list (module docstring).

    Args:
        properties (QueueProperties): the queue's record (topics and descriptor).

    Returns:
        set[KafkaAcl]: ALLOW bindings for ``User:*`` and named principals, DENY bindings for
        named principals refused what Everyone has.
    """
    descriptor = properties.security
    topics = QueueTopics(properties.data_topic, properties.receipts_topic)
    everyone = _needs(_everyone_rights(descriptor), topics)
    acls = _bindings(ANY_USER, everyone, "allow")
    named = {e.principal for e in descriptor.entries if e.principal.casefold()
             != EVERYONE.casefold()} | {descriptor.owner}
    for principal in sorted(named):
        if principal.casefold() == EVERYONE.casefold():
            continue
        needs = _needs(descriptor.granted(principal), topics)
        acls |= _bindings(f"User:{principal}", needs - everyone, "allow")
        acls |= _bindings(f"User:{principal}", everyone - needs, "deny")
    return acls


def shared_acls(queue_manager: str) -> set[KafkaAcl]:
    """What every kmq client of ``queue_manager`` needs whatever its queue rights.

    Args:
        queue_manager (str): the queue manager's name.

    Returns:
        set[KafkaAcl]: ALLOW bindings for ``User:*``.
    """
    needs: set[_Need] = set()
    for registry in (QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC,
                     QUEUE_MANAGER_SECURITY_TOPIC):
        needs |= {(registry, "literal", "read"), (registry, "literal", "describe")}
    for queue in SystemQueue:
        topics = system_topics(queue_manager, queue)
        needs |= {(topics.data, "literal", "write"), (topics.data, "literal", "describe")}
    # Every sender leases message-id blocks there (read the leases, append its own).
    leases = id_block_topic(queue_manager)
    needs |= {(leases, "literal", op) for op in ("read", "write", "describe")}
    acls = _bindings(ANY_USER, needs, "allow")
    acls.add(KafkaAcl("group", READER_GROUP_PREFIX, "prefixed", ANY_USER, "read", "allow"))
    return acls


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
              managed: Iterable[str]) -> SyncPlan:
    """Compare the desired bindings with the broker's.

    Args:
        desired (set[KafkaAcl]): every binding the access lists ask for.
        existing (Iterable[KafkaAcl]): the broker's bindings (any resources).
        managed (Iterable[str]): resource names kmq owns (its queues' topics and prefixes):
            only bindings on these are deleted; others are left alone.

    Returns:
        SyncPlan: what to create and delete.
    """
    owned = set(managed)
    present = set(existing)
    stale = {acl for acl in present if acl.resource_name in owned} - desired
    return SyncPlan(tuple(sorted(desired - present)), tuple(sorted(stale)),
                    len(desired & present))
