"""Kafka topic names for kmq queues (see docs/design.md, "Naming").

Each MSMQ queue is a set of Kafka topics under the prefix ``kmq.<queue manager>.``::

    kmq.<qm>.private.<name>              the queue's messages (data)
    kmq.<qm>.public.<name>
    <data>.receipts                      removal receipts of any data topic
    <data>.journal                       the queue journal (;JOURNAL, Queue\\Journal$)
    <data>.sub.<subqueue>                a subqueue (;poison)
    kmq.<qm>.system.deadletter|deadxact|journal
                                         the queue manager's system queues
    kmq.<qm>.system.idblocks             message-id block leases (not a queue)
    __kmq.queues, __kmq.queue_managers   the registries

Names are escaped with :func:`escape_name`, whose output never contains ``.``, so the ``.``
separators split a topic name without ambiguity. An escaped name never has ``_`` followed by
``p``, ``s``, ``j`` or ``r`` (after ``_`` come hex digits, another ``_`` or the ``h`` of a hashed
name), while the separator before each fixed word (``private``, ``public``, ``system``,
``journal``, ``sub``, ``receipts``) is followed by one of those letters. So the topics of distinct
queues still differ when ``.`` and ``_`` are treated alike, as Kafka's metric names do (Kafka
warns about topics that collide that way).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import re
from dataclasses import dataclass

from facade.errors import InvalidParameter, UnsupportedFormatNameOperation
from facade.model.formatnames import QueuePath, SystemQueue

__all__ = [
    "MAX_ESCAPED_NAME_LENGTH",
    "MAX_TOPIC_LENGTH",
    "QUEUE_MANAGER_REGISTRY_TOPIC",
    "QUEUE_MANAGER_SECURITY_TOPIC",
    "QUEUE_REGISTRY_TOPIC",
    "TOPIC_PREFIX",
    "QueueTopics",
    "TopicRole",
    "escape_name",
    "id_block_topic",
    "is_topic_name",
    "queue_topics",
    "snapshot_topic",
    "system_topics",
    "topic_role",
    "topics_for_path",
    "transactional_id_prefix",
]

#: Prefix of every queue topic; the registries start with ``__kmq.`` instead.
TOPIC_PREFIX = "kmq."
#: Compacted topic of queue definitions (latest record per queue wins).
QUEUE_REGISTRY_TOPIC = "__kmq.queues"
#: Compacted topic of queue managers (name -> GUID; the first valid record per name wins).
QUEUE_MANAGER_REGISTRY_TOPIC = "__kmq.queue_managers"
#: Compacted topic of queue managers' security descriptors (latest record per name wins).
QUEUE_MANAGER_SECURITY_TOPIC = "__kmq.queue_manager_security"
#: Longest topic name Kafka accepts (characters).
MAX_TOPIC_LENGTH = 249
#: Longest escaped name kept whole; longer ones are shortened with a hash.
MAX_ESCAPED_NAME_LENGTH = 150

_HASHED_PREFIX_LENGTH = 130
_HASH_HEX_DIGITS = 16
_KEPT = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-")
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,%d}" % MAX_TOPIC_LENGTH)
_RECEIPTS_SUFFIX = ".receipts"
_QUEUE_KINDS = ("private", "public")
_SNAPSHOTS = "snapshots"


def escape_name(name: str) -> str:
    """Escape a queue, subqueue or queue manager name into one segment of a Kafka topic name.

    The name is lowercased (MSMQ names are case-insensitive). ``[a-z0-9-]`` is kept; every other
    byte of the UTF-8 form, ``_`` and ``.`` included, becomes ``_xx`` (two lowercase hex digits).
    An escaped name longer than 150 characters becomes its first 130 characters, ``_h`` and the
    first 16 hex digits of the SHA-256 of the lowercased name's UTF-8 bytes (148 characters).

    Names that differ after lowercasing always escape differently as long as neither is hashed
    (``_`` is always followed by two hex digits there, so the escape can be undone), and a hashed
    name (which has ``_h``) never equals an unhashed one.

    Args:
        name (str): the name, as MSMQ spells it (any case).

    Returns:
        str: a non-empty string of ``[a-z0-9_-]``, at most 150 characters, never containing ``.``.

    Raises:
        InvalidParameter: ``name`` is not a str, is empty, or holds a lone surrogate that UTF-8
            cannot encode; pass the queue name as parsed by ``facade.parse_path_name``.
    """
    data = _utf8_of_lowercase(name)
    escaped = "".join(chr(byte) if byte in _KEPT else f"_{byte:02x}" for byte in data)
    if len(escaped) <= MAX_ESCAPED_NAME_LENGTH:
        return escaped
    digest = hashlib.sha256(data).hexdigest()[:_HASH_HEX_DIGITS]
    return f"{escaped[:_HASHED_PREFIX_LENGTH]}_h{digest}"


def _utf8_of_lowercase(name: str) -> bytes:
    if not isinstance(name, str) or not name:
        raise InvalidParameter(
            f"a kmq topic needs a non-empty name, not {name!r}",
            hint="name the queue, subqueue or queue manager",
        )
    try:
        return name.lower().encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidParameter(
            f"name {name!r} cannot be encoded as UTF-8 ({exc.reason})",
            hint="remove lone surrogate characters from the name",
        ) from None


def is_topic_name(name: object) -> bool:
    """Whether ``name`` is a str Kafka accepts as a topic name (1-249 of ``[a-zA-Z0-9._-]``,
    not ``.`` or ``..``)."""
    return isinstance(name, str) and bool(_LEGAL_TOPIC.fullmatch(name)) \
        and name not in (".", "..")


def _check_topic(topic: str) -> None:
    """Raise InvalidParameter unless ``topic`` is a topic name Kafka accepts."""
    if is_topic_name(topic):
        return
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidParameter(
            f"Kafka topic name {topic[:60]!r}... is {len(topic)} characters, more than Kafka's "
            f"limit of {MAX_TOPIC_LENGTH}",
            hint="use a shorter queue manager, queue or subqueue name (escaped characters such as "
            "'_', '.' and non-ASCII letters take 3 characters per UTF-8 byte)",
        )
    raise InvalidParameter(
        f"{topic!r} is not a legal Kafka topic name",
        hint="Kafka topic names are 1-249 characters of ASCII letters, digits, '.', '_' and '-', "
        "other than '.' and '..'",
    )


@dataclass(frozen=True)
class QueueTopics:
    """The Kafka topics of one MSMQ queue: its data topic and its receipts topic.

    Build it with :func:`queue_topics`, :func:`system_topics` or :func:`topics_for_path`, or
    from the two names kept in the queue registry, ``QueueTopics(data, receipts)``.

    Attributes:
        data (str): the topic of the queue's messages (one partition; the offset is the
            message's MSMQ lookup id).
        receipts (str): the removal receipts of the data topic (one partition; the first receipt
            naming an offset wins). Omitted or empty means ``data + ".receipts"``.

    Raises:
        InvalidParameter: ``data`` or ``receipts`` is not a legal Kafka topic name (more than 249
            characters, or a character outside ``[a-zA-Z0-9._-]``).
    """

    data: str
    receipts: str = ""

    def __post_init__(self) -> None:
        _check_topic(self.data)
        if not self.receipts:
            object.__setattr__(self, "receipts", self.data + _RECEIPTS_SUFFIX)
        _check_topic(self.receipts)

    def journal(self) -> QueueTopics:
        """The topics of this queue's journal (MSMQ ``;JOURNAL``): ``data + ".journal"``.

        Raises:
            UnsupportedFormatNameOperation: this is not a private or public queue (it is a
                journal, subqueue, system queue or registry), which has no journal; take the
                journal of the queue itself.
            InvalidParameter: the journal's topic name would exceed 249 characters.
        """
        self._require_queue("journal")
        return QueueTopics(f"{self.data}.journal")

    def subqueue(self, name: str) -> QueueTopics:
        """The topics of subqueue ``name`` (MSMQ ``queue;name``): ``data + ".sub." + escaped``.

        Args:
            name (str): the subqueue name, e.g. ``"poison"``; escaped with :func:`escape_name`.

        Raises:
            UnsupportedFormatNameOperation: this is not a private or public queue (it is a
                journal, subqueue, system queue or registry), which has no subqueues; take the
                subqueue of the queue itself.
            InvalidParameter: ``name`` is empty, or the subqueue's topic name would exceed 249
                characters (use a shorter subqueue name).
        """
        self._require_queue("subqueue")
        return QueueTopics(f"{self.data}.sub.{escape_name(name)}")

    def _require_queue(self, operation: str) -> None:
        # A plain queue's data topic is exactly kmq.<qm>.<private|public>.<name>: escaped names
        # hold no '.', so four parts mean no journal, subqueue or system suffix.
        parts = self.data.split(".")
        if len(parts) != 4 or parts[0] != TOPIC_PREFIX[:-1] or parts[2] not in _QUEUE_KINDS:
            raise UnsupportedFormatNameOperation(
                f"{operation}: topic {self.data!r} is not a private or public queue, so it has no "
                f"{operation}",
                queue=self.data,
                hint="journals and subqueues belong to a queue, not to a journal, subqueue or "
                "system queue",
            )


def queue_topics(queue_manager: str, queue_name: str, *, private: bool) -> QueueTopics:
    """The topics of a private or public queue: ``kmq.<qm>.private|public.<name>``.

    Args:
        queue_manager (str): the name of the queue manager (MSMQ computer) that owns the queue.
        queue_name (str): the queue name without ``private$\\``, e.g. ``"orders"``.
        private (bool): a private queue (``private$\\orders``) rather than a public one.

    Returns:
        QueueTopics: the data and receipts topics.

    Raises:
        InvalidParameter: a name is empty, or a topic name would exceed Kafka's 249 characters
            (use shorter names).
    """
    kind = "private" if private else "public"
    qm, name = escape_name(queue_manager), escape_name(queue_name)
    return QueueTopics(f"{TOPIC_PREFIX}{qm}.{kind}.{name}")


@functools.lru_cache(maxsize=64)
def system_topics(queue_manager: str, queue: SystemQueue) -> QueueTopics:
    """The topics of a queue manager's system queue: ``kmq.<qm>.system.<kind>``.

    ``<kind>`` is ``journal``, ``deadletter`` or ``deadxact``.

    Args:
        queue_manager (str): the name of the queue manager (MSMQ computer).
        queue (SystemQueue): the computer journal (``Journal$``), dead-letter queue
            (``Deadletter$``) or transactional dead-letter queue (``XactDeadletter$``).

    Returns:
        QueueTopics: the data and receipts topics.

    Raises:
        InvalidParameter: ``queue_manager`` is empty or so long that the topic name would exceed
            249 characters.

    Cached (the result is immutable and depends on the arguments only): every receive asks for
    its queue manager's dead-letter topic, and escaping the name byte by byte and checking the
    topic names cost several microseconds each time. A name that raises is not cached.
    """
    return QueueTopics(f"{TOPIC_PREFIX}{escape_name(queue_manager)}.system.{queue.value.lower()}")


def snapshot_topic(data_topic: str) -> str:
    """The topic of queue snapshots of the queue manager that ``data_topic`` belongs to:
    ``kmq.<qm>.system.snapshots``, compacted, keyed by data topic (see :mod:`facade.state.snapshot`).

    Like ``idblocks`` it is no queue: ``snapshots`` is not the name of a system queue.

    Args:
        data_topic (str): a queue's data topic (``kmq.<qm>....``).

    Returns:
        str: the topic name.

    Raises:
        InvalidParameter: ``data_topic`` is not under ``kmq.<qm>.``.
    """
    parts = data_topic.split(".")
    if len(parts) < 3 or parts[0] != TOPIC_PREFIX[:-1] or not parts[1]:
        raise InvalidParameter(f"{data_topic!r} is not a kmq queue topic (kmq.<qm>.<kind>...)",
                               hint="pass the data topic of a kmq queue")
    return f"{TOPIC_PREFIX}{parts[1]}.system.{_SNAPSHOTS}"


def id_block_topic(queue_manager: str) -> str:
    """The topic where a queue manager's processes lease blocks of message-id sequence numbers:
    ``kmq.<qm>.system.idblocks`` (see :mod:`facade.state.sequence`).

    It is no queue: it has no receipts topic and no path or format name reaches it. ``idblocks``
    is not the name of a system queue (``journal``, ``deadletter``, ``deadxact``), so it never
    equals a system queue's topic.

    Args:
        queue_manager (str): the name of the queue manager (MSMQ computer).

    Returns:
        str: the topic name.

    Raises:
        InvalidParameter: ``queue_manager`` is empty or so long that the topic name would exceed
            249 characters.
    """
    topic = f"{TOPIC_PREFIX}{escape_name(queue_manager)}.system.idblocks"
    _check_topic(topic)
    return topic


def transactional_id_prefix(queue_manager: str) -> str:
    """The start of the Kafka ``transactional.id`` of a queue manager's MSMQ transactions,
    ``kmq.<qm>.`` with the name as given (not escaped: a transactional id is no topic name), so
    that one prefixed Kafka ACL binding covers them (see :mod:`facade.state.kafka_acls`).

    Args:
        queue_manager (str): the name of the queue manager.

    Returns:
        str: the prefix.
    """
    return f"{TOPIC_PREFIX}{queue_manager}."


def topics_for_path(path: QueuePath, local_queue_manager: str) -> QueueTopics:
    """The topics of the queue an MSMQ path name designates.

    Args:
        path (QueuePath): a parsed path name (``facade.parse_path_name``).
        local_queue_manager (str): this process's queue manager name, which the local computer
            ``.`` stands for.

    Returns:
        QueueTopics: the topics of the queue, its journal (``Queue\\Journal$``), its subqueue
        (``Queue;name``) or the computer's system queue (``Computer\\Deadletter$``, ...).

    Raises:
        InvalidParameter: a topic name would exceed Kafka's 249 characters (use shorter names).
    """
    queue_manager = local_queue_manager if path.is_local else path.machine
    if path.system_queue is not None:
        return system_topics(queue_manager, path.system_queue)
    if path.queue_name is None:
        raise InvalidParameter(f"path {path} names neither a queue nor a system queue")
    topics = queue_topics(queue_manager, path.queue_name, private=path.private)
    if path.journal:
        return topics.journal()
    return topics if path.subqueue is None else topics.subqueue(path.subqueue)


class TopicRole(enum.Enum):
    """What a kmq topic holds, which decides its Kafka settings (see ``facade.model.topicsettings``).

    Attributes:
        MESSAGES: messages: a queue's data topic, its journal and subqueues, a system queue
            (dead-letter, transactional dead-letter, machine journal).
        RECEIPTS: the removal receipts of one of those.
        REGISTRY: a compacted registry (``__kmq.queues``, ``__kmq.queue_managers``).
        SNAPSHOTS: a queue manager's compacted queue snapshots (``kmq.<qm>.system.snapshots``).
    """

    MESSAGES = "messages"
    RECEIPTS = "receipts"
    REGISTRY = "registry"
    SNAPSHOTS = "snapshots"


def topic_role(topic: str) -> TopicRole | None:
    """The role of a topic named by kmq's rules, or None for a topic that is not kmq's.

    The name is parsed by its ``.``-separated parts, not by its suffix: escaped names hold no
    ``.``, so ``kmq.<qm>.private.receipts`` is the data topic of a queue named "receipts",
    while its receipts topic is ``kmq.<qm>.private.receipts.receipts``.

    Args:
        topic (str): a Kafka topic name.

    Returns:
        TopicRole | None: the role; None when ``topic`` does not follow kmq's naming (another
        application's topic, or a malformed name under ``kmq.``).
    """
    if topic in (QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC, QUEUE_MANAGER_SECURITY_TOPIC):
        return TopicRole.REGISTRY
    parts = topic.split(".")
    if len(parts) < 4 or parts[0] != TOPIC_PREFIX[:-1] or not all(parts):
        return None
    kind, suffix = parts[2], parts[4:]
    if kind == "system" and parts[3] == _SNAPSHOTS and not suffix:
        return TopicRole.SNAPSHOTS
    if suffix[-1:] == ["receipts"]:
        suffix = suffix[:-1]
        role = TopicRole.RECEIPTS
    else:
        role = TopicRole.MESSAGES
    if kind == "system":
        known = parts[3] in {queue.value.lower() for queue in SystemQueue} and not suffix
    else:
        known = kind in _QUEUE_KINDS and (
            not suffix or suffix == ["journal"] or (len(suffix) == 2 and suffix[0] == "sub"))
    return role if known else None
