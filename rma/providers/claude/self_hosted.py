"""Claude Managed Agents on a ``self_hosted`` environment: the pure codec that also runs the
agent's built-in tools (``agent.tool_use``) here and answers them with ``user.tool_result``.

What this is: ``ClaudeSelfHostedCodec``, the CMA codec plus one rule. On a self-hosted
environment the host does not run ``agent_toolset_20260401`` itself: an ``agent.tool_use``
whose ``evaluated_permission`` is ``allow`` (or absent), or ``ask`` with an ``allow``
``user.tool_confirmation`` on record, waits for the client's ``user.tool_result`` (wire §8.4).
Such a call becomes an ordinary ``ToolUse`` of the requires_action turn — run by the session's
handler like a custom tool, journaled, approved, recorded and traced the same way — whose id
is the event id behind ``BUILTIN_PREFIX`` (``builtin:sevt_…``): the prefix is how the answer
is built as ``user.tool_result`` rather than ``user.custom_tool_result``, with no state
outside the use itself. An ``ask`` call first goes through ``confirmations_required`` as on
any environment (the approval policy, or a durable pending approval); a ``deny`` — by the
host or by the verdict — never runs.

What this is not: the work queue (``rma_shell.providers.claude.work``) or the tools
themselves (``rma_shell.workspace``). Calls are recovered from history, also on attach
(``consolidate``), because a worker usually claims a session that is already waiting.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

import attrs

from rma.live import LiveUpdate, ToolCallStarted
from rma.provider import Input, register_codec
from rma.providers.claude.codec import (
    AGENT_TOOL_USE,
    NO_OUTPUT,
    SESSION_THREAD_STATUS_TERMINATED,
    USER_TOOL_CONFIRMATION,
    USER_TOOL_RESULT,
    ClaudeManagedAgentsCodec,
    Consolidated,
    _listed_ids,
    _outstanding_idle,
    _thread,
    _tool_use,
    confirmations_required,
    consolidate,
    event_id,
    event_type,
    is_turn_boundary,
    merge_history,
    normalize,
    pending_tool_uses,
    text_block,
)
from rma.vocabulary import JSON, Terminal, ToolResult, ToolUse, TurnResult

BUILTIN_PREFIX: Final = "builtin:"
"""The id of a ``ToolUse`` that answers a built-in ``agent.tool_use`` is this plus the event's id."""


def builtin_id(use_id: str | None) -> str | None:
    """The ``agent.tool_use`` event id behind a use's id, or None for a custom tool's use."""
    if isinstance(use_id, str) and use_id.startswith(BUILTIN_PREFIX):
        return use_id[len(BUILTIN_PREFIX) :]
    return None


def tool_result(tool_use_id: str, text: str, is_error: bool = False) -> dict[str, JSON]:
    """``user.tool_result`` answering one ``agent.tool_use`` (self_hosted only, wire §8.2)."""
    return {
        "type": USER_TOOL_RESULT,
        "tool_use_id": tool_use_id,
        "content": [text_block(text or NO_OUTPUT)],
        "is_error": bool(is_error),
    }


@attrs.frozen
class _Builtins:
    uses: Mapping[str, JSON]
    open: frozenset[str]


def _builtins(events: Iterable[JSON]) -> _Builtins:
    """The ``agent.tool_use`` events of ``events`` and which of them still take a local result."""
    uses: dict[str, JSON] = {}
    answered: set[str] = set()
    verdicts: dict[str, str] = {}
    threads: set[str] = set()
    for event in events:
        kind = event_type(event)
        eid = event_id(event)
        if kind == AGENT_TOOL_USE and eid is not None:
            uses.setdefault(eid, event)
        elif kind == USER_TOOL_RESULT and isinstance(event.get("tool_use_id"), str):
            answered.add(event["tool_use_id"])
        elif kind == USER_TOOL_CONFIRMATION and isinstance(event.get("tool_use_id"), str):
            verdicts[event["tool_use_id"]] = str(event.get("result"))
        elif kind == SESSION_THREAD_STATUS_TERMINATED:
            thread = _thread(event)
            if thread is not None:
                threads.add(thread)
    runnable = set()
    for eid, event in uses.items():
        permission = event.get("evaluated_permission")
        if eid in answered or _thread(event) in threads or verdicts.get(eid) == "deny":
            continue
        if permission in (None, "allow") or (permission == "ask" and verdicts.get(eid) == "allow"):
            runnable.add(eid)  # an unknown permission waits, like ``ask`` without a verdict
    return _Builtins(uses, frozenset(runnable))


def _as_use(event: JSON) -> ToolUse:
    use = _tool_use(event)
    return attrs.evolve(use, id=BUILTIN_PREFIX + str(use.id))


def open_builtin_uses(events: Sequence[JSON], listed: Sequence[str] = ()) -> tuple[ToolUse, ...]:
    """The built-in calls of ``events`` that take a local result: those ``listed`` first (the
    idle's ``event_ids`` order), then the rest in event order."""
    index = _builtins(events)
    order = [*listed, *(e for e in index.uses if e not in listed)]
    seen: set[str] = set()
    out: list[ToolUse] = []
    for eid in order:
        if eid in index.open and eid not in seen:
            seen.add(eid)
            out.append(_as_use(index.uses[eid]))
    return tuple(out)


def _merge(first: Sequence[ToolUse], more: Sequence[ToolUse]) -> tuple[ToolUse, ...]:
    known = {u.id for u in first}
    return (*first, *(u for u in more if u.id not in known))


def consolidate_self_hosted(
    history: Iterable[JSON], seen: Collection[str], buffered: Iterable[JSON] = (), *, attach: bool = False
) -> Consolidated:
    """``consolidate``, for a worker attaching to a session that waits on it.

    When the outstanding requires_action idle is one the client never processed (so
    ``consolidate`` would settle it and redrive only its custom calls), its calls are
    *replayed* instead: the events from the first one it lists up to the idle (earlier
    boundaries left out), then the idle — so folding them runs the built-in calls that wait
    for a result and asks for the confirmations that wait for a verdict, exactly as a live
    turn would. Nothing is then also redriven (``pending`` is empty)."""
    merged = merge_history(tuple(history), tuple(buffered))
    found = consolidate(merged, seen, (), attach=attach)
    at = _outstanding_idle(merged)
    if at is None:
        return found
    idle_id = event_id(merged[at])
    if idle_id in {event_id(e) for e in found.replay} or idle_id in set(seen):
        return found
    listed = set(_listed_ids(merged[at].get("stop_reason")) or ())
    firsts = [i for i, e in enumerate(merged[:at]) if event_id(e) in listed]
    if not firsts:
        return found
    turn = (*(e for e in merged[min(firsts) : at] if not is_turn_boundary(e)), merged[at])
    replay = turn + found.replay
    replayed = {eid for e in replay if (eid := event_id(e)) is not None}
    return attrs.evolve(
        found,
        replay=replay,
        seen=tuple(i for i in found.seen if i not in replayed),
        pending=(),
        confirmations=(),
        boundary=None,  # the idle is replayed: the client stands before it, at no boundary it knows
        boundary_at=None,
    )


@register_codec
class ClaudeSelfHostedCodec(ClaudeManagedAgentsCodec):
    """CMA on a self-hosted environment: built-in tool calls are this client's to run."""

    name = "claude_self_hosted"

    def normalize(self, events: Sequence[JSON]) -> TurnResult:
        turn = normalize(events)
        if turn.terminal is not Terminal.REQUIRES_ACTION:
            return turn
        extra = open_builtin_uses(events, _listed_ids(turn.stop_reason) or ())
        return attrs.evolve(turn, custom_tool_uses=_merge(turn.custom_tool_uses, extra)) if extra else turn

    def pending_tool_uses(self, history: Sequence[JSON]) -> tuple[ToolUse, ...]:
        events = tuple(history)
        at = _outstanding_idle(events)
        if at is None:
            return ()
        listed = _listed_ids(events[at].get("stop_reason")) or ()
        return _merge(pending_tool_uses(events), open_builtin_uses(events[: at + 1], listed))

    def confirmations_required(self, events: Sequence[JSON]) -> tuple[JSON, ...]:
        """The listed calls that wait for a verdict: on a self-hosted environment an idle also
        lists the built-in calls that wait for a *result*, and those take no confirmation."""
        return tuple(
            e
            for e in confirmations_required(events)
            if event_type(e) != AGENT_TOOL_USE or e.get("evaluated_permission") not in (None, "allow")
        )

    def confirmation_uses(self, events: Sequence[JSON]) -> tuple[ToolUse, ...]:
        return tuple(_tool_use(e) for e in self.confirmations_required(events))

    def live_updates(self, event: JSON) -> tuple[LiveUpdate, ...]:
        if event_type(event) == AGENT_TOOL_USE and event.get("evaluated_permission") != "deny":
            use = _as_use(event)
            return (ToolCallStarted(use.id, use.name),)
        return super().live_updates(event)

    def resume_input(self, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> Input:
        """One answer per use, in order: ``user.tool_result`` for a built-in call,
        ``user.custom_tool_result`` for a custom one."""
        if len(uses) != len(results):
            raise ValueError(f"{len(uses)} tool uses but {len(results)} results")
        if not uses:
            raise ValueError("an empty resume is never sent: the API rejects an empty events list")
        events: list[JSON] = []
        for use, result in zip(uses, results, strict=True):
            builtin = builtin_id(use.id)
            if builtin is not None:
                events.append(tool_result(builtin, result.text, result.is_error))
            else:
                events.extend(super().resume_input((use,), (result,)))
        return events

    def input_landed(self, input: Input, events: Sequence[JSON]) -> bool:
        results = [e for e in input if event_type(e) == USER_TOOL_RESULT] if isinstance(input, list) else []
        rest = [e for e in input if event_type(e) != USER_TOOL_RESULT] if isinstance(input, list) else input
        answered = {e.get("tool_use_id") for e in events if event_type(e) == USER_TOOL_RESULT}
        if any(r.get("tool_use_id") not in answered for r in results):
            return False
        return not rest or super().input_landed(rest, events)


SELF_HOSTED_CODEC = ClaudeSelfHostedCodec()
