"""``local_session``'s JVM: it maps the class-data archive once ``make spark-jars`` built one
for this Java and pyspark, and its Python workers are forked from kmq's daemon."""

from __future__ import annotations

from typing import Any

from spark_connector import classarchive


def test_the_session_jvm_maps_the_class_archive_once_it_is_built(spark: Any) -> None:
    path = classarchive.archive_path()
    bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(bean.getInputArguments())
    assert (f"-XX:SharedArchiveFile={path}" in arguments) is path.is_file(), arguments


def test_python_workers_are_forked_from_kmqs_daemon(spark: Any) -> None:
    assert spark.conf.get("spark.python.daemon.module") == "spark_connector._daemon"
    # A worker's parent is the daemon: its command line names the module.
    parents = spark.sparkContext.parallelize([0], 1).map(lambda _: open(  # noqa: SIM115
        f"/proc/{__import__('os').getppid()}/cmdline", "rb").read()).collect()
    assert b"spark_connector._daemon" in parents[0], parents
