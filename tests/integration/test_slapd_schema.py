"""deploy/ldap (kmq.schema, slapd.conf.template, bootstrap.ldif) on a real OpenLDAP slapd.

MSMQ keeps public queues, queue aliases and distribution lists in Active Directory; kmq keeps them
in LDAP under AD's names. These tests check that the shipped schema loads, that the layout's
names exist in it with the same definitions the embedded store uses, and that slapd's refint
overlay does what MSMQ promises: deleting a queue alias removes it from every distribution list.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import ldap3
import pytest

from facade.directory import (
    Attr,
    ObjectClass,
    alias_dn,
    aliases_dn,
    computer_dn,
    computers_dn,
    distribution_list_dn,
    distribution_lists_dn,
    embedded_schema,
    parse_slapd_schema,
    public_queue_dn,
    queue_manager_dn,
    same_dn,
    schema_path,
    users_dn,
)
from tests.support.slapd import SlapdServer, slapd_available

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(slapd_server: SlapdServer) -> Iterator[ldap3.Connection]:
    """A rootdn connection to the session's throwaway slapd."""
    connection = slapd_server.connect()
    yield connection
    connection.unbind()


def _unique(prefix: str) -> str:
    # The slapd server is shared by the session: give every test its own names.
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _guid() -> str:
    return str(uuid.uuid4())


def _add(conn: ldap3.Connection, dn: str, object_class: str, **attributes: object) -> None:
    ok = conn.add(dn, object_class, attributes)
    assert ok, f"add {dn}: {conn.result}"


def _add_queue_manager(conn: ldap3.Connection, computer: str, base_dn: str) -> None:
    _add(conn, computer_dn(computer, base_dn), ObjectClass.COMPUTER, dNSHostName=f"{computer}.test")
    _add(
        conn, queue_manager_dn(computer, base_dn), ObjectClass.QUEUE_MANAGER, **{Attr.GUID: _guid()}
    )


def _members(conn: ldap3.Connection, dn: str) -> list[str]:
    assert conn.search(dn, "(objectClass=*)", ldap3.BASE, attributes=[Attr.MEMBER]), conn.result
    return [str(value) for value in conn.entries[0][Attr.MEMBER].values]


def test_base_entries_exist(conn: ldap3.Connection, slapd_server: SlapdServer) -> None:
    base = slapd_server.base_dn
    for dn in (
        base,
        computers_dn(base),
        aliases_dn(base),
        distribution_lists_dn(base),
        users_dn(base),
    ):
        assert conn.search(dn, "(objectClass=*)", ldap3.BASE), f"{dn} missing: {conn.result}"


def test_layout_names_match_the_slapd_and_embedded_schemas(slapd_server: SlapdServer) -> None:
    server = ldap3.Server("127.0.0.1", port=slapd_server.port, get_info=ldap3.SCHEMA)
    connection = ldap3.Connection(
        server, user=slapd_server.bind_dn, password=slapd_server.password, auto_bind=True
    )
    try:
        live = server.schema
        mock = embedded_schema()
        for name, value in vars(ObjectClass).items():
            if not name.startswith("_"):
                assert value in live.object_classes, f"object class {value} not in slapd"
        for name, value in vars(Attr).items():
            if not name.startswith("_"):
                assert value in live.attribute_types, f"attribute {value} not in slapd"
        # Every kmq.schema attribute behaves the same (syntax, single-valued) in both backends.
        attribute_types, _ = parse_slapd_schema(schema_path().read_text(encoding="utf-8"))
        assert attribute_types
        for definition in attribute_types:
            name = definition.split("NAME '", 1)[1].split("'", 1)[0]
            assert live.attribute_types[name].syntax == mock.attribute_types[name].syntax, name
            assert (
                live.attribute_types[name].single_value == mock.attribute_types[name].single_value
            )
            assert live.attribute_types[name].oid == mock.attribute_types[name].oid, name
    finally:
        connection.unbind()


def test_deleting_an_alias_removes_it_from_distribution_lists(
    conn: ldap3.Connection, slapd_server: SlapdServer
) -> None:
    base = slapd_server.base_dn
    computer = _unique("host")
    _add_queue_manager(conn, computer, base)
    queue_guid = _guid()
    queue = public_queue_dn(computer, "orders", base)
    _add(
        conn,
        queue,
        ObjectClass.QUEUE,
        **{
            Attr.GUID: queue_guid,
            Attr.LABEL: "Orders (ünïcode)",
            Attr.TRANSACTIONAL: True,
            Attr.BASE_PRIORITY: -5,
            Attr.QUEUE_QUOTA: 1024,
            Attr.MULTICAST_ADDRESS: "234.1.1.1:8001",
        },
    )
    alias = alias_dn(_unique("alias"), base)
    _add(
        conn,
        alias,
        ObjectClass.ALIAS,
        **{Attr.GUID: _guid(), Attr.RECIPIENT_FORMAT_NAME: r"DIRECT=OS:elsewhere\private$\q"},
    )
    dl = distribution_list_dn(_unique("list"), base)
    _add(
        conn, dl, ObjectClass.DISTRIBUTION_LIST, **{Attr.GUID: _guid(), Attr.MEMBER: [queue, alias]}
    )
    assert sorted(_members(conn, dl)) == sorted([queue, alias])

    # PUBLIC= lookup: UUIDMatch ignores the case of the GUID text.
    assert conn.search(base, f"({Attr.GUID}={queue_guid.upper()})", attributes=["*"])
    assert len(conn.entries) == 1 and same_dn(conn.entries[0].entry_dn, queue)
    assert conn.entries[0][Attr.TRANSACTIONAL].value is True
    assert conn.entries[0][Attr.LABEL].value == "Orders (ünïcode)"
    assert conn.entries[0][Attr.BASE_PRIORITY].value == -5

    assert conn.delete(alias), conn.result
    deadline = time.monotonic() + 2.0
    while any(same_dn(member, alias) for member in _members(conn, dl)):
        assert time.monotonic() < deadline, "refint did not remove the deleted alias from member"
        time.sleep(0.005)  # refint runs asynchronously, normally within a millisecond
    assert [same_dn(member, queue) for member in _members(conn, dl)] == [True]


def test_an_empty_distribution_list_is_allowed(
    conn: ldap3.Connection, slapd_server: SlapdServer
) -> None:
    """Unlike groupOfNames, AD's group (an MSMQ distribution list) may have no member."""
    base = slapd_server.base_dn
    alias = alias_dn(_unique("alias"), base)
    _add(
        conn,
        alias,
        ObjectClass.ALIAS,
        **{Attr.GUID: _guid(), Attr.RECIPIENT_FORMAT_NAME: "DIRECT=OS:h\\q"},
    )
    dl = distribution_list_dn(_unique("list"), base)
    _add(conn, dl, ObjectClass.DISTRIBUTION_LIST, **{Attr.GUID: _guid(), Attr.MEMBER: [alias]})
    assert conn.delete(alias), conn.result
    deadline = time.monotonic() + 2.0
    while _members(conn, dl):
        assert time.monotonic() < deadline, "refint did not empty the list"
        time.sleep(0.005)


def test_schema_rejects_missing_guid_and_second_format_name(
    conn: ldap3.Connection, slapd_server: SlapdServer
) -> None:
    base = slapd_server.base_dn
    computer = _unique("host")
    _add_queue_manager(conn, computer, base)
    assert not conn.add(public_queue_dn(computer, "no-guid", base), ObjectClass.QUEUE, {})
    assert conn.result["description"] == "objectClassViolation"

    two_targets = {
        Attr.GUID: _guid(),
        Attr.RECIPIENT_FORMAT_NAME: ["DIRECT=OS:a\\q", "DIRECT=OS:b\\q"],
    }
    assert not conn.add(alias_dn(_unique("alias"), base), ObjectClass.ALIAS, two_targets)
    assert conn.result["description"] in ("constraintViolation", "objectClassViolation")


def test_anonymous_clients_read_but_cannot_write(slapd_server: SlapdServer) -> None:
    anonymous = slapd_server.connect(anonymous=True)
    try:
        assert anonymous.search(computers_dn(slapd_server.base_dn), "(objectClass=*)", ldap3.BASE)
        dl = distribution_list_dn(_unique("list"), slapd_server.base_dn)
        assert not anonymous.add(dl, ObjectClass.DISTRIBUTION_LIST, {Attr.GUID: _guid()})
        assert anonymous.result["description"] in (
            "strongerAuthRequired",
            "insufficientAccessRights",
        )
    finally:
        anonymous.unbind()


def test_bootstrap_loads_under_another_suffix() -> None:
    reason = slapd_available()
    if reason:
        pytest.skip(reason)
    with SlapdServer(base_dn="o=kmq-test") as server:
        connection = server.connect()
        try:
            assert connection.search("o=kmq-test", "(objectClass=organizationalUnit)", ldap3.LEVEL)
            names = sorted(str(entry.entry_dn) for entry in connection.entries)
            assert names == sorted(
                [
                    aliases_dn("o=kmq-test"),
                    computers_dn("o=kmq-test"),
                    distribution_lists_dn("o=kmq-test"),
                    users_dn("o=kmq-test"),
                ]
            )
        finally:
            connection.unbind()
