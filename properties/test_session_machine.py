"""The session machine against a simulated shell and host (invariants 1–8).

Each example builds a config (sync or live, streaming or request/response, max_turns
1..6, terminal tool on/off, turn guard on/off, fresh or resumed open), then lets
``properties._world.World`` play shell and host for up to 80 steps: every command is
answered with a generated fact or a fault, in an order hypothesis chooses, with stale
stream generations, re-delivered event ids, follow-ups and send_event calls mixed in.
Per-step invariants are checked as the run goes (``World.check_step``); replay, JSON
round trips and persistence after forks are checked over the whole run (``check_trace``).

``RMA_PROPERTIES_SCALE=10`` multiplies the number of examples for a deeper run (add
``--timeout=0``: the project's pytest-timeout of 120 s applies to each test).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties._world import Params, World, check_trace, params, scaled

# Live sessions run the full step budget (follow-ups keep them going); sync ones end early.
EXAMPLES = {
    (False, False): 150,
    (True, False): 150,
    (False, True): 30,
    (True, True): 50,
}
SETTINGS = {
    key: settings(
        max_examples=scaled(n),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    for key, n in EXAMPLES.items()
}


def simulate(data: st.DataObject, p: Params) -> None:
    check_trace(World(data.draw, p).run())


@SETTINGS[False, False]
@given(data=st.data(), p=params(streaming=False, live=False))
def test_sync_request_response_sessions(data: st.DataObject, p: Params) -> None:
    simulate(data, p)


@SETTINGS[True, False]
@given(data=st.data(), p=params(streaming=True, live=False))
def test_sync_streaming_sessions(data: st.DataObject, p: Params) -> None:
    simulate(data, p)


@SETTINGS[False, True]
@given(data=st.data(), p=params(streaming=False, live=True))
def test_live_request_response_sessions(data: st.DataObject, p: Params) -> None:
    simulate(data, p)


@SETTINGS[True, True]
@given(data=st.data(), p=params(streaming=True, live=True))
def test_live_streaming_sessions(data: st.DataObject, p: Params) -> None:
    simulate(data, p)
