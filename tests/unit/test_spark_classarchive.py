"""The class-data archive of local Spark sessions: named by this machine's Java and pyspark,
given to the JVM only once it exists (no JVM started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_connector import classarchive


def test_the_archive_is_given_to_the_jvm_only_once_it_exists(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KMQ_JAR_CACHE", str(tmp_path))
    path = classarchive.archive_path()
    assert path.parent == tmp_path / classarchive.ARCHIVE_DIR and path.suffix == ".jsa"
    assert classarchive.java_options() == []
    path.parent.mkdir()
    path.write_bytes(b"archive")
    options = classarchive.java_options()
    assert options[0] == f"-XX:SharedArchiveFile={path}"
    # HotSpot's warnings must not reach stdout, where `kmq demo --json` prints.
    assert "-Xlog:all=warning:stderr:uptime,level,tags" in options


def test_another_java_gets_another_archive(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("KMQ_JAR_CACHE", str(tmp_path))
    mine = classarchive.archive_path()
    other = tmp_path / "jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert classarchive.archive_path() != mine
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "none"))
    assert classarchive.java_options() == []  # no java: Spark reports that itself
