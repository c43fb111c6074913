"""The floors benchmark adds up the right parts against the right budgets, and its broker-free
part runs (benchmarks/floors_bench.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "floors_bench.py"
_SPEC = importlib.util.spec_from_file_location("floors_bench", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

_CPU = {"message": 4.0, "avro_write": 15.0, "avro_read": 13.0, "decode_message": 23.0,
        "receipt": 12.0, "outgoing_row": 11.0, "message_build": 10.0}
_BROKER = {"produce": 2.5, "produce_fanout": 22.0, "envelope_app": 19.0, "consume_decode": 14.0,
           "consume_commit": 280.0, "produce_enveloped": 3.5, "ack_round_trip": 180.0}


def _by_target() -> dict[str, dict]:
    return {row["target"].split()[0]: row for row in bench.floors(_CPU, _BROKER)}


def test_budgets_are_the_raw_time_per_message_over_the_target_ratio() -> None:
    rows = _by_target()
    assert rows["express-send"]["budget_us"] == pytest.approx(2.5 / 0.1)
    assert rows["send-batch"]["budget_us"] == pytest.approx(2.5 / 0.3)
    assert rows["dl-fanout"]["budget_us"] == pytest.approx(22.0 / 0.3)  # per send of 10
    assert rows["recoverable-send-batch"]["budget_us"] == pytest.approx(50.0)
    assert rows["receive"]["budget_us"] == pytest.approx(280.0)
    assert rows["receive-batch"]["budget_us"] == pytest.approx(14.0 / 0.5)


def test_floors_add_up_the_parts_no_implementation_of_the_design_can_skip() -> None:
    rows = _by_target()
    assert rows["express-send"]["floor_us"] == pytest.approx(4.0 + 19.0)
    assert rows["dl-fanout"]["floor_us"] == pytest.approx(4.0 + 15.0 + 10 * 3.5)
    assert rows["recoverable-send-batch"]["floor_us"] == pytest.approx(4.0 + 19.0 + 11.0)
    assert rows["receive"]["floor_us"] == pytest.approx(12.0 + 180.0)
    assert rows["receive-batch"]["floor_us"] == pytest.approx(14.0 + 10.0)
    for row in rows.values():
        assert row["margin_us"] == pytest.approx(row["budget_us"] - row["floor_us"])
    assert rows["send-batch"]["margin_us"] < 0 < rows["receive"]["margin_us"]


def test_the_cpu_parts_are_measured(tmp_path: Path) -> None:
    parts = bench.cpu_parts(count=100, rounds=1, home=tmp_path)
    assert set(parts) == set(_CPU)
    assert all(value > 0 for name, value in parts.items() if name != "message_build")
    assert parts["message_build"] == max(parts["decode_message"] - parts["avro_read"], 0.0)
    assert not list(tmp_path.glob("*.sqlite3-wal"))  # the outgoing queue was closed
