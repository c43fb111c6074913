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
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from facade.errors import InvalidParameter
from facade.formatnames import (
    DistributionListFormatName,
    FormatName,
    PublicFormatName,
    QueuePath,
    parse_format_name,
)

if TYPE_CHECKING:
    from facade.destination import Destination
    from facade.directory.client import Recipient
    from facade.directory.objects import PublicQueueEntry
    from facade.interfaces import ResolverHost

__all__ = ["Resolver", "elements_of", "is_dynamic"]

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
