"""Administration at scale: creating N queues, ``kmq queue list`` with counts, and
``QueueManager.open()`` with N queues: the admin commands must not slow with the queue count.
Not part of the test run.

The run, on one queue manager of a fresh name:

1. Creates ``--queues`` queues (default 1,000) one after another with
   ``QueueManager.create_queue`` and prints the median create time of each tenth of them, and
   the ratio of the last ten creates to creates 6-15 (around the 10th). The same run times raw
   confluent-kafka creating the same four topics a queue has (CreateTopics, no kmq) at both
   points, so a broker that slows with its topic count shows as such, and ``kmq queue
   create`` as a process of its own (two more queues).
2. Sends ``--messages`` messages to every ``--every``-th queue (a quarter of them with a TTBR
   that is over by the time they are counted) and receives two from every other of those
   queues, through a handle that reads the queue and so leaves a current snapshot; the rest
   were only sent to.
3. Runs the real CLI as a subprocess, ``kmq queue list --json`` with and without
   ``--no-counts``, ``--repeat`` times each, and prints the wall times; then checks the listed
   counts of the written queues and of 20 others against each queue's own ``counts()``. The
   raw confluent-kafka baseline is one batched ListOffsets (earliest and latest) of the data
   and receipts topics of every queue. For comparison, ``counts()`` of one handle per queue
   (a view each, the cost the list avoids) on ``--per-queue`` queues (default 100).
4. Times ``QueueManager.open()`` (as an admin command opens it: ``lease_ids=False``, and as
   an application does) in a fresh process each.
5. Deletes the queues (``--keep`` leaves them).

Every figure is printed with the load average (``os.getloadavg()``): the machine is shared.

Broker: ``KMQ_BOOTSTRAP_SERVERS``, else a private Apache Kafka node started for the run
(``facade.kafka.localkafka``), stopped afterwards.

    .venv/bin/python benchmarks/admin_scale_bench.py --queues 1000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import IsolationLevel, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

from facade.config import DirectorySettings, KmqConfig  # noqa: E402
from facade.manager import QueueManager  # noqa: E402
from facade.model.message import Message  # noqa: E402

_ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    """The 1-minute load average, for every printed figure."""
    return f"load {os.getloadavg()[0]:.2f}"


def _config(bootstrap: str, work: Path, qm_name: str) -> KmqConfig:
    base = KmqConfig.load()
    return dataclasses.replace(base, bootstrap_servers=bootstrap, home=work, queue_manager=qm_name,
                               directory=DirectorySettings(url=f"embedded:{work / 'directory.json'}"))


def _env(bootstrap: str, work: Path, qm_name: str) -> dict[str, str]:
    """The environment of a CLI subprocess on the same queue manager."""
    return {**os.environ, "KMQ_BOOTSTRAP_SERVERS": bootstrap, "KMQ_HOME": str(work),
            "KMQ_QUEUE_MANAGER": qm_name,
            "KMQ_DIRECTORY_URL": f"embedded:{work / 'directory.json'}"}


def _raw_create_ms(admin: AdminClient, samples: int = 5) -> float:
    """Median milliseconds of raw CreateTopics for the four topics of one queue (then deleted)."""
    times = []
    for _ in range(samples):
        base = f"raw-bench-{uuid.uuid4().hex[:10]}"
        names = [base, f"{base}.receipts", f"{base}.journal", f"{base}.journal.receipts"]
        started = time.perf_counter()
        for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
            future.result(30)
        times.append((time.perf_counter() - started) * 1000)
        for future in admin.delete_topics(names).values():
            future.result(30)
    return statistics.median(times)


def _cli_create_s(env: dict[str, str], name: str) -> float:
    """Seconds of ``kmq queue create`` in a fresh process (start-up, opening the queue manager
    and reading the registry included); the queue stays."""
    return _cli(["queue", "create", name, "--json"], env)[0]


def _create(qm: QueueManager, admin: AdminClient, env: dict[str, str], count: int) -> list[str]:
    """Create the queues; print per-tenth medians and the 10th-vs-last ratio, and the same
    ratio for raw CreateTopics and for ``kmq queue create`` (a process per queue)."""
    paths, times, loads = [], [], []
    tenth = max(count // 10, 1)
    raw_early = cli_early = 0.0
    for i in range(count):
        started = time.perf_counter()
        q = qm.create_queue(rf".\private$\adm-{i:05d}")
        times.append((time.perf_counter() - started) * 1000)
        paths.append(q.properties.path_name)
        q.close()
        if (i + 1) % tenth == 0 or i + 1 == count:
            loads.append(_load())
        if i + 1 == 10:
            raw_early = _raw_create_ms(admin)
            cli_early = _cli_create_s(env, "adm-cli-early")
    raw_late = _raw_create_ms(admin)
    cli_late = _cli_create_s(env, "adm-cli-late")
    for n, start in enumerate(range(0, count, tenth)):
        chunk = times[start:start + tenth]
        print(f"create {start + 1:>5}-{start + len(chunk):<5} median {statistics.median(chunk):6.1f} ms"
              f"  ({loads[min(n, len(loads) - 1)]})")
    around_10th = statistics.median(times[5:15])
    last = statistics.median(times[-10:])
    print(f"create around the 10th (6-15) {around_10th:.1f} ms, last ten {last:.1f} ms: "
          f"ratio {last / around_10th:.2f} (target <= 1.5)  ({_load()})")
    print(f"raw CreateTopics of a queue's 4 topics: {raw_early:.1f} ms at 10 queues, "
          f"{raw_late:.1f} ms at {count}; kmq/raw {around_10th / raw_early:.2f} and "
          f"{last / raw_late:.2f}  ({_load()})")
    print(f"kmq queue create (a process each): {cli_early:.2f} s at 10 queues, {cli_late:.2f} s "
          f"at {count}  ({_load()})")
    return paths


def _traffic(qm: QueueManager, paths: list[str], every: int, messages: int) -> list[str]:
    """Send to every ``every``-th queue, the last quarter with a TTBR of 2 s (expired when
    counted), and receive two of the others from every other such queue, through a handle
    that then reads the queue (so it writes a current snapshot when it closes). Returns the
    queues written."""
    written = paths[::every]
    for n, path in enumerate(written):
        with qm.open_queue(path) as q:
            for i in range(messages):
                short = i >= messages - messages // 4
                q.send(Message(body=b"x" * 100, time_to_be_received=2.0 if short else 3600),
                       wait=i == messages - 1)
            if n % 2:
                q.receive_many(2, timeout=10)
                q.count()
    time.sleep(2.5)
    return written


def _check(qm: QueueManager, rows: list, written: list[str]) -> None:
    """The listed counts of the written queues and of some others equal each queue's own
    ``counts()``."""
    listed = {r["path_name"]: (r["messages"] + r["expired"], r["expired"]) for r in rows}
    sample = written + sorted(set(listed) - set(written))[:20]
    for path in sample:
        with qm.open_queue(path) as q:
            assert listed[path] == q.counts(), f"{path}: listed {listed[path]}, own {q.counts()}"
    print(f"listed counts equal each queue's own counts() for {len(sample)} queues "
          f"({len(written)} written, {len(sample) - len(written)} not)")


def _cli(args: list[str], env: dict[str, str]) -> tuple[float, list]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "facade.cli", *args], env=env, cwd=_ROOT,
                         check=True, capture_output=True, text=True)
    return time.perf_counter() - started, json.loads(out.stdout)


def _list(env: dict[str, str], count: int, repeat: int) -> list:
    """Time the CLI's list with and without counts, and once as the table it prints; the rows
    of the last run with counts."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "facade.cli", "queue", "list"], env=env, cwd=_ROOT,
                   check=True, capture_output=True)
    print(f"kmq queue list (counts, the table): {time.perf_counter() - started:.2f} s for "
          f"{count} queues  ({_load()})")
    rows: list = []
    for options in (["--no-counts"], []):
        for _ in range(repeat):
            seconds, rows = _cli(["queue", "list", "--json", *options], env)
            assert len(rows) == count, f"{len(rows)} queues listed, {count} created"
            what = "kmq queue list --no-counts" if options else "kmq queue list (counts)"
            extra = ""
            if not options:
                extra = (f", {sum(r['messages'] for r in rows)} messages, "
                         f"{sum(r['expired'] for r in rows)} expired")
            print(f"{what}: {seconds:.2f} s for {count} queues{extra}  ({_load()})")
    return rows


def _per_queue(qm: QueueManager, paths: list[str], count: int) -> None:
    """What counting queue by queue costs: ``counts()`` of a handle per queue (a view each),
    for the first ``count`` queues."""
    sample = paths[:count]
    started = time.perf_counter()
    for path in sample:
        with qm.open_queue(path) as q:
            q.counts()
    each = (time.perf_counter() - started) / max(len(sample), 1)
    print(f"counts() of a handle per queue: {each * 1000:.0f} ms a queue, so "
          f"{each * len(paths):.1f} s for {len(paths)} queues  ({_load()})")


def _raw_list_offsets(admin: AdminClient, qm: QueueManager) -> None:
    parts = [TopicPartition(t, 0) for p in qm.list_queues()
             for t in (p.data_topic, p.receipts_topic)]
    started = time.perf_counter()
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        futures = admin.list_offsets({p: spec for p in parts},
                                     isolation_level=IsolationLevel.READ_COMMITTED)
        for future in futures.values():
            future.result(30)
    print(f"raw ListOffsets (earliest, latest) of {len(parts)} topics: "
          f"{time.perf_counter() - started:.2f} s  ({_load()})")


def _open_child(bootstrap: str, work: str, qm_name: str, lease_ids: bool) -> None:
    config = _config(bootstrap, Path(work), qm_name)
    started = time.perf_counter()
    qm = QueueManager.open(config, lease_ids=lease_ids)
    opened = time.perf_counter() - started
    qm.close()
    print(json.dumps({"open_seconds": round(opened, 3)}))


def _open(bootstrap: str, work: Path, qm_name: str, count: int, repeat: int) -> None:
    for lease_ids in (False, True):
        for _ in range(repeat):
            out = subprocess.run([sys.executable, __file__, "--open-child",
                                  json.dumps([bootstrap, str(work), qm_name, lease_ids])],
                                 check=True, capture_output=True, text=True)
            seconds = json.loads(out.stdout.strip().splitlines()[-1])["open_seconds"]
            print(f"QueueManager.open(lease_ids={lease_ids}) with {count} queues: "
                  f"{seconds:.3f} s  ({_load()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--every", type=int, default=10,
                        help="send to every N-th queue (default 10)")
    parser.add_argument("--messages", type=int, default=8, help="messages per such queue")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timed command")
    parser.add_argument("--per-queue", type=int, default=100,
                        help="queues counted one handle each, for comparison (default 100)")
    parser.add_argument("--keep", action="store_true", help="leave the queues (and the broker)")
    parser.add_argument("--open-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.open_child:
        bootstrap, work, qm_name, lease_ids = json.loads(args.open_child)
        _open_child(bootstrap, work, qm_name, lease_ids)
        return
    broker = None
    bootstrap = os.environ.get("KMQ_BOOTSTRAP_SERVERS")
    with tempfile.TemporaryDirectory(prefix="admin-bench-") as tmp:
        work = Path(tmp)
        if not bootstrap:
            from facade.kafka.localkafka import LocalKafka

            broker = LocalKafka(work / "kafka")
            broker.start()
            bootstrap = broker.bootstrap_servers
        qm_name = f"ab-{uuid.uuid4().hex[:8]}"
        config = _config(bootstrap, work, qm_name)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            env = _env(bootstrap, work, qm_name)
            with QueueManager.open(config) as qm:
                started = time.perf_counter()
                paths = _create(qm, admin, env, args.queues)
                print(f"created {len(paths)} queues in {time.perf_counter() - started:.1f} s")
                paths += [qm.get_properties(rf".\private$\adm-cli-{when}").path_name
                          for when in ("early", "late")]
                written = _traffic(qm, paths, args.every, args.messages)
                _raw_list_offsets(admin, qm)
                rows = _list(env, len(paths), args.repeat)
                _check(qm, rows, written)
                _per_queue(qm, paths, args.per_queue)
                _open(bootstrap, work, qm_name, len(paths), args.repeat)
                if not args.keep:
                    started = time.perf_counter()
                    for path in paths:
                        qm.delete_queue(path)
                    print(f"deleted {len(paths)} queues in {time.perf_counter() - started:.1f} s")
        finally:
            del admin  # its connection, before the broker it talks to goes
            if broker is not None and not args.keep:
                broker.stop(hard=True)


if __name__ == "__main__":
    main()
