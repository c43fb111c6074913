"""LocalKafka's view of a running cluster read from its folder, without starting a JVM."""

from __future__ import annotations

import json
import os
from pathlib import Path

from facade.kafka.localkafka import LocalKafka

_NOBODY = 2**22 + 12345  # above Linux's largest pid: no such process


def _cluster(root: Path, pids: dict[int, int], states: dict[int, dict | str]) -> LocalKafka:
    nodes = [{"node_id": node, "port": 9000 + node, "controller_port": 9100 + node, "pid": pid}
             for node, pid in pids.items()]
    root.mkdir(parents=True)
    (root / "cluster.json").write_text(json.dumps({"cluster_id": "c", "version": "4.4.0",
                                                   "nodes": nodes}))
    for node, state in states.items():
        folder = root / f"node-{node}" / "data" / "__cluster_metadata-0"
        folder.mkdir(parents=True)
        text = state if isinstance(state, str) else json.dumps(state)
        (folder / "quorum-state").write_text(text)
    return LocalKafka(root)


def test_the_active_controller_is_the_leader_of_the_highest_epoch_among_running_nodes(
        tmp_path: Path) -> None:
    me = os.getpid()
    cluster = _cluster(tmp_path / "k", {1: me, 2: me, 3: _NOBODY}, {
        1: {"leaderId": 2, "leaderEpoch": 4, "votedId": 2},
        2: {"leaderId": 2, "leaderEpoch": 4, "votedId": -1},
        # A stopped node's file is stale: it still names the controller it saw die.
        3: {"leaderId": 3, "leaderEpoch": 9, "votedId": -1},
    })
    assert cluster.active_controller() == 2


def test_no_active_controller_while_no_running_node_knows_one(tmp_path: Path) -> None:
    me = os.getpid()
    cluster = _cluster(tmp_path / "k", {1: me, 2: me, 3: me}, {
        1: {"leaderId": -1, "leaderEpoch": 5, "votedId": 1},
        2: "{\"leaderId\": 2, \"leaderEp",  # caught mid-write
    })
    assert cluster.active_controller() is None
