"""A throwaway OpenLDAP server for tests: kmq's real-directory counterpart of the embedded store.

``SlapdServer`` renders ``deploy/ldap/slapd.conf.template`` into a temporary directory, checks it
with ``slaptest``, runs ``slapd`` in the foreground on a free loopback port, waits until a bind
works and loads the same base entries as ``bootstrap.ldif``::

    reason = slapd_available()
    if reason:
        pytest.skip(reason)
    with SlapdServer() as server:
        conn = server.connect()          # bound as the rootdn

It never touches the system slapd service or its configuration.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import ldap3
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


class SlapdServer:
    """A private slapd on 127.0.0.1 with kmq's schema, refint and base entries.

    Args:
        base_dn (str): the suffix (default ``dc=kmq,dc=local``).
        load_bootstrap (bool): add the bootstrap.ldif base entries after start.
        startup_timeout (float): seconds to wait for the first successful bind.

    Attributes:
        url (str): ``ldap://127.0.0.1:<port>`` (usable as ``ldap3.Server(url)``).
        base_dn (str), bind_dn (str), password (str): the suffix and the rootdn credentials.
        workdir (Path | None): the temporary directory (config, database, logs) while running.
    """

    def __init__(
        self,
        *,
        base_dn: str = DEFAULT_BASE_DN,
        load_bootstrap: bool = True,
        startup_timeout: float = 10.0,
    ):
        self.base_dn = normalize_dn(base_dn)
        self.bind_dn = f"cn=admin,{self.base_dn}"
        self.password = secrets.token_urlsafe(16)
        self.load_bootstrap = load_bootstrap
        self.startup_timeout = startup_timeout
        self.port = 0
        self.workdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @property
    def url(self) -> str:
        # No trailing slash: ldap3.Server("ldap://host:port/") fails to parse the port.
        return f"ldap://127.0.0.1:{self.port}"

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
        self.workdir = Path(tempfile.mkdtemp(prefix="kmq-slapd-"))
        try:
            conf = self._write_config()
            self._check_config(slaptest, conf)
            self._launch(slapd, conf)
            if self.load_bootstrap:
                self._load_bootstrap()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Terminate slapd (kill after 5 s) and delete the temporary directory. Idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

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
        conf.write_text(text, encoding="utf-8")
        return conf

    @staticmethod
    def _check_config(slaptest: str, conf: Path) -> None:
        result = subprocess.run(
            [slaptest, "-u", "-f", str(conf)], capture_output=True, text=True, timeout=30
        )
        if result.returncode != 0:
            output = result.stdout + result.stderr
            raise SlapdError(f"slaptest rejected {conf} (exit {result.returncode}):\n{output}")

    def _launch(self, slapd: str, conf: Path, attempts: int = 3) -> None:
        """Start slapd on a free port; retry on a new port if another process took it first."""
        assert self.workdir is not None
        for attempt in range(1, attempts + 1):
            self.port = _free_port()
            self._log_path = self.workdir / f"slapd-{attempt}.log"
            with open(self._log_path, "wb") as log:
                self._process = subprocess.Popen(
                    [slapd, "-f", str(conf), "-h", self.url + "/", "-d", "0"],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                self._wait_ready()
                return
            except SlapdError:
                if "Address already in use" not in self.log() or attempt == attempts:
                    raise
                self._process = None

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
                self.connect(schema=False).unbind()
                return
            except LDAPException as exc:
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
