"""The Kafka settings of kmq's topics, and the message size limits they allow.

Pure: no Kafka client here. ``facade.kafka.librdkafka`` creates topics with these settings and
``kmq doctor`` checks existing topics against them (see docs/design.md, "Kafka topic settings").

Sizes:

* :data:`MAX_BODY_BYTES` (4 MiB) is the largest body kmq carries: MSMQ's limit, defined with
  the message model (:mod:`facade.model.message`) and refused above it at every send.
* :data:`MAX_RECORD_BYTES` (4.25 MiB) is the largest Kafka record a send may produce: the body
  plus its envelope (label, format names, properties, headers). A larger one is refused before
  it is stored or produced (``InvalidParameter``), so no record the broker can never accept
  enters the outgoing queue.
* :data:`MAX_MESSAGE_BYTES` (5 MiB) is the producers' ``message.max.bytes`` and the
  ``max.message.bytes`` of every topic that carries messages. It exceeds
  :data:`MAX_RECORD_BYTES` so that what the queue manager writes about an accepted message
  still fits: a dead-letter copy with a ``kmq.reason`` property, a NACK that returns the body,
  and the record batch framing. On Kafka the topic-level ``max.message.bytes`` is what lets
  records past the broker's default (``message.max.bytes``, about 1 MB) in.

Retention: every topic but the registries has ``cleanup.policy=delete`` with
``retention.ms=-1`` and ``retention.bytes=-1``: a message lives until it is received, expires
or is purged, and a receipt as long as the message it removed. The registries are compacted.
"""

from __future__ import annotations

from collections.abc import Sequence

from facade.model.message import MAX_BODY_BYTES
from facade.model.topics import TopicRole, topic_role

__all__ = [
    "KAFKA_DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_BODY_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_RECORD_BYTES",
    "record_size",
    "topic_config",
]

#: The largest Kafka record (value + key + headers, bytes) a send produces: a 4 MiB body and up
#: to 256 KiB of envelope. Larger messages are refused at send with ``InvalidParameter``.
MAX_RECORD_BYTES = MAX_BODY_BYTES + 256 * 1024
#: Producers' ``message.max.bytes`` and message topics' ``max.message.bytes``, in bytes.
MAX_MESSAGE_BYTES = 5 * 1024 * 1024
#: Kafka's default ``max.message.bytes`` (the broker's ``message.max.bytes``), in bytes: a
#: record no larger fits any topic whose limit nobody lowered.
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588

_KEEP_UNTIL_REMOVED = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
_ROLE_CONFIG: dict[TopicRole, dict[str, str]] = {
    TopicRole.MESSAGES: {**_KEEP_UNTIL_REMOVED, "max.message.bytes": str(MAX_MESSAGE_BYTES)},
    TopicRole.RECEIPTS: dict(_KEEP_UNTIL_REMOVED),
    TopicRole.REGISTRY: {"cleanup.policy": "compact"},
    # A snapshot of a long queue may pass Kafka's default record limit.
    TopicRole.SNAPSHOTS: {"cleanup.policy": "compact", "max.message.bytes": str(MAX_MESSAGE_BYTES)},
}


def topic_config(topic: str, min_insync_replicas: int) -> dict[str, str]:
    """The topic-level configuration kmq creates ``topic`` with.

    Args:
        topic (str): a Kafka topic name; its role (:func:`facade.model.topics.topic_role`) decides
            retention and size settings. A topic that is not kmq's gets only
            ``min.insync.replicas``.
        min_insync_replicas (int): ``min.insync.replicas``, already capped at the replication
            factor the topic gets.

    Returns:
        dict[str, str]: Kafka topic configs (``cleanup.policy``, ``retention.ms``,
        ``retention.bytes``, ``max.message.bytes``, ``min.insync.replicas``).
    """
    role = topic_role(topic)
    config = dict(_ROLE_CONFIG[role]) if role is not None else {}
    config["min.insync.replicas"] = str(min_insync_replicas)
    return config


def record_size(key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes]] | None) -> int:
    """The size of a Kafka record as producers and brokers count it against their limits:
    key, value, and each header's name and value, in bytes (framing excluded, which the
    headroom of :data:`MAX_MESSAGE_BYTES` over :data:`MAX_RECORD_BYTES` covers).

    Args:
        key (bytes | None): the record key.
        value (bytes | None): the record value.
        headers (Sequence[tuple[str, bytes]] | None): header name and value pairs.

    Returns:
        int: bytes.
    """
    size = len(key or b"") + len(value or b"")
    for name, header in headers or ():
        size += len(name.encode("utf-8")) + len(header or b"")
    return size
