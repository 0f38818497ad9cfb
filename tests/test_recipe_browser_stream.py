"""The browser-streaming recipe (examples/browser_stream.py): a Starlette endpoint sends an
Agent's live updates as server-sent events, ending with ``done`` — or ``error`` when it fails."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import httpx

from rma_shell import Agent
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing.local.emulator import status

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("browser_stream", ROOT / "examples" / "browser_stream.py")
assert spec is not None and spec.loader is not None
recipe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recipe)

SCRIPT = [
    {
        "content": "Let me look that up. ",
        "tool_calls": [{"name": "lookup_customer", "arguments": {"email": "ada@example.com"}}],
    },
    {"content": "Ada is on the Pro plan."},
]


def events(body: str) -> list[tuple[str, Any]]:
    out = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((fields["event"], json.loads(fields["data"])))
    return out


async def get(agent: Agent, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=recipe.app_for(agent))
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        return await client.get(path)


async def test_the_chat_endpoint_streams_text_tool_calls_and_then_done() -> None:
    with OpenAIEmulator(SCRIPT) as model:
        host = Local(base_url=model.base_url, model="qwen3:8b", stream=True)
        agent = Agent(instructions="You are a support agent.", tools=[recipe.lookup_customer], host=host)
        response = await get(agent, "/chat?q=Who+is+ada%40example.com%3F")
        await host.close()
    assert response.headers["content-type"].startswith("text/event-stream")
    got = events(response.text)
    names = [name for name, _ in got]
    assert names[-1] == "done" and got[-1][1] == {"text": "Ada is on the Pro plan.", "turns": 2}
    assert names.index("tool_started") < names.index("tool_finished") < len(names) - 1
    assert "".join(d["text"] for n, d in got if n == "text").endswith("Ada is on the Pro plan.")
    started = next(d for n, d in got if n == "tool_started")
    assert started["name"] == "lookup_customer"


async def test_a_run_that_fails_ends_the_stream_with_its_one_line_error() -> None:
    with OpenAIEmulator([{"content": "never sent"}], faults={0: status(401)}) as model:
        host = Local(base_url=model.base_url, model="qwen3:8b", stream=True)
        agent = Agent(tools=[recipe.lookup_customer], host=host)
        response = await get(agent, "/chat?q=hi")
        await host.close()
    name, data = events(response.text)[-1]
    assert name == "error" and "401" in data["message"]


async def test_the_page_listens_for_the_endpoints_events() -> None:
    response = await get(Agent(), "/")
    assert 'new EventSource("/chat?q="' in response.text
    assert all(f'"{n}"' in response.text for n in ("text", "tool_started", "done", "error"))
