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
Distributions that are rare in the corpus share ``changes-other``. A distribution is never
spread over several queues: competing receivers drain one queue together (see
:mod:`facade.demo.workload`), as MSMQ applications scale a queue.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from facade.demo.corpus import ChangelogEntry
from facade.model.message import MAX_LABEL_LENGTH

__all__ = [
    "OTHER_DISTRIBUTION",
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


def queue_name(distribution: str) -> str:
    """The queue name of a distribution key: ``changes-unstable``."""
    return f"{QUEUE_PREFIX}{distribution}"


@dataclass(frozen=True)
class QueueLayout:
    """Which distributions get a queue of their own.

    Attributes:
        distributions (list[str]): distribution keys with a queue, most entries first, then
            ``other``.
    """

    distributions: list[str]

    def distribution_of(self, entry: ChangelogEntry) -> str:
        """The distribution key whose queue ``entry`` goes to (rare ones: ``other``)."""
        key = distribution_key(entry)
        return key if key in self.distributions else OTHER_DISTRIBUTION


def plan_layout(entries: list[ChangelogEntry]) -> QueueLayout:
    """The queue layout for a corpus: the frequent distributions (:func:`select_distributions`)
    plus ``other``.

    Args:
        entries: the entries that will be sent.
    """
    return QueueLayout([*select_distributions(entries), OTHER_DISTRIBUTION])


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
