"""No log line, telemetry event, span, metric, repr, exception message or recorded event log
ever contains a credential (issue 6).

Every scenario runs a real session against a loopback emulator with recognizable fake
secrets — an OpenAI-style key for Local, an Anthropic key and a bearer-token file for Claude
Managed Agents, AWS keys and a session token for Bedrock AgentCore — through the happy path
and the failure paths (401/403, 5xx with retries, timeouts, malformed responses, a raising
tool, a dropped stream, servers that echo the key back), captures everything the library
emits and scans it for every secret.
"""

from __future__ import annotations

import io
import json
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from returns.result import Failure, Success

from rma.config import Secret, resolve_aws
from rma.errors import AuthenticationError, HttpError, SessionError
from rma_shell import OpenRequest, Telemetry, open_session, otel, run
from rma_shell.logging import StructuredFormatter
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.telemetry import default as default_telemetry
from rma_shell.testing import (
    CMAEmulator,
    OpenAIEmulator,
    cma,
    delay,
    drop_mid_stream,
    drop_stream_after,
    error_frame,
    malformed_chunk,
    status,
    status_once,
    text_turn,
    tool_turn,
)
from tests.helpers import cma_agent_and_environment

OPENAI_KEY = "sk-proj-LEAKCANARY-openai-5f2e9a71"
LANE_KEY = "sk-LEAKCANARY-gateway-lane-0c4d"
ANTHROPIC_KEY = "sk-ant-api03-LEAKCANARY-anthropic-7c1d"
WRONG_ANTHROPIC_KEY = "sk-ant-api03-LEAKCANARY-wrong-22aa"
BEARER_TOKEN = "LEAKCANARY-bearer-token-3b8f61"
TOKEN_FILE = "LEAKCANARY-token-file.json"
AWS_ACCESS_KEY = "AKIALEAKCANARY7Q2Z"
AWS_SECRET = "LEAKCANARY-aws-secret-9e0f/abc+def"
AWS_SESSION_TOKEN = "LEAKCANARY-aws-session-token-5d6e"
SECRETS = (
    OPENAI_KEY,
    LANE_KEY,
    ANTHROPIC_KEY,
    WRONG_ANTHROPIC_KEY,
    BEARER_TOKEN,
    TOKEN_FILE,
    AWS_ACCESS_KEY,
    AWS_SECRET,
    AWS_SESSION_TOKEN,
)

WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
CALL = {"tool_calls": [{"id": "call_w", "name": "get_weather", "arguments": {"city": "SF"}}]}


async def no_sleep(_: float) -> None:
    await anyio.lowlevel.checkpoint()


def weather(name: str, input: dict[str, Any], ctx: object) -> str:
    return f"sunny in {input.get('city')}"


def broken_tool(name: str, input: dict[str, Any], ctx: object) -> str:
    raise RuntimeError("the tool broke")


class Capture:
    """Everything a session can emit: logs (root and ``rma`` at DEBUG), every telemetry event
    (with and without content, on a private and on the default dispatcher), every span and
    metric (content capture on), recorded event logs, and reprs/messages of what came back."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog
        caplog.set_level(logging.DEBUG)
        caplog.set_level(logging.DEBUG, logger="rma")
        self.events: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.telemetry = Telemetry()
        self.telemetry.attach("plain", "rma.*", self._collect)
        self.telemetry.attach("content", "*", self._collect, content=True)
        default_telemetry.attach("leak-test-default", "*", self._collect, content=True)
        self.exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.handle = otel.instrument(
            self.telemetry,
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[self.reader]),
            capture_content=True,
        ).unwrap()
        self.records: list[io.StringIO] = []
        self.texts: list[tuple[str, str]] = []

    def _collect(self, name: str, measurements: Any, metadata: Any) -> None:
        self.events.append((name, dict(measurements), dict(metadata)))

    def record(self) -> io.StringIO:
        log = io.StringIO()
        self.records.append(log)
        return log

    def keep(self, label: str, value: object) -> None:
        """Keep the repr and str of ``value`` (and of a Result's contents and an error's message)."""
        self.texts.append((f"repr({label})", repr(value)))
        self.texts.append((f"str({label})", str(value)))
        inner = (
            value.failure()
            if isinstance(value, Failure)
            else value.unwrap()
            if isinstance(value, Success)
            else None
        )
        if inner is not None:
            self.keep(f"{label}.inner", inner)
        if isinstance(value, SessionError):
            self.texts.append((f"{label}.message", value.message))
        if isinstance(value, BaseException):
            self.texts.append((f"{label}.args", repr(value.args)))

    def close(self) -> None:
        default_telemetry.detach("leak-test-default")
        otel.uninstrument(self.handle)

    def sources(self) -> Iterator[tuple[str, str]]:
        formatter = StructuredFormatter()
        for record in self.caplog.records:
            yield f"log {record.name}", formatter.format(record)
            yield f"log {record.name} (raw)", repr(vars(record))
        for name, m, md in self.events:
            yield f"telemetry {name}", json.dumps([m, md], default=repr)
        for span in self.exporter.get_finished_spans():
            yield f"span {span.name}", span.to_json()
        metrics = self.reader.get_metrics_data()
        if metrics is not None:
            yield "metrics", metrics.to_json()
        for i, log in enumerate(self.records):
            yield f"recorded log #{i}", log.getvalue()
        yield from self.texts

    def assert_clean(self) -> None:
        leaks = [(where, secret) for where, text in self.sources() for secret in SECRETS if secret in text]
        assert leaks == [], f"secrets leaked: {leaks[:10]}"
        assert self.events, "the scenario emitted no telemetry: it did not run"


@pytest.fixture
def capture(caplog: pytest.LogCaptureFixture) -> Iterator[Capture]:
    c = Capture(caplog)
    try:
        yield c
    finally:
        c.close()


# ── Local ──────────────────────────────────────────────────────────────────────────

Scenario = Callable[[Capture], Awaitable[None]]


def local(cap: Capture, base_url: str, **kw: Any) -> Local:
    kw.setdefault("api_key", OPENAI_KEY)
    provider = Local(
        base_url=base_url,
        model="gpt-test",
        tools=[WEATHER],
        _seams=Seams(rand=lambda: 0.0, sleep=no_sleep),
        telemetry=cap.telemetry,
        **kw,
    )
    cap.keep("provider", provider)
    return provider


async def run_local(
    cap: Capture,
    script: list[Any],
    *,
    faults: dict[int, Any] | None = None,
    emulator_key: str = OPENAI_KEY,
    handler: Any = weather,
    timeout: float = 20,
    **kw: Any,
) -> None:
    with OpenAIEmulator(script, api_key=emulator_key, faults=faults or {}) as emu:
        provider = local(cap, emu.base_url, **kw)
        outcome = await run(
            provider,
            handler=handler,
            prompt="weather?",
            timeout=timeout,
            telemetry=cap.telemetry,
            metadata={"tenant": "acme"},
            record=cap.record(),
        )
    cap.keep("outcome", outcome)


async def local_tool_loop(cap: Capture) -> None:
    await run_local(cap, [CALL, {"content": "Sunny."}])


async def local_tool_loop_streaming(cap: Capture) -> None:
    await run_local(cap, [CALL, {"content": "Sunny."}], stream=True)


async def local_raising_tool(cap: Capture) -> None:
    await run_local(cap, [CALL, {"content": "Sorry."}], handler=broken_tool)


async def local_401(cap: Capture) -> None:
    await run_local(cap, [{"content": "never"}], emulator_key="sk-some-other-key")


async def local_401_echoing_the_key(cap: Capture) -> None:
    echo = status(401, message=f"Incorrect API key provided: {OPENAI_KEY}")
    await run_local(cap, [{"content": "never"}], faults={0: echo})


async def local_500_retried(cap: Capture) -> None:
    await run_local(cap, [{"content": "ok"}], faults={0: status(500), 1: status(503)})


async def local_500_exhausted_echoing_the_key(cap: Capture) -> None:
    echo = {i: status(500, message=f"upstream refused Bearer {OPENAI_KEY}") for i in range(4)}
    await run_local(cap, [{"content": "never"}], faults=echo, max_retries=3)


async def local_timeout(cap: Capture) -> None:
    await run_local(cap, [{"content": "late"}], faults={0: delay(30)}, timeout=0.5)


async def local_malformed(cap: Capture) -> None:
    await run_local(cap, [{"content": "x"}], faults={0: malformed_chunk()})


async def local_malformed_stream(cap: Capture) -> None:
    await run_local(cap, [{"content": "x"}], faults={0: malformed_chunk(1)}, stream=True)


async def local_stream_drop(cap: Capture) -> None:
    drops = {i: drop_mid_stream(1) for i in range(4)}
    await run_local(cap, [{"content": "x"}], faults=drops, stream=True, max_retries=3)


async def local_connection_refused(cap: Capture) -> None:
    provider = local(cap, "http://127.0.0.1:9/v1", max_retries=1)
    outcome = await run(provider, handler=weather, prompt="x", timeout=20, telemetry=cap.telemetry)
    cap.keep("outcome", outcome)


async def local_gateway_lane(cap: Capture) -> None:
    with OpenAIEmulator([{"content": "via lane"}], api_key=LANE_KEY) as emu:
        provider = local(cap, "http://127.0.0.1:9/v1")
        lane = {"base_url": emu.base_url, "api_key": LANE_KEY, "model": "lane", "metadata": {"grant": "g1"}}
        outcome = await run(
            provider,
            handler=weather,
            prompt="x",
            model_config=lane,
            telemetry=cap.telemetry,
            record=cap.record(),
        )
    assert outcome.unwrap().text == "via lane"
    cap.keep("outcome", outcome)


async def local_live_session(cap: Capture) -> None:
    with OpenAIEmulator([{"content": "one"}, CALL, {"content": "two"}], api_key=OPENAI_KEY) as emu:
        provider = local(cap, emu.base_url)
        async with open_session(
            provider, handler=weather, prompt="first", telemetry=cap.telemetry, record=cap.record()
        ) as session:
            cap.keep("first", await session.next_result())
            await session.message("second")
            cap.keep("second", await session.next_result())
            cap.keep("info", session.info)


LOCAL_SCENARIOS: dict[str, Scenario] = {
    f.__name__: f
    for f in (
        local_tool_loop,
        local_tool_loop_streaming,
        local_raising_tool,
        local_401,
        local_401_echoing_the_key,
        local_500_retried,
        local_500_exhausted_echoing_the_key,
        local_timeout,
        local_malformed,
        local_malformed_stream,
        local_stream_drop,
        local_connection_refused,
        local_gateway_lane,
        local_live_session,
    )
}


@pytest.mark.parametrize("scenario", sorted(LOCAL_SCENARIOS))
async def test_local_never_leaks_its_key(capture: Capture, scenario: str) -> None:
    with anyio.fail_after(30):
        await LOCAL_SCENARIOS[scenario](capture)
    capture.assert_clean()


async def test_an_echoed_key_is_masked_not_dropped(capture: Capture) -> None:
    await local_500_exhausted_echoing_the_key(capture)
    [(_, outcome)] = [(label, text) for label, text in capture.texts if label == "repr(outcome.inner)"]
    assert "HttpError" in outcome and "upstream refused Bearer ***" in outcome


# ── Claude Managed Agents ──────────────────────────────────────────────────────────


def agent_and_environment(emu: CMAEmulator) -> dict[str, str]:
    return cma_agent_and_environment(emu, ANTHROPIC_KEY)


def token_file(tmp: Path, expires_in: float = 3600) -> str:
    path = tmp / TOKEN_FILE
    path.write_text(json.dumps({"access_token": BEARER_TOKEN, "expires_at": time.time() + expires_in}))
    return str(path)


async def run_cma(
    cap: Capture,
    script: list[Any],
    *,
    faults: list[Any] | None = None,
    handler: Any = weather,
    timeout: float = 20,
    live: bool = False,
    **auth: Any,
) -> None:
    if not auth:
        auth = {"api_key": ANTHROPIC_KEY}
    with CMAEmulator(script, api_key=ANTHROPIC_KEY, bearer_tokens=[BEARER_TOKEN], faults=faults or []) as emu:
        provider = ClaudeManagedAgents(
            base_url=emu.base_url,
            env={},
            max_retries=2,
            _seams=Seams(sleep=no_sleep, rand=lambda: 0.0),
            telemetry=cap.telemetry,
            **agent_and_environment(emu),
            **auth,
        )
        cap.keep("provider", provider)
        built = provider.client()
        cap.keep("client", built)
        try:
            if live:
                try:
                    async with open_session(
                        provider, handler=handler, prompt="go", telemetry=cap.telemetry
                    ) as s:
                        with anyio.fail_after(timeout):
                            cap.keep("outcome", await s.next_result())
                except SessionError as exc:  # open_session raises the typed error itself
                    cap.keep("exception", exc)
                    cap.keep("exception.traceback", "".join(traceback.format_exception(exc)))
            else:
                outcome = await run(
                    provider,
                    handler=handler,
                    prompt="go",
                    timeout=timeout,
                    telemetry=cap.telemetry,
                    metadata={"tenant": "acme"},
                    record=cap.record(),
                )
                cap.keep("outcome", outcome)
        finally:
            await provider.close()


async def cma_tool_loop(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [tool_turn(("get_weather", {"city": "SF"})), text_turn("Sunny.")])


async def cma_tool_loop_bearer_file(cap: Capture, tmp: Path) -> None:
    script = [tool_turn(("get_weather", {"city": "SF"})), text_turn("Sunny.")]
    await run_cma(cap, script, api_key=None, bearer_token_file=token_file(tmp))


async def cma_raising_tool(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [tool_turn(("get_weather", {"city": "SF"})), text_turn("Sorry.")], handler=broken_tool)


async def cma_401_wrong_key(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [text_turn("never")], api_key=WRONG_ANTHROPIC_KEY)


async def cma_401_echoing_the_key(cap: Capture, tmp: Path) -> None:
    echo = status_once(401, message=f"invalid x-api-key: {ANTHROPIC_KEY}", path=r"^/v1/sessions$")
    await run_cma(cap, [text_turn("never")], faults=[echo])


async def cma_401_echoing_the_bearer_token(cap: Capture, tmp: Path) -> None:
    echo = status_once(401, message=f"token {BEARER_TOKEN} revoked", path=r"^/v1/sessions$")
    await run_cma(cap, [text_turn("never")], faults=[echo], api_key=None, bearer_token_file=token_file(tmp))


async def cma_500_echoing_the_key(cap: Capture, tmp: Path) -> None:
    echo = status_once(500, message=f"upstream saw {ANTHROPIC_KEY}", method="POST", path=r"^/v1/sessions$")
    await run_cma(cap, [text_turn("never")], faults=[echo])


async def cma_529_retried(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [text_turn("ok")], faults=[status_once(529, times=2, method="POST", path=r"/events$")])


async def cma_timeout(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [[cma.status_running(), cma.model_request_start()]], timeout=1)


async def cma_stream_drop(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [text_turn("never seen")], faults=[drop_stream_after(1)])


async def cma_error_frame_echoing_the_key(cap: Capture, tmp: Path) -> None:
    await run_cma(
        cap, [text_turn("never")], faults=[error_frame(0, message=f"overloaded for {ANTHROPIC_KEY}")]
    )


async def cma_bearer_token_expiring(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [text_turn("never")], api_key=None, bearer_token_file=token_file(tmp, expires_in=5))


async def cma_bearer_file_missing(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [text_turn("never")], api_key=None, bearer_token_file=str(tmp / "gone" / TOKEN_FILE))


async def cma_open_session_bad_key(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [text_turn("never")], api_key=WRONG_ANTHROPIC_KEY, live=True)


async def cma_live_session(cap: Capture, tmp: Path) -> None:
    await run_cma(cap, [tool_turn(("get_weather", {"city": "SF"})), text_turn("Sunny.")], live=True)


CMA_SCENARIOS: dict[str, Callable[[Capture, Path], Awaitable[None]]] = {
    f.__name__: f
    for f in (
        cma_tool_loop,
        cma_tool_loop_bearer_file,
        cma_raising_tool,
        cma_401_wrong_key,
        cma_401_echoing_the_key,
        cma_401_echoing_the_bearer_token,
        cma_500_echoing_the_key,
        cma_529_retried,
        cma_timeout,
        cma_stream_drop,
        cma_error_frame_echoing_the_key,
        cma_bearer_token_expiring,
        cma_bearer_file_missing,
        cma_open_session_bad_key,
        cma_live_session,
    )
}


@pytest.mark.parametrize("scenario", sorted(CMA_SCENARIOS))
async def test_claude_managed_agents_never_leaks_its_key_or_token(
    capture: Capture, scenario: str, tmp_path: Path
) -> None:
    with anyio.fail_after(30):
        await CMA_SCENARIOS[scenario](capture, tmp_path)
    capture.assert_clean()


async def test_an_echoed_bearer_token_is_masked(capture: Capture, tmp_path: Path) -> None:
    await cma_401_echoing_the_bearer_token(capture, tmp_path)
    [error] = [text for label, text in capture.texts if label == "repr(outcome.inner)"]
    assert "AuthenticationError" in error and "token *** revoked" in error


# ── Bedrock AgentCore ──────────────────────────────────────────────────────────────

AC_SESSION = "rma-session-0123456789abcdef0123456789"


async def run_agentcore(
    cap: Capture,
    script: list[Any],
    *,
    faults: list[Any] | None = None,
    handler: Any = weather,
    timeout: float = 20,
    live: bool = False,
    secret: str = AWS_SECRET,
    commands: bool = False,
) -> None:
    from rma_shell.providers.agentcore import BedrockAgentCore
    from rma_shell.testing.agentcore import AgentCoreEmulator

    with AgentCoreEmulator(
        script,
        access_key_id=AWS_ACCESS_KEY,
        secret_access_key=AWS_SECRET,
        session_token=AWS_SESSION_TOKEN,
        faults=faults or [],
    ) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            aws_access_key_id=AWS_ACCESS_KEY,
            aws_secret_access_key=secret,
            aws_session_token=AWS_SESSION_TOKEN,
            env={},
            tools=[WEATHER],
            _seams=Seams(sleep=no_sleep, rand=lambda: 0.0),
            telemetry=cap.telemetry,
        )
        cap.keep("provider", provider)
        try:
            if live:
                async with open_session(
                    provider,
                    handler=handler,
                    prompt="go",
                    telemetry=cap.telemetry,
                    runtime_session_id=AC_SESSION,
                ) as s:
                    with anyio.fail_after(timeout):
                        cap.keep("outcome", await s.next_result())
            else:
                outcome = await run(
                    provider,
                    handler=handler,
                    prompt="go",
                    timeout=timeout,
                    telemetry=cap.telemetry,
                    record=cap.record(),
                    runtime_session_id=AC_SESSION,
                )
                cap.keep("outcome", outcome)
            cap.keep("client", await provider.client_for(emu.region))
            if commands:
                store = provider.storage(AC_SESSION)
                cap.keep("put", await store.put("a.txt", b"hello"))
                cap.keep("list", await store.list())
                cap.keep("command", await provider.run_command("echo $0", runtime_session_id=AC_SESSION))
        finally:
            await provider.close()


def _ac() -> Any:
    from rma_shell.testing import agentcore

    return agentcore


async def ac_tool_loop(cap: Capture) -> None:
    ace = _ac()
    await run_agentcore(
        cap, [ace.tool_turn(("get_weather", {"city": "SF"})), ace.text_turn("Sunny.")], commands=True
    )


async def ac_raising_tool(cap: Capture) -> None:
    ace = _ac()
    script = [ace.tool_turn(("get_weather", {"city": "SF"})), ace.text_turn("Sorry.")]
    await run_agentcore(cap, script, handler=broken_tool)


async def ac_wrong_secret(cap: Capture) -> None:
    await run_agentcore(cap, [_ac().text_turn("never")], secret="LEAKCANARY-wrong-aws-secret")


async def ac_500_echoing_the_secret(cap: Capture) -> None:
    echo = _ac().error_once(400, "ValidationException", f"bad signature for {AWS_SECRET} {AWS_SESSION_TOKEN}")
    await run_agentcore(cap, [_ac().text_turn("never")], faults=[echo])


async def ac_403_echoing_the_authorization_header(cap: Capture) -> None:
    # AWS signature errors may quote the Authorization header: Credential=<access key id>/…
    echo = _ac().error_once(
        403, "InvalidSignatureException", "The request signature is wrong.", echo_authorization=True
    )
    await run_agentcore(cap, [_ac().text_turn("never")], faults=[echo])


async def ac_exception_frame_echoing_the_secret(cap: Capture) -> None:
    fault = _ac().exception_frame(
        "runtimeClientError", f"token {AWS_SESSION_TOKEN} and {AWS_SECRET}", after=1
    )
    await run_agentcore(cap, [_ac().text_turn("never")], faults=[fault])


async def ac_throttled_then_ok(cap: Capture) -> None:
    await run_agentcore(cap, [_ac().text_turn("ok")], faults=[_ac().throttle_once()])


async def ac_stream_drops(cap: Capture) -> None:
    await run_agentcore(cap, [_ac().text_turn("never")], faults=[_ac().drop_after(1, times=5)])


async def ac_timeout(cap: Capture) -> None:
    await run_agentcore(cap, [_ac().text_turn("never")], faults=[_ac().stall(30, after=1)], timeout=0.5)


async def ac_live_session(cap: Capture) -> None:
    ace = _ac()
    await run_agentcore(
        cap, [ace.tool_turn(("get_weather", {"city": "SF"})), ace.text_turn("Sunny.")], live=True
    )


AC_SCENARIOS: dict[str, Callable[[Capture], Awaitable[None]]] = {
    f.__name__: f
    for f in (
        ac_tool_loop,
        ac_raising_tool,
        ac_wrong_secret,
        ac_500_echoing_the_secret,
        ac_403_echoing_the_authorization_header,
        ac_exception_frame_echoing_the_secret,
        ac_throttled_then_ok,
        ac_stream_drops,
        ac_timeout,
        ac_live_session,
    )
}


@pytest.mark.parametrize("scenario", sorted(AC_SCENARIOS))
async def test_bedrock_agentcore_never_leaks_its_keys_or_token(capture: Capture, scenario: str) -> None:
    with anyio.fail_after(30):
        await AC_SCENARIOS[scenario](capture)
    capture.assert_clean()


# ── values that hold credentials ───────────────────────────────────────────────────


def test_aws_settings_and_secrets_never_show_their_values() -> None:
    env = {
        "AWS_ACCESS_KEY_ID": AWS_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_SESSION_TOKEN": AWS_SESSION_TOKEN,
    }
    settings = resolve_aws(opts={}, app={}, env=env).unwrap()
    texts = [repr(settings), str(settings), repr(Secret(AWS_SECRET)), f"{Secret(AWS_SECRET)}"]
    bad_region = resolve_aws(opts={"aws_region": ""}, app={}, env=env)
    wrong_type = resolve_aws(opts={"aws_secret_access_key": 12345}, app={}, env=env)
    texts += [repr(bad_region), repr(wrong_type), bad_region.failure().message, wrong_type.failure().message]
    assert settings.secret_access_key.reveal() == AWS_SECRET  # the value is there, only never shown
    assert not [(t, s) for t in texts for s in SECRETS if s in t]


def test_an_open_request_carrying_a_per_run_key_does_not_show_it() -> None:
    request = OpenRequest(
        prompt="x",
        extra={"model_config": {"api_key": LANE_KEY, "model": "m"}, "authorization": f"Bearer {LANE_KEY}"},
    )
    assert request.extra["model_config"]["api_key"] == LANE_KEY
    assert LANE_KEY not in repr(request) and "'model': 'm'" in repr(request)


def test_an_error_raised_by_httpx_with_the_key_in_it_is_masked() -> None:
    """httpx/h11 put an illegal header value in their exception message; Local masks it."""
    from rma_shell.providers.local.provider import LocalConn

    conn = LocalConn("s", None, api_key=OPENAI_KEY)  # type: ignore[arg-type]
    error = HttpError(status=400, body={"error": {"message": f"bad header Bearer {OPENAI_KEY}\n"}}, url="u")
    masked = conn.redact_error(error)
    assert OPENAI_KEY not in repr(masked) and "Bearer ***" in repr(masked)
    auth = conn.redact_error(AuthenticationError(detail=OPENAI_KEY))
    assert isinstance(auth, AuthenticationError) and auth.detail == "***"
