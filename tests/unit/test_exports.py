"""The public API is exactly ``facade.__all__``: sorted, importable, documented, no drift."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import facade
import facade.errors


def test_all_is_sorted_and_importable() -> None:
    assert facade.__all__ == sorted(facade.__all__)
    for name in facade.__all__:
        assert getattr(facade, name) is not None, name


def test_every_public_name_is_documented() -> None:
    undocumented = [name for name in facade.__all__ if not inspect.getdoc(getattr(facade, name))]
    assert undocumented == []


def test_every_error_is_exported() -> None:
    errors = {
        name for name, obj in vars(facade.errors).items()
        if isinstance(obj, type) and issubclass(obj, facade.errors.MessageQueueError)
    }
    assert errors <= set(facade.__all__)
    assert errors == set(facade.errors.__all__)


def test_nothing_imported_but_exported() -> None:
    tree = ast.parse(Path(facade.__file__).read_text())
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == set(facade.__all__)


#: The contract: the names an application imports from ``facade`` alone.
_CONTRACT = ("QueueManager", "MessageQueue", "Cursor", "QueueProperties", "Message",
             "Destination", "LockedMessage", "MessageId", "FormatName", "QueuePath", "KmqConfig")


def test_the_contract_names_are_public_and_the_real_classes() -> None:
    from facade.queues.cursor import Cursor
    from facade.manager import QueueManager
    from facade.queues.queue import MessageQueue
    from facade.state.registry import QueueProperties

    assert set(_CONTRACT) <= set(facade.__all__)
    assert (facade.QueueManager, facade.MessageQueue, facade.Cursor, facade.QueueProperties) == (
        QueueManager, MessageQueue, Cursor, QueueProperties)


def test_every_message_enum_is_exported() -> None:
    import enum

    import facade.model.message

    enums = {name for name, obj in vars(facade.model.message).items()
             if isinstance(obj, type) and issubclass(obj, enum.Enum) and not name.startswith("_")
             and obj.__module__ == "facade.model.message"}
    assert enums and enums <= set(facade.__all__)


def test_dir_lists_every_public_name_before_first_use() -> None:
    assert set(facade.__all__) <= set(dir(facade))


def test_unknown_names_raise_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        facade.NoSuchName  # noqa: B018


def test_the_package_ships_its_type_marker() -> None:
    assert (Path(facade.__file__).parent / "py.typed").is_file()
