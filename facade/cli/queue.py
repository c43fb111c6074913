"""``kmq queue`` and the message commands ``kmq send | receive | peek``."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import typer

from facade.cli._confirm import YesOption, confirm
from facade.cli._names import resolve_queue_name
from facade.cli._options import (
    bytes_option,
    seconds_option,
    text_argument,
    text_option,
    timer_option,
)
from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table, quoted
from facade.model.timers import TIME_TO_BE_RECEIVED, TIME_TO_REACH_QUEUE

if TYPE_CHECKING:  # kmq's API is imported when a command runs, not for --help
    from rich.table import Table

    from facade.manager import QueueManager
    from facade.model.message import Message

app = typer.Typer(help="Create, list, show, purge and delete queues.", no_args_is_help=True)

QueueArg = text_argument(
    ..., help=r"Queue: NAME (this queue manager's), path name (.\private$\orders), format name "
              "(PUBLIC=, DIRECT=, DL=...), dl:NAME or alias:NAME.")


@contextmanager
def _manager(as_json: bool = False, *, sends: bool = False) -> Iterator[QueueManager]:
    """The queue manager for one command; ``sends``: lease message ids up front (see
    :meth:`QueueManager.open`), which a command that sends nothing skips (start-up time)."""
    from facade.manager import QueueManager

    with fail_on_errors(as_json), QueueManager.open(lease_ids=sends) as manager:
        yield manager


def _queue_dict(properties: Any) -> dict[str, Any]:
    """Queue properties as printed: creation and modification times in ISO 8601 UTC, the one
    timestamp style of every kmq command."""
    import datetime as dt

    data = dataclasses.asdict(properties)
    # What a receiver can rely on: a share group hands messages out in no order.
    data["order"] = (ORDER_NONE if data.get("arbitration") == "share"
                     else "highest priority first, then arrival")
    for name in ("create_time", "modify_time"):
        if data.get(name) is not None:
            data[name] = dt.datetime.fromtimestamp(data[name], dt.UTC).isoformat()
    return data


class Arbitration(str, enum.Enum):
    """``kmq queue create --arbitration``: QueueProperties.arbitration's values."""

    RECEIPTS = "receipts"
    SHARE = "share"


#: The ``order`` of a share-arbitrated queue, as ``kmq queue show`` and ``list`` print it.
ORDER_NONE = "none kept (share group): neither priority nor arrival order"


def _create_path(path: str, public: bool) -> str:
    r"""The path name to create: a bare NAME is ``.\private$\NAME`` (``.\NAME`` with --public)."""
    if "\\" not in path:
        return f".\\{path}" if public else f".\\private$\\{path}"
    if public and "private$" in path.lower().split("\\"):
        raise typer.BadParameter(f"{quoted(path)} is a private queue's path; --public creates a "
                                 r"public queue (.\NAME or HOST\NAME)", param_hint="'--public'")
    return path


def _retry_limit(value: int) -> int | None:
    """The CLI's -1 ("no limit") as QueueProperties' None."""
    return None if value < 0 else value


@app.command()
def create(path: str = text_argument(
               ..., help=r"Path name (.\private$\orders, .\orders) or a bare NAME "
                         r"(.\private$\NAME, or .\NAME with --public)."),
           public: bool = typer.Option(
               False, "--public",
               help="A bare NAME becomes a public queue (.\\NAME), published in the directory."),
           label: str = text_option("", help="Queue label (<= 124 characters)."),
           transactional: bool = typer.Option(False, help="Transactional queue."),
           journal: bool = typer.Option(False, help="Keep removed messages in the queue journal."),
           quota_kb: int = typer.Option(None, help="Queue quota in KB (default unlimited)."),
           receive_retry_count: int = typer.Option(
               None, min=-1,
               help="Peek-lock releases after which a message goes to ;poison; -1 = no limit "
                    "(default 5, facade.state.registry.DEFAULT_RECEIVE_RETRY_COUNT)."),
           arbitration: Arbitration = typer.Option(
               "receipts", "--arbitration", case_sensitive=False,
               help="Who decides which receiver gets a message: 'receipts' (default; every "
                    "MSMQ operation, priority then arrival order) or 'share' (a Kafka share "
                    "group: receivers scale out, NO order is kept; peek, cursors, selective "
                    "receives, purge, count, prefetch and transactions are refused). See "
                    "docs/design.md, \"Share-group arbitration\"."),
           as_json: bool = JsonOption) -> None:
    r"""Create a queue; a path without private$ is a public queue, published in the directory.

    Example: kmq queue create orders --public --label Orders
    """
    queue_path = _create_path(path, public)
    with _manager(as_json) as qm:
        queue = qm.create_queue(queue_path, label=label, transactional=transactional,
                                journal=journal, quota_kb=quota_kb,
                                arbitration=arbitration.value,
                                **_retry_setting(receive_retry_count))
        props = queue.properties
    data = _queue_dict(props)
    if not props.private:
        data["format_name"] = f"PUBLIC={props.instance}"
    emit(data, as_json, lambda d: key_value_table("queue created", d))


@app.command()
def locate(label: str = text_option(
               None, help=r"Label pattern: * matches any characters, \* a literal star, \\ a "
                          "backslash; case-insensitive (an empty label matches unlabelled "
                          "queues)."),
           type_id: str = text_option(None, help="Type GUID (PROPID_Q_TYPE) to match."),
           queue_manager: str = text_option(None, help="Only this queue manager's queues."),
           transactional: bool = typer.Option(None, "--transactional/--no-transactional",
                                              help="Only transactional (or non-transactional) "
                                              "queues."),
           as_json: bool = JsonOption) -> None:
    r"""Find public queues in the directory; every restriction given must hold (no broker needed).

    Prints the matching queues, or "no public queue matches" (--json: a list, maybe empty).

    Example: kmq queue locate --label 'Order*' --transactional   (a literal star: 'Sale 50\*')
    """
    from facade.cli.directory import open_directory

    restrictions = {} if transactional is None else {"transactional": transactional}
    with open_directory(as_json) as directory:
        found = directory.locate(label=label, type_id=type_id, queue_manager=queue_manager,
                                 **restrictions)
    rows = [{"path_name": q.path_name, "format_name": q.format_name, "label": q.label,
             "queue_manager": q.queue_manager, "transactional": q.transactional,
             "type_id": str(q.type_id) if q.type_id else None} for q in found]

    def render(data: list[dict]) -> Table | str:
        if not data:
            return "no public queue matches"
        from rich.table import Table

        table = Table(title="public queues")
        for column in ("path_name", "format_name", "label"):
            table.add_column(column)
        for row in data:
            table.add_row(row["path_name"], row["format_name"], row["label"])
        return table
    emit(rows, as_json, render)


@app.command("list")
def list_queues(counts: bool = typer.Option(
                    True, "--counts/--no-counts",
                    help="Count each queue's messages, or list the properties only. The counts "
                         "of all queues come from one end-offset query, the queue snapshots "
                         "and the records written since each queue's last snapshot: an idle "
                         "or empty queue costs no read."),
                as_json: bool = JsonOption) -> None:
    """List this queue manager's queues with their message counts.

    "messages" counts what a receiver can still get; "expired" the messages past their
    time-to-be-received that the next sweep (`kmq qm run`) dead-letters. Both are exact as of
    the moment the command asks the broker for the queues' end offsets, the same as `kmq queue
    show` gives for one queue (messages of a Kafka transaction still open are not counted
    yet). With --no-counts both are null.
    """
    with _manager(as_json) as qm:
        listed = qm.list_queues()
        found = qm.queue_counts() if counts else {}
        queues = []
        for properties in listed:
            counted = found.get(properties.path_name)
            queues.append({**_queue_dict(properties),
                           "messages": None if counted is None else counted.receivable,
                           "expired": None if counted is None else counted.expired})
    columns = (("path_name", "queue"), ("label", "label"), ("messages", "messages"),
               ("transactional", "xact"), ("journal", "journal"), ("quota_kb", "quota KB"),
               ("arbitration", "arbiter"))

    def render(rows: list[dict]) -> Table:
        from rich.table import Table

        table = Table(title="queues")
        for key, heading in columns:  # names and headings whole; a long label folds
            table.add_column(heading, no_wrap=key == "path_name",
                             min_width=None if key == "label" else len(heading))
        for row in rows:
            cells = {**row, "messages": _messages_cell(row)}
            table.add_row(*("" if cells[k] is None else str(cells[k]) for k, _ in columns))
        return table
    emit(queues, as_json, render)


def _messages_cell(row: dict) -> str | None:
    if row.get("arbitration") == "share":
        return "n/a (share: no order, no count)"
    if row["messages"] is None:
        return None
    if row["expired"]:
        return f"{row['messages']} (+{row['expired']} expired)"
    return str(row["messages"])


def _counts(handle: Any) -> dict[str, int]:
    """``{"messages", "expired"}`` of an opened queue: messages a receiver can get (MSMQ's
    message count), and expired ones still waiting for the sweep (not in "messages")."""
    total, expired = handle.counts()  # one read of the queue for both
    return {"messages": total - expired, "expired": expired}


@app.command()
def show(queue: str = QueueArg, as_json: bool = JsonOption) -> None:
    """Show a queue's properties and message count ("expired": past their time-to-be-received,
    not counted in "messages", dead-lettered by the next sweep)."""
    with _manager(as_json) as qm:
        with qm.open_queue(resolve_queue_name(qm, queue)) as q:
            properties = q.properties
            if q.arbitration == "share":
                # A share group keeps no count and no receipts (MessageQueue.count refuses).
                data = {**_queue_dict(properties), "messages": None, "expired": None}
            else:
                data = {**_queue_dict(properties), **_counts(q),
                        "malformed_receipts": q.malformed_receipts(),
                        "malformed_snapshots": q.malformed_snapshots()}
    emit(data, as_json, lambda d: key_value_table(queue, d))


@app.command("set")
def set_properties(
        queue: str = QueueArg,
        label: str = text_option(None, help="New queue label (<= 124 characters)."),
        journal: bool = typer.Option(None, "--journal/--no-journal",
                                     help="Keep (or stop keeping) removed messages in the journal."),
        quota_kb: int = typer.Option(None, min=0, help="Queue quota in KB; 0 removes the quota."),
        journal_quota_kb: int = typer.Option(None, min=0,
                                             help="Journal quota in KB; 0 removes the quota."),
        base_priority: int = typer.Option(None, min=-32768, max=32767,
                                          help="Base priority (-32768..32767)."),
        receive_retry_count: int = typer.Option(
            None, min=-1,
            help="Peek-lock releases after which a message goes to ;poison; -1 = no limit."),
        as_json: bool = JsonOption) -> None:
    r"""Change a queue's properties; only the options given change. Prints the result.

    Example: kmq queue set '.\private$\orders' --label Orders --journal --quota-kb 1024
    """
    changes: dict[str, Any] = {name: value for name, value in (
        ("label", label), ("journal", journal), ("quota_kb", quota_kb),
        ("journal_quota_kb", journal_quota_kb), ("base_priority", base_priority),
        ("receive_retry_count", receive_retry_count))
        if value is not None}
    if not changes:
        raise typer.BadParameter("nothing to change: give at least one of --label, "
                                 "--journal/--no-journal, --quota-kb, --journal-quota-kb, "
                                 "--base-priority, --receive-retry-count", param_hint="options")
    if "receive_retry_count" in changes:
        changes["receive_retry_count"] = _retry_limit(changes["receive_retry_count"])
    for name in ("quota_kb", "journal_quota_kb"):
        if changes.get(name) == 0:
            changes[name] = None  # unlimited
    with _manager(as_json) as qm:
        props = qm.set_properties(resolve_queue_name(qm, queue), **changes)
    emit(_queue_dict(props), as_json, lambda d: key_value_table("queue updated", d))


@app.command()
def purge(queue: str = QueueArg, yes: bool = YesOption, as_json: bool = JsonOption) -> None:
    """Remove every message now in the queue (asks first; --yes does not).

    Example: kmq queue purge orders --yes
    """
    confirm(f"purge every message of {queue}", yes)
    with _manager(as_json) as qm:
        removed = qm.open_queue(resolve_queue_name(qm, queue)).purge()
    emit({"purged": removed}, as_json, lambda d: f"purged {d['purged']} message(s)")


@app.command()
def delete(queue: str = QueueArg, yes: bool = YesOption, as_json: bool = JsonOption) -> None:
    """Delete a queue, its journal and its messages (asks first; --yes does not).

    Example: kmq queue delete orders --yes
    """
    confirm(f"delete queue {queue} with its journal and messages", yes)
    with _manager(as_json) as qm:
        qm.delete_queue(resolve_queue_name(qm, queue))
    emit({"deleted": queue}, as_json, lambda d: f"deleted {d['deleted']}")


def _retry_setting(receive_retry_count: int | None) -> dict[str, Any]:
    """``receive_retry_count=`` for create_queue when the option was given (else its default)."""
    if receive_retry_count is None:
        return {}
    return {"receive_retry_count": _retry_limit(receive_retry_count)}


def _flag_names(value: str | None, kind: type[enum.Flag], option: str) -> Any:
    """``POSITIVE_ARRIVAL|NEGATIVE_RECEIVE`` (or commas, any case) as a ``kind`` flag value."""
    if value is None:
        return None
    result = kind(0)
    for word in filter(None, (w.strip().upper() for w in value.replace(",", "|").split("|"))):
        if word not in kind.__members__:
            choices = ", ".join(kind.__members__)
            raise typer.BadParameter(f"{word!r} is not a level; give one or more of {choices} "
                                     "joined by |", param_hint=f"'{option}'")
        result |= kind.__members__[word]
    return result


def _parse_id(text: str, option: str) -> Any:
    """``text`` as a MessageId, or a usage error naming ``option``."""
    from facade.model.message import MessageId

    try:
        return MessageId.parse(text)
    except ValueError as exc:
        reason = getattr(exc, "message", str(exc))
        raise typer.BadParameter(f"{reason}; give a message id as kmq prints it "
                                 r"(GUID\number)", param_hint=f"'{option}'") from None


def _body(body: bytes | None, body_file: Any) -> bytes:
    if (body is None) == (body_file is None):
        raise typer.BadParameter("give the body either as --body TEXT or as --body-file PATH "
                                 "('-' reads standard input), exactly one",
                                 param_hint="'--body' / '--body-file'")
    return body if body is not None else body_file.read()


def send(queue: str = QueueArg,
         body: str = bytes_option(None, "--body", "-b",
                                  help="Message body: the argument's bytes as given (UTF-8 text "
                                       "from a UTF-8 shell, or any bytes)."),
         body_file: typer.FileBinaryRead = typer.Option(
             None, "--body-file", metavar="PATH",
             help="Read the body from a file; '-' reads standard input."),
         label: str = text_option("", help="Message label (<= 250 characters)."),
         priority: int = typer.Option(3, min=0, max=7, help="Priority 0-7."),
         time_to_be_received: float | None = timer_option(
             TIME_TO_BE_RECEIVED, "--time-to-be-received", "--ttbr",
             help="TTBR: seconds from the send until the message expires, unreceived"),
         time_to_reach_queue: float | None = timer_option(
             TIME_TO_REACH_QUEUE, "--time-to-reach-queue", "--ttrq",
             help="TTRQ: seconds the message may take to reach the queue"),
         acknowledge: str = text_option(
             None, "--acknowledge", metavar="LEVEL",
             help="Acknowledgments wanted in the admin queue: NONE, POSITIVE_ARRIVAL, "
                  "POSITIVE_RECEIVE, NEGATIVE_ARRIVAL, NEGATIVE_RECEIVE, NACK_REACH_QUEUE, "
                  "FULL_REACH_QUEUE, NACK_RECEIVE or FULL_RECEIVE (join several with |)."),
         admin_queue: str = text_option(None, "--admin-queue", metavar="QUEUE",
                                        help="Queue for acknowledgments (any queue name form)."),
         response_queue: str = text_option(None, "--response-queue", metavar="QUEUE",
                                           help="Queue the receiver should answer to."),
         correlation_id: str = text_option(None, "--correlation-id", metavar="MESSAGE_ID",
                                           help=r"Correlation id: a message id (GUID\number)."),
         recoverable: bool = typer.Option(
             False, "--recoverable/--express",
             help="Delivery RECOVERABLE (acks=all, idempotent) or EXPRESS (the default)."),
         journal: str = text_option(
             None, "--journal", metavar="LEVEL",
             help="Source journaling: NONE, DEADLETTER (expired or undeliverable goes to the "
                  "dead-letter queue), JOURNAL (a copy in the machine journal), or both "
                  "joined by |."),
         app_specific: int = typer.Option(0, "--app-specific", min=0, max=0xFFFF_FFFF,
                                          help="Application-specific number (0-4294967295)."),
         as_json: bool = JsonOption) -> None:
    r"""Send one message.

    Example: kmq send orders --body 'hello' --priority 5 --ttbr 60 --admin-queue acks
    --acknowledge FULL_RECEIVE   (or: cat order.json | kmq send orders --body-file -)
    """
    from facade.model.message import Acknowledgment, Delivery, JournalLevel, Message

    data = _body(cast("bytes | None", body), body_file)  # bytes_option delivers bytes
    acks = _flag_names(acknowledge, Acknowledgment, "--acknowledge")
    journal_level = _flag_names(journal, JournalLevel, "--journal")
    correlation = None if correlation_id is None else _parse_id(correlation_id, "--correlation-id")
    with _manager(as_json, sends=True) as qm:
        # A body is bytes in MSMQ: bytes_option hands over the command line's own bytes, so
        # `--body $'\xff\xfe'` sends those two bytes (UTF-8 text stays UTF-8). The label is
        # text: text_option refuses undecodable bytes in it. Reasons in facade.cli._options.
        message = Message(
            body=data, label=label, priority=priority,
            time_to_be_received=time_to_be_received, time_to_reach_queue=time_to_reach_queue,
            acknowledge=acks if acks is not None else Acknowledgment.NONE,
            admin_queue=None if admin_queue is None else resolve_queue_name(qm, admin_queue),
            response_queue=(None if response_queue is None
                            else resolve_queue_name(qm, response_queue)),
            correlation_id=correlation,
            delivery=Delivery.RECOVERABLE if recoverable else Delivery.EXPRESS,
            journal=journal_level if journal_level is not None else JournalLevel.NONE,
            app_specific=app_specific)
        sent = qm.open_queue(resolve_queue_name(qm, queue)).send(message, wait=True)
    emit({"id": str(sent.id), "queue": queue}, as_json, lambda d: f"sent {d['id']}")


def _message_dict(m: Message, body_encrypted: str | None) -> dict:
    """A received or peeked message as printed. A journal or dead-letter copy shows the
    time-to-be-received of the message it was made from (its own is none: it never expires);
    ``body_encrypted`` says why its body is shown encrypted (None: clear text)."""
    from facade.cli._messages import original_ttbr

    def name(value: Any) -> Any:
        return None if value is None else (value.name or int(value))

    return {"id": str(m.id), "label": m.label, "priority": m.priority,
            "class": m.message_class.name, "lookup_id": m.lookup_id,
            "correlation_id": str(m.correlation_id) if m.correlation_id else None,
            "delivery": name(m.delivery), "acknowledge": name(m.acknowledge),
            "admin_queue": m.admin_queue, "response_queue": m.response_queue,
            "time_to_be_received": (m.time_to_be_received if m.time_to_be_received is not None
                                    else original_ttbr(m)),
            "time_to_reach_queue": m.time_to_reach_queue, "journal": name(m.journal),
            "app_specific": m.app_specific,
            "sent_time": m.sent_time.isoformat() if m.sent_time else None,
            "arrived_time": m.arrived_time.isoformat() if m.arrived_time else None,
            "body_size": len(m.body), "body": m.body.decode("utf-8", "replace"),
            "body_encrypted": body_encrypted}


TimeoutOption = seconds_option(5.0, "--timeout", help="Seconds to wait for a message")
IdOption = text_option(None, "--id", metavar="MESSAGE_ID",
                       help=r"Only the message with this id (GUID\number, as kmq prints it).")
CorrelationOption = text_option(None, "--correlation-id", metavar="MESSAGE_ID",
                                help="Only the first message with this correlation id.")
LookupOption = typer.Option(None, "--lookup-id", min=0,
                            help="Only the message with this lookup id (from `kmq queue browse`).")


def _selected(handle: Any, remove: bool, timeout: float, message_id: Any,
              correlation_id: Any, lookup_id: int | None) -> Message:
    """The first message, or the one the selector names (at most one selector is given)."""
    if message_id is not None:
        by = handle.receive_by_id if remove else handle.peek_by_id
        return by(message_id, timeout=timeout)
    if correlation_id is not None:
        by = handle.receive_by_correlation_id if remove else handle.peek_by_correlation_id
        return by(correlation_id, timeout=timeout)
    if lookup_id is not None:  # a lookup id names one record: there is nothing to wait for
        return (handle.receive_by_lookup_id if remove else handle.peek_by_lookup_id)(lookup_id)
    return handle.receive(timeout=timeout) if remove else handle.peek(timeout=timeout)


def _first_message(queue: str, timeout: float, as_json: bool, remove: bool,
                   selectors: tuple[str | None, str | None, int | None]) -> None:
    from facade.cli._messages import encrypted_because

    message_id, correlation_id, lookup_id = selectors
    if sum(s is not None for s in selectors) > 1:
        raise typer.BadParameter("give at most one of --id, --correlation-id, --lookup-id",
                                 param_hint="'--id' / '--correlation-id' / '--lookup-id'")
    message_id = None if message_id is None else _parse_id(message_id, "--id")
    correlation_id = (None if correlation_id is None
                      else _parse_id(correlation_id, "--correlation-id"))
    with _manager(as_json) as qm:
        handle = qm.open_queue(resolve_queue_name(qm, queue))
        message = _selected(handle, remove, timeout, message_id, correlation_id, lookup_id)
        data = _message_dict(message, encrypted_because(qm, message))
    title = "message received" if remove else "message peeked"
    emit(data, as_json, lambda d: key_value_table(title, d))


def receive(queue: str = QueueArg, timeout: float = TimeoutOption,
            message_id: str = IdOption, correlation_id: str = CorrelationOption,
            lookup_id: int = LookupOption, as_json: bool = JsonOption) -> None:
    """Remove and print the first message, or the one --id/--lookup-id... names.

    Selectors: --id, --correlation-id or --lookup-id. The first message is the one of highest
    priority, then the oldest. On a timeout: exit 1
    (--json: an "error" object on stdout).

    Example: kmq receive orders --id '6f46391f-6c0d-48b6-8c8f-c4910bdc5b38\1024'
    """
    _first_message(queue, timeout, as_json, True, (message_id, correlation_id, lookup_id))


def peek(queue: str = QueueArg, timeout: float = TimeoutOption,
         message_id: str = IdOption, correlation_id: str = CorrelationOption,
         lookup_id: int = LookupOption, as_json: bool = JsonOption) -> None:
    """Print the first message without removing it, or the one --id/--lookup-id... names.

    Selectors: --id, --correlation-id or --lookup-id. On a timeout: exit 1 (--json: an "error"
    object on stdout).

    Example: kmq peek orders --lookup-id 3
    """
    _first_message(queue, timeout, as_json, False, (message_id, correlation_id, lookup_id))


@app.command()
def browse(queue: str = QueueArg,
           limit: int = typer.Option(100, "--limit", min=1, help="List at most this many."),
           as_json: bool = JsonOption) -> None:
    """List the messages of a queue in receive order without removing any (a cursor's peeks).

    Columns: lookup id, message id, class, priority, label, sent time. --json prints a list of
    objects (see `kmq peek QUEUE --lookup-id N` for one message in full).

    Example: kmq queue browse orders --limit 20
    """
    from facade.cli._messages import emit_listing

    with _manager(as_json) as qm:
        emit_listing(qm, resolve_queue_name(qm, queue), limit, as_json, columns="queue")


@app.command()
def move(queue: str = QueueArg,
         lookup_id: int = typer.Argument(..., min=0, help="The message's lookup id (from "
                                                          "`kmq queue browse`)."),
         to: str = text_option(..., "--to", metavar="QUEUE",
                               help="Queue to move it to (any queue name form)."),
         as_json: bool = JsonOption) -> None:
    """Move one message to another queue: send a copy there, then remove the original.

    At least once, never lost: the copy is sent (and acknowledged) before the original is
    removed; a crash in between leaves a duplicate, never a loss. The copy gets a new message
    id. The original's removal is a receive (journal copy, ACK_RECEIVE if asked for).

    Example: kmq queue move orders 3 --to orders-retry
    """
    from facade.cli._transfer import transfer

    with _manager(as_json, sends=True) as qm:
        data = transfer(qm, resolve_queue_name(qm, queue), lookup_id, resolve_queue_name(qm, to))
    emit(data, as_json, lambda d: f"moved {d['id']} to {d['to']} as {d['new_id']}")


@app.command("delete-message")
def delete_message(queue: str = QueueArg,
                   lookup_id: int = typer.Argument(..., min=0, help="The message's lookup id "
                                                   "(from `kmq queue browse`)."),
                   yes: bool = YesOption, as_json: bool = JsonOption) -> None:
    """Remove one message by its lookup id (asks first; --yes does not).

    The removal is a receive: the queue's journal keeps a copy when journaling is on.

    Example: kmq queue delete-message orders 3 --yes
    """
    confirm(f"delete the message with lookup id {lookup_id} from {queue}", yes)
    with _manager(as_json) as qm:
        removed = qm.open_queue(resolve_queue_name(qm, queue)).receive_by_lookup_id(lookup_id)
    emit({"deleted": str(removed.id), "lookup_id": lookup_id, "queue": queue}, as_json,
         lambda d: f"deleted {d['deleted']} from {d['queue']}")
