"""Kafka settings of kmq topics, size limits, refusals, and `kmq doctor`'s per-topic checks."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from facade.cli.doctor import topic_findings
from facade.errors import BrokerError
from facade.kafka.librdkafka import Refusal, TopicDescription, map_kafka_errors, refusal
from facade.model.topicsettings import (
    MAX_BODY_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_RECORD_BYTES,
    record_size,
    topic_config,
)

KEEP = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


def test_limits_leave_room_for_what_the_queue_manager_adds() -> None:
    assert MAX_BODY_BYTES == 4 * 1024 * 1024
    assert MAX_BODY_BYTES < MAX_RECORD_BYTES < MAX_MESSAGE_BYTES


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("kmq.qm.private.orders", {**KEEP, "max.message.bytes": str(MAX_MESSAGE_BYTES)}),
        ("kmq.qm.system.deadletter", {**KEEP, "max.message.bytes": str(MAX_MESSAGE_BYTES)}),
        ("kmq.qm.private.orders.sub.poison", {**KEEP, "max.message.bytes": str(MAX_MESSAGE_BYTES)}),
        ("kmq.qm.private.orders.receipts", KEEP),
        ("__kmq.queues", {"cleanup.policy": "compact"}),
        ("someone.elses", {}),
    ],
)
def test_topic_config(topic: str, expected: dict) -> None:
    assert topic_config(topic, 2) == {**expected, "min.insync.replicas": "2"}


def test_record_size_counts_key_value_and_headers() -> None:
    assert record_size(None, b"abc", None) == 3
    headers = [("kmq.id", b"x" * 5), ("é", b"")]
    assert record_size(b"k" * 16, b"v" * 10, headers) == 16 + 10 + 11 + 2


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (KafkaError.MSG_SIZE_TOO_LARGE, Refusal.TOO_LARGE),
        (KafkaError.RECORD_LIST_TOO_LARGE, Refusal.TOO_LARGE),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, Refusal.ACCESS_DENIED),
        (KafkaError.INVALID_RECORD, Refusal.INVALID),
        (KafkaError.POLICY_VIOLATION, Refusal.INVALID),
        # a retry, a new producer or TTRQ settles these
        (KafkaError._MSG_TIMED_OUT, None),
        (KafkaError._TRANSPORT, None),
        (KafkaError.NOT_ENOUGH_REPLICAS, None),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, None),
        (KafkaError._QUEUE_FULL, None),
    ],
)
def test_refusal_of_delivery_reports_and_mapped_errors(code: int, expected: Refusal | None) -> None:
    assert refusal(KafkaError(code)) is expected
    with pytest.raises(Exception) as info, map_kafka_errors("send", "t"):
        raise KafkaException(KafkaError(code))
    assert refusal(info.value) is expected


def test_a_fatal_error_or_an_unrelated_one_is_no_refusal() -> None:
    assert refusal(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, fatal=True)) is None
    assert refusal(BrokerError("no Kafka error behind it")) is None
    assert refusal(ValueError("x")) is None


# --- kmq doctor's checks of one topic ------------------------------------------------------------


def _topic(name: str, configs: dict, partitions: int = 1, replicas: int = 3) -> TopicDescription:
    return TopicDescription(name, partitions, replicas, configs)


def _settings(findings: list) -> list[tuple[str, str, str]]:
    return [(f.setting, f.found, f.expected) for f in findings]


def test_a_topic_as_kmq_creates_it_has_no_findings() -> None:
    for name in ("kmq.qm.private.a", "kmq.qm.private.a.receipts", "__kmq.queues"):
        assert topic_findings(_topic(name, topic_config(name, 2)), 3, 2, "b:9092") == []


def test_more_than_needed_is_fine() -> None:
    name = "kmq.qm.private.a"
    configs = {**topic_config(name, 3), "max.message.bytes": str(10 * MAX_MESSAGE_BYTES)}
    assert topic_findings(_topic(name, configs, replicas=5), 3, 2, "b:9092") == []


def test_kafka_defaults_are_reported() -> None:
    # Kafka describes every config; these are its defaults for a topic made without configs.
    configs = {"cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1",
               "max.message.bytes": "1048588", "min.insync.replicas": "1"}
    findings = topic_findings(_topic("kmq.qm.private.a", configs, replicas=1), 3, 2, "b:9092")
    assert _settings(findings) == [
        ("replication factor", "1", "3"),
        ("retention.ms", "604800000", "-1"),
        ("max.message.bytes", "1048588", f"at least {MAX_MESSAGE_BYTES}"),
        ("min.insync.replicas", "1", "at least 2"),
    ]
    assert all(f.severity == "error" and f.subject == "kmq.qm.private.a" for f in findings)
    assert findings[1].fix == ("kafka-configs --bootstrap-server b:9092 --alter --entity-type "
                               "topics --entity-name kmq.qm.private.a --add-config retention.ms=-1")


def test_configs_a_broker_leaves_out_are_taken_as_kafka_defaults() -> None:
    findings = topic_findings(_topic("kmq.qm.private.a.receipts", {}), 1, 1, "b:9092")
    assert _settings(findings) == [("retention.ms", "not set (Kafka's default 604800000)", "-1")]


def test_registry_must_stay_compacted_and_queues_must_not_be() -> None:
    registry = topic_findings(_topic("__kmq.queues", {"cleanup.policy": "compact,delete",
                                                      "min.insync.replicas": "2"}), 3, 2, "b")
    assert _settings(registry) == [("cleanup.policy", "compact,delete", "compact")]
    queue = {**topic_config("kmq.qm.public.a", 2), "cleanup.policy": "compact"}
    assert _settings(topic_findings(_topic("kmq.qm.public.a", queue), 3, 2, "b")) == [
        ("cleanup.policy", "compact", "delete")]


def test_partitions_and_an_impossible_min_insync_replicas() -> None:
    name = "kmq.qm.private.a"
    configs = {**topic_config(name, 2), "min.insync.replicas": "3"}
    findings = topic_findings(_topic(name, configs, partitions=4, replicas=2), 2, 2, "b")
    assert _settings(findings) == [("partitions", "4", "1"),
                                   ("min.insync.replicas", "3", "at most 2")]
    assert "cannot reduce partitions" in findings[0].fix


def test_topics_that_are_not_kmqs_are_ignored() -> None:
    assert topic_findings(_topic("orders", {"retention.ms": "1"}, partitions=9), 3, 2, "b") == []
