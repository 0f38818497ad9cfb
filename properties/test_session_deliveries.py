"""What the machine delivers changes nothing it decides, and subclassed events decide alike.

Deliveries (``DeliverEvent``, built only for a handler with ``handle_event``) and live updates
(``DeliverUpdate``, built only while consumed) are the only commands a consumer adds: the
same sequence folded with and without one gives the same decisions, telemetry and results.
The table dispatches an event by the nearest of its classes that has an entry, so a subclass
of ``StreamEvent`` must fold exactly as ``StreamEvent`` itself does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties._world import scaled
from properties.test_session_totality import ANSWER_TOOLS, GEN, configs, events, raw_events
from rma.session import commands as C
from rma.session.events import Event, Opened, StreamEvent, ToolsFinished
from rma.session.machine import State, initial_state, step
from rma.vocabulary import ToolResult

SETTINGS = settings(
    max_examples=scaled(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@attrs.frozen
class SubStreamEvent(StreamEvent):
    """A stream event of a class the table has no row for (its base class has)."""


def _subclassed(ev: Event) -> Event:
    return SubStreamEvent(ev.gen, ev.event) if type(ev) is StreamEvent else ev


def _value(s: State) -> dict[str, Any]:
    """The state's fields, with waiting stream events compared by generation and payload."""
    fields = attrs.asdict(s, recurse=False)
    fields["deferred"] = [("stream", d.gen, d.event) if isinstance(d, StreamEvent) else d for d in s.deferred]
    return fields


# More stream events than the totality mix, mostly of the live generations.
stream_heavy = st.one_of(
    events, st.builds(StreamEvent, GEN, raw_events), st.builds(StreamEvent, st.just(0), raw_events)
)


Fold = Iterator[tuple[Event, tuple[C.Command, ...], State, tuple[C.Command, ...], State]]


def _fold_pair(a: State, b: State, evs: list[Event], b_sees: Callable[[Event], Event]) -> Fold:
    """Step ``a`` and ``b`` side by side (``b`` gets each event through ``b_sees``), yielding both
    outcomes per event; ``ANSWER_TOOLS`` answers ``a``'s latest tool batch."""
    last_batch: C.RunTools | None = None
    for ev in evs:
        if ev is ANSWER_TOOLS:
            if last_batch is None:
                continue
            ev = ToolsFinished(
                last_batch.batch, [ToolResult(u.id, f"r{i}") for i, u in enumerate(last_batch.uses)]
            )
        a, out_a = step(a, ev)
        b, out_b = step(b, b_sees(ev))
        yield ev, out_a, a, out_b, b
        last_batch = next((c for c in reversed(out_a) if isinstance(c, C.RunTools)), last_batch)


@SETTINGS
@given(
    cfg=configs(),
    opened=st.builds(Opened, st.just("s1"), st.booleans()),
    evs=st.lists(stream_heavy, min_size=5, max_size=50),
)
def test_a_subclassed_stream_event_decides_as_a_stream_event(
    cfg: Any, opened: Opened, evs: list[Event]
) -> None:
    for ev, out_plain, plain, out_sub, sub in _fold_pair(
        initial_state(cfg), initial_state(cfg), [opened, *evs], _subclassed
    ):
        assert out_plain == out_sub, ev
        assert _value(plain) == _value(sub), ev


@SETTINGS
@given(
    cfg=configs(),
    opened=st.builds(Opened, st.just("s1"), st.booleans()),
    evs=st.lists(stream_heavy, min_size=5, max_size=50),
    subclassed=st.booleans(),
)
def test_without_an_event_consumer_only_the_deliveries_are_left_out(
    cfg: Any, opened: Opened, evs: list[Event], subclassed: bool
) -> None:
    """``deliver_events=False`` (a handler without ``handle_event``) changes nothing but the
    ``DeliverEvent`` commands: same decisions, same telemetry, same results, subclassed or not."""
    start = initial_state(attrs.evolve(cfg, deliver_events=False))
    events = [_subclassed(e) for e in [opened, *evs]] if subclassed else [opened, *evs]
    for ev, out_watched, watched, out_unwatched, unwatched in _fold_pair(
        initial_state(cfg), start, events, lambda e: e
    ):
        assert out_unwatched == tuple(c for c in out_watched if not isinstance(c, C.DeliverEvent)), ev
        assert {**_value(unwatched), "config": None} == {**_value(watched), "config": None}, ev


@SETTINGS
@given(
    cfg=configs(),
    opened=st.builds(Opened, st.just("s1"), st.booleans()),
    evs=st.lists(stream_heavy, min_size=5, max_size=50),
    subclassed=st.booleans(),
)
def test_live_updates_only_add_their_own_deliveries(
    cfg: Any, opened: Opened, evs: list[Event], subclassed: bool
) -> None:
    """With an update consumer (issue #14) the machine decides exactly as without one: the
    commands differ by the ``DeliverUpdate`` ones only, the states by the flag only, and a
    subclassed stream event still decides as a plain one."""
    watched = initial_state(attrs.evolve(cfg, deliver_updates=True))
    events = [_subclassed(e) for e in [opened, *evs]] if subclassed else [opened, *evs]
    for ev, out_plain, plain, out_watched, after in _fold_pair(
        initial_state(cfg), watched, events, lambda e: e
    ):
        assert tuple(c for c in out_watched if not isinstance(c, C.DeliverUpdate)) == out_plain, ev
        assert {**_value(after), "config": None, "updates": None} == {
            **_value(plain),
            "config": None,
            "updates": None,
        }, ev
    for ev, out_plain, plain, out_sub, sub in _fold_pair(
        initial_state(attrs.evolve(cfg, deliver_updates=True)),
        initial_state(attrs.evolve(cfg, deliver_updates=True)),
        [opened, *evs],
        _subclassed,
    ):
        assert out_plain == out_sub, ev
        assert _value(plain) == _value(sub), ev
