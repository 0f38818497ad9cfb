"""The scripted codec's normalize, text delta and turn boundary against a plain reference.

``normalize`` builds its TurnResult, Usage and ToolUse values without re-running attrs'
validators and converters (the values are valid by construction). These tests pin that what
it builds equals what the checked constructors build, over any event list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from rma.providers.scripted import ScriptedCodec, ScriptedStreamingCodec
from rma.vocabulary import JSON, Terminal, ToolUse, TurnResult, Usage

_TERMINALS = {"end_turn": Terminal.END_TURN, "requires_action": Terminal.REQUIRES_ACTION}


def _tokens(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def reference_normalize(events: Sequence[JSON]) -> TurnResult:
    """The scripted vocabulary, normalized the straightforward way: every value checked."""
    texts: list[str] = []
    uses: list[ToolUse] = []
    server: list[JSON] = []
    usage: Usage | None = None
    idle: dict[str, Any] | None = None
    for ev in events:
        if not isinstance(ev, dict):
            continue
        kind = ev.get("type")
        if kind == "text" and isinstance(ev.get("text"), str):
            texts.append(str(ev["text"]))
        elif kind == "tool_use":
            raw_input = ev.get("input")
            uses.append(
                ToolUse(
                    id=ev.get("id") if isinstance(ev.get("id"), str) else None,
                    name=str(ev.get("name") or "unknown"),
                    input=raw_input if isinstance(raw_input, dict) else {},
                )
            )
        elif kind == "server_tool_use":
            server.append(ev)
        elif kind == "usage":
            u = Usage(
                input_tokens=_tokens(ev.get("input_tokens")),
                output_tokens=_tokens(ev.get("output_tokens")),
                cache_read_input_tokens=_tokens(ev.get("cache_read_input_tokens")),
                cache_creation_input_tokens=_tokens(ev.get("cache_creation_input_tokens")),
                raw=(ev,),
            )
            usage = u if usage is None else usage + u
        elif kind == "idle":
            idle = ev
    if idle is None:
        return TurnResult(Terminal.TERMINATED, None, "".join(texts), uses, server, usage, events)
    stop_reason = idle.get("stop_reason")
    stop_kind = stop_reason.get("type") if isinstance(stop_reason, dict) else stop_reason
    terminal = _TERMINALS.get(str(stop_kind), Terminal.TERMINATED)
    wanted = idle.get("event_ids")
    if isinstance(wanted, list):
        uses = [u for u in uses if u.id in wanted]
    return TurnResult(terminal, stop_reason, "".join(texts), uses, server, usage, events)


scalars = st.none() | st.booleans() | st.integers(-3, 50) | st.text(max_size=4) | st.floats(allow_nan=False)
ids = st.none() | st.sampled_from(["t1", "t2", "e1"]) | st.integers(0, 3)
stop_reasons = st.sampled_from(["end_turn", "requires_action", "other"]).map(lambda k: {"type": k}) | scalars

events = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5) | scalars}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": ids, "name": st.sampled_from(["", "step", "x"]) | scalars},
        optional={"input": st.dictionaries(st.text(max_size=3), scalars, max_size=2) | scalars},
    ),
    st.fixed_dictionaries({"type": st.just("server_tool_use"), "id": ids, "name": st.just("web")}),
    st.fixed_dictionaries(
        {"type": st.just("usage")},
        optional={
            "input_tokens": scalars,
            "output_tokens": scalars,
            "cache_read_input_tokens": scalars,
            "cache_creation_input_tokens": scalars,
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("idle"), "stop_reason": stop_reasons},
        optional={"event_ids": st.lists(ids, max_size=3) | scalars},
    ),
    st.dictionaries(st.text(max_size=4), scalars, max_size=2),
    scalars,
)


def _rechecked(tr: TurnResult) -> TurnResult:
    """Every value rebuilt through its checked constructor: raises if any would be refused."""
    return TurnResult(
        terminal=tr.terminal,
        stop_reason=tr.stop_reason,
        text=tr.text,
        custom_tool_uses=[ToolUse(u.id, u.name, u.input) for u in tr.custom_tool_uses],
        server_tool_uses=tr.server_tool_uses,
        usage=None if tr.usage is None else Usage(**attrs.asdict(tr.usage, recurse=False)),
        events=tr.events,
    )


@settings(max_examples=300, deadline=None)
@given(turn=st.lists(events, max_size=8), as_tuple=st.booleans())
def test_normalize_equals_the_checked_reference_for_any_events(turn: list[JSON], as_tuple: bool) -> None:
    given_events: Sequence[JSON] = tuple(turn) if as_tuple else turn
    for codec in (ScriptedCodec(), ScriptedStreamingCodec()):
        got = codec.normalize(given_events)
        assert got == reference_normalize(given_events)
        assert got == _rechecked(got)
        assert type(got.events) is tuple and type(got.custom_tool_uses) is tuple
        assert type(got.server_tool_uses) is tuple
        assert isinstance(got.terminal, Terminal)


@settings(max_examples=200, deadline=None)
@given(event=events)
def test_text_delta_and_turn_boundary_match_the_vocabulary(event: JSON) -> None:
    codec = ScriptedStreamingCodec()
    is_text = isinstance(event, dict) and event.get("type") == "text" and isinstance(event.get("text"), str)
    assert codec.text_delta(event) == (event["text"] if is_text else None)  # type: ignore[index]
    assert codec.turn_boundary(event) == (isinstance(event, dict) and event.get("type") == "idle")


def test_a_turn_normalizes_to_its_text_tools_usage_and_terminal() -> None:
    turn = (
        {"type": "text", "text": "hel", "id": "e1"},
        {"type": "text", "text": "lo", "id": "e2"},
        {"type": "usage", "input_tokens": 10, "output_tokens": 5, "id": "e3"},
        {"type": "usage", "input_tokens": 1, "output_tokens": True, "cache_read_input_tokens": -1},
        {"type": "tool_use", "id": "t1", "name": "step", "input": {"n": 1}},
        {"type": "tool_use", "id": "t2", "name": "", "input": "not a map"},
        {"type": "idle", "stop_reason": {"type": "requires_action"}, "event_ids": ["t1", "t2"]},
    )
    tr = ScriptedStreamingCodec().normalize(turn)
    assert tr.terminal is Terminal.REQUIRES_ACTION
    assert tr.text == "hello"
    assert tr.custom_tool_uses == (ToolUse("t1", "step", {"n": 1}), ToolUse("t2", "unknown", {}))
    assert tr.usage == Usage(11, 5, 0, 0, raw=(turn[2], turn[3]))
    assert tr.events is turn
