"""Queue-state cost of one handle: memory per pending message, and open time of a long history.

Two measurements (docs/design.md, "Bounded state"), each in a fresh child process so that
nothing the parent allocated while filling the queue counts:

* ``memory``: a queue with ``--pending`` messages (default 200,000) of ``--payload`` bytes
  (default 200). The child opens the queue manager and a handle, reads its RSS, makes the handle
  read the whole queue (``count()``), and reads its RSS again; it prints the difference per
  pending message (target: at most 300 bytes). The same is measured on a queue of half as many
  messages, and the two give the slope (bytes per additional message) and what a handle costs
  whatever its queue holds (fixed bytes: Kafka clients and their threads, code paged in).
* ``open``: a queue whose history holds ``--received`` messages already received (default
  200,000, received with ``receive_many(100)``) and ``--pending`` pending ones (default 1,000).
  The child times a handle from creation to its first peek (target: under 1 s).

Broker: ``KMQ_BOOTSTRAP_SERVERS``, else a private Apache Kafka node started for the run (``facade.kafka.localkafka``). Not part of
the test run.

    .venv/bin/python benchmarks/state_bench.py memory
    .venv/bin/python benchmarks/state_bench.py open --received 200000 --pending 1000
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from facade.config import DirectorySettings, KmqConfig  # noqa: E402
from facade.manager import QueueManager  # noqa: E402
from facade.model.message import Message  # noqa: E402

_QUEUE = r".\private$\state-bench"
_HALF_QUEUE = r".\private$\state-bench-half"
_BATCH = 1000


def _rss_bytes() -> int:
    """Resident set size of this process, from /proc (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _config(bootstrap: str, work: Path, qm_name: str) -> KmqConfig:
    base = KmqConfig.load()
    return dataclasses.replace(base, bootstrap_servers=bootstrap, home=work, queue_manager=qm_name,
                               directory=DirectorySettings(url=f"embedded:{work / 'directory.json'}"))


def _fill(queue, count: int, payload: int) -> None:
    body = b"x" * payload
    sent = 0
    while sent < count:
        n = min(_BATCH, count - sent)
        sent += n
        queue.send_many([Message(body=body) for _ in range(n)], wait=sent >= count)


def _prepare(args: argparse.Namespace, config: KmqConfig) -> None:
    """Create the queue and write its history (parent process)."""
    with QueueManager.open(config) as qm:
        queue = qm.create_queue(_QUEUE)
        try:
            if args.scenario == "open" and args.received:
                _fill(queue, args.received, args.payload)
                taken = 0
                while taken < args.received:
                    taken += len(queue.receive_many(min(100, args.received - taken), timeout=30))
            _fill(queue, args.pending, args.payload)
        finally:
            queue.close()
        if args.scenario == "memory":
            half = qm.create_queue(_HALF_QUEUE)
            try:
                _fill(half, args.pending // 2, args.payload)
            finally:
                half.close()


def _measure_open(args: argparse.Namespace, config: KmqConfig) -> dict:
    """Seconds from a new handle to its first peek (child process)."""
    with QueueManager.open(config) as qm:
        queue = qm.open_queue(_QUEUE)
        try:
            started = time.perf_counter()
            if os.environ.get("STATE_BENCH_PROFILE"):
                import cProfile
                import pstats
                profile = cProfile.Profile()
                profile.runcall(queue.peek, timeout=30)
                pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
            else:
                queue.peek(timeout=30)
            opened = time.perf_counter() - started
            return {"pending": queue.count(), "open_seconds": round(opened, 3)}
        finally:
            queue.close()


def _measure_memory(args: argparse.Namespace, config: KmqConfig) -> dict:
    """RSS of a fresh process with a handle, before and after the handle reads the queue."""
    with QueueManager.open(config) as qm:
        gc.collect()
        before = _rss_bytes()
        queue = qm.open_queue(args.queue)
        try:
            count = queue.count()
            gc.collect()
            after = _rss_bytes()
            return {"pending": count, "rss_before": before, "rss_after": after,
                    "bytes_per_message": round((after - before) / max(count, 1), 1)}
        finally:
            queue.close()


def _slope(half: dict, full: dict) -> dict:
    """Bytes per additional pending message between the two queues, and the rest (fixed)."""
    grown = [r["rss_after"] - r["rss_before"] for r in (half, full)]
    per_message = (grown[1] - grown[0]) / max(full["pending"] - half["pending"], 1)
    return {"slope_bytes_per_message": round(per_message, 1),
            "fixed_bytes": round(grown[1] - per_message * full["pending"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=("memory", "open"))
    parser.add_argument("--pending", type=int, default=None)
    parser.add_argument("--received", type=int, default=200_000)
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--queue", default=_QUEUE, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pending is None:
        args.pending = 200_000 if args.scenario == "memory" else 1_000
    if args.child:
        bootstrap, work, qm_name = json.loads(args.child)
        config = _config(bootstrap, Path(work), qm_name)
        measure = _measure_memory if args.scenario == "memory" else _measure_open
        print(json.dumps(measure(args, config)))
        return
    broker = None
    bootstrap = os.environ.get("KMQ_BOOTSTRAP_SERVERS")
    with tempfile.TemporaryDirectory(prefix="state-bench-") as work:
        if not bootstrap:
            from facade.kafka.localkafka import LocalKafka

            broker = LocalKafka(Path(work) / "kafka")
            broker.start()
            bootstrap = broker.bootstrap_servers
        try:
            qm_name = f"sb-{uuid.uuid4().hex[:8]}"
            config = _config(bootstrap, Path(work), qm_name)
            started = time.perf_counter()
            _prepare(args, config)
            print(f"prepared in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            child = json.dumps([bootstrap, work, qm_name])
            # "open" twice: the handle that wrote the history wrote a snapshot on close, so both
            # open from it; the second shows the spread. "memory": the half queue, then the
            # full one.
            queues = [_QUEUE, _QUEUE] if args.scenario == "open" else [_HALF_QUEUE, _QUEUE]
            results = []
            for run, queue in enumerate(queues):
                out = subprocess.run([sys.executable, __file__, args.scenario, "--pending",
                                      str(args.pending), "--received", str(args.received),
                                      "--payload", str(args.payload), "--child", child,
                                      "--queue", queue],
                                     check=True, capture_output=True, text=True)
                print(out.stderr.strip()[-6000:], file=sys.stderr)
                print(f"{args.scenario} {run + 1}", out.stdout.strip())
                results.append(json.loads(out.stdout))
            if args.scenario == "memory":
                print("memory slope", json.dumps(_slope(*results)))
        finally:
            if broker is not None:
                broker.stop(hard=True)


if __name__ == "__main__":
    main()
