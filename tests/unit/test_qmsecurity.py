"""Queue-manager descriptors read from their topic (facade.queues.qmsecurity)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from facade.security.acl import EVERYONE, QUEUE_MANAGER_RIGHTS, AccessRight, ObjectKind, SecurityDescriptor
from facade.kafka.librdkafka import KafkaRecord
from facade.queues.qmsecurity import QUEUE_MANAGER_SECURITY_TOPIC, QueueManagerSecurity, unset_descriptor

R = AccessRight


def _record(offset: int, value: bytes | None, key: bytes = b"qm1") -> KafkaRecord:
    return KafkaRecord(QUEUE_MANAGER_SECURITY_TOPIC, 0, offset, 0, key, value, ())


def _value(descriptor: SecurityDescriptor) -> bytes:
    return json.dumps({"version": 1, "owner": descriptor.owner,
                       "access_list": descriptor.to_values()}).encode()


def test_unset_descriptor_gives_everyone_every_right() -> None:
    sd = unset_descriptor()
    assert sd.owner == EVERYONE
    assert sd.granted("anyone") == R.FULL_CONTROL | QUEUE_MANAGER_RIGHTS


def test_latest_valid_record_wins_and_bad_ones_are_skipped(
        caplog: pytest.LogCaptureFixture) -> None:
    security = QueueManagerSecurity(SimpleNamespace(name="qm1"))  # type: ignore[arg-type]
    first = SecurityDescriptor.default_for(ObjectKind.QUEUE_MANAGER, "alice")
    second = first.deny("bob", R.CREATE_QUEUE)
    security._apply(_record(0, _value(first)))
    security._apply(_record(1, _value(second)))
    with caplog.at_level(logging.WARNING, logger="kmq.qmsecurity"):
        for offset, bad in enumerate((b"\xff", b"[]", b'{"owner": "a"}',
                                      b'{"owner": null, "access_list": []}',
                                      b'{"owner": "a", "access_list": ["allow;b;FLY"]}'), 2):
            security._apply(_record(offset, bad))
    assert security._descriptors["qm1"] == second
    assert len(caplog.records) == 5 and "not a security descriptor" in caplog.text
    security._apply(_record(9, None))  # a tombstone: back to unset
    assert "qm1" not in security._descriptors and security._next == 10
