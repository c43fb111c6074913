"""Who the caller is: the principal MSMQ access checks are made for, and where it comes from.

MSMQ checks access lists against the caller's Windows token. kmq takes the principal from an
identity the servers authenticate, in this order:

1. **Kafka SASL**: ``security.protocol`` ``SASL_*`` with ``sasl.username`` (PLAIN, SCRAM) or
   ``sasl.kerberos.principal`` (GSSAPI): the user name the broker checks at every connection.
2. **Kafka TLS**: ``security.protocol`` ``SSL`` with a client certificate
   (``ssl.certificate.location``): the certificate's subject DN (RFC 4514), which is what
   Kafka's default ``ssl.principal.mapping.rules`` make of it.
3. **Directory bind**: an LDAP directory (``ldap://``, ``ldaps://``, ``ldapi://``) bound as
   ``bind_dn`` (simple bind, DIGEST-MD5, PLAIN), or with SASL EXTERNAL the subject DN of
   ``cert_file``. Only a bind the server accepted proves it: the queue manager binds when it
   opens, and :func:`unproven_directory_bind` says what a failed bind leaves.
4. **Declared** (local development mode only): ``KMQ_PRINCIPAL`` / ``principal``, default the
   login name, accepted only when every Kafka bootstrap server is on loopback (or the dev
   stack's broker is used). Against any other cluster, opening a queue manager without an
   authenticated identity fails with :class:`~facade.errors.ConfigurationError`.

With an authenticated identity, a ``KMQ_PRINCIPAL`` that names someone else is refused (it
would otherwise be ignored). kmq trusts the configured Kafka credentials because the broker
refuses a connection whose credentials are wrong, and a directory bind only once the LDAP
server has accepted it; what that does and does not protect is in ``docs/design.md``,
"Security model".
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path

from facade.config import KmqConfig
from facade.errors import ConfigurationError, MessageQueueError
from facade.security.locality import is_loopback_server

__all__ = ["Principal", "PrincipalSource", "is_development_mode", "resolve_principal",
           "unproven_directory_bind"]


class PrincipalSource(enum.Enum):
    """Where a principal's name comes from (``kmq qm info`` shows the value).

    Attributes:
        KAFKA_SASL: the Kafka client's SASL user name.
        KAFKA_TLS: the subject of the Kafka client's TLS certificate.
        DIRECTORY_BIND: the LDAP directory's bind identity, once the server accepted the bind.
        DIRECTORY_BIND_FAILED: the configured bind identity when the bind did not succeed
            (development mode only; not proven).
        DECLARED: ``KMQ_PRINCIPAL`` or the login name, not proven (development mode).
    """

    KAFKA_SASL = "kafka sasl (authenticated by the broker)"
    KAFKA_TLS = "kafka tls client certificate (authenticated by the broker)"
    DIRECTORY_BIND = "directory bind (authenticated by the LDAP server)"
    DIRECTORY_BIND_FAILED = ("directory bind DN, not authenticated (the bind did not succeed; "
                             "development mode)")
    DECLARED = "declared (KMQ_PRINCIPAL or the login name; development mode, not authenticated)"


@dataclass(frozen=True)
class Principal:
    """The caller's identity for access checks.

    Attributes:
        name (str): the principal's name, as access-control entries name it.
        source (PrincipalSource): where the name was taken from.
    """

    name: str
    source: PrincipalSource

    @property
    def authenticated(self) -> bool:
        """True when a server proved the name (not for a declared name or a failed bind)."""
        return self.source not in (PrincipalSource.DECLARED, PrincipalSource.DIRECTORY_BIND_FAILED)


def resolve_principal(config: KmqConfig) -> Principal:
    """The principal a queue manager opened with ``config`` acts as (see the module docstring).

    Args:
        config (KmqConfig): the resolved configuration.

    Returns:
        Principal: the name and its source.

    Raises:
        ConfigurationError: no authenticated identity and the broker is not local (the
            message says how to configure SASL, TLS or a directory bind); a ``principal``
            that differs from the authenticated identity; an unreadable client certificate.
    """
    found = _authenticated(config)
    if found is None:
        if not is_development_mode(config):
            raise ConfigurationError(
                f"no authenticated identity for access checks: the Kafka cluster "
                f"{config.bootstrap_servers} is not local, and a declared principal "
                f"({config.principal!r}) is accepted only in the local development mode",
                hint="configure SASL (KMQ_KAFKA_SECURITY_PROTOCOL=SASL_SSL, "
                     "KMQ_KAFKA_SASL_MECHANISM, KMQ_KAFKA_SASL_USERNAME, "
                     "KMQ_KAFKA_SASL_PASSWORD), a TLS client certificate, or an LDAP "
                     "directory bind (KMQ_DIRECTORY_BIND_DN)")
        return Principal(config.principal, PrincipalSource.DECLARED)
    if config.principal not in (found.name, _login_name()):
        raise ConfigurationError(
            f"principal {config.principal!r} is declared, but the connection authenticates as "
            f"{found.name!r} ({found.source.value})",
            hint="unset KMQ_PRINCIPAL (principal): the authenticated identity is used")
    return found


def unproven_directory_bind(config: KmqConfig, principal: Principal,
                            failure: MessageQueueError) -> Principal:
    """What a directory-bind principal is when its bind did not succeed.

    :func:`resolve_principal` reads the bind identity from the configuration; only the LDAP
    server's answer to the bind proves it (MSMQ's caller token comes from a logon, never from a
    setting). The queue manager binds when it opens and calls this when the bind failed.

    Args:
        config (KmqConfig): the resolved configuration.
        principal (Principal): the configured bind identity
            (:attr:`PrincipalSource.DIRECTORY_BIND`).
        failure (MessageQueueError): why the bind failed: the server could not be reached
            (:class:`~facade.errors.DirectoryUnavailable`) or refused the credentials
            (:class:`~facade.errors.ConfigurationError`).

    Returns:
        Principal: in the local development mode, the same name with the source
        :attr:`PrincipalSource.DIRECTORY_BIND_FAILED` (not authenticated, as a declared name
        is there).

    Raises:
        ConfigurationError: the Kafka cluster is not local: an identity no server authenticated
            does not open a queue manager there; the message names the bind DN and the
            failure.
    """
    if not is_development_mode(config):
        raise ConfigurationError(
            f"the directory bind as {principal.name!r} did not succeed ({failure.message}); "
            f"the Kafka cluster {config.bootstrap_servers} is not local, and a queue manager "
            "opens there only with an identity a server authenticated",
            hint=failure.hint or "check KMQ_DIRECTORY_URL, KMQ_DIRECTORY_BIND_DN and "
                                 "KMQ_DIRECTORY_PASSWORD, or authenticate to Kafka (SASL, TLS)"
        ) from failure
    return Principal(principal.name, PrincipalSource.DIRECTORY_BIND_FAILED)


def is_development_mode(config: KmqConfig) -> bool:
    """Whether kmq runs against a local broker: the dev stack's (no bootstrap servers
    configured) or one whose every bootstrap server is on loopback
    (:func:`facade.security.locality.is_loopback_server`: ``localhost``, ``127.0.0.0/8``, ``::1`` or
    ``::ffff:127.0.0.1``).

    Args:
        config (KmqConfig): the resolved configuration.

    Returns:
        bool: True in the local development mode, where a declared principal is accepted.
    """
    if config.bootstrap_servers is None:
        return True
    return all(is_loopback_server(server) for server in config.bootstrap_servers.split(","))


def _authenticated(config: KmqConfig) -> Principal | None:
    options = config.kafka_options
    protocol = options.get("security.protocol", "plaintext").strip().lower()
    mechanism = options.get("sasl.mechanism", options.get("sasl.mechanisms", "")).upper()
    if protocol.startswith("sasl_"):
        name = (options.get("sasl.kerberos.principal") if mechanism == "GSSAPI"
                else options.get("sasl.username"))
        if name:
            return Principal(name, PrincipalSource.KAFKA_SASL)
    if protocol == "ssl" and options.get("ssl.certificate.location"):
        return Principal(certificate_subject(options["ssl.certificate.location"]),
                         PrincipalSource.KAFKA_TLS)
    directory = config.directory
    if directory.url and directory.url.startswith(("ldap://", "ldaps://", "ldapi://")):
        if directory.sasl_mechanism == "EXTERNAL" and directory.cert_file:
            return Principal(certificate_subject(directory.cert_file),
                             PrincipalSource.DIRECTORY_BIND)
        if directory.bind_dn:
            return Principal(directory.bind_dn, PrincipalSource.DIRECTORY_BIND)
    return None


def certificate_subject(path: str) -> str:
    """The subject DN (RFC 4514) of the first certificate in a PEM file.

    Raises:
        ConfigurationError: the file cannot be read or holds no PEM certificate.
    """
    from cryptography import x509  # here: only TLS configurations pay for the import

    try:
        certificate = x509.load_pem_x509_certificate(Path(path).expanduser().read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the client certificate {path!r}: {exc}",
                                 hint="give a PEM certificate file") from exc
    return certificate.subject.rfc4514_string()


def _login_name() -> str:
    """The default principal (the login name), which an authenticated identity replaces."""
    factory = {f.name: f for f in dataclasses.fields(KmqConfig)}["principal"].default_factory
    if not callable(factory):  # dataclasses.MISSING: KmqConfig.principal lost its default
        raise TypeError("KmqConfig.principal has no default factory")
    return factory()
