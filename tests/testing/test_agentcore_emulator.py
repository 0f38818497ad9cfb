"""The loopback AgentCore emulator speaks the data plane's wire: boto3/botocore 1.44.5 is the oracle."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.auth
import botocore.eventstream
import botocore.exceptions
import botocore.session
import httpx
import pytest
import urllib3.exceptions
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.validate import ParamValidator

from rma_shell.testing import agentcore
from rma_shell.testing.agentcore import (
    STOP_REASONS,
    AgentCoreEmulator,
    Frame,
    SessionView,
    bad_crc_after,
    block_stop,
    drop_after,
    error_once,
    exception_frame,
    hook_event,
    message_start,
    message_stop,
    metadata,
    pause,
    reasoning,
    reused_index_tool_turn,
    server_error_once,
    server_tool_turn,
    stall,
    stop_turn,
    text_delta,
    text_turn,
    throttle_once,
    tool_turn,
    truncate_frame_after,
)

SID = "rma-session-0123456789abcdef0123456789"
SID2 = "rma-session-fedcba9876543210fedcba9876"


def client(emu: AgentCoreEmulator, *, attempts: int = 1, read_timeout: float = 10, **kwargs: Any) -> Any:
    config = Config(retries={"total_max_attempts": attempts}, read_timeout=read_timeout, connect_timeout=5)
    session = boto3.session.Session(
        aws_access_key_id=kwargs.pop("aws_access_key_id", emu.access_key_id),
        aws_secret_access_key=kwargs.pop("aws_secret_access_key", emu.secret_access_key),
        aws_session_token=kwargs.pop("aws_session_token", emu.session_token),
        region_name=kwargs.pop("region_name", emu.region),
    )
    return session.client("bedrock-agentcore", endpoint_url=emu.base_url, config=config)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"text": text}]}


def resume(uses: list[tuple[str, str, Any]], results: list[str] | None = None) -> list[dict[str, Any]]:
    """The B-6 resume: the assistant toolUse echo, then one toolResult per id."""
    echo = [{"toolUse": {"toolUseId": i, "name": n, "input": inp}} for i, n, inp in uses]
    ids = results if results is not None else [i for i, _, _ in uses]
    answers = [
        {"toolResult": {"toolUseId": i, "content": [{"text": "ok"}], "status": "success"}} for i in ids
    ]
    return [{"role": "assistant", "content": echo}, {"role": "user", "content": answers}]


def invoke(
    sdk: Any, emu: AgentCoreEmulator, messages: list[dict[str, Any]], sid: str = SID, **kw: Any
) -> Any:
    reply = sdk.invoke_harness(harnessArn=emu.harness_arn, runtimeSessionId=sid, messages=messages, **kw)
    return list(reply["stream"])


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [next(iter(e)) for e in events]


def command(sdk: Any, emu: AgentCoreEmulator, cmd: str, sid: str = SID, **body: Any) -> list[dict[str, Any]]:
    reply = sdk.invoke_agent_runtime_command(
        agentRuntimeArn=emu.harness_arn, runtimeSessionId=sid, body={"command": cmd, **body}
    )
    return [e["chunk"] for e in reply["stream"]]


def output(chunks: list[dict[str, Any]], stream: str) -> str:
    return "".join(c["contentDelta"].get(stream, "") for c in chunks if "contentDelta" in c)


# -- InvokeHarness: turns, sessions, resume ------------------------------------------------


def test_text_turn_streams_converse_events_boto3_parses() -> None:
    with AgentCoreEmulator(script=[text_turn("Hello there!", usage={"inputTokens": 7})]) as emu:
        events = invoke(client(emu), emu, [user("Hi")])
        recorded = emu.requests[0]
        view = emu.sessions[SID]
    assert kinds(events) == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert text_of(events) == "Hello there!"
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    assert events[-1]["metadata"] == {
        "usage": {"inputTokens": 7, "outputTokens": 5, "totalTokens": 12},
        "metrics": {"latencyMs": 120},
    }
    assert recorded.path.startswith("/harnesses/invoke?harnessArn=arn%3Aaws%3Abedrock-agentcore%3A")
    assert recorded.headers["x-amzn-bedrock-agentcore-runtime-session-id"] == SID
    assert recorded.body == {"messages": [user("Hi")]}
    assert view.messages == (user("Hi"), {"role": "assistant", "content": [{"text": "Hello there!"}]})
    assert view.turns_played == 1 and view.pending_tool_uses == ()


def test_harness_arn_is_realistic() -> None:
    emu = AgentCoreEmulator(harness_name="billing_support")
    assert (
        emu.harness_id.startswith("billing_support-") and len(emu.harness_id) == len("billing_support-") + 10
    )
    assert emu.harness_arn == f"arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/{emu.harness_id}"


def test_tool_turn_then_correct_resume_continues_the_conversation() -> None:
    script = [tool_turn(("lookup", {"id": "c9"}, "tooluse_a1"), text="Let me check."), text_turn("Found it.")]
    with AgentCoreEmulator(script=script) as emu:
        sdk = client(emu)
        first = invoke(sdk, emu, [user("Find c9")])
        pending = emu.sessions[SID].pending_tool_uses
        second = invoke(sdk, emu, resume([("tooluse_a1", "lookup", {"id": "c9"})]))
        view = emu.sessions[SID]
    starts = [e["contentBlockStart"] for e in first if "contentBlockStart" in e]
    assert starts == [
        {
            "contentBlockIndex": 1,
            "start": {"toolUse": {"toolUseId": "tooluse_a1", "name": "lookup", "type": "tool_use"}},
        }
    ]
    fragments = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in first
        if "toolUse" in e.get("contentBlockDelta", {}).get("delta", {})
    ]
    assert len(fragments) > 1 and "".join(fragments) == '{"id":"c9"}'
    assert first[-2:] == [{"messageStop": {"stopReason": "tool_use"}}, first[-1]] and "metadata" in first[-1]
    assert pending == ({"toolUseId": "tooluse_a1", "name": "lookup", "input": {"id": "c9"}},)
    assert text_of(second) == "Found it."
    # The uncommitted tool-use turn is not kept; the echo the client sent is.
    assert [m["role"] for m in view.messages] == ["user", "assistant", "user", "assistant"]
    assert view.messages[1]["content"][0]["toolUse"]["toolUseId"] == "tooluse_a1"
    assert view.pending_tool_uses == ()


def test_resume_without_the_echo_is_refused_like_the_service_and_does_not_consume_the_turn() -> None:
    script = [tool_turn(("lookup", {"id": "c9"}, "tooluse_a1")), text_turn("Found it.")]
    with AgentCoreEmulator(script=script) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("Find c9")])
        only_results = resume([("tooluse_a1", "lookup", {"id": "c9"})])[1:]
        with pytest.raises(botocore.exceptions.EventStreamError) as refused:
            invoke(sdk, emu, [only_results[0]])
        retried = invoke(sdk, emu, resume([("tooluse_a1", "lookup", {"id": "c9"})]))
    error = refused.value.response["Error"]
    assert error["Code"] == "runtimeClientError"
    assert "ValidationException" in error["Message"]
    assert (
        "The number of toolResult blocks at messages.1.content exceeds the number of toolUse blocks"
        in (error["Message"])
    )
    assert text_of(retried) == "Found it."


def test_resume_with_an_echo_that_differs_from_the_tool_use_is_refused() -> None:
    script = [tool_turn(("lookup", {"id": "c9"}, "tooluse_a1")), text_turn("Found it.")]
    with AgentCoreEmulator(script=script) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("Find c9")])
        with pytest.raises(botocore.exceptions.EventStreamError) as refused:
            invoke(sdk, emu, resume([("tooluse_a1", "lookup", {})]))
    assert refused.value.response["Error"]["Code"] == "runtimeClientError"
    assert "must echo exactly the toolUse blocks of the previous turn" in str(refused.value)


def test_duplicate_result_ids_are_refused() -> None:
    script = [tool_turn(("lookup", {"id": "c9"}, "tooluse_a1")), text_turn("Found it.")]
    with AgentCoreEmulator(script=script) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("Find c9")])
        with pytest.raises(botocore.exceptions.EventStreamError) as refused:
            invoke(sdk, emu, resume([("tooluse_a1", "lookup", {"id": "c9"})], ["tooluse_a1", "tooluse_a1"]))
    assert "duplicate Ids at messages.2.content" in str(refused.value)


def test_reused_index_tool_turn_needs_both_tools_answered() -> None:
    script = [
        reused_index_tool_turn(("a", {"x": 1}, "tooluse_A"), ("b", {"y": 2}, "tooluse_B")),
        text_turn("ok"),
    ]
    uses = [("tooluse_A", "a", {"x": 1}), ("tooluse_B", "b", {"y": 2})]
    with AgentCoreEmulator(script=script) as emu:
        sdk = client(emu)
        first = invoke(sdk, emu, [user("go")])
        with pytest.raises(botocore.exceptions.EventStreamError) as missing:
            invoke(sdk, emu, resume(uses, ["tooluse_A"]))
        done = invoke(sdk, emu, resume(uses))
    starts = [e["contentBlockStart"] for e in first if "contentBlockStart" in e]
    assert [(s["contentBlockIndex"], s["start"]["toolUse"]["toolUseId"]) for s in starts] == [
        (0, "tooluse_A"),
        (0, "tooluse_B"),
    ]
    assert "Expected toolResult blocks at messages.2.content for the following Ids: tooluse_B" in str(
        missing.value
    )
    assert text_of(done) == "ok"


def test_server_tool_turn_and_other_events_parse_and_need_no_resume() -> None:
    rich = [
        message_start(),
        hook_event("audit", "before_invocation", decision="allow", reason="fine"),
        *reasoning("Thinking it over.", signature="sig-1"),
        text_delta("Answer.", index=1),
        block_stop(1),
        message_stop("end_turn"),
        metadata({"cacheReadInputTokens": 3}),
    ]
    script = [server_tool_turn("shell", {"cmd": "ls"}, "a.txt", server_name="builtin"), rich]
    with AgentCoreEmulator(script=script) as emu:
        sdk = client(emu)
        first = invoke(sdk, emu, [user("list files")])
        second = invoke(sdk, emu, [user("and then?")])
        view = emu.sessions[SID]
    stops = [e["messageStop"]["stopReason"] for e in first if "messageStop" in e]
    assert stops == ["tool_use", "tool_result", "end_turn"]
    tool_start = next(e["contentBlockStart"]["start"]["toolUse"] for e in first if "contentBlockStart" in e)
    assert tool_start["type"] == "server_tool_use" and tool_start["serverName"] == "builtin"
    result_delta = [e for e in first if "toolResult" in e.get("contentBlockDelta", {}).get("delta", {})]
    assert result_delta[0]["contentBlockDelta"]["delta"]["toolResult"] == [{"text": "a.txt"}]
    assert "hookEvent" in kinds(second)
    assert second[1]["hookEvent"]["decision"] == "allow"
    reasoning_deltas = [
        e for e in second if "reasoningContent" in e.get("contentBlockDelta", {}).get("delta", {})
    ]
    assert reasoning_deltas[-1]["contentBlockDelta"]["delta"]["reasoningContent"] == {"signature": "sig-1"}
    assert second[-1]["metadata"]["usage"]["cacheReadInputTokens"] == 3
    assert [m["role"] for m in view.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_every_stop_reason_of_the_model_can_be_scripted() -> None:
    enum = (
        botocore.session.get_session()
        .get_service_model("bedrock-agentcore")
        .shape_for("HarnessStopReason")
        .enum
    )
    assert frozenset(enum) == STOP_REASONS
    reasons = sorted(STOP_REASONS - {"tool_use"})
    with AgentCoreEmulator(script=[stop_turn(r, text="x") for r in reasons]) as emu:
        sdk = client(emu)
        seen = [
            invoke(sdk, emu, [user(f"turn {i}")])[-2]["messageStop"]["stopReason"]
            for i in range(len(reasons))
        ]
    assert seen == reasons
    with pytest.raises(ValueError, match="unknown stopReason"):
        stop_turn("guardrail")


def test_builders_emit_payloads_the_model_accepts() -> None:
    stream = (
        botocore.session.get_session()
        .get_service_model("bedrock-agentcore")
        .shape_for("InvokeHarnessStreamOutput")
    )
    frames: list[Frame] = [
        *text_turn("hi"),
        *tool_turn(("t", {"a": [1, 2]}), text="x"),
        *server_tool_turn("shell", {}, {"rows": 2}),
        *reused_index_tool_turn(("a", {}), ("b", {}), indices=(0, 0)),
        hook_event("h", "after_tool_call"),
        *reasoning("r", signature="s"),
    ]
    for item in frames:
        report = ParamValidator().validate(item.payload, stream.members[item.name])
        assert not report.has_errors(), (item, report.generate_report())


def test_a_callable_turn_sees_the_session_and_the_request_and_streams_as_it_yields() -> None:
    seen: list[tuple[SessionView, dict[str, Any]]] = []
    first_frame_read = threading.Event()

    def turn(view: SessionView, body: dict[str, Any]) -> Iterator[Frame]:
        seen.append((view, body))
        yield message_start()
        yield text_delta("early ")
        # Only a server that flushes each frame lets the client read it while we wait here.
        yield text_delta("late" if first_frame_read.wait(5) else "BUFFERED")
        yield block_stop(0)
        yield message_stop("end_turn")
        yield metadata()

    with AgentCoreEmulator(script=[text_turn("first"), turn]) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("one")])
        reply = sdk.invoke_harness(
            harnessArn=emu.harness_arn, runtimeSessionId=SID, messages=[user("two")], maxIterations=5
        )
        events = []
        for event in reply["stream"]:
            events.append(event)
            if text_of(events) == "early ":
                first_frame_read.set()
    assert text_of(events) == "early late"
    view, body = seen[0]
    assert view.turns_played == 1
    assert view.messages[-1] == user("two") and len(view.messages) == 3
    assert body["maxIterations"] == 5


def test_running_past_the_script_says_so() -> None:
    with AgentCoreEmulator(script=[text_turn("only")]) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("one")])
        with pytest.raises(botocore.exceptions.ClientError) as exhausted:
            invoke(sdk, emu, [user("two")])
    assert exhausted.value.response["Error"]["Code"] == "EmulatorScriptExhausted"
    assert "no scripted turn left" in exhausted.value.response["Error"]["Message"]


def test_roles_must_alternate_across_the_stored_conversation() -> None:
    with AgentCoreEmulator(script=[text_turn("a"), text_turn("b")]) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("one")])
        with pytest.raises(botocore.exceptions.EventStreamError) as refused:
            invoke(sdk, emu, [{"role": "assistant", "content": [{"text": "me again"}]}, user("two")])
    assert "must alternate between user and assistant roles" in str(refused.value)


def test_sessions_are_independent_and_reset_starts_afresh() -> None:
    with AgentCoreEmulator(script=[text_turn("first"), text_turn("second")]) as emu:
        sdk = client(emu)
        assert text_of(invoke(sdk, emu, [user("a")], SID)) == "first"
        assert text_of(invoke(sdk, emu, [user("a")], SID2)) == "first"
        emu.script_session(SID2, [text_turn("own")])
        assert text_of(invoke(sdk, emu, [user("b")], SID2)) == "own"
        emu.reset_session(SID)
        assert SID not in emu.sessions
        assert text_of(invoke(sdk, emu, [user("again")], SID)) == "first"


def test_two_sessions_play_at_the_same_time_and_one_session_plays_one_turn_at_a_time() -> None:
    barrier = threading.Barrier(2, timeout=5)
    inside = threading.Event()
    release = threading.Event()

    def meet(view: SessionView, body: dict[str, Any]) -> list[Frame]:
        barrier.wait()  # both sessions must be inside a turn at once
        return text_turn(view.id[-4:])

    def hold(view: SessionView, body: dict[str, Any]) -> Iterator[Frame]:
        yield message_start()
        inside.set()
        release.wait(5)
        yield from text_turn("held")[1:]

    with AgentCoreEmulator(script=[meet, hold]) as emu:
        results: dict[str, str] = {}

        def run(sid: str) -> None:
            results[sid] = text_of(invoke(client(emu), emu, [user("hi")], sid))

        threads = [threading.Thread(target=run, args=(sid,)) for sid in (SID, SID2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert results == {SID: SID[-4:], SID2: SID2[-4:]}

        sdk = client(emu)
        held = threading.Thread(target=lambda: results.update(held=text_of(invoke(sdk, emu, [user("x")]))))
        held.start()
        assert inside.wait(5)
        with pytest.raises(botocore.exceptions.ClientError) as busy:
            invoke(client(emu), emu, [user("y")])
        release.set()
        held.join(10)
    assert busy.value.response["Error"]["Code"] == "RuntimeClientError"
    assert busy.value.response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert results["held"] == "held"


# -- Validation -----------------------------------------------------------------------------


def test_session_id_pattern_is_checked_server_side() -> None:
    with (
        AgentCoreEmulator(script=[text_turn("x")]) as emu,
        pytest.raises(botocore.exceptions.ClientError) as refused,
    ):
        invoke(client(emu), emu, [user("hi")], sid="rma.session.0123456789abcdef0123456789ab")
    response = refused.value.response
    assert response["Error"]["Code"] == "ValidationException"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert response["reason"] == "FieldValidationFailed"
    assert [f["name"] for f in response["fieldList"]] == ["runtimeSessionId"]
    assert "Member must satisfy regular expression pattern" in response["Error"]["Message"]


def test_qualifier_and_harness_must_exist() -> None:
    with AgentCoreEmulator(script=[text_turn("x")], endpoints=("DEFAULT", "canary")) as emu:
        sdk = client(emu)
        with pytest.raises(botocore.exceptions.ClientError) as bad_pattern:
            invoke(sdk, emu, [user("hi")], qualifier="1bad")
        with pytest.raises(botocore.exceptions.ClientError) as unknown_endpoint:
            invoke(sdk, emu, [user("hi")], qualifier="other")
        other = emu.harness_arn.rsplit("-", 1)[0] + "-ZZZZZZZZZZ"
        with pytest.raises(botocore.exceptions.ClientError) as unknown_harness:
            list(sdk.invoke_harness(harnessArn=other, runtimeSessionId=SID, messages=[user("hi")])["stream"])
        assert text_of(invoke(sdk, emu, [user("hi")], qualifier="canary")) == "x"
    assert bad_pattern.value.response["fieldList"][0]["name"] == "qualifier"
    assert unknown_endpoint.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert unknown_harness.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert unknown_harness.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def signed_post(
    monkeypatch: pytest.MonkeyPatch,
    emu: AgentCoreEmulator,
    url: str,
    body: bytes,
    *,
    headers: dict[str, str] | None = None,
    when: datetime | None = None,
    secret: str | None = None,
    access_key: str | None = None,
    token: str | None = None,
    sign_url: str | None = None,
    signer: type[SigV4Auth] = SigV4Auth,
    edit: Any = None,
) -> httpx.Response:
    """Sign with botocore (at ``when``) and send with httpx, path bytes untouched."""
    at = (when or datetime.now(UTC)).replace(tzinfo=None)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: at)
    request = AWSRequest(method="POST", url=sign_url or url, data=body, headers=headers or {})
    credentials = Credentials(access_key or emu.access_key_id, secret or emu.secret_access_key, token)
    signer(credentials, "bedrock-agentcore", emu.region).add_auth(request)
    sent = dict(request.headers.items())
    return httpx.post(url, content=body, headers=edit(sent) if edit else sent)


def invoke_url(emu: AgentCoreEmulator) -> str:
    arn = emu.harness_arn.replace(":", "%3A").replace("/", "%2F")
    return f"{emu.base_url}/harnesses/invoke?harnessArn={arn}"


JSON_SESSION = {"Content-Type": "application/json", "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": SID}


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        (
            b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}], "systemPrompt": null}',
            "systemPrompt",
            "Member must not be null",
        ),
        (
            b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}], "maxIterations": true}',
            "maxIterations",
            "Member must be a number",
        ),
        (
            b'{"messages": [{"role": "robot", "content": [{"text": "hi"}]}]}',
            "messages.0.role",
            "Member must satisfy enum value set",
        ),
        (
            b'{"messages": [{"role": "user", "content": [{"text": "hi", "toolUse": {}}]}]}',
            "messages.0.content.0",
            "tagged union",
        ),
        (
            b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}], "temperature": 1}',
            "input",
            'Unknown parameter in input: "temperature"',
        ),
        (b'{"model": {"bedrockModelConfig": {"modelId": "m"}}}', "messages", "Member must not be null"),
    ],
)
def test_body_is_validated_against_the_model(
    monkeypatch: pytest.MonkeyPatch, body: bytes, field: str, text: str
) -> None:
    with AgentCoreEmulator(script=[text_turn("x")]) as emu:
        response = signed_post(monkeypatch, emu, invoke_url(emu), body, headers=JSON_SESSION)
    assert response.status_code == 400
    assert response.headers["x-amzn-ErrorType"] == "ValidationException"
    data = response.json()
    assert data["reason"] == "FieldValidationFailed"
    assert field in [f["name"] for f in data["fieldList"]]
    assert text in data["message"]


def test_a_body_that_is_not_json_cannot_be_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    with AgentCoreEmulator(script=[text_turn("x")]) as emu:
        response = signed_post(monkeypatch, emu, invoke_url(emu), b"{not json", headers=JSON_SESSION)
    assert response.status_code == 400
    assert response.json()["reason"] == "CannotParse"


def test_a_short_session_id_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    headers = {**JSON_SESSION, "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": "short"}
    with AgentCoreEmulator(script=[text_turn("x")]) as emu:
        body = b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}]}'
        response = signed_post(monkeypatch, emu, invoke_url(emu), body, headers=headers)
    assert response.status_code == 400
    assert "Member must have length greater than or equal to 33" in response.json()["message"]


# -- SigV4 ----------------------------------------------------------------------------------

VECTOR_CLOCK = datetime(2026, 8, 1, 12, 0, 0, tzinfo=UTC)
VECTOR_HEADERS = {
    "Host": "bedrock-agentcore.us-east-1.amazonaws.com",
    "Content-Type": "application/json",
    "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": "rma-session-0123456789abcdef0123456789",
    "X-Amz-Date": "20260801T120000Z",
    "X-Amz-Security-Token": "EXAMPLE-SESSION-TOKEN",
}
VECTOR_SIGNED = (
    "content-type;host;x-amz-date;x-amz-security-token;x-amzn-bedrock-agentcore-runtime-session-id"
)


def vector_emulator(script: list[Any] | None = None) -> AgentCoreEmulator:
    return AgentCoreEmulator(
        script=script or [text_turn("vector")],
        access_key_id="AKIDEXAMPLE",
        secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        session_token="EXAMPLE-SESSION-TOKEN",
        clock=lambda: VECTOR_CLOCK,
        harness_id="billing_support_1a2b3c4d-AbCdEfGhIj",
        runtime_id="billing_support_1a2b3c4d-AbCdEfGhIj",
    )


def authorization(signature: str, signed: str = VECTOR_SIGNED) -> str:
    scope = "AKIDEXAMPLE/20260801/us-east-1/bedrock-agentcore/aws4_request"
    return f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders={signed}, Signature={signature}"


def test_the_wire_reference_invoke_vector_is_accepted_in_both_signer_shapes() -> None:
    body = (
        b'{"messages": [{"role": "user", "content": [{"text": "Hi"}]}], "timeoutSeconds": 900, '
        b'"maxIterations": 40, "maxTokens": 4096}'
    )
    sha = "b08a98827985829e3fdb39010adbb8c4a55d7b0bcc2af034704dc7a7fa32d695"
    botocore_shape = {
        **VECTOR_HEADERS,
        "Authorization": authorization("99355edaa310f6fbee49af6e4ddc3ea47922206c777f69fbbb849022e77072b5"),
    }
    reference_shape = {
        **VECTOR_HEADERS,
        "x-amz-content-sha256": sha,
        # The reference signer separates the parts with "," and no space.
        "Authorization": authorization(
            "baa560342c3d28590b4db34305422fc71136156b65fa4c08dc0173d9118254f3",
            "content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token;"
            "x-amzn-bedrock-agentcore-runtime-session-id",
        ).replace(", ", ","),
    }
    with vector_emulator([text_turn("one"), text_turn("two")]) as emu:
        url = f"{emu.base_url}/harnesses/invoke?harnessArn=" + (
            "arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A123456789012%3Aharness%2F"
            "billing_support_1a2b3c4d-AbCdEfGhIj&qualifier=DEFAULT"
        )
        first = httpx.post(url, content=body, headers=botocore_shape)
        second = httpx.post(url, content=body, headers=reference_shape)
        tampered = httpx.post(url, content=body.replace(b"900", b"901"), headers=botocore_shape)
        wrong_hash = httpx.post(
            url, content=body, headers={**reference_shape, "x-amz-content-sha256": "0" * 64}
        )
    for accepted in (first, second):
        assert accepted.status_code == 200, accepted.text
        assert accepted.headers["content-type"] == "application/vnd.amazon.eventstream"
    assert tampered.status_code == 403
    assert tampered.headers["x-amzn-ErrorType"] == "InvalidSignatureException"
    assert "The Canonical String for this request should have been" in tampered.json()["message"]
    assert wrong_hash.status_code == 403
    assert "x-amz-content-sha256" in wrong_hash.json()["message"]


def test_the_command_vector_is_verified_over_the_double_encoded_path() -> None:
    body = b'{"command": "ls /mnt/data", "timeout": 60}'
    path = (
        "/runtimes/arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A123456789012%3Aruntime%2F"
        "billing_support_1a2b3c4d-AbCdEfGhIj/commands"
    )
    headers = {
        **VECTOR_HEADERS,
        "Authorization": authorization("2c5d48e9ff0ba4d76ac6ec835c6b56bca6fe5cbb7144c4801a6256227481629a"),
    }
    with vector_emulator() as emu:
        (
            emu.storage_dir(VECTOR_HEADERS["X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"]) / "report.txt"
        ).write_text("x")
        response = httpx.post(emu.base_url + path, content=body, headers=headers)
        assert emu.requests[-1].path == path
    assert response.status_code == 200, response.text
    decoder = botocore.eventstream.EventStreamBuffer()
    decoder.add_data(response.content)
    payloads = [message.payload for message in decoder]
    assert payloads[1] == b'{"contentDelta":{"stdout":"report.txt\\n"}}'
    assert payloads[-1] == b'{"contentStop":{"exitCode":0,"status":"COMPLETED"}}'


def test_a_signature_over_a_single_encoded_path_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    with AgentCoreEmulator() as emu:
        wire = f"{emu.base_url}/runtimes/{emu.harness_arn.replace(':', '%3A').replace('/', '%2F')}/commands"
        # Signing the decoded label encodes it once: %3A in the canonical URI instead of %253A.
        single = f"{emu.base_url}/runtimes/{emu.harness_arn.replace('/', '%2F')}/commands"
        body = b'{"command": "true"}'
        response = signed_post(monkeypatch, emu, wire, body, headers=JSON_SESSION, sign_url=single)
        good = signed_post(monkeypatch, emu, wire, body, headers=JSON_SESSION)
    assert response.status_code == 403
    assert response.headers["x-amzn-ErrorType"] == "InvalidSignatureException"
    assert good.status_code == 200


@pytest.mark.parametrize(
    ("kwargs", "code", "text"),
    [
        ({"secret": "not-the-secret"}, "InvalidSignatureException", "does not match"),
        ({"access_key": "AKIDUNKNOWN"}, "UnrecognizedClientException", "security token"),
        (
            {"when": timedelta(minutes=-10)},
            "InvalidSignatureException",
            "Signature expired",
        ),
        ({"when": timedelta(minutes=10)}, "InvalidSignatureException", "not yet current"),
        ({"token": "unexpected"}, "UnrecognizedClientException", "security token"),
    ],
)
def test_bad_credentials_are_refused_with_403(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], code: str, text: str
) -> None:
    if "when" in kwargs:  # an offset from the moment of signing, not from collection time
        kwargs = {**kwargs, "when": datetime.now(UTC) + kwargs["when"]}
    with AgentCoreEmulator(script=[text_turn("x")]) as emu:
        body = b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}]}'
        response = signed_post(monkeypatch, emu, invoke_url(emu), body, headers=JSON_SESSION, **kwargs)
    assert response.status_code == 403
    assert response.headers["x-amzn-ErrorType"] == code
    assert text in response.json()["message"]


class SigningUserAgent(SigV4Auth):  # type: ignore[misc]
    """A signer that also signs ``user-agent`` (botocore never does; AWS accepts it)."""

    def headers_to_sign(self, request: Any) -> Any:
        headers = super().headers_to_sign(request)
        headers["user-agent"] = request.headers["User-Agent"]
        return headers


def test_any_signed_header_set_that_matches_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    headers = {**JSON_SESSION, "User-Agent": "rma-test/1"}
    with AgentCoreEmulator(script=[text_turn("x")]) as emu:
        body = b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}]}'
        response = signed_post(
            monkeypatch, emu, invoke_url(emu), body, headers=headers, signer=SigningUserAgent
        )
    assert response.status_code == 200, response.text
    assert "user-agent" in emu.requests[0].headers["authorization"]


def test_an_unsigned_date_or_a_wrong_media_type_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def unsign_date(headers: dict[str, str]) -> dict[str, str]:
        headers["Authorization"] = headers["Authorization"].replace("x-amz-date;", "")
        return headers

    body = b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}]}'
    with AgentCoreEmulator(script=[text_turn("x")]) as emu:
        unsigned = signed_post(
            monkeypatch, emu, invoke_url(emu), body, headers=JSON_SESSION, edit=unsign_date
        )
        as_text = {**JSON_SESSION, "Content-Type": "text/plain"}
        wrong_type = signed_post(monkeypatch, emu, invoke_url(emu), body, headers=as_text)
    assert unsigned.status_code == 403
    assert unsigned.headers["x-amzn-ErrorType"] == "IncompleteSignatureException"
    assert wrong_type.status_code == 415


def test_missing_authorization_is_refused() -> None:
    with AgentCoreEmulator() as emu:
        response = httpx.post(invoke_url(emu), content=b"{}", headers=JSON_SESSION)
    assert response.status_code == 403
    assert response.headers["x-amzn-ErrorType"] == "MissingAuthenticationTokenException"


def test_boto3_sees_signature_errors_as_client_errors() -> None:
    with AgentCoreEmulator(script=[text_turn("x")], session_token="tok-1") as emu:
        with pytest.raises(botocore.exceptions.ClientError) as no_token:
            invoke(client(emu, aws_session_token=None), emu, [user("hi")])
        with pytest.raises(botocore.exceptions.ClientError) as wrong_region:
            invoke(client(emu, region_name="us-west-2"), emu, [user("hi")])
        assert text_of(invoke(client(emu), emu, [user("hi")])) == "x"
    assert no_token.value.response["Error"]["Code"] == "UnrecognizedClientException"
    assert wrong_region.value.response["Error"]["Message"] == "Credential should be scoped to a valid region."


def test_credentials_env_points_boto3_at_the_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    with AgentCoreEmulator(script=[text_turn("from env")], session_token="tok-2") as emu:
        for name, value in emu.credentials_env().items():
            monkeypatch.setenv(name, value)
        sdk = boto3.session.Session().client("bedrock-agentcore")
        assert text_of(invoke(sdk, emu, [user("hi")])) == "from env"


# -- Faults ---------------------------------------------------------------------------------


def test_throttling_is_retried_by_boto3_and_surfaces_when_retries_run_out() -> None:
    with AgentCoreEmulator(script=[text_turn("after retry")], faults=[throttle_once()]) as emu:
        assert text_of(invoke(client(emu, attempts=3), emu, [user("hi")])) == "after retry"
        assert len(emu.requests) == 2
    with (
        AgentCoreEmulator(script=[text_turn("x")], faults=[throttle_once()]) as emu,
        pytest.raises(botocore.exceptions.ClientError) as throttled,
    ):
        invoke(client(emu), emu, [user("hi")])
    assert throttled.value.response["Error"]["Code"] == "ThrottlingException"
    assert throttled.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429


def test_server_errors_and_any_modeled_error_can_be_injected() -> None:
    faults = [
        server_error_once(),
        error_once(409, "RetryableConflictException", operation="InvokeAgentRuntimeCommand"),
    ]
    with AgentCoreEmulator(script=[text_turn("x")], faults=faults) as emu:
        sdk = client(emu)
        with pytest.raises(botocore.exceptions.ClientError) as server:
            invoke(sdk, emu, [user("hi")])
        with pytest.raises(botocore.exceptions.ClientError) as conflict:
            command(sdk, emu, "true")
        assert text_of(invoke(sdk, emu, [user("hi")])) == "x"
    assert server.value.response["Error"]["Code"] == "InternalServerException"
    assert server.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert conflict.value.response["Error"]["Code"] == "RetryableConflictException"


def test_a_dropped_or_truncated_stream_breaks_the_read_and_the_turn_replays() -> None:
    for fault in (drop_after(2), truncate_frame_after(2)):
        with AgentCoreEmulator(script=[text_turn("whole turn")], faults=[fault]) as emu:
            sdk = client(emu)
            got: list[Any] = []
            with pytest.raises(urllib3.exceptions.ProtocolError):
                for event in sdk.invoke_harness(
                    harnessArn=emu.harness_arn, runtimeSessionId=SID, messages=[user("hi")]
                )["stream"]:
                    got.append(event)
            assert kinds(got) == ["messageStart", "contentBlockDelta"]
            assert text_of(invoke(sdk, emu, [user("hi")])) == "whole turn"


def test_a_bad_crc_raises_in_botocore() -> None:
    with (
        AgentCoreEmulator(script=[text_turn("x")], faults=[bad_crc_after(1)]) as emu,
        pytest.raises(botocore.eventstream.ChecksumMismatch),
    ):
        invoke(client(emu), emu, [user("hi")])


def test_exception_frames_raise_event_stream_errors_for_times_requests() -> None:
    faults = [exception_frame("internalServerException", "model overloaded", after=1, times=2)]
    with AgentCoreEmulator(script=[text_turn("finally")], faults=faults) as emu:
        sdk = client(emu)
        for _ in range(2):
            with pytest.raises(botocore.exceptions.EventStreamError) as failed:
                invoke(sdk, emu, [user("hi")])
            assert failed.value.response["Error"] == {
                "Code": "internalServerException",
                "Message": "model overloaded",
            }
        assert text_of(invoke(sdk, emu, [user("hi")])) == "finally"


def test_faults_can_target_one_session() -> None:
    with AgentCoreEmulator(script=[text_turn("fine")]) as emu:
        emu.inject(exception_frame("runtimeClientError", "only you"), session_id=SID2)
        sdk = client(emu)
        assert text_of(invoke(sdk, emu, [user("hi")], SID)) == "fine"
        with pytest.raises(botocore.exceptions.EventStreamError) as failed:
            invoke(sdk, emu, [user("hi")], SID2)
    assert failed.value.response["Error"]["Code"] == "runtimeClientError"


def test_a_stall_times_out_the_reader_without_holding_up_close() -> None:
    with (
        AgentCoreEmulator(script=[text_turn("slow")], faults=[stall(600, after=1)]) as emu,
        pytest.raises(urllib3.exceptions.ReadTimeoutError),
    ):
        invoke(client(emu, read_timeout=0.5), emu, [user("hi")])
    # Reaching this line means close() returned while the stall was still "running".


def test_a_short_stall_or_pause_still_delivers_the_turn() -> None:
    slow = [message_start(), pause(0.05), *text_turn("late")[1:]]
    with AgentCoreEmulator(script=[slow, text_turn("next")], faults=[stall(0.1, after=2)]) as emu:
        sdk = client(emu)
        assert text_of(invoke(sdk, emu, [user("hi")])) == "late"
        assert text_of(invoke(sdk, emu, [user("more")])) == "next"


# -- InvokeAgentRuntimeCommand --------------------------------------------------------------


def test_command_streams_stdout_stderr_and_exit_code() -> None:
    with AgentCoreEmulator() as emu:
        chunks = command(client(emu), emu, "printf out; printf err >&2; exit 7")
    assert chunks[0] == {"contentStart": {}}
    assert output(chunks, "stdout") == "out"
    assert output(chunks, "stderr") == "err"
    assert chunks[-1] == {"contentStop": {"exitCode": 7, "status": "COMPLETED"}}


def test_command_over_its_timeout_is_killed_and_reported_timed_out() -> None:
    with AgentCoreEmulator() as emu:
        chunks = command(client(emu), emu, "echo started; sleep 30", timeout=1)
    assert output(chunks, "stdout") == "started\n"
    assert chunks[-1] == {"contentStop": {"exitCode": -1, "status": "TIMED_OUT"}}


def test_a_command_killed_by_a_signal_reports_128_plus_the_signal() -> None:
    with AgentCoreEmulator() as emu:
        chunks = command(client(emu), emu, "kill -9 $$")
    assert chunks[-1] == {"contentStop": {"exitCode": 137, "status": "COMPLETED"}}


def test_mount_path_maps_to_the_session_storage_which_persists_across_commands() -> None:
    with AgentCoreEmulator(mount_path="/mnt/work") as emu:
        sdk = client(emu)
        command(sdk, emu, "echo hello > /mnt/work/note.txt")
        again = command(sdk, emu, "cat /mnt/work/note.txt; pwd")
        other = command(sdk, emu, "ls /mnt/work | wc -l", sid=SID2)
        storage = emu.storage_dir(SID)
        workdir = emu.workdir(SID)
        assert (storage / "note.txt").read_text() == "hello\n"
        view = emu.sessions[SID]
    assert output(again, "stdout") == f"hello\n{workdir}\n"
    assert output(other, "stdout").strip() == "0"
    assert view.commands == ("echo hello > /mnt/work/note.txt", "cat /mnt/work/note.txt; pwd")
    assert not Path(storage).exists()  # removed on close


def test_command_output_streams_while_the_command_runs() -> None:
    with AgentCoreEmulator() as emu:
        sdk = client(emu)
        go = emu.workdir(SID) / "go"
        reply = sdk.invoke_agent_runtime_command(
            agentRuntimeArn=emu.harness_arn,
            runtimeSessionId=SID,
            body={"command": "echo ready; while [ ! -f go ]; do sleep 0.02; done; echo done", "timeout": 10},
        )
        chunks = []
        for event in reply["stream"]:
            chunks.append(event["chunk"])
            if output(chunks, "stdout") == "ready\n":
                go.touch()
    assert output(chunks, "stdout") == "ready\ndone\n"
    assert chunks[-1]["contentStop"]["status"] == "COMPLETED"


def test_command_targets_harness_or_runtime_and_validates_its_body() -> None:
    with AgentCoreEmulator() as emu:
        sdk = client(emu)
        by_runtime = sdk.invoke_agent_runtime_command(
            agentRuntimeArn=emu.runtime_arn, runtimeSessionId=SID, body={"command": "echo rt"}
        )
        assert output([e["chunk"] for e in by_runtime["stream"]], "stdout") == "rt\n"
        by_id = sdk.invoke_agent_runtime_command(
            agentRuntimeArn=emu.harness_id,
            accountId=emu.account,
            runtimeSessionId=SID,
            body={"command": "true"},
        )
        assert list(by_id["stream"])[-1]["chunk"]["contentStop"] == {"exitCode": 0, "status": "COMPLETED"}
        with pytest.raises(botocore.exceptions.ClientError) as unknown:
            sdk.invoke_agent_runtime_command(
                agentRuntimeArn=emu.harness_arn + "x", runtimeSessionId=SID, body={"command": "true"}
            )
        with pytest.raises(botocore.exceptions.ClientError) as zero_timeout:
            command(sdk, emu, "true", timeout=0)
        with pytest.raises(botocore.exceptions.ClientError) as too_long:
            command(sdk, emu, "x" * 65537)
    assert unknown.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert zero_timeout.value.response["fieldList"][0]["name"] == "timeout"
    assert (
        "Member must have length less than or equal to 65536" in too_long.value.response["Error"]["Message"]
    )


def test_command_faults_apply_to_the_command_stream() -> None:
    faults = [
        exception_frame("throttlingException", "slow down", after=1, operation="InvokeAgentRuntimeCommand")
    ]
    with AgentCoreEmulator(script=[text_turn("unaffected")], faults=faults) as emu:
        sdk = client(emu)
        assert text_of(invoke(sdk, emu, [user("hi")])) == "unaffected"
        with pytest.raises(botocore.exceptions.EventStreamError) as failed:
            command(sdk, emu, "echo hi")
        assert output(command(sdk, emu, "echo hi"), "stdout") == "hi\n"
    assert failed.value.response["Error"] == {"Code": "throttlingException", "Message": "slow down"}


def test_the_emulator_is_exported_under_rma_shell_testing_agentcore() -> None:
    assert agentcore.AgentCoreEmulator is AgentCoreEmulator
    assert agentcore.text_turn is text_turn
