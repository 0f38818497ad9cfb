"""The workspace toolset speaks the wire's ``agent_toolset_20260401``: the SDK's input models
name exactly the properties our schemas declare, and on the same calls our results read as the
SDK's reference toolset's (its bash aside, which runs unconfined)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401
from anthropic.types import beta as sdk
from returns.result import Failure, Success

from rma_shell.workspace import TOOL_NAMES, Workspace
from rma_shell.workspace.toolset import SPECS

pytestmark = pytest.mark.anyio

_MODELS = {
    "bash": sdk.BetaManagedAgentsAgentToolset20260401BashInput,
    "read": sdk.BetaManagedAgentsAgentToolset20260401ReadInput,
    "write": sdk.BetaManagedAgentsAgentToolset20260401WriteInput,
    "edit": sdk.BetaManagedAgentsAgentToolset20260401EditInput,
    "glob": sdk.BetaManagedAgentsAgentToolset20260401GlobInput,
    "grep": sdk.BetaManagedAgentsAgentToolset20260401GrepInput,
}


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_each_schema_declares_the_sdk_input_models_fields(name: str) -> None:
    model = _MODELS[name]
    schema = SPECS[name].input_schema
    assert set(schema["properties"]) == set(model.model_fields)  # type: ignore[arg-type]
    required = {k for k, f in model.model_fields.items() if f.is_required()}
    assert set(schema.get("required", [])) == required  # type: ignore[arg-type]


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("write", {"file_path": "src/app.py", "content": "print('hi')\nx = 1\n"}),
    ("read", {"file_path": "src/app.py"}),
    ("read", {"file_path": "src/app.py", "view_range": [2, 2]}),
    ("edit", {"file_path": "src/app.py", "old_string": "x = 1", "new_string": "x = 2"}),
    ("edit", {"file_path": "src/app.py", "old_string": "nope", "new_string": "x"}),
    ("grep", {"pattern": "nothing-matches-this"}),
    ("glob", {"pattern": "**/*.rs"}),
]


async def test_results_read_as_the_sdk_reference_toolsets(anyio_backend: Any, tmp_path: Path) -> None:
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    ours_dir.mkdir()
    theirs_dir.mkdir()
    reference = {t.name: t for t in beta_agent_toolset_20260401(AgentToolContext(workdir=str(theirs_dir)))}
    async with Workspace(ours_dir) as ws:
        for name, args in CALLS:
            ours = await ws.call(name, args)
            try:
                theirs: Any = await reference[name].call(args)
            except ToolError as exc:
                theirs = ("error", str(exc))
            is_error = isinstance(ours, Failure)
            text = (
                ours.failure()
                if isinstance(ours, Failure)
                else ours.unwrap()
                if isinstance(ours, Success)
                else ours
            )
            if isinstance(theirs, str):
                assert (text, is_error) == (theirs, False), name
            else:
                assert (text, is_error) == (theirs[1], True), name
