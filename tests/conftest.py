"""Session fixtures: a real broker process, directories, and an isolated KMQ_HOME per test.

Broker order: ``KMQ_BOOTSTRAP_SERVERS``; testcontainers Kafka when a Docker engine answers;
Apache Kafka from kmq's jar cache on free loopback ports (``tests/support/kafka.py``). Directory kinds: the embedded store
(always) and a throwaway real slapd on loopback (when Debian's slapd is installed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from facade.config import DirectorySettings
from tests.support.kafka import BrokerEndpoint, provide_broker
from tests.support.slapd import SlapdServer, slapd_available


#: Fixtures that start a broker or slapd process (directly or through the fixtures they use).
_PROCESS_FIXTURES = frozenset({"broker", "slapd_server", "private_broker"})
#: Names a test module uses when it starts a broker or slapd itself.
_PROCESS_STARTERS = ("LocalKafka", "DevStack", "provide_broker", "SlapdServer", "PrivateBroker",
                     '"dev", "up"')


def starts_a_process(item: pytest.Item) -> bool:
    """Whether a collected test starts a broker or slapd: it uses a fixture that does (the
    ``slapd`` variant of ``directory_settings`` included), or its module starts one itself."""
    if _PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("directory_settings") == "slapd":
        return True
    source = _module_source(str(item.fspath))
    return any(name in source for name in _PROCESS_STARTERS)


_SOURCES: dict[str, str] = {}


def _module_source(path: str) -> str:
    if path not in _SOURCES:
        _SOURCES[path] = Path(path).read_text() if path.endswith(".py") else ""
    return _SOURCES[path]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that starts a broker or slapd ``integration``, so
    ``pytest -m "not integration"`` (``make test-unit``) starts neither."""
    for item in items:
        if item.get_closest_marker("integration") is None and starts_a_process(item):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerEndpoint]:
    """A Kafka broker for the whole test session (see :func:`tests.support.kafka.provide_broker`)."""
    with provide_broker() as (bootstrap_servers, kind):
        yield BrokerEndpoint(bootstrap_servers, kind)


@pytest.fixture
def kmq_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``KMQ_HOME`` for one test; no kmq.toml or ambient KMQ_* settings leak in."""
    home = tmp_path / "kmq-home"
    home.mkdir()
    for name in ("KMQ_CONFIG", "KMQ_DIRECTORY_URL", "KMQ_QUEUE_MANAGER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KMQ_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture(scope="session")
def slapd_server() -> Iterator[SlapdServer]:
    """A throwaway real OpenLDAP slapd on 127.0.0.1 with kmq's schema from ``deploy/ldap``."""
    reason = slapd_available()
    if reason:
        pytest.skip(reason)
    with SlapdServer() as server:
        yield server


@pytest.fixture(params=["embedded", "slapd"])
def directory_settings(request: pytest.FixtureRequest, tmp_path: Path) -> DirectorySettings:
    """Directory settings for each backend kind; directory suites run once per kind."""
    if request.param == "embedded":
        return DirectorySettings(url=f"embedded:{tmp_path / 'directory.json'}")
    server: SlapdServer = request.getfixturevalue("slapd_server")
    return DirectorySettings(
        url=server.url, base_dn=server.base_dn, bind_dn=server.bind_dn, password=server.password
    )
