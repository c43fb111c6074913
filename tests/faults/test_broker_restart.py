"""The broker stopped (SIGKILL) and restarted under load, on a private broker.

Two sender processes send RECOVERABLE messages while a receiver takes them; the broker is
killed, one sender is killed too while the broker is down, and the broker comes back on the
same port with its log. Then a queue manager opens, recovery runs, and everything left is
drained.

What the guarantees mean here:

* **Not yet acknowledged by the broker** when it died: kept in the durable outgoing queue, so
  nothing is lost by kmq. The killed sender's records are resent by recovery in the next queue
  manager that opens; the surviving sender's producer retries them itself, or, when they cannot
  be delivered within their time-to-reach-queue, they are dead-lettered with
  NACK_REACH_QUEUE_TIMEOUT (or stay in the outgoing queue for recovery).
* **Acknowledged by the broker before it died**: Apache Kafka keeps its log across the crash
  (the log dirs stay, the same ports come back), so every one of them must be received after
  the restart: the checker excuses nothing.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from facade.config import KmqConfig
from facade.model.envelope import decode_message
from facade.errors import MessageQueueError, ReceiveTimeout
from facade.manager import QueueManager
from facade.state.outgoingqueue import OutgoingQueue
from tests.faults.conftest import eventually, report
from tests.faults.history import ACKNOWLEDGED, History
from tests.faults.workers import drain, observe_dead_letters, start
from tests.support.kafka import PrivateBroker

pytestmark = [pytest.mark.integration, pytest.mark.outside_budget,
              # Apache Kafka's JVM takes 15-60 s to start, and again to restart, on a busy
              # 2-core machine: far more than the suite's per-test default and its budget.
              pytest.mark.timeout(300)]

QUEUE = r".\private$\restart"
#: The survivor's time-to-reach-queue, in seconds: shorter than the restart, so the copies it
#: has in flight while the broker is down take the TTRQ path (dead letter with
#: NACK_REACH_QUEUE_TIMEOUT) under a real outage.
TTRQ = 3.0


def _receive_until(queue, history: History, stop: threading.Event, name: str) -> None:
    while not stop.is_set():
        try:
            message = queue.receive(timeout=0.2)
        except ReceiveTimeout:
            continue
        except MessageQueueError:
            time.sleep(0.1)
            continue
        history.receive(message.body.decode(), "restart", receiver=name,
                        message_id=str(message.id))


def test_broker_restart_under_load(private_broker: PrivateBroker, kmq_home: Path,
                                   history_path: Path, request: pytest.FixtureRequest) -> None:
    config = KmqConfig.load(bootstrap_servers=private_broker.bootstrap_servers,
                            queue_manager=f"fr-{uuid.uuid4().hex[:8]}")
    history = History()
    began = time.time()
    before = QueueManager.open(config)
    queue = before.create_queue(QUEUE)
    common = dict(bootstrap=config.bootstrap_servers, qm=config.queue_manager, queue=QUEUE,
                  label="restart", delivery="RECOVERABLE", interval=0.01,
                  stop_file=str(history_path / "stop"))
    survivor = start("sender", kmq_home, actor="survivor", ttrq=TTRQ,
                     history=str(history_path / "survivor.jsonl"), **common)
    victim = start("sender", kmq_home, actor="victim", ttrq=60.0,
                   history=str(history_path / "victim.jsonl"), **common)
    for worker in (survivor, victim):
        request.addfinalizer(worker.kill)   # a failed test leaves no sender sending for good
    survivor.ready()
    victim.ready()
    stop_receiving = threading.Event()
    receiving = threading.Thread(target=_receive_until,
                                 args=(queue, history, stop_receiving, "before"))
    receiving.start()
    assert eventually(lambda: len(history.receives) >= 50, timeout=60), \
        f"the load did not start: {len(history.receives)} received"
    stop_receiving.set()   # a receive in flight must not hang on the dead broker
    receiving.join(10)

    private_broker.stop(hard=True)
    crash = time.time()
    time.sleep(0.3)
    victim.kill()          # its unacknowledged records are now only in the outgoing queue
    time.sleep(0.3)        # delivery callbacks of acks that arrived before the crash have run
    outgoing = OutgoingQueue(config.home / "outgoing" / f"{config.queue_manager}.sqlite")
    pending = {decode_message(s.record.value).body.decode() for s in outgoing.pending()}
    outgoing.close()
    snapshot = time.time()
    before.close()

    private_broker.start()
    restarted = time.time()
    after = QueueManager.open(config)   # the broker kept its log: registry and queues are there
    try:
        queue = after.open_queue(QUEUE)   # it survived the crash with the broker's log
        recovered = after.transmitter.recover()   # the victim's records
        stop_receiving.clear()
        receiving = threading.Thread(target=_receive_until,
                                     args=(queue, history, stop_receiving, "after"))
        receiving.start()
        time.sleep(1.0)
        (history_path / "stop").touch()
        survivor.wait(timeout=TTRQ + 60)   # its close() flushes what it still has in flight

        def emptied() -> bool:
            after.transmitter.recover()   # whatever the survivor left behind
            return after.transmitter.outgoing.count() == 0

        assert eventually(emptied, timeout=60, interval=1.0), \
            "the outgoing queue was not emptied after the restart"
        stop_receiving.set()
        receiving.join(10)
        history.load(history_path)
        drain(queue, "restart", history, receiver="after")
        observe_dead_letters(after, history, {queue.destinations[0].format_name: "restart"})
    finally:
        after.close()

    received_before = {r.key for r in history.receives if r.receiver == "before"}
    acknowledged_at_crash = {
        s.key for s in history.sends.values()
        if s.outcome == ACKNOWLEDGED and s.t < snapshot and s.key not in pending
        and s.key not in received_before}
    verdict = history.verdict()
    sent_after = sum(1 for s in history.sends.values() if s.t > crash)
    acknowledged = sum(1 for s in history.sends.values() if s.outcome == ACKNOWLEDGED)
    report(f"broker restart ({private_broker.kind}): sent {len(history.sends)}, acknowledged "
           f"{acknowledged}, received {len({r.key for r in history.receives})}, lost "
           f"{len(verdict.lost)}, duplicated {len(verdict.duplicates)}, down "
           f"{restarted - crash:.0f} s, {time.time() - began:.0f} s in all; "
           f"{len(received_before)} received before "
           f"the crash; {len(acknowledged_at_crash)} acknowledged and not yet received at the "
           f"crash, received after it; {len(pending)} unacknowledged at the crash kept in the "
           f"outgoing queue, {recovered} resent by recovery; {sent_after} sent while down or "
           f"after; {verdict.counts['dead_lettered']} dead-lettered (TTRQ); {verdict.summary()}")
    assert verdict.ok, verdict.summary()
    assert pending, "nothing was in flight at the crash: the test proved nothing"
