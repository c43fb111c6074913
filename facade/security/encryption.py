"""Body encryption for the destination queue manager (PROPID_M_PRIV_LEVEL BODY_AES).

Each copy's body is encrypted for its own destination queue manager's X25519 public key:

1. an ephemeral X25519 key pair is made for the recipient, and its exchange with the recipient's
   public key, through HKDF-SHA256 (salted with both public keys), gives the AES key (128, 192 or
   256 bits, from PROPID_M_ENCRYPTION_ALG). Like MSMQ's session key per destination, a sender
   keeps this key for a recipient for :data:`SESSION_SECONDS` or :data:`SESSION_MESSAGES`
   messages (:class:`BodySealer`), and a recipient keeps the keys it derived (:class:`BodyOpener`),
   so a message costs one AES-GCM operation on each side;
2. the body is encrypted with AES-GCM under a random 96-bit nonce, the associated data binding it
   to the message id and the copy's destination queue, so a ciphertext moved to another message
   or queue does not decrypt.

``destination_symmetric_key`` (PROPID_M_DEST_SYMM_KEY) carries what the recipient needs to derive
the key: a version byte and the ephemeral public key. The body becomes a 12-byte nonce followed by
the AES-GCM ciphertext and tag. Every primitive comes from ``cryptography``; decoding raises only
:class:`EncryptionError`.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from facade.errors import InvalidParameter, MessageQueueError
from facade.model.message import EncryptionAlgorithm, MessageId

__all__ = ["BodyOpener", "BodySealer", "EncryptionError", "key_bytes", "open_body",
           "public_bytes", "seal_body"]

#: Seconds a sender uses one session key for a recipient.
SESSION_SECONDS = 300.0
#: Messages a sender encrypts with one session key (far below AES-GCM's 2**32 random nonces).
SESSION_MESSAGES = 1_000_000
#: Derived keys a recipient keeps (one per sending process and session).
_OPENED_KEYS = 1024

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
    return BodySealer().seal(body, recipient, algorithm, message_id, destination_queue)


def open_body(body: bytes, symmetric_key: bytes | None, own: X25519PrivateKey,
              algorithm: EncryptionAlgorithm, message_id: MessageId | None,
              destination_queue: str | None) -> bytes:
    """Decrypt a body :func:`seal_body` made for ``own``'s public key.

    Raises:
        EncryptionError: anything that prevents decryption (missing or malformed key material,
            another recipient, a changed id, queue or body, an unknown algorithm).
    """
    return BodyOpener(own).open(body, symmetric_key, algorithm, message_id, destination_queue)


class BodySealer:
    """Encrypts bodies with a session key per (recipient, key size); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[bytes, int], tuple[AESGCM, bytes, float, int]] = {}

    def seal(self, body: bytes, recipient: bytes, algorithm: EncryptionAlgorithm,
             message_id: MessageId, destination_queue: str) -> tuple[bytes, bytes]:
        """As :func:`seal_body`, with the recipient's current session key.

        Raises:
            InvalidParameter: see :func:`seal_body`.
        """
        size = key_bytes(algorithm)
        now = time.monotonic()
        with self._lock:
            session = self._sessions.get((recipient, size))
            if session is None or session[2] < now or session[3] >= SESSION_MESSAGES:
                cipher, header = _new_session(recipient, size)
                session = (cipher, header, now + SESSION_SECONDS, 0)
            cipher, header, until, used = session
            self._sessions[(recipient, size)] = (cipher, header, until, used + 1)
        nonce = os.urandom(_NONCE)
        sealed = cipher.encrypt(nonce, body, _associated(message_id, destination_queue, size))
        return nonce + sealed, header


class BodyOpener:
    """Decrypts bodies sealed for ``own``, keeping the keys it derived; thread-safe.

    Args:
        own (X25519PrivateKey): the queue manager's key.
    """

    def __init__(self, own: X25519PrivateKey):
        self._own = own
        self._public = public_bytes(own.public_key())
        self._lock = threading.Lock()
        self._keys: OrderedDict[tuple[bytes, int], AESGCM] = OrderedDict()

    def open(self, body: bytes, symmetric_key: bytes | None, algorithm: EncryptionAlgorithm,
             message_id: MessageId | None, destination_queue: str | None) -> bytes:
        """As :func:`open_body` with this opener's key.

        Raises:
            EncryptionError: see :func:`open_body`.
        """
        size = _checked(body, symmetric_key, algorithm, message_id, destination_queue)
        assert symmetric_key is not None and message_id is not None  # checked above
        theirs = symmetric_key[1:]
        with self._lock:
            cipher = self._keys.get((theirs, size))
            if cipher is not None:
                self._keys.move_to_end((theirs, size))
        if cipher is None:
            cipher = AESGCM(self._shared_key(theirs, size))
            with self._lock:
                self._keys[(theirs, size)] = cipher
                while len(self._keys) > _OPENED_KEYS:
                    self._keys.popitem(last=False)
        return _decrypt(cipher, body, message_id, destination_queue or "", size)

    def _shared_key(self, theirs: bytes, size: int) -> bytes:
        try:
            shared = self._own.exchange(X25519PublicKey.from_public_bytes(theirs))
        except ValueError as exc:
            raise EncryptionError(f"the message's ephemeral key is unusable: {exc}") from None
        return _derive(shared, theirs, self._public, size)


def _new_session(recipient: bytes, size: int) -> tuple[AESGCM, bytes]:
    try:
        peer = X25519PublicKey.from_public_bytes(recipient)
    except ValueError as exc:
        raise InvalidParameter(f"the recipient's encryption key is not an X25519 key: {exc}",
                               hint="republish it: kmq cert qm-key") from None
    ephemeral = X25519PrivateKey.generate()
    mine = public_bytes(ephemeral.public_key())
    key = _derive(ephemeral.exchange(peer), mine, recipient, size)
    return AESGCM(key), bytes([_VERSION]) + mine


def _checked(body: bytes, symmetric_key: bytes | None, algorithm: EncryptionAlgorithm,
             message_id: MessageId | None, destination_queue: str | None) -> int:
    """The key size, after checking the shape of what a decryption needs."""
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
    return size


def _decrypt(cipher: AESGCM, body: bytes, message_id: MessageId, destination_queue: str,
             size: int) -> bytes:
    try:
        return cipher.decrypt(body[:_NONCE], body[_NONCE:],
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
