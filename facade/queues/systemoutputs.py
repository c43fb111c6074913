"""What the queue manager itself writes: acknowledgments, dead-letter copies and journal copies.

MSMQ posts these as side effects of sends and receives:

* **Acknowledgments** (PROPID_M_ACKNOWLEDGE + PROPID_M_ADMIN_QUEUE): ACK/NACK messages whose
  correlation id is the original id and whose class says what happened. A class is posted only
  when the sender asked for its kind: ACK_REACH_QUEUE needs POSITIVE_ARRIVAL, ACK_RECEIVE needs
  POSITIVE_RECEIVE, an arrival-phase NACK needs NEGATIVE_ARRIVAL, a receive-phase NACK needs
  NEGATIVE_RECEIVE. The admin queue may be a multiple-element format name: every element gets one.
* **Dead-letter copies**: when the message's journal level has DEADLETTER, a message that fails
  (TTBR/TTRQ expiry, rejection...) is copied to the DLQ with its class rewritten to the reason;
  transactional messages go to DEADXACT.
* **Journals**: a queue with PROPID_Q_JOURNAL keeps a copy of each message removed from it (queue
  journal); a message sent with JOURNAL level JOURNAL is copied to the machine journal (source
  journaling).

An acknowledgment is a write to its admin queue, made by the process that posts it: every queue
the admin queue names must grant that process's principal WRITE_MESSAGE, as a send there would
(the sender's at send time and for arrival acknowledgments, which the sending process posts; the
receiver's for receive acknowledgments). A send whose admin queue refuses the sender is refused
before anything is written (:meth:`facade.queues.authorization.QueueAccess.require_admin_queues`).

An acknowledgment that cannot be delivered (its admin queue was deleted, or its access list
refuses the posting principal since the send) is lost, as in MSMQ: it is logged at WARNING and
never fails the send or receive that caused it.

What these messages and copies are (an acknowledgment's fields and stamps, a kept copy's
properties, the machine-journal copy) is :mod:`facade.queues.sending`'s, shared with Spark's sink; this
class resolves where they go and writes them.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from facade.model.envelope import EncodedRecord
from facade.errors import MessageQueueError, UnsupportedFormatNameOperation
from facade.model.formatnames import SystemQueue, parse_queue_reference
from facade.model.topics import QueueTopics
from facade.model.message import JournalLevel, Message, MessageClass
from facade.queues.sending import (
    ORIGINAL_TTBR_PROPERTY,
    acknowledgment,
    acknowledgment_requested,
    kept_copy,
    source_journal_copy,
    stamp_acknowledgment,
)

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.kafka.kafkaseam import KafkaRecord
    from facade.state.queueview import QueueView
    from facade.queues.interfaces import OutputsHost

__all__ = ["ORIGINAL_TTBR_PROPERTY", "SystemOutputs", "acknowledgment_requested"]

log = logging.getLogger("kmq.outputs")


class SystemOutputs:
    """Posts acknowledgments and writes dead-letter and journal copies for one queue manager.

    Args:
        manager (OutputsHost): the queue manager doing the posting.
    """

    def __init__(self, manager: OutputsHost):
        self.manager = manager
        self._journal_views: dict[str, QueueView] = {}

    def acknowledge(self, original: Message, message_class: MessageClass, queue: Destination,
                    reason: str | None = None, timeout: float = 30.0) -> bool:
        """Post an ACK/NACK of ``message_class`` about ``original`` to its admin queue(s).

        Returns:
            bool: True if one was posted; False if none was requested or it could not be
            delivered (logged).
        """
        return self.acknowledge_many([original], message_class, queue, reason, timeout) == 1

    def acknowledge_many(self, originals: Sequence[Message], message_class: MessageClass,
                         queue: Destination, reason: str | None = None,
                         timeout: float = 30.0) -> int:
        """Post an ACK/NACK of ``message_class`` about each of ``originals`` (one batch of
        receives from ``queue``) to its admin queue(s), with one wait for the broker.

        Written straight to the topics with ``acks=all`` (like journal and dead-letter copies),
        not through the sender: this often runs on the sender's delivery-report thread, which
        must not wait for a delivery report of its own.

        Returns:
            int: acknowledgments posted. One that was requested but could not be delivered is
            logged (an acknowledgment is a report to the sender, not the message).
        """
        copies: list[tuple[str, Message]] = []
        posted: list[Message] = []
        for original in originals:
            ack = self._acknowledgment(original, message_class, queue, reason)
            if ack is None:
                continue
            try:
                copies += self._copies(ack, cast(str, original.admin_queue))
            except MessageQueueError as exc:
                _log_lost(message_class, [original], exc)
                continue
            posted.append(original)
        if not copies:
            return 0
        try:
            self.manager.write_system_copies(copies, timeout)
        except MessageQueueError as exc:
            _log_lost(message_class, posted, exc)
            return 0
        return len(posted)

    @staticmethod
    def _acknowledgment(original: Message, message_class: MessageClass, queue: Destination,
                        reason: str | None) -> Message | None:
        """The acknowledgment of ``message_class`` about ``original`` at ``queue``, if its
        sender asked (:func:`facade.queues.sending.acknowledgment`; none for a copy in a journal or
        dead-letter queue)."""
        if not original.admin_queue:
            return None  # none asked for, the usual case: no need to parse the queue's GUID
        guid = uuid.UUID(queue.properties.instance) if queue.properties else None
        return acknowledgment(original, message_class, queue.format_name, guid,
                              queue.read_only, reason)

    def _copies(self, ack: Message, admin_queue: str) -> list[tuple[str, Message]]:
        """(topic, copy) of ``ack`` for every queue ``admin_queue`` resolves to, one id for all.

        Raises:
            UnsupportedFormatNameOperation: an admin queue cannot be sent to.
            AccessDenied: an admin queue refuses the caller WRITE_MESSAGE.
            MessageQueueError: ``admin_queue`` does not resolve.
        """
        manager = self.manager
        destinations = manager.destinations(parse_queue_reference(admin_queue), for_send=True)
        for destination in destinations:
            if destination.read_only or destination.is_subqueue:
                raise UnsupportedFormatNameOperation(
                    f"admin queue {destination.format_name!r} cannot be sent to",
                    queue=destination.format_name)
            manager.access.require_admin_queue(admin_queue, destination)
        ack_id, now = manager.ids.new(), _utcnow()
        copies = stamp_acknowledgment(ack, ack_id, now, manager.guid, admin_queue,
                                      (d.format_name for d in destinations))
        return [(destination.topics.data, copy)
                for destination, copy in zip(destinations, copies, strict=True)]

    def reject(self, copy: Message, message_class: MessageClass, queue: Destination,
               reason: str | None = None, timeout: float = 30.0) -> bool:
        """Reject ``copy`` with ``message_class``: the dead-letter copy (journal level
        DEADLETTER) and the NACK (when asked for), the two outputs of every refusal.

        Returns:
            bool: True if a dead-letter copy was written.

        Raises:
            BrokerUnavailable, BrokerError: the dead-letter copy was not acknowledged.
        """
        written = self.dead_letter(copy, message_class, timeout)
        self.acknowledge(copy, message_class, queue, reason=reason, timeout=timeout)
        return written

    def dead_letter(self, original: Message, message_class: MessageClass,
                    timeout: float = 30.0) -> bool:
        """Copy ``original`` to the dead-letter queue with its class set to the reason, if its
        journal level asks for it (DEADLETTER).

        Returns:
            bool: True if a copy was written.

        Raises:
            BrokerUnavailable, BrokerError: the copy was not acknowledged (the caller must not
                consider the message handled).
        """
        if not original.journal & JournalLevel.DEADLETTER:
            return False
        copy = kept_copy(original, message_class=message_class)
        self.manager.dead_letter(copy, transactional=original.transaction_id is not None,
                                 timeout=timeout)
        return True

    def journal_removed(self, message: Message, queue: Destination) -> bool:
        """Copy a message removed from ``queue`` to the queue's journal, if journaling is on.

        Returns:
            bool: True if a copy was written.
        """
        return self.journal_removed_many([message], queue) == 1

    def journal_removed_many(self, messages: list[Message], queue: Destination,
                             stored: Mapping[int, KafkaRecord] | None = None) -> int:
        """Copy messages removed from ``queue`` together (one batch of receives) to the queue's
        journal, if journaling is on, waiting once for the broker (PROPID_Q_JOURNAL).

        Args:
            messages (list[Message]): the messages removed, in order.
            queue (Destination): the queue they were removed from.
            stored (Mapping[int, KafkaRecord] | None): by lookup id, the records of messages
                whose stored record is their journal copy as it is (the receiver checked
                :func:`facade.queues.sending.stored_record_is_kept_copy`); the others are encoded.

        Returns:
            int: copies written.

        Raises:
            BrokerUnavailable, BrokerError: a copy was not acknowledged; the caller must not
                hand the messages out (a copy written twice keeps its id: views drop it).
        """
        properties = queue.properties
        # Only the queue itself is journaled: not its journal, subqueues or system queues.
        if not messages or properties is None or not properties.journal \
                or queue.topics.data != properties.data_topic:
            return 0
        stored = stored or {}
        if properties.journal_quota_kb is not None or len(messages) == 1:
            return sum(self._journal_one(message, queue, stored) for message in messages)
        journal = queue.topics.journal().data
        self.manager.write_system_records([(journal, self._journal_record(message, stored))
                                           for message in messages])
        return len(messages)

    def _journal_record(self, message: Message,
                        stored: Mapping[int, KafkaRecord]) -> EncodedRecord | KafkaRecord:
        """A removed message's journal copy in record form: its stored record where that is
        the copy, else :func:`kept_copy` encoded (encrypted again if private)."""
        record = stored.get(message.lookup_id) if message.lookup_id is not None else None
        if record is not None:
            return record
        return self.manager.encode_system_copy(kept_copy(message))

    def _journal_one(self, message: Message, queue: Destination,
                     stored: Mapping[int, KafkaRecord]) -> bool:
        """One journal copy, checked against the journal quota first."""
        properties = queue.properties
        assert properties is not None  # journal_removed_many checked it
        record = self._journal_record(message, stored)
        journal = queue.topics.journal()
        if properties.journal_quota_kb is not None and self._journal_full(
                journal, properties.journal_quota_kb, len(record.value or b"")):
            # MSMQ stops journaling when PROPID_Q_JOURNAL_QUOTA is reached; the receive itself
            # is not affected.
            log.warning("journal of %s is at its quota of %d KB: message %s not journaled",
                        queue.format_name, properties.journal_quota_kb, message.id)
            return False
        self.manager.write_system_records([(journal.data, record)])
        return True

    def _journal_full(self, journal: QueueTopics, quota_kb: int, size: int) -> bool:
        view = self._journal_views.get(journal.data)
        if view is None:
            # Here, not at module level: only journal quotas read a queue, and opening a queue
            # manager should not load the queue-reading machinery (kmq start-up time).
            from facade.state.queueview import QueueView

            view = self._journal_views[journal.data] = QueueView(self.manager.session, journal)
        view.catch_up()
        return view.state.pending_bytes + size > quota_kb * 1024

    def forget(self, topics: list[str]) -> None:
        """Close the journal views of topics about to be deleted."""
        for topic in topics:
            view = self._journal_views.pop(topic, None)
            if view is not None:
                view.close()

    def close(self) -> None:
        """Release the journal views used for quota checks."""
        for view in self._journal_views.values():
            view.close()
        self._journal_views.clear()

    def source_journal(self, sent: Message) -> bool:
        """Copy a sent message to the machine journal when its journal level has JOURNAL
        (:func:`facade.queues.sending.source_journal_copy`)."""
        copy = source_journal_copy(sent)
        if copy is None:
            return False
        self.manager.write_system_copy(self.manager.system_topic(SystemQueue.JOURNAL), copy)
        return True


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _log_lost(message_class: MessageClass, originals: Sequence[Message],
              error: MessageQueueError) -> None:
    for original in originals:
        log.warning("acknowledgment %s for message %s to admin queue %r was lost: %s",
                    message_class.name, original.id, original.admin_queue, error)
