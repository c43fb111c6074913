"""Senders killed with SIGKILL during recoverable sends: the outgoing queue recovers them.

Sender processes send RECOVERABLE messages one after another and record each ``send()`` that
returned; each is killed with SIGKILL at a random moment, two at a time, in a loop. A receiver
process takes messages meanwhile. Then a new queue manager is opened: its recovery resends
every record the dead senders left in the durable outgoing queue.

The checker proves: every send that returned arrived exactly once (a record the broker had
already stored and the dead sender never saw acknowledged is resent, and the queue views drop the
duplicate id), nothing arrived that was never attempted, and each sender's messages arrived in
the order it sent them.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from facade.config import KmqConfig
from facade.manager import QueueManager
from tests.faults.conftest import eventually, report
from tests.faults.history import History
from tests.faults.workers import drain, start

pytestmark = pytest.mark.integration

ROUNDS = 2
LIFETIME = (0.4, 1.0)   # seconds a sender sends before its SIGKILL, drawn at random


def test_killed_senders_lose_no_recoverable_message(
        fault_config: KmqConfig, fault_qm: QueueManager, kmq_home: Path,
        history_path: Path) -> None:
    _kill_senders(fault_config, fault_qm, kmq_home, history_path, batch=1)


def test_killed_batch_senders_lose_nothing_send_many_returned_for(
        fault_config: KmqConfig, fault_qm: QueueManager, kmq_home: Path,
        history_path: Path) -> None:
    """The same with ``send_many`` of 20 RECOVERABLE messages: a SIGKILL lands in a batch's
    commit or while its copies are produced; every batch that returned arrives exactly once."""
    _kill_senders(fault_config, fault_qm, kmq_home, history_path, batch=20)


def _kill_senders(fault_config: KmqConfig, fault_qm: QueueManager, kmq_home: Path,
                  history_path: Path, batch: int) -> None:
    fault_qm.create_queue(r".\private$\senders")
    common = dict(bootstrap=fault_config.bootstrap_servers, qm=fault_config.queue_manager,
                  queue=r".\private$\senders", label="senders", delivery="RECOVERABLE",
                  batch=batch)
    rng = random.Random(11)
    receiver = start("receiver", kmq_home, history=str(history_path / "r.jsonl"), idle=60.0,
                     stop_file=str(history_path / "stop"), **common)
    killed = 0
    started = time.monotonic()
    pending_before_recovery = 0
    for round_no in range(ROUNDS):
        pair = [start("sender", kmq_home, actor=f"s{round_no}{i}", interval=0.0,
                      history=str(history_path / f"s{round_no}{i}.jsonl"), **common)
                for i in range(2)]
        for sender in pair:
            sender.ready()
        time.sleep(rng.uniform(*LIFETIME))
        for sender in pair:
            sender.kill()
            killed += 1
    receiver.ready()
    with QueueManager.open(fault_config) as reopened:   # open() runs recovery
        pending_before_recovery = reopened.transmitter.outgoing.count()
        assert eventually(lambda: reopened.transmitter.outgoing.count() == 0, timeout=20), \
            "recovered records were not acknowledged"
    (history_path / "stop").touch()
    receiver.wait(timeout=30)

    history = History().load(history_path)
    drain(fault_qm.open_queue(r".\private$\senders"), "senders", history)
    verdict = history.verdict()
    attempted = sum(1 for s in history.sends.values() if s.outcome == "attempted")
    report(f"sender kills (batch {batch}): {killed} SIGKILLs in {time.monotonic() - started:.1f} s, "
           f"{pending_before_recovery} record(s) left in the outgoing queue and resent, "
           f"{attempted} send(s) cut short before returning; {verdict.summary()}")
    assert verdict.ok, verdict.summary()
    assert verdict.counts.get("sent_acknowledged", 0) > 20
