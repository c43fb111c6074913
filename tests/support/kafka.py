"""Where integration tests get a Kafka broker.

Order: ``KMQ_BOOTSTRAP_SERVERS`` (any real cluster); testcontainers' Kafka where a Docker engine
answers; else Apache Kafka from kmq's own jar cache (:mod:`facade.kafka.localkafka`), one KRaft node on
free loopback ports with its log dirs in a temporary folder. Every test assumes Kafka's
documented semantics (aborted transactions hidden from read_committed readers, fencing,
DeleteRecords, topic configs, durability across restarts): none skips for a missing feature.
"""

from __future__ import annotations

import atexit
import os
import shutil
import weakref
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from facade.kafka.localkafka import LocalKafka

__all__ = ["BrokerEndpoint", "PrivateBroker", "docker_engine_answers", "provide_broker",
           "raw_values"]


@dataclass(frozen=True)
class BrokerEndpoint:
    """A broker for the test session.

    Attributes:
        bootstrap_servers (str): ``host:port`` list.
        kind (str): ``external``, ``testcontainers`` or ``apache-kafka`` (kmq's local cluster).
    """

    bootstrap_servers: str
    kind: str

    def consumer_config(self, **extra: object) -> dict:
        """Consumer settings that keep group joins fast: 6 s is Kafka's default
        ``group.min.session.timeout.ms``, the shortest session a broker accepts."""
        return {"bootstrap.servers": self.bootstrap_servers, "session.timeout.ms": 6000, **extra}


def docker_engine_answers(timeout: float = 2.0) -> bool:
    """True if a Docker engine answers a ping (testcontainers can start containers)."""
    if not (os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists()):
        return False
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - any failure means "no usable engine"; we fall back
        return False


@contextmanager
def provide_broker() -> Iterator[tuple[str, str]]:
    """Yield ``(bootstrap_servers, kind)`` for a test session, cleaning up afterwards."""
    external = os.environ.get("KMQ_BOOTSTRAP_SERVERS")
    if external:
        yield external, "external"
        return
    if docker_engine_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as container:
            yield container.get_bootstrap_server(), "testcontainers"
        return
    with PrivateBroker(Path(tempfile.mkdtemp(prefix="kmq-test-broker-"))) as broker:
        yield broker.bootstrap_servers, "apache-kafka"


def raw_values(bootstrap: str, topic: str) -> list[bytes]:
    """Every record value of partition 0 of ``topic`` (kmq's data topics have one), read as a
    plain Kafka consumer (no kmq decoding): what a client that bypasses the facade would see.

    Raises:
        AssertionError: the end of the partition was not reached within 10 s of the last
            record, or a record came with an error.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4()}",
                         "enable.auto.commit": False, "allow.auto.create.topics": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        while True:
            record = consumer.poll(10)
            assert record is not None, f"{topic}: no end of partition after {len(values)} records"
            error = record.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                return values
            assert error is None, error
            values.append(record.value())
    finally:
        consumer.close()


class PrivateBroker:
    """An Apache Kafka cluster of a test's own, which the test may stop, crash and restart.

    Fault tests that take brokers away use one, so the session broker other tests share never
    goes down. Its log dirs persist across :meth:`stop` / :meth:`start` (same ports), as on any
    Kafka cluster; :meth:`close` stops it and removes its folder.

    Args:
        root (Path): folder for the cluster's config, data and logs.
        brokers (int): nodes (1, or 3 for the replicated fault scenarios).
        scram_users (dict[str, str] | None): SCRAM-SHA-512 users (the first is the super user);
            None: a PLAINTEXT listener.

    Attributes:
        cluster (LocalKafka): the cluster, for node-level faults (``stop_node``, ``start_node``).
        bootstrap_servers (str): every node's ``127.0.0.1:<port>``, the same across restarts.
    """

    kind = "apache-kafka"

    def __init__(self, root: Path, brokers: int = 1, scram_users: dict[str, str] | None = None):
        self.root = Path(root)
        self.cluster = LocalKafka(self.root / "kafka", brokers, scram_users)
        _STARTED.add(self)
        self.cluster.start()
        self.bootstrap_servers = self.cluster.bootstrap_servers

    @property
    def running(self) -> bool:
        return self.cluster.running()

    def stop(self, hard: bool = True) -> None:
        """Stop every node: SIGKILL (a crash) when ``hard``, else a controlled shutdown."""
        self.cluster.stop(hard=hard)

    def start(self) -> None:
        """Start the stopped nodes again, on the same ports, with their data."""
        self.cluster.start()

    def restart(self, hard: bool = True) -> None:
        self.stop(hard)
        self.start()

    def close(self) -> None:
        self.cluster.stop(hard=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivateBroker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


#: Every PrivateBroker of this process: a test that fails before it stops its broker must not
#: leave a JVM running (and taking CPU) for the rest of the session.
_STARTED: weakref.WeakSet[PrivateBroker] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for broker in list(_STARTED):
        broker.cluster.stop(hard=True)
