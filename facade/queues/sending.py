"""What every send does with a message, whoever sends.

A message is sent the same way by the queue handle (:meth:`facade.queues.queue.MessageQueue.send`,
``send_many`` and sends in a transaction) and by Spark's sink (:mod:`spark_connector.sink`), so
what a send makes of it is written once, here, as functions of the message alone (no Kafka, no
queue manager: each caller writes the results its own way):

0. :func:`check_fan_out`: the bounds of a send to several queues (how many queues, how many
   bytes its copies add up to), checked before anything is written;
1. :func:`stamp_sent`: the queue manager's stamps on a sent message: its id, sent time,
   source machine (PROPID_M_SRC_MACHINE_ID) and the format name it was sent to
   (PROPID_M_DEST_FORMAT_NAME), one for every copy; a body over MSMQ's 4 MiB is refused here;
2. :class:`SendCopies`: one copy per destination queue, each with its own ``destination_queue``
   (PROPID_M_DEST_QUEUE), and their records: the envelope is encoded once per message when the
   copies differ only in ``destination_queue`` (:func:`facade.model.envelope.encode_copies`);
3. :func:`source_journal_copy`: the copy for the machine journal when the sender asked for
   source journaling (journal level JOURNAL), a :func:`kept_copy` like every journal or
   dead-letter copy: it no longer expires, its time-to-be-received kept in the
   :data:`ORIGINAL_TTBR_PROPERTY` property;
4. :func:`acknowledgment`: the ACK/NACK about a message at one queue, when its sender asked for
   that class (ACK_REACH_QUEUE once a copy arrived), and :func:`stamp_acknowledgment`: its copies
   for the queue(s) of its admin queue, stamped as the queue manager sends them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterable
from typing import Any

from facade.model.envelope import (
    EncodedRecord,
    EnvelopeCopies,
    acknowledgment_message,
    encode_copies,
    encode_message,
)
from facade.errors import InvalidParameter
from facade.model.message import (
    AcknowledgedQueue,
    Acknowledgment,
    AcknowledgmentInfo,
    JournalLevel,
    Message,
    MessageClass,
    MessageId,
    PrivacyLevel,
    check_body_size,
)

__all__ = [
    "ORIGINAL_TTBR_PROPERTY",
    "SendCopies",
    "acknowledgment",
    "acknowledgment_requested",
    "check_fan_out",
    "kept_copy",
    "source_journal_copy",
    "stamp_acknowledgment",
    "stored_record_is_kept_copy",
    "stamp_sent",
]

#: Application property of a journal or dead-letter copy holding the original's
#: time-to-be-received in seconds (the copy itself has none), so it can be shown and restored.
ORIGINAL_TTBR_PROPERTY = "kmq.time_to_be_received"


def check_fan_out(messages: Iterable[Message], queues: int, format_name: str, *,
                  max_queues: int, max_bytes: int) -> None:
    """Refuse a send to several queues that exceeds the queue manager's bounds.

    A distribution list or multiple-element format name gets one copy of every message per
    queue it resolves to (MSMQ's copies of a list send), and the sender holds them all until
    the broker has them. The bounds are ``max_send_fanout`` and ``max_send_bytes``
    (:class:`facade.config.KmqConfig`; ``kmq.toml`` or ``KMQ_MAX_SEND_FANOUT``,
    ``KMQ_MAX_SEND_BYTES``). A send to one queue is not bounded here (its message size limit
    applies).

    Args:
        messages (Iterable[Message]): the messages of one send (``send``: one; ``send_many``:
            the batch).
        queues (int): how many queues the send reaches (duplicates removed).
        format_name (str): what the send is addressed to, for the message.
        max_queues (int): the most queues one send may reach.
        max_bytes (int): the most bytes one send may write: the sum of the messages' body
            sizes (bytes) times ``queues``.

    Raises:
        InvalidParameter: ``queues`` is over ``max_queues``, or the bytes are over
            ``max_bytes``; the message gives the size, the bound and the setting, and says
            that nothing was sent.
    """
    if queues <= 1:
        return
    if queues > max_queues:
        raise InvalidParameter(
            f"send to {format_name!r} refused, nothing was sent: it reaches {queues} queues, "
            f"over the bound of {max_queues} queues per send (max_send_fanout in kmq.toml, "
            "KMQ_MAX_SEND_FANOUT)", queue=format_name,
            hint="send to smaller lists, or raise max_send_fanout (KMQ_MAX_SEND_FANOUT)")
    body_bytes = sum(len(message.body) for message in messages)
    total = body_bytes * queues
    if total > max_bytes:
        raise InvalidParameter(
            f"send to {format_name!r} refused, nothing was sent: it would write "
            f"{_size(total)} ({_size(body_bytes)} of message bodies x {queues} queues), over "
            f"the bound of {_size(max_bytes)} per send (max_send_bytes in kmq.toml, "
            "KMQ_MAX_SEND_BYTES)", queue=format_name,
            hint="send smaller bodies or fewer messages at once, or raise max_send_bytes "
                 "(KMQ_MAX_SEND_BYTES)")


def _size(size: int) -> str:
    """``size`` bytes as ``"419430400 bytes (400.0 MiB)"``."""
    return f"{size} bytes ({size / (1024 * 1024):.1f} MiB)"


def stamp_sent(message: Message, message_id: MessageId, sent_time: dt.datetime,
               machine_guid: uuid.UUID, format_name: str, **changes: Any) -> Message:
    """``message`` as the queue manager sends it: the stamps every copy shares.

    Args:
        message (Message): the message given to the send, checked already (construction
            checks it); not modified.
        message_id (MessageId): its new id (PROPID_M_MSGID).
        sent_time (datetime): PROPID_M_SENTTIME, timezone-aware.
        machine_guid (uuid.UUID): the sending queue manager (PROPID_M_SRC_MACHINE_ID).
        format_name (str): the format name sent to (PROPID_M_DEST_FORMAT_NAME): a queue, a
            distribution list, a multiple-element name.
        **changes: more stamps (a transaction's id, priority and timers), of the right types.

    Returns:
        Message: a stamped copy (:meth:`Message.stamped`: not checked again).

    Raises:
        InvalidParameter: the body is larger than MSMQ's 4 MiB
            (:func:`facade.model.message.check_body_size`); every send path stamps its messages
            here before it stores or produces anything, so none can skip the limit.
    """
    check_body_size(message, format_name)
    return message.stamped(id=message_id, sent_time=sent_time, source_machine_id=machine_guid,
                           destination_format_name=format_name, **changes)


class SendCopies:
    """The copies of one stamped message, one per destination queue, and their records.

    Each copy is the message with its own ``destination_queue``; protection may then replace a
    copy (a body encrypted for its destination's key). When there are several copies, those it
    left as they were share one envelope encoded once (:func:`facade.model.envelope.encode_copies`);
    every record is byte for byte what :func:`facade.model.envelope.encode_message` writes for its
    copy.

    Args:
        sent (Message): the stamped message (:func:`stamp_sent`), checked already.
        count (int): how many destinations it goes to.
    """

    __slots__ = ("_fan_out", "_shared", "sent")

    def __init__(self, sent: Message, count: int):
        self.sent = sent
        self._fan_out = count > 1
        self._shared: EnvelopeCopies | None = None

    def copy(self, destination_queue: str) -> Message:
        """The copy for the queue named ``destination_queue`` (its format name)."""
        return self.sent.stamped(destination_queue=destination_queue)

    def record(self, copy: Message, sealed: Message | None = None) -> EncodedRecord:
        """The record of a copy as it is sent.

        Args:
            copy (Message): a copy made by :meth:`copy`.
            sealed (Message | None): what protection made of ``copy`` (``copy`` itself when it
                left it unchanged); default ``copy``.

        Returns:
            EncodedRecord: the record of ``sealed``.

        Raises:
            InvalidParameter: a property cannot be encoded (named).
        """
        if sealed is None:
            sealed = copy
        if self._fan_out and sealed is copy:
            # Copies differ only in destination_queue: encode the rest once per message.
            if self._shared is None:
                self._shared = encode_copies(self.sent)
            return self._shared.record(copy.destination_queue)
        return encode_message(sealed, validate=False)


def kept_copy(message: Message, **changes: Any) -> Message:
    """A copy for a journal or dead-letter queue: it stays there for inspection, so it no
    longer expires (its time-to-be-received applied to the original queue only, and is kept
    in the :data:`ORIGINAL_TTBR_PROPERTY` property).

    Without ``changes`` the copy is validated when it is encoded (every write of a copy
    encodes it with :func:`facade.model.envelope.encode_message`), not here.

    Args:
        message (Message): the message copied; not modified.
        **changes: other fields to set (a dead-letter copy's class), validated.
    """
    properties = dict(message.properties)
    if message.time_to_be_received is not None:
        properties[ORIGINAL_TTBR_PROPERTY] = repr(message.time_to_be_received)
    if changes:
        return dataclasses.replace(message, time_to_be_received=None, properties=properties,
                                   **changes)
    # Not checked twice: every received message of a journaled queue pays for a check (~5 us).
    return message.stamped(time_to_be_received=None, properties=properties)


def stored_record_is_kept_copy(message: Message) -> bool:
    """Whether the record a received ``message`` was stored as can be written, unchanged, as
    its journal copy, instead of :func:`kept_copy` encoded again (about 20 us per message).

    True when a kept copy would encode the same message: no time-to-be-received to move into
    :data:`ORIGINAL_TTBR_PROPERTY`, and no private body that
    :meth:`facade.queues.protection.MessageProtection.for_storage` encrypts again. The caller must
    also know that the receive added nothing to the envelope: no abort count from released
    locks. Such a copy keeps the stored envelope's ``arrived_time`` (null as sent) where an
    encoded copy carries the time the original reached its queue; no kmq reader (Spark's
    included) reads that field: a message's arrival is the timestamp of the record read.

    Args:
        message (Message): as decoded from its record and accepted for hand-out.
    """
    return message.time_to_be_received is None and message.privacy_level is PrivacyLevel.NONE


def source_journal_copy(sent: Message) -> Message | None:
    """The machine journal's copy of a sent message (source journaling), one per send whatever
    the number of destinations; None when its journal level has no JOURNAL.

    The copy keeps the message id, so a copy written again (a retried send or Spark task) is a
    duplicate there too.
    """
    if not sent.journal & JournalLevel.JOURNAL:
        return None
    return kept_copy(sent)


def acknowledgment_requested(level: Acknowledgment, message_class: MessageClass) -> bool:
    """Whether an acknowledgment of ``message_class`` was asked for by ``level``.

    Args:
        level (Acknowledgment): the original message's PROPID_M_ACKNOWLEDGE flags.
        message_class (MessageClass): the ACK/NACK class about to be posted.
    """
    if message_class is MessageClass.ACK_REACH_QUEUE:
        return bool(level & Acknowledgment.POSITIVE_ARRIVAL)
    if message_class is MessageClass.ACK_RECEIVE:
        return bool(level & Acknowledgment.POSITIVE_RECEIVE)
    if message_class.is_nack:
        needed = (Acknowledgment.NEGATIVE_RECEIVE if message_class.is_receive_phase
                  else Acknowledgment.NEGATIVE_ARRIVAL)
        return bool(level & needed)
    return False


def acknowledgment(original: Message, message_class: MessageClass, format_name: str | None,
                   guid: uuid.UUID | None, read_only: bool = False,
                   reason: str | None = None) -> Message | None:
    """The acknowledgment of ``message_class`` about ``original`` at one queue, if its sender
    asked for it (PROPID_M_ACKNOWLEDGE) and named an admin queue (PROPID_M_ADMIN_QUEUE).

    Args:
        original (Message): the message acknowledged (its copy at the queue).
        message_class (MessageClass): the ACK/NACK class.
        format_name (str | None): the queue's format name.
        guid (uuid.UUID | None): the queue's GUID (PROPID_Q_INSTANCE), when known.
        read_only (bool): the queue is a journal or dead-letter queue: None then. MSMQ
            acknowledges what happens to a message at its destination queue; the copy's sender
            heard of that already, and reading the copy is no receive of the message.
        reason (str | None): a human-readable reason, carried in the body.

    Returns:
        Message | None: the acknowledgment (unsent: :func:`stamp_acknowledgment` stamps it),
        or None when none is due.
    """
    if not original.admin_queue or original.id is None or read_only:
        return None
    if not acknowledgment_requested(original.acknowledge, message_class):
        return None
    info = AcknowledgmentInfo(
        original_id=original.id, message_class=message_class,
        queues=(AcknowledgedQueue(format_name, guid),), reason=reason,
        # MSMQ returns the body with negative acknowledgments so the sender can act on it
        # (safe: an admin queue is one the sender may write, checked by QueueAccess); not an
        # encrypted one, which must not reach an admin queue in clear text.
        original_body=(original.body if message_class.is_nack and not original.privacy_level
                       else None),
    )
    return acknowledgment_message(info, label=original.label)


def stamp_acknowledgment(ack: Message, message_id: MessageId, sent_time: dt.datetime,
                         machine_guid: uuid.UUID, admin_queue: str,
                         queues: Iterable[str]) -> list[Message]:
    """The copies of ``ack`` sent to its admin queue: stamped as the queue manager sends it,
    one id for all, one copy per queue ``admin_queue`` resolves to.

    Args:
        ack (Message): an acknowledgment (:func:`acknowledgment`).
        message_id (MessageId), sent_time (datetime), machine_guid (uuid.UUID): its stamps.
        admin_queue (str): the original's PROPID_M_ADMIN_QUEUE (the format name sent to).
        queues (Iterable[str]): the format names of the queues it resolves to.

    Returns:
        list[Message]: one copy per queue, ``destination_queue`` set.
    """
    sent = dataclasses.replace(ack, id=message_id, sent_time=sent_time,
                               source_machine_id=machine_guid,
                               destination_format_name=admin_queue)
    return [dataclasses.replace(sent, destination_queue=queue) for queue in queues]
