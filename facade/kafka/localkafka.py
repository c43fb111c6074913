"""Apache Kafka on loopback: the KRaft cluster that ``kmq dev up``, the tests, the demo and the
bench start.

The broker is Apache Kafka itself, the release pinned in ``deploy/kafka/pom.xml``, run from the
jars Maven resolves into kmq's jar cache (:mod:`facade.kafka.mavenjars`); kmq writes no broker of its
own. Each node is one JVM in KRaft combined mode (``process.roles=broker,controller``) with a
static quorum of every node (``controller.quorum.voters``), so one node is a standalone cluster
and three nodes are three voters that survive the loss of one.

A cluster lives in one folder::

    ROOT/cluster.json            cluster id, Kafka version, nodes and their ports, SCRAM users
    ROOT/node-N/server.properties, log4j2.properties
    ROOT/node-N/data/            the log dirs: topics survive a stop, a restart and a crash
    ROOT/node-N/server.log       the broker's log4j2 log (never the terminal)
    ROOT/node-N/stdout.log       what the JVM itself prints (crash reports, out of memory)

Ports are free loopback ports chosen at the first start and kept while they stay free, so clients
reconnect to the same ``bootstrap.servers`` after a restart. Only 127.0.0.1 is ever bound.

Sizing for a 2-core, 24 GiB machine (``docs/performance.md`` has the figures): a 1 GiB heap cap
per node (the JVM commits what it uses), two network and four I/O threads, and the internal
topics (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``) with 8
partitions instead of 50, which a one-machine cluster cannot use and which slow the first group
join. Share groups are on (``share.version=2``: KIP-932 share groups with KIP-1191 dead-letter
topics).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from facade._process import pid_alive
from facade.errors import BrokerUnavailable, ConfigurationError
from facade.kafka.mavenjars import find_java, pom_property, resolve_jars

__all__ = ["KAFKA_POM", "SCRAM_MECHANISM", "KafkaNode", "LocalKafka", "kafka_version"]

#: The POM under ``deploy/`` that pins the broker release.
KAFKA_POM = "kafka/pom.xml"
#: The SASL mechanism of a cluster started with SCRAM users.
SCRAM_MECHANISM = "SCRAM-SHA-512"
#: Seconds a node may take from JVM start to "Kafka Server started" on a busy 2-core machine.
START_TIMEOUT = 180.0
#: Seconds a node may take for a controlled shutdown before it is killed.
STOP_TIMEOUT = 30.0
_READY_LINE = b"Kafka Server started"
_STATE_FILE = "cluster.json"
_INTERNAL_TOPIC_PARTITIONS = 8
_JVM_OPTIONS = (
    "-Xms256m", "-Xmx1g",
    # Kafka's own launch script's G1 settings (kafka-run-class.sh).
    "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
)


def kafka_version() -> str:
    """The Apache Kafka release kmq starts (``kafka.version`` in ``deploy/kafka/pom.xml``)."""
    return pom_property(KAFKA_POM, "kafka.version")


@dataclass
class KafkaNode:
    """One JVM of a local cluster.

    Attributes:
        node_id (int): Kafka ``node.id``, 1-based.
        port (int): the client listener's loopback port.
        controller_port (int): the KRaft controller listener's loopback port.
        pid (int | None): the running process, or None.
    """

    node_id: int
    port: int
    controller_port: int
    pid: int | None = None

    def alive(self) -> bool:
        """True if the recorded process still exists."""
        return self.pid is not None and pid_alive(self.pid)


@dataclass
class _ClusterRecord:
    cluster_id: str
    version: str
    nodes: list[KafkaNode]
    scram_users: dict[str, str] = field(default_factory=dict)
    started_at: float | None = None
    ready_seconds: float | None = None


class LocalKafka:
    """An Apache Kafka KRaft cluster of ``brokers`` nodes on 127.0.0.1, kept under ``root``.

    Creating the object starts nothing; :meth:`start` formats the log dirs on first use and
    starts every node. A cluster that already exists under ``root`` keeps its id, data, node
    count and SCRAM users (the arguments only apply to a new one).

    Args:
        root (Path): the cluster's folder (see the module docstring).
        brokers (int | None): nodes, 1 to 9; each is a broker and a controller voter. None: the
            existing cluster's count, or 1 for a new one.
        scram_users (Mapping[str, str] | None): user name -> password. When given, the client
            listener is ``SASL_PLAINTEXT`` with SCRAM-SHA-512 (the users are written into the
            log dirs when they are formatted), ``StandardAuthorizer`` checks Kafka ACLs and
            refuses what no ACL allows, and the first user is the brokers' own identity and a
            super user. The controller listener stays PLAINTEXT, and whoever connects to it
            is ``User:ANONYMOUS``, a super user too (SCRAM credentials live in the metadata
            the controllers serve, so they cannot authenticate each other with them): this
            secures the client listener for tests and development, with every port on
            loopback, not a deployment. None: a ``PLAINTEXT`` listener and no authorizer.

    Raises:
        ConfigurationError: ``brokers`` out of range, or ``root`` holds a cluster of another
            shape than asked for.
    """

    def __init__(self, root: Path, brokers: int | None = None,
                 scram_users: Mapping[str, str] | None = None):
        self.root = Path(root)
        self._record = self._load()
        if brokers is None:
            brokers = len(self._record.nodes) if self._record else 1
        if isinstance(brokers, bool) or not isinstance(brokers, int) or not 1 <= brokers <= 9:
            raise ConfigurationError(f"brokers={brokers!r}: a local cluster has 1 to 9 nodes",
                                     hint="use kmq dev up --brokers 1 or --brokers 3")
        if self._record is not None and len(self._record.nodes) != brokers:
            raise ConfigurationError(
                f"{self.root} holds a {len(self._record.nodes)}-node cluster, not {brokers}",
                hint=f"run with --brokers {len(self._record.nodes)}, or remove {self.root} "
                     "(its queues and messages with it) to start another")
        self._brokers = brokers
        self._scram_users = dict(scram_users or {})
        self._processes: dict[int, subprocess.Popen] = {}

    # --- What it is -----------------------------------------------------------------------

    @property
    def exists(self) -> bool:
        """True once the cluster was formatted under ``root``."""
        return self._record is not None

    @property
    def nodes(self) -> list[KafkaNode]:
        """The nodes (empty before the first :meth:`start`)."""
        return [] if self._record is None else list(self._record.nodes)

    @property
    def bootstrap_servers(self) -> str:
        """Kafka ``bootstrap.servers``: every node's client listener.

        Raises:
            BrokerUnavailable: the cluster was never started.
        """
        if self._record is None:
            raise BrokerUnavailable(f"no Kafka cluster was started under {self.root}",
                                    hint="run `kmq dev up`")
        return ",".join(f"127.0.0.1:{node.port}" for node in self._record.nodes)

    @property
    def cluster_id(self) -> str | None:
        """The KRaft cluster id, or None before the first start."""
        return None if self._record is None else self._record.cluster_id

    @property
    def version(self) -> str:
        """The Kafka release of this cluster (the pinned one for a new cluster)."""
        return kafka_version() if self._record is None else self._record.version

    @property
    def scram_users(self) -> dict[str, str]:
        """SCRAM user -> password of a SASL cluster (empty for PLAINTEXT)."""
        return dict(self._record.scram_users if self._record else self._scram_users)

    @property
    def security_protocol(self) -> str:
        """``SASL_PLAINTEXT`` for a cluster with SCRAM users, else ``PLAINTEXT``."""
        return "SASL_PLAINTEXT" if self.scram_users else "PLAINTEXT"

    @property
    def ready_seconds(self) -> float | None:
        """Seconds the last :meth:`start` took from launching the JVMs to every node started."""
        return None if self._record is None else self._record.ready_seconds

    def node(self, node_id: int) -> KafkaNode:
        """The node with this ``node.id``.

        Raises:
            ConfigurationError: no such node.
        """
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise ConfigurationError(f"the cluster under {self.root} has no node {node_id}")

    def node_dir(self, node_id: int) -> Path:
        """The folder of one node (config, data, logs)."""
        return self.root / f"node-{node_id}"

    def log_path(self, node_id: int = 1) -> Path:
        """The broker log of one node."""
        return self.node_dir(node_id) / "server.log"

    def running(self) -> bool:
        """True if every node's process is alive."""
        return bool(self.nodes) and all(node.alive() for node in self.nodes)

    def active_controller(self) -> int | None:
        """The ``node.id`` of the active KRaft controller, as the running nodes last recorded it.

        Read from each running node's ``quorum-state`` file (the leader of the highest epoch),
        not from a client: a Kafka broker answers DescribeCluster and Metadata with a random
        broker as "controller", since clients never talk to a KRaft controller.

        Returns:
            int | None: the node id; None while no running node knows of a leader (an election
            under way, or too few voters running for one).
        """
        best: tuple[int, int] | None = None
        for node in self.nodes:
            if not node.alive():
                continue
            path = self.node_dir(node.node_id) / "data" / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (FileNotFoundError, ValueError):
                continue  # not written yet, or caught mid-write: the other nodes tell
            epoch, leader = state.get("leaderEpoch", -1), state.get("leaderId", -1)
            if isinstance(leader, int) and leader > 0 and isinstance(epoch, int) \
                    and (best is None or epoch > best[0]):
                best = (epoch, leader)
        return None if best is None else best[1]

    def to_dict(self) -> dict:
        """JSON-ready state for ``kmq dev status --json``."""
        record = self._record
        return {
            "kind": "apache-kafka",
            "version": self.version,
            "cluster_id": self.cluster_id,
            "bootstrap_servers": self.bootstrap_servers if record else None,
            "security_protocol": self.security_protocol,
            "sasl_mechanism": SCRAM_MECHANISM if self.scram_users else None,
            "nodes": [{**asdict(node), "alive": node.alive(), "log_path": str(self.log_path(node.node_id))}
                      for node in self.nodes],
            "data_dir": str(self.root),
            "started_at": record.started_at if record else None,
            "ready_seconds": record.ready_seconds if record else None,
        }

    # --- Start and stop -------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Format the cluster on first use, start every node that is not running, and wait
        until each one logs that it started (for a broker: registered and unfenced).

        Args:
            timeout (float): seconds to wait for the nodes, in all.

        Raises:
            ConfigurationError: no Java 17+, or the broker's jars are not cached and Maven
                cannot resolve them.
            BrokerUnavailable: a node exited or did not start in time (the message has its
                log's last lines).
        """
        java = find_java()
        jars = resolve_jars(KAFKA_POM)
        if self._record is None:
            self._record = self._new_record()
        self._assign_ports(node for node in self._record.nodes if not node.alive())
        for node in self._record.nodes:
            self._write_config(node)
        for node in self._record.nodes:
            if not (self.node_dir(node.node_id) / "data" / "meta.properties").is_file():
                self._format(java, jars, node)
        launched = time.monotonic()
        offsets = {}
        for node in self._record.nodes:
            if not node.alive():
                offsets[node.node_id] = self._launch(java, jars, node)
        self._record.started_at = time.time()
        self._save()
        deadline = launched + timeout
        for node_id, offset in offsets.items():
            self._wait_started(self.node(node_id), offset, deadline)
        if offsets:
            self._record.ready_seconds = round(time.monotonic() - launched, 2)
            self._save()

    def start_node(self, node_id: int, timeout: float = START_TIMEOUT) -> None:
        """Start one stopped node again (a fault test's restart) and wait for it.

        Raises:
            BrokerUnavailable: it did not start (see :meth:`start`).
        """
        node = self.node(node_id)
        if node.alive():
            return
        java, jars = find_java(), resolve_jars(KAFKA_POM)
        assert self._record is not None  # node() found it
        self._assign_ports([node])
        self._write_config_all()
        offset = self._launch(java, jars, node)
        self._save()
        self._wait_started(node, offset, time.monotonic() + timeout)

    def stop_node(self, node_id: int, hard: bool = False, timeout: float = STOP_TIMEOUT) -> None:
        """Stop one node: SIGKILL (a crash) when ``hard``, else SIGTERM (Kafka's controlled
        shutdown), then SIGKILL after ``timeout`` seconds. A stopped node is left alone."""
        self.stop(hard=hard, timeout=timeout, node_ids=[node_id])

    def stop(self, hard: bool = False, timeout: float = STOP_TIMEOUT,
             node_ids: Iterable[int] | None = None) -> bool:
        """Stop the cluster's nodes (all, or ``node_ids``); their data stays.

        Returns:
            bool: True if any node was running.
        """
        wanted = None if node_ids is None else set(node_ids)
        nodes = [node for node in self.nodes
                 if node.alive() and (wanted is None or node.node_id in wanted)]
        for node in nodes:
            _signal(node.pid, signal.SIGKILL if hard else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in nodes:
            while pid_alive(node.pid) and time.monotonic() < deadline:
                self._reap(node)
                time.sleep(0.05)
            if pid_alive(node.pid):
                _signal(node.pid, signal.SIGKILL)
            self._reap(node, block=True)
            node.pid = None
        if self._record is not None:
            self._save()
        return bool(nodes)

    # --- Internals ------------------------------------------------------------------------

    def _load(self) -> _ClusterRecord | None:
        try:
            data = json.loads((self.root / _STATE_FILE).read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ConfigurationError(f"{self.root / _STATE_FILE} is not valid JSON: {exc}",
                                     hint=f"remove {self.root} to start a new cluster") from exc
        nodes = [KafkaNode(**node) for node in data.pop("nodes")]
        return _ClusterRecord(nodes=nodes, **data)

    def _save(self) -> None:
        assert self._record is not None
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / _STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self._record), indent=1))
        os.replace(tmp, path)

    def _new_record(self) -> _ClusterRecord:
        nodes = [KafkaNode(node_id, 0, 0) for node_id in range(1, self._brokers + 1)]
        return _ClusterRecord(_cluster_id(), kafka_version(), nodes, dict(self._scram_users))

    def _assign_ports(self, nodes: Iterable[KafkaNode]) -> None:
        """Keep each node's ports while they are free; pick new free ones otherwise (a static
        quorum takes its voters from the configuration, so new ports need no re-format)."""
        taken = {port for node in self.nodes for port in (node.port, node.controller_port)}
        for node in nodes:
            if not (node.port and node.controller_port and _port_free(node.port)
                    and _port_free(node.controller_port)):
                node.port, node.controller_port = _free_ports(2, avoid=taken)
                taken.update((node.port, node.controller_port))

    def _write_config_all(self) -> None:
        for node in self.nodes:
            self._write_config(node)

    def _write_config(self, node: KafkaNode) -> None:
        assert self._record is not None
        directory = self.node_dir(node.node_id)
        (directory / "data").mkdir(parents=True, exist_ok=True)
        replicas = min(3, len(self._record.nodes))
        min_isr = 2 if replicas >= 3 else 1
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self._record.nodes)
        listener = self.security_protocol
        settings = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"{listener}://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"{listener}://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": listener,
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{listener}:{listener}",
            "log.dirs": directory / "data",
            "auto.create.topics.enable": "false",
            "num.partitions": 1,
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": _INTERNAL_TOPIC_PARTITIONS,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": _INTERNAL_TOPIC_PARTITIONS,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "share.coordinator.state.topic.num.partitions": _INTERNAL_TOPIC_PARTITIONS,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2,
            "num.io.threads": 4,
            "background.threads": 4,
            "num.recovery.threads.per.data.dir": 2,
            "log.cleaner.threads": 1,
        }
        users = self._record.scram_users
        if users:
            admin, password = next(iter(users.items()))
            settings.update({
                "sasl.enabled.mechanisms": SCRAM_MECHANISM,
                "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
                f"listener.name.{listener.lower()}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{admin}" password="{password}";',
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                # The controller listener is PLAINTEXT on loopback: the nodes reach each other's
                # controllers as ANONYMOUS, which the authorizer must let through.
                "super.users": f"User:{admin};User:ANONYMOUS",
                "allow.everyone.if.no.acl.found": "false",
            })
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        (directory / "server.properties").write_text(text)
        (directory / "log4j2.properties").write_text(_log4j2_config(directory / "server.log"))

    def _format(self, java: Path, jars: Path, node: KafkaNode) -> None:
        assert self._record is not None
        directory = self.node_dir(node.node_id)
        argv = [str(java), "-cp", f"{jars}/*",
                f"-Dlog4j2.configurationFile={directory / 'log4j2.properties'}",
                "kafka.tools.StorageTool", "format", "-t", self._record.cluster_id,
                "-c", str(directory / "server.properties"), "--feature", "share.version=2"]
        for user, password in self._record.scram_users.items():
            argv += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                                stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise BrokerUnavailable(
                f"formatting Kafka node {node.node_id}'s log dir under {directory} failed "
                f"(exit {result.returncode}): {(result.stdout + result.stderr).strip()[-600:]}",
                hint=f"remove {self.root} to start a new cluster")

    def _launch(self, java: Path, jars: Path, node: KafkaNode) -> int:
        """Start one node's JVM in its own session (it outlives the caller); returns the size of
        its log before the start, where :meth:`_wait_started` looks for the ready line."""
        directory = self.node_dir(node.node_id)
        log = directory / "server.log"
        offset = log.stat().st_size if log.exists() else 0
        argv = [str(java), *_JVM_OPTIONS, f"-Dlog4j2.configurationFile={directory / 'log4j2.properties'}",
                "-cp", f"{jars}/*", "kafka.Kafka", str(directory / "server.properties")]
        with (directory / "stdout.log").open("ab") as out:
            process = subprocess.Popen(argv, cwd=directory, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self._processes[node.node_id] = process
        node.pid = process.pid
        return offset

    def _wait_started(self, node: KafkaNode, offset: int, deadline: float) -> None:
        log = self.log_path(node.node_id)
        while True:
            with contextlib.suppress(FileNotFoundError), log.open("rb") as handle:
                if handle.seek(0, os.SEEK_END) < offset:
                    offset = 0  # the log rolled over during the start
                handle.seek(offset)
                if _READY_LINE in handle.read():
                    return
            if not node.alive() or time.monotonic() > deadline:
                self._reap(node)
                why = "exited" if not node.alive() else "did not start in time"
                raise BrokerUnavailable(
                    f"Kafka node {node.node_id} on 127.0.0.1:{node.port} {why}; last lines of "
                    f"{log}:\n{_tail(log)}{_tail(log.with_name('stdout.log'))}",
                    hint="read the broker log; `kmq dev down` then `kmq dev up` retries")
            time.sleep(0.1)

    def _reap(self, node: KafkaNode, block: bool = False) -> None:
        # A node started by this very process is our child: reap it so it does not linger as a
        # zombie that os.kill(pid, 0) still reports as existing.
        process = self._processes.pop(node.node_id, None) if block else self._processes.get(node.node_id)
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5 if block else 0)
            return
        if node.pid is not None:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(node.pid, 0 if block and not pid_alive(node.pid) else os.WNOHANG)


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 (Kafka's ``Uuid`` text form),
    never starting with ``-`` (Kafka's own generator avoids those too: they read as options)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As Kafka binds: a port whose last connections linger in TIME_WAIT is free to listen on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_ports(count: int, avoid: set[int]) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago (all held open together,
    so two picks cannot return the same one)."""
    sockets: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in avoid:
                ports.append(port)
        return ports
    finally:
        for sock in sockets:
            sock.close()


def _log4j2_config(path: Path) -> str:
    return (
        "status = warn\n"
        "appender.file.type = RollingFile\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {path}\n"
        f"appender.file.filePattern = {path}.%i\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "appender.file.policies.type = Policies\n"
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy\n"
        "appender.file.policies.size.size = 50MB\n"
        "appender.file.strategy.type = DefaultRolloverStrategy\n"
        "appender.file.strategy.max = 2\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
        # Per-request and per-partition chatter would fill the file in a test session.
        "logger.state.name = state.change.logger\nlogger.state.level = WARN\n"
        "logger.request.name = kafka.request.logger\nlogger.request.level = WARN\n"
    )


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:]) + "\n"


def _signal(pid: int | None, sig: signal.Signals) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
