"""The workspace toolset is a tool source like any other: an ``Agent`` on Local or on AgentCore
gets the same six local tools (declared to the host, run here, confined, bash sandboxed) and
the same results for the same calls as the self-hosted Claude worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rma_shell import Agent
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.workspace import Workspace
from tests.tools._wire import agentcore_tool_results, local_tool_results
from tests.workspace._procs import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

KEY = "sk-test-workspace"
SID = "rma-session-0123456789abcdef0123456789"
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("write", {"file_path": "notes/todo.md", "content": "- ship it\n"}),
    ("bash", {"command": "cd notes && cat todo.md && pwd >/dev/null && echo made > by-bash.txt"}),
    ("edit", {"file_path": "notes/todo.md", "old_string": "ship", "new_string": "test"}),
    ("read", {"file_path": "notes/todo.md"}),
    ("glob", {"pattern": "**/*.txt"}),
    ("grep", {"pattern": "test"}),
    ("read", {"file_path": "../../etc/passwd"}),
    ("bash", {"command": "touch /etc/escape"}),
]
EXPECTED = [
    ("wrote 10 bytes to notes/todo.md", False),
    ("- ship it\n", False),
    ("edited notes/todo.md (1 replacement(s))", False),
    ("- test it\n", False),
    ("notes/by-bash.txt", False),
    ("notes/todo.md:1:- test it", False),
    ("read: ../../etc/passwd: '..' is not permitted", True),
    ("touch: cannot touch '/etc/escape': Read-only file system\n", True),
]


async def test_a_local_agent_gets_the_workspace_tools(anyio_backend: Any, tmp_path: Path) -> None:
    turns: list[Any] = [
        {"tool_calls": [{"id": f"call_{i}", "name": n, "arguments": a}]} for i, (n, a) in enumerate(SCRIPT)
    ]
    with OpenAIEmulator([*turns, {"content": "done"}], api_key=KEY) as emu:
        host = Local(base_url=emu.base_url, model="m", api_key=KEY, _seams=Seams(rand=lambda: 0.0))
        async with Workspace(tmp_path) as ws:
            result = (await Agent(tools=[ws], host=host).run("go", timeout=60)).unwrap()
        declared = sorted(t["function"]["name"] for t in emu.requests[0].body["tools"])
        results = local_tool_results(emu.requests[-1].body["messages"])
    assert result.text == "done"
    assert declared == ["bash", "edit", "glob", "grep", "read", "write"]
    assert results == EXPECTED
    assert (tmp_path / "notes" / "by-bash.txt").read_text() == "made\n"


async def test_an_agentcore_agent_gets_the_workspace_tools(anyio_backend: Any, tmp_path: Path) -> None:
    script = [ace.tool_turn((n, a, f"tooluse_{i}")) for i, (n, a) in enumerate(SCRIPT)]
    with AgentCoreEmulator([*script, ace.text_turn("done")]) as emu:
        host = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
        )
        try:
            async with Workspace(tmp_path) as ws:
                outcome = await Agent(tools=[ws], host=host).run("go", runtime_session_id=SID, timeout=60)
        finally:
            await host.close()
        invokes = [r.body for r in emu.requests if r.path.startswith("/harnesses/invoke")]
    assert outcome.unwrap().text == "done"
    assert sorted(t["name"] for t in invokes[0]["tools"]) == [
        "bash",
        "edit",
        "glob",
        "grep",
        "read",
        "write",
    ]
    assert agentcore_tool_results(invokes[1:]) == EXPECTED
