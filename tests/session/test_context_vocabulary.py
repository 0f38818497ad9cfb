"""One vocabulary for the context window on every host (issue #26): a compaction is a
``ContextCompacted`` live update (Local's own, Claude's ``agent.thread_context_compacted``), and
a window the host could not keep is a ``ContextWindowExceeded`` error carrying the usage so far
(AgentCore's ``model_context_window_exceeded`` stop; Local's is in
tests/providers/test_local_context_window.py)."""

from __future__ import annotations

from typing import Any

from rma.errors import ContextWindowExceeded
from rma.live import ContextCompacted
from rma.providers.claude import codec as cma_codec
from rma.providers.local import codec as local_codec
from rma.providers.local.context import CONTEXT_COMPACTED
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator

SID = "rma-session-0123456789abcdef0123456789"


def test_claude_s_own_compaction_is_a_context_compacted_update() -> None:
    event = {"type": "agent.thread_context_compacted", "id": "sevt_1", "processed_at": "2026-01-01T00:00:00Z"}
    assert cma_codec.live_updates(event) == (ContextCompacted(reason="host"),)


def test_local_s_compaction_event_is_the_same_update_with_its_numbers() -> None:
    event = {
        "type": CONTEXT_COMPACTED,
        "reason": "window",
        "dropped": 4,
        "shortened": 2,
        "tokens_before": 2100,
        "tokens_after": 1500,
        "window": 2048,
    }
    assert local_codec.live_updates(event) == (ContextCompacted(4, 2, 2100, 1500, 2048, "window"),)


class Tools:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "ok"


async def test_agentcore_s_window_stop_is_a_typed_error_with_the_usage_so_far() -> None:
    usage = {"inputTokens": 900, "outputTokens": 10, "totalTokens": 910}
    script = [
        ace.tool_turn(("t", {}, "tooluse_1")),
        ace.stop_turn("model_context_window_exceeded", usage=usage),
    ]
    with AgentCoreEmulator(script) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
        )
        try:
            outcome = await run(provider, handler=Tools(), prompt="go", runtime_session_id=SID)
        finally:
            await provider.close()
    error = outcome.failure()
    assert isinstance(error, ContextWindowExceeded) and error.host == "bedrock_agentcore"
    assert error.usage is not None and error.usage.input_tokens >= 900
    assert error.result is not None and error.result.turns == 2
