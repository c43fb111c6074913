"""Unit tests for facade.security.acl: MSMQ security descriptors, rights and distribution-list consent."""

from __future__ import annotations

import functools
import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from facade.security.acl import (
    EVERYONE,
    QUEUE_MANAGER_RIGHTS,
    AccessControlEntry,
    AccessRight,
    ObjectKind,
    SecurityDescriptor,
    may_change_membership,
    require_membership_change,
)
from facade.errors import AccessDenied, InvalidParameter

R = AccessRight
ACE = AccessControlEntry
SD = SecurityDescriptor

SINGLE_BITS = [
    R.DELETE_MESSAGE, R.PEEK_MESSAGE, R.WRITE_MESSAGE, R.DELETE_JOURNAL_MESSAGE,
    R.SET_PROPERTIES, R.GET_PROPERTIES, R.DELETE, R.GET_PERMISSIONS, R.CHANGE_PERMISSIONS,
    R.TAKE_OWNERSHIP, R.ADD_REMOVE_ELEMENT, R.ADD_REMOVE_SELF, R.CREATE_QUEUE, R.QUEUE_STATUS,
    R.TEST,
]
OWNER_IMPLICIT = R.GET_PERMISSIONS | R.CHANGE_PERMISSIONS


# --------------------------------------------------------------------------------------------
# AccessRight
# --------------------------------------------------------------------------------------------


def test_values_are_msmq_mqsec_values() -> None:
    assert [int(r) for r in SINGLE_BITS] == [
        0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000,
        0x400000, 0x800000, 0x1000000,
    ]
    assert R.RECEIVE_MESSAGE == R.DELETE_MESSAGE | R.PEEK_MESSAGE == 0x3
    assert R.RECEIVE_JOURNAL_MESSAGE == R.DELETE_JOURNAL_MESSAGE | R.PEEK_MESSAGE == 0xA
    assert R.GENERIC_READ == 0x2002B
    assert R.GENERIC_WRITE == R.WRITE_MESSAGE | R.GET_PROPERTIES | R.GET_PERMISSIONS == 0x20024
    assert R.GENERIC_ALL == 0xF003F
    assert R.FULL_CONTROL == R.GENERIC_ALL | R.ADD_REMOVE_ELEMENT | R.ADD_REMOVE_SELF == 0x3F003F
    assert QUEUE_MANAGER_RIGHTS == R.CREATE_QUEUE | R.QUEUE_STATUS | R.TEST == 0x1C00000
    assert R.SEND_TO is R.WRITE_MESSAGE
    # Seed 004's queue-manager rights: MSMQ reuses queue bits for two of them.
    assert R.CONTROL is R.CHANGE_PERMISSIONS and R.MANAGE is R.SET_PROPERTIES
    assert R.parse("control|manage|create_queue") == (
        R.CHANGE_PERMISSIONS | R.SET_PROPERTIES | R.CREATE_QUEUE)


def test_names_decompose_in_msmq_order() -> None:
    assert R.RECEIVE_MESSAGE.names() == ["DELETE_MESSAGE", "PEEK_MESSAGE"]
    assert (R.ADD_REMOVE_SELF | R.WRITE_MESSAGE).names() == ["WRITE_MESSAGE", "ADD_REMOVE_SELF"]
    assert R.SEND_TO.names() == ["WRITE_MESSAGE"]
    assert (R.FULL_CONTROL | QUEUE_MANAGER_RIGHTS).names() == [r.name for r in SINGLE_BITS]
    assert R(0).names() == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("WRITE_MESSAGE|get_properties", R.WRITE_MESSAGE | R.GET_PROPERTIES),
        ("send_to", R.WRITE_MESSAGE),
        ("Send To", R.WRITE_MESSAGE),
        ("0x4", R.WRITE_MESSAGE),
        ("36", R.WRITE_MESSAGE | R.GET_PROPERTIES),
        ("peek_message, delete_message", R.RECEIVE_MESSAGE),
        (" write_message + PEEK_MESSAGE ", R.WRITE_MESSAGE | R.PEEK_MESSAGE),
        ("generic_read", R.GENERIC_READ),
        ("full_control", R.FULL_CONTROL),
        ("MQSEC_DELETE_QUEUE", R.DELETE),
        ("get_queue_properties", R.GET_PROPERTIES),
        ("add_remove_container", R.ADD_REMOVE_SELF),
        ("add-remove-element", R.ADD_REMOVE_ELEMENT),
    ],
)
def test_parse(text: str, expected: AccessRight) -> None:
    assert R.parse(text) == expected
    assert isinstance(R.parse(text), AccessRight)


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("WRITE_MESSAGE|write_mesage", "write_mesage"),
        ("read", "read"),
        ("0x400", "0x400"),
        ("0xZZ", "0xZZ"),
        ("-4", "-4"),
    ],
)
def test_parse_rejects_unknown_words_naming_them(text: str, bad: str) -> None:
    with pytest.raises(InvalidParameter) as excinfo:
        R.parse(text)
    assert repr(bad) in str(excinfo.value)


def test_parse_error_lists_valid_names() -> None:
    with pytest.raises(InvalidParameter) as excinfo:
        R.parse("nope")
    assert "WRITE_MESSAGE" in str(excinfo.value) and "SEND_TO" in str(excinfo.value)


@pytest.mark.parametrize("text", ["", "  ", "|,+", "0"])
def test_parse_rejects_empty(text: str) -> None:
    with pytest.raises(InvalidParameter, match="no access right"):
        R.parse(text)


def test_parse_rejects_non_text() -> None:
    with pytest.raises(InvalidParameter):
        R.parse(4)  # type: ignore[arg-type]


rights_st = st.sets(st.sampled_from(SINGLE_BITS), min_size=1).map(
    lambda bits: functools.reduce(operator.or_, bits)
)


@given(rights_st)
def test_parse_names_round_trip(rights: AccessRight) -> None:
    assert R.parse("|".join(rights.names())) == rights
    assert R.parse(",".join(name.lower() for name in rights.names())) == rights
    assert R.parse(hex(rights)) == rights


# --------------------------------------------------------------------------------------------
# AccessControlEntry
# --------------------------------------------------------------------------------------------


def test_ace_text_forms() -> None:
    ace = ACE(True, "alice", R.WRITE_MESSAGE | R.GET_PROPERTIES)
    assert ace.to_text() == "allow;alice;WRITE_MESSAGE|GET_PROPERTIES"
    assert ACE(False, EVERYONE, R.ADD_REMOVE_SELF).to_text() == "deny;Everyone;ADD_REMOVE_SELF"
    assert ACE.from_text("allow;alice;WRITE_MESSAGE|GET_PROPERTIES") == ace
    assert ACE.from_text(" ALLOW ; alice ; get_properties|send_to ") == ace
    assert ACE.from_text("Deny;Everyone;add_remove_self") == ACE(
        False, "Everyone", R.ADD_REMOVE_SELF
    )
    assert str(ace) == ace.to_text()


def test_ace_normalizes_principal_and_int_rights() -> None:
    ace = ACE(True, "  alice ", 0x4)  # type: ignore[arg-type]
    assert ace.principal == "alice"
    assert ace.rights is R.WRITE_MESSAGE


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("allow;alice", "allow;alice"),
        ("allow;a;b;WRITE_MESSAGE", "allow;a;b;WRITE_MESSAGE"),
        ("", "has 1 field(s)"),
        ("permit;alice;WRITE_MESSAGE", "permit"),
        ("allow;alice;WRITE_MESAGE", "WRITE_MESAGE"),
        ("allow;alice;", "no access right"),
        ("allow; ;WRITE_MESSAGE", "principal is empty"),
        ("deny;al\x00ice;WRITE_MESSAGE", "control character"),
    ],
)
def test_ace_from_text_errors(text: str, bad: str) -> None:
    with pytest.raises(InvalidParameter) as excinfo:
        ACE.from_text(text)
    assert bad in str(excinfo.value)
    assert excinfo.value.hint


@pytest.mark.parametrize(
    ("principal", "bad"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("ali;ce", "'ali;ce'"),
        ("al\nice", "control character"),
        ("bob\x7f", "control character"),
        (None, "NoneType"),
    ],
)
def test_invalid_principals(principal: str, bad: str) -> None:
    for build in (
        lambda: ACE(True, principal, R.WRITE_MESSAGE),
        lambda: SD(principal),
        lambda: SD("alice").grant(principal, R.WRITE_MESSAGE),
        lambda: SD("alice").deny(principal, R.WRITE_MESSAGE),
        lambda: SD("alice").revoke(principal),
        lambda: SD("alice").granted(principal),
        lambda: SD("alice").with_owner(principal),
    ):
        with pytest.raises(InvalidParameter) as excinfo:
            build()
        assert bad in str(excinfo.value)


def test_ace_rejects_bad_rights_and_flag() -> None:
    with pytest.raises(InvalidParameter, match="names no right"):
        ACE(True, "alice", R(0))
    with pytest.raises(InvalidParameter, match="not access rights"):
        ACE(True, "alice", 0x400)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="AccessRight"):
        ACE(True, "alice", "WRITE_MESSAGE")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="allow"):
        ACE(1, "alice", R.WRITE_MESSAGE)  # type: ignore[arg-type]


def test_ace_matches() -> None:
    ace = ACE(True, "Alice", R.WRITE_MESSAGE)
    assert ace.matches("alice") and ace.matches("ALICE") and ace.matches("Alice")
    assert not ace.matches("bob")
    everyone = ACE(True, "everyONE", R.WRITE_MESSAGE)
    assert everyone.matches("bob") and everyone.matches("alice")


# --------------------------------------------------------------------------------------------
# SecurityDescriptor: evaluation
# --------------------------------------------------------------------------------------------


def test_deny_beats_allow_in_any_order() -> None:
    allow = ACE(True, "alice", R.WRITE_MESSAGE | R.PEEK_MESSAGE)
    deny = ACE(False, "alice", R.WRITE_MESSAGE)
    for entries in ((allow, deny), (deny, allow)):
        sd = SD("owner", entries)
        assert sd.granted("alice") == R.PEEK_MESSAGE
        assert not sd.allows("alice", R.WRITE_MESSAGE)
        assert sd.allows("alice", R.PEEK_MESSAGE)


def test_everyone_deny_beats_personal_allow_and_vice_versa() -> None:
    sd = SD("owner", (ACE(True, "alice", R.FULL_CONTROL), ACE(False, EVERYONE, R.DELETE)))
    assert sd.granted("alice") == R.FULL_CONTROL & ~R.DELETE
    sd = SD("owner", (ACE(False, "alice", R.WRITE_MESSAGE), ACE(True, EVERYONE, R.GENERIC_WRITE)))
    assert not sd.allows("alice", R.WRITE_MESSAGE)
    assert sd.allows("bob", R.WRITE_MESSAGE)


def test_allows_are_a_union() -> None:
    sd = SD("owner", (ACE(True, "alice", R.PEEK_MESSAGE), ACE(True, EVERYONE, R.WRITE_MESSAGE)))
    assert sd.granted("alice") == R.PEEK_MESSAGE | R.WRITE_MESSAGE
    assert sd.granted("bob") == R.WRITE_MESSAGE
    assert sd.allows("alice", R.PEEK_MESSAGE | R.WRITE_MESSAGE)
    assert not sd.allows("bob", R.PEEK_MESSAGE | R.WRITE_MESSAGE)
    assert sd.allows("bob", R(0))


def test_owner_implicit_rights_even_with_no_entry_and_despite_deny() -> None:
    sd = SD("Alice")
    assert sd.granted("alice") == OWNER_IMPLICIT
    assert sd.granted("bob") == R(0)
    sd = sd.deny("alice", R.FULL_CONTROL).deny(EVERYONE, R.FULL_CONTROL)
    assert sd.granted("ALICE") == OWNER_IMPLICIT
    assert not sd.allows("alice", R.WRITE_MESSAGE)
    assert sd.with_owner("bob").granted("alice") == R(0)
    assert sd.with_owner("bob").granted("bob") == OWNER_IMPLICIT


def test_case_insensitive_principals() -> None:
    sd = SD("owner").grant("Alice", R.WRITE_MESSAGE).deny("ALICE", R.WRITE_MESSAGE)
    assert sd.granted("alice") == R(0)
    sd = SD("owner").grant("ALICE", R.PEEK_MESSAGE)
    assert sd.allows("alice", R.PEEK_MESSAGE) and sd.allows(" aLiCe ", R.PEEK_MESSAGE)


def test_require() -> None:
    sd = SD("bob").grant(EVERYONE, R.WRITE_MESSAGE)
    sd.require("alice", R.WRITE_MESSAGE, "DIRECT=OS:host\\q")
    with pytest.raises(AccessDenied) as excinfo:
        sd.require("alice", R.WRITE_MESSAGE | R.RECEIVE_MESSAGE, "DIRECT=OS:host\\q")
    error = excinfo.value
    assert error.message == "'alice' lacks DELETE_MESSAGE|PEEK_MESSAGE on DIRECT=OS:host\\q"
    assert error.queue == "DIRECT=OS:host\\q"
    assert error.hint is not None and error.hint.startswith("ask the owner (bob) to grant")
    assert error.error_code == "MQ_ERROR_ACCESS_DENIED"
    assert isinstance(error, PermissionError)


def test_require_names_a_deny_entry() -> None:
    sd = SD("bob").grant(EVERYONE, R.WRITE_MESSAGE).deny("alice", R.WRITE_MESSAGE)
    with pytest.raises(AccessDenied) as excinfo:
        sd.require("alice", R.WRITE_MESSAGE, "q")
    assert "deny" in (excinfo.value.hint or "") and "(bob)" in (excinfo.value.hint or "")


# --------------------------------------------------------------------------------------------
# SecurityDescriptor: editing and storage
# --------------------------------------------------------------------------------------------


def test_grant_merges_into_existing_allow_entry() -> None:
    sd = SD("o").grant("alice", R.WRITE_MESSAGE).grant("bob", R.PEEK_MESSAGE)
    sd = sd.grant("ALICE", R.GET_PROPERTIES)
    assert sd.entries == (
        ACE(True, "alice", R.WRITE_MESSAGE | R.GET_PROPERTIES),
        ACE(True, "bob", R.PEEK_MESSAGE),
    )
    assert sd.grant("carol", R(0)) is sd


def test_deny_merges_into_existing_deny_entry_not_the_allow() -> None:
    sd = SD("o").grant("alice", R.WRITE_MESSAGE).deny("alice", R.PEEK_MESSAGE)
    sd = sd.deny("alice", R.DELETE)
    assert sd.entries == (
        ACE(True, "alice", R.WRITE_MESSAGE),
        ACE(False, "alice", R.PEEK_MESSAGE | R.DELETE),
    )


def test_revoke_drops_every_entry_of_the_principal_only() -> None:
    sd = (
        SD("o").grant("alice", R.WRITE_MESSAGE).deny("Alice", R.PEEK_MESSAGE)
        .grant(EVERYONE, R.GET_PROPERTIES)
    )
    revoked = sd.revoke("ALICE")
    assert revoked.entries == (ACE(True, EVERYONE, R.GET_PROPERTIES),)
    assert revoked.granted("alice") == R.GET_PROPERTIES
    assert sd.revoke("nobody") == sd
    assert sd == SD("o").grant("alice", R.WRITE_MESSAGE).deny("Alice", R.PEEK_MESSAGE).grant(
        EVERYONE, R.GET_PROPERTIES
    )  # unchanged: descriptors are immutable


def test_values_and_dict() -> None:
    sd = SD("alice").grant("bob", R.RECEIVE_MESSAGE).deny(EVERYONE, R.ADD_REMOVE_SELF)
    assert sd.to_values() == [
        "allow;bob;DELETE_MESSAGE|PEEK_MESSAGE",
        "deny;Everyone;ADD_REMOVE_SELF",
    ]
    assert SD.from_values("alice", sd.to_values()) == sd
    assert SD.from_values("alice", [v.encode() for v in sd.to_values()]) == sd  # type: ignore[misc]
    assert sd.to_dict() == {
        "owner": "alice",
        "entries": [
            {"allow": True, "principal": "bob", "rights": ["DELETE_MESSAGE", "PEEK_MESSAGE"]},
            {"allow": False, "principal": "Everyone", "rights": ["ADD_REMOVE_SELF"]},
        ],
    }
    assert SD("alice").to_values() == []


def test_from_values_rejects_bad_entries() -> None:
    with pytest.raises(InvalidParameter, match="bogus"):
        SD.from_values("alice", ["allow;bob;WRITE_MESSAGE", "allow;bob;bogus"])
    with pytest.raises(InvalidParameter, match="owner is empty"):
        SD.from_values("", [])


def test_entries_are_a_tuple_of_entries() -> None:
    sd = SD("o", [ACE(True, "a", R.WRITE_MESSAGE)])  # type: ignore[arg-type]
    assert isinstance(sd.entries, tuple)
    with pytest.raises(InvalidParameter):
        SD("o", ("allow;a;WRITE_MESSAGE",))  # type: ignore[arg-type]


principal_st = (
    st.text(
        st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters=";"),
        min_size=1,
        max_size=16,
    )
    .map(str.strip)
    .filter(bool)
)
entry_st = st.builds(ACE, st.booleans(), principal_st, rights_st)
descriptor_st = st.builds(SD, principal_st, st.lists(entry_st, max_size=6).map(tuple))


@given(descriptor_st)
def test_values_round_trip(sd: SecurityDescriptor) -> None:
    assert SD.from_values(sd.owner, sd.to_values()) == sd
    for entry in sd.entries:
        assert ACE.from_text(entry.to_text()) == entry


@given(descriptor_st, st.sampled_from(["alice", "BOB", EVERYONE]), st.randoms())
def test_evaluation_ignores_order(sd: SecurityDescriptor, caller: str, rnd) -> None:
    shuffled = list(sd.entries)
    rnd.shuffle(shuffled)
    assert SD(sd.owner, tuple(shuffled)).granted(caller) == sd.granted(caller)
    allowed = denied = R(0)
    for entry in sd.entries:
        if entry.matches(caller):
            if entry.allow:
                allowed |= entry.rights
            else:
                denied |= entry.rights
    implicit = OWNER_IMPLICIT if sd.owner.casefold() == caller.casefold() else R(0)
    assert sd.granted(caller) == (allowed & ~denied) | implicit


# --------------------------------------------------------------------------------------------
# Defaults per kind (seed 000) and distribution-list membership consent
# --------------------------------------------------------------------------------------------


def test_default_queue_and_alias() -> None:
    for kind in (ObjectKind.QUEUE, ObjectKind.ALIAS):
        sd = SD.default_for(kind, "alice")
        assert sd.owner == "alice"
        assert sd.granted("alice") == R.FULL_CONTROL
        assert sd.granted("bob") == R.WRITE_MESSAGE | R.GET_PROPERTIES | R.GET_PERMISSIONS
        assert not sd.allows("bob", R.RECEIVE_MESSAGE)
        assert not sd.allows("bob", R.ADD_REMOVE_SELF)  # the owner's consent, not everyone's


def test_default_distribution_list() -> None:
    sd = SD.default_for(ObjectKind.DISTRIBUTION_LIST, "alice")
    assert sd.granted("alice") == R.FULL_CONTROL
    assert sd.allows("bob", R.SEND_TO)  # Send To: everyone by default
    assert not sd.allows("bob", R.ADD_REMOVE_SELF)  # only the owner may nest the list
    assert not sd.allows("bob", R.ADD_REMOVE_ELEMENT)  # only the owner changes its members
    assert sd.granted("bob") == R.SEND_TO | R.GET_PROPERTIES | R.GET_PERMISSIONS


def test_default_queue_manager() -> None:
    sd = SD.default_for(ObjectKind.QUEUE_MANAGER, "admin")
    assert sd.granted("admin") == R.FULL_CONTROL | QUEUE_MANAGER_RIGHTS
    assert sd.granted("bob") == (R.CREATE_QUEUE | R.QUEUE_STATUS | R.TEST | R.GET_PROPERTIES
                                 | R.GET_PERMISSIONS | R.PEEK_MESSAGE)
    assert not sd.allows("bob", R.CONTROL | R.MANAGE)


def test_default_rejects_unknown_kind() -> None:
    with pytest.raises(InvalidParameter):
        SD.default_for("queue", "alice")  # type: ignore[arg-type]


def test_by_default_only_the_owners_change_a_membership() -> None:
    dl = SD.default_for(ObjectKind.DISTRIBUTION_LIST, "alice")
    queue = SD.default_for(ObjectKind.QUEUE, "bob")
    alias = SD.default_for(ObjectKind.ALIAS, "bob")
    mine = SD.default_for(ObjectKind.QUEUE, "alice")
    # alice adds her own queue to her own list; bob's queue and alias need his consent.
    assert may_change_membership(dl, mine, "alice", adding=True)
    for member in (queue, alias):
        assert not may_change_membership(dl, member, "alice", adding=True)
        assert may_change_membership(dl, member.grant("alice", R.ADD_REMOVE_SELF), "alice",
                                     adding=True)
        # Either owner may take it out again: alice (the list) or bob (the member).
        assert may_change_membership(dl, member, "alice", adding=False)
        assert may_change_membership(dl, member, "bob", adding=False)
    # A stranger may neither add nor remove (MSMQ's default would let carol remove it).
    assert not may_change_membership(dl, queue, "carol", adding=True)
    assert not may_change_membership(dl, queue, "carol", adding=False)
    assert not may_change_membership(dl, mine, "carol", adding=False)
    # A queue whose owner consents to everyone, in a list everyone may edit: anyone adds it.
    open_dl = dl.grant(EVERYONE, R.ADD_REMOVE_ELEMENT)
    assert may_change_membership(open_dl, queue.grant(EVERYONE, R.ADD_REMOVE_SELF), "carol",
                                 adding=True)


def test_only_the_owner_can_add_a_list_into_another_list() -> None:
    open_dl1 = SD.default_for(ObjectKind.DISTRIBUTION_LIST, "alice").grant(
        EVERYONE, R.ADD_REMOVE_ELEMENT
    )
    dl2 = SD.default_for(ObjectKind.DISTRIBUTION_LIST, "bob")
    assert may_change_membership(open_dl1, dl2, "bob", adding=True)  # bob owns DL2
    assert not may_change_membership(open_dl1, dl2, "carol", adding=True)
    assert not may_change_membership(open_dl1, dl2, "alice", adding=True)  # DL2 is not hers
    with pytest.raises(AccessDenied) as excinfo:
        require_membership_change(
            open_dl1, dl2, "carol", adding=True, container_name="DL1", member_name="DL2"
        )
    message = str(excinfo.value)
    assert "ADD_REMOVE_SELF on the member DL2" in message
    assert "ADD_REMOVE_ELEMENT" not in excinfo.value.message  # DL1 agreed
    assert "(bob)" in (excinfo.value.hint or "")


@pytest.mark.parametrize(
    ("element_on_dl1", "container_on_dl2", "may_add", "may_remove"),
    [
        (True, True, True, True),
        (True, False, False, True),
        (False, True, False, True),
        (False, False, False, False),
    ],
)
def test_seed_dl1_dl2_example(
    element_on_dl1: bool, container_on_dl2: bool, may_add: bool, may_remove: bool
) -> None:
    """Seed 000: to insert DL2 into DL1 the user needs Add/Remove-Element on DL1 and
    Add/Remove-Container on DL2; to remove DL2 from DL1 only one of them."""
    dl1 = SD.default_for(ObjectKind.DISTRIBUTION_LIST, "owner1")
    dl2 = SD.default_for(ObjectKind.DISTRIBUTION_LIST, "owner2")
    if element_on_dl1:
        dl1 = dl1.grant("user", R.ADD_REMOVE_ELEMENT)
    if container_on_dl2:
        dl2 = dl2.grant("user", R.ADD_REMOVE_SELF)
    assert may_change_membership(dl1, dl2, "user", adding=True) is may_add
    assert may_change_membership(dl1, dl2, "user", adding=False) is may_remove

    for adding, allowed in ((True, may_add), (False, may_remove)):
        def change(adding: bool = adding) -> None:
            require_membership_change(
                dl1, dl2, "user", adding=adding, container_name="DL1", member_name="DL2"
            )

        if allowed:
            change()
            continue
        with pytest.raises(AccessDenied) as excinfo:
            change()
        error = excinfo.value
        assert error.queue == "DL1"
        verb = "add DL2 to DL1" if adding else "remove DL2 from DL1"
        assert verb in error.message
        assert ("ADD_REMOVE_ELEMENT on the list DL1" in error.message) is not element_on_dl1
        assert ("ADD_REMOVE_SELF on the member DL2" in error.message) is not container_on_dl2
        hint = error.hint or ""
        assert ("(owner1)" in hint) is not element_on_dl1
        assert ("(owner2)" in hint) is not container_on_dl2


def test_deny_refuses_membership_consent() -> None:
    queue = (SD.default_for(ObjectKind.QUEUE, "bob").grant(EVERYONE, R.ADD_REMOVE_SELF)
             .deny(EVERYONE, R.ADD_REMOVE_SELF))
    dl = SD.default_for(ObjectKind.DISTRIBUTION_LIST, "alice")
    assert not may_change_membership(dl, queue, "alice", adding=True)
    assert may_change_membership(dl, queue, "alice", adding=False)
