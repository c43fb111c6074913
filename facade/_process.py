"""Process helpers shared by the dev stack and the sender's crash recovery."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int | None) -> bool:
    """True if a process with this id exists (signal 0 probes without signalling).

    A process owned by another user counts as alive (EPERM means it exists).
    """
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
