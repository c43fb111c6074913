"""Seeds 000 and 001 end to end: public queues, lists, aliases and multiple-element names on a
real broker, with the embedded directory (and a real slapd where the directory must fail)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from facade.security.acl import AccessRight
from facade.config import DirectorySettings, KmqConfig
from facade.model.envelope import decode_acknowledgment
from facade.errors import (
    AccessDenied,
    DirectoryObjectNotFound,
    DirectoryUnavailable,
    InvalidParameter,
    ReceiveTimeout,
    UnsupportedFormatNameOperation,
)
from facade.manager import QueueManager
from facade.model.message import Acknowledgment, JournalLevel, Message, MessageClass
from tests.support.kafka import BrokerEndpoint
from tests.support.slapd import SlapdServer, slapd_available


def _public(qm: QueueManager, name: str):
    queue = qm.create_queue(rf".\{name}")
    return queue, f"PUBLIC={queue.properties.instance}"


def _private(qm: QueueManager, name: str):
    queue = qm.create_queue(rf".\private$\{name}")
    return queue, rf"DIRECT=OS:{qm.name}\private$\{name}"


def _empty(*queues) -> bool:
    for queue in queues:
        try:
            queue.peek(timeout=0.3)
        except ReceiveTimeout:
            continue
        return False
    return True


def test_public_queue_is_published_opened_by_guid_and_unpublished(qm: QueueManager) -> None:
    queue, public_fn = _public(qm, "orders")
    entry = qm.directory.public_queue(queue.properties.instance)
    assert entry.path_name == rf"{qm.name}\orders"
    qm.open_queue(public_fn).send(Message(body=b"by guid"), wait=True)
    assert queue.receive(timeout=10).body == b"by guid"
    qm.set_properties(public_fn, label="Orders")
    assert [q.queue_name for q in qm.directory.locate(label="orders")] == ["orders"]
    assert qm.open_queue(rf"{public_fn};JOURNAL").destinations[0].read_only
    qm.delete_queue(public_fn)
    with pytest.raises(DirectoryObjectNotFound):
        qm.directory.public_queue(entry.guid)
    with pytest.raises(DirectoryObjectNotFound):
        qm.open_queue(public_fn)


def test_list_with_duplicates_and_cycles_sends_one_copy_per_queue(qm: QueueManager) -> None:
    # Seed 000: D1 = {Q1, D2, alias of a private queue}; D2 = {Q1, D1, Q2}.
    q1, q1_fn = _public(qm, "q1")
    q2, q2_fn = _public(qm, "q2")
    private, private_fn = _private(qm, "p")
    directory = qm.directory
    directory.create_alias("p-alias", private_fn)
    d1 = directory.create_distribution_list("D1")
    directory.create_distribution_list("D2")
    for list_name, member in (("D1", q1_fn), ("D1", "dl:D2"), ("D1", "alias:p-alias"),
                              ("D2", q1_fn), ("D2", "dl:D1"), ("D2", q2_fn)):
        directory.add_member(list_name, member)
    handle = qm.open_queue(d1.format_name)
    sent = handle.send(Message(body=b"fan-out", label="dl"), wait=True)
    for queue in (q1, q2, private):
        got = queue.receive(timeout=10)
        assert (got.id, got.body) == (sent.id, b"fan-out")
        assert got.destination_format_name == d1.format_name  # what the sender used
    assert _empty(q1, q2, private)
    with pytest.raises(UnsupportedFormatNameOperation):
        handle.receive(timeout=0)


def test_members_added_later_receive_only_later_messages(qm: QueueManager) -> None:
    q1, q1_fn = _public(qm, "early")
    q2, q2_fn = _public(qm, "late")
    dl = qm.directory.create_distribution_list("dynamic")
    qm.directory.add_member("dynamic", q1_fn)
    handle = qm.open_queue(dl.format_name)
    first = handle.send(Message(body=b"m1"), wait=True)
    qm.directory.add_member("dynamic", q2_fn)
    second = handle.send(Message(body=b"m2"), wait=True)
    assert [q1.receive(timeout=10).id for _ in range(2)] == [first.id, second.id]
    assert q2.receive(timeout=10).id == second.id
    assert _empty(q1, q2)


def test_multiple_element_name_mixing_direct_public_and_a_list(qm: QueueManager) -> None:
    private, private_fn = _private(qm, "mixed")
    q1, q1_fn = _public(qm, "m1")
    q2, q2_fn = _public(qm, "m2")
    dl = qm.directory.create_distribution_list("mixed-list")
    qm.directory.add_member("mixed-list", q1_fn)
    qm.directory.add_member("mixed-list", q2_fn)
    name = f"{private_fn},{q1_fn},{dl.format_name},{private_fn}"
    handle = qm.open_queue(name)
    assert len(handle.destinations) == 3  # Q1 twice and the private queue twice: one copy each
    sent = handle.send(Message(body=b"mefn"), wait=True)
    for queue in (private, q1, q2):
        got = queue.receive(timeout=10)
        assert got.id == sent.id and got.destination_format_name == name
    assert _empty(private, q1, q2)


def test_a_list_send_over_the_default_byte_bound_is_refused_before_anything_is_written(
        qm: QueueManager) -> None:
    """MSMQ's largest body to 17 queues is 68 MB, over the default 64 MiB per send
    (max_send_bytes): refused, no queue gets a copy; a small body still reaches all 17."""
    queues, members = zip(*(_public(qm, f"wide-{i}") for i in range(17)), strict=True)
    wide = qm.directory.create_distribution_list("wide")
    for member in members:
        qm.directory.add_member("wide", member)
    handle = qm.open_queue(wide.format_name)
    with pytest.raises(InvalidParameter) as refused:
        handle.send(Message(body=b"x" * 4_000_000, journal=JournalLevel.DEADLETTER), wait=True)
    message = refused.value.message
    assert "nothing was sent" in message
    assert "68000000 bytes" in message and "x 17 queues" in message
    assert "67108864 bytes (64.0 MiB)" in message
    assert "max_send_bytes" in message and "KMQ_MAX_SEND_BYTES" in message
    assert [queue.count() for queue in queues] == [0] * 17
    sent = handle.send(Message(body=b"small"), wait=True)
    assert [queue.receive(timeout=10).id for queue in queues] == [sent.id] * 17


def test_send_bounds_are_set_per_queue_manager(broker: BrokerEndpoint, kmq_home: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMQ_MAX_SEND_FANOUT", "2")
    monkeypatch.setenv("KMQ_MAX_SEND_BYTES", "1000")
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}")
    assert (config.max_send_fanout, config.max_send_bytes) == (2, 1000)
    with QueueManager.open(config) as bounded:
        (a, a_fn), (b, b_fn), (c, c_fn) = (_private(bounded, n) for n in ("ba", "bb", "bc"))
        with pytest.raises(InvalidParameter, match="reaches 3 queues, over the bound of 2 "
                                                   r"queues per send \(max_send_fanout"):
            bounded.open_queue(f"{a_fn},{b_fn},{c_fn}").send(Message(body=b"."))
        pair = bounded.open_queue(f"{a_fn},{b_fn}")
        with pytest.raises(InvalidParameter, match=r"1200 bytes \(0.0 MiB\) \(600 bytes"):
            pair.send_many([Message(body=b"x" * 300), Message(body=b"y" * 300)])
        with pytest.raises(InvalidParameter, match="max_send_bytes"):
            pair.send(Message(body=b"z" * 501), transaction="single")
        sent = pair.send(Message(body=b"x" * 500), wait=True)  # 1000 bytes: at the bound
        assert [a.receive(timeout=10).id, b.receive(timeout=10).id] == [sent.id, sent.id]
        # One queue: bounded by the message size only.
        bounded.open_queue(c_fn).send(Message(body=b"c" * 5000), wait=True)
        assert c.receive(timeout=10).body == b"c" * 5000
        assert a.count() == b.count() == c.count() == 0  # the refused sends wrote nothing


def test_list_as_admin_queue_gets_one_acknowledgment_per_recipient(qm: QueueManager) -> None:
    # Acknowledgments are not combined: n recipients give n ACK_REACH_QUEUE, one queue GUID each.
    q1, q1_fn = _public(qm, "ack1")
    q2, q2_fn = _public(qm, "ack2")
    targets = qm.directory.create_distribution_list("targets")
    qm.directory.add_member("targets", q1_fn)
    qm.directory.add_member("targets", q2_fn)
    admin_a, admin_a_fn = _private(qm, "admin-a")
    admin_b, admin_b_fn = _private(qm, "admin-b")
    qm.directory.create_alias("admin-a", admin_a_fn)
    qm.directory.create_alias("admin-b", admin_b_fn)
    admins = qm.directory.create_distribution_list("admins")
    qm.directory.add_member("admins", "alias:admin-a")
    qm.directory.add_member("admins", "alias:admin-b")
    sent = qm.open_queue(targets.format_name).send(
        Message(body=b"ack me", acknowledge=Acknowledgment.POSITIVE_ARRIVAL,
                admin_queue=admins.format_name), wait=True)
    expected = {uuid.UUID(q1.properties.instance), uuid.UUID(q2.properties.instance)}
    for admin in (admin_a, admin_b):
        acks = [admin.receive(timeout=10) for _ in range(2)]
        assert {a.message_class for a in acks} == {MessageClass.ACK_REACH_QUEUE}
        assert {a.correlation_id for a in acks} == {sent.id}
        infos = [decode_acknowledgment(a.body) for a in acks]
        assert all(len(info.queues) == 1 for info in infos)
        assert {info.queues[0].guid for info in infos} == expected
        assert _empty(admin)


def test_list_as_response_queue_reaches_every_member(qm: QueueManager) -> None:
    service, _ = _private(qm, "service")
    r1, r1_fn = _public(qm, "replies1")
    r2, r2_fn = _public(qm, "replies2")
    replies = qm.directory.create_distribution_list("replies")
    qm.directory.add_member("replies", r1_fn)
    qm.directory.add_member("replies", r2_fn)
    service.send(Message(body=b"2+2", response_queue=replies.format_name), wait=True)
    request = service.receive(timeout=10)
    qm.open_queue(request.response_queue).send(Message(body=b"4", correlation_id=request.id),
                                               wait=True)
    assert r1.receive_by_correlation_id(request.id, timeout=10).body == b"4"
    assert r2.receive_by_correlation_id(request.id, timeout=10).body == b"4"


def test_missing_send_to_on_a_top_level_member_sends_nothing(qm: QueueManager) -> None:
    q1, q1_fn = _public(qm, "open")
    q2, q2_fn = _public(qm, "closed")
    dl = qm.directory.create_distribution_list("guarded")
    qm.directory.add_member("guarded", q1_fn)
    qm.directory.add_member("guarded", q2_fn)
    handle = qm.open_queue(dl.format_name)
    handle.send(Message(body=b"allowed"), wait=True)
    security = qm.directory.security(q2_fn).deny("Everyone", AccessRight.SEND_TO)
    qm.directory.set_security(q2_fn, security)
    with pytest.raises(AccessDenied):
        handle.send(Message(body=b"refused"), wait=True)
    with pytest.raises(AccessDenied):
        qm.open_queue(q2_fn).send(Message(body=b"refused too"), wait=True)
    assert [q.receive(timeout=10).body for q in (q1, q2)] == [b"allowed", b"allowed"]
    assert _empty(q1, q2)


def test_a_list_send_checks_its_queues_as_of_each_send(qm: QueueManager) -> None:
    """A list's resolution and access checks are kept between sends only while the registry
    is unchanged: a member queue's own access list applies from the next send, both ways.

    The second member is a private queue behind an alias, so Send To on the directory objects
    (checked by the expansion) still allows the send and the queue's access list decides.
    """
    q1, q1_fn = _public(qm, "kept-1")
    q2, q2_fn = _private(qm, "kept-2")
    qm.directory.create_alias("kept-2-alias", q2_fn)
    dl = qm.directory.create_distribution_list("kept")
    qm.directory.add_member("kept", q1_fn)
    qm.directory.add_member("kept", "alias:kept-2-alias")
    handle = qm.open_queue(dl.format_name)
    for body in (b"one", b"two"):  # the second send reuses the first one's resolution
        handle.send(Message(body=body), wait=True)
    path = q2.properties.path_name
    allowed = qm.queue_security(path)
    qm.set_queue_security(path, allowed.deny("Everyone", AccessRight.WRITE_MESSAGE))
    with pytest.raises(AccessDenied, match="kept-2"):
        handle.send(Message(body=b"three"), wait=True)
    qm.set_queue_security(path, allowed)
    handle.send(Message(body=b"four"), wait=True)
    assert [q1.receive(timeout=10).body for _ in range(4)] == [b"one", b"two", b"three", b"four"]
    assert [q2.receive(timeout=10).body for _ in range(3)] == [b"one", b"two", b"four"]
    assert _empty(q1, q2)


def test_private_format_name_and_alias_to_it(qm: QueueManager) -> None:
    queue, _ = _private(qm, "numbered")
    props = queue.properties
    private_fn = f"PRIVATE={qm.guid}\\{props.queue_number:08x}"
    qm.open_queue(private_fn).send(Message(body=b"by number"), wait=True)
    assert queue.receive(timeout=10).body == b"by number"
    qm.directory.create_alias("numbered", private_fn)
    dl = qm.directory.create_distribution_list("numbers")
    qm.directory.add_member("numbers", "alias:numbered")
    qm.open_queue(dl.format_name).send(Message(body=b"via alias"), wait=True)
    assert queue.receive(timeout=10).body == b"via alias"


def test_lists_span_queue_managers_of_the_cluster(qm: QueueManager, broker: BrokerEndpoint) -> None:
    local, local_fn = _public(qm, "here")
    other_config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                                  queue_manager=f"{qm.name}-b")
    with QueueManager.open(other_config) as other:
        remote, remote_fn = _public(other, "there")
        dl = qm.directory.create_distribution_list("both")
        qm.directory.add_member("both", local_fn)
        qm.directory.add_member("both", remote_fn)
        sent = qm.open_queue(dl.format_name).send(Message(body=b"everywhere"), wait=True)
        assert local.receive(timeout=10).id == sent.id
        assert remote.receive(timeout=10).id == sent.id
        assert qm.open_queue(rf"{other.name}\there").destinations[0].topics == \
            remote.destinations[0].topics


def test_workgroup_mode_fails_directory_names_as_a_whole(broker: BrokerEndpoint,
                                                         kmq_home: Path) -> None:
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}",
                            directory=DirectorySettings(url="none"))
    with QueueManager.open(config) as qm:
        private, private_fn = _private(qm, "works")
        qm.open_queue(private_fn).send(Message(body=b"direct"), wait=True)
        assert private.receive(timeout=10).body == b"direct"
        for name in (f"PUBLIC={uuid.uuid4()}", f"DL={uuid.uuid4()}",
                     f"{private_fn},DL={uuid.uuid4()}", f"{private_fn},PUBLIC={uuid.uuid4()}"):
            with pytest.raises(DirectoryUnavailable, match="workgroup"):
                qm.open_queue(name)
        assert _empty(private)
        with pytest.raises(DirectoryUnavailable, match="workgroup"):
            qm.create_queue(r".\public-needs-a-directory")
        assert not qm.queue_exists(r".\public-needs-a-directory")


@pytest.fixture
def private_slapd():
    reason = slapd_available()
    if reason:
        pytest.skip(reason)
    with SlapdServer() as server:
        yield server


def test_directory_down_mid_run_fails_the_send_and_sends_nothing(
        broker: BrokerEndpoint, kmq_home: Path, private_slapd: SlapdServer) -> None:
    settings = DirectorySettings(url=private_slapd.url, base_dn=private_slapd.base_dn,
                                 bind_dn=private_slapd.bind_dn, password=private_slapd.password,
                                 timeout=2.0)
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers,
                            queue_manager=f"qm-{uuid.uuid4().hex[:10]}", directory=settings)
    with QueueManager.open(config) as qm:
        private, private_fn = _private(qm, "bystander")
        q1, q1_fn = _public(qm, "listed")
        dl = qm.directory.create_distribution_list("fragile")
        qm.directory.add_member("fragile", q1_fn)
        handle = qm.open_queue(f"{private_fn},{dl.format_name}")
        handle.send(Message(body=b"before"), wait=True)
        assert [q.receive(timeout=10).body for q in (private, q1)] == [b"before", b"before"]
        private_slapd.stop()
        with pytest.raises(DirectoryUnavailable) as caught:
            handle.send(Message(body=b"during"), wait=True)
        assert private_slapd.url in str(caught.value)
        assert _empty(private, q1)  # no partial send: not even the direct element
        # Queues opened by path name keep working without the directory.
        qm.open_queue(private_fn).send(Message(body=b"direct still works"), wait=True)
        assert private.receive(timeout=10).body == b"direct still works"
