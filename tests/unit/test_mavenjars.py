"""The jar cache (facade.kafka.mavenjars): Maven resolves once, a failure names the fix, Java is checked.

Maven itself is replaced by a small script here (a unit test reaches no registry); the real
resolution runs in every integration test session, which starts Apache Kafka from the cache.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from facade.errors import ConfigurationError
from facade.kafka.localkafka import KAFKA_POM, kafka_version
from facade.kafka.mavenjars import find_java, java_major_version, pom_property, resolve_jars

_FAKE_MVN = """#!{python}
import pathlib, sys
calls = pathlib.Path({calls!r})
calls.write_text(calls.read_text() + " ".join(sys.argv[1:]) + "\\n" if calls.exists() else " ".join(sys.argv[1:]) + "\\n")
if {fail!r}:
    print("[ERROR] Could not transfer artifact org.apache.kafka:kafka_2.13: Connection refused")
    sys.exit(1)
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("-DoutputDirectory="))
pathlib.Path(out, "kafka_2.13-test.jar").write_bytes(b"PK")
"""


def _fake_mvn(tmp_path: Path, fail: bool = False) -> tuple[str, Path]:
    calls = tmp_path / "mvn-calls.txt"
    script = tmp_path / ("mvn-fail" if fail else "mvn")
    script.write_text(_FAKE_MVN.format(python=sys.executable, calls=str(calls), fail=fail))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), calls


def test_the_pom_pins_one_kafka_4_release() -> None:
    assert kafka_version().startswith("4.")
    assert pom_property(KAFKA_POM, "kafka.version") == kafka_version()


def test_jars_are_resolved_once_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_JAR_CACHE", str(tmp_path / "cache"))
    mvn, calls = _fake_mvn(tmp_path)
    first = resolve_jars(KAFKA_POM, maven=mvn)
    assert (first / "kafka_2.13-test.jar").is_file()
    assert first.parent == tmp_path / "cache"
    assert resolve_jars(KAFKA_POM, maven=mvn) == first
    assert len(calls.read_text().splitlines()) == 1, "the second call must use the cache"
    assert "dependency:copy-dependencies" in calls.read_text()


def test_an_unreachable_registry_is_one_clear_error_and_leaves_no_half_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_JAR_CACHE", str(tmp_path / "cache"))
    mvn, _calls = _fake_mvn(tmp_path, fail=True)
    with pytest.raises(ConfigurationError) as caught:
        resolve_jars(KAFKA_POM, maven=mvn)
    assert "Connection refused" in str(caught.value)
    assert "KMQ_BOOTSTRAP_SERVERS" in str(caught.value.hint)
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_no_maven_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_JAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KMQ_MAVEN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigurationError) as caught:
        resolve_jars(KAFKA_POM)
    assert "Maven" in str(caught.value) and "KMQ_BOOTSTRAP_SERVERS" in str(caught.value.hint)


def test_no_java_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KMQ_JAVA", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigurationError) as caught:
        find_java()
    assert "JDK 17" in str(caught.value.hint) and "KMQ_BOOTSTRAP_SERVERS" in str(caught.value.hint)


def test_an_old_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "1.8.0_392"\' >&2\n')
    java.chmod(0o755)
    assert java_major_version(java) == 8
    monkeypatch.setenv("KMQ_JAVA", str(java))
    with pytest.raises(ConfigurationError, match="Java 8"):
        find_java()


def test_this_machines_java_is_17_or_newer() -> None:
    assert java_major_version(find_java()) >= 17
