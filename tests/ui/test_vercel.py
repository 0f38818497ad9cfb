"""The Vercel AI SDK adapter (rma_shell.ui.vercel): every part validates against the JSON
schemas written from the SDK's own (tests/ui/vercel_chunks.py); the stream carries the SDK's
headers and ends with ``[DONE]``; parts pair up (text start/delta/end, a call's input before
its output, steps); a run, a failing run and an approval round trip (``tool-approval-request``,
then the tool part's ``approval-responded`` state) served through Starlette and read with
httpx; bad bodies are 400s naming the field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from returns.result import Failure, Success

from rma.errors import Timeout
from rma.live import AttemptDiscarded, TextDelta, ToolCallStarted, TurnFinished
from rma.vocabulary import SessionResult, Terminal, Usage
from rma_shell import Agent, MemoryJournal, RunFinished
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing.local import status
from rma_shell.ui import VercelParts, vercel_endpoint
from tests.ui.common import (
    LOOKUP_SCRIPT,
    REFUND_SCRIPT,
    app_of,
    data_lines,
    events,
    lookup_customer,
    post,
    refund,
)
from tests.ui.vercel_chunks import validate_part


def validated(parts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each part matches its schema; the stream opens with ``start``, ends with ``finish``,
    and pairs its parts as the SDK's reader expects."""
    for part in parts:
        validate_part(part)
    assert parts[0]["type"] == "start" and parts[-1]["type"] == "finish"
    text: str | None = None
    step = False
    calls: dict[str, str] = {}
    for p in parts:
        match p["type"]:
            case "text-start":
                assert text is None
                text = p["id"]
            case "text-delta":
                assert text == p["id"] and p["delta"]
            case "text-end":
                assert text == p["id"]
                text = None
            case "start-step":
                assert not step
                step = True
            case "finish-step":
                assert step
                step = False
            case "tool-input-start":
                assert p["toolCallId"] not in calls
                calls[p["toolCallId"]] = "streaming"
            case "tool-input-available" | "tool-input-error":
                assert calls.get(p["toolCallId"], "streaming") == "streaming"
                calls[p["toolCallId"]] = "input"
            case "tool-output-available" | "tool-output-error" | "tool-output-denied":
                assert calls.get(p["toolCallId"], "input") == "input"
                calls[p["toolCallId"]] = "done"
            case "tool-approval-request":
                assert calls[p["toolCallId"]] == "input"
            case "finish":
                assert text is None and not step
    return list(parts)


def chat(text: str) -> dict[str, Any]:
    return {
        "id": "chat-1",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    }


def of_type(parts: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [p for p in parts if p["type"] == kind]


async def test_a_run_streams_text_tool_input_and_output_then_finish_and_done() -> None:
    with OpenAIEmulator(LOOKUP_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="qwen3:8b", stream=True)
        agent = Agent(instructions="You are a support agent.", tools=[lookup_customer], host=host)
        response = await post(app_of(vercel_endpoint(agent), "/api/chat"), chat("Who is ada?"), "/api/chat")
        await host.close()
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert data_lines(response.text)[-1] == "[DONE]"
    got = validated(events(response.text))
    (available,) = of_type(got, "tool-input-available")
    assert available["toolName"] == "lookup_customer" and available["input"] == {"email": "ada@example.com"}
    (output,) = of_type(got, "tool-output-available")
    assert output["toolCallId"] == available["toolCallId"]
    assert output["output"] == "Customer ada@example.com: Pro plan, active."
    said = "".join(p["delta"] for p in of_type(got, "text-delta"))
    assert said == "Let me look that up. Ada is on the Pro plan."
    assert len(of_type(got, "start-step")) == 2
    finish = got[-1]
    assert finish["finishReason"] == "stop" and finish["messageMetadata"]["turns"] == 2


async def test_a_failing_run_sends_error_then_finish() -> None:
    with OpenAIEmulator([{"content": "never sent"}], faults={0: status(401)}) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        agent = Agent(tools=[lookup_customer], host=host)
        response = await post(app_of(vercel_endpoint(agent)), chat("hi"))
        await host.close()
    got = validated(events(response.text))
    (error,) = of_type(got, "error")
    assert "401" in error["errorText"] and got[-1]["finishReason"] == "error"


def responded(paused: list[dict[str, Any]], approved: bool, reason: str | None = None) -> dict[str, Any]:
    """The request ``useChat`` sends after ``addToolApprovalResponse``: the assistant message
    with its tool part in the ``approval-responded`` state."""
    (request,) = of_type(paused, "tool-approval-request")
    (available,) = of_type(paused, "tool-input-available")
    approval: dict[str, Any] = {"id": request["approvalId"], "approved": approved}
    if reason is not None:
        approval["reason"] = reason
    tool_part = {
        "type": f"tool-{available['toolName']}",
        "toolCallId": request["toolCallId"],
        "state": "approval-responded",
        "input": available["input"],
        "approval": approval,
    }
    return {
        "id": "chat-1",
        "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Refund order 42"}]},
            {"id": paused[0]["messageId"], "role": "assistant", "parts": [{"type": "step-start"}, tool_part]},
        ],
        "trigger": "submit-message",
    }


async def test_an_approval_request_answered_in_the_next_request_carries_the_run_on() -> None:
    with OpenAIEmulator(REFUND_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        agent = Agent(tools=[refund], host=host, journal=MemoryJournal())
        app = app_of(vercel_endpoint(agent))
        paused = validated(events((await post(app, chat("Refund order 42"))).text))
        assert paused[-1]["finishReason"] == "tool-calls"
        assert of_type(paused, "tool-input-available")[0]["input"] == {"order_id": "42", "cents": 250}
        assert not of_type(paused, "tool-output-available")
        resumed = validated(events((await post(app, responded(paused, True))).text))
        again = await post(app, responded(paused, True))
        await host.close()
    assert resumed[0]["messageId"] == paused[0]["messageId"]  # the same assistant message goes on
    (output,) = of_type(resumed, "tool-output-available")
    assert output["output"] == "refunded 250 on 42"
    assert "".join(p["delta"] for p in of_type(resumed, "text-delta")) == "The refund is done."
    assert again.status_code == 400 and again.json()["field"] == "approval"


async def test_a_denied_approval_is_tool_output_denied() -> None:
    with OpenAIEmulator(REFUND_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="m")
        agent = Agent(tools=[refund], host=host, journal=MemoryJournal())
        app = app_of(vercel_endpoint(agent))
        paused = events((await post(app, chat("Refund order 42"))).text)
        resumed = validated(events((await post(app, responded(paused, False, "no"))).text))
        await host.close()
    (denied,) = of_type(resumed, "tool-output-denied")
    assert denied["toolCallId"] == of_type(paused, "tool-approval-request")[0]["toolCallId"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"id": "u", "role": "user", "parts": "hi"}]}, "messages[0].parts"),
        ({"messages": [{"id": "u", "role": "system", "parts": []}]}, "messages[0].role"),
        (
            {"messages": [{"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "x"}]}]},
            "messages",
        ),
        (
            {
                "messages": [
                    {
                        "id": "a",
                        "role": "assistant",
                        "parts": [
                            {"type": "tool-x", "state": "approval-responded", "approval": {"id": "k/c"}}
                        ],
                    }
                ]
            },
            "messages[0].parts[0].approval.approved",
        ),
    ],
)
async def test_a_bad_body_is_a_400_naming_the_field(body: Any, field: str) -> None:
    response = await post(app_of(vercel_endpoint(Agent())), body)
    assert response.status_code == 400 and response.json()["field"] == field


def test_a_discarded_attempt_ends_its_text_and_calls_and_names_them_in_a_data_part() -> None:
    parts = VercelParts("msg")
    out = parts.opening()
    for update in (
        TextDelta("partial "),
        ToolCallStarted("c1", "lookup"),
        AttemptDiscarded(2, "http_error"),
        TextDelta("whole"),
        TurnFinished(1, Terminal.END_TURN, "length", Usage(1, 2)),
    ):
        out += parts.feed(update)
    done = SessionResult(Terminal.END_TURN, stop_reason="length", text="whole", turns=1, usage=Usage(1, 2))
    out += parts.feed(RunFinished(Success(done)))
    validated(out)
    (data,) = of_type(out, "data-rma-attempt-discarded")
    assert data["data"] == {"attempt": 2, "error": "http_error", "textIds": ["msg-t1"], "toolCallIds": ["c1"]}
    (void,) = of_type(out, "tool-input-error")
    assert void["toolCallId"] == "c1" and void["errorText"].startswith("discarded")
    assert out[-1]["finishReason"] == "length"


def test_a_run_ending_in_an_error_before_any_turn_has_no_metadata() -> None:
    parts = VercelParts("msg")
    out = parts.opening() + parts.feed(RunFinished(Failure(Timeout())))
    validated(out)
    assert out[-1] == {"type": "finish", "finishReason": "error"}


@pytest.mark.parametrize(
    "part",
    [
        {"type": "text-delta", "id": "t"},  # no delta
        {"type": "text-start", "id": "t", "text": "x"},  # a key the strict object refuses
        {"type": "finish", "finishReason": "done"},  # not one of the reasons
        {"type": "tool-output-available", "output": 1},  # no toolCallId
    ],
)
def test_the_schemas_refuse_what_the_sdk_refuses(part: dict[str, Any]) -> None:
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        validate_part(part)
