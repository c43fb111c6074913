"""Issue 17: `kmq --help` and the command line's import load no Kafka client, directory client,
benchmark or queue manager: those load when a command runs (start-up time, measured in the
issue's report; checked here by what is imported, not by a deadline)."""

from __future__ import annotations

from tests.support.imports import modules_after

_HEAVY = ("confluent_kafka", "ldap3", "fastavro", "facade.bench", "facade.manager",
          "facade.kafka", "facade.directory", "facade.config", "facade.message")


def test_importing_the_cli_loads_nothing_heavy() -> None:
    loaded = modules_after("import facade.cli")
    assert not [name for name in _HEAVY if name in loaded]


def test_help_loads_nothing_heavy() -> None:
    loaded = modules_after("from typer.testing import CliRunner\nfrom facade.cli import app\n"
                           "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
                           "assert CliRunner().invoke(app, ['send', '--help']).exit_code == 0")
    assert not [name for name in _HEAVY if name in loaded]


def test_bench_scenario_names_match_the_bench() -> None:
    from facade import bench, benchnames

    assert tuple(bench.SCENARIOS) == benchnames.SCENARIO_NAMES
    assert set(benchnames.DEFAULT_SCENARIOS) <= set(bench.SCENARIOS)


def test_the_package_loads_its_names_on_first_use() -> None:
    loaded = modules_after("import facade\nassert facade.Message.__name__ == 'Message'")
    assert "facade.message" in loaded and "facade.manager" not in loaded
