"""Spark batch-peek throughput of one kmq queue: Spark's Kafka source + from_avro against kmq's
Python data source and against a raw ``format("kafka")`` read, same run, same topic.

Sends N pending messages (200-byte bodies, priorities 0-7) to a fresh queue with the facade,
then, in one local-mode Spark session (``local_session``: the connector jars on
``spark.jars``), times for each read both ``count()`` and ``groupBy("priority").count()``:

* ``raw kafka``: ``spark.read.format("kafka")`` of the data topic, no queue view, no decode
  (its group-by is on ``partition``: it has no priority);
* ``kafka + from_avro``: ``read_queue(..., path="kafka")``: the queue view and the envelope
  decoded on the JVM (:mod:`spark_connector.jvmdecode`);
* ``kmq python``: ``read_queue(..., path="kmq")``: kmq's Python data source and decoder.

Prints rows/s per read and operation (median of the rounds), the ratios that judge
the JVM path (kafka + from_avro against kmq python, and against raw kafka), the range of the
1-minute load average over the measurements (the machine may be shared), and the figures as
JSON. Not part of the test run. Broker: KMQ_BOOTSTRAP_SERVERS, else the dev stack (``kmq dev up``).

    .venv/bin/python benchmarks/spark_kafka_bench.py --messages 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from facade import Message
from facade.config import KmqConfig
from facade.manager import QueueManager
from spark_connector import kafka_source_options, local_session, read_queue, resolve

PAYLOAD = b"x" * 200
QUEUE = r".\private$\sparkkafkabench"


def fill_queue(qm: QueueManager, n: int) -> str:
    """Create the queue and send ``n`` messages to it (priorities 0-7); its format name."""
    queue = qm.create_queue(QUEUE)
    chunk = 5000
    for start in range(0, n, chunk):
        queue.send_many([Message(body=PAYLOAD, priority=i % 8, label=f"bench {i}")
                         for i in range(start, min(n, start + chunk))], wait=True)
    return rf"DIRECT=OS:{qm.name}\private$\sparkkafkabench"


def timed(action: Callable[[], int]) -> tuple[int, float]:
    """Rows and seconds of one action."""
    start = time.perf_counter()
    rows = action()
    return rows, time.perf_counter() - start


def grouped(df: Any, column: str) -> int:
    """Rows counted by a group-by on ``column`` (every row is read and decoded)."""
    return sum(r["count"] for r in df.groupBy(column).count().collect())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = KmqConfig.load(queue_manager=f"bench-{uuid.uuid4().hex[:8]}")
    with QueueManager.open(config) as qm:
        started = time.perf_counter()
        format_name = fill_queue(qm, args.messages)
        fill_seconds = time.perf_counter() - started
        resolution = resolve(format_name, config=config)
        spark = local_session("kmq-kafka-bench")
        try:
            def raw() -> Any:
                options = kafka_source_options(resolution, streaming=False)
                return spark.read.format("kafka").options(**options).load()

            def queue(path: str) -> Any:
                return read_queue(spark, format_name, streaming=False, path=path, config=config)

            reads: dict[str, tuple[Callable[[], Any], str]] = {
                "raw kafka": (raw, "partition"),
                "kafka + from_avro": (lambda: queue("kafka"), "priority"),
                "kmq python": (lambda: queue("kmq"), "priority"),
            }
            for build, _column in reads.values():  # warm-up: JVM, Python workers, caches
                build().count()
            results: dict[str, list[float]] = {}
            loads: list[float] = []
            for _ in range(args.rounds):
                for name, (build, column) in reads.items():
                    for operation, action in (("count", lambda: build().count()),
                                              ("groupBy", lambda: grouped(build(), column))):
                        rows, seconds = timed(action)
                        assert rows == args.messages, (name, operation, rows)
                        results.setdefault(f"{name} {operation}", []).append(rows / seconds)
                        loads.append(os.getloadavg()[0])
        finally:
            spark.stop()
        qm.delete_queue(QUEUE)
    medians = {name: statistics.median(values) for name, values in results.items()}
    ratios = {}
    for operation in ("count", "groupBy"):
        mine = medians[f"kafka + from_avro {operation}"]
        ratios[f"kafka+from_avro / kmq python ({operation})"] = (
            mine / medians[f"kmq python {operation}"])
        ratios[f"kafka+from_avro / raw kafka ({operation})"] = (
            mine / medians[f"raw kafka {operation}"])
    print(f"{'read (' + str(args.messages) + ' pending messages)':44} {'rows/s':>10}")
    for name, value in medians.items():
        print(f"{name:44} {value:10.0f}")
    for name, value in ratios.items():
        print(f"{name:44} {value:10.2f}")
    print(f"{'1-minute load average (min-max)':44} {min(loads):4.1f}-{max(loads):4.1f}")
    print(json.dumps({"messages": args.messages, "rounds": args.rounds,
                      "fill_seconds": round(fill_seconds, 2), "rows_per_second": medians,
                      "all_rounds": results, "ratios": ratios,
                      "load_average": [min(loads), max(loads)]}, indent=2))


if __name__ == "__main__":
    main()
