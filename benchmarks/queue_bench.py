"""Facade against raw confluent-kafka on the same broker: a thin wrapper of ``kmq bench``.

The scenarios live in :mod:`facade.bench` (``kmq bench --help``); this script is a second
entry point to them and takes the same options (``--messages``, ``--rounds``, ``--payload``,
``--scenario``, ``--json``). Not part of the test run. Broker: KMQ_BOOTSTRAP_SERVERS, else the
dev stack (``kmq dev up``).

    .venv/bin/python benchmarks/queue_bench.py --messages 2000 --rounds 3
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from facade.bench import main  # noqa: E402

if __name__ == "__main__":
    main()
