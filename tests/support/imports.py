"""What a fresh interpreter has imported after running some code (start-up cost checks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def modules_after(code: str) -> set[str]:
    """The names in ``sys.modules`` after ``code`` runs in a new ``python -c`` process (this
    checkout first on ``sys.path``).

    Raises:
        subprocess.CalledProcessError: ``code`` failed.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json\n"
                           "print(json.dumps(sorted(sys.modules)))"],
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))
