"""Counting a bench worker's instructions under valgrind's cachegrind (no cache simulation).

Deterministic where CPU time on a shared machine is not: a bench runs its worker twice, at
two sizes, and divides the difference by the work it added (start-up and imports cancel).
What this is not: the difference itself, which each bench takes in its own units.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")


def count(script: Path, job: dict[str, Any], *, env: dict[str, str] | None = None) -> int:
    """The instructions ``python script --count`` executes with ``job`` as JSON on its stdin;
    ``SystemExit`` with the worker's stderr when it fails."""
    done = subprocess.run(
        [*VALGRIND, sys.executable, str(script), "--count"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=None if env is None else {**os.environ, **env},
        timeout=3600,
    )
    match = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or not match:
        raise SystemExit(f"the count worker failed:\n{done.stderr[-3000:]}")
    return int(match.group(1).replace(",", ""))
