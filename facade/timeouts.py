"""The timeout argument of MSMQ's receive and peek calls (``MQReceiveMessage``'s
``dwTimeout``): None waits forever, 0 does not wait, otherwise finite seconds."""

from __future__ import annotations

import math

from facade.errors import InvalidParameter

__all__ = ["receive_timeout"]


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
