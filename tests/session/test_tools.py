"""Tool execution through run(): concurrency, dispatch, result shapes, context (T-1…T-15)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from returns.result import Failure, Success

from rma.vocabulary import SessionInfo, Terminal
from rma_shell import Telemetry, run
from rma_shell.testing.scripted import ScriptedProvider
from rma_shell.tools import Toolbox, ToolCall
from rma_shell.tools import tool as as_tool
from tests.helpers import Recorder, calls, end, idle, tool, usage


def _results(provider: ScriptedProvider, index: int = 1) -> list[tuple[Any, Any, Any]]:
    """The (tool_use_id, text, is_error) triples of the resume at ``provider.inputs[index]``."""
    resume = provider.inputs[index]
    assert isinstance(resume, list)
    return [(r["tool_use_id"], r["text"], r["is_error"]) for r in resume]


async def _one_call(handler: object, *, streaming: bool = False, **kw: Any) -> tuple[Any, ScriptedProvider]:
    provider = ScriptedProvider([calls(tool("probe", "t1", q=1)), end("fin")], streaming=streaming)
    outcome = await run(provider, handler=handler, prompt="go", **kw)
    return outcome, provider


# ── T-1 / T-15: concurrency, cap, order ────────────────────────────────────────────


class _Gauge:
    """An async tool that measures how many calls are in flight at once."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.finished: list[int] = []

    async def __call__(self, name: str, input: dict[str, Any], ctx: Any) -> str:
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await anyio.sleep(input["delay"])
        finally:
            self.active -= 1
        self.finished.append(input["i"])
        return f"r{input['i']}"


def _batch(n: int) -> list[dict[str, Any]]:
    # Later uses sleep less, so they finish before earlier ones (out of order).
    return calls(*(tool("work", f"t{i}", i=i, delay=(n - i) * 0.1) for i in range(n)))


async def test_T1_T15_at_most_8_at_once_results_in_tool_use_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    n = 12
    provider = ScriptedProvider([_batch(n), end("fin")])
    gauge = _Gauge()
    outcome = await run(provider, handler=gauge, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert gauge.peak == 8  # T-1: concurrent (T-15), capped at 8
    assert gauge.finished != sorted(gauge.finished)  # they really finished out of order
    assert _results(provider) == [(f"t{i}", f"r{i}", False) for i in range(n)]
    assert [u.id for u in outcome.unwrap().custom_tool_uses] == [f"t{i}" for i in range(n)]


@pytest.mark.parametrize("cap", [1, 3, 12])
async def test_T1_max_concurrency_option_changes_the_cap(
    autojump_clock: trio.testing.MockClock, cap: int
) -> None:
    n = 10
    provider = ScriptedProvider([_batch(n), end("fin")])
    gauge = _Gauge()
    outcome = await run(provider, handler=gauge, prompt="go", max_concurrency=cap)
    assert isinstance(outcome, Success), outcome
    assert gauge.peak == min(cap, n)
    assert _results(provider) == [(f"t{i}", f"r{i}", False) for i in range(n)]


async def test_T1_sync_tools_are_also_capped() -> None:
    lock = threading.Lock()
    state = {"active": 0, "peak": 0}
    release = threading.Event()

    def blocking(name: str, input: dict[str, Any], ctx: Any) -> str:
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
        release.wait(5)
        with lock:
            state["active"] -= 1
        return f"r{input['i']}"

    async def releaser() -> None:
        # Give every worker that can start a chance to, then let them all go.
        while state["active"] < 2:  # noqa: ASYNC110 - polling state set by worker threads
            await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        release.set()

    provider = ScriptedProvider([calls(*(tool("b", f"t{i}", i=i) for i in range(5))), end()])
    async with anyio.create_task_group() as nursery:
        nursery.start_soon(releaser)
        outcome = await run(provider, handler=blocking, prompt="go", max_concurrency=2)
    assert isinstance(outcome, Success), outcome
    assert state["peak"] == 2
    assert _results(provider) == [(f"t{i}", f"r{i}", False) for i in range(5)]


# ── T-2 / T-3: dispatch precedence ─────────────────────────────────────────────────


async def test_T2_callable_of_4_args_gets_session_info() -> None:
    seen: list[tuple[Any, ...]] = []

    def handler(name: str, input: dict[str, Any], ctx: Any, info: SessionInfo) -> str:
        seen.append((name, input, ctx, info))
        return "ok"

    outcome, _ = await _one_call(handler, context="C")
    assert isinstance(outcome, Success), outcome
    [(name, input, ctx, info)] = seen
    assert (name, input, ctx) == ("probe", {"q": 1}, "C")
    assert isinstance(info, SessionInfo)
    assert info.session_id == "sess_scripted"
    assert info.provider == "scripted"


async def test_T2_callable_of_3_args_gets_no_session_info() -> None:
    seen: list[tuple[Any, ...]] = []

    def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        seen.append((name, input, ctx))
        return "ok"

    outcome, _ = await _one_call(handler, context="C")
    assert isinstance(outcome, Success), outcome
    assert seen == [("probe", {"q": 1}, "C")]


async def test_T2_T3_object_with_4_arg_handle_tool_call_gets_info() -> None:
    class Handler:
        def __init__(self) -> None:
            self.seen: list[tuple[Any, ...]] = []

        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any, info: SessionInfo) -> str:
            self.seen.append((name, input, ctx, info))
            return "ok"

    h = Handler()
    outcome, _ = await _one_call(h, context="C", streaming=True)
    assert isinstance(outcome, Success), outcome
    [(name, _input, ctx, info)] = h.seen
    assert (name, ctx) == ("probe", "C")
    assert isinstance(info, SessionInfo) and info.session_id == "sess_scripted"
    assert info.provider == "scripted-streaming"


async def test_T2_object_with_3_arg_handle_tool_call_gets_no_info() -> None:
    h = Recorder({"probe": "found"})
    outcome, provider = await _one_call(h, context="C")
    assert isinstance(outcome, Success), outcome
    assert h.calls == [("probe", {"q": 1}, "C")]
    assert _results(provider) == [("t1", "found", False)]


async def test_T2_object_method_wins_over_the_object_being_callable() -> None:
    class Both:
        def __call__(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            return "from __call__"

        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            return "from method"

    outcome, provider = await _one_call(Both())
    assert isinstance(outcome, Success), outcome
    assert _results(provider) == [("t1", "from method", False)]


# ── T-4 … T-7: what a handler returns ──────────────────────────────────────────────


@pytest.mark.parametrize(
    ("value", "text", "is_error"),
    [
        ("plain", "plain", False),  # T-4
        ("", "", False),  # T-4: an empty string is still ok
        (Success("fine"), "fine", False),  # T-4
        (Failure("nope"), "nope", True),  # T-5
    ],
)
async def test_T4_T5_str_success_and_failure(value: object, text: str, is_error: bool) -> None:
    outcome, provider = await _one_call(lambda name, input, ctx: value)
    assert isinstance(outcome, Success), outcome
    assert _results(provider) == [("t1", text, is_error)]


async def test_T6_raising_handler_becomes_is_error_and_the_session_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        if name == "boom":
            raise ValueError("kaput")
        return "fine"

    provider = ScriptedProvider([calls(tool("boom", "t1"), tool("calm", "t2")), end("after")])
    with caplog.at_level(logging.WARNING, logger="rma.handler"):
        outcome = await run(provider, handler=handler, prompt="go")
    assert isinstance(outcome, Success), outcome
    r = outcome.unwrap()
    assert (r.terminal, r.text, r.turns) == (Terminal.END_TURN, "after", 2)
    [(id1, text1, err1), second] = _results(provider)
    assert (id1, err1) == ("t1", True)
    assert "ValueError" in text1 and "kaput" in text1
    assert second == ("t2", "fine", False)
    assert any("boom" in rec.getMessage() for rec in caplog.records if rec.name == "rma.handler")


async def test_T6_raising_async_handler_becomes_is_error() -> None:
    async def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        await anyio.lowlevel.checkpoint()
        raise KeyError("missing")

    outcome, provider = await _one_call(handler, streaming=True)
    assert isinstance(outcome, Success), outcome
    [(tid, text, is_error)] = _results(provider)
    assert (tid, is_error) == ("t1", True)
    assert "KeyError" in text and "missing" in text


@pytest.mark.parametrize(
    "value",
    # A JSON dict or list is a result since issue #13 (tests/session/test_tool_result_shapes.py).
    [None, 42, Failure({"why": 1}), b"bytes", True, ("x",), {"a": {1}}, Success(b"x")],
    ids=["None", "int", "Failure(dict)", "bytes", "bool", "tuple", "dict-not-json", "Success(bytes)"],
)
async def test_T7_other_return_shapes_are_is_error_never_a_crash(value: object) -> None:
    with anyio.fail_after(5):  # never a hang (real clock: the sync handler runs in a thread)
        outcome, provider = await _one_call(lambda name, input, ctx: value)
    assert isinstance(outcome, Success), outcome
    [(tid, text, is_error)] = _results(provider)
    assert tid == "t1" and is_error is True
    assert isinstance(text, str) and text


async def test_T7_async_handler_with_other_shape_is_error() -> None:
    async def handler(name: str, input: dict[str, Any], ctx: Any) -> object:
        return object()

    outcome, provider = await _one_call(handler)
    assert isinstance(outcome, Success), outcome
    assert _results(provider)[0][2] is True


# ── T-11: tool_uses telemetry every turn ───────────────────────────────────────────


@pytest.mark.parametrize("streaming", [False, True])
async def test_T11_tool_uses_telemetry_every_turn_including_zero(streaming: bool) -> None:
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    tel = Telemetry()
    tel.attach("t", "rma.session.tool_uses", lambda n, m, md: seen.append((dict(m), dict(md))))
    provider = ScriptedProvider(
        [calls(tool("a", "t1"), tool("b", "t2")), calls(tool("c", "t3")), end()], streaming=streaming
    )
    outcome = await run(provider, handler=Recorder(), prompt="go", telemetry=tel)
    assert isinstance(outcome, Success), outcome
    assert [m["tool_use_count"] for m, _ in seen] == [2, 1, 0]
    assert [md["turn"] for _, md in seen] == [1, 2, 3]
    assert [md["tool_use_ids"] for _, md in seen] == [["t1", "t2"], ["t3"], []]
    assert all(md["session_id"] == "sess_scripted" for _, md in seen)


# ── T-12: duplicate ids ────────────────────────────────────────────────────────────


async def test_T12_duplicate_ids_warn_naming_them_and_nothing_is_deduplicated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Request/response: a streaming host's event-id dedupe (E-11) would hide the repeat.
    batch = [
        tool("a", "dup", n=1),
        tool("b", "dup", n=2),
        tool("c", "solo"),
        usage(1, 1),
        idle("requires_action"),
    ]
    provider = ScriptedProvider([batch, end()])
    handler = Recorder()
    with caplog.at_level(logging.WARNING, logger="rma.session"):
        outcome = await run(provider, handler=handler, prompt="go")
    assert isinstance(outcome, Success), outcome
    warnings = [
        r.getMessage() for r in caplog.records if r.name == "rma.session" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1
    assert "dup" in warnings[0] and "solo" not in warnings[0]
    assert "turn 1" in warnings[0]
    # Nothing deduplicated: both calls ran, the resume carries both, both are accumulated.
    assert sorted(c[:2] for c in handler.calls) == [("a", {"n": 1}), ("b", {"n": 2}), ("c", {})]
    assert [r[0] for r in _results(provider)] == ["dup", "dup", "solo"]
    assert [u.id for u in outcome.unwrap().custom_tool_uses] == ["dup", "dup", "solo"]


async def test_T12_no_warning_without_duplicates(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rma.session"):
        outcome, _ = await _one_call(Recorder())
    assert isinstance(outcome, Success)
    assert not [r for r in caplog.records if "duplicate" in r.getMessage()]


# ── T-13: at-least-once ────────────────────────────────────────────────────────────


async def test_T13_empty_requires_action_recovery_redrives_an_already_run_tool() -> None:
    """T-13 at-least-once: S-52 recovery re-runs a handler for an id it already ran.

    The host answers the resume with a requires_action that names no tool use; the session
    recovers the pending uses from the request's own history, where the host never echoed
    a result for t1, so t1 runs a second time. Handlers must be idempotent.
    """
    provider = ScriptedProvider(
        [calls(tool("side_effect", "t1")), [usage(1, 1), idle("requires_action")], end()]
    )
    handler = Recorder()
    outcome = await run(provider, handler=handler, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert [c[0] for c in handler.calls] == ["side_effect", "side_effect"]
    r = outcome.unwrap()
    assert [u.id for u in r.custom_tool_uses] == ["t1"]  # accumulated once (S-54)
    assert r.turns == 3


# ── T-14: context; sync vs async execution ─────────────────────────────────────────


async def test_T14_context_is_passed_unchanged_to_every_call_and_event() -> None:
    ctx = {"identity": object()}
    seen: list[Any] = []

    class Handler:
        def handle_tool_call(self, name: str, input: dict[str, Any], c: Any) -> str:
            seen.append(c)
            return "ok"

        def handle_event(self, event: Any, c: Any) -> None:
            seen.append(c)

    provider = ScriptedProvider([calls(tool("a", "t1"), tool("b", "t2")), end()], streaming=True)
    outcome = await run(provider, handler=Handler(), prompt="go", context=ctx)
    assert isinstance(outcome, Success), outcome
    assert len(seen) > 2
    assert all(c is ctx for c in seen)
    assert ctx == {"identity": ctx["identity"]}


async def test_T14_T15_sync_handlers_run_in_parallel_worker_threads() -> None:
    main = threading.get_ident()
    started = threading.Event()
    release = threading.Event()
    threads: dict[str, int] = {}

    def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        threads[name] = threading.get_ident()
        if name == "first":
            started.set()
            return "ran" if release.wait(5) else "never released"
        # Another worker: only reachable while "first" blocks if calls run in parallel threads.
        if not started.wait(5):
            return "never started"
        release.set()
        return "released"

    provider = ScriptedProvider([calls(tool("first", "t1"), tool("second", "t2")), end()])
    with anyio.fail_after(5):
        outcome = await run(provider, handler=handler, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert _results(provider) == [("t1", "ran", False), ("t2", "released", False)]
    assert main not in threads.values()
    assert threads["first"] != threads["second"]


async def test_T14_a_blocking_sync_tool_does_not_block_the_trio_loop() -> None:
    main = threading.get_ident()
    started = threading.Event()
    release = threading.Event()
    where: list[int] = []
    ticks = 0

    def blocking(name: str, input: dict[str, Any], ctx: Any) -> str:
        where.append(threading.get_ident())
        started.set()
        time.sleep(0.01)  # a plain blocking call
        return "ran" if release.wait(30) else "blocked the loop"

    async def ticker() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            await anyio.sleep(0.001)

    async def loop_side() -> None:
        # Runs on the trio thread: it can only release the tool if the loop is not blocked.
        with anyio.fail_after(30):
            while not started.is_set():  # noqa: ASYNC110 - a threading.Event, set by the worker
                await anyio.sleep(0.001)
            # The ticker goes on while the tool holds its worker thread: count ticks, not time.
            ticked = ticks
            while ticks < ticked + 4:  # noqa: ASYNC110 - ticks are counted by the ticker task
                await anyio.sleep(0.001)
        release.set()

    provider = ScriptedProvider([calls(tool("sync", "t1")), end()])
    async with anyio.create_task_group() as nursery:
        nursery.start_soon(ticker)
        nursery.start_soon(loop_side)
        outcome = await run(provider, handler=blocking, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert _results(provider) == [("t1", "ran", False)]
    assert where and where[0] != main
    assert ticks > 3  # the loop kept running while the tool blocked its worker thread


async def test_T14_async_handlers_are_awaited_on_the_trio_thread() -> None:
    main = threading.get_ident()
    where: list[int] = []

    class AsyncHandler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            await anyio.lowlevel.checkpoint()
            where.append(threading.get_ident())
            return f"awaited {name}"

    outcome, provider = await _one_call(AsyncHandler())
    assert isinstance(outcome, Success), outcome
    assert _results(provider) == [("t1", "awaited probe", False)]
    assert where == [main]


async def test_T14_async_callable_object_is_awaited() -> None:
    class AsyncCallable:
        async def __call__(self, name: str, input: dict[str, Any], ctx: Any, info: SessionInfo) -> str:
            await anyio.lowlevel.checkpoint()
            return f"{name}@{info.session_id}"

    outcome, provider = await _one_call(AsyncCallable())
    assert isinstance(outcome, Success), outcome
    assert _results(provider) == [("t1", "probe@sess_scripted", False)]


# ── regressions for defects found while pinning the above ──────────────────────────


async def test_T14_a_sync_callable_returning_an_awaitable_is_awaited() -> None:
    async def real(name: str, input: dict[str, Any], ctx: Any) -> str:
        await anyio.lowlevel.checkpoint()
        return f"async {name}"

    def wrapper(name: str, input: dict[str, Any], ctx: Any) -> Any:  # e.g. a plain logging decorator
        return real(name, input, ctx)

    outcome, provider = await _one_call(wrapper)
    assert isinstance(outcome, Success), outcome
    assert _results(provider) == [("t1", "async probe", False)]


async def test_T2_mutating_session_info_metadata_does_not_leak_into_the_session() -> None:
    tel = Telemetry()
    seen: list[dict[str, Any]] = []
    tel.attach("all", "rma.session.*", lambda n, m, md: seen.append(dict(md)))

    def handler(name: str, input: dict[str, Any], ctx: Any, info: SessionInfo) -> str:
        with contextlib.suppress(TypeError):  # a read-only mapping is a fine answer too
            info.metadata["leaked"] = True  # type: ignore[index]
        return "ok"

    outcome, _ = await _one_call(handler, telemetry=tel, metadata={"tenant": "acme"})
    assert isinstance(outcome, Success), outcome
    assert seen and all("leaked" not in md for md in seen)


async def test_T14_E8_a_handler_mutating_nested_input_does_not_rewrite_the_record() -> None:
    def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        input["opts"]["injected"] = 1
        input["top"] = 2
        return "ok"

    provider = ScriptedProvider([calls(tool("probe", "t1", opts={"a": 1})), end()])
    outcome = await run(provider, handler=handler, prompt="go")
    assert isinstance(outcome, Success), outcome
    r = outcome.unwrap()
    assert r.events[0] == {"type": "tool_use", "id": "t1", "name": "probe", "input": {"opts": {"a": 1}}}
    assert r.custom_tool_uses[0].input == {"opts": {"a": 1}}


async def test_T1_max_concurrency_above_40_holds_for_sync_handlers() -> None:
    n = 45
    lock = threading.Lock()
    state = {"active": 0, "peak": 0}
    release = threading.Event()

    def blocking(name: str, input: dict[str, Any], ctx: Any) -> str:
        with lock:
            state["active"] += 1
            state["peak"] = max(state["peak"], state["active"])
        release.wait(60)
        with lock:
            state["active"] -= 1
        return "ok"

    async def releaser() -> None:
        # All 45 start at once when they may; capped at anyio's default 40 they never would,
        # and the releaser lets them go after 30 s for the peak assertion to say so.
        with anyio.move_on_after(30):
            while state["peak"] < n:  # noqa: ASYNC110 - polling state set by worker threads
                await anyio.sleep(0.005)
        release.set()

    provider = ScriptedProvider([calls(*(tool("b", f"t{i}") for i in range(n))), end()])
    async with anyio.create_task_group() as nursery:
        nursery.start_soon(releaser)
        outcome = await run(provider, handler=blocking, prompt="go", max_concurrency=n)
    assert isinstance(outcome, Success), outcome
    assert state["peak"] == n


# ── the idempotency key: stable per session and tool-use id (issue #15) ──────────


async def test_a_tool_calls_info_carries_its_id_idempotency_key_and_first_attempt() -> None:
    seen: list[SessionInfo] = []

    def handler(name: str, input: dict[str, Any], ctx: Any, info: SessionInfo) -> str:
        seen.append(info)
        return "ok"

    provider = ScriptedProvider([calls(tool("a", "t1"), tool("b", "t2")), end("fin")])
    outcome = await run(provider, handler=handler, prompt="go", metadata={"team": "x"})
    assert isinstance(outcome, Success)
    by_id = {i.tool_use_id: i for i in seen}
    assert set(by_id) == {"t1", "t2"}
    for use_id, info in by_id.items():
        assert info.idempotency_key == f"{info.session_id}:{use_id}" and info.session_id
        assert info.attempt == 1 and info.metadata["team"] == "x"


async def test_a_typed_tools_call_sees_the_same_idempotency_key() -> None:
    keys: list[tuple[str | None, int]] = []

    @as_tool
    def pay(amount: int, call: ToolCall) -> str:
        """Pay."""
        keys.append((call.info.idempotency_key, call.info.attempt))
        return "paid"

    provider = ScriptedProvider([calls(tool("pay", "t9", amount=3)), end("fin")])
    outcome = await run(provider, handler=Toolbox(pay), prompt="go")
    assert isinstance(outcome, Success)
    assert keys == [(f"{outcome.unwrap().session_id}:t9", 1)]
