"""What `kmq queue list` loads, in a fresh interpreter against a real broker.

Start-up time is measured in docs/performance.md; here the guard is what is imported, not a
deadline: no pydantic (typer's value adapters, built only for values given), no rich help
formatter, no signing/encryption X.509 code (the queue manager makes its MessageProtection on
first use), no directory client and no benchmark.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from facade.cli import app
from tests.support.imports import modules_after

pytestmark = pytest.mark.integration

_NOT_FOR_QUEUE_LIST = ("pydantic", "typer._adapters", "typer.rich_utils", "markdown_it",
                       "cryptography.x509", "facade.queues.protection", "ldap3", "facade.directory",
                       "facade.bench")

_LIST = ("from typer.testing import CliRunner\nfrom facade.cli import app\n"
         "r = CliRunner().invoke(app, ['queue', 'list', {extra}'--json'])\n"
         "assert r.exit_code == 0, r.output")


def test_queue_list_loads_only_what_it_needs(cli_qm: str) -> None:
    loaded = modules_after(_LIST.format(extra=""))
    assert "facade.manager" in loaded  # it did run against the broker
    assert not [name for name in _NOT_FOR_QUEUE_LIST if name in loaded]


def test_queue_list_without_counts_opens_no_queue(cli_qm: str) -> None:
    created = CliRunner().invoke(app, ["queue", "create", "startup", "--json"])
    assert created.exit_code == 0, created.output
    loaded = modules_after(_LIST.format(extra="'--no-counts', "))
    assert not [name for name in (*_NOT_FOR_QUEUE_LIST, "facade.queues.queue") if name in loaded]
    listed = CliRunner().invoke(app, ["queue", "list", "--no-counts", "--json"])
    assert [row["messages"] for row in json.loads(listed.stdout)] == [None]
