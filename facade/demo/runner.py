"""``kmq demo`` end to end: parse, set up, send, receive, expire, collect, account, report.

Phases (each timed; the long ones show a progress bar on stderr):

1. **parse**: read the corpus (:mod:`facade.demo.corpus`).
2. **setup**: choose or start the brokers (:mod:`facade.demo.stack`), open the run's queue
   manager, create queues, alias and distribution list, and give the run's principal a
   signing identity and the queue manager its encryption key (:mod:`facade.demo.workload`).
3. **send + receive**: a few receiver threads start first; RECEIVERS_PER_QUEUE of them compete
   on one queue at a time, each with a prefetching handle (biggest queue first; the security
   desks verify and answer the signed, encrypted requests; one transactional receiver takes the
   transactional queue up to RECEIVE_TRANSACTION_SIZE messages per transaction; the replies come last); then every entry
   is sent along its route, with one raw poison record written half-way (the receiver of that
   queue moves it to the dead-letter queue and goes on). A queue is drained when every
   copy planned for it has come, or nothing came for a while: a lost copy must not hang the
   demo, the verdict reports it.
4. **paced**: the end-to-end latency run: competing receivers wait on ``latency-probe`` while
   PACED_MESSAGES messages are sent to it at PACED_RATE per second (below capacity), so the
   report can show what one message takes next to the throughput run's backlog.
5. **expire**: the held queue, which nobody receives from, is expired once its messages' TTBR
   has passed (``MessageQueue.expire_due``, what the ``kmq qm run`` service does for every
   queue): into the DLQ as NACK_RECEIVE_TIMEOUT, with NACKs to the admin queue.
6. **collect**: the dead-letter and admin queues are read with cursors (nothing removed).
7. **account**: the ledger's verdict (:mod:`facade.demo.ledger`).
8. **report**: :func:`facade.demo.report.build_report` (Spark job, or the Python fallback),
   with the run's parameters, totals and verdict.
9. **teardown**: delete the run's queues and directory objects (unless ``--keep``); stop a
   broker the demo started.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from facade.demo.corpus import DEFAULT_CORPUS, ChangelogEntry, CorpusStats, load_corpus
from facade.demo.ledger import Ledger, Verdict
from facade.demo.mapping import plan_layout
from facade.demo.report import (
    PACED_MESSAGES,
    PACED_RATE,
    Report,
    ReportSources,
    build_report,
    queue_label,
    write_report,
)
from facade.demo.stack import DemoEnvironment, demo_environment
from facade.demo.workload import (
    HELD_TTBR,
    PREFETCH,
    RECEIVERS_PER_QUEUE,
    ROUTE_HELD,
    ROUTE_LIST,
    ROUTE_MULTI,
    ROUTE_PACED,
    ROUTE_SECURITY,
    ROUTE_TRANSACTIONAL,
    EntrySender,
    QueueDrain,
    ReceiverPool,
    SecurityDesk,
    Topology,
    TransactionalDrain,
    create_topology,
    delete_directory_objects,
    delete_topology,
    enable_message_security,
    plan_route,
    read_all,
    send_paced,
    write_poison_record,
)
from facade.errors import InvalidParameter
from facade.manager import QueueManager

__all__ = ["DemoOptions", "DemoResult", "run_demo"]

#: Receiver threads by default: two queues at a time, RECEIVERS_PER_QUEUE on each.
DEFAULT_RECEIVERS = 2 * RECEIVERS_PER_QUEUE
#: Seconds to wait for the receiver threads when stopping: a receive ends within a claim's
#: timeout (30 s in facade.state.queueview), and handles must not be closed under a receive.
RECEIVER_JOIN_TIMEOUT = 35.0
#: Seconds to wait, after the last held send, for the held queue to be swept empty.
EXPIRY_GRACE = 60.0


@dataclass(frozen=True)
class DemoOptions:
    """What ``kmq demo`` was asked to do.

    Attributes:
        corpus (Path): directory with ``*/changelog.Debian.gz``, or one changelog file.
        limit (int | None): most entries to send; None for all.
        report_dir (Path): where the report's files go (created).
        keep (bool): leave the queues, directory objects and a started broker in place.
        idle_limit (float): seconds a receiver waits for a missing copy after the senders are
            done, before the copy is given up as lost.
        receivers (int): receiver threads; RECEIVERS_PER_QUEUE of them compete on a queue.
    """

    corpus: Path = DEFAULT_CORPUS
    limit: int | None = None
    report_dir: Path = Path("kmq-demo-report")
    keep: bool = False
    idle_limit: float = 10.0
    receivers: int = DEFAULT_RECEIVERS


@dataclass
class DemoResult:
    """What a run produced.

    Attributes:
        summary (dict): the JSON summary (``kmq demo --json``).
        verdict (Verdict): the accounting.
        report (Report): the report (Spark or fallback).
        exit_code (int): 0 when everything is accounted for, else 1.
    """

    summary: dict[str, Any]
    verdict: Verdict
    report: Report
    exit_code: int


@dataclass
class _Timer:
    """Wall-clock seconds per phase."""

    phases: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = round(self.phases.get(name, 0.0) + time.monotonic() - began, 3)

    def total(self) -> float:
        return round(time.monotonic() - self.started, 3)


def run_demo(options: DemoOptions, console: Console) -> DemoResult:
    """Run the demo (see the module doc).

    Args:
        options (DemoOptions): what to run.
        console (Console): where progress goes (stderr in the CLI).

    Returns:
        DemoResult: summary, verdict, report and exit code.

    Raises:
        InvalidParameter: the corpus has no entries.
        MessageQueueError: the brokers or directory failed (no broker, refused queue...).
        KeyboardInterrupt: Ctrl-C; what was started is stopped on the way out.
    """
    timer = _Timer()
    with timer.phase("parse"):
        entries, stats = _parse(options, console)
    if not entries:
        raise InvalidParameter(
            f"no Debian changelog entries found in {str(options.corpus)!r}",
            hint="point --corpus at a directory holding */changelog.Debian.gz or at one "
            "changelog file")
    with demo_environment(options.keep) as environment:
        try:
            result = _run(options, environment, entries, stats, timer, console)
        except BaseException:
            environment.failed = True
            raise
        environment.failed = result.exit_code != 0
    result.summary["timings_s"]["total"] = timer.total()
    return result


def _parse(options: DemoOptions, console: Console) -> tuple[list[ChangelogEntry], CorpusStats]:
    with _progress(console) as progress:
        task = progress.add_task("parse changelogs", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return load_corpus(options.corpus, options.limit, on_file=advance)


def _run(options: DemoOptions, environment: DemoEnvironment, entries: list[ChangelogEntry],
         stats: CorpusStats, timer: _Timer, console: Console) -> DemoResult:
    """Setup to report on the run's queue manager, then the teardown."""
    topology: Topology | None = None
    leftovers: list[str] = []
    try:
        with QueueManager.open(environment.config) as qm:
            with timer.phase("setup"):
                topology = create_topology(qm, plan_layout(entries), environment.run_id)
                enable_message_security(qm)
            ledger = Ledger()
            workload = _Workload(qm, topology, ledger, options, console, timer)
            receivers = workload.run(entries)
            with timer.phase("collect"):
                _collect(qm, topology, ledger)
            with timer.phase("account"):
                verdict = ledger.verdict()
            with timer.phase("report"):
                facts = _run_facts(options, environment, stats, entries, ledger, verdict,
                                   receivers, timer)
                report = _report(qm, environment, topology, ledger, options, facts)
    finally:
        if topology is not None and not options.keep:
            with timer.phase("teardown"):
                leftovers = _teardown(environment, topology)
    summary = _summary(options, environment, stats, entries, ledger, verdict, report,
                       receivers, timer)
    summary["teardown"] = {"kept": options.keep, "left_over": leftovers}
    if options.keep and environment.started:
        summary["teardown"]["broker_left_running"] = (
            f"KMQ_HOME={environment.config.home} kmq dev down  # stops it")
    return DemoResult(summary, verdict, report, 0 if verdict.ok else 1)


def _teardown(environment: DemoEnvironment, topology: Topology) -> list[str]:
    """Remove what the run created, after its queue manager is closed.

    A broker the demo started goes away with everything on it, and so does an embedded
    directory in its temporary home: nothing to delete then. Otherwise a fresh queue manager
    deletes the queues, alias and list, after the run's own Kafka clients are closed: a topic
    deleted under a client that still fetches it is a librdkafka crash risk (see
    ``facade.kafka.librdkafka.TopicReader``, "Resting").

    Returns:
        list[str]: what could not be deleted, with the reason.
    """
    config = environment.config
    if environment.started and config.directory.is_embedded and \
            config.embedded_directory_path.is_relative_to(config.home):
        return []
    if environment.started:
        return delete_directory_objects(config, topology)
    with QueueManager.open(config) as qm:
        return delete_topology(qm, topology)


class _Workload:
    """Phases 3 and 4: receivers, senders, expiry (see the module doc)."""

    def __init__(self, qm: Any, topology: Topology, ledger: Ledger, options: DemoOptions,
                 console: Console, timer: _Timer):
        self.qm = qm
        self.topology = topology
        self.ledger = ledger
        self.options = options
        self.console = console
        self.timer = timer
        self.abort = threading.Event()
        self.sending_done = threading.Event()

    def run(self, entries: list[ChangelogEntry]) -> dict[str, Any]:
        """Send every entry while receivers run; then expire the held ones.

        Returns:
            dict[str, Any]: ``workers`` (receiver threads), ``queues`` (queues drained),
            ``retried`` (receives retried after a transient broker error) and ``verified``
            (security requests whose signature the security desks verified).

        Raises:
            BaseException: a receiver's failure, or Ctrl-C.
        """
        drains = self._drains(self._planned_copies(entries))
        pool = ReceiverPool(drains, self.options.receivers, self.abort)
        pool.start()
        try:
            with self.timer.phase("send + receive"):
                last_held = self._send_all(entries)
                self._wait_receivers(pool)
        except BaseException:
            self.abort.set()  # Ctrl-C or a failure: stop the workers after their receive
            raise
        finally:
            pool.join(RECEIVER_JOIN_TIMEOUT)
        if pool.errors:
            raise pool.errors[0]
        with self.timer.phase("paced"):
            self._paced(entries)
        with self.timer.phase("expire"):
            self._expire(last_held)
        return {"workers": self.options.receivers, "queues": len({d.format_name for d in drains}),
                "per_queue": RECEIVERS_PER_QUEUE, "prefetch": PREFETCH,
                "retried": sum(d.transient_errors for d in drains),
                "verified": sum(d.verified for d in drains if isinstance(d, SecurityDesk))}

    def _paced(self, entries: list[ChangelogEntry]) -> None:
        """The paced run (phase 4): competing receivers open ``latency-probe`` first, then
        PACED_MESSAGES messages are sent to it at PACED_RATE per second."""
        sending_done = threading.Event()
        drains = [QueueDrain(self.qm, self.topology.probe, self.ledger, sending_done.is_set,
                             self.options.idle_limit) for _ in range(RECEIVERS_PER_QUEUE)]
        pool = ReceiverPool(drains, len(drains), self.abort)
        pool.start()
        try:
            for drain in drains:  # latency from send, not from a receiver's start-up
                drain.ready.wait(RECEIVER_JOIN_TIMEOUT)
            with self.qm.open_queue(self.topology.probe) as probe:
                send_paced(probe, self.ledger, entries, PACED_MESSAGES, PACED_RATE, self.abort)
                self.qm.transmitter.flush(30.0)
            sending_done.set()
            self._wait_receivers(pool, "receive (paced)")
        except BaseException:
            self.abort.set()
            raise
        finally:
            sending_done.set()
            pool.join(RECEIVER_JOIN_TIMEOUT)
        if pool.errors:
            raise pool.errors[0]

    def _planned_copies(self, entries: list[ChangelogEntry]) -> Counter:
        """Copies each receiving queue will get, from the routes (orders the drains)."""
        topology, copies = self.topology, Counter[str]()
        members = [*topology.distribution_queues, topology.security]
        for index, entry in enumerate(entries):
            route = plan_route(index, entry)
            if route == ROUTE_LIST:
                copies.update(members)
            elif route == ROUTE_SECURITY:
                copies.update([topology.security, topology.replies])
            elif route == ROUTE_MULTI:
                copies.update([topology.queue_for(entry), topology.bugs])
            elif route == ROUTE_TRANSACTIONAL:
                copies[topology.releases] += 1
            elif route != ROUTE_HELD:
                copies[topology.queue_for(entry)] += 1
        return copies

    def _drains(self, planned: Counter) -> list[QueueDrain]:
        """RECEIVERS_PER_QUEUE competing drains per receiving queue, next to each other,
        biggest queue first (it takes longest), the security desks among them, one
        transactional drain for the transactional queue, and the replies last: their
        upstream is the security desks."""
        topology, ledger, idle = self.topology, self.ledger, self.options.idle_limit
        sending_done = self.sending_done.is_set
        desks = [SecurityDesk(self.qm, topology.security, ledger, sending_done, idle)
                 for _ in range(RECEIVERS_PER_QUEUE)]
        special: dict[str, list[QueueDrain]] = {
            topology.security: list(desks),
            topology.releases: [TransactionalDrain(self.qm, topology.releases, ledger,
                                                   sending_done, idle)]}
        queues = sorted([*special, *topology.distribution_queues, topology.bugs],
                        key=lambda q: -planned[q])
        drains: list[QueueDrain] = []
        for queue in queues:
            drains += special.get(queue) or [QueueDrain(self.qm, queue, ledger, sending_done, idle)
                                             for _ in range(RECEIVERS_PER_QUEUE)]
        desks_done = lambda: sending_done() and all(d.done.is_set() for d in desks)  # noqa: E731
        return drains + [QueueDrain(self.qm, topology.replies, ledger, desks_done, idle)
                         for _ in range(RECEIVERS_PER_QUEUE)]

    def _send_all(self, entries: list[ChangelogEntry]) -> float:
        """Send every entry (the poison record half-way), then flush the producers.

        Returns:
            float: monotonic time of the last held send (0 if none).
        """
        sender = EntrySender(self.qm, self.topology, self.ledger)
        poison_at = len(entries) // 2
        last_held = 0.0
        try:
            with _progress(self.console) as progress:
                task = progress.add_task("send", total=len(entries))
                for index, entry in enumerate(entries):
                    if self.abort.is_set():
                        break
                    if index == poison_at:
                        # Into the first queue of the biggest distribution.
                        write_poison_record(self.qm, self.topology.distribution_queues[0],
                                            self.ledger)
                    if sender.send(index, entry) == ROUTE_HELD:
                        last_held = time.monotonic()
                    progress.advance(task)
                sender.flush()  # the last batches, the last, shorter transaction
            self.qm.transmitter.flush(30.0)
        finally:
            sender.close()
            self.sending_done.set()
        return last_held

    def _wait_receivers(self, pool: ReceiverPool, what: str = "receive") -> None:
        """Show receive progress until the pool's drains have ended."""
        with _progress(self.console) as progress:
            task = progress.add_task(what, total=self.ledger.expected())
            while pool.alive() and not self.abort.is_set():
                progress.update(task, completed=self.ledger.received(),
                                total=self.ledger.expected())
                time.sleep(0.2)
            progress.update(task, completed=self.ledger.received(), total=self.ledger.expected())

    def _expire(self, last_held: float) -> None:
        """Expire the held queue's messages once their TTBR has passed: nobody receives there,
        so :meth:`MessageQueue.expire_due` (what the ``kmq qm run`` service calls for every
        queue) moves them to the dead-letter queue as NACK_RECEIVE_TIMEOUT and posts their
        NACKs. Gives up EXPIRY_GRACE seconds after the last held TTBR; what is left then shows
        up as unaccounted in the verdict.
        """
        deadline = max(last_held, time.monotonic()) + HELD_TTBR + EXPIRY_GRACE
        with self.qm.open_queue(self.topology.held) as held:
            total = left = held.count()
            with _progress(self.console) as progress:
                task = progress.add_task("expire (TTBR)", total=total)
                while left and time.monotonic() < deadline and not self.abort.is_set():
                    time.sleep(max(0.0, last_held + HELD_TTBR - time.monotonic()))
                    held.expire_due()
                    left = held.count()
                    progress.update(task, completed=total - left)
                    if left:
                        time.sleep(0.2)


def _collect(qm: Any, topology: Topology, ledger: Ledger) -> None:
    """Read the dead-letter and admin queues into the ledger (cursors: nothing removed)."""
    read_all(qm, topology.dead_letter, ledger.observe_dead_letter)
    read_all(qm, topology.admin, ledger.observe_admin)


def _report(qm: Any, environment: DemoEnvironment, topology: Topology, ledger: Ledger,
            options: DemoOptions, facts: dict[str, Any]) -> Report:
    """Build and write the report (Spark hook or fallback) while the broker is still up."""
    options.report_dir.mkdir(parents=True, exist_ok=True)
    sources = ReportSources(
        config=environment.config, queue_manager=qm.name,
        queues={queue_label(fn): fn for fn in topology.journaled},
        journals={queue_label(fn): f"{fn};JOURNAL" for fn in topology.journaled},
        dead_letter=topology.dead_letter, admin=topology.admin, held=topology.held,
        report_dir=options.report_dir.resolve())
    report = build_report(sources, ledger, facts)
    write_report(report, options.report_dir)
    return report


def _run_facts(options: DemoOptions, environment: DemoEnvironment, stats: CorpusStats,
               entries: list[ChangelogEntry], ledger: Ledger, verdict: Verdict,
               receivers: dict[str, Any], timer: _Timer) -> dict[str, Any]:
    """What the report shows about the run (:attr:`Report.run`): parameters, totals, verdict
    and the explanations a reader needs (why ``security`` and ``security-replies`` differ)."""
    routes = ledger.sends_by("route")
    copies_by_queue = {queue_label(q): n for q, n in ledger.copies_by_queue().items()}
    dead = Counter(m.message_class.name for m in ledger.dead_letters)
    admin = Counter(m.message_class.name for m in ledger.admin_messages)
    moving = timer.phases.get("send + receive", 0.0)
    copies = ledger.copies_count() - routes[ROUTE_PACED]
    return {
        "parameters": {
            "entries": f"{len(entries):,} of {stats.entries:,}",
            "limit": options.limit or "none",
            "receivers": (f"{receivers['workers']} threads, {receivers['per_queue']} per queue, "
                          f"prefetch {receivers['prefetch']}"),
            "paced run": f"{PACED_MESSAGES} messages at {PACED_RATE:g}/s",
            "broker": environment.describe()["mode"],
        },
        "totals": {
            "messages sent": f"{sum(ledger.sends_by('kind').values()):,}",
            "copies": f"{ledger.copies_count():,}", "received": f"{ledger.received():,}",
            "dead-lettered": sum(dead.values()),
            "ACKs": sum(n for c, n in admin.items() if c.startswith("ACK")),
            "NACKs": sum(n for c, n in admin.items() if c.startswith("NACK")),
            "send + receive": f"{moving:.1f} s ({copies / moving:,.0f} copies/s)" if moving else "-",
        },
        "guarantees": _guarantees(ledger, verdict, receivers),
        "verdict": {"ok": verdict.ok, "unaccounted": verdict.unaccounted_count,
                    "problems": dict(verdict.problem_counts),
                    "outcomes": dict(verdict.outcomes)},
        "explanations": [
            f"security received {copies_by_queue.get('security', 0):,} copies: "
            f"{routes[ROUTE_SECURITY]:,} urgent requests plus {routes[ROUTE_LIST]:,} "
            "announcements to the distribution list, which reaches security through its "
            f"alias; security-replies got {copies_by_queue.get('security-replies', 0):,}, one "
            "answer per request (announcements ask for none).",
            f"the dead-letter queue holds {dead.get('NACK_RECEIVE_REJECTED', 0)} "
            "NACK_RECEIVE_REJECTED: the one raw poison record written into a queue half-way, "
            f"which its receiver moved there; and {dead.get('NACK_RECEIVE_TIMEOUT', 0):,} "
            "NACK_RECEIVE_TIMEOUT: the held entries whose 1 s time-to-be-received ran out.",
        ],
    }


def _guarantees(ledger: Ledger, verdict: Verdict, receivers: dict[str, Any]) -> dict[str, str]:
    """The security and transactional promises as the run kept them, one sentence each."""
    requests = ledger.sends_by("route")[ROUTE_SECURITY]
    once, copies = ledger.received_once(ROUTE_TRANSACTIONAL)
    messages, transactions = ledger.transactions()
    received = "received once each" if once == copies else \
        f"only {once} of {copies} received exactly once"
    order = "OUT OF ORDER" if verdict.problem_counts["transactional out of order"] else "in order"
    return {
        "security requests verified": (f"{receivers['verified']} of {requests} "
                                       "(signed and encrypted)"),
        "transactional": (f"{messages} messages in {transactions} transactions, "
                          f"{received}, {order}"),
    }


def _summary(options: DemoOptions, environment: DemoEnvironment, stats: CorpusStats,
             entries: list[ChangelogEntry], ledger: Ledger, verdict: Verdict, report: Report,
             receivers: dict[str, Any], timer: _Timer) -> dict[str, Any]:
    """The run's JSON summary (also what the table shows)."""
    kinds = ledger.sends_by("kind")
    dead = Counter(m.message_class.name for m in ledger.dead_letters)
    admin = Counter(m.message_class.name for m in ledger.admin_messages)
    responses = ledger.responses()
    return {
        "ok": verdict.ok,
        "corpus": {"path": str(options.corpus), **stats.to_dict(), "entries_used": len(entries)},
        "environment": environment.describe(),
        "sent": {"messages": sum(kinds.values()), "entries": kinds["entry"],
                 "responses": kinds["response"], "by_route": dict(ledger.sends_by("route"))},
        "copies": ledger.copies_count(),
        "copies_by_queue": {queue_label(q): n for q, n in sorted(ledger.copies_by_queue().items())},
        "received": ledger.received(),
        "dead_lettered": dict(dead),
        "nacks": {c: n for c, n in admin.items() if c.startswith("NACK")},
        "acks": {c: n for c, n in admin.items() if c.startswith("ACK")},
        "requests": {"sent": ledger.sends_by("route")[ROUTE_SECURITY],
                     "answered": len(responses)},
        "poison": {"written": len(ledger.poison_places()),
                   "dead_lettered": sum(n for o, n in verdict.outcomes.items()
                                        if o.startswith("poison dead-lettered"))},
        "receivers": receivers,
        "guarantees": _guarantees(ledger, verdict, receivers),
        "paced": {"messages": ledger.sends_by("route")[ROUTE_PACED], "rate_per_s": PACED_RATE},
        "accounting": verdict.to_dict(),
        "report": {"dir": str(options.report_dir.resolve()), "engine": report.engine,
                   "chart": report.chart, "notes": report.notes},
        "timings_s": dict(timer.phases),
    }


def _progress(console: Console) -> Progress:
    """A progress display for one phase (a spinner when the total is not known yet)."""
    return Progress(TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)
