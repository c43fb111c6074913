"""``kmq demo`` without servers: the changelog parser on odd input, the mapping, the ledger."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import uuid
from pathlib import Path

import pytest

from facade.config import KmqConfig
from facade.demo import report as report_module
from facade.demo import runner
from facade.demo.corpus import (
    ChangelogEntry,
    CorpusStats,
    interleave,
    load_corpus,
    parse_changelog,
)
from facade.demo.ledger import Ledger, SentMessage
from facade.demo.mapping import (
    distribution_key,
    entry_label,
    entry_properties,
    plan_layout,
    priority_for,
    queue_name,
    select_distributions,
)
from facade.demo.report import Report, ReportSources, build_report, write_report
from facade.model.envelope import acknowledgment_message
from facade.model.message import (
    AcknowledgedQueue,
    Acknowledgment,
    AcknowledgmentInfo,
    Message,
    MessageClass,
    MessageId,
)

GOOD = """\
hello (2.12-1) unstable; urgency=high

  * New upstream release. Closes: #1001, #1002
  * Fix the frobnicator (Closes: #1003).

 -- Jane Doe <jane@example.org>  Mon, 01 Jan 2024 12:00:00 +0100

hello (2.11-1) frozen unstable; urgency=medium (HIGH for hurd)

  * Older change.

 -- Jane Doe <jane@example.org>  Sun, 31 Dec 2023 12:00:00 -0000

hello (2.10-1) UNRELEASED; urgency=LOW

  * Date nobody can parse.

 -- Jane Doe <jane@example.org>  Mon, 31 Foo 2024 12:00:00 +0100
"""


def _gz(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data))
    return path


def test_parser_reads_entries_fields_and_odd_dates(tmp_path: Path) -> None:
    stats = CorpusStats()
    entries = parse_changelog(_gz(tmp_path / "hello" / "changelog.Debian.gz", GOOD.encode()),
                              stats)
    assert [(e.package, e.version) for e in entries] == [
        ("hello", "2.12-1"), ("hello", "2.11-1"), ("hello", "2.10-1")]
    first, second, third = entries
    assert first.distributions == ("unstable",) and first.urgency == "high"
    assert first.closed_bugs == (1001, 1002, 1003)
    assert first.maintainer == "Jane Doe <jane@example.org>"
    assert first.date == dt.datetime(2024, 1, 1, 11, 0, tzinfo=dt.UTC)
    assert first.text.startswith("hello (2.12-1) unstable; urgency=high")
    assert first.text.rstrip().endswith("+0100")
    assert second.distributions == ("frozen", "unstable") and second.urgency == "medium"
    assert second.date is not None and second.date.tzinfo is not None  # -0000 read as UTC
    assert third.urgency == "low" and third.date is None and third.date_text == "Mon, 31 Foo 2024 12:00:00 +0100"
    assert stats.entries_skipped == 0 and stats.files_skipped == 0


def test_parser_survives_bad_files_and_encodings(tmp_path: Path) -> None:
    corpus = tmp_path / "doc"
    latin1 = GOOD.replace("Jane Doe", "Jos\xe9 Mu\xf1oz").encode("latin-1")  # not UTF-8
    _gz(corpus / "latin" / "changelog.Debian.gz", latin1)
    truncated = gzip.compress(GOOD.encode())[:-20]
    (corpus / "truncated").mkdir()
    (corpus / "truncated" / "changelog.Debian.gz").write_bytes(truncated)
    _gz(corpus / "empty" / "changelog.Debian.gz", b"")
    _gz(corpus / "garbage" / "changelog.Debian.gz", bytes(range(256)) * 4)
    _gz(corpus / "noheader" / "changelog.Debian.gz",
        b"  * a change with no header\n\n -- A <a@b>  Mon, 01 Jan 2024 12:00:00 +0000\n")
    (corpus / "not-a-package-dir.txt").write_text("ignored: not */changelog.Debian.gz")

    entries, stats = load_corpus(corpus)

    assert stats.files == 5
    assert {e.source.split("/")[-2] for e in entries} == {"latin"}
    assert entries[0].maintainer == "José Muñoz <jane@example.org>"
    assert len(entries) == 3
    assert stats.files_skipped == 2  # the truncated gzip and the empty file
    assert stats.entries_skipped == 2  # garbage and the headerless entry: no package/version
    assert stats.parse_warnings > 0  # python-debian's complaints are counted, not printed
    assert any("truncated" in s and "corrupt gzip" in s for s in stats.samples)


def test_single_plain_file_and_limit_round_robin(tmp_path: Path) -> None:
    plain = tmp_path / "changelog"
    plain.write_text(GOOD)
    entries, stats = load_corpus(plain, limit=2)
    assert stats.files == 1 and stats.entries == 3 and len(entries) == 2

    def entry(package: str, n: int) -> ChangelogEntry:
        return ChangelogEntry(package, str(n), ("unstable",), "low", "", None, "", "", (), "")

    per_file = [[entry("a", 3), entry("a", 2), entry("a", 1)], [entry("b", 1)]]
    assert [(e.package, e.version) for e in interleave(per_file, 3)] == [
        ("a", "3"), ("b", "1"), ("a", "2")]
    assert len(interleave(per_file, None)) == 4


def test_missing_corpus_gives_no_entries(tmp_path: Path) -> None:
    entries, stats = load_corpus(tmp_path / "nowhere")
    assert entries == [] and stats.files == 0


def test_mapping() -> None:
    assert [priority_for(u) for u in ("low", "medium", "HIGH", "critical", "emergency", "odd", "")] \
        == [1, 3, 5, 7, 7, 3, 3]
    entry = ChangelogEntry("p" * 300, "1.0", ("Bookworm-Security",), "high", "M <m@x>",
                           dt.datetime(2024, 1, 1, tzinfo=dt.UTC), "Mon", "text",
                           (5, 6), "src")
    assert len(entry_label(entry)) == 250
    assert distribution_key(entry) == "bookworm-security"
    assert distribution_key(ChangelogEntry("p", "1", (), "", "", None, "", "", (), "")) == "other"
    properties = entry_properties(entry)
    assert properties["debian.closes"] == "5,6" and properties["debian.maintainer"] == "M <m@x>"
    assert properties["debian.date"] == "2024-01-01T00:00:00+00:00"
    many = [ChangelogEntry("p", "1", (d,), "", "", None, "", "", (), "")
            for d in ["unstable"] * 90 + ["experimental"] * 9 + ["rare"]]
    assert select_distributions(many, min_share=0.05) == ["unstable", "experimental"]


def test_every_distribution_gets_one_queue_however_big() -> None:
    def entry(package: str, distribution: str) -> ChangelogEntry:
        return ChangelogEntry(package, "1", (distribution,), "", "", None, "", "", (), "")

    entries = ([entry(f"p{i}", "unstable") for i in range(5000)]
               + [entry(f"q{i}", "experimental") for i in range(90)] + [entry("r", "rare")])
    layout = plan_layout(entries)
    assert layout.distributions == ["unstable", "experimental", "other"]
    assert layout.distribution_of(entries[-1]) == "other"  # rare: under 1 % of the entries
    assert queue_name("unstable") == "changes-unstable"
    assert plan_layout(entries) == layout  # the same on every run


# -- ledger --------------------------------------------------------------------------------------

QM = uuid.uuid4()
Q1, Q2, DLQ_Q = r"DIRECT=OS:qm\changes-a", r"DIRECT=OS:qm\private$\bugs", r"DIRECT=OS:qm\private$\held"


def _sent(seq: int, queues: tuple[str, ...], expect: str = "receive",
          ack: Acknowledgment = Acknowledgment.NONE) -> SentMessage:
    return SentMessage(message_id=str(MessageId(QM, seq)), kind="entry", route="direct",
                       label=f"pkg {seq}", format_name=",".join(queues), queues=queues,
                       expect=expect, acknowledge=int(ack), sender="M")


def _copy(seq: int, queue: str, cls: MessageClass = MessageClass.NORMAL) -> Message:
    return Message(id=MessageId(QM, seq), destination_queue=queue, message_class=cls)


def _ack(seq: int, queue: str, cls: MessageClass) -> Message:
    info = AcknowledgmentInfo(MessageId(QM, seq), cls, (AcknowledgedQueue(queue),))
    return acknowledgment_message(info)


def test_ledger_accounts_per_copy_and_names_what_is_missing() -> None:
    ledger = Ledger()
    ledger.record_send(_sent(1, (Q1, Q2)))  # a multiple-element send: two copies, one id
    ledger.record_send(_sent(2, (DLQ_Q,), expect="expire", ack=Acknowledgment.FULL_RECEIVE))
    ledger.record_send(_sent(3, (Q1,), ack=Acknowledgment.FULL_RECEIVE))
    ledger.observe_received(_copy(1, Q1), Q1)
    ledger.observe_received(_copy(3, Q1), Q1)
    ledger.observe_admin(_ack(3, Q1, MessageClass.ACK_RECEIVE))
    ledger.observe_dead_letter(_copy(2, DLQ_Q, MessageClass.NACK_RECEIVE_TIMEOUT))
    ledger.observe_admin(_ack(2, DLQ_Q, MessageClass.NACK_RECEIVE_TIMEOUT))
    where = ledger.record_poison("topic", 0, 7, Q1)
    poison = Message(message_class=MessageClass.NACK_RECEIVE_REJECTED,
                     properties={"kmq.source": where})
    ledger.observe_dead_letter(poison)

    verdict = ledger.verdict()
    assert not verdict.ok and verdict.unaccounted_count == 1  # copy 1 -> bugs never came
    assert verdict.unaccounted[0].startswith(f"{MessageId(QM, 1)} -> {Q2}")
    assert verdict.outcomes["received"] == 2
    assert verdict.outcomes["dead-lettered:NACK_RECEIVE_TIMEOUT"] == 1
    assert verdict.outcomes["poison dead-lettered:NACK_RECEIVE_REJECTED"] == 1
    assert not verdict.problem_counts

    ledger.observe_received(_copy(1, Q2), Q2)
    assert ledger.verdict().ok


def test_ledger_catches_broken_promises() -> None:
    ledger = Ledger()
    ledger.record_send(_sent(1, (Q1,), ack=Acknowledgment.FULL_RECEIVE))
    ledger.observe_received(_copy(1, Q1), Q1)
    ledger.observe_received(_copy(1, Q1), Q1)  # twice
    ledger.observe_received(_copy(9, Q1), Q1)  # never sent
    ledger.observe_admin(_ack(8, Q2, MessageClass.NACK_RECEIVE_TIMEOUT))  # never sent
    ledger.observe_admin(Message(body=b"not an acknowledgment",
                                 message_class=MessageClass.ACK_RECEIVE))
    ledger.record_send(SentMessage(
        message_id=str(MessageId(QM, 5)), kind="entry", route="security", label="req",
        format_name=Q2, queues=(Q2,), expect="receive", acknowledge=0, sender="M",
        wants_response=True))
    ledger.observe_received(_copy(5, Q2), Q2)  # received, but no response was ever sent

    verdict = ledger.verdict()
    assert verdict.unaccounted_count == 0 and not verdict.ok
    assert verdict.problem_counts == {"received twice": 1, "acknowledgment missing": 1,
                                      "never sent": 2, "bad acknowledgment": 1,
                                      "response missing": 1}
    assert ledger.received(Q1) == 2  # distinct copies seen: (1, Q1) and (9, Q1)


def test_nack_alone_accounts_for_a_copy() -> None:
    ledger = Ledger()
    ledger.record_send(_sent(1, (Q1,), ack=Acknowledgment.NACK_REACH_QUEUE))
    ledger.observe_admin(_ack(1, Q1, MessageClass.NACK_REACH_QUEUE_TIMEOUT))
    verdict = ledger.verdict()
    assert verdict.ok and verdict.outcomes == {"nacked:NACK_REACH_QUEUE_TIMEOUT": 1}
    assert verdict.unexpected == {"direct: nacked:NACK_REACH_QUEUE_TIMEOUT": 1}


TXQ = r"DIRECT=OS:qm\private$\releases"


def _in_transaction(seq: int, transaction: str) -> SentMessage:
    return SentMessage(message_id=str(MessageId(QM, seq)), kind="entry", route="transactional",
                       label=f"pkg {seq}", format_name=TXQ, queues=(TXQ,), expect="receive",
                       acknowledge=0, sender="M", transaction=transaction)


def _received_in(order: list[int]) -> Ledger:
    """Five messages sent in two transactions (1-3, then 4-5), received in ``order``."""
    ledger = Ledger()
    for seq in range(1, 6):
        ledger.record_send(_in_transaction(seq, "tx-a" if seq <= 3 else "tx-b"))
    for seq in order:
        ledger.observe_received(_copy(seq, TXQ), TXQ)
    return ledger


def test_transactional_copies_received_once_in_send_order_pass() -> None:
    ledger = _received_in([1, 2, 3, 4, 5])
    assert ledger.verdict().ok
    assert ledger.transactions() == (5, 2)
    assert ledger.received_once("transactional") == (5, 5)


def test_a_transactional_copy_out_of_order_fails_the_verdict_naming_it() -> None:
    verdict = _received_in([1, 2, 4, 3, 5]).verdict()  # the second transaction overtook
    assert not verdict.ok and verdict.unaccounted_count == 0
    assert verdict.problem_counts == {"transactional out of order": 1}
    [what] = verdict.problems["transactional out of order"]
    assert what.startswith(f"{TXQ}: receive #3 was {MessageId(QM, 4)}, sent as #4")


def test_a_transactional_copy_received_twice_fails_the_verdict() -> None:
    ledger = _received_in([1, 2, 2, 3, 4, 5])
    verdict = ledger.verdict()
    assert not verdict.ok and verdict.problem_counts == {"received twice": 1}  # order kept
    assert ledger.received_once("transactional") == (4, 5)


def test_a_missing_transactional_copy_is_unaccounted_not_out_of_order() -> None:
    verdict = _received_in([1, 2, 4, 5]).verdict()
    assert verdict.unaccounted_count == 1 and not verdict.problem_counts


@pytest.mark.parametrize(("order", "said"), [
    ([1, 2, 3, 4, 5], "received once each, in order"),
    ([1, 2, 4, 3, 5], "received once each, OUT OF ORDER"),
    ([1, 2, 2, 3, 4, 5], "only 4 of 5 received exactly once, in order"),
])
def test_the_report_states_the_transactional_promise_as_kept_or_broken(
        order: list[int], said: str, tmp_path: Path) -> None:
    ledger = _received_in(order)
    verdict = ledger.verdict()
    guarantees = runner._guarantees(ledger, verdict, {"verified": 0})
    assert guarantees["transactional"] == f"5 messages in 2 transactions, {said}"
    run = {"guarantees": guarantees, "verdict": {
        "ok": verdict.ok, "unaccounted": 0, "problems": dict(verdict.problem_counts)}}
    write_report(Report(engine="python (fallback)", queue_classes=[], top_senders=[],
                        acknowledgments={}, latency_ms={}, run=run), tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert f"transactional: 5 messages in 2 transactions, {said}" in markdown
    assert "security requests verified: 0 of 0 (signed and encrypted)" in markdown
    assert ("PASSED" in markdown) is verdict.ok
    for kind, count in verdict.problem_counts.items():  # a failure names its problem
        assert f"FAILED: 0 copies unaccounted for, {kind} {count}" in markdown


@pytest.mark.parametrize("authenticated", [True, False])
def test_a_signed_request_received_unverified_fails_the_verdict(authenticated: bool) -> None:
    ledger = Ledger()
    ledger.record_send(SentMessage(
        message_id=str(MessageId(QM, 1)), kind="entry", route="security", label="req",
        format_name=Q2, queues=(Q2,), expect="receive", acknowledge=0, sender="M",
        signed=True))
    received = Message(id=MessageId(QM, 1), destination_queue=Q2, authenticated=authenticated)
    ledger.observe_received(received, Q2)
    verdict = ledger.verdict()
    assert verdict.ok is authenticated
    assert verdict.problem_counts == ({} if authenticated else {"signed but not verified": 1})


# -- report ----------------------------------------------------------------------------------------


def _sources(tmp_path: Path) -> ReportSources:
    return ReportSources(config=KmqConfig(bootstrap_servers="127.0.0.1:1"), queue_manager="qm",
                         queues={"changes-a": Q1}, journals={"changes-a": f"{Q1};JOURNAL"},
                         dead_letter="MACHINE=x;DEADLETTER", admin=Q2, held=DLQ_Q,
                         report_dir=tmp_path)


def test_report_falls_back_to_python_when_asked(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # KMQ_DEMO_REPORT=python (or no pyspark) selects the Python report; the Spark job itself
    # is tested in tests/spark/test_demo_report.py.
    monkeypatch.setenv("KMQ_DEMO_REPORT", "python")
    ledger = Ledger()
    sent = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    for seq in range(1, 5):
        message = _copy(seq, Q1)
        message.sent_time, message.arrived_time = sent, sent + dt.timedelta(milliseconds=seq)
        message.properties = {"debian.maintainer": "A <a@x>" if seq < 4 else "B <b@x>"}
        ledger.observe_received(message, Q1, received_time=sent + dt.timedelta(seconds=seq))
    ledger.observe_dead_letter(_copy(9, DLQ_Q, MessageClass.NACK_RECEIVE_TIMEOUT))
    ledger.observe_admin(_ack(9, DLQ_Q, MessageClass.NACK_RECEIVE_TIMEOUT))

    report = build_report(_sources(tmp_path), ledger)

    assert report.engine == "python (fallback)"
    assert any("Spark report unavailable" in note for note in report.notes)
    assert {"queue": "changes-a", "class": "NORMAL", "count": 4} in report.queue_classes
    assert {"queue": "deadletter", "class": "NACK_RECEIVE_TIMEOUT", "count": 1} in \
        report.queue_classes
    assert report.top_senders == [{"sender": "A <a@x>", "messages": 3},
                                  {"sender": "B <b@x>", "messages": 1}]
    assert report.acknowledgments == {"NACK_RECEIVE_TIMEOUT": 1}
    assert report.latency_ms["sent_to_arrived"] == {"count": 4, "p50": 2.0, "p90": 4.0,
                                                    "p99": 4.0, "max": 4.0}
    assert report.latency_ms["sent_to_received"]["max"] == 4000.0
    files = write_report(report, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["engine"] == report.engine
    assert "| changes-a | NORMAL | 4 |" in (tmp_path / "report.md").read_text()
    if report.chart is not None:  # matplotlib installed (the demo extra)
        assert Path(report.chart) in files and Path(report.chart).stat().st_size > 0


def test_a_spark_report_is_used_and_its_failure_is_not_hidden(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = Report(engine="spark", queue_classes=[], top_senders=[], acknowledgments={},
                  latency_ms={}, chart="already drawn")
    monkeypatch.setattr(report_module, "spark_report", lambda sources: made)
    assert build_report(_sources(tmp_path), Ledger()) is made

    def broken(sources: ReportSources) -> Report:
        raise RuntimeError("spark job failed")

    monkeypatch.setattr(report_module, "spark_report", broken)
    with pytest.raises(RuntimeError, match="spark job failed"):
        build_report(_sources(tmp_path), Ledger())
