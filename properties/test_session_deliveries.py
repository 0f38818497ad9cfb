"""What the machine delivers changes nothing it decides, and subclassed events decide alike.

Deliveries (``DeliverEvent``, built only for a handler with ``handle_event``) and live updates
(``DeliverUpdate``, built only while consumed) are the only commands a consumer adds: the
same sequence folded with and without one gives the same decisions, telemetry and results.
The table dispatches an event by the nearest of its classes that has an entry, so a subclass
of ``StreamEvent`` must fold exactly as ``StreamEvent`` itself does. The per-turn telemetry
nobody listens to (``State.telemetry`` off) is left out, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from properties._world import scaled
from properties.test_session_totality import (
    ANSWER_TOOLS,
    GEN,
    answering,
    configs,
    events,
    latest_batch,
    raw_events,
)
from rma.providers.scripted import ScriptedCodec
from rma.session import commands as C
from rma.session.events import (
    Event,
    LiveEvent,
    Opened,
    StreamEvent,
    TurnPolled,
    UpdatesWanted,
    UserMessage,
)
from rma.session.machine import State, initial_state, step, with_telemetry
from rma.session.receiving import live_event_forwards

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


def _fold_pair(
    a: State,
    b: State,
    evs: list[Event],
    b_sees: Callable[[Event], Event],
    b_before: Callable[[State, int], State] = lambda s, _: s,
) -> Fold:
    """Step ``a`` and ``b`` side by side (``b`` gets each event through ``b_sees``, its state
    through ``b_before`` with the event's index first), yielding both outcomes per event;
    ``ANSWER_TOOLS`` answers ``a``'s latest tool batch."""
    last_batch: C.RunTools | None = None
    for i, given_ev in enumerate(evs):
        ev = answering(given_ev, last_batch)
        if ev is None:
            continue
        a, out_a = step(a, ev)
        b, out_b = step(b_before(b, i), b_sees(ev))
        yield ev, out_a, a, out_b, b
        last_batch = latest_batch(out_a, last_batch)


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
    commands differ by the ``DeliverUpdate`` ones only, the states by the flag and what the
    updates told (``live``, issue #25) only, and a subclassed stream event still decides as a
    plain one."""
    watched = initial_state(attrs.evolve(cfg, deliver_updates=True))
    events = [_subclassed(e) for e in [opened, *evs]] if subclassed else [opened, *evs]
    for ev, out_plain, plain, out_watched, after in _fold_pair(
        initial_state(cfg), watched, events, lambda e: e
    ):
        assert tuple(c for c in out_watched if not isinstance(c, C.DeliverUpdate)) == out_plain, ev
        assert {**_value(after), "config": None, "updates": None, "live": None} == {
            **_value(plain),
            "config": None,
            "updates": None,
            "live": None,
        }, ev
    for ev, out_plain, plain, out_sub, sub in _fold_pair(
        initial_state(attrs.evolve(cfg, deliver_updates=True)),
        initial_state(attrs.evolve(cfg, deliver_updates=True)),
        [opened, *evs],
        _subclassed,
    ):
        assert out_plain == out_sub, ev
        assert _value(plain) == _value(sub), ev


# Request/response turns — a few live events, then the whole turn — among the totality mix.
live_turn = st.tuples(
    st.lists(st.builds(LiveEvent, raw_events), min_size=1, max_size=4),
    st.builds(TurnPolled, st.lists(raw_events, max_size=4)),
)
_turn_block = live_turn.map(lambda t: [*t[0], t[1]])
_between = st.sampled_from([ANSWER_TOOLS, UserMessage("more"), UpdatesWanted(True), UpdatesWanted(False)])
live_heavy = st.lists(
    st.one_of(_turn_block, _turn_block, _turn_block, _between.map(lambda e: [e]), events.map(lambda e: [e])),
    min_size=3,
    max_size=25,
).map(lambda blocks: [e for block in blocks for e in block])


@SETTINGS
@given(
    cfg=configs(),
    opened=st.builds(Opened, st.just("s1"), st.just(False)),
    evs=live_heavy,
    consumed=st.sampled_from(["none", "none", "events", "updates"]),
    request_response=st.sampled_from([True, True, True, False]),
)
def test_a_live_event_nothing_takes_after_the_turns_first_changes_only_its_telemetry(
    cfg: Any, opened: Opened, evs: list[Event], consumed: str, request_response: bool
) -> None:
    """What the shell skips (``rma_shell.machinery.driver``, ``live_event_forwards``): a live event
    after the turn's first while neither ``handle_event`` nor live updates take it. Folded
    without those, the session decides exactly as with them: the commands differ by their
    ``rma.stream.event`` telemetry only, the states by the count of live events only."""
    if request_response:  # a host that forwards live events, with a prompt: turns are driven
        cfg = attrs.evolve(cfg, codec=ScriptedCodec(), prompt="go", provider_name=ScriptedCodec().name)
    cfg = attrs.evolve(cfg, deliver_events=consumed == "events", deliver_updates=consumed == "updates")
    plain, skipping = initial_state(cfg), initial_state(cfg)
    last_batch: C.RunTools | None = None
    skipped = 0
    for given_ev in [opened, *evs]:
        ev = answering(given_ev, last_batch)
        if ev is None:
            continue
        plain, out_plain = step(plain, ev)
        if isinstance(ev, LiveEvent) and skipping.live_forwarded >= 1 and not live_event_forwards(skipping):
            skipped += 1
            out_skipping: tuple[C.Command, ...] = ()
        else:
            skipping, out_skipping = step(skipping, ev)
        telemetry = [c for c in out_plain if isinstance(c, C.Emit) and c.name == "rma.stream.event"]
        if isinstance(ev, LiveEvent) and out_skipping == ():
            assert [c for c in out_plain if c not in telemetry] == [], ev
        else:
            assert out_skipping == out_plain, ev
        assert {**_value(skipping), "live_forwarded": None} == {**_value(plain), "live_forwarded": None}, ev
        assert (skipping.live_forwarded == 0) == (plain.live_forwarded == 0), ev
        last_batch = latest_batch(out_plain, last_batch)
    event(f"skipped some: {skipped > 0}")
    if consumed != "none":
        assert skipped == 0


PER_TURN = frozenset({"rma.turn.start", "rma.turn.stop", "rma.session.tool_uses", "rma.stream.event"})
"""The telemetry ``State.telemetry`` turns off while nothing subscribes (``with_telemetry``)."""


@SETTINGS
@given(
    cfg=configs(),
    opened=st.builds(Opened, st.just("s1"), st.booleans()),
    evs=st.lists(stream_heavy, min_size=5, max_size=50),
    listening=st.lists(st.booleans(), min_size=51, max_size=51),
)
def test_telemetry_nobody_listens_to_is_left_out_and_nothing_else(
    cfg: Any, opened: Opened, evs: list[Event], listening: list[bool]
) -> None:
    """The driver sets ``State.telemetry`` before each event from whether a subscriber
    listens (issue #17), and a subscriber may come and go mid-session. Folded that way, the
    session decides exactly as with telemetry always on: an event folded without a listener
    loses its per-turn ``Emit``s and nothing else, and the states compare equal throughout."""
    for ev, out_on, on, out_toggled, toggled in _fold_pair(
        initial_state(cfg),
        initial_state(cfg),
        [opened, *evs],
        lambda e: e,
        lambda s, i: with_telemetry(s, listening[i]),
    ):
        listens = toggled.telemetry  # the flag it was stepped with: ``step`` leaves it as set
        event("listened" if listens else "nobody listened")
        assert on == toggled and _value(on) | {"telemetry": None} == _value(toggled) | {"telemetry": None}, ev
        if listens:
            assert out_toggled == out_on, ev
        else:
            kept = tuple(c for c in out_on if not (isinstance(c, C.Emit) and c.name in PER_TURN))
            assert out_toggled == kept, ev
