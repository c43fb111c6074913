"""Benchmarks: kmq's facade against the raw confluent-kafka equivalent, on one broker, in one run.

Every scenario times the facade and its raw equivalent on the same broker, with the same payload
size and message count, in the same round, and reports msg/s for both and the ratio
(``kmq / raw``). Each figure is the median of several rounds. ``kmq bench`` prints the results as
a table and as JSON; ``docs/performance.md`` records them and explains where the time goes.

========================== ============================================ ========================
Scenario                   kmq                                          raw confluent-kafka
========================== ============================================ ========================
``express-send``           ``send()`` EXPRESS, ``wait`` on the last     produce, ``acks=1``,
                                                                        ``linger.ms=5``, flush
``recoverable-send``       ``send()`` RECOVERABLE (fsync'd outgoing     produce, ``acks=all`` +
                           queue, then ``acks=all`` + idempotence)      idempotence, flush
``receive``                ``receive()`` (nontransactional: one         consume + synchronous
                           receipt per message, ``acks=all``)           offset commit per record
``peek``                   cursor ``peek_current``/``peek_next`` over   consume, no commit
                           the queue (nothing removed)
``dl-fanout``              ``send()`` to a distribution list of 10      produce 10 records per
                           public queues (one copy each)                message, to 10 topics
``send-batch``             ``send_many()`` of 100 EXPRESS messages,     produce, ``acks=1``,
                           ``wait`` on the last batch                   ``linger.ms=5``, flush
``recoverable-send-batch`` ``send_many()`` of 100 RECOVERABLE (one      produce, ``acks=all`` +
                           fsync'd commit per batch), ``wait`` on the   idempotence, flush
                           last batch
``signed-send``,           ``send()`` EXPRESS signed (ECDSA P-256) /    ``send()`` EXPRESS of a
``encrypted-send``         encrypted (X25519 + AES-GCM)                 plain message (target:
                                                                        within 4x, ratio 0.25)
``signed-encrypted-        ``receive_many(100)`` of signed and          the same plain express
receive``                  encrypted messages (decrypt, verify, cached  send
                           directory check)
``spark-decode``           ``benchmarks/spark_decode_bench.py``: the    Spark read of the raw
                           queue read and decoded by Spark (opt-in:     log of the same topic
                           it starts a JVM; needs pyspark)
========================== ============================================ ========================

The first message of every timed loop is sent or read untimed on both sides, so producer,
consumer and view start-up is excluded from the rates.

Every run uses a fresh queue manager under a throwaway directory inside ``KMQ_HOME`` (the
outgoing queue is fsync'd there, so its disk is the one measured), with an embedded directory of
its own for the distribution list; queues and raw topics are deleted afterwards. The broker is
``KMQ_BOOTSTRAP_SERVERS`` (or ``bootstrap_servers`` in ``kmq.toml``), else the dev stack broker.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from facade.config import DirectorySettings, KmqConfig
from facade.errors import ConfigurationError
from facade.benchnames import DEFAULT_SCENARIOS
from facade.kafka.devstack import DevStack
from facade.kafka.librdkafka import client_logging, resolve_bootstrap_servers
from facade.manager import QueueManager
from facade.model.envelope import envelope_record, envelope_writer
from facade.model.message import AuthLevel, Delivery, Message, MessageId, PrivacyLevel
from facade.queues.sharequeue import MAX_POLL_RECORDS

__all__ = [
    "SCENARIOS",
    "BenchReport",
    "ScenarioResult",
    "describe_broker",
    "describe_machine",
    "run_benchmarks",
]

#: Targets: the ratio kmq / raw each scenario aims for, raw being confluent-kafka doing the same
#: Kafka work in the same run (docs/performance.md). Scenarios without one have None.
TARGETS: dict[str, float] = {"express-send": 0.1, "receive": 1.0, "dl-fanout": 0.3,
                             "send-batch": 0.3, "receive-batch": 0.5, "receive-contended": 1.5,
                             "receive-share": 3.0,
                             "signed-send": 0.25, "encrypted-send": 0.25,
                             "signed-encrypted-receive": 0.25}
#: Fan-out width of the distribution-list scenario.
FANOUT = 10
#: Messages per receive_many and send_many in the batch scenarios.
BATCH = 100
_SPARK_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "spark_decode_bench.py"
_TIMEOUT = 120.0


@dataclass
class ScenarioResult:
    """One scenario's figures.

    Attributes:
        name (str): scenario name (``express-send``...).
        description (str): what is compared with what.
        kmq (list[float]): msg/s of the facade, one per round.
        raw (list[float]): msg/s of the raw equivalent, one per round.
        target (float | None): the ratio the scenario aims for (:data:`TARGETS`).
        skipped (str | None): why the scenario did not run.
        figures (dict[str, list[float]]): further figures of a scenario, one per round, by
            JSON key (``receive-share``: ``share_1_msg_per_s``... and ``load_avg_1min``).
    """

    name: str
    description: str
    kmq: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    target: float | None = None
    skipped: str | None = None
    figures: dict[str, list[float]] = field(default_factory=dict)

    def figures_text(self) -> str:
        """The further figures as one line (medians), e.g. ``share_1_msg_per_s 560, ...``;
        "" when there are none."""
        return ", ".join(f"{key} {statistics.median(values):,.2f}"
                         for key, values in self.figures.items() if values)

    @property
    def kmq_median(self) -> float | None:
        return statistics.median(self.kmq) if self.kmq else None

    @property
    def raw_median(self) -> float | None:
        return statistics.median(self.raw) if self.raw else None

    @property
    def ratio(self) -> float | None:
        """Median kmq msg/s over median raw msg/s."""
        ours, raw = self.kmq_median, self.raw_median
        return None if ours is None or not raw else ours / raw

    def as_dict(self) -> dict[str, Any]:
        return {
            "description": self.description, "kmq_msg_per_s": self.kmq_median,
            "raw_msg_per_s": self.raw_median, "ratio": self.ratio, "target": self.target,
            "meets_target": None if self.target is None or self.ratio is None
            else self.ratio >= self.target,
            "rounds": {"kmq": self.kmq, "raw": self.raw, **self.figures},
            "skipped": self.skipped,
            **{key: statistics.median(values) for key, values in self.figures.items()
               if values},
        }


@dataclass
class BenchReport:
    """What one ``kmq bench`` run measured, with the machine and broker it ran on."""

    messages: int
    rounds: int
    payload: int
    machine: dict[str, Any]
    broker: dict[str, Any]
    results: list[ScenarioResult]
    started: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages, "rounds": self.rounds, "payload_bytes": self.payload,
            "started": self.started, "seconds": round(self.seconds, 1), "machine": self.machine,
            "broker": self.broker, "scenarios": {r.name: r.as_dict() for r in self.results},
        }


# -- machine and broker --------------------------------------------------------------------------


def describe_machine() -> dict[str, Any]:
    """CPU count and model, memory, OS, Python and client library versions."""
    import confluent_kafka

    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "cpus": os.cpu_count(), "cpu_model": model, "memory": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(), "confluent_kafka": confluent_kafka.version(),
        "librdkafka": confluent_kafka.libversion()[0],
        "load_average_1m": None if load is None else round(load, 2),
    }


def describe_broker(bootstrap_servers: str, config: KmqConfig | None = None) -> dict[str, Any]:
    """The broker's cluster id and size; for the dev stack's cluster (``kmq dev up``), also
    ``kind`` (``apache-kafka``), ``version`` and its nodes' start-up time."""
    admin = AdminClient({**client_logging(), "bootstrap.servers": bootstrap_servers, "allow.auto.create.topics": False})
    metadata = admin.list_topics(timeout=10)
    info: dict[str, Any] = {"bootstrap_servers": bootstrap_servers,
                            "cluster_id": metadata.cluster_id, "brokers": len(metadata.brokers)}
    local = DevStack(config).running_broker() if config is not None else None
    if local is not None and local.cluster_id == metadata.cluster_id:
        info.update(kind="apache-kafka", version=local.version, ready_seconds=local.ready_seconds)
    return info


# -- raw confluent-kafka sides ------------------------------------------------------------------


def _produce(producer: Producer, topic: str, value: bytes,
             headers: list[tuple[str, str | bytes | None]] | None = None) -> None:
    while True:
        try:
            producer.produce(topic, value, headers=headers)
            return
        except BufferError:  # librdkafka's queue is full: let it drain
            producer.poll(0.01)


def _flushed_rate(producer: Producer, n: int, start: float) -> float:
    """msg/s of ``n`` records produced since ``start``, once all are acknowledged."""
    if producer.flush(_TIMEOUT):
        raise TimeoutError("raw produce not acknowledged in time")
    return n / (time.perf_counter() - start)


class _Raw:
    """Raw confluent-kafka clients and throwaway topics on the benchmark broker."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.admin = AdminClient({**client_logging(), "bootstrap.servers": bootstrap, "allow.auto.create.topics": False})
        self.topics: list[str] = []

    def topic(self) -> str:
        name = f"kmq-bench-raw-{uuid.uuid4().hex[:10]}"
        self.admin.create_topics([NewTopic(name, 1, 1)])[name].result(_TIMEOUT)
        self.topics.append(name)
        return name

    def producer(self, **extra: Any) -> Producer:
        return Producer({**client_logging(), "bootstrap.servers": self.bootstrap, "linger.ms": 5,
                         "allow.auto.create.topics": False, **extra})

    def produce(self, producer: Producer, topics: Sequence[str], n: int, payload: bytes) -> float:
        """msg/s of ``n`` messages, each produced once to every topic, flush included."""
        for topic in topics:  # untimed warm-up: metadata, connection, producer id
            producer.produce(topic, payload)
        producer.flush(_TIMEOUT)
        start = time.perf_counter()
        for _ in range(n):
            for topic in topics:
                _produce(producer, topic, payload)
            producer.poll(0)
        return _flushed_rate(producer, n, start)

    def produce_envelopes(self, producer: Producer, topic: str, n: int, payload: bytes) -> float:
        """msg/s of ``n`` records carrying kmq's wire format, built the way a raw application
        would: fastavro writes the envelope per message (only id, sent time and body change)
        and the record gets the same headers as kmq's (id, class, priority)."""
        template = _envelope_template()
        schema, prefix = template.pop("_schema"), template.pop("_prefix")
        guid = uuid.uuid4().bytes

        def record(seq: int) -> tuple[bytes, list[tuple[str, str | bytes | None]]]:
            envelope = dict(template, id=guid + seq.to_bytes(4, "little"),
                            sent_time=time.time_ns() // 1_000_000, body=payload)
            out = io.BytesIO()
            out.write(prefix)
            fastavro.schemaless_writer(out, schema, envelope)
            return out.getvalue(), [("kmq.id", b"%s\\%d" % (guid.hex().encode(), seq)),
                                    ("kmq.class", b"0"), ("kmq.priority", b"3")]

        value, headers = record(0)  # untimed warm-up: metadata, connection
        producer.produce(topic, value, headers=headers)
        producer.flush(_TIMEOUT)
        start = time.perf_counter()
        for seq in range(1, n + 1):
            value, headers = record(seq)
            _produce(producer, topic, value, headers)
            producer.poll(0)
        return _flushed_rate(producer, n, start)

    def fill(self, topic: str, n: int, payload: bytes) -> None:
        producer = self.producer(acks=1)
        for _ in range(n):
            producer.produce(topic, payload)
            producer.poll(0)
        producer.flush(_TIMEOUT)

    def consume(self, topic: str, n: int, commit: bool) -> float:
        """msg/s reading ``n`` records after an untimed first one; ``commit`` commits each
        record synchronously (the raw equivalent of a destructive receive)."""
        def handle(consumer: Consumer, record: Any) -> None:
            if commit:
                consumer.commit(message=record, asynchronous=False)
        return self._timed_read(topic, n, 1, handle, {"fetch.wait.max.ms": 2})

    def consume_decoded(self, topic: str, n: int, batch: int) -> float:
        """msg/s reading ``n`` envelopes (after an untimed first one) ``batch`` at a time and
        decoding each with fastavro: the raw equivalent of a batch receive, without commits."""
        template = _envelope_template()
        schema, prefix = template["_schema"], template["_prefix"]

        def handle(_consumer: Consumer, record: Any) -> None:
            body = io.BytesIO(record.value())
            body.seek(len(prefix))
            fastavro.schemaless_reader(body, schema)
        return self._timed_read(topic, n, batch, handle, {})

    def _timed_read(self, topic: str, n: int, batch: int,
                    handle: Callable[[Consumer, Any], None], extra: dict[str, Any]) -> float:
        """msg/s of reading ``n`` records of ``topic`` ``batch`` at a time, ``handle`` called
        on each; the first record is read untimed."""
        consumer = Consumer({**client_logging(), "bootstrap.servers": self.bootstrap,
                             "group.id": f"kmq-bench-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "session.timeout.ms": 6000, **extra})
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            got, start = 0, 0.0
            deadline = time.monotonic() + _TIMEOUT
            while got <= n:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"raw consume read {got} of {n + 1} records")
                # One at a time through poll(), as a raw per-record consumer would; consume()
                # only for batches.
                records = ([consumer.poll(1.0)] if batch == 1
                           else consumer.consume(min(batch, n + 1 - got), 1.0))
                for record in records:
                    if record is None or record.error():
                        continue
                    handle(consumer, record)
                    if got == 0:
                        start = time.perf_counter()
                    got += 1
            return n / (time.perf_counter() - start)
        finally:
            consumer.close()

    def drop_prefixed(self, prefix: str) -> None:
        """Delete every topic whose name starts with ``prefix`` (the throwaway queue manager's
        system queues: dead-letter, transactional dead-letter, journal, and their receipts)."""
        names = [t for t in self.admin.list_topics(timeout=30).topics if t.startswith(prefix)]
        self.topics.extend(names)
        self.close()

    def close(self) -> None:
        if self.topics:
            for topic, future in self.admin.delete_topics(self.topics,
                                                          request_timeout=30).items():
                try:
                    future.result(30)
                except Exception as exc:  # noqa: BLE001 - cleanup: the leftover is named
                    print(f"bench: could not delete the throwaway topic {topic}: {exc}",
                          file=sys.stderr)
            self.topics.clear()


# -- scenarios ----------------------------------------------------------------------------------


@dataclass
class _Context:
    qm: QueueManager
    raw: _Raw
    messages: int
    payload: bytes
    round_no: int

    def queue_name(self, scenario: str) -> str:
        """A new queue's path: unique, so that no queue reads what an earlier one of the run
        left under its name (its snapshots)."""
        return rf".\private$\bench-{scenario}-{self.round_no}-{uuid.uuid4().hex[:6]}"


def _send_loop(queue: Any, n: int, payload: bytes, delivery: Delivery) -> float:
    return _message_loop(queue, n, lambda: Message(body=payload, delivery=delivery))


def _message_loop(queue: Any, n: int, make: Callable[[], Message]) -> float:
    """msg/s of ``n`` sends of ``make()``, one by one, waiting on the last."""
    queue.send(make(), wait=True)  # untimed warm-up
    start = time.perf_counter()
    for i in range(n):
        queue.send(make(), wait=i == n - 1, timeout=_TIMEOUT)
    return n / (time.perf_counter() - start)


def _batch_loop(queue: Any, n: int, payload: bytes, delivery: Delivery) -> float:
    """msg/s of ``n`` messages sent ``BATCH`` at a time with ``send_many``, waiting on the
    last batch."""
    queue.send(Message(body=payload, delivery=delivery), wait=True)  # untimed warm-up
    start = time.perf_counter()
    done = 0
    while done < n:
        size = min(BATCH, n - done)
        done += size
        queue.send_many([Message(body=payload, delivery=delivery) for _ in range(size)],
                        wait=done >= n, timeout=_TIMEOUT)
    return n / (time.perf_counter() - start)


def _queue_rate(ctx: _Context, scenario: str, loop: Callable[..., float],
                delivery: Delivery) -> float:
    """msg/s of ``loop`` (``_send_loop`` or ``_batch_loop``) on a fresh queue, dropped after."""
    queue = ctx.qm.create_queue(ctx.queue_name(scenario))
    try:
        return loop(queue, ctx.messages, ctx.payload, delivery)
    finally:
        _drop(ctx.qm, queue)


def _raw_express(ctx: _Context) -> float:
    """Raw produce, ``acks=1``: the equivalent of an EXPRESS send."""
    return ctx.raw.produce(ctx.raw.producer(acks=1), [ctx.raw.topic()], ctx.messages,
                           ctx.payload)


def _raw_recoverable(ctx: _Context) -> float:
    """Raw produce, ``acks=all`` and idempotence: the equivalent of a RECOVERABLE send."""
    producer = ctx.raw.producer(acks="all", **{"enable.idempotence": True})
    return ctx.raw.produce(producer, [ctx.raw.topic()], ctx.messages, ctx.payload)


def _send_batch(ctx: _Context) -> tuple[float, float]:
    raw = _raw_express(ctx)
    return _queue_rate(ctx, "send-batch", _batch_loop, Delivery.EXPRESS), raw


def _recoverable_send_batch(ctx: _Context) -> tuple[float, float]:
    raw = _raw_recoverable(ctx)
    return _queue_rate(ctx, "recoverable-send-batch", _batch_loop, Delivery.RECOVERABLE), raw


def _express_send(ctx: _Context) -> tuple[float, float]:
    raw = _raw_express(ctx)
    return _queue_rate(ctx, "express", _send_loop, Delivery.EXPRESS), raw


def _envelope_send(ctx: _Context) -> tuple[float, float]:
    topic = ctx.raw.topic()
    raw = ctx.raw.produce_envelopes(ctx.raw.producer(acks=1), topic, ctx.messages, ctx.payload)
    return _queue_rate(ctx, "envelope", _send_loop, Delivery.EXPRESS), raw


def _envelope_template() -> dict[str, Any]:
    """The Avro envelope of a default message (the raw side fills in id, time and body), with
    the parsed schema and single-object prefix under ``_schema`` and ``_prefix``."""
    sample = Message(body=b"").stamped(id=MessageId(uuid.uuid4(), 0), sent_time=None,
                                       source_machine_id=uuid.uuid4(),
                                       destination_queue=r"DIRECT=OS:bench\private$\q",
                                       destination_format_name=r"DIRECT=OS:bench\private$\q")
    writer = envelope_writer()
    return {**envelope_record(sample), "_schema": writer.parsed, "_prefix": writer.prefix}


def _recoverable_send(ctx: _Context) -> tuple[float, float]:
    raw = _raw_recoverable(ctx)
    return _queue_rate(ctx, "recoverable", _send_loop, Delivery.RECOVERABLE), raw


def _filled_queue(ctx: _Context, scenario: str) -> Any:
    queue = ctx.qm.create_queue(ctx.queue_name(scenario))
    for i in range(ctx.messages + 1):
        queue.send(Message(body=ctx.payload), wait=i == ctx.messages)
    return queue


def _receive(ctx: _Context) -> tuple[float, float]:
    return _read_loop(ctx, "receive", commit=True, reads=lambda q: (q.receive, q.receive))


def _peek(ctx: _Context) -> tuple[float, float]:
    def reads(queue: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
        cursor = queue.cursor()
        return cursor.peek_current, cursor.peek_next
    return _read_loop(ctx, "peek", commit=False, reads=reads)


def _read_loop(ctx: _Context, scenario: str, *, commit: bool,
               reads: Callable[[Any], tuple[Callable[..., Any], Callable[..., Any]]],
               ) -> tuple[float, float]:
    """(kmq, raw) msg/s reading a filled queue: ``reads(queue)`` gives the first read (untimed:
    view start-up, first fetch) and the next one; the raw side consumes the same count,
    committing each record when ``commit``."""
    topic = ctx.raw.topic()
    ctx.raw.fill(topic, ctx.messages + 1, ctx.payload)
    raw = ctx.raw.consume(topic, ctx.messages, commit=commit)
    queue = _filled_queue(ctx, scenario)
    try:
        first, following = reads(queue)
        first(timeout=_TIMEOUT)
        start = time.perf_counter()
        for _ in range(ctx.messages):
            following(timeout=_TIMEOUT)
        return ctx.messages / (time.perf_counter() - start), raw
    finally:
        _drop(ctx.qm, queue)


def _receive_batch(ctx: _Context) -> tuple[float, float]:
    """receive_many of BATCH (one receipt per batch) vs raw batch consume + fastavro decode."""
    topic = ctx.raw.topic()
    ctx.raw.produce_envelopes(ctx.raw.producer(acks=1), topic, ctx.messages, ctx.payload)
    raw = ctx.raw.consume_decoded(topic, ctx.messages, BATCH)
    queue = _filled_queue(ctx, "receive-batch")
    try:
        queue.receive(timeout=_TIMEOUT)  # untimed: view start-up, first fetch
        got, start = 0, time.perf_counter()
        while got < ctx.messages:
            got += len(queue.receive_many(min(BATCH, ctx.messages - got), timeout=_TIMEOUT))
        return ctx.messages / (time.perf_counter() - start), raw
    finally:
        _drop(ctx.qm, queue)


#: Messages per transaction in the transactional-send scenario.
TX_SIZE = 10


def _raw_transactional_send(ctx: _Context) -> float:
    """Raw Kafka transactions of TX_SIZE records each (begin, produce, commit)."""
    topic = ctx.raw.topic()
    producer = ctx.raw.producer(**{"transactional.id": f"kmq-bench-{uuid.uuid4().hex}"})
    producer.init_transactions(_TIMEOUT)
    start, done = time.perf_counter(), 0
    while done < ctx.messages:
        producer.begin_transaction()
        for _ in range(min(TX_SIZE, ctx.messages - done)):
            _produce(producer, topic, ctx.payload)
            done += 1
        producer.commit_transaction(_TIMEOUT)
    return ctx.messages / (time.perf_counter() - start)


def _transactional_send(ctx: _Context) -> tuple[float, float]:
    """send() of TX_SIZE messages per transaction to a transactional queue vs raw Kafka
    transactions of the same shape."""
    raw = _raw_transactional_send(ctx)
    queue = ctx.qm.create_queue(ctx.queue_name("transactional-send"), transactional=True)
    try:
        queue.send(Message(body=ctx.payload), transaction="single")  # untimed warm-up
        start, done = time.perf_counter(), 0
        while done < ctx.messages:
            with ctx.qm.begin_transaction() as tx:
                for _ in range(min(TX_SIZE, ctx.messages - done)):
                    queue.send(Message(body=ctx.payload), transaction=tx)
                    done += 1
        return ctx.messages / (time.perf_counter() - start), raw
    finally:
        _drop(ctx.qm, queue)


def _raw_transactional_move(ctx: _Context, per_transaction: int = 1) -> float:
    """Raw consume-transform-produce, ``per_transaction`` records per Kafka transaction: poll
    them, produce each to another topic and commit the consumer's offset in the same
    transaction."""
    source, target = ctx.raw.topic(), ctx.raw.topic()
    ctx.raw.fill(source, ctx.messages + 1, ctx.payload)
    # The offsets sent right after a commit are refused with CONCURRENT_TRANSACTIONS until the
    # commit's markers are written; librdkafka retries after retry.backoff.ms (100 ms by
    # default, 11 transactions/s here), and 10 ms is what a tuned application uses (84/s).
    producer = ctx.raw.producer(**{"transactional.id": f"kmq-bench-{uuid.uuid4().hex}",
                                   "retry.backoff.ms": 10})
    producer.init_transactions(_TIMEOUT)
    consumer = Consumer({**client_logging(), "bootstrap.servers": ctx.raw.bootstrap,
                         "group.id": f"kmq-bench-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 2})
    consumer.assign([TopicPartition(source, 0, 0)])
    try:
        moved, start = -1, 0.0  # the first record moves alone, untimed
        # Each Kafka transaction is a round with the transaction coordinator (tens of ms on a
        # loaded machine): the time allowed grows with the transactions to run.
        deadline = time.monotonic() + _TIMEOUT + 0.2 * ctx.messages / per_transaction
        while moved < ctx.messages:
            want = 1 if moved < 0 else min(per_transaction, ctx.messages - moved)
            records: list[Any] = []
            while len(records) < want:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"raw transactional move moved {moved} of {ctx.messages}")
                records += [r for r in consumer.consume(want - len(records), 1.0)
                            if not r.error()]
            producer.begin_transaction()
            for record in records:
                _produce(producer, target, record.value() or b"")
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, (records[-1].offset() or 0) + 1)],
                consumer.consumer_group_metadata(), _TIMEOUT)
            producer.commit_transaction(_TIMEOUT)
            moved += len(records)
            if moved == 0:
                start = time.perf_counter()
        return ctx.messages / (time.perf_counter() - start)
    finally:
        consumer.close()


def _transactional_move(ctx: _Context) -> tuple[float, float]:
    """Transactional receive + send (one message per transaction) between two transactional
    queues vs raw consume-transform-produce with Kafka transactions."""
    return _moves(ctx, 1, "transactional-move")


def _transactional_move_batch(ctx: _Context) -> tuple[float, float]:
    """``receive_many(TX_SIZE, transaction=tx)`` + ``send_many`` per transaction (one LOCK
    receipt per batch) vs raw consume-transform-produce of TX_SIZE records per transaction."""
    return _moves(ctx, TX_SIZE, "transactional-move-batch")


def _moves(ctx: _Context, per_transaction: int, name: str) -> tuple[float, float]:
    raw = _raw_transactional_move(ctx, per_transaction)
    source = ctx.qm.create_queue(ctx.queue_name(f"{name}-a"), transactional=True)
    target = ctx.qm.create_queue(ctx.queue_name(f"{name}-b"), transactional=True)
    try:
        done = 0
        while done <= ctx.messages:
            size = min(BATCH, ctx.messages + 1 - done)
            source.send_many([Message(body=ctx.payload) for _ in range(size)],
                             transaction="single")
            done += size
        moved, start = -1, 0.0  # the first message moves alone, untimed
        while moved < ctx.messages:
            want = 1 if moved < 0 else min(per_transaction, ctx.messages - moved)
            with ctx.qm.begin_transaction() as tx:
                if per_transaction == 1:
                    batch = [source.receive(timeout=_TIMEOUT, transaction=tx)]
                    target.send(Message(body=batch[0].body), transaction=tx)
                else:
                    batch = source.receive_many(want, timeout=_TIMEOUT, transaction=tx)
                    target.send_many([Message(body=m.body) for m in batch], transaction=tx)
            moved += len(batch)
            if moved == 0:
                start = time.perf_counter()
        return ctx.messages / (time.perf_counter() - start), raw
    finally:
        _drop(ctx.qm, source)
        _drop(ctx.qm, target)


#: Receiver processes in the receive-contended scenario.
CONTENDERS = 4

#: A receiver process of the multi-process scenarios: opens the queue (argv[2]), warms up
#: (``{warm_up}``), prints ``ready``, waits for the start line, then receives until 3 s pass
#: without a message and prints its receives.
_DRAINER = """
import json, pathlib, sys, time
from facade.config import KmqConfig
from facade.errors import ReceiveTimeout
from facade.manager import QueueManager
settings = json.loads(sys.argv[1])
config = KmqConfig.load(**dict(settings, home=pathlib.Path(settings["home"])))
with QueueManager.open(config) as qm:
{warm_up}
    print("ready", flush=True)
    sys.stdin.readline()  # the start signal
    ids, start = [], time.time()
    while True:
        try:
            ids.append(str(queue.receive(timeout=3).id))
        except ReceiveTimeout:
            break
    print(json.dumps({{"start": start, "end": time.time() - 3, "ids": ids}}), flush=True)
    queue.close()
"""

_CONTENDER = _DRAINER.format(warm_up="""\
    queue = qm.open_queue(sys.argv[2], spread_picks=sys.argv[3] == "spread")
    queue.peek(timeout=60)  # untimed: view start-up, first fetch""")


def _receive_contended(ctx: _Context) -> tuple[float, float]:
    """Aggregate msg/s of CONTENDERS receiver processes draining one queue, vs the same run's
    single-receiver receive figure; checks that none is lost and none received twice."""
    return _contended(ctx, spread_picks=False)


def _receive_contended_spread(ctx: _Context) -> tuple[float, float]:
    """As :func:`_receive_contended`, the receivers opened with ``spread_picks=True``."""
    return _contended(ctx, spread_picks=True)


def _contended(ctx: _Context, spread_picks: bool) -> tuple[float, float]:
    single, _raw = _read_loop(ctx, "receive-single", commit=True,
                              reads=lambda q: (q.receive, q.receive))
    queue = _filled_queue(ctx, "receive-contended")
    rate = _process_drain(ctx, queue, _CONTENDER, ["spread" if spread_picks else "head"],
                          CONTENDERS, "receive-contended")
    return rate, single


def _process_drain(ctx: _Context, queue: Any, script: str, arguments: list[str],
                   processes: int, label: str,
                   fill: Callable[[], object] | None = None) -> float:
    """Aggregate msg/s of ``processes`` receiver processes running ``script`` on ``queue``
    (dropped after): see :func:`_worker_drain`, the queue's format name as the target.

    Raises:
        RuntimeError: a worker did not start, or a message was lost or received twice.
    """
    try:
        return _worker_drain(ctx, queue.format_name, script, arguments, processes, label, fill)
    finally:
        _drop(ctx.qm, queue)


def _worker_drain(ctx: _Context, target: str, script: str, arguments: list[str],
                  processes: int, label: str,
                  fill: Callable[[], object] | None = None) -> float:
    """Aggregate msg/s of ``processes`` worker processes running ``script`` (argv: the
    broker settings as JSON, ``target``, ``arguments``): each prints ``ready``, then
    ``fill`` (if any) fills the queue, then all start at once and drain it, and each prints
    ``{"start", "end", "ids"}``; checks that the ``ctx.messages + 1`` messages were received
    once each.

    Raises:
        RuntimeError: a worker did not start, or a message was lost or received twice.
    """
    config = ctx.qm.config
    settings = json.dumps({"bootstrap_servers": ctx.raw.bootstrap,
                           "queue_manager": config.queue_manager, "home": str(config.home),
                           "replication_factor": config.replication_factor,
                           "min_insync_replicas": config.min_insync_replicas})
    workers = [subprocess.Popen([sys.executable, "-c", script, settings, target, *arguments],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(processes)]
    try:
        for worker in workers:
            if worker.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
                raise RuntimeError(f"a {label} worker failed to start")
        if fill is not None:
            fill()
        for worker in workers:
            worker.stdin.write("go\n")  # type: ignore[union-attr]
            worker.stdin.flush()  # type: ignore[union-attr]
        results = [json.loads(worker.communicate(timeout=_TIMEOUT * 5)[0].splitlines()[-1])
                   for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    ids = [i for result in results for i in result["ids"]]
    if len(ids) != len(set(ids)) or len(ids) != ctx.messages + 1:
        raise RuntimeError(f"{label}: {len(ids)} receives, {len(set(ids))} distinct, "
                           f"{ctx.messages + 1} sent: a message was lost or received twice")
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    return len(ids) / elapsed


#: Receiver process counts of the receive-share scenario.
SHARE_PROCESSES = (1, 2, 4)

_SHARE_RECEIVER = _DRAINER.format(warm_up="""\
    queue = qm.open_queue(sys.argv[2])
    try:  # untimed: join the share group while the queue is empty
        queue.receive(timeout=8)
        raise SystemExit("receive-share: a message before the queue was filled")
    except ReceiveTimeout:
        pass""")


#: The raw share consumers' group: the data topic's name + this.
_RAW_SHARE_GROUP = ".bench-raw-share"

#: The raw comparator of the receive-share scenario: a confluent-kafka share consumer of a
#: group of its own (the topic + argv[4]) on a share queue's data topic (argv[2]), explicit
#: acknowledgement, the same ``max.poll.records`` as kmq's (argv[3]), one ACCEPT +
#: ``commit_sync`` per record (the least a destructive receive needs: removed before it
#: returns). It joins while the topic is empty (a new share group starts at the latest
#: offset, here 0), then drains as :data:`_DRAINER` does and prints the offsets whose ACCEPT
#: the broker applied.
_RAW_SHARE_RECEIVER = """
import json, sys, time
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer
from facade.kafka.librdkafka import client_logging
settings, topic = json.loads(sys.argv[1]), sys.argv[2]
consumer = ShareConsumer({**client_logging(), "bootstrap.servers": settings["bootstrap_servers"],
                          "group.id": topic + sys.argv[4],
                          "share.acknowledgement.mode": "explicit",
                          "max.poll.records": int(sys.argv[3])})
consumer.subscribe([topic])
transient = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
             KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._PARTITION_EOF}

def records(timeout):
    out = []
    for record in consumer.poll(timeout):
        error = record.error()
        if error is None:
            out.append(record)
        elif not (error.retriable() or error.code() in transient):
            raise KafkaException(error)
    return out

joined = time.monotonic() + 8
while time.monotonic() < joined:  # untimed: join the share group while the topic is empty
    if records(0.5):
        raise SystemExit("receive-share (raw): a record before the topic was filled")
print("ready", flush=True)
sys.stdin.readline()  # the start signal
ids, start, end, last = [], time.time(), time.time(), time.monotonic()
while time.monotonic() - last < 3:
    for record in records(0.5):
        consumer.acknowledge(record, AcknowledgeType.ACCEPT)
        if all(error is None for error in consumer.commit_sync(60).values()):
            ids.append(record.offset())
        end, last = time.time(), time.monotonic()
print(json.dumps({"start": start, "end": end, "ids": ids}), flush=True)
consumer.close()
"""


def _receive_share(ctx: _Context) -> tuple[float, float, dict[str, float]]:
    """Aggregate msg/s of 1, 2 and 4 receiver processes draining a share-arbitrated queue
    (each a fresh queue, its receivers joined before it is filled), vs the same run's single
    default receive; checks that none is lost and none received twice. kmq = 4 processes.

    Further figures: ``raw_share_N_msg_per_s``, N raw share consumers (one ACCEPT +
    ``commit_sync`` per record, :data:`_RAW_SHARE_RECEIVER`) draining the same number of
    records sent by kmq to another share queue: what Kafka's share groups give a destructive
    receive on this machine, whatever runs above them."""
    single, _raw = _read_loop(ctx, "receive-single", commit=True,
                              reads=lambda q: (q.receive, q.receive))
    figures: dict[str, float] = {"load_avg_1min": os.getloadavg()[0]}
    for processes in SHARE_PROCESSES:
        figures[f"share_{processes}_msg_per_s"] = _share_drain(ctx, processes, raw=False)
        figures[f"raw_share_{processes}_msg_per_s"] = _share_drain(ctx, processes, raw=True)
    figures["load_avg_1min_after"] = os.getloadavg()[0]
    return figures[f"share_{SHARE_PROCESSES[-1]}_msg_per_s"], single, figures


def _share_drain(ctx: _Context, processes: int, raw: bool) -> float:
    """msg/s of ``processes`` kmq receivers (``raw``: raw share consumers) draining a fresh
    share queue that kmq fills with ``ctx.messages + 1`` messages once they have joined."""
    side = "raw" if raw else "kmq"
    queue = ctx.qm.create_queue(ctx.queue_name(f"receive-share-{side}-{processes}"),
                                arbitration="share")

    def fill() -> None:
        for i in range(ctx.messages + 1):
            queue.send(Message(body=ctx.payload), wait=i == ctx.messages)

    label = f"receive-share ({side}, {processes} processes)"
    if not raw:
        return _process_drain(ctx, queue, _SHARE_RECEIVER, [], processes, label, fill)
    topic = queue.properties.data_topic
    try:
        return _worker_drain(ctx, topic, _RAW_SHARE_RECEIVER,
                             [str(MAX_POLL_RECORDS), _RAW_SHARE_GROUP], processes, label, fill)
    finally:
        _drop(ctx.qm, queue)
        group = topic + _RAW_SHARE_GROUP
        try:
            ctx.raw.admin.delete_consumer_groups([group])[group].result(_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - cleanup: the figures stand, the leftover is named
            print(f"bench: could not delete the throwaway share group {group}: {exc}",
                  file=sys.stderr)


def _dl_fanout(ctx: _Context) -> tuple[float, float]:
    topics = [ctx.raw.topic() for _ in range(FANOUT)]
    raw = ctx.raw.produce(ctx.raw.producer(acks=1), topics, ctx.messages, ctx.payload)
    directory = ctx.qm.directory
    queues = [ctx.qm.create_queue(rf".\bench-fan-{ctx.round_no}-{i}") for i in range(FANOUT)]
    name = f"bench-fanout-{ctx.round_no}-{uuid.uuid4().hex[:6]}"
    dl = directory.create_distribution_list(name)
    try:
        for queue in queues:
            directory.add_member(name, f"PUBLIC={queue.properties.instance}")
        handle = ctx.qm.open_queue(dl.format_name)
        return _send_loop(handle, ctx.messages, ctx.payload, Delivery.EXPRESS), raw
    finally:
        directory.delete_distribution_list(name)
        for queue in queues:
            _drop(ctx.qm, queue)


def _drop(qm: QueueManager, queue: Any) -> None:
    path = queue.format_name
    queue.close()
    try:
        qm.delete_queue(path)
    except Exception as exc:  # noqa: BLE001 - cleanup: the figures stand, the leftover is named
        print(f"bench: could not delete the throwaway queue {path}: {exc}", file=sys.stderr)


def _security_ready(qm: QueueManager) -> None:
    """A signing identity for the run's principal, registered in the run's directory."""
    from facade.security.certificates import create_identity, identity_names
    from facade.directory.certificates import register_certificate

    home, principal = qm.config.home, qm.config.principal
    if principal not in identity_names(home):
        identity = create_identity(home, principal)
        register_certificate(qm.directory, principal, identity.certificate_der, identity.digest)


_SIGNED: dict[str, Any] = {"auth_level": AuthLevel.ALWAYS}
_ENCRYPTED: dict[str, Any] = {"privacy_level": PrivacyLevel.BODY_AES}


def _protected_send(ctx: _Context, scenario: str, protection: dict[str, Any]
                    ) -> tuple[float, float]:
    """(protected express send, plain express send) msg/s, each on a fresh queue."""
    _security_ready(ctx.qm)
    plain = _queue_rate(ctx, f"{scenario}-plain", _send_loop, Delivery.EXPRESS)
    queue = ctx.qm.create_queue(ctx.queue_name(scenario))
    try:
        return _message_loop(queue, ctx.messages,
                             lambda: Message(body=ctx.payload, **protection)), plain
    finally:
        _drop(ctx.qm, queue)


def _signed_send(ctx: _Context) -> tuple[float, float]:
    return _protected_send(ctx, "signed-send", _SIGNED)


def _encrypted_send(ctx: _Context) -> tuple[float, float]:
    return _protected_send(ctx, "encrypted-send", _ENCRYPTED)


def _signed_encrypted_receive(ctx: _Context) -> tuple[float, float]:
    """(receive_many(BATCH) of signed + encrypted messages: decrypt, verify, directory check
    from the cache; plain express send) msg/s. Batches, as one receive() per message is bound
    by its receipt's round trip (the ``receive`` scenario), not by the cryptography."""
    _security_ready(ctx.qm)
    plain = _queue_rate(ctx, "signed-encrypted-plain", _send_loop, Delivery.EXPRESS)
    queue = ctx.qm.create_queue(ctx.queue_name("signed-encrypted-receive"))
    try:
        total = ctx.messages + 1
        for first in range(0, total, BATCH):
            queue.send_many([Message(body=ctx.payload, **_SIGNED, **_ENCRYPTED)
                             for _ in range(min(BATCH, total - first))], wait=True,
                            timeout=_TIMEOUT)
        queue.receive(timeout=_TIMEOUT)  # untimed: view start-up, first fetch
        got, start = 0, time.perf_counter()
        while got < ctx.messages:
            batch = queue.receive_many(min(BATCH, ctx.messages - got), timeout=_TIMEOUT)
            if not all(m.authenticated for m in batch):
                raise ConfigurationError("signed-encrypted-receive: a message did not verify")
            got += len(batch)
        return ctx.messages / (time.perf_counter() - start), plain
    finally:
        _drop(ctx.qm, queue)


#: A scenario: (kmq msg/s, raw msg/s), optionally with further figures by JSON key.
_Scenario = Callable[[_Context], tuple[Any, ...]]

#: name -> (description, function); ``spark-decode`` is run by :func:`_spark_decode`.
SCENARIOS: dict[str, tuple[str, _Scenario | None]] = {
    "express-send": ("express send vs raw produce (acks=1)", _express_send),
    "envelope-send": ("express send vs raw produce of the same Avro envelope + headers",
                      _envelope_send),
    "recoverable-send": ("recoverable send vs raw produce (acks=all, idempotent)",
                         _recoverable_send),
    "send-batch": (f"send_many({BATCH}) express vs raw produce (acks=1)", _send_batch),
    "recoverable-send-batch": (f"send_many({BATCH}) recoverable vs raw produce (acks=all, "
                               "idempotent)", _recoverable_send_batch),
    "receive": ("receive vs raw consume + sync commit per record", _receive),
    "receive-batch": ("receive_many(100) vs raw batch consume + fastavro decode",
                      _receive_batch),
    "receive-contended": (f"{CONTENDERS} receiver processes on one queue vs one receiver",
                          _receive_contended),
    "receive-contended-spread": (f"{CONTENDERS} receiver processes, spread_picks=True, vs one "
                                 "receiver", _receive_contended_spread),
    "receive-share": ("1, 2, 4 receiver processes on a share-arbitrated queue: 4 vs one "
                      "default receiver", _receive_share),
    "peek": ("cursor peek vs raw consume without commit", _peek),
    "dl-fanout": (f"send to a DL of {FANOUT} queues vs raw produce x{FANOUT}", _dl_fanout),
    "transactional-send": (f"{TX_SIZE} sends per transaction vs raw Kafka transactions of "
                           f"{TX_SIZE} records", _transactional_send),
    "transactional-move": ("transactional receive + send per transaction vs raw "
                           "consume-transform-produce (send_offsets_to_transaction)",
                           _transactional_move),
    "transactional-move-batch": (f"receive_many({TX_SIZE}) + send_many per transaction vs raw "
                                 f"consume-transform-produce of {TX_SIZE} records per "
                                 "transaction", _transactional_move_batch),
    "signed-send": ("signed express send vs plain express send (kmq both)", _signed_send),
    "encrypted-send": ("encrypted express send vs plain express send (kmq both)",
                       _encrypted_send),
    "signed-encrypted-receive": (f"signed + encrypted receive_many({BATCH}) vs plain express "
                                 "send (kmq both)",
                                 _signed_encrypted_receive),
    "spark-decode": ("Spark decode rows/s vs raw Spark read of the topic", None),
}


def _spark_decode(bootstrap: str, messages: int, rounds: int, payload: int) -> ScenarioResult:
    """Run ``benchmarks/spark_decode_bench.py`` and take its per-round figures: kmq = the
    queue view read and decoded into messages, raw = the raw log of the same topic."""
    result = ScenarioResult("spark-decode", SCENARIOS["spark-decode"][0])
    if not _SPARK_SCRIPT.is_file():
        result.skipped = f"{_SPARK_SCRIPT.name} is not in this checkout"
        return result
    try:
        import pyspark  # noqa: F401
    except ImportError:
        result.skipped = "pyspark is not installed (pip install -e '.[spark]')"
        return result
    if payload != 200:
        result.description += " (its payload is fixed at 200 B)"
    argv = [sys.executable, str(_SPARK_SCRIPT), "--messages", str(messages),
            "--rounds", str(rounds)]
    env = {**os.environ, "KMQ_BOOTSTRAP_SERVERS": bootstrap,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(_SPARK_SCRIPT.parents[1]),
                                                       os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800, check=False)
    if out.returncode != 0:
        result.skipped = f"{_SPARK_SCRIPT.name} failed: {out.stderr.strip()[-300:]}"
        return result
    try:
        data = json.loads(out.stdout[out.stdout.index("\n{") + 1:])
        result.kmq = [float(x) for x in data["all_rounds"]["queue view + decode"]]
        result.raw = [float(x) for x in data["all_rounds"]["raw log"]]
    except (ValueError, KeyError, TypeError) as exc:
        result.skipped = f"{_SPARK_SCRIPT.name} printed no per-round figures: {exc}"
    return result


# -- runner -------------------------------------------------------------------------------------


def run_benchmarks(config: KmqConfig | None = None, *, messages: int = 2000, rounds: int = 3,
                   payload: int = 200, scenarios: Sequence[str] = DEFAULT_SCENARIOS,
                   progress: Callable[[str], None] | None = None) -> BenchReport:
    """Run the named scenarios ``rounds`` times and return medians and ratios.

    Args:
        config (KmqConfig | None): where the broker is (default :meth:`KmqConfig.load`); the
            queue manager, home and directory of the run are throwaway ones.
        messages (int): messages per timed loop (>= 1).
        rounds (int): rounds per scenario (>= 1); the median is reported.
        payload (int): body size in bytes (>= 0).
        scenarios (Sequence[str]): names from :data:`SCENARIOS`.
        progress (Callable[[str], None] | None): called with a line per finished round.

    Raises:
        ConfigurationError: an unknown scenario name, or a count out of range.
        BrokerUnavailable: no broker configured or running.
    """
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ConfigurationError(f"unknown benchmark scenario(s) {', '.join(unknown)}",
                                 hint=f"choose from {', '.join(SCENARIOS)}")
    if messages < 1 or rounds < 1 or payload < 0:
        raise ConfigurationError("--messages and --rounds must be >= 1 and --payload >= 0")
    config = config or KmqConfig.load()
    bootstrap = resolve_bootstrap_servers(config)
    started = time.time()
    report = BenchReport(messages, rounds, payload, describe_machine(), describe_broker(bootstrap, config),
                         [], time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)))
    config.home.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=config.home))
    bench_config = dataclasses.replace(
        config, bootstrap_servers=bootstrap, home=work,
        queue_manager=f"bench-{uuid.uuid4().hex[:8]}",
        directory=DirectorySettings(url=f"embedded:{work / 'directory.json'}"))
    body = b"x" * payload
    raw = _Raw(bootstrap)
    try:
        with QueueManager.open(bench_config) as qm:
            for name in scenarios:
                description, function = SCENARIOS[name]
                if function is None:
                    report.results.append(_spark_decode(bootstrap, messages, rounds, payload))
                    continue
                result = ScenarioResult(name, description, target=TARGETS.get(name))
                for round_no in range(rounds):
                    try:
                        ours, theirs, *more = function(_Context(qm, raw, messages, body,
                                                                round_no))
                    except TimeoutError as exc:
                        # One side did not finish in its time: the other scenarios still count.
                        result.skipped = f"round {round_no + 1} did not finish: {exc}"
                        raw.close()
                        if progress:
                            progress(f"{name} round {round_no + 1}/{rounds}: {result.skipped}")
                        break
                    result.kmq.append(ours)
                    result.raw.append(theirs)
                    for key, value in (more[0] if more else {}).items():
                        result.figures.setdefault(key, []).append(round(value, 2))
                    raw.close()
                    if progress:
                        extra = "".join(f", {key} {value:,.2f}"
                                        for key, value in (more[0] if more else {}).items())
                        progress(f"{name} round {round_no + 1}/{rounds}: kmq {ours:,.0f} msg/s, "
                                 f"raw {theirs:,.0f} msg/s{extra}")
                report.results.append(result)
    finally:
        raw.close()
        raw.drop_prefixed(f"kmq.{bench_config.queue_manager}.")
        shutil.rmtree(work, ignore_errors=True)
    report.seconds = time.time() - started
    return report


def format_table(report: BenchReport) -> str:
    """The report as a plain-text table (the CLI renders it with rich)."""
    lines = [f"{'scenario':58} {'kmq msg/s':>10} {'raw msg/s':>11} {'ratio':>6} {'target':>6}"]
    for r in report.results:
        if r.skipped:
            lines.append(f"{r.description:58} skipped: {r.skipped}")
            continue
        target = f"{r.target:.2f}" if r.target is not None else "-"
        lines.append(f"{r.description:58} {r.kmq_median:10,.0f} {r.raw_median:11,.0f} "
                     f"{r.ratio:6.3f} {target:>6}")
        if r.figures:
            lines.append(f"  {r.figures_text()}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m facade.bench``: the same as ``kmq bench`` without rich."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run_benchmarks(messages=args.messages, rounds=args.rounds, payload=args.payload,
                            scenarios=args.scenario or DEFAULT_SCENARIOS,
                            progress=lambda line: print(line, file=sys.stderr))
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_table(report))


if __name__ == "__main__":
    main()
