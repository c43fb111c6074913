"""The local dev stack: an Apache Kafka cluster on loopback and the embedded directory.

``kmq dev up`` starts Apache Kafka (:mod:`facade.kafka.localkafka`: KRaft combined mode, one node or
three voters) with its log dirs under ``$KMQ_HOME/dev/kafka``, so queues and messages survive
``kmq dev down`` / ``kmq dev up`` and a crash; it also initialises the embedded directory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from facade.config import KmqConfig
from facade.kafka.localkafka import LocalKafka

__all__ = ["DevStack", "DevStatus"]


@dataclass(frozen=True)
class DevStatus:
    """What ``kmq dev status`` reports.

    Attributes:
        broker (LocalKafka | None): the dev cluster when at least one node runs, else None.
        directory_path (str): the embedded directory's JSON file.
        directory_initialized (bool): the file exists.
        configured_bootstrap_servers (str | None): ``KMQ_BOOTSTRAP_SERVERS``/``kmq.toml`` value,
            which wins over the dev broker when set.
        warnings (tuple[str, ...]): things a user should know (a stopped node, an override).
    """

    broker: LocalKafka | None
    directory_path: str
    directory_initialized: bool
    configured_bootstrap_servers: str | None
    warnings: tuple[str, ...]

    def to_dict(self) -> dict:
        """JSON-ready form for ``--json``: ``broker`` is None or the cluster's
        :meth:`LocalKafka.to_dict` (``bootstrap_servers``, ``version``, ``nodes``,
        ``ready_seconds``...)."""
        data = asdict(self) if self.broker is None else {
            **{key: value for key, value in self.__dict__.items() if key != "broker"},
            "broker": self.broker.to_dict(),
        }
        data["warnings"] = list(self.warnings)
        return data


class DevStack:
    """The local dev stack of one ``KMQ_HOME``: a Kafka cluster and the embedded directory.

    Args:
        config (KmqConfig): gives the state directory and the embedded directory path.
    """

    def __init__(self, config: KmqConfig):
        self.config = config
        self.state_dir = config.dev_state_dir

    @property
    def kafka_dir(self) -> Path:
        """The dev cluster's folder (config, log dirs, broker logs)."""
        return self.state_dir / "kafka"

    def cluster(self, brokers: int | None = None) -> LocalKafka:
        """The dev cluster, running or not.

        Args:
            brokers (int | None): nodes for a new cluster; None: the existing cluster's count,
                or 1 for a new one.

        Raises:
            ConfigurationError: the existing cluster has another node count than ``brokers``.
        """
        return LocalKafka(self.kafka_dir, brokers)

    def running_broker(self) -> LocalKafka | None:
        """The dev cluster if at least one of its nodes runs, else None."""
        cluster = self.cluster()
        return cluster if any(node.alive() for node in cluster.nodes) else None

    def up(self, brokers: int | None = None) -> DevStatus:
        """Start the cluster's stopped nodes (formatting a new cluster first) and initialise the
        embedded directory.

        Args:
            brokers (int | None): nodes of a new cluster (1, or 3 for three voters with
                replication factor 3 and ``min.insync.replicas`` 2); None: as it is, or 1.

        Returns:
            DevStatus: the state after start-up.

        Raises:
            ConfigurationError: no Java 17+, Maven cannot resolve the broker's jars, or an
                existing cluster has another node count.
            BrokerUnavailable: a node did not start.
            DirectoryUnavailable: the embedded directory file cannot be written.
        """
        self.cluster(brokers).start()
        self._initialize_directory()
        return self.status()

    def down(self) -> bool:
        """Stop the dev cluster (Kafka's controlled shutdown). Its data and the embedded
        directory are kept.

        Returns:
            bool: True if any node was running and was stopped.
        """
        return self.cluster().stop()

    def status(self) -> DevStatus:
        """Report what runs where."""
        broker = self.running_broker()
        warnings = []
        if broker is not None:
            stopped = [str(node.node_id) for node in broker.nodes if not node.alive()]
            if stopped:
                warnings.append(f"node(s) {', '.join(stopped)} of the dev cluster are not running: "
                                "`kmq dev up` starts them")
        if self.config.bootstrap_servers:
            warnings.append(
                f"KMQ_BOOTSTRAP_SERVERS/kmq.toml points kmq at {self.config.bootstrap_servers}; "
                "the dev broker is not used"
            )
        path = self.config.embedded_directory_path
        return DevStatus(broker, str(path), path.exists(), self.config.bootstrap_servers, tuple(warnings))

    def _initialize_directory(self) -> None:
        # Imported here: the directory package pulls in ldap3, which `kmq dev status` never needs.
        from facade.directory.embedded import EmbeddedDirectoryStore

        store = EmbeddedDirectoryStore(self.config.embedded_directory_path)
        try:
            store.open()
            store.initialize(self.config.directory.base_dn)
        finally:
            store.close()
