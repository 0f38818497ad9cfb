"""Calling the user's handler: tool calls (T-) and event observation (E-).

A handler is an object with ``handle_tool_call(name, input, ctx[, info])`` and optionally
``handle_event(event, ctx[, info])`` (raw events) and ``handle_update(update, ctx[, info])``
(``rma.live`` updates) — sync or async — or a plain callable of 3 or 4 arguments. Its
shape is inspected once (``rma.session.options.handler_shape``). Tool calls of a batch run
concurrently under a capacity limit with results in tool-use order (T-1); sync handlers run
in worker threads so they never block the loop. ``Handler`` states the contract and
``Capabilities`` is the one place a handler's optional members are found. Whatever a
handler does — raise, return a wrong shape — becomes an ``is_error`` result (T-6, T-7); cancellation (trio's
``Cancelled``, asyncio's ``CancelledError``) is never swallowed.

What a tool may return (``result_of``): a ``str`` (sent as is), a JSON-serialisable ``dict`` or
``list`` (sent as its JSON text), a rich result — an ``rma.content.Image`` or ``Document``, or
a list of them with text, in order — or ``Success(value)`` / ``Failure(value)`` of any of those
(a ``Failure`` is an ``is_error`` result). Anything else is an ``is_error`` result naming the type.
A raising tool is logged at WARNING on ``rma.handler`` with its traceback.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

import anyio
import attrs
from returns.result import Failure, Success

from rma.content import Document, Image, Part, is_rich
from rma.live import LiveUpdate
from rma.session.options import CallShape, event_hook_shape, handler_shape, update_hook_shape
from rma.vocabulary import JSON, SessionInfo, ToolResult, ToolUse, call_info
from rma_shell.logging import log_fields
from rma_shell.telemetry import Telemetry

log = logging.getLogger("rma.handler")


def is_async(fn: Callable[..., Any]) -> bool:
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    # An instance whose __call__ is async (a callable object used as a handler).
    if inspect.isroutine(target) or not callable(target):
        return False
    return inspect.iscoroutinefunction(type(target).__call__)


_NO_CONFIRM = "denied by rma: the handler has no confirm_tool_use, so {name} was not approved"


def accepts(fn: Callable[..., Any], n: int) -> bool:
    """Whether ``fn`` can be called with ``n`` positional arguments (an optional ``info``)."""
    try:
        inspect.signature(fn).bind(*([None] * n))
    except (TypeError, ValueError):
        return False
    return True


def _verdict(use: ToolUse, value: object) -> ToolResult:
    if value is True or value == "allow" or isinstance(value, Success):
        return ToolResult(use.id, "", False)
    if isinstance(value, Failure) and isinstance(value.failure(), str):
        return ToolResult(use.id, value.failure(), True)
    if value is False or value == "deny":
        return ToolResult(use.id, f"denied by the handler: {use.name}", True)
    return ToolResult(use.id, f"denied: confirm_tool_use returned {type(value).__name__}", True)


_TOO_DEEP = "tool error: the input is nested too deeply to hand to the tool; send a flatter JSON object"


def _own_copy(use: ToolUse) -> dict[str, Any]:
    """A deep copy: a handler mutating its input must not rewrite the recorded events (E-8).

    Codecs refuse inputs nested beyond ``MAX_TOOL_INPUT_DEPTH``; a provider that does not can
    still hand over one deep enough to exhaust the copy's recursion — a ``RecursionError`` the
    callers answer as an error result rather than let it end the session.
    """
    return copy.deepcopy(dict(use.input))


def _boxed(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any]:
    return (fn(*args),)


def result_of(tool_use_id: str | None, value: object) -> ToolResult:
    """Turn what a handler returned into a ToolResult (T-4, T-5, T-7).

    ``str`` is sent as is; a ``dict`` or ``list`` is sent as its JSON text (``json.dumps``,
    non-ASCII kept, NaN refused); ``Success(x)`` is ``x`` and ``Failure(x)`` is ``x`` as an
    ``is_error`` result, for ``x`` of those types. Anything else — ``None``, a number, an
    object, a dict that is not JSON — is an ``is_error`` result naming what was returned.
    """
    if isinstance(value, str):
        return ToolResult(tool_use_id, value, False)
    if isinstance(value, Success):
        return _text_of(tool_use_id, value.unwrap(), False, "Success({})")
    if isinstance(value, Failure):
        return _text_of(tool_use_id, value.failure(), True, "Failure({})")
    return _text_of(tool_use_id, value, False, "{}")


def _rich_of(tool_use_id: str | None, inner: object, is_error: bool) -> ToolResult:
    """A rich result: an ``Image`` / ``Document``, or a list of them with text (and JSON
    values, written as their JSON text) in order."""
    items = list(inner) if isinstance(inner, list | tuple) else [inner]
    parts: list[Part] = []
    for item in items:
        if isinstance(item, str | Image | Document):
            parts.append(item)
            continue
        text = _text_of(tool_use_id, item, is_error, "list item {}")
        if text.is_error and not is_error:
            return text
        parts.append(text.text)
    return ToolResult.of(tool_use_id, parts, is_error)


def _text_of(tool_use_id: str | None, inner: object, is_error: bool, shape: str) -> ToolResult:
    if isinstance(inner, str):
        return ToolResult(tool_use_id, inner, is_error)
    if is_rich(inner):
        return _rich_of(tool_use_id, inner, is_error)
    if isinstance(inner, dict | list):
        try:
            return ToolResult(tool_use_id, json.dumps(inner, ensure_ascii=False, allow_nan=False), is_error)
        except (TypeError, ValueError, RecursionError) as exc:
            what = shape.format(type(inner).__name__)
            text = f"tool error: handler returned a {what} that is not JSON: {exc}"
            return ToolResult(tool_use_id, text, True)
    return ToolResult(tool_use_id, _bad_shape(shape.format(type(inner).__name__)), True)


def _bad_shape(what: str) -> str:
    return (
        f"tool error: handler returned {what}; expected str, a JSON dict or list, an Image or "
        "Document (or a list of them with text), or Success/Failure of one of those"
    )


class Handler(Protocol):
    """The handler contract: what runs the session's tools in your process.

    ``handle_tool_call(name, input, ctx[, info])``, sync (run in a worker thread) or async,
    returns a ``str``, a JSON ``dict``/``list``, a rich result (an ``rma.content.Image`` or
    ``Document``, or a list of them with text), or ``Success``/``Failure`` of one. A plain
    callable of 3 or 4 arguments is a handler too; a ``Toolbox`` is one. Optional members,
    each found once (``Capabilities.of``): ``handle_event(event, ctx[, info])`` (raw events),
    ``handle_update(update, ctx[, info])`` (``rma.live`` updates), ``confirm_tool_use(name,
    input, ctx[, info])`` (host-run tools that ask), ``requires_approval(name, input, ctx[,
    info])`` with ``approval_tools()`` (calls that wait for a person), ``at_most_once`` (names,
    or a method returning them: never run twice), ``validates_arguments`` (True: the session
    does not check arguments against the declared schemas again).
    """

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any, info: SessionInfo, /) -> Any: ...


@attrs.frozen
class Capabilities:
    """What one handler offers — how it is called and which optional members it has —
    found once, for every part of the shell that asks (the adapter, the journal, Temporal)."""

    tool: CallShape
    event: CallShape | None
    update: CallShape | None
    validates_arguments: bool
    at_most_once: frozenset[str]
    requires_approval: Callable[..., Any] | None
    asks_approval: bool
    """Whether it may ask for approvals (``requires_approval``, and ``approval_tools`` naming
    at least one tool when it says): such a handler needs a journal to wait in."""

    @classmethod
    def of(cls, handler: object) -> Capabilities | None:
        """``handler``'s capabilities, or None when it is not a handler."""
        tool = handler_shape(handler)
        if tool is None:
            return None
        names = getattr(handler, "at_most_once", ())
        if callable(names):
            names = names()
        once = frozenset(str(n) for n in names) if isinstance(names, Collection) else frozenset()
        approval = getattr(handler, "requires_approval", None)
        approval = approval if callable(approval) else None
        declared = getattr(handler, "approval_tools", None)
        asks = approval is not None and (declared is None or bool(declared() if callable(declared) else True))
        return cls(
            tool=tool,
            event=event_hook_shape(handler),
            update=update_hook_shape(handler),
            validates_arguments=bool(getattr(handler, "validates_arguments", False)),
            at_most_once=once,
            requires_approval=approval,
            asks_approval=asks,
        )


class HandlerAdapter:
    """One handler, inspected once, callable for tools and events."""

    def __init__(
        self,
        handler: object,
        context: object,
        *,
        max_concurrency: int,
        telemetry: Telemetry,
        metadata: Mapping[str, JSON],
        declared_tools: Sequence[object] = (),
        output: Any = None,
        tool_timeout: float | None = None,
        max_result_chars: int | None = None,
    ) -> None:
        caps = Capabilities.of(handler)
        if caps is None:
            raise TypeError("not a handler")  # validated earlier; unreachable in a run
        self.capabilities = caps
        self._handler = handler
        self._context = context
        self._takes_info = caps.tool.takes_info
        tool_fn = getattr(handler, "handle_tool_call") if caps.tool.method else handler  # noqa: B009
        assert callable(tool_fn)
        self._tool_fn: Callable[..., Any] = tool_fn
        self._tool_async = is_async(self._tool_fn)
        self._event_fn: Callable[..., Any] | None = getattr(handler, "handle_event") if caps.event else None  # noqa: B009
        self._event_takes_info = caps.event is not None and caps.event.takes_info
        self._update_fn: Callable[..., Any] | None = (
            getattr(handler, "handle_update") if caps.update else None  # noqa: B009
        )
        self._update_takes_info = caps.update is not None and caps.update.takes_info
        self._max_concurrency = max_concurrency
        # Sync tools need their own thread budget: anyio's shared default (40 threads) would
        # cap max_concurrency and make sessions compete for threads. Built on the first sync
        # call: a session of async tools never needs it (a limiter is ~0.7 KiB per session).
        self._threads: anyio.CapacityLimiter | None = None
        self._telemetry = telemetry
        self._metadata = metadata
        # The model's arguments are checked against the declared schemas before a raw handler
        # sees them (a toolbox checks its own). Needs jsonschema (the ``tools`` extra).
        self._output = output  # the typed answer's terminal tool, answered here (output_type=)
        self.answers: dict[str | None, Any] = {}
        """The typed value of each ``output_type`` answer that validated, by tool-use id."""
        self._tool_timeout = tool_timeout
        self._max_result_chars = max_result_chars
        self._validators = {} if caps.validates_arguments else _argument_validators(declared_tools)
        self.key_scope: str | None = None
        """The scope of each call's ``idempotency_key`` (a journal key, a workflow id); None: the
        host's session id."""
        self.attempts: dict[str, int] = {}
        """Calls whose earlier run started but left no result (a resumed journal): their attempt."""
        self.on_start: Callable[[ToolUse, int], Awaitable[None]] | None = None
        """Awaited with a call and its attempt just before the tool runs (a journal's start
        record, durable when it returns)."""
        self.on_finish: Callable[[ToolResult], None] | None = None
        """Called with each call's result as soon as it has one (a journal's result record)."""
        self._checked: dict[str, str | None] = {}
        """Calls ``will_call`` checked ahead of their batch: each one's problem with its
        arguments (None: none), taken by ``run_one`` instead of checking them again."""

    @property
    def max_concurrency(self) -> int:
        """How many calls of a batch run at once."""
        return self._max_concurrency

    def will_call(self, use: ToolUse) -> bool:
        """Whether ``run_one`` would call the tool for ``use``: it is not the typed answer's
        terminal tool (answered here) and its arguments fit the tool's declared schema. For a
        journal writing a batch's start records ahead of it (``rma_shell.journal.writer``): a
        call refused here never starts, so it gets no start record. The check is kept for
        ``run_one``, not made twice."""
        if self._output is not None and use.name == self._output.name:
            return False
        validator = self._validators.get(use.name) if self._validators else None
        if validator is None:
            return True
        problem = validator.check(use.input)
        if use.id is not None:
            self._checked[use.id] = problem
        return problem is None

    async def confirm_batch(self, uses: Sequence[ToolUse], info: SessionInfo) -> tuple[ToolResult, ...]:
        """Ask ``confirm_tool_use(name, input, ctx[, info])`` about each host-run call.

        It returns True/``"allow"``/``Success(...)`` to allow, False/``"deny"`` or
        ``Failure(reason)`` to deny. Without the method every call is denied with a reason
        naming it, so a permission ask never hangs a session. A raising callback denies.
        """
        fn = getattr(self._handler, "confirm_tool_use", None)
        verdicts: list[ToolResult] = []
        for use in uses:
            if fn is None or not callable(fn):
                verdicts.append(ToolResult(use.id, _NO_CONFIRM.format(name=use.name), True))
                continue
            try:
                args: tuple[Any, ...] = (use.name, _own_copy(use), self._context)
            except RecursionError:
                verdicts.append(ToolResult(use.id, _TOO_DEEP, True))
                continue
            if accepts(fn, 4):
                args = (*args, info)
            try:
                value = fn(*args)
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                log.warning(
                    "confirm_tool_use raised %r; denying %s",
                    exc,
                    use.name,
                    exc_info=exc,
                    extra=log_fields(tool=use.name, tool_use_id=use.id, session_id=info.session_id),
                )
                verdicts.append(ToolResult(use.id, f"confirmation failed: {exc!r}", True))
                continue
            verdicts.append(_verdict(use, value))
        return tuple(verdicts)

    @property
    def observes_events(self) -> bool:
        return self._event_fn is not None

    @property
    def observes_updates(self) -> bool:
        return self._update_fn is not None

    async def run_batch(self, uses: Sequence[ToolUse], info: SessionInfo) -> tuple[ToolResult, ...]:
        """Run one batch, at most ``max_concurrency`` calls at a time. The session runs one
        batch at a time (the core's RunTools is single-flight), so the bound is the batch's
        own: a limiter only for a batch larger than it."""
        finish = self.on_finish
        if len(uses) == 1:
            # The common batch: nothing to run concurrently, so no nursery and no task.
            only = await self.run_one(uses[0], info)
            if finish is not None:
                finish(only)
            return (only,)
        results: list[ToolResult | None] = [None] * len(uses)
        limiter = anyio.CapacityLimiter(self._max_concurrency) if len(uses) > self._max_concurrency else None

        async def one(i: int, use: ToolUse) -> None:
            if limiter is None:
                result = results[i] = await self.run_one(use, info)
            else:
                async with limiter:
                    result = results[i] = await self.run_one(use, info)
            if finish is not None:
                finish(result)

        async with anyio.create_task_group() as nursery:
            for i, use in enumerate(uses):
                nursery.start_soon(one, i, use)
        return tuple(r for r in results if r is not None)

    async def run_one(self, use: ToolUse, info: SessionInfo) -> ToolResult:
        if self._output is not None and use.name == self._output.name:
            answer = self._output.validate(use.input)
            if isinstance(answer, Success):
                self.answers[use.id] = answer.unwrap()
                return ToolResult(use.id, ACCEPTED_ANSWER, False)
            return ToolResult(use.id, answer.failure(), True)
        validator = self._validators.get(use.name) if self._validators else None
        if validator is not None:
            if self._checked and use.id in self._checked:
                problem = self._checked.pop(use.id)  # checked ahead (will_call)
            else:
                problem = validator.check(use.input)
            if problem is not None:
                log.info(
                    "tool %s: invalid arguments refused",
                    use.name,
                    extra=log_fields(tool=use.name, tool_use_id=use.id, session_id=info.session_id),
                )
                return ToolResult(use.id, problem, True)
        try:
            args: tuple[Any, ...] = (use.name, _own_copy(use), self._context)
        except RecursionError:  # never a crash of the session (issue #12): the model is told
            return ToolResult(use.id, _TOO_DEEP, True)
        attempt = self.attempts.get(use.id, 1) if use.id is not None else 1
        if self._takes_info:
            if use.id is not None:
                info = call_info(info, use.id, self.key_scope, attempt)
            args = (*args, info)
        if self.on_start is not None:
            await self.on_start(use, attempt)  # durable before the tool runs
        telemetry = self._telemetry
        # Events are built only when someone listens at that moment (emit would drop them).
        listening = telemetry.listening()
        content = listening and telemetry.wants_content  # arguments and results: opted-in only
        t0 = time.perf_counter()
        if listening:
            telemetry.emit(
                "rma.tool.start",
                {"system_time": time.time()},
                self._tool_meta(use, info),
                {"arguments": dict(use.input)} if content else None,
            )
        try:
            if self._tool_timeout is None:
                value = await self._call(args)
            else:
                with anyio.move_on_after(self._tool_timeout) as scope:
                    value = await self._call(args)
                if scope.cancelled_caught:  # past the run's tool_timeout: cancelled, the model told
                    value = Failure(timed_out(use.name, self._tool_timeout))
        except Exception as exc:  # T-6: a raising tool is a result, not a crash
            log.warning(
                "tool %s raised %r",
                use.name,
                exc,
                exc_info=exc,  # the traceback: where in the tool it broke
                extra=log_fields(tool=use.name, tool_use_id=use.id, session_id=info.session_id),
            )
            failed = ToolResult(use.id, f"tool error: {exc!r}", True)
            if telemetry.listening():
                telemetry.emit(
                    "rma.tool.exception",
                    {"duration": time.perf_counter() - t0},
                    {**self._tool_meta(use, info), "kind": type(exc).__name__, "is_error": True},
                    {"result": failed.text} if content else None,
                )
            return failed
        except BaseException as exc:  # cancelled: report, then let it propagate
            if telemetry.listening():
                telemetry.emit(
                    "rma.tool.exception",
                    {"duration": time.perf_counter() - t0},
                    {**self._tool_meta(use, info), "kind": type(exc).__name__},
                )
            raise
        result = result_of(use.id, value)
        limit = self._max_result_chars
        if limit is not None and result.content:
            # A rich result: the cap counts its text parts only (media have the host's byte
            # limits, applied by the core when the results are sent).
            parts = truncate_parts(result.content, limit)
            if parts != result.content:
                result = ToolResult.of(result.tool_use_id, parts, result.is_error)
        elif limit is not None and len(result.text) > limit:
            # truncate measures an already-cut text (a toolbox's own cap) by what it shows and
            # keeps its count: the smaller of the two caps applies once.
            cut = truncate(result.text, limit)
            if cut is not result.text:
                result = ToolResult(result.tool_use_id, cut, result.is_error)
        if telemetry.listening():
            telemetry.emit(
                "rma.tool.stop",
                {"duration": time.perf_counter() - t0},
                {**self._tool_meta(use, info), "is_error": result.is_error},
                {"result": result.text} if content else None,
            )
        return result

    async def _call(self, args: tuple[Any, ...]) -> Any:
        if self._tool_async:
            return await self._tool_fn(*args)
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(self._max_concurrency)
        # abandon_on_cancel: a run's timeout returns even if a sync tool never does.
        # Boxed: a thread function's awaitable return value must not be mistaken for a coroutine.
        (value,) = await anyio.to_thread.run_sync(
            _boxed, self._tool_fn, args, abandon_on_cancel=True, limiter=self._threads
        )
        if inspect.isawaitable(value):  # a plain function wrapping an async one
            value = await value
        return value

    def _tool_meta(self, use: ToolUse, info: SessionInfo) -> dict[str, Any]:
        return {**self._metadata, "tool": use.name, "tool_use_id": use.id, "session_id": info.session_id}

    async def deliver(self, event: JSON, info: SessionInfo) -> None:
        """Forward an event to ``handle_event``; a raising observer is logged and isolated (S-89)."""
        fn = self._event_fn
        if fn is None:
            return
        args: tuple[Any, ...] = (
            (event, self._context, info) if self._event_takes_info else (event, self._context)
        )
        await _observe(fn, args, "handle_event", info)

    async def deliver_update(self, update: LiveUpdate, info: SessionInfo) -> None:
        """Forward a live update to ``handle_update``; a raising observer is logged and isolated."""
        fn = self._update_fn
        if fn is None:
            return
        args: tuple[Any, ...] = (
            (update, self._context, info) if self._update_takes_info else (update, self._context)
        )
        await _observe(fn, args, "handle_update", info)


async def _observe(fn: Callable[..., Any], args: tuple[Any, ...], hook: str, info: SessionInfo) -> None:
    """Call an observer hook (sync or async); one that raises is logged and isolated (S-89)."""
    try:
        value = fn(*args)
        if inspect.isawaitable(value):
            await value
    except Exception:
        log.exception(f"{hook} raised; the session continues", extra=log_fields(session_id=info.session_id))


DEFAULT_MAX_RESULT_CHARS = 100_000
"""The default cap on one tool result (characters, about 25k tokens) — for a run
(``max_tool_result_chars``) and a toolbox alike: far above what a tool should send back, low
enough that one runaway result cannot fill the context window."""


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a marker the model can read.

    The marker counts the tool's own output. A text that already ends with a marker this
    function wrote (a toolbox's cap, or a handler's own call) is measured by its shown part
    and, if that is longer than ``limit``, cut again with the original count: so
    ``truncate(truncate(t, a), b) == truncate(t, min(a, b))`` — where a toolbox and the run
    both cap a result, the smaller cap applies, once.
    """
    if len(text) <= limit:
        return text
    shown, total = _shown(text)
    if len(shown) <= limit:
        return text
    return f"{shown[:limit]}\n[truncated: {total - limit} of {total} characters not shown]"


def truncate_parts(parts: tuple[Part, ...], limit: int) -> tuple[Part, ...]:
    """A rich result's parts with its text cut to ``limit`` characters in all (media untouched).

    Each text part gets what the earlier ones left, measured as ``truncate`` measures (by the
    shown part of an already-cut text), so capping twice cuts once, to the smaller cap.
    """
    left = limit
    out: list[Part] = []
    for part in parts:
        if not isinstance(part, str):
            out.append(part)
            continue
        cut = truncate(part, left)
        out.append(cut)
        left = max(0, left - len(_shown(cut)[0]))
    return tuple(out)


_MARKER = re.compile(r"\n\[truncated: ([0-9]+) of ([0-9]+) characters not shown\]")


def _shown(text: str) -> tuple[str, int]:
    """The part of ``text`` a marker of ``truncate`` left shown, and the original length.

    A marker whose numbers do not add up (shown + hidden != total) is not one of ours: the
    whole text is the tool's own.
    """
    if text.endswith(" characters not shown]"):
        cut = text.rfind("\n[truncated: ")
        found = _MARKER.fullmatch(text, cut) if cut >= 0 else None
        if found is not None:
            hidden, total = int(found[1]), int(found[2])
            if hidden > 0 and cut + hidden == total:
                return text[:cut], total
    return text, len(text)


def timed_out(tool: str, seconds: float) -> str:
    """What the model reads when a call of ``tool`` ran past its timeout and was cancelled."""
    return f"tool {tool} timed out after {seconds:g} s and was cancelled"


ACCEPTED_ANSWER = "Final answer received."
"""What the model reads back after a final answer that validated (``output_type=``)."""

_NO_JSONSCHEMA_LOGGED = False


def _argument_validators(declared: Sequence[object]) -> dict[str, Any]:
    if not declared:
        return {}
    try:
        from rma_shell.tools.schema_validation import validators_for
    except ImportError:
        global _NO_JSONSCHEMA_LOGGED
        if not _NO_JSONSCHEMA_LOGGED:
            _NO_JSONSCHEMA_LOGGED = True
            log.warning(
                "tool arguments are not checked against their schemas: install the tools extra "
                "(pip install 'rma-agents[tools]') for jsonschema"
            )
        return {}
    return validators_for(list(declared))
