"""The rest of the Claude session surface (issue #25): a fresh session's ``resources`` (files,
repositories, memory stores), ``vault_ids`` and ``initial_events``; every idle stop reason and
``session.error`` kind read as a typed ``HostStop`` / ``HostSessionError``; an event type this
version does not know passes through raw and never crashes a session. Through ``run`` with the
CMA emulator, on both backends; the SDK's types validate what rma sends."""

from __future__ import annotations

from typing import Any

import anyio
import pydantic
import pytest
from anthropic.types.beta.session_create_params import SessionCreateParams

from rma.errors import HostSessionError, SessionErrorKind
from rma.live import LiveUpdate
from rma.providers.claude import StopKind, host_stop, session_error
from rma.vocabulary import Terminal
from rma_shell import run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import CMAEmulator
from rma_shell.testing.claude import (
    agent_message,
    idle_budget_reached,
    idle_end_turn,
    idle_refusal,
    idle_retries_exhausted,
    model_request_end,
    status_running,
    status_terminated,
    text_turn,
)
from rma_shell.testing.claude import session_error as error_event
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-surface"


class Handler:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.updates: list[LiveUpdate] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "ok"

    async def handle_event(self, event: Any, ctx: Any) -> None:
        self.events.append(event)

    async def handle_update(self, update: LiveUpdate, ctx: object, info: object) -> None:
        self.updates.append(update)


async def run_on(emu: CMAEmulator, handler: Any = None, **options: Any) -> Any:
    p = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, **cma_agent_and_environment(emu, KEY))
    try:
        with anyio.fail_after(30):
            return await run(p, handler=handler or Handler(), **options)
    finally:
        await p.close()


def created(emu: CMAEmulator) -> dict[str, Any]:
    (body,) = [q.body for q in emu.requests if q.method == "POST" and q.path == "/v1/sessions"]
    return body


async def test_a_fresh_session_takes_resources_vaults_and_initial_events_and_the_run_follows_them() -> None:
    resources = [
        {"type": "github_repository", "url": "https://github.com/acme/app", "authorization_token": "ghp_x"},
        {"type": "memory_store", "memory_store_id": "memstore_01"},
    ]
    initial = [{"type": "user.message", "content": [{"type": "text", "text": "Audit the repo."}]}]
    with CMAEmulator([text_turn("Audited.")], api_key=KEY) as emu:
        outcome = await run_on(emu, resources=resources, vault_ids=["vlt_01"], initial_events=initial)
        body = created(emu)
        posts = [q for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
        session = emu.session(emu.session_ids[0])
    pydantic.TypeAdapter(SessionCreateParams).validate_python(body)  # the SDK takes what rma sends
    assert body["vault_ids"] == ["vlt_01"] and body["initial_events"] == initial
    assert [r["type"] for r in body["resources"]] == ["github_repository", "memory_store"]
    result = outcome.unwrap()
    assert result.text == "Audited." and result.terminal is Terminal.END_TURN
    assert posts == [], "the session started on its initial events: no kickoff was posted"
    assert session["vault_ids"] == ["vlt_01"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"vault_ids": "vlt_01"}, "vault_ids"),
        ({"vault_ids": ["vlt_01", ""]}, "vault_ids[1]"),
        ({"initial_events": [{"type": "user.interrupt"}]}, "initial_events[0].type"),
        ({"initial_events": {"type": "user.message"}}, "initial_events"),
        ({"session_id": "sesn_x", "vault_ids": ["vlt_01"]}, "vault_ids"),
        ({"session_id": "sesn_x", "initial_events": [{"type": "user.message"}]}, "initial_events"),
    ],
)
async def test_bad_session_options_are_typed_errors_naming_the_field_before_a_session_exists(
    options: dict[str, Any], field: str
) -> None:
    with CMAEmulator([], api_key=KEY) as emu:
        outcome = await run_on(emu, prompt="hi", **options)
        sessions = emu.session_ids
    error = outcome.failure()
    assert error.kind == "invalid_opts" and error.option == field
    assert sessions == []


def stop_turn(*events: dict[str, Any]) -> list[dict[str, Any]]:
    return [status_running(), agent_message("…"), model_request_end(), *events]


@pytest.mark.parametrize(
    ("ending", "kind", "error_kind"),
    [
        ((idle_end_turn(),), StopKind.END_TURN, None),
        ((idle_budget_reached(),), StopKind.BUDGET_REACHED, None),
        ((idle_refusal("cyber", "declined"),), StopKind.REFUSAL, None),
        (
            (
                error_event("Overloaded", error_type="model_overloaded_error", retry_status="exhausted"),
                idle_retries_exhausted(),
            ),
            StopKind.RETRIES_EXHAUSTED,
            SessionErrorKind.MODEL_OVERLOADED,
        ),
        (
            (
                error_event(
                    "auth failed",
                    error_type="mcp_authentication_failed_error",
                    retry_status="terminal",
                    mcp_server_name="docs",
                ),
                status_terminated(),
            ),
            StopKind.TERMINATED,
            SessionErrorKind.MCP_AUTHENTICATION_FAILED,
        ),
        (
            (
                error_event("?", error_type="brand_new_error", retry_status="exhausted"),
                idle_retries_exhausted(),
            ),
            StopKind.RETRIES_EXHAUSTED,
            SessionErrorKind.UNKNOWN,
        ),
    ],
)
async def test_every_stop_reason_and_session_error_kind_reads_as_a_typed_host_stop(
    ending: tuple[dict[str, Any], ...], kind: StopKind, error_kind: SessionErrorKind | None
) -> None:
    with CMAEmulator([stop_turn(*ending)], api_key=KEY) as emu:
        result = (await run_on(emu, prompt="go")).unwrap()
    stop = host_stop(result)
    assert stop.kind is kind
    assert result.terminal is (Terminal.END_TURN if kind is StopKind.END_TURN else Terminal.TERMINATED)
    if kind is StopKind.REFUSAL:
        assert stop.refusal is not None and (stop.refusal.category, stop.refusal.explanation) == (
            "cyber",
            "declined",
        )
    if error_kind is None:
        assert stop.error is None
    else:
        assert isinstance(stop.error, HostSessionError) and stop.error.error_kind == error_kind
        assert stop.error.retry_status in ("exhausted", "terminal")
        if error_kind is SessionErrorKind.MCP_AUTHENTICATION_FAILED:
            assert stop.error.mcp_server_name == "docs" and "auth failed" in str(stop.error)
        if error_kind is SessionErrorKind.UNKNOWN:
            assert stop.error.error_type == "brand_new_error"  # the raw type is kept


def test_every_session_error_kind_the_sdk_defines_has_a_typed_value() -> None:
    import typing

    from anthropic.types.beta.sessions.beta_managed_agents_session_error_event import Error

    (union, *_) = typing.get_args(Error)
    wire = {typing.get_args(m.model_fields["type"].annotation)[0] for m in typing.get_args(union)}
    assert wire == {k.value for k in SessionErrorKind}
    for value in wire:
        typed = session_error({"type": "session.error", "error": {"type": value, "message": "m"}})
        assert typed is not None and typed.error_kind == value


async def test_an_unknown_event_type_passes_through_raw_and_the_session_goes_on() -> None:
    future = {"type": "agent.hologram", "payload": {"dims": 3}}
    odd_preview = {"type": "event_delta", "event_id": "sevt_x", "delta": {"type": "hologram_delta", "z": 1}}
    turn = [
        status_running(),
        future,
        odd_preview,
        agent_message("Still here."),
        model_request_end(),
        idle_end_turn(),
    ]
    with CMAEmulator([turn], api_key=KEY) as emu:
        handler = Handler()
        result = (await run_on(emu, handler, prompt="go")).unwrap()
    assert result.text == "Still here." and result.terminal is Terminal.END_TURN
    raw = next(e for e in handler.events if e.get("type") == "agent.hologram")
    assert raw["payload"] == {"dims": 3} and raw in result.events
    assert host_stop(result).kind is StopKind.END_TURN
