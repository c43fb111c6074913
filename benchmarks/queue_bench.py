"""Facade send/receive against raw confluent-kafka on the same broker, in the same run.

Prints msg/s for each and the ratio (medians of several rounds), as a table and as JSON. Not part
of the test run. Broker: KMQ_BOOTSTRAP_SERVERS, else the dev stack (`kmq dev up`).

    .venv/bin/python benchmarks/queue_bench.py --messages 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from facade import Message
from facade.config import KmqConfig
from facade.kafka import resolve_bootstrap_servers
from facade.manager import QueueManager

PAYLOAD = b"x" * 200


def raw_produce(bootstrap: str, topic: str, n: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "allow.auto.create.topics": False})
    start = time.perf_counter()
    for _ in range(n):
        producer.produce(topic, PAYLOAD)
        producer.poll(0)
    producer.flush(60)
    return n / (time.perf_counter() - start)


def raw_consume_committing_each(bootstrap: str, topic: str, n: int) -> float:
    """The raw equivalent of a destructive receive: one synchronous offset commit per record."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 2})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < n:
        record = consumer.poll(5)
        if record is None or record.error():
            continue
        consumer.commit(record, asynchronous=False)
        got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return n / elapsed


def facade_send(queue, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        queue.send(Message(body=PAYLOAD), wait=i == n - 1)
    return n / (time.perf_counter() - start)


def facade_receive(queue, n: int) -> float:
    queue.peek(timeout=30)  # view warmed up, as the raw consumer's first fetch is not timed either
    start = time.perf_counter()
    for _ in range(n):
        queue.receive(timeout=30)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = KmqConfig.load(queue_manager=f"bench-{uuid.uuid4().hex[:8]}")
    bootstrap = resolve_bootstrap_servers(config)
    results: dict[str, list[float]] = {k: [] for k in ("raw_produce", "express_send",
                                                       "raw_consume_commit", "receive")}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with QueueManager.open(config) as qm:
        for round_no in range(args.rounds):
            raw_topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
            admin.create_topics([NewTopic(raw_topic, 1, 1)])[raw_topic].result(30)
            queue = qm.create_queue(rf".\private$\bench{round_no}")
            results["raw_produce"].append(raw_produce(bootstrap, raw_topic, args.messages))
            results["express_send"].append(facade_send(queue, args.messages))
            results["raw_consume_commit"].append(
                raw_consume_committing_each(bootstrap, raw_topic, args.messages))
            results["receive"].append(facade_receive(queue, args.messages))
            queue.close()
            qm.delete_queue(rf".\private$\bench{round_no}")
    medians = {k: statistics.median(v) for k, v in results.items()}
    rows = [("express send vs raw produce (acks=1)", medians["express_send"], medians["raw_produce"]),
            ("receive vs raw consume + sync commit per record", medians["receive"],
             medians["raw_consume_commit"])]
    print(f"{'scenario':52} {'kmq msg/s':>10} {'raw msg/s':>10} {'ratio':>6}")
    for name, ours, raw in rows:
        print(f"{name:52} {ours:10.0f} {raw:10.0f} {ours / raw:6.2f}")
    print(json.dumps({"messages": args.messages, "rounds": args.rounds, "medians": medians,
                      "ratios": {name: ours / raw for name, ours, raw in rows}}, indent=2))


if __name__ == "__main__":
    main()
