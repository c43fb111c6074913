"""Driver-side resolution: what a format name means for a Spark job, computed once per query.

Distribution lists, multiple-element names and ``PUBLIC=`` names are resolved on the driver
through the queue manager (registry and directory), exactly as a facade ``open_queue`` would;
executors only receive the result (topics, format names, broker settings), which is plain data
and pickles.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from facade.config import KmqConfig
from facade.formatnames import parse_queue_reference
from facade.kafka import resolve_bootstrap_servers
from facade.manager import QueueManager

__all__ = ["QueueTarget", "Resolution", "resolve"]


@dataclass(frozen=True)
class QueueTarget:
    """One concrete queue of a resolved name.

    Attributes:
        format_name (str): the queue's own format name (PROPID_M_DEST_QUEUE of its copies).
        data_topic (str): the Kafka topic holding its messages (one partition).
        receipts_topic (str): the topic holding its removal receipts.
        read_only (bool): a journal or dead-letter queue (readable, not writable).
        is_subqueue (bool): a subqueue (readable; messages enter only by being moved).
        queue_guid (str | None): PROPID_Q_INSTANCE (None for system queues), for
            acknowledgments.
    """

    format_name: str
    data_topic: str
    receipts_topic: str
    read_only: bool = False
    is_subqueue: bool = False
    queue_guid: str | None = None


@dataclass(frozen=True)
class Resolution:
    """A format name resolved for a Spark job.

    Attributes:
        format_name (str): the canonical text the user gave (PROPID_M_DEST_FORMAT_NAME).
        targets (tuple[QueueTarget, ...]): its queues, duplicates removed, in element order.
        bootstrap_servers (str): Kafka ``bootstrap.servers``.
        kafka_options (dict[str, str]): extra librdkafka properties (TLS, SASL).
        queue_manager (str), queue_manager_guid (str): the driver's queue manager, which
            stamps ``source_machine_id`` on messages written by the job.
        home (str): the driver's ``KMQ_HOME``.
    """

    format_name: str
    targets: tuple[QueueTarget, ...]
    bootstrap_servers: str
    kafka_options: dict[str, str] = field(default_factory=dict)
    queue_manager: str = ""
    queue_manager_guid: str = ""
    home: str = ""

    @property
    def topics(self) -> list[str]:
        """The data topics, in order."""
        return [target.data_topic for target in self.targets]

    def to_json(self) -> str:
        """JSON text, for a data-source option (options are strings)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Resolution:
        """Inverse of :meth:`to_json`."""
        doc = json.loads(text)
        doc["targets"] = tuple(QueueTarget(**t) for t in doc["targets"])
        return cls(**doc)


def resolve(format_name: str, *, for_send: bool = False, config: KmqConfig | None = None,
            **overrides: Any) -> Resolution:
    """Resolve ``format_name`` through a queue manager on the driver.

    Args:
        format_name (str): any path or format name: a queue, ``PUBLIC=``, ``DL=``, a
            multiple-element name, a journal or dead-letter queue, an admin queue.
        for_send (bool): resolve for writing: checks Send To on directory objects and refuses
            read-only queues and subqueues.
        config (KmqConfig | None): configuration; default :meth:`KmqConfig.load`.
        **overrides: passed to :meth:`KmqConfig.load` (e.g. ``bootstrap_servers=``).

    Raises:
        FormatNameError, QueueNotFound, DirectoryUnavailable, AccessDenied: as
            :meth:`QueueManager.open_queue`.
        UnsupportedFormatNameOperation: ``for_send`` and a read-only queue or subqueue.
        BrokerUnavailable: no broker.
    """
    from facade.errors import UnsupportedFormatNameOperation

    config = config or KmqConfig.load(**overrides)
    with QueueManager.open(config) as manager:
        reference = parse_queue_reference(format_name)
        destinations = manager.destinations(reference, for_send=for_send)
        targets = []
        for destination in destinations:
            if for_send and (destination.read_only or destination.is_subqueue):
                raise UnsupportedFormatNameOperation(
                    f"{destination.format_name!r} cannot be written to (journal, dead-letter "
                    "queue or subqueue)", queue=destination.format_name)
            properties = destination.properties
            targets.append(QueueTarget(
                format_name=destination.format_name, data_topic=destination.topics.data,
                receipts_topic=destination.topics.receipts, read_only=destination.read_only,
                is_subqueue=destination.is_subqueue,
                queue_guid=properties.instance if properties else None))
        return Resolution(
            format_name=str(reference), targets=tuple(targets),
            bootstrap_servers=resolve_bootstrap_servers(config),
            kafka_options=dict(config.kafka_options), queue_manager=manager.name,
            queue_manager_guid=str(manager.guid), home=str(config.home))
