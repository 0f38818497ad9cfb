"""rma_shell.providers.local.provider: Local.poll_turn over real HTTP against the loopback emulator."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from returns.result import Failure, Result, Success

from rma.errors import (
    AuthenticationError,
    HttpError,
    InvalidOpts,
    MalformedResponse,
    ProviderError,
    SessionError,
    StreamDropped,
    TransportError,
)
from rma.vocabulary import JSON, Terminal, ToolResult
from rma_shell.providers.base import OpenRequest, PollOutcome
from rma_shell.providers.local.provider import Local, LocalConn
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator, delay, drop_mid_stream, malformed_chunk, status

KEY = "sk-secret-abc123"
WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
SUBMIT = {"name": "submit", "description": "Finish"}
CALL = {"tool_calls": [{"id": "call_w", "name": "get_weather", "arguments": {"city": "SF"}}]}


class Sleeps:
    """An injected sleep that records the delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await anyio.lowlevel.checkpoint()


def make(
    base_url: str,
    sleeps: Sleeps | None = None,
    session_id_factory: Callable[[], str] | None = None,
    **kwargs: Any,
) -> Local:
    kwargs.setdefault("model", "m")
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("tools", [WEATHER, SUBMIT])
    return Local(
        base_url=base_url,
        _seams=Seams(
            sleep=sleeps or Sleeps(),
            rand=lambda: 0.5,
            clock=lambda: 1_700_000_000.0,
            session_id_factory=session_id_factory,
        ),
        **kwargs,
    )


async def opened(local: Local, request: OpenRequest | None = None) -> LocalConn:
    result = await local.open(request or OpenRequest())
    assert isinstance(result, Success), result
    conn = result.unwrap()
    assert isinstance(conn, LocalConn)
    return conn


async def kickoff(local: Local, conn: LocalConn, prompt: str = "weather?") -> PollOutcome[LocalConn]:
    return await local.poll_turn(conn, local.codec.kickoff_input(prompt, None), None)


def failure_of(outcome: PollOutcome[LocalConn]) -> SessionError:
    assert isinstance(outcome.result, Failure), outcome.result
    err: SessionError = outcome.result.failure()
    return err


@pytest.mark.parametrize("stream", [False, True])
async def test_L29_kickoff_tool_call_resume_end_turn(stream: bool) -> None:
    with OpenAIEmulator([CALL, {"content": "Sunny in SF."}], api_key=KEY) as emu:
        local = make(emu.base_url, stream=stream)
        conn = await opened(local)
        try:
            first = await kickoff(local, conn)
            turn1 = local.codec.normalize(first.result.unwrap())
            assert turn1.terminal is Terminal.REQUIRES_ACTION
            [use] = turn1.custom_tool_uses
            assert (use.id, use.name, dict(use.input)) == ("call_w", "get_weather", {"city": "SF"})
            resume = local.codec.resume_input([use], [ToolResult(use.id, "sunny")])
            second = await local.poll_turn(first.conn, resume, None)
            turn2 = local.codec.normalize(second.result.unwrap())
            assert (turn2.terminal, turn2.text) == (Terminal.END_TURN, "Sunny in SF.")
            assert turn2.usage is not None
            assert turn2.usage.input_tokens > 0
            roles = [m["role"] for m in local.transcript(second.conn) or ()]
            assert roles == ["user", "assistant", "tool", "assistant"]
        finally:
            await local.aclose(conn)
    first_body = emu.requests[0].body
    assert first_body["model"] == "m"
    assert first_body["stream"] is stream
    assert [t["function"]["name"] for t in first_body["tools"]] == ["get_weather", "submit"]
    if stream:
        assert first_body["stream_options"] == {"include_usage": True}
    assert emu.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert emu.requests[1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_w",
        "content": "sunny",
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_streamed_and_plain_tool_call_assembly_agree(stream: bool) -> None:
    calls = {
        "content": "Let me check both.",
        "tool_calls": [
            {"id": "a", "name": "get_weather", "arguments": {"city": "San Francisco, California"}},
            {"id": "b", "name": "get_weather", "arguments": {"city": "New York"}},
        ],
    }
    with OpenAIEmulator([calls], chunk_chars=3) as emu:
        local = make(emu.base_url, stream=stream)
        conn = await opened(local)
        outcome = await kickoff(local, conn)
    turn = local.codec.normalize(outcome.result.unwrap())
    assert turn.text == "Let me check both."
    assert [(u.id, dict(u.input)) for u in turn.custom_tool_uses] == [
        ("a", {"city": "San Francisco, California"}),
        ("b", {"city": "New York"}),
    ]


async def test_L33_429_once_honours_retry_after_with_injected_sleep(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rma.providers.local")
    sleeps = Sleeps()
    with OpenAIEmulator([{"content": "ok"}], faults={0: status(429, retry_after=2)}) as emu:
        local = make(emu.base_url, sleeps)
        outcome = await kickoff(local, await opened(local))
    assert isinstance(outcome.result, Success)
    assert sleeps.delays == [2.0]
    assert len(emu.requests) == 2
    [record] = [r for r in caplog.records if r.name == "rma.providers.local"]
    assert record.levelno == logging.WARNING
    assert "429" in record.getMessage()
    assert KEY not in record.getMessage()


async def test_L31_500_once_then_success_with_backoff() -> None:
    sleeps = Sleeps()
    with OpenAIEmulator([{"content": "ok"}], faults={0: status(500)}) as emu:
        local = make(emu.base_url, sleeps)
        outcome = await kickoff(local, await opened(local))
    assert local.codec.normalize(outcome.result.unwrap()).text == "ok"
    # Equal jitter with rand=0.5: 0.75 x base for the first retry.
    assert sleeps.delays == [0.75]


async def test_L31_retries_exhausted_returns_last_error() -> None:
    sleeps = Sleeps()
    faults = {i: status(503) for i in range(4)}
    with OpenAIEmulator([{"content": "never"}], faults=faults) as emu:
        local = make(emu.base_url, sleeps)
        err = failure_of(await kickoff(local, await opened(local)))
    assert isinstance(err, HttpError)
    assert err.status == 503
    assert err.body["error"]["type"] == "server_error"
    assert sleeps.delays == [0.75, 1.5, 3.0]
    assert len(emu.requests) == 4


@pytest.mark.parametrize("stream", [False, True])
async def test_drop_mid_stream_is_retried(stream: bool) -> None:
    sleeps = Sleeps()
    with OpenAIEmulator([{"content": "a reply long enough to chunk"}], faults={0: drop_mid_stream(2)}) as emu:
        local = make(emu.base_url, sleeps, stream=stream)
        outcome = await kickoff(local, await opened(local))
    assert local.codec.normalize(outcome.result.unwrap()).text == "a reply long enough to chunk"
    assert sleeps.delays == [0.75]


async def test_drop_on_every_attempt_is_reported_as_transport_error() -> None:
    sleeps = Sleeps()
    faults = {i: drop_mid_stream(1) for i in range(4)}
    with OpenAIEmulator([{"content": "abcdefghijkl"}], faults=faults) as emu:
        local = make(emu.base_url, sleeps, stream=True)
        err = failure_of(await kickoff(local, await opened(local)))
    assert isinstance(err, TransportError)
    assert err.error_type == "closed"
    assert len(sleeps.delays) == 3


async def test_malformed_plain_body_is_malformed_response_not_retried() -> None:
    sleeps = Sleeps()
    with OpenAIEmulator([{"content": "abcdefgh"}], faults={0: malformed_chunk(1)}) as emu:
        local = make(emu.base_url, sleeps)
        conn = await opened(local)
        outcome = await kickoff(local, conn)
    assert isinstance(failure_of(outcome), MalformedResponse)
    assert sleeps.delays == []
    assert len(emu.requests) == 1
    # A failed poll changes nothing: the conn comes back as it was.
    assert outcome.conn is conn


@pytest.mark.parametrize("after_chunks", [1, 3])
async def test_a_non_json_stream_chunk_is_retried_like_a_drop(after_chunks: int) -> None:
    sleeps = Sleeps()
    reply = {"content": "a reply long enough to chunk"}
    with OpenAIEmulator([reply], faults={0: malformed_chunk(after_chunks)}) as emu:
        local = make(emu.base_url, sleeps, stream=True)
        outcome = await kickoff(local, await opened(local))
    # The whole reply, once: nothing of the corrupt attempt's text is kept.
    assert local.codec.normalize(outcome.result.unwrap()).text == "a reply long enough to chunk"
    assert sleeps.delays == [0.75]
    assert len(emu.requests) == 2


async def test_a_non_json_stream_chunk_on_every_attempt_is_stream_dropped_after_the_retries() -> None:
    sleeps = Sleeps()
    faults = {i: malformed_chunk(2) for i in range(4)}
    with OpenAIEmulator([{"content": "abcdefghijkl"}], faults=faults) as emu:
        local = make(emu.base_url, sleeps, stream=True)
        conn = await opened(local)
        outcome = await kickoff(local, conn)
    err = failure_of(outcome)
    assert isinstance(err, StreamDropped)
    assert "not JSON" in err.detail
    assert "chatcmpl-broken" in err.detail  # what the server sent, to debug it by
    assert len(sleeps.delays) == 3
    assert len(emu.requests) == 4
    assert outcome.conn is conn


async def test_L10_401_is_authentication_error_without_retry() -> None:
    sleeps = Sleeps()
    with OpenAIEmulator([{"content": "x"}], api_key="sk-the-right-one") as emu:
        local = make(emu.base_url, sleeps)
        err = failure_of(await kickoff(local, await opened(local)))
    assert isinstance(err, AuthenticationError)
    assert "Incorrect API key" in err.detail
    assert KEY not in err.detail
    assert sleeps.delays == []


async def test_non_transient_http_error_returned_at_once() -> None:
    sleeps = Sleeps()
    with OpenAIEmulator([{"content": "x"}], model="llama3") as emu:
        local = make(emu.base_url, sleeps, model="gpt-unknown")
        err = failure_of(await kickoff(local, await opened(local)))
    assert isinstance(err, HttpError)
    assert err.status == 404
    assert err.body["error"]["code"] == "model_not_found"
    assert err.method == "POST"
    assert err.url == f"{emu.base_url}/chat/completions"
    assert sleeps.delays == []


async def test_connection_refused_is_transport_error_after_retries() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    local = make(f"http://127.0.0.1:{port}/v1", sleeps, max_retries=2)
    conn = await opened(local)
    err = failure_of(await kickoff(local, conn))
    await local.aclose(conn)
    assert isinstance(err, TransportError)
    assert err.error_type == "econnrefused"
    assert sleeps.delays == [0.75, 1.5]


async def test_api_key_never_in_repr_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    local = make(
        "http://127.0.0.1:1/v1", model_config={"model": "m", "api_key": "sk-from-config"}, api_key=None
    )
    assert "sk-from-config" not in repr(local)
    assert "***" in repr(local)
    assert KEY not in repr(make("http://x/v1"))
    with OpenAIEmulator([{"content": "ok"}], faults={0: status(500, message=f"echo {KEY}")}) as emu:
        keyed = make(emu.base_url)
        conn = await opened(keyed)
        assert KEY not in repr(conn)
        await kickoff(keyed, conn)
        await keyed.aclose(conn)
    assert caplog.records
    assert all(KEY not in r.getMessage() for r in caplog.records)
    assert any(r.name == "rma.providers.local" and "***" in r.getMessage() for r in caplog.records)


async def test_no_authorization_header_without_key() -> None:
    with OpenAIEmulator([{"content": "ok"}]) as emu:
        local = make(emu.base_url, api_key=None)
        await kickoff(local, await opened(local))
    assert "authorization" not in emu.requests[0].headers


async def test_L34_model_config_supplies_model_url_key_and_params() -> None:
    with OpenAIEmulator([{"content": "ok"}], api_key="sk-cfg") as emu:
        local = Local(
            model_config={
                "model": "cfg-model",
                "base_url": emu.base_url,
                "api_key": "sk-cfg",
                "temperature": 0.1,
            },
            _seams=Seams(sleep=Sleeps()),
        )
        outcome = await kickoff(local, await opened(local))
    assert isinstance(outcome.result, Success)
    body = emu.requests[0].body
    assert (body["model"], body["temperature"]) == ("cfg-model", 0.1)
    assert "api_key" not in body
    assert "base_url" not in body


async def test_L6_session_id_minted_or_taken_from_request() -> None:
    local = make("http://127.0.0.1:1/v1")
    conn = await opened(local)
    sid = local.session_id(conn)
    assert sid is not None
    assert sid.startswith("local_")
    assert len(sid) == 22
    assert all(c in "0123456789abcdef" for c in sid[6:])
    # session_id= names a continued session (one given its history); alone it is refused
    # (tests/session/test_options_refuse_typos.py).
    earlier = [{"role": "user", "content": "earlier"}]
    other = await opened(local, OpenRequest(session_id="local_given", extra={"history": earlier}))
    assert local.session_id(other) == "local_given" and local.resumed(other)
    assert local.session_id(await opened(make("http://x/v1", session_id_factory=lambda: "fixed"))) == "fixed"


async def test_L28_reattach_through_request_extra_history() -> None:
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "reply"}]
    with OpenAIEmulator([{"content": "continued"}]) as emu:
        local = make(emu.base_url)
        conn = await opened(local, OpenRequest(extra={"history": history}))
        assert local.resumed(conn)
        outcome = await local.poll_turn(conn, local.codec.user_input("and now?"), None)
    assert emu.requests[0].body["messages"] == [*history, {"role": "user", "content": "and now?"}]
    assert (local.transcript(outcome.conn) or ())[:2] == tuple(history)
    fresh = await opened(make("http://x/v1", system_prompt="S"))
    assert not make("http://x/v1").resumed(fresh)


async def test_L7_max_turns_from_request_drives_final_turn_directive() -> None:
    with OpenAIEmulator([{"content": "done"}]) as emu:
        local = make(emu.base_url, terminal_tool="submit")
        outcome = await kickoff(local, await opened(local, OpenRequest(max_turns=1)))
    events = outcome.result.unwrap()
    assert events[0]["type"] == "local.directive"
    assert events[0]["role"] == "final_turn"
    assert "(submit)" in emu.requests[0].body["messages"][-1]["content"]


async def test_L11_open_without_model_or_chat_is_an_actionable_error() -> None:
    # httpx is a core dependency, so the reference's "optional client missing" becomes
    # "nothing to call": the error names both ways out.
    no_model = await Local(
        _seams=Seams(sleep=Sleeps()),
    ).open(OpenRequest())
    assert isinstance(no_model, Failure)
    err = no_model.failure()
    assert isinstance(err, InvalidOpts)
    assert err.option == "model"
    assert "chat=" in err.detail


async def test_open_validates_options_as_values() -> None:
    for local, option in [
        (make("http://x/v1", tools=[{"description": "nameless"}]), "tools"),
        (make("http://x/v1", max_retries=-1), "max_retries"),
    ]:
        err = (await local.open(OpenRequest())).failure()
        assert isinstance(err, InvalidOpts)
        assert err.option == option


async def test_invalid_input_is_an_error_value() -> None:
    local = make("http://127.0.0.1:1/v1")
    conn = await opened(local)
    outcome = await local.poll_turn(conn, {"kind": "bogus"}, None)
    assert isinstance(failure_of(outcome), ProviderError)
    assert outcome.conn is conn


async def test_cancellation_aborts_an_in_flight_request() -> None:
    # The answer would take 60 s (the emulator's exit cuts the wait short): an aborted request
    # returns in a fraction of that however busy the machine is.
    with OpenAIEmulator([{"content": "late"}], faults={0: delay(60.0)}) as emu:
        local = make(emu.base_url)
        conn = await opened(local)
        started = time.monotonic()
        with anyio.move_on_after(0.2) as scope:
            await kickoff(local, conn)
        await local.aclose(conn)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 30


async def test_close_closes_only_the_providers_own_client() -> None:
    local = make("http://127.0.0.1:1/v1")
    conn = await opened(local)
    assert conn.client is not None
    await local.aclose(conn)
    assert not conn.client.is_closed  # shared by the provider's sessions
    await local.close()
    assert conn.client.is_closed
    async with httpx.AsyncClient() as mine:
        shared = make("http://127.0.0.1:1/v1", http_client=mine)
        conn2 = await opened(shared)
        assert conn2.client is mine
        await shared.aclose(conn2)
        await shared.close()
        assert not mine.is_closed


# --- chat= callable path ----------------------------------------------------------------


def reply(content: str) -> dict[str, Any]:
    return {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ]
    }


async def test_chat_callable_replaces_http() -> None:
    seen: list[dict[str, Any]] = []

    async def chat(body: dict[str, JSON]) -> dict[str, Any]:
        seen.append(body)
        await anyio.lowlevel.checkpoint()
        return reply("from chat")

    local = Local(
        chat=chat,
        system_prompt="S",
        tools=[WEATHER],
        _seams=Seams(sleep=Sleeps()),
    )
    conn = await opened(local)
    assert conn.client is None
    outcome = await kickoff(local, conn)
    assert local.codec.normalize(outcome.result.unwrap()).text == "from chat"
    assert seen[0]["messages"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "weather?"},
    ]
    assert seen[0]["stream"] is False
    assert "model" not in seen[0]


async def test_chat_callable_sync_and_retried_failure_values() -> None:
    answers: list[Result[Any, SessionError] | dict[str, Any]] = [
        Failure(HttpError(status=503)),
        reply("second"),
    ]
    sleeps = Sleeps()

    def chat(body: dict[str, JSON]) -> Any:
        return answers.pop(0)

    local = Local(
        chat=chat,
        _seams=Seams(sleep=sleeps, rand=lambda: 0.0),
    )
    outcome = await kickoff(local, await opened(local))
    assert local.codec.normalize(outcome.result.unwrap()).text == "second"
    assert sleeps.delays == [0.5]


async def test_chat_callable_bad_shapes() -> None:
    local = Local(
        chat=lambda body: ["not", "a", "dict"],
        _seams=Seams(sleep=Sleeps()),
    )
    assert isinstance(failure_of(await kickoff(local, await opened(local))), MalformedResponse)
    local = Local(
        chat=lambda body: {"choices": []},
        _seams=Seams(sleep=Sleeps()),
    )
    assert isinstance(failure_of(await kickoff(local, await opened(local))), MalformedResponse)


async def test_L10_chat_exceptions_propagate() -> None:
    def chat(body: dict[str, JSON]) -> Any:
        raise RuntimeError("gateway exploded")

    local = Local(
        chat=chat,
        _seams=Seams(sleep=Sleeps()),
    )
    with pytest.raises(RuntimeError, match="gateway exploded"):
        await kickoff(local, await opened(local))


# --- wire edge cases through a mock transport -------------------------------------------


def sse(*chunks: Any, done: bool = True) -> bytes:
    out = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return out + (b"data: [DONE]\n\n" if done else b"")


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def mock_local(handler: Any, sleeps: Sleeps | None = None, **kwargs: Any) -> tuple[Local, LocalConn]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    local = make("http://mock/v1", sleeps, http_client=client, **kwargs)
    return local, await opened(local)


async def test_stream_requested_but_json_answered_is_accepted() -> None:
    local, conn = await mock_local(lambda request: httpx.Response(200, json=reply("plain")), stream=True)
    outcome = await kickoff(local, conn)
    assert local.codec.normalize(outcome.result.unwrap()).text == "plain"


async def test_stream_closed_after_finish_without_done_is_accepted() -> None:
    body = sse(chunk({"content": "hi"}), chunk({}, "stop"), done=False)
    local, conn = await mock_local(
        lambda request: httpx.Response(200, content=body, headers={"content-type": "text/event-stream"}),
        stream=True,
    )
    outcome = await kickoff(local, conn)
    assert local.codec.normalize(outcome.result.unwrap()).text == "hi"


class LingeringBody(httpx.AsyncByteStream):
    """An SSE body that stays open after ``data: [DONE]`` (a server that never ends it)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.closed = False

    async def __aiter__(self) -> Any:
        yield self.data
        await anyio.sleep(3600)

    async def aclose(self) -> None:
        self.closed = True


async def test_a_body_left_open_after_done_still_ends_the_turn_promptly() -> None:
    body = LingeringBody(sse(chunk({"content": "hi"}), chunk({}, "stop")))
    local, conn = await mock_local(
        lambda request: httpx.Response(200, stream=body, headers={"content-type": "text/event-stream"}),
        stream=True,
    )
    started = time.monotonic()
    with anyio.fail_after(60):
        outcome = await kickoff(local, conn)
    assert local.codec.normalize(outcome.result.unwrap()).text == "hi"
    assert time.monotonic() - started < 30  # the body would stay open an hour
    assert body.closed


async def test_stream_closed_before_finish_is_a_retried_drop() -> None:
    body = sse(chunk({"content": "hi"}), done=False)
    sleeps = Sleeps()
    local, conn = await mock_local(
        lambda request: httpx.Response(200, content=body, headers={"content-type": "text/event-stream"}),
        sleeps,
        stream=True,
        max_retries=1,
    )
    err = failure_of(await kickoff(local, conn))
    assert isinstance(err, StreamDropped)
    assert sleeps.delays == [0.75]


async def test_error_object_mid_stream_is_provider_error() -> None:
    body = sse(
        chunk({"content": "hi"}), {"error": {"message": "context too long", "type": "invalid_request_error"}}
    )
    local, conn = await mock_local(
        lambda request: httpx.Response(200, content=body, headers={"content-type": "text/event-stream"}),
        stream=True,
    )
    err = failure_of(await kickoff(local, conn))
    assert isinstance(err, ProviderError)
    assert err.detail == "context too long"


async def test_non_json_success_body_is_malformed() -> None:
    local, conn = await mock_local(lambda request: httpx.Response(200, content=b"<html>proxy</html>"))
    err = failure_of(await kickoff(local, conn))
    assert isinstance(err, MalformedResponse)
    assert err.response == "<html>proxy</html>"


async def test_retry_after_ms_header_honoured() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            return httpx.Response(
                429, json={"error": {"message": "slow down"}}, headers={"retry-after-ms": "250"}
            )
        return httpx.Response(200, json=reply("ok"))

    sleeps = Sleeps()
    local, conn = await mock_local(handler, sleeps)
    assert isinstance((await kickoff(local, conn)).result, Success)
    assert sleeps.delays == [0.25]
