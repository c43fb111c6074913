"""The names of ``kmq bench``'s scenarios, apart from :mod:`facade.bench` (which imports the
Kafka client, fastavro and the queue manager), so ``kmq --help`` lists them without loading
any of that. :data:`facade.bench.SCENARIOS` has one entry per name, in this order (a unit test
checks it)."""

from __future__ import annotations

__all__ = ["DEFAULT_SCENARIOS", "SCENARIO_NAMES"]

#: Every scenario, in the order ``kmq bench`` runs them.
SCENARIO_NAMES = ("express-send", "envelope-send", "recoverable-send", "receive", "receive-batch",
                  "peek", "dl-fanout", "spark-decode")
#: Scenarios ``kmq bench`` runs when none is named (``spark-decode`` starts a JVM: opt-in).
DEFAULT_SCENARIOS = SCENARIO_NAMES[:-1]
