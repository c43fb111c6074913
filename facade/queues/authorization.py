"""Access checks on queue operations: MSMQ's queue access lists (``MQSEC_*`` rights) enforced
on every send, receive, peek, purge, delete and property change.

Every queue carries a security descriptor (:class:`~facade.security.acl.SecurityDescriptor`) in its
registry record (:attr:`~facade.state.registry.QueueProperties.security`), private and public queues
alike, so the same check applies whatever name the queue is reached by: a path name,
``DIRECT=``, ``PRIVATE=``, ``PUBLIC=``, a ``DL=`` list or an alias expand to the same registry
record. The check is made for the caller's principal (:attr:`QueueAccess.principal`) at each
operation, against the descriptor as the registry holds it now (a change applies to handles
already open, within the registry's refresh interval of about a second), as MSMQ checks its
access list at ``MQOpenQueue`` for each access mode.

Rights per operation (MSMQ's):

============================== =================================================
operation                      right on the queue
============================== =================================================
send                           WRITE_MESSAGE
receive (every form), purge,   DELETE_MESSAGE (on a journal:
move, reject, cursor receive   DELETE_JOURNAL_MESSAGE)
peek (every form), cursor      PEEK_MESSAGE
properties, count              GET_PROPERTIES
set properties                 SET_PROPERTIES (or MANAGE on the queue manager)
delete queue                   DELETE (or MANAGE on the queue manager)
read the descriptor            GET_PERMISSIONS
change the access list         CHANGE_PERMISSIONS (owner change: TAKE_OWNERSHIP)
============================== =================================================

An acknowledgment is a send to its admin queue (:meth:`QueueAccess.require_admin_queue`): a
send that asks for acknowledgments needs WRITE_MESSAGE on every queue its admin queue names,
or it is refused before anything is written (:meth:`QueueAccess.require_admin_queues`), and
every acknowledgment posted later is checked again for the principal of the process posting it.

A send the access list refuses is not written: the destination's copy gets
NACK_ACCESS_DENIED on the admin queue (when NEGATIVE_ARRIVAL was asked for) and a dead-letter
copy (journal level DEADLETTER), and the caller gets :class:`~facade.errors.AccessDenied`
(MQ_ERROR_ACCESS_DENIED) naming the queues refused; copies to other queues of the same send
are sent. System queues (dead-letter queues, the machine journal) are guarded by their queue
manager's descriptor (:mod:`facade.queues.qmsecurity`): DELETE_MESSAGE to receive, PEEK_MESSAGE to
peek. Not checked: the queue manager's own housekeeping (expiry, lease and claim
recovery), which removes messages on MSMQ's rules rather than a caller's request.

These checks bind clients that go through kmq. A client that talks to Kafka directly is
stopped only by the broker's own ACLs, TLS and SASL (``docs/design.md``, "Security model").
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from facade.security.acl import QUEUE_MANAGER_RIGHTS, AccessRight, SecurityDescriptor
from facade.errors import AccessDenied, InvalidParameter
from facade.model.formatnames import parse_queue_reference
from facade.queues.interfaces import QueueResolver, RegistryHost
from facade.model.message import Message, MessageClass

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.queues.systemoutputs import SystemOutputs
    from facade.security.principal import Principal
    from facade.queues.qmsecurity import QueueManagerSecurity
    from facade.state.registry import QueueProperties

__all__ = ["AccessHost", "QueueAccess", "RefusedCopy", "receive_right"]

#: Administration rights a queue manager's MANAGE right stands in for.
_MANAGED = AccessRight.SET_PROPERTIES | AccessRight.DELETE
#: Destination lists whose refusals one QueueAccess keeps (see refused_sends).
_MAX_KEPT = 256


def receive_right(destination: Destination, remove: bool) -> AccessRight:
    """The right a receive (``remove``) or peek needs on ``destination``.

    Args:
        destination (Destination): the queue, its journal or a subqueue.
        remove (bool): True for a receive, False for a peek.

    Returns:
        AccessRight: DELETE_JOURNAL_MESSAGE to receive from a queue journal, DELETE_MESSAGE
        to receive from a queue or subqueue, PEEK_MESSAGE to peek at any of them.
    """
    if not remove:
        return AccessRight.PEEK_MESSAGE
    if destination.read_only and destination.properties is not None:
        return AccessRight.DELETE_JOURNAL_MESSAGE  # a queue journal (read-only with a record)
    return AccessRight.DELETE_MESSAGE


@dataclass(frozen=True)
class RefusedCopy:
    """A copy of a sent message that the destination's access list refused.

    Attributes:
        message_id (str): the message's id.
        queue (str): the destination's format name.
        reason (str): why (the missing right and the principal).
        hint (str | None): whom to ask (the access check's hint).
    """

    message_id: str
    queue: str
    reason: str
    hint: str | None = None


class AccessHost(RegistryHost, QueueResolver, Protocol):
    """What :class:`QueueAccess` needs from its queue manager (which passes itself): beside
    the registry (each queue's current descriptor), the directory (a public queue's copy of
    it) and the resolution of admin queues, the caller, the system outputs and the queue
    manager's own descriptor."""

    @property
    def principal(self) -> Principal:
        """The caller the checks are made for."""
        ...

    @property
    def outputs(self) -> SystemOutputs:
        """Posts NACK_ACCESS_DENIED and writes dead-letter copies."""
        ...

    @property
    def qm_security(self) -> QueueManagerSecurity:
        """The queue manager's own descriptor (system queues, MANAGE)."""
        ...


class QueueAccess:
    """The access checks of one queue manager, made for its caller's principal.

    Args:
        manager (AccessHost): the queue manager: supplies the registry (current descriptors),
            the directory (public queues' copy of the descriptor), the system outputs (NACKs),
            its own descriptor and the principal.
    """

    def __init__(self, manager: AccessHost):
        self.manager = manager
        #: path name -> (the record the rights were computed from, the caller's rights): a
        #: receive loop checks the same unchanged record thousands of times a second.
        self._granted: dict[str, tuple[QueueProperties, AccessRight]] = {}
        #: (principal, the destinations' data topics) -> (registry generation, the refusals):
        #: a list's members are checked at every send, nearly always against the same records.
        self._refused: dict[tuple[str, tuple[str, ...]], tuple[int, dict[str, AccessDenied]]] = {}

    @property
    def principal(self) -> str:
        """The caller the checks are made for (see :mod:`facade.security.principal`)."""
        return self.manager.principal.name

    # -- checks --------------------------------------------------------------------------------

    def current(self, properties: QueueProperties) -> QueueProperties:
        """The queue's record as the registry holds it now (``properties`` if it is gone, so
        the operation fails on the missing queue rather than here)."""
        return self.manager.registry.get_queue(properties.path_name) or properties

    def require(self, destination: Destination, rights: AccessRight) -> None:
        """Raise unless the caller has ``rights`` on ``destination`` (a queue's journal and
        subqueues share the queue's descriptor, as in MSMQ).

        A system queue (dead-letter queues, machine journal) is guarded by its queue manager's
        descriptor: receiving needs DELETE_MESSAGE there, peeking PEEK_MESSAGE (MSMQ's
        dead-letter rights of a machine).

        Args:
            destination (Destination): the queue.
            rights (AccessRight): the rights the operation needs.

        Raises:
            AccessDenied: a right is missing (MQ_ERROR_ACCESS_DENIED); the message names the
                principal, the rights and the queue, the hint whom to ask.
        """
        if destination.properties is None:
            if destination.system_of is not None:
                self.manager.qm_security.descriptor(destination.system_of).require(
                    self.principal, rights, destination.format_name)
            return
        properties = self.current(destination.properties)
        if rights & ~self._granted_on(properties):
            properties.security.require(self.principal, rights, destination.format_name)

    def refusal_unless_any(self, destination: Destination,
                           rights: AccessRight) -> AccessDenied | None:
        """Why the caller may do none of what ``rights`` allow on a queue: None when it has at
        least one of them (a queue's journal and subqueues share the queue's descriptor).

        Args:
            destination (Destination): a queue with a registry record.
            rights (AccessRight): the rights any one of which suffices.

        Returns:
            AccessDenied | None: the refusal (MQ_ERROR_ACCESS_DENIED), naming the principal,
            the rights and the queue, its hint whom to ask for which right; None if allowed.
        """
        if destination.properties is None:
            return AccessDenied(f"{destination.format_name} is a system queue: it has no access "
                                "list of its own that could allow this",
                                queue=destination.format_name)
        properties = self.current(destination.properties)
        if rights & self._granted_on(properties):
            return None
        names = " or ".join(rights.names())
        return AccessDenied(f"{self.principal!r} has no {names} on {destination.format_name}",
                            queue=destination.format_name,
                            hint=f"ask the owner ({properties.security.owner}) to grant {names} "
                                 f"to {self.principal}")

    def _granted_on(self, properties: QueueProperties) -> AccessRight:
        """The caller's rights on the queue of ``properties`` (the registry's current record)."""
        known = self._granted.get(properties.path_name)
        if known is None or known[0] is not properties:
            known = (properties, properties.security.granted(self.principal))
            self._granted[properties.path_name] = known
        return known[1]

    def require_queue(self, properties: QueueProperties, rights: AccessRight) -> None:
        """:meth:`require` for a queue known by its record (administration calls).

        SET_PROPERTIES and DELETE refused by the queue's own list are allowed to a holder of
        MANAGE on the queue manager (seed 004's "Queue Management").

        Raises:
            AccessDenied: a right is missing.
        """
        security = self.current(properties).security
        if security.allows(self.principal, rights):
            return
        if not rights & ~_MANAGED and self.manager.qm_security.allows(AccessRight.MANAGE):
            return
        security.require(self.principal, rights, properties.path_name)

    def require_admin_queue(self, admin_queue: str, destination: Destination) -> None:
        """Raise unless the caller may post acknowledgments to ``destination``, one of the
        queues the admin queue (PROPID_M_ADMIN_QUEUE) ``admin_queue`` names.

        MSMQ's queue manager posts acknowledgments; kmq's sending and receiving processes post
        them themselves, so the admin queue meets the check a send to it meets: WRITE_MESSAGE
        for the caller's principal.

        Args:
            admin_queue (str): the admin queue as the message names it (a queue, ``DL=`` or
                multiple-element format name).
            destination (Destination): one queue it resolves to.

        Raises:
            AccessDenied: MQ_ERROR_ACCESS_DENIED naming the admin queue, the refusing queue,
                WRITE_MESSAGE and the principal; the hint whom to ask.
        """
        try:
            self.require(destination, AccessRight.WRITE_MESSAGE)
        except AccessDenied as exc:
            raise AccessDenied(
                f"admin queue {admin_queue!r} takes no acknowledgments from "
                f"{self.principal!r}: {exc.message}", queue=admin_queue, hint=exc.hint) from exc

    def require_admin_queues(self, messages: Iterable[Message], format_name: str) -> None:
        """Refuse a send whose acknowledgments would go where the caller may not write.

        For each distinct admin queue of the messages that ask for an acknowledgment
        (PROPID_M_ACKNOWLEDGE not NONE), every queue it resolves to (Send To checked on
        ``DL=`` and ``PUBLIC=`` names, as for a send) must grant the caller WRITE_MESSAGE
        (:meth:`require_admin_queue`). Called before a send writes anything.

        Args:
            messages (Iterable[Message]): the messages of one send.
            format_name (str): what the send is addressed to, for the message.

        Raises:
            AccessDenied: an admin queue refuses the caller; nothing was sent (the message
                says so and names the admin queue and the missing right).
            QueueNotFound, DirectoryObjectNotFound, DirectoryUnavailable,
                UnsupportedFormatNameOperation: an admin queue does not resolve; nothing was
                sent.
        """
        checked: set[str] = set()
        for message in messages:
            admin_queue = message.admin_queue
            if not admin_queue or not message.acknowledge or admin_queue in checked:
                continue
            checked.add(admin_queue)
            reference = parse_queue_reference(admin_queue)
            for destination in self.manager.destinations(reference, for_send=True):
                try:
                    self.require_admin_queue(admin_queue, destination)
                except AccessDenied as exc:
                    raise AccessDenied(f"send to {format_name!r} refused, nothing was sent: "
                                       f"{exc.message}", queue=admin_queue,
                                       hint=exc.hint) from exc

    def refused_sends(self, destinations: list[Destination]) -> dict[str, AccessDenied]:
        """The destinations whose access list refuses the caller WRITE_MESSAGE.

        Args:
            destinations (list[Destination]): the queues a send goes to.

        Returns:
            dict[str, AccessDenied]: data topic -> the refusal, for each refused destination.
        """
        # Queue descriptors live in the registry: under the same generation, the same records
        # give the same answers. System queues' descriptors do not, so they are not kept.
        keep = all(d.properties is not None for d in destinations)
        if keep:
            generation = self.manager.registry.generation()
            key = (self.principal, tuple(d.topics.data for d in destinations))
            known = self._refused.get(key)
            if known is not None and known[0] == generation:
                return dict(known[1])
        refused = {}
        for destination in destinations:
            try:
                self.require(destination, AccessRight.WRITE_MESSAGE)
            except AccessDenied as exc:
                refused[destination.topics.data] = exc
        if keep:
            if len(self._refused) >= _MAX_KEPT:
                self._refused.clear()
            self._refused[key] = (generation, dict(refused))
        return refused

    def refuse_copy(self, copy: Message, destination: Destination,
                    refusal: AccessDenied) -> RefusedCopy:
        """Handle a copy its destination refused: NACK_ACCESS_DENIED to the admin queue (if
        asked for) and a dead-letter copy (journal level DEADLETTER); the copy is not written.

        Args:
            copy (Message): the stamped copy for ``destination``.
            destination (Destination): the queue that refused it.
            refusal (AccessDenied): the access check's error (from :meth:`refused_sends`).

        Returns:
            RefusedCopy: what the caller's :class:`AccessDenied` reports.

        Raises:
            BrokerUnavailable, BrokerError: the dead-letter copy was not acknowledged.
        """
        self.manager.outputs.reject(copy, MessageClass.NACK_ACCESS_DENIED, destination,
                                    refusal.message)
        return RefusedCopy(str(copy.id), destination.format_name, refusal.message, refusal.hint)

    @staticmethod
    def send_error(refused: list[RefusedCopy], format_name: str, sent: list[Message],
                   others: int, over_quota: int = 0) -> AccessDenied:
        """The error a send raises when access lists refused some of its copies.

        Args:
            refused (list[RefusedCopy]): the refused copies (at least one).
            format_name (str): what the send was addressed to.
            sent (list[Message]): the messages as sent (set as ``error.sent``).
            others (int): how many copies were sent to queues that allowed it.
            over_quota (int): how many other copies a queue quota refused (reported here too,
                since this error is the one raised).

        Returns:
            AccessDenied: MQ_ERROR_ACCESS_DENIED naming the refused queues and the reason.
        """
        queues = sorted({copy.queue for copy in refused})
        sent_note = f"; {others} copies to other queues were sent" if others else ""
        if over_quota:
            sent_note += (f"; {over_quota} copies were refused by a queue quota "
                          "(NACK_Q_EXCEED_QUOTA)")
        error = AccessDenied(
            f"send to {format_name!r} refused by {', '.join(queues)}: {refused[0].reason}"
            f"{sent_note} (NACK_ACCESS_DENIED posted to the admin queue when requested)",
            queue=format_name,
            hint=refused[0].hint)
        error.sent = sent  # type: ignore[attr-defined]
        return error

    # -- the descriptor itself (MQGetQueueSecurity / MQSetQueueSecurity) ----------------------

    def queue_security(self, properties: QueueProperties) -> SecurityDescriptor:
        """A queue's descriptor (``MQGetQueueSecurity``); needs GET_PERMISSIONS.

        Raises:
            AccessDenied: the caller lacks GET_PERMISSIONS.
        """
        self.require_queue(properties, AccessRight.GET_PERMISSIONS)
        return self.current(properties).security

    def set_queue_security(self, properties: QueueProperties,
                           descriptor: SecurityDescriptor) -> SecurityDescriptor:
        """Replace a queue's owner and access list (``MQSetQueueSecurity``).

        Needs CHANGE_PERMISSIONS, and TAKE_OWNERSHIP when the owner changes. A public queue's
        directory entry gets the same descriptor first (its Send To check on ``PUBLIC=`` and
        ``DL=`` sends reads it there), so if the directory is down nothing changes.

        Args:
            properties (QueueProperties): the queue's record.
            descriptor (SecurityDescriptor): the new descriptor.

        Returns:
            SecurityDescriptor: the descriptor now stored.

        Raises:
            InvalidParameter: ``descriptor`` is not a SecurityDescriptor, or an entry names a
                queue-manager right (CREATE_QUEUE, QUEUE_STATUS, TEST), which means nothing
                on a queue.
            AccessDenied: a right is missing.
            DirectoryUnavailable: a public queue and the directory cannot be reached.
        """
        if not isinstance(descriptor, SecurityDescriptor):
            raise InvalidParameter.wrong_type(
                "descriptor", "a SecurityDescriptor (a queue's security)", descriptor,
                queue=properties.path_name,
                hint="start from qm.queue_security(path) and use .grant/.deny/.revoke")
        _refuse_queue_manager_rights(descriptor, properties.path_name)
        current = self.current(properties)
        self.require_queue(current, AccessRight.CHANGE_PERMISSIONS)
        if descriptor.owner.casefold() != current.security.owner.casefold():
            self.require_queue(current, AccessRight.TAKE_OWNERSHIP)
        if not current.private:
            self.manager.directory.set_security(f"PUBLIC={current.instance}", descriptor)
        updated = current.with_changes(owner=descriptor.owner,
                                       access_list=tuple(descriptor.to_values()))
        self.manager.registry.put_queue(updated)
        return updated.security


def _refuse_queue_manager_rights(descriptor: SecurityDescriptor, queue: str) -> None:
    for entry in descriptor.entries:
        if entry.rights & QUEUE_MANAGER_RIGHTS:
            raise InvalidParameter(
                f"{'|'.join((entry.rights & QUEUE_MANAGER_RIGHTS).names())} for "
                f"{entry.principal!r} is a queue-manager right, not a queue right",
                queue=queue, hint="grant queue rights only (WRITE_MESSAGE, RECEIVE_MESSAGE, "
                "PEEK_MESSAGE, FULL_CONTROL...)")
