"""An unreachable broker gives one error line at once, not a flood of librdkafka logs.

No broker is needed: the "brokers" here are a closed port and a socket that accepts connections
and closes them (so librdkafka retries and logs, as it would against a dead broker).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from facade.errors import BrokerUnavailable
from facade.kafka.librdkafka import LIBRDKAFKA_LOG, KafkaSession, refused_bootstrap_servers

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def hang_up_server() -> Iterator[str]:
    """A TCP server that accepts each connection and closes it at once."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()


def test_refused_servers_are_named() -> None:
    port = _closed_port()
    reason = refused_bootstrap_servers(f"127.0.0.1:{port},PLAINTEXT://127.0.0.1:{port}")
    assert reason == (f"127.0.0.1:{port}: connection refused; "
                      f"PLAINTEXT://127.0.0.1:{port}: connection refused")


def test_a_server_that_accepts_is_left_to_the_client(hang_up_server: str) -> None:
    port = _closed_port()
    assert refused_bootstrap_servers(f"127.0.0.1:{port},{hang_up_server}") is None
    assert refused_bootstrap_servers("not-a-host-port") is None


def test_cli_fails_fast_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KMQ_HOME": str(tmp_path),
           "KMQ_BOOTSTRAP_SERVERS": f"127.0.0.1:{_closed_port()}", "KMQ_QUEUE_MANAGER": "logs"}
    env.pop("KMQ_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "facade.cli", "queue", "list"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr  # the error and its hint
    assert "refused the connection" in lines[0] and "FAIL" not in done.stderr


def test_librdkafka_logs_go_to_python_logging(hang_up_server: str,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler, level = Keep(), LIBRDKAFKA_LOG.level
    LIBRDKAFKA_LOG.addHandler(handler)
    LIBRDKAFKA_LOG.setLevel(logging.DEBUG)
    try:
        session = KafkaSession(hang_up_server)
        with pytest.raises(BrokerUnavailable, match="did not answer"):
            session.ping(timeout=1.0)
        session.admin.poll(0)  # logs are served by the client's poll
        session.close()
    finally:
        LIBRDKAFKA_LOG.removeHandler(handler)
        LIBRDKAFKA_LOG.setLevel(level)
    # Nothing of this client's written straight to stderr (a client another test leaked may
    # write there: only lines about this test's server count).
    straight = [line for line in capfd.readouterr().err.splitlines() if hang_up_server in line]
    assert not straight
    assert records, "librdkafka logged nothing through Python logging"


def test_quiet_by_default() -> None:
    assert not LIBRDKAFKA_LOG.isEnabledFor(logging.CRITICAL)
