r"""Label patterns of :meth:`Directory.locate <facade.directory.Directory.locate>`.

A pattern is a label in which ``*`` matches any run of characters (none included) and a
backslash makes the next character literal, as in shell patterns: ``\*`` is a star, ``\\`` a
backslash. Every other character, ``( ) & | ! = ?`` included, stands for itself. Matching is
case-insensitive and covers the whole label. The empty pattern matches the queues without a
label (MSMQ: an empty label restriction); a pattern of stars alone matches every queue,
labelled or not.

The pattern is matched in Python on every store, so the embedded store and slapd give the same
answer; an LDAP server also gets it as a filter (:meth:`LabelPattern.ldap_filter`), with every
literal character escaped, so that it returns fewer entries to check. ldap3's mock server cannot
take that filter: it turns a substring filter back into text without escaping its values and
parses that again, so ``(`` raises ``LDAPInvalidFilterError`` and ``*)(objectClass=*`` matches
everything.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ldap3.utils.conv import escape_filter_chars

from facade.errors import InvalidParameter

__all__ = ["LabelPattern"]


@dataclass(frozen=True)
class LabelPattern:
    """A parsed label pattern.

    Attributes:
        text (str): the pattern as given.
        pieces (tuple[str, ...]): the literal runs between wildcards, unescaped; one piece means
            no wildcard, ``("", "")`` is ``*``. Consecutive stars count as one.
    """

    text: str
    pieces: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> LabelPattern:
        """Parse ``text``: ``*`` a wildcard, ``\\`` quoting the next character.

        Args:
            text (str): the pattern.

        Returns:
            LabelPattern: the pattern.

        Raises:
            InvalidParameter: ``text`` ends in a backslash that quotes nothing.
        """
        pieces = [""]
        chars = iter(text)
        for char in chars:
            if char == "*":
                if pieces[-1] or len(pieces) == 1:  # "**" is one wildcard
                    pieces.append("")
                continue
            if char == "\\":
                quoted = next(chars, None)
                if quoted is None:
                    raise InvalidParameter(
                        f"label pattern {text!r} ends in a backslash that quotes nothing",
                        hint=r"write \\ for a literal backslash and \* for a literal star")
                char = quoted
            pieces[-1] += char
        return cls(text, tuple(pieces))

    @functools.cached_property
    def _regex(self) -> re.Pattern[str]:
        return re.compile(".*".join(re.escape(piece) for piece in self.pieces),
                          re.IGNORECASE | re.DOTALL)

    def matches(self, label: str) -> bool:
        """True when the whole of ``label`` (``""`` for an unlabelled queue) matches, ignoring
        case."""
        return self._regex.fullmatch(label) is not None

    def ldap_filter(self, attribute: str) -> str | None:
        """An LDAP filter on ``attribute`` that every matching entry passes, values escaped.

        Args:
            attribute (str): the label attribute (``mSMQLabelEx``).

        Returns:
            str | None: ``(attr=value)``, ``(attr=a*b)``, ``(!(attr=*))`` for the empty pattern,
            or None when the pattern matches every label (stars only).
        """
        if len(self.pieces) == 1:
            value = self.pieces[0]
            return f"({attribute}={escape_filter_chars(value)})" if value \
                else f"(!({attribute}=*))"
        if not any(self.pieces):
            return None
        return f"({attribute}={'*'.join(escape_filter_chars(p) for p in self.pieces)})"
