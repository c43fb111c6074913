"""pyspark's Python worker daemon with kmq's executor-side modules imported before it forks.

Spark starts one daemon per executor (``spark.python.daemon.module``) and forks a worker
from it for each Python UDF of a task; each worker imports what the UDF needs. A worker
forked from this daemon finds :mod:`spark_connector.read` (the queue view and decode steps
of the Kafka-source path, with pyarrow, fastavro and confluent-kafka) already imported, which
saves each new worker about a third of a second (docs/performance.md).
"""

from __future__ import annotations

import spark_connector.read  # noqa: F401 - imported for the workers forked below
from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
