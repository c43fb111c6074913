"""kmq's client API: MSMQ semantics on Kafka topics.

The names here are the public API::

    from facade import QueueManager, MessageQueue, Cursor, QueueProperties, Message

with the message property enums (``Delivery``, ``Acknowledgment``, ``MessageClass``...), the
format-name types and parsers, the configuration and every error (``MessageQueueError`` and its
subclasses). Implementation modules stay importable for advanced use (``facade.model.formatnames``,
``facade.model.envelope``, ``facade.config``), but ``facade.<name>`` is what applications should use;
the package ships ``py.typed``, so type checkers read the annotations.

Names are imported on first use (PEP 562 ``__getattr__``), so ``import facade.cli`` (the ``kmq``
command line) does not pay for the whole API before it parses its arguments; the block under
``TYPE_CHECKING`` lists the same names for type checkers and IDEs.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from facade.security.acl import AccessRight, SecurityDescriptor
    from facade.config import DirectorySettings, KmqConfig
    from facade.errors import (
        AccessDenied,
        BrokerError,
        BrokerUnavailable,
        ConfigurationError,
        DirectoryObjectNotFound,
        DirectoryUnavailable,
        EnvelopeError,
        FormatNameError,
        IllegalCursorAction,
        InvalidParameter,
        LockLost,
        MessageAlreadyReceived,
        MessageLockedUnderTransaction,
        MessageNotFound,
        MessageQueueError,
        QueueExists,
        QueueNotFound,
        QueuePathNameError,
        QueueQuotaExceeded,
        ReceiveTimeout,
        TransactionAborted,
        TransactionUsage,
        TransientQueueError,
        UnsupportedFormatNameOperation,
    )
    from facade.queues.cursor import Cursor
    from facade.queues.destination import Destination
    from facade.model.formatnames import (
        FormatName,
        QueuePath,
        SystemQueue,
        parse_format_name,
        parse_path_name,
        parse_queue_reference,
        path_to_format_name,
    )
    from facade.manager import QueueManager
    from facade.model.message import (
        AcknowledgedQueue,
        Acknowledgment,
        AcknowledgmentInfo,
        AuthLevel,
        BodyType,
        Delivery,
        EncryptionAlgorithm,
        HashAlgorithm,
        JournalLevel,
        Message,
        MessageClass,
        MessageId,
        PrivacyLevel,
        SenderIdType,
    )
    from facade.queues.peeklock import LockedMessage
    from facade.queues.queue import MessageQueue
    from facade.state.registry import QueueProperties
    from facade.queues.transaction import MessageQueueTransaction, TransactionStatus

__all__ = [
    "AccessDenied",
    "AccessRight",
    "AcknowledgedQueue",
    "Acknowledgment",
    "AcknowledgmentInfo",
    "AuthLevel",
    "BodyType",
    "BrokerError",
    "BrokerUnavailable",
    "ConfigurationError",
    "Cursor",
    "Delivery",
    "Destination",
    "DirectoryObjectNotFound",
    "DirectorySettings",
    "DirectoryUnavailable",
    "EncryptionAlgorithm",
    "EnvelopeError",
    "FormatName",
    "FormatNameError",
    "HashAlgorithm",
    "IllegalCursorAction",
    "InvalidParameter",
    "JournalLevel",
    "KmqConfig",
    "LockLost",
    "LockedMessage",
    "Message",
    "MessageAlreadyReceived",
    "MessageClass",
    "MessageId",
    "MessageLockedUnderTransaction",
    "MessageNotFound",
    "MessageQueue",
    "MessageQueueError",
    "MessageQueueTransaction",
    "PrivacyLevel",
    "QueueExists",
    "QueueManager",
    "QueueNotFound",
    "QueuePath",
    "QueuePathNameError",
    "QueueProperties",
    "QueueQuotaExceeded",
    "ReceiveTimeout",
    "SecurityDescriptor",
    "SenderIdType",
    "SystemQueue",
    "TransactionAborted",
    "TransactionStatus",
    "TransactionUsage",
    "TransientQueueError",
    "UnsupportedFormatNameOperation",
    "parse_format_name",
    "parse_path_name",
    "parse_queue_reference",
    "path_to_format_name",
]

#: Public name -> the module defining it.
_MODULES = {
    **dict.fromkeys(("AccessRight", "SecurityDescriptor"), "facade.security.acl"),
    **dict.fromkeys(("DirectorySettings", "KmqConfig"), "facade.config"),
    "Cursor": "facade.queues.cursor",
    "Destination": "facade.queues.destination",
    "LockedMessage": "facade.queues.peeklock",
    "MessageQueue": "facade.queues.queue",
    "QueueManager": "facade.manager",
    "QueueProperties": "facade.state.registry",
    **dict.fromkeys(("FormatName", "QueuePath", "SystemQueue", "parse_format_name",
                     "parse_path_name", "parse_queue_reference", "path_to_format_name"),
                    "facade.model.formatnames"),
    **dict.fromkeys(("AcknowledgedQueue", "Acknowledgment", "AcknowledgmentInfo", "AuthLevel",
                     "BodyType", "Delivery", "EncryptionAlgorithm", "HashAlgorithm",
                     "JournalLevel", "Message", "MessageClass", "MessageId", "PrivacyLevel",
                     "SenderIdType"),
                    "facade.model.message"),
    **dict.fromkeys(("MessageQueueTransaction", "TransactionStatus"), "facade.queues.transaction"),
}


def __getattr__(name: str) -> typing.Any:
    """Import a public name on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not public (not in ``__all__``).
    """
    if name not in __all__:
        raise AttributeError(f"module 'facade' has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULES.get(name, "facade.errors")), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The module's names, public ones included before their first use (for ``dir()``)."""
    return sorted(set(globals()) | set(__all__))
