"""A transactional mover across a broker crash: every message moved once, in order.

A process moves messages from one transactional queue to another, one Kafka transaction per
message (``receive(transaction=tx)`` then ``send(transaction=tx)``), while the broker is
SIGKILLed and restarted on a private broker that keeps its log. The mover dies or gives up on
the errors the outage brings, as an application without retry logic would, and is started
again until the source is empty; the new one fences the old one's transaction (same
``transactional.id``). The target must then hold the source's messages exactly once and in
order: a transaction cut by the crash is aborted by the broker, its receive given back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from facade.config import KmqConfig
from facade.errors import ReceiveTimeout
from facade.manager import QueueManager
from facade.model.message import Message
from tests.faults.conftest import eventually, report
from tests.support.kafka import PrivateBroker

pytestmark = [pytest.mark.integration, pytest.mark.outside_budget,
              # The broker's JVM takes 15-60 s to start again on a busy 2-core machine.
              pytest.mark.timeout(900)]

MESSAGES = 300

MOVER = """
import os, sys
from facade.errors import ReceiveTimeout
from facade.manager import QueueManager
source, target, bootstrap, qm_name, stop = sys.argv[1:6]
with QueueManager.open(bootstrap_servers=bootstrap, queue_manager=qm_name) as qm:
    qm.transactional_id = "kmq-outage-mover"  # a restarted mover fences the one it replaces
    a, b = qm.open_queue(source), qm.open_queue(target)
    while True:
        tx = qm.begin_transaction(lease=5)
        try:
            m = a.receive(timeout=2, transaction=tx)
        except ReceiveTimeout:
            tx.abort()
            # A timeout alone does not say the source is empty: right after the restart a
            # receive can wait out the broker's recovery. End only on an empty source.
            if os.path.exists(stop) and a.count() == 0:
                break
            continue
        b.send(type(m)(body=m.body), transaction=tx)
        tx.commit()
"""


def test_a_transactional_mover_across_a_broker_crash_moves_each_message_once_in_order(
        private_broker: PrivateBroker, kmq_home: Path, tmp_path: Path) -> None:
    config = KmqConfig.load(bootstrap_servers=private_broker.bootstrap_servers,
                            queue_manager=f"tx-outage-{uuid.uuid4().hex[:8]}")
    with QueueManager.open(config) as qm:
        a = qm.create_queue(r".\private$\outage-a", transactional=True)
        b = qm.create_queue(r".\private$\outage-b", transactional=True)
        a.send_many([Message(body=str(n).encode()) for n in range(MESSAGES)],
                    transaction="single")
        source, target = a.format_name, b.format_name
    stop = tmp_path / "stop"
    command = [sys.executable, "-c", MOVER, source, target, config.bootstrap_servers,
               config.queue_manager, str(stop)]
    env = {**os.environ, "KMQ_HOME": str(kmq_home)}
    began = time.time()
    mover = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    starts, failures = 1, []
    try:
        with QueueManager.open(config) as watcher:
            moved = watcher.open_queue(target)
            assert eventually(lambda: moved.count() >= MESSAGES // 5, timeout=120, interval=0.5), \
                f"the mover did not start: {moved.count()} moved"
        private_broker.stop(hard=True)
        crashed = time.time()
        time.sleep(5.0)
        private_broker.start()
        restarted = time.time()
        stop.touch()  # from now on a mover that finds the source empty ends
        while True:
            try:
                returncode = mover.wait(timeout=300)
            except subprocess.TimeoutExpired:
                pytest.fail("the mover neither finished nor failed within 300 s")
            if returncode == 0:
                break
            failures.append(mover.stderr.read().strip().splitlines()[-1:])
            assert starts < 30, f"the mover failed {starts} times: {failures}"
            time.sleep(1.0)
            mover = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
            starts += 1
    finally:
        mover.kill()
        mover.wait(30)
    with QueueManager.open(config) as qm:
        b = qm.open_queue(target)
        got = []
        try:
            while len(got) < MESSAGES:
                got.append(int(b.receive(timeout=60).body))
        except ReceiveTimeout:
            pytest.fail(f"the target holds {len(got)} of {MESSAGES} messages (last "
                        f"{got[-3:]}); the source {qm.open_queue(source).count()}; mover "
                        f"started {starts} times, failures {failures}")
        with pytest.raises(ReceiveTimeout):
            b.receive(timeout=1)
        with pytest.raises(ReceiveTimeout):
            qm.open_queue(source).receive(timeout=1)
    report(f"transactional mover across a broker crash: {MESSAGES} messages, moved "
           f"{len(got)} ({len(set(got))} distinct), mover started {starts} times "
           f"({len(failures)} failed: {failures[:3]}), broker down {restarted - crashed:.0f} s, "
           f"{time.time() - began:.0f} s in all")
    assert got == list(range(MESSAGES))
