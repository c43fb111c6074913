"""Garbage in every kmq topic while senders and competing receivers work.

Two queues, ``garbage1`` (with a journal) sent to by a RECOVERABLE sender process and
``garbage2`` by an EXPRESS sender that waits for every verdict (both acknowledged), each drained
by two receiver processes that compete for it. Meanwhile the test writes garbage with a raw
confluent-kafka producer,
in a few rounds, into every topic kmq owns: both queues' data and receipts topics, the queue
journal's data and receipts, the dead-letter queue and its receipts, the machine journal and its
receipts, ``__kmq.queues`` and ``__kmq.queue_managers`` (random keys, plus one garbage record
under a real queue's key and one under the queue manager's name), the id-block topic, and the
queue snapshot topic (all under a real queue's key: its views skip them and read the logs). The
garbage kinds: random bytes, an empty value, a tombstone, a truncated valid record, valid Avro of
the wrong schema (with and without valid kmq headers on data topics), huge headers, non-UTF-8
keys. Every record is checked first to be garbage for its topic's decoder.

After the workers stop, damaged rows are written into the durable outgoing store (a value that
is no envelope, headers that are not JSON, a value stored as text, a topic that is not UTF-8, a
purpose naming pid 0), and the queue manager is opened again.

The verdict:

* the history checker: every acknowledged message received exactly once (or dead-lettered with
  a reason), nothing invented, each sender's order kept per receiver;
* every garbage record of a data topic (queues, journals, dead-letter queue) and every damaged
  outgoing row is in the dead-letter queue as poison: class NACK_RECEIVE_REJECTED, ``kmq.reason``
  set, ``kmq.source`` naming the record; the outgoing store is empty and ``open()`` did not fail;
* ``kmq dlq list``, ``kmq queue list``, ``kmq queue show`` and ``kmq qm info`` (typer's
  CliRunner) work, and so do the journals' listings (``kmq journal list``'s code), and they
  count exactly the garbage written: ``malformed_receipts`` per queue (and per journal and
  dead-letter queue), ``malformed_registry_records`` (on top of what earlier tests left in the
  session broker's registries); the real queue's properties and the queue manager's GUID are
  unchanged by the garbage under their keys (the registry keeps the previous valid value);
* id blocks leased after the garbage still come from offsets past it (no id repeats).

No step hinges on a short deadline: workers stop when idle, and the test has a generous timeout.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from facade.cli import app
from facade.cli._messages import peek_messages
from facade.cli.journal import journal_format_name
from facade.config import KmqConfig
from facade.model.envelope import decode_message, encode_acknowledgment, encode_message
from facade.errors import EnvelopeError, ReceiveTimeout
from facade.model.formatnames import SystemQueue
from facade.manager import QueueManager
from facade.model.message import (
    AcknowledgedQueue,
    AcknowledgmentInfo,
    Message,
    MessageClass,
    MessageId,
)
from facade.state.queuestate import QueueState
from facade.model.receipts import ReceiptAction, decode_receipt, encode_receipt, new_claim
from facade.state.registry import (
    decode_queue_manager_record,
    decode_queue_record,
    decode_registry_key,
)
from facade.state.sequence import BLOCK_SIZE
from facade.state.snapshot import QueueSnapshotRecord, decode_snapshot, encode_snapshot
from facade.model.topics import (
    QUEUE_MANAGER_REGISTRY_TOPIC,
    QUEUE_REGISTRY_TOPIC,
    QueueTopics,
    id_block_topic,
    snapshot_topic,
    system_topics,
)
from tests.faults.conftest import eventually, report
from tests.faults.history import ACKNOWLEDGED, History
from tests.faults.workers import drain, start
from tests.support.kafka import BrokerEndpoint
from tests.support.outgoing import damage_outgoing_store

# About 20 s on the reference machine, which the suite's 90 s budget has no room for: it runs
# with the suite all the same, and its time is reported apart (tests/faults/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.outside_budget, pytest.mark.timeout(240)]

INTERVAL = 0.02           # seconds between one sender's messages
ROUNDS = 3                # garbage rounds while the senders send
HUGE = 64 * 1024          # bytes of each huge header (three per record)
QUEUES = {"garbage1": r".\private$\garbage1", "garbage2": r".\private$\garbage2"}
#: Each queue's sender: delivery mode, and whether it waits for each verdict.
SENDERS = {"garbage1": ("RECOVERABLE", False), "garbage2": ("EXPRESS", True)}


@dataclass(frozen=True)
class Garbage:
    """One raw record: what it is, and where the broker put it (once produced)."""

    kind: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None = None


# -- garbage makers -----------------------------------------------------------------------------


def _message_record(body: bytes = b"not from a sender") -> Any:
    """A valid message record with an id no sender uses (so no view drops it as a duplicate)."""
    return encode_message(Message(id=MessageId(uuid.uuid4(), 1), body=body, label="garbage"))


def _huge_headers(rng: random.Random) -> list[tuple[str, bytes | None]]:
    return [("kmq.id", rng.randbytes(HUGE)), ("kmq.version", b"1"), ("junk", b"j" * HUGE),
            ("junk", None), ("kmq.priority", str(10**40).encode()), ("x" * 1000, b"y" * HUGE)]


def _common(rng: random.Random) -> list[Garbage]:
    """Garbage for any topic."""
    return [
        Garbage("random bytes", rng.randbytes(8), rng.randbytes(rng.randint(1, 200))),
        Garbage("empty value", None, b""),
        Garbage("tombstone", rng.randbytes(4), None),
        Garbage("huge headers", b"k", rng.randbytes(64), _huge_headers(rng)),
        Garbage("non-UTF-8 key", b"\xff\xfe\xc3" + rng.randbytes(6), rng.randbytes(40)),
    ]


def data_garbage(rng: random.Random) -> list[Garbage]:
    """Garbage for a queue's data topic; the last three carry valid kmq headers, so only
    decoding the value shows they are poison."""
    valid = _message_record()
    ack = encode_acknowledgment(AcknowledgmentInfo(
        MessageId(uuid.uuid4(), 2), MessageClass.NACK_RECEIVE_TIMEOUT,
        (AcknowledgedQueue(r"DIRECT=OS:qm\private$\q", uuid.uuid4()),)))
    receipt = encode_receipt(new_claim(ReceiptAction.RECEIVE, (0,), "garbage"))
    headed = _message_record()
    truncated = _message_record(rng.randbytes(200))
    return _common(rng) + [
        Garbage("wrong schema (acknowledgment Avro), no headers", None, ack),
        Garbage("truncated valid record, no headers", None, valid.value[:len(valid.value) // 2]),
        Garbage("wrong schema (receipt Avro), valid headers", headed.key, receipt,
                list(headed.headers)),
        Garbage("truncated valid record, valid headers", truncated.key,
                truncated.value[:len(truncated.value) - 7], list(truncated.headers)),
        Garbage("valid marker, random Avro, valid headers", None,
                headed.value[:10] + rng.randbytes(50), list(_message_record().headers)),
    ]


def receipts_garbage(rng: random.Random) -> list[Garbage]:
    receipt = encode_receipt(new_claim(ReceiptAction.RECEIVE, (0, 1, 2), "garbage"))
    return _common(rng) + [
        Garbage("truncated receipt", None, receipt[:len(receipt) - 3]),
        Garbage("wrong schema (message envelope)", None, _message_record().value),
    ]


def registry_garbage(rng: random.Random, topic: str) -> list[Garbage]:
    """Garbage under keys no queue (manager) has."""
    key = f"garbage-{uuid.uuid4().hex}".encode()
    other = QUEUE_MANAGER_REGISTRY_TOPIC if topic == QUEUE_REGISTRY_TOPIC else QUEUE_REGISTRY_TOPIC
    shape = json.dumps({"version": 1, "name": key.decode(), "guid": "not a guid",
                        "create_time": 1.0, "path_name": other}).encode()
    return [
        Garbage("random bytes", key, rng.randbytes(60)),
        Garbage("empty value", key + b"-e", b""),
        Garbage("tombstone of an unknown key", key + b"-t", None),
        Garbage("tombstone with a non-UTF-8 key", b"\xff" + key, None),
        Garbage("huge headers", key + b"-h", b"{", _huge_headers(rng)),
        Garbage("non-UTF-8 key, JSON value", b"\xfe\xff" + key, shape),
        Garbage("truncated JSON", key + b"-j", shape[:len(shape) // 2]),
        Garbage("wrong fields", key, shape),
        Garbage("wrong schema (receipt Avro)", key + b"-a",
                encode_receipt(new_claim(ReceiptAction.RECEIVE, (0,), "garbage"))),
    ]


# -- premises: each record is garbage for its topic's decoder -------------------------------------


def snapshot_garbage(rng: random.Random, key: bytes) -> list[Garbage]:
    """Garbage for the snapshot topic, all under one queue's key (so its views try each)."""
    valid = encode_snapshot(QueueSnapshotRecord(QueueTopics("kmq.x.private.y"),
                                                QueueState().export()))  # type: ignore[arg-type]
    return [Garbage(g.kind, key, g.value, g.headers) for g in _common(rng)] + [
        Garbage("truncated snapshot", key, valid[:len(valid) - 3]),
        Garbage("wrong schema (receipt)", key,
                encode_receipt(new_claim(ReceiptAction.RECEIVE, (0,), "garbage"))),
    ]


def _refused(decode: Any, *args: Any) -> bool:
    """Whether ``decode(*args)`` refuses its input (EnvelopeError)."""
    try:
        decode(*args)
    except EnvelopeError:
        return True
    return False


def _registry_malformed(topic: str, g: Garbage) -> bool:
    """Whether every registry view counts the record as malformed (an unknown key's tombstone
    is a valid record that deletes nothing)."""
    try:
        if g.value is None:
            decode_registry_key(g.key, topic=topic)
        elif topic == QUEUE_REGISTRY_TOPIC:
            decode_queue_record(g.key, g.value)
        else:
            decode_queue_manager_record(g.key, g.value)
    except EnvelopeError:
        return True
    assert g.value is None, f"{g.kind} is a valid {topic} record"
    return False


# -- the raw producer ----------------------------------------------------------------------------


class RawProducer:
    """Writes raw records (acks=all) and remembers where each one went."""

    def __init__(self, broker: BrokerEndpoint):
        self._producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                                   "allow.auto.create.topics": False,
                                   "message.max.bytes": 4_000_000})
        self.written: list[tuple[str, int, Garbage]] = []
        self._failures: list[str] = []

    def write(self, topic: str, records: list[Garbage]) -> None:
        for g in records:
            def done(err: Any, msg: Any, g: Garbage = g) -> None:
                if err is not None:
                    self._failures.append(f"{g.kind} to {topic}: {err}")
                else:
                    self.written.append((msg.topic(), msg.offset(), g))
            self._producer.produce(topic, value=g.value, key=g.key, headers=g.headers,
                                   on_delivery=done)

    def flush(self) -> None:
        assert self._producer.flush(60) == 0 and not self._failures, self._failures

    def on(self, topic: str) -> list[tuple[int, Garbage]]:
        return [(offset, g) for t, offset, g in self.written if t == topic]


# -- reading the outcome ---------------------------------------------------------------------------


def scan_dead_letters(qm: QueueManager, history: History,
                      labels: dict[str, str]) -> tuple[dict[str, tuple[str, str]], int]:
    """Peek the whole dead-letter queue: poison copies by ``kmq.source`` (class, reason), and
    copies of sent messages into ``history``. Returns the poison map and the message count."""
    poison: dict[str, tuple[str, str]] = {}
    seen = 0
    dlq = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    try:
        with dlq.cursor() as cursor:
            message = cursor.peek_current(timeout=0.5)
            while True:
                seen += 1
                source = message.properties.get("kmq.source")
                if source is not None:
                    poison[source] = (message.message_class.name,
                                      message.properties.get("kmq.reason", ""))
                elif message.destination_queue in labels:
                    history.dead_letter(message.body.decode(errors="replace"),
                                        labels[message.destination_queue],
                                        message.message_class.name)
                message = cursor.peek_next(timeout=0)
    except ReceiveTimeout:
        pass
    finally:
        dlq.close()
    return poison, seen


def cli(*args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.stdout)  # warnings about the garbage go to stderr


# -- the test ------------------------------------------------------------------------------------


def test_garbage_in_every_kmq_topic(fault_qm: QueueManager, fault_config: KmqConfig,
                                    broker: BrokerEndpoint, kmq_home: Path, history_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(18)
    qm = fault_qm
    queues = {label: qm.create_queue(path, journal=(label == "garbage1"), label=label)
              for label, path in QUEUES.items()}
    topics = {label: q.destinations[0].topics for label, q in queues.items()}
    journal = topics["garbage1"].journal()
    dlq = system_topics(qm.name, SystemQueue.DEADLETTER)
    machine_journal = system_topics(qm.name, SystemQueue.JOURNAL)
    data_topics = [t.data for t in (*topics.values(), journal, dlq, machine_journal)]
    receipt_topics = [t.receipts for t in (*topics.values(), journal, dlq, machine_journal)]
    qm.registry.queue_managers()  # read to the end: what earlier tests left is counted too
    snapshots = snapshot_topic(topics["garbage2"].data)
    qm.session.create_topics([snapshots], exist_ok=True)
    baseline_registry = qm.registry.malformed

    common = dict(bootstrap=qm.session.bootstrap_servers, qm=qm.name)
    stop = history_path / "stop-senders"
    senders, receivers = [], []
    for label, path in QUEUES.items():
        mode, wait = SENDERS[label]
        senders.append(start("sender", kmq_home, actor=label, queue=path, label=label,
                             history=str(history_path / f"{label}.jsonl"), stop_file=str(stop),
                             interval=INTERVAL, delivery=mode, wait=wait, **common))
        receivers += [start("receiver", kmq_home, queue=path, label=label, idle=1.0,
                            history=str(history_path / f"{label}-r{i}.jsonl"), **common)
                      for i in range(2)]
    for worker in senders + receivers:
        worker.ready()

    # The garbage goes in while every queue is being sent to: each has an acknowledged send
    # before the first round and another after the last one, before the senders stop.
    started = time.monotonic()
    assert eventually(lambda: _sent_to(history_path, after=0) == set(QUEUES), timeout=60)
    raw = RawProducer(broker)
    for round_ in range(ROUNDS):
        for topic in data_topics:
            raw.write(topic, data_garbage(rng))
        for topic in receipt_topics:
            raw.write(topic, receipts_garbage(rng))
        for topic in (QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC):
            raw.write(topic, registry_garbage(rng, topic))
        # The id-block topic is compacted: Kafka refuses a record without a key there, and the
        # whole batch it is in, so the keyless garbage gets a key.
        raw.write(id_block_topic(qm.name), [Garbage(g.kind, g.key or b"garbage", g.value, g.headers)
                                            for g in _common(rng)])
        raw.write(snapshots, snapshot_garbage(rng, topics["garbage2"].data.encode()))
        if round_ == 0:
            # Under real keys, followed by nothing: every view keeps the previous valid value.
            real_queue = qm.get_properties(QUEUES["garbage2"]).path_name.encode()
            raw.write(QUEUE_REGISTRY_TOPIC, [Garbage("garbage under a real queue's key",
                                                     real_queue, b"\x00garbage")])
            raw.write(QUEUE_MANAGER_REGISTRY_TOPIC, [Garbage(
                "garbage under the queue manager's name", qm.name.encode(), b"[1, 2")])
        raw.flush()
        time.sleep(rng.uniform(0.2, 0.5))
    last_round = time.time()
    assert eventually(lambda: _sent_to(history_path, after=last_round) == set(QUEUES),
                      timeout=60)
    stop.touch()
    for worker in senders:
        worker.wait(timeout=120)
    for worker in receivers:
        worker.wait(timeout=120)  # each exits 1 s after its queue ran dry
    working = time.monotonic() - started

    # Premises: everything written is garbage for its topic.
    for topic in data_topics:
        assert all(_refused(decode_message, g.value, g.headers) for _, g in raw.on(topic))
    for topic in receipt_topics:
        assert all(_refused(decode_receipt, g.value or b"") for _, g in raw.on(topic))
    assert all(_refused(decode_snapshot, g.value) for _, g in raw.on(snapshots))
    registry_bad = sum(_registry_malformed(topic, g)
                       for topic in (QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC)
                       for _, g in raw.on(topic))

    history = History().load(history_path)
    for label, queue in queues.items():
        drain(queue, label, history, idle=0.2)  # nothing should be left; poison is moved out

    # Damaged rows in the outgoing store: the next open() dead-letters them and opens.
    store = kmq_home / "outgoing" / f"{qm.name}.sqlite"
    damaged = damage_outgoing_store(store, topics["garbage1"].data)
    blocks_before = _end_offset(qm, id_block_topic(qm.name))
    with QueueManager.open(fault_config) as again:
        assert again.transmitter.outgoing.count() == 0
        first_id = again.ids.new()
        assert again.guid == qm.guid
    assert first_id.sequence // BLOCK_SIZE >= blocks_before, "a block below the garbage"

    # The CLI still works on everything, and counts the garbage exactly.
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", qm.session.bootstrap_servers)
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", qm.name)
    # The journals are listed as `kmq journal list` does (the same code, without opening a
    # queue manager per listing): their garbage goes to the dead-letter queue on the way.
    journal_rows, _ = peek_messages(qm.open_queue(journal_format_name(qm, QUEUES["garbage1"])),
                                    None)
    peek_messages(qm.open_queue(f"MACHINE={qm.guid};JOURNAL"), None)
    dlq_rows = cli("dlq", "list", "--limit", "10000")
    listed = {row["path_name"]: row for row in cli("queue", "list")}
    shown = {label: cli("queue", "show", path) for label, path in QUEUES.items()}
    info = cli("qm", "info")

    labels = {q.format_name: label for label, q in queues.items()}
    poison, in_dlq = scan_dead_letters(qm, history, labels)
    verdict = history.verdict()
    by_receiver = Counter(r.receiver for r in history.receives)
    expected_poison = {f"{topic}@0:{offset}": g.kind
                       for topic in data_topics for offset, g in raw.on(topic)}
    expected_poison.update({f"{store} row {row}": "damaged outgoing row" for row in damaged})
    missing = {source: kind for source, kind in expected_poison.items()
               if source not in poison}
    wrong = {source: poison[source] for source in expected_poison
             if source in poison and (poison[source][0] != "NACK_RECEIVE_REJECTED"
                                      or not poison[source][1])}
    report(f"garbage: {len(raw.written)} garbage records in {len(data_topics)} data, "
           f"{len(receipt_topics)} receipts, 2 registry, 1 id-block and 1 snapshot topics, "
           f"{len(damaged)} damaged outgoing rows; {working:.1f} s with the workers; "
           f"{len(expected_poison)} dead-lettered as poison; {verdict.summary()}; "
           f"receives per receiver {sorted(by_receiver.values())}")

    assert verdict.ok, verdict.summary()
    assert verdict.counts.get("sent_acknowledged", 0) == len(history.sends) > 0
    assert not missing, f"garbage not dead-lettered: {missing}"
    assert not wrong, f"poison copies without class or reason: {wrong}"
    # Receipts garbage is skipped and counted by every view: the CLI's and a fresh handle's.
    for label in QUEUES:
        assert shown[label]["messages"] == 0
        assert shown[label]["malformed_receipts"] == len(raw.on(topics[label].receipts))
    # Snapshot garbage: a view tries the newest three under its queue's key, skips them, and
    # reads the logs; another queue's views see none of it.
    assert shown["garbage2"]["malformed_snapshots"] == 3
    assert shown["garbage1"]["malformed_snapshots"] == 0
    for name, topic in ((journal_format_name(qm, QUEUES["garbage1"]), journal.receipts),
                        (f"MACHINE={qm.guid};DEADLETTER", dlq.receipts),
                        (f"MACHINE={qm.guid};JOURNAL", machine_journal.receipts)):
        handle = qm.open_queue(name)
        assert handle.malformed_receipts() == len(raw.on(topic)), name
        handle.close()
    # Registries: the garbage counted; the real queue and the queue manager kept their values.
    assert info["malformed_registry_records"] == baseline_registry + registry_bad
    assert info["guid"] == str(qm.guid) and info["queues"] == len(QUEUES)
    assert {listed[q.properties.path_name]["label"] for q in queues.values()} == set(QUEUES)
    # `kmq dlq list` showed every poison copy written before it ran (the dead-letter queue's
    # own garbage is wrapped while it lists, so those copies may come after its last row).
    assert len(poison) - len(raw.on(dlq.data)) <= len(dlq_rows) <= in_dlq
    assert len(journal_rows) == sum(r.queue == "garbage1" for r in history.receives)


def _sent_to(history_path: Path, *, after: float) -> set[str]:
    """Queues (labels) with an acknowledged send recorded after ``after`` (epoch seconds)."""
    return {s.queue for s in History().load(history_path).sends.values()
            if s.outcome == ACKNOWLEDGED and s.t > after}


def _end_offset(qm: QueueManager, topic: str) -> int:
    reader = qm.session.reader()
    try:
        reader.assign({topic: 0})
        return reader.end_offsets([topic], 30.0)[topic]
    finally:
        reader.close()
