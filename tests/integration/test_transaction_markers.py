"""A queue written by many Kafka transactions reads at full speed.

Every committed Kafka transaction leaves a control record (a marker) in each partition it wrote:
a one-offset gap that readers never see. A view checks each such gap with a second fetch before
it takes it as real (``QueueView._rewind``). The reader must keep its short broker-side fetch
wait while those fetches bring records: a reader that took the gaps for starvation and raised
``fetch.wait.max.ms`` to 500 ms paid half a second per marker on brokers that hold a fetch for
its whole wait, and a fresh handle on the demo's transactional queue (1,985 offsets, 330
markers) could not read it within 60 s.
"""

from __future__ import annotations

import pytest

from facade import Message
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
