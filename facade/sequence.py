"""Message-id sequence numbers that stay unique across the processes of one queue manager.

An MSMQ message id is the sending queue manager's GUID plus a 32-bit sequence number that MSMQ
keeps in persistent storage. Every kmq process of a queue manager shares the GUID, so the
sequence must be shared too: processes reserve blocks of numbers from a counter file under
``KMQ_HOME``, updated under an exclusive ``flock``. A crash wastes at most the rest of a block.
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from pathlib import Path

from facade.errors import MessageQueueError
from facade.message import MessageId

__all__ = ["MessageIdAllocator"]

#: Sequence numbers reserved per trip to the counter file.
BLOCK_SIZE = 4096
_MODULUS = 2**32


class MessageIdAllocator:
    """Hands out :class:`MessageId` values for one queue manager.

    Args:
        path (Path): the counter file (created on first use), e.g. ``$KMQ_HOME/qm1.sequence``.
        machine_guid (uuid.UUID): the queue manager's GUID.

    Raises:
        MessageQueueError: the counter file cannot be read or written (names the path).
    """

    def __init__(self, path: Path, machine_guid: uuid.UUID):
        self.path = path
        self.machine_guid = machine_guid
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0

    def new(self) -> MessageId:
        """The next unique id."""
        with self._lock:
            if self._next >= self._end:
                self._next = self._reserve()
                self._end = self._next + BLOCK_SIZE
            sequence = self._next % _MODULUS
            self._next += 1
        return MessageId(self.machine_guid, sequence)

    def _reserve(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise MessageQueueError(
                f"cannot open the message-id counter {str(self.path)!r}: {exc.strerror}",
                hint="make KMQ_HOME writable or point it elsewhere",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            text = os.read(fd, 64).decode("ascii", "replace").strip()
            start = int(text) if text.isdigit() else 0
            data = str(start + BLOCK_SIZE).encode()
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, data)
            os.fsync(fd)
            return start
        except OSError as exc:
            raise MessageQueueError(
                f"cannot update the message-id counter {str(self.path)!r}: {exc.strerror}",
                hint="check free disk space and permissions under KMQ_HOME",
            ) from exc
        finally:
            os.close(fd)
