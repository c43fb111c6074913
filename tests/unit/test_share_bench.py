"""The share-group benchmark's broker-free parts: which client results count as a successful
acknowledgement and which errors stop a drain (benchmarks/share_bench.py)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "share_bench.py"
_SPEC = importlib.util.spec_from_file_location("share_bench", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


@dataclass
class _Event:
    """What poll() returns for an error: a message whose error() is set."""

    kafka_error: KafkaError | None

    def error(self) -> KafkaError | None:
        return self.kafka_error


def test_a_commit_counts_only_when_every_partition_succeeded() -> None:
    partition = TopicPartition("queue", 0)
    assert bench._committed({partition: None})
    lost = KafkaException(KafkaError(KafkaError.INVALID_RECORD_STATE))
    assert not bench._committed({partition: lost})
    assert not bench._committed({partition: None, TopicPartition("queue", 1): lost})


def test_a_loading_coordinator_is_retried_and_a_fatal_error_stops_the_drain() -> None:
    bench._raise_fatal([_Event(None), _Event(KafkaError(KafkaError.NOT_COORDINATOR)),
                        _Event(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))])
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        bench._raise_fatal([_Event(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))])


def test_headers_are_read_in_every_form_the_client_returns() -> None:
    assert bench._header_list(None) == []
    assert bench._header_list([("a", b"1")]) == [("a", b"1")]
    assert bench._header_list({"a": b"1"}) == [("a", b"1")]
    assert [bench._text(v) for v in (None, "x", b"y", b"\xff")] == ["", "x", "y", "\ufffd"]


def test_it_asks_for_a_broker_rather_than_guess_one(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KMQ_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(SystemExit):
        bench.main([])
    assert "KMQ_BOOTSTRAP_SERVERS" in capsys.readouterr().err
