"""Claude Managed Agents end to end: run()/open_session() against the loopback emulator (C-, R-, S-72…)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from returns.result import Success

from rma.errors import AuthenticationError, BudgetNotConfirmed, InvalidOpts, ProviderError
from rma.vocabulary import Budget, Outcome, Terminal
from rma_shell import open_session, run
from rma_shell.providers.claude.provider import OUTPUTS_DIR, ClaudeManagedAgents, output_path
from rma_shell.seams import Seams
from rma_shell.testing import (
    CMAEmulator,
    cma,
    drop_stream_after,
    error_frame,
    requires_action_from_earlier_batch,
    status_once,
    terminal_while_disconnected,
    text_turn,
    tool_turn,
)
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-5c1f"


class Tools:
    def __init__(self, allow: bool | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.allow = allow
        self.asked: list[str] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls.append((name, input))
        return f"{name} done"

    def confirm_tool_use(self, name: str, input: dict[str, Any], ctx: object) -> object:
        self.asked.append(name)
        return self.allow


def setup(emu: CMAEmulator, **kw: Any) -> ClaudeManagedAgents:
    emu_ids = emu_agent_and_environment(emu)
    return ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, max_retries=2, **emu_ids, **kw)


def emu_agent_and_environment(emu: CMAEmulator) -> dict[str, str]:
    return cma_agent_and_environment(emu, KEY)


@pytest.fixture
async def provider_closer() -> AsyncIterator[list[ClaudeManagedAgents]]:
    made: list[ClaudeManagedAgents] = []
    yield made
    for p in made:
        await p.close()


async def test_C_a_full_tool_loop_over_sse_and_what_reaches_the_wire(provider_closer: list[Any]) -> None:
    script = [
        tool_turn(("lookup", {"id": "c9"}), text="checking"),
        text_turn("Ada is gold.", usage={"input_tokens": 7}),
    ]
    with CMAEmulator(script, api_key=KEY) as emu:
        provider = setup(emu)
        provider_closer.append(provider)
        tools = Tools()
        outcome = await run(provider, handler=tools, prompt="Who is c9?", timeout=20)
        r = outcome.unwrap()
        posts = [q for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
    assert r.terminal is Terminal.END_TURN and r.text == "Ada is gold." and r.turns == 2
    assert r.stop_reason == {"type": "end_turn"}
    assert tools.calls == [("lookup", {"id": "c9"})]
    assert r.usage.input_tokens >= 7
    kickoff, resume = posts[0].body, posts[1].body
    assert kickoff == {
        "events": [{"type": "user.message", "content": [{"type": "text", "text": "Who is c9?"}]}]
    }
    [result] = resume["events"]
    assert (
        result["type"] == "user.custom_tool_result"
        and result["custom_tool_use_id"] == r.custom_tool_uses[0].id
    )
    assert result["content"] == [{"type": "text", "text": "lookup done"}] and result["is_error"] is False
    headers = posts[0].headers
    assert headers["anthropic-beta"] == "managed-agents-2026-04-01"
    assert headers["anthropic-version"] == "2026-10-21"
    assert headers["authorization"] == f"Bearer {KEY}"
    stream = next(q for q in emu.requests if q.path.split("?")[0].endswith("/events/stream"))
    assert stream.headers["accept"] == "text/event-stream"


async def test_K17_C_bad_key_is_an_authentication_error_and_the_key_never_shows(
    provider_closer: list[Any],
) -> None:
    with CMAEmulator([text_turn("x")], api_key=KEY) as emu:
        ids = emu_agent_and_environment(emu)
        provider = ClaudeManagedAgents(api_key="sk-ant-wrong-777", base_url=emu.base_url, env={}, **ids)
        provider_closer.append(provider)
        outcome = await run(provider, handler=Tools(), prompt="x")
    err = outcome.failure()
    assert isinstance(err, AuthenticationError)
    assert "sk-ant-wrong-777" not in err.message and "sk-ant-wrong-777" not in repr(provider)


async def test_missing_agent_or_credentials_are_named_errors() -> None:
    outcome = await run(ClaudeManagedAgents(env={}), handler=Tools(), prompt="x")
    assert isinstance(outcome.failure(), InvalidOpts) and outcome.failure().option == "auth"
    outcome = await run(ClaudeManagedAgents(api_key=KEY, env={}), handler=Tools(), prompt="x")
    assert outcome.failure().option == "agent_id"


async def test_S72_S73_budget_is_sent_at_create_and_confirmed_before_the_prompt(
    provider_closer: list[Any],
) -> None:
    with CMAEmulator([text_turn("capped")], api_key=KEY) as emu:
        provider = setup(emu)
        provider_closer.append(provider)
        r = (await run(provider, handler=Tools(), prompt="go", budget=Budget("25"))).unwrap()
        create = next(q for q in emu.requests if q.method == "POST" and q.path == "/v1/sessions")
        first_event_post = next(i for i, q in enumerate(emu.requests) if q.path.endswith("/events"))
        create_index = emu.requests.index(create)
    assert r.text == "capped"
    assert create.body["budget"] == {"type": "limit", "max_list_cost": {"amount": "25", "currency": "USD"}}
    assert create_index < first_event_post


async def test_S73_an_unconfirmed_budget_never_prompts_and_the_session_is_removed() -> None:
    with CMAEmulator([text_turn("x")], api_key=KEY) as emu:
        provider = setup(emu)
        client = provider.client().unwrap()
        real_create = client.create_session

        async def create_without_budget(body: Any) -> Any:
            created = await real_create({k: v for k, v in body.items() if k != "budget"})
            return created

        client.create_session = create_without_budget  # type: ignore[method-assign]
        outcome = await run(provider, handler=Tools(), prompt="go", budget=Budget("25"))
        await provider.close()
        deleted = [q for q in emu.requests if q.method == "DELETE" and q.path.startswith("/v1/sessions/")]
        posted = [q for q in emu.requests if q.path.endswith("/events") and q.method == "POST"]
    assert isinstance(outcome.failure(), BudgetNotConfirmed)
    assert deleted and not posted


async def test_C_429_once_on_create_is_retried_and_529_on_events_too(provider_closer: list[Any]) -> None:
    faults = [
        status_once(429, retry_after=0, method="POST", path=r"^/v1/sessions$"),
        status_once(529, method="POST", path=r"/events$"),
    ]
    with CMAEmulator([text_turn("ok")], api_key=KEY, faults=faults) as emu:
        provider = setup(
            emu,
            _seams=Seams(rand=lambda: 0.0),
        )
        provider_closer.append(provider)
        r = (await run(provider, handler=Tools(), prompt="go", timeout=30)).unwrap()
    assert r.text == "ok"


async def test_R14_C_error_frame_in_a_sync_run_is_a_typed_error(provider_closer: list[Any]) -> None:
    with CMAEmulator([text_turn("never")], api_key=KEY, faults=[error_frame(0)]) as emu:
        provider = setup(emu)
        provider_closer.append(provider)
        outcome = await run(provider, handler=Tools(), prompt="go", timeout=20)
    err = outcome.failure()
    assert isinstance(err, ProviderError) and err.payload["error"]["type"] == "overloaded_error"


async def test_S52_requires_action_whose_tool_uses_arrived_in_an_earlier_batch(
    provider_closer: list[Any],
) -> None:
    script = [tool_turn(("fetch", {"n": 1})), text_turn("done")]
    with CMAEmulator(script, api_key=KEY, faults=[requires_action_from_earlier_batch()]) as emu:
        provider = setup(emu)
        provider_closer.append(provider)
        tools = Tools()
        r = (await run(provider, handler=tools, prompt="go", timeout=20)).unwrap()
    assert r.text == "done" and tools.calls == [("fetch", {"n": 1})]


async def test_R15_R18_live_drop_reconnects_and_a_terminal_while_disconnected_is_observed(
    provider_closer: list[Any],
) -> None:
    script = [tool_turn(("fetch", {"n": 1})), text_turn("after the drop")]
    faults = [drop_stream_after(3), terminal_while_disconnected()]
    with CMAEmulator(script, api_key=KEY, faults=faults) as emu:
        provider = setup(emu)
        provider_closer.append(provider)
        tools = Tools()
        async with open_session(provider, handler=tools, prompt="go") as session:
            with anyio.fail_after(20):
                r = (await session.next_result()).unwrap()
    assert r.text == "after the drop" and tools.calls == [("fetch", {"n": 1})]


async def test_R1_R6_resume_by_session_id_delivers_the_prompt(provider_closer: list[Any]) -> None:
    with CMAEmulator([text_turn("first"), text_turn("second")], api_key=KEY) as emu:
        provider = setup(emu)
        provider_closer.append(provider)
        first = (await run(provider, handler=Tools(), prompt="one")).unwrap()
        second = (await run(provider, handler=Tools(), prompt="two", session_id=first.session_id)).unwrap()
    assert second.resumed and second.session_id == first.session_id and second.text == "second"


async def test_C_confirmation_gated_calls_reach_the_handler_and_default_to_deny(
    provider_closer: list[Any],
) -> None:
    gated = [
        cma.status_running(),
        cma.agent_tool_use("bash", {"command": "ls"}, evaluated_permission="ask"),
        cma.idle_requires_action(),
    ]
    for allow, expected in ((True, "allow"), (None, "deny")):
        with CMAEmulator([gated, text_turn("fine")], api_key=KEY) as emu:
            provider = setup(emu)
            provider_closer.append(provider)
            handler: Any = Tools(allow=allow) if allow else (lambda name, input, ctx: "unused")
            r = (await run(provider, handler=handler, prompt="go", timeout=20)).unwrap()
            posts = [q.body for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
        assert r.text == "fine"
        [confirmation] = posts[1]["events"]
        assert confirmation["type"] == "user.tool_confirmation" and confirmation["result"] == expected
        if expected == "deny":
            assert "confirm_tool_use" in confirmation["deny_message"]


async def test_S57_outcome_kickoff_is_define_outcome(provider_closer: list[Any]) -> None:
    with CMAEmulator([text_turn("graded")], api_key=KEY) as emu:
        provider = setup(emu)
        provider_closer.append(provider)
        spec = Outcome(description="a report", rubric="- totals")
        r = (await run(provider, handler=Tools(), prompt="ignored", outcome=spec)).unwrap()
        kickoff = next(q.body for q in emu.requests if q.method == "POST" and q.path.endswith("/events"))
    [event] = kickoff["events"]
    assert event["type"] == "user.define_outcome" and event["description"] == "a report"
    assert r.text == "graded"


async def test_S67_send_event_on_a_live_cma_session(provider_closer: list[Any]) -> None:
    with CMAEmulator([text_turn("hi"), text_turn("interrupted")], api_key=KEY) as emu:
        provider = setup(emu)
        provider_closer.append(provider)
        async with open_session(provider, handler=Tools(), prompt="go") as session:
            assert (await session.next_result()).unwrap().text == "hi"
            assert await session.send_event({"type": "user.interrupt"}) == Success(None)
        posts = [q.body for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
    assert posts[-1] == {"events": [{"type": "user.interrupt"}]}


def test_A7_outputs_directory_constant_and_helper() -> None:
    assert OUTPUTS_DIR == "/mnt/session/outputs/"
    assert output_path("report.md") == "/mnt/session/outputs/report.md"
    with pytest.raises(ValueError):
        output_path("../etc/passwd")
