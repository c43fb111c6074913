"""What a send accepts, on every send path, on the in-memory Kafka (no broker):

* MSMQ's 4 MiB body limit (4,194,304 bytes): a body one byte larger is refused
  with InvalidParameter naming its size and the limit, before anything is stored, by ``send``,
  ``send_many``, transactional sends, multiple-element sends and ``kmq send`` (Spark's sink:
  tests/unit/test_sending.py), not only the Kafka record limit (4,456,448 bytes);
* ``kmq send --ttbr/--ttrq`` take the timer ranges the API takes
  (facade.model.timers): 0 and MSMQ's ULONG seconds up to INFINITE.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from facade import Delivery, InvalidParameter, JournalLevel, Message, QueueManager
from facade.cli import app
from facade.kafka.memorykafka import MemoryKafka, MemoryKafkaSession
from facade.model.message import MAX_BODY_BYTES
from facade.model.timers import TIME_TO_BE_RECEIVED, TIME_TO_REACH_QUEUE
from facade.model.topicsettings import MAX_RECORD_BYTES

TOO_LARGE = MAX_BODY_BYTES + 1
WAIT = 10.0


@pytest.fixture
def qm(memory_qm: QueueManager) -> QueueManager:
    return memory_qm


def _refused(send: Callable[[], object]) -> str:
    with pytest.raises(InvalidParameter) as info:
        send()
    text = str(info.value)
    assert f"{TOO_LARGE:,} bytes" in text and f"{MAX_BODY_BYTES:,} bytes" in text, text
    return text


def test_msmqs_4_mib_is_the_largest_body_on_every_send_path(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\big")
    other = qm.create_queue(r".\private$\big2")
    tq = qm.create_queue(r".\private$\tbig", transactional=True)
    big = Message(body=b"x" * TOO_LARGE, delivery=Delivery.RECOVERABLE)
    small = Message(body=b"small", delivery=Delivery.RECOVERABLE)
    _refused(lambda: q.send(big))
    _refused(lambda: q.send(big.body))  # a body alone, too
    _refused(lambda: q.send_many([small, big]))  # the batch is checked before anything goes
    both = qm.open_queue(rf"DIRECT=OS:{qm.name}\private$\big,DIRECT=OS:{qm.name}\private$\big2")
    _refused(lambda: both.send(big))
    _refused(lambda: tq.send(big, transaction="single"))
    with qm.begin_transaction() as tx:
        _refused(lambda: tq.send(big, transaction=tx))
        tq.send(small, transaction=tx)
    assert qm.transmitter.outgoing.count() == 0, "a refused copy was stored"
    assert (q.count(), other.count()) == (0, 0)
    assert tq.receive(timeout=WAIT).body == b"small"
    assert tq.count() == 0
    # The limit itself is a body MSMQ takes.
    largest = bytes(range(256)) * (MAX_BODY_BYTES // 256)
    sent = q.send(Message(body=largest, delivery=Delivery.RECOVERABLE), wait=True)
    got = q.receive(timeout=WAIT)
    assert got.id == sent.id and got.body == largest


def test_the_record_limit_still_holds_for_a_body_within_4_mib(qm: QueueManager) -> None:
    """A body of 4 MiB with more than 256 KiB of envelope (properties) is a Kafka record past
    4,456,448 bytes: still refused, naming the record's size and that limit."""
    q = qm.create_queue(r".\private$\wide")
    wide = Message(body=b"x" * MAX_BODY_BYTES, properties={"k": "v" * 300_000},
                   delivery=Delivery.RECOVERABLE)
    with pytest.raises(InvalidParameter, match=f"at most {MAX_RECORD_BYTES:,} bytes"):
        q.send(wide)
    assert qm.transmitter.outgoing.count() == 0 and q.count() == 0


# ---- kmq send ------------------------------------------------------------------------------


@pytest.fixture
def kmq(kmq_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """``kmq ARGS``, each command with its own queue manager on one in-memory cluster."""
    cluster = MemoryKafka()
    open_manager = QueueManager.open.__func__  # type: ignore[attr-defined]

    def open_in_memory(cls: type[QueueManager], config: Any = None,
                       **kwargs: Any) -> QueueManager:
        return open_manager(cls, config, **{**kwargs, "session": MemoryKafkaSession(cluster)})

    monkeypatch.setattr(QueueManager, "open", classmethod(open_in_memory))
    monkeypatch.setenv("KMQ_QUEUE_MANAGER", "cliqm")
    monkeypatch.delenv("KMQ_BOOTSTRAP_SERVERS", raising=False)

    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(app, [*args, "--json"])
        assert result.exit_code == code, result.output
        return json.loads(result.stdout)

    yield run


def test_kmq_send_refuses_a_body_over_4_mib_and_sends_nothing(kmq: Callable[..., Any],
                                                              tmp_path: Path) -> None:
    kmq("queue", "create", "big")
    body = tmp_path / "body.bin"
    body.write_bytes(b"x" * TOO_LARGE)
    error = kmq("send", "big", "--body-file", str(body), "--recoverable", code=1)["error"]
    assert error["code"] == "MQ_ERROR_INVALID_PARAMETER"
    assert f"{TOO_LARGE:,} bytes" in error["message"]
    assert f"{MAX_BODY_BYTES:,} bytes" in error["message"] and error["hint"]
    assert kmq("queue", "show", "big")["messages"] == 0
    body.write_bytes(b"x" * MAX_BODY_BYTES)
    kmq("send", "big", "--body-file", str(body))
    assert kmq("receive", "big", "--timeout", "5")["body_size"] == MAX_BODY_BYTES


def test_kmq_send_takes_the_timer_ranges_the_api_takes(kmq: Callable[..., Any]) -> None:
    """``--ttbr 0`` is taken, not refused by the message model after the option's check, and
    the option takes up to the API's limit, not 4294967.294 s (1,000 times less)."""
    kmq("queue", "create", "timers")
    kmq("send", "timers", "--body", "longest", "--ttbr", str(TIME_TO_BE_RECEIVED.maximum),
        "--ttrq", str(TIME_TO_REACH_QUEUE.maximum))
    got = kmq("receive", "timers", "--timeout", "5")
    assert got["time_to_be_received"] == TIME_TO_BE_RECEIVED.maximum
    assert got["time_to_reach_queue"] == TIME_TO_REACH_QUEUE.maximum
    # MSMQ's words: INFINITE (and LONG_LIVED for TTRQ) mean what leaving the option out means.
    kmq("send", "timers", "--body", "words", "--ttbr", "4294967295", "--ttrq", "4294967294")
    got = kmq("receive", "timers", "--timeout", "5")
    assert (got["time_to_be_received"], got["time_to_reach_queue"]) == (None, None)
    # A TTBR of 0 expires the message as it is sent: nothing a receiver can get.
    kmq("send", "timers", "--body", "at once", "--ttbr", "0", "--ttrq", "0",
        "--journal", JournalLevel.DEADLETTER.name)
    shown = kmq("queue", "show", "timers")
    assert (shown["messages"], shown["expired"]) == (0, 1)


@pytest.mark.parametrize(("option", "timer"), [("--ttbr", TIME_TO_BE_RECEIVED),
                                               ("--ttrq", TIME_TO_REACH_QUEUE)])
def test_kmq_send_help_and_usage_errors_show_the_models_range(kmq: Callable[..., Any],
                                                              option: str, timer: Any) -> None:
    described = timer.describe("no option")
    help_text = " ".join(CliRunner().invoke(app, ["send", "--help"]).output.split())
    assert described in help_text
    for value in ("-1", "nan", str(timer.maximum + 1.5)):
        result = CliRunner().invoke(app, ["send", "q", "--body", "x", option, value])
        assert result.exit_code == 2, result.output
        assert f"give {described}" in " ".join(result.output.split())
