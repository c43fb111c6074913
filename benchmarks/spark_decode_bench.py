"""Spark read throughput of one kmq queue: raw Kafka-source rows against decoded messages.

Sends N messages to a fresh queue with the facade, then, in one Spark session (local mode),
times full batch reads of it through ``format("kmq")``:

* ``raw log``: the topic as it is (``kmq.includeRemoved=true``: no receipts read);
* ``queue view``: the rows ``read_queue`` decodes (receipts applied, duplicates dropped);
* ``queue view + decode``: the same plus :func:`spark_connector.decode_messages`.

Each read ends in ``count()`` after a step that needs every row (Spark cannot skip the Python
source or the ``mapInArrow`` decoder). Prints rows/s per read (median of several rounds) and
the ratio of decoded to raw reads of the same view, as a table and as JSON. Not part of the
test run. Broker: KMQ_BOOTSTRAP_SERVERS, else the dev stack (``kmq dev up``).

    .venv/bin/python benchmarks/spark_decode_bench.py --messages 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

from facade import Message
from facade.config import KmqConfig
from facade.manager import QueueManager
from spark_connector import decode_messages, local_session, resolve

PAYLOAD = b"x" * 200


def fill_queue(qm: QueueManager, name: str, n: int) -> str:
    """Create a queue and send ``n`` EXPRESS messages to it; return its format name."""
    queue = qm.create_queue(rf".\private$\{name}")
    for i in range(n):
        queue.send(Message(body=PAYLOAD, label=f"bench {i}", properties={"i": str(i)}),
                   wait=i == n - 1)
    return rf"DIRECT=OS:{qm.name}\private$\{name}"


def spark_session() -> Any:
    """A local Spark session bound to loopback, with ``format("kmq")`` registered."""
    return local_session("kmq-decode-bench")


def timed_count(df: Any) -> tuple[int, float]:
    """Rows and seconds for a full evaluation of ``df``."""
    start = time.perf_counter()
    rows = df.count()
    return rows, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = KmqConfig.load(queue_manager=f"bench-{uuid.uuid4().hex[:8]}")
    with QueueManager.open(config) as qm:
        started = time.perf_counter()
        format_name = fill_queue(qm, "sparkbench", args.messages)
        fill_seconds = time.perf_counter() - started
        resolution = resolve(format_name, config=config)
        spark = spark_session()
        try:
            def source(**options: str) -> Any:
                return (spark.read.format("kmq").option("kmq.resolution", resolution.to_json())
                        .options(**options).load())

            reads = {
                "raw log": lambda: source(**{"kmq.includeRemoved": "true"}),
                "queue view": lambda: source(),
                "queue view + decode": lambda: decode_messages(source()),
            }
            timed_count(reads["queue view + decode"]())  # warm-up: JVM, Python workers
            results: dict[str, list[float]] = {name: [] for name in reads}
            for _ in range(args.rounds):
                for name, build in reads.items():
                    rows, seconds = timed_count(build())
                    assert rows == args.messages, (name, rows)
                    results[name].append(rows / seconds)
        finally:
            spark.stop()
        qm.delete_queue(r".\private$\sparkbench")
    medians = {name: statistics.median(values) for name, values in results.items()}
    ratio = medians["queue view + decode"] / medians["queue view"]
    print(f"{'read (' + str(args.messages) + ' messages, 1 topic)':40} {'rows/s':>10}")
    for name, value in medians.items():
        print(f"{name:40} {value:10.0f}")
    print(f"{'decode / raw (same queue view)':40} {ratio:10.2f}")
    print(json.dumps({"messages": args.messages, "rounds": args.rounds,
                      "fill_seconds": round(fill_seconds, 2), "rows_per_second": medians,
                      "all_rounds": results, "decode_vs_raw_ratio": ratio}, indent=2))


if __name__ == "__main__":
    main()
