"""The history checker of the fault-injection suite.

Every process of a fault test (senders, receivers, the test itself) appends what it did to a
:class:`History`: each send with its outcome, each receive, each dead-letter copy and NACK
observed, each receiver the test killed. :meth:`History.verdict` then proves, against what
``docs/design.md`` promises per mode:

* **Nothing lost.** Every send whose outcome is *acknowledged* (``send()`` returned for a
  RECOVERABLE message; ``send(wait=True)`` returned for an EXPRESS one) was received, or
  dead-lettered (its class recorded), or NACKed. Exceptions, each modelled explicitly:

  - *at-most-once receive*: a receiver killed with SIGKILL may lose the messages it had claimed
    but not yet recorded. Each killed receiver excuses at most ``in_flight`` messages (1 for a
    receiver taking one message at a time). When the receipts log says who claimed a message
    (:meth:`History.claimed`), only a message claimed by a killed receiver is excused.

  EXPRESS sends without ``wait`` promise at most once: they are never counted as lost.
* **No duplicates.** No message is received twice from one queue, by one receiver or by two
  (nontransactional receive: "never twice", in every delivery mode: views drop a resent copy).
* **Nothing invented.** Every received message was sent (or at least attempted by a sender that
  was killed before it could record the outcome), and a send *refused* before any copy was
  produced (e.g. ``DirectoryUnavailable`` at resolution) never arrives anywhere.
* **Order.** For each (sender, queue, priority), each receiver sees that sender's messages in
  the order they were sent, where the mode promises it (``ordered=True``: one sender sending one
  message after the other to one queue).

Histories are JSON-lines files, one per process, appended line by line (a process killed
mid-line leaves at most one unparsable last line, which :meth:`History.load` skips).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["History", "Recorder", "Verdict"]

#: Send outcomes.
ACKNOWLEDGED = "acknowledged"   # send() returned (RECOVERABLE) or send(wait=True) returned
AT_MOST_ONCE = "at-most-once"   # EXPRESS send without wait: may be lost, never duplicated
FAILED = "failed"               # send() raised after copies may have been produced
REFUSED = "refused"             # send() raised before any copy was produced: must never arrive
ATTEMPTED = "attempted"         # about to call send(); replaced by the outcome when recorded


class Recorder:
    """Appends events of one process to a JSON-lines file; thread-safe, flushed per line.

    Args:
        path (Path): the file (created; appended to).
        actor (str): this process's role and id, e.g. ``sender-1`` or ``receiver-3``.
    """

    def __init__(self, path: Path, actor: str):
        self.path = Path(path)
        self.actor = actor
        self._lock = threading.Lock()
        self._fh = self.path.open("a", buffering=1, encoding="utf-8")

    def event(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "actor": self.actor, "t": time.time(), **fields})
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def attempt(self, key: str, queue: str, *, seq: int, priority: int = 3,
                delivery: str = "express", ordered: bool = True) -> None:
        """Before ``send()``: the key may arrive even if the process dies before the outcome."""
        self.event("send", key=key, queue=queue, seq=seq, priority=priority, delivery=delivery,
                   outcome=ATTEMPTED, ordered=ordered)

    def sent(self, key: str, queue: str, *, seq: int, outcome: str, message_id: str | None = None,
             priority: int = 3, delivery: str = "express", ordered: bool = True) -> None:
        self.event("send", key=key, queue=queue, seq=seq, priority=priority, delivery=delivery,
                   outcome=outcome, message_id=message_id, ordered=ordered)

    def received(self, key: str, queue: str, message_id: str | None = None, **extra: Any) -> None:
        self.event("receive", key=key, queue=queue, message_id=message_id, **extra)

    def close(self) -> None:
        with self._lock:
            self._fh.close()


@dataclass
class Send:
    key: str
    queue: str
    sender: str
    seq: int
    priority: int
    delivery: str
    outcome: str
    message_id: str | None
    ordered: bool
    t: float


@dataclass
class Receive:
    key: str
    queue: str
    receiver: str
    t: float
    message_id: str | None = None
    #: Seconds from the message's sent time to this receive (same machine clock), if known.
    latency: float | None = None


@dataclass
class Verdict:
    """The checker's findings; ``ok`` when there are none.

    Attributes:
        lost (list[str]): acknowledged sends neither received, dead-lettered nor NACKed, and not
            excused by the at-most-once rule.
        duplicates (dict[str, int]): ``key@queue`` received more than once, with the count.
        phantoms (list[str]): received but never sent, or sent after a refusal.
        out_of_order (list[str]): per-receiver order violations.
        excused (dict[str, str]): lost messages that the model excuses, with the rule.
        counts (dict[str, int]): sends by outcome, receives, dead letters, NACKs.
    """

    lost: list[str] = field(default_factory=list)
    duplicates: dict[str, int] = field(default_factory=dict)
    phantoms: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    excused: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicates or self.phantoms or self.out_of_order)

    def summary(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.counts.items())]
        parts.append(f"excused={len(self.excused)}")
        if self.ok:
            return "OK: " + ", ".join(parts)
        problems = []
        if self.lost:
            problems.append(f"LOST {len(self.lost)}: {sorted(self.lost)[:10]}")
        if self.duplicates:
            problems.append(f"DUPLICATED {len(self.duplicates)}: "
                            f"{dict(sorted(self.duplicates.items())[:10])}")
        if self.phantoms:
            problems.append(f"PHANTOM {len(self.phantoms)}: {sorted(self.phantoms)[:10]}")
        if self.out_of_order:
            problems.append(f"OUT OF ORDER {len(self.out_of_order)}: {self.out_of_order[:5]}")
        return "FAILED: " + "; ".join(problems) + " (" + ", ".join(parts) + ")"


class History:
    """Everything recorded in one fault-test run, and the checker over it."""

    def __init__(self) -> None:
        self.sends: dict[tuple[str, str], Send] = {}
        self.receives: list[Receive] = []
        self.dead_letters: dict[tuple[str, str], str] = {}
        self.nacks: dict[tuple[str, str], str] = {}
        self.killed: dict[str, int] = {}
        self.claims: dict[tuple[str, str], str] | None = None

    # -- recording (in the test process) -------------------------------------------------------

    def send(self, key: str, queue: str, *, sender: str = "test", seq: int = 0, priority: int = 3,
             delivery: str = "express", outcome: str = ACKNOWLEDGED,
             message_id: str | None = None, ordered: bool = True, t: float | None = None) -> None:
        previous = self.sends.get((key, queue))
        if previous is not None and outcome == ATTEMPTED:
            return  # an outcome already recorded wins over the attempt
        self.sends[(key, queue)] = Send(key, queue, sender, seq, priority, delivery, outcome,
                                        message_id, ordered, time.time() if t is None else t)

    def receive(self, key: str, queue: str, *, receiver: str = "test",
                message_id: str | None = None, t: float | None = None,
                sent: float | None = None) -> None:
        t = time.time() if t is None else t
        self.receives.append(Receive(key, queue, receiver, t, message_id,
                                     None if sent is None else t - sent))

    def dead_letter(self, key: str, queue: str, message_class: str) -> None:
        """A dead-letter copy of ``key`` (sent to ``queue``) was observed, with its class."""
        self.dead_letters[(key, queue)] = message_class

    def nack(self, key: str, queue: str, message_class: str) -> None:
        """A NACK for ``key`` (sent to ``queue``) was observed in its admin queue."""
        self.nacks[(key, queue)] = message_class

    def receiver_killed(self, receiver: str, in_flight: int = 1) -> None:
        """``receiver`` was killed; it may have lost up to ``in_flight`` claimed messages."""
        self.killed[receiver] = self.killed.get(receiver, 0) + in_flight

    def claimed(self, claims: dict[tuple[str, str], str]) -> None:
        """Who won each ``(key, queue)`` per the receipts log (its receiver id)."""
        self.claims = dict(claims)

    def load(self, directory: Path) -> History:
        """Merge every ``*.jsonl`` file written by :class:`Recorder` under ``directory``."""
        for path in sorted(Path(directory).glob("*.jsonl")):
            lines = path.read_text("utf-8").splitlines()
            for number, line in enumerate(lines):
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    if number == len(lines) - 1:
                        continue  # a process killed mid-line
                    raise
                self._apply(event)
        return self

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.pop("kind")
        actor = event.pop("actor")
        if kind == "send":
            self.send(event["key"], event["queue"], sender=actor, seq=event["seq"],
                      priority=event["priority"], delivery=event["delivery"],
                      outcome=event["outcome"], message_id=event.get("message_id"),
                      ordered=event.get("ordered", True), t=event["t"])
        elif kind == "receive":
            self.receive(event["key"], event["queue"], receiver=event.get("receiver", actor),
                         message_id=event.get("message_id"), t=event["t"],
                         sent=event.get("sent"))
        elif kind == "dead_letter":
            self.dead_letter(event["key"], event["queue"], event["message_class"])
        elif kind == "nack":
            self.nack(event["key"], event["queue"], event["message_class"])
        # other kinds ("start", "note") are informative only

    # -- the checker ---------------------------------------------------------------------------

    def verdict(self) -> Verdict:
        v = Verdict()
        received = Counter((r.key, r.queue) for r in self.receives)
        v.duplicates = {f"{k}@{q}": n for (k, q), n in received.items() if n > 1}
        for key_queue in received:
            send = self.sends.get(key_queue)
            if send is None or send.outcome == REFUSED:
                v.phantoms.append("{}@{}".format(*key_queue))
        for key_queue in self.dead_letters:
            send = self.sends.get(key_queue)
            if send is not None and send.outcome == REFUSED:
                v.phantoms.append("{}@{} (dead-lettered)".format(*key_queue))
        accounted = set(received) | set(self.dead_letters) | set(self.nacks)
        missing = [s for kq, s in self.sends.items()
                   if s.outcome == ACKNOWLEDGED and kq not in accounted]
        allowance = dict(self.killed)
        pooled = sum(allowance.values())
        for send in sorted(missing, key=lambda s: s.t):
            key_queue = (send.key, send.queue)
            name = f"{send.key}@{send.queue}"
            if self.claims is not None:
                claimant = self.claims.get(key_queue)
                if claimant is not None and allowance.get(claimant, 0) > 0:
                    allowance[claimant] -= 1
                    v.excused[name] = f"at-most-once receive: claimed by {claimant}, killed"
                    continue
            elif pooled > 0:
                pooled -= 1
                v.excused[name] = "at-most-once receive: in flight in a killed receiver"
                continue
            v.lost.append(name)
        v.out_of_order = self._order_violations()
        outcomes = Counter(s.outcome for s in self.sends.values())
        v.counts = {**{f"sent_{k}": n for k, n in outcomes.items()},
                    "received": len(self.receives), "dead_lettered": len(self.dead_letters),
                    "nacked": len(self.nacks), "receivers_killed": len(self.killed)}
        return v

    def _order_violations(self) -> list[str]:
        violations = []
        last: dict[tuple[str, str, str, int], tuple[int, str]] = {}
        # Each receiver's receives are in the order it recorded them (one file per process).
        for r in self.receives:
            send = self.sends.get((r.key, r.queue))
            if send is None or not send.ordered:
                continue
            stream = (r.receiver, send.sender, r.queue, send.priority)
            previous = last.get(stream)
            if previous is not None and send.seq < previous[0]:
                violations.append(f"{r.receiver} got {r.key} (seq {send.seq}) after {previous[1]} "
                                  f"(seq {previous[0]}) from {send.sender} on {r.queue}")
            last[stream] = (send.seq, r.key)
        return violations


def history_dir(base: Path) -> Path:
    """A fresh directory for the JSON-lines files of one run."""
    path = Path(base) / f"history-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(parents=True)
    return path
