"""kmq configuration: where the Kafka broker, the directory and the local state are.

Sources, strongest first: keyword arguments to :meth:`KmqConfig.load`, environment variables, a
``kmq.toml`` file, and the defaults. With nothing configured, kmq uses the local dev stack
(``kmq dev up``): a Kafka-API broker on loopback and the embedded directory under ``KMQ_HOME``.

================================ ============================ ==================================
Environment variable             ``kmq.toml`` key             Meaning
================================ ============================ ==================================
``KMQ_CONFIG``                   (n/a)                        path of the ``kmq.toml`` to read
``KMQ_BOOTSTRAP_SERVERS``        ``bootstrap_servers``        Kafka ``bootstrap.servers``;
                                                              unset: dev stack broker
``KMQ_DIRECTORY_URL``            ``directory.url``            ``ldap://host:port``,
                                                              ``ldaps://...``, ``ldapi://...``,
                                                              ``embedded:PATH`` or ``none``
                                                              (workgroup mode: no directory);
                                                              unset: embedded store under
                                                              ``KMQ_HOME``
``KMQ_DIRECTORY_BASE_DN``        ``directory.base_dn``        directory suffix
                                                              (``dc=kmq,dc=local``)
``KMQ_DIRECTORY_BIND_DN``        ``directory.bind_dn``        simple-bind DN (SASL: user name)
``KMQ_DIRECTORY_PASSWORD``       ``directory.password``       bind password
``KMQ_DIRECTORY_STARTTLS``       ``directory.starttls``       ``1``/``true``: StartTLS on
                                                              ``ldap://``
``KMQ_DIRECTORY_CA_FILE``        ``directory.ca_file``        PEM CA bundle to verify the LDAP
                                                              server; unset: system trust store
``KMQ_DIRECTORY_CERT_FILE``      ``directory.cert_file``      PEM client certificate (TLS client
                                                              auth, SASL EXTERNAL)
``KMQ_DIRECTORY_KEY_FILE``       ``directory.key_file``       PEM private key of ``cert_file``
``KMQ_DIRECTORY_SASL_MECHANISM`` ``directory.sasl_mechanism`` ``EXTERNAL``, ``DIGEST-MD5`` or
                                                              ``PLAIN``; unset: simple bind
``KMQ_DIRECTORY_TIMEOUT``        ``directory.timeout``        LDAP connect and response timeout
                                                              in seconds (default 5)
``KMQ_HOME``                     ``home``                     state directory (``~/.kmq``)
``KMQ_QUEUE_MANAGER``            ``queue_manager``            queue manager (machine) name;
                                                              default this host's name,
                                                              lowercased
``KMQ_PRINCIPAL``                ``principal``                the caller's identity for MSMQ
                                                              access checks; default the login
                                                              name (``getpass.getuser()``)
``KMQ_REPLICATION_FACTOR``       ``replication_factor``       replication factor of the topics
                                                              kmq creates (default 3; capped at
                                                              the cluster's broker count)
``KMQ_MIN_INSYNC_REPLICAS``      ``min_insync_replicas``      ``min.insync.replicas`` of those
                                                              topics (default 2, or the
                                                              replication factor if smaller)
``KMQ_MAX_SEND_FANOUT``          ``max_send_fanout``          most queues one send may reach (a
                                                              distribution list or multiple-
                                                              element name; default 1000)
``KMQ_MAX_SEND_BYTES``           ``max_send_bytes``           most bytes one send to several
                                                              queues may write: message bodies
                                                              x queues (default 67108864,
                                                              64 MiB)
``KMQ_KAFKA_*``                  ``[kafka]`` table            extra librdkafka properties (TLS,
                                                              SASL; the variables are listed
                                                              in :mod:`facade.kafka_security`,
                                                              which checks them)
================================ ============================ ==================================

The two send bounds protect the sending process from a send that multiplies its body: a
distribution list or multiple-element name writes one copy per queue, all held in the sender's
memory (and, for recoverable messages, its outgoing queue) until the broker has them. A send
over either bound is refused with :class:`~facade.errors.InvalidParameter` before anything is
written (:func:`facade.queues.sending.check_fan_out`); a send to one queue is bounded by the message
size alone. Defaults: 1000 queues, more than a hand-kept distribution list has; 64 MiB, the
bodies a sending process may have to hold at once: sixteen of MSMQ's largest (4 MB) bodies, or
a 64 KiB body sent to 1000 queues, about twice that in the sender's resident memory.

A ``kmq.toml`` is read from ``KMQ_CONFIG`` if set, else ``./kmq.toml``, else
``$KMQ_HOME/kmq.toml``. Unknown keys are rejected, so a misspelling is an error, not a silent
default.
"""

from __future__ import annotations

import getpass
import math
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from facade.arguments import FieldTypes, mistyped_field
from facade.errors import ConfigurationError
from facade.kafka_security import check_kafka_security, kafka_security_from_env

__all__ = [
    "DEFAULT_BASE_DN",
    "DEFAULT_DIRECTORY_TIMEOUT",
    "DEFAULT_HOME",
    "DEFAULT_MAX_SEND_BYTES",
    "DEFAULT_MAX_SEND_FANOUT",
    "DEFAULT_MIN_INSYNC_REPLICAS",
    "DEFAULT_REPLICATION_FACTOR",
    "SASL_MECHANISMS",
    "WORKGROUP_URL",
    "DirectorySettings",
    "KmqConfig",
    "replication_settings",
]

#: Default state directory when ``KMQ_HOME`` is not set.
DEFAULT_HOME = Path("~/.kmq")
#: Default directory suffix (matches ``deploy/ldap/bootstrap.ldif``).
DEFAULT_BASE_DN = "dc=kmq,dc=local"

#: Default replication factor of the topics kmq creates (Kafka's usual production setting).
DEFAULT_REPLICATION_FACTOR = 3
#: Default ``min.insync.replicas`` of those topics: an ``acks=all`` write is on two brokers.
DEFAULT_MIN_INSYNC_REPLICAS = 2
#: Default of the most queues one send may reach (see the module docstring).
DEFAULT_MAX_SEND_FANOUT = 1000
#: Default of the most bytes (bodies x queues) one send to several queues may write: 64 MiB.
DEFAULT_MAX_SEND_BYTES = 64 * 1024 * 1024

_TOP_KEYS = {"bootstrap_servers", "home", "queue_manager", "principal", "directory", "kafka",
             "replication_factor", "min_insync_replicas", "max_send_fanout", "max_send_bytes"}
#: The send bounds: (field and ``kmq.toml`` key, environment variable).
_SEND_BOUNDS = (("max_send_fanout", "KMQ_MAX_SEND_FANOUT"),
                ("max_send_bytes", "KMQ_MAX_SEND_BYTES"))
_DIRECTORY_KEYS = {
    "url",
    "base_dn",
    "bind_dn",
    "password",
    "starttls",
    "ca_file",
    "cert_file",
    "key_file",
    "sasl_mechanism",
    "timeout",
}
#: ``directory.url`` value meaning "no directory": MSMQ's workgroup mode.
WORKGROUP_URL = "none"
#: SASL mechanisms the LDAP store can bind with (upper case, as ldap3 and RFC 4422 spell them).
SASL_MECHANISMS = ("EXTERNAL", "DIGEST-MD5", "PLAIN")
#: Default LDAP connect and response timeout, in seconds.
DEFAULT_DIRECTORY_TIMEOUT = 5.0
#: Optional string settings of the directory read verbatim from the environment.
_DIRECTORY_STRING_VARIABLES = (
    ("KMQ_DIRECTORY_CA_FILE", "ca_file"),
    ("KMQ_DIRECTORY_CERT_FILE", "cert_file"),
    ("KMQ_DIRECTORY_KEY_FILE", "key_file"),
    ("KMQ_DIRECTORY_SASL_MECHANISM", "sasl_mechanism"),
)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class DirectorySettings:
    """Where the directory of public objects (MSMQ's Active Directory role) lives.

    Attributes:
        url (str | None): ``ldap://host:port``, ``ldaps://host:port``, ``ldapi://<socket>``,
            ``embedded:PATH``, or ``none`` for MSMQ's workgroup mode (no directory: no public
            queues, aliases or distribution lists); None means the embedded store at
            ``<home>/directory.json``.
        base_dn (str): the suffix under which kmq's entries live.
        bind_dn (str | None): DN for a simple bind, or the user name for SASL DIGEST-MD5/PLAIN;
            None binds anonymously (or, with SASL EXTERNAL, as the TLS/ldapi identity).
        password (str | None): password for ``bind_dn``. Never printed.
        starttls (bool): upgrade an ``ldap://`` connection with StartTLS.
        ca_file (str | None): PEM file of the CA(s) that sign the LDAP server's certificate;
            None trusts the system's CA store.
        cert_file (str | None): PEM client certificate presented in the TLS handshake (for SASL
            EXTERNAL, or a server that requires client certificates).
        key_file (str | None): PEM private key of ``cert_file`` (unencrypted).
        sasl_mechanism (str | None): ``EXTERNAL``, ``DIGEST-MD5`` or ``PLAIN`` (validated by
            :meth:`KmqConfig.load`, which also upper-cases it); None means a simple bind.
        timeout (float): seconds to wait for the TCP connect and for each LDAP response.

    Raises:
        ConfigurationError: a setting of the wrong type (named).
    """

    url: str | None = None
    base_dn: str = DEFAULT_BASE_DN
    bind_dn: str | None = None
    password: str | None = field(default=None, repr=False)
    starttls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    sasl_mechanism: str | None = None
    timeout: float = DEFAULT_DIRECTORY_TIMEOUT

    def __post_init__(self) -> None:
        _check_field_types(self, _DIRECTORY_TYPES, "directory.")

    @property
    def is_workgroup(self) -> bool:
        """True for ``url = "none"``: MSMQ workgroup mode, no directory of public objects."""
        return self.url is not None and self.url.strip().lower() == WORKGROUP_URL

    @property
    def is_embedded(self) -> bool:
        """True when the embedded ldap3 MOCK_SYNC store is used (never in workgroup mode)."""
        return self.url is None or self.url.startswith("embedded:")


#: The type of each setting (replication counts are checked by :func:`replication_settings`).
_CONFIG_TYPES: FieldTypes = {
    "bootstrap_servers": ((str, type(None)), "None or a str (host:port,...)"),
    "home": ((Path,), "a path (str or pathlib.Path)"),
    "queue_manager": ((str,), "a str"),
    "principal": ((str,), "a str"),
    "directory": ((DirectorySettings,), "a DirectorySettings"),
    "kafka_options": ((Mapping,), "a mapping of librdkafka property names to str values"),
}
_DIRECTORY_TYPES: FieldTypes = {
    **{name: ((str, type(None)), "None or a str")
       for name in ("url", "bind_dn", "password", "ca_file", "cert_file", "key_file",
                    "sasl_mechanism")},
    "base_dn": ((str,), "a str"),
    "starttls": ((bool,), "True or False"),
    "timeout": ((int, float), "seconds (a float)"),
}


def _check_field_types(settings: object, types: FieldTypes, prefix: str = "") -> None:
    """Raise ConfigurationError for the first setting of the wrong type; its value is not
    shown, since it may be a password."""
    mistyped = mistyped_field(settings, types)
    if mistyped is not None:
        name, expected, value = mistyped
        raise ConfigurationError(f"{prefix}{name} in the configuration must be {expected}, "
                                 f"not {type(value).__name__}")


@dataclass(frozen=True)
class KmqConfig:
    """Resolved kmq configuration. Build it with :meth:`load`.

    Attributes:
        bootstrap_servers (str | None): Kafka ``bootstrap.servers`` (``host:port[,host:port]``);
            None means "use the local dev stack broker".
        home (Path): state directory (outgoing queue, dev stack state, embedded directory).
        queue_manager (str): this queue manager's (MSMQ machine's) name, lowercase.
        principal (str): the caller's identity that MSMQ access checks (send, receive, peek,
            ...) are made for; by default the login name of the process's user.
        directory (DirectorySettings): the directory of public objects.
        kafka_options (Mapping[str, str]): extra librdkafka properties, e.g.
            ``security.protocol``, ``sasl.mechanism``, ``ssl.ca.location``.
        replication_factor (int): replication factor of the topics kmq creates, >= 1. A cluster
            with fewer brokers gets topics with one replica per broker (logged at creation;
            ``kmq doctor`` reports it).
        min_insync_replicas (int | None): their ``min.insync.replicas``, from 1 to
            ``replication_factor``: how many replicas must have a record before an ``acks=all``
            write (a recoverable message, a receipt) is acknowledged. None (not configured):
            :data:`DEFAULT_MIN_INSYNC_REPLICAS`, or the replication factor if that is smaller;
            :attr:`effective_min_insync_replicas` gives the number.
        max_send_fanout (int): the most queues one send may reach (a distribution list or
            multiple-element name), >= 1; a send to more is refused.
        max_send_bytes (int): the most bytes one send to several queues may write, >= 1: the
            sum of its message bodies (bytes) times the number of queues; a send over it is
            refused.

    Raises:
        ConfigurationError: a setting of the wrong type (``home`` may be given as a str),
            ``replication_factor``, ``min_insync_replicas``, ``max_send_fanout`` or
            ``max_send_bytes`` is not a whole number >= 1, or
            ``min_insync_replicas`` exceeds ``replication_factor``.
    """

    bootstrap_servers: str | None = None
    home: Path = DEFAULT_HOME.expanduser()
    queue_manager: str = field(default_factory=lambda: _default_queue_manager())
    principal: str = field(default_factory=lambda: _default_principal())
    directory: DirectorySettings = DirectorySettings()
    kafka_options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    replication_factor: int = DEFAULT_REPLICATION_FACTOR
    min_insync_replicas: int | None = None
    max_send_fanout: int = DEFAULT_MAX_SEND_FANOUT
    max_send_bytes: int = DEFAULT_MAX_SEND_BYTES

    def __post_init__(self) -> None:
        # Also catches keyword overrides of load(), which skip the environment and TOML parsing.
        if isinstance(self.home, (str, os.PathLike)) and not isinstance(self.home, Path):
            object.__setattr__(self, "home", Path(self.home))
        _check_field_types(self, _CONFIG_TYPES)
        replication_settings(self.replication_factor, self.min_insync_replicas)
        for name, _ in _SEND_BOUNDS:
            _count(getattr(self, name), name, "in the configuration", hint=_SEND_BOUND_HINT)

    @property
    def effective_min_insync_replicas(self) -> int:
        """``min.insync.replicas`` for new topics: the configured value, else
        :data:`DEFAULT_MIN_INSYNC_REPLICAS` or the replication factor if that is smaller."""
        return replication_settings(self.replication_factor, self.min_insync_replicas)[1]

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> KmqConfig:
        """Read the configuration from ``kmq.toml``, the environment and ``overrides``.

        Args:
            environ (Mapping[str, str] | None): environment to read; default ``os.environ``.
            **overrides: field values that win over everything else (``bootstrap_servers``,
                ``home``, ``queue_manager``, ``principal``, ``directory``, ``kafka_options``,
                ``replication_factor``, ``min_insync_replicas``, ``max_send_fanout``,
                ``max_send_bytes``).

        Returns:
            KmqConfig: the resolved configuration.

        Raises:
            ConfigurationError: the TOML file is unreadable or malformed, or has an unknown key
                or a value of the wrong type or range; the message names the file and the key
                (or the environment variable); or ``environ`` is not a mapping, or an override
                is no setting or of the wrong type.
        """
        if environ is not None and not isinstance(environ, Mapping):
            raise ConfigurationError(f"environ must be None or a mapping of environment "
                                     f"variables, not {type(environ).__name__}",
                                     hint="pass e.g. dict(os.environ), or leave it out")
        unknown = sorted(set(overrides) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigurationError(f"{unknown} are not kmq settings",
                                     hint=f"settings: {', '.join(cls.__dataclass_fields__)}")
        env = os.environ if environ is None else environ
        toml_path = _find_toml(env)
        doc = _read_toml(toml_path) if toml_path else {}
        config = _from_toml(doc, toml_path) if doc else cls()
        config = _apply_environment(config, env)
        config = replace(config, **overrides) if overrides else config
        check_kafka_security(config.kafka_options)
        return config

    @property
    def embedded_directory_path(self) -> Path:
        """Path of the embedded directory's JSON file (``embedded:PATH`` or the default)."""
        url = self.directory.url
        if url and url.startswith("embedded:"):
            return Path(url.removeprefix("embedded:")).expanduser()
        return self.home / "directory.json"

    @property
    def dev_state_dir(self) -> Path:
        """Where ``kmq dev`` keeps the local broker's pid, port and log."""
        return self.home / "dev"


def replication_settings(replication_factor: Any,
                         min_insync_replicas: Any = None) -> tuple[int, int]:
    """Check a replication factor and ``min.insync.replicas`` and fill in the default.

    Args:
        replication_factor (Any): replicas per topic; must be an int >= 1.
        min_insync_replicas (Any): an int from 1 to ``replication_factor``, or None for
            :data:`DEFAULT_MIN_INSYNC_REPLICAS` (the replication factor if that is smaller).

    Returns:
        tuple[int, int]: the replication factor and the effective ``min.insync.replicas``.

    Raises:
        ConfigurationError: a value is not a whole number >= 1, or ``min_insync_replicas``
            exceeds ``replication_factor``; names the setting.
    """
    _check_replication(replication_factor, min_insync_replicas, _TOML_REPLICATION_NAMES,
                       "in the configuration")
    if min_insync_replicas is None:
        return replication_factor, min(DEFAULT_MIN_INSYNC_REPLICAS, replication_factor)
    return replication_factor, min_insync_replicas


def _default_queue_manager() -> str:
    return socket.gethostname().split(".")[0].lower() or "localhost"


def _default_principal() -> str:
    # getuser() raises when neither LOGNAME/USER/... nor a passwd entry names the user (some
    # containers run with an arbitrary uid); the uid is then the only identity there is.
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid-{os.getuid()}"


def _find_toml(env: Mapping[str, str]) -> Path | None:
    explicit = env.get("KMQ_CONFIG")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigurationError(
                f"KMQ_CONFIG names {str(path)!r}, which is not a file",
                hint="point KMQ_CONFIG at an existing kmq.toml or unset it",
            )
        return path
    home = Path(env.get("KMQ_HOME") or DEFAULT_HOME).expanduser()
    for candidate in (Path("kmq.toml"), home / "kmq.toml"):
        if candidate.is_file():
            return candidate
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        # UnicodeDecodeError: TOML must be UTF-8 (tests/faults/test_fuzz.py feeds it other bytes)
        raise ConfigurationError(
            f"cannot read configuration file {str(path)!r}: {exc}",
            hint="fix the TOML syntax or point KMQ_CONFIG elsewhere",
        ) from exc


def _from_toml(doc: Mapping[str, Any], path: Path | None) -> KmqConfig:
    where = f"in {str(path)!r}"
    _reject_unknown(doc, _TOP_KEYS, where)
    directory_doc = doc.get("directory", {})
    if not isinstance(directory_doc, Mapping):
        raise ConfigurationError(f"[directory] must be a table {where}")
    _reject_unknown(directory_doc, _DIRECTORY_KEYS, f"[directory] {where}")
    kafka_doc = doc.get("kafka", {})
    if not isinstance(kafka_doc, Mapping):
        raise ConfigurationError(f"[kafka] must be a table of librdkafka properties {where}")
    directory = DirectorySettings(
        url=_opt_str(directory_doc, "url", where),
        base_dn=_opt_str(directory_doc, "base_dn", where) or DEFAULT_BASE_DN,
        bind_dn=_opt_str(directory_doc, "bind_dn", where),
        password=_opt_str(directory_doc, "password", where),
        starttls=_bool(directory_doc.get("starttls", False), "directory.starttls", where),
        ca_file=_opt_str(directory_doc, "ca_file", where),
        cert_file=_opt_str(directory_doc, "cert_file", where),
        key_file=_opt_str(directory_doc, "key_file", where),
        sasl_mechanism=_opt_str(directory_doc, "sasl_mechanism", where),
        timeout=_timeout(
            directory_doc.get("timeout", DEFAULT_DIRECTORY_TIMEOUT), "directory.timeout", where
        ),
    )
    config = KmqConfig(
        bootstrap_servers=_opt_str(doc, "bootstrap_servers", where),
        directory=directory,
        kafka_options=MappingProxyType({str(k): str(v) for k, v in kafka_doc.items()}),
    )
    if "home" in doc:
        config = replace(config, home=Path(_opt_str(doc, "home", where) or "").expanduser())
    if "queue_manager" in doc:
        config = replace(config, queue_manager=_queue_manager_name(doc["queue_manager"], where))
    if "principal" in doc:
        config = replace(config, principal=_principal_name(doc["principal"], where))
    config = _with_send_bounds(config, {key: doc.get(key) for key, _ in _SEND_BOUNDS},
                               where)
    return _with_replication(config, doc.get("replication_factor"),
                             doc.get("min_insync_replicas"), _TOML_REPLICATION_NAMES, where)


def _apply_environment(config: KmqConfig, env: Mapping[str, str]) -> KmqConfig:
    where = "in the environment"
    directory = config.directory
    if env.get("KMQ_DIRECTORY_URL"):
        directory = replace(directory, url=env["KMQ_DIRECTORY_URL"])
    if env.get("KMQ_DIRECTORY_BASE_DN"):
        directory = replace(directory, base_dn=env["KMQ_DIRECTORY_BASE_DN"])
    if env.get("KMQ_DIRECTORY_BIND_DN"):
        directory = replace(directory, bind_dn=env["KMQ_DIRECTORY_BIND_DN"])
    if "KMQ_DIRECTORY_PASSWORD" in env:
        directory = replace(directory, password=env["KMQ_DIRECTORY_PASSWORD"])
    if "KMQ_DIRECTORY_STARTTLS" in env:
        directory = replace(
            directory,
            starttls=_bool(env["KMQ_DIRECTORY_STARTTLS"], "KMQ_DIRECTORY_STARTTLS", where),
        )
    for variable, name in _DIRECTORY_STRING_VARIABLES:
        if env.get(variable):
            string_setting: dict[str, Any] = {name: env[variable]}  # all str-typed fields
            directory = replace(directory, **string_setting)
    if env.get("KMQ_DIRECTORY_TIMEOUT"):
        directory = replace(
            directory,
            timeout=_timeout(env["KMQ_DIRECTORY_TIMEOUT"], "KMQ_DIRECTORY_TIMEOUT", where),
        )
    changes: dict[str, Any] = {"directory": directory}
    if env.get("KMQ_BOOTSTRAP_SERVERS"):
        changes["bootstrap_servers"] = env["KMQ_BOOTSTRAP_SERVERS"]
    if env.get("KMQ_HOME"):
        changes["home"] = Path(env["KMQ_HOME"]).expanduser()
    if env.get("KMQ_QUEUE_MANAGER"):
        changes["queue_manager"] = _queue_manager_name(env["KMQ_QUEUE_MANAGER"], where)
    if env.get("KMQ_PRINCIPAL"):
        changes["principal"] = _principal_name(env["KMQ_PRINCIPAL"], where)
    kafka_security = kafka_security_from_env(env)
    if kafka_security:
        changes["kafka_options"] = MappingProxyType({**config.kafka_options, **kafka_security})
    config = _with_send_bounds(replace(config, **changes),
                               {variable: env.get(variable) for _, variable in _SEND_BOUNDS},
                               where)
    return _with_replication(config, env.get("KMQ_REPLICATION_FACTOR"),
                             env.get("KMQ_MIN_INSYNC_REPLICAS"), _ENV_REPLICATION_NAMES, where)


_TOML_REPLICATION_NAMES = ("replication_factor", "min_insync_replicas")
_ENV_REPLICATION_NAMES = ("KMQ_REPLICATION_FACTOR", "KMQ_MIN_INSYNC_REPLICAS")


def _with_replication(config: KmqConfig, factor: Any, min_insync: Any, names: tuple[str, str],
                      where: str) -> KmqConfig:
    """``config`` validated, with the replication settings given (None or "": keep them)."""
    changes: dict[str, Any] = {}
    for value, name, field_name in zip((factor, min_insync), names, _TOML_REPLICATION_NAMES):
        if value is not None and value != "":
            changes[field_name] = _count(value, name, where)
    _check_replication(changes.get("replication_factor", config.replication_factor),
                       changes.get("min_insync_replicas", config.min_insync_replicas),
                       names, where)
    return _validated(replace(config, **changes), where)


def _with_send_bounds(config: KmqConfig, given: Mapping[str, Any], where: str) -> KmqConfig:
    """``config`` with the send bounds ``given`` (setting name as written, in the order of
    :data:`_SEND_BOUNDS` -> value; None or "": keep), each a whole number >= 1."""
    changes: dict[str, Any] = {}
    for (field_name, _), (name, value) in zip(_SEND_BOUNDS, given.items(), strict=True):
        if value is not None and value != "":
            changes[field_name] = _count(value, name, where, hint=_SEND_BOUND_HINT)
    return replace(config, **changes) if changes else config


_SEND_BOUND_HINT = (f"e.g. max_send_fanout = {DEFAULT_MAX_SEND_FANOUT} (queues) and "
                    f"max_send_bytes = {DEFAULT_MAX_SEND_BYTES} (bytes), the defaults")


def _check_replication(factor: Any, min_insync: Any, names: tuple[str, str], where: str) -> None:
    _count(factor, names[0], where)
    if min_insync is None:
        return
    _count(min_insync, names[1], where)
    if min_insync > factor:
        raise ConfigurationError(
            f"{names[1]} ({min_insync}) {where} is larger than {names[0]} ({factor}): no "
            "acks=all write could ever be acknowledged",
            hint=f"set {names[1]} to at most {factor} (2 with a replication factor of 3 is "
            "usual)",
        )


def _count(value: Any, name: str, where: str, hint: str | None = None) -> int:
    """A whole number >= 1 from TOML (an int) or the environment (its text); ``hint`` for the
    error (default: the replication settings')."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):  # "= true" is a mistake
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if number is None or number < 1:
        raise ConfigurationError(
            f"{name} {where} must be a whole number >= 1, not {value!r}",
            hint=hint or "e.g. 3 replicas and min.insync.replicas 2 (the defaults); 1 for a "
            "single-broker development cluster",
        )
    return number


def _validated(config: KmqConfig, where: str) -> KmqConfig:
    directory = _validated_directory(config.directory, where)
    if config.bootstrap_servers is not None and not config.bootstrap_servers.strip():
        raise ConfigurationError(f"bootstrap_servers {where} is empty", hint="give host:port")
    return replace(config, directory=directory)


def _validated_directory(directory: DirectorySettings, where: str) -> DirectorySettings:
    """Check the URL and SASL mechanism; canonical spellings (``none``, upper-case mechanism)."""
    url = directory.url
    if directory.is_workgroup:
        directory = replace(directory, url=WORKGROUP_URL)
    elif url and not url.startswith(("ldap://", "ldaps://", "ldapi://", "embedded:")):
        raise ConfigurationError(
            f"directory URL {url!r} {where} is not ldap://, ldaps://, ldapi://, embedded:PATH "
            "or none",
            hint="e.g. ldap://127.0.0.1:3890, embedded:/var/lib/kmq/directory.json, or none for "
            "workgroup mode (no public queues)",
        )
    mechanism = directory.sasl_mechanism
    if mechanism is not None:
        canonical = mechanism.strip().upper()
        if canonical not in SASL_MECHANISMS:
            raise ConfigurationError(
                f"SASL mechanism {mechanism!r} {where} is not supported",
                hint=f"set KMQ_DIRECTORY_SASL_MECHANISM (directory.sasl_mechanism) to one of "
                f"{', '.join(SASL_MECHANISMS)}, or unset it for a simple bind",
            )
        directory = replace(directory, sasl_mechanism=canonical)
    return directory


def _reject_unknown(doc: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise ConfigurationError(
            f"unknown configuration key(s) {', '.join(unknown)} {where}",
            hint=f"allowed keys: {', '.join(sorted(allowed))}",
        )


def _opt_str(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigurationError(f"{key} {where} must be a string, not {type(value).__name__}")
    return value


def _bool(value: Any, name: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(f"{name} {where} must be true or false, not {value!r}")


def _timeout(value: Any, name: str, where: str) -> float:
    """A positive, finite number of seconds from TOML (int/float) or the environment (text)."""
    if isinstance(value, bool):  # bool is an int subclass; "timeout = true" is a mistake
        seconds = math.nan
    elif isinstance(value, (int, float)):
        seconds = float(value)
    else:
        try:
            seconds = float(str(value).strip())
        except ValueError:
            seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigurationError(
            f"{name} {where} must be a positive number of seconds, not {value!r}",
            hint="e.g. 5 (the default) or 0.5",
        )
    return seconds


def _principal_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"principal {where} must be a non-empty string",
            hint="set KMQ_PRINCIPAL (or principal) to a user name, or unset it for the login name",
        )
    return value.strip()


def _queue_manager_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"queue_manager {where} must be a non-empty string")
    name = value.strip().lower()
    if any(ch in name for ch in '\\;+,"\r\n /'):
        raise ConfigurationError(
            f"queue manager name {value!r} {where} contains a character MSMQ forbids in names",
            hint="use letters, digits, '-', '_' and '.'",
        )
    return name
