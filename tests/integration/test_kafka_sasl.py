"""Security on Apache Kafka itself: a SASL_PLAINTEXT listener with SCRAM-SHA-512 users and
``StandardAuthorizer`` (``allow.everyone.if.no.acl.found=false``), started by
:class:`facade.kafka.localkafka.LocalKafka` with SCRAM users.

What docs/design.md ("Security model") claims, checked on that cluster: kmq's principal is the
user the broker authenticated, and a declared ``KMQ_PRINCIPAL`` cannot replace it; ``kmq acl
sync``, run by the Kafka super user, mirrors queue rights onto Kafka ACLs, so a raw Kafka
client of a principal without a right is refused by the broker while a permitted one reads;
and a non-super user works within the ACLs sync gives it, in the bootstrap order the design
states (the administrator opens the queue manager, creates the queues, runs sync).

Users: ``admin`` (the brokers' own identity and a super user), ``alice`` (granted receive on
the queue), ``bob`` (a right granted and revoked), ``mallory`` (nothing beyond Everyone).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from typer.testing import CliRunner

from facade import (
    AccessDenied,
    BrokerError,
    Delivery,
    JournalLevel,
    Message,
    MessageClass,
    ReceiveTimeout,
)
from facade.state import queueview
from facade.cli import app
from facade.config import KmqConfig
from facade.errors import ConfigurationError
from facade.manager import QueueManager
from facade.security.principal import Principal, PrincipalSource
from facade.model.topics import QueueTopics, queue_topics, snapshot_topic
from tests.support.kafka import PrivateBroker

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
         "mallory": "mallory-secret"}
#: Seconds to wait for an ACL change to reach the broker's authorizer (bounded polls only).
WAIT = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    """One Kafka node: SASL_PLAINTEXT with SCRAM-SHA-512, StandardAuthorizer, admin super."""
    with PrivateBroker(tmp_path_factory.mktemp("sasl"), scram_users=USERS) as broker:
        assert broker.cluster.security_protocol == "SASL_PLAINTEXT"
        yield broker


def _credentials(user: str, password: str | None = None) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": USERS[user] if password is None else password}


@dataclass(frozen=True)
class Site:
    """A queue manager on the SASL cluster, set up by the administrator."""

    cluster: PrivateBroker
    home: Path
    name: str

    def env(self, user: str, password: str | None = None, **extra: str) -> dict[str, str]:
        """A kmq process's environment: the user's SCRAM credentials as ``KMQ_KAFKA_*``."""
        credentials = _credentials(user, password)
        return {"KMQ_BOOTSTRAP_SERVERS": self.cluster.bootstrap_servers,
                "KMQ_QUEUE_MANAGER": self.name, "KMQ_HOME": str(self.home / user),
                "KMQ_KAFKA_SECURITY_PROTOCOL": credentials["security.protocol"],
                "KMQ_KAFKA_SASL_MECHANISM": credentials["sasl.mechanism"],
                "KMQ_KAFKA_SASL_USERNAME": user,
                "KMQ_KAFKA_SASL_PASSWORD": credentials["sasl.password"], **extra}

    def open(self, user: str, password: str | None = None, **extra: str) -> QueueManager:
        """The user's queue manager, configured from the environment only."""
        return QueueManager.open(KmqConfig.load(environ=self.env(user, password, **extra)))

    def kmq(self, user: str, *args: str, code: int = 0, **extra: str) -> dict[str, Any]:
        """Run ``kmq ARGS --json`` as the user (no other ``KMQ_*`` setting of this process
        leaks in); the parsed stdout."""
        ambient: dict[str, str | None] = {k: None for k in os.environ if k.startswith("KMQ_")}
        result = CliRunner().invoke(app, [*args, "--json"],
                                    env={**ambient, **self.env(user, **extra)})
        assert result.exit_code == code, result.output
        return json.loads(result.stdout)

    def topics(self, queue: str) -> QueueTopics:
        return queue_topics(self.name, queue, private=True)


@pytest.fixture(scope="module")
def site(cluster: PrivateBroker, tmp_path_factory: pytest.TempPathFactory) -> Site:
    """Queue ``orders`` (alice may receive and peek) and transactional ``ledger`` (alice may
    receive), owned by admin; synced."""
    site = Site(cluster, tmp_path_factory.mktemp("sasl-homes"), f"sasl-{uuid.uuid4().hex[:8]}")
    site.kmq("admin", "qm", "init")
    site.kmq("admin", "queue", "create", "orders")
    site.kmq("admin", "queue", "create", "ledger", "--transactional")
    site.kmq("admin", "acl", "grant", "orders", "alice", "receive|peek")
    site.kmq("admin", "acl", "grant", "ledger", "alice", "receive")
    plan = site.kmq("admin", "acl", "sync")
    assert plan["create"] and not plan["delete"]
    return site


def _raw_read(site: Site, user: str, topic: str) -> list[bytes] | str:
    """Partition 0 of ``topic`` read by a plain Kafka consumer logged in as ``user`` (what a
    program that bypasses kmq sees): the record values, or the broker's error name (from the
    topic's metadata when Describe is denied: librdkafka's fetcher then waits silently; else
    from the fetch). The group is one kmq's readers may use, so only the topic's ACLs decide."""
    consumer = Consumer({"bootstrap.servers": site.cluster.bootstrap_servers,
                         **_credentials(user), "group.id": f"kmq-reader-raw-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        described = consumer.list_topics(topic, timeout=WAIT).topics[topic]
        if described.error is not None:
            return str(described.error.name())
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        while True:
            record = consumer.poll(WAIT)
            assert record is not None, f"{topic}: neither records, an end nor an error"
            error = record.error()
            if error is None:
                values.append(record.value())
            elif error.code() == KafkaError._PARTITION_EOF:
                return values
            else:
                return error.name()
    finally:
        consumer.close()


def _raw_write(site: Site, user: str, topic: str) -> str | None:
    """Append one record to ``topic`` as ``user`` with a plain producer: the broker's error
    name, or None when it was written."""
    producer = Producer({"bootstrap.servers": site.cluster.bootstrap_servers,
                         **_credentials(user)})
    reports: list[KafkaError | None] = []
    producer.produce(topic, b"forged", on_delivery=lambda error, _record: reports.append(error))
    assert producer.flush(WAIT) == 0, f"{topic}: no delivery report"
    return None if reports[0] is None else reports[0].name()


def _eventually(check: Callable[[], Any], expected: Any, what: str) -> None:
    """Poll ``check`` until it returns ``expected``: ACL changes reach an authorizer
    asynchronously (kmq acl sync waits until a broker lists them; another may lag)."""
    deadline = time.monotonic() + WAIT
    while (got := check()) != expected:
        assert time.monotonic() < deadline, f"{what}: still {got!r} after {WAIT:g} s"
        time.sleep(0.2)


# --- Who the caller is ---------------------------------------------------------------------


def test_the_principal_is_the_authenticated_sasl_user(site: Site) -> None:
    with site.open("alice") as qm:
        assert qm.principal == Principal("alice", PrincipalSource.KAFKA_SASL)
    info = site.kmq("alice", "qm", "info")
    assert info["principal"] == "alice"
    assert info["principal_source"] == PrincipalSource.KAFKA_SASL.value
    # Naming the authenticated user again is no contradiction.
    with site.open("alice", KMQ_PRINCIPAL="alice") as qm:
        assert qm.principal.name == "alice"


def test_a_declared_principal_cannot_replace_the_sasl_user(site: Site) -> None:
    """alice logged in by SCRAM declares herself mallory: refused before any request, in the
    API and the CLI; nothing is received for anybody."""
    site.kmq("admin", "send", "orders", "--body", "for alice")
    with pytest.raises(ConfigurationError) as refused:
        site.open("alice", KMQ_PRINCIPAL="mallory")
    assert "'mallory'" in refused.value.message and "'alice'" in refused.value.message
    assert "KMQ_PRINCIPAL" in (refused.value.hint or "")
    error = site.kmq("alice", "receive", "orders", "--timeout", "0", code=1,
                     KMQ_PRINCIPAL="mallory")["error"]
    assert "mallory" in error["message"] and "authenticates as 'alice'" in error["message"]
    assert site.kmq("alice", "receive", "orders", "--timeout", "10")["body"] == "for alice"


def test_credentials_the_broker_refuses_are_a_configuration_error(site: Site) -> None:
    with pytest.raises(ConfigurationError) as refused:
        site.open("alice", password="not-her-password")
    assert "sasl.username 'alice'" in refused.value.message
    assert "KMQ_KAFKA_SASL_PASSWORD" in (refused.value.hint or "")


# --- What the broker stops -----------------------------------------------------------------


def test_sync_makes_the_broker_refuse_a_raw_reader_without_receive_rights(site: Site) -> None:
    """After kmq acl sync, mallory (Everyone's rights: send only) cannot read the data topic
    nor forge a receipt with a plain Kafka client; alice (receive) reads it raw and through
    kmq."""
    topics = site.topics("orders")
    sent = site.kmq("admin", "send", "orders", "--body", "payroll")["id"]

    assert _raw_read(site, "mallory", topics.data) == "TOPIC_AUTHORIZATION_FAILED"
    assert _raw_read(site, "mallory", topics.receipts) == "TOPIC_AUTHORIZATION_FAILED"
    assert _raw_write(site, "mallory", topics.receipts) == "TOPIC_AUTHORIZATION_FAILED"
    with site.open("mallory") as qm, pytest.raises(AccessDenied):
        qm.open_queue(r".\private$\orders").receive(timeout=0)

    raw = _raw_read(site, "alice", topics.data)
    assert isinstance(raw, list) and any(b"payroll" in value for value in raw)
    with site.open("alice") as qm:
        received = qm.open_queue(r".\private$\orders").receive_by_id(sent, timeout=10)
    assert received.body == b"payroll"


def test_a_non_super_user_works_within_the_synced_rights(site: Site) -> None:
    """alice, no Kafka super user, through kmq: send (Everyone), peek and receive (her
    grant), an MSMQ transaction (transactional ids kmq.<qm>.*), the dead-letter queue (Everyone
    may peek), listing queues; mallory may send but not receive."""
    with site.open("alice") as qm:
        orders = qm.open_queue(r".\private$\orders")
        orders.send(Message(body=b"mine", label="alice"), wait=True)
        assert orders.peek(timeout=10).label == "alice"
        assert orders.receive(timeout=10).body == b"mine"
        ledger = qm.open_queue(r".\private$\ledger")
        with qm.begin_transaction() as tx:
            ledger.send(Message(body=b"entry"), transaction=tx)
        with qm.begin_transaction() as tx:
            assert ledger.receive(timeout=10, transaction=tx).body == b"entry"
        assert {p.queue_name for p in qm.list_queues()} >= {"orders", "ledger"}
        with pytest.raises(ReceiveTimeout):  # read, and empty
            qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").peek(timeout=0)
    with site.open("mallory") as qm, qm.begin_transaction() as tx:
        qm.open_queue(r".\private$\ledger").send(Message(body=b"from mallory"), transaction=tx)
    with site.open("alice") as qm, qm.begin_transaction() as tx:
        received = qm.open_queue(r".\private$\ledger").receive(timeout=10, transaction=tx)
        assert received.body == b"from mallory"


def test_a_copy_the_broker_refuses_is_dead_lettered_with_nack_access_denied(site: Site) -> None:
    """kmq's access list lets bob send, but the Kafka ACLs, not synced since the grant, do not:
    the broker refuses the record (TOPIC_AUTHORIZATION_FAILED), so the sender gets the error,
    the copy is dead-lettered with NACK_ACCESS_DENIED and its body, and nothing stays in the
    outgoing queue to be retried."""
    site.kmq("admin", "queue", "create", "sealed")
    site.kmq("admin", "acl", "revoke", "sealed", "Everyone")
    site.kmq("admin", "acl", "sync")
    site.kmq("admin", "acl", "grant", "sealed", "bob", "send")
    with site.open("bob") as qm:
        sealed = qm.open_queue(r".\private$\sealed")
        with pytest.raises(BrokerError, match="TOPIC_AUTHORIZATION_FAILED|[Aa]uthoriz"):
            sealed.send(Message(body=b"for sealed", delivery=Delivery.RECOVERABLE,
                                journal=JournalLevel.DEADLETTER), wait=True, timeout=WAIT)
        assert qm.transmitter.outgoing.count() == 0
    with site.open("admin") as qm:
        dead = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER").receive(timeout=WAIT)
        assert dead.message_class is MessageClass.NACK_ACCESS_DENIED
        assert dead.body == b"for sealed"
        assert "sealed" in dead.properties["kmq.reason"]


def test_a_reader_refused_the_snapshots_topic_keeps_receiving(
        site: Site, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Only the queue manager's owner may create and write the shared snapshots topic:
    alice's reader is refused, says so once and goes on receiving (librdkafka would refuse
    every later record for that topic at once); the owner's reader writes them."""
    monkeypatch.setattr(queueview, "SNAPSHOT_EVERY", 3)
    site.kmq("admin", "queue", "create", "archive")
    site.kmq("admin", "acl", "grant", "archive", "alice", "receive")
    site.kmq("admin", "acl", "sync")
    snapshots = snapshot_topic(site.topics("archive").data)
    assert _raw_read(site, "admin", snapshots) == "UNKNOWN_TOPIC_OR_PART"  # none written yet
    with site.open("admin") as qm:
        archive = qm.open_queue(r".\private$\archive")
        for n in range(16):
            archive.send(Message(body=b"%d" % n), wait=n == 15)
    with site.open("alice") as qm:
        archive = qm.open_queue(r".\private$\archive")
        assert [archive.receive(timeout=10).body for _ in range(8)] == [b"%d" % n for n in range(8)]
    refusals = [r.getMessage() for r in caplog.records if "are not written" in r.getMessage()]
    assert len(refusals) == 1 and snapshots in refusals[0], refusals
    assert _raw_read(site, "admin", snapshots) == "UNKNOWN_TOPIC_OR_PART"  # alice made none
    with site.open("admin") as qm:
        archive = qm.open_queue(r".\private$\archive")
        assert [archive.receive(timeout=10).body for _ in range(8)] == [
            b"%d" % n for n in range(8, 16)]
    _eventually(lambda: isinstance(_raw_read(site, "admin", snapshots), list), True,
                "the owner's snapshot")


def test_sync_after_a_grant_and_a_revocation(site: Site) -> None:
    """A right reaches the broker with the next sync and leaves it with the one after the
    revocation; a sync with nothing to change changes nothing."""
    topics = site.topics("orders")
    assert _raw_read(site, "bob", topics.data) == "TOPIC_AUTHORIZATION_FAILED"
    site.kmq("admin", "acl", "grant", "orders", "bob", "peek")
    created = site.kmq("admin", "acl", "sync")["create"]
    assert {(a["resource_name"], a["operation"]) for a in created
            if a["principal"] == "User:bob"} >= {(topics.data, "read"), (topics.receipts, "read")}
    _eventually(lambda: isinstance(_raw_read(site, "bob", topics.data), list), True,
                "bob's raw read after the grant")

    site.kmq("admin", "acl", "revoke", "orders", "bob")
    deleted = site.kmq("admin", "acl", "sync")["delete"]
    assert {a["principal"] for a in deleted} == {"User:bob"}
    _eventually(lambda: _raw_read(site, "bob", topics.data), "TOPIC_AUTHORIZATION_FAILED",
                "bob's raw read after the revocation")
    again = site.kmq("admin", "acl", "sync", "--dry-run")
    assert again["create"] == [] and again["delete"] == [] and again["unchanged"] > 0


def test_sync_removes_the_bindings_of_a_deleted_queue(site: Site) -> None:
    site.kmq("admin", "queue", "create", "scratch")
    site.kmq("admin", "acl", "grant", "scratch", "bob", "receive")
    site.kmq("admin", "acl", "sync")
    site.kmq("admin", "queue", "delete", "scratch", "--yes")
    deleted = site.kmq("admin", "acl", "sync")["delete"]
    scratch = site.topics("scratch")
    assert {a["resource_name"] for a in deleted} >= {scratch.data, scratch.receipts}
    assert all(a["resource_name"].startswith(scratch.data) for a in deleted)


def test_only_a_principal_allowed_to_change_acls_may_sync(site: Site) -> None:
    """A user without Describe and Alter on the Cluster resource is refused with the fix, not
    given a plan computed from an empty listing (librdkafka reports a refused DescribeAcls as
    an empty one)."""
    error = site.kmq("alice", "acl", "sync", code=1)["error"]
    assert error["code"] == "MQ_ERROR_ACCESS_DENIED"
    assert "User:alice lacks Describe and Alter on the Cluster resource" in error["message"]
    assert "kafka-acls --add --allow-principal User:alice" in error["hint"]
    dry = site.kmq("alice", "acl", "sync", "--dry-run", code=1)["error"]
    assert "lacks Describe on the Cluster resource" in dry["message"]


# --- The administrator's bootstrap ---------------------------------------------------------


def test_users_open_a_queue_manager_once_the_administrator_has_set_it_up(
        cluster: PrivateBroker, tmp_path: Path) -> None:
    """The bootstrap order of docs/design.md: a user can neither register a queue manager
    nor use one the administrator has registered but not synced; after kmq qm init, kmq queue
    create and kmq acl sync by the super user, the user works."""
    site = Site(cluster, tmp_path, f"boot-{uuid.uuid4().hex[:8]}")
    with pytest.raises(AccessDenied):
        site.open("alice")  # registering the queue manager: a registry write
    site.kmq("admin", "qm", "init")
    with pytest.raises(AccessDenied) as hidden:
        site.open("alice")  # its topics exist but are not hers to see
    assert "kmq acl sync" in (hidden.value.hint or "")
    site.kmq("admin", "queue", "create", "inbox")
    site.kmq("admin", "acl", "sync")
    with site.open("alice") as qm:
        qm.open_queue(r".\private$\inbox").send(Message(body=b"hello"), wait=True)
        with pytest.raises(AccessDenied):  # Everyone may send, not receive
            qm.open_queue(r".\private$\inbox").receive(timeout=0)
    assert site.kmq("admin", "receive", "inbox", "--timeout", "10")["body"] == "hello"
