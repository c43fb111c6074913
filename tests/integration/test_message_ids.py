"""Message ids stay unique across processes and hosts of one queue manager, on real broker
processes.

Blocks of ids are leased through the queue manager's ``kmq.<qm>.system.idblocks`` topic (see
:mod:`facade.state.sequence`). A counter per host, in a ``$KMQ_HOME/<qm>.sequence`` file,
would restart at 0 from an empty or corrupt file, so two sends would get the same id and
receivers would drop the second as a duplicate, silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from facade import BrokerUnavailable, Delivery, Message, ReceiveTimeout
from facade.config import KmqConfig
from facade.kafka.librdkafka import KafkaSession
from facade.manager import QueueManager
from facade.state.sequence import BLOCK_SIZE
from facade.model.topics import id_block_topic
from tests.support.kafka import BrokerEndpoint, PrivateBroker

pytestmark = pytest.mark.integration

_ROOT = Path(__file__).resolve().parents[2]


def _config(broker: BrokerEndpoint, name: str, home: Path) -> KmqConfig:
    return KmqConfig.load(bootstrap_servers=broker.bootstrap_servers, queue_manager=name,
                          home=home)


def _drain(queue) -> list[Message]:
    got = []
    while True:
        try:
            got.append(queue.receive(timeout=2))
        except ReceiveTimeout:
            return got


def test_two_hosts_with_one_queue_manager_name_never_repeat_an_id(
        broker: BrokerEndpoint, tmp_path: Path) -> None:
    name = f"qm-hosts-{uuid.uuid4().hex[:8]}"
    # Two "hosts": the same queue-manager name, each with a KMQ_HOME of its own.
    with QueueManager.open(_config(broker, name, tmp_path / "host-a")) as a, \
            QueueManager.open(_config(broker, name, tmp_path / "host-b")) as b:
        assert a.guid == b.guid
        to_a = a.create_queue(r".\private$\shared")
        to_b = b.open_queue(r".\private$\shared")
        sent = []
        for i in range(40):
            for host, queue in (("a", to_a), ("b", to_b)):
                delivery = Delivery.RECOVERABLE if i % 2 else Delivery.EXPRESS
                sent.append(queue.send(Message(body=f"{host}{i}".encode(), delivery=delivery)))
        to_a.send(Message(body=b"last"), wait=True)
        to_b.send(Message(body=b"last"), wait=True)
        assert len({m.id for m in sent}) == len(sent)
        got = _drain(a.open_queue(r".\private$\shared"))
        # Every message arrives: none is dropped as a duplicate of the other host's.
        assert sorted(m.body for m in got if m.body != b"last") == sorted(m.body for m in sent)
        assert len({m.id for m in got}) == len(got) == len(sent) + 2
        a.delete_queue(r".\private$\shared")


def test_a_leftover_sequence_file_never_makes_ids_repeat(broker: BrokerEndpoint,
                                                        kmq_home: Path) -> None:
    name = f"qm-seq-{uuid.uuid4().hex[:8]}"
    config = _config(broker, name, kmq_home)
    with QueueManager.open(config) as qm:
        qm.create_queue(r".\private$\ids")
    bodies, ids = [], []
    # What a crash mid-write (or a bad disk) leaves in a counter file: a counter read from
    # any of these would restart at 0. kmq never reads the file.
    for leftover in (b"", b"garbage", b"0", b"12\x00", b"\xff\xfe", None):
        if leftover is not None:
            (kmq_home / f"{name}.sequence").write_bytes(leftover)
        with QueueManager.open(config) as qm:
            queue = qm.open_queue(r".\private$\ids")
            for i in range(3):
                body = b"%r %d" % (leftover, i)
                ids.append(queue.send(Message(body=body), wait=i == 2).id)
                bodies.append(body)
    assert len(set(ids)) == len(ids)
    with QueueManager.open(config) as qm:
        got = _drain(qm.open_queue(r".\private$\ids"))
        assert sorted(m.body for m in got) == sorted(bodies)   # none dropped as a duplicate
        qm.delete_queue(r".\private$\ids")


_DRAW = """
import json, sys, threading, uuid
from facade.kafka.librdkafka import KafkaSession
from facade.state.sequence import MessageIdAllocator
bootstrap, name, guid, count = sys.argv[1], sys.argv[2], uuid.UUID(sys.argv[3]), int(sys.argv[4])
ids = MessageIdAllocator.on_kafka(KafkaSession(bootstrap), name, guid)
ids.prepare()
print("ready", flush=True)
sys.stdin.readline()   # start together
drawn = []
def draw():
    got = [ids.new().sequence for _ in range(count)]
    drawn.extend(got)
threads = [threading.Thread(target=draw) for _ in range(2)]
for t in threads: t.start()
for t in threads: t.join()
ids.close()
print(json.dumps(drawn), flush=True)
"""


def test_allocators_in_two_processes_never_hand_out_the_same_id(broker: BrokerEndpoint) -> None:
    name = f"qm-draw-{uuid.uuid4().hex[:8]}"
    guid = str(uuid.uuid4())
    count = 2 * BLOCK_SIZE + 100   # each thread crosses block boundaries
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    workers = [subprocess.Popen([sys.executable, "-c", _DRAW, broker.bootstrap_servers, name,
                                 guid, str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env, cwd=_ROOT) for _ in range(2)]
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        for worker in workers:
            worker.stdin.write("go\n")
            worker.stdin.flush()
        drawn = [json.loads(worker.communicate(timeout=120)[0].splitlines()[-1])
                 for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        session = KafkaSession(broker.bootstrap_servers)
        session.delete_topics([id_block_topic(name)])
        session.close()
    assert [len(d) for d in drawn] == [2 * count, 2 * count]
    everything = drawn[0] + drawn[1]
    assert len(set(everything)) == len(everything)


def test_a_block_needed_while_the_broker_is_down_fails_the_send_clearly(
        kmq_home: Path, tmp_path: Path) -> None:
    private = PrivateBroker(tmp_path)
    try:
        qm = QueueManager.open(KmqConfig.load(bootstrap_servers=private.bootstrap_servers,
                                              queue_manager=f"qm-down-{uuid.uuid4().hex[:8]}"))
    except BaseException:
        private.close()
        raise
    try:
        queue = qm.create_queue(r".\private$\down")
        queue.send(Message(body=b"before"), wait=True)
        private.stop()
        # The block leased at open() still serves a RECOVERABLE send: it waits in the
        # outgoing queue for the broker.
        kept = queue.send(Message(body=b"kept", delivery=Delivery.RECOVERABLE))
        assert [s.record.message_id for s in qm.transmitter.outgoing.pending()] == [str(kept.id)]
        # The block is used up and none was leased in advance: the send fails, clearly, and
        # nothing is stored or sent under an id that could repeat.
        qm.ids._next = qm.ids._end
        qm.ids._pending = None
        qm.ids.timeout = 1.0   # the broker is gone for good: no need to wait the full 10 s
        with pytest.raises(BrokerUnavailable) as caught:
            queue.send(Message(body=b"no id", delivery=Delivery.RECOVERABLE))
        assert "message-id block" in str(caught.value)
        assert id_block_topic(qm.name) in str(caught.value)
        assert [s.record.message_id for s in qm.transmitter.outgoing.pending()] == [str(kept.id)]
    finally:
        private.close()
        qm.transmitter._stop.set()   # as in test_ttrq: no broker to flush to on close
        qm.transmitter.outgoing.close()
