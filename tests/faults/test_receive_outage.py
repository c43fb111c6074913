"""Waiting receivers ride out a broker restart shorter than their timeout.

Two receivers wait in ``receive(timeout=...)`` on one queue of a private Apache Kafka node; the
node is stopped for 5 s and started again with its log. The receivers neither fail nor report
the queue missing: they resume, and the messages sent after the restart (and the ones sent
before the stop) are each received exactly once. A receive whose timeout ends while the broker
is still away never raises ``QueueNotFound``: a timeout, or ``BrokerUnavailable`` naming the
servers when a request failed during the wait.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from facade import Message
from facade.config import KmqConfig
from facade.errors import BrokerUnavailable, ReceiveTimeout
from facade.manager import QueueManager
from tests.faults.conftest import report
from tests.support.kafka import PrivateBroker

pytestmark = [pytest.mark.integration, pytest.mark.outside_budget, pytest.mark.timeout(240)]

QUEUE = r".\private$\outage"


def _receive_all(queue, got: list[bytes], errors: list[BaseException], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            got.append(queue.receive(timeout=60).body)
        except ReceiveTimeout:
            continue
        except BaseException as exc:  # noqa: BLE001 - recorded: the test fails on any error
            errors.append(exc)
            return


def test_two_waiting_receivers_ride_out_a_5_s_broker_stop(tmp_path: Path, kmq_home: Path) -> None:
    with PrivateBroker(tmp_path / "broker") as broker:
        config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                                queue_manager=f"outage-{uuid.uuid4().hex[:8]}")
        with QueueManager.open(config) as qm:
            sender = qm.create_queue(QUEUE)
            sender.send_many([Message(body=b"before %d" % i) for i in range(10)])
            receivers = [qm.open_queue(QUEUE), qm.open_queue(QUEUE)]
            got: list[list[bytes]] = [[], []]
            errors: list[BaseException] = []
            stop = threading.Event()
            threads = [threading.Thread(target=_receive_all, args=(q, g, errors, stop))
                       for q, g in zip(receivers, got, strict=True)]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 60
            while sum(map(len, got)) < 10 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sum(map(len, got)) == 10, got

            broker.stop(hard=False)
            time.sleep(5)  # both receivers wait on a broker that is gone
            broker.start()
            assert not errors, errors
            sender.send_many([Message(body=b"after %d" % i) for i in range(20)])
            deadline = time.monotonic() + 120
            while sum(map(len, got)) < 30 and time.monotonic() < deadline and not errors:
                time.sleep(0.05)
            stop.set()
            for thread in threads:
                thread.join(90)
            everything = got[0] + got[1]
            report(f"receive outage: 5 s broker stop; receivers got {len(got[0])} + {len(got[1])} "
                   f"of 30, {len(everything) - len(set(everything))} twice, errors {errors}")
            assert not errors, errors
            assert sorted(everything) == sorted([b"before %d" % i for i in range(10)]
                                                + [b"after %d" % i for i in range(20)])
            for queue in receivers:
                queue.close()


def test_a_receive_that_times_out_during_an_outage_says_so(tmp_path: Path, kmq_home: Path) -> None:
    with PrivateBroker(tmp_path / "broker") as broker:
        config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                                queue_manager=f"outage-{uuid.uuid4().hex[:8]}")
        qm = QueueManager.open(config)
        queue = qm.create_queue(QUEUE)
        queue.send(Message(body=b"x"), wait=True)
        assert queue.receive(timeout=30).body == b"x"
        broker.stop(hard=True)
        # Never "not found": the wait ends as a timeout when no request failed during it (the
        # consumer only fetched nothing), or as the outage naming the servers when one did.
        with pytest.raises((BrokerUnavailable, ReceiveTimeout)) as caught:
            queue.receive(timeout=8)
        if isinstance(caught.value, BrokerUnavailable):
            assert "127.0.0.1" in str(caught.value)
        broker.start()
        queue.close()
        qm.close()
