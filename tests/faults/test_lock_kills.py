"""Peek-lock receivers killed with SIGKILL while they hold a message.

Each holder process takes the one message of a queue with ``receive(lock=True)`` and is killed
before it completes or abandons it. The lock's lease is the only way the message comes back:
the next holder gets it once the lease has passed, with its abort count (PROPID_M_ABORT_COUNT,
MSMQ's delivery count) raised by one. After ``receive_retry_count`` releases the message is
moved to the queue's ``;poison`` subqueue (MSMQ 4.0 poison handling), not lost and not handed
out again, and the queue goes on serving the messages behind it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from facade.errors import ReceiveTimeout
from facade.manager import QueueManager
from facade.model.message import Message
from tests.faults.conftest import report
from tests.faults.workers import start

pytestmark = pytest.mark.integration

RETRY_LIMIT = 1
LEASE = 1.0   # seconds; only ever waited out, never raced against
WAIT = 60.0   # generous: a holder waits for the previous holder's lease on a busy machine


def _hold_and_die(fault_qm: QueueManager, kmq_home: Path, path: str) -> tuple[str, int]:
    """Start a lock holder, read what it took, SIGKILL it; return (body, abort count)."""
    holder = start("lock_holder", kmq_home, bootstrap=fault_qm.session.bootstrap_servers,
                   qm=fault_qm.name, queue=path, lease=LEASE, timeout=WAIT).ready()
    try:
        assert holder.process.stdout is not None
        line = holder.process.stdout.readline().split()
        assert line and line[0] == "got", f"the holder took nothing: {holder.stderr()}"
        return line[1], int(line[2])
    finally:
        holder.kill()


def test_killed_lock_holders_raise_the_abort_count_until_the_message_is_poison(
        fault_qm: QueueManager, kmq_home: Path) -> None:
    path = r".\private$\lock-kills"
    queue = fault_qm.create_queue(path, receive_retry_count=RETRY_LIMIT)
    sent = queue.send(Message(body=b"pill"), wait=True)

    taken = [_hold_and_die(fault_qm, kmq_home, path) for _ in range(RETRY_LIMIT + 1)]
    # Each crash is undone by the lease alone, and each redelivery counts it.
    assert taken == [("pill", n) for n in range(RETRY_LIMIT + 1)]

    behind = queue.send(Message(body=b"behind"), wait=True)
    # The pill's last lock is still under its lease: the receiver gets the message behind it.
    assert queue.receive(timeout=WAIT).id == behind.id
    # Once the lease passes, the next receive releases the lock (releases > RETRY_LIMIT) and
    # moves the pill to ;poison before its own pick, instead of handing it out again.
    poison = fault_qm.open_queue(rf"DIRECT=OS:{fault_qm.name}\private$\lock-kills;poison")
    with pytest.raises(ReceiveTimeout):
        queue.receive(timeout=LEASE + 1.5)  # waits the lease out: nothing to hand out
    moved = poison.receive(timeout=WAIT)
    assert moved.id == sent.id and moved.abort_count == RETRY_LIMIT + 1
    assert queue.count() == 0 and poison.count() == 0  # not lost, not delivered twice
    report(f"lock kills: {RETRY_LIMIT + 1} holders SIGKILLed, abort counts "
           f"{[count for _, count in taken]}, then moved to ;poison")
