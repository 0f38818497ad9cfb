"""The floor of ``bench/scale.py``: a minimal httpx-streams client for the same live CMA sessions.

What a developer would write with httpx alone to drive K live sessions of the bench's script,
in the same worker and under the same anyio backend as rma: per session one task that creates
the session, holds its SSE stream and, when a ``requires_action`` idle arrives, runs the tool
inline and posts its result; a follow-up message is one spawned post. The connection layout
is rma's (``CMAClient``): one shared ``httpx.AsyncClient`` for the posts and a client of its own
per stream (in one shared pool 1,000 streams would deadlock the posts or make every request
walk 1,000 connections). It decodes frames with rma's SSE decoder and ``json.loads``, so the
ratio is what rma's session machinery adds per event, not a decoder comparison.

It does none of what rma does around the loop: no session machine, no deduplication or
reconnection, no idle timeout, no telemetry, no typed errors, no results but the final text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from rma.providers.claude.codec import custom_tool_result, user_message
from rma.wire.sse import SSEDecoder
from rma_shell.transport.http import async_client

HEADERS = {
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "managed-agents-2026-04-01",
}

ToolStarted = Callable[[str], None]
"""Called with the tool-use id just before the tool runs (the bench's latency end point)."""


class MinimalClient:
    """The shared part: the posting client and the spawner of follow-up posts."""

    def __init__(self, base_url: str, api_key: str, agent: str, environment: str, nursery: Any) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {**HEADERS, "authorization": f"Bearer {api_key}"}
        self.agent, self.environment = agent, environment
        self.http = async_client(timeout=httpx.Timeout(600, connect=30.0), follow_redirects=False)
        self.nursery = nursery
        self.stream_pools = True
        """A client of its own per stream, as rma's ``CMAClient`` does (False: ``http`` for all)."""

    async def post_events(self, session_id: str, events: list[Any]) -> None:
        response = await self.http.post(
            f"{self.base_url}/v1/sessions/{session_id}/events",
            json={"events": events},
            headers=self.headers,
        )
        response.raise_for_status()

    async def create_session(self) -> str:
        created = await self.http.post(
            f"{self.base_url}/v1/sessions",
            json={"agent": self.agent, "environment_id": self.environment},
            headers=self.headers,
        )
        created.raise_for_status()
        session_id: str = created.json()["id"]
        return session_id

    async def aclose(self) -> None:
        await self.http.aclose()


class MinimalSession:
    """One live session: ``message`` posts a follow-up; ``run`` holds the stream."""

    def __init__(self, client: MinimalClient) -> None:
        self.client = client
        self.session_id = ""

    async def message(self, text: str) -> None:
        self.client.nursery.start_soon(self.client.post_events, self.session_id, [user_message(text)])

    async def run(
        self,
        prompt: str,
        tool: Callable[[dict[str, Any]], str],
        on_event: Callable[[dict[str, Any]], None],
        tool_started: ToolStarted,
        on_result: Callable[[str], None],
    ) -> None:
        client = self.client
        self.session_id = await client.create_session()
        url = f"{client.base_url}/v1/sessions/{self.session_id}/events/stream"
        own = async_client(follow_redirects=False) if client.stream_pools else client.http
        try:
            await self._stream(own, url, prompt, tool, on_event, tool_started, on_result)
        finally:
            if own is not client.http:
                await own.aclose()

    async def _stream(
        self,
        own: httpx.AsyncClient,
        url: str,
        prompt: str,
        tool: Callable[[dict[str, Any]], str],
        on_event: Callable[[dict[str, Any]], None],
        tool_started: ToolStarted,
        on_result: Callable[[str], None],
    ) -> None:
        client = self.client
        inputs: dict[str, dict[str, Any]] = {}
        text = ""
        headers = {**client.headers, "accept": "text/event-stream"}
        timeout = httpx.Timeout(None, connect=30.0)
        async with own.stream("GET", url, headers=headers, timeout=timeout) as response:
            response.raise_for_status()
            await client.post_events(self.session_id, [user_message(prompt)])
            decoder = SSEDecoder()
            async for chunk in response.aiter_bytes():
                for frame in decoder.feed(chunk):
                    if frame.event in ("ping", "message") or not frame.data:
                        continue
                    event = json.loads(frame.data)
                    on_event(event)
                    kind = event.get("type")
                    if kind == "agent.custom_tool_use":
                        inputs[event["id"]] = event.get("input") or {}
                    elif kind == "agent.message":
                        text = "".join(b.get("text", "") for b in event.get("content") or ())
                    elif kind == "session.status_idle":
                        stop = event.get("stop_reason") or {}
                        if stop.get("type") == "requires_action":
                            results = []
                            for ident in stop.get("event_ids") or ():
                                tool_started(ident)
                                results.append(custom_tool_result(ident, tool(inputs.pop(ident, {}))))
                            await client.post_events(self.session_id, results)
                        elif stop.get("type") == "end_turn":
                            on_result(text)


__all__ = ["MinimalClient", "MinimalSession"]
