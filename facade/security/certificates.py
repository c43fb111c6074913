"""Sender identities and the queue manager's encryption key, kept under ``KMQ_HOME``.

MSMQ signs a message with the sender's private key and attaches the sender's certificate
(PROPID_M_SENDER_CERT); the certificate must be registered in the directory on the sender's user
object (``kmq cert register``). It encrypts a body for the destination queue manager's public key
(PROPID_QM_ENCRYPTION_PK, published in the directory).

kmq keeps both kinds of private key as files:

- ``<home>/identities/<sender id>/key.pem`` and ``cert.pem``: one sender identity, an ECDSA P-256
  key (or an imported RSA / EC key) and its X.509 certificate, self-signed by ``kmq cert create``
  or issued by a CA and imported with ``kmq cert create --import-cert/--import-key``.
- ``<home>/keys/<queue manager>.x25519``: the queue manager's X25519 key agreement key.

Private key files are written with mode 0600 in a 0700 directory, created atomically (a reader
never sees half a key), and refused when group or others can read them. Every primitive comes
from the ``cryptography`` library.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.x509.oid import NameOID

from facade.errors import ConfigurationError, InvalidParameter

__all__ = [
    "SenderIdentity",
    "certificate_digest",
    "create_identity",
    "identity_names",
    "import_identity",
    "load_identity",
    "parse_certificate",
    "queue_manager_key",
]

#: Validity of a self-signed certificate made by ``kmq cert create``, in days.
DEFAULT_VALIDITY_DAYS = 365
_IDENTITIES = "identities"
_KEYS = "keys"
_KEY_FILE = "key.pem"
_CERT_FILE = "cert.pem"
_SIGNING_KEYS = (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)


@dataclass(frozen=True)
class SenderIdentity:
    """A sender id (PROPID_M_SENDERID as text: a user name, DN or SID) with its key pair.

    Attributes:
        sender_id (str): who signs.
        certificate (x509.Certificate): the certificate sent with each signed message.
        private_key (EllipticCurvePrivateKey | RSAPrivateKey): the signing key; never sent.
        certificate_der (bytes): the certificate in DER, as PROPID_M_SENDER_CERT carries it.
    """

    sender_id: str
    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    certificate_der: bytes = field(repr=False)

    @property
    def digest(self) -> str:
        """The certificate's ``mSMQDigests`` value (see :func:`certificate_digest`)."""
        return certificate_digest(self.certificate_der)


def certificate_digest(der: bytes) -> str:
    """The directory's index value for a certificate: its MD5 in 32 lowercase hex digits.

    AD's ``mSMQDigests`` holds the MD5 of each registered certificate, and kmq keeps that form.
    It only finds the entry; every check compares the whole certificate, so MD5's collisions
    cannot make an unregistered certificate pass.

    Args:
        der (bytes): the certificate, DER.
    """
    digest = hashes.Hash(hashes.MD5())
    digest.update(der)
    return digest.finalize().hex()


def parse_certificate(data: bytes) -> x509.Certificate:
    """An X.509 certificate from DER or PEM bytes.

    Raises:
        InvalidParameter: ``data`` is not a certificate.
    """
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InvalidParameter(f"not an X.509 certificate (DER or PEM): {exc}",
                               hint="pass the certificate file a CA issued, or create one "
                                    "with `kmq cert create`") from exc


def create_identity(home: Path, sender_id: str, *, days: int = DEFAULT_VALIDITY_DAYS,
                    replace: bool = False) -> SenderIdentity:
    """Create an ECDSA P-256 key pair and a self-signed certificate for ``sender_id`` and keep
    them under ``home`` (``kmq cert create``).

    Args:
        home (Path): KMQ_HOME.
        sender_id (str): the sender id; the certificate's subject common name.
        days (int): validity in days, 1 or more.
        replace (bool): overwrite an existing identity of that sender id.

    Raises:
        InvalidParameter: bad sender id or days; an identity exists and not ``replace``.
        ConfigurationError: the files cannot be written.
    """
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise InvalidParameter(f"certificate validity must be whole days >= 1, not {days!r}")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _checked_id(sender_id))])
    now = dt.datetime.now(dt.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=True,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return _store_identity(home, sender_id, certificate, key, replace)


def import_identity(home: Path, sender_id: str, certificate: bytes, private_key: bytes, *,
                    password: bytes | None = None, replace: bool = False) -> SenderIdentity:
    """Keep a CA-issued certificate and its private key as ``sender_id``'s identity.

    Args:
        home (Path): KMQ_HOME.
        sender_id (str): the sender id the certificate is for.
        certificate (bytes): the certificate, DER or PEM.
        private_key (bytes): its private key, PEM (PKCS#8 or traditional) or DER, EC or RSA
            (2048 bits or more).
        password (bytes | None): the key's password, if it is encrypted.
        replace (bool): overwrite an existing identity of that sender id.

    Raises:
        InvalidParameter: not a certificate or key, an unsupported key type, or the key does not
            belong to the certificate; an identity exists and not ``replace``.
        ConfigurationError: the files cannot be written.
    """
    cert = parse_certificate(certificate)
    key = _parse_private_key(private_key, password)
    cert_key = cert.public_key()
    # A certificate of another key type (Ed25519, DSA...) cannot hold this EC or RSA key.
    if (not isinstance(cert_key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey))
            or cert_key.public_numbers() != key.public_key().public_numbers()):
        raise InvalidParameter("the private key does not belong to the certificate",
                               hint="pass the key file the certificate was issued for")
    return _store_identity(home, sender_id, cert, key, replace)


def load_identity(home: Path, sender_id: str) -> SenderIdentity:
    """The identity ``sender_id`` signs with (cached per process, reread when a file changes).

    Raises:
        ConfigurationError: there is none (the hint says how to create one), a key file can be
            read by group or others, or a file is damaged.
    """
    folder = _identity_dir(home, sender_id)
    key_path, cert_path = folder / _KEY_FILE, folder / _CERT_FILE
    try:
        stamp = (key_path.stat().st_mtime_ns, cert_path.stat().st_mtime_ns)
    except FileNotFoundError:
        raise ConfigurationError(
            f"sender {sender_id!r} has no signing identity under {home}",
            hint=f"create and register one: kmq cert create --sender '{sender_id}' then "
                 f"kmq cert register --sender '{sender_id}'") from None
    cache_key = (str(folder), stamp)
    with _cache_lock:
        cached = _identities.get(cache_key)
    if cached is not None:
        return cached
    _check_private(key_path)
    try:
        key = _parse_private_key(key_path.read_bytes(), None)
        der = parse_certificate(cert_path.read_bytes()).public_bytes(serialization.Encoding.DER)
    except (InvalidParameter, OSError) as exc:
        raise ConfigurationError(f"signing identity of {sender_id!r} in {folder} is damaged: {exc}",
                                 hint="create it again: kmq cert create --replace") from exc
    identity = SenderIdentity(sender_id, x509.load_der_x509_certificate(der), key, der)
    with _cache_lock:
        _identities[cache_key] = identity
    return identity


def identity_names(home: Path) -> list[str]:
    """The sender ids that have an identity under ``home``, sorted."""
    root = home / _IDENTITIES
    if not root.is_dir():
        return []
    return sorted(urllib.parse.unquote(p.name) for p in root.iterdir()
                  if (p / _CERT_FILE).is_file())


def queue_manager_key(home: Path, queue_manager: str) -> tuple[X25519PrivateKey, bool]:
    """The queue manager's X25519 key agreement key, created on first use (0600).

    Every process of one queue manager that shares ``home`` shares the key; a queue manager
    served from several hosts needs the same key file on each (see docs/security.md).

    Args:
        home (Path): KMQ_HOME.
        queue_manager (str): the queue manager's name.

    Returns:
        tuple[X25519PrivateKey, bool]: the key, and whether this call created it.

    Raises:
        ConfigurationError: the key file is readable by others, damaged, or cannot be written.
    """
    path = home / _KEYS / f"{urllib.parse.quote(queue_manager, safe='')}.x25519"
    created = False
    if not path.exists():
        raw = X25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption())
        created = _write_private(path, raw, exclusive=True)
    _check_private(path)
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm, OSError) as exc:
        raise ConfigurationError(f"queue manager key {path} is damaged: {exc}",
                                 hint="restore it from a backup: messages encrypted for it "
                                      "cannot be read without it") from exc
    if not isinstance(key, X25519PrivateKey):
        raise ConfigurationError(f"queue manager key {path} is not an X25519 key",
                                 hint="restore the file kmq created")
    return key, created


# --- files -----------------------------------------------------------------------------------

_cache_lock = threading.Lock()
_identities: dict[tuple[str, tuple[int, int]], SenderIdentity] = {}


def _checked_id(sender_id: object) -> str:
    if not isinstance(sender_id, str) or not sender_id.strip() or len(sender_id) > 256 or any(
            ord(c) < 32 for c in sender_id):
        raise InvalidParameter(f"a sender id must be 1-256 printable characters, not {sender_id!r}",
                               hint="use the user name or DN the directory knows the sender by")
    return sender_id


def _identity_dir(home: Path, sender_id: str) -> Path:
    return home / _IDENTITIES / urllib.parse.quote(_checked_id(sender_id), safe="")


def _parse_private_key(data: bytes, password: bytes | None
                       ) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_private_key(data, password=password)
        else:
            key = serialization.load_der_private_key(data, password=password)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InvalidParameter(f"not a private key (or wrong password): {exc}",
                               hint="pass the PEM or DER key file and --password if it has one"
                               ) from exc
    if not isinstance(key, _SIGNING_KEYS) or (isinstance(key, rsa.RSAPrivateKey)
                                              and key.key_size < 2048):
        raise InvalidParameter(f"a signing key must be EC or RSA of 2048 bits or more, not "
                               f"{type(key).__name__}", hint="issue an EC P-256 or RSA-3072 key")
    return key


def _store_identity(home: Path, sender_id: str, certificate: x509.Certificate,
                    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
                    replace: bool) -> SenderIdentity:
    folder = _identity_dir(home, sender_id)
    if (folder / _CERT_FILE).exists() and not replace:
        raise InvalidParameter(f"sender {sender_id!r} already has an identity in {folder}",
                               hint="pass --replace (replace=True) to make a new one; "
                                    "revoke the old certificate with `kmq cert revoke`")
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    _write_private(folder / _KEY_FILE, key_pem, exclusive=False)
    _write_atomic(folder / _CERT_FILE, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
    der = certificate.public_bytes(serialization.Encoding.DER)
    return SenderIdentity(sender_id, certificate, key, der)


def _write_private(path: Path, data: bytes, *, exclusive: bool) -> bool:
    """Write a private key file with mode 0600 in a 0700 directory; returns False if
    ``exclusive`` and another process created it first."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if exclusive:
            temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            _write_file(temp, data, 0o600)
            try:
                os.link(temp, path)  # fails if another process won: its key stays
            except FileExistsError:
                return False
            finally:
                temp.unlink()
            return True
        _write_atomic(path, data, 0o600)
        return True
    except OSError as exc:
        raise ConfigurationError(f"cannot write {path}: {exc}",
                                 hint="check KMQ_HOME's permissions and free space") from exc


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        _write_file(temp, data, mode)
        os.replace(temp, path)
    except OSError as exc:
        raise ConfigurationError(f"cannot write {path}: {exc}",
                                 hint="check KMQ_HOME's permissions and free space") from exc


def _write_file(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # the umask must not widen or narrow it
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_private(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(f"private key {path} can be read by others (mode "
                                 f"{stat.S_IMODE(mode):o})", hint=f"chmod 600 {path}")
