"""The directory (a real slapd) stopped in the middle of distribution-list sends, then restarted.

A thread sends to a DL of three public queues, one message after the other, while slapd is
halted and later restarted on the same port with the same data. The promise (docs/design.md,
"Distribution lists"): **all or nothing at resolution**. A send either raises
``DirectoryUnavailable`` before any copy is produced (recorded as *refused*: no queue may ever
get it) or gives every member exactly one copy, all with the same message id. After the restart,
sends work again without reopening anything.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from facade.config import DirectorySettings, KmqConfig
from facade.errors import DirectoryUnavailable
from facade.manager import QueueManager
from facade.model.message import Message
from tests.faults.conftest import report
from tests.faults.history import ACKNOWLEDGED, REFUSED, History
from tests.faults.workers import drain
from tests.support.kafka import BrokerEndpoint
from tests.support.slapd import SlapdServer, slapd_available

pytestmark = pytest.mark.integration

MEMBERS = 3


@pytest.fixture
def slapd():
    reason = slapd_available()
    if reason:
        pytest.skip(f"{reason} (the outage needs a real directory server to stop)")
    with SlapdServer() as server:
        yield server


def test_directory_stopped_mid_dl_send_is_all_or_nothing(broker: BrokerEndpoint, kmq_home: Path,
                                                         slapd: SlapdServer) -> None:
    settings = DirectorySettings(url=slapd.url, base_dn=slapd.base_dn, bind_dn=slapd.bind_dn,
                                 password=slapd.password, timeout=1.0)
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"fd-{uuid.uuid4().hex[:8]}", directory=settings)
    history = History()
    outcomes: dict[str, int] = defaultdict(int)
    with QueueManager.open(config) as qm:
        queues = {f"m{i}": qm.create_queue(rf".\dl-member-{i}") for i in range(MEMBERS)}
        dl = qm.directory.create_distribution_list("outage")
        for queue in queues.values():
            qm.directory.add_member("outage", f"PUBLIC={queue.properties.instance}")
        handle = qm.open_queue(dl.format_name)
        stop = threading.Event()

        def send_loop() -> None:
            seq = 0
            while not stop.is_set():
                key = f"dl:{seq}"
                try:
                    sent = handle.send(Message(body=key.encode()), wait=True, timeout=10)
                    outcome, message_id = ACKNOWLEDGED, str(sent.id)
                except DirectoryUnavailable:
                    outcome, message_id = REFUSED, None
                outcomes[outcome] += 1
                for label in queues:
                    history.send(key, label, sender="dl", seq=seq, outcome=outcome,
                                 message_id=message_id)
                seq += 1
                time.sleep(0.01 if outcome == ACKNOWLEDGED else 0.05)  # an application's backoff

        sender = threading.Thread(target=send_loop)
        sender.start()
        time.sleep(0.6)
        slapd.halt()                     # mid-run: the next resolutions fail
        time.sleep(0.7)
        refused_while_down = outcomes[REFUSED]
        slapd.restart()                  # same port, same data
        restarted = time.time()
        time.sleep(0.8)
        stop.set()
        sender.join(30)
        for label, queue in queues.items():
            drain(queue, label, history, receiver=label, idle=0.5)

    verdict = history.verdict()
    ids = defaultdict(set)
    for r in history.receives:
        ids[r.key].add(r.message_id)
    report(f"directory outage: {outcomes[ACKNOWLEDGED]} DL sends delivered to all "
           f"{MEMBERS} members, {outcomes[REFUSED]} refused while slapd was down; "
           f"{verdict.summary()}")
    assert verdict.ok, verdict.summary()   # refused sends reached no queue; none lost or doubled
    assert refused_while_down > 0, "no send met the outage"
    assert all(len(found) == 1 for found in ids.values()), "copies of one send with other ids"
    after = [s for s in history.sends.values() if s.t > restarted]
    assert any(s.outcome == ACKNOWLEDGED for s in after), \
        "sends did not work again after the directory came back"
    assert max(after, key=lambda s: s.seq).outcome == ACKNOWLEDGED
