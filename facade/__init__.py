"""kmq's client API: MSMQ semantics on Kafka topics.

The names here are the public API; implementation modules stay importable for advanced use
(``facade.formatnames``, ``facade.envelope``, ``facade.config``), but ``facade.<name>`` is what
applications should use.

Names are imported on first use (PEP 562 ``__getattr__``), so ``import facade.cli`` (the ``kmq``
command line) does not pay for the whole API before it parses its arguments; the block under
``TYPE_CHECKING`` lists the same names for type checkers and IDEs.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from facade.acl import AccessRight, SecurityDescriptor
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
        TransactionUsage,
        TransientQueueError,
        UnsupportedFormatNameOperation,
    )
    from facade.formatnames import (
        FormatName,
        QueuePath,
        parse_format_name,
        parse_path_name,
        parse_queue_reference,
        path_to_format_name,
    )
    from facade.message import (
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

__all__ = [
    "AccessDenied",
    "AccessRight",
    "Acknowledgment",
    "AcknowledgmentInfo",
    "AuthLevel",
    "BodyType",
    "BrokerError",
    "BrokerUnavailable",
    "ConfigurationError",
    "Delivery",
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
    "Message",
    "MessageAlreadyReceived",
    "MessageClass",
    "MessageId",
    "MessageLockedUnderTransaction",
    "MessageNotFound",
    "MessageQueueError",
    "PrivacyLevel",
    "QueueExists",
    "QueueNotFound",
    "QueuePath",
    "QueuePathNameError",
    "QueueQuotaExceeded",
    "ReceiveTimeout",
    "SecurityDescriptor",
    "SenderIdType",
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
    **dict.fromkeys(("AccessRight", "SecurityDescriptor"), "facade.acl"),
    **dict.fromkeys(("DirectorySettings", "KmqConfig"), "facade.config"),
    **dict.fromkeys(("FormatName", "QueuePath", "parse_format_name", "parse_path_name",
                     "parse_queue_reference", "path_to_format_name"), "facade.formatnames"),
    **dict.fromkeys(("Acknowledgment", "AcknowledgmentInfo", "AuthLevel", "BodyType", "Delivery",
                     "EncryptionAlgorithm", "HashAlgorithm", "JournalLevel", "Message",
                     "MessageClass", "MessageId", "PrivacyLevel", "SenderIdType"),
                    "facade.message"),
}


def __getattr__(name: str) -> typing.Any:
    if name not in __all__:
        raise AttributeError(f"module 'facade' has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULES.get(name, "facade.errors")), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
