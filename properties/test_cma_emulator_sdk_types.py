"""The CMA emulator speaks the SDK's types (issue #25): for any script built from the emulator's
builders — messages (previewed in any chunk size, or cut), thinking, custom tool calls of the
session's agent or of a sub-agent thread, thread lifecycle and messages, session errors of
every kind, every idle stop reason — every frame of the session's stream (previews included)
validates as the SDK's ``BetaManagedAgentsStreamSessionEvents``, every frame of a thread's
stream and every listed thread event as ``…StreamSessionThreadEvents``, every thread as
``BetaManagedAgentsSessionThread``. Real HTTP to the loopback emulator, streams read raw.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pydantic
import pytest
from anthropic.types.beta.sessions.beta_managed_agents_session_thread import BetaManagedAgentsSessionThread
from anthropic.types.beta.sessions.beta_managed_agents_stream_session_events import (
    BetaManagedAgentsStreamSessionEvents,
)
from anthropic.types.beta.sessions.beta_managed_agents_stream_session_thread_events import (
    BetaManagedAgentsStreamSessionThreadEvents,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties._world import scaled
from rma.errors import SessionErrorKind
from rma.wire.sse import SSEDecoder
from rma_shell.testing.claude import (
    CMAEmulator,
    agent_message,
    agent_thinking,
    custom_tool_use,
    cut_message,
    idle_budget_reached,
    idle_end_turn,
    idle_refusal,
    idle_retries_exhausted,
    in_thread,
    model_request_end,
    model_request_start,
    session_error,
    status_running,
    thread_created,
    thread_message_received,
    thread_message_sent,
    thread_status,
)

KEY = "sk-ant-prop-sdk"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "managed-agents-2026-04-01"}
SESSION_EVENT = pydantic.TypeAdapter(BetaManagedAgentsStreamSessionEvents)
THREAD_EVENT = pydantic.TypeAdapter(BetaManagedAgentsStreamSessionThreadEvents)
T = "sthr_prop01"

_text = st.text(alphabet="ab c.", min_size=1, max_size=20)
_step = st.one_of(
    _text.map(agent_message),
    _text.map(cut_message),
    st.just(agent_thinking()),
    _text.map(lambda t: in_thread(T, agent_message(t))),
    _text.map(lambda t: thread_message_sent(T, t, to_agent_name="helper")),
    _text.map(lambda t: thread_message_received(T, t, from_agent_name="helper")),
    st.sampled_from(["running", "rescheduled"]).map(lambda s: thread_status(T, "helper", s)),
    st.builds(
        lambda kind, retry: session_error("m", error_type=kind, retry_status=retry, **_extra(kind)),
        st.sampled_from([k.value for k in SessionErrorKind]),
        st.sampled_from(["retrying", "exhausted", "terminal"]),
    ),
)
_ending = st.sampled_from(["end_turn", "budget_reached", "refusal", "retries_exhausted", "thread_tool"])


def _extra(kind: str) -> dict[str, Any]:
    if kind.startswith("mcp_"):
        return {"mcp_server_name": "docs"}
    if kind.startswith("repository_"):
        return {"repository_url": "https://github.com/acme/app"}
    return {}


def _script(steps: list[dict[str, Any]], ending: str) -> list[dict[str, Any]]:
    turn = [status_running(), thread_created(T, "helper"), model_request_start(), *steps, model_request_end()]
    if ending == "thread_tool":
        turn += [custom_tool_use("lookup", {"q": 1}, session_thread_id=T), thread_status(T, "helper", "idle")]
        turn.append({"type": "session.status_idle", "stop_reason": {"type": "requires_action"}})
    else:
        turn.append(
            {
                "end_turn": idle_end_turn,
                "budget_reached": idle_budget_reached,
                "refusal": lambda: idle_refusal("cyber", "no"),
                "retries_exhausted": idle_retries_exhausted,
            }[ending]()
        )
    return turn


def _read(url: str, into: list[dict[str, Any]], ready: threading.Event, done: threading.Event) -> None:
    decoder = SSEDecoder()
    with httpx.stream("GET", url, headers=HEADERS, timeout=10) as response:
        ready.set()
        for chunk in response.iter_bytes():
            for message in decoder.feed(chunk):
                if message.data and message.event != "ping":
                    into.append(json.loads(message.data))
            if into and into[-1].get("type") == "session.status_idle":
                done.set()
                return


@pytest.fixture(scope="module")
def emu() -> Iterator[CMAEmulator]:
    with CMAEmulator([], api_key=KEY, delta_chars=3) as running:
        yield running


@settings(max_examples=scaled(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_step, max_size=8), ending=_ending)
def test_every_frame_the_emulator_sends_validates_as_the_sdks_types(
    emu: CMAEmulator, steps: list[dict[str, Any]], ending: str
) -> None:
    base = emu.base_url
    agent = httpx.post(f"{base}/v1/agents", json={"name": "a", "model": "claude-sonnet-4-6"}, headers=HEADERS)
    env = httpx.post(
        f"{base}/v1/environments", json={"name": "e", "config": {"type": "cloud"}}, headers=HEADERS
    )
    body = {"agent": agent.json()["id"], "environment_id": env.json()["id"]}
    sid = httpx.post(f"{base}/v1/sessions", json=body, headers=HEADERS).json()["id"]
    emu.script_session(sid, [_script(steps, ending)])
    frames: list[dict[str, Any]] = []
    ready, done = threading.Event(), threading.Event()
    query = "event_deltas[]=agent.message&event_deltas[]=agent.thinking"
    reader = threading.Thread(
        target=_read, args=(f"{base}/v1/sessions/{sid}/events/stream?{query}", frames, ready, done)
    )
    reader.start()
    assert ready.wait(10)
    emu.wait_for_subscribers(sid)
    kickoff = {"events": [{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]}
    assert httpx.post(f"{base}/v1/sessions/{sid}/events", json=kickoff, headers=HEADERS).status_code == 200
    assert done.wait(10)
    reader.join(10)
    for frame in frames:
        SESSION_EVENT.validate_python(frame)
    threads = httpx.get(f"{base}/v1/sessions/{sid}/threads", headers=HEADERS).json()["data"]
    assert [t["id"] for t in threads][1:] == [T]
    for thread in threads:
        BetaManagedAgentsSessionThread.model_validate(thread)
    listed = httpx.get(f"{base}/v1/sessions/{sid}/threads/{T}/events", headers=HEADERS).json()["data"]
    for event in listed:
        THREAD_EVENT.validate_python(event)
    if ending == "thread_tool":
        cross = [f for f in frames if f["type"] == "agent.custom_tool_use"]
        assert [c.get("session_thread_id") for c in cross] == [T]
        own = [e for e in listed if e["type"] == "agent.custom_tool_use"]
        assert [e["id"] for e in own] == [c["id"] for c in cross] and "session_thread_id" not in own[0]
