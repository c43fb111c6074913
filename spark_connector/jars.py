"""Spark's own connectors for kmq jobs: the Kafka source and sink and spark-avro, as jars.

``deploy/spark/pom.xml`` pins ``org.apache.spark:spark-sql-kafka-0-10_2.13`` and
``org.apache.spark:spark-avro_2.13`` at the Spark version of the pinned pyspark;
:func:`connector_jars` has Maven resolve them once into kmq's jar cache
(:mod:`facade.kafka.mavenjars`, the same cache as the local broker's jars) and returns the jars to put
on ``spark.jars`` before the JVM starts (:func:`spark_connector.local_session` does). On a
cluster, ``spark-submit --packages`` with :func:`connector_packages` does the same from Maven
Central or the cluster's mirror.
"""

from __future__ import annotations

import re
from pathlib import Path

from facade.errors import ConfigurationError
from facade.kafka.mavenjars import pom_property, resolve_jars

__all__ = ["SPARK_POM", "connector_jars", "connector_packages", "spark_version"]

#: The POM (below ``deploy/``) naming Spark's connectors.
SPARK_POM = "spark/pom.xml"
#: The connectors' Maven coordinates without the version.
_ARTIFACTS = ("org.apache.spark:spark-sql-kafka-0-10_2.13", "org.apache.spark:spark-avro_2.13")
#: ``name-1.2.3.jar`` -> ``name`` (the artifact, without its version).
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d+(?:\.\d+)+(?:[-.][\w.+-]*)?\.jar$")


def spark_version() -> str:
    """The Spark version ``deploy/spark/pom.xml`` pins (``spark.version``), e.g. ``4.2.0``.

    Raises:
        ConfigurationError: the POM is missing or has no ``spark.version``.
    """
    return pom_property(SPARK_POM, "spark.version")


def connector_packages() -> str:
    """``--packages`` value for ``spark-submit`` on a cluster: the connectors at the pinned
    Spark version, comma-separated (Spark's own resolver adds their dependencies)."""
    version = spark_version()
    return ",".join(f"{artifact}:{version}" for artifact in _ARTIFACTS)


def connector_jars(*, maven: str | None = None) -> list[Path]:
    """The local jars that give a local-mode pyspark ``format("kafka")`` and ``from_avro``.

    Resolves ``deploy/spark/pom.xml`` with Maven on first use (``make spark-jars`` does it
    ahead of time) and leaves out the jars pyspark ships already (Scala, Hadoop's client,
    compression codecs, SLF4J...): pyspark's own copy is the one on the JVM's class path, and
    a second, older one beside it only invites a version clash.

    Args:
        maven (str | None): the ``mvn`` executable; default ``$KMQ_MAVEN`` or ``mvn`` on PATH.

    Returns:
        list[Path]: jar files, for ``spark.jars`` (comma-separated), sorted by name.

    Raises:
        ConfigurationError: pyspark's version is not the POM's ``spark.version`` (the
            connectors would fail at run time: reinstall with ``make install``), or Maven could
            not resolve the jars (see :func:`facade.kafka.mavenjars.resolve_jars`).
    """
    import pyspark

    wanted = spark_version()
    if pyspark.__version__ != wanted:
        raise ConfigurationError(
            f"pyspark {pyspark.__version__} is installed, but Spark's Kafka and Avro connectors "
            f"are pinned to {wanted} (deploy/spark/pom.xml); a connector only runs on the Spark "
            "release it was built for",
            hint=f"install pyspark=={wanted} (make install), or change spark.version in "
                 "deploy/spark/pom.xml to a release whose connectors are on Maven Central")
    folder = resolve_jars(SPARK_POM, maven=maven)
    shipped = {_artifact(jar.name) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted((jar for jar in folder.glob("*.jar") if _artifact(jar.name) not in shipped),
                  key=lambda jar: jar.name)


def _artifact(file_name: str) -> str:
    found = _VERSIONED.match(file_name)
    return found.group("artifact") if found else file_name
