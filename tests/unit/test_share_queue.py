"""Share-group arbitration (facade.queues.sharequeue) without a broker: the ``arbitration`` queue
property, create_queue's checks, the in-memory Kafka's refusal, and every operation a
share-arbitrated queue refuses. Receiving from one needs a broker:
tests/integration/test_share_queue.py and tests/faults/test_share_kills.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from facade import (
    BrokerError,
    InvalidParameter,
    Message,
    QueueNotFound,
    UnsupportedFormatNameOperation,
)
from facade.errors import EnvelopeError
from facade.config import KmqConfig
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.manager import QueueManager
from facade.queues.queue import MessageQueue
from facade.state.registry import QueueProperties
from facade.queues.sharequeue import (
    MAX_SHARE_RETRY_COUNT,
    dead_letter_topic_of,
    group_of,
    share_receipts_topic,
)
from facade.model.topics import queue_topics


def _share_queue(qm: QueueManager, name: str = "work") -> MessageQueue:
    """A share-arbitrated queue registered as create_queue registers one, but without the
    broker-side group setup the in-memory Kafka cannot do: for the refusals, which raise
    before any share consumer exists."""
    topics = queue_topics(qm.name, name, private=True)
    properties = QueueProperties(
        path_name=rf"{qm.name}\private$\{name}", queue_manager=qm.name, queue_name=name,
        private=True, data_topic=topics.data,
        receipts_topic=share_receipts_topic(topics.data), arbitration="share").validate()
    journal = topics.journal()
    qm.session.create_topics([topics.data, journal.data, journal.receipts])
    qm.registry.put_queue(properties)
    return qm.open_queue(properties.path_name)


def test_a_record_without_arbitration_reads_as_receipts(memory_qm: QueueManager) -> None:
    queue = memory_qm.create_queue(r".\private$\old")
    doc = json.loads(queue.properties.to_json())
    del doc["arbitration"]
    decoded = QueueProperties.from_json(json.dumps(doc).encode())
    assert decoded.arbitration == "receipts"
    assert queue.arbitration == "receipts"


def test_arbitration_round_trips_and_unknown_values_are_refused() -> None:
    topics = queue_topics("qm", "q", private=True)
    properties = QueueProperties(path_name=r"qm\private$\q", queue_manager="qm",
                                 queue_name="q", private=True, data_topic=topics.data,
                                 receipts_topic=topics.receipts, arbitration="share")
    assert QueueProperties.from_json(properties.to_json()).arbitration == "share"
    with pytest.raises(InvalidParameter, match="arbitration must be one of"):
        dataclasses.replace(properties, arbitration="fifo").validate()
    doc = json.loads(properties.to_json())
    doc["arbitration"] = "fifo"
    with pytest.raises(EnvelopeError, match="arbitration"):
        QueueProperties.from_json(json.dumps(doc).encode())


@pytest.mark.parametrize(("settings", "match"), [
    ({"arbitration": "fifo"}, "arbitration must be one of"),
    ({"arbitration": 1}, "arbitration"),
    ({"arbitration": "share", "transactional": True}, "cannot be transactional"),
    ({"arbitration": "share", "receive_retry_count": None}, "receive_retry_count 0-8"),
    ({"arbitration": "share", "receive_retry_count": MAX_SHARE_RETRY_COUNT + 1},
     "receive_retry_count 0-8"),
])
def test_create_queue_refuses_what_a_share_queue_cannot_honour(
        memory_qm: QueueManager, settings: dict, match: str) -> None:
    with pytest.raises(InvalidParameter, match=match) as caught:
        memory_qm.create_queue(r".\private$\bad", **settings)
    assert r"private$\bad" in str(caught.value) or "arbitration" in str(caught.value)
    assert not memory_qm.queue_exists(r".\private$\bad")


def test_the_in_memory_kafka_refuses_a_share_queue_and_leaves_nothing(
        memory_qm: QueueManager) -> None:
    with pytest.raises(BrokerError, match="does not model Kafka share groups") as caught:
        memory_qm.create_queue(r".\private$\shared", arbitration="share")
    assert "tests/integration" in (caught.value.hint or "")
    assert not memory_qm.queue_exists(r".\private$\shared")
    data = queue_topics(memory_qm.name, "shared", private=True).data
    assert not memory_qm.session.topic_exists(data)


def test_names_of_the_group_and_topics() -> None:
    data = "kmq.qm.private.work"
    assert group_of(data) == "kmq.qm.private.work.share"
    assert dead_letter_topic_of("dlq.", data) == "dlq.kmq.qm.private.work"
    assert share_receipts_topic(data) == "kmq.qm.private.work.share-arbitrated"


def test_arbitration_cannot_be_changed(memory_qm: QueueManager) -> None:
    memory_qm.create_queue(r".\private$\fixed")
    with pytest.raises(InvalidParameter, match="arbitration"):
        memory_qm.set_properties(r".\private$\fixed", arbitration="share")
    _share_queue(memory_qm)
    with pytest.raises(InvalidParameter, match="delivery limit"):
        memory_qm.set_properties(r".\private$\work", receive_retry_count=3)


def test_a_share_queue_refuses_what_a_share_group_has_not(memory_qm: QueueManager) -> None:
    queue = _share_queue(memory_qm)
    assert queue.arbitration == "share"
    refused = {
        "peek": lambda: queue.peek(0),
        "peek by id": lambda: queue.peek_by_id("{00000000-0000-0000-0000-000000000000}\\1"),
        "receive by id": lambda: queue.receive_by_id(
            "{00000000-0000-0000-0000-000000000000}\\1"),
        "receive by correlation id": lambda: queue.receive_by_correlation_id(
            "{00000000-0000-0000-0000-000000000000}\\1"),
        "receive by lookup id": lambda: queue.receive_by_lookup_id(0),
        "peek by lookup id": lambda: queue.peek_by_lookup_id(0),
        "cursors": queue.cursor,
        "purge": queue.purge,
        "count": queue.count,
        "counts": queue.counts,
        "move by lookup id": lambda: queue.move(0, "poison"),
    }
    for operation, call in refused.items():
        with pytest.raises(UnsupportedFormatNameOperation) as caught:
            call()
        text = str(caught.value)
        assert "share group" in text and caught.value.queue == queue.format_name, operation
        assert "arbitration='receipts'" in text + (caught.value.hint or ""), operation
    with pytest.raises(UnsupportedFormatNameOperation, match="prefetch"):
        memory_qm.open_queue(r".\private$\work", prefetch=10)
    with pytest.raises(InvalidParameter, match="no transactional acknowledgement"):
        queue.receive(0, transaction="single")
    with pytest.raises(InvalidParameter, match="no transactional acknowledgement"):
        queue.receive_many(5, 0, transaction="single")
    with pytest.raises(InvalidParameter, match="lease"):
        queue.receive(0, lock=True, lease=26)
    with pytest.raises(InvalidParameter, match="not_before"):
        queue.send(Message(body=b"later", not_before=dt.datetime.now(dt.timezone.utc)
                           + dt.timedelta(hours=1)))
    queue.send(Message(body=b"now"), wait=True)  # any other send is a plain send


def test_a_share_queue_on_the_in_memory_kafka_refuses_to_receive(
        memory_qm: QueueManager) -> None:
    queue = _share_queue(memory_qm)
    with pytest.raises(BrokerError, match="does not model Kafka share groups"):
        queue.receive(0)


def test_its_journal_and_subqueues_stay_receipts_queues(memory_qm: QueueManager) -> None:
    _share_queue(memory_qm)
    journal = memory_qm.open_queue(r".\private$\work\journal$")
    poison = memory_qm.open_queue(r".\private$\work;poison")
    assert journal.arbitration == poison.arbitration == "receipts"
    assert poison.count() == 0


def test_the_sweep_skips_a_share_queue(memory_qm: QueueManager) -> None:
    queue = _share_queue(memory_qm)
    assert queue.expire_due() == 0
    assert queue.recover_claims() == 0
    assert r"memqm\private$\work" not in memory_qm.queue_counts()


def test_deleting_a_share_queue_removes_its_topics(memory_qm: QueueManager) -> None:
    _share_queue(memory_qm)
    memory_qm.delete_queue(r".\private$\work")
    with pytest.raises(QueueNotFound):
        memory_qm.open_queue(r".\private$\work")


def test_deleting_a_share_queue_deletes_its_group_before_its_topics(
        memory_qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's share coordinator deletes a group's state per partition and retries, past the
    admin timeout, for a partition whose topic already left its metadata image (a race with
    the topic deletion, seen on Kafka 4.4 as DeleteGroups unanswered for 15 s): the group goes
    first. The order is what this pins; the broker's side is in the integration suite."""
    _share_queue(memory_qm)
    data_topic = queue_topics(memory_qm.name, "work", private=True).data
    calls: list[tuple[str, list[str]]] = []
    session = memory_qm.session
    delete_groups, delete_topics = session.delete_groups, session.delete_topics
    monkeypatch.setattr(session, "delete_groups",
                        lambda groups: calls.append(("groups", list(groups)))
                        or delete_groups(groups))
    monkeypatch.setattr(session, "delete_topics",
                        lambda names: calls.append(("topics", list(names))) or delete_topics(names))
    memory_qm.delete_queue(r".\private$\work")
    assert [kind for kind, _ in calls] == ["groups", "topics"]
    assert group_of(data_topic) in calls[0][1]
    assert data_topic in calls[1][1]


def test_a_spark_job_may_not_read_a_share_queue_but_may_write_to_it_and_read_its_journal(
        kmq_home: Path) -> None:
    """Spark reads through the queue view and removes with receipts; a share queue's messages
    are removed by the share group's ACCEPTs, which no view sees, so a peek would show received
    messages and a receive-mode stream would be a second arbiter handing them out again."""
    from spark_connector.resolve import Operation, resolve_with

    # A broker address for the Resolution the job would get; the in-memory Kafka answers.
    config = KmqConfig.load(queue_manager="memqm", bootstrap_servers="127.0.0.1:9")
    with QueueManager.open(config, session=MemoryKafkaSession()) as qm:
        queue = _share_queue(qm)
        for operation in (Operation.PEEK, Operation.RECEIVE):
            with pytest.raises(UnsupportedFormatNameOperation, match="share group") as refused:
                resolve_with(qm, queue.format_name, operation)
            assert "journal" in (refused.value.hint or "")
        sent = resolve_with(qm, queue.format_name, Operation.SEND)
        assert [t.data_topic for t in sent.targets] == [queue.destinations[0].topics.data]
        journal = resolve_with(qm, queue.destinations[0].format_name + ";JOURNAL",
                               Operation.PEEK)
        assert len(journal.targets) == 1 and journal.targets[0].read_only
