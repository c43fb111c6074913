"""Transaction scenarios run both on a broker process (tests/integration) and on the in-memory
Kafka (tests/unit), so the two stay the same test."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from facade import Message, TransactionAborted
from facade.manager import QueueManager
from facade.queues.queue import MessageQueue

#: The ``transactional.id`` both incarnations of the sender use.
MOVER_ID = "kmq-test-mover"


def restart_fences_the_old_sender(qm: QueueManager, q: MessageQueue,
                                  restart: Callable[[], AbstractContextManager[QueueManager]]) -> None:
    """Kafka's zombie fencing, through kmq: ``qm`` commits "old 1" to ``q``; ``restart()`` opens a
    second queue manager with the same ``transactional.id``, which commits "new"; the first
    one's next transaction ("zombie") must then fail with TransactionAborted naming the fencing,
    and nothing of it may become visible (the caller checks what ``q`` holds)."""
    qm.transactional_id = MOVER_ID
    with qm.begin_transaction() as tx:
        q.send(Message(body=b"old 1"), transaction=tx)
    with restart() as restarted:
        restarted.transactional_id = MOVER_ID
        with restarted.begin_transaction() as tx:
            restarted.open_queue(q.format_name).send(Message(body=b"new"), transaction=tx)
        zombie = qm.begin_transaction()
        q.send(Message(body=b"zombie"), transaction=zombie)
        with pytest.raises(TransactionAborted, match="fences"):
            zombie.commit(timeout=20)
