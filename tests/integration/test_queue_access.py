"""Queue access lists enforced on every operation (access control).

Two queue managers of the same name on the session broker act for two principals: ``alice``
creates the queues (so she owns them, with full control) and ``bob`` is the other caller.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from facade import (
    AccessDenied,
    AccessRight,
    InvalidParameter,
    Message,
    ReceiveTimeout,
    SecurityDescriptor,
)
from facade.security.acl import EVERYONE
from facade.config import DirectorySettings, KmqConfig
from facade.manager import QueueManager
from facade.model.message import Acknowledgment, JournalLevel, MessageClass
from tests.support.kafka import BrokerEndpoint

R = AccessRight
#: Everyone keeps only what a stranger needs to look at the queue; each case grants bob rights.
BASELINE = R.GET_PROPERTIES | R.GET_PERMISSIONS
OPERATIONS = {"send": R.WRITE_MESSAGE, "receive": R.DELETE_MESSAGE, "peek": R.PEEK_MESSAGE}
COMBINATIONS = [frozenset(c) for n in range(4) for c in itertools.combinations(OPERATIONS, n)]
WAIT = 15.0  # generous: the registry refresh is about 1 s, CI is busy


def _open(broker: BrokerEndpoint, home: Path, name: str, principal: str) -> QueueManager:
    # Separate homes (outgoing queues), one directory: both see the same public objects.
    directory = DirectorySettings(url=f"embedded:{home / 'directory.json'}")
    config = KmqConfig.load(bootstrap_servers=broker.bootstrap_servers, queue_manager=name,
                            principal=principal, home=home / principal, directory=directory)
    return QueueManager.open(config)


@pytest.fixture(scope="module")
def pair(broker: BrokerEndpoint,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[QueueManager, QueueManager]]:
    """(alice, bob): one queue manager name, two principals."""
    home = tmp_path_factory.mktemp("access")
    name = f"acl-{uuid.uuid4().hex[:8]}"
    with _open(broker, home, name, "alice") as alice, _open(broker, home, name, "bob") as bob:
        yield alice, bob


def _queue(alice: QueueManager, rights: AccessRight = R(0), *,
           deny: AccessRight = R(0)) -> str:
    """A new queue of alice's whose access list gives bob exactly ``rights`` (minus ``deny``)."""
    path = rf".\private$\acl-{uuid.uuid4().hex[:8]}"
    alice.create_queue(path)
    sd = alice.queue_security(path).revoke(EVERYONE).grant(EVERYONE, BASELINE)
    if rights:
        sd = sd.grant("bob", rights)
    if deny:
        sd = sd.deny("bob", deny)
    alice.set_queue_security(path, sd)
    return path


def _admin(alice: QueueManager) -> tuple[object, str]:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    queue = alice.create_queue(rf".\private$\{name}")
    return queue, rf"DIRECT=OS:{alice.name}\private$\{name}"


def test_new_queue_has_msmq_default_descriptor(pair: tuple[QueueManager, QueueManager]) -> None:
    alice, bob = pair
    path = rf".\private$\dflt-{uuid.uuid4().hex[:8]}"
    alice.create_queue(path)
    sd = alice.queue_security(path)
    assert sd.owner == "alice"
    assert sd.granted("alice") == R.FULL_CONTROL
    # MSMQ's default: everyone may send, get properties and get permissions; no receive/peek.
    assert sd.granted("bob") & (R.WRITE_MESSAGE | R.GET_PROPERTIES | R.GET_PERMISSIONS) == (
        R.WRITE_MESSAGE | R.GET_PROPERTIES | R.GET_PERMISSIONS)
    assert not sd.allows("bob", R.PEEK_MESSAGE) and not sd.allows("bob", R.DELETE_MESSAGE)
    bob.open_queue(path).send(Message(body=b"hello"), wait=True)
    with pytest.raises(AccessDenied):
        bob.open_queue(path).receive(timeout=0)
    # The descriptor is stored with the queue's properties: a fresh reader sees it.
    assert bob.queue_security(path) == sd


@pytest.mark.parametrize("granted", COMBINATIONS,
                         ids=lambda c: "+".join(sorted(c)) or "nothing")
def test_rights_table(pair: tuple[QueueManager, QueueManager], granted: frozenset[str]) -> None:
    """Each operation works exactly when its right is granted; a refusal loses nothing."""
    alice, bob = pair
    rights = R(0)
    for operation in granted:
        rights |= OPERATIONS[operation]
    path = _queue(alice, rights)
    mine = alice.open_queue(path)
    theirs = bob.open_queue(path)
    seeded = mine.send(Message(body=b"seed"), wait=True)
    admin, admin_fn = _admin(alice)

    sent = Message(body=b"from bob", journal=JournalLevel.DEADLETTER,
                   acknowledge=Acknowledgment.NEGATIVE_ARRIVAL, admin_queue=admin_fn)
    if "send" in granted:
        sent = theirs.send(sent, wait=True)
    else:
        with pytest.raises(AccessDenied) as refused:
            theirs.send(sent, wait=True)
        assert refused.value.error_code == "MQ_ERROR_ACCESS_DENIED"
        sent = refused.value.sent[0]
        nack = admin.receive(timeout=WAIT)
        assert nack.message_class is MessageClass.NACK_ACCESS_DENIED
        assert nack.correlation_id == sent.id
        dead = alice.open_queue(f"MACHINE={alice.guid};DEADLETTER").receive_by_id(sent.id, WAIT)
        assert dead.message_class is MessageClass.NACK_ACCESS_DENIED and dead.body == b"from bob"

    if "peek" in granted:
        assert theirs.peek(timeout=WAIT).id == seeded.id
    else:
        _all_denied(lambda: theirs.peek(timeout=0), theirs.cursor,
                    lambda: theirs.peek_by_id(seeded.id))

    if "receive" in granted:
        assert theirs.receive(timeout=WAIT).id == seeded.id
    else:
        _all_denied(lambda: theirs.receive(timeout=0), lambda: theirs.receive_many(5, timeout=0),
                    lambda: theirs.receive_by_id(seeded.id), theirs.purge,
                    lambda: theirs.receive(timeout=0, lock=True))
        assert mine.receive(timeout=WAIT).id == seeded.id  # still there: nothing lost
    if "send" in granted:
        assert mine.receive(timeout=WAIT).id == sent.id
    with pytest.raises(ReceiveTimeout):
        mine.receive(timeout=0.2)


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_deny_wins_over_allow(pair: tuple[QueueManager, QueueManager], operation: str) -> None:
    alice, bob = pair
    right = OPERATIONS[operation]
    path = _queue(alice, R.FULL_CONTROL, deny=right)
    alice.open_queue(path).send(Message(body=b"x"), wait=True)
    theirs = bob.open_queue(path)
    action = {"send": lambda: theirs.send(Message(body=b"y"), wait=True),
              "receive": lambda: theirs.receive(timeout=0),
              "peek": lambda: theirs.peek(timeout=0)}[operation]
    with pytest.raises(AccessDenied, match="deny entry"):
        action()
    # The other operations of the full-control grant still work.
    if operation != "peek":
        assert theirs.peek(timeout=WAIT).body == b"x"


def test_every_name_form_is_checked(pair: tuple[QueueManager, QueueManager]) -> None:
    alice, bob = pair
    path = _queue(alice)  # bob: nothing
    queue_name = path.rsplit("\\", 1)[1]
    instance = alice.get_properties(path).instance
    number = f"{int(uuid.UUID(instance).hex[:8], 16):08x}"
    names = [path, rf"{alice.name}\private$\{queue_name}",
             rf"DIRECT=OS:{alice.name}\private$\{queue_name}",
             rf"DIRECT=TCP:127.0.0.1\private$\{queue_name}",
             f"PRIVATE={alice.guid}\\{number}"]
    for name in names:
        queue = bob.open_queue(name)
        _all_denied(lambda: queue.send(Message(body=b"no")), lambda: queue.peek(timeout=0),
                    lambda: queue.receive(timeout=0))
    with pytest.raises(AccessDenied):
        bob.open_queue(path + r"\journal$").receive(timeout=0)  # DELETE_JOURNAL_MESSAGE
    with pytest.raises(ReceiveTimeout):
        alice.open_queue(path).receive(timeout=0.2)  # nothing got in


def test_public_list_and_alias_names_are_checked(
        pair: tuple[QueueManager, QueueManager]) -> None:
    """PUBLIC=, DL= and alias: reach the same access list as the path name."""
    alice, bob = pair
    tag = uuid.uuid4().hex[:8]
    path = rf".\pub-{tag}"
    alice.create_queue(path)
    guid = alice.get_properties(path).instance
    # bob keeps Send To on the list, but the queue itself refuses him.
    alice.set_queue_security(path, alice.queue_security(path).revoke(EVERYONE).grant(
        EVERYONE, BASELINE | R.ADD_REMOVE_SELF))
    directory = alice.directory
    dl = directory.create_distribution_list(f"list-{tag}")
    directory.add_member(f"dl:list-{tag}", f"PUBLIC={guid}")
    directory.create_alias(f"alias-{tag}", f"PUBLIC={guid}")
    via_alias = directory.create_distribution_list(f"alias-list-{tag}")
    directory.add_member(f"dl:alias-list-{tag}", f"alias:alias-{tag}")
    for name in (f"PUBLIC={guid}", dl.format_name, via_alias.format_name,
                 f"DIRECT=OS:{alice.name}\\pub-{tag}"):
        with pytest.raises(AccessDenied):
            bob.open_queue(name).send(Message(body=b"no"))
    with pytest.raises(AccessDenied):
        bob.open_queue(f"PUBLIC={guid}").receive(timeout=0)
    # Granted on the queue, the same names work (the directory entry got the same list).
    alice.set_queue_security(path, alice.queue_security(path).grant("bob", R.WRITE_MESSAGE))
    assert directory.security(f"PUBLIC={guid}").allows("bob", R.WRITE_MESSAGE)
    _eventually(lambda: bob.open_queue(dl.format_name).send(Message(body=b"via list"), wait=True))
    assert alice.open_queue(path).receive(timeout=WAIT).body == b"via list"
    with pytest.raises(ReceiveTimeout):
        alice.open_queue(path).receive(timeout=0.2)


def test_journal_receive_needs_receive_journal(pair: tuple[QueueManager, QueueManager]) -> None:
    alice, bob = pair
    path = _queue(alice, R.RECEIVE_JOURNAL_MESSAGE)
    alice.set_properties(path, journal=True)
    mine = alice.open_queue(path)
    sent = mine.send(Message(body=b"journaled"), wait=True)
    assert mine.receive(timeout=WAIT).id == sent.id  # the removal leaves a journal copy
    journal = bob.open_queue(path + r"\journal$")
    assert journal.peek(timeout=WAIT).id == sent.id  # PEEK_MESSAGE is part of the right
    assert journal.receive(timeout=WAIT).id == sent.id
    with pytest.raises(AccessDenied, match="DELETE_MESSAGE"):
        bob.open_queue(path).receive(timeout=0)  # the queue itself needs DELETE_MESSAGE


def test_administration_rights(pair: tuple[QueueManager, QueueManager]) -> None:
    alice, bob = pair
    path = _queue(alice, R.GET_PROPERTIES)
    with pytest.raises(AccessDenied):
        bob.set_properties(path, label="mine now")
    with pytest.raises(AccessDenied):
        bob.delete_queue(path)
    with pytest.raises(AccessDenied):
        bob.set_queue_security(path, alice.queue_security(path).grant("bob", R.FULL_CONTROL))
    with pytest.raises(AccessDenied):
        bob.set_queue_security(path, alice.queue_security(path).with_owner("bob"))
    assert bob.get_properties(path).label == ""
    # Granted, the same calls work; take ownership makes bob the owner.
    alice.set_queue_security(path, alice.queue_security(path).grant(
        "bob", R.SET_PROPERTIES | R.TAKE_OWNERSHIP | R.CHANGE_PERMISSIONS | R.DELETE))
    _eventually(lambda: bob.set_properties(path, label="bob's"))
    taken = bob.set_queue_security(path, bob.queue_security(path).with_owner("bob"))
    assert taken.owner == "bob"
    bob.delete_queue(path)
    assert not alice.queue_exists(path)


def test_queue_manager_rights(pair: tuple[QueueManager, QueueManager]) -> None:
    """Seed 004's queue-manager ACL: create queue, status (list), test (exists), control,
    manage."""
    alice, bob = pair
    original = alice.queue_manager_security()
    assert original.owner == "alice"  # the first principal to open the queue manager
    assert bob.queue_manager_security() == original  # everyone may read it (GET_PERMISSIONS)
    path = _queue(alice)  # bob: no rights on the queue itself
    try:
        # Default: bob may create queues, list them and test them, not control or manage.
        mine = rf".\private$\bobs-{uuid.uuid4().hex[:6]}"
        bob.create_queue(mine)
        assert any(p.path_name.endswith(mine[2:]) for p in bob.list_queues())
        assert bob.queue_exists(path)
        with pytest.raises(AccessDenied, match="CHANGE_PERMISSIONS"):
            bob.set_queue_manager_security(original.grant("bob", R.CONTROL))
        with pytest.raises(AccessDenied):
            bob.delete_queue(path)
        # Deny wins on the queue manager too.
        alice.set_queue_manager_security(
            original.deny("bob", R.CREATE_QUEUE | R.QUEUE_STATUS | R.TEST))
        # (each try a new name: a try before bob's view refreshed creates its queue)
        _eventually(lambda: _expect_denied(
            lambda: bob.create_queue(rf".\private$\late-{uuid.uuid4().hex[:6]}")))
        _all_denied(bob.list_queues, lambda: bob.queue_exists(path))
        # MANAGE (queue management) lets bob change and delete queues he has no right on.
        alice.set_queue_manager_security(original.grant("bob", R.MANAGE))
        _eventually(lambda: bob.set_properties(path, label="managed"))
        bob.delete_queue(path)
        assert not alice.queue_exists(path)
        with pytest.raises(InvalidParameter, match="SecurityDescriptor"):
            alice.set_queue_manager_security("everyone")  # type: ignore[arg-type]
    finally:
        alice.set_queue_manager_security(original)


def _expect_denied(action) -> None:
    """Raise AccessDenied while ``action`` still succeeds (for :func:`_eventually`)."""
    try:
        action()
    except AccessDenied:
        return
    raise AccessDenied("not refused yet")


def test_dead_letter_queues_are_guarded_by_the_queue_manager(
        pair: tuple[QueueManager, QueueManager]) -> None:
    alice, bob = pair
    path = _queue(alice)  # bob may not send here: his copy is dead-lettered
    with pytest.raises(AccessDenied):
        bob.open_queue(path).send(Message(body=b"dead", journal=JournalLevel.DEADLETTER))
    dead_letters = f"MACHINE={alice.guid};DEADLETTER"
    theirs = bob.open_queue(dead_letters)
    assert theirs.peek(timeout=WAIT).body  # everyone may browse dead letters by default
    with pytest.raises(AccessDenied, match="DELETE_MESSAGE"):
        theirs.receive(timeout=0)
    with pytest.raises(AccessDenied):
        bob.open_queue(f"MACHINE={alice.guid};JOURNAL").receive(timeout=0)
    original = alice.queue_manager_security()
    try:
        alice.set_queue_manager_security(original.grant("bob", R.DELETE_MESSAGE))
        _eventually(lambda: theirs.receive(timeout=WAIT))
    finally:
        alice.set_queue_manager_security(original)


def test_revocation_applies_to_open_handles(pair: tuple[QueueManager, QueueManager]) -> None:
    alice, bob = pair
    path = _queue(alice, R.RECEIVE_MESSAGE)
    theirs = bob.open_queue(path)
    with pytest.raises(ReceiveTimeout):
        theirs.receive(timeout=0)
    alice.set_queue_security(path, alice.queue_security(path).revoke("bob"))
    deadline = time.monotonic() + WAIT
    while True:  # the registry view refreshes within about a second
        try:
            theirs.receive(timeout=0)
        except AccessDenied:
            break
        except ReceiveTimeout:
            assert time.monotonic() < deadline, "revocation never reached the open handle"
            time.sleep(0.1)


def test_set_queue_security_refuses_other_types(pair: tuple[QueueManager, QueueManager]) -> None:
    alice, _ = pair
    path = _queue(alice)
    with pytest.raises(InvalidParameter, match="SecurityDescriptor"):
        alice.set_queue_security(path, {"owner": "alice"})  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="queue-manager right"):
        alice.set_queue_security(path, alice.queue_security(path).grant("bob", R.CREATE_QUEUE))
    assert isinstance(alice.queue_security(path), SecurityDescriptor)


def _direct(qm: QueueManager, path: str) -> str:
    return rf"DIRECT=OS:{qm.name}\private$\{path.rsplit(chr(92), 1)[1]}"


def test_a_send_whose_admin_queue_refuses_the_sender_writes_nothing(
        pair: tuple[QueueManager, QueueManager]) -> None:
    """The sender's own process posts arrival acknowledgments, so it may aim them only at a
    queue it may write: naming another one refuses the send, before any copy, dead-letter copy
    or NACK is written."""
    alice, bob = pair
    victim = _queue(alice)  # bob: no WRITE_MESSAGE
    open_to_bob = _queue(alice, R.WRITE_MESSAGE)
    dead_letters = alice.open_queue(f"MACHINE={alice.guid};DEADLETTER")
    dead_before = dead_letters.count()
    for target in (victim, open_to_bob):  # refused by the queue too, or only by the admin queue
        nack_here = Message(body=b"mallory's body", label="mallory", journal=JournalLevel.DEADLETTER,
                            acknowledge=Acknowledgment.NACK_REACH_QUEUE,
                            admin_queue=_direct(alice, victim))
        with pytest.raises(AccessDenied) as refused:
            bob.open_queue(target).send(nack_here, wait=True)
        error = refused.value
        assert error.error_code == "MQ_ERROR_ACCESS_DENIED"
        assert error.queue == _direct(alice, victim)
        assert "admin queue" in error.message and "WRITE_MESSAGE" in error.message
        assert "'bob'" in error.message and "nothing was sent" in error.message
        assert "alice" in (error.hint or "")
        with pytest.raises(AccessDenied, match="admin queue"):
            bob.open_queue(target).send_many([Message(body=b"fine"), nack_here])
        with pytest.raises(AccessDenied, match="admin queue"):
            bob.open_queue(target).send(nack_here, transaction="single")
    assert alice.open_queue(victim).count() == 0
    assert alice.open_queue(open_to_bob).count() == 0
    assert dead_letters.count() == dead_before
    # Without an acknowledgment asked for, the admin queue is only a name: nothing goes there.
    sent = bob.open_queue(open_to_bob).send(
        Message(body=b"no ack", admin_queue=_direct(alice, victim)), wait=True)
    assert alice.open_queue(open_to_bob).receive(timeout=WAIT).id == sent.id


def test_an_acknowledgment_is_checked_for_the_principal_posting_it(
        pair: tuple[QueueManager, QueueManager], caplog: pytest.LogCaptureFixture) -> None:
    """ACK_RECEIVE is posted by the receiving process: its principal needs WRITE_MESSAGE on
    the admin queue, or the acknowledgment is not written (logged as lost)."""
    alice, bob = pair
    target = _queue(alice, R.WRITE_MESSAGE)
    acks = rf".\private$\bobs-acks-{uuid.uuid4().hex[:8]}"
    bob.create_queue(acks)  # bob's: only he may write it
    bob.set_queue_security(acks, bob.queue_security(acks).revoke(EVERYONE).grant(EVERYONE,
                                                                                 BASELINE))
    asked = Message(body=b"tell me", acknowledge=Acknowledgment.POSITIVE_RECEIVE,
                    admin_queue=_direct(bob, acks))
    first = bob.open_queue(target).send(asked, wait=True)
    with caplog.at_level("WARNING", logger="kmq.outputs"):
        assert alice.open_queue(target).receive(timeout=WAIT).id == first.id
    assert bob.open_queue(acks).count() == 0
    lost = [r.getMessage() for r in caplog.records if str(first.id) in r.getMessage()]
    assert lost and "ACK_RECEIVE" in lost[0] and "WRITE_MESSAGE" in lost[0] and "'alice'" in lost[0]
    bob.set_queue_security(acks, bob.queue_security(acks).grant("alice", R.WRITE_MESSAGE))
    second = bob.open_queue(target).send(asked, wait=True)
    deadline = time.monotonic() + WAIT
    while not alice.queue_security(acks).allows("alice", R.WRITE_MESSAGE):  # her view, ~1 s
        assert time.monotonic() < deadline, "the grant never reached alice's registry view"
        time.sleep(0.1)
    assert alice.open_queue(target).receive(timeout=WAIT).id == second.id
    ack = bob.open_queue(acks).receive(timeout=WAIT)
    assert ack.message_class is MessageClass.ACK_RECEIVE and ack.correlation_id == second.id


def _all_denied(*actions) -> None:
    for action in actions:
        with pytest.raises(AccessDenied):
            action()


def _eventually(action, timeout: float = WAIT):
    """Run ``action`` until the registry view of the other principal has caught up."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except AccessDenied:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
