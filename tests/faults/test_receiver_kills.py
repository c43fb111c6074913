"""Receivers killed with SIGKILL in a loop while senders run.

Two sender processes (RECOVERABLE, and EXPRESS waiting for each verdict: both acknowledged)
send to one queue while two receiver processes take from it; every ``KILL_EVERY`` seconds one
receiver is killed with SIGKILL and a new one started. At the end the survivors drain the queue.

The checker then proves, with the receipts log as evidence of who removed what: nothing
acknowledged is lost except messages claimed by a killed receiver (at most one each:
nontransactional receive is at-most-once, and a receiver takes one message at a time), no
message was received twice, and each receiver saw each sender's messages in order.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from facade.manager import QueueManager
from tests.faults.conftest import report
from tests.faults.history import History
from tests.faults.workers import read_claims, start

pytestmark = pytest.mark.integration

MESSAGES = 150          # per sender
KILLS = 3
KILL_EVERY = (0.4, 0.8)  # seconds between kills, drawn at random


def test_receivers_killed_in_a_loop_lose_only_their_in_flight_message(
        fault_qm: QueueManager, kmq_home: Path, history_path: Path) -> None:
    queue = fault_qm.create_queue(r".\private$\kills")
    common = dict(bootstrap=fault_qm.session.bootstrap_servers, qm=fault_qm.name,
                  queue=r".\private$\kills", label="kills")
    rng = random.Random(7)
    senders = [start("sender", kmq_home, actor=f"s{i}", history=str(history_path / f"s{i}.jsonl"),
                     count=MESSAGES, interval=0.004, delivery=delivery, wait=wait, **common)
               for i, (delivery, wait) in enumerate([("RECOVERABLE", False), ("EXPRESS", True)])]

    def receiver(n: int):
        return start("receiver", kmq_home, history=str(history_path / f"r{n}.jsonl"), idle=1.0,
                     **common)

    receivers = [receiver(0), receiver(1)]
    for worker in senders + receivers:
        worker.ready()
    history = History()
    started = time.monotonic()
    for kill in range(KILLS):
        time.sleep(rng.uniform(*KILL_EVERY))
        # Kill the older receiver (ready long ago); its replacement starts up meanwhile.
        victim = receivers.pop(0).ready()
        victim.kill()
        history.receiver_killed(victim.ident, in_flight=1)
        receivers.append(receiver(2 + kill))
    for worker in senders:
        worker.wait(timeout=60)
    for worker in receivers:
        worker.ready().wait(timeout=60)  # exits after 1 s without a message: the queue is drained
    elapsed = time.monotonic() - started

    history.load(history_path)
    topics = queue.destinations[0].topics
    history.claimed(read_claims(fault_qm.session, topics, "kills"))
    verdict = history.verdict()
    report(f"receiver kills: {KILLS} SIGKILLs in {elapsed:.1f} s; {verdict.summary()}; "
           f"excused: {sorted(verdict.excused.values())}")
    assert verdict.ok, verdict.summary()
    assert verdict.counts["received"] > MESSAGES, "the receivers did too little to prove anything"
    assert len(verdict.excused) <= KILLS
