"""Stream an agent to a browser: a Starlette app whose ``/chat`` endpoint runs an ``Agent`` and
sends its live updates as server-sent events, and a page that shows them as they arrive.

Typed tools, the same ``Agent`` as everywhere else, and ``agent.stream(...)``; each update
becomes one SSE event named for its kind (``text``, ``tool_started``, ``tool_finished``,
``turn``, ``discarded``), then ``done`` with the answer (or ``error`` with its one-line
message). Runs offline against the bundled scripted model:

    pip install "rma-agents[tools]" starlette uvicorn
    python examples/browser_stream.py      # then open http://127.0.0.1:8000/

With FastAPI it is the same function under ``@app.get("/chat")``. Point ``host`` at a real
endpoint (``Local(base_url=..., model=...)``, ``ClaudeManagedAgents(...)``) for a real model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, StreamingResponse
from starlette.routing import Route

from rma_shell import (
    Agent,
    AttemptDiscarded,
    Failure,
    RunFinished,
    Success,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from rma_shell.tools import tool

EVENT_NAMES = {
    TextDelta: "text",
    ToolCallStarted: "tool_started",
    ToolCallFinished: "tool_finished",
    TurnFinished: "turn",
    AttemptDiscarded: "discarded",
}


@tool
def lookup_customer(email: str) -> str:
    """Find a customer by email.

    Args:
        email: the customer's email address
    """
    return f"Customer {email}: Pro plan, active."


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


async def updates_as_sse(agent: Agent, prompt: str) -> AsyncIterator[bytes]:
    """The run's updates as SSE events; the last one is ``done`` or ``error``."""
    async with agent.stream(prompt) as updates:
        async for update in updates:
            if isinstance(update, RunFinished):
                match update.result:
                    case Success(result):
                        yield sse("done", {"text": result.text, "turns": result.turns})
                    case Failure(error):
                        yield sse("error", {"message": str(error)})
            else:
                yield sse(EVENT_NAMES.get(type(update), "update"), attrs.asdict(update))


def app_for(agent: Agent) -> Starlette:
    async def chat(request: Request) -> StreamingResponse:
        prompt = request.query_params.get("q", "")
        return StreamingResponse(
            updates_as_sse(agent, prompt),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE)

    return Starlette(routes=[Route("/", page), Route("/chat", chat)])


PAGE = """<!doctype html>
<meta charset="utf-8"><title>rma agent</title>
<form id="f"><input id="q" size="60" value="Who is ada@example.com?"><button>Ask</button></form>
<pre id="out"></pre>
<script>
const out = document.getElementById("out");
document.getElementById("f").onsubmit = (e) => {
  e.preventDefault();
  out.textContent = "";
  const source = new EventSource("/chat?q=" + encodeURIComponent(document.getElementById("q").value));
  source.addEventListener("text", (m) => { out.textContent += JSON.parse(m.data).text; });
  source.addEventListener("tool_started", (m) => {
    out.textContent += "\\n[" + JSON.parse(m.data).name + "…]\\n";
  });
  source.addEventListener("done", () => source.close());
  source.addEventListener("error", (m) => {
    if (m.data) out.textContent += "\\n" + JSON.parse(m.data).message;
    source.close();
  });
};
</script>
"""


def main() -> None:
    import uvicorn

    from rma_shell.providers.local import Local
    from rma_shell.testing import OpenAIEmulator

    script = [
        {
            "content": "Let me look that up. ",
            "tool_calls": [{"name": "lookup_customer", "arguments": {"email": "ada@example.com"}}],
        },
        {"content": "Ada is on the Pro plan."},
    ] * 100
    with OpenAIEmulator(script) as model:
        host = Local(base_url=model.base_url, model="qwen3:8b", stream=True)
        agent = Agent(instructions="You are a support agent.", tools=[lookup_customer], host=host)
        uvicorn.run(app_for(agent), host="127.0.0.1", port=8000)


if __name__ == "__main__":
    main()
