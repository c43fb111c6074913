"""Raw Kafka share groups (KIP-932) against one plain consumer, on one single-partition topic:
the measurement behind the share-group arbitration study in ``docs/design.md``.

A kmq queue is one single-partition data topic. By default (``arbitration="receipts"``) its
receivers arbitrate by writing RECEIVE_FIRST receipts, and adding receivers slows a queue down.
A share group lets many consumers take records of one partition, the broker holding an
acquisition lock per record. This script measures, with raw confluent-kafka only (no kmq code on
the hot path), how fast 1, 2 and 4 share-consumer processes of one share group drain
``--messages`` records:

* ``share-batch``: explicit acknowledgement, ACCEPT every record of a poll, one ``commit_sync``
  per poll batch (what a batch or peek-lock receive could do);
* ``share-record``: ACCEPT and ``commit_sync`` per record (what a destructive MSMQ receive
  needs: the message is removed before ``receive()`` returns);

against one plain consumer (``plain-record``: a synchronous offset commit per record, the
comparator of the ``receive`` target; ``plain-batch``: one synchronous commit per
``consume()`` batch).

Every scenario uses a fresh topic and a fresh group, with ``share.auto.offset.reset=earliest``
set on the GROUP config resource (a share group starts at the latest offset otherwise, and
would skip every record already in the topic). Each process counts the records it accepted,
and the parent checks that every offset was accepted exactly once across processes (a second
acceptance of one offset would be a double hand-out). The consumers join the group on the
empty topic first (``--join-seconds``; a share group assigns on its heartbeat), then stop
polling while the records are produced; the rate is records / (time from the start signal to
the last successful commit), for plain and share scenarios alike. ``steady_msg_s`` leaves out
the time until every process had its first record. A share consumer acquires whole produced
record batches, up to about ``--max-poll-records`` records, so ``--produce-batch`` (records per
produced batch) and ``--max-poll-records`` decide how finely the records spread over processes.

``--check-limits`` verifies instead what the broker does with a record whose delivery count
reaches ``share.delivery.count.limit``, with and without a KIP-1191 dead-letter topic, and with
a REJECT; it prints what it observed.

    KMQ_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/share_bench.py
    .venv/bin/python benchmarks/share_bench.py --bootstrap 127.0.0.1:9092 --check-limits

A broker from ``kmq dev up`` (``share.version=2``) serves both. Results: ``docs/design.md``,
"Share-group arbitration".
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import time
import uuid
from typing import Any

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

#: Seconds a drain may take before the scenario is reported as stuck.
DRAIN_TIMEOUT = 600.0
#: Error codes a fresh broker reports while its group coordinators load.
_TRANSIENT = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._PARTITION_EOF}
#: Seconds without a delivery after which a record counts as no longer delivered.
QUIET_SECONDS = 8.0
#: Seconds one poll waits for records.
POLL_SECONDS = 0.5


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, config: dict[str, str] | None = None) -> None:
    """Create ``name`` with one partition and replication factor 1 and wait for it.

    Raises:
        KafkaException: the broker refused the topic.
    """
    admin = _admin(bootstrap)  # kept referenced: the futures die with their client
    future = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1, config=config or {})])
    future[name].result(timeout=60)


def set_group_config(bootstrap: str, group: str, settings: dict[str, str]) -> dict[str, str]:
    """Set dynamic group configs (KIP-848/932 GROUP config resource) and read them back.

    Args:
        bootstrap (str): ``bootstrap.servers``.
        group (str): share group id; the group need not exist yet.
        settings (dict[str, str]): config name -> value, e.g. ``share.auto.offset.reset``.

    Returns:
        dict[str, str]: the values the broker reports for those names afterwards.

    Raises:
        KafkaException: the broker refused a name or a value.
    """
    admin = _admin(bootstrap)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in settings.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=60)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    entries = next(iter(described.values())).result(timeout=60)
    return {key: entries[key].value for key in settings}


def fill(bootstrap: str, topic: str, count: int, payload: int,
         produce_batch: int = 10_000,
         headers: list[tuple[str, str | bytes | None]] | None = None) -> None:
    """Produce ``count`` records of ``payload`` bytes (value = 8-digit index + padding), at
    most ``produce_batch`` records per record batch (``batch.num.messages``): a share
    consumer acquires whole record batches, so this sets how finely records spread."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "batch.num.messages": produce_batch})
    pad = b"x" * max(payload - 8, 0)
    for index in range(count):
        while True:
            try:
                producer.produce(topic, b"%08d" % index + pad, headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60) != 0:
        raise RuntimeError(f"{topic}: records left unsent after 60 s")


def _share_worker(bootstrap: str, topic: str, group: str, per_record: bool, total: int,
                  done: Any, ready: Any, start: Any, out: Any,
                  max_poll_records: int) -> None:
    """One share-consumer process: join, then drain until ``done`` reaches ``total``; put
    its result. ``max_poll_records`` bounds what one ShareFetch acquires (best effort: the
    broker acquires whole produced batches)."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit",
                              "max.poll.records": max_poll_records})
    consumer.subscribe([topic])
    _join(consumer, ready, start)
    began = time.monotonic()
    first = last = None
    offsets: list[int] = []
    redelivered = 0
    failures = 0
    try:
        while done.value < total and time.monotonic() - began < DRAIN_TIMEOUT:
            batch = consumer.poll(POLL_SECONDS)
            records = [m for m in batch if m.error() is None]
            _raise_fatal(batch)
            if not records:
                continue
            if first is None:
                first = time.monotonic()
            accepted: list[int] = []
            for message in records:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                if (message.delivery_count() or 1) > 1:
                    redelivered += 1
                if per_record:
                    if _committed(consumer.commit_sync()):
                        accepted.append(_offset(message))
                    else:
                        failures += 1
            if not per_record:
                if _committed(consumer.commit_sync()):
                    accepted.extend(_offset(m) for m in records)
                else:
                    failures += len(records)
            if accepted:
                offsets.extend(accepted)
                last = time.monotonic()
                with done.get_lock():
                    done.value += len(accepted)
    finally:
        consumer.close()
    out.put({"first": first, "last": last, "offsets": offsets,
             "redelivered": redelivered, "commit_failures": failures})


def _join(consumer: Any, ready: Any, start: Any) -> None:
    """Poll the still empty topic until the parent says the group has settled (``ready``
    set), then wait, without polling, for ``start``: the records are produced meanwhile, so
    the clock measures draining a filled queue, not the join nor the producer."""
    while not ready.is_set():
        _raise_fatal(consumer.poll(POLL_SECONDS) if isinstance(consumer, ShareConsumer)
                     else consumer.consume(1, POLL_SECONDS))
    start.wait()


def _raise_fatal(messages: Any) -> None:
    """Raise the first non-retriable error event among ``messages``; a retriable one (a
    coordinator still loading on a fresh broker) is retried by the next poll."""
    for message in messages:
        error = message.error()
        if error is not None and not error.retriable() and error.code() not in _TRANSIENT:
            raise KafkaException(error)


def _offset(message: Any) -> int:
    """The offset of a consumed record (never None for a record without an error)."""
    offset = message.offset()
    assert offset is not None, "a consumed record has an offset"
    return int(offset)


def _committed(result: dict) -> bool:
    """True when ``commit_sync`` reported success for every partition it acknowledged on."""
    return all(error is None for error in result.values())


def _plain_worker(bootstrap: str, topic: str, group: str, per_record: bool, total: int,
                  done: Any, ready: Any, start: Any, out: Any,
                  max_poll_records: int) -> None:
    """The comparator: one plain consumer, a synchronous offset commit per record or batch."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0)])
    _join(consumer, ready, start)
    began = time.monotonic()
    first = last = None
    offsets: list[int] = []
    try:
        while len(offsets) < total and time.monotonic() - began < DRAIN_TIMEOUT:
            polled = consumer.consume(500, POLL_SECONDS)
            _raise_fatal(polled)
            records = [m for m in polled if m.error() is None]
            if not records:
                continue
            if first is None:
                first = time.monotonic()
            if per_record:
                for message in records:
                    consumer.commit(message=message, asynchronous=False)
                    offsets.append(_offset(message))
            else:
                consumer.commit(message=records[-1], asynchronous=False)
                offsets.extend(_offset(m) for m in records)
            last = time.monotonic()
    finally:
        consumer.close()
    out.put({"first": first, "last": last, "offsets": offsets,
             "redelivered": 0, "commit_failures": 0})


def run_scenario(bootstrap: str, kind: str, processes: int, count: int, payload: int,
                 join_seconds: float, max_poll_records: int,
                 produce_batch: int) -> dict[str, Any]:
    """Start ``processes`` consumers on a fresh empty topic, give them ``join_seconds`` to join
    (a share group assigns on its heartbeat, about 3 s on this broker), hold them, produce
    ``count`` records, then start the clock and let them drain; return the rate and the
    exactly-once check. Every scenario, plain ones too, is timed the same way: from the start
    signal to the last successful commit."""
    tag = uuid.uuid4().hex[:8]
    topic, group = f"share-bench-{kind}-{processes}-{tag}", f"share-bench-{tag}"
    create_topic(bootstrap, topic)
    share = kind.startswith("share")
    if share:
        set_group_config(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    per_record = kind.endswith("record")
    context = mp.get_context("spawn")
    done, out = context.Value("q", 0), context.Queue()
    ready, start = context.Event(), context.Event()
    target = _share_worker if share else _plain_worker
    workers = [context.Process(target=target, args=(bootstrap, topic, group, per_record, count,
                                                    done, ready, start, out, max_poll_records))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    time.sleep(join_seconds)
    ready.set()
    time.sleep(POLL_SECONDS * 2)  # every worker is out of its last joining poll
    fill(bootstrap, topic, count, payload, produce_batch)
    load_before = os.getloadavg()
    began = time.monotonic()
    start.set()
    results: list[dict[str, Any]] = []
    while len(results) < len(workers):
        try:
            results.append(out.get(timeout=1.0))
        except queue.Empty:
            dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{kind}: a worker exited with {dead[0]}") from None
    for worker in workers:
        worker.join(60)
    load_after = os.getloadavg()
    offsets = [o for r in results for o in r["offsets"]]
    last = max(r["last"] for r in results if r["last"] is not None)
    firsts = [r["first"] for r in results if r["first"] is not None]
    steady_from = max(firsts)
    return {
        "scenario": kind, "processes": processes, "messages": count, "payload": payload,
        "msg_s": round(len(offsets) / (last - began), 1),
        "seconds": round(last - began, 3),
        "max_poll_records": max_poll_records, "produce_batch": produce_batch,
        "first_record_s": [round(f - began, 3) for f in sorted(firsts)],
        "steady_msg_s": (round(len(offsets) / (last - steady_from), 1)
                         if last > steady_from else None),
        "per_process": [len(r["offsets"]) for r in results],
        "accepted": len(offsets), "distinct": len(set(offsets)),
        "missing": count - len(set(offsets)),
        "accepted_twice": len(offsets) - len(set(offsets)),
        "redelivered": sum(r["redelivered"] for r in results),
        "commit_failures": sum(r["commit_failures"] for r in results),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
    }


def check_limits(bootstrap: str) -> dict[str, Any]:
    """What the broker does at the delivery-count limit and on REJECT, with and without a
    KIP-1191 dead-letter topic (a well-formed one, one without the topic's opt-in config, one
    whose name lacks the broker's prefix). Each case: one record, a group with
    ``share.delivery.count.limit=2``, a consumer that RELEASEs (or REJECTs) every delivery.
    The broker's log says why a DLQ write failed ("Failed to write to DLQ, proceeding to
    ARCHIVED regardless")."""
    report: dict[str, Any] = {}
    for case in ("release-no-dlq", "release-dlq", "reject-dlq", "dlq-topic-not-enabled",
                 "dlq-name-without-prefix"):
        tag = uuid.uuid4().hex[:8]
        topic, group = f"share-limit-{tag}", f"share-limit-{tag}"
        # The broker's errors.deadletterqueue.topic.name.prefix (default "dlq.") must start
        # the name; a name without it is accepted by the group config and fails at DLQ time.
        dlq = f"share-dlq-{tag}" if case == "dlq-name-without-prefix" else f"dlq.share-{tag}"
        create_topic(bootstrap, topic)
        settings = {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "2",
                    "share.record.lock.duration.ms": "15000"}
        if case != "release-no-dlq":
            # KIP-1191: the DLQ topic must opt in with errors.deadletterqueue.group.enable.
            create_topic(bootstrap, dlq, None if case == "dlq-topic-not-enabled"
                         else {"errors.deadletterqueue.group.enable": "true"})
            settings["errors.deadletterqueue.topic.name"] = dlq
            settings["errors.deadletterqueue.copy.record.enable"] = "true"
        entry: dict[str, Any] = {}
        try:
            entry["group_config"] = set_group_config(bootstrap, group, settings)
        except KafkaException as error:
            entry["group_config_error"] = str(error)
            report[case] = entry
            continue
        # A header as kmq's records carry: does the DLQ copy keep it?
        fill(bootstrap, topic, 1, 200, headers=[("kmq.probe", b"kept")])
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit"})
        consumer.subscribe([topic])
        ack = AcknowledgeType.REJECT if case.startswith("reject") else AcknowledgeType.RELEASE
        deliveries: list[int | None] = []
        quiet_since = None
        began = time.monotonic()
        while time.monotonic() - began < 60:
            records = [m for m in consumer.poll(1.0) if m.error() is None]
            if not records:
                if deliveries:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > QUIET_SECONDS:
                        break
                continue
            quiet_since = None
            for message in records:
                deliveries.append(message.delivery_count())
                consumer.acknowledge(message, ack)
            entry.setdefault("commit_results", []).append(
                {str(tp.topic): (None if e is None else str(e))
                 for tp, e in consumer.commit_sync().items()})
        consumer.close()
        entry["delivery_counts_seen"] = deliveries
        # Observed, not assumed: the loop polls until 8 s pass with no delivery.
        entry["quiet_seconds_after_last_delivery"] = QUIET_SECONDS
        entry["deliveries_past_limit"] = sum(1 for c in deliveries if (c or 0) > 2)
        if case != "release-no-dlq":
            entry["dlq_topic"] = dlq
            entry["dlq_records"] = _read_all(bootstrap, dlq, wait=10.0)
        report[case] = entry
    report["lost-lock"] = check_lost_lock(bootstrap)
    return report


def check_lost_lock(bootstrap: str) -> dict[str, Any]:
    """What a consumer's ACCEPT does after its acquisition lock ran out and another consumer
    acquired the record: the group's lock is set to the broker's minimum (15 s), consumer A
    polls the one record and waits, consumer B gets it when the lock lapses, then A and B each
    ACCEPT and commit. Returns both ``commit_sync`` results (per partition)."""
    tag = uuid.uuid4().hex[:8]
    topic = group = f"share-lostlock-{tag}"
    create_topic(bootstrap, topic)
    set_group_config(bootstrap, group, {"share.auto.offset.reset": "earliest",
                                        "share.record.lock.duration.ms": "15000"})
    fill(bootstrap, topic, 1, 200)
    holder, other = (ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                    "share.acknowledgement.mode": "explicit"})
                     for _ in range(2))
    holder.subscribe([topic])
    other.subscribe([topic])
    began = time.monotonic()
    first: list[Any] = []
    while not first and time.monotonic() - began < 60:
        first = [m for m in holder.poll(1.0) if m.error() is None]
    second: list[Any] = []
    while first and not second and time.monotonic() - began < 120:
        second = [m for m in other.poll(1.0) if m.error() is None]
    entry: dict[str, Any] = {
        "holder_delivery_count": first[0].delivery_count() if first else None,
        "other_got_it_after_s": round(time.monotonic() - began, 1) if second else None,
        "other_delivery_count": second[0].delivery_count() if second else None}
    for name, consumer, records in (("holder", holder, first), ("other", other, second)):
        for message in records:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        entry[f"{name}_commit"] = [None if error is None else str(error)
                                   for error in consumer.commit_sync().values()]
        consumer.close()
    return entry


def _read_all(bootstrap: str, topic: str, wait: float) -> list[dict[str, Any]]:
    """Every record of partition 0 of ``topic`` within ``wait`` seconds, with its headers."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found = []
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error() is not None:
            continue
        found.append({"offset": message.offset(),
                      "value": (message.value() or b"")[:12].decode(errors="replace"),
                      "value_bytes": len(message.value() or b""),
                      "headers": {key: _text(value)
                                  for key, value in _header_list(message.headers())}})
    consumer.close()
    return found


def _header_list(headers: Any) -> list[tuple[str, Any]]:
    """A record's headers as (name, value) pairs, whatever form the client returned."""
    if not headers:
        return []
    return list(headers.items()) if isinstance(headers, dict) else list(headers)


def _text(value: str | bytes | None) -> str:
    """A header value as text."""
    if value is None:
        return ""
    return value if isinstance(value, str) else value.decode(errors="replace")


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the scenarios, print one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KMQ_BOOTSTRAP_SERVERS"))
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--record-messages", type=int, default=None,
                        help="records for the per-record-commit scenarios (default --messages)")
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--scenarios", default="plain-record,plain-batch,share-batch,share-record")
    parser.add_argument("--join-seconds", type=float, default=8.0,
                        help="wait between the consumers' start and the first produce")
    parser.add_argument("--max-poll-records", type=int, default=500)
    parser.add_argument("--produce-batch", type=int, default=10_000,
                        help="records per produced record batch (batch.num.messages)")
    parser.add_argument("--check-limits", action="store_true")
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("give --bootstrap or KMQ_BOOTSTRAP_SERVERS (kmq dev up prints it)")
    if args.check_limits:
        print(json.dumps(check_limits(args.bootstrap), indent=2))
        return 0
    rows = []
    for kind in args.scenarios.split(","):
        counts = [1] if kind.startswith("plain") else [int(p) for p in args.processes.split(",")]
        for processes in counts:
            count = (args.record_messages or args.messages) if kind.endswith("record") \
                else args.messages
            row = run_scenario(args.bootstrap, kind, processes, count, args.payload,
                               args.join_seconds, args.max_poll_records, args.produce_batch)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    base = next((r["msg_s"] for r in rows if r["scenario"] == "plain-record"), None)
    for row in rows:
        row["vs_plain_record"] = round(row["msg_s"] / base, 2) if base else None
    print(json.dumps({"cpus": os.cpu_count(), "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
