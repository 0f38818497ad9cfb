"""Every handler moves the session only to the phases its table entry names.

``TRANSITIONS`` is what the docs draw (``rma.session.diagram``); a handler that leads
somewhere its entry does not name makes that drawing wrong. Each dispatch the machine makes
— of a fresh event or of one it had deferred — is recorded as (phase before, entry, phase
after) while arbitrary sequences are folded and simulated sessions run; the phase after
must be the one before or one the entry names.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import properties._world as W
from properties._world import scaled
from properties.test_session_deliveries import stream_heavy
from properties.test_session_totality import answering, configs, latest_batch
from rma.session import commands as C
from rma.session import machine as M
from rma.session.events import Event, Opened

SETTINGS = settings(
    max_examples=scaled(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Seen = list[tuple[M.Phase, Any, M.Phase, object]]


@contextmanager
def recorded() -> Iterator[Seen]:
    seen: Seen = []
    take = M._take

    def recording(s: M.State, ev: object, entry: Any) -> M.Step:
        after, out = take(s, ev, entry)
        seen.append((s.phase, entry, after.phase, ev))
        return after, out

    M._take = recording
    try:
        yield seen
    finally:
        M._take = take


def check(seen: Seen) -> None:
    for before, entry, after, ev in seen:
        if after is before:
            continue
        assert isinstance(entry, M.Go), (before, after, ev)
        assert after in entry.phases(), f"{entry.handler.__name__} led {before} to {after} on {ev!r}"


@SETTINGS
@given(
    cfg=configs(),
    opened=st.builds(Opened, st.just("s1"), st.booleans()),
    evs=st.lists(stream_heavy, min_size=5, max_size=50),
)
def test_arbitrary_sequences_stay_within_the_table(cfg: Any, opened: Opened, evs: list[Event]) -> None:
    s = M.initial_state(cfg)
    last: C.RunTools | None = None
    with recorded() as seen:
        for given_ev in [opened, *evs]:
            ev = answering(given_ev, last)
            if ev is None:
                continue
            s, out = M.step(s, ev)
            last = latest_batch(out, last)
    check(seen)


@SETTINGS
@given(data=st.data(), p=W.params())
def test_simulated_sessions_stay_within_the_table(data: st.DataObject, p: W.Params) -> None:
    with recorded() as seen:
        W.World(data.draw, p).run()
    check(seen)
