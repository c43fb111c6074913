"""Malformed records in the registry topics, written raw to the real broker.

One ``produce("__kmq.queues", key, b"not json")`` must not make ``QueueManager.open()`` raise
in every process of every queue manager: each process skips such records alike, logs each
once with where it is and why, and counts them (``Registry.malformed``, ``kmq qm info``).

The registry topics are shared by every test of the session's broker, so these records use
keys of their own (a fresh queue-manager name), and the test ends by writing tombstones for
them. The malformed records themselves stay in the log for the rest of the session, which is
the point: every later test opens queue managers past them.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from facade import Message
from facade.cli import app
from facade.config import KmqConfig
from facade.manager import QueueManager
from facade.model.topics import QUEUE_MANAGER_REGISTRY_TOPIC, QUEUE_REGISTRY_TOPIC
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration


def _produce(broker: BrokerEndpoint, records: list[tuple[str, bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                         "allow.auto.create.topics": False})
    failures: list[object] = []
    for topic, key, value in records:
        producer.produce(topic, value=value, key=key,
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
    assert producer.flush(30) == 0 and not failures, failures


def _with(qm: QueueManager, path: str, **changes: object) -> bytes:
    """The registry value of queue ``path`` with ``changes`` made without any checks."""
    return json.dumps({**json.loads(qm.get_properties(path).to_json()), **changes}).encode()


def _registry_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kmq.registry"
            and r.levelno == logging.WARNING]


def test_malformed_registry_records_are_skipped_counted_and_repaired(
        broker: BrokerEndpoint, kmq_home: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"qm-poison-{uuid.uuid4().hex[:8]}"
    poisoned_manager = f"{name}-other"
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers, queue_manager=name)
    kept_path = rf"{name}\private$\kept"
    not_json_path = rf"{name}\private$\notjson"
    bare_path = rf"{name}\private$\bare"
    bad_key = b"\xff\xfe" + name.encode()

    with QueueManager.open(config) as qm:
        kept = qm.create_queue(r".\private$\kept", label="before")
        already = qm.registry.malformed   # whatever other tests left in the session's registries
        poison = [
            (QUEUE_REGISTRY_TOPIC, not_json_path.encode(), b"not json"),
            (QUEUE_REGISTRY_TOPIC, bare_path.encode(), b'{"version":1}'),
            (QUEUE_REGISTRY_TOPIC, bad_key, qm.get_properties(kept_path).to_json()),
            (QUEUE_REGISTRY_TOPIC, kept_path.encode(), _with(qm, kept_path, quota_kb="x")),
            (QUEUE_REGISTRY_TOPIC, kept_path.encode(), _with(qm, kept_path, private="yes")),
            (QUEUE_MANAGER_REGISTRY_TOPIC, poisoned_manager.encode(), b"not json"),
        ]
        _produce(broker, poison)
        # The view that was open before the records came: the next refresh skips them.
        assert [p.queue_name for p in qm.list_queues()] == ["kept"]
        assert qm.registry.malformed == already + len(poison)
        kept.send(Message(body=b"old view"), wait=True)
        assert kept.receive(timeout=10).body == b"old view"

    caplog.set_level(logging.WARNING, logger="kmq.registry")
    caplog.clear()
    with QueueManager.open(config) as fresh:   # a new view reads the registries from the start
        assert fresh.registry.malformed == already + len(poison)
        assert [p.queue_name for p in fresh.list_queues()] == ["kept"]
        # A malformed record leaves its key as it was: "kept" keeps its last valid properties.
        assert fresh.get_properties(r".\private$\kept").label == "before"
        queue = fresh.open_queue(r".\private$\kept")
        queue.send(Message(body=b"new view"), wait=True)
        assert queue.receive(timeout=10).body == b"new view"
        assert poisoned_manager not in fresh.registry.queue_managers()
        # Each record logged once, naming topic, partition, offset and why; refreshing again
        # logs nothing new.
        fresh.registry.queues()
        ours = [line for line in _registry_lines(caplog)
                if name in line or repr(bad_key) in line]
        assert len(ours) == len(poison)
        lines = "\n".join(ours)
        for why in ("not JSON", "field 'path_name' is missing", "the key is not UTF-8",
                    "'quota_kb' must be int or null", "'private' must be bool, not 'yes'"):
            assert why in lines
        assert f"topic '{QUEUE_MANAGER_REGISTRY_TOPIC}', partition 0, offset " in lines
        assert f"topic '{QUEUE_REGISTRY_TOPIC}', partition 0, offset " in lines
        assert len(_registry_lines(caplog)) == fresh.registry.malformed

        # The CLI shows the count, and lists queues past the records.
        monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
        monkeypatch.setenv("KMQ_QUEUE_MANAGER", name)
        info = CliRunner().invoke(app, ["qm", "info", "--json"])
        assert info.exit_code == 0, info.output
        assert json.loads(info.output)["malformed_registry_records"] == already + len(poison)
        listed = CliRunner().invoke(app, ["queue", "list", "--json"])
        assert listed.exit_code == 0, listed.output
        assert [row["queue_name"] for row in json.loads(listed.output)] == ["kept"]

        # Repairs: a valid record for a poisoned key (here: creating the queue) makes it work
        # again; rewriting a queue's properties supersedes a malformed record for it.
        fresh.create_queue(r".\private$\notjson").send(Message(body=b"repaired"), wait=True)
        fresh.set_properties(r".\private$\kept", label="after")
        other = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                               queue_manager=poisoned_manager)
        with QueueManager.open(other) as first, QueueManager.open(other) as second:
            assert first.guid == second.guid    # registered past the bad record, then stable
        # A bad record after the winner could outlive it in compaction: the next open of the
        # queue manager writes the winner again, so a fresh view sees nothing left to fix.
        _produce(broker, [(QUEUE_MANAGER_REGISTRY_TOPIC, poisoned_manager.encode(), b"\x00")])
        with QueueManager.open(other) as third:
            assert third.guid == first.guid
        with QueueManager.open(other) as fourth:
            assert fourth.guid == first.guid
            assert poisoned_manager not in fourth.registry._reaffirm

    with QueueManager.open(config) as repaired:
        assert [p.queue_name for p in repaired.list_queues()] == ["kept", "notjson"]
        assert repaired.get_properties(r".\private$\kept").label == "after"
        assert repaired.open_queue(r".\private$\notjson").receive(timeout=10).body == b"repaired"
        assert poisoned_manager in repaired.registry.queue_managers()
        # Clean up: the queues, and tombstones for the keys only malformed records had.
        repaired.delete_queue(r".\private$\kept")
        repaired.delete_queue(r".\private$\notjson")
    _produce(broker, [(QUEUE_REGISTRY_TOPIC, bare_path.encode(), None),
                      (QUEUE_REGISTRY_TOPIC, bad_key, None)])
    with QueueManager.open(config) as last:
        assert last.list_queues() == []
        # One more bad queue-manager record, and the tombstone of the non-UTF-8 key.
        assert last.registry.malformed == already + len(poison) + 2
