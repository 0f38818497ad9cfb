"""Live updates from the session machine (issue #14), on the scripted host in both modes:
``ToolCallFinished`` for every call (a raising tool's and an unrunnable one's too), a
``TurnFinished`` per turn with that turn's own usage, ``handle_update`` shapes, isolation of a
raising observer, and updates computed only when something consumes them."""

from __future__ import annotations

import io
from typing import Any

import pytest

from rma.errors import InvalidOpts
from rma.live import LiveUpdate, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished
from rma.provider import codec_for
from rma.replay import replay_lines
from rma.session.commands import DeliverEvent, DeliverUpdate
from rma.vocabulary import SessionInfo, Terminal
from rma_shell import open_session, run
from rma_shell.testing import ScriptedProvider
from tests.helpers import calls, end, text, tool


class Observer:
    def __init__(self) -> None:
        self.updates: list[LiveUpdate] = []
        self.infos: list[Any] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        if name == "broken":
            raise RuntimeError("broken tool")
        return "ok"

    async def handle_update(self, update: LiveUpdate, ctx: object, info: SessionInfo) -> None:
        self.updates.append(update)
        self.infos.append(info)


@pytest.mark.parametrize("streaming", [False, True])
async def test_every_call_finishes_and_every_turn_ends_with_its_own_usage(streaming: bool) -> None:
    script = [
        [text("looking"), *calls(tool("lookup", "t1", q=1), tool("broken", "t2"), i=3, o=2)],
        end("done", i=5, o=7),
    ]
    observer = Observer()
    result = (
        await run(ScriptedProvider(script, streaming=streaming), handler=observer, prompt="go")
    ).unwrap()
    assert result.text == "done"
    assert observer.updates == [
        TextDelta("looking"),
        ToolCallStarted("t1", "lookup"),
        ToolCallStarted("t2", "broken"),
        TurnFinished(1, Terminal.REQUIRES_ACTION, {"type": "requires_action"}, observer.updates[3].usage),
        ToolCallFinished("t1", "lookup", False),
        ToolCallFinished("t2", "broken", True),
        TextDelta("done"),
        TurnFinished(2, Terminal.END_TURN, {"type": "end_turn"}, observer.updates[7].usage),
    ]
    first, second = observer.updates[3], observer.updates[7]
    assert isinstance(first, TurnFinished) and isinstance(second, TurnFinished)
    assert first.usage is not None and second.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (3, 2)
    assert (second.usage.input_tokens, second.usage.output_tokens) == (5, 7)
    assert all(isinstance(i, SessionInfo) and i.session_id == result.session_id for i in observer.infos)


async def test_a_raising_handle_update_is_isolated_and_the_session_goes_on() -> None:
    class Raising(Observer):
        def handle_update(self, update: LiveUpdate, ctx: object) -> None:  # type: ignore[override]
            self.updates.append(update)
            raise ValueError("observer bug")

    observer = Raising()
    result = (
        await run(ScriptedProvider([[text("a"), *calls(tool("lookup", "t1"))], end("b")]), handler=observer)
    ).unwrap()
    assert result.text == "b" and len(observer.updates) == 6


async def test_no_update_is_built_for_a_handler_without_handle_update() -> None:
    class Plain:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return "ok"

        def handle_event(self, event: Any, ctx: object) -> None:
            pass

    script = [[text("a"), *calls(tool("lookup", "t1"))], end("b")]
    for handler, wanted in ((Plain(), False), (Observer(), True)):
        log = io.StringIO()
        (await run(ScriptedProvider(script), handler=handler, prompt="go", record=log)).unwrap()
        commands = replay_lines(log.getvalue().splitlines(), codec_for).unwrap().commands
        assert any(isinstance(c, DeliverEvent) for c in commands) is not wanted  # Plain observes events
        assert any(isinstance(c, DeliverUpdate) for c in commands) is wanted


async def test_a_handle_update_of_the_wrong_shape_is_refused_naming_the_handler() -> None:
    class Wrong:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return "ok"

        def handle_update(self) -> None:
            pass

    provider = ScriptedProvider([end("x")])
    outcome = await run(provider, handler=Wrong(), prompt="go")
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "handler" and "handle_update" in error.message
    assert provider.inputs == []  # refused before anything reached the host


async def test_every_open_iterator_gets_every_update_and_all_end_with_the_session() -> None:
    class Plain:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return "ok"

    provider = ScriptedProvider([[text("a"), *calls(tool("lookup", "t1"))], end("b")])
    async with open_session(provider, handler=Plain()) as session:
        first, second = session.updates(), session.updates()
        await session.message("go")
        assert (await session.next_result()).unwrap().text == "b"
    # Closing the session ends both iterators once they have read what they were sent.
    got_first, got_second = [u async for u in first], [u async for u in second]
    assert got_first == got_second and [type(u).__name__ for u in got_first] == [
        "TextDelta",
        "ToolCallStarted",
        "TurnFinished",
        "ToolCallFinished",
        "TextDelta",
        "TurnFinished",
    ]
    assert [u async for u in session.updates()] == []  # one opened after the close ends at once
