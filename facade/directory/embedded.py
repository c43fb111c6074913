"""The embedded directory: MSMQ's public objects in a JSON file, served by ldap3's mock server.

MSMQ without Active Directory runs in workgroup mode, where public queues and distribution lists
do not exist. kmq instead always has a directory: a real LDAP server when one is configured, and
otherwise this store, an in-process ldap3 ``MOCK_SYNC`` connection whose entries live in
``$KMQ_HOME/directory.json``. Code above it talks LDAP through ``store.connection`` exactly as it
would to slapd, so the same directory code and tests run against both.

The mock server knows OpenLDAP 2.4's standard schema (``ldap3.OFFLINE_SLAPD_2_4``) plus
``deploy/ldap/kmq.schema``, so misspelt attribute or class names fail as they would on slapd and
values come back typed (``mSMQTransactional`` as bool, quotas as int). It does not check required
attributes, parents, referential integrity or access: the directory code above does.

Several kmq processes (CLI invocations, a queue manager) may share one file, so every access is
a short critical section::

    with store.write() as conn:      # thread lock + exclusive flock on directory.json.lock
        ...                          #   reloaded first if another process changed the file
        conn.add(dn, attributes=...) # saved atomically on exit; rolled back if the body raises

The file has ldap3's own JSON dump format (``{"entries": [{"dn": ..., "raw": {...}}]}``, what
``Connection.response_to_file(raw=True)`` writes), so ldap3 tools can read it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import re
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ldap3
from ldap3.core.exceptions import LDAPException
from ldap3.protocol.rfc4512 import SchemaInfo
from ldap3.protocol.schemas.slapd24 import slapd_2_4_dsa_info, slapd_2_4_schema
from ldap3.utils.conv import format_json, json_hook

from facade.directory.layout import (
    DEFAULT_BASE_DN,
    LdifEntry,
    bootstrap_entries,
    dn_key,
    schema_path,
    validate_base_dn,
)
from facade.errors import ConfigurationError, DirectoryUnavailable

__all__ = ["EmbeddedDirectoryStore", "embedded_schema", "parse_slapd_schema"]

#: Name of the mock server (appears in ldap3 reprs and logs).
_SERVER_NAME = "kmq-embedded"
#: Pseudo-entries ldap3's mock keeps in the DIT that are not directory content.
_NOT_CONTENT = {"cn=schema"}
#: Attributes the mock computes itself; never written to the file.
_OPERATIONAL = {"entrydn"}
#: File signature standing for "there is no file".
_MISSING = (0, 0, 0)


# --- Schema: ldap3's offline slapd 2.4 schema + kmq.schema ------------------------------------

_DIRECTIVE = re.compile(
    r"^(objectidentifier|attributetypes?|objectclass(?:es)?)\s+(.*)$", re.I | re.S
)
_OID_MACRO = re.compile(r"^\(\s*([A-Za-z][\w-]*)(?::([\d.]+))?\s")


def _resolve_oid(name: str, macros: dict[str, str]) -> str:
    """Expand an ``objectidentifier`` macro reference such as ``kmqAttr:12``."""
    prefix, _, suffix = name.partition(":")
    if prefix not in macros:
        return name
    base = macros[prefix]
    return f"{base}.{suffix}" if suffix else base


def parse_slapd_schema(text: str) -> tuple[list[str], list[str]]:
    """Turn a slapd.conf-format schema file into RFC 4512 definition strings.

    Handles ``objectidentifier`` macros (``kmqAttr:1`` in the OID position), comments and
    continuation lines, which is all ``kmq.schema`` uses.

    Args:
        text (str): the schema file.

    Returns:
        tuple[list[str], list[str]]: attribute type and object class definitions, one line each.
    """
    directives: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace() and directives:
            directives[-1] += " " + line.strip()
        else:
            directives.append(line.strip())

    macros: dict[str, str] = {}
    attribute_types: list[str] = []
    object_classes: list[str] = []
    for directive in directives:
        match = _DIRECTIVE.match(directive)
        if not match:
            continue
        keyword, body = match.group(1).lower(), match.group(2).strip()
        if keyword == "objectidentifier":
            name, value = body.split(None, 1)
            macros[name] = _resolve_oid(value.strip(), macros)
            continue
        oid = _OID_MACRO.match(body)
        if oid and oid.group(1) in macros:
            full = _resolve_oid(f"{oid.group(1)}:{oid.group(2) or ''}".rstrip(":"), macros)
            body = f"( {full} " + body[oid.end() :]
        (attribute_types if keyword.startswith("attributetype") else object_classes).append(body)
    return attribute_types, object_classes


@functools.lru_cache(maxsize=1)
def _schema_json() -> str:
    """ldap3's offline OpenLDAP 2.4 schema with kmq.schema's definitions appended (cached)."""
    path = schema_path()
    attribute_types, object_classes = parse_slapd_schema(path.read_text(encoding="utf-8"))
    definition = json.loads(slapd_2_4_schema)
    definition["raw"]["attributeTypes"] = (
        list(definition["raw"]["attributeTypes"]) + attribute_types
    )
    definition["raw"]["objectClasses"] = list(definition["raw"]["objectClasses"]) + object_classes
    return json.dumps(definition)


def embedded_schema() -> SchemaInfo:
    """The schema the embedded store's mock server checks names and formats values with.

    Raises:
        ConfigurationError: kmq.schema is missing or does not parse (a broken install).
    """
    try:
        return SchemaInfo.from_json(_schema_json())
    except (LDAPException, ValueError, KeyError) as exc:
        raise ConfigurationError(
            f"cannot build the embedded directory schema from {schema_path()}: {exc}",
            hint="restore deploy/ldap/kmq.schema from the kmq distribution",
        ) from exc


# --- The store ---------------------------------------------------------------------------------


def _save_hint(exc: OSError, directory: Path) -> str:
    """The fix for a failed save, by cause."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"free disk space (or quota) on the file system of {directory}"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"make {directory} writable for this user, or point KMQ_HOME elsewhere"
    return f"check {directory} (permissions, disk space, file system)"


def _unavailable(
    path: Path, what: str, exc: BaseException | None, hint: str
) -> DirectoryUnavailable:
    detail = f": {exc}" if exc is not None else ""
    return DirectoryUnavailable(f"embedded directory {path}: {what}{detail}", hint=hint)


class EmbeddedDirectoryStore:
    """An LDAP directory in one JSON file, for kmq installations without an LDAP server.

    Args:
        path (str | os.PathLike): the JSON file, e.g. ``$KMQ_HOME/directory.json``. Its directory
            is created if missing; a sibling ``<name>.lock`` file serialises processes.
        base_dn (str): the suffix :meth:`initialize` creates by default (``dc=kmq,dc=local``).

    Use :meth:`read` / :meth:`write` around every access; ``connection`` alone is not locked.
    The store is also a context manager (``with EmbeddedDirectoryStore(p) as store:``), which
    opens it and closes it.

    Raises:
        ConfigurationError: ``base_dn`` is not a DN.
    """

    #: ldap3's mock turns a substring filter back into text without escaping its values and
    #: parses it again (``(`` in a value is an LDAPInvalidFilterError, ``*)(objectClass=*``
    #: matches everything): label patterns are matched in Python instead
    #: (:mod:`facade.directory.patterns`).
    evaluates_substring_filters = False

    def __init__(self, path: str | os.PathLike[str], *, base_dn: str = DEFAULT_BASE_DN):
        self.path = Path(path).expanduser().absolute()
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.base_dn = validate_base_dn(base_dn)
        self._mutex = threading.RLock()  # MOCK_SYNC is not thread-safe
        self._connection: ldap3.Connection | None = None
        self._lock_fd: int | None = None
        self._depth = 0  # nesting of read()/write() in the owning thread
        self._locked = False  # the outermost section holds the process lock
        self._mutated = False  # a write() ran inside the current outermost section
        self._loaded_signature: tuple[int, int, int] | None = None  # None: never loaded
        #: Bumped whenever the in-memory directory is replaced or saved: the change marker.
        self._generation = 0
        self._saved_text: str | None = None  # serialized DIT as last loaded or saved

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> EmbeddedDirectoryStore:
        """Create the mock server, bind, and load the file if it exists (idempotent).

        Returns:
            EmbeddedDirectoryStore: self, for chaining.

        Raises:
            DirectoryUnavailable: the directory of ``path`` cannot be created or the lock file
                cannot be opened (fix permissions or set KMQ_HOME elsewhere), or the file is
                unreadable or corrupt (restore it, or move it away to start empty).
        """
        with self._mutex:
            if self._connection is not None:
                return self
            self._open_lock_file()
            try:
                server = ldap3.Server.from_definition(
                    _SERVER_NAME, slapd_2_4_dsa_info, embedded_schema()
                )
                connection = ldap3.Connection(server, client_strategy=ldap3.MOCK_SYNC)
                # auto_bind does not work on the mock: bind explicitly (anonymous; no ACLs here).
                if not connection.bind():
                    raise _unavailable(
                        self.path, "mock bind failed", None, "report this as a kmq bug"
                    )
                self._connection = connection
                with self.read():
                    pass  # loads the file under the process lock
            except BaseException:
                self._connection = None
                self._close_lock_file()
                raise
        return self

    def close(self) -> None:
        """Save unsaved changes and release the lock file. Safe to call twice.

        Every :meth:`write` already saved its changes, so this only persists changes made
        through ``connection`` outside :meth:`write` (last writer wins for those). A store that
        was only read never rewrites the file, so closing it cannot undo another process's save.

        Raises:
            DirectoryUnavailable: the final save failed (the previous file is kept).
        """
        with self._mutex:
            if self._connection is None:
                return
            try:
                # _saved_text is None after a failed load: never overwrite a file we could not
                # read (the user needs it to recover).
                if self._saved_text is not None and self._serialize() != self._saved_text:
                    self.save()
            finally:
                with contextlib.suppress(LDAPException):
                    self._connection.unbind()
                self._connection = None
                self._loaded_signature = None
                self._saved_text = None
                self._close_lock_file()

    def __enter__(self) -> EmbeddedDirectoryStore:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        """True between :meth:`open` and :meth:`close`."""
        return self._connection is not None

    @property
    def description(self) -> str:
        """Human-readable name for messages: ``"embedded directory /path/to/directory.json"``
        (the same property as ``LdapDirectoryStore.description``)."""
        return f"embedded directory {self.path}"

    @property
    def connection(self) -> ldap3.Connection:
        """The bound ldap3 MOCK_SYNC connection.

        Use it inside :meth:`read` or :meth:`write` (which also return it); outside them it is
        neither locked against other threads nor synchronised with other processes.

        Raises:
            DirectoryUnavailable: the store is not open; call :meth:`open` first.
        """
        if self._connection is None:
            raise _unavailable(self.path, "the store is not open", None, "call open() first")
        return self._connection

    # -- critical sections -----------------------------------------------------------------

    @contextlib.contextmanager
    def read(self) -> Iterator[ldap3.Connection]:
        """Hold the store for reading: thread lock, and the file's latest content.

        When the file is still the version in memory (one ``stat``), the section takes no
        process lock: every save replaces the file by rename, so the version in memory is a
        complete one and no other process can change it. Otherwise the section takes the
        exclusive process lock and reloads, as :meth:`write` does. A :meth:`write` nested in a
        read that took no lock takes it then, and fails if another process saved in between
        (the read's earlier answers could be stale); sections are short, so this is rare.

        Yields:
            ldap3.Connection: the bound mock connection.

        Raises:
            DirectoryUnavailable: the store is closed, the lock cannot be taken, or the file
                changed on disk and cannot be reloaded.
        """
        with self._section(reading=True) as connection:
            yield connection

    @contextlib.contextmanager
    def write(self) -> Iterator[ldap3.Connection]:
        """Hold the store for a change: like :meth:`read`, then save atomically on exit.

        One ``write()`` is one all-or-nothing change to the file: if the body raises, the
        in-memory directory is reloaded from the file (discarding the partial change) and the
        exception propagates. Nested sections join the outermost one, which saves.

        Yields:
            ldap3.Connection: the bound mock connection.

        Raises:
            DirectoryUnavailable: as :meth:`read`, or the save failed (the file keeps its
                previous content and so does the in-memory directory).
        """
        with self._section() as connection:
            self._mutated = True
            yield connection

    @contextlib.contextmanager
    def _section(self, *, reading: bool = False) -> Iterator[ldap3.Connection]:
        with self._mutex:
            connection = self.connection
            if self._depth > 0:  # nested: the outermost section reloads, saves and unlocks
                if not reading and not self._locked:
                    self._lock_unchanged()
                self._depth += 1
                try:
                    yield connection
                finally:
                    self._depth -= 1
                return
            # A stat instead of two flock calls: each system call releases the GIL, which a
            # sending thread then waits to get back from the producer's poller thread.
            locked = not reading or self._signature() != self._loaded_signature
            if locked:
                self._flock(fcntl.LOCK_EX)
            self._depth, self._mutated, self._locked = 1, False, locked
            try:
                if locked:
                    self._reload_if_changed()
                try:
                    yield connection
                except BaseException:
                    if self._mutated:
                        self._reload()  # roll back the partial change
                    raise
                if self._mutated:
                    self._save_or_roll_back()
            finally:
                unlock = self._locked
                self._depth, self._mutated, self._locked = 0, False, False
                if unlock:
                    self._flock(fcntl.LOCK_UN)

    def _lock_unchanged(self) -> None:
        """Take the process lock for a write nested in a read section that took none.

        Raises:
            DirectoryUnavailable: another process saved the file since the read began (its
                answers may be stale); retry the operation.
        """
        self._flock(fcntl.LOCK_EX)
        if self._signature() != self._loaded_signature:
            self._flock(fcntl.LOCK_UN)
            raise _unavailable(
                self.path, "another process changed it during a read that nests a change", None,
                "retry the operation")
        self._locked = True

    def change_marker(self, connection: ldap3.Connection) -> int | None:
        """A value that changes whenever the directory's content may have changed.

        Call it inside :meth:`read`, which has just reloaded the file if any process changed
        it: the marker is a counter bumped by every reload and every save, so it costs no I/O
        beyond the ``stat`` the section makes anyway. None inside a change not saved yet.

        Args:
            connection (ldap3.Connection): the section's connection (unused here).

        Returns:
            int | None: the marker; None when it cannot be trusted now.
        """
        return None if self._mutated else self._generation

    def save(self) -> None:
        """Write the in-memory directory to the file now (atomically).

        Prefer :meth:`write`, which reloads other processes' changes first; a bare ``save()``
        overwrites them.

        Raises:
            DirectoryUnavailable: the file cannot be written; the previous file is kept.
        """
        with self._mutex:
            self.connection  # noqa: B018 - raises when closed
            if self._depth > 0:
                if not self._locked:
                    self._lock_unchanged()
                self._write_file()
                return
            self._flock(fcntl.LOCK_EX)
            try:
                self._write_file()
            finally:
                self._flock(fcntl.LOCK_UN)

    def reload(self) -> None:
        """Discard the in-memory directory and read the file again.

        Raises:
            DirectoryUnavailable: the file is unreadable or corrupt.
        """
        with self._section():
            self._reload()

    # -- bootstrap --------------------------------------------------------------------------

    def initialize(self, base_dn: str | None = None) -> int:
        """Create the base entries (suffix, ou=Computers, ou=Aliases, ...) that are missing.

        The content is ``deploy/ldap/bootstrap.ldif``, moved under ``base_dn``: the same entries
        a real slapd starts with. Existing entries are left alone, so this is idempotent.

        Args:
            base_dn (str | None): the suffix; None means the store's ``base_dn``.

        Returns:
            int: number of entries created (0 when already initialized).

        Raises:
            ConfigurationError: ``base_dn`` is not usable as a suffix.
            DirectoryUnavailable: the store cannot be saved.
        """
        entries = bootstrap_entries(base_dn or self.base_dn)
        with self.read():
            if not self._missing(entries):
                return 0  # the common case: do not rewrite the file
        created = 0
        with self.write() as connection:
            for dn, attributes in self._missing(entries):
                if not connection.add(dn, attributes={k: list(v) for k, v in attributes.items()}):
                    raise _unavailable(
                        self.path,
                        f"cannot create base entry {dn}",
                        None,
                        f"ldap3 said {connection.result}; report this as a kmq bug",
                    )
                created += 1
        return created

    def _missing(self, entries: list[LdifEntry]) -> list[LdifEntry]:
        dit = self._dit()
        # Fast path: the mock keys entries by DN case-insensitively, and bootstrap DNs are
        # normalized. Only when something looks missing compare every DN canonically.
        candidates = [(dn, attrs) for dn, attrs in entries if dn not in dit]
        if not candidates:
            return []
        existing = {dn_key(dn) for dn in dit}
        return [(dn, attrs) for dn, attrs in candidates if dn_key(dn) not in existing]

    # -- internals: DIT, file, locks ------------------------------------------------------

    def _dit(self) -> Any:
        """The mock server's entry store: CaseInsensitiveDict of DN -> {attribute: [bytes]}."""
        return self.connection.server.dit

    def _open_lock_file(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _unavailable(
                self.path,
                f"cannot create its directory or lock file {self.lock_path}",
                exc,
                f"make {self.path.parent} writable for this user, or point KMQ_HOME (or "
                "directory.url = 'embedded:PATH') at a writable place",
            ) from exc

    def _close_lock_file(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def _flock(self, operation: int) -> None:
        assert self._lock_fd is not None
        try:
            fcntl.flock(self._lock_fd, operation)
        except OSError as exc:
            raise _unavailable(
                self.path,
                f"cannot lock {self.lock_path}",
                exc,
                "check that the file system supports flock (local disk, not some network mounts)",
            ) from exc

    def _signature(self) -> tuple[int, int, int]:
        """Identity of the file's current version: (inode, mtime ns, size); _MISSING if absent.

        Every save replaces the file by rename, so a new version has a new inode.
        """
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return _MISSING
        except OSError as exc:
            raise _unavailable(
                self.path, "cannot stat the file", exc, "fix its permissions"
            ) from exc
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def _reload_if_changed(self) -> None:
        if self._signature() != self._loaded_signature:
            self._reload()

    def _reload(self) -> None:
        """Replace the DIT with the file's content (an empty DIT when there is no file)."""
        signature = self._signature()
        self._loaded_signature = self._saved_text = None
        self._clear_dit()
        if signature != _MISSING:
            self._load_file()
        self._loaded_signature = signature
        self._saved_text = self._serialize()
        self._generation += 1

    def _clear_dit(self) -> None:
        server = self.connection.server
        with server.dit_lock:
            for dn in [dn for dn in server.dit if dn.lower() not in _NOT_CONTENT]:
                del server.dit[dn]

    def _load_file(self) -> None:
        """Load every entry of the file, or fail as a whole (never a silently partial DIT).

        ldap3's ``strategy.entries_from_json`` reads this format too, but it drops an entry
        whose object class the schema does not know without a word; a later save would then
        delete it from the file. This loader checks each entry.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
            document = json.loads(text, object_hook=json_hook)
            entries = document["entries"]
            if not isinstance(entries, list):
                raise ValueError('"entries" is not a list')
        except FileNotFoundError:
            return  # removed since stat: an empty directory
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            self._clear_dit()
            raise self._corrupt(exc) from exc

        strategy = self.connection.strategy
        for position, entry in enumerate(entries):
            try:
                dn, raw = entry["dn"], entry["raw"]
                # add_entry reports an unknown class or a multi-valued single-valued attribute
                # by returning False and an unknown attribute by KeyError.
                if not strategy.add_entry(dn, {k: list(v) for k, v in raw.items()}, validate=False):
                    raise ValueError(f"entry {dn!r} does not fit the kmq schema or is duplicated")
            except (LDAPException, ValueError, KeyError, TypeError, AttributeError) as exc:
                self._clear_dit()
                raise self._corrupt(exc, f"entry #{position}") from exc

    def _corrupt(self, exc: BaseException, where: str = "") -> DirectoryUnavailable:
        place = f" ({where})" if where else ""
        return _unavailable(
            self.path,
            f"unreadable or corrupt{place}",
            exc,
            f"restore {self.path.name} from a backup, or move it away to start an empty directory "
            "(kmq recreates the base entries; public queues, aliases and lists must be created "
            "again); a file written by a newer kmq needs that kmq version",
        )

    def _serialize(self) -> str:
        """The DIT in ldap3's JSON dump format, parents first, stable order for diffs."""
        entries = []
        for dn, attributes in self._dit().items():
            if dn.lower() in _NOT_CONTENT:
                continue
            raw = {
                # The mock rebuilds objectClass from a set: sort it so the file is stable.
                name: sorted(values) if name.lower() == "objectclass" else list(values)
                for name, values in attributes.items()
                if name.lower() not in _OPERATIONAL
            }
            entries.append({"dn": dn, "raw": raw})
        entries.sort(key=lambda e: (e["dn"].count(","), dn_key(e["dn"])))
        document = {"entries": entries}
        return json.dumps(
            document, default=format_json, ensure_ascii=True, sort_keys=True, indent=2
        )

    def _write_file(self) -> None:
        """Atomic replace: temp file in the same directory, fsync, rename, fsync the directory."""
        text = self._serialize()
        data = text.encode("utf-8")
        temp_path: str | None = None
        try:
            fd, temp_path = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
            )
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), self._file_mode())
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp_path, self.path)
            temp_path = None
            self._fsync_directory()
        except OSError as exc:
            raise _unavailable(
                self.path,
                "cannot save (the previous version of the file is unchanged)",
                exc,
                _save_hint(exc, self.path.parent),
            ) from exc
        finally:
            if temp_path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp_path)
        self._loaded_signature = self._signature()
        self._saved_text = text
        self._generation += 1

    def _save_or_roll_back(self) -> None:
        try:
            self._write_file()
        except DirectoryUnavailable:
            # Keep memory equal to the file: the change was not saved, so it did not happen.
            with contextlib.suppress(DirectoryUnavailable):
                self._reload()
            raise

    def _file_mode(self) -> int:
        """Keep the existing file's permissions; a new file is private to the user."""
        try:
            return stat.S_IMODE(self.path.stat().st_mode)
        except OSError:
            return 0o600

    def _fsync_directory(self) -> None:
        # Makes the rename itself durable; some file systems refuse fsync on directories.
        with contextlib.suppress(OSError):
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"EmbeddedDirectoryStore({str(self.path)!r}, base_dn={self.base_dn!r}, {state})"
