"""The kmq error tree.

Every error kmq raises on purpose is a :class:`MessageQueueError`. Where MSMQ has an error code
for the failure, the class is named after it and carries the ``MQ_ERROR_*`` name and HRESULT, so
code ported from MSMQ can map one to one::

    MessageQueueError                      root; .error_code, .hresult, .queue, .hint
    ├── FormatNameError (ValueError)       MQ_ERROR_ILLEGAL_FORMATNAME
    │   └── QueuePathNameError             MQ_ERROR_ILLEGAL_QUEUE_PATHNAME
    ├── InvalidParameter (ValueError)      MQ_ERROR_INVALID_PARAMETER / ILLEGAL_PROPERTY_VALUE
    ├── QueueNotFound                      MQ_ERROR_QUEUE_NOT_FOUND
    ├── QueueExists                        MQ_ERROR_QUEUE_EXISTS
    ├── ReceiveTimeout (TimeoutError)      MQ_ERROR_IO_TIMEOUT
    ├── MessageNotFound                    MQ_ERROR_MESSAGE_NOT_FOUND
    ├── MessageAlreadyReceived             MQ_ERROR_MESSAGE_ALREADY_RECEIVED
    ├── IllegalCursorAction                MQ_ERROR_ILLEGAL_CURSOR_ACTION
    ├── UnsupportedFormatNameOperation     MQ_ERROR_UNSUPPORTED_FORMATNAME_OPERATION
    ├── QueueQuotaExceeded                 a copy refused by the queue quota (NACK_Q_EXCEED_QUOTA)
    ├── AccessDenied (PermissionError)     MQ_ERROR_ACCESS_DENIED
    ├── TransactionUsage                   MQ_ERROR_TRANSACTION_USAGE
    ├── TransactionAborted                 XACT_E_ABORTED (commit failed; aborted instead)
    ├── MessageLockedUnderTransaction      MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION
    ├── LockLost                           a peek-lock lost before complete() (no MSMQ code)
    ├── EnvelopeError                      a Kafka record that is not a valid kmq envelope
    ├── ConfigurationError (ValueError)    bad kmq configuration (environment, kmq.toml)
    ├── BrokerError                        a Kafka error with no closer MSMQ meaning (.kafka_code)
    └── TransientQueueError                retriable infrastructure faults
        ├── BrokerUnavailable              Kafka broker unreachable (MQ_ERROR_SERVICE_NOT_AVAILABLE)
        └── DirectoryUnavailable           LDAP directory unreachable (MQ_ERROR_NO_DS)

Messages name the thing that failed and, through ``hint``, the fix.
"""

from __future__ import annotations

__all__ = [
    "AccessDenied",
    "BrokerError",
    "BrokerUnavailable",
    "ConfigurationError",
    "DirectoryObjectNotFound",
    "DirectoryUnavailable",
    "EnvelopeError",
    "FormatNameError",
    "IllegalCursorAction",
    "InvalidParameter",
    "LockLost",
    "MessageAlreadyReceived",
    "MessageLockedUnderTransaction",
    "MessageNotFound",
    "MessageQueueError",
    "QueueExists",
    "QueueNotFound",
    "QueuePathNameError",
    "QueueQuotaExceeded",
    "ReceiveTimeout",
    "TransactionAborted",
    "TransactionUsage",
    "TransientQueueError",
    "UnsupportedFormatNameOperation",
]


class MessageQueueError(Exception):
    """Root of every error kmq raises on purpose.

    Args:
        message (str): what failed, naming the queue, message or setting involved.
        queue (str | None): the format name or path name of the queue concerned, if any.
        hint (str | None): how to fix it; appended to ``str(error)``.

    Attributes:
        error_code (str | None): the MSMQ ``MQ_ERROR_*`` name, or None where MSMQ has none.
        hresult (int | None): the MSMQ HRESULT as an unsigned 32-bit value (e.g. 0xC00E0003).
    """

    error_code: str | None = None
    hresult: int | None = None

    def __init__(self, message: str, *, queue: str | None = None, hint: str | None = None):
        self.message = message
        self.queue = queue
        self.hint = hint
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class FormatNameError(MessageQueueError, ValueError):
    """A format name or path name that does not follow MSMQ's grammar.

    Args:
        message (str): what was expected at ``position``.
        text (str): the whole text that was parsed.
        position (int): 0-based character offset of the first offending character.
    """

    error_code = "MQ_ERROR_ILLEGAL_FORMATNAME"
    hresult = 0xC00E001E

    def __init__(self, message: str, *, text: str, position: int, hint: str | None = None):
        self.text = text
        self.position = position
        super().__init__(f"{message} at position {position} in {text!r}", queue=text, hint=hint)


class QueuePathNameError(FormatNameError):
    """A path name (``Computer\\[private$\\]Queue``) that does not follow MSMQ's grammar."""

    error_code = "MQ_ERROR_ILLEGAL_QUEUE_PATHNAME"
    hresult = 0xC00E0014


class InvalidParameter(MessageQueueError, ValueError):
    """A message or queue property with a value outside its MSMQ range (label too long, priority
    outside 0-7, ...)."""

    error_code = "MQ_ERROR_INVALID_PARAMETER"
    hresult = 0xC00E0006

    @classmethod
    def wrong_type(cls, name: str, expected: str, value: object, *, hint: str | None = None,
                   queue: str | None = None) -> InvalidParameter:
        """The error for an argument of the wrong type (MSMQ's MQ_ERROR_INVALID_PARAMETER):
        it names the parameter, what it takes and what was given, so that no wrong type
        escapes as a bare ``TypeError`` or ``AttributeError`` from deeper down.

        Args:
            name (str): the parameter (or property) as the caller wrote it, e.g. ``lookup_id``.
            expected (str): what it takes, e.g. ``"an int >= 0"``.
            value (object): what was given; shown by type and a short repr.
            hint (str | None): how to fix it, when ``expected`` does not say it all.
            queue (str | None): the queue concerned, if any.

        Returns:
            InvalidParameter: the error, to raise.
        """
        kind = type(value).__name__
        if isinstance(value, (bytes, bytearray, memoryview)):
            shown = f"{kind} ({len(value)} bytes)"  # a body can be megabytes
        else:
            text = f"{value!r:.60}"
            shown = text if value is None or text.startswith(kind) else f"{kind} {text}"
        return cls(f"{name} must be {expected}, not {shown}", hint=hint, queue=queue)


class QueueNotFound(MessageQueueError):
    """The queue (its Kafka topic or directory entry) does not exist."""

    error_code = "MQ_ERROR_QUEUE_NOT_FOUND"
    hresult = 0xC00E0003


class QueueQuotaExceeded(MessageQueueError):
    """A copy of a send would take its queue past PROPID_Q_QUOTA and was not written.

    MSMQ reports this to the admin queue as NACK_Q_EXCEED_QUOTA (kmq does too, when asked); kmq
    also raises it to the sender, unless the copy went to the dead-letter queue (journal level
    DEADLETTER), so a refused copy is never lost without a trace.
    """


class QueueExists(MessageQueueError):
    """A queue with this path name already exists."""

    error_code = "MQ_ERROR_QUEUE_EXISTS"
    hresult = 0xC00E0005


class DirectoryObjectNotFound(QueueNotFound):
    """A directory object (public queue, queue alias, distribution list) does not exist.

    A subclass of :class:`QueueNotFound`, so code that opens a format name catches both.
    """

    error_code = "MQDS_OBJECT_NOT_FOUND"
    hresult = 0xC00E050F


class ReceiveTimeout(MessageQueueError, TimeoutError):
    """No message arrived before the receive or peek timeout elapsed."""

    error_code = "MQ_ERROR_IO_TIMEOUT"
    hresult = 0xC00E001B


class MessageNotFound(MessageQueueError):
    """No message with the requested id, correlation id or lookup id is in the queue."""

    error_code = "MQ_ERROR_MESSAGE_NOT_FOUND"
    hresult = 0xC00E0088


class MessageAlreadyReceived(MessageQueueError):
    """The message was removed from the queue (received, expired, purged) by someone else."""

    error_code = "MQ_ERROR_MESSAGE_ALREADY_RECEIVED"
    hresult = 0xC00E001D


class IllegalCursorAction(MessageQueueError):
    """A cursor operation that is not valid in the cursor's current position."""

    error_code = "MQ_ERROR_ILLEGAL_CURSOR_ACTION"
    hresult = 0xC00E001C


class UnsupportedFormatNameOperation(MessageQueueError):
    """The operation is not allowed on this kind of format name (send to a dead-letter queue or
    journal, receive from a distribution list or multicast address, ...)."""

    error_code = "MQ_ERROR_UNSUPPORTED_FORMATNAME_OPERATION"
    hresult = 0xC00E0020


class AccessDenied(MessageQueueError, PermissionError):
    """The caller lacks the right (MQSEC_*) the operation needs."""

    error_code = "MQ_ERROR_ACCESS_DENIED"
    hresult = 0xC00E0025


class TransactionUsage(MessageQueueError):
    """A transactional operation on a nontransactional queue, or the reverse."""

    error_code = "MQ_ERROR_TRANSACTION_USAGE"
    hresult = 0xC00E0050


class TransactionAborted(MessageQueueError):
    """A transaction could not commit and was aborted instead: nothing it sent is visible and
    the messages it received are back in their queues (MSMQ: ``XACT_E_ABORTED``)."""

    error_code = "XACT_E_ABORTED"
    hresult = 0x8004D019


class MessageLockedUnderTransaction(MessageQueueError):
    """The message is being received under another, still open, transaction."""

    error_code = "MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION"
    hresult = 0xC00E009C


class LockLost(MessageQueueError):
    """A peek-locked message could not be completed: its lock was settled by someone else first.

    Usually its lease passed and another process released it, so the message went back to the
    queue with its abort count raised and may be delivered again (peek-lock is at least once);
    the error says what happened to it. MSMQ has no error code for this: the closest is a
    receive whose transaction aborted.

    Attributes:
        lookup_id (int | None): the message's lookup id.
    """

    def __init__(self, message: str, *, lookup_id: int | None = None, **kwargs: object):
        self.lookup_id = lookup_id
        super().__init__(message, **kwargs)  # type: ignore[arg-type]


class EnvelopeError(MessageQueueError):
    """A Kafka record that is not a valid kmq message envelope (a poison record).

    Attributes:
        topic (str | None), partition (int | None), offset (int | None): where the record is, when
            known, so the queue manager can move it to a dead-letter queue.
        raw (bytes | None): the record value as read.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        raw: bytes | None = None,
        hint: str | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.raw = raw
        where = f" (topic {topic!r}, partition {partition}, offset {offset})" if topic else ""
        super().__init__(message + where, hint=hint)


class ConfigurationError(MessageQueueError, ValueError):
    """Invalid kmq configuration: an environment variable or a ``kmq.toml`` key."""


class BrokerError(MessageQueueError):
    """A Kafka error with no closer MSMQ meaning.

    Attributes:
        kafka_code (str | None): the librdkafka error name, e.g. ``POLICY_VIOLATION``.
    """

    def __init__(self, message: str, *, kafka_code: str | None = None, **kwargs: object):
        self.kafka_code = kafka_code
        super().__init__(message, **kwargs)  # type: ignore[arg-type]


class TransientQueueError(MessageQueueError):
    """A fault of the infrastructure that may go away if the operation is retried."""


class BrokerUnavailable(TransientQueueError):
    """The Kafka broker did not answer in time."""

    error_code = "MQ_ERROR_SERVICE_NOT_AVAILABLE"
    hresult = 0xC00E000B


class DirectoryUnavailable(TransientQueueError):
    """The directory (LDAP server or embedded store) could not be reached."""

    error_code = "MQ_ERROR_NO_DS"
    hresult = 0xC00E0013
