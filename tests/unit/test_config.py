"""KmqConfig: precedence (overrides > environment > kmq.toml > defaults) and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from facade.config import DEFAULT_BASE_DN, KmqConfig
from facade.errors import ConfigurationError


def test_defaults_use_the_dev_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = KmqConfig.load({"KMQ_HOME": str(tmp_path)})
    assert config.bootstrap_servers is None
    assert config.directory.is_embedded
    assert config.embedded_directory_path == tmp_path / "directory.json"
    assert config.directory.base_dn == DEFAULT_BASE_DN
    assert config.home == tmp_path
    assert config.queue_manager and config.queue_manager == config.queue_manager.lower()


def test_environment_overrides_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kmq.toml").write_text(
        'bootstrap_servers = "kafka1:9092"\nqueue_manager = "QM-Toml"\n'
        '[directory]\nurl = "ldap://ldap.example:389"\nbind_dn = "cn=admin"\nstarttls = true\n'
        '[kafka]\n"security.protocol" = "SASL_SSL"\n'
    )
    config = KmqConfig.load({"KMQ_BOOTSTRAP_SERVERS": "kafka2:9092", "KMQ_HOME": str(tmp_path)})
    assert config.bootstrap_servers == "kafka2:9092"
    assert config.queue_manager == "qm-toml"
    assert config.directory.url == "ldap://ldap.example:389"
    assert config.directory.bind_dn == "cn=admin"
    assert config.directory.starttls is True
    assert not config.directory.is_embedded
    assert config.kafka_options == {"security.protocol": "SASL_SSL"}


def test_keyword_overrides_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = KmqConfig.load({"KMQ_BOOTSTRAP_SERVERS": "a:1"}, bootstrap_servers="b:2")
    assert config.bootstrap_servers == "b:2"


def test_embedded_url_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = KmqConfig.load({"KMQ_DIRECTORY_URL": f"embedded:{tmp_path}/d.json"})
    assert config.directory.is_embedded
    assert config.embedded_directory_path == tmp_path / "d.json"


def test_password_is_not_in_repr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = KmqConfig.load({"KMQ_DIRECTORY_PASSWORD": "s3cret"})
    assert config.directory.password == "s3cret"
    assert "s3cret" not in repr(config)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('bootstrap_server = "x:1"\n', "unknown configuration key(s) bootstrap_server"),
        ('[directory]\nurl = "http://x"\n', "is not ldap://, ldaps:// or embedded:PATH"),
        ('[directory]\nuri = "ldap://x"\n', "unknown configuration key(s) uri"),
        ("bootstrap_servers = 5\n", "bootstrap_servers in"),
        ('queue_manager = "a\\\\b"\n', "forbids in names"),
        ('[directory]\nstarttls = "maybe"\n', "must be true or false"),
        ("this is = not toml", "cannot read configuration file"),
    ],
)
def test_bad_toml_names_the_key_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kmq.toml").write_text(toml)
    with pytest.raises(ConfigurationError) as info:
        KmqConfig.load({})
    assert expected in str(info.value)


def test_missing_kmq_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a file"):
        KmqConfig.load({"KMQ_CONFIG": str(tmp_path / "nope.toml")})


def test_bad_directory_url_in_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="in the environment"):
        KmqConfig.load({"KMQ_DIRECTORY_URL": "ftp://x"})
