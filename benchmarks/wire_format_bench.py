"""The record layout of a kmq message: the Avro envelope kmq writes against MSMQ properties as Kafka
headers with the body as the record value (the layout of CloudEvents' Kafka binary mode).

Measuring both is how the layout is chosen. The headers layout is prototyped here only (kmq
writes the Avro envelope): every envelope field that differs from its default becomes one
header ``kmq.<field>`` (text as UTF-8, integers as decimal digits, bytes as they are, the
application properties map as JSON), the body is the value. Both layouts start from the same
envelope record (``facade.model.envelope.envelope_record``) and end in the same ``Message``
constructor, so the comparison is of the wire layout alone.

Measured per message, for three messages (a default express message with a 200-byte body; one
with label, correlation id, application properties, response and admin queues and a TTBR; one
with a 4 KB body): encode, decode, bytes on the wire (value plus headers as Kafka's record
format v2 stores them), and producing N records of each layout to a broker (with a raw produce
of the bare body as the floor). It also times ``MessageQueue.send`` (express) per message, to
say what share of a send the layout can win at most. Minimum of ``--rounds`` repeats.

    KMQ_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/wire_format_bench.py
    .venv/bin/python benchmarks/wire_format_bench.py --no-broker   # encode/decode/size only

Results and the decision: schemas/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from facade import Message, MessageId  # noqa: E402
from facade.model.envelope import (  # noqa: E402
    _message_from_record,
    decode_message,
    encode_message,
    envelope_record,
)

_SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas"
                      / "message_envelope.avsc").read_text())
#: Envelope field -> (Avro type kind, default).
_FIELDS: dict[str, tuple[str, Any]] = {}
for _field in _SCHEMA["fields"]:
    _type = _field["type"]
    _kind = next((t for t in _type if t != "null"), None) if isinstance(_type, list) else _type
    if isinstance(_kind, dict):  # logical types as the envelope reader hands them out
        _kind = {"timestamp-millis": "instant", "uuid": "uuid"}.get(
            _kind.get("logicalType", ""), "bytes" if _kind["type"] == "fixed" else _kind["type"])
    if _kind == "MessageId":
        _kind = "bytes"
    _default = _field.get("default")
    if _kind == "bytes" and isinstance(_default, str):  # Avro writes bytes defaults as text
        _default = _default.encode("latin-1")
    _FIELDS[_field["name"]] = (str(_kind), _default)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def headers_layout(message: Message) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The prototype layout: (value = body, one header per field that is not its default)."""
    record = envelope_record(message)
    headers = []
    for name, value in record.items():
        if name == "body" or value is None or value == _FIELDS[name][1]:
            continue
        kind = _FIELDS[name][0]
        if kind == "bytes":
            data = value
        elif kind in ("string", "uuid"):
            data = value.encode("utf-8")
        elif kind == "map":
            data = json.dumps(value, separators=(",", ":")).encode("utf-8")
        elif kind == "boolean":
            data = b"1"
        else:
            data = b"%d" % value
        headers.append(("kmq." + name, data))
    return record["body"], headers


def from_headers_layout(value: bytes, headers: list[tuple[str, bytes]]) -> Message:
    """The message of a headers-layout record (the inverse of :func:`headers_layout`)."""
    record = {name: default for name, (_kind, default) in _FIELDS.items()}
    record["properties"] = {}
    record["body"] = value
    for key, data in headers:
        name = key[4:]
        kind = _FIELDS[name][0]
        if kind == "bytes":
            record[name] = data
        elif kind in ("string", "uuid"):  # the envelope family reads a uuid as its text
            record[name] = data.decode("utf-8")
        elif kind == "map":
            record[name] = json.loads(data)
        elif kind == "boolean":
            record[name] = data == b"1"
        elif kind == "instant":
            record[name] = _EPOCH + dt.timedelta(milliseconds=int(data))
        else:
            record[name] = int(data)
    return _message_from_record(record)


def sample_messages() -> dict[str, Message]:
    """The three messages compared, each with an id (as a send stamps it)."""
    machine = uuid.UUID("6a060e66-03d6-4122-8aee-acdf750bb212")
    now = dt.datetime(2026, 11, 24, 8, 0, tzinfo=dt.timezone.utc)
    stamped = {"sent_time": now, "source_machine_id": machine,
               "destination_queue": r"DIRECT=OS:bench\private$\orders"}
    return {
        "express 200 B": Message(body=b"x" * 200, id=MessageId(machine, 1), **stamped),
        "rich 200 B": Message(
            body=b"x" * 200, id=MessageId(machine, 2), label="order 4711",
            correlation_id=MessageId(machine, 1), properties={"region": "eu", "tier": "gold"},
            response_queue=r"DIRECT=OS:bench\private$\replies",
            admin_queue=r"DIRECT=OS:bench\private$\admin", time_to_be_received=30.0, **stamped),
        "express 4 KB": Message(body=b"y" * 4096, id=MessageId(machine, 3), **stamped),
    }


def wire_bytes(value: bytes, headers: list[tuple[str, bytes]]) -> int:
    """Bytes of a record's value and headers in Kafka's record format v2 (varint lengths)."""
    def varint(n: int) -> int:
        n = (n << 1) ^ (n >> 63)
        size = 1
        while n >= 0x80:
            n >>= 7
            size += 1
        return size
    total = varint(len(value)) + len(value) + varint(len(headers))
    for key, data in headers:
        total += varint(len(key)) + len(key) + varint(len(data)) + len(data)
    return total


def per_call_us(call: Callable[[], object], count: int, rounds: int) -> float:
    """Minimum over ``rounds`` of the mean microseconds of ``count`` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(count):
            call()
        best = min(best, (time.perf_counter() - start) / count * 1e6)
    return best


def codec_table(count: int, rounds: int) -> list[dict[str, Any]]:
    """Encode/decode microseconds and wire bytes of both layouts per sample message."""
    rows = []
    for name, message in sample_messages().items():
        avro = encode_message(message)
        value, headers = headers_layout(message)
        assert from_headers_layout(value, headers) == decode_message(avro.value), name
        rows.append({
            "message": name,
            "avro_encode_us": per_call_us(
                lambda m=message: encode_message(m, validate=False), count, rounds),
            "headers_encode_us": per_call_us(lambda m=message: headers_layout(m), count, rounds),
            "avro_decode_us": per_call_us(lambda v=avro.value: decode_message(v), count, rounds),
            "headers_decode_us": per_call_us(
                lambda v=value, h=headers: from_headers_layout(v, h), count, rounds),
            "avro_bytes": wire_bytes(avro.value, list(avro.headers)),
            "headers_bytes": wire_bytes(value, headers),
            "body_bytes": wire_bytes(message.body, []),
        })
    return rows


def produce_table(bootstrap: str, count: int, rounds: int) -> list[dict[str, Any]]:
    """Records per second produced (acks=1, linger 5 ms, as an express send) for each layout."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"wire-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "enable.idempotence": False, "message.max.bytes": 5 * 1024 * 1024})
    rows = []
    for name, message in sample_messages().items():
        def avro_records(m: Message = message) -> None:
            record = encode_message(m, validate=False)
            producer.produce(topic, record.value, key=record.key, headers=record.headers)

        def header_records(m: Message = message) -> None:
            value, headers = headers_layout(m)
            producer.produce(topic, value, headers=headers)

        def bare(m: Message = message) -> None:
            producer.produce(topic, m.body)

        row: dict[str, Any] = {"message": name}
        for label, call in (("avro", avro_records), ("headers", header_records), ("raw", bare)):
            best = float("inf")
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(count):
                    call()
                    producer.poll(0)
                producer.flush(60)
                best = min(best, time.perf_counter() - start)
            row[f"{label}_msg_s"] = count / best
        rows.append(row)
    return rows


def send_share(count: int, rounds: int) -> dict[str, float]:
    """Microseconds of an express ``MessageQueue.send`` and of its envelope encoding."""
    from facade.config import KmqConfig
    from facade.manager import QueueManager

    with QueueManager.open(KmqConfig.load()) as qm:
        queue = qm.create_queue(rf".\private$\wire-bench-{uuid.uuid4().hex[:8]}")
        body = b"x" * 200
        send = per_call_us(lambda: queue.send(Message(body=body)), count, rounds)
        queue.send(Message(body=body), wait=True)
        stamped = sample_messages()["express 200 B"]
        encode = per_call_us(lambda: encode_message(stamped, validate=False), count, rounds)
        headers = per_call_us(lambda: headers_layout(stamped), count, rounds)
    return {"send_us": send, "avro_encode_us": encode, "headers_encode_us": headers}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-broker", action="store_true", help="encode/decode/size only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"codec": codec_table(args.messages, args.rounds)}
    bootstrap = os.environ.get("KMQ_BOOTSTRAP_SERVERS")
    if not args.no_broker and bootstrap:
        result["produce"] = produce_table(bootstrap, args.messages, args.rounds)
        result["send"] = send_share(min(args.messages, 2000), args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'message':14} {'encode us avro/hdr':>20} {'decode us avro/hdr':>20} "
          f"{'bytes avro/hdr/body':>22}")
    for r in result["codec"]:
        print(f"{r['message']:14} {r['avro_encode_us']:9.1f}/{r['headers_encode_us']:<9.1f} "
              f"{r['avro_decode_us']:9.1f}/{r['headers_decode_us']:<9.1f} "
              f"{r['avro_bytes']:7}/{r['headers_bytes']:<6}/{r['body_bytes']:<6}")
    for r in result.get("produce", []):
        print(f"produce {r['message']:14} avro {r['avro_msg_s']:9,.0f} msg/s  headers "
              f"{r['headers_msg_s']:9,.0f} msg/s  raw body {r['raw_msg_s']:9,.0f} msg/s  "
              f"ratios {r['avro_msg_s'] / r['raw_msg_s']:.3f} / "
              f"{r['headers_msg_s'] / r['raw_msg_s']:.3f}")
    if "send" in result:
        s = result["send"]
        print(f"express send {s['send_us']:.1f} us/message; its envelope encoding "
              f"{s['avro_encode_us']:.1f} us ({s['avro_encode_us'] / s['send_us']:.0%}); "
              f"the headers layout would take {s['headers_encode_us']:.1f} us")


if __name__ == "__main__":
    main()
