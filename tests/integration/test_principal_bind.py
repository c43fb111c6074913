"""A directory bind identity counts as authenticated only once the LDAP server accepted the bind
(docs/design.md, "Security model": who the caller is)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from facade.cli import app
from facade.config import DirectorySettings, KmqConfig
from facade.errors import ConfigurationError
from facade.manager import QueueManager
from facade.security.principal import PrincipalSource
from tests.support.kafka import BrokerEndpoint
from tests.support.slapd import SlapdServer

pytestmark = pytest.mark.integration

#: Nothing listens there: every bind fails with "connection refused", at once.
NOBODY = DirectorySettings(url="ldap://127.0.0.1:1", bind_dn="alice", password="wrong",
                           timeout=2.0)


def _mapped(broker: BrokerEndpoint) -> str:
    """The session broker's address in its IPv4-mapped IPv6 form (``[::ffff:127.0.0.1]:p``)."""
    host, port = broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
    assert host == "127.0.0.1", f"the test needs a broker on 127.0.0.1, not {host}"
    return f"[::ffff:{host}]:{port}"


def _config(bootstrap_servers: str, directory: DirectorySettings) -> KmqConfig:
    return KmqConfig.load(bootstrap_servers=bootstrap_servers, directory=directory,
                          queue_manager=f"bind-{uuid.uuid4().hex[:8]}")


def test_a_bind_to_nothing_is_not_reported_as_authenticated(broker: BrokerEndpoint,
                                                             kmq_home: Path) -> None:
    """The probe: an LDAP URL where nothing listens, a wrong password, and the broker reached
    as ``[::ffff:127.0.0.1]``, which is loopback (the local development mode)."""
    with QueueManager.open(_config(_mapped(broker), NOBODY)) as qm:
        assert qm.principal.name == "alice"
        assert not qm.principal.authenticated
        assert "authenticated by the LDAP server" not in qm.principal.source.value
        assert qm.principal.source is PrincipalSource.DIRECTORY_BIND_FAILED


def test_qm_info_shows_the_failed_bind(broker: BrokerEndpoint, kmq_home: Path) -> None:
    env = {"KMQ_BOOTSTRAP_SERVERS": _mapped(broker), "KMQ_DIRECTORY_URL": NOBODY.url or "",
           "KMQ_DIRECTORY_BIND_DN": "alice", "KMQ_DIRECTORY_PASSWORD": "wrong",
           "KMQ_DIRECTORY_TIMEOUT": "2", "KMQ_QUEUE_MANAGER": f"bind-{uuid.uuid4().hex[:8]}"}
    result = CliRunner().invoke(app, ["qm", "info", "--json"], env=env)
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["principal"] == "alice"
    assert "authenticated by the LDAP server" not in info["principal_source"]
    assert info["principal_source"] == PrincipalSource.DIRECTORY_BIND_FAILED.value


def test_slapd_proves_the_bind_identity(broker: BrokerEndpoint, kmq_home: Path,
                                        slapd_server: SlapdServer) -> None:
    good = DirectorySettings(url=slapd_server.url, base_dn=slapd_server.base_dn,
                             bind_dn=slapd_server.bind_dn, password=slapd_server.password)
    with QueueManager.open(_config(broker.bootstrap_servers, good)) as qm:
        assert (qm.principal.name, qm.principal.source) == (slapd_server.bind_dn,
                                                            PrincipalSource.DIRECTORY_BIND)
        assert qm.principal.authenticated
    wrong = dataclasses.replace(good, password="not-the-password")
    with QueueManager.open(_config(broker.bootstrap_servers, wrong)) as qm:
        assert not qm.principal.authenticated
        assert qm.principal.source is PrincipalSource.DIRECTORY_BIND_FAILED
        with pytest.raises(ConfigurationError, match="invalidCredentials"):
            qm.directory  # noqa: B018 - still refused at use
