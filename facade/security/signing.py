"""Message signatures (PROPID_M_AUTH_LEVEL, PROPID_M_SIGNATURE), seed 002.

The sender hashes a canonical encoding of the defined message fields and the body with the hash
algorithm the message names (PROPID_M_HASH_ALG: SHA-256, SHA-384 or SHA-512) and signs it with
its private key: ECDSA for an EC key, RSA-PSS for an RSA key. The certificate travels with the
message (PROPID_M_SENDER_CERT). The receiving side recomputes the encoding, verifies the
signature with the certificate's public key, and (in :mod:`facade.queues.protection`) checks in the
directory that the certificate is registered to the sender id.

Signed fields: the message id (so a signature cannot be replayed on another message), class,
correlation id, priority, delivery, acknowledgment level, journal level, app-specific value,
label, body type, body (clear text), extension, admin, response and dead-letter queues, the
format name the sender used (so :mod:`facade.queues.protection` can refuse a signed message read from a
queue that name does not reach), time-to-reach-queue, sent time, not-before,
source machine, sender id and its type, transaction id and markers, the security levels and
algorithms, and the application properties (not the ``kmq.*`` ones the queue manager adds).
Not signed: what changes on the way (this copy's queue, arrival time, lookup id, abort and move
counts, the time-to-be-received that journal and dead-letter copies drop, and the class of a
dead-letter copy is checked as the original NORMAL).
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Iterator

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from facade.security.certificates import SenderIdentity
from facade.errors import InvalidParameter, MessageQueueError
from facade.model.message import AuthLevel, HashAlgorithm, Message, MessageClass

__all__ = ["SignatureError", "digest_input", "sign", "signing_hash", "verify"]

#: Version tag of the canonical encoding; a new encoding gets a new tag.
_TAG = b"kmq-signature-v1\x00"
_HASHES: dict[HashAlgorithm, Callable[[], hashes.HashAlgorithm]] = {
    HashAlgorithm.SHA256: hashes.SHA256,
    HashAlgorithm.SHA384: hashes.SHA384,
    HashAlgorithm.SHA512: hashes.SHA512,
}
#: Auth levels kmq signs with: ALWAYS and SIG30 (MSMQ 3.0's signature, over the defined fields).
SIGNING_LEVELS = (AuthLevel.ALWAYS, AuthLevel.SIG30)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_ONE_MS = dt.timedelta(milliseconds=1)


class SignatureError(MessageQueueError):
    """A signature or the certificate it came with does not verify (NACK_BAD_SIGNATURE)."""


def signing_hash(algorithm: HashAlgorithm) -> hashes.HashAlgorithm:
    """The ``cryptography`` hash for PROPID_M_HASH_ALG.

    Raises:
        InvalidParameter: MD5 or SHA-1, which kmq does not sign with (broken for signatures).
    """
    try:
        return _HASHES[algorithm]()
    except KeyError:
        raise InvalidParameter(
            f"hash_algorithm {HashAlgorithm(algorithm).name} is too weak to sign with",
            hint="use HashAlgorithm.SHA256 (the default), SHA384 or SHA512") from None


def digest_input(message: Message) -> bytes:
    """The canonical bytes a signature covers (see the module docstring): length-prefixed
    fields in a fixed order, so no two messages share an encoding."""
    return _TAG + b"".join(_framed(message))


def sign(message: Message, identity: SenderIdentity) -> bytes:
    """Sign ``message`` (its sender id and algorithms already stamped) with ``identity``.

    Returns:
        bytes: the signature (ECDSA: DER; RSA: PSS with MGF1 and a digest-length salt).

    Raises:
        InvalidParameter: a hash kmq does not sign with.
    """
    algorithm = signing_hash(message.hash_algorithm)
    data = digest_input(message)
    key = identity.private_key
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, _pss(algorithm), algorithm)
    return key.sign(data, ec.ECDSA(algorithm))


def verify(message: Message, certificate: x509.Certificate,
           key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey | None = None) -> None:
    """Check ``message.signature`` against ``certificate``'s public key.

    Args:
        message (Message): the signed message.
        certificate (x509.Certificate): the certificate it came with.
        key: the certificate's public key, when the caller keeps it (saves extracting it).

    Raises:
        SignatureError: no signature, a hash kmq does not accept, an unusable key, or the
            signature does not match the fields (tampered message, replayed signature, wrong
            certificate).
    """
    if not message.signature:
        raise SignatureError("the message asks for authentication but carries no signature")
    try:
        algorithm = signing_hash(message.hash_algorithm)
    except InvalidParameter as exc:
        raise SignatureError(str(exc)) from None
    data = digest_input(message)
    try:
        public_key = key or certificate.public_key()
        if isinstance(public_key, rsa.RSAPublicKey):
            public_key.verify(message.signature, data, _pss(algorithm), algorithm)
        elif isinstance(public_key, ec.EllipticCurvePublicKey):
            public_key.verify(message.signature, data, ec.ECDSA(algorithm))
        else:
            raise SignatureError(
                f"the certificate's key ({type(public_key).__name__}) cannot sign")
    except InvalidSignature:
        raise SignatureError("the signature does not match the message (tampered, or signed "
                             "with another key)") from None
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SignatureError(f"the certificate's key is unusable: {exc}") from None


def _pss(algorithm: hashes.HashAlgorithm) -> padding.PSS:
    return padding.PSS(mgf=padding.MGF1(algorithm), salt_length=padding.PSS.DIGEST_LENGTH)


def _framed(m: Message) -> Iterator[bytes]:
    # A dead-letter copy has its class rewritten to the reason: it verifies as the original.
    message_class = MessageClass.NORMAL if m.message_class.is_nack else m.message_class
    texts = (m.label, m.admin_queue, m.response_queue, m.dead_letter_queue,
             m.destination_format_name, m.transaction_id,
             None if m.source_machine_id is None else str(m.source_machine_id))
    numbers = (int(message_class), m.priority, int(m.delivery), int(m.acknowledge),
               int(m.journal), m.app_specific, int(m.body_type), int(m.sender_id_type),
               int(m.auth_level), int(m.privacy_level), int(m.hash_algorithm),
               int(m.encryption_algorithm), int(m.first_in_transaction),
               int(m.last_in_transaction), _ms(m.time_to_reach_queue),
               _instant(m.sent_time), _instant(m.not_before))
    yield struct.pack(f">{len(numbers)}q", *(-1 if n is None else n for n in numbers))
    for value in (None if m.id is None else m.id.to_bytes(),
                  None if m.correlation_id is None else m.correlation_id.to_bytes(),
                  m.sender_id, m.body, m.extension):
        yield _blob(value)
    for text in texts:
        yield _blob(None if text is None else text.encode("utf-8"))
    own = sorted((k, v) for k, v in m.properties.items() if not k.startswith("kmq."))
    yield struct.pack(">I", len(own))
    for name, text in own:
        yield _blob(name.encode("utf-8")) + _blob(text.encode("utf-8"))


def _blob(value: bytes | None) -> bytes:
    # -1 length for None keeps None and b"" apart.
    if value is None:
        return b"\xff\xff\xff\xff"
    return struct.pack(">I", len(value)) + value


# Both as the envelope encodes them, so the receiver's decoded copy encodes alike.
def _ms(seconds: float | None) -> int | None:
    if seconds is None:
        return None
    return max(1, round(seconds * 1000)) if seconds else 0


def _instant(value: dt.datetime | None) -> int | None:
    return None if value is None else (value - _EPOCH) // _ONE_MS
