"""A throwaway OpenLDAP server for tests: kmq's real-directory counterpart of the embedded store.

``SlapdServer`` renders ``deploy/ldap/slapd.conf.template`` into a temporary directory, checks it
with ``slaptest``, runs ``slapd`` in the foreground on a free loopback port, waits until a bind
works and loads the same base entries as ``bootstrap.ldif``::

    reason = slapd_available()
    if reason:
        pytest.skip(reason)
    with SlapdServer() as server:
        conn = server.connect()          # bound as the rootdn

``SlapdServer(tls=True)`` also makes a throwaway CA and a server certificate for 127.0.0.1 (with
the ``cryptography`` library), serves StartTLS on ``url`` and LDAPS on ``ldaps_url``, and
accepts client certificates it issues (:meth:`SlapdServer.issue_client_certificate`) for SASL
EXTERNAL binds and users it adds (:meth:`SlapdServer.add_sasl_user`) for DIGEST-MD5 and PLAIN. ``SlapdServer(ldapi=True)`` adds a Unix-socket listener (``ldapi_url``) where
SASL EXTERNAL authenticates this process's uid as the rootdn.

It never touches the system slapd service or its configuration.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import ldap3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from ldap3.core.exceptions import LDAPException

from facade.directory.layout import (
    DEFAULT_BASE_DN,
    bootstrap_entries,
    deploy_file,
    normalize_dn,
)

__all__ = ["SlapdError", "SlapdServer", "find_slapd", "render_template", "slapd_available"]

#: Where Debian installs OpenLDAP's schema files and modules.
SCHEMA_DIR = Path("/etc/ldap/schema")
MODULE_DIR = Path("/usr/lib/ldap")
_INSTALL_HINT = "run `make system-deps` (apt-get install slapd ldap-utils)"
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
#: Organization of every certificate the test CA issues; client subjects are
#: ``CN=<name>,O=kmq test`` and slapd sees them as the DN ``cn=<name>,o=kmq test``.
TEST_ORGANIZATION = "kmq test"


class SlapdError(RuntimeError):
    """slapd could not be configured or started; the message carries slapd's own output."""


def _find_tool(name: str) -> str | None:
    for candidate in (Path("/usr/sbin") / name, Path("/usr/local/sbin") / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def find_slapd() -> tuple[str, str] | None:
    """Paths of ``slapd`` and ``slaptest``, or None when either is missing."""
    slapd, slaptest = _find_tool("slapd"), _find_tool("slaptest")
    return (slapd, slaptest) if slapd and slaptest else None


def slapd_available() -> str | None:
    """Why a throwaway slapd cannot run here, or None when it can.

    Returns:
        str | None: a skip reason naming the fix, e.g. "slapd is not installed: run `make
        system-deps` (apt-get install slapd ldap-utils)".
    """
    if find_slapd() is None:
        return f"slapd is not installed: {_INSTALL_HINT}"
    if not (SCHEMA_DIR / "core.schema").is_file():
        return f"OpenLDAP schema files are missing from {SCHEMA_DIR}: {_INSTALL_HINT}"
    if not (MODULE_DIR / "back_mdb.so").exists() and not (MODULE_DIR / "back_mdb.la").exists():
        return f"slapd's back_mdb module is missing from {MODULE_DIR}: {_INSTALL_HINT}"
    return None


def render_template(template: str, values: dict[str, str]) -> str:
    """Replace every ``{name}`` outside comment lines, in one pass (values are not re-scanned,
    so a ``{SSHA}`` password hash survives).

    Raises:
        KeyError: the template has a placeholder ``values`` lacks.
    """

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"slapd.conf.template placeholder {{{key}}} has no value")
        return values[key]

    lines = template.splitlines(keepends=True)
    return "".join(
        line if line.lstrip().startswith("#") else _PLACEHOLDER.sub(substitute, line)
        for line in lines
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- A throwaway certificate authority --------------------------------------------------------


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, TEST_ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write_pem(path: Path, data: bytes, mode: int = 0o644) -> Path:
    # Create with the final mode (no window where a private key is world-readable).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class TestCertificateAuthority:
    """A CA that lives for one test server: EC P-256 keys, one day of validity.

    Certificates carry the extensions strict verifiers require (key identifiers, key usage,
    extended key usage), so Python's ``ssl`` and slapd's GnuTLS both accept them.

    Args:
        directory (Path): where ``ca.pem`` and the issued files are written.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, directory: Path):
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        public = self._key.public_key()
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name("kmq test CA"))
            .issuer_name(_name("kmq test CA"))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(key_cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = _write_pem(
            directory / "ca.pem", self._cert.public_bytes(serialization.Encoding.PEM)
        )

    def issue(
        self, common_name: str, *, server: bool, ip_addresses: tuple[str, ...] = ()
    ) -> tuple[Path, Path]:
        """Issue a server or client certificate; returns (certificate PEM, key PEM) paths.

        Args:
            common_name (str): the subject CN (also the file name stem).
            server (bool): serverAuth (with ``ip_addresses`` as IP SANs) or clientAuth.
            ip_addresses (tuple[str, ...]): IP subject alternative names.
        """
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if ip_addresses:
            names = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", common_name)
        cert_file = _write_pem(
            self.directory / f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM)
        )
        key_file = _write_pem(self.directory / f"{stem}.key", _key_pem(key), 0o600)
        return cert_file, key_file


def _usage(*, key_cert_sign: bool = False, digital_signature: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


class SlapdServer:
    """A private slapd on 127.0.0.1 with kmq's schema, refint and base entries.

    Args:
        base_dn (str): the suffix (default ``dc=kmq,dc=local``).
        load_bootstrap (bool): add the bootstrap.ldif base entries after start.
        startup_timeout (float): seconds to wait for the first successful bind.
        tls (bool): make a throwaway CA and a certificate for 127.0.0.1, offer StartTLS on
            ``url`` and listen for LDAPS on ``ldaps_url``. Client certificates are asked for but
            optional (``TLSVerifyClient try``); a certificate from
            :meth:`issue_client_certificate` authenticates a SASL EXTERNAL bind, and SASL
            DIGEST-MD5 / PLAIN user names map to entries made by :meth:`add_sasl_user`.
        ldapi (bool): also listen on a Unix socket (``ldapi_url``) where a SASL EXTERNAL bind
            from this process's uid is the rootdn.

    Attributes:
        url (str): ``ldap://127.0.0.1:<port>`` (usable as ``ldap3.Server(url)``).
        base_dn (str), bind_dn (str), password (str): the suffix and the rootdn credentials.
        workdir (Path | None): the temporary directory (config, database, logs) while running.
        ca_file (Path | None): PEM of the throwaway CA (``tls=True`` only).
    """

    def __init__(
        self,
        *,
        base_dn: str = DEFAULT_BASE_DN,
        load_bootstrap: bool = True,
        startup_timeout: float = 10.0,
        tls: bool = False,
        ldapi: bool = False,
    ):
        self.base_dn = normalize_dn(base_dn)
        self.bind_dn = f"cn=admin,{self.base_dn}"
        self.password = secrets.token_urlsafe(16)
        self.load_bootstrap = load_bootstrap
        self.startup_timeout = startup_timeout
        self.tls = tls
        self.ldapi = ldapi
        self.port = 0
        self.tls_port = 0
        self.workdir: Path | None = None
        self.ca_file: Path | None = None
        self._ca: TestCertificateAuthority | None = None
        self._slapd = ""
        self._conf: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._launches = 0

    @property
    def url(self) -> str:
        # No trailing slash: ldap3.Server("ldap://host:port/") fails to parse the port.
        return f"ldap://127.0.0.1:{self.port}"

    @property
    def ldaps_url(self) -> str:
        """``ldaps://127.0.0.1:<tls_port>`` (``tls=True`` only)."""
        if not self.tls:
            raise SlapdError("this SlapdServer has no LDAPS listener: create it with tls=True")
        return f"ldaps://127.0.0.1:{self.tls_port}"

    @property
    def ldapi_url(self) -> str:
        """``ldapi://<percent-encoded socket path>`` (``ldapi=True`` only)."""
        if not self.ldapi or self.workdir is None:
            raise SlapdError("this SlapdServer has no ldapi listener: create it with ldapi=True")
        return "ldapi://" + urllib.parse.quote(str(self.workdir / "ldapi"), safe="")

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> SlapdServer:
        """Configure, check, start and (optionally) populate the server.

        Raises:
            SlapdError: slapd is missing, slaptest rejects the configuration, or slapd exits or
                does not accept a bind in time (its log is in the message).
        """
        reason = slapd_available()
        if reason:
            raise SlapdError(reason)
        slapd, slaptest = find_slapd() or ("", "")
        self._slapd = slapd
        self.workdir = Path(tempfile.mkdtemp(prefix="kmq-slapd-"))
        try:
            self._conf = self._write_config()
            self._check_config(slaptest, self._conf)
            self._launch()
            if self.load_bootstrap:
                self._load_bootstrap()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Terminate slapd (kill after 5 s) and delete the temporary directory. Idempotent."""
        self.halt()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        self.ca_file = self._ca = None

    def halt(self) -> None:
        """Terminate slapd but keep its database, configuration and ports for :meth:`restart`.

        Simulates a directory server going down under a running client. Idempotent.
        """
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    def restart(self) -> SlapdServer:
        """Start slapd again after :meth:`halt`, on the same ports with the same data.

        Raises:
            SlapdError: the server was never started or was stopped, or slapd does not come
                back (e.g. another process took the port meanwhile).
        """
        if self.workdir is None or self._conf is None:
            raise SlapdError("restart() needs a server that was started and only halted")
        self.halt()
        self._launch(keep_ports=True)
        return self

    @property
    def running(self) -> bool:
        """True while the slapd process is alive."""
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> SlapdServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- clients ---------------------------------------------------------------------------

    def connect(self, *, anonymous: bool = False, schema: bool = True) -> ldap3.Connection:
        """A bound ldap3 connection: the rootdn, or anonymous.

        Args:
            anonymous (bool): bind anonymously instead of as the rootdn.
            schema (bool): read slapd's schema first, so ldap3 converts values by syntax as the
                embedded store does (``True`` is sent as ``TRUE``; without a schema ldap3 sends
                ``"True"``, which slapd rejects as invalidAttributeSyntax for a Boolean).

        Raises:
            LDAPException: the bind failed.
        """
        server = ldap3.Server(
            "127.0.0.1",
            port=self.port,
            get_info=ldap3.SCHEMA if schema else ldap3.NONE,
            connect_timeout=2,
        )
        if anonymous:
            return ldap3.Connection(server, auto_bind=True, receive_timeout=5)
        return ldap3.Connection(
            server, user=self.bind_dn, password=self.password, auto_bind=True, receive_timeout=5
        )

    def issue_client_certificate(self, name: str = "admin") -> tuple[Path, Path]:
        """A client certificate and key (PEM files) signed by this server's CA.

        The subject is ``CN=<name>,O=kmq test``. slapd maps it (``authz-regexp``) for SASL
        EXTERNAL: ``admin`` becomes the rootdn (``bind_dn``); any other name becomes
        ``cn=<name>,ou=Users,<base_dn>`` (a reader under the template's ACLs).

        Returns:
            tuple[Path, Path]: (certificate file, private key file), in the server's workdir.

        Raises:
            SlapdError: the server was not created with ``tls=True`` or is not started.
        """
        if self._ca is None:
            raise SlapdError("client certificates need a started SlapdServer(tls=True)")
        return self._ca.issue(name, server=False)

    def add_sasl_user(self, name: str, password: str) -> str:
        """Create ``cn=<name>,ou=Users,<base_dn>`` with a clear-text password for SASL binds.

        With ``tls=True`` slapd maps the SASL DIGEST-MD5 / PLAIN user name ``name`` to this
        entry. DIGEST-MD5 needs the clear text on the server (it is a shared-secret mechanism);
        PLAIN is only offered over TLS.

        Returns:
            str: the entry's DN (a reader under the template's ACLs).

        Raises:
            SlapdError: the add failed (no ou=Users: start with load_bootstrap=True).
        """
        dn = f"cn={name},ou=Users,{self.base_dn}"
        connection = self.connect()
        try:
            attributes = {"sn": name, "userPassword": password}
            if not connection.add(dn, ["inetOrgPerson"], attributes):
                raise SlapdError(f"cannot add SASL user {dn}: {connection.result}")
        finally:
            connection.unbind()
        return dn

    def log(self) -> str:
        """slapd's stderr so far (empty when not started)."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(encoding="utf-8", errors="replace")

    # -- internals -------------------------------------------------------------------------

    def _write_config(self) -> Path:
        assert self.workdir is not None
        database = self.workdir / "db"
        database.mkdir()
        template = deploy_file("ldap/slapd.conf.template").read_text(encoding="utf-8")
        text = render_template(
            template,
            {
                "schema_dir": str(SCHEMA_DIR),
                "kmq_schema": str(deploy_file("ldap/kmq.schema")),
                "pidfile": str(self.workdir / "slapd.pid"),
                "directory": str(database),
                "suffix": self.base_dn,
                "rootdn": self.bind_dn,
                "rootpw": self.password,
            },
        )
        conf = self.workdir / "slapd.conf"
        conf.write_text(_insert_global(text, self._global_directives()), encoding="utf-8")
        return conf

    def _global_directives(self) -> list[str]:
        """TLS and SASL EXTERNAL lines for the global section (none for a plain server).

        The template stays the plain deployment; these are test-only additions, so they are
        added here rather than as optional template blocks.
        """
        lines: list[str] = []
        if self.tls:
            assert self.workdir is not None
            tls_dir = self.workdir / "tls"
            tls_dir.mkdir(mode=0o700)
            self._ca = TestCertificateAuthority(tls_dir)
            self.ca_file = self._ca.ca_file
            cert, key = self._ca.issue("127.0.0.1", server=True, ip_addresses=("127.0.0.1",))
            organization = TEST_ORGANIZATION.lower()
            lines += [
                f"TLSCACertificateFile {self.ca_file}",
                f"TLSCertificateFile {cert}",
                f"TLSCertificateKeyFile {key}",
                # Ask for a client certificate but do not require one: simple binds over TLS
                # work without, SASL EXTERNAL binds use it.
                "TLSVerifyClient try",
                # SASL EXTERNAL over TLS authenticates as the certificate's subject DN, which
                # slapd matches here normalized (lower case, RFC 4514 order).
                f'authz-regexp "^cn=admin,o={organization}$" "{self.bind_dn}"',
                f'authz-regexp "^cn=([^,]+),o={organization}$" "cn=$1,ou=Users,{self.base_dn}"',
                # SASL DIGEST-MD5 and PLAIN authenticate user names (uid=<name>[,cn=<realm>],
                # cn=<mech>,cn=auth); slapd checks the password against that entry's
                # userPassword, which DIGEST-MD5 needs in clear text (see add_sasl_user).
                (
                    'authz-regexp "^uid=([^,]+)(,cn=[^,]+)?,cn=(digest-md5|plain),cn=auth$" '
                    f'"cn=$1,ou=Users,{self.base_dn}"'
                ),
            ]
        if self.ldapi:
            # Over ldapi, EXTERNAL authenticates as the peer's uid/gid; '.' stands for the '+'
            # of the multi-valued RDN, which would need escaping in a regex.
            lines.append(
                f'authz-regexp "^gidnumber={os.getgid()}.uidnumber={os.getuid()},'
                f'cn=peercred,cn=external,cn=auth$" "{self.bind_dn}"'
            )
        return lines

    @staticmethod
    def _check_config(slaptest: str, conf: Path) -> None:
        result = subprocess.run(
            [slaptest, "-u", "-f", str(conf)], capture_output=True, text=True, timeout=30
        )
        if result.returncode != 0:
            output = result.stdout + result.stderr
            raise SlapdError(f"slaptest rejected {conf} (exit {result.returncode}):\n{output}")

    def _listen_urls(self) -> str:
        """slapd's ``-h`` argument: every listener of this server (trailing slashes required)."""
        urls = [self.url + "/"]
        if self.tls:
            urls.append(self.ldaps_url + "/")
        if self.ldapi:
            urls.append(self.ldapi_url + "/")
        return " ".join(urls)

    def _launch(self, attempts: int = 3, *, keep_ports: bool = False) -> None:
        """Start slapd on free ports; retry on new ports if another process took one first.

        With ``keep_ports`` (restart) the ports are fixed, so there is nothing to retry.
        """
        assert self.workdir is not None and self._conf is not None
        for attempt in range(1, attempts + 1):
            if not keep_ports:
                self.port = _free_port()
                self.tls_port = _free_port() if self.tls else 0
            self._launches += 1
            self._log_path = self.workdir / f"slapd-{self._launches}.log"
            with open(self._log_path, "wb") as log:
                self._process = subprocess.Popen(
                    [self._slapd, "-f", str(self._conf), "-h", self._listen_urls(), "-d", "0"],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                self._wait_ready()
                return
            except SlapdError:
                self.halt()
                if keep_ports or "Address already in use" not in self.log() or attempt == attempts:
                    raise

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        last_error = "no attempt"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SlapdError(
                    f"slapd exited with {self._process.returncode} before accepting binds on "
                    f"{self.url}:\n{self.log()}"
                )
            try:
                # Probe with a plain socket first: ldap3 leaves the socket of a refused
                # connection open, which would leak one per poll while slapd starts.
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                self.connect(schema=False).unbind()
                return
            except (OSError, LDAPException) as exc:
                last_error = str(exc)
                time.sleep(0.02)
        raise SlapdError(
            f"slapd did not accept a bind on {self.url} within {self.startup_timeout} s "
            f"(last error: {last_error}):\n{self.log()}"
        )

    def _load_bootstrap(self) -> None:
        connection = self.connect()
        try:
            for dn, attributes in bootstrap_entries(self.base_dn):
                if not connection.add(dn, attributes={k: list(v) for k, v in attributes.items()}):
                    raise SlapdError(f"cannot add bootstrap entry {dn}: {connection.result}")
        finally:
            connection.unbind()

    def __repr__(self) -> str:
        state = "running" if self._process is not None else "stopped"
        return f"SlapdServer({self.url}, base_dn={self.base_dn!r}, {state})"


def _insert_global(config: str, lines: list[str]) -> str:
    """``config`` with ``lines`` added to the global section (just before the first database)."""
    if not lines:
        return config
    match = re.search(r"^database\s", config, re.MULTILINE)
    if match is None:
        raise SlapdError("slapd.conf.template has no 'database' line to put TLS settings before")
    block = "# Added by tests/support/slapd.py\n" + "\n".join(lines) + "\n\n"
    return config[: match.start()] + block + config[match.start() :]
