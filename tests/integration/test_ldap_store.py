"""LdapDirectoryStore against a real OpenLDAP slapd: MSMQ's Active Directory connection.

Covers what a domain-mode queue manager needs from its directory link: bind and read the base
entries, see another client's writes, fail with MQ_ERROR_NO_DS (DirectoryUnavailable) naming the
URL while the server is down and recover by itself when it is back, reject bad credentials as a
configuration error, bootstrap an empty server (``kmq directory init``), and TLS (StartTLS,
LDAPS) with SASL EXTERNAL (client certificate, ldapi), DIGEST-MD5 and PLAIN binds.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import ldap3
import pytest

from facade.config import DirectorySettings
from facade.directory import (
    Attr,
    EmbeddedDirectoryStore,
    ObjectClass,
    bootstrap_entries,
    computer_dn,
    public_queue_dn,
    queue_manager_dn,
)
from facade.directory.ldap import LdapDirectoryStore
from facade.errors import ConfigurationError, DirectoryUnavailable
from tests.support.slapd import SlapdServer, slapd_available

pytestmark = pytest.mark.integration


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def need_slapd() -> None:
    """Skip (with the fix) when a private slapd cannot run here."""
    reason = slapd_available()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def tls_server() -> Iterator[SlapdServer]:
    """A slapd with a throwaway CA: StartTLS on ``url``, LDAPS, ldapi, SASL mappings."""
    reason = slapd_available()
    if reason:
        pytest.skip(reason)
    with SlapdServer(tls=True, ldapi=True) as server:
        yield server


@pytest.fixture
def private_server(need_slapd: None) -> Iterator[SlapdServer]:
    """A slapd of this test's own, which the test may halt and restart."""
    with SlapdServer() as server:
        yield server


def _settings(server: SlapdServer, **changes: object) -> DirectorySettings:
    """rootdn settings for ``server`` (plain ldap://), with ``changes`` applied."""
    settings = DirectorySettings(
        url=server.url, base_dn=server.base_dn, bind_dn=server.bind_dn, password=server.password
    )
    return replace(settings, **changes)  # type: ignore[arg-type]


def _tls_settings(server: SlapdServer, **changes: object) -> DirectorySettings:
    return _settings(server, ca_file=str(server.ca_file), **changes)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _base_entry_exists(store: LdapDirectoryStore) -> bool:
    with store.read() as conn:
        return bool(conn.search(store.base_dn, "(objectClass=*)", ldap3.BASE, attributes=["1.1"]))


def _who_am_i(store: LdapDirectoryStore) -> str:
    with store.read() as conn:
        return str(conn.extend.standard.who_am_i())


# --- constructing the store (no server needed) -------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (DirectorySettings(), "needs an ldap://, ldaps:// or ldapi:// URL"),
        (DirectorySettings(url="embedded:/tmp/d.json"), "needs an ldap://"),
        (DirectorySettings(url="none"), "needs an ldap://"),
        (DirectorySettings(url="ldap://h:port"), "not usable"),
        (DirectorySettings(url="ldap://h", base_dn=""), "base DN is empty"),
        (DirectorySettings(url="ldap://h", sasl_mechanism="GSSAPI"), "GSSAPI"),
        (DirectorySettings(url="ldap://h", bind_dn="cn=a"), "needs a password"),
        (DirectorySettings(url="ldap://h", sasl_mechanism="plain"), "needs a user name"),
        (DirectorySettings(url="ldaps://h", cert_file="/c.pem"), "both a certificate and a key"),
        (DirectorySettings(url="ldaps://h", ca_file="/nonexistent/ca.pem"), "/nonexistent/ca"),
    ],
)
def test_bad_settings_are_configuration_errors(settings: DirectorySettings, expected: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        LdapDirectoryStore(settings)
    assert expected in str(info.value)


def test_url_and_description_never_show_the_password() -> None:
    store = LdapDirectoryStore(
        DirectorySettings(url="ldap://127.0.0.1:3890/", bind_dn="cn=a", password="s3cret")
    )
    assert store.url == "ldap://127.0.0.1:3890"  # ldap3 cannot parse the trailing slash
    assert store.description == "LDAP directory ldap://127.0.0.1:3890"
    assert "s3cret" not in repr(store) and not store.is_open


def test_both_stores_have_the_same_interface(tmp_path: Path) -> None:
    embedded = EmbeddedDirectoryStore(tmp_path / "directory.json")
    ldap = LdapDirectoryStore(DirectorySettings(url="ldap://127.0.0.1:3890"))
    assert embedded.description == f"embedded directory {tmp_path / 'directory.json'}"
    assert embedded.base_dn == ldap.base_dn == "dc=kmq,dc=local"
    shared = ("open", "close", "read", "write", "initialize", "is_open", "description")
    for name in (*shared, "connection", "__enter__", "__exit__"):
        assert hasattr(type(embedded), name) and hasattr(type(ldap), name), name


def test_a_closed_store_refuses_sections() -> None:
    store = LdapDirectoryStore(DirectorySettings(url="ldap://127.0.0.1:1"))
    with pytest.raises(DirectoryUnavailable, match="not open"), store.read():
        pass


# --- plain LDAP: the session server -----------------------------------------------------------


def test_open_binds_and_reads_the_base_entry(slapd_server: SlapdServer) -> None:
    with LdapDirectoryStore(_settings(slapd_server)) as store:
        assert store.is_open
        assert _who_am_i(store) == f"dn:{slapd_server.bind_dn}"
        assert _base_entry_exists(store)
        store.ping()
    assert not store.is_open
    store.close()  # twice is fine


def test_anonymous_store_reads(slapd_server: SlapdServer) -> None:
    anonymous = replace(_settings(slapd_server), bind_dn=None, password=None)
    with LdapDirectoryStore(anonymous) as store:
        assert _base_entry_exists(store)  # the template allows anonymous read


def test_write_is_seen_by_a_second_store_with_typed_values(slapd_server: SlapdServer) -> None:
    computer, queue, guid = f"pc-{uuid.uuid4().hex[:8]}", "orders", str(uuid.uuid4())
    base = slapd_server.base_dn
    with LdapDirectoryStore(_settings(slapd_server)) as writer, writer.write() as conn:
        assert conn.add(computer_dn(computer, base), ObjectClass.COMPUTER), conn.result
        qm = {Attr.GUID: str(uuid.uuid4())}
        assert conn.add(queue_manager_dn(computer, base), ObjectClass.QUEUE_MANAGER, qm)
        queue_attributes = {Attr.GUID: guid, Attr.TRANSACTIONAL: True, Attr.QUEUE_QUOTA: 512}
        # Python True/int are encoded by the server's schema (TRUE, "512"), as on the
        # embedded store; without get_info=SCHEMA slapd would reject "True".
        ok = conn.add(public_queue_dn(computer, queue, base), ObjectClass.QUEUE, queue_attributes)
        assert ok, conn.result
    with LdapDirectoryStore(_settings(slapd_server)) as reader, reader.read() as conn:
        attributes = [Attr.GUID, Attr.TRANSACTIONAL, Attr.QUEUE_QUOTA]
        dn = public_queue_dn(computer, queue, base)
        assert conn.search(dn, "(objectClass=*)", ldap3.BASE, attributes=attributes), conn.result
        entry = conn.entries[0]
        assert entry[Attr.TRANSACTIONAL].value is True
        assert entry[Attr.QUEUE_QUOTA].value == 512
        assert str(entry[Attr.GUID].value) == guid


def test_ldap_result_codes_are_results_not_exceptions(slapd_server: SlapdServer) -> None:
    with LdapDirectoryStore(_settings(slapd_server)) as store, store.read() as conn:
        assert not conn.search(f"cn=nope,{store.base_dn}", "(objectClass=*)", ldap3.BASE)
        assert conn.result["description"] == "noSuchObject"


def test_sections_nest_and_reuse_one_connection(slapd_server: SlapdServer) -> None:
    with LdapDirectoryStore(_settings(slapd_server)) as store:
        with store.write() as outer, store.read() as inner:
            assert inner is outer
        with store.read() as again:
            assert again is outer  # a healthy link is not reopened
        assert store.connection is outer


def test_threads_share_a_store(slapd_server: SlapdServer) -> None:
    errors: list[BaseException] = []
    with LdapDirectoryStore(_settings(slapd_server)) as store:

        def reader() -> None:
            try:
                for _ in range(20):
                    assert _base_entry_exists(store)
            except (AssertionError, DirectoryUnavailable, ConfigurationError) as exc:
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors


def test_wrong_password_is_a_configuration_error(slapd_server: SlapdServer) -> None:
    store = LdapDirectoryStore(_settings(slapd_server, password="wrong"))
    with pytest.raises(ConfigurationError) as info:
        store.open()
    message = str(info.value)
    assert slapd_server.bind_dn in message and "invalidCredentials" in message
    assert "KMQ_DIRECTORY_BIND_DN / KMQ_DIRECTORY_PASSWORD" in message
    assert "wrong" not in message.replace("wrong password", "")
    assert not store.is_open


def test_nothing_listening_is_directory_unavailable() -> None:
    url = f"ldap://127.0.0.1:{_free_port()}"
    store = LdapDirectoryStore(DirectorySettings(url=url, timeout=2))
    with pytest.raises(DirectoryUnavailable) as info:
        store.open()
    assert url in str(info.value) and "cannot connect" in str(info.value)
    assert "KMQ_DIRECTORY_URL" in str(info.value)
    assert info.value.error_code == "MQ_ERROR_NO_DS"
    assert info.value.__cause__ is not None


def test_a_server_that_never_answers_times_out() -> None:
    # A listening socket nobody accepts from: TCP connects (backlog), the bind gets no answer.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"ldap://127.0.0.1:{silent.getsockname()[1]}"
        store = LdapDirectoryStore(DirectorySettings(url=url, timeout=1))
        started = time.monotonic()
        with pytest.raises(DirectoryUnavailable, match=url):
            store.open()
        assert time.monotonic() - started < 10


# --- losing and regaining the server ----------------------------------------------------------


def test_server_down_then_back_reconnects(private_server: SlapdServer) -> None:
    with LdapDirectoryStore(_settings(private_server)) as store:
        assert _base_entry_exists(store)
        private_server.halt()
        with pytest.raises(DirectoryUnavailable) as info:
            _base_entry_exists(store)
        assert private_server.url in str(info.value)
        with pytest.raises(DirectoryUnavailable):
            store.ping()  # still down: every access fails the same way
        assert store.is_open  # the store stays usable: no reopen needed

        private_server.restart()  # same port, same database
        assert _base_entry_exists(store)  # reconnected and rebound by the section
        assert _who_am_i(store) == f"dn:{private_server.bind_dn}"


def test_link_lost_inside_a_section(private_server: SlapdServer) -> None:
    with LdapDirectoryStore(_settings(private_server)) as store:
        with pytest.raises(DirectoryUnavailable) as info, store.read() as conn:
            private_server.halt()
            conn.search(store.base_dn, "(objectClass=*)", ldap3.BASE)
        assert "during an operation" in str(info.value)
        assert private_server.url in str(info.value)
        private_server.restart()
        with store.read() as conn:
            assert conn is not None and conn.search(store.base_dn, "(objectClass=*)", ldap3.BASE)


def test_initialize_an_empty_server(need_slapd: None) -> None:
    with (
        SlapdServer(load_bootstrap=False) as server,
        LdapDirectoryStore(_settings(server)) as store,
    ):
        assert not _base_entry_exists(store)
        expected = bootstrap_entries(server.base_dn)
        assert store.initialize() == len(expected)
        assert store.initialize() == 0  # idempotent
        with store.read() as conn:
            for dn, _ in expected:
                assert conn.search(dn, "(objectClass=*)", ldap3.BASE, attributes=["1.1"]), dn


def test_initialize_needs_write_access(need_slapd: None) -> None:
    with SlapdServer(load_bootstrap=False) as server:
        anonymous = replace(_settings(server), bind_dn=None, password=None)
        store = LdapDirectoryStore(anonymous).open()
        try:
            with pytest.raises(ConfigurationError, match="anonymous.* may not do this"):
                store.initialize()
        finally:
            store.close()


def test_initialize_needs_a_database_for_the_suffix(slapd_server: SlapdServer) -> None:
    with LdapDirectoryStore(_settings(slapd_server)) as store:
        assert store.initialize() == 0  # the session server is bootstrapped: nothing to write
        with pytest.raises(ConfigurationError, match="namingContexts") as info:
            store.initialize("dc=elsewhere,dc=test")
        assert "dc=elsewhere,dc=test" in str(info.value)


# --- TLS and SASL -----------------------------------------------------------------------------


def test_starttls_with_ca_file(tls_server: SlapdServer) -> None:
    with LdapDirectoryStore(_tls_settings(tls_server, starttls=True)) as store:
        assert _who_am_i(store) == f"dn:{tls_server.bind_dn}"
        with store.read() as conn:
            assert conn.tls_started
        with store.read() as again:
            assert again is conn  # a TLS socket is not mistaken for a dead one


def test_ldaps_with_ca_file(tls_server: SlapdServer) -> None:
    with LdapDirectoryStore(_tls_settings(tls_server, url=tls_server.ldaps_url)) as store:
        assert _base_entry_exists(store)
        with store.read() as conn:
            assert conn.server.ssl
            with store.read() as again:
                assert again is conn


@pytest.mark.parametrize("mode", ["ldaps", "starttls"])
def test_tls_without_the_ca_fails(tls_server: SlapdServer, mode: str) -> None:
    # No ca_file: the system trust store, which does not know the throwaway CA.
    url = tls_server.ldaps_url if mode == "ldaps" else tls_server.url
    store = LdapDirectoryStore(_settings(tls_server, url=url, starttls=mode == "starttls"))
    with pytest.raises(DirectoryUnavailable) as info:
        store.open()
    message = str(info.value)
    assert url in message and "TLS handshake failed" in message
    assert "certificate" in message.lower() and "KMQ_DIRECTORY_CA_FILE" in message


def test_sasl_external_with_a_client_certificate(tls_server: SlapdServer) -> None:
    cert, key = tls_server.issue_client_certificate("admin")
    settings = DirectorySettings(
        url=tls_server.ldaps_url,
        base_dn=tls_server.base_dn,
        ca_file=str(tls_server.ca_file),
        cert_file=str(cert),
        key_file=str(key),
        sasl_mechanism="EXTERNAL",
    )
    with LdapDirectoryStore(settings) as store:
        assert _who_am_i(store) == f"dn:{tls_server.bind_dn}"  # authz-regexp: cert -> rootdn
        alias = f"cn=ext-{uuid.uuid4().hex[:8]},ou=Aliases,{store.base_dn}"
        attributes = {Attr.GUID: str(uuid.uuid4()), Attr.RECIPIENT_FORMAT_NAME: "DIRECT=OS:a\\q"}
        with store.write() as conn:
            assert conn.add(alias, ObjectClass.ALIAS, attributes), conn.result


def test_sasl_external_reader_over_starttls(tls_server: SlapdServer) -> None:
    cert, key = tls_server.issue_client_certificate("reader-ext")
    settings = replace(
        _tls_settings(tls_server, starttls=True),
        bind_dn=None,
        password=None,
        cert_file=str(cert),
        key_file=str(key),
        sasl_mechanism="external",
    )
    with LdapDirectoryStore(settings) as store:
        assert _who_am_i(store) == f"dn:cn=reader-ext,ou=users,{tls_server.base_dn}"
        with store.write() as conn:
            attributes = {Attr.GUID: str(uuid.uuid4()), Attr.RECIPIENT_FORMAT_NAME: "x"}
            denied = f"cn=nope,ou=Aliases,{store.base_dn}"
            assert not conn.add(denied, ObjectClass.ALIAS, attributes)
            assert conn.result["description"] == "insufficientAccessRights"


def test_sasl_external_without_a_certificate(tls_server: SlapdServer) -> None:
    settings = DirectorySettings(
        url=tls_server.ldaps_url, ca_file=str(tls_server.ca_file), sasl_mechanism="EXTERNAL"
    )
    with pytest.raises(ConfigurationError, match="KMQ_DIRECTORY_CERT_FILE"):
        LdapDirectoryStore(settings).open()


def test_sasl_external_over_ldapi(tls_server: SlapdServer) -> None:
    settings = DirectorySettings(
        url=tls_server.ldapi_url, base_dn=tls_server.base_dn, sasl_mechanism="EXTERNAL"
    )
    with LdapDirectoryStore(settings) as store:
        assert _who_am_i(store) == f"dn:{tls_server.bind_dn}"  # this process's uid -> rootdn
        assert _base_entry_exists(store)


@pytest.fixture(scope="module")
def sasl_user(tls_server: SlapdServer) -> tuple[str, str]:
    name, password = "sasl-reader", "digest-secret"
    tls_server.add_sasl_user(name, password)
    return name, password


def test_sasl_digest_md5(tls_server: SlapdServer, sasl_user: tuple[str, str]) -> None:
    name, password = sasl_user
    settings = DirectorySettings(
        url=tls_server.url,
        base_dn=tls_server.base_dn,
        bind_dn=name,
        password=password,
        sasl_mechanism="DIGEST-MD5",
    )
    with LdapDirectoryStore(settings) as store:
        assert _who_am_i(store) == f"dn:cn={name},ou=users,{tls_server.base_dn}"
    with pytest.raises(ConfigurationError, match="invalidCredentials") as info:
        LdapDirectoryStore(replace(settings, password="wrong")).open()
    assert f"{name} (SASL DIGEST-MD5)" in str(info.value)


def test_sasl_plain_needs_tls(tls_server: SlapdServer, sasl_user: tuple[str, str]) -> None:
    name, password = sasl_user
    settings = DirectorySettings(
        url=tls_server.ldaps_url,
        base_dn=tls_server.base_dn,
        bind_dn=name,
        password=password,
        sasl_mechanism="PLAIN",
        ca_file=str(tls_server.ca_file),
    )
    with LdapDirectoryStore(settings) as store:
        assert _who_am_i(store) == f"dn:cn={name},ou=users,{tls_server.base_dn}"
    cleartext = replace(settings, url=tls_server.url, ca_file=None)
    with pytest.raises(ConfigurationError, match="PLAIN needs TLS"):
        LdapDirectoryStore(cleartext).open()
