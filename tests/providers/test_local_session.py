"""The Local provider through the public API: run(), reattach, record/replay, cancellation (L-27…L-29,
S-56, S-81 over HTTP)."""

from __future__ import annotations

import io
import json
from typing import Any

import anyio
import httpx
from returns.result import Success

from rma.codec_json import dumps
from rma.errors import Timeout
from rma.provider import codec_for
from rma.replay import replay_lines
from rma.vocabulary import Terminal
from rma_shell import run
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.telemetry import Telemetry
from rma_shell.testing import OpenAIEmulator, delay

KEY = "sk-test-local-9f8e7d"
WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
CALL = {"tool_calls": [{"id": "call_w", "name": "get_weather", "arguments": {"city": "SF"}}]}


class Weather:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls.append(input)
        return f"sunny in {input.get('city')}"


def local(emu: OpenAIEmulator, **kw: Any) -> Local:
    kw.setdefault("model", "m")
    kw.setdefault("api_key", KEY)
    kw.setdefault("_seams", Seams(rand=lambda: 0.0))
    return Local(base_url=emu.base_url, tools=[WEATHER], system_prompt="be brief", **kw)


async def test_L29_L27_a_full_run_through_local_over_http() -> None:
    with OpenAIEmulator([CALL, {"content": "Sunny in SF."}], api_key=KEY) as emu:
        handler = Weather()
        r = (await run(local(emu), handler=handler, prompt="weather?")).unwrap()
    assert r.terminal is Terminal.END_TURN and r.text == "Sunny in SF." and r.turns == 2
    assert r.session_id is not None and r.session_id.startswith("local_")
    assert [u.name for u in r.custom_tool_uses] == ["get_weather"] and handler.calls == [{"city": "SF"}]
    assert sum(1 for e in r.events if e.get("type") == "local.model_response") == 2
    assert r.stop_reason == "stop"  # S-63: the finish_reason, unflattened
    assert r.transcript is not None
    assert [m["role"] for m in r.transcript] == ["system", "user", "assistant", "tool", "assistant"]
    assert emu.requests[1].body["messages"] == list(r.transcript[:-1])  # L-27: verbatim history


async def test_L28_reattach_with_the_previous_transcript_and_a_new_prompt() -> None:
    with OpenAIEmulator([{"content": "first"}, {"content": "second"}], api_key=KEY) as emu:
        first = (await run(local(emu), handler=Weather(), prompt="one")).unwrap()
        second = (await run(local(emu), handler=Weather(), prompt="two", history=first.transcript)).unwrap()
    assert second.resumed and not first.resumed
    assert first.transcript is not None and second.transcript is not None
    assert second.transcript[: len(first.transcript)] == first.transcript
    assert emu.requests[1].body["messages"][-1] == {"role": "user", "content": "two"}


async def test_S56_Better_an_all_duplicates_turn_drives_the_next_model_call() -> None:
    with OpenAIEmulator([CALL, CALL, {"content": "done"}], api_key=KEY) as emu:
        handler = Weather()
        r = (await run(local(emu), handler=handler, prompt="weather?")).unwrap()
    assert r.text == "done" and r.turns == 3
    assert len(handler.calls) == 1  # the duplicate was answered by Local, not re-run
    assert any(e.get("type") == "local.duplicate_tool_call" for e in r.events)


async def test_per_run_model_config_carries_a_gateway_lane_url_model_and_key() -> None:
    with OpenAIEmulator([{"content": "hi"}], api_key="sk-granted") as emu:
        provider = Local(base_url="http://127.0.0.1:9/v1", model="default-model", api_key="sk-wrong")
        lane = {
            "base_url": emu.base_url,
            "api_key": "sk-granted",
            "model": "lane-model",
            "metadata": {"grant": "g1"},
        }
        seen: list[dict[str, Any]] = []
        t = Telemetry()
        t.attach("x", "rma.session.terminal", lambda n, m, md: seen.append(dict(md)))
        r = (await run(provider, handler=Weather(), prompt="x", model_config=lane, telemetry=t)).unwrap()
    assert r.text == "hi"
    assert emu.requests[0].headers["authorization"] == "Bearer sk-granted"
    assert emu.requests[0].body["model"] == "lane-model"
    assert seen[0]["grant"] == "g1"  # S-16: model_config metadata reaches telemetry


async def test_request_telemetry_spans_every_http_attempt_without_the_key() -> None:
    from rma_shell.testing import status

    events: list[tuple[str, dict[str, Any]]] = []
    t = Telemetry()
    t.attach("x", "rma.request.*", lambda n, m, md: events.append((n, dict(md))))
    with OpenAIEmulator([{"content": "ok"}], api_key=KEY, faults={0: status(500)}) as emu:

        async def no_sleep(_: float) -> None:
            await anyio.lowlevel.checkpoint()

        await run(
            local(
                emu,
                telemetry=t,
                _seams=Seams(sleep=no_sleep, rand=lambda: 0.0),
            ),
            handler=Weather(),
            prompt="x",
        )
    names = [n for n, _ in events]
    assert names == ["rma.request.start", "rma.request.stop", "rma.request.start", "rma.request.stop"]
    assert [md.get("status") for n, md in events if n.endswith("stop")] == [500, 200]
    assert KEY not in json.dumps([md for _, md in events], default=str)


async def test_S81_timeout_cancels_the_in_flight_http_request_and_closes_the_connection() -> None:
    client = httpx.AsyncClient()
    with OpenAIEmulator([{"content": "too late"}], api_key=KEY, faults={0: delay(30)}) as emu:
        with anyio.fail_after(10):
            outcome = await run(local(emu, http_client=client), handler=Weather(), prompt="x", timeout=0.5)
        assert isinstance(outcome.failure(), Timeout)
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert all(not c.is_available() or c.is_closed() for c in pool.connections)
        assert all(c.is_idle() or c.is_closed() for c in pool.connections)
    await client.aclose()


async def test_a_recorded_local_run_replays_to_the_identical_result() -> None:
    log = io.StringIO()
    with OpenAIEmulator([CALL, {"content": "Sunny."}], api_key=KEY) as emu:
        outcome = await run(local(emu), handler=Weather(), prompt="weather?", record=log)
    assert isinstance(outcome, Success)
    replayed = replay_lines(log.getvalue().splitlines(), codec_for).unwrap()
    assert [dumps(r) for r in replayed.results] == [dumps(outcome)]
