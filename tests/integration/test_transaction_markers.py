"""A queue written by many Kafka transactions reads at full speed.

Every committed or aborted Kafka transaction leaves a control record (a marker) in each
partition it wrote, and an aborted one leaves its records too: gaps that read_committed readers
never see and that never fill. A view skips them as they come (``QueueView._reopen_after_gap``),
without reading the topic again from the gap: a view that re-read from every gap, with its
reader's fetch wait raised meanwhile, would read a queue behind aborted transactions at a few
records per second, and its receive would give up after 60 s.
"""

from __future__ import annotations

import pytest

from facade import Message
from facade.kafka.librdkafka import TopicReader
from facade.manager import QueueManager

pytestmark = pytest.mark.integration

TRANSACTIONS = 300


def test_a_fresh_handle_reads_a_queue_of_many_transactions(qm: QueueManager) -> None:
    path = r".\private$\many-transactions"
    queue = qm.create_queue(path, transactional=True)
    for n in range(TRANSACTIONS):
        with qm.begin_transaction() as transaction:
            queue.send(Message(body=b"%d" % n), transaction=transaction)
    fresh = qm.open_queue(path)
    # count() reads both topics to their end (read_to_end's 60 s limit), crossing every marker.
    assert fresh.count() == TRANSACTIONS
    assert [fresh.receive(timeout=30, transaction="single").body for _ in range(3)] == \
        [b"0", b"1", b"2"]


def test_a_fresh_handle_skips_aborted_transactions_without_reading_again(
        qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> None:
    path = r".\private$\aborted-transactions"
    queue = qm.create_queue(path, transactional=True)
    for n in range(TRANSACTIONS // 3):
        with qm.begin_transaction() as transaction:
            queue.send(Message(body=b"%d" % n), transaction=transaction)
        aborted = qm.begin_transaction()
        queue.send_many([Message(body=b"aborted")] * 3, transaction=aborted)
        aborted.abort()
    seeks: list[tuple[str, int]] = []
    original_seek = TopicReader.seek
    monkeypatch.setattr(TopicReader, "seek",
                        lambda self, topic, offset: (seeks.append((topic, offset)),
                                                     original_seek(self, topic, offset))[1])
    fresh = qm.open_queue(path)
    assert fresh.count() == TRANSACTIONS // 3
    assert seeks == []  # no gap was read twice
    assert [fresh.receive(timeout=30, transaction="single").body for _ in range(3)] == \
        [b"0", b"1", b"2"]
