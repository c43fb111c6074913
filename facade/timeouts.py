"""The timeout argument of MSMQ's receive and peek calls (``MQReceiveMessage``'s
``dwTimeout``): None waits forever, 0 does not wait, otherwise finite seconds; and the default
leases of peek-locks and prefetched batches (here, below the queue manager, so opening a queue
manager does not load the receive machinery of :mod:`facade.queues.peeklock` to read a default)."""

from __future__ import annotations

import math

from facade.errors import InvalidParameter

__all__ = ["DEFAULT_LEASE", "DEFAULT_PREFETCH_LEASE", "MAX_LEASE", "lease_to_ms", "receive_timeout",
           "wait_seconds"]

#: Seconds a peek-lock lasts unless ``receive(lock=True, lease=...)`` says otherwise (the lock
#: duration of Kafka share groups and Azure Service Bus).
DEFAULT_LEASE = 30.0
#: Seconds a prefetched batch is held unless ``open_queue(prefetch_lease=...)`` says otherwise.
DEFAULT_PREFETCH_LEASE = 60.0
#: Longest lease accepted, in seconds (a week).
MAX_LEASE = 7 * 86_400.0


def receive_timeout(timeout: float | None) -> float | None:
    """Check a receive or peek timeout: None (wait forever) or finite seconds >= 0.

    Args:
        timeout (float | None): seconds, or None for no limit.

    Returns:
        float | None: the timeout as a float, or None.

    Raises:
        InvalidParameter: negative, NaN, infinite or not a number.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not math.isfinite(timeout) or timeout < 0:
        raise InvalidParameter(f"timeout must be seconds >= 0 (or None to wait forever), "
                               f"not {timeout!r}", hint="pass e.g. timeout=5.0")
    return float(timeout)


def wait_seconds(seconds: float, name: str) -> float:
    """Check how long a call may wait for the broker (a send's ``wait``, a commit, a claim's
    grace): finite seconds >= 0; unlike a receive timeout, there is no "forever".

    Args:
        seconds (float): seconds.
        name (str): the argument's name, for the error.

    Returns:
        float: ``seconds`` as a float.

    Raises:
        InvalidParameter: not a number (a bool is none), negative, NaN or infinite.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds) or seconds < 0:
        raise InvalidParameter.wrong_type(name, "finite seconds >= 0 (a float)", seconds)
    return float(seconds)


def lease_to_ms(seconds: float, name: str) -> int:
    """A lease (a peek-lock's, a prefetched batch's, a transaction's) in milliseconds.

    Args:
        seconds (float): the lease in seconds.
        name (str): the argument's name, for the error.

    Returns:
        int: milliseconds, at least 1.

    Raises:
        InvalidParameter: not finite seconds in (0, :data:`MAX_LEASE`].
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds) or not 0 < seconds <= MAX_LEASE:
        raise InvalidParameter(f"{name} must be seconds > 0 and at most {MAX_LEASE:g}, "
                               f"not {seconds!r}", hint=f"e.g. {name}=30.0")
    return max(1, round(seconds * 1000))
