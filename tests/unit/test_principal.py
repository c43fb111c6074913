"""The caller's principal and its source; Kafka TLS/SASL settings checked at load."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from facade.config import DirectorySettings, KmqConfig
from facade.errors import ConfigurationError
from facade.security.locality import is_loopback_host, is_loopback_server
from facade.manager import QueueManager
from facade.kafka.memorykafka import MemoryKafkaSession
from facade.security.principal import PrincipalSource, is_development_mode, resolve_principal

REMOTE = "kafka-1.example.com:9093,kafka-2.example.com:9093"
SASL = {"KMQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KMQ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "KMQ_KAFKA_SASL_USERNAME": "svc-orders", "KMQ_KAFKA_SASL_PASSWORD": "s3cret"}


def _config(env: dict[str, str], **overrides: object) -> KmqConfig:
    return KmqConfig.load(env, **overrides)


def _certificate(tmp_path: Path, common_name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kmq")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "client.pem", tmp_path / "client.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.mark.parametrize("servers", [None, "127.0.0.1:9092", "localhost:9092,[::1]:9093",
                                     "[::ffff:127.0.0.1]:9092", "127.0.0.2:9092,[::ffff:7f00:1]:1"])
def test_declared_principal_in_development_mode(servers: str | None) -> None:
    config = _config({"KMQ_PRINCIPAL": "alice"}, bootstrap_servers=servers)
    assert is_development_mode(config)
    principal = resolve_principal(config)
    assert (principal.name, principal.source) == ("alice", PrincipalSource.DECLARED)
    assert not principal.authenticated


@pytest.mark.parametrize("servers", [REMOTE, "[::ffff:10.0.0.1]:9092", "127.0.0.1:9092,k:9092",
                                     "localhost.example.com:9092", "[::]:9092", "0.0.0.0:9092"])
def test_declared_principal_refused_on_a_remote_cluster(servers: str) -> None:
    config = _config({"KMQ_PRINCIPAL": "alice"}, bootstrap_servers=servers)
    assert not is_development_mode(config)
    with pytest.raises(ConfigurationError, match="development mode") as refused:
        resolve_principal(config)
    assert "KMQ_KAFKA_SASL_USERNAME" in (refused.value.hint or "")


@pytest.mark.parametrize(("host", "local"), [
    ("localhost", True), ("LOCALHOST", True), ("127.0.0.1", True), ("127.255.0.9", True),
    ("::1", True), ("[::1]", True), ("::ffff:127.0.0.1", True), ("[::FFFF:127.0.0.1]", True),
    ("::ffff:10.0.0.1", False), ("10.0.0.1", False), ("::", False), ("kafka.example", False),
    ("localhost.", False), ("", False),
])
def test_loopback_is_decided_the_same_way_for_every_spelling(host: str, local: bool) -> None:
    """One rule for every locality decision: the IPv4-mapped form of loopback is loopback."""
    assert is_loopback_host(host) is local
    assert is_loopback_server(f"[{host.strip('[]')}]:9092" if ":" in host else f"{host}:9092") \
        is local


def test_kafka_sasl_user_is_the_principal() -> None:
    config = _config(SASL, bootstrap_servers=REMOTE)
    assert config.kafka_options["sasl.username"] == "svc-orders"  # passed to librdkafka
    principal = resolve_principal(config)
    assert (principal.name, principal.source) == ("svc-orders", PrincipalSource.KAFKA_SASL)
    assert principal.authenticated


def test_a_declared_principal_may_not_contradict_the_authenticated_one() -> None:
    config = _config({**SASL, "KMQ_PRINCIPAL": "admin"}, bootstrap_servers=REMOTE)
    with pytest.raises(ConfigurationError, match="authenticates as 'svc-orders'"):
        resolve_principal(config)
    same = _config({**SASL, "KMQ_PRINCIPAL": "svc-orders"}, bootstrap_servers=REMOTE)
    assert resolve_principal(same).name == "svc-orders"


def test_kafka_tls_certificate_subject_is_the_principal(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path, "orders-service")
    config = _config({"KMQ_KAFKA_SECURITY_PROTOCOL": "SSL",
                      "KMQ_KAFKA_SSL_CERTIFICATE_LOCATION": str(cert),
                      "KMQ_KAFKA_SSL_KEY_LOCATION": str(key)}, bootstrap_servers=REMOTE)
    principal = resolve_principal(config)
    assert principal.source is PrincipalSource.KAFKA_TLS
    assert principal.name == "O=kmq,CN=orders-service"


def test_directory_bind_is_the_principal() -> None:
    directory = DirectorySettings(url="ldaps://ldap.example.com", bind_dn="uid=bob,dc=kmq",
                                  password="pw")
    config = _config({}, bootstrap_servers=REMOTE, directory=directory)
    principal = resolve_principal(config)
    assert (principal.name, principal.source) == ("uid=bob,dc=kmq",
                                                  PrincipalSource.DIRECTORY_BIND)


#: An LDAP URL where nothing listens: every bind fails (connection refused), at once.
NOBODY = DirectorySettings(url="ldap://127.0.0.1:1", bind_dn="alice", password="wrong",
                           timeout=2.0)


def test_a_failed_directory_bind_opens_no_queue_manager_on_a_remote_cluster(
        kmq_home: Path) -> None:
    """The bind identity is proven by the LDAP server's answer, not by the setting."""
    config = _config({}, bootstrap_servers=REMOTE, directory=NOBODY, queue_manager="remote",
                     home=kmq_home)
    with pytest.raises(ConfigurationError, match="directory bind as 'alice' did not succeed") \
            as refused:
        QueueManager.open(config, session=MemoryKafkaSession()).close()
    assert "127.0.0.1:1" in refused.value.message and "not local" in refused.value.message


def test_a_failed_directory_bind_is_not_authenticated_in_development_mode(
        kmq_home: Path) -> None:
    config = _config({}, bootstrap_servers="[::ffff:127.0.0.1]:9092", directory=NOBODY,
                     queue_manager="local", home=kmq_home)
    with QueueManager.open(config, session=MemoryKafkaSession()) as qm:
        assert qm.principal.name == "alice"
        assert qm.principal.source is PrincipalSource.DIRECTORY_BIND_FAILED
        assert not qm.principal.authenticated
        # As a declared name in this mode: the first principal to open it owns it.
        assert qm.queue_manager_security().owner == "alice"


@pytest.mark.parametrize(("env", "message"), [
    ({"KMQ_KAFKA_SECURITY_PROTOCOL": "TLS"}, "not a Kafka security protocol"),
    ({"KMQ_KAFKA_SASL_USERNAME": "u", "KMQ_KAFKA_SASL_PASSWORD": "p"}, "would be ignored"),
    ({"KMQ_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KMQ_KAFKA_SSL_CA_LOCATION": "/etc/hosts"},
     "would be ignored"),
    ({"KMQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "no sasl.mechanism"),
    ({"KMQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KMQ_KAFKA_SASL_MECHANISM": "MAGIC"},
     "not one librdkafka supports"),
    ({**SASL, "KMQ_KAFKA_SASL_PASSWORD": ""}, "sasl.password missing"),
    ({"KMQ_KAFKA_SECURITY_PROTOCOL": "SSL", "KMQ_KAFKA_SSL_CERTIFICATE_LOCATION": "/etc/hosts"},
     "needs both"),
    ({"KMQ_KAFKA_SECURITY_PROTOCOL": "SSL", "KMQ_KAFKA_SSL_CA_LOCATION": "/no/such.pem"},
     "not a file"),
])
def test_bad_or_half_given_kafka_security_settings_are_refused(env: dict[str, str],
                                                                message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as refused:
        _config(env)
    assert refused.value.hint


def test_kafka_security_from_toml_is_checked_too(tmp_path: Path) -> None:
    (tmp_path / "kmq.toml").write_text('[kafka]\n"sasl.username" = "u"\n')
    with pytest.raises(ConfigurationError, match="would be ignored"):
        KmqConfig.load({"KMQ_CONFIG": str(tmp_path / "kmq.toml")})


def test_a_property_librdkafka_does_not_know_is_a_configuration_error() -> None:
    """Not "the broker did not answer": the settings are wrong, and the error says so."""
    from facade.kafka.librdkafka import KafkaSession

    session = KafkaSession("127.0.0.1:1", {"security.protocol": "SSL", "ssl.no.such": "x"})
    with pytest.raises(ConfigurationError, match="ssl.no.such") as refused:
        session.ping(timeout=1)
    assert "KMQ_KAFKA_" in (refused.value.hint or "")
