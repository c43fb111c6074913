"""Type checks of the public API's arguments.

An argument of the wrong type gets :class:`~facade.errors.InvalidParameter` (MSMQ's
MQ_ERROR_INVALID_PARAMETER) naming the parameter and what it takes, at the call, before
anything is stored or sent: never a ``TypeError`` or ``AttributeError`` from deeper down,
which names neither. Checks of one kind of value live with it (durations in
:mod:`facade.timeouts`, message properties in :mod:`facade.model.message`, format names in
:mod:`facade.model.formatnames`); what is left, shared by several modules, is here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from facade.errors import InvalidParameter

__all__ = ["FieldTypes", "mistyped_field", "require_bool", "require_iterable"]

#: Field name -> (the types it takes, what it takes in words), for :func:`mistyped_field`.
FieldTypes = dict[str, tuple[tuple[type, ...], str]]


def require_bool(value: object, name: str) -> bool:
    """``value`` if it is True or False.

    A flag is a bool, not anything truthy: ``wait=1`` or ``lock="no"`` is more likely a
    misplaced argument than a choice.

    Args:
        value (object): the argument.
        name (str): its parameter name, for the error.

    Returns:
        bool: ``value``.

    Raises:
        InvalidParameter: ``value`` is not a bool.
    """
    if type(value) is not bool:
        raise InvalidParameter.wrong_type(name, "True or False", value)
    return value


def require_iterable(value: object, name: str, of: str) -> Iterable[Any]:
    """``value`` if it is an iterable of items; text and bytes are refused, since their
    characters or bytes are never the items meant.

    Args:
        value (object): the argument.
        name (str): its parameter name, for the error.
        of (str): what its items are, e.g. ``"Message objects"``.

    Returns:
        Iterable[Any]: ``value``.

    Raises:
        InvalidParameter: ``value`` is not iterable, or is text or bytes.
    """
    if isinstance(value, (str, bytes, bytearray, memoryview)) or not isinstance(value, Iterable):
        raise InvalidParameter.wrong_type(name, f"an iterable of {of}", value)
    return value


def mistyped_field(record: object, types: FieldTypes) -> tuple[str, str, object] | None:
    """The first field of ``record`` (a dataclass built from the caller's values) whose
    value is not of its type, for the caller to raise its own error with; a bool is no
    int there unless ``bool`` is listed (a count given as True is a bug).

    Args:
        record (object): the object whose attributes are checked.
        types (FieldTypes): field name -> (accepted types, description).

    Returns:
        tuple[str, str, object] | None: (field name, description, value), or None when
        every field has its type.
    """
    for name, (kinds, expected) in types.items():
        value = getattr(record, name)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return name, expected, value
    return None
