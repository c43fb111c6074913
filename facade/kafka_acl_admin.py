"""The Kafka ACL admin API for ``kmq acl sync`` (:mod:`facade.kafka_acls` computes what to ask).

Beside :mod:`facade.kafka`, the only module that imports ``confluent_kafka``: the ACL API
needs a guard the rest of kmq does not. Some Kafka-API brokers answer DescribeAcls but make
librdkafka **abort the process** on CreateAcls (Tansu 0.6: a librdkafka assertion), so
:func:`acl_support` first tries a create and delete of a harmless probe binding in a child
process and reports why the broker cannot take ACLs instead of letting the caller die.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from facade.errors import BrokerError
from facade.kafka import ADMIN_TIMEOUT, KafkaSession, client_logging, map_kafka_errors
from facade.kafka_acls import KafkaAcl, SyncPlan, plan_sync, queue_acls, shared_acls

__all__ = ["acl_support", "describe_acls", "sync_kafka_acls"]

#: The probe binding: Describe on a topic kmq never creates, for a principal nobody has.
_PROBE = ("__kmq.acl-probe", "User:kmq-acl-probe")
#: Exit code of the probe child when the broker refused the request (reason on stdout).
_REFUSED = 3
_PROBE_TIMEOUT = 60.0


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

    Raises:
        BrokerError: the broker refused (e.g. SECURITY_DISABLED: no authorizer).
        AccessDenied: the principal may not describe the cluster's ACLs.
        BrokerUnavailable: no answer.
    """
    # None matches any name, principal and host (confluent_kafka's documented filter), though its
    # annotations say str.
    match_all = AclBindingFilter(ResourceType.ANY, None,  # type: ignore[arg-type]
                                 ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                 AclOperation.ANY, AclPermissionType.ANY)
    with map_kafka_errors("describe Kafka ACLs"):
        found = session.admin.describe_acls(match_all, request_timeout=ADMIN_TIMEOUT)
        return [_acl(binding) for binding in found.result(ADMIN_TIMEOUT)]


def acl_support(session: KafkaSession) -> str | None:
    """Whether the broker can store ACLs, tried without risking this process.

    DescribeAcls runs here (a broker without an authorizer refuses it); then a child process
    creates and deletes a probe binding, because a broker that does not implement CreateAcls
    may make librdkafka abort the process that sends it.

    Returns:
        str | None: None when ACLs work; otherwise why not, in words.
    """
    try:
        describe_acls(session)
    except BrokerError as exc:
        return f"the broker refused DescribeAcls: {exc.message}"
    # Plain settings only: the logger object stays here (the child sets its own).
    config = {k: v for k, v in session.client_config.items() if isinstance(v, (str, int, bool))}
    request = json.dumps({"config": config})
    try:
        child = subprocess.run([sys.executable, "-m", "facade.kafka_acl_admin"], input=request,
                               capture_output=True, text=True, timeout=_PROBE_TIMEOUT,
                               check=False)
    except subprocess.TimeoutExpired:
        return f"a probe CreateAcls got no answer within {_PROBE_TIMEOUT:g} s"
    if child.returncode == 0:
        return None
    if child.returncode == _REFUSED:
        return f"the broker refused CreateAcls: {child.stdout.strip()}"
    if child.returncode < 0:
        return (f"a probe CreateAcls made the Kafka client abort (signal {-child.returncode}): "
                "the broker answers the ACL API without implementing it (Tansu does this)")
    last = (child.stderr.strip().splitlines() or ["no output"])[-1]
    return f"a probe CreateAcls failed (exit code {child.returncode}): {last}"


def sync_kafka_acls(manager: Any, *, dry_run: bool = False) -> SyncPlan:
    """Mirror every queue of ``manager`` onto Kafka ACLs (``kmq acl sync``).

    Args:
        manager (QueueManager): the queue manager whose queues to mirror.
        dry_run (bool): compute and return the plan, change nothing.

    Returns:
        SyncPlan: what was (or, with ``dry_run``, would be) created and deleted.

    Raises:
        BrokerError: the broker cannot store ACLs (the message says why: no authorizer, or a
            broker that does not implement the ACL API), or refused a change.
        AccessDenied: the principal may not alter the cluster's ACLs.
    """
    session = manager.session
    if not isinstance(session, KafkaSession):
        raise BrokerError(
            f"cannot mirror queue rights onto Kafka ACLs: the queue manager's session "
            f"({type(session).__name__}) is not connected to a Kafka broker",
            hint="open the queue manager on a Kafka cluster (QueueManager.open without session=)")
    reason = acl_support(session)
    if reason is not None:
        raise BrokerError(
            f"cannot mirror queue rights onto Kafka ACLs: {reason}",
            hint="run kmq acl sync against a Kafka cluster with an authorizer "
                 "(authorizer.class.name), as a principal allowed to alter ACLs")
    desired = set(shared_acls(manager.name))
    managed = {acl.resource_name for acl in desired}
    for properties in manager.list_queues():
        queue = queue_acls(properties)
        desired |= queue
        managed |= {acl.resource_name for acl in queue}
    plan = plan_sync(desired, describe_acls(session), managed)
    if not dry_run:
        _apply(session, plan)
    return plan


def _apply(session: KafkaSession, plan: SyncPlan) -> None:
    with map_kafka_errors("create Kafka ACLs"):
        if plan.create:
            _wait(session.admin.create_acls([_binding(a) for a in plan.create],
                                            request_timeout=ADMIN_TIMEOUT).values())
    with map_kafka_errors("delete Kafka ACLs"):
        if plan.delete:
            _wait(session.admin.delete_acls([_filter(a) for a in plan.delete],
                                            request_timeout=ADMIN_TIMEOUT).values())


def _wait(futures: Iterable[Any]) -> None:
    for future in futures:
        future.result(ADMIN_TIMEOUT)


def _probe(config: Mapping[str, Any]) -> int:
    """The child's side of :func:`acl_support`: create and delete the probe binding."""
    admin = AdminClient({**config, **client_logging()})
    probe = KafkaAcl("topic", _PROBE[0], "literal", _PROBE[1], "describe", "allow")
    try:
        _wait(admin.create_acls([_binding(probe)], request_timeout=ADMIN_TIMEOUT).values())
        _wait(admin.delete_acls([_filter(probe)], request_timeout=ADMIN_TIMEOUT).values())
    except KafkaException as exc:
        print(exc.args[0].str() if exc.args else str(exc))
        return _REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(_probe(json.load(sys.stdin)["config"]))
