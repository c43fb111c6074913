"""The ``kmq`` admin command line (typer; rich for tables, imported when a command prints).

Exit codes: 0 success; 1 the operation failed (one error line and a hint on stderr);
2 usage error (unknown command or option, bad argument).
"""

from __future__ import annotations

import typer

from facade.cli import (
    acl,
    alias,
    bench,
    cert,
    demo,
    dev,
    directory,
    dl,
    dlq,
    doctor,
    journal,
    qm,
    queue,
)
from facade.cli._coercion import defer_value_adapters

defer_value_adapters()
__all__ = ["app", "main"]

app = typer.Typer(
    name="kmq",
    help="kmq: MSMQ semantics on Kafka. Exit codes: 0 ok, 1 operation failed, 2 usage error.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    # click's plain help and usage-error text, not typer's rich panels: rendering help through
    # typer.rich_utils imports rich.markdown and markdown_it (about 0.05 s of every `--help`).
    # Sub-apps inherit the root's mode. Plain help also shows no type for flags (--json).
    rich_markup_mode=None,
)
app.add_typer(dev.app, name="dev")
app.add_typer(queue.app, name="queue")
app.add_typer(qm.app, name="qm")
app.add_typer(dlq.app, name="dlq")
app.add_typer(journal.app, name="journal")
app.add_typer(directory.app, name="directory")
app.add_typer(alias.app, name="alias")
app.add_typer(dl.app, name="dl")
app.add_typer(cert.app, name="cert")
app.add_typer(acl.app, name="acl")
app.command("send")(queue.send)
app.command("receive")(queue.receive)
app.command("peek")(queue.peek)
app.command("bench")(bench.bench)
app.command("demo")(demo.demo)
app.command("doctor")(doctor.doctor)


def _librdkafka_logging() -> None:
    """``KMQ_LIBRDKAFKA_LOG=DEBUG`` (or INFO, WARNING, ERROR) prints librdkafka's own log lines
    at that level and above on stderr; unset, they are not shown (see facade.kafka.librdkafka)."""
    import os

    level = os.environ.get("KMQ_LIBRDKAFKA_LOG", "").strip().upper()
    if not level:
        return
    import logging

    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise SystemExit(f"error: KMQ_LIBRDKAFKA_LOG={level!r}; give DEBUG, INFO, WARNING, "
                         "ERROR or CRITICAL, or unset it")
    logger = logging.getLogger("kmq.librdkafka")
    logger.setLevel(level)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("librdkafka %(levelname)s %(message)s"))
    logger.addHandler(handler)


def main() -> None:
    """Console-script entry point."""
    _librdkafka_logging()
    app()
