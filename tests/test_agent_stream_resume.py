"""``Agent.stream_resume``: a paused run's approval decided, its carrying-on read as live updates
(the approved call's answer with its input and output, the next turn), ending in
``RunFinished`` with the run's result; and ``ToolCallFinished``'s input and output stay out of
its equality."""

from __future__ import annotations

from returns.result import Failure, Success

from rma.journal import AwaitingApproval
from rma.live import TextDelta, ToolCallFinished, TurnFinished
from rma_shell import Agent, MemoryJournal, RunFinished
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from tests.ui.common import REFUND_SCRIPT, refund


async def test_stream_resume_reads_the_approved_call_and_the_turns_after_it() -> None:
    with OpenAIEmulator(REFUND_SCRIPT) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        agent = Agent(tools=[refund], host=host, journal=MemoryJournal())
        paused = await agent.run("Refund order 42", journal_key="k")
        assert isinstance(paused, Failure) and isinstance(paused.failure(), AwaitingApproval)
        (waiting,) = paused.failure().waiting
        assert agent.approve("k", waiting.tool_use_id, "allow") == Success(None)
        async with agent.stream_resume("k") as updates:
            seen = [update async for update in updates]
        await host.close()
    finished = [u for u in seen if isinstance(u, ToolCallFinished)]
    assert finished == [ToolCallFinished(waiting.tool_use_id, "refund", False)]
    assert (
        finished[0].input == {"order_id": "42", "cents": 250} and finished[0].output == "refunded 250 on 42"
    )
    assert "".join(u.text for u in seen if isinstance(u, TextDelta)) == "The refund is done."
    assert any(isinstance(u, TurnFinished) for u in seen)
    last = seen[-1]
    assert isinstance(last, RunFinished) and last.result.unwrap().text == "The refund is done."


def test_a_finished_calls_input_and_output_are_not_part_of_its_value() -> None:
    plain = ToolCallFinished("c", "t", False)
    full = ToolCallFinished("c", "t", False, input={"a": 1}, output="ok")
    assert plain == full and (plain.input, plain.output) == (None, None)
    assert ToolCallFinished("c", "t", True, output="ok") != full
