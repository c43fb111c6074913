"""The directory suite runs once per backend: the embedded store and a real slapd."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import ldap3
import pytest

from facade.config import DirectorySettings, KmqConfig
from facade.directory import Directory, aliases_dn, computers_dn, distribution_lists_dn, open_store


@pytest.fixture
def directory(directory_settings: DirectorySettings, tmp_path: Path) -> Iterator[Directory]:
    """A Directory for principal ``alice`` with a published queue manager ``qm1``; empty after."""
    config = KmqConfig.load(environ={}, home=tmp_path, queue_manager="qm1",
                            directory=directory_settings)
    store = open_store(config)
    store.initialize()
    directory = Directory(store, "alice", local_machine="qm1")
    directory.publish_queue_manager("qm1", uuid.uuid4())
    try:
        yield directory
    finally:
        _wipe(directory)
        directory.close()


def _wipe(directory: Directory) -> None:
    """Delete every object below the containers (the slapd server is shared by the session)."""
    base = directory.base_dn
    with directory.store.write() as conn:
        for container in (distribution_lists_dn(base), aliases_dn(base), computers_dn(base)):
            conn.search(container, "(objectClass=*)", ldap3.SUBTREE, attributes=["cn"])
            children = [e["dn"] for e in conn.response if e.get("type") == "searchResEntry"]
            # Deepest first: a queue before its queue manager before its computer.
            for dn in sorted(children, key=lambda d: -d.count(",")):
                if dn.lower() != container.lower():
                    conn.delete(dn)


@pytest.fixture
def as_bob(directory: Directory) -> Directory:
    """The same directory seen by another principal, ``bob``."""
    return Directory(directory.store, "bob", local_machine="qm1")
