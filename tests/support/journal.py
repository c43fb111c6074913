"""Fault injection for journal copies: the broker refuses one journal write."""

from __future__ import annotations

import pytest

from facade import BrokerUnavailable
from facade.manager import QueueManager


def fail_next_journal_write(qm: QueueManager, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make ``qm``'s next journal write (one batch of journal copies) raise BrokerUnavailable;
    later writes go through.

    Returns:
        list[int]: filled with the size of the batch that failed, once it did.
    """
    outputs = qm.outputs
    real = outputs.journal_removed_many
    failed: list[int] = []

    def journal_removed_many(messages, destination, stored=None):  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(len(messages))
            raise BrokerUnavailable("simulated: journal copies not acknowledged")
        return real(messages, destination, stored)

    monkeypatch.setattr(outputs, "journal_removed_many", journal_removed_many)
    return failed
