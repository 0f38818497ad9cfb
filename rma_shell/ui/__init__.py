"""Stream adapters: an ``Agent``'s runs served to the UI frameworks' stream protocols.

- ``agui_endpoint(agent)`` — AG-UI (CopilotKit's protocol; Pydantic AI, LangGraph, Mastra and
  AgentCore's runtime speak it): POST a ``RunAgentInput``, read AG-UI events (``agui.py``);
- ``vercel_endpoint(agent)`` — the Vercel AI SDK's UI message stream, what ``useChat`` reads
  (``vercel.py``).

Each is a plain ASGI app, mounted by a Starlette or FastAPI route in a line; each maps rma's
live updates (``rma.live``) — text, tool calls with their input and output, turns, discarded
attempts — and approvals to what its protocol offers (docs/streaming.md has the tables). The
translators (``AguiEvents``, ``VercelParts``) are pure and usable without the endpoints. No
dependency beyond rma's own: the events are built as JSON, to the protocols' schemas. Not a
web framework, not a client, not a session loop.
"""

from rma_shell.ui._runs import BadRequest
from rma_shell.ui.agui import AguiEndpoint, AguiEvents, agui_endpoint
from rma_shell.ui.vercel import VercelEndpoint, VercelParts, vercel_endpoint

__all__ = [
    "AguiEndpoint",
    "AguiEvents",
    "BadRequest",
    "VercelEndpoint",
    "VercelParts",
    "agui_endpoint",
    "vercel_endpoint",
]
