"""MSMQ queue references: path names and format names.

An application names a queue either by a *path name* (``Computer\\Queue``, ``.\\private$\\orders``),
which MSMQ resolves, or by a *format name* (``DIRECT=OS:host\\private$\\orders``), which says
exactly how to reach the queue. This module parses, validates, normalises and formats both::

    Path names         Computer\\Q   Computer\\private$\\Q   [;subqueue | \\Journal$]
                       Computer\\Journal$   Computer\\Deadletter$   Computer\\XactDeadletter$
    PUBLIC=<guid>[;JOURNAL | ;subqueue]
    PRIVATE=<computer guid>\\<1-8 hex digits>[;JOURNAL | ;subqueue]
    DIRECT=<proto>:<address>\\[private$\\]Q[;JOURNAL | ;subqueue]
                       OS:<computer>  TCP:<ipv4>  SPX:<net:node>  IPX:<net:node>
    DIRECT=<proto>:<address>\\SYSTEM$;JOURNAL|DEADLETTER|DEADXACT
    DIRECT=http[s]://host[:port]/<virtual directory>/[private$/]Q       (send only)
    DL=<guid>[@domain]
    MACHINE=<guid>;JOURNAL|DEADLETTER|DEADXACT
    MULTICAST=<224.0.0.0-239.255.255.255>:<port>
    FN,FN,...   of PUBLIC, PRIVATE, DIRECT, DL and MULTICAST elements that can be sent to

Strictness (so that a name has one meaning and one canonical text):

* Keywords are matched ASCII case-insensitively; whitespace around the whole text is ignored, any
  other whitespace is an error except interior spaces in queue and subqueue names.
* ``FormatName:`` (System.Messaging's prefix) may precede a format name, never a path name.
* Queue names are 1-124 characters, subqueue names 1-32 (counted after lowercasing), without
  ``\\ ; + , "``, control characters or whitespace other than an interior space. The system names
  (``private$``, ``system$``, ``journal$``, ``deadletter$``, ``xactdeadletter$``) are not queue
  names and the suffix words (``journal``, ``deadletter``, ``deadxact``, ``xactonly``) are not
  subqueue names, so that no text is ambiguous. URL-form queue names also exclude ``/ ? # %`` and
  spaces, which a URL cannot carry unescaped.
* Computer names and URL hosts are NetBIOS/DNS names: dot-separated labels of ASCII letters,
  digits, ``-`` and ``_``. IPv4 parts and ports are plain decimal without leading zeros (some
  resolvers read ``010`` as octal). GUIDs are 8-4-4-4-12 hex digits, optionally in braces.
* Equality is on normalised fields: keywords upper case, GUIDs, names and hosts lower case, so
  ``str(fn)`` is canonical and ``parse_format_name(str(fn)) == fn``.

Instances are meant to come from the ``parse_*`` functions; constructing one directly does not
validate the fields (except :class:`MultipleElementFormatName`, which checks its elements).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import socket
import unicodedata
import uuid
from dataclasses import dataclass
from typing import NoReturn, Self

from facade.errors import (
    FormatNameError,
    InvalidParameter,
    QueuePathNameError,
    UnsupportedFormatNameOperation,
)

__all__ = [
    "DEFAULT_VIRTUAL_DIRECTORY",
    "MAX_QUEUE_NAME_LENGTH",
    "MAX_SUBQUEUE_NAME_LENGTH",
    "DirectFormatName",
    "DirectProtocol",
    "DistributionListFormatName",
    "FormatName",
    "MachineFormatName",
    "MulticastFormatName",
    "MultipleElementFormatName",
    "PrivateFormatName",
    "PublicFormatName",
    "QueuePath",
    "Suffix",
    "SystemQueue",
    "parse_format_name",
    "parse_path_name",
    "parse_queue_reference",
    "path_to_format_name",
]

#: Longest queue name MSMQ accepts (characters, after lowercasing).
MAX_QUEUE_NAME_LENGTH = 124
#: Longest subqueue name MSMQ accepts (characters, after lowercasing).
MAX_SUBQUEUE_NAME_LENGTH = 32
#: IIS virtual directory of MSMQ's HTTP endpoint, the usual second segment of a URL format name.
DEFAULT_VIRTUAL_DIRECTORY = "msmq"

_MAX_HOST_LENGTH = 255
_MAX_LABEL_LENGTH = 63
_HEX_DIGITS = "0123456789abcdefABCDEF"
_DECIMAL_DIGITS = "0123456789"
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_VDIR_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~")
_GUID_SHAPE = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
_NAME_FORBIDDEN = '\\;+,"\r\n'
_URL_NAME_FORBIDDEN = _NAME_FORBIDDEN + "/?#% "
_RESERVED_QUEUE_NAMES = frozenset(
    {"private$", "system$", "journal$", "deadletter$", "xactdeadletter$"}
)
_RESERVED_SUBQUEUE_NAMES = frozenset({"journal", "deadletter", "deadxact", "xactonly"})
_ELEMENT_KEYWORDS = "PUBLIC=, PRIVATE=, DIRECT=, DL=, MACHINE=, MULTICAST="
_SYSTEM_SUFFIX_HINT = "write ;JOURNAL, ;DEADLETTER or ;DEADXACT"
_GUID_HINT = "write a GUID as 8-4-4-4-12 hex digits, e.g. ae0c5671-f190-12ce-ae10-00dd0114290f"


class Suffix(enum.IntEnum):
    """MSMQ's queue suffix codes (``QUEUE_SUFFIX_TYPE`` in ``mq.h``).

    ``XACTONLY`` (connector queues) is listed for completeness; no format name parsed here has it.
    """

    NONE = 0
    JOURNAL = 1
    DEADLETTER = 2
    DEADXACT = 3
    XACTONLY = 4
    SUBQUEUE = 5


class SystemQueue(enum.Enum):
    """A computer's system queues: its journal and its two dead-letter queues (all read-only)."""

    JOURNAL = "JOURNAL"
    DEADLETTER = "DEADLETTER"
    DEADXACT = "DEADXACT"

    @property
    def suffix(self) -> Suffix:
        """Suffix: the MSMQ suffix code of this system queue."""
        return Suffix[self.name]

    @property
    def path_keyword(self) -> str:
        """str: the last part of this queue's path name (``Computer\\<keyword>``)."""
        return {"JOURNAL": "journal$", "DEADLETTER": "deadletter$", "DEADXACT": "xactdeadletter$"}[
            self.value
        ]


class DirectProtocol(enum.Enum):
    """Transport named by a ``DIRECT=`` format name; HTTP and HTTPS use the URL form."""

    OS = "OS"
    TCP = "TCP"
    SPX = "SPX"
    IPX = "IPX"
    HTTP = "HTTP"
    HTTPS = "HTTPS"

    @property
    def is_url(self) -> bool:
        """bool: True for HTTP and HTTPS, written ``DIRECT=http[s]://...``."""
        return self in (DirectProtocol.HTTP, DirectProtocol.HTTPS)

    @property
    def default_port(self) -> int | None:
        """int | None: the port a URL form omits (80, 443); None for the other protocols."""
        return {"HTTP": 80, "HTTPS": 443}.get(self.value)


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


class FormatName(abc.ABC):
    """Base class of every format name; its properties follow from :attr:`suffix`.

    ``str(fn)`` is the canonical text. Subclasses also provide ``elements`` (a tuple; a
    single-element name gives ``(self,)``).
    """

    elements: tuple[FormatName, ...]

    @property
    @abc.abstractmethod
    def suffix(self) -> Suffix:
        """Suffix: the MSMQ suffix code (``NONE`` for a plain queue)."""

    @abc.abstractmethod
    def __str__(self) -> str: ...

    @property
    def is_journal(self) -> bool:
        """bool: a queue journal or a computer journal."""
        return self.suffix is Suffix.JOURNAL

    @property
    def is_dead_letter(self) -> bool:
        """bool: a dead-letter queue, transactional or not."""
        return self.suffix in (Suffix.DEADLETTER, Suffix.DEADXACT)

    @property
    def is_transactional_dead_letter(self) -> bool:
        """bool: the transactional dead-letter queue (``DEADXACT``)."""
        return self.suffix is Suffix.DEADXACT

    @property
    def is_read_only(self) -> bool:
        """bool: journals and dead-letter queues: only the system writes, apps read and delete."""
        return self.is_journal or self.is_dead_letter

    @property
    def requires_directory(self) -> bool:
        """bool: resolving the name needs the directory (PUBLIC=, DL=), so fails offline."""
        return False

    @property
    def can_send(self) -> bool:
        """bool: messages may be sent to it (not to read-only queues, nor to subqueues)."""
        return not self.is_read_only and self.suffix is not Suffix.SUBQUEUE

    @property
    def can_receive(self) -> bool:
        """bool: messages may be peeked or received from it."""
        return True

    @property
    def is_multiple_element(self) -> bool:
        """bool: a comma-separated list of destinations."""
        return False


class _SingleElementFormatName(FormatName):
    """A format name that names one queue, list or address."""

    @property
    def elements(self) -> tuple[FormatName, ...]:  # type: ignore[override]
        """tuple[FormatName, ...]: ``(self,)``."""
        return (self,)


class _QueueSuffixMixin:
    """``;JOURNAL`` / ``;subqueue`` handling shared by queue format names and path names."""

    journal: bool
    subqueue: str | None
    system_queue: SystemQueue | None = None

    @property
    def suffix(self) -> Suffix:
        """Suffix: the MSMQ suffix code (``NONE`` for a plain queue)."""
        if self.system_queue is not None:
            return self.system_queue.suffix
        if self.journal:
            return Suffix.JOURNAL
        return Suffix.NONE if self.subqueue is None else Suffix.SUBQUEUE

    def _suffix_text(self) -> str:
        if self.journal:
            return ";JOURNAL"
        return "" if self.subqueue is None else f";{self.subqueue}"

    def _require_queue(self, operation: str) -> None:
        if self.system_queue is not None:
            raise UnsupportedFormatNameOperation(
                f"{operation}: {self} is a system queue, which has no parent queue or subqueues",
                queue=str(self),
            )

    def without_suffix(self) -> Self:
        """The queue itself: the parent of a journal or subqueue, unchanged for a plain queue.

        Raises:
            UnsupportedFormatNameOperation: for a system queue (computer journal, dead-letter
                queue), which belongs to no queue.
        """
        self._require_queue("without_suffix")
        return dataclasses.replace(self, journal=False, subqueue=None)  # type: ignore[type-var]

    def with_journal(self) -> Self:
        """The journal of this queue (of the parent queue, for a subqueue).

        Raises:
            UnsupportedFormatNameOperation: for a system queue.
        """
        self._require_queue("with_journal")
        return dataclasses.replace(self, journal=True, subqueue=None)  # type: ignore[type-var]

    def with_subqueue(self, name: str) -> Self:
        """The subqueue ``name`` of this queue (of the parent queue, for a journal or subqueue).

        Args:
            name (str): subqueue name, 1-32 characters; stored lowercase.

        Raises:
            FormatNameError: ``name`` is not a valid subqueue name (the message says why).
            InvalidParameter: ``name`` is not a str.
            UnsupportedFormatNameOperation: for a system queue.
        """
        self._require_queue("with_subqueue")
        cursor = _cursor_over(name, "subqueue name", strip=False)
        subqueue = _parse_subqueue(cursor)
        return dataclasses.replace(self, journal=False, subqueue=subqueue)  # type: ignore[type-var]


@dataclass(frozen=True)
class QueuePath(_QueueSuffixMixin):
    """A path name, ``Computer\\[private$\\]Queue`` (not a format name: MSMQ resolves it).

    Attributes:
        machine (str): computer name, lowercase, or ``.`` for the local computer.
        queue_name (str | None): queue name, lowercase; None for a computer's system queue.
        private (bool): a private queue (``private$\\``).
        journal (bool): the queue's journal (``Computer\\Queue\\Journal$``).
        subqueue (str | None): subqueue name, lowercase (``Computer\\Queue;sub``).
        system_queue (SystemQueue | None): ``Computer\\Journal$``, ``Deadletter$`` or
            ``XactDeadletter$``.
    """

    machine: str
    queue_name: str | None
    private: bool = False
    journal: bool = False
    subqueue: str | None = None
    system_queue: SystemQueue | None = None

    def __str__(self) -> str:
        if self.system_queue is not None:
            return f"{self.machine}\\{self.system_queue.path_keyword}"
        folder = "private$\\" if self.private else ""
        text = f"{self.machine}\\{folder}{self.queue_name}"
        if self.journal:
            return text + "\\journal$"
        return text if self.subqueue is None else f"{text};{self.subqueue}"

    @property
    def is_private(self) -> bool:
        """bool: a private queue (or its journal or subqueue)."""
        return self.private

    @property
    def is_local(self) -> bool:
        """bool: the computer is ``.``, the local computer."""
        return self.machine == "."

    @property
    def is_read_only(self) -> bool:
        """bool: a journal or dead-letter queue, which applications may only read."""
        return self.journal or self.system_queue is not None

    def with_machine(self, name: str) -> QueuePath:
        """The same queue on computer ``name``.

        Args:
            name (str): NetBIOS or DNS computer name, or ``.``; stored lowercase.

        Raises:
            FormatNameError: ``name`` is not a valid computer name.
            InvalidParameter: ``name`` is not a str.
        """
        cursor = _cursor_over(name, "computer name", strip=False)
        return dataclasses.replace(self, machine=_parse_host(cursor, "computer name", local=True))

    def to_format_name(self, machine: str | None = None) -> DirectFormatName:
        """Shortcut for :func:`path_to_format_name` ``(self, machine)``."""
        return path_to_format_name(self, machine)


@dataclass(frozen=True)
class PublicFormatName(_QueueSuffixMixin, _SingleElementFormatName):
    """``PUBLIC=<guid>[;JOURNAL | ;subqueue]``: a queue registered in the directory.

    Attributes:
        queue_id (uuid.UUID): the queue's directory GUID.
        journal (bool): the queue's journal.
        subqueue (str | None): subqueue name, lowercase.
    """

    queue_id: uuid.UUID
    journal: bool = False
    subqueue: str | None = None

    def __str__(self) -> str:
        return f"PUBLIC={self.queue_id}{self._suffix_text()}"

    @property
    def requires_directory(self) -> bool:
        """bool: always True: the GUID is looked up in the directory."""
        return True


@dataclass(frozen=True)
class PrivateFormatName(_QueueSuffixMixin, _SingleElementFormatName):
    """``PRIVATE=<computer guid>\\<queue number>[;JOURNAL | ;subqueue]``.

    Attributes:
        machine_id (uuid.UUID): GUID of the computer holding the queue.
        queue_number (int): the queue's number on that computer (0 to 0xFFFFFFFF).
        journal (bool): the queue's journal.
        subqueue (str | None): subqueue name, lowercase.
    """

    machine_id: uuid.UUID
    queue_number: int
    journal: bool = False
    subqueue: str | None = None

    def __str__(self) -> str:
        return f"PRIVATE={self.machine_id}\\{self.queue_number:08x}{self._suffix_text()}"


@dataclass(frozen=True)
class DirectFormatName(_QueueSuffixMixin, _SingleElementFormatName):
    """``DIRECT=``: a queue reached by address, never through the directory.

    Attributes:
        protocol (DirectProtocol): OS, TCP, SPX, IPX, or HTTP/HTTPS for the URL form.
        address (str): computer name (OS, lowercase, may be ``.``), IPv4 address (TCP),
            ``network:node`` in hex (SPX, IPX, zero-padded lowercase) or host (URL form).
        queue_name (str | None): queue name, lowercase; None for a system queue.
        private (bool): a private queue.
        system_queue (SystemQueue | None): ``SYSTEM$;JOURNAL|DEADLETTER|DEADXACT``.
        journal (bool): the queue's journal (not in the URL form).
        subqueue (str | None): subqueue name, lowercase (not in the URL form).
        url_port (int | None): URL form only; None for the scheme's default port.
        virtual_directory (str | None): URL form only, lowercase (usually ``msmq``).
    """

    protocol: DirectProtocol
    address: str
    queue_name: str | None
    private: bool = False
    system_queue: SystemQueue | None = None
    journal: bool = False
    subqueue: str | None = None
    url_port: int | None = None
    virtual_directory: str | None = None

    def __post_init__(self) -> None:
        # An explicit default port is the same endpoint; normalise so equality holds.
        if self.url_port is not None and self.url_port == self.protocol.default_port:
            object.__setattr__(self, "url_port", None)

    def __str__(self) -> str:
        private = "private$" if self.private else ""
        if self.protocol.is_url:
            port = "" if self.url_port is None else f":{self.url_port}"
            folder = f"{private}/" if private else ""
            return (
                f"DIRECT={self.protocol.value.lower()}://{self.address}{port}/"
                f"{self.virtual_directory}/{folder}{self.queue_name}"
            )
        head = f"DIRECT={self.protocol.value}:{self.address}\\"
        if self.system_queue is not None:
            return f"{head}SYSTEM$;{self.system_queue.value}"
        folder = f"{private}\\" if private else ""
        return f"{head}{folder}{self.queue_name}{self._suffix_text()}"

    @property
    def is_url(self) -> bool:
        """bool: the HTTP/HTTPS URL form, which can only be sent to."""
        return self.protocol.is_url

    @property
    def can_receive(self) -> bool:
        """bool: False for the URL form (MSMQ's HTTP endpoint only accepts messages)."""
        return not self.is_url

    def _require_queue(self, operation: str) -> None:
        super()._require_queue(operation)
        if self.is_url:
            raise UnsupportedFormatNameOperation(
                f"{operation}: URL-form direct format names are send-only and have no journal "
                "or subqueues",
                queue=str(self),
                hint="use DIRECT=OS: or DIRECT=TCP: to reach the journal or a subqueue",
            )


@dataclass(frozen=True)
class DistributionListFormatName(_SingleElementFormatName):
    """``DL=<guid>[@domain]``: a distribution list in the directory (send, admin, response only).

    Attributes:
        list_id (uuid.UUID): the distribution list's directory GUID.
        domain (str | None): DNS domain holding the list, lowercase.
    """

    list_id: uuid.UUID
    domain: str | None = None

    def __str__(self) -> str:
        return f"DL={self.list_id}" + ("" if self.domain is None else f"@{self.domain}")

    @property
    def suffix(self) -> Suffix:
        """Suffix: always ``NONE``."""
        return Suffix.NONE

    @property
    def requires_directory(self) -> bool:
        """bool: always True: the list is expanded from the directory."""
        return True

    @property
    def can_receive(self) -> bool:
        """bool: always False: a list is a set of destinations, not a queue."""
        return False


@dataclass(frozen=True)
class MachineFormatName(_SingleElementFormatName):
    """``MACHINE=<guid>;JOURNAL|DEADLETTER|DEADXACT``: a computer's read-only system queue.

    Attributes:
        machine_id (uuid.UUID): the computer's GUID.
        system_queue (SystemQueue): which system queue.
    """

    machine_id: uuid.UUID
    system_queue: SystemQueue

    def __str__(self) -> str:
        return f"MACHINE={self.machine_id};{self.system_queue.value}"

    @property
    def suffix(self) -> Suffix:
        """Suffix: the system queue's code."""
        return self.system_queue.suffix


@dataclass(frozen=True)
class MulticastFormatName(_SingleElementFormatName):
    """``MULTICAST=<address>:<port>``: PGM multicast; no transactions, cannot be read.

    Attributes:
        address (str): class-D IPv4 address (224.0.0.0-239.255.255.255), dotted decimal.
        port (int): 0-65535.
    """

    address: str
    port: int

    def __str__(self) -> str:
        return f"MULTICAST={self.address}:{self.port}"

    @property
    def suffix(self) -> Suffix:
        """Suffix: always ``NONE``."""
        return Suffix.NONE

    @property
    def can_receive(self) -> bool:
        """bool: always False: multicast messages arrive in the queues bound to the address."""
        return False


@dataclass(frozen=True)
class MultipleElementFormatName(FormatName):
    """``FN,FN,...``: one message sent to every element (send, admin and response queues only).

    Attributes:
        elements (tuple[FormatName, ...]): two or more PUBLIC, PRIVATE, DIRECT, DL or MULTICAST
            format names that can be sent to, in text order (duplicates kept).

    Raises:
        FormatNameError: fewer than two elements, or an element that is a multiple-element name,
            ``MACHINE=``, a journal, a dead-letter queue or a subqueue (MSMQ refuses read-only
            queues in a multiple-element name; a subqueue cannot be sent to).
        InvalidParameter: an element that is not a format name.
    """

    elements: tuple[FormatName, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", tuple(self.elements))
        for element in self.elements:
            if not isinstance(element, FormatName):
                raise InvalidParameter.wrong_type("elements", "FormatName objects", element)
        text, offset = str(self), 0
        if len(self.elements) < 2:
            raise FormatNameError(
                "a multiple-element format name needs at least two elements",
                text=text,
                position=0,
                hint="use the single format name itself",
            )
        for element in self.elements:
            problem = _multiple_element_problem(element)
            if problem is not None:
                raise FormatNameError(problem[0], text=text, position=offset, hint=problem[1])
            offset += len(str(element)) + 1

    def __str__(self) -> str:
        return ",".join(str(element) for element in self.elements)

    @property
    def suffix(self) -> Suffix:
        """Suffix: always ``NONE``."""
        return Suffix.NONE

    @property
    def requires_directory(self) -> bool:
        """bool: True if any element is PUBLIC= or DL= (then nothing is sent when offline)."""
        return any(element.requires_directory for element in self.elements)

    @property
    def can_receive(self) -> bool:
        """bool: always False: a list of destinations is only sent to."""
        return False

    @property
    def is_multiple_element(self) -> bool:
        """bool: always True."""
        return True


def _multiple_element_problem(element: FormatName) -> tuple[str, str] | None:
    """Why ``element`` may not appear in a multiple-element name: (message, hint), or None."""
    if isinstance(element, MultipleElementFormatName):
        return "a multiple-element format name cannot be nested", "list its elements instead"
    if element.is_read_only:
        kind = {
            Suffix.JOURNAL: "journal",
            Suffix.DEADLETTER: "dead-letter queue",
            Suffix.DEADXACT: "transactional dead-letter queue",
        }[element.suffix]
        return (
            f"read-only queue ({kind}) not allowed in a multiple-element format name",
            "remove this element: journals and dead-letter queues can only be read",
        )
    if element.suffix is Suffix.SUBQUEUE:
        return (
            "subqueue not allowed in a multiple-element format name",
            "name the parent queue: messages reach a subqueue only by being moved into it",
        )
    return None


# --------------------------------------------------------------------------------------------
# Scanner and lexical checks
# --------------------------------------------------------------------------------------------


class _Cursor:
    """A read position in ``text[pos:end]``; error positions are offsets into the whole ``text``."""

    __slots__ = ("text", "pos", "end")

    def __init__(self, text: str, pos: int, end: int):
        self.text, self.pos, self.end = text, pos, end

    def fail(self, message: str, position: int | None = None, hint: str | None = None) -> NoReturn:
        position = self.pos if position is None else position
        raise FormatNameError(message, text=self.text, position=position, hint=hint)

    def at_end(self) -> bool:
        return self.pos >= self.end

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < self.end else ""

    def find(self, delimiters: str) -> int:
        """Offset of the first of ``delimiters`` at or after ``pos``, or ``end``."""
        for index in range(self.pos, self.end):
            if self.text[index] in delimiters:
                return index
        return self.end

    def take(self, literal: str) -> bool:
        """Consume ``literal`` if it comes next, ASCII case-insensitively."""
        stop = self.pos + len(literal)
        if stop <= self.end and _is_keyword(self.text[self.pos : stop], literal):
            self.pos = stop
            return True
        return False

    def expect(self, literal: str, message: str, hint: str | None = None) -> None:
        if not self.take(literal):
            self.fail(message, hint=hint)

    def span(self, delimiters: str) -> tuple[int, int]:
        """Consume up to (not including) the next delimiter; return the consumed span."""
        start, self.pos = self.pos, self.find(delimiters)
        return start, self.pos

    def expect_end(self, message: str, hint: str | None = None) -> None:
        if not self.at_end():
            self.fail(message, hint=hint)


def _is_keyword(word: str, keyword: str) -> bool:
    # ASCII only: "publıc".upper() == "PUBLIC" must not match (dotless i, long s, Kelvin sign).
    return word.isascii() and word.upper() == keyword.upper()


def _cursor_over(text: object, what: str, *, strip: bool = True) -> _Cursor:
    """A cursor over ``text`` without surrounding whitespace; rejects non-str and empty text.

    Raises:
        InvalidParameter: ``text`` is not a str (``what`` names it).
        FormatNameError: ``text`` is empty.
    """
    if not isinstance(text, str):
        raise InvalidParameter.wrong_type(what, "a str", text)
    start, end = 0, len(text)
    if strip:
        start, end = len(text) - len(text.lstrip()), len(text.rstrip())
    if start >= end:
        raise FormatNameError(f"expected a {what}, got empty text", text=text, position=0)
    return _Cursor(text, start, end)


def _check_name(
    cursor: _Cursor, start: int, end: int, what: str, max_length: int, forbidden: str
) -> str:
    """Validate a queue or subqueue name in ``text[start:end]``; return it lowercase."""
    text = cursor.text
    if start == end:
        cursor.fail(f"expected a {what}", start)
    length = 0
    for index in range(start, end):
        char = text[index]
        if char in forbidden:
            cursor.fail(f"{what} cannot contain {char!r}", index)
        if unicodedata.category(char) in ("Cc", "Cs") or (char.isspace() and char != " "):
            cursor.fail(f"{what} cannot contain control or whitespace character {char!r}", index)
        # Names compare case-insensitively, so the limit applies to the lowercase form.
        length += len(char.lower())
        if length > max_length:
            cursor.fail(f"{what} longer than {max_length} characters", index)
    if text[start] == " " or text[end - 1] == " ":
        position = start if text[start] == " " else end - 1
        cursor.fail(f"{what} cannot start or end with a space", position)
    return text[start:end].lower()


def _parse_queue_name(cursor: _Cursor, delimiters: str, *, url: bool = False) -> str:
    start, end = cursor.span(delimiters)
    forbidden = _URL_NAME_FORBIDDEN if url else _NAME_FORBIDDEN
    name = _check_name(cursor, start, end, "queue name", MAX_QUEUE_NAME_LENGTH, forbidden)
    if name in _RESERVED_QUEUE_NAMES:
        cursor.fail(
            f"{cursor.text[start:end]!r} is a reserved system name, not a queue name",
            start,
            hint="private queues are private$\\Name; system queues are SYSTEM$;<suffix> in a "
            "format name and Computer\\Journal$ etc. in a path name",
        )
    return name


def _parse_subqueue(cursor: _Cursor) -> str:
    """Consume a subqueue name up to the end of the text."""
    start, end = cursor.span("")
    name = _check_name(
        cursor, start, end, "subqueue name", MAX_SUBQUEUE_NAME_LENGTH, _NAME_FORBIDDEN
    )
    if name in _RESERVED_SUBQUEUE_NAMES:
        cursor.fail(
            f"{cursor.text[start:end]!r} is a suffix keyword, not a subqueue name",
            start,
            hint="a journal is ;JOURNAL in a format name and Computer\\Queue\\Journal$ in a path "
            "name; ;DEADLETTER and ;DEADXACT only follow SYSTEM$ or MACHINE=<guid>",
        )
    return name


def _parse_host(cursor: _Cursor, what: str, *, local: bool) -> str:
    """Consume a NetBIOS/DNS name (or ``.`` when ``local``) up to the end; return it lowercase."""
    text, start, end = cursor.text, cursor.pos, cursor.end
    if start == end:
        cursor.fail(f"expected a {what}")
    cursor.pos = end
    if local and text[start:end] == ".":
        return "."
    if end - start > _MAX_HOST_LENGTH:
        cursor.fail(f"{what} longer than {_MAX_HOST_LENGTH} characters", start + _MAX_HOST_LENGTH)
    label_start = start
    for index in range(start, end + 1):
        if index == end or text[index] == ".":
            if index == label_start:
                # Point at the dot that makes the label empty.
                cursor.fail(f"empty label in {what}", index if index < end else index - 1)
            if index - label_start > _MAX_LABEL_LENGTH:
                cursor.fail(f"{what} label longer than 63 characters", label_start + 63)
            label_start = index + 1
        elif text[index] not in _HOST_CHARS:
            cursor.fail(
                f"{what} cannot contain {text[index]!r}",
                index,
                hint="use a NetBIOS or DNS name: ASCII letters, digits, '-', '_' and dots",
            )
    return text[start:end].lower()


def _parse_decimal(cursor: _Cursor, start: int, end: int, maximum: int, what: str) -> int:
    """The plain decimal number (no sign, no leading zero) in ``text[start:end]``."""
    digits = cursor.text[start:end]
    if not digits:
        cursor.fail(f"expected {what}", start)
    for index in range(start, end):
        if cursor.text[index] not in _DECIMAL_DIGITS:
            cursor.fail(f"expected a decimal digit in {what}", index)
    if len(digits) > 1 and digits[0] == "0":
        cursor.fail(f"leading zero in {what}", start, hint="write the number without leading zeros")
    if len(digits) > len(str(maximum)) or int(digits) > maximum:
        cursor.fail(f"{what} greater than {maximum}", start)
    return int(digits)


def _parse_ipv4(cursor: _Cursor, start: int, end: int, what: str) -> tuple[int, ...]:
    """The four parts of the dotted-decimal IPv4 address in ``text[start:end]``."""
    parts = []
    for number in range(4):
        stop = start
        while stop < end and cursor.text[stop] in _DECIMAL_DIGITS:
            stop += 1
        if stop == start:
            cursor.fail(f"expected a number 0-255 in {what}", start)
        parts.append(_parse_decimal(cursor, start, stop, 255, f"{what} part"))
        if number < 3:
            if stop >= end or cursor.text[stop] != ".":
                cursor.fail(f"expected '.' in {what} (four numbers 0-255)", stop)
            stop += 1
        start = stop
    if start < end:
        cursor.fail(f"unexpected {cursor.text[start]!r} after {what}", start)
    return tuple(parts)


def _parse_hex(cursor: _Cursor, start: int, end: int, max_digits: int, what: str) -> int:
    if start == end:
        cursor.fail(f"expected {what} (1-{max_digits} hex digits)", start)
    for index in range(start, end):
        if cursor.text[index] not in _HEX_DIGITS:
            cursor.fail(f"expected a hex digit in {what}", index)
    if end - start > max_digits:
        cursor.fail(f"{what} longer than {max_digits} hex digits", start + max_digits)
    return int(cursor.text[start:end], 16)


def _parse_guid(cursor: _Cursor, what: str) -> uuid.UUID:
    """Consume a GUID: 8-4-4-4-12 hex digits, optionally in braces."""
    braced = cursor.take("{")
    start = cursor.pos
    for shape in _GUID_SHAPE:
        char = cursor.peek()
        if shape == "-" and char != "-":
            cursor.fail(f"expected '-' in {what} GUID", hint=_GUID_HINT)
        if shape == "x" and (not char or char not in _HEX_DIGITS):
            cursor.fail(f"expected a hex digit in {what} GUID", hint=_GUID_HINT)
        cursor.pos += 1
    guid = uuid.UUID(cursor.text[start : cursor.pos])
    if braced:
        cursor.expect("}", f"expected '}}' closing the {what} GUID")
    return guid


def _parse_system_queue(cursor: _Cursor) -> SystemQueue:
    """Consume ``JOURNAL``, ``DEADLETTER`` or ``DEADXACT`` ending the text."""
    word = cursor.text[cursor.pos : cursor.end]
    for queue in SystemQueue:
        if _is_keyword(word, queue.value):
            cursor.pos = cursor.end
            return queue
    cursor.fail("expected JOURNAL, DEADLETTER or DEADXACT after ';'")


def _parse_queue_suffix(cursor: _Cursor) -> tuple[bool, str | None]:
    """Consume an optional ``;JOURNAL`` or ``;subqueue``; return (journal, subqueue)."""
    if cursor.at_end():
        return False, None
    cursor.expect(";", "expected ';JOURNAL', ';<subqueue>' or the end of the format name")
    if _is_keyword(cursor.text[cursor.pos : cursor.end], "JOURNAL"):
        cursor.pos = cursor.end
        return True, None
    return False, _parse_subqueue(cursor)


def _take_private(cursor: _Cursor, separator: str) -> bool:
    """Consume ``private$`` and its separator if they come next."""
    mark = cursor.pos
    if not cursor.take("private$"):
        return False
    if cursor.take(separator):
        return True
    if cursor.at_end() or cursor.peek() in ";\\/":
        cursor.fail(f"expected '{separator}' and a queue name after 'private$'")
    cursor.pos = mark  # "private$x" is an ordinary queue name
    return False


# --------------------------------------------------------------------------------------------
# Format name elements
# --------------------------------------------------------------------------------------------


def _parse_public(cursor: _Cursor) -> PublicFormatName:
    queue_id = _parse_guid(cursor, "queue")
    journal, subqueue = _parse_queue_suffix(cursor)
    return PublicFormatName(queue_id, journal, subqueue)


def _parse_private(cursor: _Cursor) -> PrivateFormatName:
    machine_id = _parse_guid(cursor, "computer")
    cursor.expect("\\", "expected '\\' and the queue number after the computer GUID")
    start, end = cursor.span(";")
    number = _parse_hex(cursor, start, end, 8, "private queue number")
    journal, subqueue = _parse_queue_suffix(cursor)
    return PrivateFormatName(machine_id, number, journal, subqueue)


def _parse_direct(cursor: _Cursor) -> DirectFormatName:
    if cursor.take("HTTPS://"):
        return _parse_direct_url(cursor, DirectProtocol.HTTPS)
    if cursor.take("HTTP://"):
        return _parse_direct_url(cursor, DirectProtocol.HTTP)
    for protocol in (DirectProtocol.OS, DirectProtocol.TCP, DirectProtocol.SPX, DirectProtocol.IPX):
        if cursor.take(f"{protocol.value}:"):
            break
    else:
        cursor.fail(
            "expected a protocol OS:, TCP:, http://, https://, SPX: or IPX: after DIRECT=",
            hint="HTTP and HTTPS use the URL form: DIRECT=http://host/msmq/private$/queue",
        )
    address = _parse_direct_address(cursor, protocol)
    cursor.expect("\\", "expected '\\' and a queue name after the address")
    mark = cursor.pos
    if cursor.take("SYSTEM$"):
        if cursor.at_end():
            cursor.fail("expected ';' and a system queue after SYSTEM$", hint=_SYSTEM_SUFFIX_HINT)
        if cursor.take(";"):
            system_queue = _parse_system_queue(cursor)
            return DirectFormatName(protocol, address, None, system_queue=system_queue)
        cursor.pos = mark  # "system$x" is an ordinary queue name
    private = _take_private(cursor, "\\")
    queue_name = _parse_queue_name(cursor, ";")
    journal, subqueue = _parse_queue_suffix(cursor)
    return DirectFormatName(protocol, address, queue_name, private, None, journal, subqueue)


def _parse_direct_address(cursor: _Cursor, protocol: DirectProtocol) -> str:
    start, end = cursor.span("\\")
    if protocol is DirectProtocol.OS:
        return _parse_host(_Cursor(cursor.text, start, end), "computer name", local=True)
    if protocol is DirectProtocol.TCP:
        if start == end:
            cursor.fail("expected an IPv4 address after TCP:", start)
        return ".".join(map(str, _parse_ipv4(cursor, start, end, "IPv4 address")))
    # SPX and IPX: network number and node address, in hex.
    colon = cursor.text.find(":", start, end)
    if colon < 0:
        cursor.fail(f"expected network:node (hex) after {protocol.value}:", start)
    network = _parse_hex(cursor, start, colon, 8, "IPX network number")
    node = _parse_hex(cursor, colon + 1, end, 12, "IPX node address")
    return f"{network:08x}:{node:012x}"


def _parse_direct_url(cursor: _Cursor, protocol: DirectProtocol) -> DirectFormatName:
    start, end = cursor.span(":/")
    host = _parse_host(_Cursor(cursor.text, start, end), "host name", local=False)
    port = None
    if cursor.take(":"):
        start, end = cursor.span("/")
        port = _parse_decimal(cursor, start, end, 65535, "port")
        if port == 0:
            cursor.fail("port 0 is not a valid HTTP port", start)
    cursor.expect("/", "expected '/' and the virtual directory (usually msmq) after the host")
    start, end = cursor.span("/")
    if start == end or cursor.text[start:end] in (".", ".."):
        cursor.fail("expected a virtual directory such as msmq", start)
    for index in range(start, end):
        if cursor.text[index] not in _VDIR_CHARS:
            cursor.fail(f"virtual directory cannot contain {cursor.text[index]!r}", index)
    directory = cursor.text[start:end].lower()
    cursor.expect("/", "expected '/' and a queue name after the virtual directory")
    private = _take_private(cursor, "/")
    semicolon = cursor.find(";")
    if semicolon < cursor.end:
        cursor.fail(
            "URL-form direct format names are send-only: no ;JOURNAL or subqueue",
            semicolon,
            hint="use DIRECT=OS: or DIRECT=TCP: to read a journal or subqueue",
        )
    queue_name = _parse_queue_name(cursor, "", url=True)
    return DirectFormatName(
        protocol, host, queue_name, private, url_port=port, virtual_directory=directory
    )


def _parse_distribution_list(cursor: _Cursor) -> DistributionListFormatName:
    list_id = _parse_guid(cursor, "distribution list")
    domain = None
    if cursor.take("@"):
        domain = _parse_host(cursor, "domain name", local=False)
    cursor.expect_end("expected '@domain' or the end after the distribution list GUID")
    return DistributionListFormatName(list_id, domain)


def _parse_machine(cursor: _Cursor) -> MachineFormatName:
    machine_id = _parse_guid(cursor, "computer")
    if cursor.at_end():
        cursor.fail("MACHINE= needs ';' and a system queue", hint=_SYSTEM_SUFFIX_HINT)
    cursor.expect(";", "expected ';' after the computer GUID", hint=_SYSTEM_SUFFIX_HINT)
    return MachineFormatName(machine_id, _parse_system_queue(cursor))


def _parse_multicast(cursor: _Cursor) -> MulticastFormatName:
    start, end = cursor.span(":")
    if start == end:
        cursor.fail("expected a multicast IPv4 address after MULTICAST=", start)
    parts = _parse_ipv4(cursor, start, end, "multicast address")
    if not 224 <= parts[0] <= 239:
        cursor.fail(
            "multicast address must be class D (224.0.0.0-239.255.255.255)",
            start,
            hint="MULTICAST= takes a multicast group address, not a host address",
        )
    cursor.expect(":", "expected ':' and a port after the multicast address")
    start, end = cursor.span("")
    port = _parse_decimal(cursor, start, end, 65535, "port")
    return MulticastFormatName(".".join(map(str, parts)), port)


_ELEMENT_PARSERS = (
    ("PUBLIC=", _parse_public),
    ("PRIVATE=", _parse_private),
    ("DIRECT=", _parse_direct),
    ("DL=", _parse_distribution_list),
    ("MACHINE=", _parse_machine),
    ("MULTICAST=", _parse_multicast),
)


def _parse_element(cursor: _Cursor) -> FormatName:
    """Parse one format name filling the cursor's whole range."""
    for keyword, parser in _ELEMENT_PARSERS:
        if cursor.take(keyword):
            element: FormatName = parser(cursor)
            cursor.expect_end("expected the end of the format name")
            return element
    hint = None
    if "\\" in cursor.text[cursor.pos : cursor.end] and not _looks_like_format_name(cursor):
        hint = "this looks like a path name: use parse_path_name, or path_to_format_name"
    cursor.fail(f"expected one of {_ELEMENT_KEYWORDS}", hint=hint)


def _looks_like_format_name(cursor: _Cursor) -> bool:
    """MSMQ's rule for "any queue reference": an '=' before any '\\' makes it a format name."""
    equals = cursor.text.find("=", cursor.pos, cursor.end)
    backslash = cursor.text.find("\\", cursor.pos, cursor.end)
    return equals >= 0 and (backslash < 0 or equals < backslash)


# --------------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------------


def parse_format_name(text: str) -> FormatName:
    """Parse an MSMQ format name (``MQOpenQueue``'s format name argument).

    Args:
        text (str): a format name, optionally prefixed ``FormatName:``; whitespace around it is
            ignored.

    Returns:
        FormatName: the element's class for a single name, a :class:`MultipleElementFormatName`
        for a comma-separated list.

    Raises:
        FormatNameError: the text does not follow the grammar (MQ_ERROR_ILLEGAL_FORMATNAME);
            ``.position`` points at the first offending character and the message says what was
            expected there.
        InvalidParameter: ``text`` is not a str.
    """
    cursor = _cursor_over(text, "format name")
    if cursor.take("FORMATNAME:") and cursor.at_end():
        cursor.fail("expected a format name after 'FormatName:'")
    commas = [i for i in range(cursor.pos, cursor.end) if text[i] == ","]
    if not commas:
        return _parse_element(cursor)
    elements = []
    for start, end in zip([cursor.pos] + [c + 1 for c in commas], commas + [cursor.end]):
        if start == end:
            # Point at the comma that leaves the element empty (the trailing one, at the end).
            cursor.fail(
                "empty element in a multiple-element format name",
                start if start < cursor.end else start - 1,
                hint="separate format names with single commas, without a trailing comma",
            )
        element = _parse_element(_Cursor(text, start, end))
        problem = _multiple_element_problem(element)
        if problem is not None:
            cursor.fail(problem[0], start, hint=problem[1])
        elements.append(element)
    return MultipleElementFormatName(tuple(elements))


def parse_path_name(text: str) -> QueuePath:
    """Parse an MSMQ path name (``Computer\\[private$\\]Queue``, as given to ``MQCreateQueue``).

    Args:
        text (str): the path name; whitespace around it is ignored.

    Returns:
        QueuePath: the normalised path.

    Raises:
        QueuePathNameError: (a FormatNameError) the text is not a path name
            (MQ_ERROR_ILLEGAL_QUEUE_PATHNAME); ``.position`` points at the first offending
            character and the message says what was expected there.
        InvalidParameter: ``text`` is not a str.
    """
    try:
        return _parse_path_name(text)
    except QueuePathNameError:
        raise
    except FormatNameError as exc:
        raise QueuePathNameError(
            exc.message.rsplit(" at position ", 1)[0], text=exc.text, position=exc.position,
            hint=exc.hint,
        ) from None


def _parse_path_name(text: str) -> QueuePath:
    cursor = _cursor_over(text, "path name")
    hint = ("a path name is Computer\\Queue or Computer\\private$\\Queue ('.' is this computer); "
            "a format name (PUBLIC=, DIRECT=...) names an existing queue, it cannot be created")
    if cursor.take("FORMATNAME:") or _looks_like_format_name(cursor):
        cursor.fail("expected a path name (Computer\\Queue), not a format name", cursor.pos, hint)
    start, end = cursor.span("\\")
    machine = _parse_host(_Cursor(text, start, end), "computer name", local=True)
    cursor.expect("\\", "expected '\\' and a queue name after the computer name")
    for queue in SystemQueue:
        mark = cursor.pos
        if cursor.take(queue.path_keyword):
            if cursor.at_end():
                return QueuePath(machine, None, system_queue=queue)
            if cursor.peek() in ";\\":
                cursor.fail(f"nothing may follow the system queue {queue.path_keyword!r}")
            cursor.pos = mark
    private = _take_private(cursor, "\\")
    queue_name = _parse_queue_name(cursor, "\\;")
    if cursor.take("\\"):
        cursor.expect(
            "journal$",
            "expected 'journal$' after '\\' (queue names cannot contain '\\')",
            hint="a queue's journal is Computer\\Queue\\Journal$",
        )
        cursor.expect_end("expected the end of the path name after '\\journal$'")
        return QueuePath(machine, queue_name, private, journal=True)
    subqueue = _parse_subqueue(cursor) if cursor.take(";") else None
    return QueuePath(machine, queue_name, private, subqueue=subqueue)


def parse_queue_reference(text: str) -> FormatName | QueuePath:
    """Parse any format name or path name, as ``open_queue`` accepts.

    A ``FormatName:`` prefix, or an ``=`` before any ``\\``, makes the text a format name;
    otherwise it is a path name.

    Args:
        text (str): a format name or a path name.

    Returns:
        FormatName | QueuePath: the parsed reference.

    Raises:
        FormatNameError: the text is neither (see :func:`parse_format_name` and
            :func:`parse_path_name`).
        InvalidParameter: ``text`` is not a str.
    """
    cursor = _cursor_over(text, "format name or path name")
    if cursor.take("FORMATNAME:") or _looks_like_format_name(cursor):
        return parse_format_name(text)
    return parse_path_name(text)


def path_to_format_name(path: QueuePath | str, machine: str | None = None) -> DirectFormatName:
    """MSMQ's ``MQPathNameToFormatName`` without a directory: the ``DIRECT=OS:`` format name.

    Args:
        path (QueuePath | str): the path name, parsed or as text.
        machine (str | None): name replacing ``.`` (the local computer); defaults to
            ``socket.gethostname()`` lowercased. Ignored when the path names a computer.

    Returns:
        DirectFormatName: ``DIRECT=OS:machine\\[private$\\]q`` with ``;JOURNAL`` for a queue
        journal, ``SYSTEM$;<suffix>`` for a computer's system queue, and the subqueue kept.

    Raises:
        FormatNameError: ``path`` text is not a path name, or ``machine`` (or the host name) is
            not a valid computer name; pass a valid ``machine=``.
        InvalidParameter: ``path`` is neither a QueuePath nor a str, or ``machine`` is not a
            str.
    """
    if isinstance(path, str):
        path = parse_path_name(path)
    elif not isinstance(path, QueuePath):
        raise InvalidParameter.wrong_type("path", "a QueuePath or a path name str", path)
    address = path.machine
    if path.is_local:
        name = socket.gethostname().lower() if machine is None else machine
        cursor = _cursor_over(name, "computer name", strip=False)
        try:
            address = _parse_host(cursor, "computer name", local=False)
        except FormatNameError as error:
            if machine is None:
                error.hint = f"this host's name {name!r} is not usable: pass machine="
            raise
    if path.system_queue is not None:
        return DirectFormatName(DirectProtocol.OS, address, None, system_queue=path.system_queue)
    return DirectFormatName(
        DirectProtocol.OS, address, path.queue_name, path.private, None, path.journal, path.subqueue
    )
