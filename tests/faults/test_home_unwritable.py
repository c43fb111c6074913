"""An unwritable ``KMQ_HOME`` and a full disk: one clear error naming the path and the fix.

kmq keeps the durable outgoing queue under ``KMQ_HOME`` (SQLite, written at every RECOVERABLE
send; message ids are leased through Kafka, see ``tests/integration/test_message_ids.py``). It
may not fail as a traceback, and a recoverable send that could not be stored must not be sent
at all (MSMQ's rule: the sender learns it was not accepted).

How the faults are made: an unwritable home is a path under a regular file (this works even
as root, where permission bits do not stop writes; the permission-bit variant runs only as
non-root). A full disk is simulated by patching the store's SQLite connection to fail the
INSERT with SQLITE_FULL, as a real full disk would: no tmpfs of a fixed size can be mounted
here without root.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app
from facade.config import KmqConfig
from facade.errors import MessageQueueError, ReceiveTimeout
from facade.manager import QueueManager
from facade.model.message import Delivery, Message
from tests.support.kafka import BrokerEndpoint

pytestmark = pytest.mark.integration


def _config(broker: BrokerEndpoint, home: Path) -> KmqConfig:
    return KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                          queue_manager=f"fh-{uuid.uuid4().hex[:8]}", home=home)


def test_open_with_home_under_a_file_names_the_blocking_path(broker: BrokerEndpoint,
                                                             tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where KMQ_HOME's parent should be")
    with pytest.raises(MessageQueueError) as caught:
        QueueManager.open(_config(broker, blocker / "kmq-home"))
    text = str(caught.value)
    assert f"{blocker} exists and is not a directory" in text
    assert "outgoing queue" in text and "KMQ_HOME" in (caught.value.hint or "")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits; the "
                    "file-as-parent case above covers an unwritable KMQ_HOME for root")
def test_open_with_a_read_only_home(broker: BrokerEndpoint, tmp_path: Path) -> None:
    home = tmp_path / "read-only-home"
    home.mkdir()
    home.chmod(0o500)
    try:
        with pytest.raises(MessageQueueError) as caught:
            QueueManager.open(_config(broker, home))
        assert str(home) in str(caught.value) and "KMQ_HOME" in (caught.value.hint or "")
    finally:
        home.chmod(0o700)


def test_cli_reports_an_unwritable_home_in_one_line(broker: BrokerEndpoint, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for name in ("KMQ_CONFIG", "KMQ_DIRECTORY_URL", "KMQ_QUEUE_MANAGER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    env = {"KMQ_HOME": str(blocker / "home"), "KMQ_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "KMQ_QUEUE_MANAGER": f"fh-{uuid.uuid4().hex[:8]}"}
    result = CliRunner().invoke(app, ["send", r".\private$\x", "--body", "hello"], env=env)
    output = result.output + (getattr(result, "stderr", "") or "")
    assert result.exit_code == 1, output
    assert "Traceback" not in output
    assert str(blocker) in output.replace("\n", "") and "hint" in output


class _FullDisk:
    """A SQLite connection whose writes fail as on a full disk (SQLITE_FULL)."""

    def __init__(self, connection: sqlite3.Connection):
        self._connection = connection

    def execute(self, sql: str, *args: object):
        if sql.lstrip().upper().startswith("INSERT"):
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorcode = 13  # SQLITE_FULL
            raise error
        return self._connection.execute(sql, *args)

    def __getattr__(self, name: str) -> object:  # in_transaction, commit, ...: the real ones
        return getattr(self._connection, name)


def test_recoverable_send_on_a_full_disk_fails_clearly_and_sends_nothing(
        broker: BrokerEndpoint, kmq_home: Path) -> None:
    with QueueManager.open(_config(broker, kmq_home)) as qm:
        queue = qm.create_queue(r".\private$\full")
        store = qm.transmitter.outgoing
        real = store._conn
        store._conn = _FullDisk(real)
        try:
            with pytest.raises(MessageQueueError) as caught:
                queue.send(Message(body=b"must not go", delivery=Delivery.RECOVERABLE))
        finally:
            store._conn = real
        assert str(store.path) in str(caught.value)
        assert "full" in (caught.value.hint or "") and "free space" in caught.value.hint
        # Not stored, so not sent: the application was told, and nothing arrives.
        with pytest.raises(ReceiveTimeout):
            queue.receive(timeout=0.5)
        assert store.count() == 0
        # Space freed: the next send works without reopening anything.
        queue.send(Message(body=b"after", delivery=Delivery.RECOVERABLE), wait=True)
        assert queue.receive(timeout=10).body == b"after"
