"""Fixtures of the fault-injection suite (``tests/faults``).

**Time budget: 90 s for the whole suite** on a 2-core machine, because it runs in the test
command on every CI run. Every test here is bounded: each gets a ``pytest-timeout`` of
:data:`TEST_TIMEOUT` s unless it sets its own, worker processes stop on a stop file or after an
idle period, and brokers and directories are private processes torn down by their fixtures.
The terminal summary prints the suite's total time against the budget, and the load test's
figures. A test marked ``outside_budget`` still runs with the suite (``make test``, ``-m
faults``), but its time is reported apart from the budget's total (see ``docs/performance.md``).

What the suite proves, and the model behind its checker, is in :mod:`tests.faults.history`
and ``docs/performance.md`` ("Fault-injection suite"). Tests that take the broker away use a
:class:`~tests.support.kafka.PrivateBroker` of their own module; the others share the session
broker (``tests/conftest.py``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from facade.config import KmqConfig
from facade.manager import QueueManager
from tests.faults.history import History, history_dir
from tests.support.kafka import BrokerEndpoint, PrivateBroker

#: Seconds the whole suite may take on the reference machine (2 cores).
BUDGET_SECONDS = 90.0
#: Default per-test timeout (pytest-timeout) in this directory.
TEST_TIMEOUT = 60.0

_FAULTS_DIR = Path(__file__).parent
_durations: dict[str, float] = {}
#: Node ids of the tests marked ``outside_budget``.
_outside: set[str] = set()
#: Lines the tests want printed in the terminal summary (load figures, what was lost and why).
REPORT: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "faults: fault-injection suite (tests/faults); bounded "
                                       f"to {BUDGET_SECONDS:g} s in total")
    config.addinivalue_line("markers", "outside_budget: a fault test that runs with the suite "
                                       "but whose time is not counted against its budget")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _FAULTS_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.faults)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/faults/" in report.nodeid.replace("\\", "/"):
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration
        if "outside_budget" in report.keywords:
            _outside.add(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's own type
    if not _durations:
        return
    total = sum(t for node, t in _durations.items() if node not in _outside)
    verdict = "within" if total <= BUDGET_SECONDS else "OVER"
    terminalreporter.write_sep("-", "fault-injection suite")
    terminalreporter.write_line(f"tests/faults: {total:.1f} s for "
                                f"{len(_durations) - len(_outside)} tests, {verdict} the "
                                f"{BUDGET_SECONDS:g} s budget")
    if _outside:
        extra = sum(_durations[node] for node in _outside)
        terminalreporter.write_line(f"outside the budget: {extra:.1f} s for {len(_outside)} "
                                    f"tests ({total + extra:.1f} s in all)")
    for line in REPORT:
        terminalreporter.write_line(line)


def report(line: str) -> None:
    """Add a line to the suite's terminal summary (and print it, for ``-s`` runs)."""
    REPORT.append(line)
    print(line)


@pytest.fixture
def fault_config(broker: BrokerEndpoint, kmq_home: Path) -> KmqConfig:
    """Configuration of a fresh queue manager on the session broker."""
    return KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                          queue_manager=f"fq-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def fault_qm(fault_config: KmqConfig) -> Iterator[QueueManager]:
    with QueueManager.open(fault_config) as manager:
        yield manager


@pytest.fixture
def history(tmp_path: Path) -> History:
    return History()


@pytest.fixture
def history_path(tmp_path: Path) -> Path:
    """Directory for the JSON-lines files of worker processes."""
    return history_dir(tmp_path)


@pytest.fixture(scope="module")
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    """A broker of this module's own, which its tests may stop and restart."""
    broker = PrivateBroker(tmp_path_factory.mktemp("private-broker"))
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(autouse=True)
def _no_leftover_workers() -> Iterator[None]:
    """Worker processes a test leaves running (it failed before stopping them) are killed when
    it ends, so they do not load the machine for the tests after it."""
    yield
    from tests.faults.workers import kill_leftovers

    kill_leftovers()


def eventually(check, timeout: float = 10.0, interval: float = 0.05) -> bool:  # noqa: ANN001
    """Poll ``check()`` until it is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return bool(check())
