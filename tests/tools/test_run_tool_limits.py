"""Per-run tool limits (issue #14): ``tool_timeout=`` cancels a call past it and the model gets
an error result while the run goes on; ``max_tool_result_chars=`` (default 100,000) cuts a long
result with a visible marker — for any handler, on every host."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rma.errors import InvalidOpts
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.tools import Toolbox, truncate
from tests.tools._wire import agentcore_tool_results, local_tool_results

KEY = "sk-test-limits"
SID = "rma-session-0123456789abcdef0123456789"
TOOLS = [
    {"name": "slow", "description": "Sleeps", "input_schema": {"type": "object"}},
    {"name": "big", "description": "Talks a lot", "input_schema": {"type": "object"}},
    {"name": "quick", "description": "Answers", "input_schema": {"type": "object"}},
]


class Tools:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        if name == "slow":
            try:
                await anyio.sleep(30)
            except BaseException:
                self.cancelled.append(name)
                raise
        if name == "big":
            return "y" * 250
        return "fine"


EXPECTED = [
    ("tool slow timed out after 0.3 s and was cancelled", True),
    ("y" * 100 + "\n[truncated: 150 of 250 characters not shown]", False),
    ("fine", False),
]


async def test_local_a_slow_tool_is_cancelled_and_a_long_result_cut_and_the_run_goes_on() -> None:
    turns: list[Any] = [
        {"tool_calls": [{"id": f"c{i}", "name": n, "arguments": {}}]}
        for i, n in enumerate(["slow", "big", "quick"])
    ]
    with OpenAIEmulator([*turns, {"content": "done"}], api_key=KEY) as emu:
        tools = Tools()
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            tools=TOOLS,
            _seams=Seams(rand=lambda: 0.0),
        )
        result = (
            await run(provider, handler=tools, prompt="go", tool_timeout=0.3, max_tool_result_chars=100)
        ).unwrap()
        messages = emu.requests[-1].body["messages"]
    assert result.text == "done" and tools.cancelled == ["slow"]
    assert local_tool_results(messages) == EXPECTED


async def test_agentcore_the_same_limits_give_the_same_results() -> None:
    script = [ace.tool_turn((n, {}, f"tooluse_{i}")) for i, n in enumerate(["slow", "big", "quick"])]
    with AgentCoreEmulator([*script, ace.text_turn("done")]) as emu:
        tools = Tools()
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
            tools=TOOLS,
        )
        try:
            result = (
                await run(
                    provider,
                    handler=tools,
                    prompt="go",
                    runtime_session_id=SID,
                    tool_timeout=0.3,
                    max_tool_result_chars=100,
                )
            ).unwrap()
        finally:
            await provider.close()
        invokes = [r.body for r in emu.requests if r.path.startswith("/harnesses/invoke")]
    sent = agentcore_tool_results(invokes[1:])
    assert result.text == "done" and sent == EXPECTED


async def test_by_default_results_are_capped_at_100000_characters() -> None:
    turns: list[Any] = [{"tool_calls": [{"id": "c", "name": "huge", "arguments": {}}]}, {"content": "ok"}]

    def huge(name: str, input: dict[str, Any], ctx: object) -> str:
        return "z" * 100_050

    with OpenAIEmulator(turns, api_key=KEY) as emu:
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            tools=[{"name": "huge", "description": "", "input_schema": {"type": "object"}}],
            _seams=Seams(rand=lambda: 0.0),
        )
        assert (await run(provider, handler=huge, prompt="go")).unwrap().text == "ok"
        [sent] = local_tool_results(emu.requests[-1].body["messages"])
    assert sent == ("z" * 100_000 + "\n[truncated: 50 of 100050 characters not shown]", False)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("tool_timeout", 0),
        ("tool_timeout", -1.0),
        ("tool_timeout", float("nan")),
        ("max_tool_result_chars", 0),
        ("max_tool_result_chars", 2.5),
    ],
)
async def test_bad_limits_are_refused_before_any_request(option: str, value: Any) -> None:
    with OpenAIEmulator([], api_key=KEY) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key=KEY)
        outcome = await run(provider, handler=Tools(), prompt="go", **{option: value})
        assert emu.requests == []
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == option


async def test_a_toolbox_result_past_both_default_caps_is_cut_once_counting_the_tools_output() -> None:
    # The toolbox's cap and the run's are both 100,000: one cap, applied once, and the marker
    # counts what the tool returned — not the toolbox's already-marked text (issue #23).
    turns: list[Any] = [{"tool_calls": [{"id": "c", "name": "huge", "arguments": {}}]}, {"content": "ok"}]

    def huge() -> str:
        """Return a lot."""
        return "z" * 100_001

    box = Toolbox(huge)
    with OpenAIEmulator(turns, api_key=KEY) as emu:
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            tools=box.tools(),
            _seams=Seams(rand=lambda: 0.0),
        )
        assert (await run(provider, handler=box, prompt="go")).unwrap().text == "ok"
        [sent] = local_tool_results(emu.requests[-1].body["messages"])
    text, is_error = sent
    assert text.endswith("z\n[truncated: 1 of 100001 characters not shown]") and not is_error
    assert text == "z" * 100_000 + "\n[truncated: 1 of 100001 characters not shown]"


@pytest.mark.parametrize(
    ("box_cap", "run_cap", "shown"),
    [(100, 50, 50), (50, 100, 50), (100, 100, 100), (None, 60, 60), (60, None, 60)],
)
async def test_the_smaller_of_the_toolbox_and_run_caps_applies_once(
    box_cap: int | None, run_cap: int | None, shown: int
) -> None:
    turns: list[Any] = [{"tool_calls": [{"id": "c", "name": "big", "arguments": {}}]}, {"content": "ok"}]

    def big() -> str:
        """Return a lot."""
        return "y" * 250

    box = Toolbox(big, max_result_chars=box_cap)
    with OpenAIEmulator(turns, api_key=KEY) as emu:
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            tools=box.tools(),
            _seams=Seams(rand=lambda: 0.0),
        )
        outcome = await run(provider, handler=box, prompt="go", max_tool_result_chars=run_cap)
        assert outcome.unwrap().text == "ok"
        [sent] = local_tool_results(emu.requests[-1].body["messages"])
    marker = f"\n[truncated: {250 - shown} of 250 characters not shown]"
    assert sent == ("y" * shown + marker, False)


MARKED = "p" * 39 + "\n[truncated: 7 of 46 characters not shown]"


@pytest.mark.parametrize("text", ["", "abc", "q" * 40, MARKED])
def test_truncating_a_truncated_text_is_truncating_it_once_at_the_smaller_limit(text: str) -> None:
    # A raw handler may cap with rma_shell.tools.truncate itself; the run's cap then composes.
    for a in range(1, 50):
        for b in range(1, 50):
            assert truncate(truncate(text, a), b) == truncate(text, min(a, b))


def test_a_marker_that_does_not_add_up_is_the_tools_own_text() -> None:
    text = "abc\n[truncated: 5 of 9 characters not shown]"  # 3 + 5 != 9: not one of rma's
    marker = f"\n[truncated: {len(text) - 10} of {len(text)} characters not shown]"
    assert truncate(text, 10) == text[:10] + marker
