"""The wire-format benchmark compares like with like: both layouts carry every property of any
valid message (hypothesis), and its broker-free part runs (benchmarks/wire_format_bench.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from facade import Message
from facade.model.envelope import decode_message, encode_message
from tests.unit.test_envelope import messages

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "wire_format_bench.py"
_SPEC = importlib.util.spec_from_file_location("wire_format_bench", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
def test_both_layouts_carry_every_property(m: Message) -> None:
    value, headers = bench.headers_layout(m)
    assert value == m.body
    assert bench.from_headers_layout(value, headers) == decode_message(encode_message(m).value)


def test_the_codec_comparison_runs_and_the_headers_layout_omits_defaults() -> None:
    rows = bench.codec_table(count=20, rounds=1)
    assert [r["message"] for r in rows] == list(bench.sample_messages())
    for row in rows:
        assert row["body_bytes"] < row["headers_bytes"] < row["avro_bytes"]
        assert row["avro_encode_us"] > 0 and row["headers_decode_us"] > 0
    _value, headers = bench.headers_layout(bench.sample_messages()["express 200 B"])
    assert {name for name, _ in headers} == {
        "kmq.id", "kmq.sent_time", "kmq.source_machine_id", "kmq.destination_queue"}
