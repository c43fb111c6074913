"""Share-group arbitration (facade.queues.sharequeue) on a real Apache Kafka 4.4 broker:
the group and dead-letter topic create_queue sets up, receive once each across handles and
processes, poison at the delivery limit with its count, a record the broker archived drained
into ;poison, the refusals, and the CLI."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from facade import (
    InvalidParameter,
    LockLost,
    Message,
    QueueNotFound,
    ReceiveTimeout,
    UnsupportedFormatNameOperation,
)
from facade.config import KmqConfig
from facade.kafka.kafkaseam import RELEASE
from facade.manager import QueueManager
from facade.queues.peeklock import LockedMessage
from facade.queues.queue import MessageQueue
from facade.queues.sharequeue import DLQ_PREFIX_CONFIG, dead_letter_topic_of, group_of
from tests.support.cli import run_json

pytestmark = pytest.mark.integration

#: Seconds a receive may wait for a share consumer to join the group and get records (a
#: share group assigns on its heartbeat: a few seconds on a busy 2-core machine).
JOIN = 60.0


def _drain(queue: MessageQueue, idle: float = 5.0) -> list[Message]:
    got = []
    first = JOIN
    while True:
        try:
            got.append(queue.receive(timeout=first))
        except ReceiveTimeout:
            return got
        first = idle


def test_create_sets_up_the_group_and_its_dead_letter_topic(qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\setup", arbitration="share", receive_retry_count=3)
    properties = queue.properties
    assert properties.arbitration == "share" and queue.arbitration == "share"
    default = qm.create_queue(r".\private$\plain")
    assert default.properties.arbitration == "receipts"
    # The receipts topic registered for a share queue is never created: an older kmq that
    # would arbitrate it by receipts fails instead of receiving next to the share group.
    assert not qm.session.topic_exists(properties.receipts_topic)
    prefix = qm.session.broker_config(DLQ_PREFIX_CONFIG)
    assert prefix
    dlq = dead_letter_topic_of(prefix, properties.data_topic)
    assert qm.session.topic_configs([dlq])[dlq]["errors.deadletterqueue.group.enable"] == "true"
    from confluent_kafka.admin import ConfigResource, ResourceType

    group = ConfigResource(ResourceType.GROUP, group_of(properties.data_topic))
    entries = next(iter(qm.session.admin.describe_configs([group]).values())).result(60)
    kept = {key: entries[key].value for key in entries}
    assert kept["share.auto.offset.reset"] == "earliest"
    assert kept["share.delivery.count.limit"] == "5"  # receive_retry_count + 2
    assert kept["errors.deadletterqueue.topic.name"] == dlq
    qm.delete_queue(r".\private$\setup")
    assert not qm.session.topic_exists(dlq)


def test_one_handle_receives_each_message_once(qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\once", arbitration="share")
    sent = {f"m{i}".encode() for i in range(40)}
    for n, body in enumerate(sorted(sent)):
        queue.send(Message(body=body, priority=n % 8))
    queue.send(Message(body=b"last"), wait=True)
    got = _drain(queue)
    bodies = Counter(m.body for m in got)
    assert set(bodies) == sent | {b"last"} and max(bodies.values()) == 1
    assert all(m.abort_count == 0 for m in got)
    many_sent = [b"b%d" % i for i in range(10)]
    for body in many_sent:
        queue.send(Message(body=body))
    queue.send(Message(body=b"b-last"), wait=True)
    batch: list[Message] = []
    deadline = time.monotonic() + JOIN
    while len(batch) < 11 and time.monotonic() < deadline:
        try:
            batch += queue.receive_many(20, timeout=5)
        except ReceiveTimeout:
            continue
    assert sorted(m.body for m in batch) == sorted([*many_sent, b"b-last"])


def test_deleting_a_share_queue_deletes_its_share_group(qm: QueueManager) -> None:
    """A share group outlives its topics on the broker: delete_queue deletes it (DeleteGroups
    deletes a share group once its members left: the queue's handles are closed first)."""
    queue = qm.create_queue(r".\private$\gone", arbitration="share")
    group = group_of(queue.properties.data_topic)
    queue.send(Message(body=b"joins the group"), wait=True)
    assert queue.receive(timeout=JOIN).body == b"joins the group"  # the group exists now

    qm.delete_queue(r".\private$\gone")

    future = qm.session.admin.delete_consumer_groups([group], request_timeout=60)[group]
    with pytest.raises(KafkaException) as gone:
        future.result(60)
    assert gone.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


def _receiver(bootstrap: str, qm_name: str, home: str, out: Any) -> None:
    os.environ["KMQ_HOME"] = home
    config = KmqConfig.load(bootstrap_servers=bootstrap, queue_manager=qm_name)
    with QueueManager.open(config) as manager, \
            manager.open_queue(r".\private$\contended") as queue:
        out.put([m.body for m in _drain(queue, idle=8.0)])


def test_competing_processes_never_get_one_message_twice(qm: QueueManager,
                                                         kmq_home: Path) -> None:
    queue = qm.create_queue(r".\private$\contended", arbitration="share")
    context = mp.get_context("spawn")
    out = context.Queue()
    workers = [context.Process(target=_receiver, args=(qm.session.bootstrap_servers, qm.name,
                                                       str(kmq_home), out))
               for _ in range(3)]
    for worker in workers:
        worker.start()
    sent = [b"c%d" % i for i in range(300)]
    queue.send_many([Message(body=body) for body in sent], wait=True)
    results = [out.get(timeout=240) for _ in workers]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    got = Counter(body for result in results for body in result)
    assert set(got) == set(sent), f"missing: {sorted(set(sent) - set(got))[:10]}"
    assert max(got.values()) == 1, [b for b, n in got.items() if n > 1][:10]


def _release(qm: QueueManager, data_topic: str, times: int) -> None:
    """Acquire the one record with a plain member of the queue's share group and RELEASE it,
    ``times`` times: deliveries that never reached kmq, as a receiver that died would leave."""
    consumer = qm.session.share_consumer(group_of(data_topic), data_topic)
    try:
        deadline = time.monotonic() + JOIN
        while times and time.monotonic() < deadline:
            for shared in consumer.poll(1.0):
                consumer.acknowledge(shared, RELEASE)
                assert consumer.commit_sync(30) is None
                times -= 1
        assert times == 0, "the record was not delivered often enough"
    finally:
        consumer.close()


def test_at_the_delivery_limit_a_message_moves_to_poison_with_its_count(
        qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\limit", arbitration="share", receive_retry_count=1)
    queue.send(Message(body=b"poison me"), wait=True)
    _release(qm, queue.properties.data_topic, 2)
    with pytest.raises(ReceiveTimeout):
        queue.receive(timeout=10)  # the third delivery: abort count 2 > 1 -> ;poison
    poison = qm.open_queue(r".\private$\limit;poison")
    moved = poison.receive(timeout=30)
    assert moved.body == b"poison me"
    assert moved.abort_count == 2 and moved.move_count == 1


def test_a_record_the_broker_archived_is_drained_into_poison(qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\archived", arbitration="share", receive_retry_count=0)
    queue.send(Message(body=b"archived"), wait=True)
    # Two deliveries released outside kmq reach the group's limit (0 + 2): the broker
    # archives the record and writes it to the dead-letter topic, which receivers drain.
    _release(qm, queue.properties.data_topic, 2)
    poison = qm.open_queue(r".\private$\archived;poison")
    deadline = time.monotonic() + 90
    found = None
    while found is None and time.monotonic() < deadline:
        with pytest.raises(ReceiveTimeout):
            queue.receive(timeout=3)
        try:
            found = poison.receive(timeout=1)
        except ReceiveTimeout:
            continue
    assert found is not None, "the archived record never reached ;poison"
    assert found.body == b"archived" and found.abort_count == 1


def test_a_share_queue_refuses_peek_count_purge_and_transactions(qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\refusals", arbitration="share")
    queue.send(Message(body=b"kept"), wait=True)
    for call in (lambda: queue.peek(0), queue.count, queue.purge, queue.cursor,
                 lambda: queue.receive_by_lookup_id(0)):
        with pytest.raises(UnsupportedFormatNameOperation, match="share group"):
            call()
    with pytest.raises(InvalidParameter, match="transactional"):
        queue.receive(0, transaction="single")
    with pytest.raises(InvalidParameter, match="cannot be transactional"):
        qm.create_queue(r".\private$\xact", arbitration="share", transactional=True)
    assert queue.receive(timeout=JOIN).body == b"kept"  # nothing refused touched it


def test_the_cli_creates_and_shows_a_share_queue(cli_qm: str) -> None:
    created = run_json("queue", "create", "clishare", "--arbitration", "share")
    assert created["arbitration"] == "share" and "none kept" in created["order"]
    shown = run_json("queue", "show", "clishare")
    assert shown["arbitration"] == "share" and shown["messages"] is None
    listed = {q["queue_name"]: q for q in run_json("queue", "list")}
    assert listed["clishare"]["arbitration"] == "share"
    assert "none kept" in listed["clishare"]["order"]


def test_peek_lock_complete_abandon_and_poison(qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\locks", arbitration="share", receive_retry_count=1)
    queue.send(Message(body=b"one"), wait=True)
    locked = queue.receive(timeout=JOIN, lock=True)
    assert isinstance(locked, LockedMessage) and locked.abort_count == 0
    assert locked.abandon() is True
    again = queue.receive(timeout=JOIN, lock=True)
    assert again.body == b"one" and again.abort_count == 1
    again.complete()
    with pytest.raises(ReceiveTimeout):
        queue.receive(timeout=3)
    # Released twice (abort count 2 > receive_retry_count 1): the third delivery is ;poison.
    queue.send(Message(body=b"two"), wait=True)
    for _ in range(2):
        queue.receive(timeout=JOIN, lock=True).abandon()
    with pytest.raises(ReceiveTimeout):
        queue.receive(timeout=5, lock=True)
    moved = qm.open_queue(r".\private$\locks;poison").receive(timeout=30)
    assert moved.body == b"two" and moved.abort_count == 2


def test_several_peek_locks_out_on_one_handle(qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\manylocks", arbitration="share")
    for n in range(3):
        queue.send(Message(body=b"%d" % n), wait=True)
    locks = [queue.receive(timeout=JOIN, lock=True) for _ in range(3)]
    assert sorted(m.body for m in locks) == [b"0", b"1", b"2"]
    for message in locks:
        message.complete()
    with pytest.raises(ReceiveTimeout):
        queue.receive(timeout=3)


def test_a_lapsed_lock_is_lost_and_the_message_delivered_again(qm: QueueManager) -> None:
    queue = qm.create_queue(r".\private$\lapse", arbitration="share")
    queue.send(Message(body=b"slow"), wait=True)
    with pytest.raises(InvalidParameter, match="lease"):
        queue.receive(timeout=0, lock=True, lease=60)
    locked = queue.receive(timeout=JOIN, lock=True, lease=5)
    other = qm.open_queue(r".\private$\lapse")
    # The broker's 30 s acquisition lock lapses: another receiver gets the message.
    again = other.receive(timeout=JOIN + 30)
    assert again.body == b"slow" and again.abort_count == 1
    with pytest.raises(LockLost):
        locked.complete()


def test_a_kmq_that_arbitrates_by_receipts_gets_nothing_from_a_share_queue(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kmq that predates share arbitration reads the queue's record without its
    ``arbitration`` (absent means receipts) and would be a second arbiter beside the share
    group. It is stopped by the topic level: the registered receipts topic is never created,
    and kmq's clients never create topics, so its receive fails and writes nothing, and the
    share group hands the message out once."""
    import dataclasses

    from facade.state import registry

    queue = qm.create_queue(r".\private$\mixed", arbitration="share")
    queue.send(Message(body=b"once"), wait=True)
    decode = registry._decode_queue  # the registry's record decoder, as an older kmq has it

    def as_an_older_kmq(*args: Any, **kwargs: Any) -> Any:
        return dataclasses.replace(decode(*args, **kwargs), arbitration="receipts")

    monkeypatch.setattr(registry, "_decode_queue", as_an_older_kmq)
    with QueueManager.open(qm.config) as older:
        handle = older.open_queue(r".\private$\mixed")
        assert handle.arbitration == "receipts"
        with pytest.raises(QueueNotFound, match="share-arbitrated' does not exist"):
            handle.receive(timeout=10)
    monkeypatch.undo()
    assert not qm.session.topic_exists(queue.properties.receipts_topic)
    assert [m.body for m in _drain(queue)] == [b"once"]
