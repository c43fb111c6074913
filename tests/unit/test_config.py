"""KmqConfig: precedence (overrides > environment > kmq.toml > defaults) and clear errors."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import pytest

from facade.config import (
    DEFAULT_MAX_SEND_BYTES,
    DEFAULT_MAX_SEND_FANOUT,
    DEFAULT_BASE_DN,
    DEFAULT_DIRECTORY_TIMEOUT,
    DEFAULT_MIN_INSYNC_REPLICAS,
    DEFAULT_REPLICATION_FACTOR,
    WORKGROUP_URL,
    DirectorySettings,
    KmqConfig,
)
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
        '[kafka]\n"security.protocol" = "SASL_SSL"\n"sasl.mechanism" = "PLAIN"\n'
        '"sasl.username" = "u"\n"sasl.password" = "p"\n'
    )
    config = KmqConfig.load({"KMQ_BOOTSTRAP_SERVERS": "kafka2:9092", "KMQ_HOME": str(tmp_path)})
    assert config.bootstrap_servers == "kafka2:9092"
    assert config.queue_manager == "qm-toml"
    assert config.directory.url == "ldap://ldap.example:389"
    assert config.directory.bind_dn == "cn=admin"
    assert config.directory.starttls is True
    assert not config.directory.is_embedded
    assert config.kafka_options == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                    "sasl.username": "u", "sasl.password": "p"}


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
        ('[directory]\nurl = "http://x"\n', "is not ldap://, ldaps://, ldapi://, embedded:PATH"),
        ('[directory]\nsasl_mechanism = "GSSAPI"\n', "SASL mechanism 'GSSAPI' in"),
        ("[directory]\ntimeout = 0\n", "must be a positive number of seconds"),
        ("[directory]\ntimeout = -1.5\n", "must be a positive number of seconds"),
        ("[directory]\ntimeout = true\n", "directory.timeout in"),
        ("[directory]\nca_file = 3\n", "ca_file in"),
        ('[directory]\ncafile = "/x"\n', "unknown configuration key(s) cafile"),
        ('principal = ""\n', "principal in"),
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


def test_directory_tls_and_sasl_from_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kmq.toml").write_text(
        '[directory]\nurl = "ldaps://ldap.example:636"\nca_file = "/etc/kmq/ca.pem"\n'
        'cert_file = "/etc/kmq/client.pem"\nkey_file = "/etc/kmq/client.key"\n'
        'sasl_mechanism = "external"\ntimeout = 2\n'
    )
    directory = KmqConfig.load({"KMQ_HOME": str(tmp_path)}).directory
    assert directory.ca_file == "/etc/kmq/ca.pem"
    assert directory.cert_file == "/etc/kmq/client.pem"
    assert directory.key_file == "/etc/kmq/client.key"
    assert directory.sasl_mechanism == "EXTERNAL"  # validated case-insensitively, stored upper
    assert directory.timeout == 2.0 and isinstance(directory.timeout, float)


def test_directory_tls_and_sasl_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kmq.toml").write_text('[directory]\nca_file = "/toml/ca.pem"\ntimeout = 9\n')
    directory = KmqConfig.load(
        {
            "KMQ_HOME": str(tmp_path),
            "KMQ_DIRECTORY_URL": "ldap://ldap.example:389",
            "KMQ_DIRECTORY_CA_FILE": "/env/ca.pem",
            "KMQ_DIRECTORY_CERT_FILE": "/env/c.pem",
            "KMQ_DIRECTORY_KEY_FILE": "/env/c.key",
            "KMQ_DIRECTORY_SASL_MECHANISM": "Digest-MD5",
            "KMQ_DIRECTORY_TIMEOUT": "0.5",
        }
    ).directory
    assert (directory.ca_file, directory.cert_file, directory.key_file) == (
        "/env/ca.pem",
        "/env/c.pem",
        "/env/c.key",
    )
    assert directory.sasl_mechanism == "DIGEST-MD5"
    assert directory.timeout == 0.5


def test_directory_defaults_for_tls_and_sasl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    directory = KmqConfig.load({"KMQ_HOME": str(tmp_path)}).directory
    assert directory.ca_file is directory.cert_file is directory.key_file is None
    assert directory.sasl_mechanism is None
    assert directory.timeout == DEFAULT_DIRECTORY_TIMEOUT == 5.0


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("KMQ_DIRECTORY_SASL_MECHANISM", "GSSAPI", "SASL mechanism 'GSSAPI' in the environment"),
        ("KMQ_DIRECTORY_TIMEOUT", "soon", "KMQ_DIRECTORY_TIMEOUT in the environment"),
        ("KMQ_DIRECTORY_TIMEOUT", "0", "must be a positive number of seconds"),
        ("KMQ_DIRECTORY_TIMEOUT", "nan", "must be a positive number of seconds"),
        ("KMQ_DIRECTORY_TIMEOUT", "inf", "must be a positive number of seconds"),
    ],
)
def test_bad_directory_settings_in_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        KmqConfig.load({variable: value})
    assert expected in str(info.value)
    assert "hint:" in str(info.value)


@pytest.mark.parametrize("url", ["none", "NONE", " None "])
def test_workgroup_mode_means_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    directory = KmqConfig.load({"KMQ_DIRECTORY_URL": url}).directory
    assert directory.is_workgroup
    assert not directory.is_embedded
    assert directory.url == WORKGROUP_URL


def test_workgroup_mode_from_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kmq.toml").write_text('[directory]\nurl = "none"\n')
    directory = KmqConfig.load({"KMQ_HOME": str(tmp_path)}).directory
    assert directory.is_workgroup and not directory.is_embedded


def test_workgroup_property_on_plain_settings() -> None:
    assert DirectorySettings(url="None").is_workgroup
    assert not DirectorySettings(url="None").is_embedded
    assert not DirectorySettings().is_workgroup
    assert DirectorySettings().is_embedded
    assert not DirectorySettings(url="ldap://127.0.0.1:389").is_workgroup


def test_ldapi_url_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = "ldapi://%2Fvar%2Frun%2Fslapd%2Fldapi"
    directory = KmqConfig.load({"KMQ_DIRECTORY_URL": url}).directory
    assert directory.url == url and not directory.is_embedded and not directory.is_workgroup


def test_principal_defaults_to_the_login_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert KmqConfig.load({}).principal == getpass.getuser()


def test_principal_from_toml_environment_and_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kmq.toml").write_text('principal = "alice"\n')
    assert KmqConfig.load({"KMQ_HOME": str(tmp_path)}).principal == "alice"
    assert KmqConfig.load({"KMQ_HOME": str(tmp_path), "KMQ_PRINCIPAL": "bob"}).principal == "bob"
    assert KmqConfig.load({"KMQ_PRINCIPAL": "bob"}, principal="carol").principal == "carol"


def test_principal_without_a_login_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_user() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert KmqConfig().principal == f"uid-{os.getuid()}"


# --- topic replication settings ------------------------------------------------------------------


def test_replication_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = KmqConfig.load({})
    assert config.replication_factor == DEFAULT_REPLICATION_FACTOR == 3
    assert config.min_insync_replicas is None
    assert config.effective_min_insync_replicas == DEFAULT_MIN_INSYNC_REPLICAS == 2


def test_replication_from_toml_environment_and_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kmq.toml").write_text("replication_factor = 5\nmin_insync_replicas = 3\n")
    config = KmqConfig.load({})
    assert (config.replication_factor, config.effective_min_insync_replicas) == (5, 3)
    config = KmqConfig.load({"KMQ_REPLICATION_FACTOR": "4", "KMQ_MIN_INSYNC_REPLICAS": " 2 "})
    assert (config.replication_factor, config.effective_min_insync_replicas) == (4, 2)
    assert KmqConfig.load({}, replication_factor=6).replication_factor == 6


def test_min_insync_replicas_follows_a_smaller_replication_factor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = KmqConfig.load({"KMQ_REPLICATION_FACTOR": "1"})
    assert (config.replication_factor, config.effective_min_insync_replicas) == (1, 1)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"KMQ_REPLICATION_FACTOR": "0"}, "KMQ_REPLICATION_FACTOR in the environment must be a "
                                          "whole number >= 1, not '0'"),
        ({"KMQ_REPLICATION_FACTOR": "three"}, "KMQ_REPLICATION_FACTOR in the environment"),
        ({"KMQ_REPLICATION_FACTOR": "2.5"}, "KMQ_REPLICATION_FACTOR in the environment"),
        ({"KMQ_MIN_INSYNC_REPLICAS": "-1"}, "KMQ_MIN_INSYNC_REPLICAS in the environment must be"),
        ({"KMQ_REPLICATION_FACTOR": "2", "KMQ_MIN_INSYNC_REPLICAS": "3"},
         "KMQ_MIN_INSYNC_REPLICAS (3) in the environment is larger than "
         "KMQ_REPLICATION_FACTOR (2)"),
    ],
)
def test_bad_replication_settings_in_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: dict, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        KmqConfig.load(environ)
    assert expected in str(info.value)
    assert info.value.hint


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("replication_factor = true\n", "replication_factor in "),
        ('replication_factor = "3"\n', None),
        ("replication_factor = 0\n", "must be a whole number >= 1, not 0"),
        ("min_insync_replicas = 1.5\n", "min_insync_replicas in "),
        ("replication_factor = 2\nmin_insync_replicas = 3\n",
         "min_insync_replicas (3) in "),
    ],
)
def test_bad_replication_settings_in_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str, expected: str | None
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kmq.toml").write_text(toml)
    if expected is None:  # a quoted number is read like the environment's text
        assert KmqConfig.load({}).replication_factor == 3
        return
    with pytest.raises(ConfigurationError) as info:
        KmqConfig.load({})
    assert expected in str(info.value) and "kmq.toml" in str(info.value)


def test_bad_replication_override_is_refused(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="replication_factor"):
        KmqConfig.load({}, replication_factor=0)
    with pytest.raises(ConfigurationError, match="min_insync_replicas"):
        KmqConfig(replication_factor=1, min_insync_replicas=2)


# --- bounds of a send to several queues ----------------------------------------------------------


def test_send_bounds_defaults_toml_environment_and_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = KmqConfig.load({})
    assert (config.max_send_fanout, config.max_send_bytes) == (
        DEFAULT_MAX_SEND_FANOUT, DEFAULT_MAX_SEND_BYTES) == (1000, 64 * 1024 * 1024)
    (tmp_path / "kmq.toml").write_text("max_send_fanout = 50\nmax_send_bytes = 1048576\n")
    config = KmqConfig.load({})
    assert (config.max_send_fanout, config.max_send_bytes) == (50, 1048576)
    config = KmqConfig.load({"KMQ_MAX_SEND_FANOUT": "7", "KMQ_MAX_SEND_BYTES": " 4096 "})
    assert (config.max_send_fanout, config.max_send_bytes) == (7, 4096)
    assert KmqConfig.load({}, max_send_bytes=10).max_send_bytes == 10


@pytest.mark.parametrize(
    ("environ", "toml", "expected"),
    [
        ({"KMQ_MAX_SEND_FANOUT": "0"}, "", "KMQ_MAX_SEND_FANOUT in the environment must be a "
                                           "whole number >= 1, not '0'"),
        ({"KMQ_MAX_SEND_BYTES": "64MiB"}, "", "KMQ_MAX_SEND_BYTES in the environment"),
        ({}, "max_send_bytes = 1.5\n", "max_send_bytes in "),
        ({}, "max_send_fanout = true\n", "max_send_fanout in "),
    ],
)
def test_bad_send_bounds_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     environ: dict, toml: str, expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    if toml:
        (tmp_path / "kmq.toml").write_text(toml)
    with pytest.raises(ConfigurationError) as info:
        KmqConfig.load(environ)
    assert expected in str(info.value)
    assert "max_send_bytes" in (info.value.hint or "")
    with pytest.raises(ConfigurationError, match="max_send_fanout"):
        KmqConfig(max_send_fanout=0)
