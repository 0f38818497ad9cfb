"""Bedrock AgentCore end to end: run()/open_session() against the loopback emulator (B-1…B-16, B-27…B-33)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from returns.result import Failure, Success

from rma.errors import (
    AuthenticationError,
    BudgetUnsupported,
    HttpError,
    InvalidOpts,
    OutcomeUnsupported,
    ProviderError,
    Timeout,
    TurnLost,
)
from rma.providers.agentcore.codec import SESSION_HEADER
from rma.vocabulary import Budget, Outcome, Terminal
from rma_shell import open_session, run
from rma_shell.providers.agentcore import BedrockAgentCore, new_runtime_session_id
from rma_shell.telemetry import Telemetry
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator

SID = "rma-session-0123456789abcdef0123456789"
LOOKUP = {"name": "lookup", "description": "Find a customer", "input_schema": {"type": "object"}}


class Tools:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.events: list[Any] = []
        self.fail = fail or set()

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> object:
        self.calls.append((name, input))
        if name in self.fail:
            raise RuntimeError(f"{name} broke")
        return f"{name} -> {json.dumps(input, sort_keys=True)}"

    def handle_event(self, event: Any, ctx: object) -> None:
        self.events.append(event)


@pytest.fixture
async def made() -> AsyncIterator[list[BedrockAgentCore]]:
    providers: list[BedrockAgentCore] = []
    yield providers
    for p in providers:
        await p.close()


def provider(emu: AgentCoreEmulator, made: list[BedrockAgentCore], **kw: Any) -> BedrockAgentCore:
    p = BedrockAgentCore(
        harness_arn=emu.harness_arn,
        data_url=emu.base_url,
        control_url=emu.base_url,
        env=emu.credentials_env(),
        backoff_base=0.01,
        backoff_cap=0.02,
        **kw,
    )
    made.append(p)
    return p


def header(request: Any, name: str) -> str | None:
    return next((v for k, v in request.headers.items() if k.lower() == name.lower()), None)


def invokes(emu: AgentCoreEmulator) -> list[Any]:
    return [r for r in emu.requests if r.path.startswith("/harnesses/invoke")]


async def test_B3_B6_B7_B27_a_tool_loop_and_what_reaches_the_wire(made: list[BedrockAgentCore]) -> None:
    script = [
        ace.tool_turn(("lookup", {"id": "c9"}, "tooluse_a1"), text="checking"),
        ace.text_turn("Pro plan."),
    ]
    with AgentCoreEmulator(script) as emu:
        tools = Tools()
        got = await run(
            provider(emu, made, tools=[LOOKUP], invoke_timeout=900, max_iterations=40, max_tokens=4096),
            handler=tools,
            prompt="Which plan?",
            runtime_session_id=SID,
        )
        result = got.unwrap()
        assert result.terminal is Terminal.END_TURN and result.text == "Pro plan."
        assert result.turns == 2 and result.session_id == SID and not result.resumed
        assert tools.calls == [("lookup", {"id": "c9"})]
        first, second = (r.body for r in invokes(emu))
        assert first["messages"] == [{"role": "user", "content": [{"text": "Which plan?"}]}]
        assert (first["timeoutSeconds"], first["maxIterations"], first["maxTokens"]) == (900, 40, 4096)
        assert first["tools"][0]["config"]["inlineFunction"]["description"] == "Find a customer"
        assert second["messages"] == [
            {
                "role": "assistant",
                "content": [
                    {"toolUse": {"toolUseId": "tooluse_a1", "name": "lookup", "input": {"id": "c9"}}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": "tooluse_a1",
                            "content": [{"text": 'lookup -> {"id": "c9"}'}],
                            "status": "success",
                        }
                    }
                ],
            },
        ]
        for request in invokes(emu):
            assert header(request, SESSION_HEADER) == SID
            assert str(header(request, "Authorization")).startswith("AWS4-HMAC-SHA256 Credential=")
            assert "harnessArn=arn%3Aaws%3Abedrock-agentcore" in request.path
        assert result.usage.input_tokens > 0


async def test_B28_events_reach_the_handler_live_in_boto3_shape(made: list[BedrockAgentCore]) -> None:
    with AgentCoreEmulator([ace.text_turn("Hello there", chunks=3)]) as emu:
        tools = Tools()
        got = await run(provider(emu, made), handler=tools, prompt="hi", runtime_session_id=SID)
        assert got.unwrap().text == "Hello there"
        kinds = [next(iter(e)) for e in tools.events if isinstance(e, dict) and len(e) == 1]
        assert kinds[0] == "messageStart" and "messageStop" in kinds and "metadata" in kinds
        deltas = [
            e["text"] for e in tools.events if isinstance(e, dict) and e.get("type") == "rma.text_delta"
        ]
        assert "".join(deltas) == "Hello there" and len(deltas) == 3


async def test_B6_a_failing_tool_is_answered_with_status_error(made: list[BedrockAgentCore]) -> None:
    script = [ace.tool_turn(("charge", {"amount": 5}, "tooluse_c")), ace.text_turn("Could not charge.")]
    with AgentCoreEmulator(script) as emu:
        got = await run(
            provider(emu, made), handler=Tools(fail={"charge"}), prompt="go", runtime_session_id=SID
        )
        assert got.unwrap().terminal is Terminal.END_TURN
        result = invokes(emu)[1].body["messages"][1]["content"][0]["toolResult"]
        assert result["status"] == "error" and result["content"][0]["text"]


async def test_B22_reused_indices_run_every_tool_once(made: list[BedrockAgentCore]) -> None:
    turn = ace.reused_index_tool_turn(("a", {"x": 1}), ("b", {"y": 2}), ("c", {}), indices=(0, 0, 1))
    with AgentCoreEmulator([turn, ace.text_turn("ok")]) as emu:
        tools = Tools()
        got = await run(provider(emu, made), handler=tools, prompt="go", runtime_session_id=SID)
        # The emulator refuses a resume with duplicate or missing ids, so END_TURN proves the echo.
        assert got.unwrap().terminal is Terminal.END_TURN
        assert sorted(tools.calls) == [("a", {"x": 1}), ("b", {"y": 2}), ("c", {})]  # run concurrently


async def test_B18_B24_server_tools_are_observed_not_run(made: list[BedrockAgentCore]) -> None:
    script = [ace.server_tool_turn("shell", {"command": "ls"}, "a.txt", text="Found a.txt.")]
    with AgentCoreEmulator(script) as emu:
        tools = Tools()
        got = await run(provider(emu, made), handler=tools, prompt="list", runtime_session_id=SID)
        result = got.unwrap()
        assert tools.calls == [] and result.text.endswith("Found a.txt.")


@pytest.mark.parametrize(
    "reason", ["max_tokens", "max_iterations_exceeded", "timeout_exceeded", "hook_stopped"]
)
async def test_B17_other_stop_reasons_terminate_with_the_raw_reason(
    reason: str, made: list[BedrockAgentCore]
) -> None:
    with AgentCoreEmulator([ace.stop_turn(reason, text="partial")]) as emu:
        got = await run(provider(emu, made), handler=Tools(), prompt="go", runtime_session_id=SID)
        result = got.unwrap()
        assert result.terminal is Terminal.TERMINATED and result.stop_reason == reason


async def test_B14_reattach_invokes_the_same_session_and_says_resumed(made: list[BedrockAgentCore]) -> None:
    with AgentCoreEmulator([ace.text_turn("first"), ace.text_turn("second")]) as emu:
        p = provider(emu, made)
        assert (await run(p, handler=Tools(), prompt="one", runtime_session_id=SID)).unwrap().text == "first"
        again = (await run(p, handler=Tools(), prompt="two", session_id=SID)).unwrap()
        assert again.resumed and again.session_id == SID and again.text == "second"
        assert [m["role"] for m in emu.sessions[SID].messages] == ["user", "assistant", "user", "assistant"]


async def test_B2_options_are_validated_before_any_request(made: list[BedrockAgentCore]) -> None:
    with AgentCoreEmulator([ace.text_turn("x")]) as emu:
        cases: list[tuple[dict[str, Any], str]] = [
            ({}, "runtime_session_id"),
            ({"runtime_session_id": "too-short"}, "runtime_session_id"),
            ({"runtime_session_id": SID, "endpoint_name": "bad-name"}, "endpoint_name"),
            ({"runtime_session_id": SID, "harness_arn": "arn:aws:nope"}, "harness_arn"),
            ({"runtime_session_id": SID, "max_tokens": -1}, "max_tokens"),
            ({"runtime_session_id": SID, "tools": [{"name": "has space"}]}, "tools"),
        ]
        for opts, option in cases:
            got = await run(provider(emu, made), handler=Tools(), prompt="go", **opts)
            assert isinstance(got, Failure) and isinstance(got.failure(), InvalidOpts), opts
            assert got.failure().option == option
        assert emu.requests == []


async def test_B1_outcomes_and_budgets_are_refused(made: list[BedrockAgentCore]) -> None:
    with AgentCoreEmulator([ace.text_turn("x")]) as emu:
        outcome = Outcome(description="d", rubric="r")
        got = await run(provider(emu, made), handler=Tools(), outcome=outcome, runtime_session_id=SID)
        assert isinstance(got.failure(), OutcomeUnsupported)
        got = await run(
            provider(emu, made), handler=Tools(), prompt="x", budget=Budget("5"), runtime_session_id=SID
        )
        assert isinstance(got.failure(), BudgetUnsupported)
        assert emu.requests == []


async def test_B16_endpoint_name_goes_out_as_the_qualifier(made: list[BedrockAgentCore]) -> None:
    with AgentCoreEmulator([ace.text_turn("x")], endpoints=("DEFAULT", "canary")) as emu:
        got = await run(
            provider(emu, made, endpoint_name="canary"), handler=Tools(), prompt="x", runtime_session_id=SID
        )
        assert got.unwrap().text == "x"
        assert invokes(emu)[0].path.endswith("&qualifier=canary")


async def test_user_id_header_is_sent(made: list[BedrockAgentCore]) -> None:
    with AgentCoreEmulator([ace.text_turn("x")]) as emu:
        got = await run(
            provider(emu, made, user_id="user-7"), handler=Tools(), prompt="x", runtime_session_id=SID
        )
        assert isinstance(got, Success) and emu.sessions[SID].user_id == "user-7"


class TestFailures:
    async def test_B11_B12_throttling_is_retried_with_backoff(self, made: list[BedrockAgentCore]) -> None:
        with AgentCoreEmulator([ace.text_turn("ok")], faults=[ace.throttle_once()]) as emu:
            got = await run(provider(emu, made), handler=Tools(), prompt="x", runtime_session_id=SID)
            assert got.unwrap().text == "ok" and len(invokes(emu)) == 2

    async def test_B12_B31_a_4xx_is_never_retried(self, made: list[BedrockAgentCore]) -> None:
        fault = ace.error_once(400, "ValidationException", "bad")
        with AgentCoreEmulator([ace.text_turn("ok")], faults=[fault]) as emu:
            got = await run(provider(emu, made), handler=Tools(), prompt="x", runtime_session_id=SID)
            error = got.failure()
            assert isinstance(error, HttpError) and error.status == 400
            assert error.body["code"] == "ValidationException" and len(invokes(emu)) == 1

    async def test_B9_an_exception_frame_is_a_typed_error_never_retried(
        self, made: list[BedrockAgentCore]
    ) -> None:
        fault = ace.exception_frame("runtimeClientError", "duplicate Ids", after=2)
        with AgentCoreEmulator([ace.text_turn("ok")], faults=[fault]) as emu:
            got = await run(provider(emu, made), handler=Tools(), prompt="x", runtime_session_id=SID)
            error = got.failure()
            assert isinstance(error, ProviderError)
            assert (error.error_type, error.detail) == ("runtimeClientError", "duplicate Ids")
            assert len(invokes(emu)) == 1

    @pytest.mark.parametrize("fault", [ace.drop_after(2), ace.truncate_frame_after(2), ace.bad_crc_after(1)])
    async def test_B10_a_stream_cut_short_is_re_invoked(
        self, fault: Any, made: list[BedrockAgentCore]
    ) -> None:
        with AgentCoreEmulator([ace.text_turn("whole answer")], faults=[fault]) as emu:
            tools = Tools()
            got = await run(provider(emu, made), handler=tools, prompt="x", runtime_session_id=SID)
            result = got.unwrap()
            assert result.text == "whole answer" and len(invokes(emu)) == 2
            assert len(result.events) == len(ace.text_turn("whole answer"))  # B-13: nothing of the failed try

    @pytest.mark.parametrize("cut", [ace.drop_after, ace.truncate_frame_after])
    async def test_a_cut_turn_the_harness_kept_ends_as_turn_lost_not_a_repeat(
        self, cut: Any, made: list[BedrockAgentCore]
    ) -> None:
        # The resume turn's stream is cut, but the harness plays the turn to its end and keeps
        # it: the retry of the same toolUse echo and toolResult is refused as a repeat, which
        # is the wire's only trace that the turn landed. The run ends typed, the tool ran once.
        script = [
            ace.tool_turn(("lookup", {"id": "c9"}, "tooluse_a1")),
            ace.tool_turn(("lookup", {"id": "d4"}, "tooluse_b2")),
            ace.text_turn("never read"),
        ]
        with AgentCoreEmulator(script) as emu:

            class Cutting(Tools):
                async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> object:
                    emu.inject(cut(1, kept=True))  # the next invoke: the resume with this result
                    return await super().handle_tool_call(name, input, ctx)

            tools = Cutting()
            got = await run(provider(emu, made), handler=tools, prompt="x", runtime_session_id=SID)
            error = got.failure()
            assert isinstance(error, TurnLost) and error.stream_dropped
            assert error.runtime_session_id == SID
            assert error.error_type in ("runtimeClientError", "RuntimeClientError")
            assert "stream was cut mid-reply" in error.message and SID in error.message
            assert tools.calls == [("lookup", {"id": "c9"})]
            assert error.result is not None and error.result.turns == 1  # the first turn's result is kept
            assert len(invokes(emu)) == 3  # the prompt, the cut resume, the refused retry
            kept = emu.sessions[SID]
            assert kept.turns_played == 2 and kept.pending_tool_uses[0]["toolUseId"] == "tooluse_b2"

    async def test_a_cut_turn_the_harness_did_not_keep_is_asked_again(
        self, made: list[BedrockAgentCore]
    ) -> None:
        script = [ace.tool_turn(("lookup", {"id": "c9"}, "tooluse_a1")), ace.text_turn("whole answer")]
        with AgentCoreEmulator(script) as emu:

            class Cutting(Tools):
                async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> object:
                    emu.inject(ace.drop_after(1))
                    return await super().handle_tool_call(name, input, ctx)

            got = await run(provider(emu, made), handler=Cutting(), prompt="x", runtime_session_id=SID)
            assert got.unwrap().text == "whole answer" and len(invokes(emu)) == 3

    async def test_B10_early_termination_after_the_retries(self, made: list[BedrockAgentCore]) -> None:
        with AgentCoreEmulator([ace.text_turn("x")], faults=[ace.drop_after(1, times=5)]) as emu:
            got = await run(
                provider(emu, made, max_retries=1), handler=Tools(), prompt="x", runtime_session_id=SID
            )
            error = got.failure()
            assert isinstance(error, ProviderError) and error.error_type == "early_termination"
            assert len(invokes(emu)) == 2

    async def test_B29_silence_beyond_the_idle_timeout_fails_the_attempt(
        self, made: list[BedrockAgentCore]
    ) -> None:
        fault = ace.stall(5.0, after=1, times=5)
        with AgentCoreEmulator([ace.text_turn("x")], faults=[fault]) as emu:
            p = provider(emu, made, idle_timeout=0.2, max_retries=0)
            got = await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)
            assert got.failure().kind == "transport_error"

    async def test_B29_a_slow_but_flowing_stream_succeeds(self, made: list[BedrockAgentCore]) -> None:
        turn = [ace.message_start(), *(x for c in "abcd" for x in (ace.pause(0.1), ace.text_delta(c)))]
        turn += [ace.message_stop("end_turn"), ace.metadata()]
        with AgentCoreEmulator([turn]) as emu:
            got = await run(
                provider(emu, made, idle_timeout=0.3), handler=Tools(), prompt="x", runtime_session_id=SID
            )
            assert got.unwrap().text == "abcd"

    async def test_bad_credentials_are_an_authentication_error(self, made: list[BedrockAgentCore]) -> None:
        with AgentCoreEmulator([ace.text_turn("x")]) as emu:
            p = BedrockAgentCore(
                harness_arn=emu.harness_arn,
                data_url=emu.base_url,
                aws_access_key_id=emu.access_key_id,
                aws_secret_access_key="wrong-secret",
                env={},
            )
            made.append(p)
            got = await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)
            error = got.failure()
            assert isinstance(error, AuthenticationError) and "InvalidSignatureException" in error.detail
            assert "wrong-secret" not in repr(error)

    async def test_missing_credentials_name_the_option(
        self, made: list[BedrockAgentCore], monkeypatch: Any
    ) -> None:
        monkeypatch.setattr("rma_shell.aws_credentials.botocore_available", lambda: False)
        p = BedrockAgentCore(
            harness_arn="arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h_1-AbCdEfGhIj", env={}
        )
        made.append(p)
        got = await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)
        assert isinstance(got.failure(), InvalidOpts) and got.failure().option == "aws_access_key_id"

    async def test_the_run_timeout_tears_the_invoke_down(self, made: list[BedrockAgentCore]) -> None:
        with AgentCoreEmulator([ace.text_turn("x")], faults=[ace.stall(30.0, after=1)]) as emu:
            with anyio.fail_after(10):
                got = await run(
                    provider(emu, made), handler=Tools(), prompt="x", runtime_session_id=SID, timeout=0.5
                )
            assert isinstance(got.failure(), Timeout)


async def test_S69_live_session_follow_ups_share_the_runtime_session(made: list[BedrockAgentCore]) -> None:
    with AgentCoreEmulator([ace.text_turn("hello"), ace.text_turn("again")]) as emu:
        async with open_session(
            provider(emu, made), handler=Tools(), prompt="hi", runtime_session_id=SID
        ) as live:
            results = live.__aiter__()
            assert (await results.__anext__()).unwrap().text == "hello"
            await live.message("more")
            assert (await results.__anext__()).unwrap().text == "again"
        assert {header(r, SESSION_HEADER) for r in invokes(emu)} == {SID}


async def test_M2_B46_request_telemetry_names_the_operation(made: list[BedrockAgentCore]) -> None:
    telemetry = Telemetry()
    seen: list[tuple[str, dict[str, Any]]] = []
    telemetry.attach("t", ["rma.agent_core.request.*"], lambda name, m, meta: seen.append((name, dict(meta))))
    with AgentCoreEmulator([ace.text_turn("x")]) as emu:
        p = provider(emu, made, telemetry=telemetry)
        assert isinstance(await run(p, handler=Tools(), prompt="x", runtime_session_id=SID), Success)
    stops = [meta for name, meta in seen if name.endswith(".stop")]
    assert stops and stops[0]["operation"] == "InvokeHarness" and stops[0]["status"] == 200
    assert stops[0]["service"] == "bedrock-agentcore" and stops[0]["path"] == "/harnesses/invoke"


def test_new_runtime_session_ids_are_valid_and_distinct() -> None:
    from rma.providers.agentcore.codec import check_runtime_session_id

    ids = {new_runtime_session_id() for _ in range(200)}
    assert len(ids) == 200 and all(isinstance(check_runtime_session_id(i), Success) for i in ids)


async def test_B35_B32_nothing_printed_shows_credentials_and_5xx_is_retried_by_the_provider(
    made: list[BedrockAgentCore],
) -> None:
    # B-32 Better: the HTTP layer never re-sends; the provider re-invokes a 500 (safe: no stream began).
    with AgentCoreEmulator(
        [ace.text_turn("ok")], faults=[ace.server_error_once()], session_token="TOKEN-xyz"
    ) as emu:
        p = provider(emu, made)
        got = await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)
        assert got.unwrap().text == "ok" and len(invokes(emu)) == 2
        client = p.client_for(emu.region)
        shown = repr(p) + repr(await client) + repr(p._credentials)
        assert emu.secret_access_key not in shown and "TOKEN-xyz" not in shown
