"""An argument of the wrong type, on any public method of the public API
(``from facade import ...``), gets kmq's own error naming the parameter: InvalidParameter
(ConfigurationError for a setting, EnvelopeError where a method decodes a record), never a bare
TypeError or AttributeError from deeper down, and nothing is stored or sent.

Hypothesis feeds every parameter of every public method values of the types it does not take
(ints, floats, text, bytes, lists, dicts, None, objects, kmq's own objects...), on the
in-memory Kafka (``facade.kafka.memorykafka``): no broker. ``test_every_public_method_is_fuzzed``
keeps the table complete: a new public method or parameter fails it until it is listed here,
or named as wiring with the reason it is not an application's to call.
"""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import facade
from facade import (
    AccessRight,
    AcknowledgedQueue,
    AcknowledgmentInfo,
    ConfigurationError,
    Cursor,
    DirectorySettings,
    EnvelopeError,
    InvalidParameter,
    KmqConfig,
    Message,
    MessageClass,
    MessageId,
    MessageQueueError,
    QueueManager,
    QueuePath,
    QueueProperties,
    SecurityDescriptor,
    parse_format_name,
    parse_path_name,
    parse_queue_reference,
    path_to_format_name,
)
from facade.security.acl import ObjectKind
from facade.kafka.memorykafka import MemoryKafka, MemoryKafkaSession

QUEUE = r".\private$\typed"
GUID = uuid.UUID("ae0c5671-f190-12ce-ae10-00dd0114290f")


# ---- what each value is ------------------------------------------------------------------


#: (type, kind) in the order a value is classified: bool before int (a bool is an int), enum
#: members of IntEnum and IntFlag are ints.
_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (type(None), "none"), (bool, "bool"), (int, "int"), (float, "float"), (str, "str"),
    ((bytes, bytearray, memoryview), "bytes"), (Message, "message"), (MessageId, "message_id"),
    (uuid.UUID, "uuid"), (dt.datetime, "datetime"), (SecurityDescriptor, "descriptor"),
    (QueuePath, "queue_path"), (os.PathLike, "pathlike"), (dict, "dict"),
    ((list, tuple, set, frozenset), "seq"),
)


def kind(value: object) -> str:
    """The kind of a value, as the table below says what a parameter takes."""
    for types, name in _KINDS:
        if isinstance(value, types):
            return name
    return "callable" if callable(value) else "other"


#: Values of each kind, kmq's own objects included (a Message where a name is expected...).
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "none": st.none(),
    "bool": st.booleans(),
    "int": st.integers() | st.just(AccessRight.PEEK_MESSAGE),
    "float": st.floats(),
    "str": st.text(max_size=12),
    "bytes": st.binary(max_size=12) | st.builds(bytearray, st.binary(max_size=4)),
    "message": st.just(Message(body=b"m")),
    "message_id": st.just(MessageId(GUID, 7)),
    "uuid": st.uuids(),
    "datetime": st.datetimes(),
    "descriptor": st.just(SecurityDescriptor("alice")),
    "queue_path": st.just(parse_path_name(r".\private$\x")),
    "pathlike": st.just(Path("p")),
    "dict": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    "seq": st.lists(st.integers(), max_size=2) | st.tuples(st.text(max_size=3))
           | st.just(frozenset({1})),
    "other": st.complex_numbers() | st.decimals(allow_nan=False) | st.builds(object),
}


def wrong_values(takes: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """Values of every kind a parameter does not take."""
    return st.one_of([strategy for name, strategy in VALUES.items() if name not in takes])

NUMBER = ("int", "float")
TIMEOUT = ("int", "float", "none")
FLAG = ("bool",)
TEXT = ("str",)
OPTIONAL_TEXT = ("str", "none")
ITERABLE = ("seq", "dict")


@dataclass(frozen=True)
class Param:
    """What a parameter takes (kinds), and the words its error must contain (default: its
    name)."""

    takes: tuple[str, ...]
    named: str | None = None


@dataclass(frozen=True)
class Case:
    """One public method: how to call it on :class:`Env`, valid values for its other
    parameters, and what each fuzzed parameter takes."""

    method: str  # its __qualname__ (where it is defined)
    call: Callable[[Env, dict[str, Any]], object]
    params: dict[str, Param]
    base: dict[str, Any] = field(default_factory=dict)
    errors: tuple[type[MessageQueueError], ...] = (InvalidParameter,)


class Env:
    """A queue manager on the in-memory Kafka with one queue, shared by every example: a
    wrong argument changes nothing, which :meth:`state` checks."""

    def __init__(self, home: Path):
        self.cluster = MemoryKafka()
        self.config = KmqConfig.load(queue_manager="typed", home=home)
        self.qm = QueueManager.open(self.config, session=self.session())
        self.queue = self.qm.create_queue(QUEUE)
        self.queue.send(Message(body=b"kept"), wait=True)
        self.cursor = self.queue.cursor()
        self.descriptor = self.qm.queue_security(QUEUE)
        self.path = parse_path_name(QUEUE)
        self.properties = self.qm.get_properties(QUEUE)

    def session(self) -> MemoryKafkaSession:
        return MemoryKafkaSession(self.cluster)

    def state(self) -> tuple[list[str], int]:
        """The queues and the queue's message count."""
        return [p.path_name for p in self.qm.list_queues()], self.queue.count()


def _message_fields() -> dict[str, Param]:
    takes = {
        "body": ("bytes",), "label": TEXT, "id": ("message_id", "none"),
        "correlation_id": ("message_id", "bytes", "str", "none"),
        "time_to_reach_queue": TIMEOUT, "time_to_be_received": TIMEOUT,
        "not_before": ("datetime", "none"), "sent_time": ("datetime", "none"),
        "arrived_time": ("datetime", "none"), "source_machine_id": ("uuid", "none"),
        "lookup_id": ("int", "none"), "first_in_transaction": FLAG,
        "last_in_transaction": FLAG, "authenticated": FLAG, "properties": ("dict",),
        "extension": ("bytes",),
    }
    for name in ("admin_queue", "response_queue", "destination_queue",
                 "destination_format_name", "dead_letter_queue", "transaction_id"):
        takes[name] = OPTIONAL_TEXT
    for name in ("sender_id", "sender_certificate", "signature", "destination_symmetric_key"):
        takes[name] = ("bytes", "none")
    return {f.name: Param(takes.get(f.name, ("int",))) for f in fields(Message)}


_QUEUE_PROPERTIES = {
    "label": Param(TEXT), "journal": Param(FLAG), "quota_kb": Param(("int", "none")),
    "journal_quota_kb": Param(("int", "none")), "base_priority": Param(("int",)),
    "type_id": Param(OPTIONAL_TEXT), "authenticate": Param(FLAG),
    "privacy_level": Param(("int",)), "receive_retry_count": Param(("int", "none")),
}
_LOOKUP = {"lookup_id": Param(("int",))}
_BY_ID = {"timeout": Param(TIMEOUT)}
_CONFIG = {
    "bootstrap_servers": Param(OPTIONAL_TEXT), "home": Param(("str", "pathlike")),
    "queue_manager": Param(TEXT), "principal": Param(TEXT), "replication_factor": Param(("int",)),
    "min_insync_replicas": Param(("int", "none")), "max_send_fanout": Param(("int",)),
    "max_send_bytes": Param(("int",)),
}
_DIRECTORY = {**{name: Param(OPTIONAL_TEXT) for name in (
    "url", "bind_dn", "password", "ca_file", "cert_file", "key_file", "sasl_mechanism")},
    "base_dn": Param(TEXT), "starttls": Param(FLAG), "timeout": Param(NUMBER)}
_RIGHTS = {"principal": Param(TEXT), "rights": Param(("int",))}


def _sd(env: Env) -> SecurityDescriptor:
    return env.descriptor


CASES = [
    # QueueManager
    Case("QueueManager.open", lambda e, kw: QueueManager.open(**kw).close(),
         {"config": Param(("none",)), "session": Param(("none",)), "lease_ids": Param(FLAG)},
         base={"config": None, "session": None}),
    Case("QueueManager.create_queue", lambda e, kw: e.qm.create_queue(**kw),
         {"path": Param(TEXT, "path name"), "transactional": Param(FLAG), **_QUEUE_PROPERTIES,
          "arbitration": Param(TEXT)},
         base={"path": r".\private$\never"}),
    *(Case(f"QueueManager.{name}", lambda e, kw, name=name: getattr(e.qm, name)(**kw),
           {"path_or_format_name": Param(TEXT, "path name")})
      for name in ("delete_queue", "queue_exists", "get_properties", "queue_security")),
    Case("QueueManager.delete_queues", lambda e, kw: e.qm.delete_queues(**kw),
         {"paths_or_format_names": Param(ITERABLE)}),
    Case("QueueManager.queue_counts", lambda e, kw: e.qm.queue_counts(**kw),
         {"path_names": Param(("none", *ITERABLE))}),
    Case("QueueManager.open_queue", lambda e, kw: e.qm.open_queue(**kw),
         {"path_or_format_name": Param(TEXT, "path name"), "prefetch": Param(("int",)),
          "prefetch_lease": Param(NUMBER), "spread_picks": Param(FLAG)},
         base={"path_or_format_name": QUEUE}),
    Case("QueueManager.set_properties", lambda e, kw: e.qm.set_properties(**kw),
         {"path_or_format_name": Param(TEXT, "path name"), **_QUEUE_PROPERTIES},
         base={"path_or_format_name": QUEUE}),
    Case("QueueManager.set_queue_security", lambda e, kw: e.qm.set_queue_security(**kw),
         {"path_or_format_name": Param(TEXT, "path name"), "descriptor": Param(("descriptor",))},
         base={"path_or_format_name": QUEUE, "descriptor": None}),
    Case("QueueManager.set_queue_manager_security",
         lambda e, kw: e.qm.set_queue_manager_security(**kw),
         {"descriptor": Param(("descriptor",))}),
    Case("QueueManager.begin_transaction", lambda e, kw: e.qm.begin_transaction(**kw).abort(),
         {"lease": Param(NUMBER)}),
    # MessageQueue (and its peek-lock receives)
    Case("MessageQueue.send", lambda e, kw: e.queue.send(**kw),
         {"message": Param(("message", "bytes")), "wait": Param(FLAG),
          "timeout": Param(NUMBER), "transaction": Param(("none",))},
         base={"message": Message(body=b"never")}),
    Case("MessageQueue.send_many", lambda e, kw: e.queue.send_many(**kw),
         {"messages": Param(ITERABLE), "wait": Param(FLAG), "timeout": Param(NUMBER),
          "transaction": Param(("none",))},
         base={"messages": [Message(body=b"never")]}),
    Case("MessageQueue.receive", lambda e, kw: e.queue.receive(**kw),
         {"timeout": Param(TIMEOUT), "lock": Param(FLAG), "lease": Param(NUMBER),
          "transaction": Param(("none",))}, base={"timeout": 0}),
    Case("MessageQueue.peek", lambda e, kw: e.queue.peek(**kw), {"timeout": Param(TIMEOUT)}),
    Case("MessageQueue.receive_many", lambda e, kw: e.queue.receive_many(**kw),
         {"max_messages": Param(("int",)), "timeout": Param(TIMEOUT),
          "transaction": Param(("none",))}, base={"max_messages": 1, "timeout": 0}),
    Case("MessageQueue.messages", lambda e, kw: list(e.queue.messages(**kw)),
         {"timeout": Param(TIMEOUT)}),
    *(Case(f"MessageQueue.{name}", lambda e, kw, name=name: getattr(e.queue, name)(**kw).result(),
           {"timeout": Param(TIMEOUT), "callback": Param(("callable", "none"))},
           base={"timeout": 0})
      for name in ("begin_receive", "begin_peek")),
    *(Case(f"MessageQueue.{name}", lambda e, kw, name=name: __import__("asyncio").run(
               getattr(e.queue, name)(**kw)), {"timeout": Param(TIMEOUT)})
      for name in ("receive_async", "peek_async")),
    *(Case(f"MessageQueue.{name}", lambda e, kw, name=name: getattr(e.queue, name)(**kw),
           {"message_id": Param(("message_id", "str")), **_BY_ID},
           base={"message_id": MessageId(GUID, 1), "timeout": 0})
      for name in ("receive_by_id", "peek_by_id")),
    *(Case(f"MessageQueue.{name}", lambda e, kw, name=name: getattr(e.queue, name)(**kw),
           {"correlation_id": Param(("message_id", "str")), **_BY_ID},
           base={"correlation_id": MessageId(GUID, 1), "timeout": 0})
      for name in ("receive_by_correlation_id", "peek_by_correlation_id")),
    *(Case(f"MessageQueue.{name}", lambda e, kw, name=name: getattr(e.queue, name)(**kw),
           _LOOKUP) for name in ("receive_by_lookup_id", "peek_by_lookup_id")),
    Case("MessageQueue.move", lambda e, kw: e.queue.move(**kw),
         {**_LOOKUP, "subqueue": Param(TEXT, "subqueue name")},
         base={"lookup_id": 10**9, "subqueue": "retry"}),
    Case("MessageQueue.mark_rejected", lambda e, kw: e.queue.mark_rejected(**kw),
         {**_LOOKUP, "reason": Param(TEXT)}, base={"lookup_id": 10**9}),
    Case("MessageQueue.recover_claims", lambda e, kw: e.queue.recover_claims(**kw),
         {"grace": Param(NUMBER)}),
    Case("MessageQueue.set_properties", lambda e, kw: e.queue.set_properties(**kw),
         dict(_QUEUE_PROPERTIES)),
    *(Case(f"MessageQueue.{name}", lambda e, kw, name=name: getattr(e.queue, name)(**kw),
           {"message": Param(())}) for name in ("complete", "abandon")),
    # Cursor
    Case("Cursor.__init__", lambda e, kw: Cursor(**kw), {"queue": Param(())}),
    *(Case(f"Cursor.{name}", lambda e, kw, name=name: getattr(e.cursor, name)(**kw),
           {"timeout": Param(TIMEOUT)})
      for name in ("peek_current", "peek_next", "receive_current", "move_next")),
    # MessageQueueTransaction
    Case("MessageQueueTransaction.commit", lambda e, kw: e.qm.begin_transaction().commit(**kw),
         {"timeout": Param(NUMBER)}),
    # Message and its parts
    Case("Message.__init__", lambda e, kw: Message(**kw), _message_fields()),
    Case("Message.from_values", lambda e, kw: Message.from_values(**kw),
         {"values": Param(("dict",))}),
    Case("MessageId.__init__", lambda e, kw: MessageId(**kw),
         {"machine_guid": Param(("uuid",)), "sequence": Param(("int",))},
         base={"machine_guid": GUID, "sequence": 1}),
    Case("MessageId.new", lambda e, kw: MessageId.new(**kw), {"machine_guid": Param(("uuid",))}),
    Case("MessageId.parse", lambda e, kw: MessageId.parse(**kw),
         {"text": Param(TEXT, "message id")}),
    Case("MessageId.from_bytes", lambda e, kw: MessageId.from_bytes(**kw),
         {"data": Param(("bytes",), "message id")}),
    Case("AcknowledgedQueue.__init__", lambda e, kw: AcknowledgedQueue(**kw),
         {"format_name": Param(OPTIONAL_TEXT), "guid": Param(("uuid", "none"))},
         base={"format_name": "DIRECT=OS:q\\x"}),
    Case("AcknowledgmentInfo.__init__", lambda e, kw: AcknowledgmentInfo(**kw),
         {"original_id": Param(("message_id", "bytes", "str")),
          "message_class": Param(("int",)), "queues": Param(ITERABLE),
          "time": Param(("datetime",)), "reason": Param(OPTIONAL_TEXT),
          "original_body": Param(("bytes", "none"))},
         base={"original_id": MessageId(GUID, 1), "message_class": MessageClass.NACK_PURGED,
               "queues": (AcknowledgedQueue("DIRECT=OS:q\\x"),)}),
    # Names
    *(Case(function.__qualname__, lambda e, kw, function=function: function(**kw),
           {"text": Param(TEXT, "name")})
      for function in (parse_format_name, parse_path_name, parse_queue_reference)),
    Case("path_to_format_name", lambda e, kw: path_to_format_name(**kw),
         {"path": Param(("str", "queue_path")), "machine": Param(OPTIONAL_TEXT, "computer name")},
         base={"path": QUEUE, "machine": "host"}),
    Case("QueuePath.to_format_name", lambda e, kw: e.path.to_format_name(**kw),
         {"machine": Param(OPTIONAL_TEXT, "computer name")}),
    Case("QueuePath.with_machine", lambda e, kw: e.path.with_machine(**kw),
         {"name": Param(TEXT, "computer name")}),
    Case("_QueueSuffixMixin.with_subqueue", lambda e, kw: e.path.with_subqueue(**kw),
         {"name": Param(TEXT, "subqueue name")}),
    # Security descriptors
    Case("SecurityDescriptor.__init__", lambda e, kw: SecurityDescriptor(**kw),
         {"owner": Param(TEXT), "entries": Param(ITERABLE)}, base={"owner": "alice"}),
    *(Case(f"SecurityDescriptor.{name}", lambda e, kw, name=name: getattr(_sd(e), name)(**kw),
           _RIGHTS, base={"principal": "bob", "rights": AccessRight.PEEK_MESSAGE})
      for name in ("allows", "grant", "deny")),
    Case("SecurityDescriptor.require", lambda e, kw: _sd(e).require(**kw),
         {**_RIGHTS, "object_name": Param(TEXT)},
         base={"principal": "bob", "rights": AccessRight.PEEK_MESSAGE, "object_name": QUEUE}),
    *(Case(f"SecurityDescriptor.{name}", lambda e, kw, name=name: getattr(_sd(e), name)(**kw),
           {"principal": Param(TEXT)}) for name in ("revoke", "granted")),
    Case("SecurityDescriptor.with_owner", lambda e, kw: _sd(e).with_owner(**kw),
         {"owner": Param(TEXT)}),
    Case("SecurityDescriptor.from_values", lambda e, kw: SecurityDescriptor.from_values(**kw),
         {"owner": Param(TEXT), "values": Param(ITERABLE)}, base={"owner": "alice",
                                                                  "values": []}),
    Case("SecurityDescriptor.default_for", lambda e, kw: SecurityDescriptor.default_for(**kw),
         {"kind": Param(()), "owner": Param(TEXT)},
         base={"kind": ObjectKind.QUEUE, "owner": "alice"}),
    # Queue properties
    Case("QueueProperties.with_changes", lambda e, kw: e.properties.with_changes(**kw),
         dict(_QUEUE_PROPERTIES)),
    Case("QueueProperties.from_json", lambda e, kw: QueueProperties.from_json(**kw),
         {"data": Param((), "queue record")}, errors=(EnvelopeError,)),
    # Configuration
    Case("KmqConfig.load", lambda e, kw: KmqConfig.load(**kw),
         {"environ": Param(("dict", "none")), **_CONFIG}, base={"environ": {}},
         errors=(ConfigurationError,)),
    Case("KmqConfig.__init__", lambda e, kw: KmqConfig(**kw),
         {**_CONFIG, "directory": Param(()), "kafka_options": Param(("dict",))},
         errors=(ConfigurationError,)),
    Case("DirectorySettings.__init__", lambda e, kw: DirectorySettings(**kw), _DIRECTORY,
         errors=(ConfigurationError,)),
]

#: Public methods that are the queue manager's wiring, not an application's API: its parts call
#: them (through the protocols of facade.queues.interfaces and facade.queues.queuehost) with values kmq built.
WIRING = {
    "QueueManager.__init__": "QueueManager.open builds it",
    "QueueManager.destinations": "the resolver protocol (facade.queues.interfaces)",
    "QueueManager.resolve": "the resolver protocol (facade.queues.interfaces)",
    "QueueManager.resolve_topic": "the resolver protocol (facade.queues.interfaces)",
    "QueueManager.dead_letter": "the system-queue writer protocol (facade.queues.interfaces)",
    "QueueManager.write_system_copy": "the system-queue writer protocol",
    "QueueManager.write_system_copies": "the system-queue writer protocol",
    "QueueManager.write_system_records": "the system-queue writer protocol",
    "QueueManager.encode_system_copy": "the system-queue writer protocol",
    "QueueManager.system_topic": "the system-queue writer protocol",
    "QueueManager.poison_message": "the system-queue writer protocol",
    "QueueManager.producer": "the system-queue writer protocol",
    "MessageQueue.__init__": "QueueManager.open_queue builds it",
    "MessageQueueTransaction.__init__": "QueueManager.begin_transaction builds it",
    "MessageQueueTransaction.enlist_sends": "MessageQueue.send's hook into the transaction",
    "MessageQueueTransaction.enlist_receives": "MessageQueue.receive's hook",
    "MessageQueueTransaction.timers": "MessageQueue.send's hook",
    "LockedMessage.adopt": "the peek-lock receive builds locked messages",
    "Destination.__init__": "the resolver builds destinations",
    "QueuePath.__init__": "a record of parse_path_name, which checks its text",
    "QueueProperties.__init__": "a record; create_queue and with_changes check it (validate)",
}


def public_parameters() -> dict[str, list[str]]:
    """Every public function and method of ``facade.__all__`` by ``__qualname__`` (where it is
    defined), with its parameters (not self, cls, *args or **kwargs)."""
    found: dict[str, list[str]] = {}

    def add(function: Any) -> None:
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            return
        names = [p.name for p in signature.parameters.values()
                 if p.name not in ("self", "cls")
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if names:
            found[function.__qualname__] = names

    for name in facade.__all__:
        value = getattr(facade, name)
        if inspect.isfunction(value):
            add(value)
        elif inspect.isclass(value) and not issubclass(value, (BaseException, enum.Enum)):
            for attribute, member in inspect.getmembers(value):
                if attribute.startswith("_") and attribute != "__init__":
                    continue
                function = getattr(member, "__func__", member)
                if inspect.isfunction(function) and function.__module__.startswith("facade"):
                    add(function)
    return found


def test_every_public_method_is_fuzzed() -> None:
    public = public_parameters()
    covered = {(case.method, name) for case in CASES for name in case.params}
    missing = [f"{method}({name})" for method, names in public.items()
               if method not in WIRING for name in names if (method, name) not in covered]
    assert missing == [], "list these in CASES (or in WIRING, with the reason)"
    assert set(WIRING) <= set(public), "WIRING names a method that is gone"
    assert {case.method for case in CASES} - set(public) <= {
        "MessageQueue.set_properties", "QueueProperties.with_changes"}  # **changes only


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    home = tmp_path_factory.mktemp("kmq-home")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("KMQ_CONFIG", "KMQ_DIRECTORY_URL", "KMQ_QUEUE_MANAGER",
                     "KMQ_BOOTSTRAP_SERVERS"):
            patch.delenv(name, raising=False)
        patch.setenv("KMQ_HOME", str(home))
        patch.chdir(home)
        environment = Env(home)
        yield environment
        environment.cursor.close()
        environment.qm.close()


PAIRS = [pytest.param(case, name, id=f"{case.method}-{name}")
         for case in CASES for name in case.params]


@pytest.mark.parametrize(("case", "name"), PAIRS)
@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_wrong_type_gets_kmqs_error_naming_the_parameter(env: Env, case: Case, name: str,
                                                          data: st.DataObject) -> None:
    param = case.params[name]
    value = data.draw(wrong_values(param.takes), label=name)
    assert kind(value) not in param.takes
    before = env.state()
    arguments = {**case.base, name: value}
    if case.method == "QueueManager.open" and name == "lease_ids":
        arguments.update(config=env.config, session=env.session())
    try:
        case.call(env, arguments)
    except case.errors as exc:
        assert (param.named or name) in str(exc), f"{exc!r} does not name {name!r}"
    except Exception as exc:  # noqa: BLE001 - what must not escape is the point of the test
        pytest.fail(f"{case.method}({name}={value!r}) raised {type(exc).__name__}: {exc}")
    else:
        pytest.fail(f"{case.method}({name}={value!r}) accepted a {type(value).__name__}")
    assert env.state() == before, "a refused call changed the queues"


def test_send_takes_a_body_alone_as_system_messagings_send_object_does(env: Env) -> None:
    """``q.send(b"raw")`` sends a message with default properties and that body, not an
    AttributeError ('bytes' object has no attribute 'stamped')."""
    queue = env.qm.create_queue(r".\private$\bodies")
    try:
        sent = queue.send(b"raw", wait=True)
        batch = queue.send_many([bytearray(b"a"), Message(body=b"b", label="l")], wait=True)
        assert sent.body == b"raw" and sent.id is not None and sent.label == ""
        assert [m.body for m in batch] == [b"a", b"b"]
        assert [queue.receive(timeout=5).body for _ in range(3)] == [b"raw", b"a", b"b"]
        with pytest.raises(InvalidParameter, match=r"message must be a Message, or bytes"):
            queue.send("text")  # type: ignore[arg-type]
        with pytest.raises(InvalidParameter, match=r"each of messages must be a Message"):
            queue.send_many([Message(body=b"fine"), 42])  # type: ignore[list-item]
        assert queue.count() == 0, "a refused batch sends none of its messages"
    finally:
        queue.close()
        env.qm.delete_queue(r".\private$\bodies")


def test_a_create_queue_of_wrong_types_writes_no_record(env: Env) -> None:
    """``create_queue(transactional=None)`` wrote a queue record every reader refuses."""
    for bad in ({"transactional": None}, {"journal": 1}, {"label": 5}, {"quota_kb": 1.5},
                {"base_priority": "high"}, {"type_id": uuid.uuid4()}):
        with pytest.raises(InvalidParameter, match=next(iter(bad))):
            env.qm.create_queue(r".\private$\never", **bad)
    assert not env.qm.queue_exists(r".\private$\never")

