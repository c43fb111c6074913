"""``kmq doctor``: check the Kafka cluster and kmq's topics against the settings kmq needs.

kmq creates its topics with the settings of ``facade.model.topicsettings`` (no time or size retention,
``max.message.bytes`` for 4 MiB bodies, the configured replication factor and
``min.insync.replicas``). Topics made by hand, by an older kmq, or changed since keep whatever
they have, and on Kafka a wrong one loses messages without a NACK: time-based retention deletes
unreceived messages, and deleted receipts bring received messages back. ``kmq doctor`` reads
every kmq topic's partitions, replicas and configs as the broker describes them, plus the
broker count and whether the broker checks topic configs at all, and prints one line per
finding with the command or kmq setting that fixes it.

Exit codes: 0 nothing to fix (warnings may be printed), 1 something needs fixing or the cluster
could not be read, 2 usage error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

import typer

from facade.cli._options import text_option
from facade.cli._output import EXIT_FAILED, JsonOption, emit, fail_on_errors

if TYPE_CHECKING:  # the Kafka client and configuration load when the command runs (start-up time)
    from facade.config import KmqConfig
    from facade.kafka.librdkafka import KafkaSession, TopicDescription

__all__ = ["ERROR", "WARNING", "Finding", "cluster_findings", "doctor", "topic_findings"]

ERROR = "error"
WARNING = "warning"

#: What Kafka assumes for a topic config that is not set (its documented defaults); a broker
#: that describes only the configs set on a topic leaves these out.
_KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "max.message.bytes": "1048588",
    "min.insync.replicas": "1",
}
#: Configs where a larger value than kmq's also does (the others must match exactly).
_AT_LEAST = {"max.message.bytes", "min.insync.replicas"}
#: Why each config matters, by (role, config).
_WHY = {
    "retention.ms": "a message must live until it is received, expires or is purged; time-based "
                    "retention deletes it unreceived and without a NACK, and deleted receipts "
                    "bring received messages back",
    "retention.bytes": "size-based retention deletes unreceived messages without a NACK, and "
                       "deleted receipts bring received messages back",
    "max.message.bytes": "records of messages with bodies up to 4 MiB (MSMQ's limit) must fit",
    "min.insync.replicas": "an acknowledged acks=all write (a recoverable message, a receipt) "
                           "must be on this many replicas",
}
#: By topic role name (facade.model.topics.TopicRole, imported when the command runs).
_RECREATE = {
    "MESSAGES": "receive its messages, then recreate the queue's topics (kmq queue delete "
                        "and kmq queue create; a system queue: kafka-topics --delete, and kmq "
                        "recreates it on the next kmq qm init)",
    "RECEIPTS": "receive the queue's messages, then recreate its topics (kmq queue delete "
                        "and kmq queue create)",
    "REGISTRY": "copy its records out, delete it (kafka-topics --delete), run kmq qm init "
                        "to recreate it, and write the records back",
}
_WHY_CLEANUP = {
    "MESSAGES": "compaction keeps one record per key and drops messages",
    "RECEIPTS": "compaction keeps one record per key and drops receipts, which brings "
                        "received messages back",
    "REGISTRY": "the registry keeps the latest record per queue; without compaction it "
                        "loses queue definitions to retention",
}


@dataclasses.dataclass(frozen=True)
class Finding:
    """Something about the cluster or a topic that differs from what kmq needs.

    Attributes:
        severity (str): ``error`` (needs fixing: exit code 1) or ``warning`` (less safe than
            configured, but kmq works as documented for this cluster).
        subject (str): the topic concerned, or ``cluster``.
        setting (str): the Kafka setting or kmq setting concerned.
        found (str): what the broker reports.
        expected (str): what kmq needs.
        why (str): what goes wrong otherwise.
        fix (str): the command or setting that fixes it.
    """

    severity: str
    subject: str
    setting: str
    found: str
    expected: str
    why: str
    fix: str

    def line(self) -> str:
        """The finding as one line of text."""
        return (f"{self.severity.upper()} {self.subject}: {self.setting} = {self.found}, kmq "
                f"needs {self.expected} ({self.why}). Fix: {self.fix}")


def topic_findings(topic: TopicDescription, replicas: int, min_insync: int,
                   bootstrap_servers: str) -> list[Finding]:
    """Check one kmq topic against the settings kmq creates it with.

    Args:
        topic (TopicDescription): the topic as the broker describes it.
        replicas (int): the replication factor it needs (the configured one, capped at the
            broker count).
        min_insync (int): the ``min.insync.replicas`` it needs (capped likewise).
        bootstrap_servers (str): the brokers, for the fix commands.

    Returns:
        list[Finding]: the findings, all of severity ``error``; empty when all is well. A topic
        that is not kmq's (no :func:`~facade.model.topics.topic_role`) gives none.
    """
    from facade.model.topics import topic_role
    from facade.model.topicsettings import topic_config

    role = topic_role(topic.name)
    if role is None:
        return []
    findings = []

    def error(setting: str, found: object, expected: object, why: str, fix: str) -> None:
        findings.append(Finding(ERROR, topic.name, setting, str(found), str(expected), why, fix))

    if topic.partitions != 1:
        error("partitions", topic.partitions, 1,
              "offsets of one partition are the arrival order and the lookup ids",
              _RECREATE[role.name] + "; Kafka cannot reduce partitions")
    if topic.replication_factor < replicas:
        error("replication factor", topic.replication_factor, replicas,
              "a topic with fewer replicas loses acknowledged messages with a broker",
              f"kafka-reassign-partitions --bootstrap-server {bootstrap_servers} --execute "
              f"--reassignment-json-file FILE, where FILE gives partition 0 of {topic.name} "
              f"{replicas} replicas")
    for key, wanted in topic_config(topic.name, min_insync).items():
        found = topic.configs.get(key)
        value = found if found is not None else _KAFKA_DEFAULTS.get(key)
        if value is None or _satisfies(key, value, wanted):
            continue
        shown = value if found is not None else f"not set (Kafka's default {value})"
        why = _WHY_CLEANUP[role.name] if key == "cleanup.policy" else _WHY[key]
        error(key, shown, f"at least {wanted}" if key in _AT_LEAST else wanted, why,
              _kafka_configs(bootstrap_servers, topic.name, key, wanted))
    insync = topic.configs.get("min.insync.replicas")
    if insync is not None and insync.isdigit() and int(insync) > topic.replication_factor:
        error("min.insync.replicas", insync, f"at most {topic.replication_factor}",
              "with fewer replicas than that, no acks=all write is ever acknowledged",
              _kafka_configs(bootstrap_servers, topic.name, "min.insync.replicas",
                             str(min(min_insync, topic.replication_factor))))
    return findings


def _satisfies(key: str, value: str, wanted: str) -> bool:
    if key in _AT_LEAST:
        return value.lstrip("-").isdigit() and int(value) >= int(wanted)
    if key == "cleanup.policy":
        return sorted(value.replace(" ", "").split(",")) == sorted(wanted.split(","))
    return value == wanted


def _kafka_configs(bootstrap_servers: str, topic: str, key: str, value: str) -> str:
    return (f"kafka-configs --bootstrap-server {bootstrap_servers} --alter --entity-type topics "
            f"--entity-name {topic} --add-config {key}={value}")


def cluster_findings(session: KafkaSession, config: KmqConfig, brokers: int) -> list[Finding]:
    """Warnings about the cluster itself: fewer brokers than the configured replication, a
    broker that cannot delete records (retention), and a broker that does not check topic
    configs (and so, most likely, does not apply them).

    Args:
        session (KafkaSession): clients for the cluster.
        config (KmqConfig): the replication settings asked for.
        brokers (int): the broker count from metadata.

    Returns:
        list[Finding]: warnings (kmq works, but less safely than configured).

    Raises:
        BrokerUnavailable: the broker did not answer the config probe.
    """
    findings = []
    if brokers < config.replication_factor:
        findings.append(Finding(
            WARNING, "cluster", "brokers", str(brokers),
            f"at least {config.replication_factor} (replication_factor)",
            f"kmq creates topics with {brokers} replica(s) and min.insync.replicas "
            f"{min(brokers, config.effective_min_insync_replicas)}, less durable than "
            "configured",
            f"add brokers, or set KMQ_REPLICATION_FACTOR={brokers} (replication_factor in "
            "kmq.toml) to accept it"))
    deletes, why = session.delete_records_support()
    if not deletes:
        findings.append(Finding(
            WARNING, "cluster", "delete_records", "unsupported", "supported (Kafka DeleteRecords)",
            f"{why}: records every process has removed stay in the topics (they only cost space)",
            "run kmq on Apache Kafka where the topics must not grow without bound"))
    from facade.errors import AccessDenied

    try:
        validates = session.validates_topic_configs()
    except AccessDenied as exc:
        findings.append(Finding(
            WARNING, "cluster", "topic config checks", "unknown", "checked by the broker",
            f"the probe (a validate-only CreateTopics) was refused: {exc.message}",
            "run kmq doctor as a principal that may create topics"))
    else:
        if not validates:
            findings.append(Finding(
                WARNING, "cluster", "topic config checks", "none (an invalid retention.ms was "
                "accepted)", "invalid topic configs refused, as Kafka refuses them",
                "a broker that does not check topic configs most likely does not apply them "
                "either, so retention, max.message.bytes and min.insync.replicas below are what "
                "it stores, not what it enforces",
                "run kmq on Apache Kafka (or a broker that applies topic configs) where "
                "messages matter"))
    return findings


def _kmq_topics(names: Iterable[str], queue_manager: str | None) -> list[str]:
    from facade.model.topics import TOPIC_PREFIX, TopicRole, escape_name, topic_role

    prefix = None if queue_manager is None else f"{TOPIC_PREFIX}{escape_name(queue_manager)}."
    return sorted(
        name for name in names if (role := topic_role(name)) is not None
        and (prefix is None or role is TopicRole.REGISTRY or name.startswith(prefix)))


def doctor(
    queue_manager: str = text_option(
        None, "--queue-manager", "-m",
        help="Check only this queue manager's topics (and the registries); default: every kmq "
             "topic on the cluster."),
    as_json: bool = JsonOption,
) -> None:
    """Check the Kafka cluster and every kmq topic against the settings kmq needs.

    Reads each kmq topic's partition count, replication factor and configs (retention.ms,
    retention.bytes, cleanup.policy, max.message.bytes, min.insync.replicas) and the broker
    count, and probes whether the broker checks topic configs. Prints one line per finding with
    the kafka-configs command or kmq setting that fixes it. Exit code 0 when nothing needs
    fixing (warnings may remain), 1 otherwise.

    Example: kmq doctor --json
    """
    from facade.config import KmqConfig
    from facade.kafka.librdkafka import KafkaSession

    with fail_on_errors(as_json):
        config = KmqConfig.load()
        session = KafkaSession.from_config(config, client_id="kmq-doctor")
        try:
            session.ping()
            brokers = session.broker_count()
            replicas, min_insync = session.topic_durability()
            described = session.describe_topics(_kmq_topics(session.list_topics(),
                                                            queue_manager))
            findings = cluster_findings(session, config, brokers)
        finally:
            session.close()
    for topic in described.values():
        findings += topic_findings(topic, replicas, min_insync, session.bootstrap_servers)
    errors = sum(f.severity == ERROR for f in findings)
    report = {
        "ok": errors == 0, "bootstrap_servers": session.bootstrap_servers, "brokers": brokers,
        "replication_factor": replicas, "min_insync_replicas": min_insync,
        "topics_checked": len(described), "findings": [dataclasses.asdict(f) for f in findings],
    }
    if as_json:
        emit(report, True)
    else:
        for finding in findings:
            typer.echo(finding.line())
        typer.echo(f"checked {len(described)} kmq topic(s) on {brokers} broker(s): {errors} to "
                   f"fix, {len(findings) - errors} warning(s)")
    if errors:
        raise typer.Exit(EXIT_FAILED)
