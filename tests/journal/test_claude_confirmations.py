"""On Claude Managed Agents, the host's own permission asks (a built-in tool with
``evaluated_permission: ask``) take the journal's approval path when the handler does not decide."""

from __future__ import annotations

from typing import Any

from returns.result import Success

from rma_shell import AwaitingApproval, MemoryJournal, approve, resume, run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import CMAEmulator, cma, text_turn, tool_turn
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-5c1f"


def _provider(emu: CMAEmulator) -> ClaudeManagedAgents:
    ids = cma_agent_and_environment(emu, KEY)
    return ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, max_retries=2, **ids)


def _tools(name: str, input: dict[str, Any], ctx: object) -> str:
    return f"{name} done"


def _posted(emu: CMAEmulator) -> list[dict[str, Any]]:
    return [
        e for q in emu.requests if q.method == "POST" and q.path.endswith("/events") for e in q.body["events"]
    ]


async def test_a_host_permission_ask_waits_for_approve_and_then_is_allowed() -> None:
    gated = [
        cma.status_running(),
        cma.agent_tool_use("bash", {"command": "ls"}, evaluated_permission="ask"),
        cma.idle_requires_action(),
    ]
    with CMAEmulator([gated, text_turn("fine")], api_key=KEY) as emu:
        provider = _provider(emu)
        journal = MemoryJournal()
        try:
            paused = await run(
                provider, handler=_tools, prompt="go", timeout=20, journal=journal, journal_key="c1"
            )
            error = paused.failure()
            assert isinstance(error, AwaitingApproval)
            [waiting] = error.waiting
            assert (
                waiting.name == "bash"
                and waiting.host_confirmation
                and dict(waiting.input) == {"command": "ls"}
            )
            assert not any(e["type"] == "user.tool_confirmation" for e in _posted(emu))  # the host waits
            approve(journal, "c1", waiting.tool_use_id, "allow")
            resumed = await resume(journal, "c1", provider=provider, handler=_tools, timeout=20)
            assert isinstance(resumed, Success) and resumed.unwrap().text == "fine"
            [confirmation] = [e for e in _posted(emu) if e["type"] == "user.tool_confirmation"]
            assert confirmation["result"] == "allow" and confirmation["tool_use_id"] == waiting.tool_use_id
        finally:
            await provider.close()


async def test_a_resumed_claude_tool_loop_posts_each_result_once() -> None:
    with CMAEmulator([tool_turn(("lookup", {"q": 1})), text_turn("done")], api_key=KEY) as emu:
        provider = _provider(emu)
        journal = MemoryJournal()
        runs: list[int] = []

        async def tools(name: str, input: dict[str, Any], ctx: object, info: Any) -> str:
            runs.append(info.attempt)
            return "looked up"

        try:
            first = await run(
                provider, handler=tools, prompt="go", timeout=20, journal=journal, journal_key="c2"
            )
            again = await resume(journal, "c2", provider=provider, handler=tools, timeout=20)
            assert isinstance(first, Success) and again == first and runs == [1]
            results = [e for e in _posted(emu) if e["type"] == "user.custom_tool_result"]
            assert len(results) == 1
        finally:
            await provider.close()
