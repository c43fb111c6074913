"""``spark_connector.resolve.resolve_many``: the arguments it refuses before any queue manager
opens (its resolutions are tested on a broker in tests/spark/test_read.py)."""

from __future__ import annotations

from typing import Any

import pytest

from facade.errors import InvalidParameter
from spark_connector.resolve import resolve_many


@pytest.mark.parametrize(("names", "operation", "match"), [
    ([], "peek", "no format name"),
    (r"DIRECT=OS:qm\private$\a", "peek", "sequence of format-name strings"),
    ([r"DIRECT=OS:qm\private$\a", 7], "peek", "sequence of format-name strings"),
    ([r"DIRECT=OS:qm\private$\a"], "send", "for reading"),
])
def test_resolve_many_refuses_what_it_cannot_read(names: Any, operation: str, match: str) -> None:
    with pytest.raises(InvalidParameter, match=match):
        resolve_many(names, operation=operation, bootstrap_servers="127.0.0.1:9")
