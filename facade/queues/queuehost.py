"""What an opened queue (:class:`facade.queues.queue.MessageQueue` and its mechanisms) needs from
its queue manager, as one protocol built from the small ones of :mod:`facade.queues.interfaces`.

The queue manager opens queues and hands itself to them; through this protocol the queue
modules stay below it (no import of :mod:`facade.manager`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from facade.queues.interfaces import OutputsHost, RegistryHost
from facade.queues.transmission import TransmitterHost

if TYPE_CHECKING:
    from facade.queues.authorization import QueueAccess
    from facade.state.registry import QueueProperties
    from facade.queues.protection import MessageProtection
    from facade.queues.transmission import Transmitter
    from facade.queues.transaction import MessageQueueTransaction

__all__ = ["QueueHost"]


class QueueHost(TransmitterHost, OutputsHost, RegistryHost, Protocol):
    """The queue manager as an opened queue uses it: what the sender and the system outputs
    use (resolution, the system-queue writer, message ids, the Kafka session, the outputs),
    plus the sender itself, queue properties and the registry (is the queue opened still the
    one registered)."""

    @property
    def transmitter(self) -> Transmitter:
        """Produces sent copies and settles their outcome."""
        ...

    @property
    def access(self) -> QueueAccess:
        """The access checks made for the caller (MSMQ access rights on queues)."""
        ...

    @property
    def protection(self) -> MessageProtection:
        """Signs and encrypts at send, decrypts and verifies on arrival."""
        ...

    def get_properties(self, path_or_format_name: str) -> QueueProperties:
        """A queue's properties (``MQGetQueueProperties``).

        Raises:
            QueueNotFound: no such queue.
        """
        ...

    def set_properties(self, path_or_format_name: str, **changes: Any) -> QueueProperties:
        """Change a queue's properties (``MQSetQueueProperties``).

        Raises:
            QueueNotFound: no such queue.
            InvalidParameter: an unknown property or a value outside its range.
        """
        ...

    def begin_transaction(self, *, lease: float = ...) -> MessageQueueTransaction:
        """Begin an MSMQ internal transaction (``MQBeginTransaction``); see
        :mod:`facade.queues.transaction`."""
        ...
