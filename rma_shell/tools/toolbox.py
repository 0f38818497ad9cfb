"""``Toolbox``: typed functions and tool sources (MCP servers, …) behind one handler.

A toolbox is a handler (``handle_tool_call(name, input, ctx, info)``) and the list of
declarations to give a provider (``tools()``), so the same toolbox serves all three hosts::

    box = Toolbox(add, lookup_customer, mcp_server)
    async with box:                      # starts the sources (spawns / connects MCP servers)
        provider = Local(..., tools=box.tools())
        outcome = await run(provider, handler=box, prompt="...")

For each call it finds the tool by name, validates the arguments (Pydantic for typed
functions, the declared JSON schema for a source's tools), calls it (sync functions in a
worker thread, async ones on the caller's loop) under its timeout, serialises what it
returned and caps the result's size. Invalid arguments, unknown tools, timeouts and
unserialisable returns are ``Failure`` results the model sees; the loop goes on. A tool
that raises is left to the session's handler adapter, which logs it and sends an error
result. Not a source itself and not a registry: names must be unique, checked up front.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
from returns.result import Failure, Success

from rma.content import Document, Image
from rma.vocabulary import SessionInfo
from rma_shell.handler import DEFAULT_MAX_RESULT_CHARS, timed_out, truncate, truncate_parts
from rma_shell.tools.function import FunctionTool, ToolCall, serialise
from rma_shell.tools.schema_validation import SchemaValidator
from rma_shell.tools.source import ToolOutput, ToolSource, ToolSpec


class ToolboxError(ValueError):
    """A toolbox that cannot be built: a duplicate name, a source that is not one."""


class Toolbox:
    """Typed functions and tool sources as one handler. See the module docstring."""

    validates_arguments = True
    """The session does not check arguments again: the toolbox checks every call itself."""

    def __init__(
        self,
        *tools: FunctionTool | Callable[..., Any] | ToolSource,
        timeout: float | None = None,
        max_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS,
        require_approval: Collection[str] = (),
        at_most_once: Collection[str] = (),
    ) -> None:
        if isinstance(require_approval, str) or isinstance(at_most_once, str):
            raise ToolboxError("require_approval and at_most_once take collections of tool names, not a str")
        self._approval_names = frozenset(require_approval)
        self._once_names = frozenset(at_most_once)
        if timeout is not None and not (isinstance(timeout, int | float) and 0 < timeout < math.inf):
            raise ToolboxError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        if max_result_chars is not None and (
            not isinstance(max_result_chars, int)
            or isinstance(max_result_chars, bool)
            or max_result_chars < 1
        ):
            raise ToolboxError(f"max_result_chars must be a positive int or None, got {max_result_chars!r}")
        self.timeout = None if timeout is None else float(timeout)
        self.max_result_chars = max_result_chars
        self._functions: dict[str, FunctionTool] = {}
        self._sources: list[ToolSource] = []
        for item in tools:
            if isinstance(item, FunctionTool):
                self._add_function(item)
            elif isinstance(item, ToolSource):
                self._sources.append(item)
            elif callable(item):
                self._add_function(FunctionTool(item))
            else:
                raise ToolboxError(f"a toolbox holds functions and tool sources, got {type(item).__name__}")
        self._routes: dict[str, tuple[ToolSource, SchemaValidator]] = {}
        self._stack: contextlib.AsyncExitStack | None = None
        self._started = not self._sources

    def _add_function(self, fn: FunctionTool) -> None:
        if fn.name in self._functions:
            raise ToolboxError(f"duplicate tool name {fn.name!r}")
        self._functions[fn.name] = fn

    # ── lifecycle: sources start with the toolbox and stop with it ──

    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            routes: dict[str, tuple[ToolSource, SchemaValidator]] = {}
            for source in self._sources:
                await stack.enter_async_context(source)
                for spec in source.tools():
                    if spec.name in self._functions or spec.name in routes:
                        raise ToolboxError(f"duplicate tool name {spec.name!r} (from {source!r})")
                    routes[spec.name] = (source, SchemaValidator(spec.name, spec.input_schema))
        except BaseException:
            await stack.aclose()
            raise
        self._routes = routes
        self._stack = stack
        self._started = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        self._started = not self._sources
        self._routes = {}
        if stack is not None:
            await stack.aclose()

    # ── what the provider declares ──

    def tools(self) -> list[ToolSpec]:
        """Every tool's declaration, functions first, then each source's in order."""
        self._require_started()
        specs = [fn.spec for fn in self._functions.values()]
        for source in self._sources:
            specs.extend(source.tools())
        return specs

    @property
    def started(self) -> bool:
        """Whether its sources run (entered with ``async with``), or it has none to start."""
        return self._started

    def parts(self) -> tuple[tuple[FunctionTool | ToolSource, ...], frozenset[str], frozenset[str]]:
        """What the toolbox was built from: its functions and sources (in order), and the names
        given as ``require_approval`` and ``at_most_once`` — so another toolbox (an ``Agent``'s)
        can hold the same tools."""
        items: tuple[FunctionTool | ToolSource, ...] = (*self._functions.values(), *self._sources)
        return items, self._approval_names, self._once_names

    def names(self) -> list[str]:
        return [spec.name for spec in self.tools()]

    # ── durability: which calls wait for a person, which never run twice (docs/durable.md) ──

    def approval_tools(self) -> frozenset[str]:
        """The tools whose calls may wait for an approval: ``@tool(requires_approval=...)``
        functions and the names given as ``require_approval=``."""
        flagged = {n for n, fn in self._functions.items() if fn.requires_approval is not False}
        return frozenset(flagged | self._approval_names)

    def requires_approval(self, name: str, input: Mapping[str, Any], ctx: object, info: SessionInfo) -> bool:
        fn = self._functions.get(name)
        if fn is not None:
            return fn.needs_approval(input) or name in self._approval_names
        return name in self._approval_names

    @property
    def at_most_once(self) -> frozenset[str]:
        """Tools never run a second time after a crash: ``@tool(at_most_once=True)`` functions
        and the names given as ``at_most_once=``."""
        return frozenset({n for n, fn in self._functions.items() if fn.at_most_once} | self._once_names)

    def _require_started(self) -> None:
        if not self._started:
            raise ToolboxError("this toolbox has tool sources: use it inside `async with toolbox:`")

    # ── the handler ──

    async def handle_tool_call(
        self, name: str, input: Mapping[str, Any], ctx: object, info: SessionInfo
    ) -> ToolOutput:
        fn = self._functions.get(name)
        if fn is not None:
            timeout = fn.timeout if fn.timeout is not None else self.timeout
            output = await self._bounded(
                name, timeout, functools.partial(self._call_function, fn, input, ctx, info)
            )
        elif name in self._routes:
            source, validator = self._routes[name]
            problem = validator.check(input)
            if problem is not None:
                return Failure(problem)
            output = await self._bounded(
                name, self.timeout, functools.partial(source.call, name, dict(input))
            )
        else:
            known = ", ".join(sorted([*self._functions, *self._routes])) or "none"
            return Failure(f"unknown tool {name!r} (this toolbox has: {known})")
        return self._capped(output)

    async def _call_function(
        self, fn: FunctionTool, input: Mapping[str, Any], ctx: object, info: SessionInfo
    ) -> ToolOutput:
        validated = fn.validate(input)
        if isinstance(validated, Failure):
            return Failure(validated.failure())
        kwargs = fn.inject(validated.unwrap(), ToolCall(name=fn.name, context=ctx, info=info))
        if fn.is_async:
            value = await fn.fn(**kwargs)
        else:
            value = await anyio.to_thread.run_sync(functools.partial(fn.fn, **kwargs), abandon_on_cancel=True)
        return serialise(value)

    async def _bounded(self, name: str, timeout: float | None, call: Callable[[], Any]) -> ToolOutput:
        if timeout is None:
            result: ToolOutput = await call()
            return result
        with anyio.move_on_after(timeout) as scope:
            result = await call()
        if scope.cancelled_caught:
            return Failure(timed_out(name, timeout))
        return result

    def _capped(self, output: ToolOutput) -> ToolOutput:
        limit = self.max_result_chars
        if limit is None:
            return output
        if isinstance(output, str):
            return truncate(output, limit)
        if isinstance(output, list):  # a rich result: its text parts share the cap
            return list(truncate_parts(tuple(output), limit))
        if isinstance(output, Image | Document):
            return output
        if isinstance(output, Success):
            inner = output.unwrap()
            if isinstance(inner, list):
                return Success(list(truncate_parts(tuple(inner), limit)))
            return Success(truncate(str(inner), limit))
        failed = output.failure()
        if isinstance(failed, list):
            return Failure(list(truncate_parts(tuple(failed), limit)))
        return Failure(truncate(str(failed), limit))

    def __repr__(self) -> str:
        sources = ", ".join(repr(s) for s in self._sources)
        return f"Toolbox(functions={list(self._functions)!r}, sources=[{sources}])"


def as_specs(tools: Sequence[object]) -> list[ToolSpec]:
    """Declarations from what ``tools=`` takes (specs, typed functions, plain dicts)."""
    out: list[ToolSpec] = []
    for item in tools:
        if isinstance(item, ToolSpec):
            out.append(item)
        elif isinstance(item, FunctionTool):
            out.append(item.spec)
        elif isinstance(item, Mapping):
            out.append(
                ToolSpec(
                    name=str(item["name"]),
                    description=str(item.get("description", "")),
                    input_schema=item.get("input_schema") or item.get("parameters") or {"type": "object"},
                    strict=bool(item.get("strict", False)),
                    repeatable=bool(item.get("repeatable", False)),
                )
            )
    return out
