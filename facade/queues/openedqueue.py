"""What every mechanism of one opened queue shares: the queue it names and its view of it.

A :class:`~facade.queues.queue.MessageQueue` is a thin handle over a few collaborators (sending,
the wait loop, receive claims, peek-locks, prefetch, system actions, share-group receives);
each of them works on the same queue, through the same :class:`~facade.state.queueview.QueueView`,
under the same lock. :class:`OpenedQueue` is that common ground, so no collaborator needs the
handle itself: which queue(s) the handle resolves to, who may read them, how a record becomes
a message for this receiver, and the one view every receive, peek and sweep reads.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from facade.queues.authorization import receive_right
from facade.errors import (
    MessageAlreadyReceived,
    MessageLockedUnderTransaction,
    MessageNotFound,
    QueueNotFound,
    UnsupportedFormatNameOperation,
)
from facade.model.formatnames import (
    DirectFormatName,
    FormatName,
    PrivateFormatName,
    PublicFormatName,
    QueuePath,
    parse_format_name,
)
from facade.model.message import Message
from facade.queues.protection import ProtectionLevel
from facade.state.queuestate import IndexEntry, OffsetState
from facade.state.queueview import QueueView
from facade.queues.destination import incarnation_guard
from facade.queues.receiving import message_of
from facade.queues.resolution import elements_of, is_dynamic, needs_directory

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.queues.queuehost import QueueHost
    from facade.state.registry import QueueProperties

__all__ = ["OpenedQueue"]


class OpenedQueue:
    """One opened queue as its handle's mechanisms see it.

    Args:
        manager (QueueHost): the owning queue manager.
        reference (FormatName | QueuePath): what the queue was opened with, parsed.
        destinations (list[Destination]): the queue(s) it resolves to now.
        protection_level (Callable[[], ProtectionLevel]): the protection the receiver requires
            now (``MessageQueue.protection_level``, which the application may change).
        spread_picks (bool): see :class:`~facade.queues.queue.MessageQueue`.

    Attributes:
        lock (threading.RLock): one receive at a time per handle (``begin_receive`` runs
            receives on a worker thread, cursors step from any thread).
        view (QueueView | None): the handle's view of its queue, once opened.
        held_batch (str | None): the claim id of the PREFETCH this handle holds: lease sweeps
            leave it to the handle, which settles it exactly (``facade.queues.prefetch``).
    """

    def __init__(self, manager: QueueHost, reference: FormatName | QueuePath,
                 destinations: list[Destination], protection_level: Callable[[], ProtectionLevel],
                 spread_picks: bool):
        self.manager = manager
        self.reference = reference
        self.format_name = str(reference)
        self.destinations = destinations
        # A list's members are read at each send; a PUBLIC= queue's Send To right once.
        self.dynamic = is_dynamic(reference)
        self._send_checked = not needs_directory(reference)
        self._protection_level = protection_level
        self._spread_picks = spread_picks
        self.view: QueueView | None = None
        self.lock = threading.RLock()
        self.held_batch: str | None = None

    @property
    def arbitration(self) -> str:
        """str: ``"share"`` for a queue created with ``arbitration="share"`` (not its journal
        or subqueues), else ``"receipts"``; see ``MessageQueue.arbitration``."""
        if len(self.destinations) != 1 or self.dynamic:
            return "receipts"
        return self.destinations[0].arbitration

    def refuse_share(self, what: str, operation: str, *, why: str | None = None) -> None:
        """Raise UnsupportedFormatNameOperation when this queue is share-arbitrated
        (docs/design.md, "Share-group arbitration": what a share queue refuses)."""
        if self.arbitration != "share":
            return
        raise UnsupportedFormatNameOperation(
            f"queue {self.format_name!r} is arbitrated by a Kafka share group, which has no "
            f"{what}; use a queue created with arbitration='receipts' for {operation}",
            queue=self.format_name, hint=why)

    def send_destinations(self) -> list[Destination]:
        """The queues a send goes to: re-resolved for a list, Send To checked once otherwise."""
        if self.dynamic or not self._send_checked:
            destinations = self.manager.destinations(self.reference, for_send=True)
            if not self.dynamic:
                self.destinations, self._send_checked = destinations, True
            return destinations
        return self.destinations

    def single(self) -> Destination:
        """The one queue this handle reads, with its properties as the registry holds them
        now: a change made after the handle opened (journal, authenticate, privacy level,
        quota) applies to its next receive, as the access lists already do.

        Raises:
            UnsupportedFormatNameOperation: the handle names several queues (send only).
        """
        if self.dynamic or len(elements_of(self.reference)) != 1 or len(self.destinations) != 1:
            raise UnsupportedFormatNameOperation(
                f"{self.format_name!r} names several queues: it can only be sent to",
                queue=self.format_name)
        destination = self.destinations[0]
        known = destination.properties
        if known is not None:
            current = self.manager.access.current(known)
            # Another instance is a queue created again with the name: not this handle's (its
            # receives refuse, see incarnation_guard).
            if current is not known and current.data_topic == known.data_topic \
                    and current.instance == known.instance:
                destination = dataclasses.replace(destination, properties=current)
                self.destinations = [destination]
        return destination

    def properties(self) -> QueueProperties:
        """The queue's properties (PROPID_Q_*), read fresh from the registry."""
        return self.manager.get_properties(self.single().format_name)

    def authorize(self, remove: bool) -> None:
        """Raise AccessDenied unless the caller may receive (``remove``) or peek here
        (:func:`facade.queues.authorization.receive_right`)."""
        destination = self.single()
        self.manager.access.require(destination, receive_right(destination, remove))

    def open_view(self) -> QueueView:
        """The handle's view of its queue, opened at first use and woken after.

        Raises:
            QueueNotFound: the queue was deleted since.
        """
        if self.view is None:
            destination = self.single()
            self.view = QueueView(self.manager.session, destination.topics,
                                  guard=incarnation_guard(self.manager.registry, destination))
            return self.view
        try:
            self.view.wake()
        except QueueNotFound as exc:
            raise QueueNotFound(f"queue {self.format_name!r} was deleted", queue=self.format_name,
                                hint="create it again (kmq queue create) and open it again") from exc
        return self.view

    def close_view(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    def pick_head(self, view: QueueView, now_ms: int) -> IndexEntry | None:
        """The entry a receive by head claims: the head, or a spread pick when the handle was
        opened with ``spread_picks=True`` and lost a claim lately (:meth:`QueueView.pick_head`)."""
        return view.pick_head(now_ms, spread=self._spread_picks)

    def pending_entry(self, view: QueueView, lookup_id: int) -> IndexEntry:
        """The pending message with this lookup id (PROPID_M_LOOKUPID), read up to now.

        Raises:
            MessageAlreadyReceived: it was removed.
            MessageLockedUnderTransaction: a peek-lock holds it.
            MessageNotFound: no message ever had this lookup id.
        """
        view.catch_up()
        status = view.state.status(lookup_id)
        if status.state in (OffsetState.REMOVED, OffsetState.DUPLICATE):
            raise MessageAlreadyReceived(f"message with lookup id {lookup_id} was already removed "
                                         f"from {self.format_name!r}", queue=self.format_name)
        if status.state is OffsetState.LOCKED:
            raise MessageLockedUnderTransaction(
                f"message with lookup id {lookup_id} in {self.format_name!r} is locked by a "
                "peek-lock receive", queue=self.format_name,
                hint="it comes back if its receiver abandons it or its lease passes")
        entry = view.state.by_lookup_id(lookup_id)
        if entry is None:
            raise MessageNotFound(f"no message with lookup id {lookup_id} in {self.format_name!r}",
                                  queue=self.format_name)
        return entry

    def protection_level(self) -> ProtectionLevel:
        """The protection the receiver requires now (``MessageQueue.protection_level``)."""
        return self._protection_level()

    def message(self, record: Any, lookup_id: int) -> Message:
        """The message of one of this queue's records as this receiver may have it
        (:func:`facade.queues.receiving.message_of`: decoded, protection checked, decrypted).

        Raises:
            EnvelopeError: the record's value is not a kmq envelope.
        """
        return self.message_reader()(record, lookup_id)

    def message_reader(self) -> Callable[[Any, int], Message]:
        """:meth:`message` for the records of one receive: the queue's properties and the
        receiver's protection level are read once, not once per record of a batch.

        Returns:
            Callable[[KafkaRecord, int], Message]: ``read(record, lookup_id)``, raising
            EnvelopeError as :meth:`message` does.

        Raises:
            UnsupportedFormatNameOperation: the handle names several queues (send only).
        """
        manager, destination, required = self.manager, self.single(), self.protection_level()

        def read(record: Any, lookup_id: int) -> Message:
            return message_of(manager, record, lookup_id, destination, required)
        return read

    def subqueue_destination(self, subqueue: str) -> Destination:
        """The subqueue ``<queue>;<subqueue>`` of this queue.

        Raises:
            UnsupportedFormatNameOperation: this queue has no subqueues.
            FormatNameError: an invalid subqueue name.
        """
        parent = parse_format_name(self.single().format_name)
        if not isinstance(parent, (PrivateFormatName, PublicFormatName, DirectFormatName)):
            raise UnsupportedFormatNameOperation(
                f"{self.format_name!r} has no subqueues", queue=self.format_name,
                hint="move messages only within an application queue")
        return self.manager.resolve(parent.with_subqueue(subqueue))
