"""Moving one message to another queue (``kmq queue move``, ``kmq dlq requeue``).

The guarantee is at-least-once, never lost: the copy is sent first and acknowledged by the
broker (``acks=all``), and only then is the original removed by a receive by lookup id. A crash
or a lost connection between the two leaves the message in both queues (a duplicate), never in
neither. The copy is a new send: it gets a new message id, sent time and destination; its
body, label, priority, correlation id, response and admin queues, acknowledgment level,
delivery, journal level, application-specific number, extension and application properties are
the original's (a dead-letter or journal copy's time-to-be-received is the original message's,
restored; it counts again from the new send). The original's removal is a receive, so its
queue's journal copy and an ACK_RECEIVE (when asked for) are written as for any receive.

An encrypted original stays encrypted: the copy keeps its privacy level and encryption
algorithm, so the send encrypts it for the target queue's queue manager and every copy the
system keeps of it (journals, dead-letter queue) is encrypted too. The copy is not signed: the
original's signature names its id and destination, and whoever moves it is not its sender. A
body the caller cannot read in clear (a dead letter of a queue it may not read, or one that
does not decrypt) is not moved: its ciphertext would arrive as the copy's body.
"""

from __future__ import annotations

from typing import Any

__all__ = ["transfer"]

#: What a sender sets; everything else (id, class, times, destination, signature) is the
#: queue manager's to assign, or the dead-letter queue's annotation.
_SENDER_PROPERTIES = ("body", "label", "body_type", "correlation_id", "priority", "delivery",
                      "acknowledge", "admin_queue", "response_queue", "time_to_reach_queue",
                      "time_to_be_received", "journal", "app_specific", "extension",
                      "properties", "privacy_level", "encryption_algorithm")


def _sender_properties(original: Any, keep_ttbr: bool) -> dict[str, Any]:
    """The properties a copy of ``original`` is sent with. A dead-letter or journal copy has no
    time-to-be-received of its own: the copy gets the original message's back (a fresh
    period from the new send) instead of the property that kept it."""
    from facade.cli._messages import original_ttbr
    from facade.queues.systemoutputs import ORIGINAL_TTBR_PROPERTY

    fields = {name: getattr(original, name) for name in _SENDER_PROPERTIES}
    if not keep_ttbr:
        fields["time_to_be_received"] = None
    elif fields["time_to_be_received"] is None:
        fields["time_to_be_received"] = original_ttbr(original)
    fields["properties"] = {key: value for key, value in original.properties.items()
                            if key != ORIGINAL_TTBR_PROPERTY}
    return fields


def transfer(manager: Any, source: str, lookup_id: int, target: str,
             keep_ttbr: bool = True) -> dict[str, Any]:
    """Send a copy of message ``lookup_id`` of ``source`` to ``target``, then remove the original.

    Args:
        manager (QueueManager): the opened queue manager.
        source (str): path or format name of the queue holding the message.
        lookup_id (int): the message's lookup id in ``source`` (0 or more).
        target (str): path or format name of the queue to send the copy to.
        keep_ttbr (bool): send the copy with the original's time-to-be-received (default);
            False sends it without one, so it cannot expire again.

    Returns:
        dict[str, Any]: ``{"id", "lookup_id", "from", "to", "new_id"}`` (ids as text).

    Raises:
        MessageNotFound: no such message in ``source`` (nothing sent).
        AccessDenied: its body is encrypted and the caller may not read it in clear: a dead
            letter of a queue on which it has no PEEK_MESSAGE or DELETE_MESSAGE (nothing sent).
        EncryptionError: its body is encrypted and does not decrypt with this queue manager's
            key (nothing sent).
        CouldNotEncrypt: no encryption key is known for ``target``'s queue manager (nothing
            sent).
        MessageAlreadyReceived: it was removed before the copy was sent (nothing sent), or after
            (the copy was sent: the message says so and names the copy's id).
        MessageQueueError: the copy could not be sent (the original stays) or ``target`` is
            not a queue that can be sent to.
    """
    from facade.errors import MessageAlreadyReceived
    from facade.model.message import Message

    queue = manager.open_queue(source)
    original = queue.peek_by_lookup_id(lookup_id)
    _require_clear_body(manager, original, source)
    copy = Message(**_sender_properties(original, keep_ttbr))
    sent = manager.open_queue(target).send(copy, wait=True)
    try:
        queue.receive_by_lookup_id(lookup_id)
    except MessageAlreadyReceived as exc:
        raise MessageAlreadyReceived(
            f"copy {sent.id} was sent to {target}, but the original {original.id} was removed "
            f"from {source} meanwhile by another receiver: the message may be processed twice",
            queue=source, hint="check who else reads the queue") from exc
    return {"id": str(original.id), "lookup_id": lookup_id, "from": source, "to": target,
            "new_id": str(sent.id)}


def _require_clear_body(manager: Any, original: Any, source: str) -> None:
    """Raise unless ``original``'s body, as peeked, is clear text (or was never encrypted).

    Raises:
        AccessDenied: the caller may not read it in clear (:func:`facade.queues.receiving.body_refusal`).
        EncryptionError: it does not decrypt with this queue manager's key.
    """
    from facade.security.encryption import EncryptionError
    from facade.errors import AccessDenied
    from facade.queues.protection import is_encrypted
    from facade.queues.receiving import body_refusal

    if not is_encrypted(original):
        return
    what = f"message {original.id} of {source} is not moved: its body is encrypted"
    refusal = body_refusal(manager, original)
    if refusal is not None:
        raise AccessDenied(f"{what} and {refusal.message}", queue=source, hint=refusal.hint)
    raise EncryptionError(f"{what} and does not decrypt with the key of queue manager "
                          f"{manager.name} (encrypted for another queue manager, or damaged)",
                          queue=source, hint="read it on the queue manager it was encrypted "
                                             "for, or delete it")
