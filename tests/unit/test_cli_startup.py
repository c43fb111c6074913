"""`kmq --help` and the command line's import load no Kafka client, directory client,
benchmark or queue manager: those load when a command runs (start-up time, measured in
docs/performance.md; checked here by what is imported, not by a deadline).

`--help` loads no rich either (click's plain help, not typer's rich panels, and kmq's tables
import rich when they print) and no pydantic (typer builds its value adapters only for values
given: facade.cli._coercion). What `kmq queue list` loads is checked against a broker in
tests/integration/test_cli_startup.py."""

from __future__ import annotations

from tests.support.imports import modules_after

_HEAVY = ("confluent_kafka", "ldap3", "fastavro", "facade.bench", "facade.manager",
          "facade.kafka.librdkafka", "facade.directory", "facade.config", "facade.model.message")
#: What help text needs none of: typer's rich help formatter (rich.markdown, markdown_it),
#: rich itself, and pydantic (typer's value adapters).
_HELP_HEAVY = (*_HEAVY, "typer.rich_utils", "markdown_it", "rich", "pydantic", "typer._adapters")


def test_importing_the_cli_loads_nothing_heavy() -> None:
    loaded = modules_after("import facade.cli")
    assert not [name for name in _HEAVY if name in loaded]


def test_help_loads_nothing_heavy() -> None:
    loaded = modules_after("from typer.testing import CliRunner\nfrom facade.cli import app\n"
                           "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
                           "assert CliRunner().invoke(app, ['send', '--help']).exit_code == 0\n"
                           "assert CliRunner().invoke(app, ['queue', '--help']).exit_code == 0")
    assert not [name for name in _HELP_HEAVY if name in loaded]


def test_the_console_script_help_loads_no_rich_nor_pydantic() -> None:
    """The installed entry point (``main``), not only typer's test runner."""
    loaded = modules_after("import sys\nfrom facade.cli import main\nsys.argv = ['kmq', '--help']\n"
                           "try:\n    main()\nexcept SystemExit as exc:\n"
                           "    assert exc.code in (0, None), exc.code")
    assert not [name for name in _HELP_HEAVY if name in loaded]


def test_a_usage_error_is_still_checked_by_typer() -> None:
    """Deferring typer's adapters moves their building, not the check: a bad value is refused
    with typer's message, in a fresh interpreter where nothing built an adapter before."""
    code = ("from typer.testing import CliRunner\nfrom facade.cli import app\n"
            "r = CliRunner().invoke(app, ['send', 'q', '--body', 'x', '--priority', '9'])\n"
            "assert r.exit_code == 2, r.output\n"
            "assert \"Invalid value for '--priority'\" in r.output, r.output\n"
            "r = CliRunner().invoke(app, ['queue', 'create', 'q', '--quota-kb', 'abc'])\n"
            "assert r.exit_code == 2 and 'valid integer' in r.output, r.output")
    assert "typer._adapters" in modules_after(code)


def test_bench_scenario_names_match_the_bench() -> None:
    from facade import bench, benchnames

    assert tuple(bench.SCENARIOS) == benchnames.SCENARIO_NAMES
    assert set(benchnames.DEFAULT_SCENARIOS) <= set(bench.SCENARIOS)


def test_the_package_loads_its_names_on_first_use() -> None:
    loaded = modules_after("import facade\nassert facade.Message.__name__ == 'Message'")
    assert "facade.model.message" in loaded and "facade.manager" not in loaded
