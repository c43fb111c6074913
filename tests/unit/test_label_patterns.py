r"""Label patterns of Directory.locate: ``*`` a wildcard, ``\`` quoting the next character.

The same patterns against both directory stores are in tests/directory/test_directory.py.
"""

from __future__ import annotations

import pytest

from facade.directory import LabelPattern
from facade.errors import InvalidParameter


@pytest.mark.parametrize("text, pieces", [
    ("", ("",)),
    ("Orders", ("Orders",)),
    ("*", ("", "")),
    ("***", ("", "")),
    ("Order*", ("Order", "")),
    ("*EU)", ("", "EU)")),
    ("a**b", ("a", "b")),
    ("a*b*c", ("a", "b", "c")),
    (r"Sale 50\*", ("Sale 50*",)),
    (r"C:\\in", ("C:\\in",)),
    (r"\a", ("a",)),
    (r"*\**", ("", "*", "")),
])
def test_parse(text: str, pieces: tuple[str, ...]) -> None:
    assert LabelPattern.parse(text).pieces == pieces


def test_trailing_backslash_is_refused_with_the_fix() -> None:
    with pytest.raises(InvalidParameter, match="backslash") as caught:
        LabelPattern.parse("abc\\")
    assert caught.value.hint and r"\\" in caught.value.hint


@pytest.mark.parametrize("pattern, label, expected", [
    ("order*", "Order intake", True),
    ("ORDER INTAKE", "Order intake", True),
    ("Order", "Order intake", False),          # the whole label must match
    ("*intake", "Order intake", True),
    ("*intak", "Order intake", False),         # ends are anchored
    ("Orders (EU*", "Orders (EU)", True),
    ("*)(objectClass=*", "Orders (EU)", False),
    ("*)(objectClass=*", "x)(objectClass=y", True),
    (r"Sale 50\*", "Sale 50*", True),
    (r"Sale 50\*", "Sale 500", False),
    ("a.c", "abc", False),                     # regex characters are literal
    ("a?c", "abc", False),
    ("*", "", True),
    ("", "", True),
    ("", "x", False),
    ("zÜrich*", "Zürich Ärger", True),
    ("*line*", "two\nlines", True),
])
def test_matches(pattern: str, label: str, expected: bool) -> None:
    assert LabelPattern.parse(pattern).matches(label) is expected


@pytest.mark.parametrize("pattern, ldap_filter", [
    ("", "(!(L=*))"),
    ("*", None),
    ("Orders (EU)", r"(L=Orders \28EU\29)"),
    ("Orders (EU*", r"(L=Orders \28EU*)"),
    ("*)(objectClass=*", r"(L=*\29\28objectClass=*)"),
    (r"Sale 50\*", r"(L=Sale 50\2a)"),
    (r"C:\\*", r"(L=C:\5c*)"),
])
def test_ldap_filter_escapes_every_literal_character(pattern: str, ldap_filter: str | None) -> None:
    assert LabelPattern.parse(pattern).ldap_filter("L") == ldap_filter
