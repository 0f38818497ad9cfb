"""Every S-, T-, E-, R-, P- and L- behaviour is pinned by a test or explained in docs (issue #2).

A behaviour counts as pinned when its id appears in a test function's name (``test_S52_…``)
or as ``S-52`` in a test file under tests/ or properties/. Ids that do not apply to Python
are listed in docs/behaviors-status.md with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANGES = {"S": 92, "T": 15, "E": 12, "R": 22, "P": 8, "L": 34}
# Bedrock AgentCore (issue #4): the runtime, normalize, data plane, event stream, SigV4, control-plane
# client and runtime commands. B-47…B-84 (harness provisioning) belong to the provisioning issue.
B_IDS = [*range(1, 47), *range(85, 89)]
# Provisioning and artifacts (issue #5): harness provisioning, specs/stores/flows, artifacts.
PROVISIONING_IDS = [
    *(f"B-{n}" for n in range(47, 85)),
    *(f"V-{n}" for n in range(1, 52)),
    *(f"A-{n}" for n in range(1, 15)),
]
_NAME = re.compile(r"def (test_\w+)")
_HYPHEN = re.compile(r"\b([STERPLBVA])-(\d+)\b")


def pinned_ids() -> set[str]:
    found: set[str] = set()
    for folder in ("tests", "properties"):
        for path in (ROOT / folder).rglob("test_*.py"):
            if path.name == Path(__file__).name:
                continue
            text = path.read_text()
            for name in _NAME.findall(text):
                for token in name.split("_"):
                    m = re.fullmatch(r"([STERPLBVA])(\d+)", token)
                    if m:
                        found.add(f"{m[1]}-{int(m[2])}")
            found.update(f"{a}-{int(b)}" for a, b in _HYPHEN.findall(text))
    return found


def documented_ids() -> set[str]:
    text = (ROOT / "docs" / "behaviors-status.md").read_text()
    return {f"{a}-{int(b)}" for a, b in re.findall(r"^\|\s*([STERPLBVA])-(\d+)\s*\|", text, re.M)}


def test_every_session_tool_event_reconnect_provider_and_local_behaviour_is_accounted_for() -> None:
    wanted = {f"{p}-{n}" for p, top in RANGES.items() for n in range(1, top + 1)}
    missing = sorted(wanted - pinned_ids() - documented_ids(), key=lambda i: (i[0], int(i[2:])))
    assert missing == [], f"pin these with a test or explain them in docs/behaviors-status.md: {missing}"


def test_every_agentcore_runtime_behaviour_is_accounted_for() -> None:
    wanted = {f"B-{n}" for n in B_IDS}
    missing = sorted(wanted - pinned_ids() - documented_ids(), key=lambda i: int(i[2:]))
    assert missing == [], f"pin these with a test or explain them in docs/behaviors-status.md: {missing}"


def test_every_provisioning_and_artifact_behaviour_is_accounted_for() -> None:
    missing = sorted(
        set(PROVISIONING_IDS) - pinned_ids() - documented_ids(), key=lambda i: (i[0], int(i[2:]))
    )
    assert missing == [], f"pin these with a test or explain them in docs/behaviors-status.md: {missing}"
