"""The embedded directory store (MSMQ's directory of public objects in one JSON file) and the
layout helpers it shares with a real LDAP server."""

from __future__ import annotations

import json
import os
import tempfile
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from facade.directory import (
    DEFAULT_BASE_DN,
    Attr,
    EmbeddedDirectoryStore,
    ObjectClass,
    alias_dn,
    aliases_dn,
    bootstrap_entries,
    computer_dn,
    computers_dn,
    distribution_list_dn,
    distribution_lists_dn,
    dn_key,
    embedded_schema,
    is_descendant,
    normalize_dn,
    parent_dn,
    parse_ldif,
    public_queue_dn,
    queue_manager_dn,
    rdn_value,
    rebase_dn,
    same_dn,
    users_dn,
)
from facade.errors import ConfigurationError, DirectoryUnavailable

QUEUE_GUID = "2d0ab4c6-9f1e-4c5a-8b7d-3e2f1a0b9c8d"
QM_GUID = "308fb580-1eb2-11ca-923b-08002b1075a7"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "directory.json"


@pytest.fixture
def store(path: Path):
    with EmbeddedDirectoryStore(path) as opened:
        opened.initialize()
        yield opened


def _add_queue(store: EmbeddedDirectoryStore, name: str = "orders", guid: str = QUEUE_GUID) -> str:
    dn = public_queue_dn("host1", name)
    with store.write() as conn:
        if not conn.search(queue_manager_dn("host1"), "(objectClass=*)", "BASE"):
            assert conn.add(computer_dn("host1"), ObjectClass.COMPUTER, {Attr.DNS_HOST_NAME: "h1"})
            assert conn.add(
                queue_manager_dn("host1"), ObjectClass.QUEUE_MANAGER, {Attr.GUID: QM_GUID}
            )
        attributes = {
            Attr.GUID: guid,
            Attr.LABEL: "Orders (ünïcode)",
            Attr.TRANSACTIONAL: True,
            Attr.BASE_PRIORITY: -5,
            Attr.QUEUE_QUOTA: 4096,
            Attr.SIGN_CERTIFICATES: [b"\x30\x82\xff\x00"],
        }
        assert conn.add(dn, ObjectClass.QUEUE, attributes), conn.result
    return dn


def _find(store: EmbeddedDirectoryStore, ldap_filter: str) -> list:
    with store.read() as conn:
        conn.search(DEFAULT_BASE_DN, ldap_filter, attributes=["*"])
        return list(conn.entries)


# --- persistence ------------------------------------------------------------------------------


def test_entries_survive_a_new_store_instance(store: EmbeddedDirectoryStore, path: Path) -> None:
    dn = _add_queue(store)
    store.close()

    with EmbeddedDirectoryStore(path) as again:
        entries = _find(again, f"({Attr.GUID}={QUEUE_GUID.upper()})")
    assert [entry.entry_dn for entry in entries] == [dn]
    queue = entries[0]
    # Values come back typed by the kmq schema, as from slapd.
    assert queue[Attr.TRANSACTIONAL].value is True
    assert queue[Attr.BASE_PRIORITY].value == -5
    assert queue[Attr.QUEUE_QUOTA].value == 4096
    assert queue[Attr.LABEL].value == "Orders (ünïcode)"
    assert queue[Attr.SIGN_CERTIFICATES].values == [b"\x30\x82\xff\x00"]


def test_file_is_ldap3_dump_format(store: EmbeddedDirectoryStore, path: Path) -> None:
    _add_queue(store)
    document = json.loads(path.read_text(encoding="utf-8"))
    dns = [entry["dn"] for entry in document["entries"]]
    assert dns[0] == DEFAULT_BASE_DN  # parents first
    assert all(set(entry) == {"dn", "raw"} for entry in document["entries"])
    assert "entryDN" not in document["entries"][0]["raw"]


def test_another_instance_sees_changes_on_its_next_read(
    store: EmbeddedDirectoryStore, path: Path
) -> None:
    with EmbeddedDirectoryStore(path) as other:
        assert _find(other, f"(objectClass={ObjectClass.QUEUE})") == []
        _add_queue(store)
        assert len(_find(other, f"(objectClass={ObjectClass.QUEUE})")) == 1
        # ...and a write through the second instance keeps the first one's entry.
        with other.write() as conn:
            assert conn.delete(public_queue_dn("host1", "orders"))
    assert _find(store, f"(objectClass={ObjectClass.QUEUE})") == []


def test_a_read_of_the_version_in_memory_takes_no_process_lock(
    store: EmbeddedDirectoryStore, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    calls: list[int] = []
    real = fcntl.flock
    monkeypatch.setattr(fcntl, "flock", lambda fd, op: (calls.append(op), real(fd, op))[1])
    _find(store, "(objectClass=*)")
    assert calls == []  # unchanged file: one stat, no lock
    with EmbeddedDirectoryStore(path) as other:
        _add_queue(other)
    calls.clear()
    assert len(_find(store, f"(objectClass={ObjectClass.QUEUE})")) == 1  # reloaded, locked
    assert calls == [fcntl.LOCK_EX, fcntl.LOCK_UN]


def test_a_write_nested_in_an_unlocked_read(store: EmbeddedDirectoryStore, path: Path) -> None:
    with store.read():
        _add_queue(store)  # nothing changed since the read began: it takes the lock and saves
    with EmbeddedDirectoryStore(path) as again:
        assert len(_find(again, f"(objectClass={ObjectClass.QUEUE})")) == 1
    with store.read():
        with EmbeddedDirectoryStore(path) as other, other.write() as conn:
            assert conn.delete(public_queue_dn("host1", "orders"))
        # Another process saved after the read began: the read's answers may be stale.
        with pytest.raises(DirectoryUnavailable, match="retry"):
            _add_queue(store, "other", "11111111-2222-3333-4444-555555555555")
    assert _find(store, f"(objectClass={ObjectClass.QUEUE})") == []  # nothing half-done


def test_closing_a_reader_does_not_undo_another_writer(
    store: EmbeddedDirectoryStore, path: Path
) -> None:
    reader = EmbeddedDirectoryStore(path).open()
    _add_queue(store)
    reader.close()  # its in-memory copy is older, but it changed nothing: no save
    with EmbeddedDirectoryStore(path) as again:
        assert len(_find(again, f"(objectClass={ObjectClass.QUEUE})")) == 1


def test_a_failing_write_block_is_rolled_back(store: EmbeddedDirectoryStore, path: Path) -> None:
    before = path.read_bytes()
    target = {Attr.GUID: QUEUE_GUID, Attr.RECIPIENT_FORMAT_NAME: "DIRECT=OS:h\\q"}
    with pytest.raises(RuntimeError, match="boom"), store.write() as conn:
        assert conn.add(alias_dn("a1"), ObjectClass.ALIAS, target)
        raise RuntimeError("boom")
    assert path.read_bytes() == before
    assert _find(store, f"(objectClass={ObjectClass.ALIAS})") == []


# --- failures keep the old file ---------------------------------------------------------------


def test_failed_save_keeps_the_previous_file(
    store: EmbeddedDirectoryStore, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(DirectoryUnavailable) as caught:
        _add_queue(store)
    monkeypatch.undo()

    assert str(path) in str(caught.value) and caught.value.hint
    assert path.read_bytes() == before
    # No temp file is left behind.
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "directory.json",
        "directory.json.lock",
    ]
    # Memory matches the file: the unsaved queue does not exist.
    assert _find(store, f"(objectClass={ObjectClass.QUEUE})") == []


def test_unwritable_directory_keeps_the_previous_file(
    store: EmbeddedDirectoryStore, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chmod cannot make a directory unwritable for root (CI runs as root), so the temp-file
    # creation is made to fail the way it does in a read-only directory.
    before = path.read_bytes()

    def read_only_dir(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path.parent))

    monkeypatch.setattr(tempfile, "mkstemp", read_only_dir)
    with pytest.raises(DirectoryUnavailable, match="cannot save"):
        _add_queue(store)
    monkeypatch.undo()
    assert path.read_bytes() == before


def test_directory_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the directory should be")
    target = blocker / "directory.json"
    with pytest.raises(DirectoryUnavailable) as caught:
        EmbeddedDirectoryStore(target).open()
    assert str(target) in str(caught.value)
    assert "KMQ_HOME" in str(caught.value)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"no entries": []}',
        '{"entries": [{"dn": "cn=x,dc=kmq,dc=local", "raw": {"objectClass": ["noSuchClass"]}}]}',
        '{"entries": [{"dn": "cn=x,dc=kmq,dc=local", "raw": {"noSuchAttribute": ["1"]}}]}',
        b"\xff\xfe garbage",
    ],
    ids=["not-json", "no-entries", "unknown-class", "unknown-attribute", "not-utf8"],
)
def test_corrupt_file_is_reported_and_kept(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    before = path.read_bytes()

    store = EmbeddedDirectoryStore(path)
    with pytest.raises(DirectoryUnavailable) as caught:
        store.open()
    assert str(path) in str(caught.value)
    assert "move it away" in str(caught.value)
    assert caught.value.error_code == "MQ_ERROR_NO_DS"
    assert not store.is_open
    store.close()  # harmless
    assert path.read_bytes() == before


def test_corruption_while_open_is_reported_and_not_overwritten(
    store: EmbeddedDirectoryStore, path: Path
) -> None:
    path.write_text("{broken", encoding="utf-8")
    with pytest.raises(DirectoryUnavailable):
        _find(store, "(objectClass=*)")
    store.close()
    assert path.read_text(encoding="utf-8") == "{broken"


def test_closed_store_says_so(path: Path) -> None:
    store = EmbeddedDirectoryStore(path)
    with pytest.raises(DirectoryUnavailable, match="not open"):
        _ = store.connection


# --- initialize -------------------------------------------------------------------------------


def test_initialize_is_idempotent(path: Path) -> None:
    with EmbeddedDirectoryStore(path) as store:
        assert store.initialize() == 5
        content = path.read_bytes()
        assert store.initialize() == 0
        assert path.read_bytes() == content
        for dn in (
            DEFAULT_BASE_DN,
            computers_dn(),
            aliases_dn(),
            distribution_lists_dn(),
            users_dn(),
        ):
            with store.read() as conn:
                assert conn.search(dn, "(objectClass=*)", "BASE"), dn
    with EmbeddedDirectoryStore(path) as again:
        assert again.initialize() == 0


def test_initialize_recreates_only_missing_entries(store: EmbeddedDirectoryStore) -> None:
    with store.write() as conn:
        assert conn.delete(users_dn())
    assert store.initialize() == 1


def test_initialize_under_another_suffix(path: Path) -> None:
    with EmbeddedDirectoryStore(path, base_dn="O=Corp") as store:
        assert store.initialize() == 5
        with store.read() as conn:
            assert conn.search("o=Corp", "(objectClass=organizationalUnit)", attributes=["ou"])
            assert sorted(e.entry_dn for e in conn.entries) == sorted(
                [
                    computers_dn("o=Corp"),
                    aliases_dn("o=Corp"),
                    distribution_lists_dn("o=Corp"),
                    users_dn("o=Corp"),
                ]
            )


def test_initialize_rejects_an_unusable_suffix(path: Path) -> None:
    with EmbeddedDirectoryStore(path) as store, pytest.raises(ConfigurationError):
        store.initialize("cn=people")


# --- concurrency ------------------------------------------------------------------------------


def test_threads_share_one_store(store: EmbeddedDirectoryStore, path: Path) -> None:
    def add_lists(worker: int) -> None:
        for index in range(20):
            with store.write() as conn:
                dn = distribution_list_dn(f"dl-{worker}-{index}")
                assert conn.add(
                    dn, ObjectClass.DISTRIBUTION_LIST, {Attr.GUID: _guid(worker, index)}
                )

    threads = [threading.Thread(target=add_lists, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with EmbeddedDirectoryStore(path) as again:
        assert len(_find(again, f"(objectClass={ObjectClass.DISTRIBUTION_LIST})")) == 80


def _guid(worker: int, index: int) -> str:
    return f"00000000-0000-4000-8000-{worker:06d}{index:06d}"


def test_processes_do_not_lose_each_others_writes(
    store: EmbeddedDirectoryStore, path: Path
) -> None:
    script = textwrap.dedent(
        """
        import sys
        from facade.directory import EmbeddedDirectoryStore, ObjectClass, Attr, distribution_list_dn
        worker = int(sys.argv[2])
        with EmbeddedDirectoryStore(sys.argv[1]) as store:
            for index in range(15):
                with store.write() as conn:
                    guid = f"00000000-0000-4000-8000-{worker:06d}{index:06d}"
                    dn = distribution_list_dn(f"p{worker}-{index}")
                    ok = conn.add(dn, ObjectClass.DISTRIBUTION_LIST, {Attr.GUID: guid})
                    assert ok, conn.result
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(path), str(worker)])
        for worker in (1, 2, 3)
    ]
    # This process writes at the same time.
    for index in range(15):
        with store.write() as conn:
            dn = distribution_list_dn(f"p0-{index}")
            assert conn.add(dn, ObjectClass.DISTRIBUTION_LIST, {Attr.GUID: _guid(0, index)})
    assert [process.wait(timeout=60) for process in processes] == [0, 0, 0]
    assert len(_find(store, f"(objectClass={ObjectClass.DISTRIBUTION_LIST})")) == 60


# --- schema and layout ------------------------------------------------------------------------


def test_schema_rejects_misspelt_names(store: EmbeddedDirectoryStore) -> None:
    # ldap3 checks names against the kmq schema before "sending", as with a real slapd.
    typo = {Attr.GUID: QUEUE_GUID, "mSMQTransactionl": True}
    with store.write() as conn, pytest.raises(Exception, match="mSMQTransactionl"):
        conn.add(public_queue_dn("host1", "typo"), ObjectClass.QUEUE, typo)
    assert _find(store, f"(objectClass={ObjectClass.QUEUE})") == []


def test_layout_names_are_in_the_embedded_schema() -> None:
    schema = embedded_schema()
    for name, value in vars(ObjectClass).items():
        if not name.startswith("_"):
            assert value in schema.object_classes, value
    for name, value in vars(Attr).items():
        if not name.startswith("_"):
            assert value in schema.attribute_types, value
    assert schema.attribute_types[Attr.RECIPIENT_FORMAT_NAME].single_value
    assert not schema.attribute_types[Attr.MEMBER].single_value


def test_dn_layout() -> None:
    assert queue_manager_dn("Host1") == "cn=msmq,cn=Host1,ou=Computers,dc=kmq,dc=local"
    assert public_queue_dn("h", "a,b") == r"cn=a\,b,cn=msmq,cn=h,ou=Computers,dc=kmq,dc=local"
    assert rdn_value(public_queue_dn("h", "a,b")) == "a,b"
    assert distribution_list_dn("all", "o=corp") == "cn=all,ou=DistributionLists,o=corp"
    with pytest.raises(ConfigurationError):
        public_queue_dn("h", "")


def test_dn_normalization() -> None:
    assert (
        normalize_dn("CN=Orders , OU=Computers,DC=kmq, dc=local")
        == "cn=Orders,ou=Computers,dc=kmq,dc=local"
    )
    assert normalize_dn(r"cn=a\2Cb,dc=x") == r"cn=a\,b,dc=x"
    assert dn_key("CN=Orders,DC=KMQ") == dn_key("cn=orders,dc=kmq")
    assert same_dn(r"cn=a\2cb,dc=x", r"CN=A\,B,DC=X")
    assert parent_dn("cn=a+sn=b,ou=X,dc=y") == "ou=X,dc=y"
    assert is_descendant("cn=q,ou=X,DC=Y", "dc=y") and not is_descendant("dc=y", "dc=y")
    assert not is_descendant("cn=q,dc=xy", "dc=y")
    assert rebase_dn("cn=q,ou=X,dc=kmq,dc=local", DEFAULT_BASE_DN, "o=corp") == "cn=q,ou=X,o=corp"
    with pytest.raises(ConfigurationError):
        normalize_dn("not a dn")


def test_bootstrap_entries_follow_the_ldif() -> None:
    entries = bootstrap_entries()
    assert [dn for dn, _ in entries][:2] == [DEFAULT_BASE_DN, computers_dn()]
    corp = dict(bootstrap_entries("dc=example,dc=com"))
    assert corp["dc=example,dc=com"]["dc"] == ["example"]
    assert "dcObject" in corp["dc=example,dc=com"][Attr.OBJECT_CLASS]


def test_parse_ldif_folding_and_base64() -> None:
    text = (
        "version: 1\n# comment\ndn: cn=a,dc=x\ncn: a\ndescription: long\n  line\nlabel:: w6k=\n\n"
    )
    assert parse_ldif(text) == [
        ("cn=a,dc=x", {"cn": ["a"], "description": ["long line"], "label": ["é"]})
    ]
    with pytest.raises(ConfigurationError):
        parse_ldif("dn: cn=a\nchangetype: delete\n")
