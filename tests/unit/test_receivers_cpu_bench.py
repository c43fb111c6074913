"""The receivers' CPU benchmark divides the right figures and bounds by the 1-process drain
(benchmarks/receivers_cpu_bench.py)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "receivers_cpu_bench.py"
_SPEC = importlib.util.spec_from_file_location("receivers_cpu_bench", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = bench  # dataclasses look their module up there
_SPEC.loader.exec_module(bench)


def _drain(processes: int, broker_cpu: float | None = 1.2) -> object:
    return bench.Drain(processes=processes, received=4000, seconds=2.0, receiver_cpu=2.4,
                       broker_cpu=broker_cpu, machine_busy=3.0,
                       requests={"Fetch": 2800, "Produce": 4000, "Metadata": 3})


def test_a_row_gives_the_figures_per_message_against_one_receiver() -> None:
    row = _drain(4).row(single_rate=4000.0)
    assert row["msg_per_s"] == 2000 and row["ratio_to_one"] == 0.5
    assert row["receiver_cpu_us"] == 600 and row["broker_cpu_us"] == 300
    assert row["busy_cores"] == 1.5
    assert row["requests_per_msg"] == {"Fetch": 0.7, "Produce": 1.0}  # rare kinds left out
    assert _drain(4, broker_cpu=None).row(4000.0)["broker_cpu_us"] is None


def test_the_bound_is_the_cores_over_one_receivers_cpu_per_message() -> None:
    bound = bench.cpu_bound(_drain(1), cores=2)
    assert bound == {"cores": 2, "cpu_us_per_msg": 900, "msg_per_s": 2222, "ratio_to_one": 1.11}
    assert bench.cpu_bound(_drain(1, broker_cpu=None), cores=2) is None  # a remote broker
    with pytest.raises(ValueError, match="1-process"):
        bench.cpu_bound(_drain(4), cores=2)


def test_cpu_times_are_read_from_proc() -> None:
    assert bench.process_cpu(os.getpid()) > 0
    busy, total = bench.machine_cpu()
    assert 0 < busy < total
