"""Errors that explain themselves (issue #13 §4): exceptions with a one-line message, values
that still compare, pickle and record, ``run_or_raise``, ``open_session``'s one rule, and the
origin (host, port, status, code, request id) of provider and transport failures on all three
hosts' emulators, with AgentCore's failures told apart by class."""

from __future__ import annotations

import inspect
import io
import pickle
import socket
import traceback
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
from returns.primitives.exceptions import UnwrapFailedError
from returns.result import Failure

from rma import codec_json
from rma.errors import (
    ERROR_TYPES,
    AuthenticationError,
    Closed,
    CommandException,
    EarlyTermination,
    HttpError,
    InvalidOpts,
    MalformedFrame,
    MalformedResponse,
    ProviderError,
    SessionError,
    StreamException,
    Timeout,
    TransportError,
)
from rma.provider import codec_for
from rma.replay import replay_lines
from rma_shell import SessionFailed, open_session, run, run_or_raise, unwrap
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import CMAEmulator, OpenAIEmulator, error_frame, status, status_once, text_turn
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import end
from tests.providers.test_cma_session import KEY as CMA_KEY
from tests.providers.test_cma_session import emu_agent_and_environment

SID = "rma-session-0123456789abcdef0123456789"
PORT_ZERO = "http://127.0.0.1:0"


def refused_port() -> int:
    """A loopback port nothing listens on (bound, then released): a connect is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tools:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "done"


# ── errors are exceptions, and still values ──────────────────────────────────────────────


def test_every_error_is_an_exception_whose_str_is_its_kind_and_a_one_line_message() -> None:
    for cls in ERROR_TYPES:
        error = cls()
        assert isinstance(error, Exception) and isinstance(error, SessionError), cls
        text = str(error)
        assert text.startswith(f"{cls.kind}: ") and len(text) > len(cls.kind) + 2, cls
        assert "\n" not in text, cls
    multi = ProviderError(detail="line one\nline two\r\nthree")
    assert str(multi) == "provider_error: provider error: line one line two three"


def test_a_raised_error_shows_its_message_in_the_traceback_and_is_caught_by_its_family() -> None:
    error = HttpError(status=503, code="api_error", host="api.example", method="POST", url="/v1/x")
    with pytest.raises(SessionError) as caught:
        raise error
    assert caught.value is error
    shown = "".join(traceback.format_exception(caught.value))
    assert "rma.errors.HttpError: http_error: HTTP 503 api_error from api.example on POST /v1/x" in shown


def test_unwrapping_a_failure_chains_the_error_as_the_cause() -> None:
    error = Timeout(timeout_s=2.0)
    with pytest.raises(Exception) as caught:
        Failure(error).unwrap()
    assert caught.value.__cause__ is error
    assert "timeout: run timed out after 2.0s" in "".join(traceback.format_exception(caught.value))


@pytest.mark.parametrize(
    ("remote_stop", "says"),
    [
        (None, ""),
        ("confirmed", "; the host's loop was stopped (confirmed)"),
        ("unconfirmed", "; the host was asked to stop its loop, without confirmation"),
        ("failed", "; stopping the host's loop failed: it may still be running"),
        ("not_needed", "; no host loop to stop"),
    ],
)
def test_a_timeout_says_what_became_of_the_hosts_loop(remote_stop: Any, says: str) -> None:
    assert str(Timeout(timeout_s=2.0, remote_stop=remote_stop)) == "timeout: run timed out after 2.0s" + says


def test_errors_compare_hash_pickle_and_json_round_trip_as_values() -> None:
    samples: list[SessionError] = [
        Timeout(timeout_s=1.5),
        Timeout(timeout_s=1.5, remote_stop="unconfirmed"),
        HttpError(status=429, body={"error": {"type": "rate_limit_error"}}, host="h:8", request_id="r"),
        TransportError(detail="refused", error_type="econnrefused", host="127.0.0.1", port=0),
        StreamException(detail="boom", error_type="internalServerException", request_id="abc"),
        EarlyTermination(detail="cut", attempts=3, host="h"),
        MalformedFrame(detail="crc", reason="bad_crc"),
        Closed(),
    ]
    for error in samples:
        twin = attrs_copy(error)
        assert error == twin and (error != twin) is False and error is not twin
        assert error != Timeout(timeout_s=99.0)
        assert pickle.loads(pickle.dumps(error)) == error
        assert codec_json.loads(codec_json.dumps(error)) == error
        assert codec_json.loads(codec_json.dumps(Failure(error))) == Failure(error)
    assert hash(Timeout(timeout_s=1.5)) == hash(Timeout(timeout_s=1.5))
    assert len({Timeout(timeout_s=1.5), Timeout(timeout_s=1.5), Closed()}) == 2
    # a subclass with the same fields is a different value
    assert ProviderError(detail="x") != StreamException(detail="x")


def attrs_copy(error: SessionError) -> SessionError:
    return attrs.evolve(error)


async def test_a_recorded_failing_run_replays_to_the_same_error() -> None:
    failure = HttpError(status=503, body={"error": "busy"}, host="h", code="overloaded", request_id="r1")
    log = io.StringIO()
    outcome = await run(ScriptedProvider([failure]), handler=Tools(), prompt="x", record=log)
    assert outcome == Failure(failure)
    replayed = replay_lines(log.getvalue().splitlines(), codec_for).unwrap()
    assert replayed.results == (Failure(failure),)


# ── run_or_raise and open_session ────────────────────────────────────────────────────────


def test_run_or_raise_takes_exactly_runs_arguments() -> None:
    ours, theirs = inspect.signature(run_or_raise), inspect.signature(run)
    assert list(ours.parameters.values()) == list(theirs.parameters.values())


async def test_run_or_raise_returns_the_result_or_raises_the_runs_error() -> None:
    result = await run_or_raise(ScriptedProvider([end("hello")]), handler=Tools(), prompt="x")
    assert result.text == "hello"
    failure = ProviderError(detail="503 after retries", error_type="overloaded")
    with pytest.raises(ProviderError) as caught:
        await run_or_raise(ScriptedProvider([failure]), handler=Tools(), prompt="x")
    assert caught.value == failure
    with pytest.raises(InvalidOpts) as invalid:
        await run_or_raise(ScriptedProvider([end()]), handler=Tools(), prompt="x", max_turns=0)
    assert invalid.value.option == "max_turns" and "max_turns" in str(invalid.value)


async def test_open_session_raises_the_same_error_run_returns() -> None:
    for kwargs in ({"max_turns": 0}, {"handler": object()}):
        options: dict[str, Any] = {"handler": Tools(), "prompt": "x", **kwargs}
        returned = (await run(ScriptedProvider([end()]), **options)).failure()
        with pytest.raises(SessionError) as caught:
            async with open_session(ScriptedProvider([end()]), **options):
                pass
        assert caught.value == returned and isinstance(caught.value, InvalidOpts)
    refused = AuthenticationError(detail="no key")
    with pytest.raises(SessionFailed) as old_name:  # the deprecated alias still catches it
        async with open_session(ScriptedProvider(open_error=refused), handler=Tools(), prompt="x"):
            pass
    assert old_name.value == refused


async def test_unwrap_gives_the_value_or_raises_the_error_itself() -> None:
    provider = ScriptedProvider([end("first"), ProviderError(detail="push refused")], streaming=True)
    async with open_session(provider, handler=Tools(), prompt="x") as session:
        assert unwrap(await session.next_result()).text == "first"
        await session.message("again")
        with pytest.raises(ProviderError) as caught:
            unwrap(await session.next_result())
    assert caught.value.detail == "push refused"
    with pytest.raises(UnwrapFailedError):  # a failure that is no exception: returns' own error
        unwrap(Failure("not an error value"))


# ── Claude Managed Agents ────────────────────────────────────────────────────────────────


@pytest.fixture
async def closing() -> AsyncIterator[list[Any]]:
    made: list[Any] = []
    yield made
    for provider in made:
        await provider.close()


async def test_cma_http_error_names_host_status_code_and_request_id(closing: list[Any]) -> None:
    fault = status_once(400, message="model is not allowed", method="POST", path="/v1/sessions$")
    with CMAEmulator(script=[text_turn("hi")], api_key=CMA_KEY, faults=[fault]) as emu:
        p = ClaudeManagedAgents(
            api_key=CMA_KEY, base_url=emu.base_url, env={}, **emu_agent_and_environment(emu)
        )
        closing.append(p)
        with pytest.raises(HttpError) as caught:
            await run_or_raise(p, handler=Tools(), prompt="x")
        sent = next(r for r in emu.requests if r.method == "POST" and r.path.startswith("/v1/sessions"))
    error = caught.value
    assert (error.status, error.code, error.method) == (400, "invalid_request_error", "POST")
    assert error.host == f"127.0.0.1:{emu.port}" and error.request_id == sent.request_id != ""
    assert f"request id {sent.request_id}" in str(error) and "model is not allowed" in str(error)


def cma_at(base_url: str) -> ClaudeManagedAgents:
    return ClaudeManagedAgents(
        api_key=CMA_KEY, base_url=base_url, env={}, agent_id="agent_1", environment_id="env_1", max_retries=0
    )


async def test_cma_connection_refused_names_host_and_port(closing: list[Any]) -> None:
    port = refused_port()
    closing.append(p := cma_at(f"http://127.0.0.1:{port}"))
    error = (await run(p, handler=Tools(), prompt="x")).failure()
    assert isinstance(error, TransportError) and (error.host, error.port) == ("127.0.0.1", port)
    assert f"to 127.0.0.1:{port}: ConnectError" in str(error)


async def test_cma_port_zero_is_refused_before_dialling_not_sent_to_port_80(closing: list[Any]) -> None:
    closing.append(p := cma_at(PORT_ZERO))
    error = (await run(p, handler=Tools(), prompt="x")).failure()
    assert isinstance(error, InvalidOpts) and error.option == "base_url"
    assert "port" in str(error) and ":0" in str(error) and ":80" not in str(error)


async def test_cma_open_session_raises_the_typed_http_error(closing: list[Any]) -> None:
    fault = status_once(403, method="POST", path="/v1/sessions$")
    with CMAEmulator(script=[text_turn("hi")], api_key=CMA_KEY, faults=[fault]) as emu:
        p = ClaudeManagedAgents(
            api_key=CMA_KEY, base_url=emu.base_url, env={}, **emu_agent_and_environment(emu)
        )
        closing.append(p)
        with pytest.raises(HttpError) as caught:
            async with open_session(p, handler=Tools()):
                pass
    assert caught.value.status == 403 and caught.value.code == "permission_error"


async def test_cma_stream_error_frame_names_its_type_message_host_and_request_id(closing: list[Any]) -> None:
    fault = error_frame(0, error_type="overloaded_error", message="Overloaded right now")
    with CMAEmulator([text_turn("never")], api_key=CMA_KEY, faults=[fault]) as emu:
        p = ClaudeManagedAgents(
            api_key=CMA_KEY, base_url=emu.base_url, env={}, **emu_agent_and_environment(emu)
        )
        closing.append(p)
        error = (await run(p, handler=Tools(), prompt="x", timeout=20)).failure()
        stream = next(r for r in emu.requests if r.path.split("?")[0].endswith("/events/stream"))
    assert type(error) is ProviderError
    assert (error.error_type, error.detail) == ("overloaded_error", "Overloaded right now")
    assert error.host == f"127.0.0.1:{emu.port}" and error.request_id == stream.request_id != ""


# ── Local (OpenAI-compatible) ────────────────────────────────────────────────────────────


def local(base_url: str, **kw: Any) -> Local:
    return Local(base_url=base_url, model="m", api_key="sk-test", _seams=Seams(rand=lambda: 0.0), **kw)


@pytest.mark.parametrize("streaming", [False, True])
async def test_local_http_error_names_host_status_code_and_x_request_id(streaming: bool) -> None:
    with OpenAIEmulator([{"content": "hi"}], faults={0: status(429)}) as emu:
        error = (
            await run(local(emu.base_url, max_retries=0, stream=streaming), handler=Tools(), prompt="x")
        ).failure()
        sent = emu.requests[0]
    assert isinstance(error, HttpError) and error.status == 429
    assert error.code == "rate_limit_exceeded" and error.host == f"127.0.0.1:{emu.port}"
    assert error.request_id == sent.request_id and sent.request_id.startswith("req_")
    assert str(error).startswith(f"http_error: HTTP 429 rate_limit_exceeded from 127.0.0.1:{emu.port}")


async def test_local_connection_refused_names_host_and_port() -> None:
    port = refused_port()
    error = (
        await run(local(f"http://127.0.0.1:{port}/v1", max_retries=0), handler=Tools(), prompt="x")
    ).failure()
    assert isinstance(error, TransportError) and error.error_type == "econnrefused"
    assert (error.host, error.port) == ("127.0.0.1", port)
    assert f"transport error (econnrefused) to 127.0.0.1:{port}: " in str(error)


async def test_local_port_zero_is_refused_before_dialling() -> None:
    error = (await run(local(f"{PORT_ZERO}/v1", max_retries=0), handler=Tools(), prompt="x")).failure()
    assert isinstance(error, InvalidOpts) and error.option == "base_url"
    assert "port" in str(error) and ":0" in str(error) and ":80" not in str(error)


async def test_local_a_stream_cut_short_names_its_host_and_request_id() -> None:
    from rma_shell.testing import drop_mid_stream

    with OpenAIEmulator([{"content": "a long enough answer"}], faults={0: drop_mid_stream(1)}) as emu:
        error = (
            await run(local(emu.base_url, max_retries=0, stream=True), handler=Tools(), prompt="x")
        ).failure()
        sent = emu.requests[0]
    assert isinstance(error, TransportError) and error.error_type == "closed"
    assert (error.host, error.port) == ("127.0.0.1", emu.port)
    assert error.request_id == sent.request_id and f"(request id {sent.request_id})" in str(error)


# ── Bedrock AgentCore ────────────────────────────────────────────────────────────────────


def agentcore(
    emu: AgentCoreEmulator | None, closing: list[Any], base: str | None = None, **kw: Any
) -> BedrockAgentCore:
    base = emu.base_url if emu is not None else base or PORT_ZERO
    p = BedrockAgentCore(
        harness_arn=emu.harness_arn
        if emu is not None
        else "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/emulated_harness-39UiYgO0Nc",
        data_url=base,
        control_url=base,
        env=emu.credentials_env()
        if emu is not None
        else {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "s"},
        backoff_base=0.01,
        backoff_cap=0.02,
        **kw,
    )
    closing.append(p)
    return p


async def test_agentcore_http_error_names_host_code_and_amzn_request_id(closing: list[Any]) -> None:
    fault = ace.error_once(400, "ValidationException", "messages are bad")
    with AgentCoreEmulator([ace.text_turn("ok")], faults=[fault]) as emu:
        with pytest.raises(HttpError) as caught:
            await run_or_raise(agentcore(emu, closing), handler=Tools(), prompt="x", runtime_session_id=SID)
        sent = emu.requests[-1]
    error = caught.value
    assert (error.status, error.code) == (400, "ValidationException")
    assert error.host == f"127.0.0.1:{emu.port}" and error.request_id == sent.request_id != ""
    assert "messages are bad" in str(error)


async def test_agentcore_connection_refused_names_host_and_port(closing: list[Any]) -> None:
    port = refused_port()
    p = agentcore(None, closing, base=f"http://127.0.0.1:{port}", max_retries=0)
    error = (await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)).failure()
    assert isinstance(error, TransportError) and (error.host, error.port) == ("127.0.0.1", port)
    assert f"to 127.0.0.1:{port}: cannot connect" in str(error)


async def test_agentcore_port_zero_is_refused_before_dialling(closing: list[Any]) -> None:
    p = agentcore(None, closing, max_retries=0)
    error = (await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)).failure()
    assert isinstance(error, InvalidOpts) and error.option == "data_url"
    assert "port" in str(error) and ":0" in str(error) and ":80" not in str(error)


async def test_agentcore_stream_exception_frame_is_its_own_class(closing: list[Any]) -> None:
    fault = ace.exception_frame("internalServerException", "model fell over", after=1)
    with AgentCoreEmulator([ace.text_turn("ok")], faults=[fault]) as emu:
        error = (
            await run(agentcore(emu, closing), handler=Tools(), prompt="x", runtime_session_id=SID)
        ).failure()
        sent = emu.requests[-1]
    assert type(error) is StreamException and error.kind == "stream_exception"
    assert (error.error_type, error.detail) == ("internalServerException", "model fell over")
    assert error.request_id == sent.request_id and error.host == f"127.0.0.1:{emu.port}"
    assert not isinstance(error, CommandException | EarlyTermination)


async def test_agentcore_command_exception_frame_is_its_own_class(closing: list[Any]) -> None:
    with AgentCoreEmulator() as emu:
        emu.inject(
            ace.exception_frame("runtimeClientError", "vm gone", operation="InvokeAgentRuntimeCommand")
        )
        got = await agentcore(emu, closing).run_command("echo hi", runtime_session_id=SID)
        sent = emu.requests[-1]
    error = got.failure()
    assert type(error) is CommandException and error.kind == "command_exception"
    assert (error.error_type, error.detail) == ("runtimeClientError", "vm gone")
    assert error.request_id == sent.request_id


@pytest.mark.parametrize("fault", [ace.drop_after(1), ace.truncate_frame_after(1)])
async def test_agentcore_a_command_stream_cut_short_is_early_termination(
    fault: Any, closing: list[Any]
) -> None:
    with AgentCoreEmulator() as emu:
        emu.inject(attrs.evolve(fault, operation="InvokeAgentRuntimeCommand"))
        got = await agentcore(emu, closing).run_command("echo hi", runtime_session_id=SID)
        sent = emu.requests[-1]
    error = got.failure()
    assert type(error) is EarlyTermination and error.attempts == 1
    assert error.request_id == sent.request_id and error.host == f"127.0.0.1:{emu.port}"


async def test_agentcore_early_termination_is_its_own_class_and_counts_the_attempts(
    closing: list[Any],
) -> None:
    with AgentCoreEmulator([ace.text_turn("x")], faults=[ace.drop_after(1, times=5)]) as emu:
        p = agentcore(emu, closing, max_retries=2)
        error = (await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)).failure()
    assert type(error) is EarlyTermination and error.attempts == 3
    assert error.host == f"127.0.0.1:{emu.port}"
    assert str(error).startswith("early_termination: the stream ended early 3 time(s)")


async def test_agentcore_malformed_frame_is_its_own_class(closing: list[Any]) -> None:
    with AgentCoreEmulator([ace.text_turn("x")], faults=[ace.bad_crc_after(1, times=5)]) as emu:
        p = agentcore(emu, closing, max_retries=1)
        error = (await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)).failure()
        invokes = [r for r in emu.requests if "/invoke" in r.path]
    assert type(error) is MalformedFrame and error.kind == "malformed_frame"
    assert isinstance(error, MalformedResponse) and "crc" in error.reason
    assert len(invokes) == 2  # damage in transit: re-invoked like a drop, then reported as what it was


async def test_agentcore_open_session_failure_is_raised_typed(closing: list[Any]) -> None:
    with pytest.raises(InvalidOpts) as caught:
        async with open_session(agentcore(None, closing), handler=Tools(), runtime_session_id="short"):
            pass
    assert caught.value.option == "runtime_session_id"


def test_an_errors_host_shows_the_port_only_when_it_is_not_the_schemes_default() -> None:
    from rma.origin import host_and_port, with_origin

    cases = {
        "https://api.anthropic.com/v1/sessions": ("api.anthropic.com", "api.anthropic.com", 443),
        "https://h.example:443/x": ("h.example", "h.example", 443),
        "http://h.example/x": ("h.example", "h.example", 80),
        "http://127.0.0.1:8000/v1": ("127.0.0.1:8000", "127.0.0.1", 8000),
        "http://[::1]:8080/v1": ("[::1]:8080", "::1", 8080),
    }
    for url, (label, host, port) in cases.items():
        assert with_origin(HttpError(status=500), url=url).host == label, url
        assert host_and_port(url) == (host, port), url
        refused = with_origin(TransportError(detail="x"), url=url)
        assert (refused.host, refused.port) == (host, port), url
    kept = with_origin(
        HttpError(status=500, host="inner", request_id="a"), url="http://outer/", request_id="b"
    )
    assert (kept.host, kept.request_id) == ("inner", "a")  # the layer that knew first wins


# ── what an HTTP error says: the host's own error text, never a Python repr ──────────────


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        # Claude: {"type": "error", "error": {"type", "message"}, "request_id"}
        (
            {"type": "error", "error": {"type": "api_error", "message": "Internal server error."}},
            "api_error",
            "HTTP 500 api_error: Internal server error.",
        ),
        # OpenAI: {"error": {"message", "type", "param", "code"}}
        (
            {"error": {"message": "It broke.", "type": "server_error", "param": None, "code": None}},
            "server_error",
            "HTTP 500 server_error: It broke.",
        ),
        # AWS: {"message"} with the type in x-amzn-ErrorType (the code), or in __type
        (
            {"message": "An internal error occurred."},
            "InternalServerException",
            "HTTP 500 InternalServerException: An internal error occurred.",
        ),
        (
            {"Message": "Try again.", "__type": "com.amazon#InternalServerException"},
            None,
            "HTTP 500 InternalServerException: Try again.",
        ),
        # OpenAI-compatible servers: the error as a string, or the fields at the top level
        ({"error": "model crashed"}, None, "HTTP 500: model crashed"),
        (
            {"object": "error", "message": "engine dead", "type": "InternalServerError"},
            None,
            "HTTP 500 InternalServerError: engine dead",
        ),
        # No text the host named: the body as it came (JSON, not a repr; a string as is)
        ({"weird": [1, None]}, None, 'HTTP 500: {"weird": [1, null]}'),
        ("<html>502 Bad Gateway</html>", None, "HTTP 500: <html>502 Bad Gateway</html>"),
        (None, None, "HTTP 500"),
    ],
)
def test_an_http_errors_message_is_the_hosts_error_type_and_text(body: Any, code: Any, says: str) -> None:
    assert HttpError(status=500, body=body, code=code).message == says


def test_a_long_host_error_text_is_cut_and_kept_on_one_line() -> None:
    body = {"error": {"type": "api_error", "message": "line one\nline two " + "x" * 1000}}
    text = str(HttpError(status=500, body=body, code="api_error"))
    assert text.startswith("http_error: HTTP 500 api_error: line one line two xxx") and "\n" not in text
    assert len(text) < 400


async def test_cma_a_500_says_the_hosts_error_type_and_message(closing: list[Any]) -> None:
    fault = status_once(500, message="Internal server error.", method="POST", path="/v1/sessions$")
    with CMAEmulator(script=[text_turn("hi")], api_key=CMA_KEY, faults=[fault]) as emu:
        p = ClaudeManagedAgents(
            api_key=CMA_KEY, base_url=emu.base_url, env={}, max_retries=0, **emu_agent_and_environment(emu)
        )
        closing.append(p)
        error = (await run(p, handler=Tools(), prompt="x")).failure()
    assert isinstance(error, HttpError) and error.status == 500
    assert str(error).endswith(f"(request id {error.request_id}): Internal server error.")
    assert str(error).startswith("http_error: HTTP 500 api_error from ")


async def test_local_a_500_says_the_hosts_error_type_and_message() -> None:
    with OpenAIEmulator([{"content": "hi"}], faults={0: status(500, message="Engine fell over.")}) as emu:
        error = (await run(local(emu.base_url, max_retries=0), handler=Tools(), prompt="x")).failure()
    assert isinstance(error, HttpError) and error.status == 500
    assert str(error).startswith("http_error: HTTP 500 server_error from ")
    assert str(error).endswith(f"(request id {error.request_id}): Engine fell over.")


async def test_agentcore_a_500_says_the_hosts_error_type_and_message(closing: list[Any]) -> None:
    fault = ace.server_error_once(500, times=20, message="An internal error occurred. Try again.")
    with AgentCoreEmulator([ace.text_turn("ok")], faults=[fault]) as emu:
        error = (
            await run(agentcore(emu, closing), handler=Tools(), prompt="x", runtime_session_id=SID)
        ).failure()
    assert isinstance(error, HttpError) and error.status == 500
    assert str(error).startswith("http_error: HTTP 500 InternalServerException from ")
    assert str(error).endswith(f"(request id {error.request_id}): An internal error occurred. Try again.")
