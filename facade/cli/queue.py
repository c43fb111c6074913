"""``kmq queue`` and the message commands ``kmq send | receive | peek``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.table import Table

from facade.cli._options import bytes_option, seconds_option, text_argument, text_option
from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table
from facade.manager import QueueManager
from facade.message import Message
from facade.registry import DEFAULT_RECEIVE_RETRY_COUNT

app = typer.Typer(help="Create, list, show, purge and delete queues.", no_args_is_help=True)

QueueArg = text_argument(..., help=r"Path name (.\private$\orders) or format name.")


@contextmanager
def _manager() -> Iterator[QueueManager]:
    with fail_on_errors(), QueueManager.open() as manager:
        yield manager


def _create_path(path: str, public: bool) -> str:
    r"""The path name to create: a bare NAME is ``.\private$\NAME`` (``.\NAME`` with --public)."""
    if "\\" not in path:
        return f".\\{path}" if public else f".\\private$\\{path}"
    if public and "private$" in path.lower().split("\\"):
        raise typer.BadParameter(f"{path!r} is a private queue's path; --public creates a public "
                                 r"queue (.\NAME or HOST\NAME)", param_hint="'--public'")
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
               DEFAULT_RECEIVE_RETRY_COUNT, min=-1,
               help="Peek-lock releases after which a message goes to ;poison; -1 = no limit."),
           as_json: bool = JsonOption) -> None:
    r"""Create a queue; a path without private$ is a public queue, published in the directory.

    Example: kmq queue create orders --public --label Orders
    """
    queue_path = _create_path(path, public)
    with _manager() as qm:
        queue = qm.create_queue(queue_path, label=label, transactional=transactional,
                                journal=journal, quota_kb=quota_kb,
                                receive_retry_count=_retry_limit(receive_retry_count))
        props = queue.properties
    data = dataclasses.asdict(props)
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
    with open_directory() as directory:
        found = directory.locate(label=label, type_id=type_id, queue_manager=queue_manager,
                                 **restrictions)
    rows = [{"path_name": q.path_name, "format_name": q.format_name, "label": q.label,
             "queue_manager": q.queue_manager, "transactional": q.transactional,
             "type_id": str(q.type_id) if q.type_id else None} for q in found]

    def render(data: list[dict]) -> Table | str:
        if not data:
            return "no public queue matches"
        table = Table(title="public queues")
        for column in ("path_name", "format_name", "label"):
            table.add_column(column)
        for row in data:
            table.add_row(row["path_name"], row["format_name"], row["label"])
        return table
    emit(rows, as_json, render)


@app.command("list")
def list_queues(as_json: bool = JsonOption) -> None:
    """List this queue manager's queues."""
    with _manager() as qm:
        queues = [dataclasses.asdict(p) for p in qm.list_queues()]

    def render(rows: list[dict]) -> Table:
        table = Table(title="queues")
        for column in ("path_name", "label", "transactional", "journal", "quota_kb"):
            table.add_column(column)
        for row in rows:
            table.add_row(*(str(row[c]) for c in ("path_name", "label", "transactional",
                                                 "journal", "quota_kb")))
        return table
    emit(queues, as_json, render)


@app.command()
def show(queue: str = QueueArg, as_json: bool = JsonOption) -> None:
    """Show a queue's properties and message count."""
    with _manager() as qm:
        q = qm.open_queue(queue)
        data = {**dataclasses.asdict(q.properties), "messages": q.count(),
                "malformed_receipts": q.malformed_receipts()}
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
    changes = {name: value for name, value in (
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
    with _manager() as qm:
        props = qm.set_properties(queue, **changes)
    emit(dataclasses.asdict(props), as_json, lambda d: key_value_table("queue updated", d))


@app.command()
def purge(queue: str = QueueArg, as_json: bool = JsonOption) -> None:
    """Remove every message now in the queue."""
    with _manager() as qm:
        removed = qm.open_queue(queue).purge()
    emit({"purged": removed}, as_json, lambda d: f"purged {d['purged']} message(s)")


@app.command()
def delete(queue: str = QueueArg, as_json: bool = JsonOption) -> None:
    """Delete a queue, its journal and its messages."""
    with _manager() as qm:
        qm.delete_queue(queue)
    emit({"deleted": queue}, as_json, lambda d: f"deleted {d['deleted']}")


def send(queue: str = QueueArg,
         body: str = bytes_option(..., "--body", "-b",
                                  help="Message body: the argument's bytes as given (UTF-8 text "
                                       "from a UTF-8 shell, or any bytes)."),
         label: str = text_option("", help="Message label."),
         priority: int = typer.Option(3, min=0, max=7, help="Priority 0-7."),
         as_json: bool = JsonOption) -> None:
    r"""Send one message. Example: kmq send '.\private$\orders' --body 'hello' --priority 5"""
    with _manager() as qm:
        # A body is bytes in MSMQ: bytes_option hands over the command line's own bytes, so
        # `--body $'\xff\xfe'` sends those two bytes (UTF-8 text stays UTF-8); body.encode()
        # was a UnicodeEncodeError traceback there. The label is text: text_option refuses
        # undecodable bytes in it. Reasons in facade.cli._options.
        sent = qm.open_queue(queue).send(Message(body=body, label=label,
                                                 priority=priority), wait=True)
    emit({"id": str(sent.id), "queue": queue}, as_json, lambda d: f"sent {d['id']}")


def _message_dict(m: Message) -> dict:
    return {"id": str(m.id), "label": m.label, "priority": m.priority,
            "class": m.message_class.name, "lookup_id": m.lookup_id,
            "correlation_id": str(m.correlation_id) if m.correlation_id else None,
            "sent_time": m.sent_time, "arrived_time": m.arrived_time,
            "body": m.body.decode("utf-8", "replace")}


TimeoutOption = seconds_option(5.0, "--timeout", help="Seconds to wait for a message")


def _first_message(queue: str, timeout: float, as_json: bool, remove: bool) -> None:
    with _manager() as qm:
        handle = qm.open_queue(queue)
        message = handle.receive(timeout=timeout) if remove else handle.peek(timeout=timeout)
    title = "message received" if remove else "message peeked"
    emit(_message_dict(message), as_json, lambda d: key_value_table(title, d))


def receive(queue: str = QueueArg, timeout: float = TimeoutOption, as_json: bool = JsonOption) -> None:
    """Remove and print the first message (highest priority, then oldest)."""
    _first_message(queue, timeout, as_json, remove=True)


def peek(queue: str = QueueArg, timeout: float = TimeoutOption, as_json: bool = JsonOption) -> None:
    """Print the first message without removing it."""
    _first_message(queue, timeout, as_json, remove=False)
