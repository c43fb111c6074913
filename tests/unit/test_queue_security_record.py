"""A queue's security descriptor in its registry record (access control)."""

from __future__ import annotations

import pytest

from facade.security.acl import EVERYONE, AccessRight, ObjectKind, SecurityDescriptor
from facade.errors import EnvelopeError
from facade.state.registry import decode_queue_record
from tests.unit.test_registry import _DROP, KEY, _doc, _properties

R = AccessRight


def _secured(descriptor: SecurityDescriptor):
    return _properties(owner=descriptor.owner, access_list=tuple(descriptor.to_values()))


def test_descriptor_round_trips_through_the_record() -> None:
    descriptor = SecurityDescriptor.default_for(ObjectKind.QUEUE, "alice").deny(
        "bob", R.WRITE_MESSAGE)
    properties = _secured(descriptor)
    decoded = decode_queue_record(KEY, properties.to_json())
    assert decoded == properties
    assert decoded.security == descriptor
    assert not decoded.security.allows("bob", R.WRITE_MESSAGE)


def test_a_record_from_before_access_control_gives_everyone_full_control() -> None:
    decoded = decode_queue_record(KEY, _doc(owner=_DROP, access_list=_DROP))
    assert decoded.owner is None and decoded.access_list == ()
    assert decoded.security.owner == EVERYONE
    assert decoded.security.granted("anyone") == R.FULL_CONTROL


@pytest.mark.parametrize(("changes", "why"), [
    ({"owner": "alice", "access_list": "allow;bob;WRITE_MESSAGE"}, "access_list"),
    ({"owner": "alice", "access_list": [1]}, "access_list"),
    ({"owner": "alice", "access_list": ["allow;bob;FLY"]}, "FLY"),
    ({"owner": 7, "access_list": []}, "owner"),
    ({"owner": "a;b", "access_list": []}, "';'"),
])
def test_bad_descriptors_make_the_record_malformed(changes: dict, why: str) -> None:
    with pytest.raises(EnvelopeError, match=why):
        decode_queue_record(KEY, _doc(**changes))
