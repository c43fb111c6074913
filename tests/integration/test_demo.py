"""``kmq demo`` end to end on a small synthetic corpus, against the session broker.

KMQ_BOOTSTRAP_SERVERS points the demo at the session's broker, so it starts no broker of its
own; every run has its own queue-manager name. The corpus is three tiny changelog.Debian.gz
files written here, with urgencies and Closes: so that every route of the workload is taken.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app
from facade.config import KmqConfig
from facade.demo import runner
from facade.demo.ledger import Ledger, SentMessage
from facade.manager import QueueManager
from facade.demo.workload import TRANSACTION_SIZE
from tests.support.kafka import BrokerEndpoint, raw_values

pytestmark = pytest.mark.integration

#: Entries per synthetic package; three packages make 60 entries, so entry 25 is held (TTBR)
#: and entry 0 goes to the distribution list (see facade.demo.workload).
DEPTH = 20
PACKAGES = {"alpha": ("unstable",), "beta": ("experimental",),
            "gamma": ("unstable", "bookworm-security", "sid-proposed")}


def _entry(package: str, depth: int, distribution: str) -> str:
    """One changelog entry: urgent at depths 2, 7, 12, 17; closing bugs at depths 1, 4, 7..."""
    urgency = "high" if depth % 5 == 2 else ("low" if depth % 2 else "medium")
    closes = f" Closes: #{100000 + depth}" if depth % 3 == 1 else ""
    return (f"{package} (1.{DEPTH - depth}-1) {distribution}; urgency={urgency}\n\n"
            f"  * Change number {DEPTH - depth} of {package}.{closes}\n\n"
            f" -- Maint {package.title()} <{package}@example.org>  "
            f"Mon, {1 + depth % 28:02d} Jan 2024 12:00:00 +0000\n\n")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Three changelog.Debian.gz files, 60 entries."""
    root = tmp_path / "doc"
    for package, distributions in PACKAGES.items():
        text = "".join(_entry(package, d, distributions[d % len(distributions)])
                       for d in range(DEPTH))
        (root / package).mkdir(parents=True)
        (root / package / "changelog.Debian.gz").write_bytes(gzip.compress(text.encode()))
    return root


@pytest.fixture
def demo_env(broker: BrokerEndpoint, kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The session broker as the demo's configured servers; returns KMQ_HOME.

    The report is computed in Python here (a Spark session adds a minute per run); the Spark
    report job runs in CI's `kmq demo --limit 2000` and in tests/spark/test_demo_report.py.
    """
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    monkeypatch.setenv("KMQ_DEMO_REPORT", "python")
    return kmq_home


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_demo_accounts_for_every_copy(demo_env: Path, corpus: Path, tmp_path: Path,
                                      broker: BrokerEndpoint) -> None:
    report_dir = tmp_path / "report"
    data = _json(CliRunner().invoke(app, ["demo", "--corpus", str(corpus), "--report-dir",
                                          str(report_dir), "--json"]))

    assert data["ok"] and data["accounting"]["unaccounted"] == 0
    assert data["accounting"]["problems"] == {}
    assert data["environment"]["mode"] == "configured servers"
    assert data["corpus"]["entries_used"] == data["sent"]["entries"] == 60
    routes = data["sent"]["by_route"]
    assert routes["held"] == 1 and routes["distribution-list"] == 1
    assert routes["security"] == 12 and routes["response"] == 12  # depths 2, 7, 12, 17 x 3
    assert routes["multiple-element"] > 0 and routes["direct"] > 0
    assert data["requests"] == {"sent": 12, "answered": 12}
    # Every request was signed and encrypted, and the security desk verified each.
    guarantees = data["guarantees"]
    assert guarantees["security requests verified"] == "12 of 12 (signed and encrypted)"
    # A slice went through the transactional queue, TRANSACTION_SIZE per transaction.
    sent_in_transactions = routes["transactional"]
    assert sent_in_transactions > 0
    transactions = -(-sent_in_transactions // TRANSACTION_SIZE)
    assert guarantees["transactional"] == (
        f"{sent_in_transactions} messages in {transactions} transactions, "
        "received once each, in order")

    by_queue = data["copies_by_queue"]
    assert sum(by_queue.values()) == data["copies"]
    assert by_queue["bugs"] == routes["multiple-element"]
    assert by_queue["changes-held"] == 1 and by_queue["security-replies"] == 12
    assert by_queue["releases"] == sent_in_transactions
    assert {"changes-unstable", "changes-experimental", "changes-bookworm-security",
            "changes-other"} <= set(by_queue)  # one queue per distribution, never split
    receivers = data["receivers"]
    assert receivers["per_queue"] >= 2 and receivers["prefetch"] > 1  # competing, in batches
    list_members = len([q for q in by_queue if q.startswith("changes-") and q != "changes-held"]) + 1
    # The held copy expires; the poison record is dead-lettered; everything else is received.
    assert data["received"] == data["copies"] - 1
    assert data["dead_lettered"] == {"NACK_RECEIVE_TIMEOUT": 1, "NACK_RECEIVE_REJECTED": 1}
    assert data["poison"] == {"written": 1, "dead_lettered": 1}
    assert data["nacks"] == {"NACK_RECEIVE_TIMEOUT": 1}
    assert data["acks"]["ACK_REACH_QUEUE"] == list_members  # one per list copy
    assert data["acks"]["ACK_RECEIVE"] >= 12  # every security request, and every 10th entry
    outcomes = data["accounting"]["outcomes"]
    assert outcomes == {"received": data["copies"] - 1, "dead-lettered:NACK_RECEIVE_TIMEOUT": 1,
                        "poison dead-lettered:NACK_RECEIVE_REJECTED": 1}

    report = json.loads((report_dir / "report.json").read_text())
    assert report["engine"] == "python (fallback)"
    assert {"queue": "deadletter", "class": "NACK_RECEIVE_TIMEOUT", "count": 1} in \
        report["queue_classes"]
    assert report["top_senders"][0]["sender"].startswith("Maint ")
    latency = report["latency_ms"]
    # Backlog (throughput run) and end-to-end (paced run) are measured apart, together once.
    assert latency["paced_sent_to_received"]["count"] == data["paced"]["messages"] == \
        data["sent"]["by_route"]["paced"] > 0
    assert latency["sent_to_received"]["count"] + data["paced"]["messages"] == data["received"]
    assert data["copies_by_queue"]["latency-probe"] == data["paced"]["messages"]
    run = report["run"]
    assert run["verdict"]["ok"] and run["verdict"]["outcomes"] == outcomes
    assert run["guarantees"] == guarantees
    assert run["parameters"]["receivers"].startswith("4 threads, 2 per queue, prefetch")
    assert run["totals"]["copies"] == f"{data['copies']:,}"
    security = next(e for e in run["explanations"] if e.startswith("security received"))
    assert "12 urgent requests plus 1 announcements" in security
    markdown = (report_dir / "report.md").read_text()
    assert "PASSED: every copy accounted for" in markdown
    assert "1 NACK_RECEIVE_REJECTED: the one raw poison record" in markdown
    assert "security requests verified: 12 of 12 (signed and encrypted)" in markdown
    assert f"transactional: {guarantees['transactional']}" in markdown
    assert "Backlog, not latency" in markdown and "End-to-end latency" in markdown
    assert (report_dir / "report.md").is_file()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert report["chart"] is None
    else:
        assert (report_dir / "report.png").stat().st_size > 0

    # The run removed its queues (and its alias and list) afterwards.
    assert data["teardown"] == {"kept": False, "left_over": []}
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=data["environment"]["queue_manager"])
    with QueueManager.open(config) as qm:
        assert qm.list_queues() == []


def test_demo_as_a_process_prints_the_summary(demo_env: Path, corpus: Path,
                                              tmp_path: Path) -> None:
    # COLUMNS: a wide table, so no value is folded across lines.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "COLUMNS": "250"}
    done = subprocess.run(
        [sys.executable, "-m", "facade.cli", "demo", "--corpus", str(corpus), "--limit", "30",
         "--report-dir", str(tmp_path / "r")],
        capture_output=True, text=True, env=env, timeout=240, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "every copy accounted for" in done.stdout
    assert "30 of 60 entries" in done.stdout and str(tmp_path / "r") in done.stdout
    assert "send" in done.stderr  # the progress bars go to stderr


def test_demo_security_requests_are_never_in_clear_text_in_kafka(
        demo_env: Path, corpus: Path, tmp_path: Path, broker: BrokerEndpoint) -> None:
    # --keep leaves the queues, so their data topics can be read as a plain Kafka client would.
    data = _json(CliRunner().invoke(app, ["demo", "--corpus", str(corpus), "--keep",
                                          "--report-dir", str(tmp_path / "r"), "--json"]))
    assert data["ok"] and data["sent"]["by_route"]["security"] == 12
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=data["environment"]["queue_manager"])
    with QueueManager.open(config) as qm:
        topic = qm.open_queue(r".\private$\security").destinations[0].topics.data
        try:
            values = raw_values(broker.bootstrap_servers, topic)
        finally:
            for queue in qm.list_queues():
                qm.delete_queue(queue.path_name)
    # 12 requests and the list announcement, whose body (not encrypted: it did not ask) shows
    # that a body in clear text would be seen: every body says "Change number".
    assert len(values) == 13
    assert len([value for value in values if b"Change number" in value]) == 1


class _LedgerWithPhantom(Ledger):
    """A ledger that, before its verdict, records one copy that was never really sent: the
    accounting must find no outcome for it."""

    def verdict(self):  # type: ignore[override]
        queue = next(iter(self.copies_by_queue()))
        self.record_send(SentMessage(
            message_id="00000000-0000-0000-0000-000000000001\\1", kind="entry",
            route="direct", label="phantom 1.0", format_name=queue, queues=(queue,),
            expect="receive", acknowledge=0, sender="nobody"))
        return super().verdict()


def test_demo_fails_when_a_copy_is_unaccounted(demo_env: Path, corpus: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "Ledger", _LedgerWithPhantom)
    result = CliRunner().invoke(app, ["demo", "--corpus", str(corpus), "--limit", "12",
                                      "--report-dir", str(tmp_path / "r"), "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert not data["ok"] and data["accounting"]["unaccounted"] == 1
    assert "1 cop(ies) unaccounted" in result.stderr
    assert "phantom 1.0" in result.stderr and "Traceback" not in result.output


def test_demo_without_entries_fails_clearly(demo_env: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["demo", "--corpus", str(empty)])
    assert result.exit_code == 1
    assert "no Debian changelog entries found" in result.stderr
    assert "hint:" in result.stderr and "Traceback" not in result.output
