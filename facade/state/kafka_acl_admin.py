"""The Kafka ACL admin API for ``kmq acl sync`` (:mod:`facade.state.kafka_acls` computes what to ask).

Beside :mod:`facade.kafka.librdkafka`, the only module that imports ``confluent_kafka``: the ACL API needs
a check the rest of kmq does not. librdkafka (2.16) drops the error code of a DescribeAcls
answer, so a broker without an authorizer (SECURITY_DISABLED) and a principal that may not
describe ACLs (CLUSTER_AUTHORIZATION_FAILED) both read as "no bindings". A sync on that
answer would plan as if the cluster held none. :func:`require_acl_support` therefore asks
first, with requests whose errors do arrive: DescribeCluster with the principal's authorized
operations on the cluster, and, when those are every operation (a super user, or a broker
without an authorizer, which allows everything), the broker's ``authorizer.class.name``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from enum import Enum
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from facade.errors import AccessDenied, BrokerError, BrokerUnavailable
from facade.kafka.librdkafka import ADMIN_TIMEOUT, KafkaSession, map_kafka_errors
from facade.state.kafka_acls import (
    KafkaAcl,
    SyncPlan,
    managed,
    plan_sync,
    queue_acls,
    queue_manager_acls,
    shared_acls,
)
from facade.security.principal import Principal, PrincipalSource

__all__ = ["describe_acls", "require_acl_support", "sync_kafka_acls"]

#: What Kafka reports as a principal's authorized operations on the cluster when every request
#: is allowed: a super user's, or anyone's on a broker without an authorizer.
_EVERY_CLUSTER_OPERATION = frozenset({
    AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE})


def _binding(acl: KafkaAcl) -> AclBinding:
    return AclBinding(ResourceType[acl.resource_type.upper()], acl.resource_name,
                      ResourcePatternType[acl.pattern.upper()], acl.principal, acl.host,
                      AclOperation[acl.operation.upper()],
                      AclPermissionType[acl.permission.upper()])


def _filter(acl: KafkaAcl) -> AclBindingFilter:
    return AclBindingFilter(ResourceType[acl.resource_type.upper()], acl.resource_name,
                            ResourcePatternType[acl.pattern.upper()], acl.principal, acl.host,
                            AclOperation[acl.operation.upper()],
                            AclPermissionType[acl.permission.upper()])


def _acl(binding: AclBinding) -> KafkaAcl:
    return KafkaAcl(_name(binding.restype), binding.name,
                    _name(binding.resource_pattern_type), binding.principal,
                    _name(binding.operation), _name(binding.permission_type), binding.host)


def _name(value: Enum | str | int) -> str:
    """The lowercase name of an AclBinding field, which AclBinding converts to its enum (its
    annotations keep the str | int its constructor also accepts)."""
    if not isinstance(value, Enum):
        raise TypeError(f"confluent_kafka returned an ACL field that is not an enum: {value!r}")
    return value.name.lower()


def describe_acls(session: KafkaSession) -> list[KafkaAcl]:
    """Every ACL binding the broker holds (DescribeAcls with a match-all filter).

    Call :func:`require_acl_support` first: librdkafka reports a refused DescribeAcls (no
    authorizer, or a principal without Describe on the cluster) as an empty list.

    Raises:
        BrokerUnavailable: no answer.
        BrokerError: another failure librdkafka reports.
    """
    # None matches any name, principal and host (confluent_kafka's documented filter), though its
    # annotations say str.
    match_all = AclBindingFilter(ResourceType.ANY, None,  # type: ignore[arg-type]
                                 ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                 AclOperation.ANY, AclPermissionType.ANY)
    with map_kafka_errors("describe Kafka ACLs"):
        found = session.admin.describe_acls(match_all, request_timeout=ADMIN_TIMEOUT)
        return [_acl(binding) for binding in found.result(ADMIN_TIMEOUT)]


def require_acl_support(session: KafkaSession, principal: str, *, alter: bool) -> None:
    """Check that the cluster stores ACLs and that ``principal`` may read them, and change them
    when ``alter`` (module docstring: why DescribeAcls alone cannot tell).

    Args:
        session (KafkaSession): a session connected as ``principal``.
        principal (str): the Kafka principal's name, for the messages.
        alter (bool): whether bindings will be created or deleted (False: ``--dry-run``).

    Raises:
        BrokerError: the cluster has no authorizer (``authorizer.class.name`` is empty), so it
            neither stores nor enforces ACLs.
        AccessDenied: the principal lacks Describe (or, with ``alter``, Alter) on the Kafka
            Cluster resource.
        BrokerUnavailable: no answer.
    """
    with map_kafka_errors("describe the Kafka cluster"):
        future = session.admin.describe_cluster(include_authorized_operations=True,
                                                request_timeout=ADMIN_TIMEOUT)
        cluster = future.result(ADMIN_TIMEOUT)
    allowed = set(cluster.authorized_operations or ())
    if allowed >= _EVERY_CLUSTER_OPERATION:
        # A super user, or a cluster that allows everything because it checks nothing.
        node = cluster.nodes[0]
        resource = ConfigResource(ResourceType.BROKER, str(node.id))
        with map_kafka_errors("describe a Kafka broker's configuration"):
            configs = session.admin.describe_configs(
                [resource], request_timeout=ADMIN_TIMEOUT)[resource].result(ADMIN_TIMEOUT)
        entry = configs.get("authorizer.class.name")
        if entry is None or not entry.value:
            raise BrokerError(
                f"cannot mirror queue rights onto Kafka ACLs: the Kafka cluster at "
                f"{session.bootstrap_servers} has no authorizer (broker {node.id}'s "
                f"authorizer.class.name is empty), so it neither stores nor enforces ACLs",
                hint="set authorizer.class.name="
                     "org.apache.kafka.metadata.authorizer.StandardAuthorizer (and super.users) "
                     "on every broker and controller, with SASL or TLS client authentication, "
                     "then run kmq acl sync again")
        return
    needed = [AclOperation.DESCRIBE] + ([AclOperation.ALTER] if alter else [])
    missing = [op.name.capitalize() for op in needed if op not in allowed]
    if missing:
        operations = " and ".join(missing)
        flags = " ".join(f"--operation {op}" for op in missing)
        raise AccessDenied(
            f"cannot mirror queue rights onto Kafka ACLs: Kafka principal User:{principal} lacks "
            f"{operations} on the Cluster resource, which "
            f"{'listing and changing' if alter else 'listing'} ACL bindings needs",
            hint=f"run kmq acl sync as a Kafka super user (super.users), or have one grant it: "
                 f"kafka-acls --add --allow-principal User:{principal} {flags} --cluster")


def sync_kafka_acls(manager: Any, *, dry_run: bool = False) -> SyncPlan:
    """Mirror every queue of ``manager`` onto Kafka ACLs (``kmq acl sync``).

    Args:
        manager (QueueManager): the queue manager whose queues to mirror.
        dry_run (bool): compute and return the plan, change nothing.

    Returns:
        SyncPlan: what was (or, with ``dry_run``, would be) created and deleted.

    Raises:
        BrokerError: the cluster has no authorizer, or refused a change.
        AccessDenied: the principal may not describe (or, unless ``dry_run``, alter) the
            cluster's ACLs, or may not list the queues or read the queue manager's descriptor
            (QUEUE_STATUS, GET_PERMISSIONS).
    """
    session = manager.session
    if not isinstance(session, KafkaSession):
        raise BrokerError(
            f"cannot mirror queue rights onto Kafka ACLs: the queue manager's session "
            f"({type(session).__name__}) is not connected to a Kafka broker",
            hint="open the queue manager on a Kafka cluster (QueueManager.open without session=)")
    require_acl_support(session, _kafka_principal(manager.principal), alter=not dry_run)
    desired = shared_acls(manager.name)
    desired |= queue_manager_acls(manager.name, manager.queue_manager_security())
    for properties in manager.list_queues():
        desired |= queue_acls(properties)
    plan = plan_sync(desired, describe_acls(session), lambda acl: managed(acl, manager.name))
    if not dry_run:
        _apply(session, plan)
    return plan


def _kafka_principal(principal: Principal) -> str:
    """The name the broker knows this client by: its SASL user or TLS subject, else Kafka's
    ANONYMOUS (a PLAINTEXT connection, whatever kmq's own principal is)."""
    if principal.source in (PrincipalSource.KAFKA_SASL, PrincipalSource.KAFKA_TLS):
        return principal.name
    return "ANONYMOUS"


def _apply(session: KafkaSession, plan: SyncPlan) -> None:
    with map_kafka_errors("create Kafka ACLs"):
        if plan.create:
            _wait(session.admin.create_acls([_binding(a) for a in plan.create],
                                            request_timeout=ADMIN_TIMEOUT).values())
    with map_kafka_errors("delete Kafka ACLs"):
        if plan.delete:
            _wait(session.admin.delete_acls([_filter(a) for a in plan.delete],
                                            request_timeout=ADMIN_TIMEOUT).values())
    _await_listed(session, plan)


def _await_listed(session: KafkaSession, plan: SyncPlan) -> None:
    """Wait (bounded poll) until a broker lists the plan's result. Kafka answers CreateAcls and
    DeleteAcls once the controller has committed them; each broker's authorizer applies them
    from the metadata log a moment later, and DescribeAcls answers from that authorizer."""
    created, deleted = set(plan.create), set(plan.delete)
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while True:
        present = set(describe_acls(session))
        if created <= present and not deleted & present:
            return
        if time.monotonic() > deadline:
            raise BrokerUnavailable(
                f"the Kafka cluster at {session.bootstrap_servers} accepted the ACL changes but "
                f"did not list them within {ADMIN_TIMEOUT:g} s "
                f"({len(created - present)} binding(s) not yet created, "
                f"{len(deleted & present)} not yet deleted)",
                hint="check the brokers' logs (their metadata lags the controller), then run "
                     "kmq acl sync again")
        time.sleep(0.05)


def _wait(futures: Iterable[Any]) -> None:
    for future in futures:
        future.result(ADMIN_TIMEOUT)
