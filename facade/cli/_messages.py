"""Message listings shared by ``kmq dlq`` and ``kmq journal``: walk, rows, table, full detail.

Listings walk a queue with a :class:`~facade.cursor.Cursor` (peek only), so nothing is removed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from typing import Any

from rich.table import Table

from facade.cli._output import emit
from facade.errors import ReceiveTimeout
from facade.message import Message, MessageId

__all__ = ["ROW_COLUMNS", "emit_listing", "message_detail", "message_row", "messages_table", "peek_messages"]

#: (key in a row dict, column heading) of a message listing.
ROW_COLUMNS = (
    ("lookup_id", "lookup id"),
    ("id", "message id"),
    ("class", "class"),
    ("label", "label"),
    ("destination_queue", "destination queue"),
    ("sent_time", "sent (UTC)"),
    ("reason", "kmq.reason"),
)

_NO_WRAP = frozenset({"lookup_id", "class"})


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
        "label": message.label,
        "destination_queue": message.destination_queue,
        "sent_time": message.sent_time.isoformat() if message.sent_time else None,
        "reason": message.properties.get("kmq.reason"),
    }


def messages_table(title: str, rows: list[dict[str, Any]], more: bool = False) -> Table:
    """A rich table of listing rows; the caption says how many and whether some were left out."""
    caption = f"{len(rows)} message(s)"
    if more:
        caption += " shown; more in the queue (raise --limit)"
    table = Table(title=title, caption=caption)
    for key, heading in ROW_COLUMNS:
        # Short fixed-form values stay on one line; ids, queues and text fold.
        table.add_column(heading, no_wrap=key in _NO_WRAP, overflow="fold")
    for row in rows:
        cells = dict(row)
        if cells["sent_time"]:
            sent = dt.datetime.fromisoformat(cells["sent_time"]).astimezone(dt.UTC)
            cells["sent_time"] = sent.strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(*("" if cells[key] is None else str(cells[key]) for key, _ in ROW_COLUMNS))
    return table


def message_detail(message: Message) -> dict[str, Any]:
    """Every property of a message as JSON-friendly values.

    The body is decoded as UTF-8 (invalid bytes replaced) with its size in ``body_size``; other
    binary properties are hex; enumerations are their names; instants are ISO 8601.
    """
    detail: dict[str, Any] = {}
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if f.name == "body":
            detail["body"] = value.decode("utf-8", "replace")
            detail["body_size"] = len(value)
        else:
            detail[f.name] = _plain(value)
    return detail


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


def emit_listing(manager: Any, format_name: str, limit: int | None, as_json: bool) -> None:
    """Peek-list the queue ``format_name`` and print it (table, or a JSON list of rows).

    Raises:
        MessageQueueError: the queue cannot be opened or read (callers run this inside
            ``fail_on_errors``).
    """
    messages, more = peek_messages(manager.open_queue(format_name), limit)
    rows = [message_row(m) for m in messages]
    emit(rows, as_json, lambda r: messages_table(format_name, r, more))
