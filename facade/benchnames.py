"""The names of ``kmq bench``'s scenarios, apart from :mod:`facade.bench` (which imports the
Kafka client, fastavro and the queue manager), so ``kmq --help`` lists them without loading
any of that. :data:`facade.bench.SCENARIOS` has one entry per name, in this order (a unit test
checks it)."""

from __future__ import annotations

__all__ = ["DEFAULT_SCENARIOS", "OPT_IN_SCENARIOS", "SCENARIO_NAMES"]

#: Every scenario, in the order ``kmq bench`` runs them.
SCENARIO_NAMES = ("express-send", "envelope-send", "recoverable-send", "send-batch",
                  "recoverable-send-batch", "receive", "receive-batch", "receive-contended",
                  "receive-contended-spread", "receive-share", "peek",
                  "dl-fanout", "transactional-send", "transactional-move",
                  "transactional-move-batch", "signed-send",
                  "encrypted-send", "signed-encrypted-receive", "spark-decode")
#: Scenarios run only when named: ``spark-decode`` starts a JVM; ``receive-contended`` and
#: ``receive-contended-spread`` start four receiver processes and take about 30 s a round on
#: the local broker; ``receive-share`` starts 1, 2 and 4 (a share-arbitrated queue each).
OPT_IN_SCENARIOS = ("receive-contended", "receive-contended-spread", "receive-share",
                    "spark-decode")
#: Scenarios ``kmq bench`` runs when none is named.
DEFAULT_SCENARIOS = tuple(name for name in SCENARIO_NAMES if name not in OPT_IN_SCENARIOS)
