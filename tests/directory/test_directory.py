"""Seed 000 and 001 as tests of the directory: lists, aliases, expansion, permissions, locate.

Each test runs against the embedded store and a real slapd (see ``directory_settings``).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import ldap3
import pytest

from facade.security.acl import AccessRight
from facade.config import DirectorySettings
from facade.directory import Directory, EmbeddedDirectoryStore, PublicQueueEntry
from facade.errors import (
    AccessDenied,
    DirectoryObjectNotFound,
    FormatNameError,
    InvalidParameter,
    QueueExists,
)


def _queue(directory: Directory, name: str, **properties: object) -> PublicQueueEntry:
    return directory.create_public_queue(
        PublicQueueEntry(uuid.uuid4(), "qm1", name, **properties))  # type: ignore[arg-type]


def _expanded(directory: Directory, reference: str) -> list[str]:
    return [r.format_name for r in directory.expand(reference)]


def test_nested_lists_duplicates_and_cycles_give_one_copy(directory: Directory) -> None:
    # Seed 000: D1 = {Q1, D2}; D2 = {Q1, D1}: the second reference to Q1 or D1 is ignored.
    q1 = _queue(directory, "q1")
    directory.create_distribution_list("D1")
    directory.create_distribution_list("D2")
    assert directory.add_member("D1", q1.format_name)
    assert directory.add_member("D1", "dl:D2")
    assert directory.add_member("D2", r"qm1\q1")
    assert directory.add_member("D2", "dl:D1")
    assert _expanded(directory, "D1") == [q1.format_name]
    assert _expanded(directory, "D2") == [q1.format_name]


def test_deep_nesting_expands_depth_first_in_member_order(directory: Directory) -> None:
    queues = [_queue(directory, f"n{i}") for i in range(4)]
    for name in ("top", "mid", "leaf"):
        directory.create_distribution_list(name)
    directory.add_member("leaf", queues[3].format_name)
    directory.add_member("mid", queues[1].format_name)
    directory.add_member("mid", "dl:leaf")
    directory.add_member("top", queues[0].format_name)
    directory.add_member("top", "dl:mid")
    directory.add_member("top", queues[2].format_name)
    directory.add_member("top", queues[3].format_name)  # also reached through mid -> leaf
    assert _expanded(directory, "top") == [q.format_name for q in
                                           (queues[0], queues[1], queues[3], queues[2])]


def test_membership_is_read_at_expansion_time(directory: Directory) -> None:
    q1, q2 = _queue(directory, "dyn1"), _queue(directory, "dyn2")
    directory.create_distribution_list("L")
    directory.add_member("L", q1.format_name)
    assert _expanded(directory, "L") == [q1.format_name]
    directory.add_member("L", q2.format_name)
    assert _expanded(directory, "L") == [q1.format_name, q2.format_name]
    assert directory.remove_member("L", q1.format_name)
    assert _expanded(directory, "L") == [q2.format_name]


def test_private_queues_join_only_through_an_alias(directory: Directory) -> None:
    directory.create_distribution_list("L")
    with pytest.raises(InvalidParameter, match="through a queue alias") as caught:
        directory.add_member("L", r"DIRECT=OS:qm1\private$\orders")
    assert "kmq alias create" in str(caught.value)
    alias = directory.create_alias("orders-alias", r"DIRECT=OS:qm1\private$\orders")
    directory.add_member("L", "alias:orders-alias")
    assert _expanded(directory, "L") == [r"DIRECT=OS:qm1\private$\orders"]
    # The alias can be repointed without touching the list.
    directory.set_alias_target("orders-alias", r"DIRECT=OS:qm1\private$\orders2")
    assert _expanded(directory, "L") == [r"DIRECT=OS:qm1\private$\orders2"]
    assert alias.name == "orders-alias"


def test_deleting_an_alias_removes_it_from_every_list(directory: Directory) -> None:
    directory.create_alias("a1", r"DIRECT=OS:qm1\private$\x")
    q = _queue(directory, "kept")
    for name in ("L1", "L2"):
        directory.create_distribution_list(name)
        directory.add_member(name, "alias:a1")
        directory.add_member(name, q.format_name)
    directory.delete_alias("a1")
    for name in ("L1", "L2"):
        assert [m.dn for m in directory.members(name)] == [q.dn]
    with pytest.raises(DirectoryObjectNotFound):
        directory.alias("a1")


def test_deleting_a_queue_or_list_removes_it_from_lists(directory: Directory) -> None:
    q = _queue(directory, "gone")
    directory.create_distribution_list("inner")
    directory.create_distribution_list("outer")
    directory.add_member("outer", q.format_name)
    directory.add_member("outer", "dl:inner")
    directory.delete_public_queue(q.guid)
    directory.delete_distribution_list("inner")
    assert directory.members("outer") == []
    assert _expanded(directory, "outer") == []


def test_alias_targets_must_be_one_sendable_queue(directory: Directory) -> None:
    for bad in (f"DL={uuid.uuid4()}", r"DIRECT=OS:qm1\private$\q;JOURNAL",
                r"DIRECT=OS:qm1\private$\a,DIRECT=OS:qm1\private$\b", "x" * 256,
                "not a format name"):
        with pytest.raises((InvalidParameter, FormatNameError)):
            directory.create_alias("bad", bad)
    directory.create_alias("ok", f"PUBLIC={uuid.uuid4()}")
    with pytest.raises(QueueExists):
        directory.create_alias("OK", r"DIRECT=OS:qm1\private$\q")  # names are case-insensitive


def test_adding_twice_is_a_no_op_and_a_list_cannot_contain_itself(directory: Directory) -> None:
    q = _queue(directory, "twice")
    directory.create_distribution_list("L")
    assert directory.add_member("L", q.format_name) is True
    assert directory.add_member("L", q.format_name) is False
    assert len(directory.members("L")) == 1
    with pytest.raises(InvalidParameter, match="itself"):
        directory.add_member("L", "dl:L")
    assert directory.remove_member("L", "dl:L") is False


def test_dl_format_names_and_domains(directory: Directory) -> None:
    entry = directory.create_distribution_list("Domains")
    assert directory.distribution_list(entry.format_name).name == "Domains"
    assert directory.distribution_list(f"{entry.format_name}@{directory.domain}").guid == entry.guid
    with pytest.raises(DirectoryObjectNotFound, match="domain"):
        directory.distribution_list(f"{entry.format_name}@other.example")
    with pytest.raises(DirectoryObjectNotFound):
        directory.distribution_list(f"DL={uuid.uuid4()}")
    with pytest.raises(DirectoryObjectNotFound):
        directory.distribution_list("no-such-list")


def test_public_queue_lookup_update_and_locate(directory: Directory) -> None:
    kind = uuid.uuid4()
    orders = _queue(directory, "orders", label="Order intake", type_id=kind, journal=True)
    _queue(directory, "billing", label="Billing", transactional=True)
    _queue(directory, "unlabelled")
    assert directory.public_queue(orders.guid).path_name == r"qm1\orders"
    assert directory.find_public_queue(r".\orders").guid == orders.guid
    assert directory.find_public_queue(r"qm1\missing") is None
    assert [q.queue_name for q in directory.locate(label="order*")] == ["orders"]
    assert [q.queue_name for q in directory.locate(label="ORDER INTAKE")] == ["orders"]
    assert [q.queue_name for q in directory.locate(type_id=kind)] == ["orders"]
    assert [q.queue_name for q in directory.locate(transactional=True)] == ["billing"]
    assert [q.queue_name for q in directory.locate(label="")] == ["unlabelled"]
    assert len(directory.locate(queue_manager="qm1")) == 3
    assert directory.locate(queue_manager="nosuchqm") == []
    with pytest.raises(InvalidParameter, match="cannot locate"):
        directory.locate(colour="blue")
    updated = directory.update_public_queue(orders.guid, label="Orders", quota_kb=10, type_id=None)
    assert (updated.label, updated.quota_kb, updated.type_id) == ("Orders", 10, None)
    assert directory.locate(type_id=kind) == []
    with pytest.raises(QueueExists):
        _queue(directory, "orders")
    with pytest.raises(DirectoryObjectNotFound):
        directory.public_queue(uuid.uuid4())


#: Labels with every character an LDAP filter treats specially, and text beyond ASCII.
_SPECIAL_LABELS = {
    "paren": "Orders (EU)",
    "star": "Sale 50*",
    "backslash": r"C:\queues\in",
    "bang": "Hot! now",
    "amp": "R&D",
    "pipe": "this|that",
    "equals": "k=v",
    "nul-like": r"a\00b",
    "unicode": "Zürich Ärger 東京",
}


def _literal(label: str) -> str:
    """The locate pattern matching exactly ``label``: backslash and star quoted."""
    return label.replace("\\", "\\\\").replace("*", "\\*")


def _located(directory: Directory, pattern: str) -> list[str]:
    return [q.queue_name for q in directory.locate(label=pattern)]


def test_locate_labels_with_filter_characters_match_literally(directory: Directory) -> None:
    # Matched literally: "(" in a pattern must not raise LDAPInvalidFilterError (embedded store).
    for name, label in _SPECIAL_LABELS.items():
        _queue(directory, name, label=label)
    _queue(directory, "plain", label="plain")
    assert _located(directory, "Orders (EU*") == ["paren"]
    assert _located(directory, "*(eu)") == ["paren"]
    assert _located(directory, "*)") == ["paren"]
    for name, label in _SPECIAL_LABELS.items():
        assert _located(directory, _literal(label)) == [name], label
        assert _located(directory, _literal(label).upper()) == [name], label
    assert _located(directory, "Sale*") == ["star"]
    assert _located(directory, "Sale 50\\*") == ["star"]
    assert _located(directory, "*\\**") == ["star"]  # contains a literal star
    assert _located(directory, "Sale 5\\*") == []
    assert _located(directory, "C:\\\\*") == ["backslash"]
    assert _located(directory, "*\\\\in") == ["backslash"]
    assert _located(directory, "a\\\\00b") == ["nul-like"]
    assert _located(directory, "ZÜRICH*") == ["unicode"]
    assert _located(directory, "*東京") == ["unicode"]
    assert _located(directory, "*!*") == ["bang"]
    assert _located(directory, "*&*") == ["amp"]
    assert _located(directory, "*|*") == ["pipe"]
    assert _located(directory, "*=*") == ["equals"]
    # The whole label must match: a prefix or suffix alone is not enough.
    assert _located(directory, "Orders") == []
    assert _located(directory, "*EU") == []
    assert _located(directory, "plai") == []


def test_locate_label_injection_matches_only_literal_labels(directory: Directory) -> None:
    for name, label in _SPECIAL_LABELS.items():
        _queue(directory, name, label=label)
    _queue(directory, "unlabelled")
    assert _located(directory, "*)(objectClass=*") == []
    assert _located(directory, "Secret*)(!(cn=x") == []
    assert _located(directory, "*)(|(mSMQLabelEx=*") == []
    assert _located(directory, "\\*)(objectClass=\\*") == []
    _queue(directory, "tricky", label="x)(objectClass=y")
    assert _located(directory, "*)(objectClass=*") == ["tricky"]
    _queue(directory, "literal", label="*)(objectClass=*")
    assert _located(directory, "\\*)(objectClass=\\*") == ["literal"]
    assert _located(directory, "*)(objectClass=*") == ["literal", "tricky"]


def test_locate_wildcards_empty_label_and_bad_patterns(directory: Directory) -> None:
    _queue(directory, "ab", label="a-b")
    _queue(directory, "unlabelled")
    assert _located(directory, "*") == ["ab", "unlabelled"]  # every queue, labelled or not
    assert _located(directory, "**") == ["ab", "unlabelled"]
    assert _located(directory, "") == ["unlabelled"]
    assert _located(directory, "a**b") == ["ab"]
    assert _located(directory, "a*-*b") == ["ab"]
    assert _located(directory, "\\a-b") == ["ab"]  # a backslash quotes any character
    with pytest.raises(InvalidParameter, match="backslash"):
        directory.locate(label="a-b\\")


def test_status_counts_objects(directory: Directory) -> None:
    _queue(directory, "s1")
    directory.create_alias("s-alias", r"DIRECT=OS:qm1\private$\s")
    directory.create_distribution_list("s-list")
    status = directory.status()
    assert status["initialized"] is True
    assert (status["queue_managers"], status["public_queues"], status["aliases"],
            status["distribution_lists"]) == (1, 1, 1, 1)
    assert directory.initialize() == 0


# -- permissions (seed 000, "Distribution list security") ---------------------------------


def test_a_queue_or_alias_joins_another_owners_list_with_its_owners_consent(
        directory: Directory, as_bob: Directory) -> None:
    q = _queue(directory, "alices")  # owned by alice
    directory.create_alias("alices-alias", r"DIRECT=OS:qm1\private$\a")
    as_bob.create_distribution_list("bobs")
    for member in (q.format_name, "alias:alices-alias"):
        with pytest.raises(AccessDenied, match="ADD_REMOVE_SELF on the member") as refused:
            as_bob.add_member("bobs", member)
        assert "(alice)" in (refused.value.hint or "")
        directory.set_security(member, directory.security(member).grant(
            "bob", AccessRight.ADD_REMOVE_SELF))
        assert as_bob.add_member("bobs", member)


def test_a_stranger_cannot_remove_a_member_of_someone_elses_list(directory: Directory) -> None:
    """Seed 000: removing needs the list's element right or the member's self right. Only the
    owners hold them by default, so a third principal removes nothing."""
    as_mallory = Directory(directory.store, "mallory", local_machine="qm1")
    q = _queue(directory, "kept")
    alias = directory.create_alias("kept-alias", r"DIRECT=OS:qm1\private$\k")
    directory.create_distribution_list("alices")
    directory.create_distribution_list("nested")
    for member in (q.format_name, "alias:kept-alias", "dl:nested"):
        directory.add_member("alices", member)
        with pytest.raises(AccessDenied, match="may not remove") as refused:
            as_mallory.remove_member("alices", member)
        assert "ADD_REMOVE_ELEMENT on the list alices" in refused.value.message
        assert "'mallory'" in refused.value.message
    assert [m.name for m in directory.members("alices")] == [
        m.name for m in (q, alias, directory.distribution_list("nested"))]
    assert len(as_mallory.expand("alices")) == 2  # Send To is still everyone's


def test_only_the_owner_may_add_a_list_as_a_member(directory: Directory, as_bob: Directory) -> None:
    # Inserting DL2 into DL1 needs the element right on DL1 and the container right on DL2.
    directory.create_distribution_list("DL2")  # alice's
    as_bob.create_distribution_list("DL1")  # bob's
    with pytest.raises(AccessDenied, match="ADD_REMOVE_SELF"):
        as_bob.add_member("DL1", "dl:DL2")  # bob may change DL1 but DL2 did not consent
    with pytest.raises(AccessDenied, match="ADD_REMOVE_ELEMENT"):
        directory.add_member("DL1", "dl:DL2")  # alice owns DL2 but may not change DL1
    dl1 = as_bob.distribution_list("DL1")
    as_bob.set_security("dl:DL1", dl1.security.grant("alice", AccessRight.ADD_REMOVE_ELEMENT))
    assert directory.add_member("DL1", "dl:DL2")
    # Removal needs only one of the two rights: bob (element right on DL1) may remove DL2.
    as_bob.set_security("dl:DL1", as_bob.security("dl:DL1").revoke("alice"))
    assert as_bob.remove_member("DL1", "dl:DL2")


def test_removal_with_only_the_members_consent(directory: Directory, as_bob: Directory) -> None:
    as_bob.create_distribution_list("bobs")
    q = _queue(directory, "mine")
    directory.set_security(q.format_name, directory.security(q.format_name).grant(
        "bob", AccessRight.ADD_REMOVE_SELF))
    assert as_bob.add_member("bobs", q.format_name)
    # Alice cannot change bob's list, but she owns the queue (ADD_REMOVE_SELF): she may take
    # it out, as the member's side of the membership.
    assert directory.remove_member("bobs", q.format_name)


def test_send_to_is_checked_on_the_list_and_its_top_level_members(directory: Directory,
                                                                   as_bob: Directory) -> None:
    top, nested = _queue(directory, "top-q"), _queue(directory, "nested-q")
    directory.create_distribution_list("child")
    directory.add_member("child", nested.format_name)
    directory.create_distribution_list("parent")
    directory.add_member("parent", top.format_name)
    directory.add_member("parent", "dl:child")
    assert len(as_bob.expand("parent")) == 2
    # A deny on a member of a child list is not checked (MSMQ checks the top level only) ...
    directory.set_security(nested.format_name,
                           directory.security(nested.format_name).deny("bob", AccessRight.SEND_TO))
    assert len(as_bob.expand("parent")) == 2
    # ... but on a top-level member it refuses the whole list.
    directory.set_security(top.format_name,
                           directory.security(top.format_name).deny("bob", AccessRight.SEND_TO))
    with pytest.raises(AccessDenied, match="bob"):
        as_bob.expand("parent")
    assert len(directory.expand("parent")) == 2  # alice is still allowed
    directory.set_security("dl:parent",
                           directory.security("dl:parent").deny("Everyone", AccessRight.SEND_TO))
    with pytest.raises(AccessDenied):
        directory.expand("parent")


def test_only_rights_holders_change_delete_or_repermission(directory: Directory,
                                                            as_bob: Directory) -> None:
    q = _queue(directory, "guarded")
    directory.create_distribution_list("guarded-list")
    directory.create_alias("guarded-alias", r"DIRECT=OS:qm1\private$\g")
    for attempt in (lambda: as_bob.delete_public_queue(q.guid),
                    lambda: as_bob.delete_distribution_list("guarded-list"),
                    lambda: as_bob.delete_alias("guarded-alias"),
                    lambda: as_bob.update_public_queue(q.guid, label="mine now"),
                    lambda: as_bob.set_alias_target("guarded-alias", r"DIRECT=OS:qm1\private$\b"),
                    lambda: as_bob.set_security("dl:guarded-list",
                                                as_bob.security("dl:guarded-list").with_owner("bob"))):
        with pytest.raises(AccessDenied):
            attempt()
    assert directory.public_queue(q.guid).label == ""
    directory.delete_public_queue(q.guid)


# -- expansions validated by the directory's change marker --------------------------------------


def _raw_modify(directory: Directory, settings: DirectorySettings, dn: str,
                changes: dict[str, object]) -> None:
    """Change an entry the way someone outside this kmq process would: a separate LDAP
    connection to slapd (ldapmodify), or another process's store on the embedded file."""
    if settings.is_embedded:
        other = EmbeddedDirectoryStore(Path(settings.url.split(":", 1)[1]),
                                       base_dn=directory.store.base_dn)
        other.open()
        try:
            with other.write() as conn:
                assert conn.modify(dn, changes), conn.result
        finally:
            other.close()
        return
    conn = ldap3.Connection(ldap3.Server(settings.url), user=settings.bind_dn,
                            password=settings.password, auto_bind=True)
    try:
        assert conn.modify(dn, changes), conn.result
    finally:
        conn.unbind()


def test_an_unchanged_list_is_not_read_again(directory: Directory,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    members = [_queue(directory, f"cached{i}") for i in range(3)]
    directory.create_distribution_list("cached")
    for queue in members:
        directory.add_member("cached", queue.format_name)
    assert _expanded(directory, "cached") == [q.format_name for q in members]
    reads: list[str] = []
    original = Directory._by_dn
    monkeypatch.setattr(Directory, "_by_dn",
                        lambda self, conn, dn: reads.append(dn) or original(self, conn, dn))
    assert _expanded(directory, "cached") == [q.format_name for q in members]
    assert reads == []  # validated by the change marker alone
    directory.remove_member("cached", members[0].format_name)
    assert _expanded(directory, "cached") == [q.format_name for q in members[1:]]
    assert reads  # the change was seen, and the list read again


def test_changes_made_outside_kmq_take_effect_at_the_next_expansion(
        directory: Directory, as_bob: Directory, directory_settings: DirectorySettings) -> None:
    kept, dropped = _queue(directory, "outside-kept"), _queue(directory, "outside-dropped")
    directory.create_distribution_list("outside")
    directory.add_member("outside", kept.format_name)
    directory.add_member("outside", dropped.format_name)
    assert len(as_bob.expand("outside")) == 2  # cached now
    # A member removed by a raw LDAP modify (not through kmq) is gone at the next send ...
    _raw_modify(directory, directory_settings, directory.distribution_list("outside").dn,
                {"member": [(ldap3.MODIFY_DELETE, [dropped.dn])]})
    assert [r.format_name for r in as_bob.expand("outside")] == [kept.format_name]
    # ... and so is a Send To right revoked that way.
    denied = directory.security(kept.format_name).deny("bob", AccessRight.SEND_TO)
    _raw_modify(directory, directory_settings, kept.dn,
                {"kmqSecurityDescriptor": [(ldap3.MODIFY_REPLACE, denied.to_values())]})
    with pytest.raises(AccessDenied, match="bob"):
        as_bob.expand("outside")
    assert len(directory.expand("outside")) == 1  # alice is still allowed
