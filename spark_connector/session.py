"""A local-mode SparkSession set up the way the connector expects (tests, demo, benchmarks)."""

from __future__ import annotations

import os
import sys
from typing import Any

from spark_connector.datasource import register

__all__ = ["local_session"]


def local_session(app_name: str, *, cores: int = 2, connectors: bool = True,
                  **config: str) -> Any:
    """``local[cores]`` Spark bound to 127.0.0.1, quiet, UTC, with ``format("kmq")`` registered
    and Spark's Kafka source and spark-avro on ``spark.jars``.

    Workers run this interpreter (``PYSPARK_PYTHON``), so they import the same kmq and pyarrow,
    and are forked from :mod:`spark_connector._daemon`, which imports kmq's executor-side
    modules once (``spark.python.daemon.module``; ``config`` may name another). The driver's
    JVM maps the class-data archive of :mod:`spark_connector.classarchive` when one has been
    built for this Java and pyspark (``make spark-jars``), unless
    ``spark.driver.extraJavaOptions`` sets class-data sharing itself.
    Returns the active session if one exists (``getOrCreate``; its JVM keeps the jars it was
    started with).

    Args:
        app_name (str): Spark application name.
        cores (int): local worker threads.
        connectors (bool): put the jars of :func:`spark_connector.jars.connector_jars` on
            ``spark.jars`` (local paths, resolved by Maven into kmq's jar cache on first use),
            so that ``format("kafka")`` and ``from_avro`` work; False starts Spark without them
            (``read_queue`` then reads through ``format("kmq")``).
        **config (str): further Spark settings, e.g. ``spark.sql.shuffle.partitions="4"``.

    Raises:
        ConfigurationError: ``connectors`` and the jars cannot be had (pyspark is not the
            pinned Spark version, or Maven cannot resolve them); the hint names the fix.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               # Workers forked with kmq's executor-side modules already imported.
               .config("spark.python.daemon.module", "spark_connector._daemon"))
    if connectors:
        from spark_connector.jars import connector_jars

        jars = [str(jar) for jar in connector_jars()]
        given = config.pop("spark.jars", "")
        builder = builder.config("spark.jars", ",".join([*jars, *filter(None, [given])]))
    java = config.pop("spark.driver.extraJavaOptions", "")
    if not any(flag in java for flag in ("Archive", "-Xshare")):  # the caller's CDS wins
        from spark_connector.classarchive import java_options

        java = " ".join(filter(None, [*java_options(), java]))
    if java:
        builder = builder.config("spark.driver.extraJavaOptions", java)
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
