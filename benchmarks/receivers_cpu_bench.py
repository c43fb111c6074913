"""CPU per message of 1, 2 and 4 receiver processes draining one queue: what bounds
``receive-contended`` on a machine whose cores the broker shares.

``kmq bench --scenario receive-contended`` gives the rate of 4 receiver processes against one
receiver. This script gives, for each process count, where the CPU goes while they drain one
queue of ``--messages`` pending messages with ``receive()`` (the default receipts arbitration):

* the receivers' CPU: their process times (librdkafka's threads included) from the start
  signal to each one's last message;
* the broker's CPU: its JVM's process times over the same span, when the broker is the dev
  stack's cluster of this ``KMQ_HOME`` (``kmq dev up``) or ``--broker-pid`` names it; otherwise
  not measured;
* the machine's busy cores (``/proc/stat``) over the same span;
* the Kafka requests the receivers sent (librdkafka statistics).

Its last line is the bound the 1-process figures set: the machine's cores divided by one
receive's CPU (receiver + broker) is the most any number of receivers on this machine could
drain if adding a receiver added no work at all. Each receiver reads every other receiver's
receipts, so adding one adds work, and the measured figures show how much.

    KMQ_HOME=$(mktemp -d) kmq dev up
    KMQ_HOME=... .venv/bin/python benchmarks/receivers_cpu_bench.py --messages 4000

Results: ``docs/performance.md``, "What bounds competing receivers".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from facade.config import DirectorySettings, KmqConfig
from facade.kafka.devstack import DevStack
from facade.kafka.librdkafka import resolve_bootstrap_servers
from facade.manager import QueueManager
from facade.model.message import Message

#: Seconds a drain may take before the run is reported as stuck.
DRAIN_TIMEOUT = 600.0
#: Seconds between two samples of the broker's and the machine's CPU times.
SAMPLE_EVERY = 0.05
#: Seconds of receive timeout after which a receiver takes the queue as drained.
QUIET = 3.0
_TICKS = os.sysconf("SC_CLK_TCK")

#: A receiver process: argv = the queue manager settings (JSON) and the queue's format name.
#: It counts the Kafka requests of every client kmq creates (a statistics callback is a
#: function, which kmq's string-valued ``[kafka]`` options cannot carry, so the classes
#: kmq's Kafka seam instantiates are wrapped), receives one message (untimed: the view loads,
#: and stays a receive-only view that fetches receipts only when its claims meet others), prints
#: ``ready``, waits for the start line, receives until QUIET seconds pass without a message,
#: and prints its receives, its CPU seconds and its requests from the start to its last
#: message.
_RECEIVER = f"""
import json, os, pathlib, sys, time
import confluent_kafka
import facade.kafka.librdkafka as seam
from facade.config import KmqConfig
from facade.errors import ReceiveTimeout
from facade.manager import QueueManager

requests = {{}}

def counted(cls):
    class Counted(cls):
        def __init__(self, conf, **kwargs):
            def stats(text):
                report = json.loads(text)
                sent = {{}}
                for broker in report.get("brokers", {{}}).values():
                    for kind, n in broker.get("req", {{}}).items():
                        sent[kind] = sent.get(kind, 0) + n
                requests[report["name"]] = sent
            super().__init__({{**conf, "statistics.interval.ms": 100, "stats_cb": stats}},
                             **kwargs)
    return Counted

seam.Consumer = counted(confluent_kafka.Consumer)
seam.Producer = counted(confluent_kafka.Producer)

def total():
    sums = {{}}
    for sent in requests.values():
        for kind, n in sent.items():
            sums[kind] = sums.get(kind, 0) + n
    return sums

settings = json.loads(sys.argv[1])
config = KmqConfig.load(**dict(settings, home=pathlib.Path(settings["home"])))
with QueueManager.open(config) as qm:
    queue = qm.open_queue(sys.argv[2])
    queue.receive(timeout=60)
    print("ready", flush=True)
    sys.stdin.readline()
    start, received = time.time(), 0
    cpu0, sent0 = os.times(), total()
    cpu, sent, last = cpu0, sent0, start
    while True:
        try:
            queue.receive(timeout={QUIET})
        except ReceiveTimeout:
            break
        received += 1
        cpu, last = os.times(), time.time()
    sent = total()
    print(json.dumps({{"start": start, "end": last, "received": received,
                      "cpu": cpu.user + cpu.system - cpu0.user - cpu0.system,
                      "requests": {{k: n - sent0.get(k, 0) for k, n in sent.items()}}}}),
          flush=True)
"""


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (``/proc/stat``); idle and iowait
    are not busy."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / _TICKS, sum(values) / _TICKS


@dataclasses.dataclass
class Drain:
    """What one drain measured.

    Attributes:
        processes (int): receiver processes.
        received (int): messages received, all processes together.
        seconds (float): from the start signal to the last message received.
        receiver_cpu (float): CPU seconds of the receivers over their drain.
        broker_cpu (float | None): CPU seconds of the broker over the drain; None: not local.
        machine_busy (float): busy CPU seconds of the whole machine over the drain.
        requests (dict[str, int]): Kafka requests the receivers sent, by kind.
    """

    processes: int
    received: int
    seconds: float
    receiver_cpu: float
    broker_cpu: float | None
    machine_busy: float
    requests: dict[str, int]

    def row(self, single_rate: float) -> dict[str, Any]:
        """The printed figures: msg/s, its ratio to ``single_rate`` (the 1-process msg/s), and
        per message the receivers' and the broker's CPU (us) and the requests sent."""
        rate = self.received / self.seconds
        return {
            "processes": self.processes, "msg_per_s": round(rate),
            "ratio_to_one": round(rate / single_rate, 2),
            "receiver_cpu_us": round(self.receiver_cpu / self.received * 1e6),
            "broker_cpu_us": None if self.broker_cpu is None
            else round(self.broker_cpu / self.received * 1e6),
            "busy_cores": round(self.machine_busy / self.seconds, 2),
            "requests_per_msg": {kind: round(n / self.received, 2)
                                 for kind, n in sorted(self.requests.items())
                                 if n >= self.received / 100},
        }


def cpu_bound(single: Drain, cores: int) -> dict[str, float] | None:
    """The most messages/s ``cores`` could drain at the 1-process CPU per message (receiver +
    broker), and that rate's ratio to the 1-process rate; None when the broker's CPU is not
    measured (a remote broker's share of the cores is unknown).

    Raises:
        ValueError: ``single`` is not a 1-process drain.
    """
    if single.processes != 1:
        raise ValueError(f"the bound is set by a 1-process drain, not {single.processes}")
    if single.broker_cpu is None:
        return None
    per_message = (single.receiver_cpu + single.broker_cpu) / single.received
    rate = cores / per_message
    single_rate = single.received / single.seconds
    return {"cores": cores, "cpu_us_per_msg": round(per_message * 1e6),
            "msg_per_s": round(rate), "ratio_to_one": round(rate / single_rate, 2)}


class _Sampler:
    """Samples the broker's and the machine's CPU times every SAMPLE_EVERY seconds, so that a
    span known only afterwards (the receivers report their own start and end) can be cut."""

    def __init__(self, broker_pids: list[int]):
        self._pids = broker_pids
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            broker = sum(process_cpu(pid) for pid in self._pids)
            self.samples.append((time.time(), broker, machine_cpu()[0]))
            self._stop.wait(SAMPLE_EVERY)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def span(self, start: float, end: float) -> tuple[float, float]:
        """(broker, machine busy) CPU seconds between the samples nearest ``start`` and ``end``."""
        first = min(self.samples, key=lambda sample: abs(sample[0] - start))
        last = min(self.samples, key=lambda sample: abs(sample[0] - end))
        return last[1] - first[1], last[2] - first[2]


def drain(qm: QueueManager, settings: str, processes: int, messages: int,
          broker_pids: list[int]) -> Drain:
    """Fill a new queue with ``messages`` 200-byte messages (and one more per process, which
    each receives before the start) and drain it with ``processes`` receiver processes started
    at once; the queue is deleted after.

    Raises:
        RuntimeError: a receiver did not start, or the receivers did not get every message.
    """
    path = f".\\private$\\cpu-{processes}-{uuid.uuid4().hex[:8]}"
    queue = qm.create_queue(path)
    try:
        total = messages + processes
        for first in range(0, total, 100):
            queue.send_many([Message(body=b"x" * 200) for _ in range(min(100, total - first))])
        workers = [subprocess.Popen([sys.executable, "-c", _RECEIVER, settings, queue.format_name],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                   for _ in range(processes)]
        try:
            for worker in workers:
                if worker.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
                    raise RuntimeError("a receiver process failed to start")
            sampler = _Sampler(broker_pids)
            time.sleep(2 * SAMPLE_EVERY)
            for worker in workers:
                worker.stdin.write("go\n")  # type: ignore[union-attr]
                worker.stdin.flush()  # type: ignore[union-attr]
            results = [json.loads(worker.communicate(timeout=DRAIN_TIMEOUT)[0].splitlines()[-1])
                       for worker in workers]
            sampler.stop()
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
    finally:
        qm.delete_queue(path)
    received = sum(result["received"] for result in results)
    if received != messages:
        raise RuntimeError(f"{processes} receivers got {received} of {messages} messages")
    start = min(result["start"] for result in results)
    end = max(result["end"] for result in results)
    broker, busy = sampler.span(start, end)
    requests: dict[str, int] = {}
    for result in results:
        for kind, n in result["requests"].items():
            requests[kind] = requests.get(kind, 0) + n
    return Drain(processes, received, end - start, sum(r["cpu"] for r in results),
                 broker if broker_pids else None, busy, requests)


def local_broker_pids(config: KmqConfig, bootstrap: str) -> list[int]:
    """PIDs of the dev stack's running nodes when ``bootstrap`` is that cluster, else []."""
    cluster = DevStack(config).running_broker()
    if cluster is None or cluster.bootstrap_servers != bootstrap:
        return []
    return [node.pid for node in cluster.nodes if node.pid is not None and node.alive()]


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run the drains, print one JSON line per drain and the bound."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=2, help="drains per process count")
    parser.add_argument("--broker-pid", type=int, action="append", default=[],
                        help="the broker JVM's pid (default: the dev stack's nodes, if used)")
    args = parser.parse_args(argv)
    if 1 not in args.processes:
        parser.error("--processes must include 1: the other counts are measured against it")
    config = KmqConfig.load()
    bootstrap = resolve_bootstrap_servers(config)
    broker_pids = args.broker_pid or local_broker_pids(config, bootstrap)
    cores = os.cpu_count() or 1
    config.home.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cpu-bench-", dir=config.home))
    run_config = dataclasses.replace(
        config, bootstrap_servers=bootstrap, home=work,
        queue_manager=f"cpu-bench-{uuid.uuid4().hex[:8]}",
        directory=DirectorySettings(url=f"embedded:{work / 'directory.json'}"))
    settings = json.dumps({"bootstrap_servers": bootstrap, "home": str(work),
                           "queue_manager": run_config.queue_manager,
                           "replication_factor": run_config.replication_factor,
                           "min_insync_replicas": run_config.min_insync_replicas})
    print(json.dumps({"cores": cores, "broker_pids": broker_pids, "messages": args.messages}))
    with QueueManager.open(run_config) as qm:
        for _ in range(args.rounds):
            drains = {n: drain(qm, settings, n, args.messages, broker_pids)
                      for n in sorted(args.processes)}
            single = drains[1]
            for measured in drains.values():
                print(json.dumps(measured.row(single.received / single.seconds)), flush=True)
            print(json.dumps({"bound": cpu_bound(single, cores)}), flush=True)


if __name__ == "__main__":
    main()
