"""Issue 17: a message property or queue setting kmq does not enforce yet is refused with a
clear error, never accepted and ignored (signing, encryption, transactions)."""

from __future__ import annotations

import pytest

from facade.errors import InvalidParameter, TransactionUsage
from facade.manager import QueueManager
from facade.message import AuthLevel, EncryptionAlgorithm, Message, PrivacyLevel

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("properties, named", [
    ({"auth_level": AuthLevel.ALWAYS}, "auth_level"),
    ({"privacy_level": PrivacyLevel.BODY_AES}, "privacy_level"),
    ({"encryption_algorithm": EncryptionAlgorithm.RC4}, "encryption_algorithm"),
    ({"signature": b"sig"}, "signature"),
    ({"authenticated": True}, "authenticated"),
])
def test_security_properties_are_refused_at_send(qm: QueueManager, properties: dict,
                                                 named: str) -> None:
    queue = qm.create_queue(r".\private$\plain")
    with pytest.raises(InvalidParameter, match=f"signing and encryption \\({named}\\)"):
        queue.send(Message(body=b"x", **properties), wait=True)
    assert queue.count() == 0


def test_transactions_are_refused(qm: QueueManager) -> None:
    plain = qm.create_queue(r".\private$\plain")
    with pytest.raises(TransactionUsage, match="transaction"):
        plain.send(Message(body=b"x", transaction_id="tx-1"), wait=True)
    xact = qm.create_queue(r".\private$\xact", transactional=True)
    with pytest.raises(TransactionUsage, match="NACK_NOT_TRANSACTIONAL_MSG"):
        xact.send(Message(body=b"x"), wait=True)
    assert plain.count() == 0 and xact.count() == 0


@pytest.mark.parametrize("settings", [{"authenticate": True}, {"privacy_level": 2},
                                      {"authenticate": True, "privacy_level": 2}])
def test_queue_security_is_refused_at_create_and_set(qm: QueueManager, settings: dict) -> None:
    with pytest.raises(InvalidParameter, match="not supported yet"):
        qm.create_queue(r".\private$\secure", **settings)
    assert not qm.queue_exists(r".\private$\secure")
    qm.create_queue(r".\private$\open", privacy_level=1)  # OPTIONAL: nothing to enforce
    with pytest.raises(InvalidParameter, match="not supported yet"):
        qm.set_properties(r".\private$\open", **settings)
    assert qm.get_properties(r".\private$\open").authenticate is False
