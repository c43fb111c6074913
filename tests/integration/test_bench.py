"""``kmq bench`` end to end on the session broker, with tiny counts: every scenario runs both
sides, reports positive rates and a ratio, and cleans up its topics. Speed itself is measured by
the benchmark, not asserted here (docs/performance.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from facade.bench import DEFAULT_SCENARIOS, TARGETS, format_table, run_benchmarks
from facade.config import KmqConfig
from tests.support.kafka import BrokerEndpoint


def test_every_default_scenario_reports_both_sides_and_cleans_up(broker: BrokerEndpoint,
                                                                 kmq_home: Path) -> None:
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    before = set(admin.list_topics(timeout=10).topics)
    lines: list[str] = []
    report = run_benchmarks(config, messages=30, rounds=1, payload=64,
                            scenarios=DEFAULT_SCENARIOS, progress=lines.append)

    assert [r.name for r in report.results] == list(DEFAULT_SCENARIOS)
    for result in report.results:
        assert result.skipped is None, result.name
        assert len(result.kmq) == len(result.raw) == 1
        assert result.kmq_median > 0 and result.raw_median > 0
        assert result.ratio == result.kmq_median / result.raw_median
        assert result.target == TARGETS.get(result.name)
    assert len(lines) == len(DEFAULT_SCENARIOS)
    document = json.loads(json.dumps(report.as_dict()))
    assert set(document["scenarios"]) == set(DEFAULT_SCENARIOS)
    assert "the same Avro envelope + headers" in format_table(report)
    # Throwaway queues and raw topics are deleted again.
    leftovers = {t for t in set(admin.list_topics(timeout=10).topics) - before
                 if "bench" in t}
    assert not leftovers


def test_receive_share_prints_one_two_and_four_processes(broker: BrokerEndpoint,
                                                          kmq_home: Path) -> None:
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    before = set(admin.list_topics(timeout=10).topics)
    report = run_benchmarks(config, messages=30, rounds=1, payload=64,
                            scenarios=["receive-share"])
    (result,) = report.results
    assert result.skipped is None and result.target == TARGETS["receive-share"]
    assert set(result.figures) == {"load_avg_1min", "load_avg_1min_after", "share_1_msg_per_s",
                                   "share_2_msg_per_s", "share_4_msg_per_s",
                                   "raw_share_1_msg_per_s", "raw_share_2_msg_per_s",
                                   "raw_share_4_msg_per_s"}
    assert result.kmq[0] == pytest.approx(result.figures["share_4_msg_per_s"][0], abs=0.01)
    assert all(values[0] > 0 for key, values in result.figures.items() if "share" in key)
    document = report.as_dict()["scenarios"]["receive-share"]
    assert document["share_1_msg_per_s"] == result.figures["share_1_msg_per_s"][0]
    assert "share_2_msg_per_s" in format_table(report)
    assert "raw_share_4_msg_per_s" in format_table(report)
    leftovers = {t for t in set(admin.list_topics(timeout=10).topics) - before
                 if "bench" in t}
    assert not leftovers
