"""How a changelog entry becomes an MSMQ message, and which queue it belongs to.

=========================== ==================================================================
Message property            From the changelog entry
=========================== ==================================================================
label (PROPID_M_LABEL)      ``"<package> <version>"``, cut to 250 characters
body (PROPID_M_BODY)        the entry's whole text (header, changes, trailer), UTF-8
priority                    urgency: low 1, medium 3, high 5, critical/emergency 7, other 3
app_specific                the first bug number the entry closes (0 if none)
properties                  ``debian.package``, ``debian.version``, ``debian.distributions``,
                            ``debian.urgency``, ``debian.maintainer`` (the sender),
                            ``debian.date`` (ISO 8601; the trailer text when unparsable),
                            ``debian.closes`` (comma-separated bug numbers, when any)
sent_time                   stamped by the queue manager at send, as MSMQ stamps
                            PROPID_M_SENTTIME: the changelog date is kept in ``debian.date``
=========================== ==================================================================

Queues: one public queue per target distribution, named ``changes-<distribution>`` (the first
distribution of the header, lowercased, characters outside ``[a-z0-9-]`` replaced by ``-``).
Distributions that are rare in the corpus share ``changes-other``. A distribution with more than
QUEUE_SHARD_SIZE entries is spread over several queues, ``changes-<distribution>-1`` ... ``-n``,
each package always in the same one (dealt to balance them), so its entries stay in order; the
``bugs`` queue likewise. docs/design.md advises exactly this for throughput (a queue is one
partition), and on Tansu it is a must: its in-memory storage makes each fetch cost more the
longer the topic is (1.2 ms of broker CPU per receive at 300 records, 2.5 ms at 9,000), and
past about 4,000 record batches in a topic (a receipts topic gets one per receive) a reader
waits ~10 times longer per record, then seconds. 2,500 entries per queue stays clear of that.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from facade.demo.corpus import ChangelogEntry
from facade.message import MAX_LABEL_LENGTH

__all__ = [
    "OTHER_DISTRIBUTION",
    "QUEUE_SHARD_SIZE",
    "QueueLayout",
    "distribution_key",
    "entry_label",
    "entry_properties",
    "is_urgent",
    "plan_layout",
    "priority_for",
    "queue_name",
    "select_distributions",
]

#: Key of the queue that collects rare distributions.
OTHER_DISTRIBUTION = "other"
#: PROPID_M_PRIORITY per urgency (MSMQ priorities are 0-7, 3 is the default).
_PRIORITY = {"low": 1, "medium": 3, "high": 5, "critical": 7, "emergency": 7}
_DEFAULT_PRIORITY = 3
#: Prefix of the distribution queues' names.
QUEUE_PREFIX = "changes-"
#: Most entries one distribution (or bugs) queue is planned for before it is spread over more.
QUEUE_SHARD_SIZE = 2500
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def priority_for(urgency: str) -> int:
    """The message priority for a changelog urgency (case-insensitive; unknown: 3)."""
    return _PRIORITY.get(urgency.strip().lower(), _DEFAULT_PRIORITY)


def is_urgent(entry: ChangelogEntry) -> bool:
    """True for entries of urgency high, critical or emergency (they go to the security desk)."""
    return priority_for(entry.urgency) >= _PRIORITY["high"]


def distribution_key(entry: ChangelogEntry) -> str:
    """The entry's first target distribution, sanitised to ``[a-z0-9-]`` (``other`` if none)."""
    first = entry.distributions[0] if entry.distributions else ""
    key = _UNSAFE.sub("-", first.lower()).strip("-")
    return key[:40] or OTHER_DISTRIBUTION


def select_distributions(entries: Iterable[ChangelogEntry], max_queues: int = 6,
                         min_share: float = 0.01) -> list[str]:
    """The distributions that get a queue of their own: the most frequent ones.

    Args:
        entries: the corpus.
        max_queues (int): most distribution queues, besides ``changes-other``.
        min_share (float): a distribution needs at least this fraction of the entries.

    Returns:
        list[str]: distribution keys, most frequent first; never contains ``other``.
    """
    counts = Counter(distribution_key(e) for e in entries)
    total = sum(counts.values())
    chosen = [key for key, n in counts.most_common()
              if key != OTHER_DISTRIBUTION and n >= min_share * total]
    return chosen[:max_queues]


def queue_name(distribution: str, shard: int = 1, shards: int = 1) -> str:
    """The queue name of a distribution key: ``changes-unstable``, or ``changes-unstable-2``
    when the distribution is spread over several queues."""
    base = f"{QUEUE_PREFIX}{distribution}"
    return base if shards == 1 else f"{base}-{shard}"


@dataclass(frozen=True)
class QueueLayout:
    """How many queues each distribution, and the bugs queue, gets, and which package goes to
    which of them.

    Attributes:
        distributions (dict[str, int]): distribution key -> queues (``other`` included), most
            entries first.
        bugs (int): queues for the bug-closing copies.
        shards (dict[tuple[str, str], int]): (distribution key, package) -> its queue, 0-based,
            for spread distributions.
        bug_shards (dict[str, int]): package -> its bugs queue, 0-based, when bugs is spread.
    """

    distributions: dict[str, int]
    bugs: int
    shards: dict[tuple[str, str], int]
    bug_shards: dict[str, int]

    def distribution_of(self, entry: ChangelogEntry) -> str:
        """The distribution key whose queues ``entry`` goes to (rare ones: ``other``)."""
        key = distribution_key(entry)
        return key if key in self.distributions else OTHER_DISTRIBUTION

    def shard(self, entry: ChangelogEntry) -> int:
        """The 0-based queue of ``entry`` among its distribution's queues."""
        return self.shards.get((self.distribution_of(entry), entry.package), 0)

    def bug_shard(self, entry: ChangelogEntry) -> int:
        """The 0-based bugs queue of ``entry``."""
        return self.bug_shards.get(entry.package, 0)


def plan_layout(entries: list[ChangelogEntry], shard_size: int | None = None) -> QueueLayout:
    """The queue layout for a corpus: the frequent distributions (:func:`select_distributions`)
    plus ``other``, each spread over ``ceil(entries / shard_size)`` queues; likewise bugs.

    A package's entries all go to one queue (so they stay in order); packages are dealt to the
    queues biggest first, each to the queue with the fewest entries so far, which keeps the
    queues within a few percent of each other (a hash of the name left some twice the size).

    Args:
        entries: the entries that will be sent.
        shard_size (int | None): entries per queue; default QUEUE_SHARD_SIZE.
    """
    size = shard_size or QUEUE_SHARD_SIZE
    chosen = select_distributions(entries)
    per_package: dict[str, Counter] = {k: Counter() for k in [*chosen, OTHER_DISTRIBUTION]}
    closing: Counter = Counter()
    for entry in entries:
        key = distribution_key(entry)
        per_package[key if key in chosen else OTHER_DISTRIBUTION][entry.package] += 1
        if entry.closed_bugs:
            closing[entry.package] += 1
    counts = {k: max(1, math.ceil(sum(c.values()) / size)) for k, c in per_package.items()}
    shards = {(k, package): shard for k, c in per_package.items()
              for package, shard in _deal(c, counts[k]).items()}
    bugs = max(1, math.ceil(sum(closing.values()) / size))
    return QueueLayout(counts, bugs, shards, _deal(closing, bugs))


def _deal(sizes: Counter, queues: int) -> dict[str, int]:
    """Assign each package to one of ``queues`` (greedy: biggest package to the lightest
    queue; ties by name, so the layout is the same on every run)."""
    if queues == 1:
        return {}
    load = [0] * queues
    assignment = {}
    for package, count in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        target = min(range(queues), key=lambda q: (load[q], q))
        assignment[package] = target
        load[target] += count
    return assignment


def entry_label(entry: ChangelogEntry) -> str:
    """``"<package> <version>"`` within MSMQ's 250-character label limit."""
    return f"{entry.package} {entry.version}"[:MAX_LABEL_LENGTH]


def entry_properties(entry: ChangelogEntry) -> dict[str, str]:
    """The ``debian.*`` application properties of an entry's message (see the module doc)."""
    properties = {
        "debian.package": entry.package,
        "debian.version": entry.version,
        "debian.distributions": " ".join(entry.distributions),
        "debian.urgency": entry.urgency,
        "debian.maintainer": entry.maintainer,
        "debian.date": entry.date.isoformat() if entry.date else entry.date_text,
    }
    if entry.closed_bugs:
        properties["debian.closes"] = ",".join(str(b) for b in entry.closed_bugs)
    return properties
