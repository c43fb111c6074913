"""The Kafka ACL bindings computed from queue access lists (kmq acl sync)."""

from __future__ import annotations

import dataclasses

from facade.security.acl import EVERYONE, AccessRight, ObjectKind, SecurityDescriptor
from facade.model.formatnames import SystemQueue
from facade.state.kafka_acls import (
    KafkaAcl,
    managed,
    plan_sync,
    queue_acls,
    queue_manager_acls,
    shared_acls,
)
from facade.state.registry import QueueProperties
from facade.model.topics import id_block_topic, queue_topics, system_topics

R = AccessRight
TOPICS = queue_topics("qm1", "orders", private=True)
DATA, RECEIPTS = TOPICS.data, TOPICS.receipts
JOURNAL = TOPICS.journal()
SUBQUEUES = DATA + ".sub."


def _queue(descriptor: SecurityDescriptor) -> QueueProperties:
    return QueueProperties(
        path_name="qm1\\private$\\orders", queue_manager="qm1", queue_name="orders",
        private=True, data_topic=DATA, receipts_topic=RECEIPTS, owner=descriptor.owner,
        access_list=tuple(descriptor.to_values()))


def _ops(acls: set[KafkaAcl], principal: str, permission: str = "allow") -> set[tuple[str, str]]:
    return {(a.resource_name, a.operation) for a in acls
            if a.principal == principal and a.permission == permission}


def test_default_queue() -> None:
    acls = queue_acls(_queue(SecurityDescriptor.default_for(ObjectKind.QUEUE, "alice")))
    # Everyone may send: Write and Describe on the data topic, nothing else.
    assert _ops(acls, "User:*") == {(DATA, "write"), (DATA, "describe")}
    alice = _ops(acls, "User:alice")
    assert {(DATA, "read"), (RECEIPTS, "write"), (JOURNAL.data, "read"),
            (JOURNAL.receipts, "write"), (DATA, "delete")} <= alice
    assert (DATA, "write") not in alice  # already allowed to everyone
    assert not _ops(acls, "User:alice", "deny")
    assert all(a.host == "*" and a.resource_type == "topic" for a in acls)
    assert {a.pattern for a in acls if a.resource_name == SUBQUEUES} == {"prefixed"}


def test_each_right_maps_to_its_operations() -> None:
    base = SecurityDescriptor("alice", ())
    cases = {
        R.WRITE_MESSAGE: {(DATA, "write"), (DATA, "describe")},
        R.PEEK_MESSAGE: {(n, op) for n in (DATA, RECEIPTS, JOURNAL.data, JOURNAL.receipts,
                                           SUBQUEUES) for op in ("read", "describe")},
        R.DELETE_MESSAGE: {(DATA, "read"), (DATA, "describe"), (RECEIPTS, "read"),
                           (RECEIPTS, "write"), (RECEIPTS, "describe"), (SUBQUEUES, "read"),
                           (SUBQUEUES, "write"), (SUBQUEUES, "describe"), (JOURNAL.data, "write")},
        R.DELETE_JOURNAL_MESSAGE: {(JOURNAL.data, "read"), (JOURNAL.data, "describe"),
                                   (JOURNAL.receipts, "read"), (JOURNAL.receipts, "write"),
                                   (JOURNAL.receipts, "describe")},
        R.DELETE: {(n, "delete") for n in (DATA, RECEIPTS, JOURNAL.data, JOURNAL.receipts)},
        R.GET_PROPERTIES | R.SET_PROPERTIES: set(),  # registry rights: not per topic
    }
    for rights, expected in cases.items():
        assert _ops(queue_acls(_queue(base.grant("bob", rights))), "User:bob") == expected, rights


def test_deny_entries_become_deny_bindings_against_the_wildcard() -> None:
    sd = (SecurityDescriptor("alice", ()).grant(EVERYONE, R.WRITE_MESSAGE | R.PEEK_MESSAGE)
          .deny("mallory", R.WRITE_MESSAGE).grant("bob", R.DELETE_MESSAGE)
          .deny("bob", R.PEEK_MESSAGE))
    acls = queue_acls(_queue(sd))
    assert _ops(acls, "User:mallory", "deny") == {(DATA, "write")}  # describe stays (peek)
    assert not _ops(acls, "User:mallory")
    # bob: receive granted, peek denied. Receive needs reading the data and receipts topics,
    # which kmq's receive does, so bob is allowed those and denied only the journal/subqueue reads.
    bob_deny = _ops(acls, "User:bob", "deny")
    assert (JOURNAL.data, "read") in bob_deny and (DATA, "read") not in bob_deny
    assert (RECEIPTS, "write") in _ops(acls, "User:bob")


def test_shared_bindings() -> None:
    acls = shared_acls("qm1")
    names = {(a.resource_name, a.operation) for a in acls}
    assert ("__kmq.queues", "read") in names and ("__kmq.queues", "write") not in names
    assert ("kmq.qm1.system.deadletter", "write") in names
    # Opening a queue manager checks that the system queues' receipts topics exist.
    assert ("kmq.qm1.system.deadletter.receipts", "describe") in names
    assert ("kmq.qm1.system.deadletter.receipts", "write") not in names
    assert ("__kmq.queue_manager_security", "read") in names
    assert {(id_block_topic("qm1"), op) for op in ("read", "write")} <= names
    assert ("kmq.qm1.system.snapshots", "read") in names
    assert ("kmq.qm1.system.snapshots", "write") not in names  # the owner's (below)
    assert {a.principal for a in acls} == {"User:*"}
    group = [a for a in acls if a.resource_type == "group"]
    assert [(g.resource_name, g.pattern, g.operation) for g in group] == [
        ("kmq-reader-", "prefixed", "read")]
    transactional = {(a.resource_name, a.pattern, a.operation) for a in acls
                     if a.resource_type == "transactional_id"}
    assert transactional == {("kmq.qm1.", "prefixed", op) for op in ("write", "describe")}


def test_queue_manager_descriptor_guards_the_system_queues() -> None:
    dead = system_topics("qm1", SystemQueue.DEADLETTER)
    default = SecurityDescriptor.default_for(ObjectKind.QUEUE_MANAGER, "admin")
    acls = queue_manager_acls("qm1", default.deny("mallory", R.PEEK_MESSAGE))
    # Everyone may peek at dead letters (MSMQ's default); only the owner may receive them.
    assert {(dead.data, "read"), (dead.receipts, "read")} <= _ops(acls, "User:*")
    assert (dead.receipts, "write") not in _ops(acls, "User:*")
    assert (dead.receipts, "write") in _ops(acls, "User:admin")
    assert ("kmq.qm1.system.snapshots", "write") in _ops(acls, "User:admin")
    # mallory is refused the reads, never the Write and Describe every sender needs.
    mallory = _ops(acls, "User:mallory", "deny")
    assert {(dead.data, "read"), (dead.receipts, "read")} <= mallory
    assert not {op for _name, op in mallory} & {"write", "describe"}


def test_plan_creates_missing_and_deletes_only_stale_managed_bindings() -> None:
    desired = queue_acls(_queue(SecurityDescriptor.default_for(ObjectKind.QUEUE, "alice")))
    kept = next(iter(sorted(desired)))
    stale = dataclasses.replace(kept, principal="User:gone")
    foreign = dataclasses.replace(kept, resource_name="someone-elses-topic")
    gone_queue = dataclasses.replace(kept, resource_name="kmq.qm1.private.deleted")
    admins_grant = KafkaAcl("topic", "kmq.qm1.", "prefixed", "User:bob", "create", "allow")
    registry = KafkaAcl("topic", "__kmq.queues", "literal", "User:bob", "write", "allow")
    other_qm = dataclasses.replace(kept, resource_name="kmq.qm2.private.orders")
    plan = plan_sync(desired, [kept, stale, foreign, gone_queue, admins_grant, registry,
                               other_qm], lambda acl: managed(acl, "qm1"))
    assert set(plan.create) == desired - {kept}
    assert plan.delete == tuple(sorted([stale, gone_queue]))
    assert plan.unchanged == 1
    assert {d["resource_name"] for d in plan.to_dict()["delete"]} == {
        kept.resource_name, "kmq.qm1.private.deleted"}


def test_managed_bindings() -> None:
    subqueues = KafkaAcl("topic", SUBQUEUES, "prefixed", "User:bob", "read", "allow")
    assert managed(subqueues, "qm1") and not managed(subqueues, "qm2")
    assert not managed(KafkaAcl("group", "kmq-reader-", "prefixed", "User:*", "read", "allow"),
                       "qm1")
