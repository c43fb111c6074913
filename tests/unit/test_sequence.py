"""The message-id allocator's block logic, with an in-memory block source standing in for Kafka.

The source hands out increasing offsets as a partition does; the Kafka source itself, several
processes and hosts, a leftover counter file and a dead broker are tested on real brokers in
``tests/integration/test_message_ids.py``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

import pytest

from facade.errors import BrokerError, BrokerUnavailable
from facade.state.sequence import BLOCK_SIZE, MessageIdAllocator

GUID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")


class _Lease:
    def __init__(self, source: _Partition, offset: int | None):
        self.source = source
        self.offset = offset

    def wait(self, timeout: float) -> int:
        self.source.waits += 1
        if self.offset is None:
            raise BrokerUnavailable(f"lease not acknowledged within {timeout:g} s")
        return self.offset


class _Partition:
    """Offsets as one Kafka partition gives them: every record its own, never reused."""

    def __init__(self, start: int = 0):
        self.next_offset = start
        self.lock = threading.Lock()
        self.down = False
        self.refuse = False
        self.requests = 0
        self.waits = 0
        self.closed = False

    def request(self) -> _Lease:
        if self.refuse:
            raise BrokerError("producer refused the record")
        with self.lock:
            self.requests += 1
            if self.down:
                return _Lease(self, None)
            offset, self.next_offset = self.next_offset, self.next_offset + 1
        return _Lease(self, offset)

    def close(self) -> None:
        self.closed = True


def test_ids_come_from_the_leased_blocks_and_the_next_block_is_asked_for_at_half() -> None:
    source = _Partition(start=5)
    ids = MessageIdAllocator(GUID, source)
    ids.prepare()
    assert source.requests == 1
    first = [ids.new() for _ in range(BLOCK_SIZE // 2)]
    start = 5 * BLOCK_SIZE
    assert [m.sequence for m in first] == list(range(start, start + BLOCK_SIZE // 2))
    assert all(m.machine_guid == GUID for m in first)
    assert source.requests == 2 and source.waits == 1   # requested in advance, not waited for
    rest = [ids.new().sequence for _ in range(BLOCK_SIZE // 2 + 1)]
    assert rest[-1] == 6 * BLOCK_SIZE and source.waits == 2
    ids.close()
    assert source.closed


def test_allocators_sharing_one_partition_never_repeat_an_id() -> None:
    source = _Partition()
    allocators = [MessageIdAllocator(GUID, source) for _ in range(4)]
    drawn: list[int] = []

    def draw(allocator: MessageIdAllocator) -> None:
        got = [allocator.new().sequence for _ in range(3 * BLOCK_SIZE + 17)]
        drawn.extend(got)

    threads = [threading.Thread(target=draw, args=(a,)) for a in allocators for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(drawn) == 8 * (3 * BLOCK_SIZE + 17) == len(set(drawn))


def test_sequences_wrap_at_2_to_the_32_as_msmq_does() -> None:
    last_block = 2**32 // BLOCK_SIZE - 1
    ids = MessageIdAllocator(GUID, _Partition(start=last_block))
    got = [ids.new().sequence for _ in range(BLOCK_SIZE + 2)]
    assert got[BLOCK_SIZE - 1] == 2**32 - 1
    assert got[BLOCK_SIZE:] == [0, 1]   # block 2**22 is block 0 again, 4 million leases later


def test_a_block_needed_while_the_broker_is_away_fails_and_no_id_repeats() -> None:
    source = _Partition()
    ids = MessageIdAllocator(GUID, source, timeout=0.01)
    seen = {ids.new().sequence for _ in range(BLOCK_SIZE // 2 - 1)}
    source.down = True                  # the advance request below is never acknowledged
    seen |= {ids.new().sequence for _ in range(BLOCK_SIZE // 2 + 1)}
    assert len(seen) == BLOCK_SIZE
    for _ in range(3):                  # every id asked for now fails, none is handed out
        with pytest.raises(BrokerUnavailable):
            ids.new()
    source.down = False
    after = [ids.new().sequence for _ in range(BLOCK_SIZE + 1)]
    assert not seen & set(after) and len(set(after)) == len(after)


def test_an_advance_request_that_failed_while_the_broker_was_away_is_asked_again_when_needed(
) -> None:
    # On a three-node cluster the advance lease can time out while two brokers are down; when
    # the block runs out after they are back, the send must not fail with that stale timeout.
    source = _Partition()
    ids = MessageIdAllocator(GUID, source, timeout=5.0)
    ids.prepare()
    source.down = True                  # the advance request fails...
    got = [ids.new().sequence for _ in range(BLOCK_SIZE // 2)]
    source.down = False                 # ...and the broker is back before the block runs out
    got += [ids.new().sequence for _ in range(BLOCK_SIZE // 2 + 1)]
    assert got[-1] == BLOCK_SIZE and len(set(got)) == len(got)
    assert source.requests == 3


def test_a_refused_advance_request_is_logged_and_asked_again_when_needed(
        caplog: pytest.LogCaptureFixture) -> None:
    source = _Partition()
    ids = MessageIdAllocator(GUID, source)
    caplog.set_level(logging.WARNING, logger="kmq.sequence")
    ids.prepare()
    source.refuse = True
    got = [ids.new().sequence for _ in range(BLOCK_SIZE // 2)]
    assert "next message-id block" in caplog.text and source.requests == 1
    with pytest.raises(BrokerError):
        for _ in range(BLOCK_SIZE):
            got.append(ids.new().sequence)
    assert len(got) == BLOCK_SIZE and len(set(got)) == BLOCK_SIZE
    source.refuse = False
    assert ids.new().sequence == BLOCK_SIZE


def test_offsets_going_backwards_are_refused() -> None:
    source = _Partition(start=10)
    ids = MessageIdAllocator(GUID, source)
    ids.prepare()
    for _ in range(BLOCK_SIZE // 2 - 1):
        ids.new()
    source.next_offset = 0              # the topic was deleted and recreated
    with pytest.raises(BrokerError, match="deleted and recreated"):
        for _ in range(BLOCK_SIZE):
            ids.new()


@pytest.mark.parametrize("content", [b"", b"garbage", b"0", b"4096", b"12\x00", b"\xff\xfe"])
def test_a_leftover_counter_file_is_never_read(tmp_path: Path, content: bytes) -> None:
    # Earlier versions kept $KMQ_HOME/<qm>.sequence and restarted at 0 on a bad one. The
    # allocator reads no file: ids depend on the leased blocks only.
    (tmp_path / "qm1.sequence").write_bytes(content)
    source = _Partition()
    before = [MessageIdAllocator(GUID, source).new().sequence for _ in range(3)]
    after = [MessageIdAllocator(GUID, source).new().sequence for _ in range(3)]
    assert len(set(before + after)) == 6
    assert (tmp_path / "qm1.sequence").read_bytes() == content
