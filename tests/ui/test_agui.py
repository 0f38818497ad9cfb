"""The AG-UI adapter (rma_shell.ui.agui): every event it emits validates against the official
``ag-ui-protocol`` models and serializes back to itself (no unknown or misspelled keys); the
events follow the protocol's lifecycle; a run, a failing run and an approval round trip
(interrupt, then ``resume``) served through Starlette and read with httpx; bad bodies are 400s
naming the field."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from returns.result import Failure, Success

from rma.errors import Timeout
from rma.live import AttemptDiscarded, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished
from rma.vocabulary import SessionResult, Terminal, Usage
from rma_shell import Agent, MemoryJournal, RunFinished
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing.local import status
from rma_shell.ui import AguiEvents, agui_endpoint
from tests.ui.common import LOOKUP_SCRIPT, REFUND_SCRIPT, app_of, events, lookup_customer, post, refund

ag_ui = pytest.importorskip("ag_ui.core", reason="the AG-UI oracle: pip install ag-ui-protocol (dev)")
from pydantic import TypeAdapter  # noqa: E402

EVENT: TypeAdapter[Any] = TypeAdapter(ag_ui.Event)


def validated(sequence: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each event parses as its AG-UI model with nothing left over and dumps back to itself;
    the sequence keeps the lifecycle (run, steps, messages, calls opened and closed in order)."""
    for event in sequence:
        model = EVENT.validate_python(event)
        assert not model.model_extra, (event, model.model_extra)
        assert model.model_dump(mode="json", by_alias=True) == event
    check_lifecycle(sequence)
    return list(sequence)


def check_lifecycle(sequence: Sequence[dict[str, Any]]) -> None:
    assert sequence[0]["type"] == "RUN_STARTED"
    assert sequence[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    assert all(e["type"] not in ("RUN_STARTED", "RUN_FINISHED", "RUN_ERROR") for e in sequence[1:-1])
    text: str | None = None
    step: str | None = None
    calls: dict[str, str] = {}  # id -> "open" | "ended"
    for e in sequence:
        match e["type"]:
            case "TEXT_MESSAGE_START":
                assert text is None
                text = e["messageId"]
            case "TEXT_MESSAGE_CONTENT":
                assert text == e["messageId"] and e["delta"]
            case "TEXT_MESSAGE_END":
                assert text == e["messageId"]
                text = None
            case "STEP_STARTED":
                assert step is None
                step = e["stepName"]
            case "STEP_FINISHED":
                assert step == e["stepName"]
                step = None
            case "TOOL_CALL_START":
                assert e["toolCallId"] not in calls
                calls[e["toolCallId"]] = "open"
            case "TOOL_CALL_ARGS":
                assert calls[e["toolCallId"]] == "open"
            case "TOOL_CALL_END":
                assert calls[e["toolCallId"]] == "open"
                calls[e["toolCallId"]] = "ended"
            case "TOOL_CALL_RESULT":
                assert calls.get(e["toolCallId"], "ended") == "ended"
            case "RUN_FINISHED" | "RUN_ERROR":
                assert text is None and step is None
                assert all(state == "ended" for state in calls.values())


def run_input(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "threadId": "thread-1",
        "runId": extra.pop("runId", "run-1"),
        "messages": [{"id": "u1", "role": "user", "content": text}],
        **extra,
    }


def of_type(sequence: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in sequence if e["type"] == kind]


async def test_a_run_streams_text_a_tool_call_with_its_arguments_and_result_then_run_finished() -> None:
    with OpenAIEmulator(LOOKUP_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="qwen3:8b", stream=True)
        agent = Agent(instructions="You are a support agent.", tools=[lookup_customer], host=host)
        response = await post(app_of(agui_endpoint(agent)), run_input("Who is ada@example.com?"))
        await host.close()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    got = validated(events(response.text))
    kinds = [e["type"] for e in got]
    assert kinds[0] == "RUN_STARTED" and got[0]["threadId"] == "thread-1" and got[0]["runId"] == "run-1"
    assert kinds.index("TOOL_CALL_START") < kinds.index("TOOL_CALL_ARGS") < kinds.index("TOOL_CALL_RESULT")
    (start,) = of_type(got, "TOOL_CALL_START")
    assert start["toolCallName"] == "lookup_customer"
    args = "".join(e["delta"] for e in of_type(got, "TOOL_CALL_ARGS"))
    assert json.loads(args) == {"email": "ada@example.com"}
    (result,) = of_type(got, "TOOL_CALL_RESULT")
    assert result["toolCallId"] == start["toolCallId"]
    assert result["content"] == "Customer ada@example.com: Pro plan, active."
    said = "".join(e["delta"] for e in of_type(got, "TEXT_MESSAGE_CONTENT"))
    assert said == "Let me look that up. Ada is on the Pro plan."
    assert [e["stepName"] for e in of_type(got, "STEP_STARTED")] == ["turn 1", "turn 2"]
    finished = got[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["result"] == "Ada is on the Pro plan."
    (usage,) = finished["usage"]
    assert (
        usage["model"] == "qwen3:8b" and usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    )


async def test_a_failing_run_ends_with_run_error_carrying_its_kind() -> None:
    with OpenAIEmulator([{"content": "never sent"}], faults={0: status(401)}) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        agent = Agent(tools=[lookup_customer], host=host)
        response = await post(app_of(agui_endpoint(agent)), run_input("hi"))
        await host.close()
    got = validated(events(response.text))
    error = got[-1]
    assert error["type"] == "RUN_ERROR" and "401" in error["message"] and error["code"]


async def test_an_approval_is_an_interrupt_and_resume_entries_carry_the_run_on() -> None:
    journal = MemoryJournal()
    with OpenAIEmulator(REFUND_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        agent = Agent(tools=[refund], host=host, journal=journal)
        app = app_of(agui_endpoint(agent))
        paused = validated(events((await post(app, run_input("Refund order 42"))).text))
        finished = paused[-1]
        assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt"
        (interrupt,) = finished["outcome"]["interrupts"]
        (start,) = of_type(paused, "TOOL_CALL_START")
        assert interrupt["toolCallId"] == start["toolCallId"] and interrupt["reason"] == "tool_approval"
        assert json.loads(of_type(paused, "TOOL_CALL_ARGS")[0]["delta"]) == {"order_id": "42", "cents": 250}
        assert not of_type(paused, "TOOL_CALL_RESULT")  # it has not run

        answer = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
        resumed_response = await post(app, run_input("", runId="run-2", resume=[answer]))
        resumed = validated(events(resumed_response.text))
        (result,) = of_type(resumed, "TOOL_CALL_RESULT")
        assert result["toolCallId"] == start["toolCallId"] and result["content"] == "refunded 250 on 42"
        assert resumed[-1]["type"] == "RUN_FINISHED" and resumed[-1]["result"] == "The refund is done."

        again = await post(app, run_input("", runId="run-3", resume=[answer]))  # decided already
        await host.close()
    assert again.status_code == 400 and again.json()["field"] == "approval"


async def test_a_denied_approval_answers_the_call_with_the_reason() -> None:
    with OpenAIEmulator(REFUND_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="m")
        agent = Agent(tools=[refund], host=host, journal=MemoryJournal())
        app = app_of(agui_endpoint(agent))
        paused = events((await post(app, run_input("Refund order 42"))).text)
        (interrupt,) = paused[-1]["outcome"]["interrupts"]
        answer = {
            "interruptId": interrupt["id"],
            "status": "resolved",
            "payload": {"approved": False, "reason": "over the limit"},
        }
        resumed = validated(events((await post(app, run_input("", runId="run-2", resume=[answer]))).text))
        await host.close()
    (result,) = of_type(resumed, "TOOL_CALL_RESULT")
    assert "over the limit" in result["content"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"runId": "r", "messages": []}, "threadId"),
        ({"threadId": "t", "runId": "r", "messages": "hi"}, "messages"),
        (
            {"threadId": "t", "runId": "r", "messages": [{"id": "a", "role": "assistant", "content": "x"}]},
            "messages",
        ),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [],
                "resume": [{"interruptId": "nope", "status": "resolved"}],
            },
            "resume[0].interruptId",
        ),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [],
                "resume": [{"interruptId": "k/c", "status": "maybe"}],
            },
            "resume[0].status",
        ),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [],
                "resume": [{"interruptId": "k/c", "status": "resolved"}],
            },
            "resume[0].payload.approved",
        ),
    ],
)
async def test_a_bad_body_is_a_400_naming_the_field(body: Any, field: str) -> None:
    response = await post(app_of(agui_endpoint(Agent())), body)
    assert response.status_code == 400 and response.json()["field"] == field


async def test_not_json_is_a_400_and_get_is_a_405() -> None:
    app = app_of(agui_endpoint(Agent()))
    assert (await post(app, b"{not json")).status_code == 400
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
        assert (await client.get("/agent")).status_code == 405


def test_a_discarded_attempt_closes_what_it_opened_and_names_it_in_a_custom_event() -> None:
    stream = AguiEvents("t", "r")
    out = stream.opening()
    for update in (
        TextDelta("partial "),
        ToolCallStarted("c1", "lookup"),
        AttemptDiscarded(1, "stream_dropped"),
        TextDelta("whole answer"),
        TurnFinished(1, Terminal.END_TURN, "stop", Usage(3, 4)),
    ):
        out += stream.feed(update)
    out += stream.feed(RunFinished(Success(SessionResult(Terminal.END_TURN, text="whole answer", turns=1))))
    validated(out)
    (custom,) = of_type(out, "CUSTOM")
    assert custom["name"] == "rma.attempt_discarded"
    assert custom["value"] == {
        "attempt": 1,
        "error": "stream_dropped",
        "messageIds": ["r-m1"],
        "toolCallIds": ["c1"],
    }
    (void,) = of_type(out, "TOOL_CALL_RESULT")  # answered, so no client takes it for its own to answer
    assert void["toolCallId"] == "c1" and void["content"].startswith("discarded")
    assert [e["delta"] for e in of_type(out, "TEXT_MESSAGE_CONTENT")] == ["partial ", "whole answer"]


def test_calls_without_ids_get_ids_of_their_own_matched_in_order() -> None:
    stream = AguiEvents("t", "r")
    out = stream.opening()
    for update in (
        ToolCallStarted(None, "a"),
        ToolCallStarted(None, "a"),
        TurnFinished(1, Terminal.REQUIRES_ACTION),
        ToolCallFinished(None, "a", False, input={"n": 1}, output="one"),
        ToolCallFinished(None, "a", True, input={"n": 2}, output="two"),
    ):
        out += stream.feed(update)
    out += stream.feed(RunFinished(Failure(Timeout())))
    validated(out)
    assert [(e["toolCallId"], e["content"]) for e in of_type(out, "TOOL_CALL_RESULT")] == [
        ("r-call1", "one"),
        ("r-call2", "two"),
    ]
    assert out[-1]["type"] == "RUN_ERROR" and out[-1]["code"] == "timeout"
