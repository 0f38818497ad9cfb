"""rma_shell.handler: the remembered handler shape and the one-call batch change nothing visible.

``HandlerAdapter`` remembers how a plain function handler is called (``inspect.signature``
costs more than a local turn's own work) and runs a batch of one call without a nursery.
The shape must be inspected again whenever what decides it could have changed, and a batch
of one must report, fail and emit telemetry exactly as a larger batch does.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio

from rma.session.options import CallShape, handler_shape
from rma.vocabulary import SessionInfo, ToolUse
from rma_shell.handler import HandlerAdapter
from rma_shell.telemetry import Telemetry

INFO = SessionInfo(provider="local", session_id="s1")


def adapter(handler: object, telemetry: Telemetry | None = None) -> HandlerAdapter:
    return HandlerAdapter(handler, None, max_concurrency=8, telemetry=telemetry or Telemetry(), metadata={})


def test_the_shape_follows_a_method_whose_code_is_replaced() -> None:
    class Handler:
        async def handle_tool_call(self, name: str, input: Any, ctx: object) -> str:
            return "three"

    async def with_info(self: object, name: str, input: Any, ctx: object, info: object) -> str:
        return "four"

    assert adapter(Handler())._takes_info is False
    Handler.handle_tool_call.__code__ = with_info.__code__  # type: ignore[attr-defined]
    assert handler_shape(Handler()) == CallShape(method=True, takes_info=True)
    assert adapter(Handler())._takes_info is True


def test_the_shape_follows_defaults_and_rebound_methods() -> None:
    class Handler:
        def handle_tool_call(self, name: str, input: Any, ctx: object, info: object) -> str:
            return "x"

    assert adapter(Handler())._takes_info is True
    Handler.handle_tool_call.__defaults__ = (None,)  # type: ignore[attr-defined]
    assert adapter(Handler())._takes_info is True  # still binds 4 first
    handler = Handler()

    def three(name: str, input: Any, ctx: object) -> str:
        return "three"

    handler.handle_tool_call = three  # type: ignore[method-assign]
    assert adapter(handler)._takes_info is False


def test_wrapped_and_partial_handlers_are_inspected_every_time() -> None:
    def four(name: str, input: Any, ctx: object, info: object) -> str:
        return "four"

    @functools.wraps(four)
    def wrapper(*args: Any) -> str:
        return four(*args)

    assert adapter(wrapper)._takes_info is True
    wrapper.__wrapped__ = lambda name, input, ctx: "three"  # type: ignore[attr-defined]
    assert adapter(wrapper)._takes_info is False
    assert adapter(functools.partial(four, "bound-name"))._takes_info is False


async def test_a_batch_of_one_reports_errors_and_telemetry_like_a_larger_batch() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    telemetry = Telemetry()
    telemetry.attach("t", "rma.tool.*", lambda n, m, md: events.append((n, dict(md))), content=True)

    async def tool(name: str, input: Any, ctx: object) -> str:
        if name == "boom":
            raise RuntimeError("no")
        await anyio.lowlevel.checkpoint()
        return f"ok {input['n']}"

    tools = adapter(tool, telemetry)
    one = await tools.run_batch([ToolUse("a", "step", {"n": 1})], INFO)
    failed = await tools.run_batch([ToolUse("b", "boom", {})], INFO)
    two = await tools.run_batch([ToolUse("c", "step", {"n": 2}), ToolUse("d", "boom", {})], INFO)
    assert [(r.tool_use_id, r.text, r.is_error) for r in one] == [("a", "ok 1", False)]
    assert [(r.tool_use_id, r.is_error) for r in failed] == [("b", True)]
    assert failed[0].text == "tool error: RuntimeError('no')"
    assert [(r.tool_use_id, r.is_error) for r in two] == [("c", False), ("d", True)]
    names = [(n, md["tool_use_id"]) for n, md in events]
    assert names[:4] == [
        ("rma.tool.start", "a"),
        ("rma.tool.stop", "a"),
        ("rma.tool.start", "b"),
        ("rma.tool.exception", "b"),
    ]
    assert events[0][1]["content"] == {"arguments": {"n": 1}}
    assert events[1][1]["content"] == {"result": "ok 1"} and events[1][1]["is_error"] is False
    assert events[3][1]["kind"] == "RuntimeError" and events[3][1]["session_id"] == "s1"


async def test_a_batch_larger_than_max_concurrency_runs_at_most_that_many_calls_at_once() -> None:
    running, peak = [0], [0]

    async def tool(name: str, input: dict[str, object], ctx: object) -> str:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await anyio.sleep(0.01)
        running[0] -= 1
        return "x"

    tools = HandlerAdapter(tool, None, max_concurrency=2, telemetry=Telemetry(), metadata={})
    uses = [ToolUse(f"u{i}", "step", {}) for i in range(5)]
    results = await tools.run_batch(uses, INFO)
    assert [r.tool_use_id for r in results] == [u.id for u in uses]
    assert peak[0] == 2
    # A batch of one needs no limiter: the session runs one batch at a time (RunTools is
    # single-flight in the core), so nothing else could hold a token.
    assert len(await tools.run_batch(uses[:1], INFO)) == 1


def test_one_function_as_a_plain_handler_and_as_a_method_gets_each_its_own_shape() -> None:
    def handle(name: str, input: dict[str, Any], ctx: Any) -> str:
        return "ok"

    class Wrapper:
        handle_tool_call = handle  # bound: (self=name, input, ctx) — only two left to pass

    assert handler_shape(handle) == CallShape(method=False, takes_info=False)
    assert handler_shape(Wrapper()) is None
    assert handler_shape(handle) == CallShape(method=False, takes_info=False)
