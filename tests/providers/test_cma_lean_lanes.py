"""The CMA client's own lean lanes (``rma_shell.transport.lean_http``) keep its documented HTTP behaviour.

docs/providers/claude-managed-agents.md: the receive timeout bounds each read, a transport
failure is retried only on idempotent calls (a timed-out event post is never sent twice), and a
proxy in the environment sends every call through httpx, which honours it. The lanes' own
framing, TLS and keep-alive behaviour are ``tests/test_lean_http.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from returns.result import Failure, Success

from rma.config import AnthropicSettings, ApiKeyAuth, Secret
from rma.errors import TransportError
from rma_shell.providers.claude.client import CMAClient
from rma_shell.seams import Seams
from rma_shell.testing.claude import CMAEmulator, text_turn
from tests.test_lean_http import Peer, RawServer, answer

KEY = "sk-ant-test-lanes"


async def no_sleep(seconds: float) -> None:
    await anyio.lowlevel.checkpoint()


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(reply: Callable[[Peer, int], None]) -> RawServer:
        servers.append(server := RawServer(reply))
        return server

    yield start
    for server in servers:
        server.close()


def client_for(server: RawServer, **kw: Any) -> CMAClient:
    settings = AnthropicSettings(
        auth=ApiKeyAuth(Secret(KEY)), base_url=f"http://127.0.0.1:{server.port}", read_timeout=0.2
    )
    return CMAClient(settings, _seams=Seams(sleep=no_sleep), **kw)


def stall(peer: Peer, index: int) -> None:
    """Read the request, answer nothing."""


async def test_the_receive_timeout_bounds_a_call_and_only_an_idempotent_one_is_retried(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(stall)
    client = client_for(server, max_retries=1)
    assert client._lean is not None  # the client's own: its calls go over lean lanes
    try:
        with anyio.fail_after(10):
            got = await client.get_session("sesn_1")
            assert len(server.requests) == 2  # a GET: retried once
            posted = await client.send_events("sesn_1", [{"type": "user.message", "content": []}])
    finally:
        await client.aclose()
    for outcome in (got, posted):
        assert isinstance(outcome, Failure)
        error = outcome.failure()
        assert isinstance(error, TransportError) and error.error_type == "ReadTimeout"
    assert len(server.requests) == 3  # the event post went out once: a tool result is never posted twice


async def test_calls_reuse_kept_alive_lanes_and_send_the_json_httpx_would(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda peer, index: peer.send(answer(b'{"id":"sesn_1"}')))
    client = client_for(server)
    try:
        with anyio.fail_after(10):
            for _ in range(3):
                assert (await client.get_session("sesn_1")).unwrap() == {"id": "sesn_1"}
            sent = await client.send_events("sesn_1", [{"type": "user.message", "content": "é"}])
    finally:
        await client.aclose()
    assert isinstance(sent, Success)
    assert server.connections == 1 and len(server.requests) == 4
    _, line, headers, body = server.requests[-1]
    assert line == b"POST /v1/sessions/sesn_1/events HTTP/1.1"
    assert headers["content-type"] == "application/json" and headers["authorization"] == f"Bearer {KEY}"
    assert body == '{"events":[{"type":"user.message","content":"é"}]}'.encode()


async def test_a_proxy_in_the_environment_sends_every_call_through_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A proxy nobody listens on: had a call gone around it over a lean lane, it would succeed.
    with CMAEmulator([text_turn("hello")], api_key=KEY) as emu:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        settings = AnthropicSettings(auth=ApiKeyAuth(Secret(KEY)), base_url=emu.base_url)
        client = CMAClient(settings, max_retries=0)
        assert client._lean is None
        try:
            with anyio.fail_after(30):
                created = await client.create_agent({"name": "a", "model": "claude-sonnet-4-6"})
                listed = await client.list_events("sesn_1")
        finally:
            await client.aclose()
        assert not emu.requests
    for outcome in (created, listed):
        assert isinstance(outcome, Failure) and isinstance(outcome.failure(), TransportError)
