"""The protocols' own client libraries read rma's streams: AG-UI's ``HttpAgent``
(@ag-ui/client 1.0.0, which verifies the event stream and folds it into messages) and the AI
SDK's ``DefaultChatTransport`` + ``readUIMessageStream`` (ai 6, what ``useChat`` runs: each
chunk validated by the SDK's schema, folded into the assistant message), in Node, against an
app served by uvicorn on 127.0.0.1 — a run with a tool call, and an approval answered and
carried on. Skipped without Node or without ``npm ci`` in tests/ui/js."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from rma_shell import Agent, MemoryJournal
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.ui import agui_endpoint, vercel_endpoint
from tests.ui.common import LOOKUP_SCRIPT, REFUND_SCRIPT, app_of, lookup_customer, refund
from tests.ui.test_served import serving

JS = Path(__file__).parent / "js"
NODE = shutil.which("node")
pytestmark = [
    pytest.mark.skipif(NODE is None, reason="needs Node"),
    pytest.mark.skipif(not (JS / "node_modules").is_dir(), reason="needs `npm ci` in tests/ui/js"),
    pytest.mark.skipif(sys.platform == "win32", reason="the clients run under Node on POSIX here"),
]


async def client(script: str, url: str, prompt: str, *extra: str) -> dict[str, Any]:
    assert NODE is not None
    done = await anyio.run_process([NODE, str(JS / script), url, prompt, *extra], cwd=JS, check=False)
    assert done.returncode == 0, done.stderr.decode()
    out: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert "failed" not in out, out
    return out


async def test_agui_http_agent_reads_a_run_into_messages() -> None:
    with OpenAIEmulator(LOOKUP_SCRIPT) as model:
        agent = Agent(tools=[lookup_customer], host=Local(base_url=model.base_url, model="m", stream=True))
        with serving(app_of(agui_endpoint(agent))) as url:
            out = await client("agui_client.mjs", f"{url}/agent", "Who is ada@example.com?")
    (run,) = out["runs"]
    assert run["outcome"] == "success" and run["result"] == "Ada is on the Pro plan."
    messages = out["messages"]
    calls = [c for m in messages if m["role"] == "assistant" for c in m.get("toolCalls") or []]
    assert [c["function"]["name"] for c in calls] == ["lookup_customer"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"email": "ada@example.com"}
    (tool_message,) = [m for m in messages if m["role"] == "tool"]
    assert tool_message["content"] == "Customer ada@example.com: Pro plan, active."
    texts = [m.get("content") for m in messages if m["role"] == "assistant" and m.get("content")]
    assert "".join(texts) == "Let me look that up. Ada is on the Pro plan."


async def test_agui_http_agent_resumes_an_interrupt_with_its_approval() -> None:
    with OpenAIEmulator(REFUND_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        agent = Agent(tools=[refund], host=host, journal=MemoryJournal())
        with serving(app_of(agui_endpoint(agent))) as url:
            out = await client("agui_client.mjs", f"{url}/agent", "Refund order 42", "approve")
    paused, resumed = out["runs"]
    assert paused["outcome"] == "interrupt" and paused["interrupts"][0]["reason"] == "tool_approval"
    assert resumed["outcome"] == "success" and resumed["result"] == "The refund is done."
    (tool_message,) = [m for m in out["messages"] if m["role"] == "tool"]
    assert tool_message["content"] == "refunded 250 on 42"


async def test_the_ai_sdk_reads_a_run_into_one_assistant_message() -> None:
    with OpenAIEmulator(LOOKUP_SCRIPT) as model:
        agent = Agent(tools=[lookup_customer], host=Local(base_url=model.base_url, model="m", stream=True))
        with serving(app_of(vercel_endpoint(agent))) as url:
            out = await client("vercel_client.mjs", f"{url}/agent", "Who is ada?")
    (message,) = out["messages"]
    assert message["role"] == "assistant"
    (call,) = [p for p in message["parts"] if p["type"] == "tool-lookup_customer"]
    assert call["state"] == "output-available" and call["input"] == {"email": "ada@example.com"}
    assert call["output"] == "Customer ada@example.com: Pro plan, active."
    text = "".join(p["text"] for p in message["parts"] if p["type"] == "text")
    assert text == "Let me look that up. Ada is on the Pro plan."
    assert [p["type"] for p in message["parts"]].count("step-start") == 2


@pytest.mark.parametrize(("decision", "state"), [("approve", "output-available"), ("deny", "output-denied")])
async def test_the_ai_sdk_answers_an_approval_and_the_same_message_goes_on(decision: str, state: str) -> None:
    with OpenAIEmulator(REFUND_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        agent = Agent(tools=[refund], host=host, journal=MemoryJournal())
        with serving(app_of(vercel_endpoint(agent))) as url:
            out = await client("vercel_client.mjs", f"{url}/agent", "Refund order 42", decision)
    paused, resumed = out["messages"]
    (asked,) = [p for p in paused["parts"] if p["type"] == "tool-refund"]
    assert asked["state"] == "approval-requested" and asked["input"] == {"order_id": "42", "cents": 250}
    assert resumed["id"] == paused["id"]
    (answered,) = [p for p in resumed["parts"] if p["type"] == "tool-refund"]
    assert answered["state"] == state
    if decision == "approve":
        assert answered["output"] == "refunded 250 on 42"
