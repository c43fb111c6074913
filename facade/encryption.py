"""Body encryption for the destination queue manager (PROPID_M_PRIV_LEVEL BODY_AES).

Each copy's body is encrypted for its own destination queue manager's X25519 public key:

1. an ephemeral X25519 key pair is made per copy, and its exchange with the recipient's public
   key, through HKDF-SHA256 (salted with both public keys), gives the AES key (128, 192 or 256
   bits, from PROPID_M_ENCRYPTION_ALG);
2. the body is encrypted with AES-GCM, the associated data binding it to the message id and the
   copy's destination queue, so a ciphertext moved to another message or queue does not decrypt.

``destination_symmetric_key`` (PROPID_M_DEST_SYMM_KEY) carries what the recipient needs to derive
the key: a version byte and the ephemeral public key. The body becomes a 12-byte nonce followed by
the AES-GCM ciphertext and tag. Every primitive comes from ``cryptography``; decoding raises only
:class:`EncryptionError`.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from facade.errors import InvalidParameter, MessageQueueError
from facade.message import EncryptionAlgorithm, MessageId

__all__ = ["EncryptionError", "key_bytes", "open_body", "public_bytes", "seal_body"]

_VERSION = 1
_NONCE = 12
_TAG = 16
_PUBLIC = 32
_INFO = b"kmq body key v1"
_KEY_BYTES = {EncryptionAlgorithm.AES128: 16, EncryptionAlgorithm.AES192: 24,
              EncryptionAlgorithm.AES256: 32}


class EncryptionError(MessageQueueError):
    """A body that cannot be decrypted (NACK_BAD_ENCRYPTION): damaged, moved, or encrypted for
    another key."""


def key_bytes(algorithm: EncryptionAlgorithm) -> int:
    """AES key length in bytes for PROPID_M_ENCRYPTION_ALG.

    Raises:
        InvalidParameter: RC2 or RC4, which kmq does not encrypt with.
    """
    try:
        return _KEY_BYTES[algorithm]
    except KeyError:
        raise InvalidParameter(
            f"encryption_algorithm {EncryptionAlgorithm(algorithm).name} is not supported: kmq "
            "encrypts bodies with AES-GCM only",
            hint="use EncryptionAlgorithm.AES256 (the default), AES192 or AES128") from None


def public_bytes(key: X25519PublicKey) -> bytes:
    """The raw 32 bytes of an X25519 public key (what the directory publishes)."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def seal_body(body: bytes, recipient: bytes, algorithm: EncryptionAlgorithm,
              message_id: MessageId, destination_queue: str) -> tuple[bytes, bytes]:
    """Encrypt ``body`` for the queue manager whose public key is ``recipient``.

    Args:
        body (bytes): clear text.
        recipient (bytes): the recipient's raw X25519 public key (32 bytes).
        algorithm (EncryptionAlgorithm): AES128, AES192 or AES256.
        message_id (MessageId): the message's id (bound into the ciphertext).
        destination_queue (str): this copy's queue format name (bound too).

    Returns:
        tuple[bytes, bytes]: (encrypted body, destination_symmetric_key).

    Raises:
        InvalidParameter: an algorithm kmq does not use, or ``recipient`` is not a key.
    """
    size = key_bytes(algorithm)
    try:
        peer = X25519PublicKey.from_public_bytes(recipient)
    except ValueError as exc:
        raise InvalidParameter(f"the recipient's encryption key is not an X25519 key: {exc}",
                               hint="republish it: kmq cert qm-key") from None
    ephemeral = X25519PrivateKey.generate()
    mine = public_bytes(ephemeral.public_key())
    key = _derive(ephemeral.exchange(peer), mine, recipient, size)
    nonce = os.urandom(_NONCE)
    sealed = AESGCM(key).encrypt(nonce, body, _associated(message_id, destination_queue, size))
    return nonce + sealed, bytes([_VERSION]) + mine


def open_body(body: bytes, symmetric_key: bytes | None, own: X25519PrivateKey,
              algorithm: EncryptionAlgorithm, message_id: MessageId | None,
              destination_queue: str | None) -> bytes:
    """Decrypt a body :func:`seal_body` made for ``own``'s public key.

    Raises:
        EncryptionError: anything that prevents decryption (missing or malformed key material,
            another recipient, a changed id, queue or body, an unknown algorithm).
    """
    if message_id is None or destination_queue is None:
        raise EncryptionError("an encrypted message without id or destination queue")
    if (not symmetric_key or len(symmetric_key) != 1 + _PUBLIC or symmetric_key[0] != _VERSION):
        raise EncryptionError("the message's key material (destination_symmetric_key) is "
                              "missing or not kmq's")
    if len(body) < _NONCE + _TAG:
        raise EncryptionError("the encrypted body is too short")
    size = _KEY_BYTES.get(algorithm)
    if size is None:
        raise EncryptionError(f"unknown body cipher {algorithm!r}")
    theirs = symmetric_key[1:]
    try:
        shared = own.exchange(X25519PublicKey.from_public_bytes(theirs))
    except ValueError as exc:
        raise EncryptionError(f"the message's ephemeral key is unusable: {exc}") from None
    key = _derive(shared, theirs, public_bytes(own.public_key()), size)
    try:
        return AESGCM(key).decrypt(body[:_NONCE], body[_NONCE:],
                                   _associated(message_id, destination_queue, size))
    except InvalidTag:
        raise EncryptionError("the body does not decrypt: encrypted for another queue "
                              "manager's key, or changed on the way") from None


def _derive(shared: bytes, ephemeral: bytes, recipient: bytes, size: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=size, salt=ephemeral + recipient,
                info=_INFO).derive(shared)


def _associated(message_id: MessageId, destination_queue: str, size: int) -> bytes:
    return (bytes([_VERSION, size]) + message_id.to_bytes()
            + destination_queue.casefold().encode("utf-8"))
