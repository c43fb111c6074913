r"""One resolver of queue names for every ``kmq`` command that opens a queue.

Every command that takes a QUEUE accepts the same forms:

* a path name: ``.\private$\orders``, ``.\orders``, ``HOST\private$\orders``;
* a bare NAME on this queue manager: ``orders`` is ``.\private$\orders`` when that queue exists,
  else the public ``.\orders`` (the forms ``kmq queue create NAME`` makes); ``NAME;sub`` keeps
  its subqueue;
* any format name: ``PUBLIC=``, ``PRIVATE=``, ``DIRECT=``, ``DL=<guid>``, ``MACHINE=``,
  multiple-element names, with or without ``FormatName:``;
* ``dl:NAME`` and ``DL=NAME``: a distribution list by its name (its ``DL=<guid>``);
* ``alias:NAME``: a queue alias (the format name it stands for).

The result is text that :meth:`facade.manager.QueueManager.open_queue` accepts. Names that need
the directory (``dl:``, ``alias:``) open it through the queue manager.
"""

from __future__ import annotations

import re
import uuid
from typing import Any


__all__ = ["resolve_queue_name"]

_FORMAT_NAME = re.compile(r"^\s*(formatname:|[a-z]+=)", re.IGNORECASE)


def _is_guid(text: str) -> bool:
    try:
        uuid.UUID(text.split("@", 1)[0])
    except ValueError:
        return False
    return True


def resolve_queue_name(manager: Any, text: str) -> str:
    r"""The path or format name ``text`` stands for, in a form ``open_queue`` accepts.

    Args:
        manager (QueueManager): the opened queue manager (registry for bare names, directory for
            ``dl:`` and ``alias:``).
        text (str): what the user typed (see the module docstring for the forms).

    Returns:
        str: a path name or a format name.

    Raises:
        QueueNotFound: a bare NAME that is neither ``.\private$\NAME`` nor ``.\NAME``.
        DirectoryObjectNotFound: no such list or alias.
        DirectoryUnavailable: ``dl:``/``alias:`` in workgroup mode or with the directory down.
    """
    from facade.errors import QueueNotFound

    stripped = text.strip()
    lowered = stripped.lower()
    if lowered.startswith("dl:") or (lowered.startswith("dl=") and not _is_guid(stripped[3:])):
        return manager.directory.distribution_list("dl:" + stripped[3:]).format_name
    if lowered.startswith("alias:"):
        return manager.directory.alias(stripped).recipient_format_name
    if "\\" in stripped or _FORMAT_NAME.match(stripped):
        return stripped
    name, semicolon, subqueue = stripped.partition(";")
    candidates = (f".\\private$\\{name}", f".\\{name}")
    for path in candidates:
        if manager.queue_exists(path):
            return path + semicolon + subqueue
    raise QueueNotFound(
        f"no queue {name} on queue manager {manager.name} (looked for {candidates[0]} and "
        f"{candidates[1]})", queue=stripped,
        hint=f"list the queues with `kmq queue list`, or create it with `kmq queue create {name}`")
