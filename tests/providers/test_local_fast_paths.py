"""rma_shell.providers.local.provider: the per-session and per-request shortcuts change nothing visible.

The Local transport parses its request URL once per provider, shares one HTTP client (and so
its pooled connections) between its sessions, and builds request telemetry only for
listeners. Each shortcut must fall back to the plain path whenever it could make a
difference: a URL that does not parse, a listener attaching mid-session.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma_shell import run
from rma_shell.providers.base import OpenRequest
from rma_shell.providers.local.provider import Local, LocalConn
from rma_shell.telemetry import Telemetry
from rma_shell.testing import OpenAIEmulator
from rma_shell.transport.lean_http import LeanPool

WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}


async def opened(local: Local) -> LocalConn:
    result = await local.open(OpenRequest())
    assert isinstance(result, Success), result
    conn = result.unwrap()
    assert isinstance(conn, LocalConn)
    return conn


class Weather:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "sunny"


async def test_sessions_share_the_providers_client_and_its_connection() -> None:
    with OpenAIEmulator([{"content": "one"}, {"content": "two"}]) as emu:
        local = Local(base_url=emu.base_url, model="m")
        for expected in ("one", "two"):
            outcome = await run(local, handler=Weather(), prompt="hi")
            assert isinstance(outcome, Success) and outcome.unwrap().text == expected
        client = local._own_client
        assert isinstance(client, LeanPool) and not client.is_closed
        # The second session reused the first one's connection.
        assert len(client.lanes) == 1 and client.lanes[0].connects == 1 and client.lanes[0].requests == 2
        await local.close()
        assert client.is_closed and local._own_client is None
        # Reusable after close: the next session builds a fresh client.
        third = await opened(local)
        assert third.client is not None and third.client is not client and not third.client.is_closed
        await local.close()


async def test_the_request_url_is_parsed_once_per_provider_and_shared() -> None:
    local = Local(base_url="http://127.0.0.1:9/v1/", model="m")
    first, second = await opened(local), await opened(local)
    assert isinstance(first.target, httpx.URL)
    assert first.target is second.target
    assert str(first.target) == first.url == "http://127.0.0.1:9/v1/chat/completions"
    for conn in (first, second):
        await local.aclose(conn)


async def test_a_url_that_does_not_parse_is_refused_before_any_request() -> None:
    # Issue #13 §4: once a provider error from httpx on the first request; now an
    # InvalidOpts naming base_url from open, so nothing is ever sent to it.
    local = Local(base_url="http://a:b:c/v1", model="m", max_retries=0)
    opened_ = await local.open(OpenRequest())
    assert isinstance(opened_, Failure) and isinstance(opened_.failure(), InvalidOpts)
    assert opened_.failure().option == "base_url"
    assert local._own_client is None  # no client was even built


async def test_a_bad_url_run_is_an_invalid_option_value() -> None:
    result = await run(Local(base_url="http://a:b:c/v1", model="m"), handler=Weather(), prompt="hi")
    assert isinstance(result, Failure) and result.failure().kind == "invalid_opts"
    assert result.failure().option == "base_url"


async def test_request_telemetry_for_a_listener_that_attaches_mid_session() -> None:
    telemetry = Telemetry()
    seen: list[str] = []
    call = {"tool_calls": [{"id": "call_w", "name": "get_weather", "arguments": {"city": "SF"}}]}

    class AttachOnTool:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            telemetry.attach("late", "rma.request.*", lambda n, m, md: seen.append(n))
            await anyio.lowlevel.checkpoint()
            return "sunny"

    with OpenAIEmulator([call, {"content": "done"}]) as emu:
        local = Local(base_url=emu.base_url, model="m", tools=[WEATHER], telemetry=telemetry)
        result = await run(local, handler=AttachOnTool(), prompt="weather?")
    assert isinstance(result, Success), result
    # Only the request made after attaching is reported, start and stop both.
    assert seen == ["rma.request.start", "rma.request.stop"]


async def test_a_proxy_in_the_environment_puts_the_requests_on_httpx_which_honours_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    with OpenAIEmulator([{"content": "direct"}, {"content": "again"}]) as emu:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{emu.port + 1 if emu.port < 65535 else 1}")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # httpx's own rule: this host bypasses the proxy
        local = Local(base_url=emu.base_url, model="m", max_retries=0)
        try:
            outcome = await run(local, handler=Weather(), prompt="hi")
            assert outcome.unwrap().text == "direct"
            assert local._pool is not None and local._own_client is local._pool.client  # httpx lanes
        finally:
            await local.close()
        monkeypatch.delenv("NO_PROXY")
        proxied = Local(base_url=emu.base_url, model="m", max_retries=0)
        try:
            failed = await run(proxied, handler=Weather(), prompt="hi")  # sent to the (absent) proxy
        finally:
            await proxied.close()
    assert failed.failure().kind == "transport_error" and len(emu.requests) == 1


async def test_without_a_proxy_the_provider_uses_lean_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    local = Local(base_url="http://127.0.0.1:9/v1", model="m")
    conn = await opened(local)
    assert isinstance(conn.client, LeanPool) and local._pool is None
    await local.close()
    assert conn.client.is_closed
