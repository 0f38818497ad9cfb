"""The shipped examples run offline and print what their docstrings promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("local_with_tools.py", "end_turn after 3 turns: Ada is on the Pro plan."),
        ("live_session.py", "second: We said hello."),
        ("streaming_ui.py", "[lookup …\n(turn 1: requires_action)\n done]\nAda is on the Pro plan."),
        (
            "claude_managed_agents.py --emulator",
            "end_turn after 2 turns: ada@example.com is on the Pro plan.",
        ),
        (
            "bedrock_agent_core.py --emulator",
            "end_turn after 2 turns: ada@example.com is on the Pro plan.",
        ),
        (
            "tools_everywhere.py",
            "local: ada@example.com is on pro, invoiced 87\n"
            "agentcore: ada@example.com is on pro, invoiced 87\n"
            "claude: ada@example.com is on pro, invoiced 87",
        ),
        (
            "self_hosted_worker.py",
            "workspace answer.txt: 55; the agent said: The 10th Fibonacci number is 55.",
        ),
        (
            "webhook_receiver.py",
            "ticket-42 resumed on session.requires_action: end_turn: ada@example.com is on the Pro plan.",
        ),
        (
            "temporal_scale_out.py",
            "12 sessions done on 3 workers (one killed mid-run); 24 charges, each applied once",
        ),
    ],
)
def test_example_runs(script: str, expected: str) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / script.split()[0]), *script.split()[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        # The tree under test, not whatever an editable install points at (the Temporal
        # example's worker processes inherit it).
        env={**os.environ, "PYTHONPATH": str(EXAMPLES.parent)},
    )
    assert expected in out.stdout
