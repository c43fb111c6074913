r"""Checks shared by the CLI's options: durations in seconds, text, and bytes from the command line.

A value these refuse is a usage error (exit 2): typer prints the usage and one error line naming
the option and what to give instead (``Invalid value for '--timeout': nan; give seconds from 0
to 4294967.294``), never a traceback. Use the constructors here instead of ``typer.Option`` /
``typer.Argument`` for every duration and every text parameter, so each gets the same rule:

* :func:`seconds_option`: finite seconds, 0 (or above 0) up to :data:`MAX_SECONDS`;
* :func:`timer_option`: a message timer (``--ttbr``, ``--ttrq``), in the range the message model
  defines for it (:mod:`facade.model.timers`), so the CLI takes what the API takes;
* :func:`text_option`, :func:`text_argument`: text that is valid in the locale's encoding;
* :func:`bytes_option`: the bytes given on the command line, whatever they are (message bodies).

Why text and bytes differ: on POSIX, Python decodes ``argv`` with the locale's encoding and turns
each byte that does not decode into a lone surrogate (``\xff`` becomes ``'\udcff'``, PEP 383).
Such a string cannot be encoded back to UTF-8, so unchecked it escapes as a ``UnicodeEncodeError``
traceback wherever the value becomes bytes (a body, an Avro label, an LDAP attribute). Labels,
names, descriptions, path and format names are text in MSMQ (``WCHAR``): a value that is not
text is refused, naming the option. A message body is bytes in MSMQ (``PROPID_M_BODY`` is a
byte array): ``--body $'\xff\xfe'`` from a shell means those two bytes, so the body is the
command line's bytes exactly (:func:`os.fsencode` undoes Python's decoding), and binary bodies can
be sent from a script.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import typer

from facade.errors import InvalidParameter
from facade.model.timers import TimerRange

__all__ = ["MAX_SECONDS", "bytes_option", "check_text", "seconds_option", "text_argument",
           "text_option", "timer_option"]

#: The longest wait an option takes, in seconds: MSMQ's receive timeout is a DWORD of
#: milliseconds whose largest value, 0xFFFFFFFF, means INFINITE, so 0xFFFFFFFE ms (about 49.7
#: days) is the longest finite wait MSMQ can express.
MAX_SECONDS = 0xFFFF_FFFE / 1000


def _seconds_range(positive: bool) -> str:
    return f"{'above 0' if positive else 'from 0'} to {MAX_SECONDS:.15g}"


def _check_seconds(value: float | None, *, positive: bool) -> float | None:
    """``value`` if it is a finite number of seconds in range, else a usage error.

    Args:
        value (float | None): seconds as typer parsed them (``nan``, ``inf``, ``-1`` and
            ``1e999`` all parse as floats); None when the option has no default and was not given.
        positive (bool): 0 is refused too (a sweep interval of 0 would spin).

    Returns:
        float | None: ``value`` unchanged.

    Raises:
        typer.BadParameter: NaN, an infinity, a negative value (0 with ``positive``) or more than
            :data:`MAX_SECONDS`; typer names the option.
    """
    if value is None:
        return None
    low_ok = value > 0 if positive else value >= 0
    if not (math.isfinite(value) and low_ok and value <= MAX_SECONDS):
        raise typer.BadParameter(f"{value:.15g}; give seconds {_seconds_range(positive)}")
    return value


def _non_negative_seconds(value: float | None) -> float | None:
    return _check_seconds(value, positive=False)


def _positive_seconds(value: float | None) -> float | None:
    return _check_seconds(value, positive=True)


def seconds_option(default: float | None, *param_decls: str, help: str,  # noqa: A002 (typer's name)
                   positive: bool = False) -> Any:
    """A typer option taking a duration in seconds (float).

    Args:
        default (float): seconds used when the option is not given.
        *param_decls (str): option names, as for ``typer.Option`` (default: from the parameter).
        help (str): the option's help text; the accepted range is appended.
        positive (bool): refuse 0 as well (for intervals); otherwise 0 is allowed (no wait).

    Returns:
        typer.models.OptionInfo: pass it as the parameter's default.

    The value is refused (usage error, exit 2) when it is NaN, infinite, negative (or 0 with
    ``positive``) or more than :data:`MAX_SECONDS`.
    """
    return typer.Option(default, *param_decls, help=f"{help} ({_seconds_range(positive)})",
                        metavar="SECONDS",
                        callback=_positive_seconds if positive else _non_negative_seconds)


#: How the help and usage errors say "leave the timer unset".
_NO_TIMER = "no option"


def timer_option(timer: TimerRange, *param_decls: str, help: str) -> Any:  # noqa: A002
    """A typer option taking a message timer in seconds (float), unset by default.

    The range, its help text and its check are the message model's (:class:`TimerRange`):
    ``--ttbr 0`` is a valid timer, as in MSMQ, and so is MSMQ's INFINITE (4294967295), which
    means what leaving the option out means.

    Args:
        timer (TimerRange): :data:`facade.model.timers.TIME_TO_BE_RECEIVED` or
            :data:`~facade.model.timers.TIME_TO_REACH_QUEUE`.
        *param_decls (str): option names, as for ``typer.Option``.
        help (str): the option's help text; the accepted range is appended.

    Returns:
        typer.models.OptionInfo: pass it as the parameter's default.

    A value outside the range (NaN, an infinity, negative, too large) is a usage error (exit
    2) naming the option and the range.
    """
    def check(value: float | None) -> float | None:
        try:
            timer.check(value)
        except InvalidParameter:
            raise typer.BadParameter(f"{value:.15g}; give {timer.describe(_NO_TIMER)}") from None
        return value

    return typer.Option(None, *param_decls, help=f"{help} ({timer.describe(_NO_TIMER)})",
                        metavar="SECONDS", callback=check)


def _argv_bytes(text: str) -> bytes | None:
    """The bytes the command line held for ``text``, or None when ``text`` came from no byte
    string (a lone surrogate outside U+DC80..U+DCFF, possible only from Python callers)."""
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:
        return None


def check_text(value: Any) -> Any:
    """Typer callback: refuse a text value (or any item of a list) that is not valid text.

    Args:
        value (Any): str, a list/tuple of str, or None.

    Returns:
        Any: ``value`` unchanged.

    Raises:
        typer.BadParameter: a value holds bytes that do not decode in the locale's encoding
            (Python keeps them as lone surrogates), so it is not text.
    """
    for text in value if isinstance(value, (list, tuple)) else (value,):
        if not isinstance(text, str):
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raw = _argv_bytes(text)
            shown = repr(raw) if raw is not None else ascii(text)
            raise typer.BadParameter(f"{shown} is not {sys.getfilesystemencoding()} text; "
                                     "give text, not raw bytes") from None
    return value


def text_option(default: Any, *param_decls: str, **kwargs: Any) -> Any:
    """``typer.Option`` for a text parameter: refuses values that are not text (:func:`check_text`).

    Args:
        default (Any): as for ``typer.Option`` (``...`` for required).
        *param_decls (str): option names.
        **kwargs (Any): any other ``typer.Option`` keyword (help, metavar, ...); not callback.

    Returns:
        typer.models.OptionInfo: pass it as the parameter's default.
    """
    return typer.Option(default, *param_decls, callback=check_text, **kwargs)


def text_argument(default: Any, **kwargs: Any) -> Any:
    """``typer.Argument`` for a text argument (or list of them): refuses non-text values.

    Args:
        default (Any): as for ``typer.Argument`` (``...`` for required).
        **kwargs (Any): any other ``typer.Argument`` keyword; not callback.

    Returns:
        typer.models.ArgumentInfo: pass it as the parameter's default.
    """
    return typer.Argument(default, callback=check_text, **kwargs)


def _to_bytes(value: str | None) -> bytes | None:
    if value is None:
        return None
    raw = _argv_bytes(value)
    if raw is None:
        raise typer.BadParameter(f"{ascii(value)} holds a lone surrogate that stands for no "
                                 "byte; give text or bytes")
    return raw


def bytes_option(default: Any, *param_decls: str, **kwargs: Any) -> Any:
    """``typer.Option`` whose value reaches the command as the command line's bytes.

    Declare the parameter ``str`` (typer parses text); the command receives ``bytes``: the exact
    bytes of the argument as the shell passed it (:func:`os.fsencode`), so UTF-8 text stays UTF-8
    and undecodable bytes are kept as they are.

    Args:
        default (Any): as for ``typer.Option`` (``...`` for required).
        *param_decls (str): option names.
        **kwargs (Any): any other ``typer.Option`` keyword; not callback.

    Returns:
        typer.models.OptionInfo: pass it as the parameter's default.

    A string holding a lone surrogate that stands for no byte (only possible from a Python
    caller, not from a shell) is a usage error naming the option.
    """
    return typer.Option(default, *param_decls, callback=_to_bytes, **kwargs)

