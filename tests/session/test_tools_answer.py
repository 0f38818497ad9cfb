"""``tools_answer`` and ``turn_follows_tools``: the pure step from a batch's results to the next
turn, which a Temporal worker running a batch and its turn as one activity calls too."""

from __future__ import annotations

from typing import Any

from returns.result import Success

from rma.content import Image
from rma.errors import ToolContentUnsupported
from rma.providers.scripted import ScriptedCodec, ScriptedStreamingCodec
from rma.session import commands as c
from rma.session.completing import ToolsAnswer, tools_answer, turn_follows_tools
from rma.session.events import Opened, PushFinished, StreamConnected, StreamEvent, ToolsFinished, TurnPolled
from rma.session.machine import Phase, State, initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import ToolResult

TOOLS_TURN = (
    {"type": "tool_use", "id": "t1", "name": "a", "input": {"x": 1}},
    {"type": "tool_use", "id": "t2", "name": "b", "input": {}},
    {"type": "idle", "stop_reason": "requires_action", "id": "i1"},
)


def in_tools(**config: Any) -> tuple[State, c.RunTools]:
    s = initial_state(SessionConfig(codec=ScriptedCodec(), prompt="go", **config))
    s, _ = step(s, Opened("s1"))
    s, out = step(s, TurnPolled(TOOLS_TURN))
    assert s.phase is Phase.TOOLS
    return s, next(x for x in out if isinstance(x, c.RunTools))


def test_the_next_turn_s_input_is_what_tools_answer_gives_for_the_batch_s_facts() -> None:
    s, run = in_tools()
    assert turn_follows_tools(s)
    results = (ToolResult("t1", "one"), ToolResult("t2", "two", True))
    answer = tools_answer(s.config, s.pending_uses, s.pending_confirmations, results, ())
    s, out = step(s, ToolsFinished(run.batch, results))
    [poll] = [x for x in out if isinstance(x, c.PollTurn)]
    assert isinstance(answer, ToolsAnswer) and poll.input == answer.input
    assert poll.purpose == "resume"


def test_on_a_streaming_host_too() -> None:
    s = initial_state(SessionConfig(codec=ScriptedStreamingCodec(), prompt="go"))
    s, _ = step(s, Opened("s1"))
    s, _ = step(s, StreamConnected(0))
    s, _ = step(s, PushFinished(Success(None)))
    for ev in TOOLS_TURN:
        s, out = step(s, StreamEvent(0, ev))
    run = next(x for x in out if isinstance(x, c.RunTools))
    assert turn_follows_tools(s)
    results = (ToolResult("t1", "one"), ToolResult("t2", "two"))
    answer = tools_answer(s.config, s.pending_uses, (), results, ())
    s, out = step(s, ToolsFinished(run.batch, results))
    [push] = [x for x in out if isinstance(x, c.PushInput)]
    assert isinstance(answer, ToolsAnswer) and push.input == answer.input


def test_content_the_host_cannot_take_ends_the_request_in_both() -> None:
    s, run = in_tools()
    image = (Image(media_type="image/png", data="aGk="),)
    results = (ToolResult("t1", "", content=image), ToolResult("t2", "two"))
    answer = tools_answer(s.config, s.pending_uses, (), results, ())
    s, out = step(s, ToolsFinished(run.batch, results))
    assert isinstance(answer, ToolContentUnsupported)
    assert not [x for x in out if isinstance(x, c.PollTurn)] and s.phase is Phase.DONE


def test_no_turn_follows_for_certain_past_the_terminal_tool_or_a_typed_output() -> None:
    s, _ = in_tools(terminal_tool="b")
    assert not turn_follows_tools(s)
    s, _ = in_tools(terminal_tool="z")
    assert turn_follows_tools(s)
    s, _ = in_tools(terminal_tool="z", output_tool=True)
    assert not turn_follows_tools(s)
