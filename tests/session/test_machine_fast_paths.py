"""The session machine's cheap builds give the values its checked builds give.

Pinned here: the unchecked Usage sum of the accumulators, the memo of ``rma.stream.event``
commands (equal to a fresh build, bounded, not part of the state's value), and the shell's
side of that memo: every emission hands subscribers maps of their own.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Success

from rma.providers.scripted import ScriptedStreamingCodec
from rma.session import commands as C
from rma.session.events import Opened, PushFinished, StreamConnected, StreamEvent
from rma.session.machine import State, _usage_sum, initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import Usage
from rma_shell import Telemetry, run
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import end, text

counts = st.integers(0, 2**40)


@settings(max_examples=200, deadline=None)
@given(a=st.tuples(counts, counts, counts, counts), b=st.tuples(counts, counts, counts, counts))
def test_the_unchecked_usage_sum_equals_the_checked_one(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    x, y = Usage(*a, raw=({"n": 1},)), Usage(*b)
    total = _usage_sum(x, y)
    assert total == Usage(*(i + j for i, j in zip(a, b, strict=True)))
    assert type(total) is Usage and total.raw == ()


def _awaiting(metadata: dict[str, Any] | None = None) -> State:
    config = SessionConfig(codec=ScriptedStreamingCodec(), prompt="go", metadata=metadata or {})
    s = initial_state(config)
    for ev in (Opened("s1"), StreamConnected(0), PushFinished(Success(None))):
        s, _ = step(s, ev)
    return s


def _stream_emits(out: tuple[C.Command, ...]) -> list[C.Emit]:
    return [c for c in out if isinstance(c, C.Emit) and c.name == "rma.stream.event"]


def test_memoized_stream_telemetry_equals_a_fresh_build_for_every_shape() -> None:
    s = _awaiting({"tenant": "t", "type": "caller's"})
    raws: list[Any] = [
        {"type": "text", "text": "a", "id": "e1"},
        {"type": "text", "text": "b", "id": "e2"},
        {"contentBlockDelta": {"delta": {"text": "x"}}},  # a Converse envelope: its key
        {"type": 7, "k": 1},
        "ping",
        {},
    ]
    expected_types = ["text", "text", "contentBlockDelta", "type", None, None]
    for raw, kind in zip(raws, expected_types, strict=True):
        s, out = step(s, StreamEvent(0, raw))
        fresh = C.Emit("rma.stream.event", {}, {"tenant": "t", "type": kind, "session_id": "s1"})
        assert _stream_emits(out) == [fresh]
        assert list(_stream_emits(out)[0].metadata) == ["tenant", "type", "session_id"]  # key order kept


def test_the_memo_is_keyed_by_session_id_bounded_and_not_part_of_the_state_value() -> None:
    s = _awaiting()
    s, first = step(s, StreamEvent(0, {"type": "text", "text": "a", "id": "e1"}))
    other = attrs.evolve(s, session_id="s2")
    _, out = step(other, StreamEvent(0, {"type": "text", "text": "b", "id": "e2"}))
    assert _stream_emits(out)[0].metadata["session_id"] == "s2"
    assert _stream_emits(first)[0].metadata["session_id"] == "s1"
    for i in range(300):  # hosts may invent types: the memo stops growing, the commands stay right
        s, out = step(s, StreamEvent(0, {"type": f"kind{i}", "id": f"k{i}"}))
        assert _stream_emits(out)[0].metadata == {"type": f"kind{i}", "session_id": "s1"}
    assert len(s.emits) == 256
    fresh, _ = step(_awaiting(), StreamEvent(0, {"type": "text", "text": "a", "id": "e1"}))
    twin = attrs.evolve(fresh)  # built anew: an empty memo
    assert twin.emits == {} and fresh.emits != {}
    assert twin == fresh and "emits" not in repr(fresh)


async def test_each_emission_gets_maps_of_its_own() -> None:
    """A subscriber that writes into what it was given cannot alter any later emission."""
    tel = Telemetry()
    dirty: list[bool] = []

    def meddle(name: str, measurements: Any, metadata: Any) -> None:
        dirty.append("meddled" in metadata or "meddled" in measurements)
        metadata["meddled"] = True
        measurements["meddled"] = 1

    tel.attach("meddler", "rma.*", meddle)
    turn = [text("a"), text("b"), text("c"), *end("done")]
    outcome = await run(ScriptedProvider([turn], streaming=True), handler=_noop, prompt="go", telemetry=tel)
    assert isinstance(outcome, Success), outcome
    assert len(dirty) > len(turn) and not any(dirty)


def _noop(name: str, input: Any, ctx: Any) -> str:
    return "ok"
