"""QueueManager.delete_queues: several queues deleted with one DELETE_GRACE wait, every name
and right checked before anything is deleted."""

from __future__ import annotations

import sys
import time

import pytest

from facade import manager as manager_module
from facade.errors import InvalidParameter, QueueNotFound
from facade.manager import QueueManager
from facade.model.message import Message

NAMES = [rf".\private$\batch-{n}" for n in range(3)]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The DELETE_GRACE waits delete_queues makes (recorded, not slept); sleeps elsewhere
    (other modules, background threads) are slept as usual."""
    made: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if sys._getframe(1).f_globals.get("__name__") == manager_module.__name__:
            made.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    return made


def test_several_queues_go_with_one_grace(memory_qm: QueueManager, sleeps: list[float]) -> None:
    for name in NAMES:
        memory_qm.create_queue(name).send(Message(body=b"x"), wait=True)
    kept = memory_qm.create_queue(r".\private$\kept")
    memory_qm.delete_queues(NAMES)
    assert len(sleeps) == 1 and 0 < sleeps[0] <= manager_module.DELETE_GRACE
    for name in NAMES:
        assert not memory_qm.queue_exists(name)
        with pytest.raises(QueueNotFound):
            memory_qm.open_queue(name)
    topics = memory_qm.session.cluster.topics()  # type: ignore[attr-defined]
    assert not any("batch-" in topic for topic in topics)
    kept.send(Message(body=b"still here"), wait=True)
    assert kept.receive(timeout=5).body == b"still here"


def test_a_missing_queue_deletes_none_of_them(memory_qm: QueueManager,
                                             sleeps: list[float]) -> None:
    for name in NAMES:
        memory_qm.create_queue(name)
    with pytest.raises(QueueNotFound):
        memory_qm.delete_queues([*NAMES, r".\private$\never-created"])
    assert all(memory_qm.queue_exists(name) for name in NAMES)
    assert sleeps == []


def test_a_name_given_twice_is_deleted_once(memory_qm: QueueManager, sleeps: list[float]) -> None:
    memory_qm.create_queue(NAMES[0])
    memory_qm.delete_queues([NAMES[0], NAMES[0].upper()])
    assert not memory_qm.queue_exists(NAMES[0])


@pytest.mark.parametrize("bad", [NAMES[0], None, [NAMES[0], 7]])
def test_anything_but_an_iterable_of_names_is_refused(memory_qm: QueueManager, bad: object,
                                                     sleeps: list[float]) -> None:
    memory_qm.create_queue(NAMES[0])
    with pytest.raises(InvalidParameter, match="paths_or_format_names"):
        memory_qm.delete_queues(bad)  # type: ignore[arg-type]
    assert memory_qm.queue_exists(NAMES[0])
