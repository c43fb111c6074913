"""MSMQ's message timers, time-to-be-received and time-to-reach-queue: the one definition of
each one's range.

:class:`facade.model.message.Message` checks its ``time_to_be_received`` and ``time_to_reach_queue``
with these ranges, and the CLI parses ``kmq send --ttbr/--ttrq`` and writes their help with
them, so the API and the command line accept the same values. This module imports nothing
heavy (the CLI's start-up loads it, not the message model).

MSMQ holds a timer in a ULONG of seconds, 0 to 0xFFFFFFFF, whose top values are words rather
than times: INFINITE (0xFFFFFFFF), and for TTRQ also LONG_LIVED (0xFFFFFFFE), which both mean
the queue manager's default. kmq's timers are ``float`` seconds and ``None`` stands for the
word; the words' ULONG values are accepted too and mean None, so ported code that passes
INFINITE means what it meant. 0 is a timer like any other. MSMQ makes one attempt to deliver a
message whose TTRQ is 0; so does kmq: the copy is handed to a producer whose message timeout is
the shortest (TTRQs are rounded up to whole seconds there), and neither a producer failure nor
the recovery of the outgoing queue sends it again. A TTBR of 0 expires the message as it is
sent (it goes to the dead-letter queue when its journal level has DEADLETTER), and, as TTBR
takes precedence over TTRQ, gives it one attempt to reach its queue too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from facade.errors import InvalidParameter

__all__ = [
    "LONG_LIVED_SECONDS",
    "TIMER_INFINITE",
    "TIMER_LONG_LIVED",
    "TIMER_RANGES",
    "TIME_TO_BE_RECEIVED",
    "TIME_TO_REACH_QUEUE",
    "TimerRange",
]

#: MSMQ's INFINITE: the ULONG value of a timer meaning "no limit".
TIMER_INFINITE = 0xFFFFFFFF
#: MSMQ's LONG_LIVED: the ULONG value of a TTRQ meaning "the queue manager's default".
TIMER_LONG_LIVED = 0xFFFFFFFE
#: The default time-to-reach-queue in seconds (MSMQ's LONG_LIVED setting: 4 days since MSMQ
#: 3.0); a message whose ``time_to_reach_queue`` is None gets it.
LONG_LIVED_SECONDS = 4 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class TimerRange:
    """The range of one timer property, in seconds.

    Attributes:
        name (str): the message field, e.g. ``time_to_be_received``.
        propid (str): its MSMQ property, e.g. ``PROPID_M_TIME_TO_BE_RECEIVED``.
        maximum (int): the longest finite timer, in seconds.
        unset (tuple[tuple[str, int], ...]): MSMQ's words that mean None, with their ULONG
            values.
        unset_meaning (str): what None means.
    """

    name: str
    propid: str
    maximum: int
    unset: tuple[tuple[str, int], ...]
    unset_meaning: str

    def describe(self, unset: str = "None") -> str:
        """The range in words, e.g. ``0 to 4294967294 seconds; for no limit, the default:
        None, or 4294967295 (INFINITE)``.

        Args:
            unset (str): how the caller leaves the timer unset (``None`` in Python; the CLI
                says "no option").
        """
        words = " or ".join(f"{value} ({word})" for word, value in self.unset)
        return f"0 to {self.maximum} seconds; for {self.unset_meaning}: {unset}, or {words}"

    def is_unset(self, value: object) -> bool:
        """Whether ``value`` means no timer of its own: None, or one of MSMQ's words."""
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                 and any(value == number for _, number in self.unset))

    def check(self, value: object) -> None:
        """Raise unless ``value`` is in the range (None and the words included).

        Args:
            value (object): seconds, as given.

        Raises:
            InvalidParameter: not a number (a bool is none), NaN, infinite, negative, or past
                :attr:`maximum` without being a word; names the property and the range.
        """
        if self.is_unset(value):
            return
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or not math.isfinite(value) or not 0 <= value <= self.maximum):
            expected = self.describe()
            raise InvalidParameter(
                f"message property {self.name} ({self.propid}) must be {expected}, "
                f"got {value!r:.60}", hint=f"set {self.name} to {expected}")


#: PROPID_M_TIME_TO_BE_RECEIVED, counted from the sent time: a ULONG of seconds whose INFINITE
#: (the default) is no limit.
TIME_TO_BE_RECEIVED = TimerRange(
    "time_to_be_received", "PROPID_M_TIME_TO_BE_RECEIVED", TIMER_INFINITE - 1,
    (("INFINITE", TIMER_INFINITE),), "no limit, the default")
#: PROPID_M_TIME_TO_REACH_QUEUE: a ULONG of seconds whose LONG_LIVED (the default) and
#: INFINITE are the queue manager's default.
TIME_TO_REACH_QUEUE = TimerRange(
    "time_to_reach_queue", "PROPID_M_TIME_TO_REACH_QUEUE", TIMER_LONG_LIVED - 1,
    (("LONG_LIVED", TIMER_LONG_LIVED), ("INFINITE", TIMER_INFINITE)),
    f"the queue manager's default ({LONG_LIVED_SECONDS / 86400:g} days)")
#: Each timer's range, by message field name.
TIMER_RANGES = {timer.name: timer for timer in (TIME_TO_BE_RECEIVED, TIME_TO_REACH_QUEUE)}
