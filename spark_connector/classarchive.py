"""A class-data sharing archive for the JVM of local Spark sessions (HotSpot's AppCDS).

A local Spark session's JVM loads and verifies some twenty thousand classes from pyspark's jars
before its first query returns, every time it starts. HotSpot can map them from an archive
instead (class-data sharing, JEP 350's dynamic archives): :func:`build` records one, once, from
a training session that does what kmq's sessions do (a batch query with a shuffle, an Arrow
Python UDF, a streaming query into a memory table), and :func:`java_options` gives
:func:`spark_connector.local_session` the ``-XX:SharedArchiveFile`` option while the archive
matches this machine's Java and pyspark. On the demo's report (docs/performance.md) it
saves about 2 s of the session's start and 2 s of the first query.

The archive lives in kmq's jar cache (:func:`facade.kafka.mavenjars.jar_cache_root`), named by
a digest of the ``java`` that Spark starts (``$JAVA_HOME/bin/java`` or ``java`` on ``PATH``)
and of pyspark's version and jars, so another JDK or pyspark never reads it. HotSpot checks
the archive itself when it maps it, and runs without it (``-Xshare:auto``) when it does not
fit. ``make spark-jars`` builds it (``python -m spark_connector.classarchive``; the training
session is :mod:`spark_connector.classtraining`); without it, sessions start as they always do.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from facade.errors import ConfigurationError
from facade.kafka.mavenjars import jar_cache_root

__all__ = ["archive_path", "build", "java_options", "recording_options"]

#: Folder of the archives in the jar cache.
ARCHIVE_DIR = "spark-cds"
#: HotSpot's warnings (an archive that does not fit, classes it cannot archive) go to stderr:
#: its default, stdout, is where ``kmq demo --json`` and other commands print their results.
_LOG_TO_STDERR = ("-Xlog:disable", "-Xlog:all=warning:stderr:uptime,level,tags")
#: Seconds the training session may take, dump included (about a minute on 2 busy cores).
BUILD_TIMEOUT = 900.0


def _spark_java() -> Path:
    """The ``java`` Spark's launcher starts: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    if found is None or not Path(found).exists():
        raise ConfigurationError("no java found for Spark",
                                 hint="install a JDK 17+ or set JAVA_HOME")
    return Path(found).resolve()


def archive_path() -> Path:
    """Where the archive for this machine's Java and pyspark is (whether or not it exists).

    Raises:
        ConfigurationError: no ``java`` is found.
    """
    import pyspark

    java = _spark_java()
    digest = hashlib.sha256()
    stat = java.stat()
    digest.update(f"{java}\0{stat.st_size}\0{stat.st_mtime_ns}\0{pyspark.__version__}".encode())
    for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")):
        digest.update(f"\0{jar.name}\0{jar.stat().st_size}".encode())
    return jar_cache_root() / ARCHIVE_DIR / f"spark-{pyspark.__version__}-{digest.hexdigest()[:16]}.jsa"


def java_options() -> list[str]:
    """The JVM options that map the archive, or none when it has not been built for this
    machine's Java and pyspark (or no ``java`` is found: Spark then reports that itself)."""
    try:
        path = archive_path()
    except ConfigurationError:
        return []
    if not path.is_file():
        return []
    return [f"-XX:SharedArchiveFile={path}", *_LOG_TO_STDERR]


def build(*, force: bool = False) -> Path | None:
    """Record the archive from a training session in a child process, unless it exists.

    Args:
        force (bool): record it again even if it exists.

    Returns:
        Path | None: the archive; None when this JVM records none (a JDK without a base CDS
        archive, or one older than 13: sessions then start without one).

    Raises:
        ConfigurationError: no ``java`` is found.
        subprocess.CalledProcessError, subprocess.TimeoutExpired: the training session failed
            or took longer than :data:`BUILD_TIMEOUT`.
    """
    path = archive_path()
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + BUILD_TIMEOUT
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".training-") as work:
        recorded = Path(work) / path.name
        done = subprocess.run(
            [sys.executable, "-m", "spark_connector.classtraining", str(recorded)], check=True,
            timeout=BUILD_TIMEOUT, stdout=subprocess.PIPE, text=True)
        # The JVM writes the archive as it exits, after the training process: wait for it.
        _wait_for_exit(int(done.stdout.split()[-1]), deadline)
        if not recorded.is_file() or recorded.stat().st_size == 0:
            return None
        os.replace(recorded, path)  # atomic: a session never maps a half-written archive
    return path


def recording_options(recorded: Path) -> list[str]:
    """The JVM options of the training session: record the archive at ``recorded``.

    Recording warns once per class it leaves out (Spark's generated classes, old class-file
    versions): some 800 lines with nothing to act on, so only its errors are shown."""
    return [f"-XX:ArchiveClassesAtExit={recorded}", *_LOG_TO_STDERR,
            "-Xlog:cds=error:stderr:uptime,level,tags"]


def _wait_for_exit(pid: int, deadline: float) -> None:
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(f"the training JVM (pid {pid})", BUILD_TIMEOUT)
        time.sleep(0.2)


def main() -> None:
    """``python -m spark_connector.classarchive``: build the archive (``--force``: again)."""
    path = build(force="--force" in sys.argv[1:])
    print(f"Spark class-data archive: {path}" if path else
          "Spark class-data archive: this JVM records none; Spark sessions start without one")


if __name__ == "__main__":
    main()
