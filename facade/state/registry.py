"""Queue and queue-manager registries: MSMQ's queue properties, kept where every process sees them.

Two compacted single-partition topics hold them: ``__kmq.queues`` (key: the queue's canonical
path name; value: its properties as JSON; a tombstone deletes it) and ``__kmq.queue_managers``
(key: queue-manager name; value: its GUID as JSON). The registries are small control-plane logs,
so each read scans them from the start; the latest record per key wins on the queue registry (a
property change is a new record), while on the queue-manager registry the first record wins (two
processes initialising the same name at once agree on one GUID).

**Malformed records.** Anyone with write access can append anything to these topics. A record
that :func:`decode_queue_record` or :func:`decode_queue_manager_record` refuses (not UTF-8 JSON,
a missing field, a wrong type, a key that is not UTF-8 or does not match the record...) is
skipped by every process alike: the key keeps the value it had, it is logged once per process
with its topic, partition, offset and the reason, and counted in :attr:`Registry.malformed`
(``kmq qm info`` shows the count). A later valid record or a tombstone for the key repairs it.

Compaction keeps only the latest record per key, so on Kafka a malformed record that follows a
valid one will eventually be all that is left of its key, and processes that start after that
no longer see the key. So repair a poisoned key rather than leave it: a queue by writing its
properties again (``kmq queue set``, :meth:`QueueManager.set_properties`); a queue manager is
repaired automatically, because the next :meth:`Registry.ensure_queue_manager` of that name
writes the winning record again whenever a later record (malformed, a tombstone, or the losing
GUID of a race) could outlive it in compaction.

Records are JSON objects with a ``version`` (absent means 1). Decoding is forward-compatible:
fields this version does not know are ignored, and a record with a higher version is read as
long as the fields version 1 defines are present and valid.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, TypeVar

from facade.security.acl import EVERYONE, AccessControlEntry, AccessRight, SecurityDescriptor
from facade.arguments import FieldTypes, mistyped_field
from facade.errors import BrokerUnavailable, EnvelopeError, InvalidParameter, MessageQueueError
from facade.model.formatnames import parse_path_name
from facade.kafka.librdkafka import NO_LINGER, produce_and_wait
from facade.kafka.kafkaseam import KafkaRecord, KafkaSession, RecordProducer
from facade.model.message import Delivery
from facade.model.topics import QUEUE_MANAGER_REGISTRY_TOPIC, QUEUE_REGISTRY_TOPIC, QueueTopics

__all__ = [
    "DEFAULT_RECEIVE_RETRY_COUNT",
    "REGISTRY_RECORD_VERSION",
    "QueueManagerRecord",
    "QueueProperties",
    "Registry",
    "decode_queue_manager_record",
    "decode_queue_record",
    "decode_registry_key",
]

log = logging.getLogger("kmq.registry")

#: Registry topics are compacted: only the latest record per key matters.
_REGISTRY_TOPIC_CONFIG = {"cleanup.policy": "compact"}
_SCAN_TIMEOUT = 15.0
#: Seconds a registry lookup that hits may serve the cached view without reading new records:
#: a lookup sees every record acknowledged this long before it (when the broker answers).
REFRESH_INTERVAL = 1.0
#: PROPID_Q_LABEL limit in characters.
MAX_QUEUE_LABEL_LENGTH = 124
#: The type of each property an application sets (create_queue, set_properties), checked
#: before a record is written: a record of other types would be refused by every reader.
_SETTABLE_TYPES: FieldTypes = {
    "label": ((str,), "a str"),
    "type_id": ((str, type(None)), "None or a str (PROPID_Q_TYPE, a GUID)"),
    "transactional": ((bool,), "True or False"),
    "journal": ((bool,), "True or False"),
    "authenticate": ((bool,), "True or False"),
    "quota_kb": ((int, type(None)), "None or an int of KB"),
    "journal_quota_kb": ((int, type(None)), "None or an int of KB"),
    "base_priority": ((int,), "an int -32768..32767"),
    "privacy_level": ((int,), "0 NONE, 1 OPTIONAL or 2 BODY"),
    "arbitration": ((str,), '"receipts" or "share"'),
}
#: The ``version`` this module writes into registry records; it reads any version >= 1.
REGISTRY_RECORD_VERSION = 1
#: Default PROPID_Q_* extension ``receive_retry_count``: WCF's MSMQ binding default
#: (``MsmqBindingBase.ReceiveRetryCount``), and the delivery-count limit of Kafka share groups.
DEFAULT_RECEIVE_RETRY_COUNT = 5
#: ``arbitration`` values: who decides which receiver gets a message (docs/design.md,
#: "Share-group arbitration"). ``receipts``: the queue's receipts log (every MSMQ operation,
#: priority and FIFO order); ``share``: a Kafka share group (KIP-932; no order, no peek).
ARBITRATIONS = ("receipts", "share")
#: Largest ``receive_retry_count`` (the abort count is a 32-bit value, PROPID_M_ABORT_COUNT).
MAX_RECEIVE_RETRY_COUNT = 2**32 - 2


def _to_json(record: Any) -> bytes:
    """A registry record value: the dataclass's fields and ``version``, as UTF-8 JSON."""
    return json.dumps({"version": REGISTRY_RECORD_VERSION, **asdict(record)},
                      sort_keys=True).encode()


@dataclass(frozen=True)
class QueueProperties:
    """MSMQ queue properties (PROPID_Q_*) of one queue.

    Attributes:
        path_name (str): canonical path name, e.g. ``qm1\\private$\\orders`` (PROPID_Q_PATHNAME).
        queue_manager (str): the owning queue manager's name.
        queue_name (str): the name part (lowercase).
        private (bool): a private queue (``private$``) rather than a public one.
        data_topic (str), receipts_topic (str): the Kafka topics holding it.
        instance (str): the queue's GUID (PROPID_Q_INSTANCE).
        type_id (str | None): application-defined type GUID (PROPID_Q_TYPE).
        label (str): PROPID_Q_LABEL, at most 124 characters.
        transactional (bool): PROPID_Q_TRANSACTION.
        journal (bool): PROPID_Q_JOURNAL: keep a copy of each removed message in ``;JOURNAL``.
        quota_kb (int | None): PROPID_Q_QUOTA in KB; None is unlimited.
        journal_quota_kb (int | None): PROPID_Q_JOURNAL_QUOTA in KB; None is unlimited.
        base_priority (int): PROPID_Q_BASEPRIORITY, -32768..32767.
        authenticate (bool): PROPID_Q_AUTHENTICATE: accept only signed messages.
        privacy_level (int): PROPID_Q_PRIV_LEVEL: 0 NONE, 1 OPTIONAL (default, as in MSMQ), 2 BODY.
        create_time (float), modify_time (float): epoch seconds.
        receive_retry_count (int | None): MSMQ 4.0 poison-message handling (WCF's
            ``ReceiveRetryCount``, with no retry cycles and ``ReceiveErrorHandling.Move``): a
            message whose peek-lock was released (abandoned, or its lease expired) more than
            this many times is moved to the ``;poison`` subqueue instead of being handed out
            again, so it is delivered at most ``receive_retry_count + 1`` times. Default 5;
            None = no limit. A record without the property reads as 5.
        owner (str | None): the queue's owner in its security descriptor (MSMQ: the creator);
            None for a record without a security descriptor (see :attr:`security`).
        access_list (tuple[str, ...]): the queue's discretionary access-control list, one
            entry per value in :meth:`facade.security.acl.AccessControlEntry.to_text` form.
        arbitration (str): who decides which receiver gets a message, fixed at creation:
            ``"receipts"`` (default; the receipts log: every MSMQ operation, highest priority
            first, then arrival order) or ``"share"`` (a Kafka share group: receivers scale
            out, but **no order** is kept, and peek, cursors, selective receives, purge,
            count, prefetch and transactions are refused). A record without it reads as
            ``"receipts"``.
    """

    path_name: str
    queue_manager: str
    queue_name: str
    private: bool
    data_topic: str
    receipts_topic: str
    instance: str = field(default_factory=lambda: str(uuid.uuid4()))
    type_id: str | None = None
    label: str = ""
    transactional: bool = False
    journal: bool = False
    quota_kb: int | None = None
    journal_quota_kb: int | None = None
    base_priority: int = 0
    authenticate: bool = False
    privacy_level: int = 1
    create_time: float = field(default_factory=time.time)
    modify_time: float = field(default_factory=time.time)
    receive_retry_count: int | None = DEFAULT_RECEIVE_RETRY_COUNT
    owner: str | None = None
    access_list: tuple[str, ...] = ()
    arbitration: str = "receipts"

    @property
    def security(self) -> SecurityDescriptor:
        """The queue's security descriptor (owner and access list, MSMQ's
        ``MQGetQueueSecurity``).

        A record without an owner reads as owned by :data:`~facade.security.acl.EVERYONE`
        with full control for everyone: such a record restricts no caller, so reading it so
        takes no right away; ``kmq acl`` restricts it.
        """
        return _descriptor(self.owner, self.access_list)

    @property
    def queue_number(self) -> int:
        """The queue's number in ``PRIVATE=<queue manager guid>\\<number>`` (the first 32 bits
        of its instance GUID; unique among its queue manager's private queues)."""
        return int(uuid.UUID(self.instance).hex[:8], 16)

    def validate(self) -> QueueProperties:
        """Check the property ranges.

        Raises:
            InvalidParameter: a property of the wrong type or outside its MSMQ range; the
                message names it.
        """
        mistyped = mistyped_field(self, _SETTABLE_TYPES)
        if mistyped is not None:
            raise InvalidParameter.wrong_type(*mistyped, queue=self.path_name)
        if len(self.label) > MAX_QUEUE_LABEL_LENGTH:
            raise InvalidParameter(f"queue label (PROPID_Q_LABEL) longer than {MAX_QUEUE_LABEL_LENGTH} characters",
                                   queue=self.path_name)
        for name in ("quota_kb", "journal_quota_kb"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise InvalidParameter(f"{name} must be a positive number of KB or None (unlimited), not {value!r}",
                                       queue=self.path_name)
        if not -32768 <= self.base_priority <= 32767:
            raise InvalidParameter("base_priority (PROPID_Q_BASEPRIORITY) must be within -32768..32767",
                                   queue=self.path_name)
        if self.privacy_level not in (0, 1, 2):
            raise InvalidParameter("privacy_level (PROPID_Q_PRIV_LEVEL) must be 0 NONE, 1 OPTIONAL or 2 BODY",
                                   queue=self.path_name)
        if self.owner is not None:
            self.security  # noqa: B018 - raises InvalidParameter for a bad owner or entry
        if self.arbitration not in ARBITRATIONS:
            raise InvalidParameter(
                f"arbitration must be one of {', '.join(map(repr, ARBITRATIONS))}, not "
                f"{self.arbitration!r}", queue=self.path_name)
        retries = self.receive_retry_count
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)
                                    or not 0 <= retries <= MAX_RECEIVE_RETRY_COUNT):
            raise InvalidParameter(
                f"receive_retry_count must be a number of releases 0-{MAX_RECEIVE_RETRY_COUNT} "
                f"or None (no limit), not {retries!r}", queue=self.path_name)
        return self

    def with_changes(self, **changes: Any) -> QueueProperties:
        """A copy with ``changes`` applied and ``modify_time`` updated, validated.

        Raises:
            InvalidParameter: a name that is no queue property, or a value of the wrong type
                or outside its range (see :meth:`validate`).
        """
        unknown = sorted(set(changes) - set(self.__dataclass_fields__))
        if unknown:
            raise InvalidParameter(f"{unknown} are not queue properties",
                                   queue=self.path_name,
                                   hint=f"queue properties: {', '.join(self.__dataclass_fields__)}")
        return replace(self, **changes, modify_time=time.time()).validate()

    def to_json(self) -> bytes:
        """The registry record value: UTF-8 JSON with ``version`` and every property."""
        return _to_json(self)

    @classmethod
    def from_json(cls, data: bytes) -> QueueProperties:
        """Decode a registry record value (see :func:`decode_queue_record`, which also checks
        the key).

        Raises:
            EnvelopeError: ``data`` is not a valid queue record.
        """
        return _decoded("queue", _decode_queue, None, data, QUEUE_REGISTRY_TOPIC, None, None)


@dataclass(frozen=True)
class QueueManagerRecord:
    """A queue manager (MSMQ machine) known to the cluster.

    Attributes:
        name (str): its name (lowercase).
        guid (str): its GUID (MSMQ's QM id), used in message ids and MACHINE= format names.
        create_time (float): epoch seconds.
    """

    name: str
    guid: str
    create_time: float

    def to_json(self) -> bytes:
        """The registry record value: UTF-8 JSON with ``version``, ``name``, ``guid`` and
        ``create_time``."""
        return _to_json(self)


# -- decoding ---------------------------------------------------------------------------------
#
# Pure functions: the same bytes give the same verdict in every process, which is what lets
# every process skip the same malformed records and keep the same view.

_REPAIR_HINTS = {
    "queue": "kmq skips this record; a later valid record or a tombstone for the key repairs it "
             "(`kmq queue set` writes a queue's properties again)",
    "queue-manager": "kmq skips this record; a later valid record for the key repairs it (the "
                     "next open of a known queue manager writes its record again)",
}


class _Malformed(Exception):
    """Internal: why a record is refused; turned into an EnvelopeError with its location."""


def _check_type(doc: dict[str, Any], name: str, kinds: tuple[type, ...], *,
                optional: bool = False) -> Any:
    if name not in doc:
        raise _Malformed(f"field {name!r} is missing")
    value = doc[name]
    if value is None and optional:
        return None
    # bool is an int in Python, JSON keeps them apart: true is not 1.
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        expected = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        if optional:
            expected += " or null"
        raise _Malformed(f"field {name!r} must be {expected}, not {value!r:.60}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Malformed(f"field {name!r} must be a finite number, not {value!r}")
    return value


def _seconds(doc: dict[str, Any], name: str) -> float:
    value = _check_type(doc, name, (int, float))
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float's range
        raise _Malformed(f"field {name!r} is out of range") from None


def _guid(doc: dict[str, Any], name: str) -> str:
    text = _check_type(doc, name, (str,))
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise _Malformed(f"field {name!r} must be a GUID, not {text!r:.60}") from None


def _document(value: object) -> dict[str, Any]:
    """The JSON object of a record value, version checked (absent means 1)."""
    if value is None:
        raise _Malformed("the value is empty (a tombstone is not a record)")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise _Malformed(f"the value must be bytes, not {type(value).__name__}")
    try:
        doc = json.loads(bytes(value).decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        raise _Malformed(f"the value is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise _Malformed(f"the value is not JSON ({type(exc).__name__}: {str(exc):.100})") from None
    if not isinstance(doc, dict):
        raise _Malformed(f"the value must be a JSON object, not {type(doc).__name__}")
    version = doc.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _Malformed(f"'version' must be an integer >= 1, not {version!r:.60}")
    return doc


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number in JSON")


def _decode_queue(doc: dict[str, Any], key: str | None) -> QueueProperties:
    text = {name: _check_type(doc, name, (str,))
            for name in ("path_name", "queue_manager", "queue_name", "data_topic",
                         "receipts_topic", "label")}
    flags = {name: _check_type(doc, name, (bool,))
             for name in ("private", "transactional", "journal", "authenticate")}
    numbers = {name: _check_type(doc, name, (int,)) for name in ("base_priority", "privacy_level")}
    quotas = {name: _check_type(doc, name, (int,), optional=True)
              for name in ("quota_kb", "journal_quota_kb")}
    times: dict[str, Any] = {name: _seconds(doc, name) for name in ("create_time", "modify_time")}
    type_id = _check_type(doc, "type_id", (str,), optional=True)
    # Optional (version 1 records do not have it): absent means the default.
    retries = (_check_type(doc, "receive_retry_count", (int,), optional=True)
               if "receive_retry_count" in doc else DEFAULT_RECEIVE_RETRY_COUNT)
    # Added with access control: absent means a record written before it (no owner).
    owner = _check_type(doc, "owner", (str,), optional=True) if "owner" in doc else None
    # Added with share-group arbitration: absent means the receipts log arbitrates.
    arbitration = (_check_type(doc, "arbitration", (str,)) if "arbitration" in doc
                   else "receipts")
    access_list = _access_list(doc)
    path_name = text["path_name"]
    if key is not None and key != path_name:
        raise _Malformed(f"key {key!r} is not the record's path_name {path_name!r}")
    try:
        path = parse_path_name(path_name)
        QueueTopics(text["data_topic"], text["receipts_topic"])
        properties = QueueProperties(**text, **flags, **numbers, **quotas, type_id=type_id,
                                     instance=_guid(doc, "instance"),
                                     receive_retry_count=retries, owner=owner,
                                     access_list=access_list, arbitration=arbitration,
                                     **times)
        properties.validate()
    except MessageQueueError as exc:  # FormatNameError, InvalidParameter
        raise _Malformed(str(exc)) from None
    if (path.is_local or path.journal or path.subqueue or path.system_queue is not None
            or str(path) != path_name):
        raise _Malformed(f"path_name {path_name!r} is not the canonical path name of a queue")
    if (path.machine, path.queue_name, path.private) != (
            properties.queue_manager, properties.queue_name, properties.private):
        raise _Malformed("queue_manager, queue_name and private do not match path_name "
                         f"{path_name!r}")
    return properties


def _access_list(doc: dict[str, Any]) -> tuple[str, ...]:
    entries = _check_type(doc, "access_list", (list,)) if "access_list" in doc else []
    if not all(isinstance(entry, str) for entry in entries):
        raise _Malformed("field 'access_list' must be a list of strings")
    return tuple(entries)


@functools.lru_cache(maxsize=1024)
def _descriptor(owner: str | None, access_list: tuple[str, ...]) -> SecurityDescriptor:
    """The descriptor of a record's owner and access list (cached: every operation on a
    queue reads it, and the text form takes a parse)."""
    if owner is None:
        return SecurityDescriptor(EVERYONE, (AccessControlEntry(True, EVERYONE,
                                                                AccessRight.FULL_CONTROL),))
    return SecurityDescriptor.from_values(owner, access_list)


def _decode_manager(doc: dict[str, Any], key: str | None) -> QueueManagerRecord:
    name = _check_type(doc, "name", (str,))
    if not name:
        raise _Malformed("field 'name' is empty")
    if key is not None and key != name:
        raise _Malformed(f"key {key!r} is not the record's name {name!r}")
    return QueueManagerRecord(name, _guid(doc, "guid"), _seconds(doc, "create_time"))


_Decoded = TypeVar("_Decoded")


def _decoded(kind: str, build: Callable[[dict[str, Any], str | None], _Decoded],
             key: str | None, value: object, topic: str,
             partition: int | None, offset: int | None) -> _Decoded:
    """``build(document, key)``, with a refusal turned into an EnvelopeError saying where."""
    try:
        return build(_document(value), key)
    except _Malformed as exc:
        raise _refused(kind, str(exc), key=key, topic=topic, partition=partition,
                       offset=offset, raw=value) from None


def _refused(kind: str, why: str, *, key: object, topic: str, partition: int | None,
             offset: int | None, raw: object) -> EnvelopeError:
    data = bytes(raw) if isinstance(raw, (bytes, bytearray, memoryview)) else None
    return EnvelopeError(f"malformed {kind} record for key {key!r:.100}: {why}", topic=topic,
                         partition=partition, offset=offset, raw=data, hint=_REPAIR_HINTS[kind])


def decode_registry_key(key: object, *, topic: str = QUEUE_REGISTRY_TOPIC,
                        partition: int | None = None, offset: int | None = None) -> str:
    """The key of a registry record as text.

    Args:
        key (bytes | None): the record key as read.
        topic (str), partition (int | None), offset (int | None): where the record is; copied
            into the error.

    Returns:
        str: the key (a queue's canonical path name, or a queue-manager name).

    Raises:
        EnvelopeError: no key, an empty key, or one that is not UTF-8.
    """
    kind = "queue" if topic == QUEUE_REGISTRY_TOPIC else "queue-manager"
    where: dict[str, Any] = dict(key=key, topic=topic, partition=partition, offset=offset, raw=key)
    if not isinstance(key, (bytes, bytearray, memoryview)) or not key:
        raise _refused(kind, "the key is missing or empty", **where)
    try:
        return bytes(key).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refused(kind, f"the key is not UTF-8 ({exc.reason} at byte {exc.start})",
                       **where) from None


def decode_queue_record(key: object, value: object, *, topic: str = QUEUE_REGISTRY_TOPIC,
                        partition: int | None = None, offset: int | None = None) -> QueueProperties:
    """Decode one record of the queue registry (``__kmq.queues``) that is not a tombstone.

    Pure: the same key and value give the same result in every process.

    Args:
        key (bytes): the record key, the queue's canonical path name in UTF-8.
        value (bytes): the record value, UTF-8 JSON written by :meth:`QueueProperties.to_json`.
        topic (str), partition (int | None), offset (int | None): where the record is; copied
            into the error.

    Returns:
        QueueProperties: the queue's properties.

    Raises:
        EnvelopeError: for any bad input, and nothing else: a bad key (see
            :func:`decode_registry_key`), a value that is not a UTF-8 JSON object, a version
            that is not an integer >= 1, a field of version 1 missing or of the wrong type
            (``"private": "yes"``, ``"quota_kb": "x"``), a property outside its MSMQ range,
            a path name that is not canonical or disagrees with the key or with
            ``queue_manager`` / ``queue_name`` / ``private``, an illegal topic name, or an
            ``instance`` that is not a GUID. Unknown fields are ignored.
    """
    text = decode_registry_key(key, topic=topic, partition=partition, offset=offset)
    return _decoded("queue", _decode_queue, text, value, topic, partition, offset)


def decode_queue_manager_record(key: object, value: object, *,
                                topic: str = QUEUE_MANAGER_REGISTRY_TOPIC,
                                partition: int | None = None,
                                offset: int | None = None) -> QueueManagerRecord:
    """Decode one record of the queue-manager registry (``__kmq.queue_managers``) that is not
    a tombstone.

    Pure: the same key and value give the same result in every process.

    Args:
        key (bytes): the record key, the queue manager's name in UTF-8.
        value (bytes): the record value, UTF-8 JSON written by :meth:`QueueManagerRecord.to_json`
            (records written before ``version`` existed have none: that is version 1).
        topic (str), partition (int | None), offset (int | None): where the record is; copied
            into the error.

    Returns:
        QueueManagerRecord: the queue manager's name, GUID (canonical text) and creation time.

    Raises:
        EnvelopeError: for any bad input, and nothing else: a bad key, a value that is not a
            UTF-8 JSON object, a version that is not an integer >= 1, ``name`` missing, empty or
            not the key, ``guid`` not a GUID, ``create_time`` not a finite number. Unknown
            fields are ignored.
    """
    text = decode_registry_key(key, topic=topic, partition=partition, offset=offset)
    return _decoded("queue-manager", _decode_manager, text, value, topic, partition, offset)


class Registry:
    """Reads and writes the registry topics, keeping a cached view of them.

    The view is brought up to date incrementally (one persistent reader per registry): at most
    every :data:`REFRESH_INTERVAL` seconds for lookups that hit, and always before a lookup
    misses or before :meth:`queues` lists everything, so a queue created anywhere is found at
    once and a property change is seen within that interval. Own writes are applied at once.
    Malformed records are skipped, logged and counted (see the module docstring).

    Args:
        session (KafkaSession): the Kafka clients to use.
    """

    def __init__(self, session: KafkaSession):
        self._session = session
        self._producer: RecordProducer | None = None
        self._lock = threading.RLock()
        self._reader: Any = None
        self._refreshed = float("-inf")
        self._queues: dict[str, QueueProperties] = {}
        self._managers: dict[str, QueueManagerRecord] = {}
        # Queue managers whose winning record a later record could outlive in compaction.
        self._reaffirm: set[str] = set()
        self._malformed = 0
        self._next: dict[str, int] = {}  # per registry topic: the next offset to apply
        self._generation = 0  # bumped by every change to the view

    @property
    def malformed(self) -> int:
        """How many malformed records this view has read and skipped, in both registries (int).

        The view reads each registry from its first record, so every process that is up to
        date counts the same records (those still in the log, repaired keys included).
        """
        with self._lock:
            return self._malformed

    def ensure_topics(self) -> None:
        """Create the registry topics if they do not exist yet."""
        self._session.create_topics([QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC],
                                    _REGISTRY_TOPIC_CONFIG, exist_ok=True)

    def generation(self) -> int:
        """A number that changes whenever the view changes (a queue or queue manager record
        applied, written or removed), refreshed first under the rules of :meth:`get_queue`.

        Lookups resolved from the view stay valid while it returns the same number: callers
        that resolve the same names again and again (a distribution list's members, at every
        send) keep their results under it instead of looking every name up again.

        Returns:
            int: the view's generation.

        Raises:
            BrokerUnavailable: the registry could not be read up to its end.
        """
        self._refresh(force=False)
        return self._generation

    # -- queues --------------------------------------------------------------------------------

    def queues(self) -> dict[str, QueueProperties]:
        """Every registered queue, by canonical path name (latest record per key wins), read up
        to the end of the registry now."""
        self._refresh(force=True)
        with self._lock:
            return dict(self._queues)

    def get_queue(self, path_name: str) -> QueueProperties | None:
        """The queue registered under ``path_name`` (canonical form), or None.

        A hit may be up to :data:`REFRESH_INTERVAL` seconds old; a miss is always re-checked
        against the end of the registry.
        """
        # A hit within REFRESH_INTERVAL of the last refresh takes no lock: receives ask once or
        # more per message. The attribute read and dict.get are atomic under the GIL, and a
        # refresh under way on another thread is no fresher than the interval allows anyway.
        if time.monotonic() - self._refreshed < REFRESH_INTERVAL:
            found = self._queues.get(path_name)
            if found is not None:
                return found
        self._refresh(force=False)
        with self._lock:
            found = self._queues.get(path_name)
        if found is None:
            self._refresh(force=True)
            with self._lock:
                found = self._queues.get(path_name)
        return found

    def put_queue(self, properties: QueueProperties) -> None:
        """Register or update a queue (one record, acknowledged by all in-sync replicas)."""
        self._write(QUEUE_REGISTRY_TOPIC, properties.path_name, properties.to_json())
        with self._lock:
            self._queues[properties.path_name] = properties
            self._generation += 1

    def remove_queue(self, path_name: str) -> None:
        """Unregister a queue (a tombstone)."""
        self._write(QUEUE_REGISTRY_TOPIC, path_name, None)
        with self._lock:
            self._queues.pop(path_name, None)
            self._generation += 1

    # -- queue managers ------------------------------------------------------------------------

    def queue_managers(self) -> dict[str, QueueManagerRecord]:
        """Every queue manager, by name; the first valid record per name is authoritative."""
        self._refresh(force=True)
        with self._lock:
            return dict(self._managers)

    def ensure_queue_manager(self, name: str) -> QueueManagerRecord:
        """Return the queue manager ``name``, registering it with a new GUID if unknown.

        If a later record for ``name`` (a malformed one, a tombstone, or the other GUID of two
        processes registering the name at once) follows the winning record, the winning record
        is written again, so that it is still the one left when the topic is compacted.
        Writing it again changes no process's view: the first valid record still wins.

        Raises:
            BrokerUnavailable, BrokerError: the registry could not be read or written.
        """
        existing = self.queue_managers().get(name)
        if existing is None:
            record = QueueManagerRecord(name, str(uuid.uuid4()), time.time())
            self._write(QUEUE_MANAGER_REGISTRY_TOPIC, name, record.to_json())
            # Read back: if another process registered the name first, its GUID wins.
            existing = self.queue_managers()[name]
        with self._lock:
            reaffirm = name in self._reaffirm
        if reaffirm:
            log.info("writing queue manager %r (GUID %s) to %s again: a later record for it "
                     "could outlive it in compaction", name, existing.guid,
                     QUEUE_MANAGER_REGISTRY_TOPIC)
            self._write(QUEUE_MANAGER_REGISTRY_TOPIC, name, existing.to_json())
            with self._lock:
                self._reaffirm.discard(name)
        return existing

    def close(self) -> None:
        """Release the reader and the producer."""
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            if self._producer is not None:
                self._producer.flush(5.0)
                self._producer = None

    # -- plumbing ------------------------------------------------------------------------------

    def _write(self, topic: str, key: str, value: bytes | None) -> None:
        with self._lock:
            if self._producer is None:
                self._producer = self._session.producer(Delivery.RECOVERABLE, extra=NO_LINGER)
            producer = self._producer
        produce_and_wait(producer, topic, value, key=key.encode(), operation="write registry")

    def _refresh(self, *, force: bool) -> None:
        """Apply the registry records written since the last refresh, up to the end offsets
        the broker reports now (so a record acknowledged before this call is always seen).

        A refresh that is not forced (a lookup that hit, :meth:`generation`) serves the view
        it has while the broker does not answer, as it does between refreshes: a RECOVERABLE
        send to a queue this process already knows is then kept in the outgoing queue, as
        MSMQ keeps it while the network is down, instead of failing on a registry read. A
        forced refresh (a miss, a listing, a write's check) raises.

        Raises:
            BrokerUnavailable: ``force``, or no view was ever read, and the broker did not
                answer.
        """
        if force or self._refreshed == float("-inf"):
            self._read_to_end(force)
            return
        try:
            self._read_to_end(force)
        except BrokerUnavailable as exc:
            log.warning("queue registry not refreshed, the broker does not answer (%s): "
                        "serving the view it has; trying again in %g s", exc, REFRESH_INTERVAL)
            with self._lock:
                self._refreshed = time.monotonic()  # the next try after REFRESH_INTERVAL

    def _read_to_end(self, force: bool) -> None:
        with self._lock:
            if not force and time.monotonic() - self._refreshed < REFRESH_INTERVAL:
                return
            topics = [QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC]
            if self._reader is None:
                self._reader = self._session.reader()
                self._reader.assign({topic: 0 for topic in topics})
            # The view holds every record acknowledged before this instant (the end offsets
            # asked now), however long the read takes: what get_queue's freshness counts from.
            asked = time.monotonic()
            ends = self._reader.end_offsets(topics, _SCAN_TIMEOUT)
            deadline = time.monotonic() + _SCAN_TIMEOUT
            while any(self._next.get(topic, 0) < end for topic, end in ends.items()):
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(
                        f"could not read the queue registry up to its end within {_SCAN_TIMEOUT:g} s",
                        hint="check that the Kafka broker is running")
                for record in self._reader.poll(0.05):
                    self._generation += 1
                    self._apply(record)
                    self._next[record.topic] = record.offset + 1
            self._refreshed = asked

    def _apply(self, record: KafkaRecord) -> None:
        """Apply one registry record to the view; a malformed one is skipped, logged, counted."""
        where: dict[str, Any] = dict(topic=record.topic, partition=record.partition,
                                     offset=record.offset)
        try:
            key = decode_registry_key(record.key, **where)
            if record.topic == QUEUE_REGISTRY_TOPIC:
                if record.value is None:
                    self._queues.pop(key, None)
                else:
                    self._queues[key] = decode_queue_record(record.key, record.value, **where)
                return
            winner = self._managers.get(key)
            found = (None if record.value is None
                     else decode_queue_manager_record(record.key, record.value, **where))
        except EnvelopeError as exc:
            self._malformed += 1
            log.warning("skipped a malformed registry record (%d so far in this view): %s",
                        self._malformed, exc)
            if record.topic == QUEUE_MANAGER_REGISTRY_TOPIC:
                self._note_later_manager_record(record.key)
            return
        if winner is None and found is not None:
            self._managers[key] = found
        elif winner is not None:
            # Anything but the winner written again could be what compaction keeps.
            if found == winner:
                self._reaffirm.discard(key)
            else:
                self._reaffirm.add(key)

    def _note_later_manager_record(self, raw_key: bytes | None) -> None:
        try:
            key = bytes(raw_key or b"").decode("utf-8")
        except UnicodeDecodeError:
            return  # a key no queue manager has: compaction cannot remove a valid record for it
        if key in self._managers:
            self._reaffirm.add(key)
