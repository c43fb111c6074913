"""A message property or queue setting kmq does not enforce yet is refused with a
clear error, never accepted and ignored (transactions; the security properties kmq does not
implement are refused in test_signed_encrypted.py)."""

from __future__ import annotations

import pytest

from facade.errors import TransactionUsage
from facade.manager import QueueManager
from facade.model.message import Message

pytestmark = pytest.mark.integration


def test_transactions_are_refused(qm: QueueManager) -> None:
    plain = qm.create_queue(r".\private$\plain")
    with pytest.raises(TransactionUsage, match="transaction"):
        plain.send(Message(body=b"x", transaction_id="tx-1"), wait=True)
    xact = qm.create_queue(r".\private$\xact", transactional=True)
    with pytest.raises(TransactionUsage, match="NACK_NOT_TRANSACTIONAL_MSG"):
        xact.send(Message(body=b"x"), wait=True)
    assert plain.count() == 0 and xact.count() == 0
