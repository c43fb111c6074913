"""One concrete queue a name resolves to: its canonical format name, topics and properties.

Below the queue manager on purpose: the modules the manager wires (queue, sender, system
outputs, resolution) name a destination without importing the manager.
"""

from __future__ import annotations

from dataclasses import dataclass

from facade.state.registry import QueueProperties
from facade.model.topics import QueueTopics

__all__ = ["Destination"]


@dataclass(frozen=True)
class Destination:
    """One concrete queue a format name resolves to.

    Attributes:
        format_name (str): canonical format name of this queue (PROPID_M_DEST_QUEUE).
        topics (QueueTopics): its Kafka topics.
        properties (QueueProperties | None): registry properties (None for system queues).
        read_only (bool): journals and dead-letter queues: applications may only read/delete.
        is_subqueue (bool): a subqueue: messages get there only by being moved.
        system_of (str | None): for a system queue (dead-letter, machine journal), the name of
            its queue manager, whose descriptor guards it; None otherwise.
    """

    format_name: str
    topics: QueueTopics
    properties: QueueProperties | None
    read_only: bool
    is_subqueue: bool = False
    system_of: str | None = None

    @property
    def arbitration(self) -> str:
        """str: who decides which receiver gets a message: ``"share"`` for a queue created
        with ``arbitration="share"`` (a Kafka share group; its journal and subqueues are
        receipts queues), else ``"receipts"`` (the queue's receipts log)."""
        shared = (self.properties is not None and self.properties.arbitration == "share"
                  and not self.read_only and not self.is_subqueue)
        return "share" if shared else "receipts"
