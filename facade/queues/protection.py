"""Signing and encryption at send, their checks on arrival (seed 002, msmq-reference §6).

:class:`MessageProtection` is the queue manager's security step:

- **send**: a message with ``auth_level`` ALWAYS (or SIG30) is signed with the caller's identity
  (``KMQ_HOME/identities/<principal>``, see :mod:`facade.security.certificates`); its ``sender_id`` becomes
  the principal and its certificate travels with it. A message with ``privacy_level`` BODY_AES
  has each copy's body encrypted for the copy's destination queue manager (:mod:`facade.security.encryption`):
  the local queue manager's own key, or the public key another one published in the directory.
  No key: :class:`CouldNotEncrypt` (MSMQ's NACK_COULD_NOT_ENCRYPT) and nothing is sent.
- **arrival** (each receive, peek or system action decodes through :meth:`accept`): the body is
  decrypted (NACK_BAD_ENCRYPTION if it cannot be), the signature verified, the signed destination
  (PROPID_M_DEST_FORMAT_NAME) resolved again to check that it reaches the queue read, and the
  certificate checked in the directory against the sender id (NACK_BAD_SIGNATURE: a signed
  message copied into another queue's topic is not authentic there), then the queue's own
  demands: PROPID_Q_AUTHENTICATE (only authenticated messages, else NACK_BAD_SIGNATURE) and
  PROPID_Q_PRIV_LEVEL (NONE: clear text only, BODY: encrypted only, else NACK_BAD_ENCRYPTION).
  A refused message is never handed out: it is dead-lettered (in its encrypted form) when its
  journal level asks for DEADLETTER and the NACK goes to its admin queue.
- **storage**: a decrypted message the system copies again (journal, dead-letter, subqueue) is
  encrypted again for this queue manager first (:meth:`for_storage`), so a body sent encrypted is
  never in clear text in Kafka.

Journals and dead-letter queues hand a message that does not verify or
decrypt out as it is, with ``authenticated`` False: they are read for inspection, and refusing
there would put the message straight back. Whether a reader of a dead-letter queue or the
machine journal gets a body decrypted at all is decided before :meth:`accept`, by the reader's
rights on the queue the copy was sent to (``facade.queues.receiving.body_refusal``).

**Protection levels** (seed 004): sender and receiver each ask for none < authentication <
authentication + integrity < authentication + integrity + privacy, and a message is returned
only when the stronger of the two is met. The sender asks through the message's auth and privacy
levels (:func:`protection_settings`), and a message that does not verify is refused on arrival,
so the sender's level always holds for what is returned. The receiver asks with
``MessageQueue.protection_level``; a message below it is refused as on arrival. A kmq signature
covers every defined field, so an authenticated message has integrity too.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cryptography import x509

from facade.security.certificates import load_identity, queue_manager_key
from facade.security.encryption import BodyOpener, BodySealer, EncryptionError, key_bytes, public_bytes
from facade.errors import EnvelopeError, InvalidParameter, MessageQueueError
from facade.model.message import (
    AuthLevel,
    EncryptionAlgorithm,
    HashAlgorithm,
    Message,
    MessageClass,
    MessageId,
    PrivacyLevel,
    SenderIdType,
)
from facade.security.signing import SIGNING_LEVELS, SignatureError, sign, verify

if TYPE_CHECKING:
    import uuid

    from facade.config import KmqConfig
    from facade.queues.destination import Destination
    from facade.directory import Directory
    from facade.state.registry import QueueProperties
    from facade.queues.resolution import Resolver
    from facade.queues.systemoutputs import SystemOutputs

__all__ = ["CouldNotEncrypt", "MessageProtection", "MessageRejected", "ProtectionLevel",
           "achieved_level", "check_protection", "is_encrypted", "protection_settings"]

log = logging.getLogger("kmq.protection")

#: Seconds a process trusts a directory answer (a registered certificate, a published key):
#: revoking a certificate takes effect within this time everywhere.
DIRECTORY_CACHE_SECONDS = 5.0
#: Properties only the queue manager sets (an application setting them would forge them).
_SET_BY_QUEUE_MANAGER = ("sender_certificate", "signature", "destination_symmetric_key",
                         "authenticated")
_QUEUE_PRIV_NONE, _QUEUE_PRIV_BODY = 0, 2


class ProtectionLevel(enum.IntEnum):
    """Seed 004's end-to-end protection levels, weakest first."""

    NONE = 0
    #: The sender is identified (a verified signature from a registered certificate).
    AUTHENTICATION = 1
    #: ... and the message cannot be changed unnoticed (kmq's signature covers every field).
    INTEGRITY = 2
    #: ... and only the destination queue manager can read the body (encrypted).
    PRIVACY = 3


def protection_settings(level: ProtectionLevel) -> dict[str, object]:
    """The message properties a sender sets to ask for ``level``:
    ``Message(body=..., **protection_settings(ProtectionLevel.PRIVACY))``."""
    level = ProtectionLevel(level)
    settings: dict[str, object] = {}
    if level >= ProtectionLevel.AUTHENTICATION:
        settings["auth_level"] = AuthLevel.ALWAYS
    if level >= ProtectionLevel.PRIVACY:
        settings["privacy_level"] = PrivacyLevel.BODY_AES
    return settings


def achieved_level(message: Message, encrypted: bool) -> ProtectionLevel:
    """The protection a message had on the way: PRIVACY when it was authenticated and
    ``encrypted``, INTEGRITY when authenticated, else NONE (encryption alone does not identify
    the sender)."""
    if not message.authenticated:
        return ProtectionLevel.NONE
    return ProtectionLevel.PRIVACY if encrypted else ProtectionLevel.INTEGRITY


class CouldNotEncrypt(MessageQueueError):
    """No encryption key for a destination queue manager (MSMQ's NACK_COULD_NOT_ENCRYPT): the
    send is refused, nothing is sent in clear text."""


class MessageRejected(EnvelopeError):
    """A message the arrival checks refuse: never handed to an application.

    Attributes:
        stored (Message): the message as it was stored (body still encrypted).
        message_class (MessageClass): NACK_BAD_SIGNATURE or NACK_BAD_ENCRYPTION.
        reason (str): why.
    """

    def __init__(self, message: Message, message_class: MessageClass, reason: str):
        super().__init__(f"{message_class.name}: {reason}")
        self.stored = message
        self.message_class = message_class
        self.reason = reason


def is_encrypted(message: Message) -> bool:
    """Whether ``message``'s body is encrypted as it was stored (PROPID_M_PRIV_LEVEL set and its
    key material still attached): a copy that did not decrypt, or that its reader may not read
    in clear (``facade.queues.receiving.body_refusal``). A decrypted message drops the key material."""
    return message.privacy_level is not PrivacyLevel.NONE and bool(
        message.destination_symmetric_key)


def check_protection(message: Message) -> None:
    """Refuse security properties kmq does not implement, or that only the queue manager sets.

    Raises:
        InvalidParameter: names the property and what to use instead.
    """
    values = message.__dict__
    forged = [name for name in _SET_BY_QUEUE_MANAGER if values[name] not in (None, False)]
    if forged:
        raise InvalidParameter(
            f"{', '.join(forged)} are set by the queue manager when it signs or encrypts, not by "
            "the application", hint="set auth_level / privacy_level and leave these unset (on a "
            "received message being forwarded: dataclasses.replace(m, sender_certificate=None, "
            "signature=None, destination_symmetric_key=None, authenticated=False))")
    if message.auth_level not in (AuthLevel.NONE, *SIGNING_LEVELS):
        raise InvalidParameter(
            f"auth_level {message.auth_level.name} (an MSMQ 1.0/2.0 signature format) is not "
            "supported", hint="use AuthLevel.ALWAYS")
    if message.privacy_level not in (PrivacyLevel.NONE, PrivacyLevel.BODY_AES):
        raise InvalidParameter(
            f"privacy_level {message.privacy_level.name} (RC2/RC4 encryption) is not supported",
            hint="use PrivacyLevel.BODY_AES")
    key_bytes(message.encryption_algorithm)  # RC2/RC4 refused even when not encrypting
    if message.auth_level is not AuthLevel.NONE and message.hash_algorithm in (
            HashAlgorithm.MD5, HashAlgorithm.SHA1):
        raise InvalidParameter(f"hash_algorithm {message.hash_algorithm.name} is too weak to sign "
                               "with", hint="use HashAlgorithm.SHA256 (the default)")


@dataclass
class _Cached:
    value: Any
    until: float


class ProtectionHost(Protocol):
    """What :class:`MessageProtection` needs from its queue manager (which passes itself)."""

    @property
    def config(self) -> KmqConfig:
        """The queue manager's configuration (home, principal, directory settings)."""
        ...

    @property
    def name(self) -> str:
        """The queue manager's name."""
        ...

    @property
    def guid(self) -> uuid.UUID:
        """The queue manager's GUID."""
        ...

    @property
    def outputs(self) -> SystemOutputs:
        """Posts NACKs and writes dead-letter copies."""
        ...

    @property
    def directory(self) -> Directory:
        """The directory (certificates, published keys)."""
        ...

    @property
    def resolver(self) -> Resolver:
        """Resolves the destination a signed message names (PROPID_M_DEST_FORMAT_NAME)."""
        ...


class MessageProtection:
    """One queue manager's signing, encryption and arrival checks (see the module docstring).

    Args:
        manager (ProtectionHost): the queue manager (its config, name, GUID and directory).
    """

    def __init__(self, manager: ProtectionHost):
        self.manager = manager
        self._lock = threading.Lock()
        self._own_key: Any = None
        self._opener: BodyOpener | None = None
        self._sealer = BodySealer()
        self._identity: _Cached | None = None
        self._keys: dict[str, _Cached] = {}
        self._registered: dict[tuple[str, bytes], _Cached] = {}
        self._certificates: dict[bytes, tuple[x509.Certificate, Any]] = {}

    # -- send -----------------------------------------------------------------------------------

    def prepare(self, message: Message) -> Message:
        """Check ``message``'s security properties (:func:`check_protection`) and sign it if its
        auth level asks (:meth:`sign`); once per send, before the copies are made.

        Raises:
            InvalidParameter: a security property kmq does not implement.
            ConfigurationError: signing asked and the caller has no identity.
        """
        check_protection(message)
        return self.sign(message)

    def sign(self, message: Message) -> Message:
        """``message`` signed by the caller (``config.principal``) when its auth level asks.

        Raises:
            ConfigurationError: the caller has no identity (``kmq cert create``).
        """
        if message.auth_level is AuthLevel.NONE:
            return message
        principal = self.manager.config.principal
        identity = self._signing_identity(principal)
        stamped = message.stamped(sender_id=principal.encode("utf-8"),
                                  sender_id_type=SenderIdType.SID,
                                  sender_certificate=identity.certificate_der)
        return stamped.stamped(signature=sign(stamped, identity))

    def _signing_identity(self, principal: str) -> Any:
        """The caller's identity, reread from its files at most once per second (a replaced
        identity is used within that time)."""
        now = time.monotonic()
        cached = self._identity
        if cached is not None and cached.until > now and cached.value.sender_id == principal:
            return cached.value
        identity = load_identity(self.manager.config.home, principal)
        self._identity = _Cached(identity, now + 1.0)
        return identity

    def seal(self, copy: Message, destination: Destination) -> Message:
        """``copy`` with its body encrypted for ``destination``'s queue manager when its privacy
        level asks.

        Raises:
            CouldNotEncrypt: no public key is known for that queue manager.
            DirectoryUnavailable: its key had to be read from the directory, which failed.
            EncryptionError: ``copy`` has no message id to bind the encrypted body to.
        """
        if copy.privacy_level is PrivacyLevel.NONE:
            return copy
        recipient = self._recipient_key(destination)
        body, key = self._sealer.seal(copy.body, recipient, copy.encryption_algorithm,
                                      _sealed_id(copy), destination.format_name)
        return copy.stamped(body=body, destination_symmetric_key=key)

    def for_storage(self, message: Message) -> Message:
        """A decrypted private message encrypted again for this queue manager, before the system
        writes it to a journal, dead-letter queue or subqueue; other messages unchanged."""
        if message.privacy_level is PrivacyLevel.NONE or is_encrypted(message):
            return message
        body, key = self._sealer.seal(message.body, public_bytes(self._own().public_key()),
                                      message.encryption_algorithm, _sealed_id(message),
                                      message.destination_queue or "")
        return message.stamped(body=body, destination_symmetric_key=key, authenticated=False)

    # -- arrival --------------------------------------------------------------------------------

    def accept(self, message: Message, properties: QueueProperties | None,
               required: ProtectionLevel = ProtectionLevel.NONE) -> Message:
        """Decrypt and verify a stored message for hand-out (see the module docstring).

        Args:
            message (Message): as decoded from its record.
            required (ProtectionLevel): the receiver's protection level (seed 004); not applied
                to journals and dead-letter queues.
            properties (QueueProperties | None): the queue read (for its subqueues too); None
                for journals and dead-letter queues (read for inspection: nothing is refused
                there, and a signed copy is checked against the queue it was sent to).

        Returns:
            Message: clear body, ``authenticated`` True when the signature verified and its
            signed destination reaches the queue.

        Raises:
            MessageRejected: the message must not be handed out (never for system queues).
        """
        encrypted = message.privacy_level is not PrivacyLevel.NONE
        try:
            clear = self._decrypted(message) if encrypted else message
        except MessageRejected:
            if properties is None:
                return message  # inspection: as stored
            raise
        if message.auth_level is not AuthLevel.NONE:
            try:
                self._verify(clear, properties)
            except SignatureError as exc:
                if properties is None:
                    return clear  # inspection: readable, not authenticated
                raise MessageRejected(message, MessageClass.NACK_BAD_SIGNATURE, str(exc)) from None
            clear = clear.stamped(authenticated=True)
        if properties is not None:
            _check_queue(message, clear.authenticated, encrypted, properties)
            _check_required(message, achieved_level(clear, encrypted), required)
        return clear

    def _decrypted(self, message: Message) -> Message:
        try:
            body = self._opener_of_own().open(
                message.body, message.destination_symmetric_key,
                EncryptionAlgorithm(message.encryption_algorithm), message.id,
                message.destination_queue)
        except (EncryptionError, ValueError) as exc:
            raise MessageRejected(message, MessageClass.NACK_BAD_ENCRYPTION, str(exc)) from None
        return message.stamped(body=body, destination_symmetric_key=None)

    def reject(self, rejected: MessageRejected, destination: Destination) -> None:
        """Dead-letter (if its journal level asks) and NACK a message the arrival checks refused.

        Raises:
            BrokerUnavailable, BrokerError: the dead-letter copy was not written.
        """
        outputs = self.manager.outputs
        stored = rejected.stored
        # kmq.* properties are not signed: the reason does not spoil the copy's signature.
        outputs.dead_letter(stored.stamped(properties={**stored.properties,
                                                       "kmq.reason": rejected.reason[:1000]}),
                            rejected.message_class)
        outputs.acknowledge(stored, rejected.message_class, destination, reason=rejected.reason)

    def _verify(self, message: Message, properties: QueueProperties | None) -> None:
        der = message.sender_certificate
        if not der:
            raise SignatureError("the message asks for authentication but carries no certificate")
        if not message.sender_id:
            raise SignatureError("a signed message without a sender id")
        try:
            sender = message.sender_id.decode("utf-8")
        except UnicodeDecodeError:
            raise SignatureError("the sender id is not UTF-8 text") from None
        certificate, key = self._certificate(der)
        now = dt.datetime.now(dt.timezone.utc)
        if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
            raise SignatureError(f"the certificate of {sender!r} is outside its validity period")
        verify(message, certificate, key)
        self._check_destination(message, properties)
        if not self._is_registered(sender, der):
            raise SignatureError(f"the certificate is not registered to sender {sender!r} in the "
                                 "directory (never registered, or revoked)")

    def _check_destination(self, message: Message, properties: QueueProperties | None) -> None:
        """The signature binds the destination the sender named (PROPID_M_DEST_FORMAT_NAME): a
        signed message is authentic only in a queue that name reaches (the queue itself, a
        list or multiple-element name holding it, an alias of it), so a copy of it put into
        another queue's topic is not.

        Args:
            message (Message): the verified message.
            properties (QueueProperties | None): the queue read (its journal and subqueues
                are its own copies); None for a journal or dead-letter queue, whose copy is
                checked against the queue it was sent to (PROPID_M_DEST_QUEUE).

        Raises:
            SignatureError: the name does not reach that queue, or cannot be resolved here.
        """
        if properties is not None:
            here, where = frozenset((properties.data_topic,)), properties.path_name
        elif message.destination_queue:
            here, where = None, message.destination_queue
        else:
            return  # a machine-journal copy of a send: kept at the sender, in no queue
        signed_for = message.destination_format_name or ""
        resolver, sender = self.manager.resolver, message.source_machine_id
        try:
            reached = resolver.reached_topics(signed_for, sender)
            if here is None:
                here = resolver.reached_topics(where, sender)
        except MessageQueueError as exc:
            raise SignatureError(f"the destination it was signed for, {signed_for!r}, does not "
                                 f"resolve here: {exc}") from None
        if not here <= reached:
            raise SignatureError(f"it was signed for {signed_for!r}, which does not reach "
                                 f"{where}: a copy of a message sent to another queue")

    def _certificate(self, der: bytes) -> tuple[x509.Certificate, Any]:
        """The parsed certificate and its public key (kept per process)."""
        with self._lock:
            cached = self._certificates.get(der)
        if cached is None:
            try:
                certificate = x509.load_der_x509_certificate(der)
                cached = (certificate, certificate.public_key())
            except (ValueError, TypeError) as exc:
                raise SignatureError(f"the sender certificate is not a usable X.509 "
                                     f"certificate: {exc}") from None
            with self._lock:
                if len(self._certificates) > 1024:
                    self._certificates.clear()
                self._certificates[der] = cached
        return cached

    def _is_registered(self, sender: str, der: bytes) -> bool:
        from facade.directory.certificates import is_registered

        key = (sender, der)
        now = time.monotonic()
        with self._lock:
            cached = self._registered.get(key)
        if cached is not None and cached.until > now:
            return True
        if self.manager.config.directory.is_workgroup:
            raise SignatureError("workgroup mode: no directory to check the sender's certificate "
                                 "in")
        try:
            registered = is_registered(self.manager.directory, sender, der)
        except MessageQueueError as exc:
            raise SignatureError(f"the directory could not be asked: {exc}") from None
        if registered:  # only a positive answer is kept: a new registration counts at once
            with self._lock:
                self._registered[key] = _Cached(True, now + DIRECTORY_CACHE_SECONDS)
        return registered

    # -- keys -----------------------------------------------------------------------------------

    def _own(self) -> Any:
        if self._own_key is None:
            key, created = queue_manager_key(self.manager.config.home, self.manager.name)
            if created:
                self._publish(key)
            self._own_key = key
        return self._own_key

    def _opener_of_own(self) -> BodyOpener:
        if self._opener is None:
            self._opener = BodyOpener(self._own())
        return self._opener

    def publish_key(self) -> bytes:
        """Create this queue manager's key if needed and publish its public key in the directory
        (``kmq cert qm-key``).

        Returns:
            bytes: the raw public key.

        Raises:
            DirectoryUnavailable: the directory cannot be reached (or workgroup mode).
        """
        from facade.directory.certificates import publish_encryption_key

        key, _ = queue_manager_key(self.manager.config.home, self.manager.name)
        self._own_key = key
        raw = public_bytes(key.public_key())
        publish_encryption_key(self.manager.directory, self.manager.name, self.manager.guid, raw)
        return raw

    def _publish(self, key: Any) -> None:
        if self.manager.config.directory.is_workgroup:
            return  # no directory: only this queue manager's own senders can encrypt for it
        try:
            self.publish_key()
        except MessageQueueError as exc:
            log.warning("queue manager %s created its encryption key but could not publish it "
                        "(%s): run `kmq cert qm-key` so other queue managers can encrypt for it",
                        self.manager.name, exc)

    def _recipient_key(self, destination: Destination) -> bytes:
        from facade.directory.certificates import encryption_key

        properties = destination.properties
        if properties is None:
            raise CouldNotEncrypt(f"{destination.format_name!r} is a system queue: no key to "
                                  "encrypt for", queue=destination.format_name)
        owner = properties.queue_manager
        if owner.casefold() == self.manager.name.casefold():
            return public_bytes(self._own().public_key())
        now = time.monotonic()
        with self._lock:
            cached = self._keys.get(owner)
        if cached is not None and cached.until > now:
            return cached.value
        if self.manager.config.directory.is_workgroup:
            key = None
        else:
            key = encryption_key(self.manager.directory, owner)
        if key is None:
            raise CouldNotEncrypt(
                f"queue manager {owner!r} has published no encryption key, so the message to "
                f"{destination.format_name!r} cannot be encrypted (NACK_COULD_NOT_ENCRYPT); "
                "nothing was sent", queue=destination.format_name,
                hint=f"run `kmq cert qm-key` as queue manager {owner!r}, or send without "
                     "privacy_level")
        with self._lock:
            self._keys[owner] = _Cached(key, now + DIRECTORY_CACHE_SECONDS)
        return key


def _sealed_id(message: Message) -> MessageId:
    """The id an encrypted body is bound to (every copy is stamped with one before sealing).

    Raises:
        EncryptionError: the message has no id, so its body cannot be bound to it.
    """
    if message.id is None:
        raise EncryptionError("cannot encrypt the body of a message without an id")
    return message.id


def _check_queue(message: Message, authenticated: bool, encrypted: bool,
                 properties: QueueProperties) -> None:
    """PROPID_Q_AUTHENTICATE and PROPID_Q_PRIV_LEVEL on arrival."""
    if properties.authenticate and not authenticated:
        raise MessageRejected(message, MessageClass.NACK_BAD_SIGNATURE,
                              f"queue {properties.path_name} accepts only authenticated messages")
    if properties.privacy_level == _QUEUE_PRIV_NONE and encrypted:
        raise MessageRejected(message, MessageClass.NACK_BAD_ENCRYPTION,
                              f"queue {properties.path_name} accepts only clear-text messages "
                              "(privacy level NONE)")
    if properties.privacy_level == _QUEUE_PRIV_BODY and not encrypted:
        raise MessageRejected(message, MessageClass.NACK_BAD_ENCRYPTION,
                              f"queue {properties.path_name} accepts only encrypted messages "
                              "(privacy level BODY)")


def _check_required(message: Message, achieved: ProtectionLevel,
                    required: ProtectionLevel) -> None:
    """The receiver's protection level (seed 004)."""
    if achieved >= required:
        return
    missing = (MessageClass.NACK_BAD_ENCRYPTION if achieved >= ProtectionLevel.INTEGRITY
               else MessageClass.NACK_BAD_SIGNATURE)
    raise MessageRejected(message, missing, f"the receiver requires protection level "
                                            f"{required.name}; the message has {achieved.name}")
