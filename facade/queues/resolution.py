"""Format-name resolution: from what the application wrote to the queues a message goes to.

MSMQ resolves a destination when the queue is opened and again at each send to a distribution
list (its membership is read at send time):

* path names, ``DIRECT=`` and ``MACHINE=`` names are resolved from the queue registry, without the
  directory;
* ``PUBLIC=<guid>`` is looked up in the directory, then in the registry;
* ``DL=<guid>`` is expanded in the directory (nested lists, aliases translated, duplicates
  dropped, cycles broken) and each recipient resolved as above;
* a multiple-element name resolves each element; a queue reached twice gets one copy.

Offline (workgroup mode, or the directory is unreachable) a name that needs the directory fails
as a whole: :meth:`Resolver.destinations` resolves every element before anything is sent, so
nothing is sent to the other elements either.

A received message names, in its signed PROPID_M_DEST_FORMAT_NAME, what its sender sent it to;
:meth:`Resolver.reached_topics` resolves that name again on the receiving side, as the sender's
queue manager resolved it (``.`` is the sender's computer), so the arrival checks can tell a
message sent to a queue from a copy of one sent elsewhere (:mod:`facade.queues.protection`).
"""

from __future__ import annotations

import dataclasses
import operator
import uuid
from typing import TYPE_CHECKING

from facade.errors import InvalidParameter, QueueNotFound, UnsupportedFormatNameOperation
from facade.model.formatnames import (
    DirectFormatName,
    DirectProtocol,
    DistributionListFormatName,
    FormatName,
    MultipleElementFormatName,
    PublicFormatName,
    QueuePath,
    Suffix,
    parse_format_name,
    parse_queue_reference,
)
from facade.security.locality import is_loopback_host

if TYPE_CHECKING:
    from facade.queues.destination import Destination
    from facade.directory.client import Recipient
    from facade.directory.objects import PublicQueueEntry
    from facade.queues.interfaces import ResolverHost

__all__ = ["Resolver", "elements_of", "is_dynamic", "is_local_address", "sent_from"]

#: Parsed recipient names and public-queue destinations a Resolver keeps.
_MAX_CACHED = 1024


def elements_of(reference: FormatName | QueuePath) -> tuple[FormatName | QueuePath, ...]:
    """The elements of a reference: itself, or a multiple-element name's elements."""
    return (reference,) if isinstance(reference, QueuePath) else reference.elements


def is_dynamic(reference: FormatName | QueuePath) -> bool:
    """True when the reference contains a distribution list, whose members are read per send."""
    return any(isinstance(e, DistributionListFormatName) for e in elements_of(reference))


def needs_directory(reference: FormatName | QueuePath) -> bool:
    """True for PUBLIC= and DL= names, and multiple-element names holding one."""
    return not isinstance(reference, QueuePath) and reference.requires_directory


def _is_local(element: FormatName | QueuePath) -> bool:
    if isinstance(element, QueuePath):
        return element.is_local
    return isinstance(element, DirectFormatName) and is_local_address(element)


def is_local_address(fn: DirectFormatName) -> bool:
    """True when a ``DIRECT=`` name points at the computer that resolves it: ``OS:.``,
    ``OS:localhost`` or a loopback ``TCP:`` address."""
    if fn.protocol is DirectProtocol.TCP:
        return is_loopback_host(fn.address)
    return fn.protocol is DirectProtocol.OS and fn.address in (".", "localhost")


def sent_from(reference: FormatName | QueuePath, machine: str) -> FormatName | QueuePath:
    """``reference`` as queue manager ``machine`` resolved it when it sent to it: the local
    computer it names (a ``.`` path name, ``DIRECT=OS:.``, ``DIRECT=OS:localhost`` or a
    loopback ``DIRECT=TCP:`` address, in any element) is ``machine``.

    Args:
        reference: a parsed path name or format name.
        machine (str): the sending queue manager's name (MSMQ's computer name).

    Raises:
        FormatNameError: ``machine`` is not a valid computer name (in a path name).
    """
    if isinstance(reference, QueuePath):
        return reference.with_machine(machine) if reference.is_local else reference
    if isinstance(reference, MultipleElementFormatName):
        return MultipleElementFormatName(tuple(_direct_from(element, machine)
                                               for element in reference.elements))
    return _direct_from(reference, machine)


def _direct_from(element: FormatName, machine: str) -> FormatName:
    if isinstance(element, DirectFormatName) and is_local_address(element):
        # Resolution normalises the computer name as it does any DIRECT=OS: address.
        return dataclasses.replace(element, protocol=DirectProtocol.OS, address=machine)
    return element


class Resolver:
    """Resolves references for one queue manager, through its registry and directory.

    Args:
        manager (ResolverHost): supplies ``resolve`` (registry lookups), ``registry`` and
            ``directory`` (the queue manager).
    """

    def __init__(self, manager: ResolverHost):
        self.manager = manager
        #: Recipient format-name text -> parsed name (parsing is pure; lists repeat them).
        self._parsed: dict[str, FormatName] = {}
        #: Public queue (queue manager, name, journal, subqueue) -> its Destination, reused
        #: while the registry still holds the very properties it was resolved from.
        self._public_destinations: dict[tuple[str, str, bool, str | None], Destination] = {}
        #: (list format name, for_send) -> (the expansion's recipients, the registry
        #: generation, the queues they resolved to): a list sent to again with the same
        #: expansion and an unchanged registry resolves to the same queues.
        self._lists: dict[tuple[str, bool], tuple[list[Recipient], int, list[Destination]]] = {}
        #: (format name, sending queue manager) -> (registry generation, the data topics it
        #: reaches): every signed message received names its destination again.
        self._reached: dict[tuple[str, uuid.UUID | None], tuple[int, frozenset[str]]] = {}
        #: Queue manager GUID -> name (a GUID names one queue manager for good).
        self._machines: dict[uuid.UUID, str] = {}

    def destinations(self, reference: FormatName | QueuePath, *,
                     for_send: bool) -> list[Destination]:
        """Every concrete queue ``reference`` names, without duplicates, in element order.

        Args:
            reference: a parsed path name or format name.
            for_send (bool): check the caller's Send To right on the directory objects named
                (the queue of a PUBLIC= name; a list and its top-level members).

        Returns:
            list[Destination]: at least one queue (a list may expand to none: then empty).

        Raises:
            DirectoryUnavailable: the name needs the directory and there is none or it is
                down (names the directory); nothing was resolved for sending.
            DirectoryObjectNotFound: a PUBLIC= queue or DL= list does not exist.
            QueueNotFound: a queue is not registered.
            AccessDenied: ``for_send`` and the caller lacks Send To.
            UnsupportedFormatNameOperation: an element kind this version cannot reach.
        """
        if needs_directory(reference):
            self.manager.directory  # noqa: B018 - offline: fail before resolving any element
        resolved: list[Destination] = []
        seen: set[str] = set()
        for element in elements_of(reference):
            for destination in self._element(element, for_send):
                if destination.topics.data not in seen:
                    seen.add(destination.topics.data)
                    resolved.append(destination)
        return resolved

    def reached_topics(self, format_name: str, sender: uuid.UUID | None) -> frozenset[str]:
        """The data topics of the queues a message sent to ``format_name`` by queue manager
        ``sender`` went to, resolved now as the sender resolved it (``.`` is the sender's
        computer; a list is expanded again, so a member removed since the send is no longer
        reached). A message's signed PROPID_M_DEST_FORMAT_NAME is checked against the queue
        it is read from with this.

        Args:
            format_name (str): the name sent to (PROPID_M_DEST_FORMAT_NAME): a path name, a
                queue's format name, ``DL=`` or a multiple-element name.
            sender (uuid.UUID | None): the sending queue manager (PROPID_M_SRC_MACHINE_ID);
                needed only when the name is relative to it.

        Returns:
            frozenset[str]: the data topics (a list may reach none).

        Raises:
            FormatNameError: ``format_name`` is no path name or format name.
            UnsupportedFormatNameOperation: it names a journal, subqueue or system queue, or a
                kind of name kmq cannot send to (nothing sent reaches those).
            QueueNotFound: a queue is not registered (any more), or the name is relative to a
                sending queue manager that is not registered (or not given).
            DirectoryUnavailable, DirectoryObjectNotFound: a ``PUBLIC=`` or ``DL=`` element
                and the directory cannot answer for it.
        """
        key = (format_name, sender)
        generation = self.manager.registry.generation()
        known = self._reached.get(key)
        if known is not None and known[0] == generation:
            return known[1]
        reference = parse_queue_reference(format_name)
        for element in elements_of(reference):
            if element.is_read_only or element.suffix is Suffix.SUBQUEUE:
                raise UnsupportedFormatNameOperation(
                    f"{format_name!r} names a journal, subqueue or system queue: no message is "
                    "sent there", queue=format_name)
        if any(_is_local(element) for element in elements_of(reference)):
            reference = sent_from(reference, self._machine(sender, format_name))
        reached = frozenset(d.topics.data for d in self.destinations(reference, for_send=False))
        if not is_dynamic(reference):  # a list's expansion is cached by _distribution_list
            if len(self._reached) >= _MAX_CACHED:
                self._reached.clear()
            self._reached[key] = (generation, reached)
        return reached

    def _machine(self, guid: uuid.UUID | None, format_name: str) -> str:
        """The name of the queue manager with ``guid`` (the sender of a relative name)."""
        if guid is not None and guid not in self._machines:
            self._machines.update((uuid.UUID(record.guid), record.name)
                                  for record in self.manager.registry.queue_managers().values())
        if guid is None or guid not in self._machines:
            raise QueueNotFound(f"{format_name!r} is relative to the queue manager that sent "
                                f"it, and no queue manager with GUID {guid} is registered",
                                queue=format_name)
        return self._machines[guid]

    def _element(self, element: FormatName | QueuePath, for_send: bool) -> list[Destination]:
        if isinstance(element, PublicFormatName):
            return [self._public(element, for_send)]
        if isinstance(element, DistributionListFormatName):
            return self._distribution_list(element, for_send)
        return [self.manager.resolve(element)]

    def _public(self, fn: PublicFormatName, for_send: bool) -> Destination:
        directory = self.manager.directory
        entry = directory.public_queue(fn.queue_id)
        if for_send:
            directory.check_send(entry)
        return self._at(entry, fn)

    def _at(self, entry: PublicQueueEntry, fn: PublicFormatName) -> Destination:
        key = (entry.queue_manager, entry.queue_name, fn.journal, fn.subqueue)
        known = self._public_destinations.get(key)
        if known is not None and known.properties is not None \
                and self.manager.registry.get_queue(known.properties.path_name) is known.properties:
            return known  # the registry's entry is unchanged (same refresh rules as resolve)
        path = QueuePath(entry.queue_manager, entry.queue_name, journal=fn.journal,
                         subqueue=fn.subqueue)
        destination = self.manager.resolve(path)
        if len(self._public_destinations) >= _MAX_CACHED:
            self._public_destinations.clear()
        self._public_destinations[key] = destination
        return destination

    def _parse(self, text: str) -> FormatName:
        parsed = self._parsed.get(text)
        if parsed is None:
            if len(self._parsed) >= _MAX_CACHED:
                self._parsed.clear()
            parsed = self._parsed[text] = parse_format_name(text)
        return parsed

    def _distribution_list(self, fn: DistributionListFormatName,
                           for_send: bool) -> list[Destination]:
        name = str(fn)
        recipients = self.manager.directory.expand(name, check_send=for_send)
        # Read before resolving: a registry change while the members resolve gives a newer
        # generation, so what is kept is never newer than the generation it is kept under.
        generation = self.manager.registry.generation()
        known = self._lists.get((name, for_send))
        if known is not None and known[1] == generation and len(known[0]) == len(recipients) \
                and all(map(operator.is_, known[0], recipients)):
            return list(known[2])  # the directory's cached expansion, the same registry view
        resolved = self._resolve_recipients(fn, recipients)
        if len(self._lists) >= _MAX_CACHED:
            self._lists.clear()
        self._lists[(name, for_send)] = (recipients, generation, list(resolved))
        return resolved

    def _resolve_recipients(self, fn: DistributionListFormatName,
                            recipients: list[Recipient]) -> list[Destination]:
        # Here, not at module level: facade.directory loads ldap3, which only names that need
        # the directory should pay for (kmq start-up time).
        from facade.directory.objects import PublicQueueEntry

        resolved: list[Destination] = []
        for recipient in recipients:
            target = self._parse(recipient.format_name)
            if isinstance(target, DistributionListFormatName) or target.is_multiple_element:
                raise InvalidParameter(
                    f"queue alias {recipient.source.name!r} in {fn} points at {target}, which is "
                    "not a queue", queue=str(fn), hint="point the alias at a queue's format name")
            # Send To is checked on the top-level members only (seed 000), which expand() did.
            if not isinstance(target, PublicFormatName):
                resolved.append(self.manager.resolve(target))
            elif isinstance(recipient.source, PublicQueueEntry):
                # expand() has just read the queue's entry: no second lookup.
                resolved.append(self._at(recipient.source, target))
            else:  # an alias to a public queue: look the queue up
                resolved.append(self._public(target, for_send=False))
        return resolved
