"""Counting a bench worker's instructions under valgrind's cachegrind (no cache simulation).

Deterministic where CPU time on a shared machine is not: a bench runs its worker twice, at
two sizes, and divides the difference by the work it added (start-up and imports cancel).
What this is not: the difference itself, which each bench takes in its own units. Used by
``core_step``, ``agentcore_tool_loop``, ``driver_cost`` (``_scale_instructions``),
``journal_overhead`` and ``journal_parts``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
"""The prefix that runs a command under cachegrind, for a bench that starts its workers itself."""


def instructions(stderr: str) -> int:
    """The instructions in valgrind's report (its stderr); ``SystemExit`` when there is none."""
    match = re.search(r"I\s+refs:\s+([\d,]+)", stderr)
    if match is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{stderr[-3000:]}")
    return int(match.group(1).replace(",", ""))


def run(argv: Sequence[str], *, stdin: str | None = None, env: dict[str, str] | None = None) -> int:
    """The instructions ``argv`` executes under cachegrind (``stdin`` its input, ``env`` added to
    this environment); ``SystemExit`` with its stderr when it fails."""
    done = subprocess.run(
        [*VALGRIND, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=None if env is None else {**os.environ, **env},
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the count worker failed:\n{done.stderr[-3000:]}")
    return instructions(done.stderr)


def count(script: Path, job: dict[str, Any], *, env: dict[str, str] | None = None) -> int:
    """The instructions ``python script --count`` executes with ``job`` as JSON on its stdin."""
    return run([sys.executable, str(script), "--count"], stdin=json.dumps(job), env=env)
