"""Receivers of a share-arbitrated queue killed with SIGKILL in a loop while four drain it.

One sender process sends RECOVERABLE messages to a queue created with
``arbitration="share"`` while four receiver processes take from it; every ``KILL_EVERY``
seconds the oldest receiver is killed with SIGKILL and a new one started. A killed receiver
may hold records its last poll acquired: the broker gives them to the others when their
acquisition lock (30 s) lapses, so the survivors keep receiving until ``IDLE`` seconds pass
without a message, which is longer than the lock.

The checker proves what docs/design.md promises for a destructive receive on a share queue:
nothing acknowledged is lost except at most one message per killed receiver (the one whose
ACCEPT the broker applied before the receiver could record it: at most once), nothing is
received twice, and nothing is invented. Order is not checked: a share group keeps none.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from facade.manager import QueueManager
from tests.faults.conftest import report
from tests.faults.history import History
from tests.faults.workers import observe_dead_letters, start

pytestmark = [pytest.mark.integration, pytest.mark.outside_budget, pytest.mark.timeout(420)]

MESSAGES = 400
RECEIVERS = 4
KILLS = 5
KILL_EVERY = (1.5, 3.0)  # seconds between kills, drawn at random
#: Seconds a receiver waits without a message before it exits: past the 30 s lock a killed
#: receiver's acquired records are held for.
IDLE = 45.0


def _wait_until_receiving(history_path: Path, receiver: str, timeout: float = 120.0) -> None:
    """Return once ``receiver`` recorded a receive: kills before the share consumers joined
    their group would prove nothing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = History()
        probe.load(history_path)
        if any(r.receiver == receiver for r in probe.receives):
            return
        time.sleep(0.5)
    raise AssertionError(f"receiver {receiver} received nothing within {timeout} s")


def test_share_receivers_killed_in_a_loop_lose_at_most_their_in_flight_message(
        fault_qm: QueueManager, kmq_home: Path, history_path: Path) -> None:
    queue = fault_qm.create_queue(r".\private$\sharekills", arbitration="share")
    common = dict(bootstrap=fault_qm.session.bootstrap_servers, qm=fault_qm.name,
                  queue=r".\private$\sharekills", label="sharekills")
    rng = random.Random(35)

    def receiver(n: int):  # noqa: ANN202 - a Worker
        return start("receiver", kmq_home, history=str(history_path / f"r{n}.jsonl"),
                     idle=IDLE, **common)

    receivers = [receiver(n) for n in range(RECEIVERS)]
    for worker in receivers:
        worker.ready(timeout=120)
    sender = start("sender", kmq_home, actor="s0", history=str(history_path / "s0.jsonl"),
                   count=MESSAGES, interval=0.04, delivery="RECOVERABLE", ordered=False,
                   **common)
    sender.ready(timeout=120)
    history = History()
    started = time.monotonic()
    _wait_until_receiving(history_path, receivers[0].ident)
    killed_at: dict[str, float] = {}
    for kill in range(KILLS):
        time.sleep(rng.uniform(*KILL_EVERY))
        victim = receivers.pop(0).ready(timeout=120)
        victim.kill()
        killed_at[victim.ident] = time.time()
        history.receiver_killed(victim.ident, in_flight=1)
        receivers.append(receiver(RECEIVERS + kill))
    sender.wait(timeout=120)
    for worker in receivers:
        worker.ready(timeout=120).wait(timeout=300)
    elapsed = time.monotonic() - started

    history.load(history_path)
    # A receive whose ACCEPT had an unknown outcome dead-letters its copy before it raises.
    observe_dead_letters(fault_qm, history, {queue.destinations[0].format_name: "sharekills"})
    verdict = history.verdict()
    report(f"share receiver kills: {KILLS} SIGKILLs of {RECEIVERS} receivers in "
           f"{elapsed:.1f} s; {verdict.summary()}; excused: {sorted(verdict.excused.values())}")
    by_killed = sum(1 for r in history.receives if r.receiver in history.killed)
    # Receives in the second before a receiver's kill: it was killed while receiving.
    busy = sum(1 for ident, at in killed_at.items()
               if any(r.receiver == ident and at - r.t < 1.0 for r in history.receives))
    report(f"share receiver kills: the killed receivers had received {by_killed} messages; "
           f"{busy} of {KILLS} received in their last second")
    assert verdict.ok, verdict.summary()
    assert busy > 0, "no receiver was killed while it received: the test proved nothing"
    assert verdict.counts["received"] >= MESSAGES - KILLS
    assert len(verdict.excused) <= KILLS
