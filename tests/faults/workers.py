"""Sender and receiver processes for the fault suite, and the test-side observers.

Run as ``python -m tests.faults.workers ROLE JSON`` (ROLE ``sender`` or ``receiver``); each
process opens its own queue manager, prints ``ready <id>`` once it can work, and appends what it
does to its own history file (see :mod:`tests.faults.history`). The test process kills them,
restarts brokers under them, and finally reads the queues, the dead-letter queue, the admin
queue and the receipts log to build the verdict.

Message bodies are the history keys (``<sender>:<seq>``), so a dead-letter copy, which keeps the
body, names the send it came from.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.faults.history import ACKNOWLEDGED, AT_MOST_ONCE, FAILED, REFUSED, History, Recorder

REPO = Path(__file__).resolve().parents[2]


# -- worker processes ---------------------------------------------------------------------------


def _open(args: dict[str, Any]) -> Any:
    from facade.config import KmqConfig
    from facade.manager import QueueManager

    return QueueManager.open(KmqConfig.load(bootstrap_servers=args["bootstrap"],
                                            queue_manager=args["qm"]))


def run_sender(args: dict[str, Any]) -> None:
    """Send ``count`` messages (or until ``stop_file`` exists) to ``queue``, one at a time."""
    from facade.errors import DirectoryUnavailable, MessageQueueError
    from facade.model.message import Acknowledgment, Delivery, JournalLevel, Message

    qm = _open(args)
    queue = qm.open_queue(args["queue"])
    recorder = Recorder(Path(args["history"]), args["actor"])
    delivery = Delivery[args.get("delivery", "RECOVERABLE")]
    wait = bool(args.get("wait", False))
    label = args.get("label", args["queue"])
    extra: dict[str, Any] = {}
    if args.get("ttrq") is not None:
        extra["time_to_reach_queue"] = float(args["ttrq"])
    if args.get("deadletter", True):
        extra["journal"] = JournalLevel.DEADLETTER
    if args.get("admin_queue"):
        extra["admin_queue"] = args["admin_queue"]
        extra["acknowledge"] = Acknowledgment.NACK_REACH_QUEUE
    promised = ACKNOWLEDGED if (delivery is Delivery.RECOVERABLE or wait) else AT_MOST_ONCE
    print("ready", args["actor"], flush=True)
    stop = Path(args["stop_file"]) if args.get("stop_file") else None
    count = args.get("count")
    interval = float(args.get("interval", 0.0))
    seq = 0
    batch = int(args.get("batch", 1))
    if batch > 1:  # send_many of ``batch`` messages at a time
        _send_batches(queue, recorder, args, label, delivery, wait, extra, promised, batch, stop)
        qm.close()
        recorder.close()
        return
    while (count is None or seq < count) and not (stop and stop.exists()):
        key = f"{args['actor']}:{seq}"
        fields = dict(seq=seq, delivery=delivery.name.lower(), ordered=args.get("ordered", True))
        recorder.attempt(key, label, **fields)
        try:
            sent = queue.send(Message(body=key.encode(), delivery=delivery, **extra), wait=wait,
                              timeout=float(args.get("wait_timeout", 30)))
            recorder.sent(key, label, outcome=promised, message_id=str(sent.id), **fields)
        except DirectoryUnavailable as exc:
            recorder.sent(key, label, outcome=REFUSED, **fields)
            recorder.event("note", error=str(exc)[:300], error_class=type(exc).__name__)
        except MessageQueueError as exc:
            recorder.sent(key, label, outcome=FAILED, **fields)
            recorder.event("note", error=str(exc)[:300], error_class=type(exc).__name__)
        seq += 1
        if interval:
            time.sleep(interval)
    recorder.event("note", done=seq)
    qm.close()
    recorder.close()


def _send_batches(queue: Any, recorder: Recorder, args: dict[str, Any], label: str,
                  delivery: Any, wait: bool, extra: dict[str, Any], promised: str, batch: int,
                  stop: Path | None) -> None:
    """The sender loop with ``send_many``: every key of a batch is *attempted* before the call
    and *acknowledged* (or failed) when it returns."""
    from facade.errors import DirectoryUnavailable, MessageQueueError
    from facade.model.message import Message

    count = args.get("count")
    seq = 0
    while (count is None or seq < count) and not (stop and stop.exists()):
        keys = [(f"{args['actor']}:{n}", n) for n in range(seq, seq + batch)]
        common = dict(delivery=delivery.name.lower(), ordered=args.get("ordered", True))
        for key, n in keys:
            recorder.attempt(key, label, seq=n, **common)
        try:
            sent = queue.send_many([Message(body=key.encode(), delivery=delivery, **extra)
                                    for key, _ in keys], wait=wait,
                                   timeout=float(args.get("wait_timeout", 30)))
            for (key, n), message in zip(keys, sent):
                recorder.sent(key, label, outcome=promised, message_id=str(message.id), seq=n,
                              **common)
        except (DirectoryUnavailable, MessageQueueError) as exc:
            outcome = REFUSED if isinstance(exc, DirectoryUnavailable) else FAILED
            for key, n in keys:
                recorder.sent(key, label, outcome=outcome, seq=n, **common)
            recorder.event("note", error=str(exc)[:300], error_class=type(exc).__name__)
        seq += batch
    recorder.event("note", done=seq)


def run_receiver(args: dict[str, Any]) -> None:
    """Receive from ``queue`` until ``idle`` seconds pass without a message, or ``stop_file``."""
    from facade.errors import ReceiveTimeout, TransientQueueError

    qm = _open(args)
    queue = qm.open_queue(args["queue"])
    if queue.arbitration == "share":
        claimant = f"share-{os.getpid()}"  # a share queue has no receipts to name it
    else:
        claimant = queue._opened.open_view().claimant  # the id its receipts carry
    recorder = Recorder(Path(args["history"]), claimant)
    label = args.get("label", args["queue"])
    recorder.event("start", claimant=claimant, pid=os.getpid())
    print("ready", claimant, flush=True)
    stop = Path(args["stop_file"]) if args.get("stop_file") else None
    idle = float(args.get("idle", 3.0))
    last = time.monotonic()
    while not (stop and stop.exists()) and time.monotonic() - last < idle:
        try:
            message = queue.receive(timeout=0.2)
        except ReceiveTimeout:
            continue
        except TransientQueueError:
            time.sleep(0.2)
            continue
        last = time.monotonic()
        sent = message.sent_time.timestamp() if message.sent_time else None
        recorder.received(message.body.decode(), label, message_id=str(message.id),
                          receiver=claimant, sent=sent)
    qm.close()
    recorder.close()


def run_lock_holder(args: dict[str, Any]) -> None:
    """Take one message with a peek-lock (``receive(lock=True, lease=...)``), print
    ``got <body> <abort count>``, then wait to be killed: a receiver that crashes while it
    holds a lock, neither completing nor abandoning it."""
    qm = _open(args)
    queue = qm.open_queue(args["queue"])
    print("ready", queue._opened.open_view().claimant, flush=True)
    message = queue.receive(timeout=float(args.get("timeout", 60)), lock=True,
                            lease=float(args["lease"]))
    print("got", message.body.decode(), message.abort_count, flush=True)
    while True:
        time.sleep(1)


# -- the test side ------------------------------------------------------------------------------


@dataclass
class Worker:
    """A worker process; ``ident`` is known once :meth:`ready` returned."""

    process: subprocess.Popen
    role: str
    log: Path
    ident: str = ""

    def stderr(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def ready(self, timeout: float = 60.0) -> Worker:
        """Wait for its ``ready <id>`` line.

        Raises:
            RuntimeError: it exited first (its stderr is in the message).
        """
        if self.ident:
            return self
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if not line or line[0] != "ready":
            self.process.kill()
            self.process.wait(timeout=timeout)
            raise RuntimeError(f"{self.role} did not start: {self.stderr()}")
        self.ident = line[1]
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed or closed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait(self, timeout: float) -> int:
        """Wait for a normal exit; raises with its stderr if it failed."""
        code = self.process.wait(timeout=timeout)
        if code != 0:
            raise RuntimeError(f"{self.role} {self.ident} exited with {code}: {self.stderr()}")
        return code


def start(role: str, home: Path, **args: Any) -> Worker:
    """Start a worker without waiting for it (call :meth:`Worker.ready`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KMQ_")}
    env.update(KMQ_HOME=str(home), PYTHONPATH=str(REPO))
    # stderr to a file: librdkafka logs every reconnect while a broker is down, and a full
    # pipe would block the worker.
    log = Path(home) / "worker-logs" / f"{role}-{time.monotonic_ns()}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as err:
        process = subprocess.Popen([sys.executable, "-m", "tests.faults.workers", role,
                                    json.dumps(args)], cwd=REPO, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=err)
    STARTED.append(process)
    return Worker(process, role, log)


#: Every worker process started in this test process; a test that fails before it stops its
#: workers must not leave them sending for the rest of the session (tests/faults/conftest.py
#: kills what is left after each test).
STARTED: list[subprocess.Popen] = []


def kill_leftovers() -> int:
    """SIGKILL the workers still running; returns how many there were."""
    left = [process for process in STARTED if process.poll() is None]
    for process in left:
        process.kill()
        process.wait(timeout=10)
    STARTED.clear()
    return len(left)


def spawn(role: str, home: Path, **args: Any) -> Worker:
    """Start a worker and wait until it is ready."""
    return start(role, home, **args).ready()


def drain(queue: Any, label: str, history: History, receiver: str = "drain",
          idle: float = 1.0) -> int:
    """Receive everything left in ``queue`` into ``history``."""
    from facade.errors import ReceiveTimeout

    got = 0
    while True:
        try:
            message = queue.receive(timeout=idle)
        except ReceiveTimeout:
            return got
        history.receive(message.body.decode(), label, receiver=receiver,
                        message_id=str(message.id))
        got += 1


def observe_dead_letters(qm: Any, history: History, labels: dict[str, str],
                         idle: float = 0.5) -> int:
    """Record every copy in the dead-letter queue whose original queue is in ``labels``
    (format name -> history label), with its class. Peeks with a cursor: nothing removed."""
    from facade.errors import ReceiveTimeout

    dlq = qm.open_queue(f"MACHINE={qm.guid};DEADLETTER")
    seen = 0
    with dlq.cursor() as cursor:
        try:
            message = cursor.peek_current(timeout=idle)
        except ReceiveTimeout:
            return 0
        while True:
            label = labels.get(message.destination_queue or "")
            if label is not None:
                history.dead_letter(message.body.decode(errors="replace"), label,
                                    message.message_class.name)
                seen += 1
            try:
                message = cursor.peek_next(timeout=idle)
            except ReceiveTimeout:
                return seen


def observe_nacks(admin: Any, history: History, idle: float = 0.5) -> int:
    """Record every NACK in ``admin``, mapped back to its send through the message id."""
    from facade.errors import ReceiveTimeout

    by_id = {s.message_id: s for s in history.sends.values() if s.message_id}
    seen = 0
    while True:
        try:
            ack = admin.receive(timeout=idle)
        except ReceiveTimeout:
            return seen
        send = by_id.get(str(ack.correlation_id))
        if send is not None and ack.message_class.name.startswith("NACK"):
            history.nack(send.key, send.queue, ack.message_class.name)
            seen += 1


def read_claims(session: Any, topics: Any, label: str) -> dict[tuple[str, str], str]:
    """Who removed each message of a queue, per its receipts log: ``(key, label) -> claimant``.

    Applies the rule every view applies (the first receipt naming an offset wins, a
    RECEIVE_FIRST only the first it names that no earlier receipt took; a purge removes every
    offset below ``purge_below``), over the whole log read to its end.
    """
    from facade.model.envelope import decode_message
    from facade.errors import EnvelopeError
    from facade.model.receipts import ReceiptAction, decode_receipt

    keys: dict[int, str] = {}
    receipts = []
    reader = session.reader()
    try:
        reader.assign({topics.data: 0, topics.receipts: 0})
        for batch in reader.read_to_end((topics.data, topics.receipts), 30.0):
            for record in batch:
                if record.topic == topics.data:
                    try:
                        keys[record.offset] = decode_message(record.value).body.decode()
                    except (EnvelopeError, UnicodeDecodeError):
                        continue
                else:
                    receipts.append((record.offset, decode_receipt(record.value)))
    finally:
        reader.close()
    winner: dict[int, str] = {}
    for _, receipt in sorted(receipts, key=lambda r: r[0]):
        if receipt.action is ReceiptAction.PURGE and receipt.purge_below is not None:
            for offset in keys:
                if offset < receipt.purge_below:
                    winner.setdefault(offset, f"purge:{receipt.claimant}")
        if receipt.action is ReceiptAction.RECEIVE_FIRST:  # only the first still pending
            first = next((o for o in receipt.offsets if o not in winner), None)
            if first is not None:
                winner[first] = receipt.claimant
            continue
        for offset in receipt.offsets:
            winner.setdefault(offset, receipt.claimant)
    return {(keys[o], label): who for o, who in winner.items() if o in keys}


@contextmanager
def stopping(stop_file: Path) -> Iterator[Path]:
    """Yield a stop-file path that workers poll; it is created when the block ends."""
    try:
        yield stop_file
    finally:
        stop_file.touch()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


if __name__ == "__main__":
    role, raw = sys.argv[1], json.loads(sys.argv[2])
    {"sender": run_sender, "receiver": run_receiver, "lock_holder": run_lock_holder}[role](raw)
