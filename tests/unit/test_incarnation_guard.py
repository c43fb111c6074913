"""facade.queues.destination.incarnation_guard: a handle's receipts stop once its queue is
gone or is another queue of the same name (a different instance GUID); the broker side, a
holder process across a delete and create, is tests/integration/test_queue_deleted.py."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from facade import QueueNotFound
from facade.manager import QueueManager
from facade.queues.destination import incarnation_guard
from facade.model.receipts import ReceiptAction


def test_the_guard_passes_while_the_queue_is_the_one_opened(memory_qm: QueueManager) -> None:
    queue = memory_qm.create_queue(r".\private$\kept")
    destination = queue._opened.single()
    check = incarnation_guard(memory_qm.registry, destination)
    assert check is not None
    check()


def test_the_guard_refuses_a_queue_deleted_or_created_again(memory_qm: QueueManager) -> None:
    queue = memory_qm.create_queue(r".\private$\reborn")
    destination = queue._opened.single()
    check = incarnation_guard(memory_qm.registry, destination)
    assert check is not None
    assert destination.properties is not None
    again = dataclasses.replace(destination.properties, instance=str(uuid.uuid4()))
    memory_qm.registry.put_queue(again)
    with pytest.raises(QueueNotFound, match="deleted and created again") as raised:
        check()
    assert raised.value.queue == destination.format_name
    memory_qm.registry.remove_queue(again.path_name)
    with pytest.raises(QueueNotFound, match="was deleted after this handle opened it"):
        check()


def test_a_view_appends_no_receipt_once_its_guard_refuses(memory_qm: QueueManager) -> None:
    queue = memory_qm.create_queue(r".\private$\guarded")
    view = queue._opened.open_view()
    properties = queue._opened.single().properties
    assert properties is not None
    memory_qm.registry.put_queue(dataclasses.replace(properties, instance=str(uuid.uuid4())))
    with pytest.raises(QueueNotFound):
        view.start_claim(ReceiptAction.RECEIVE, (0,))
    assert _receipts_written(memory_qm, properties.receipts_topic) == 0


def _receipts_written(qm: QueueManager, topic: str) -> int:
    cluster = qm.session.cluster  # type: ignore[attr-defined]
    with cluster.changed:
        return int(cluster.log(topic).high_watermark)


def test_a_handle_keeps_its_own_record_when_another_instance_is_registered(
        memory_qm: QueueManager) -> None:
    """single() adopts a changed record of its queue (a property set after opening), never
    the record of a queue created again with the name."""
    queue = memory_qm.create_queue(r".\private$\same")
    opened = queue._opened
    known = opened.single().properties
    assert known is not None
    memory_qm.registry.put_queue(dataclasses.replace(known, instance=str(uuid.uuid4()),
                                                     label="another queue"))
    assert opened.single().properties is known


def test_system_queues_have_no_guard(memory_qm: QueueManager) -> None:
    dead_letter = memory_qm.open_queue(f"MACHINE={memory_qm.guid};DEADLETTER")
    assert incarnation_guard(memory_qm.registry, dead_letter._opened.single()) is None
