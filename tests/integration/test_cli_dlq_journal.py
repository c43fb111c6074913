"""`kmq dlq | journal | queue set` against a real broker, through typer's runner.

The situations (expired messages, journaled receives, source journaling) are made with the
Python API on the same queue manager the CLI opens (same KMQ_HOME, broker and name).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.security.acl import AccessRight
from facade.cli import app
from facade.config import KmqConfig
from facade.model.formatnames import SystemQueue
from facade.manager import QueueManager
from facade.model.message import JournalLevel, Message, PrivacyLevel
from tests.support.kafka import BrokerEndpoint, raw_values

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_qm(broker: BrokerEndpoint, kmq_home: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[QueueManager]:
    """A fresh queue manager, also the one the CLI opens (through KMQ_* in the environment)."""
    name = f"cli-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", name)
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers, queue_manager=name)
    with QueueManager.open(config) as manager:
        yield manager


def _run(*args: str, principal: str | None = None, code: int = 0) -> dict | list:
    env = None if principal is None else {"KMQ_PRINCIPAL": principal}
    result = CliRunner().invoke(app, [*args, "--json"], env=env)
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def _fails(*args: str, code: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 1, result.output
    assert code in result.output and "Traceback" not in result.output
    assert result.output.strip().splitlines()[0].startswith("error")
    return result.output


def test_expired_message_is_listed_shown_and_purged_from_the_dlq(cli_qm: QueueManager) -> None:
    assert _run("dlq", "list") == []
    q = cli_qm.create_queue(r".\private$\ttbr")
    sent = q.send(Message(body="stale é".encode(), label="late", time_to_be_received=0.2,
                          journal=JournalLevel.DEADLETTER, properties={"kmq.reason": "test"}),
                  wait=True)
    time.sleep(0.5)
    assert _run("qm", "run", "--once")["expired"] == 1

    rows = _run("dlq", "list")
    assert len(rows) == 1
    row = rows[0]
    assert row["id"] == str(sent.id) and row["class"] == "NACK_RECEIVE_TIMEOUT"
    assert row["label"] == "late" and row["reason"] == "test"
    assert row["destination_queue"] == rf"DIRECT=OS:{cli_qm.name}\private$\ttbr"
    assert row["sent_time"] and isinstance(row["lookup_id"], int)
    assert _run("dlq", "list", "--transactional") == []

    table = CliRunner().invoke(app, ["dlq", "list"])
    assert table.exit_code == 0 and "NACK_RECEIVE_TIMEOUT" in table.output

    shown = _run("dlq", "show", str(row["lookup_id"]))
    assert shown["id"] == str(sent.id) and shown["message_class"] == "NACK_RECEIVE_TIMEOUT"
    assert shown["body"] == "stale é" and shown["body_size"] == len("stale é".encode())
    # The dead-letter copy does not expire; the TTBR shown is the original message's (it was
    # blank), and an unsigned, unencrypted message shows no hash or encryption algorithm.
    assert shown["properties"] == {"kmq.reason": "test", "kmq.time_to_be_received": "0.2"}
    assert shown["time_to_be_received"] == 0.2
    assert shown["hash_algorithm"] is None and shown["encryption_algorithm"] is None
    dead_letter_queue = f"MACHINE={cli_qm.guid};DEADLETTER"
    assert _run("peek", dead_letter_queue)["time_to_be_received"] == 0.2
    assert shown["journal"] == "DEADLETTER"

    # Listing and showing removed nothing.
    assert len(_run("dlq", "list")) == 1
    assert _run("dlq", "purge", "--yes")["purged"] == 1
    assert _run("dlq", "list") == []


def test_dlq_list_limit(cli_qm: QueueManager) -> None:
    q = cli_qm.create_queue(r".\private$\many")
    for i in range(3):
        q.send(Message(body=b"x", label=f"m{i}", time_to_be_received=0.2,
                       journal=JournalLevel.DEADLETTER), wait=True)
    time.sleep(0.5)
    assert q.expire_due() == 3
    assert [r["label"] for r in _run("dlq", "list", "--limit", "2")] == ["m0", "m1"]
    table = CliRunner().invoke(app, ["dlq", "list", "--limit", "2"])
    assert table.exit_code == 0 and "more in the queue" in table.output
    assert len(_run("dlq", "list")) == 3


def test_queue_journal_lists_received_messages(cli_qm: QueueManager) -> None:
    q = cli_qm.create_queue(r".\private$\orders", journal=True)
    sent = q.send(Message(body=b"o1", label="order 1"), wait=True)
    assert _run("journal", "list", r".\private$\orders") == []
    assert q.receive(timeout=10).id == sent.id
    rows = _run("journal", "list", r".\private$\orders")
    assert [(r["id"], r["label"], r["class"]) for r in rows] == [(str(sent.id), "order 1", "NORMAL")]
    # The same journal by format name; the machine journal has nothing (no JOURNAL level).
    fn = rf"DIRECT=OS:{cli_qm.name}\private$\orders"
    assert [r["id"] for r in _run("journal", "list", fn)] == [str(sent.id)]
    assert _run("journal", "list", "--machine") == []


def test_machine_journal_lists_source_journaled_sends(cli_qm: QueueManager) -> None:
    q = cli_qm.create_queue(r".\private$\audit")
    sent = q.send(Message(body=b"a", label="audited", journal=JournalLevel.JOURNAL), wait=True)
    q.send(Message(body=b"b", label="not audited"), wait=True)
    rows = _run("journal", "list", "--machine")
    assert [(r["id"], r["label"]) for r in rows] == [(str(sent.id), "audited")]
    assert q.count() == 2


def test_queue_set_changes_only_the_given_properties(cli_qm: QueueManager) -> None:
    q = r".\private$\props"
    _run("queue", "create", q, "--label", "Before", "--quota-kb", "64")
    updated = _run("queue", "set", q, "--label", "After", "--quota-kb", "128", "--journal")
    assert (updated["label"], updated["quota_kb"], updated["journal"]) == ("After", 128, True)
    shown = _run("queue", "show", q)
    assert (shown["label"], shown["quota_kb"], shown["journal"]) == ("After", 128, True)
    assert shown["base_priority"] == 0 and shown["journal_quota_kb"] is None

    _run("queue", "set", q, "--no-journal", "--quota-kb", "0", "--base-priority", "5")
    shown = _run("queue", "show", q)
    assert (shown["label"], shown["quota_kb"], shown["journal"], shown["base_priority"]) == \
        ("After", None, False, 5)


def test_errors_exit_1_with_one_line_and_usage_errors_exit_2(cli_qm: QueueManager) -> None:
    missing = r".\private$\missing"
    _fails("journal", "list", missing, code="MQ_ERROR_QUEUE_NOT_FOUND")
    _fails("queue", "set", missing, "--label", "x", code="MQ_ERROR_QUEUE_NOT_FOUND")
    _fails("dlq", "show", "12345", code="MQ_ERROR_MESSAGE_NOT_FOUND")
    _fails("journal", "list", f"MACHINE={cli_qm.guid};DEADLETTER",
           code="MQ_ERROR_UNSUPPORTED_FORMATNAME_OPERATION")
    cli_qm.create_queue(r".\private$\x")
    _fails("queue", "set", r".\private$\x", "--label", "y" * 200, code="MQ_ERROR_INVALID_PARAMETER")
    for args in (["journal", "list"], ["journal", "list", missing, "--machine"],
                 ["queue", "set", missing], ["dlq", "show", "not-a-number"],
                 ["queue", "set", missing, "--quota-kb", "-1"]):
        assert CliRunner().invoke(app, args).exit_code == 2, args


SECRET = b"the vault code is 0451"
PRIVATE = dict(privacy_level=PrivacyLevel.BODY_AES,
               journal=JournalLevel.DEADLETTER | JournalLevel.JOURNAL)


def _expire_to_dead_letter(queue, **fields) -> Message:
    """Send an encrypted message to ``queue`` and let it expire into the dead-letter queue."""
    sent = queue.send(Message(body=SECRET, time_to_be_received=0.2, **PRIVATE, **fields),
                      wait=True)
    time.sleep(0.5)
    assert queue.expire_due() == 1
    return sent


def _nowhere_in_clear(qm: QueueManager, topics: list[str]) -> None:
    for topic in topics:
        values = raw_values(qm.config.bootstrap_servers, topic)
        assert values and not any(SECRET in value for value in values), topic


def test_moved_and_requeued_encrypted_messages_stay_encrypted(cli_qm: QueueManager) -> None:
    source = cli_qm.create_queue(r".\private$\sealed-source", journal=True)
    target = cli_qm.create_queue(r".\private$\sealed-target")
    source.send(Message(body=SECRET, label="move me", **PRIVATE), wait=True)
    lookup_id = source.peek(timeout=10).lookup_id
    _run("queue", "move", source.format_name, str(lookup_id), "--to", target.format_name)
    _expire_to_dead_letter(source, label="requeue me")
    dead_letter = _run("dlq", "list")[0]
    _run("dlq", "requeue", str(dead_letter["lookup_id"]), "--no-ttbr")

    for queue, label in ((target, "move me"), (source, "requeue me")):
        received = queue.receive(timeout=10)  # a permitted receiver reads it in clear
        assert (received.label, received.body) == (label, SECRET)
        assert received.privacy_level is PrivacyLevel.BODY_AES
    topics = source.destinations[0].topics
    _nowhere_in_clear(cli_qm, [target.destinations[0].topics.data, topics.data,
                               topics.journal().data, cli_qm.dead_letter_topic,
                               cli_qm.system_topic(SystemQueue.JOURNAL)])


def test_dead_letters_are_decrypted_only_for_readers_of_their_queue(
        cli_qm: QueueManager) -> None:
    owner = cli_qm.config.principal
    queue = cli_qm.create_queue(r".\private$\sealed-ttbr")  # MSMQ's default list: no peek
    sent = _expire_to_dead_letter(queue)
    dead_letters = f"MACHINE={cli_qm.guid};DEADLETTER"
    listed = _run("dlq", "list", principal="mallory")  # Everyone may peek at the DLQ
    assert [row["id"] for row in listed] == [str(sent.id)]
    lookup_id = str(listed[0]["lookup_id"])

    for shown in (_run("dlq", "show", lookup_id, principal="mallory"),
                  _run("peek", dead_letters, principal="mallory")):
        assert shown["id"] == str(sent.id)
        assert SECRET.decode() not in shown["body"] and shown["body_size"] != len(SECRET)
        reason = shown["body_encrypted"]
        assert "mallory" in reason and "PEEK_MESSAGE" in reason
        assert queue.destinations[0].format_name in reason
    table = CliRunner().invoke(app, ["dlq", "show", lookup_id], env={"KMQ_PRINCIPAL": "mallory"})
    assert table.exit_code == 0 and "PEEK_MESSAGE" in table.output

    config = KmqConfig.load(bootstrap_servers=cli_qm.config.bootstrap_servers,
                            queue_manager=cli_qm.name, principal="mallory")
    with QueueManager.open(config) as mallory:  # the facade keeps it encrypted too
        stored = mallory.open_queue(dead_letters).peek_by_lookup_id(int(lookup_id))
        assert SECRET not in stored.body and stored.destination_symmetric_key
        assert stored.privacy_level is PrivacyLevel.BODY_AES

    shown = _run("dlq", "show", lookup_id, principal=owner)
    assert shown["body"] == SECRET.decode() and shown["body_encrypted"] is None
    security = cli_qm.queue_security(queue.format_name).grant("bob", AccessRight.PEEK_MESSAGE)
    cli_qm.set_queue_security(queue.format_name, security)
    assert _run("dlq", "show", lookup_id, principal="bob")["body"] == SECRET.decode()


def test_a_dead_letter_whose_body_stays_encrypted_is_not_requeued(
        cli_qm: QueueManager) -> None:
    """The queue manager's owner may receive from the dead-letter queue, but not read a queue
    whose owner refuses it: the dead letter is not sent on as unreadable bytes, it stays."""
    config = KmqConfig.load(bootstrap_servers=cli_qm.config.bootstrap_servers,
                            queue_manager=cli_qm.name, principal="alice")
    with QueueManager.open(config) as alice:
        queue = alice.create_queue(r".\private$\alices")
        sent = _expire_to_dead_letter(queue)
        lookup_id = str(_run("dlq", "list")[0]["lookup_id"])
        refused = _run("dlq", "requeue", lookup_id, principal=cli_qm.config.principal, code=1)
        assert refused["error"]["code"] == "MQ_ERROR_ACCESS_DENIED"
        assert "PEEK_MESSAGE" in refused["error"]["message"]
        assert [row["id"] for row in _run("dlq", "list")] == [str(sent.id)]
        assert _run("dlq", "show", lookup_id, principal="alice")["body"] == SECRET.decode()
