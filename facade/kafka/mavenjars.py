"""Java programs kmq runs from Maven Central jars: the local Apache Kafka broker, Spark's connectors.

A POM under ``deploy/`` names what a program needs; :func:`resolve_jars` has Maven copy those
jars (with their dependencies) into a cache folder that later runs reuse. Maven resolves them, so
Maven's own settings (``~/.m2/settings.xml``: mirrors, proxies, a local repository) apply; kmq
downloads nothing itself.

The cache is ``$KMQ_JAR_CACHE`` if set, else ``$XDG_CACHE_HOME/kmq/jars`` (``~/.cache/kmq/jars``),
one folder per POM and POM content: editing a POM (a new Kafka version) resolves afresh, and two
checkouts with the same POM share one copy. A folder is complete once its ``.complete`` stamp is
written; resolution happens in a temporary folder renamed into place, under a file lock, so a
crash or two processes resolving at once never leave a half-filled cache behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from facade.deployfiles import deploy_file
from facade.errors import ConfigurationError

__all__ = ["MIN_JAVA_MAJOR", "find_java", "jar_cache_root", "java_major_version", "pom_property",
           "resolve_jars"]

#: Kafka 4.x brokers and Spark 4.x need Java 17 or newer.
MIN_JAVA_MAJOR = 17
#: Seconds Maven may take to resolve one POM (the first run downloads tens of MB).
RESOLVE_TIMEOUT = 900.0
_STAMP = ".complete"
_NO_JAVA_HINT = ("install a JDK 17 or newer (Debian: apt-get install openjdk-17-jdk-headless) and "
                 "put it on PATH or set JAVA_HOME, or set KMQ_BOOTSTRAP_SERVERS to an existing "
                 "Kafka cluster")


def jar_cache_root() -> Path:
    """The folder under which resolved jars are kept (see the module docstring)."""
    explicit = os.environ.get("KMQ_JAR_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "kmq" / "jars"


def pom_property(pom_relative: str, name: str) -> str:
    """A ``<properties>`` value of a POM under ``deploy/`` (the pinned Kafka version, say).

    Args:
        pom_relative (str): the POM's path below ``deploy/``, e.g. ``"kafka/pom.xml"``.
        name (str): the property, e.g. ``"kafka.version"``.

    Raises:
        ConfigurationError: the POM is missing or has no such property.
    """
    path = deploy_file(pom_relative)
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    element = ElementTree.parse(path).getroot().find(f"m:properties/m:{name}", namespace)
    if element is None or not (element.text or "").strip():
        raise ConfigurationError(f"{path} has no <{name}> property",
                                 hint="restore deploy/ from the kmq distribution")
    return (element.text or "").strip()


def resolve_jars(pom_relative: str, *, maven: str | None = None) -> Path:
    """The folder of jars a POM under ``deploy/`` names, resolving them once with Maven.

    Args:
        pom_relative (str): the POM's path below ``deploy/``, e.g. ``"kafka/pom.xml"``.
        maven (str | None): the ``mvn`` executable; default ``$KMQ_MAVEN`` or ``mvn`` on PATH.

    Returns:
        Path: a folder holding the jars (``java -cp 'FOLDER/*'``).

    Raises:
        ConfigurationError: the jars are not cached and Maven is not installed, or Maven could
            not resolve them (Maven Central unreachable, say); the message has Maven's last
            lines and the hint names the fix.
    """
    pom = deploy_file(pom_relative)
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    target = jar_cache_root() / f"{pom.parent.name}-{digest}"
    if (target / _STAMP).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / _STAMP).is_file():
            _copy_dependencies(pom, target, maven)
    return target


def _copy_dependencies(pom: Path, target: Path, maven: str | None) -> None:
    executable = maven or os.environ.get("KMQ_MAVEN") or shutil.which("mvn")
    if not executable:
        raise ConfigurationError(
            f"the jars of {pom} are not cached in {target.parent} and Maven (mvn) is not installed",
            hint="install Maven (Debian: apt-get install maven) with a JDK 17+, or set "
                 "KMQ_BOOTSTRAP_SERVERS to an existing Kafka cluster")
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        argv = [executable, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
                f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT,
                                    stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ConfigurationError(
                f"Maven did not resolve {pom} within {RESOLVE_TIMEOUT:.0f} s",
                hint="check that Maven Central (or your ~/.m2/settings.xml mirror) is reachable, "
                     "or set KMQ_BOOTSTRAP_SERVERS to an existing Kafka cluster") from exc
        if result.returncode != 0 or not any(staging.glob("*.jar")):
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-8:])
            raise ConfigurationError(
                f"Maven could not resolve the jars of {pom} (exit {result.returncode}; "
                f"`{' '.join(argv)}`):\n{tail}",
                hint="check that Maven Central (or your ~/.m2/settings.xml mirror) is reachable, "
                     "or set KMQ_BOOTSTRAP_SERVERS to an existing Kafka cluster")
        (staging / _STAMP).write_text(pom.read_text())
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def find_java() -> Path:
    """The ``java`` executable kmq starts brokers with: ``$KMQ_JAVA``, ``$JAVA_HOME/bin/java``,
    or ``java`` on PATH, checked to be Java :data:`MIN_JAVA_MAJOR` or newer.

    Raises:
        ConfigurationError: no Java found, or it is older than 17; the hint names the fix.
    """
    explicit = os.environ.get("KMQ_JAVA")
    java_home = os.environ.get("JAVA_HOME")
    candidate = (explicit or (str(Path(java_home) / "bin" / "java") if java_home else None)
                 or shutil.which("java"))
    if not candidate or not Path(candidate).is_file():
        raise ConfigurationError(f"no Java runtime found (KMQ_JAVA={explicit!r}, "
                                 f"JAVA_HOME={java_home!r}, no java on PATH)", hint=_NO_JAVA_HINT)
    major = java_major_version(Path(candidate))
    if major < MIN_JAVA_MAJOR:
        raise ConfigurationError(f"{candidate} is Java {major}; Apache Kafka 4 and Spark 4 need "
                                 f"Java {MIN_JAVA_MAJOR} or newer", hint=_NO_JAVA_HINT)
    return Path(candidate)


def java_major_version(java: Path) -> int:
    """The major version ``java -version`` reports (``17`` for ``openjdk version "17.0.15"``).

    Raises:
        ConfigurationError: the program does not run or prints no version.
    """
    try:
        result = subprocess.run([str(java), "-version"], capture_output=True, text=True,
                                timeout=60, check=False)
    except OSError as exc:
        raise ConfigurationError(f"{java} does not run: {exc}", hint=_NO_JAVA_HINT) from exc
    found = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if found is None:
        raise ConfigurationError(f"{java} -version printed no version: {result.stderr.strip()!r}",
                                 hint=_NO_JAVA_HINT)
    major = int(found.group(1))
    # Java 8 and older report "1.8.0_…".
    return int(found.group(2) or 0) if major == 1 else major
