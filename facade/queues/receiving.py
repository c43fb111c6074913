"""What every receive does with the records it won, whoever receives.

A message removed from a queue is handed out the same way by the queue handle
(:class:`facade.queues.queue.MessageQueue`, its cursors and prefetched batches) and by Spark's
destructive read (:mod:`spark_connector._receive`), so a record is judged and its outputs are
written by one piece of code:

1. :func:`message_of`: the record decoded (``EnvelopeError``: poison), its receive-side state
   set (lookup id, arrival time), then decrypted and verified for hand-out
   (``MessageRejected``: refused by the queue's or the receiver's protection rules); a copy in a
   dead-letter queue or the machine journal is decrypted only for a caller who may read the
   queue it was sent to (:func:`body_refusal`);
2. :func:`dead_letter_unreceivable`: a won record that cannot be handed out goes to the
   dead-letter queue, never lost: a refused message with its NACK (NACK_BAD_SIGNATURE, ...), a
   poison record wrapped as NACK_RECEIVE_REJECTED;
3. :func:`write_receive_outputs`: the receive's outputs for messages handed out together: their
   queue-journal copies with one broker wait (raises: hand nothing out), then their ACK_RECEIVEs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from facade.security.acl import AccessRight
from facade.model.envelope import decode_message
from facade.errors import (
    AccessDenied,
    DirectoryUnavailable,
    EnvelopeError,
    FormatNameError,
    QueueNotFound,
    UnsupportedFormatNameOperation,
)
from facade.model.formatnames import parse_queue_reference
from facade.model.message import Message, MessageClass, PrivacyLevel
from facade.queues.protection import MessageRejected, ProtectionLevel
from facade.queues.sending import stored_record_is_kept_copy

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.kafka.kafkaseam import KafkaRecord
    from facade.queues.queuehost import QueueHost

__all__ = ["body_refusal", "count_aborts", "dead_letter_unreceivable", "message_of",
           "write_receive_outputs"]

#: Either one lets a caller read a kept copy's body in clear: peek or receive on its queue.
_READS_BODY = AccessRight.PEEK_MESSAGE | AccessRight.DELETE_MESSAGE


def message_of(host: QueueHost, record: Any, lookup_id: int, destination: Destination,
               required: ProtectionLevel = ProtectionLevel.NONE, *,
               refuse: bool = True) -> Message:
    """The message a won or peeked record holds, ready for hand-out.

    Args:
        host (QueueHost): the queue manager (its message protection).
        record (KafkaRecord): the data record (value, headers, topic, partition, offset,
            timestamp_ms).
        lookup_id (int): the record's offset (MSMQ lookup id).
        destination (Destination): the queue read; journals and dead-letter queues
            (``read_only``) are read for inspection and never refuse a message; in a
            dead-letter queue or the machine journal an encrypted body stays encrypted unless
            the caller may read the queue it was sent to (:func:`body_refusal`).
        required (ProtectionLevel): the receiver's protection level (seed 004).
        refuse (bool): False when the message was handed out as stored already (Spark's
            receive mode, ``docs/spark.md``): the protection rules can no longer refuse it,
            so it is judged as a journal copy is (decrypted where possible, never refused).

    Returns:
        Message: decrypted (where the caller may read the body), ``authenticated`` set,
        ``lookup_id`` and ``arrived_time`` set.

    Raises:
        EnvelopeError: the value is not a kmq envelope (poison).
        BrokerUnavailable: the registry could not be read (a kept copy's queue).
        MessageRejected: the protection rules refuse it (an EnvelopeError too).
    """
    message = decode_message(record.value, record.headers, topic=record.topic,
                             partition=record.partition, offset=record.offset)
    message.lookup_id = lookup_id
    message.arrived_time = dt.datetime.fromtimestamp(record.timestamp_ms / 1000, dt.timezone.utc)
    # Decrypted and verified here, so every receive, peek and system action sees the same.
    if refuse and not destination.read_only:
        return host.protection.accept(message, destination.properties, required)
    if destination.system_of is not None and message.privacy_level is not PrivacyLevel.NONE \
            and body_refusal(host, message) is not None:
        return message  # as stored, still encrypted: body_refusal says why
    return host.protection.accept(message, None, required)


def body_refusal(host: QueueHost, message: Message) -> AccessDenied | None:
    """Why the caller may not read in clear the body of an encrypted copy that the system
    keeps in a dead-letter queue or the machine journal; None when it may.

    Those queues are guarded by their queue manager's descriptor (Everyone may peek by
    default), and the queue manager's key decrypts every copy in them. So a body is shown
    decrypted there only to a principal with PEEK_MESSAGE or DELETE_MESSAGE (peek or receive)
    on the queue the copy was sent to (PROPID_M_DEST_QUEUE), who could have read it in that
    queue; anyone else gets the copy as stored, still encrypted.

    Args:
        host (QueueHost): the queue manager (resolution, the caller's rights).
        message (Message): the copy as decoded from its record.

    Returns:
        AccessDenied | None: the refusal (MQ_ERROR_ACCESS_DENIED), naming the principal, the
        rights and the queue, or why no queue's access list can allow it (the copy names no
        queue, or one that does not resolve any more); None when the caller may read it.

    Raises:
        BrokerUnavailable: the registry could not be read to resolve the queue.
    """
    name = message.destination_queue
    if not name:
        return AccessDenied("the copy names no queue it was sent to (PROPID_M_DEST_QUEUE): no "
                            "queue's access list allows reading its body")
    try:
        queue = host.resolve(parse_queue_reference(name))
    except (FormatNameError, QueueNotFound, UnsupportedFormatNameOperation,
            DirectoryUnavailable) as exc:
        return AccessDenied(f"the queue the copy was sent to, {name!r}, does not resolve "
                            f"({exc.message}): no queue's access list allows reading its body",
                            queue=name)
    refusal = host.access.refusal_unless_any(queue, _READS_BODY)
    if refusal is None:
        return None
    return AccessDenied(f"{refusal.message}, the queue the copy was sent to", queue=name,
                        hint=refusal.hint)


def dead_letter_unreceivable(host: QueueHost, record: Any, reason: str,
                             destination: Destination,
                             required: ProtectionLevel = ProtectionLevel.NONE) -> None:
    """Dead-letter a won record that cannot be handed out (the receipt already removed it, so
    it must not be lost): a message the protection rules refuse goes with its NACK class
    (``MessageProtection.reject``), anything else as a poison record (class
    NACK_RECEIVE_REJECTED, the raw value as its body, ``reason`` in ``kmq.reason``).

    Raises:
        BrokerUnavailable, BrokerError: the dead-letter copy was not written.
    """
    try:
        message_of(host, record, record.offset, destination, required)
    except MessageRejected as rejected:  # a valid envelope the arrival checks refuse
        host.protection.reject(rejected, destination)
        return
    except EnvelopeError:
        pass  # a poison record: dead-lettered as such below
    where = f"{record.topic}@{record.partition}:{record.offset}"
    host.dead_letter(host.poison_message(record.value, reason, destination, where))


def count_aborts(message: Message, aborts: int, record: Any) -> Any | None:
    """Add ``aborts`` (releases of peek-locks on it, PROPID_M_ABORT_COUNT) to a won message's
    abort count.

    Returns:
        KafkaRecord | None: ``record``, the one the message was decoded from, when it is still
        the message's journal copy as stored (nothing added, and
        :func:`facade.queues.sending.stored_record_is_kept_copy`); else None (encode the copy).
    """
    message.abort_count += aborts
    return record if not aborts and stored_record_is_kept_copy(message) else None


def write_receive_outputs(host: QueueHost, messages: Sequence[Message],
                          destination: Destination,
                          stored: Mapping[int, KafkaRecord] | None = None) -> None:
    """Write the outputs of receiving ``messages`` from ``destination`` together: their journal
    copies (PROPID_Q_JOURNAL) with one broker wait, then their ACK_RECEIVEs (when asked for).

    ``stored``: by lookup id, records that are their message's journal copy unchanged (see
    :func:`facade.queues.sending.stored_record_is_kept_copy`); they are written as they are.

    Raises:
        MessageQueueError: a journal copy was not acknowledged: hand none of them out (a copy
            written again later keeps its id, so views drop the duplicate). A lost
            acknowledgment is logged, not raised.
    """
    if not messages:
        return
    outputs = host.outputs
    outputs.journal_removed_many(list(messages), destination, stored)
    outputs.acknowledge_many(messages, MessageClass.ACK_RECEIVE, destination)
