"""AgentCoreClient: InvokeHarness over the client's own lean lanes, the rest over httpx.

The lanes keep what httpx gave the invoke: one keep-alive connection reused turn after turn,
the idle timeout (a ``TransportError`` ``timeout``) and the read timeout (a broken stream), the
request telemetry; a caller's ``http_client`` carries everything itself.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from returns.result import Failure, Success

from rma.errors import MalformedFrame, StreamDropped, StreamException, TransportError
from rma.providers.agentcore.codec import StreamFault, classify
from rma.wire.eventstream import Message
from rma.wire.sigv4 import Credentials
from rma_shell.aws_credentials import StaticCredentialSource
from rma_shell.providers.agentcore.client import AgentCoreClient
from rma_shell.telemetry import Telemetry
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator

SID = "rma-session-0123456789abcdef0123456789"
BODY = b'{"messages":[{"role":"user","content":[{"text":"hi"}]}]}'


def client(emu: AgentCoreEmulator, **kw: Any) -> AgentCoreClient:
    creds = StaticCredentialSource(Credentials(emu.access_key_id, emu.secret_access_key), emu.region)
    return AgentCoreClient(
        region=emu.region, credentials=creds, data_url=emu.base_url, control_url=emu.base_url, **kw
    )


async def invoke(c: AgentCoreClient, emu: AgentCoreEmulator, sid: str = SID) -> Any:
    return await c.invoke_harness(harness_arn=emu.harness_arn, runtime_session_id=sid, body=BODY)


async def test_invokes_reuse_one_lane_and_commands_stay_on_httpx() -> None:
    with AgentCoreEmulator([ace.text_turn("one")]) as emu:
        c = client(emu)
        try:
            for n in range(3):
                got = await invoke(c, emu, sid=f"{SID[:-1]}{n}")
                assert isinstance(got, Success) and got.unwrap().complete
            assert c._lanes is not None and len(c._lanes.lanes) == 1
            assert c._lanes.lanes[0].requests == 3 and c._lanes.lanes[0].connects == 1
            ran = await c.run_command(runtime_arn=emu.harness_arn, runtime_session_id=SID, command="echo hi")
            assert ran.unwrap().stdout == "hi\n" and c._lanes.lanes[0].requests == 3
        finally:
            await c.aclose()
        assert c._lanes.is_closed and c.http.is_closed


async def test_a_callers_http_client_carries_the_invokes() -> None:
    with AgentCoreEmulator([ace.text_turn("one")]) as emu:
        async with httpx.AsyncClient() as mine:
            c = client(emu, http_client=mine)
            assert c._lanes is None
            assert isinstance(await invoke(c, emu), Success)
            await c.aclose()
            assert not mine.is_closed


async def test_the_idle_timeout_and_the_read_timeout_keep_their_failures() -> None:
    with AgentCoreEmulator([ace.text_turn("x")], faults=[ace.stall(5.0, after=1, times=2)]) as emu:
        idle = client(emu, idle_timeout=0.2)
        read = client(emu, idle_timeout=10.0, read_timeout=0.2)
        try:
            by_idle = (await invoke(idle, emu)).failure()
            by_read = (await invoke(read, emu, sid=SID[:-1] + "x")).failure()
        finally:
            await idle.aclose()
            await read.aclose()
    assert isinstance(by_idle, TransportError) and by_idle.error_type == "timeout"
    assert "idle timeout" in by_idle.detail
    assert isinstance(by_read, StreamDropped) and "ReadTimeout" in by_read.detail


async def test_a_refused_connection_is_a_transport_error_naming_the_host() -> None:
    with AgentCoreEmulator() as emu:
        port = emu.port
    creds = StaticCredentialSource(Credentials("AKID", "secret"), "us-east-1")
    url = f"http://127.0.0.1:{port}"
    c = AgentCoreClient(region="us-east-1", credentials=creds, data_url=url, control_url=url)
    try:
        got = await c.invoke_harness(
            harness_arn="arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h_1-AbCdEfGhIj",
            runtime_session_id=SID,
            body=BODY,
        )
    finally:
        await c.aclose()
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, TransportError) and error.error_type == "econnrefused"
    assert (error.host, error.port) == ("127.0.0.1", port)


async def test_request_telemetry_on_the_lanes() -> None:
    telemetry = Telemetry()
    seen: list[tuple[str, dict[str, Any]]] = []
    telemetry.attach("t", ["rma.agent_core.request.*"], lambda name, m, md: seen.append((name, md)))
    with AgentCoreEmulator([ace.text_turn("x")]) as emu:
        c = client(emu, telemetry=telemetry)
        try:
            assert isinstance(await invoke(c, emu), Success)
        finally:
            await c.aclose()
    assert [name for name, _ in seen] == ["rma.agent_core.request.start", "rma.agent_core.request.stop"]
    assert seen[1][1]["status"] == 200 and seen[1][1]["operation"] == "InvokeHarness"


def _general(message: Message) -> Any:
    """What a frame decodes to through ``classify``, the codec's general path."""
    payload = message.json() if message.payload else Success(None)
    if isinstance(payload, Failure):
        if message.message_type not in ("exception", "error"):
            return ("bad_json", f"{message.event_type or 'event'} frame payload is not JSON")
        payload = Success(message.payload.decode("utf-8", "replace"))
    name = {"exception": message.exception_type, "error": message.error_code}.get(
        message.message_type, message.event_type
    )
    frame = classify(message.message_type, name, payload.unwrap(), message.error_message)
    return ("fault", frame.error_type, frame.message) if isinstance(frame, StreamFault) else frame


def _seen(event: Any) -> Any:
    if isinstance(event, MalformedFrame):
        return ("bad_json", event.detail)
    if isinstance(event, StreamException):
        return ("fault", event.error_type, event.detail)
    return event


@pytest.mark.parametrize(
    ("headers", "payload"),
    [
        ({":message-type": "event", ":event-type": "contentBlockDelta"}, b'{"delta":{"text":"hi"}}'),
        ({":event-type": "messageStart"}, b'{"role":"assistant"}'),  # no :message-type: an event
        ({":message-type": "event", ":event-type": "messageStop"}, b""),
        ({":message-type": "event", ":event-type": "metadata"}, b"null"),
        ({":message-type": "event", ":event-type": "contentBlockDelta"}, b"{not json"),
        ({":message-type": "event", ":event-type": ""}, b"{}"),
        ({":message-type": "event"}, b"{}"),
        ({":message-type": "exception", ":exception-type": "throttlingException"}, b'{"message":"slow"}'),
        ({":message-type": "exception", ":exception-type": "x"}, b"plain text"),
        ({":message-type": "error", ":error-code": "E", ":error-message": "broke"}, b""),
        ({":message-type": "weird", ":event-type": "contentBlockDelta"}, b"{}"),
    ],
)
def test_the_common_frame_decodes_as_the_general_path_does(headers: dict[str, str], payload: bytes) -> None:
    message = Message(headers, payload)
    c = AgentCoreClient(
        region="us-east-1",
        credentials=StaticCredentialSource(Credentials("AKID", "secret")),
        data_url="http://127.0.0.1:9",
        control_url="http://127.0.0.1:9",
        http_client=httpx.AsyncClient(),
    )
    assert _seen(c._event(message, StreamException)) == _general(message)
