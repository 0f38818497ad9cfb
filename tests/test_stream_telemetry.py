"""Stream lifecycle telemetry (M-4, C-48): ``rma.stream.connected`` / ``.done`` / ``.error``
beside ``rma.stream.event``, with the caller's metadata merged (M-8), and bridged to
OpenTelemetry as span events (issue #12 item 14)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import trio
from opentelemetry.trace import SpanKind

from rma_shell import open_session, otel, run
from rma_shell.telemetry import Telemetry
from rma_shell.testing import CMAEmulator, drop_stream_after, text_turn, tool_turn
from rma_shell.testing.scripted import CLOSE, DROP, ScriptedProvider
from tests.helpers import Recorder, idle, text
from tests.test_otel import ANT_KEY, OTel, _cma, attrs_of

LIFECYCLE = ["rma.stream.connected", "rma.stream.done", "rma.stream.error"]


def recording() -> tuple[Telemetry, list[tuple[str, dict[str, Any]]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    telemetry = Telemetry()
    telemetry.attach("t", LIFECYCLE, lambda n, m, md: seen.append((n, dict(md))))
    return telemetry, seen


async def test_M4_a_clean_close_is_done_then_a_new_connection(autojump_clock: trio.abc.Clock) -> None:
    provider = ScriptedProvider([[text("a", id="m1"), CLOSE]], streaming=True, remote_idle=False)
    telemetry, seen = recording()

    async def the_host_finishes_later() -> None:
        await anyio.sleep(5)
        provider.emit(idle("end_turn"))

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(the_host_finishes_later)
        outcome = await run(provider, handler=Recorder(), prompt="go", telemetry=telemetry)
    assert outcome.unwrap().text == "a"
    assert [(n, md["gen"]) for n, md in seen] == [
        ("rma.stream.connected", 0),
        ("rma.stream.done", 0),
        ("rma.stream.connected", 1),
    ]
    assert all(md["session_id"] == "sess_scripted" for _, md in seen)


async def test_M4_M8_a_live_drop_is_an_error_with_its_reason_and_the_callers_metadata(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = ScriptedProvider([[DROP]], streaming=True)
    telemetry, seen = recording()
    async with open_session(
        provider,
        handler=Recorder(),
        prompt="go",
        telemetry=telemetry,
        metadata={"tenant": "t1", "session_id": "spoofed", "gen": "spoofed"},
    ):
        await anyio.sleep(1)
    connected, error, again = seen[:3]
    assert (connected[0], error[0], again[0]) == (
        "rma.stream.connected",
        "rma.stream.error",
        "rma.stream.connected",
    )
    assert error[1]["reason"] == "stream_dropped"
    # Library keys win over the caller's (M-8); the caller's own keys ride along.
    assert all(md["tenant"] == "t1" and md["session_id"] == "sess_scripted" for _, md in seen)
    assert [md["gen"] for _, md in seen[:3]] == [0, 0, 1]


@pytest.fixture
def ot() -> Iterator[OTel]:
    o = OTel()
    yield o
    otel.uninstrument(o.handle)


async def test_M4_the_lifecycle_is_bridged_to_opentelemetry_as_span_events(ot: OTel) -> None:
    script = [tool_turn(("lookup", {"id": "c9"})), text_turn("Ada.")]
    with CMAEmulator(script, api_key=ANT_KEY, faults=[drop_stream_after(2)]) as emu:
        provider = _cma(emu, ot.telemetry)
        try:
            outcome = await run(
                provider, handler=lambda n, i, c: "found", prompt="who?", timeout=20, telemetry=ot.telemetry
            )
        finally:
            await provider.close()
    assert outcome.unwrap().text == "Ada."
    events = [
        (e.name, dict(e.attributes or {}))
        for span in ot.spans()
        for e in span.events
        if e.name.startswith("rma.stream.")
    ]
    names = [n for n, _ in events]
    assert names[:3] == ["rma.stream.connected", "rma.stream.error", "rma.stream.connected"]
    assert events[1][1] == {"rma.stream.generation": 0, "error.type": "stream_dropped"}
    assert events[2][1] == {"rma.stream.generation": 1}
    assert "rma.stream.event" not in names  # per-event telemetry is not bridged
    [request] = [s for s in ot.spans() if s.kind is SpanKind.INTERNAL and s.name.startswith("invoke_agent")]
    assert attrs_of(request)["gen_ai.conversation.id"] == outcome.unwrap().session_id
    # The first connect and the loss precede any turn's end: they sit on the turn in flight
    # or the request span, never on a span of another session.
    carriers = {
        span.context.span_id for span in ot.spans() for e in span.events if e.name.startswith("rma.stream.")
    }
    ours = {
        s.context.span_id
        for s in ot.spans()
        if attrs_of(s).get("gen_ai.conversation.id") == attrs_of(request)["gen_ai.conversation.id"]
    }
    assert carriers <= ours
