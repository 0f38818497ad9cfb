"""The AgentCore emulator's StopRuntimeSession, driven by boto3 (botocore's model is the oracle)."""

from __future__ import annotations

import json
import threading
from typing import Any
from urllib.parse import quote

import botocore.exceptions
import pytest

from rma_shell.testing.agentcore import (
    AgentCoreEmulator,
    RuntimeStop,
    error_once,
    hang_stop,
    message_start,
    message_stop,
    pause,
    text_delta,
    text_turn,
)
from tests.testing.test_agentcore_emulator import SID, client, invoke, signed_post, user

SLOW_TURN = [message_start(), text_delta("working"), pause(30), text_delta("late"), message_stop("end_turn")]


def stop_url(emu: AgentCoreEmulator, target: str | None = None) -> str:
    return f"{emu.base_url}/runtimes/{quote(target or emu.harness_arn, safe='')}/stopruntimesession"


def test_a_stop_boto3_sends_is_served_and_recorded() -> None:
    with AgentCoreEmulator([text_turn("hi")]) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("hello")])
        reply = sdk.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        assert reply["ResponseMetadata"]["HTTPStatusCode"] == 200
        assert reply["runtimeSessionId"] == SID
        [stop] = emu.stops
        assert (stop.runtime_session_id, stop.target, stop.qualifier, stop.interrupted) == (
            SID,
            emu.harness_arn,
            None,
            False,
        )
        assert isinstance(stop.client_token, str) and len(stop.client_token) >= 33  # botocore fills one
        assert emu.sessions[SID].stops == 1
        [request] = [r for r in emu.requests if r.path.endswith("/stopruntimesession")]
        assert request.method == "POST" and request.body == {"clientToken": stop.client_token}


def invoke_in_background(sdk: Any, emu: AgentCoreEmulator) -> tuple[threading.Thread, list[Any]]:
    """An InvokeHarness read on a thread; returns once its first event arrived."""
    first = threading.Event()
    seen: list[Any] = []

    def read() -> None:
        reply = sdk.invoke_harness(harnessArn=emu.harness_arn, runtimeSessionId=SID, messages=[user("go")])
        try:
            for event in reply["stream"]:
                seen.append(event)
                first.set()
        except Exception:  # the cut connection
            pass
        finally:
            first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first.wait(10)
    return reader, seen


def test_a_stop_cuts_the_invoke_in_flight_without_consuming_its_turn() -> None:
    with AgentCoreEmulator([SLOW_TURN]) as emu:
        sdk = client(emu, read_timeout=30)
        reader, seen = invoke_in_background(sdk, emu)
        sdk.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        reader.join(10)
        assert not reader.is_alive()
        [stop] = emu.stops
        assert stop.interrupted is True
        assert "late" not in json.dumps(seen)
        assert emu.sessions[SID].turns_played == 0  # the cut turn would be played again


def test_after_a_stop_the_session_takes_an_invoke_at_once() -> None:
    with AgentCoreEmulator([SLOW_TURN]) as emu:
        sdk = client(emu, read_timeout=30)
        reader, _ = invoke_in_background(sdk, emu)
        sdk.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        emu.script_session(SID, [text_turn("again")])
        events = invoke(sdk, emu, [user("go")])  # not a 424: the stop let go of the session
        assert any("messageStop" in e for e in events)
        reader.join(10)


def test_the_runtime_arn_and_a_qualifier_are_accepted() -> None:
    with AgentCoreEmulator([text_turn("hi")], endpoints=("DEFAULT", "live")) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("hello")], qualifier="live")
        sdk.stop_runtime_session(agentRuntimeArn=emu.runtime_arn, runtimeSessionId=SID, qualifier="live")
        [stop] = emu.stops
        assert (stop.target, stop.qualifier) == (emu.runtime_arn, "live")


def test_a_session_never_seen_and_an_unknown_runtime_are_404s() -> None:
    with AgentCoreEmulator() as emu:
        sdk = client(emu)
        with pytest.raises(botocore.exceptions.ClientError) as unknown_session:
            sdk.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        assert unknown_session.value.response["Error"]["Code"] == "ResourceNotFoundException"
        other = emu.harness_arn.replace(emu.harness_id, "other_harness-AbCdEfGhIj")
        with pytest.raises(botocore.exceptions.ClientError) as unknown_runtime:
            sdk.stop_runtime_session(agentRuntimeArn=other, runtimeSessionId=SID)
        assert unknown_runtime.value.response["Error"]["Code"] == "ResourceNotFoundException"
        assert emu.stops == ()


def test_the_input_is_validated_like_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with AgentCoreEmulator([text_turn("hi")]) as emu:
        headers = {"Content-Type": "application/json", "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": "short"}
        short = signed_post(monkeypatch, emu, stop_url(emu), b"{}", headers=headers)
        assert short.status_code == 400
        assert short.headers["x-amzn-ErrorType"] == "ValidationException"
        assert short.json()["fieldList"][0]["name"] == "runtimeSessionId"
        missing = signed_post(
            monkeypatch, emu, stop_url(emu), b"{}", headers={"Content-Type": "application/json"}
        )
        assert missing.status_code == 400 and "runtimeSessionId" in missing.json()["message"]
        headers["X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"] = SID
        token = signed_post(monkeypatch, emu, stop_url(emu), b'{"clientToken": "too-short"}', headers=headers)
        assert token.status_code == 400 and token.json()["fieldList"][0]["name"] == "clientToken"
        unknown = signed_post(monkeypatch, emu, stop_url(emu), b'{"force": true}', headers=headers)
        assert unknown.status_code == 400 and "force" in unknown.json()["message"]
        assert emu.stops == ()


def test_a_failing_stop_is_answered_with_the_injected_error() -> None:
    with AgentCoreEmulator([text_turn("hi")]) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("hello")])
        emu.inject(error_once(409, "RetryableConflictException", operation="StopRuntimeSession"))
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            sdk.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        assert refused.value.response["Error"]["Code"] == "RetryableConflictException"
        assert emu.stops == ()
        sdk.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)  # once only
        assert len(emu.stops) == 1


def test_a_hanging_stop_answers_nothing_and_stops_nothing_until_it_is_due() -> None:
    with AgentCoreEmulator([text_turn("hi")]) as emu:
        sdk = client(emu)
        invoke(sdk, emu, [user("hello")])
        emu.inject(hang_stop())
        impatient = client(emu, read_timeout=0.3)
        with pytest.raises(botocore.exceptions.ReadTimeoutError):
            impatient.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        assert emu.stops == ()
        sdk.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        assert [s.runtime_session_id for s in emu.stops] == [SID]


def test_hang_stop_refuses_a_negative_time() -> None:
    with pytest.raises(ValueError):
        hang_stop(-1)
    assert RuntimeStop(SID, "arn", None, None, False).interrupted is False
