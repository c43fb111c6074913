"""Who the caller is: the principal MSMQ access checks are made for, and where it comes from.

MSMQ checks access lists against the caller's Windows token. kmq has no token: the principal is
taken from the configuration (``KMQ_PRINCIPAL`` / ``principal``, default the login name), and
:class:`Principal` records that it was declared rather than proven, so ``kmq qm info`` can say
so.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from facade.config import KmqConfig

__all__ = ["Principal", "PrincipalSource", "resolve_principal"]


class PrincipalSource(enum.Enum):
    """Where a principal's name comes from.

    Attributes:
        DECLARED: ``KMQ_PRINCIPAL`` / ``principal`` or the login name: whatever the caller
            says (the local development mode).
    """

    DECLARED = "declared (KMQ_PRINCIPAL or the login name; development mode)"


@dataclass(frozen=True)
class Principal:
    """The caller's identity for access checks.

    Attributes:
        name (str): the principal's name, as access-control entries name it.
        source (PrincipalSource): where the name was taken from.
    """

    name: str
    source: PrincipalSource

    def to_dict(self) -> dict[str, str]:
        """``{"name": ..., "source": ...}`` for ``--json`` output."""
        return {"name": self.name, "source": self.source.name.lower()}


def resolve_principal(config: KmqConfig) -> Principal:
    """The principal a queue manager opened with ``config`` acts as.

    Args:
        config (KmqConfig): the resolved configuration.

    Returns:
        Principal: the name and its source.
    """
    return Principal(config.principal, PrincipalSource.DECLARED)
