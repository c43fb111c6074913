"""Floors of the targets of ``kmq bench``: what the unavoidable parts of a kmq
operation cost on this machine, against the time per message each target allows.

``kmq bench`` compares kmq with raw confluent-kafka, and a target is a ratio of the two (or, for
``recoverable-send-batch``, a rate). This script measures, in one run, the parts that no
implementation of kmq's design can skip, and adds them up into a *floor* per target:

* a send builds a ``Message``, writes the Avro envelope with fastavro (the wire format,
  ``schemas/README.md``) and produces a record that carries kmq's headers;
* a receive (nontransactional, one message per grant) builds and encodes a receipt and waits
  for the broker to acknowledge it (``acks=all``), because the receipts log is what every
  process decides verdicts from (``docs/design.md``);
* a batch receive reads and decodes the envelope, as its raw comparator does, and also builds
  the ``Message`` that it hands out.

The *budget* is the time per message that the target allows: the raw side's measured time per
message divided by the target ratio (``1 / 20,000 s`` for the recoverable rate). When the
floor is above the budget, no implementation that keeps these parts meets the target on this
machine, whatever else it saves; when it is below, the margin is what all of kmq's other work
per message (resolution, rights, ids, stamping, the outgoing queue, the index, verdicts) may
cost. ``receive-contended`` has no floor here: it is a speed-up from adding processes, bounded
by the cores the receivers and the broker share (``docs/performance.md``).

    KMQ_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/floors_bench.py
    .venv/bin/python benchmarks/floors_bench.py --no-broker    # the CPU parts only

CPU parts: the minimum over ``--rounds`` of the mean of ``--messages`` calls (a floor is a
best case). Broker parts: the minimum over the rounds too, each round on the same broker.
Results: docs/performance.md, "Floors of the open targets".
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fastavro  # noqa: E402

from benchmarks.wire_format_bench import per_call_us, sample_messages  # noqa: E402
from facade import Message  # noqa: E402
from facade.bench import BATCH, FANOUT, TARGETS, _Raw  # noqa: E402
from facade.config import KmqConfig  # noqa: E402
from facade.model.envelope import (  # noqa: E402
    decode_message,
    encode_message,
    envelope_record,
    envelope_writer,
)
from facade.state.outgoingqueue import OutgoingQueue  # noqa: E402
from facade.model.receipts import ReceiptAction, encode_receipt, make_claimant, new_claim  # noqa: E402

#: Body bytes of every message, as in ``kmq bench``'s default ``--payload``.
PAYLOAD = 200
#: The ``recoverable-send-batch`` target, msg/s (a rate, so not in ``TARGETS``).
RECOVERABLE_BATCH_RATE = 20_000


def express_message() -> Message:
    """A default express message with a 200-byte body, stamped as a send stamps it."""
    return sample_messages()["express 200 B"]


def cpu_parts(count: int, rounds: int, home: Path) -> dict[str, float]:
    """Microseconds of the CPU parts, per message.

    Returns:
        dict[str, float]: ``message`` (``Message(body=...)``), ``avro_write`` (fastavro's
        ``schemaless_writer`` of a prepared envelope record), ``avro_read`` (fastavro's
        ``schemaless_reader`` of it), ``message_build`` (``decode_message`` less
        ``avro_read``: the checked ``Message`` a receive hands out), ``receipt`` (build and
        encode one RECEIVE receipt) and ``outgoing_row`` (one row of a fsync'd outgoing-queue
        commit of :data:`BATCH` rows, the group commit of a recoverable ``send_many``).
    """
    body = b"x" * PAYLOAD
    message = express_message()
    writer = envelope_writer()
    record = envelope_record(message)
    value = encode_message(message).value

    def write() -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, writer.parsed, record)
        return out.getvalue()

    prefix = len(writer.prefix)

    def read() -> object:
        stream = io.BytesIO(value)
        stream.seek(prefix)
        return fastavro.schemaless_reader(stream, writer.parsed, None)

    claimant = make_claimant("floors")
    parts = {
        "message": per_call_us(lambda: Message(body=body), count, rounds),
        "avro_write": per_call_us(write, count, rounds),
        "avro_read": per_call_us(read, count, rounds),
        "decode_message": per_call_us(lambda: decode_message(value), count, rounds),
        "receipt": per_call_us(
            lambda: encode_receipt(new_claim(ReceiptAction.RECEIVE, [42], claimant)),
            count, rounds),
        "outgoing_row": _outgoing_row_us(home, message, count, rounds),
    }
    parts["message_build"] = max(parts["decode_message"] - parts["avro_read"], 0.0)
    return parts


def _outgoing_row_us(home: Path, message: Message, count: int, rounds: int) -> float:
    """Microseconds per row of storing rows :data:`BATCH` to a commit in a real outgoing
    queue (SQLite, ``synchronous=FULL``: one fsync per commit) under ``home``. Removing the
    rows is not timed: kmq removes acknowledged rows on its poller thread, many per
    transaction."""
    record = encode_message(message)
    row = ("floors", record.key, record.value, list(record.headers), str(message.id),
           2 ** 62)
    outgoing = OutgoingQueue(home / "floors-outgoing.sqlite3")
    try:
        batches = max(count // BATCH, 1)
        best = float("inf")
        for _ in range(rounds):
            stored: list[int] = []
            elapsed = 0.0
            for _ in range(batches):
                start = time.perf_counter()
                stored += outgoing.put_copies([row] * BATCH, "floors", 0)
                elapsed += time.perf_counter() - start
            outgoing.remove_many(stored)
            best = min(best, elapsed / (batches * BATCH) * 1e6)
        return best
    finally:
        outgoing.close()


def broker_parts(bootstrap: str, count: int, rounds: int) -> dict[str, float]:
    """Microseconds per message of ``kmq bench``'s raw comparators (its own code, so they
    are exactly what the targets are ratios of; the median of ``rounds``, as there) and of
    the broker work a kmq operation cannot skip (the minimum of ``rounds``).

    Returns:
        dict[str, float]: comparators ``produce`` (the raw side of ``express-send`` and
        ``send-batch``), ``produce_fanout`` (of ``dl-fanout``: one send is :data:`FANOUT`
        records), ``consume_commit`` (of ``receive``) and ``consume_decode`` (of
        ``receive-batch``); floor parts ``envelope_app`` (the raw side of ``envelope-send``: a
        raw application that writes kmq's envelope with fastavro and produces it with kmq's
        headers), ``produce_enveloped`` (producing an already encoded record with kmq's key and
        headers) and ``ack_round_trip`` (one acks=all produce waited for, linger 0: a
        receipt).
    """
    raw = _Raw(bootstrap)
    body = b"x" * PAYLOAD
    samples: dict[str, list[float]] = {}

    def sample(name: str, rate: float) -> None:
        samples.setdefault(name, []).append(1e6 / rate)

    try:
        for _ in range(rounds):
            fast = raw.producer(acks=1)
            sample("produce", raw.produce(fast, [raw.topic()], count, body))
            sample("produce_fanout", raw.produce(fast, [raw.topic() for _ in range(FANOUT)],
                                                 count, body))
            enveloped = raw.topic()
            sample("envelope_app", raw.produce_envelopes(fast, enveloped, count, body))
            sample("consume_decode", raw.consume_decoded(enveloped, count - 1, BATCH))
            plain = raw.topic()
            raw.fill(plain, count, body)
            sample("consume_commit", raw.consume(plain, count - 1, commit=True))
            samples.setdefault("produce_enveloped", []).append(
                _produce_enveloped_us(fast, raw.topic(), count))
            samples.setdefault("ack_round_trip", []).append(
                _ack_round_trip_us(raw.producer(acks="all", **{"linger.ms": 0}), raw.topic(),
                                   count))
            raw.close()
    finally:
        raw.close()
    comparators = ("produce", "produce_fanout", "consume_commit", "consume_decode")
    return {name: (statistics.median(values) if name in comparators else min(values))
            for name, values in samples.items()}


def _produce_enveloped_us(producer: Any, topic: str, count: int) -> float:
    """Microseconds per record producing kmq's encoded record (key, value, headers), built
    beforehand, in ``kmq bench``'s raw loop (poll(0) after each, one flush at the end)."""
    record = encode_message(express_message())
    headers = list(record.headers)
    producer.produce(topic, record.value, key=record.key, headers=headers)  # warm-up
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(count):
        producer.produce(topic, record.value, key=record.key, headers=headers)
        producer.poll(0)
    producer.flush(60)
    return (time.perf_counter() - start) / count * 1e6


def _ack_round_trip_us(producer: Any, topic: str, count: int) -> float:
    """Microseconds of one acks=all produce waited for before the next, as a receipt is."""
    producer.produce(topic, b"warm-up")
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(count):
        producer.produce(topic, b"r" * 64)
        producer.flush(60)
    return (time.perf_counter() - start) / count * 1e6


def floors(cpu: dict[str, float], broker: dict[str, float]) -> list[dict[str, Any]]:
    """Budget and floor per target, in microseconds per message (per send for dl-fanout).

    Args:
        cpu (dict[str, float]): :func:`cpu_parts`.
        broker (dict[str, float]): :func:`broker_parts`.

    Returns:
        list[dict[str, Any]]: ``target``, ``budget_us``, ``floor_us``, ``floor_parts`` (how
        the floor adds up) and ``margin_us`` (budget less floor; negative: out of reach).
    """
    send = cpu["message"] + broker["envelope_app"]
    send_parts = "Message() + the raw envelope application (fastavro write, produce)"
    def ratio(name: str, raw_us: float) -> tuple[str, float]:
        return f"{name} >= {TARGETS[name]}", raw_us / TARGETS[name]

    rows = [
        (*ratio("express-send", broker["produce"]), send, send_parts),
        (*ratio("send-batch", broker["produce"]), send, send_parts),
        (*ratio("dl-fanout", broker["produce_fanout"]),
         cpu["message"] + cpu["avro_write"] + FANOUT * broker["produce_enveloped"],
         f"Message() + fastavro write + {FANOUT} produces of the encoded record"),
        (f"recoverable-send-batch >= {RECOVERABLE_BATCH_RATE:,} msg/s",
         1e6 / RECOVERABLE_BATCH_RATE, send + cpu["outgoing_row"],
         send_parts + " + an outgoing-queue row (group commit)"),
        (*ratio("receive", broker["consume_commit"]),
         cpu["receipt"] + broker["ack_round_trip"],
         "receipt built and encoded + its acks=all round trip"),
        (*ratio("receive-batch", broker["consume_decode"]),
         broker["consume_decode"] + cpu["message_build"],
         "the raw side's consume and fastavro read + building the checked Message"),
    ]
    return [{"target": target, "budget_us": budget, "floor_us": floor,
             "floor_parts": parts, "margin_us": budget - floor}
            for target, budget, floor, parts in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-broker", action="store_true", help="the CPU parts only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # The outgoing queue is timed on the disk kmq uses: under KMQ_HOME (kmq bench does too).
    kmq_home = KmqConfig.load().home
    kmq_home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="floors-", dir=kmq_home) as home:
        result: dict[str, Any] = {"cpu_us": cpu_parts(args.messages, args.rounds, Path(home))}
    bootstrap = os.environ.get("KMQ_BOOTSTRAP_SERVERS")
    if not args.no_broker and bootstrap:
        result["broker_us"] = broker_parts(bootstrap, args.messages, args.rounds)
        result["targets"] = floors(result["cpu_us"], result["broker_us"])
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for group in ("cpu_us", "broker_us"):
        for name, value in result.get(group, {}).items():
            print(f"{group[:-3]:6} {name:18} {value:8.1f} us")
    for row in result.get("targets", []):
        verdict = "out of reach" if row["margin_us"] < 0 else "margin"
        print(f"{row['target']:40} budget {row['budget_us']:7.1f} us  floor "
              f"{row['floor_us']:7.1f} us  {verdict} {abs(row['margin_us']):6.1f} us  "
              f"({row['floor_parts']})")
    if bootstrap is None and not args.no_broker:
        print("no broker: set KMQ_BOOTSTRAP_SERVERS (or run `kmq dev up`) for the budgets",
              file=sys.stderr)


if __name__ == "__main__":
    main()
