"""The LDAP directory store: MSMQ's public objects on a real LDAP server (OpenLDAP slapd, ...).

The twin of :class:`facade.directory.embedded.EmbeddedDirectoryStore`, with the same interface,
so code above treats both alike: ``open()``/``close()``, and every access is a short section
that yields a bound ``ldap3.Connection``::

    with LdapDirectoryStore(config.directory) as store:
        with store.read() as conn:          # thread lock; reconnects first if the link died
            conn.search(store.base_dn, "(objectClass=mSMQQueue)", attributes=["cn"])
        with store.write() as conn:
            conn.add(dn, attributes=...)    # each LDAP operation is atomic, a section is not

In MSMQ terms this is the Active Directory connection of a domain-mode queue manager: when it
is unreachable, directory operations fail with :class:`~facade.errors.DirectoryUnavailable`
(MQ_ERROR_NO_DS) and succeed again once the server is back, without reopening the store.

Connections read the server's schema (ldap3 ``get_info=SCHEMA``) so Python values are encoded
by attribute syntax as on the embedded store (``True`` as ``TRUE``, ints as decimal), and are
made with ``raise_exceptions=False``: LDAP result codes (noSuchObject, entryAlreadyExists, ...)
are in ``connection.result``, only lost links raise.
"""

from __future__ import annotations

import ast
import contextlib
import math
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import ldap3
from ldap3.core.exceptions import (
    LDAPCertificateError,
    LDAPCommunicationError,
    LDAPException,
    LDAPPasswordIsMandatoryError,
    LDAPResponseTimeoutError,
    LDAPSASLMechanismNotSupportedError,
    LDAPStartTLSError,
    LDAPUserNameIsMandatoryError,
)

from facade.config import SASL_MECHANISMS, DirectorySettings
from facade.directory.layout import bootstrap_entries, parent_dn, validate_base_dn
from facade.errors import ConfigurationError, DirectoryUnavailable

__all__ = ["LdapDirectoryStore"]

#: Everything that means "the link to the server failed" (as opposed to an LDAP result code or
#: a caller's mistake): ldap3's socket/session errors, TLS failures, raw socket errors.
_LINK_ERRORS: tuple[type[BaseException], ...] = (
    LDAPCommunicationError,
    LDAPStartTLSError,
    LDAPCertificateError,
    LDAPResponseTimeoutError,
    ConnectionError,
    TimeoutError,
    ssl.SSLError,
    socket.gaierror,
)
#: LDAP result codes of a bind that mean "these credentials or this mechanism are wrong":
#: retrying cannot help, the configuration must change.
_BIND_CONFIG_CODES = {
    7: "authMethodNotSupported",
    8: "strongerAuthRequired",
    13: "confidentialityRequired",
    48: "inappropriateAuthentication",
    49: "invalidCredentials",
    50: "insufficientAccessRights",
    53: "unwillingToPerform",
}
_SUCCESS = 0
_NO_SUCH_OBJECT = 32
_ALREADY_EXISTS = 68
_CREDENTIALS_HINT = "check KMQ_DIRECTORY_BIND_DN / KMQ_DIRECTORY_PASSWORD"


def _server_url(url: str) -> str:
    """``url`` as ldap3.Server parses it: no trailing slash or DN part (``ldap://h:p/`` makes
    ldap3 read the port as ``p/`` and fail)."""
    scheme, sep, rest = url.strip().partition("://")
    if scheme.lower() == "ldapi":
        # Percent-encoded socket path (ldapi://%2Fvar%2Frun%2Fldapi/): only a trailing slash
        # is syntax. An unencoded path (ldapi:///var/run/ldapi) is kept as given.
        return f"{scheme}{sep}{rest.rstrip('/') if '/' not in rest.rstrip('/') else rest}"
    return f"{scheme}{sep}{rest.split('/', 1)[0]}"


def _describe(exc: BaseException) -> str:
    """ldap3's exception text without its tuple wrapping (``"('socket ssl ...',)"``)."""
    parts: list[str] = []
    for arg in exc.args:
        if isinstance(arg, (list, tuple)):
            parts.extend(_describe_item(item) for item in arg)
        elif arg not in (None, ""):
            parts.append(_unwrap(str(arg)))
    return "; ".join(part for part in parts if part) or type(exc).__name__


def _unwrap(text: str) -> str:
    """``"('message',)"`` -> ``"message"``: ldap3 re-raises exceptions as ``type(e)(str(e))``,
    which turns a one-argument tuple into its repr."""
    if text.startswith("(") and text.endswith(",)"):
        with contextlib.suppress(ValueError, SyntaxError):
            value = ast.literal_eval(text)
            if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
                return "; ".join(value)
    return text


def _describe_item(item: object) -> str:
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], BaseException):
        # ldap3's exception_history: (exception, sockaddr)
        address = item[1]
        where = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        return f"{_describe(item[0])} (address {where})"
    if isinstance(item, BaseException):
        return _describe(item)
    return str(item)


def _is_tls_failure(exc: BaseException) -> bool:
    """True when ``exc`` is about TLS: handshake, certificate, StartTLS."""
    if isinstance(exc, (ssl.SSLError, LDAPStartTLSError, LDAPCertificateError)):
        return True
    text = _describe(exc).lower()
    return any(word in text for word in ("ssl", "tls", "certificate"))


class LdapDirectoryStore:
    """kmq's directory of public objects on an LDAP server (the Active Directory of MSMQ).

    Args:
        settings (DirectorySettings): ``url`` (``ldap://``, ``ldaps://`` or ``ldapi://``),
            ``base_dn``, credentials (``bind_dn``/``password``, or ``sasl_mechanism``), TLS
            files (``ca_file``, ``cert_file``, ``key_file``), ``starttls`` and ``timeout``
            (seconds, for the TCP connect and for each LDAP response; the response timeout is
            rounded up to whole seconds, an ldap3 limitation).

    Attributes:
        url (str): the server URL as connected to (no trailing slash).
        base_dn (str): the suffix, normalized (``dc=kmq,dc=local``).
        settings (DirectorySettings): as given.

    Use :meth:`read` / :meth:`write` around every access: they serialise threads and reconnect
    (and rebind) when the connection was lost. The store is also a context manager.

    Raises:
        ConfigurationError: the URL is not an LDAP URL (embedded, workgroup ``none``, another
            scheme, a bad port), ``base_dn`` is not a DN, the SASL mechanism is unsupported, a
            password is missing for a simple bind, or a TLS file does not exist.
    """

    #: A real server takes escaped substring filters (label patterns of Directory.locate).
    evaluates_substring_filters = True

    def __init__(self, settings: DirectorySettings):
        url = settings.url or ""
        if not url.lower().startswith(("ldap://", "ldaps://", "ldapi://")):
            raise ConfigurationError(
                f"LdapDirectoryStore needs an ldap://, ldaps:// or ldapi:// URL, not {url!r}",
                hint="set KMQ_DIRECTORY_URL (directory.url) to e.g. ldap://127.0.0.1:3890; "
                "embedded:PATH uses EmbeddedDirectoryStore, none means no directory",
            )
        self.settings = settings
        self.url = _server_url(url)
        self.base_dn = validate_base_dn(settings.base_dn)
        self._mechanism = self._check_mechanism(settings.sasl_mechanism)
        self._check_credentials()
        self._tls = self._make_tls()
        self._make_server()  # fail now, not at the first access, on a malformed URL
        self._mutex = threading.RLock()  # one ldap3 SYNC connection: one section at a time
        self._connection: ldap3.Connection | None = None
        self._opened = False
        self._depth = 0  # nesting of read()/write() in the owning thread
        #: Where contextCSN was found (a DN), False when the server has none, None: not probed.
        self._csn_dn: str | bool | None = None

    @property
    def description(self) -> str:
        """Human-readable name for messages: ``"LDAP directory ldap://127.0.0.1:3890"``.

        Never includes the password (nor the bind DN).
        """
        return f"LDAP directory {self.url}"

    def __repr__(self) -> str:
        state = "open" if self._opened else "closed"
        return f"LdapDirectoryStore({self.url!r}, base_dn={self.base_dn!r}, {state})"

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> LdapDirectoryStore:
        """Connect, run StartTLS if configured, and bind (idempotent).

        Returns:
            LdapDirectoryStore: self, for chaining.

        Raises:
            DirectoryUnavailable: the server cannot be reached within ``timeout`` seconds, or
                the TLS handshake / StartTLS fails (the message says which; check ca_file).
            ConfigurationError: the bind was rejected (wrong bind DN or password, SASL
                mechanism not accepted, no client certificate for EXTERNAL).
        """
        with self._mutex:
            if self._connection is None:
                self._connection = self._connect()
            self._opened = True
        return self

    def close(self) -> None:
        """Unbind and drop the connection. Safe to call twice; never raises for a dead link."""
        with self._mutex:
            self._opened = False
            self._drop()

    def __enter__(self) -> LdapDirectoryStore:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        """True between :meth:`open` and :meth:`close` (even while the link is down: the next
        section reconnects)."""
        return self._opened

    @property
    def connection(self) -> ldap3.Connection:
        """The bound ldap3 connection, reconnected first if it was lost.

        Use it inside :meth:`read` or :meth:`write` (which also return it); outside them it is
        not locked against other threads.

        Raises:
            DirectoryUnavailable: the store is not open (call :meth:`open`), or reconnecting
                failed.
            ConfigurationError: rebinding was rejected.
        """
        with self._mutex:
            self._require_open()
            if self._connection is None:
                self._connection = self._connect()
            return self._connection

    # -- critical sections -----------------------------------------------------------------

    @contextlib.contextmanager
    def read(self) -> Iterator[ldap3.Connection]:
        """Hold the store for reading: a thread lock and a live, bound connection.

        If the connection was lost since the last section (server restart, idle timeout,
        network), it is reopened and rebound first. Sections nest (same thread).

        Yields:
            ldap3.Connection: bound, ``raise_exceptions=False``: inspect ``connection.result``
            for LDAP result codes.

        Raises:
            DirectoryUnavailable: the store is closed, reconnecting failed, or the link failed
                inside the section (the connection is dropped; the next section reconnects).
            ConfigurationError: rebinding was rejected.
        """
        with self._section() as connection:
            yield connection

    @contextlib.contextmanager
    def write(self) -> Iterator[ldap3.Connection]:
        """Hold the store for a change: like :meth:`read`.

        Unlike the embedded store's, an LDAP ``write()`` is **not atomic**: each LDAP operation
        (add, modify, delete, modify DN) is, but if the body raises after some of them, those
        stay done. Callers order their operations so that a partial change is harmless (create
        children after parents, remove list memberships before the entry, ...).

        Yields:
            ldap3.Connection: as :meth:`read`.

        Raises:
            DirectoryUnavailable, ConfigurationError: as :meth:`read`.
        """
        with self._section() as connection:
            yield connection

    @contextlib.contextmanager
    def _section(self) -> Iterator[ldap3.Connection]:
        with self._mutex:
            self._require_open()
            if self._depth == 0 and (self._connection is None or _is_stale(self._connection)):
                self._drop()
                self._connection = self._connect()
            connection = self._connection
            assert connection is not None
            self._depth += 1
            try:
                yield connection
            except _LINK_ERRORS as exc:
                self._drop()
                raise self._unavailable("the connection failed during an operation", exc) from exc
            finally:
                self._depth -= 1

    # -- directory operations ----------------------------------------------------------------

    def ping(self) -> None:
        """Check that the server answers: read its root DSE (one round trip when connected).

        Raises:
            DirectoryUnavailable: the server does not answer or refuses the read.
            ConfigurationError: reconnecting needed a bind, which was rejected.
        """
        with self.read() as connection:
            if not connection.search("", "(objectClass=*)", ldap3.BASE, attributes=["1.1"]):
                raise self._unavailable(f"reading the root DSE failed: {connection.result}")

    def change_marker(self, connection: ldap3.Connection) -> tuple[str, ...] | None:
        """The server's ``contextCSN`` of the database holding the base DN: a value that
        changes with every write to it, by kmq or anyone else (slapd's ``syncprov`` overlay
        keeps it; ``deploy/ldap/slapd.conf.template`` loads it).

        One base-scope read of the base entry (or of the first ancestor that has the
        attribute); a server without it is asked again only after a reconnect.

        Args:
            connection (ldap3.Connection): the connection of the current :meth:`read` section.

        Returns:
            tuple[str, ...] | None: the sorted CSN values (one per replica server id); None when
            the server keeps no ``contextCSN`` (the caller must then read everything afresh).

        Raises:
            DirectoryUnavailable: the read failed for another reason than a missing attribute.
        """
        if self._csn_dn is False:
            return None
        candidates = [self._csn_dn] if isinstance(self._csn_dn, str) else _self_and_parents(
            self.base_dn)
        for dn in candidates:
            if not connection.search(dn, "(objectClass=*)", ldap3.BASE,
                                     attributes=["contextCSN"]):
                if connection.result.get("result") in (0, 32):  # success / noSuchObject
                    continue
                raise self._unavailable(f"reading contextCSN of {dn} failed: {connection.result}")
            values = connection.response[0]["attributes"].get("contextCSN") \
                if connection.response else None
            if values:
                self._csn_dn = dn
                return tuple(sorted(values))
        self._csn_dn = False
        return None

    def initialize(self, base_dn: str | None = None) -> int:
        """Create the base entries (suffix, ou=Computers, ou=Aliases, ...) that are missing.

        ``kmq directory init`` on an empty server: the content of ``deploy/ldap/bootstrap.ldif``
        moved under ``base_dn``. Existing entries are left alone (also ones another client
        creates meanwhile), so this is idempotent.

        Args:
            base_dn (str | None): the suffix; None means the store's ``base_dn``. The server
                must hold a database for it (slapd ``suffix``).

        Returns:
            int: number of entries created (0 when already initialized).

        Raises:
            ConfigurationError: ``base_dn`` is not usable, the server has no database for it,
                or the bind DN may not add entries.
            DirectoryUnavailable: the server is unreachable or failed the add.
        """
        entries = bootstrap_entries(base_dn or self.base_dn)
        created = 0
        with self.write() as connection:
            for dn, attributes in entries:
                if self._exists(connection, dn):
                    continue
                created += self._add(connection, dn, attributes)
        return created

    def _exists(self, connection: ldap3.Connection, dn: str) -> bool:
        if connection.search(dn, "(objectClass=*)", ldap3.BASE, attributes=["1.1"]):
            return True
        if connection.result.get("result") == _NO_SUCH_OBJECT:
            return False
        raise self._operation_failed(f"reading {dn}", connection.result)

    def _add(
        self, connection: ldap3.Connection, dn: str, attributes: dict[str, list[str | bytes]]
    ) -> int:
        """Add one bootstrap entry; 1 when created, 0 when someone else just created it."""
        values = {name: list(vals) for name, vals in attributes.items()}
        if connection.add(dn, attributes=values):
            return 1
        if connection.result.get("result") == _ALREADY_EXISTS:
            return 0
        raise self._operation_failed(f"creating base entry {dn}", connection.result)

    def _operation_failed(self, what: str, result: dict[str, Any]) -> Exception:
        code, text = result.get("result"), f"{result.get('description')} {result.get('message')}"
        if code in (8, 48, 50):  # strongerAuthRequired (anonymous), insufficientAccessRights
            who = self._identity()
            return ConfigurationError(
                f"{self.description}: {what}: {who} may not do this ({text.strip()})",
                hint=f"bind as a DN with write access; {_CREDENTIALS_HINT}",
            )
        if code in (_NO_SUCH_OBJECT, 53):  # no database for the suffix: unwilling/noSuchObject
            return ConfigurationError(
                f"{self.description}: {what}: the server refused ({text.strip()})",
                hint="the server needs a database (suffix) holding the base DN: check its "
                "namingContexts against KMQ_DIRECTORY_BASE_DN",
            )
        return self._unavailable(f"{what} failed: {text.strip()} (result {code})")

    # -- connecting ---------------------------------------------------------------------------

    @staticmethod
    def _check_mechanism(mechanism: str | None) -> str | None:
        if mechanism is None:
            return None
        canonical = mechanism.strip().upper()
        if canonical not in SASL_MECHANISMS:
            raise ConfigurationError(
                f"SASL mechanism {mechanism!r} is not supported",
                hint=f"set KMQ_DIRECTORY_SASL_MECHANISM to one of {', '.join(SASL_MECHANISMS)}, "
                "or unset it for a simple bind",
            )
        return canonical

    def _check_credentials(self) -> None:
        """Reject credential combinations ldap3 would refuse later with a cryptic error."""
        settings = self.settings
        needs_password = self._mechanism in ("DIGEST-MD5", "PLAIN")
        if needs_password and not (settings.bind_dn and settings.password):
            raise ConfigurationError(
                f"SASL {self._mechanism} needs a user name and a password",
                hint=_CREDENTIALS_HINT,
            )
        if self._mechanism is None and settings.bind_dn and not settings.password:
            raise ConfigurationError(
                f"a simple bind as {settings.bind_dn} needs a password",
                hint=f"{_CREDENTIALS_HINT} (unset the bind DN to bind anonymously)",
            )

    def _make_tls(self) -> ldap3.Tls | None:
        settings = self.settings
        wants_tls = self.url.lower().startswith("ldaps://") or settings.starttls
        if not (wants_tls or settings.ca_file or settings.cert_file):
            return None
        if bool(settings.cert_file) != bool(settings.key_file):
            raise ConfigurationError(
                "a TLS client certificate needs both a certificate and a key file",
                hint="set both KMQ_DIRECTORY_CERT_FILE and KMQ_DIRECTORY_KEY_FILE, or neither",
            )
        try:
            return ldap3.Tls(
                validate=ssl.CERT_REQUIRED,
                ca_certs_file=settings.ca_file,
                local_certificate_file=settings.cert_file,
                local_private_key_file=settings.key_file,
            )
        except LDAPException as exc:  # ldap3 checks that the files exist
            raise ConfigurationError(
                f"{self.description}: unusable TLS file(s): {_describe(exc)} (ca_file="
                f"{settings.ca_file}, cert_file={settings.cert_file}, key_file={settings.key_file})",
                hint="check KMQ_DIRECTORY_CA_FILE / KMQ_DIRECTORY_CERT_FILE / "
                "KMQ_DIRECTORY_KEY_FILE name readable PEM files",
            ) from exc

    def _make_server(self) -> ldap3.Server:
        """A fresh ldap3.Server. Never reused across connections: after a failed connect ldap3
        marks the address unavailable for minutes (and caches DNS), which would turn a server
        restart into "invalid server address" instead of a reconnect."""
        try:
            return ldap3.Server(
                self.url,
                tls=self._tls,
                get_info=ldap3.SCHEMA,
                connect_timeout=self.settings.timeout,
            )
        except LDAPException as exc:  # bad port, malformed host
            raise ConfigurationError(
                f"directory URL {self.url!r} is not usable: {_describe(exc)}",
                hint="set KMQ_DIRECTORY_URL to e.g. ldap://127.0.0.1:3890 (host:port)",
            ) from exc

    def _credentials(self) -> dict[str, Any]:
        """ldap3.Connection keyword arguments for the configured authentication."""
        settings = self.settings
        if self._mechanism == "EXTERNAL":
            # Empty (not None) credentials: with None ldap3 omits the field, and slapd answers
            # saslBindInProgress instead of completing the bind.
            return {
                "authentication": ldap3.SASL,
                "sasl_mechanism": ldap3.EXTERNAL,
                "sasl_credentials": "",
            }
        if self._mechanism is not None:
            # DIGEST-MD5 and PLAIN: ldap3 reads (realm or authzid, user, password, authzid).
            return {
                "authentication": ldap3.SASL,
                "sasl_mechanism": self._mechanism,
                "sasl_credentials": (None, settings.bind_dn, settings.password, None),
            }
        if settings.bind_dn:
            return {
                "authentication": ldap3.SIMPLE,
                "user": settings.bind_dn,
                "password": settings.password,
            }
        return {"authentication": ldap3.ANONYMOUS}

    def _connect(self) -> ldap3.Connection:
        """A new connection: open the socket, StartTLS if configured, bind, read the schema."""
        connection = ldap3.Connection(
            self._make_server(),
            raise_exceptions=False,
            receive_timeout=self._receive_timeout(),
            auto_bind=ldap3.AUTO_BIND_NONE,
            **self._credentials(),
        )
        try:
            connection.open(read_server_info=False)
            if self.settings.starttls and not self.url.lower().startswith("ldaps://"):
                self._start_tls(connection)
            bound = connection.bind()
        except _LINK_ERRORS as exc:
            _close_quietly(connection)
            what = "TLS handshake failed" if _is_tls_failure(exc) else "cannot connect"
            raise self._unavailable(what, exc) from exc
        except (LDAPPasswordIsMandatoryError, LDAPUserNameIsMandatoryError) as exc:
            _close_quietly(connection)
            raise ConfigurationError(
                f"{self.description}: bind not possible: {_describe(exc)}", hint=_CREDENTIALS_HINT
            ) from exc
        except LDAPSASLMechanismNotSupportedError as exc:
            _close_quietly(connection)
            raise ConfigurationError(
                f"{self.description}: ldap3 cannot do SASL {self._mechanism}: {_describe(exc)}",
                hint="choose EXTERNAL, DIGEST-MD5 or PLAIN",
            ) from exc
        if not bound:
            result = dict(connection.result or {})
            _close_quietly(connection)
            raise self._bind_failed(result)
        self._csn_dn = None  # probe the (maybe reconfigured) server again
        return connection

    def _receive_timeout(self) -> int:
        # ldap3 packs the response timeout into SO_RCVTIMEO as whole seconds (a float raises
        # struct.error), so round up: never wait less than configured.
        return max(1, math.ceil(self.settings.timeout))

    def _start_tls(self, connection: ldap3.Connection) -> None:
        # ldap3 returns False (instead of raising) when TLS is already on or a request is
        # outstanding; neither can happen on a fresh connection, so False is a failure too.
        if not connection.start_tls(read_server_info=False):
            raise LDAPStartTLSError(f"StartTLS was not started: {connection.last_error}")

    def _bind_failed(self, result: dict[str, Any]) -> Exception:
        code = result.get("result")
        detail = " ".join(str(result.get(k) or "") for k in ("description", "message")).strip()
        who = self._identity()
        if code not in _BIND_CONFIG_CODES:  # busy, unavailable, other: may go away
            return self._unavailable(f"bind as {who} failed: {detail} (result {code})")
        return ConfigurationError(
            f"{self.description}: bind as {who} rejected: {detail} (result {code})",
            hint=self._bind_hint(code),
        )

    def _identity(self) -> str:
        """Who a bind tries to be, for messages (never the password)."""
        if self._mechanism == "EXTERNAL":
            return "the TLS client certificate / ldapi peer (SASL EXTERNAL)"
        if self._mechanism is not None:
            return f"{self.settings.bind_dn} (SASL {self._mechanism})"
        return self.settings.bind_dn or "anonymous"

    def _bind_hint(self, code: int | None) -> str:
        if self._mechanism == "EXTERNAL":
            return (
                "present a client certificate the server trusts and maps to an entry "
                "(KMQ_DIRECTORY_CERT_FILE / KMQ_DIRECTORY_KEY_FILE over ldaps:// or StartTLS), "
                "or connect over ldapi://"
            )
        if self._mechanism == "PLAIN" and code in (8, 13, 48):
            return "SASL PLAIN needs TLS: use ldaps:// or KMQ_DIRECTORY_STARTTLS=1"
        if self._mechanism is not None and code in (7, 48):
            return (
                "the server does not offer this mechanism or not on this connection (see its "
                "supportedSASLMechanisms); check KMQ_DIRECTORY_SASL_MECHANISM"
            )
        if self.settings.bind_dn is None and self._mechanism is None:
            return f"the server refuses anonymous binds: {_CREDENTIALS_HINT}"
        return _CREDENTIALS_HINT

    # -- internals -----------------------------------------------------------------------------

    def _require_open(self) -> None:
        if not self._opened:
            raise DirectoryUnavailable(
                f"{self.description}: the store is not open", hint="call open() first"
            )

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            _close_quietly(connection)

    def _unavailable(self, what: str, exc: BaseException | None = None) -> DirectoryUnavailable:
        detail = f": {_describe(exc)}" if exc is not None else ""
        if exc is not None and _is_tls_failure(exc):
            ca = self.settings.ca_file or "unset, so the system trust store is used"
            hint = (
                f"check the TLS settings: KMQ_DIRECTORY_CA_FILE (ca_file, {ca}) must name the CA "
                "that signed the server's certificate, and the certificate must name the host "
                "in KMQ_DIRECTORY_URL"
            )
        else:
            hint = (
                f"is the LDAP server running and reachable at {self.url}? check "
                f"KMQ_DIRECTORY_URL (timeout {self.settings.timeout:g} s: "
                "KMQ_DIRECTORY_TIMEOUT); kmq reconnects on the next directory access"
            )
        return DirectoryUnavailable(f"{self.description}: {what}{detail}", hint=hint)


def _is_stale(connection: ldap3.Connection) -> bool:
    """True when ``connection`` can no longer carry a request.

    A synchronous connection has no request outstanding between sections, so a readable
    socket means end-of-file (the server closed it: restart, idle timeout) or an unsolicited
    Notice of Disconnection; either ends the session. ``select`` costs no round trip.
    """
    sock = getattr(connection, "socket", None)
    if connection.closed or not connection.bound or sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):  # closed file descriptor
        return True
    return bool(readable)


def _self_and_parents(dn: str) -> list[str]:
    """``dn`` and its ancestors, nearest first (``dc=a,dc=b`` -> [``dc=a,dc=b``, ``dc=b``])."""
    found = [dn]
    while (parent := parent_dn(found[-1])) and parent != found[-1]:
        found.append(parent)
    return found


def _close_quietly(connection: ldap3.Connection) -> None:
    """Unbind, or at least close the socket: on a dead link the unbind request itself fails.

    The explicit ``socket.close()`` matters: when connecting fails ldap3 marks the connection
    closed but keeps the refused socket open, so a queue manager retrying against a down server
    would leak one file descriptor per attempt.
    """
    with contextlib.suppress(LDAPException, OSError):
        connection.unbind()
    if not connection.closed:
        with contextlib.suppress(LDAPException, OSError):
            connection.strategy.close()
    sock = getattr(connection, "socket", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.close()
