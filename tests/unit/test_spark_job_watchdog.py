"""The demo report's watchdog on Spark jobs (facade.demo.spark_job._collect), with a stand-in
for Spark's context: a collect that hangs until its job tag is cancelled.

The real-Spark check (a Python UDF sleeping 600 s, cancelled and run again) is in the closing
note of the change; a unit test needs no JVM.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from facade.demo import spark_job


class _Cancelled(Exception):
    """What Spark raises from collect() when the job's tag is cancelled."""


class _Context:
    """addJobTag / removeJobTag / cancelJobsWithTag of a SparkContext, recorded."""

    def __init__(self) -> None:
        self.tags: list[str] = []
        self.active: set[str] = set()
        self.cancelled: dict[str, threading.Event] = {}

    def addJobTag(self, tag: str) -> None:  # noqa: N802 - Spark's name
        self.tags.append(tag)
        self.active.add(tag)
        self.cancelled[tag] = threading.Event()

    def removeJobTag(self, tag: str) -> None:  # noqa: N802
        self.active.discard(tag)

    def cancelJobsWithTag(self, tag: str) -> None:  # noqa: N802
        self.cancelled[tag].set()


class _Frame:
    """A DataFrame whose first ``hangs`` collects wait until their job is cancelled."""

    def __init__(self, hangs: int, error: Exception | None = None) -> None:
        self.sparkSession = type("Session", (), {"sparkContext": _Context()})()
        self.hangs = hangs
        self.error = error
        self.runs = 0

    @property
    def context(self) -> Any:
        return self.sparkSession.sparkContext

    def collect(self) -> list[int]:
        self.runs += 1
        tag = next(iter(self.context.active))
        if self.error is not None:
            raise self.error
        if self.runs <= self.hangs:
            # Bounded so that a broken watchdog fails the test instead of hanging it.
            if not self.context.cancelled[tag].wait(120):
                raise AssertionError("the watchdog never cancelled the job")
            raise _Cancelled(f"job with tag {tag} cancelled")
        return [1, 2, 3]


def test_a_job_that_hangs_is_cancelled_and_run_again() -> None:
    frame = _Frame(hangs=1)
    assert spark_job._collect(frame, "probe", timeout=0.05) == [1, 2, 3]
    assert frame.runs == 2
    first, second = frame.context.tags
    assert first != second  # each run has its own tag: cancelling one spares the next
    assert frame.context.cancelled[first].is_set() and not frame.context.cancelled[second].is_set()
    assert frame.context.active == set()  # no tag left on the thread's later jobs


def test_a_job_that_hangs_every_time_raises_and_names_it() -> None:
    frame = _Frame(hangs=spark_job.COLLECT_ATTEMPTS)
    with pytest.raises(RuntimeError, match="Spark job for probe did not finish") as raised:
        spark_job._collect(frame, "probe", timeout=0.05)
    assert isinstance(raised.value.__cause__, _Cancelled)
    assert frame.runs == spark_job.COLLECT_ATTEMPTS and frame.context.active == set()


def test_a_job_that_fails_on_its_own_is_not_run_again() -> None:
    frame = _Frame(hangs=0, error=ValueError("bad column"))
    with pytest.raises(ValueError, match="bad column"):
        spark_job._collect(frame, "probe", timeout=60)
    assert frame.runs == 1 and frame.context.active == set()
    assert not any(event.is_set() for event in frame.context.cancelled.values())
