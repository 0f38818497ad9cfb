"""Claude ``event_deltas`` previews (issue #25): whatever the host previews — any chunking, deltas
that stop early, previews cut by the model (closed by ``span.model_request_end``) or
contradicted by their final event — a consumer that follows ``rma.live`` (appends
``TextDelta``s, clears on ``AttemptDiscarded``) ends each turn showing exactly the final
events' text, and the tool calls started since its last clear are exactly the turn's.

Pure: the codec's ``live_fold`` is driven the way the session machine drives it (previews
never enter the turn's events; finals do).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from properties._world import scaled
from rma.live import NO_LIVE_TURN, AttemptDiscarded, LiveUpdate, TextDelta, ToolCallStarted
from rma.providers.claude.codec import CODEC

_text = st.text(alphabet="ab c", min_size=1, max_size=12)

_message = st.tuples(
    st.just("message"),
    _text,
    st.integers(1, 5),  # chunk size
    st.integers(0, 6),  # deltas sent before they stop (best-effort)
    st.booleans(),  # deltas contradict the final text
)
_cut = st.tuples(st.just("cut"), _text, st.integers(1, 5), st.integers(0, 6), st.just(False))
_tool = st.tuples(
    st.just("tool"), st.sampled_from(["lookup", "fetch"]), st.just(0), st.just(0), st.just(False)
)
_turn = st.lists(st.one_of(_message, _cut, _tool), max_size=6)


def _frames(turn: list[tuple[str, str, int, int, bool]]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The stream's events, the final messages' texts, the custom tool ids."""
    out: list[dict[str, Any]] = [{"type": "session.status_running", "id": "run"}]
    finals: list[str] = []
    tools: list[str] = []
    for n, (kind, text, size, sent, wrong) in enumerate(turn):
        eid = f"sevt_{n}"
        if kind == "tool":
            out.append({"type": "agent.custom_tool_use", "id": eid, "name": text, "input": {}})
            tools.append(eid)
            continue
        out.append({"type": "event_start", "event": {"type": "agent.message", "id": eid}})
        shown = ("x" + text) if wrong else text
        pieces = [shown[i : i + size] for i in range(0, len(shown), size)][:sent]
        for piece in pieces:
            delta = {"type": "content_delta", "index": 0, "content": {"type": "text", "text": piece}}
            out.append({"type": "event_delta", "event_id": eid, "delta": delta})
        if kind == "message":
            out.append({"type": "agent.message", "id": eid, "content": [{"type": "text", "text": text}]})
            finals.append(text)
        out.append({"type": "span.model_request_end", "id": f"end_{n}", "model_usage": {}})
    out.append({"type": "session.status_idle", "id": "idle", "stop_reason": {"type": "end_turn"}})
    return out, finals, tools


def _fold(events: list[dict[str, Any]]) -> list[LiveUpdate]:
    live, turn, updates = NO_LIVE_TURN, [], []
    for event in events:
        live, more = CODEC.live_fold(live, event, tuple(turn))
        updates.extend(more)
        if not CODEC.is_preview(event):
            turn.append(event)
    return updates


@settings(max_examples=scaled(300), deadline=None)
@given(_turn)
def test_a_consumer_of_live_updates_ends_the_turn_showing_the_final_events(
    turn: list[tuple[str, str, int, int, bool]],
) -> None:
    events, finals, tools = _frames(turn)
    shown, started = "", []
    for update in _fold(events):
        if isinstance(update, AttemptDiscarded):
            shown, started = "", []
        elif isinstance(update, TextDelta):
            shown += update.text
        elif isinstance(update, ToolCallStarted):
            started.append(update.id)
    assert shown == "".join(finals)
    assert started == tools


@settings(max_examples=scaled(200), deadline=None)
@given(_turn)
def test_without_cuts_or_contradictions_nothing_is_discarded(
    turn: list[tuple[str, str, int, int, bool]],
) -> None:
    clean = [(k, t, s, n, False) for k, t, s, n, _ in turn if k != "cut"]
    events, finals, _ = _frames(clean)
    updates = _fold(events)
    assert not [u for u in updates if isinstance(u, AttemptDiscarded)]
    assert "".join(u.text for u in updates if isinstance(u, TextDelta)) == "".join(finals)
