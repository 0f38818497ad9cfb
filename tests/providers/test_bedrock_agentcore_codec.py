"""The AgentCore codec: inputs, Converse-stream normalization, frames, identifiers, errors (§7 B-)."""

from __future__ import annotations

import json

import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma.provider import codec_for
from rma.providers.agentcore import codec as ac
from rma.vocabulary import Terminal, ToolResult, ToolUse, Usage

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/billing_support_1a2b3c4d-AbCdEfGhIj"


def start_tool(index: int, tool_id: str, name: str, kind: str | None = "tool_use") -> dict[str, object]:
    tool: dict[str, object] = {"toolUseId": tool_id, "name": name}
    if kind is not None:
        tool["type"] = kind
    return {"contentBlockStart": {"contentBlockIndex": index, "start": {"toolUse": tool}}}


def tool_input(index: int, fragment: str) -> dict[str, object]:
    return {"contentBlockDelta": {"contentBlockIndex": index, "delta": {"toolUse": {"input": fragment}}}}


def text(index: int, value: str) -> dict[str, object]:
    return {"contentBlockDelta": {"contentBlockIndex": index, "delta": {"text": value}}}


def stop(reason: str) -> dict[str, object]:
    return {"messageStop": {"stopReason": reason}}


def metadata(inp: int, out: int, **extra: int) -> dict[str, object]:
    usage = {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out, **extra}
    return {"metadata": {"usage": usage, "metrics": {"latencyMs": 5}}}


START = {"messageStart": {"role": "assistant"}}


class TestInputs:
    def test_kickoff_is_one_user_text_message_defaulting_to_begin(self) -> None:  # B-5
        assert ac.CODEC.kickoff_input(None, None) == {
            "messages": [{"role": "user", "content": [{"text": "Begin."}]}]
        }
        assert ac.CODEC.user_input("Hi") == {"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}

    def test_resume_echoes_the_tool_uses_then_answers_each_by_id(self) -> None:  # B-6
        uses = [ToolUse("t1", "lookup", {"id": "c9"}), ToolUse("t2", "charge", {})]
        results = [ToolResult("t2", "denied", True), ToolResult("t1", "found")]
        assert ac.CODEC.resume_input(uses, results) == {
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {"toolUse": {"toolUseId": "t1", "name": "lookup", "input": {"id": "c9"}}},
                        {"toolUse": {"toolUseId": "t2", "name": "charge", "input": {}}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "toolResult": {
                                "toolUseId": "t1",
                                "content": [{"text": "found"}],
                                "status": "success",
                            }
                        },
                        {
                            "toolResult": {
                                "toolUseId": "t2",
                                "content": [{"text": "denied"}],
                                "status": "error",
                            }
                        },
                    ],
                },
            ]
        }

    def test_resume_never_sends_an_empty_text_block_or_drops_a_use(self) -> None:
        uses = [ToolUse("t1", "a", {}), ToolUse("t2", "b", {})]
        messages = ac.resume_messages(uses, [ToolResult("t1", "")])
        answers = [block["toolResult"] for block in messages[1]["content"]]
        assert answers[0]["content"] == [{"text": ac.EMPTY_RESULT_TEXT}]
        assert answers[1]["toolUseId"] == "t2" and answers[1]["status"] == "error"

    def test_resume_echoes_a_repeated_id_once(self) -> None:
        uses = [ToolUse("t1", "a", {}), ToolUse("t1", "a", {})]
        messages = ac.resume_messages(uses, [ToolResult("t1", "x")])
        assert len(messages[0]["content"]) == 1 and len(messages[1]["content"]) == 1

    def test_overrides_are_sent_only_when_given_and_a_string_prompt_becomes_blocks(self) -> None:  # B-8
        assert ac.check_overrides({}) == Success({})
        got = ac.check_overrides({"invoke_timeout": 900, "max_iterations": 40, "system_prompt": "Be brief"})
        assert got == Success(
            {"timeoutSeconds": 900, "maxIterations": 40, "systemPrompt": [{"text": "Be brief"}]}
        )
        bad = ac.check_overrides({"max_tokens": 0})
        assert isinstance(bad, Failure) and bad.failure().option == "max_tokens"

    def test_invoke_body_holds_messages_and_overrides_and_no_nulls(self) -> None:
        body = json.loads(ac.invoke_body(ac.CODEC.user_input("Hi"), {"maxTokens": 4096}))
        assert body == {"messages": [{"role": "user", "content": [{"text": "Hi"}]}], "maxTokens": 4096}

    def test_inline_function_declaration(self) -> None:  # B-25
        tool = {"name": "lookup", "description": "Find", "input_schema": {"type": "object"}}
        assert ac.inline_function(tool) == Success(
            {
                "type": "inline_function",
                "name": "lookup",
                "config": {"inlineFunction": {"description": "Find", "inputSchema": {"type": "object"}}},
            }
        )
        harness_tool = {"type": "agentcore_browser"}
        assert ac.inline_function(harness_tool) == Success(harness_tool)
        assert isinstance(ac.inline_function({"name": "bad name"}), Failure)


class TestNormalize:
    def test_text_turn(self) -> None:  # B-17, B-19, B-20
        events = [START, text(0, "Hel"), text(0, "lo"), stop("end_turn"), metadata(10, 5)]
        turn = ac.normalize(events)
        assert turn.terminal is Terminal.END_TURN and turn.stop_reason == "end_turn"
        assert turn.text == "Hello" and turn.custom_tool_uses == ()
        assert turn.usage == Usage(10, 5, raw=({"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},))
        assert turn.events == tuple(events)

    @pytest.mark.parametrize("reason", ac.STOP_REASONS)
    def test_every_stop_reason_in_the_model_maps_to_a_terminal_with_the_raw_reason(self, reason: str) -> None:
        turn = ac.normalize([START, stop(reason)])
        expected = {
            "end_turn": Terminal.END_TURN,
            "stop_sequence": Terminal.END_TURN,
            "tool_use": Terminal.REQUIRES_ACTION,
        }
        assert turn.terminal is expected.get(reason, Terminal.TERMINATED)
        assert turn.stop_reason == reason

    def test_unknown_or_missing_stop_reason_terminates(self) -> None:
        assert ac.normalize([stop("guardrail_intervened")]).terminal is Terminal.TERMINATED
        missing = ac.normalize([START, text(0, "x")])
        assert missing.terminal is Terminal.TERMINATED and missing.stop_reason is None
        assert not ac.is_complete([START, text(0, "x")]) and ac.is_complete([stop("end_turn")])

    def test_tool_input_split_over_deltas(self) -> None:  # B-21, B-23
        events = [
            START,
            start_tool(1, "t1", "lookup"),
            tool_input(1, '{"id": '),
            tool_input(1, '"c9"}'),
            stop("tool_use"),
        ]
        turn = ac.normalize(events)
        assert turn.terminal is Terminal.REQUIRES_ACTION
        assert turn.custom_tool_uses == (ToolUse("t1", "lookup", {"id": "c9"}),)

    def test_reused_block_index_keeps_both_tools_with_their_own_input(self) -> None:  # B-22
        events = [
            START,
            start_tool(0, "A", "one"),
            tool_input(0, '{"a": 1}'),
            start_tool(0, "B", "two"),
            tool_input(0, '{"b": 2}'),
            start_tool(1, "C", "three"),
            stop("tool_use"),
        ]
        uses = ac.normalize(events).custom_tool_uses
        assert uses == (
            ToolUse("A", "one", {"a": 1}),
            ToolUse("B", "two", {"b": 2}),
            ToolUse("C", "three", {}),
        )

    def test_same_id_at_two_indices_collapses_and_restarting_resets_its_input(self) -> None:
        events = [
            START,
            start_tool(0, "A", "one"),
            tool_input(0, '{"x": 1}'),
            start_tool(2, "A", "one"),
            stop("tool_use"),
        ]
        assert ac.normalize(events).custom_tool_uses == (ToolUse("A", "one", {}),)

    def test_empty_or_invalid_or_non_object_input_is_empty(self) -> None:  # B-23
        for fragments in ([], ["{not json"], ["[1, 2]"]):
            events = [
                START,
                start_tool(0, "A", "one"),
                *(tool_input(0, f) for f in fragments),
                stop("tool_use"),
            ]
            assert ac.normalize(events).custom_tool_uses[0].input == {}

    def test_server_and_mcp_tools_are_observe_only(self) -> None:  # §5.2 refinement
        events = [
            START,
            start_tool(0, "S", "shell", "server_tool_use"),
            tool_input(0, '{"cmd": "ls"}'),
            {"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolResult": {"toolUseId": "S"}}}},
            tool_input(1, "garbage"),
            start_tool(2, "M", "search", "mcp_tool_use"),
            start_tool(3, "C", "lookup"),
            stop("tool_use"),
        ]
        turn = ac.normalize(events)
        assert turn.custom_tool_uses == (ToolUse("C", "lookup", {}),)
        assert [(u["toolUseId"], u["type"]) for u in turn.server_tool_uses] == [
            ("S", "server_tool_use"),
            ("M", "mcp_tool_use"),
        ]
        assert turn.server_tool_uses[0]["input"] == {"cmd": "ls"}

    def test_a_tool_without_type_is_a_client_tool(self) -> None:
        events = [START, start_tool(0, "A", "one", kind=None), stop("tool_use")]
        assert ac.normalize(events).custom_tool_uses == (ToolUse("A", "one", {}),)

    def test_the_last_tool_use_message_decides_which_tools_run(self) -> None:
        first = [START, start_tool(0, "A", "one"), stop("tool_use")]
        second = [START, start_tool(0, "B", "two"), stop("tool_use")]
        assert ac.normalize(first + second).custom_tool_uses == (ToolUse("B", "two", {}),)
        ended = ac.normalize([*first, START, text(0, "done"), stop("end_turn")])
        assert ended.terminal is Terminal.END_TURN and ended.custom_tool_uses == ()

    def test_usage_last_wins_with_cache_counters_in_any_order(self) -> None:  # B-20
        events = [
            START,
            metadata(1, 1),
            metadata(7, 3, cacheReadInputTokens=4, cacheWriteInputTokens=2),
            stop("end_turn"),
        ]
        usage = ac.normalize(events).usage
        assert usage is not None
        assert (usage.input_tokens, usage.output_tokens) == (7, 3)
        assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (4, 2)
        assert ac.normalize([START, stop("end_turn")]).usage is None

    def test_unknown_events_are_kept_and_ignored(self) -> None:
        hook = {"hookEvent": {"hookEventId": "h", "name": "n", "type": "before_tool_call"}}
        future = {"somethingNew": {"x": 1}}
        turn = ac.normalize([START, hook, future, stop("end_turn")])
        assert hook in turn.events and future in turn.events

    def test_text_delta_only_for_text(self) -> None:  # B-26
        assert ac.text_delta(text(0, "hi")) == "hi"
        assert ac.text_delta(tool_input(0, "{}")) is None
        assert ac.text_delta(stop("end_turn")) is None
        assert ac.CODEC.has_text_delta

    def test_codec_is_registered_for_replay(self) -> None:
        assert codec_for("bedrock_agentcore").name == "bedrock_agentcore"


class TestFrames:
    def test_event_frame(self) -> None:
        assert ac.classify("event", "messageStop", {"stopReason": "end_turn"}) == stop("end_turn")
        assert ac.classify("event", "contentBlockStop", None) == {"contentBlockStop": {}}

    def test_exception_and_error_frames_are_faults(self) -> None:  # B-9, B-38
        fault = ac.classify("exception", "runtimeClientError", {"message": "duplicate Ids"})
        assert fault == ac.StreamFault("runtimeClientError", "duplicate Ids", {"message": "duplicate Ids"})
        error = ac.classify("error", "InternalFailure", None, "boom")
        assert isinstance(error, ac.StreamFault) and (error.error_type, error.message) == (
            "InternalFailure",
            "boom",
        )

    def test_event_frame_without_type_is_malformed(self) -> None:
        fault = ac.classify("event", None, {"x": 1})
        assert isinstance(fault, ac.StreamFault) and fault.error_type == "malformed_frame"


class TestIdentifiers:
    @pytest.mark.parametrize(
        "value",
        ["a" * 33, "rma-session-0123456789abcdef0123456789", "A" + "-_" * 16, "9" * 100],
    )
    def test_valid_runtime_session_ids(self, value: str) -> None:
        assert ac.check_runtime_session_id(value) == Success(value)

    @pytest.mark.parametrize("value", ["a" * 32, "a" * 101, "-" + "a" * 40, "a b" + "c" * 40, None, 7])
    def test_invalid_runtime_session_ids_name_the_option(self, value: object) -> None:  # B-15
        got = ac.check_runtime_session_id(value)
        assert isinstance(got, Failure) and got.failure() == InvalidOpts(
            option="runtime_session_id", detail=got.failure().detail
        )

    def test_endpoint_names(self) -> None:  # B-80
        assert ac.check_endpoint_name(None) == Success(None)
        assert ac.check_endpoint_name("canary_2") == Success("canary_2")
        for bad in ("2canary", "a" * 49, "has-hyphen", ""):
            got = ac.check_endpoint_name(bad)
            assert isinstance(got, Failure) and got.failure().option == "endpoint_name"
        assert ac.check_endpoint_name("a" * 48) == Success("a" * 48)

    def test_harness_arn(self) -> None:
        parsed = ac.parse_harness_arn(ARN).unwrap()
        assert (parsed.region, parsed.account, parsed.harness_id) == (
            "us-east-1",
            "123456789012",
            "billing_support_1a2b3c4d-AbCdEfGhIj",
        )
        for bad in ("arn:aws:bedrock-agentcore:us-east-1:123:harness/x-AbCdEfGhIj", "harness/ba", None):
            assert isinstance(ac.parse_harness_arn(bad), Failure)

    def test_hosts_derive_from_the_region(self) -> None:  # B-34 Better
        assert ac.data_plane_url("eu-west-1") == "https://bedrock-agentcore.eu-west-1.amazonaws.com"
        assert (
            ac.control_plane_url("cn-north-1")
            == "https://bedrock-agentcore-control.cn-north-1.amazonaws.com.cn"
        )
        assert (
            ac.data_plane_url("us-east-1", fips=True)
            == "https://bedrock-agentcore-fips.us-east-1.amazonaws.com"
        )
        assert ac.data_plane_url("us-west-2", dualstack=True) == "https://bedrock-agentcore.us-west-2.api.aws"

    def test_invoke_url_encodes_the_arn_as_botocore_does(self) -> None:  # wire §3.7 A
        assert ac.invoke_url("https://h", ARN, "DEFAULT") == (
            "https://h/harnesses/invoke?harnessArn=arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A123456789012"
            "%3Aharness%2Fbilling_support_1a2b3c4d-AbCdEfGhIj&qualifier=DEFAULT"
        )
        assert "qualifier" not in ac.invoke_url("https://h", ARN, None)


class TestErrors:
    def test_error_code_order(self) -> None:  # wire §2
        assert (
            ac.error_code(400, {"x-amzn-ErrorType": "ValidationException:http://x"}, {})
            == "ValidationException"
        )
        assert (
            ac.error_code(400, {"X-Amzn-ErrorType": "aws.protocols#ThrottlingException"}, {})
            == "ThrottlingException"
        )
        assert ac.error_code(409, {}, {"code": "ConflictException"}) == "ConflictException"
        assert (
            ac.error_code(409, {}, {"__type": "com.amazon#RetryableConflictException"})
            == "RetryableConflictException"
        )
        assert ac.error_code(502, {}, "bad gateway") == "502"

    def test_retry_by_code_not_status(self) -> None:  # B-12 Better, §10
        assert ac.is_retryable(429, "ThrottlingException")
        assert ac.is_retryable(500, "InternalServerException")
        assert ac.is_retryable(409, "RetryableConflictException")
        assert not ac.is_retryable(409, "ConflictException")
        for status, code in (
            (400, "ValidationException"),
            (403, "AccessDeniedException"),
            (424, "RuntimeClientError"),
        ):
            assert not ac.is_retryable(status, code)
        assert not ac.is_retryable(402, "ServiceQuotaExceededException")
