"""Spark's connectors are pinned to exactly the pinned pyspark (no JVM, no Maven here)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pyspark

from spark_connector.jars import _artifact, connector_packages, spark_version

ROOT = Path(__file__).resolve().parents[2]


def test_the_connector_pom_pins_the_spark_version_pyproject_pins() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["spark"]
    pins = [re.fullmatch(r"pyspark\[sql\]==(\S+)", item) for item in extras]
    pinned = [found.group(1) for found in pins if found]
    assert pinned == [spark_version()], extras  # an exact pin, the POM's version
    assert pyspark.__version__ == spark_version()  # make install installed that pin


def test_packages_name_both_connectors_at_the_pinned_version() -> None:
    version = spark_version()
    assert connector_packages() == (
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version},"
        f"org.apache.spark:spark-avro_2.13:{version}")


def test_jar_names_are_compared_without_their_versions() -> None:
    assert _artifact("slf4j-api-1.7.36.jar") == _artifact("slf4j-api-2.0.17.jar") == "slf4j-api"
    assert _artifact("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert _artifact("scala-parallel-collections_2.13-1.2.0.jar") == (
        "scala-parallel-collections_2.13")
