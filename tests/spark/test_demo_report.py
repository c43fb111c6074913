"""The demo's report made by its Spark Structured Streaming job agrees with the demo's own count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app
from tests.support.kafka import BrokerEndpoint


def test_spark_report_counts_what_the_receivers_got(spark, broker: BrokerEndpoint,
                                                    kmq_home: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    monkeypatch.delenv("KMQ_DEMO_REPORT", raising=False)
    report_dir = tmp_path / "report"
    result = CliRunner().invoke(app, ["demo", "--limit", "80", "--report-dir", str(report_dir),
                                      "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["report"]["engine"] == "spark"
    report = json.loads((report_dir / "report.json").read_text())
    journaled = sum(row["count"] for row in report["queue_classes"]
                    if row["queue"] not in ("admin", "deadletter", "changes-held"))
    assert journaled == summary["received"]  # every received copy is in a journal, read once
    dead = {row["class"]: row["count"] for row in report["queue_classes"]
            if row["queue"] == "deadletter"}
    assert dead == summary["dead_lettered"]
    assert report["acknowledgments"] == {**summary["acks"], **summary["nacks"]}
    latency = report["latency_ms"]  # backlog and paced run apart: together every receive
    assert latency["paced_sent_to_received"]["count"] == summary["paced"]["messages"] > 0
    assert latency["sent_to_received"]["count"] + latency["paced_sent_to_received"]["count"] == \
        summary["received"]
    assert report["run"]["verdict"]["ok"]
    assert (report_dir / "report.png").stat().st_size > 0
