"""TLS and SASL settings of kmq's Kafka connections: read from ``KMQ_KAFKA_*`` variables or the
``[kafka]`` table of ``kmq.toml``, checked before any client is made, passed to librdkafka.

librdkafka ignores a setting that does not apply to the chosen ``security.protocol`` (SASL
credentials on an ``SSL`` connection, a client certificate on ``PLAINTEXT``), so a mistake
would leave the connection less protected than the configuration says. :func:`check_kafka_security`
refuses such settings, and half-given ones (a user name without a password, a certificate
without its key), with an error that names the setting and the fix.

============================================ ===============================
Environment variable                         librdkafka property
============================================ ===============================
``KMQ_KAFKA_SECURITY_PROTOCOL``              ``security.protocol``
``KMQ_KAFKA_SASL_MECHANISM``                 ``sasl.mechanism``
``KMQ_KAFKA_SASL_USERNAME``                  ``sasl.username``
``KMQ_KAFKA_SASL_PASSWORD``                  ``sasl.password``
``KMQ_KAFKA_SSL_CA_LOCATION``                ``ssl.ca.location``
``KMQ_KAFKA_SSL_CERTIFICATE_LOCATION``       ``ssl.certificate.location``
``KMQ_KAFKA_SSL_KEY_LOCATION``               ``ssl.key.location``
``KMQ_KAFKA_SSL_KEY_PASSWORD``               ``ssl.key.password``
============================================ ===============================
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from facade.errors import ConfigurationError

__all__ = ["ENVIRONMENT_VARIABLES", "check_kafka_security", "kafka_security_from_env"]

#: ``KMQ_KAFKA_*`` variable -> librdkafka property.
ENVIRONMENT_VARIABLES = {
    "KMQ_KAFKA_SECURITY_PROTOCOL": "security.protocol",
    "KMQ_KAFKA_SASL_MECHANISM": "sasl.mechanism",
    "KMQ_KAFKA_SASL_USERNAME": "sasl.username",
    "KMQ_KAFKA_SASL_PASSWORD": "sasl.password",
    "KMQ_KAFKA_SSL_CA_LOCATION": "ssl.ca.location",
    "KMQ_KAFKA_SSL_CERTIFICATE_LOCATION": "ssl.certificate.location",
    "KMQ_KAFKA_SSL_KEY_LOCATION": "ssl.key.location",
    "KMQ_KAFKA_SSL_KEY_PASSWORD": "ssl.key.password",
}
_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
#: Mechanisms that authenticate with a user name and a password.
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_FILES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


def kafka_security_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka properties the ``KMQ_KAFKA_*`` variables set (empty values are unset).

    Args:
        env (Mapping[str, str]): the environment.

    Returns:
        dict[str, str]: librdkafka property -> value.
    """
    return {prop: env[var] for var, prop in ENVIRONMENT_VARIABLES.items() if env.get(var)}


def _fail(message: str, hint: str) -> None:
    raise ConfigurationError(message, hint=hint)


def check_kafka_security(options: Mapping[str, str], where: str = "in the configuration") -> None:
    """Refuse TLS/SASL settings librdkafka would ignore, half-given ones, and missing files.

    Args:
        options (Mapping[str, str]): the librdkafka properties kmq passes to every client.
        where (str): where they came from, for the message.

    Raises:
        ConfigurationError: an unknown ``security.protocol`` or ``sasl.mechanism``; SASL
            settings without a ``SASL_*`` protocol; TLS settings without ``SSL`` or
            ``SASL_SSL``; a password mechanism without both user name and password; a
            client certificate without its key (or the reverse); a file that does not exist.
    """
    protocol = options.get("security.protocol", "plaintext").strip().lower()
    if protocol not in _PROTOCOLS:
        _fail(f"security.protocol {options['security.protocol']!r} {where} is not a Kafka "
              "security protocol", hint=f"use one of {', '.join(p.upper() for p in _PROTOCOLS)}")
    sasl = sorted(key for key in options if key.startswith("sasl."))
    tls = sorted(key for key in options if key.startswith("ssl."))
    if sasl and not protocol.startswith("sasl_"):
        _fail(f"{', '.join(sasl)} {where} would be ignored: security.protocol is "
              f"{protocol.upper()}", hint="set security.protocol to SASL_SSL (or SASL_PLAINTEXT "
              "on a trusted network), or remove the SASL settings")
    if tls and protocol not in ("ssl", "sasl_ssl"):
        _fail(f"{', '.join(tls)} {where} would be ignored: security.protocol is "
              f"{protocol.upper()}", hint="set security.protocol to SSL or SASL_SSL, or remove "
              "the TLS settings")
    if protocol.startswith("sasl_"):
        _check_sasl(options, where)
    if ("ssl.certificate.location" in options) != ("ssl.key.location" in options):
        _fail(f"a TLS client certificate needs both ssl.certificate.location and "
              f"ssl.key.location; only one is given {where}", hint="give both, or neither")
    for key in _FILES:
        if key in options and not Path(options[key]).expanduser().is_file():
            _fail(f"{key} {where} names {options[key]!r}, which is not a file",
                  hint="give the path of a PEM file")


def _check_sasl(options: Mapping[str, str], where: str) -> None:
    mechanism = options.get("sasl.mechanism", options.get("sasl.mechanisms", "")).strip().upper()
    if not mechanism:
        _fail(f"security.protocol is SASL but no sasl.mechanism is given {where}",
              hint=f"set sasl.mechanism to one of {', '.join(_MECHANISMS)}")
    if mechanism not in _MECHANISMS:
        _fail(f"sasl.mechanism {mechanism!r} {where} is not one librdkafka supports",
              hint=f"use one of {', '.join(_MECHANISMS)}")
    if mechanism in _PASSWORD_MECHANISMS:
        missing = [key for key in ("sasl.username", "sasl.password") if not options.get(key)]
        if missing:
            _fail(f"SASL {mechanism} needs sasl.username and sasl.password; "
                  f"{' and '.join(missing)} missing {where}",
                  hint="set KMQ_KAFKA_SASL_USERNAME and KMQ_KAFKA_SASL_PASSWORD (or both in "
                       "[kafka])")
