"""Faults on a three-node Apache Kafka cluster, under load, judged by the history checker.

The cluster is kmq's own (:class:`~facade.kafka.localkafka.LocalKafka`): three JVMs, each a broker
and a KRaft controller voter, and kmq's topics with replication factor 3 and
``min.insync.replicas`` 2. In every scenario two sender processes send RECOVERABLE messages
(``send()`` returns once the copy is in the durable outgoing queue) while two receiver
processes take them from the same queue; then the fault; then the senders stop, a queue
manager recovers what they left in the outgoing queue, and the test drains the queue.

A time-to-reach-queue of :data:`TTRQ` outlasts every outage here, so no copy may be
dead-lettered: every acknowledged send must be received, exactly once, in each sender's order.

The scenarios run in order on one cluster; each waits, with bounded polls, until every
partition has its three replicas in sync again before the next begins.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from facade.config import KmqConfig
from facade.errors import BrokerUnavailable
from facade.kafka.librdkafka import client_logging
from facade.manager import QueueManager
from facade.model.message import Delivery, Message
from tests.faults.conftest import eventually, report
from tests.faults.history import ACKNOWLEDGED, FAILED, History, Verdict, history_dir
from tests.faults.workers import drain, observe_dead_letters, read_claims, start
from tests.support.kafka import PrivateBroker

pytestmark = [pytest.mark.integration, pytest.mark.outside_budget,
              # Starting three JVMs, and restarting them, takes 20-60 s each on a busy 2-core
              # machine: far more than the suite's per-test default.
              pytest.mark.timeout(420)]

#: Seconds every copy may take to reach its queue: longer than any outage in this module.
TTRQ = 600.0
#: Seconds between two sends of one sender process (a light load: the machine has 2 cores
#: and runs three brokers besides).
SEND_INTERVAL = 0.05
#: Seconds any one wait for the cluster or the load may take before the test fails.
PATIENCE = 180.0
#: Seconds the brokers stay down in the min.insync.replicas scenario at least.
OUTAGE = 40.0
#: Receives the load must make between two steps of a scenario (proof that it flows).
PROGRESS = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    broker = PrivateBroker(tmp_path_factory.mktemp("three-brokers"), brokers=3)
    try:
        yield broker
    finally:
        # librdkafka clients keep reconnecting to a stopped cluster for as long as they live.
        _ADMINS.clear()
        broker.close()


# -- the cluster ---------------------------------------------------------------------------------


#: One admin client per cluster, dropped with the cluster (see the fixture).
_ADMINS: dict[str, AdminClient] = {}


def _admin(bootstrap_servers: str) -> AdminClient:
    if bootstrap_servers not in _ADMINS:
        _ADMINS[bootstrap_servers] = AdminClient({**client_logging(),
                                                  "bootstrap.servers": bootstrap_servers})
    return _ADMINS[bootstrap_servers]


def _partition(cluster: PrivateBroker, topic: str):  # noqa: ANN202 - confluent's PartitionMetadata
    return _admin(cluster.bootstrap_servers).list_topics(topic, timeout=10).topics[topic] \
        .partitions[0]


def _in_sync(cluster: PrivateBroker, topic: str) -> list[int]:
    """The in-sync replicas of ``topic``'s partition; none while the metadata does not come."""
    try:
        return sorted(_partition(cluster, topic).isrs)
    except KafkaException:
        return []


def _healthy(cluster: PrivateBroker) -> bool:
    """Every partition of every topic has a leader and all its replicas in sync."""
    try:
        topics = _admin(cluster.bootstrap_servers).list_topics(timeout=10).topics.values()
    except KafkaException:  # no answer yet: not healthy
        return False
    return all(p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
               for t in topics for p in t.partitions.values())


def _wait_healthy(cluster: PrivateBroker) -> None:
    assert eventually(lambda: _healthy(cluster), timeout=PATIENCE, interval=1.0), \
        "the cluster did not get every replica back in sync"


# -- the load ------------------------------------------------------------------------------------


class Load:
    """Two RECOVERABLE sender processes and two receiver processes on one queue.

    Args:
        cluster (PrivateBroker): the brokers.
        home (Path): KMQ_HOME of every process (one outgoing queue per queue manager there).
        queue (str): the queue's path name; created here.
    """

    def __init__(self, cluster: PrivateBroker, home: Path, queue: str):
        self.began = time.time()
        self.label = queue.rpartition("\\")[2]
        self.config = KmqConfig.load(bootstrap_servers=cluster.bootstrap_servers,
                                     queue_manager=f"tb-{uuid.uuid4().hex[:8]}")
        self.manager = QueueManager.open(self.config)
        self.queue = self.manager.create_queue(queue)
        self.topic = self.queue.destinations[0].topics.data
        self.files = history_dir(home)
        self.stop_senders = self.files / "stop-senders"
        self.stop_receivers = self.files / "stop-receivers"
        common = dict(bootstrap=self.config.bootstrap_servers, qm=self.config.queue_manager,
                      queue=queue, label=self.label)
        self.senders = [start("sender", home, actor=f"s{n}", delivery="RECOVERABLE", ttrq=TTRQ,
                              interval=SEND_INTERVAL, stop_file=str(self.stop_senders),
                              history=str(self.files / f"s{n}.jsonl"), **common)
                        for n in (1, 2)]
        # idle: no receiver may give up during an outage; they stop on their stop file.
        self.receivers = [start("receiver", home, idle=3 * PATIENCE,
                                stop_file=str(self.stop_receivers),
                                history=str(self.files / f"r{n}.jsonl"), **common)
                          for n in (1, 2)]
        try:
            for worker in self.senders + self.receivers:
                worker.ready()
        except BaseException:
            self.close()
            raise

    def history(self) -> History:
        return History().load(self.files)

    def acknowledged(self) -> int:
        return sum(1 for s in self.history().sends.values() if s.outcome == ACKNOWLEDGED)

    def received(self) -> int:
        return len(self.history().receives)

    def wait_for(self, what: str, count: Callable[[], int], target: int) -> None:
        assert eventually(lambda: count() >= target, timeout=PATIENCE, interval=0.5), \
            f"{self.label}: {what} did not reach {target} (at {count()})" \
            f"{self._worker_errors()}"

    def _worker_errors(self) -> str:
        dead = [w for w in self.senders + self.receivers if w.process.poll() is not None]
        return "".join(f"; {w.role} {w.ident} exited: {w.stderr()}" for w in dead)

    def finish(self, history: History) -> Verdict:
        """Stop the senders, recover what they left, stop the receivers, drain the queue and
        judge; ``history`` gets every process's events (and the test's own)."""
        self.stop_senders.touch()
        for worker in self.senders:
            worker.wait(timeout=PATIENCE)
        transmitter = self.manager.transmitter

        def emptied() -> bool:
            transmitter.recover()  # the senders' records, now that they have exited
            return transmitter.outgoing.count() == 0

        assert eventually(emptied, timeout=PATIENCE, interval=1.0), \
            f"{self.label}: {transmitter.outgoing.count()} records stayed in the outgoing queue"
        self.stop_receivers.touch()
        for worker in self.receivers:
            worker.wait(timeout=PATIENCE)
        history.load(self.files)
        drain(self.queue, self.label, history, receiver="drain", idle=2.0)
        destination = self.queue.destinations[0]
        observe_dead_letters(self.manager, history, {destination.format_name: self.label})
        # Who removed each message, per the receipts log: names the receiver of a lost one.
        history.claimed(read_claims(self.manager.session, destination.topics, self.label))
        return history.verdict()

    def errors(self) -> list[tuple[float, str, str]]:
        """The errors the workers noted (a failed send's): the second of the scenario each
        came at, its class and its text."""
        found = []
        for path in sorted(self.files.glob("*.jsonl")):
            for line in path.read_text("utf-8").splitlines():
                if '"error"' in line:
                    with contextlib.suppress(ValueError):
                        event = json.loads(line)
                        found.append((event["t"] - self.began, str(event.get("error_class")),
                                      str(event.get("error"))))
        return sorted(found)

    def close(self) -> None:
        self.stop_senders.touch()
        self.stop_receivers.touch()
        for worker in self.senders + self.receivers:
            if worker.process.poll() is None:
                worker.kill()
        self.manager.close()


def _figures(name: str, load: Load, history: History, verdict: Verdict, seconds: float,
             extra: str) -> str:
    sends = history.sends.values()
    acknowledged = sum(1 for s in sends if s.outcome == ACKNOWLEDGED)
    failed = sum(1 for s in sends if s.outcome == FAILED)
    keys = {(r.key, r.queue) for r in history.receives}
    claims = history.claims or {}
    return (f"three brokers, {name}: sent {len(history.sends)}, acknowledged {acknowledged}, "
            f"failed {failed}, received {len(keys)}, lost {len(verdict.lost)}, duplicated "
            f"{len(verdict.duplicates)}, dead-lettered {len(history.dead_letters)}; {extra}; "
            f"{seconds:.0f} s; {verdict.summary()}"
            + "".join(f"; a send at {t:.0f} s raised {kind}: {text}"
                      for t, kind, text in load.errors())
            + "".join(f"; {key} lost, removed by {claims.get(tuple(key.split('@')))}"
                      for key in verdict.lost[:5]))


def _judge(load: Load, verdict: Verdict, history: History) -> None:
    assert verdict.ok, verdict.summary()
    # A send may fail while brokers are away, but only with the error that says so.
    assert all(kind == "BrokerUnavailable" for _, kind, _ in load.errors()), load.errors()
    assert not history.dead_letters, \
        f"dead-lettered although TTRQ outlasts the outage: {sorted(history.dead_letters)[:5]}"


def _bring_back(cluster: PrivateBroker, load: Load, nodes: list[int], since: float) -> float:
    """Start ``nodes`` again and wait until every replica is in sync and receives go on;
    returns the seconds they were down (from ``since``, a ``time.monotonic()``)."""
    for node in nodes:
        cluster.cluster.start_node(node)
    down = time.monotonic() - since
    _wait_healthy(cluster)
    load.wait_for("receives after the restart", load.received, load.received() + PROGRESS)
    return down


# -- the scenarios ---------------------------------------------------------------------------------


def _crash_and_restart(cluster: PrivateBroker, home: Path, queue: str, name: str,
                       victim_of: Callable[[Load], int]) -> None:
    """SIGKILL one node under load, let the load go on without it, start it again."""
    _wait_healthy(cluster)
    began = time.monotonic()
    load = Load(cluster, home, queue)
    history = History()
    try:
        load.wait_for("receives", load.received, PROGRESS)
        leader = _partition(cluster, load.topic).leader
        victim = victim_of(load)
        cluster.cluster.stop_node(victim, hard=True)
        crashed = time.monotonic()
        crash_at = time.time() - load.began
        at_crash = load.received()
        # The two survivors elect a new leader and serve the queue without the victim.
        load.wait_for("receives after the crash", load.received, at_crash + PROGRESS)
        new_leader = _partition(cluster, load.topic).leader
        down = _bring_back(cluster, load, [victim], crashed)
        verdict = load.finish(history)
    finally:
        load.close()
    report(_figures(name, load, history, verdict, time.monotonic() - began,
                    f"node {victim} down {down:.0f} s from {crash_at:.0f} s on (the queue's "
                    f"leader was {leader}, then {new_leader})"))
    _judge(load, verdict, history)


def test_partition_leader_crash(cluster: PrivateBroker, kmq_home: Path) -> None:
    """SIGKILL the broker leading the queue's partition while two RECOVERABLE senders and two
    receivers run, then start it again.

    Proves: the two survivors take over (receives go on while it is down), and every
    acknowledged send is received exactly once, in order per sender; none is dead-lettered.
    """
    _crash_and_restart(cluster, kmq_home, r".\private$\tb-leader", "partition leader SIGKILLed",
                       lambda load: _partition(cluster, load.topic).leader)


def test_active_controller_crash(cluster: PrivateBroker, kmq_home: Path) -> None:
    """SIGKILL the active KRaft controller under the same load, then start it again.

    Proves: the remaining two voters elect a controller and the load goes on; every
    acknowledged send is received exactly once, in order per sender; none is dead-lettered.
    """
    def controller(_load: Load) -> int:
        assert eventually(lambda: cluster.cluster.active_controller() is not None,
                          timeout=PATIENCE, interval=0.5), "no node knows the active controller"
        return cluster.cluster.active_controller()

    _crash_and_restart(cluster, kmq_home, r".\private$\tb-controller",
                       "active controller SIGKILLed", controller)


def test_min_insync_replicas_unmet(cluster: PrivateBroker, kmq_home: Path) -> None:
    """Stop two of the three brokers (a controlled shutdown each), so the queue's partition is
    left with one in-sync replica, below ``min.insync.replicas`` 2; then start them again.

    Proves: while they are down, a ``send(wait=True)`` fails with BrokerUnavailable naming the
    cause (NOT_ENOUGH_REPLICAS, the in-sync replicas against min.insync.replicas) and the fix;
    RECOVERABLE sends return and their copies wait in the outgoing queue; when the brokers
    are back every acknowledged send is received exactly once, none dead-lettered.
    """
    _wait_healthy(cluster)
    began = time.monotonic()
    load = Load(cluster, kmq_home, r".\private$\tb-minisr")
    history = History()
    try:
        load.wait_for("receives", load.received, PROGRESS)
        leader = _partition(cluster, load.topic).leader
        stopped = [n.node_id for n in cluster.cluster.nodes if n.node_id != leader]
        for node in stopped:
            cluster.cluster.stop_node(node, hard=False)
        outage = time.monotonic()
        outage_at = time.time() - load.began
        assert eventually(lambda: _in_sync(cluster, load.topic) == [leader],
                          timeout=PATIENCE, interval=0.5), _in_sync(cluster, load.topic)
        acknowledged = load.acknowledged()
        load.wait_for("sends acknowledged during the outage", load.acknowledged,
                      acknowledged + PROGRESS)
        waiting = load.manager.transmitter.outgoing.count()
        probe = f"probe:{uuid.uuid4().hex[:6]}"
        with pytest.raises(BrokerUnavailable) as refused:
            load.queue.send(Message(body=probe.encode(), delivery=Delivery.RECOVERABLE,
                                    time_to_reach_queue=TTRQ), wait=True, timeout=5)
        # It raised, but its copy is stored and may arrive when the brokers are back.
        history.send(probe, load.label, sender="probe", outcome=FAILED)
        # Outlast the producers' request timeout (30 s): requests in flight at the leader time
        # out and are sent again, while their first copies sit in its log.
        time.sleep(max(0.0, outage + OUTAGE - time.monotonic()))
        down = _bring_back(cluster, load, stopped, outage)
        verdict = load.finish(history)
    finally:
        load.close()
    error = str(refused.value)
    report(_figures("2 of 3 stopped (min.insync.replicas unmet)", load, history, verdict,
                    time.monotonic() - began,
                    f"nodes {stopped} down {down:.0f} s from {outage_at:.0f} s on, leader "
                    f"{leader} kept; {waiting} copies in the outgoing queue during it; a "
                    f"waiting send raised: {error[:400]}"))
    assert "NOT_ENOUGH_REPLICAS" in error and "min.insync.replicas" in error, error
    _judge(load, verdict, history)

