"""The CLI's shared option checks (facade.cli._options): seconds, text, bytes; no broker needed.

A refused value is a usage error: exit 2, typer's one error line naming the option, no
traceback, and nothing opened (the check runs while the command line is parsed).
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from facade.cli import _options, app

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str | None]:
    """No broker, an embedded directory of the test's own."""
    return {"KMQ_HOME": str(tmp_path / "home"), "KMQ_BOOTSTRAP_SERVERS": None, "KMQ_CONFIG": None,
            "KMQ_QUEUE_MANAGER": "opts", "KMQ_DIRECTORY_URL": f"embedded:{tmp_path / 'd.json'}"}


def _usage_error(env: dict[str, str | None], args: list[str], option: str) -> str:
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, (args, result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    output = " ".join(result.output.replace("│", " ").split())  # undo the panel's wrapping
    assert "Traceback" not in output
    assert f"Invalid value for '{option}'" in output, output
    return output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "-0.001", "1e308", "1e999",
                                   "4294967.295"])
def test_interval_refuses_non_finite_negative_and_huge(env: dict, value: str) -> None:
    output = _usage_error(env, ["qm", "run", "--interval", value], "--interval")
    assert "give seconds above 0 to 4294967.294" in output


def test_interval_refuses_zero(env: dict) -> None:
    _usage_error(env, ["qm", "run", "--interval", "0"], "--interval")


@pytest.mark.parametrize("command", ["receive", "peek"])
@pytest.mark.parametrize("value", ["nan", "-1", "1e308"])
def test_timeout_checked_before_anything_opens(env: dict, command: str, value: str) -> None:
    # Without a broker: the value is refused first (a usage error), not exit 1 for no broker.
    output = _usage_error(env, [command, r".\private$\q", "--timeout", value], "--timeout")
    assert "give seconds from 0 to 4294967.294" in output


@pytest.mark.parametrize("value", [0.0, 0.5, 5, _options.MAX_SECONDS])
def test_seconds_in_range_pass(value: float) -> None:
    assert _options._non_negative_seconds(value) == value
    assert _options._non_negative_seconds(None) is None


def test_bench_payload_is_bounded(env: dict) -> None:
    # --payload 1e15 allocated the body up front: a MemoryError traceback.
    output = _usage_error(env, ["bench", "--payload", "1000000000000000"], "--payload")
    assert "4194304" in output


@pytest.mark.parametrize("args, option", [
    (["dl", "create", "d\udcff"], "name"),
    (["dl", "create", "d", "--description", "\udcfe"], "--description"),
    (["dl", "show", "\udcff"], "LIST"),
    (["dl", "add", "L", "alias:\udcff"], "MEMBER"),
    (["alias", "create", "a\udcff", r"DIRECT=OS:qm\private$\q"], "name"),
    (["alias", "create", "a", r"DIRECT=OS:qm\private$\q", "--description", "\udcff"],
     "--description"),
    (["queue", "locate", "--label", "\udcff*"], "--label"),
    (["queue", "create", "q", "--public", "--label", "\udcff"], "--label"),
    (["send", r".\private$\q", "--body", "x", "--label", "\udcff"], "--label"),
    (["queue", "set", ".\\private$\\q\udcff", "--label", "x"], "queue"),
    (["bench", "--scenario", "\udcff"], "--scenario"),
])
def test_text_that_is_not_text_is_refused_naming_the_option(env: dict, args: list[str],
                                                            option: str) -> None:
    # \udcXX is how Python keeps an undecodable argv byte (PEP 383); such a value reaching
    # LDAP would end a directory command in a UnicodeEncodeError traceback.
    output = _usage_error(env, args, option)
    assert "is not utf-8 text" in output


def test_body_keeps_the_command_line_bytes() -> None:
    assert _options._to_bytes("h\u00e9") == "h\u00e9".encode()
    assert _options._to_bytes("\udcff\udcfe") == b"\xff\xfe"
    assert _options._to_bytes(None) is None
    with pytest.raises(typer.BadParameter, match="lone surrogate"):
        _options._to_bytes("\ud800")  # no byte stands behind it: only a Python caller makes it


def _leaf_commands(command, path=()):  # noqa: ANN001, ANN202 (click objects)
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    for name, sub in subcommands.items():
        yield from _leaf_commands(sub, (*path, name))


def test_every_text_and_seconds_parameter_uses_the_shared_checks() -> None:
    """Guard: a new str or float parameter must use text_option/text_argument/bytes_option,
    seconds_option or timer_option (facade.cli._options: every callback defined there), or it
    can bring back a traceback or a hang."""
    unchecked = []
    for path, command in _leaf_commands(typer.main.get_command(app)):
        for param in command.params:
            annotation = param.type_descriptor.annotation
            if typing.get_origin(annotation) in (list, tuple):
                annotation = typing.get_args(annotation)[0]
            if annotation not in (str, float):
                continue
            callback = getattr(param.callback, "__wrapped__", param.callback)
            if getattr(callback, "__module__", None) != _options.__name__:
                unchecked.append(f"{' '.join(path)} {param.name}")
    assert unchecked == []
