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
