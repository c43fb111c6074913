"""Message listings shared by ``kmq dlq`` and ``kmq journal``: walk, rows, table, full detail.

Listings walk a queue with a :class:`~facade.queues.cursor.Cursor` (peek only), so nothing is removed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import uuid
from typing import Any

from rich.console import Group
from rich.text import Text

from facade.cli._output import emit
from facade.errors import ReceiveTimeout
from facade.model.message import AuthLevel, Message, MessageId, PrivacyLevel

__all__ = ["QUEUE_COLUMNS", "ROW_COLUMNS", "emit_listing", "encrypted_because",
           "message_detail", "message_row", "messages_listing", "original_ttbr",
           "peek_messages"]

#: (key in a row dict, name shown) of a dead-letter or journal listing, after the ids.
ROW_COLUMNS = (
    ("class", "class"),
    ("priority", "priority"),
    ("label", "label"),
    ("destination_queue", "to"),
    ("sent_time", "sent"),
    ("reason", "kmq.reason"),
)

#: The fields of ``kmq queue browse``: an ordinary queue's messages are all for this queue and
#: have no reason.
QUEUE_COLUMNS = (
    ("class", "class"),
    ("priority", "priority"),
    ("label", "label"),
    ("sent_time", "sent"),
)


def peek_messages(queue: Any, limit: int | None) -> tuple[list[Message], bool]:
    """Peek up to ``limit`` messages of an opened queue in receive order, removing none.

    Args:
        queue (MessageQueue): an opened single queue.
        limit (int | None): most messages to return; None for all.

    Returns:
        tuple[list[Message], bool]: the messages, and whether more were left unlisted.
    """
    messages: list[Message] = []
    with queue.cursor() as cursor:
        try:
            message = cursor.peek_current(timeout=0)  # ReceiveTimeout at once when empty
            while True:
                if limit is not None and len(messages) >= limit:
                    return messages, True
                messages.append(message)
                message = cursor.peek_next(timeout=0)  # ReceiveTimeout after the last one
        except ReceiveTimeout:
            return messages, False


def message_row(message: Message) -> dict[str, Any]:
    """The listing row of one message (the ``--json`` form of ``dlq list`` / ``journal list``)."""
    return {
        "lookup_id": message.lookup_id,
        "id": str(message.id) if message.id else None,
        "class": message.message_class.name,
        "priority": message.priority,
        "label": message.label,
        "destination_queue": message.destination_queue,
        "sent_time": message.sent_time.isoformat() if message.sent_time else None,
        "reason": message.properties.get("kmq.reason"),
    }


def messages_listing(title: str, rows: list[dict[str, Any]], more: bool = False,
                     columns: tuple[tuple[str, str], ...] = ROW_COLUMNS) -> Group:
    """Listing rows for people: per message, its lookup id and message id on one line, then its
    other fields on an indented line.

    Not a table: a message id is 37-46 characters, which a table at 80 columns folded over
    several lines, and a reader copies it into the next command whole.

    Args:
        title (str): the queue listed.
        rows (list[dict]): :func:`message_row` dicts.
        more (bool): the listing stopped at its limit (the last line says so).
        columns (tuple): (row key, name) pairs of the second line, :data:`ROW_COLUMNS` by
            default; empty values are left out.

    Returns:
        rich.console.Group: the lines.
    """
    lines: list[Text] = [Text(title, style="bold")]
    for row in rows:
        head = Text(f"lookup id {row['lookup_id']}  ", style="bold")
        head.append(row["id"] or "(no id)", style="cyan")
        lines.append(head)
        fields = [f"{name} {_shown(key, row[key])}" for key, name in columns
                  if row[key] not in (None, "")]
        lines.append(Text("    " + "  ".join(fields)))
    summary = f"{len(rows)} message(s)"
    if more:
        summary += " shown; more in the queue (raise --limit)"
    lines.append(Text(summary, style="dim"))
    return Group(*lines)


def _shown(key: str, value: Any) -> str:
    if key == "sent_time":
        sent = dt.datetime.fromisoformat(value).astimezone(dt.UTC)
        return sent.strftime("%Y-%m-%d %H:%M:%S UTC")
    if key == "label":
        return repr(value)
    return str(value)


def encrypted_because(manager: Any, message: Message) -> str | None:
    """Why a message's body is shown still encrypted, for the reader: the right it lacks on
    the queue a dead letter or machine-journal copy was sent to
    (:func:`facade.queues.receiving.body_refusal`), or that it does not decrypt with this queue
    manager's key; None when the body is clear text (never encrypted, or decrypted).

    Args:
        manager (QueueManager): the opened queue manager the message was read with.
        message (Message): the message as peeked or received.

    Raises:
        BrokerUnavailable: the registry could not be read to resolve the copy's queue.
    """
    from facade.queues.protection import is_encrypted
    from facade.queues.receiving import body_refusal

    if not is_encrypted(message):
        return None
    refusal = body_refusal(manager, message)
    if refusal is not None:
        return f"the body stays encrypted: {refusal}"
    return (f"the body stays encrypted: it does not decrypt with the key of queue manager "
            f"{manager.name} (encrypted for another queue manager, or damaged)")


def message_detail(message: Message, body_encrypted: str | None = None) -> dict[str, Any]:
    """Every property of a message as JSON-friendly values.

    The body is decoded as UTF-8 (invalid bytes replaced) with its size in ``body_size``; other
    binary properties are hex; enumerations are their names; instants are ISO 8601. Shown as
    the message has them, not as the dataclass defaults them:

    * ``hash_algorithm`` is None unless the message is signed (auth level or signature), and
      ``encryption_algorithm`` None unless it is encrypted (privacy level): an unsigned
      message showed SHA256 and a plain one AES256.
    * A journal or dead-letter copy does not expire, so it has no time-to-be-received of its
      own: ``time_to_be_received`` is the original message's (kept by the copy in the
      ``kmq.time_to_be_received`` property), not a blank.
    * ``body_encrypted`` is ``body_encrypted`` (from :func:`encrypted_because`): why the body
      shown is ciphertext, or None.
    """
    detail: dict[str, Any] = {}
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if f.name == "body":
            detail["body"] = value.decode("utf-8", "replace")
            detail["body_size"] = len(value)
            detail["body_encrypted"] = body_encrypted
        else:
            detail[f.name] = _plain(value)
    if message.auth_level == AuthLevel.NONE and message.signature is None:
        detail["hash_algorithm"] = None
    if message.privacy_level == PrivacyLevel.NONE:
        detail["encryption_algorithm"] = None
    if message.time_to_be_received is None:
        detail["time_to_be_received"] = original_ttbr(message)
    return detail


def original_ttbr(message: Message) -> float | None:
    """The time-to-be-received (seconds) of the message a journal or dead-letter copy was made
    from, or None: none was set, or the property is not a number (an application may set any
    property, so it is not trusted to be one)."""
    from facade.queues.systemoutputs import ORIGINAL_TTBR_PROPERTY

    try:
        seconds = float(message.properties.get(ORIGINAL_TTBR_PROPERTY, "nan"))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name if value.name is not None else int(value)
    if isinstance(value, (MessageId, uuid.UUID)):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def emit_listing(manager: Any, format_name: str, limit: int | None, as_json: bool,
                 columns: str = "system") -> None:
    """Peek-list the queue ``format_name`` and print it (table, or a JSON list of rows).

    Args:
        columns (str): ``"system"`` (dead-letter and journal columns: destination, reason) or
            ``"queue"`` (an ordinary queue's: priority); ``--json`` rows have every key.

    Raises:
        MessageQueueError: the queue cannot be opened or read (callers run this inside
            ``fail_on_errors``).
    """
    messages, more = peek_messages(manager.open_queue(format_name), limit)
    rows = [message_row(m) for m in messages]
    shown = QUEUE_COLUMNS if columns == "queue" else ROW_COLUMNS
    emit(rows, as_json, lambda r: messages_listing(format_name, r, more, shown))
