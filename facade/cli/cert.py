"""``kmq cert``: signing identities and their registration in the directory, and the queue
manager's encryption key (seed 002).

``create`` makes a key pair and a self-signed certificate for a sender id under ``KMQ_HOME`` (or
imports a CA-issued pair); ``register`` puts the certificate on the sender's user entry in the
directory, where receiving queue managers check it; ``revoke`` takes it off; ``list`` shows both.
``qm-key`` creates the queue manager's encryption key and publishes its public half.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from facade.cli._options import text_option
from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table
from facade.cli.directory import open_directory

if TYPE_CHECKING:  # rich is imported when a command prints, not for --help
    from rich.table import Table

app = typer.Typer(help="Signing certificates (create, register, list, revoke) and the queue "
                       "manager's encryption key.", no_args_is_help=True)

SenderOption = text_option(None, "--sender",
                           help="Sender id (default: the principal, KMQ_PRINCIPAL or login name).")


def _config() -> Any:
    from facade.config import KmqConfig

    return KmqConfig.load()


def _identity_dict(identity: Any) -> dict[str, Any]:
    certificate = identity.certificate
    return {"sender": identity.sender_id, "digest": identity.digest,
            "subject": certificate.subject.rfc4514_string(),
            "issuer": certificate.issuer.rfc4514_string(),
            "not_after": certificate.not_valid_after_utc.isoformat()}


@app.command()
def create(sender: str | None = SenderOption,
           days: int = typer.Option(365, help="Validity of a self-signed certificate, days."),
           import_cert: Path | None = typer.Option(None, "--import-cert", exists=True,
                                                   dir_okay=False, help="CA-issued certificate "
                                                   "(PEM or DER) to import instead."),
           import_key: Path | None = typer.Option(None, "--import-key", exists=True,
                                                  dir_okay=False, help="Its private key."),
           replace: bool = typer.Option(False, "--replace", help="Overwrite an existing one."),
           as_json: bool = JsonOption) -> None:
    """Create a key pair and self-signed certificate for a sender (or import a CA-issued one).

    Example: kmq cert create --sender alice
    """
    from facade.security.certificates import create_identity, import_identity
    from facade.errors import InvalidParameter

    with fail_on_errors(as_json):
        config = _config()
        sender_id = sender or config.principal
        if (import_cert is None) != (import_key is None):
            raise InvalidParameter("--import-cert and --import-key go together",
                                   hint="give both files, or neither for a self-signed one")
        if import_cert is not None and import_key is not None:
            identity = import_identity(config.home, sender_id, import_cert.read_bytes(),
                                       import_key.read_bytes(), replace=replace)
        else:
            identity = create_identity(config.home, sender_id, days=days, replace=replace)
    emit(_identity_dict(identity), as_json, lambda d: key_value_table("identity created", d))


@app.command()
def register(sender: str | None = SenderOption, as_json: bool = JsonOption) -> None:
    """Register the sender's certificate in the directory (mSMQSignCertificates on its user).

    Example: kmq cert register --sender alice
    """
    from facade.security.certificates import load_identity
    from facade.directory.certificates import register_certificate

    with open_directory(as_json) as directory:
        config = _config()
        identity = load_identity(config.home, sender or config.principal)
        added = register_certificate(directory, identity.sender_id, identity.certificate_der,
                                     identity.digest)
    data = {**_identity_dict(identity), "registered": True, "new": added}
    emit(data, as_json, lambda d: key_value_table("certificate registered", d))


@app.command()
def revoke(digest: str | None = text_option(None, "--digest", help="mSMQDigests value of the "
                                            "certificate (default: the local identity's)."),
           sender: str | None = SenderOption, as_json: bool = JsonOption) -> None:
    """Remove a certificate from the directory: messages signed with it stop authenticating.

    Example: kmq cert revoke --sender alice
    """
    from facade.security.certificates import load_identity
    from facade.directory.certificates import revoke_certificate
    from facade.errors import DirectoryObjectNotFound

    with open_directory(as_json) as directory:
        config = _config()
        sender_id = sender or config.principal
        wanted = digest or load_identity(config.home, sender_id).digest
        if not revoke_certificate(directory, sender_id, wanted):
            raise DirectoryObjectNotFound(
                f"no certificate with digest {wanted} is registered for {sender_id!r}",
                queue=sender_id, hint=f"list them with `kmq cert list --sender '{sender_id}'`")
    emit({"sender": sender_id, "digest": wanted, "revoked": True}, as_json,
         lambda d: key_value_table("certificate revoked", d))


@app.command("list")
def list_certificates(sender: str | None = SenderOption, as_json: bool = JsonOption) -> None:
    """List the sender's registered certificates and the identities kept under KMQ_HOME.

    Example: kmq cert list --json
    """
    from facade.security.certificates import certificate_digest, identity_names, parse_certificate
    from facade.directory.certificates import registered_certificates

    with open_directory(as_json) as directory:
        config = _config()
        sender_id = sender or config.principal
        rows = []
        for der in registered_certificates(directory, sender_id):
            certificate = parse_certificate(der)
            rows.append({"sender": sender_id, "digest": certificate_digest(der),
                         "subject": certificate.subject.rfc4514_string(),
                         "not_after": certificate.not_valid_after_utc.isoformat()})
        data = {"registered": rows, "local_identities": identity_names(config.home)}

    def render(d: dict[str, Any]) -> Table:
        from rich.table import Table

        table = Table(title=f"certificates registered for {sender_id}")
        for column in ("digest", "subject", "not_after"):
            table.add_column(column)
        for row in d["registered"]:
            table.add_row(row["digest"], row["subject"], row["not_after"])
        table.caption = "local identities: " + (", ".join(d["local_identities"]) or "none")
        return table

    emit(data, as_json, render)


@app.command("qm-key")
def qm_key(as_json: bool = JsonOption) -> None:
    """Create this queue manager's encryption key if needed and publish it in the directory.

    Example: kmq cert qm-key
    """
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=False) as qm:
        raw = qm.protection.publish_key()
        data = {"queue_manager": qm.name, "public_key": raw.hex(), "published": True}
    emit(data, as_json, lambda d: key_value_table("queue manager encryption key", d))
