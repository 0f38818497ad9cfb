"""A CMAClient shared by many live sessions: event streams never hold the request pool."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
import pytest
from returns.result import Failure, Success

from rma.config import AnthropicSettings, ApiKeyAuth, Secret
from rma.errors import TransportError
from rma_shell.providers.claude import client as cma_client
from rma_shell.providers.claude.client import CMAClient
from rma_shell.testing.claude import CMAEmulator, text_turn
from rma_shell.transport.http import async_client

KEY = "sk-ant-test-streams"


async def test_open_streams_leave_the_request_pool_to_the_posts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every client the module builds, and its own lean lanes, get a single connection: had
    # the streams shared the client's pool, the second stream and every post would wait for
    # it forever.
    def one_connection(**options: Any) -> httpx.AsyncClient:
        return async_client(**options, limits=httpx.Limits(max_connections=1))

    monkeypatch.setattr(cma_client, "async_client", one_connection)
    monkeypatch.setattr(cma_client, "_MAX_CONNECTIONS", 1)
    with CMAEmulator([text_turn("hello")], api_key=KEY) as emu:
        client = CMAClient(AnthropicSettings(auth=ApiKeyAuth(Secret(KEY)), base_url=emu.base_url))
        try:
            with anyio.fail_after(30):
                agent = (await client.create_agent({"name": "a", "model": "claude-sonnet-4-6"})).unwrap()
                env = (await client.create_environment({"name": "e"})).unwrap()
                body = {"agent": agent["id"], "environment_id": env["id"]}
                sessions = [(await client.create_session(body)).unwrap()["id"] for _ in range(3)]
                async with AsyncExitStack() as stack:
                    streams = []
                    for session_id in sessions:
                        opened = await stack.enter_async_context(client.stream_events(session_id))
                        assert isinstance(opened, Success)
                        streams.append(opened.unwrap())
                    message = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}
                    assert isinstance(await client.send_events(sessions[0], [message]), Success)
                    received = b""
                    async for chunk in streams[0].aiter_bytes():
                        received += chunk
                        if b"session.status_idle" in received:
                            break
        finally:
            await client.aclose()
    assert b'"text":"hello"' in received


async def test_a_stream_honours_a_proxy_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stream gets a connection of its own; with a proxy configured in the environment it
    # goes through httpx, which honours the proxy, as the posts do (here a proxy nobody
    # listens on, so opening fails).
    with CMAEmulator([text_turn("hello")], api_key=KEY) as emu:
        settings = AnthropicSettings(auth=ApiKeyAuth(Secret(KEY)), base_url=emu.base_url)
        direct = CMAClient(settings, max_retries=0)
        try:
            with anyio.fail_after(30):
                agent = (await direct.create_agent({"name": "a", "model": "claude-sonnet-4-6"})).unwrap()
                env = (await direct.create_environment({"name": "e"})).unwrap()
                body = {"agent": agent["id"], "environment_id": env["id"]}
                session_id = (await direct.create_session(body)).unwrap()["id"]
                monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
                monkeypatch.delenv("NO_PROXY", raising=False)
                monkeypatch.delenv("no_proxy", raising=False)
                proxied = CMAClient(settings, max_retries=0)
                try:
                    async with proxied.stream_events(session_id) as opened:
                        assert isinstance(opened, Failure)
                        assert isinstance(opened.failure(), TransportError)
                finally:
                    await proxied.aclose()
                async with direct.stream_events(session_id) as opened:
                    assert isinstance(opened, Success)  # the client built before the proxy
        finally:
            await direct.aclose()
