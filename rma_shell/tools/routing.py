"""An agent's tools as one handler: loose functions and sources, toolboxes, and a raw handler
for hand-written declarations, each call routed to whichever declared its tool.

``ToolSet.of(tools, handler, require_approval=, at_most_once=)`` sorts what an ``Agent`` was
given: typed functions and tool sources (MCP servers) go into one toolbox of the agent's own
(no cap or timeout of its own: the run applies the agent's once); ``Toolbox`` objects are kept
whole, so one the caller already started is used as it is and never started twice; mappings
(or other ``name``/``description``/``input_schema`` declarations) are answered by the raw
handler. ``ToolSet.handler(stack, entered)`` gives a run its handler and the declarations it
answers — one part as it is, several behind a ``Router``. ``combine(toolbox, ui, ...)`` is the
same router for the functional ``run``: toolboxes, a raw handler and observers as one handler.

What this is not: argument validation, timeouts or result caps (each toolbox and the run's
handler adapter do those), nor the handler contract (``rma_shell.handler``).
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio
import attrs

from rma.session.options import event_hook_shape, update_hook_shape
from rma_shell.handler import Capabilities, accepts, is_async

log = logging.getLogger("rma.handler")


class ToolSetError(ValueError):
    """Tools an agent cannot use; ``option`` names the setting (``tools`` or ``handler``)."""

    def __init__(self, option: str, detail: str) -> None:
        super().__init__(detail)
        self.option = option
        self.detail = detail


@attrs.define
class ToolSet:
    """An agent's tools (see the module docstring). Mutable only in ``own_box``: the agent's
    own toolbox while the agent is entered."""

    functions: tuple[object, ...]
    boxes: tuple[Any, ...]
    declarations: tuple[object, ...]
    raw: object
    require_approval: frozenset[str]
    at_most_once: frozenset[str]
    own_box: Any = None

    @classmethod
    def of(
        cls,
        tools: Sequence[object],
        raw: object,
        *,
        require_approval: frozenset[str] = frozenset(),
        at_most_once: frozenset[str] = frozenset(),
    ) -> ToolSet:
        functions: list[object] = []
        boxes: list[Any] = []
        declarations: list[object] = []
        for item in tools:
            if _is_toolbox(item):
                boxes.append(item)
            elif isinstance(item, Mapping) or _is_declaration(item):
                declarations.append(item)
            elif callable(item) or _is_source(item):
                functions.append(item)
            else:
                raise ToolSetError("tools", f"cannot use a {type(item).__name__} as a tool")
        if declarations and raw is None:
            raise ToolSetError("handler", "declared tools (mappings) need handler= to answer them")
        observer = raw is not None and (update_hook_shape(raw) or event_hook_shape(raw)) is not None
        if raw is not None and Capabilities.of(raw) is None and (declarations or not observer):
            what = "has no handle_tool_call and is not a 3- or 4-argument callable"
            raise ToolSetError("handler", f"{type(raw).__name__} {what}")
        return cls(tuple(functions), tuple(boxes), tuple(declarations), raw, require_approval, at_most_once)

    def names(self) -> list[str]:
        """The names known before anything starts (a source's tools are known once it runs)."""
        names = [str(getattr(f, "name", None) or getattr(f, "__name__", "?")) for f in self.functions]
        return [
            *names,
            *(f"<{type(b).__name__}>" for b in self.boxes),
            *map(_declared_name, self.declarations),
        ]

    async def start(self, stack: AsyncExitStack) -> None:
        """Start what the agent owns for as long as ``stack`` (an entered agent): its own
        toolbox, and each given toolbox not started already."""
        if self._wants_own_box():
            self.own_box = await stack.enter_async_context(self._own_toolbox())
        for box in self.boxes:
            if not box.started:
                await stack.enter_async_context(box)

    async def handler(self, stack: AsyncExitStack, entered: bool) -> tuple[object, list[Any]]:
        """The run's handler and the declarations it answers. Outside an entered agent, what
        is not started yet starts with ``stack`` (the run) and stops with it, so concurrent
        runs never share a half-started toolbox."""
        parts: list[tuple[object, list[Any]]] = []
        if self._wants_own_box():
            own: Any = self.own_box if entered and self.own_box is not None else None
            if own is None:
                own = await stack.enter_async_context(self._own_toolbox())
            parts.append((own, list(own.tools())))
        for box in self.boxes:
            if not box.started:
                await stack.enter_async_context(box)
            parts.append((box, list(box.tools())))
        if self.raw is not None:
            parts.append((self.raw, list(self.declarations)))
        if not parts or all(Capabilities.of(h) is None for h, _ in parts):
            parts.append((_no_tools, []))  # observers only (or nothing): calls are errors
        if len(parts) == 1 and (only := Capabilities.of(parts[0][0])) is not None:
            plain = not self.require_approval - _approval_names(parts[0][0])
            if plain and not self.at_most_once - only.at_most_once:
                return parts[0]
        router = Router(parts, require_approval=self.require_approval, at_most_once=self.at_most_once)
        return router, [spec for _, specs in parts for spec in specs]

    def _wants_own_box(self) -> bool:
        return bool(self.functions)

    def _own_toolbox(self) -> Any:
        from rma_shell.tools.toolbox import Toolbox

        # No cap or timeout of its own: the run applies the agent's once (tool_timeout,
        # max_tool_result_chars), so a result is never cut twice.
        return Toolbox(
            *self.functions,  # type: ignore[arg-type]
            timeout=None,
            max_result_chars=None,
            require_approval=self.require_approval,
            at_most_once=self.at_most_once,
        )


class Router:
    """Several handlers as one handler: each call goes to the part that declared its tool; the
    parts' observers (``handle_update``, ``handle_event``) all see every update and event.

    ``parts`` pairs each handler with the declarations it answers, or None: then its own
    ``tools()`` says (a ``Toolbox``, read at its first call, once it runs), or — for a handler
    without one — it answers every other name. An object with only ``handle_update`` or
    ``handle_event`` is an observer. Arguments are checked by the session against every
    declaration before a call is routed (a toolbox checks its own once more), and the given
    ``require_approval``/``at_most_once`` names apply to every part.
    """

    def __init__(
        self,
        parts: Sequence[tuple[object, Sequence[Any] | None]],
        *,
        require_approval: frozenset[str] = frozenset(),
        at_most_once: frozenset[str] = frozenset(),
    ) -> None:
        self._routes: dict[str, _Part] = {}
        self._unread: list[_Part] = []
        self._fallback: _Part | None = None
        self._approval = require_approval
        once, approvals = set(at_most_once), set(require_approval)
        self._updates: list[tuple[Callable[..., Any], bool]] = []
        self._events: list[tuple[Callable[..., Any], bool]] = []
        for handler, specs in parts:
            caps = Capabilities.of(handler)
            update, event = update_hook_shape(handler), event_hook_shape(handler)
            if update is not None:
                self._updates.append((getattr(handler, "handle_update"), update.takes_info))  # noqa: B009
            if event is not None:
                self._events.append((getattr(handler, "handle_event"), event.takes_info))  # noqa: B009
            confirm = getattr(handler, "confirm_tool_use", None)
            if callable(confirm) and not hasattr(self, "confirm_tool_use"):
                self.confirm_tool_use = confirm
            if caps is None:
                if update is None and event is None:
                    raise ToolSetError(
                        "handler", f"{type(handler).__name__} is neither a handler nor an observer"
                    )
                continue
            part = _Part(handler, caps)
            once |= caps.at_most_once
            approvals |= _approval_names(handler)
            if specs is not None:
                for spec in specs:
                    self._route(_declared_name(spec), part)
            elif callable(getattr(handler, "tools", None)):
                self._unread.append(part)
            elif self._fallback is None:
                self._fallback = part
            else:
                raise ToolSetError("handler", "two handlers declare no tools: which one answers a call?")
        self.at_most_once = frozenset(once)
        self._approval_tools = frozenset(approvals)
        if self._updates:
            self.handle_update = self._update
        if self._events:
            self.handle_event = self._event

    def _route(self, name: str, part: _Part) -> None:
        if name in self._routes:
            raise ToolSetError("tools", f"duplicate tool name {name!r}")
        self._routes[name] = part

    def _part(self, name: str) -> _Part | None:
        if name not in self._routes and self._unread:
            unread, self._unread = self._unread, []
            for part in unread:  # their tools are known once they run: read at the first call
                for spec in part.handler.tools():
                    self._routes.setdefault(_declared_name(spec), part)
        return self._routes.get(name, self._fallback)

    def approval_tools(self) -> frozenset[str]:
        return self._approval_tools

    async def requires_approval(self, name: str, input: Mapping[str, Any], ctx: object, info: Any) -> bool:
        if name in self._approval:
            return True
        part = self._part(name)
        ask = part.caps.requires_approval if part is not None else None
        if ask is None:
            return False
        value = ask(name, input, ctx, info) if accepts(ask, 4) else ask(name, input, ctx)
        return bool(await value) if inspect.isawaitable(value) else bool(value)

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object, info: Any) -> Any:
        part = self._part(name)
        if part is None:
            return f"tool error: no tool named {name!r}"
        return await part.call(name, input, ctx, info)

    async def _update(self, update: Any, ctx: object, info: Any) -> None:
        await _each(self._updates, update, ctx, info, "handle_update")

    async def _event(self, event: Any, ctx: object, info: Any) -> None:
        await _each(self._events, event, ctx, info, "handle_event")


def combine(*handlers: object) -> Router:
    """One handler of several: toolboxes (each answers its own tools), at most one raw handler
    (every other name), and observers (``handle_update``/``handle_event`` only) — for
    ``run(provider, handler=combine(toolbox, ui))`` without a hand-written wrapper."""
    return Router([(h, None) for h in handlers])


async def _each(
    hooks: Sequence[tuple[Callable[..., Any], bool]], payload: Any, ctx: object, info: Any, what: str
) -> None:
    """Every observer sees it; one that raises is logged and does not keep it from the rest."""
    for fn, takes_info in hooks:
        try:
            value = fn(payload, ctx, info) if takes_info else fn(payload, ctx)
            if inspect.isawaitable(value):
                await value
        except Exception:
            log.exception("%s raised; the other observers still see it", what)


class _Part:
    """One handler behind a router, called as its shape says (a sync one in a worker thread,
    as the session would)."""

    def __init__(self, handler: object, caps: Capabilities) -> None:
        self.handler: Any = handler
        call = getattr(handler, "handle_tool_call") if caps.tool.method else handler  # noqa: B009
        assert callable(call)
        self.caps = caps
        self._call: Callable[..., Any] = call
        self._async = is_async(call)

    async def call(self, name: str, input: dict[str, Any], ctx: object, info: Any) -> Any:
        args = (name, input, ctx, info) if self.caps.tool.takes_info else (name, input, ctx)
        if self._async:
            return await self._call(*args)
        return await anyio.to_thread.run_sync(lambda: self._call(*args))  # never block the loop


def _no_tools(name: str, input: Mapping[str, Any], ctx: object) -> str:
    """The handler of an agent without tools: a call the model makes anyway is an error result."""
    return f"tool error: this agent has no tools (the model called {name!r})"


def _is_toolbox(item: object) -> bool:
    # Without the toolbox module loaded nothing can be a Toolbox: no need to import it (and
    # the tools extra) for an agent of declared tools.
    module = sys.modules.get("rma_shell.tools.toolbox")
    return module is not None and isinstance(item, module.Toolbox)


def _approval_names(handler: object) -> frozenset[str]:
    declared = getattr(handler, "approval_tools", None)
    if callable(declared):
        return frozenset(str(n) for n in declared())
    return frozenset()


def _is_source(item: object) -> bool:
    return callable(getattr(item, "tools", None)) and callable(getattr(item, "__aenter__", None))


def _is_declaration(item: object) -> bool:
    return all(hasattr(item, a) for a in ("name", "description", "input_schema")) and not callable(item)


def _declared_name(item: object) -> str:
    if isinstance(item, Mapping):
        function = item.get("function")  # OpenAI's shape: {"type": "function", "function": {...}}
        if isinstance(function, Mapping) and "name" not in item:
            return str(function.get("name", "?"))
        return str(item.get("name", "?"))
    return str(getattr(item, "name", "?"))
