"""One concrete queue a name resolves to: its canonical format name, topics and properties.

Below the queue manager on purpose: the modules the manager wires (queue, sender, system
outputs, resolution) name a destination without importing the manager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from facade.errors import QueueNotFound
from facade.state.registry import QueueProperties, Registry
from facade.model.topics import QueueTopics

__all__ = ["Destination", "incarnation_guard"]


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


def incarnation_guard(registry: Registry, destination: Destination) -> Callable[[], None] | None:
    """A check that the queue ``destination`` was resolved to is still registered, as the same
    queue: its record is there and has the same instance GUID (PROPID_Q_INSTANCE).

    A queue deleted and created again with its path name has the same topic names, so a
    handle of another process still reading the old queue would otherwise append its receipts
    (or, for a share queue, its ACCEPTs) to the new queue's log and remove messages it never
    read. Receivers call the check before every receipt and every share-group hand-out; it
    costs a dictionary lookup while the registry view is fresh (:data:`REFRESH_INTERVAL
    <facade.state.registry.REFRESH_INTERVAL>`), and ``delete_queue`` waits longer than that
    between unregistering a queue and deleting its topics (docs/design.md, "A queue deleted and
    created again under open handles").

    Args:
        registry (Registry): the queue manager's registry view.
        destination (Destination): the queue as resolved when the handle was opened.

    Returns:
        Callable[[], None] | None: the check (raises :class:`QueueNotFound`), or None for a
        destination without a registry record (system queues, which are never deleted).
    """
    known = destination.properties
    if known is None:
        return None
    path, instance, name = known.path_name, known.instance, destination.format_name

    def check() -> None:
        current = registry.get_queue(path)
        if current is not None and current.instance == instance:
            return
        again = "" if current is None else " and created again (another instance GUID)"
        raise QueueNotFound(f"queue {name!r} was deleted{again} after this handle opened it",
                            queue=name, hint="open the queue again: a handle only reads the "
                                             "queue it opened, not one created later with its name")
    return check
