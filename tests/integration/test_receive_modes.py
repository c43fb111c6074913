"""Batch, iterating and asynchronous receives on a real broker."""

from __future__ import annotations

import asyncio
import threading

import pytest

from facade import InvalidParameter, Message, ReceiveTimeout
from facade.manager import QueueManager

pytestmark = pytest.mark.integration


def _send(q, bodies, priority: int = 3) -> None:  # type: ignore[no-untyped-def]
    for body in bodies:
        q.send(Message(body=body, priority=priority))
    q.send(Message(body=b"sync", priority=0), wait=True)


def test_receive_many_takes_a_batch_in_receive_order_with_one_receipt(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\batch")
    _send(q, [b"%d" % i for i in range(10)])
    q.send(Message(body=b"urgent", priority=7), wait=True)
    receipts_before = q._opened.open_view().state.receipts_offset
    got = q.receive_many(5, timeout=10)
    assert [m.body for m in got] == [b"urgent", b"0", b"1", b"2", b"3"]
    view = q._opened.open_view()
    view.catch_up()
    assert view.state.receipts_offset == receipts_before + 1
    rest = q.receive_many(100, timeout=10)
    assert [m.body for m in rest] == [b"%d" % i for i in range(4, 10)] + [b"sync"]
    with pytest.raises(ReceiveTimeout):
        q.receive_many(3, timeout=0.2)
    with pytest.raises(InvalidParameter):
        q.receive_many(0)


def test_competing_batch_receivers_never_share_a_message(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\batch-race")
    _send(q, [b"%d" % i for i in range(400)])
    got: dict[str, list[bytes]] = {"a": [], "b": []}

    def drain(name: str) -> None:
        handle = qm.open_queue(r".\private$\batch-race")
        try:
            while True:
                try:
                    got[name].extend(m.body for m in handle.receive_many(25, timeout=3))
                except ReceiveTimeout:
                    return
        finally:
            handle.close()

    threads = [threading.Thread(target=drain, args=(n,)) for n in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    everything = got["a"] + got["b"]
    assert sorted(everything) == sorted([b"%d" % i for i in range(400)] + [b"sync"])


def test_iterating_a_queue_drains_it(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\iterate")
    _send(q, [b"a", b"b", b"c"])
    assert [m.body for m in q] == [b"a", b"b", b"c", b"sync"]
    assert list(q) == []
    _send(q, [b"d"])
    assert [m.body for m in q.messages(timeout=1)] == [b"d", b"sync"]


def test_begin_receive_completes_with_a_callback(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\begin")
    done = threading.Event()
    seen: list[bytes] = []

    def completed(future) -> None:  # type: ignore[no-untyped-def]
        seen.append(future.result().body)
        done.set()

    future = q.begin_receive(timeout=30, callback=completed)
    q.send(Message(body=b"later"), wait=True)
    assert future.result(60).body == b"later"
    assert done.wait(60) and seen == [b"later"]
    timed_out = q.begin_receive(timeout=0.2)
    with pytest.raises(ReceiveTimeout):
        timed_out.result(60)
    q.close()


def test_receive_async_and_peek_async(qm: QueueManager) -> None:
    q = qm.create_queue(r".\private$\async")
    q.send(Message(body=b"one"), wait=True)

    async def main() -> tuple[bytes, bytes]:
        peeked = await q.peek_async(10)
        received = await q.receive_async(10)
        return peeked.body, received.body

    assert asyncio.run(main()) == (b"one", b"one")
    with pytest.raises(ReceiveTimeout):
        asyncio.run(q.receive_async(0.2))
    q.close()
