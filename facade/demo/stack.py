"""Where the demo runs: configured servers, the running dev stack, or a broker it starts itself.

* ``KMQ_BOOTSTRAP_SERVERS`` (or ``kmq.toml``) set: those brokers, and the configured directory.
* Otherwise, a dev stack already running (``kmq dev up``) in ``KMQ_HOME``: that broker.
* Otherwise the embedded defaults: a fresh ``KMQ_HOME`` in a temporary directory, where the
  demo starts a local broker and the embedded directory (``facade.kafka.devstack``), and stops the
  broker at the end, also on an error or Ctrl-C. The temporary home is removed after a
  successful run and kept (for its broker log) after a failed one. ``--keep`` leaves the broker
  running; ``KMQ_HOME=<home> kmq dev down`` stops it later.

Every run uses its own queue-manager name (``demo-<run id>``), so its queues, dead-letter queue
and admin queue are its own, and reruns on the same brokers never mix.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from facade.config import KmqConfig
from facade.kafka.devstack import DevStack
from facade.errors import ConfigurationError

__all__ = ["DemoEnvironment", "demo_environment"]

MODE_CONFIGURED = "configured servers"
MODE_DEV_STACK = "running dev stack"
MODE_STARTED = "local Apache Kafka started by the demo"


@dataclass
class DemoEnvironment:
    """The brokers, directory and queue manager of one run.

    Attributes:
        config (KmqConfig): what the run's QueueManager opens with: ``bootstrap_servers`` is
            always set; ``queue_manager`` is the run's own name.
        mode (str): one of the MODE_* descriptions.
        run_id (str): 8 hex digits naming the run's queue manager and directory objects.
        keep (bool): leave a started broker running at the end.
        failed (bool): set by the caller when the run failed: a started home is then kept.
    """

    config: KmqConfig
    mode: str
    run_id: str
    keep: bool
    failed: bool = False

    @property
    def started(self) -> bool:
        """True when the demo started its own broker (in a temporary KMQ_HOME)."""
        return self.mode == MODE_STARTED

    def describe(self) -> dict[str, str]:
        """Where the run happens, for the summary."""
        return {"mode": self.mode, "bootstrap_servers": self.config.bootstrap_servers or "",
                "queue_manager": self.config.queue_manager, "kmq_home": str(self.config.home)}


@contextmanager
def demo_environment(keep: bool = False, base: KmqConfig | None = None) -> Iterator[DemoEnvironment]:
    """Choose (or start) the brokers for a run; stop what was started when the block ends.

    Args:
        keep (bool): leave a broker the demo started running.
        base (KmqConfig | None): the configuration to start from; default ``KmqConfig.load()``.

    Raises:
        ConfigurationError: workgroup mode (the demo needs a directory), or no broker binary to
            start.
        BrokerUnavailable: the local broker did not start.
    """
    base = base or KmqConfig.load()
    if base.directory.is_workgroup:
        raise ConfigurationError(
            "the demo needs a directory (public queues, aliases, distribution lists), but "
            "KMQ_DIRECTORY_URL=none is workgroup mode",
            hint="unset KMQ_DIRECTORY_URL to use the embedded directory")
    run_id = uuid.uuid4().hex[:8]
    base = dataclasses.replace(base, queue_manager=f"demo-{run_id}")
    if base.bootstrap_servers:
        yield DemoEnvironment(base, MODE_CONFIGURED, run_id, keep)
        return
    running = DevStack(base).running_broker()
    if running is not None:
        config = dataclasses.replace(base, bootstrap_servers=running.bootstrap_servers)
        yield DemoEnvironment(config, MODE_DEV_STACK, run_id, keep)
        return
    with _started_stack(base, run_id, keep) as environment:
        yield environment


@contextmanager
def _started_stack(base: KmqConfig, run_id: str, keep: bool) -> Iterator[DemoEnvironment]:
    """A local broker and embedded directory in a fresh temporary KMQ_HOME (see module doc)."""
    home = Path(tempfile.mkdtemp(prefix=f"kmq-demo-{run_id}-"))
    config = dataclasses.replace(base, home=home)
    stack = DevStack(config)
    environment = None
    try:
        broker = stack.up().broker
        assert broker is not None  # up() either starts one or raises
        # The replication factor is capped at the cluster's size: one node, one replica.
        environment = DemoEnvironment(
            dataclasses.replace(config, bootstrap_servers=broker.bootstrap_servers),
            MODE_STARTED, run_id, keep)
        yield environment
    finally:
        if not keep:
            stack.down()
            if environment is not None and not environment.failed:
                shutil.rmtree(home, ignore_errors=True)
