"""The demo's accounting: every copy sent, every outcome observed, and the verdict.

A send to a distribution list or a multiple-element name produces several copies with **one**
message id, so the unit of account is the copy: (message id, destination queue format name).
Each copy must end in one of three ways:

* **received**: a receiver got it (its id and ``destination_queue`` were seen);
* **dead-lettered**: it is in the dead-letter queue, with its class as the reason;
* **NACKed**: the admin queue holds a negative acknowledgment for it (correlation id = its id).

The raw poison record has no message id; it is accounted by where it was written
(``topic@partition:offset``, which the dead-letter copy carries in ``kmq.source``).

Beyond that, the ledger checks what MSMQ promises around those outcomes: no copy is received
twice, every acknowledgment that was asked for is in the admin queue, every request that named a
response queue got a response, every signed copy was verified on receipt
(``Message.authenticated``), the copies sent in transactions were received in send order (MSMQ's
exactly-once, in-order promise for transactional queues), and nothing turns up that was never
sent. All of it is thread-safe: receiver threads report while the sender records.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from facade.model.envelope import decode_acknowledgment
from facade.errors import EnvelopeError
from facade.model.message import Acknowledgment, Message, MessageClass
from facade.queues.systemoutputs import acknowledgment_requested

__all__ = [
    "CopyKey",
    "Ledger",
    "ReceivedRecord",
    "SentMessage",
    "Verdict",
]

#: Problems listed per kind in the verdict (the counts are always complete).
SAMPLE_SIZE = 10


@dataclass(frozen=True)
class CopyKey:
    """One copy of one message: its id and the queue it was sent to (PROPID_M_DEST_QUEUE)."""

    message_id: str
    queue: str

    def __str__(self) -> str:
        return f"{self.message_id} -> {self.queue}"


@dataclass(frozen=True)
class SentMessage:
    """One send as the demo made it.

    Attributes:
        message_id (str): PROPID_M_MSGID text.
        kind (str): ``entry`` (a changelog entry) or ``response`` (from the responder).
        route (str): how it was addressed (``direct``, ``multiple-element``,
            ``distribution-list``, ``security``, ``held``, ``response``).
        label (str): the message label.
        format_name (str): the format name the sender used (PROPID_M_DEST_FORMAT_NAME).
        queues (tuple[str, ...]): the queues it resolved to: one copy each.
        expect (str): ``receive`` (a receiver should get every copy) or ``expire`` (nobody
            receives it in time: TTBR expiry into the dead-letter queue).
        acknowledge (int): the PROPID_M_ACKNOWLEDGE flags it was sent with.
        sender (str): the changelog maintainer (``debian.maintainer``) or the responder.
        correlation_id (str | None): a response's request id.
        wants_response (bool): it named a response queue.
        signed (bool): sent with an auth level (PROPID_M_AUTH_LEVEL): every received copy must
            be ``authenticated``.
        transaction (str | None): PROPID_M_XACTID of the transaction it was sent in; such
            copies must be received in the order they were recorded (record them in commit
            order, each transaction's messages in send order).
    """

    message_id: str
    kind: str
    route: str
    label: str
    format_name: str
    queues: tuple[str, ...]
    expect: str
    acknowledge: int
    sender: str
    correlation_id: str | None = None
    wants_response: bool = False
    signed: bool = False
    transaction: str | None = None


@dataclass(frozen=True)
class ReceivedRecord:
    """What a receiver saw of one copy (kept for the report; no body).

    Attributes:
        queue (str): the queue it was received from.
        message_id (str): its id.
        kind (str): ``entry`` or ``response`` (from the sent record; ``unknown`` if never sent).
        message_class (str): MessageClass name.
        priority (int): PROPID_M_PRIORITY.
        sender (str): ``debian.maintainer`` (or the responder's name for responses).
        sent_time (datetime | None): PROPID_M_SENTTIME.
        arrived_time (datetime | None): PROPID_M_ARRIVEDTIME (the broker's record time).
        received_time (datetime): when the receiver got it.
    """

    queue: str
    message_id: str
    kind: str
    message_class: str
    priority: int
    sender: str
    sent_time: dt.datetime | None
    arrived_time: dt.datetime | None
    received_time: dt.datetime


@dataclass
class _Observed:
    """What was observed of one copy (observations may arrive before the send is recorded:
    a receiver can get a copy before the sending thread has written its ledger line)."""

    received: int = 0
    unverified: int = 0
    dead_letter_classes: list[str] = field(default_factory=list)
    nack_classes: list[str] = field(default_factory=list)
    ack_classes: list[str] = field(default_factory=list)


@dataclass
class _Poison:
    where: str
    queue: str
    dead_letter_class: str | None = None


@dataclass
class Verdict:
    """The accounting result.

    Attributes:
        copies (int): copies sent (plus poison records).
        outcomes (Counter[str]): ``received``, ``dead-lettered:<class>``, ``nacked:<class>``,
            ``unaccounted`` per copy.
        unaccounted (list[str]): a sample of copies with no outcome.
        unaccounted_count (int): how many.
        problems (dict[str, list[str]]): other broken promises by kind (``received twice``,
            ``acknowledgment missing``, ``response missing``, ``signed but not verified``,
            ``transactional out of order``, ``never sent``, ``poison not dead-lettered``,
            ``bad acknowledgment``), each a sample of up to SAMPLE_SIZE.
        problem_counts (Counter[str]): complete counts of those problems.
        unexpected (Counter[str]): accounted copies whose outcome was not the planned one
            (e.g. a copy planned for receipt that expired); informational.
    """

    copies: int
    outcomes: Counter
    unaccounted: list[str]
    unaccounted_count: int
    problems: dict[str, list[str]]
    problem_counts: Counter
    unexpected: Counter

    @property
    def ok(self) -> bool:
        """True when every copy is accounted for and no promise was broken."""
        return self.unaccounted_count == 0 and not self.problem_counts

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"ok": self.ok, "copies": self.copies, "outcomes": dict(self.outcomes),
                "unaccounted": self.unaccounted_count, "unaccounted_sample": self.unaccounted,
                "problems": dict(self.problem_counts), "problem_samples": self.problems,
                "unexpected_outcomes": dict(self.unexpected)}


class Ledger:
    """Records sends and observed outcomes; :meth:`verdict` checks them against each other.

    Observations are matched to sends only in :meth:`verdict`, so a copy received before the
    sender recorded it is not mistaken for a stranger.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: dict[str, SentMessage] = {}
        self._copies: dict[CopyKey, SentMessage] = {}
        self._observed: dict[CopyKey, _Observed] = {}
        self._poison: dict[str, _Poison] = {}
        self._expected: Counter = Counter()
        self._received: Counter = Counter()
        self._responses: dict[str, list[str]] = {}
        self._in_order: dict[str, list[str]] = {}  # queue -> ids sent in transactions, in order
        self._bad_acks: list[str] = []
        self.received_records: list[ReceivedRecord] = []
        self.dead_letters: list[Message] = []
        self.admin_messages: list[Message] = []

    # -- sends ---------------------------------------------------------------------------------

    def record_send(self, sent: SentMessage) -> None:
        """Record a send and one expected copy per queue it resolved to."""
        with self._lock:
            self._sent[sent.message_id] = sent
            for queue in sent.queues:
                self._copies[CopyKey(sent.message_id, queue)] = sent
                if sent.expect == "receive":
                    self._expected[queue] += 1
                if sent.transaction is not None:
                    self._in_order.setdefault(queue, []).append(sent.message_id)
            if sent.correlation_id is not None:
                self._responses.setdefault(sent.correlation_id, []).append(sent.message_id)

    def record_poison(self, topic: str, partition: int, offset: int, queue: str) -> str:
        """Record a raw record written into ``queue``'s topic; it must reach the DLQ.

        Returns:
            str: its place, ``topic@partition:offset`` (what ``kmq.source`` will say).
        """
        where = f"{topic}@{partition}:{offset}"
        with self._lock:
            self._poison[where] = _Poison(where, queue)
        return where

    # -- observations --------------------------------------------------------------------------

    def observe_received(self, message: Message, queue: str,
                         received_time: dt.datetime | None = None) -> None:
        """A receiver got ``message`` from ``queue`` (the queue's canonical format name)."""
        key = CopyKey(str(message.id), message.destination_queue or queue)
        record = ReceivedRecord(
            queue=key.queue, message_id=key.message_id,
            kind="response" if message.correlation_id is not None else "entry",
            message_class=message.message_class.name, priority=message.priority,
            sender=message.properties.get("debian.maintainer", ""),
            sent_time=message.sent_time, arrived_time=message.arrived_time,
            received_time=received_time or dt.datetime.now(dt.UTC))
        with self._lock:
            observed = self._observed.setdefault(key, _Observed())
            observed.received += 1
            if not message.authenticated:
                observed.unverified += 1
            if observed.received == 1:
                self._received[key.queue] += 1
            self.received_records.append(record)

    def observe_dead_letter(self, message: Message) -> None:
        """A message found in the dead-letter queue: a dead-lettered copy or the poison record."""
        with self._lock:
            self.dead_letters.append(message)
            source = message.properties.get("kmq.source")
            if source in self._poison:
                self._poison[source].dead_letter_class = message.message_class.name
                return
            key = CopyKey(str(message.id), message.destination_queue or "")
            self._observed.setdefault(key, _Observed()).dead_letter_classes.append(
                message.message_class.name)

    def observe_admin(self, message: Message) -> None:
        """A message found in the admin queue: an ACK or NACK about one copy (its body names
        the original id and the queue)."""
        with self._lock:
            self.admin_messages.append(message)
            try:
                info = decode_acknowledgment(message.body)
            except EnvelopeError as exc:
                if len(self._bad_acks) < SAMPLE_SIZE:
                    self._bad_acks.append(f"{message.id}: {exc}")
                return
            for queue in info.queues:
                observed = self._observed.setdefault(
                    CopyKey(str(info.original_id), queue.format_name or ""), _Observed())
                classes = observed.nack_classes if info.message_class.is_nack else observed.ack_classes
                classes.append(info.message_class.name)

    # -- progress ------------------------------------------------------------------------------

    def expected(self, queue: str | None = None) -> int:
        """Copies planned for receipt (in ``queue``, or in all queues)."""
        with self._lock:
            return self._expected[queue] if queue else sum(self._expected.values())

    def received(self, queue: str | None = None) -> int:
        """Distinct copies received (from ``queue``, or from all queues)."""
        with self._lock:
            return self._received[queue] if queue else sum(self._received.values())

    def outstanding(self, queue: str) -> int:
        """Copies planned for receipt in ``queue`` that no receiver has got yet."""
        with self._lock:
            return self._expected[queue] - self._received[queue]

    # -- verdict -------------------------------------------------------------------------------

    def verdict(self) -> Verdict:
        """Check every copy's outcome and the promises around it (see the module doc)."""
        with self._lock:
            return self._verdict()

    def _verdict(self) -> Verdict:
        outcomes: Counter = Counter()
        unexpected: Counter = Counter()
        unaccounted: list[str] = []
        problems: dict[str, list[str]] = {}
        counts: Counter = Counter()

        def problem(kind: str, what: str) -> None:
            counts[kind] += 1
            sample = problems.setdefault(kind, [])
            if len(sample) < SAMPLE_SIZE:
                sample.append(what)

        nothing = _Observed()
        for key, sent in self._copies.items():
            observed = self._observed.get(key, nothing)
            outcome = _outcome(observed)
            outcomes[outcome] += 1
            if outcome == "unaccounted":
                if len(unaccounted) < SAMPLE_SIZE:
                    unaccounted.append(f"{key} ({sent.label}, {sent.route})")
                continue
            if observed.received > 1:
                problem("received twice", str(key))
            if sent.signed and observed.unverified:
                problem("signed but not verified", f"{key} ({sent.label})")
            planned = "received" if sent.expect == "receive" else "dead-lettered"
            if not outcome.startswith(planned):
                unexpected[f"{sent.route}: {outcome}"] += 1
            for missing in _missing_acknowledgments(sent, observed, outcome):
                problem("acknowledgment missing", f"{missing} for {key}")
        for queue, sent_ids in self._in_order.items():
            for what in _order_problems(queue, sent_ids, self._received_ids(queue)):
                problem("transactional out of order", what)
        for key in self._observed.keys() - self._copies.keys():
            problem("never sent", str(key))
        for sent in self._sent.values():
            # Only a request that was received can have been answered.
            answered = sent.message_id in self._responses
            if sent.wants_response and not answered and any(
                    self._observed.get(CopyKey(sent.message_id, q), nothing).received
                    for q in sent.queues):
                problem("response missing", f"{sent.message_id} ({sent.label})")
        for poison in self._poison.values():
            if poison.dead_letter_class is None:
                outcomes["unaccounted"] += 1
                unaccounted.append(f"poison record {poison.where} in {poison.queue}")
            else:
                outcomes[f"poison dead-lettered:{poison.dead_letter_class}"] += 1
                if poison.dead_letter_class != MessageClass.NACK_RECEIVE_REJECTED.name:
                    problem("poison with wrong class", f"{poison.where}: {poison.dead_letter_class}")
        for what in self._bad_acks:
            problem("bad acknowledgment", what)
        return Verdict(copies=len(self._copies) + len(self._poison), outcomes=outcomes,
                       unaccounted=unaccounted[:SAMPLE_SIZE],
                       unaccounted_count=outcomes["unaccounted"], problems=problems,
                       problem_counts=counts, unexpected=unexpected)

    def _received_ids(self, queue: str) -> list[str]:
        """Ids received from ``queue``, in the order the receivers reported them."""
        return [r.message_id for r in self.received_records if r.queue == queue]

    # -- summaries -----------------------------------------------------------------------------

    def sends_by(self, attribute: str) -> Counter:
        """Sends counted by a SentMessage attribute (``kind``, ``route``...)."""
        with self._lock:
            return Counter(getattr(s, attribute) for s in self._sent.values())

    def copies_by_queue(self) -> Counter:
        """Copies sent per destination queue (without the poison records)."""
        with self._lock:
            return Counter(key.queue for key in self._copies)

    def copies_count(self) -> int:
        """Copies sent (without the poison records)."""
        with self._lock:
            return len(self._copies)

    def responses(self) -> dict[str, list[str]]:
        """Request id -> the ids of the responses sent for it."""
        with self._lock:
            return {k: list(v) for k, v in self._responses.items()}

    def received_once(self, route: str) -> tuple[int, int]:
        """Copies sent along ``route`` that were received exactly once, and all its copies."""
        with self._lock:
            keys = [key for key, sent in self._copies.items() if sent.route == route]
            once = sum(1 for key in keys
                       if key in self._observed and self._observed[key].received == 1)
            return once, len(keys)

    def transactions(self) -> tuple[int, int]:
        """Messages sent in transactions, and the transactions they were sent in."""
        with self._lock:
            ids = [s.transaction for s in self._sent.values() if s.transaction is not None]
            return len(ids), len(set(ids))

    def poison_places(self) -> list[str]:
        """Where the poison records were written."""
        with self._lock:
            return list(self._poison)


def _outcome(observed: _Observed) -> str:
    """``received``, ``dead-lettered:<class>``, ``nacked:<class>`` or ``unaccounted``."""
    if observed.received:
        return "received"
    if observed.dead_letter_classes:
        return f"dead-lettered:{observed.dead_letter_classes[0]}"
    if observed.nack_classes:
        return f"nacked:{observed.nack_classes[0]}"
    return "unaccounted"


def _order_problems(queue: str, sent_ids: list[str], received_ids: list[str]) -> list[str]:
    """Where ``queue``'s transactional copies were received out of send order: the first
    receive (of each id, among those sent in transactions) that is not the next one sent.
    Missing and repeated copies are the other checks' business."""
    planned = set(sent_ids)
    got = [i for i in dict.fromkeys(received_ids) if i in planned]
    received = set(got)
    expected = [i for i in sent_ids if i in received]
    for position, (want, came) in enumerate(zip(expected, got)):
        if want != came:
            return [f"{queue}: receive #{position + 1} was {came}, sent as #"
                    f"{sent_ids.index(came) + 1}; expected {want}"]
    return []


def _missing_acknowledgments(sent: SentMessage, observed: _Observed,
                             outcome: str) -> Iterable[str]:
    """The acknowledgment classes the sender asked for, for this outcome, that never came."""
    level = Acknowledgment(sent.acknowledge)
    expected = []
    if outcome == "received":
        expected += [MessageClass.ACK_REACH_QUEUE, MessageClass.ACK_RECEIVE]
    elif outcome.startswith("dead-lettered:"):
        cls = MessageClass[outcome.partition(":")[2]]
        expected.append(cls)
        if cls.is_receive_phase:  # it reached the queue before it expired there
            expected.append(MessageClass.ACK_REACH_QUEUE)
    seen = set(observed.ack_classes) | set(observed.nack_classes)
    return [c.name for c in expected if acknowledgment_requested(level, c) and c.name not in seen]
