"""The loopback Claude Managed Agents emulator speaks the API's wire: the official SDK is the oracle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import anyio
import httpx
import httpx2
import pytest
from anthropic import beta_async_tool

from rma_shell.testing.claude import (
    BETA,
    CMAEmulator,
    SessionView,
    agent_message,
    agent_tool_result,
    agent_tool_use,
    custom_tool_use,
    drop_stream_after,
    error_frame,
    idle_end_turn,
    idle_requires_action,
    model_request_end,
    model_request_start,
    outcome_evaluation_end,
    outcome_evaluation_ongoing,
    outcome_evaluation_start,
    requires_action_from_earlier_batch,
    session_error,
    status_once,
    status_running,
    status_terminated,
    terminal_while_disconnected,
    text_turn,
    tool_turn,
)

LOOKUP_TOOL: Any = {
    "type": "custom",
    "name": "lookup_customer",
    "description": "Fetch a customer row",
    "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
}


_open_clients: list[anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _open_clients:
        _open_clients.pop().close()


def client(emu: CMAEmulator, **kwargs: Any) -> anthropic.Anthropic:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("api_key", emu.api_key)
    kwargs.setdefault("timeout", 10.0)
    sdk = anthropic.Anthropic(base_url=emu.base_url, **kwargs)
    _open_clients.append(sdk)
    return sdk


def user_message(text: str) -> Any:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def new_session(sdk: anthropic.Anthropic, **session_kwargs: Any) -> str:
    agent = sdk.beta.agents.create(name="report-bot", model="claude-sonnet-4-6", tools=[LOOKUP_TOOL])
    env = sdk.beta.environments.create(name="report-bot_env")
    return sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, **session_kwargs).id


def read_until(stream: Iterator[Any], stop: str = "session.status_idle", *, count: int = 1) -> list[Any]:
    seen = []
    for event in stream:
        seen.append(event)
        if event.type == stop:
            count -= 1
            if count == 0:
                break
    return seen


# -- the main loop, as the SDK drives it ----------------------------------------------------


def test_sdk_create_stream_answer_tool_and_finish() -> None:
    script = [
        tool_turn(("lookup_customer", {"id": "c9"}), text="Looking it up."),
        text_turn(
            "Ada is gold.", usage={"input_tokens": 812, "output_tokens": 64, "cache_read_input_tokens": 512}
        ),
    ]
    budget: Any = {"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}}
    with CMAEmulator(script=script) as emu:
        sdk = client(emu)
        agent = sdk.beta.agents.create(
            name="report-bot", model="claude-sonnet-4-6", system="Be brief.", tools=[LOOKUP_TOOL]
        )
        assert agent.type == "agent"
        assert agent.version == 1
        assert agent.model.id == "claude-sonnet-4-6"
        assert agent.execution_identity.type == "service_account"
        env = sdk.beta.environments.create(name="report-bot_env")
        assert env.config.type == "cloud"
        assert env.config.networking.type == "unrestricted"
        session = sdk.beta.sessions.create(
            agent=agent.id,
            environment_id=env.id,
            budget=budget,
            metadata={"run": "nightly"},
            title="nightly report",
        )
        assert session.status == "idle"
        assert session.budget is not None
        assert session.budget.model_dump() == budget
        assert session.agent.version == 1
        assert session.agent.tools[0].model_dump()["name"] == "lookup_customer"
        assert session.metadata == {"run": "nightly"}

        with sdk.beta.sessions.events.stream(session.id) as stream:
            sent = sdk.beta.sessions.events.send(session.id, events=[user_message("Who is c9?")])
            assert sent.data is not None
            echo = sent.data[0]
            assert echo.type == "user.message"
            assert echo.id.startswith("sevt_")
            first = read_until(stream)
            assert [e.type for e in first] == [
                "user.message",
                "session.status_running",
                "span.model_request_start",
                "agent.message",
                "agent.custom_tool_use",
                "span.model_request_end",
                "session.status_idle",
            ]
            assert first[0].id == echo.id
            call = first[4]
            assert call.type == "agent.custom_tool_use"
            assert (call.name, call.input) == ("lookup_customer", {"id": "c9"})
            idle = first[-1]
            assert idle.type == "session.status_idle"
            assert idle.stop_reason.type == "requires_action"
            assert idle.stop_reason.event_ids == [call.id]
            end = first[5]
            assert end.type == "span.model_request_end"
            assert end.model_request_start_id == first[2].id
            assert sdk.beta.sessions.retrieve(session.id).status == "idle"

            result: Any = {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": call.id,
                "content": [{"type": "text", "text": '{"name": "Ada", "tier": "gold"}'}],
                "is_error": False,
            }
            sdk.beta.sessions.events.send(session.id, events=[result])
            second = read_until(stream)
        assert [e.type for e in second] == [
            "user.custom_tool_result",
            "session.status_running",
            "span.model_request_start",
            "agent.message",
            "span.model_request_end",
            "session.status_idle",
        ]
        assert second[0].custom_tool_use_id == call.id
        assert second[-1].stop_reason.type == "end_turn"
        assert second[3].content[0].text == "Ada is gold."
        assert second[4].model_usage.cache_read_input_tokens == 512
        final = sdk.beta.sessions.retrieve(session.id)
        assert final.usage.input_tokens == 10 + 812
        assert final.usage.output_tokens == 5 + 64
        assert final.usage.cache_read_input_tokens == 512
        # Every call carried the SDK's headers; the stream went to the documented path.
        for request in emu.requests:
            assert request.headers["anthropic-beta"] == BETA
            assert request.headers["anthropic-version"] == "2026-10-21"
            assert request.headers["authorization"] == f"Bearer {emu.api_key}"
        stream_requests = [r for r in emu.requests if r.path.endswith("/events/stream")]
        assert [r.path for r in stream_requests] == [f"/v1/sessions/{session.id}/events/stream"]
        posts = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
        assert posts[1].body == {"events": [result]}


def test_stream_carries_only_events_emitted_after_subscription() -> None:
    with CMAEmulator(script=[text_turn("one"), text_turn("two")]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("first")])
        assert len(emu.history(session_id)) == 6
        with sdk.beta.sessions.events.stream(session_id) as stream:
            sdk.beta.sessions.events.send(session_id, events=[user_message("second")])
            events = read_until(stream)
    assert events[0].type == "user.message"
    assert events[0].content[0].text == "second"
    assert [e.content[0].text for e in events if e.type == "agent.message"] == ["two"]


def test_history_pagination_order_and_filters() -> None:
    with CMAEmulator(script=[text_turn("one"), text_turn("two")]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        for text in ("a", "b"):
            sdk.beta.sessions.events.send(session_id, events=[user_message(text)])
        stored = emu.history(session_id)
        assert len(stored) == 12
        first = sdk.beta.sessions.events.list(session_id, limit=5)
        assert len(first.data) == 5
        assert first.next_page is not None
        assert first.next_page.startswith("page_")
        # The SDK follows next_page on its own (page=<cursor>, same query).
        everything = list(sdk.beta.sessions.events.list(session_id, limit=5))
        assert [e.id for e in everything] == [e["id"] for e in stored]
        newest_first = list(sdk.beta.sessions.events.list(session_id, limit=5, order="desc"))
        assert [e.id for e in newest_first] == [e["id"] for e in reversed(stored)]
        idles = sdk.beta.sessions.events.list(session_id, types=["session.status_idle", "agent.message"])
        assert [e.type for e in idles.data] == ["agent.message", "session.status_idle"] * 2
        since = stored[6]["processed_at"]
        later = list(sdk.beta.sessions.events.list(session_id, created_at_gte=since))
        assert [e.id for e in later] == [e["id"] for e in stored[6:]]
        after = list(sdk.beta.sessions.events.list(session_id, created_at_gt=since))
        assert [e.id for e in after] == [e["id"] for e in stored[7:]]
        page_requests = [r.path for r in emu.requests if "/events?" in r.path]
        assert any("types%5B%5D=session.status_idle" in p for p in page_requests)
        assert any("created_at%5Bgte%5D=" in p for p in page_requests)
        with pytest.raises(anthropic.BadRequestError):
            sdk.beta.sessions.events.list(session_id, page="page_bogus")
        with pytest.raises(anthropic.BadRequestError):
            sdk.beta.sessions.events.list(session_id, limit=1001)


# -- auth and retries -------------------------------------------------------------------------


def test_bad_or_missing_key_is_401_with_the_error_envelope() -> None:
    with CMAEmulator(bearer_tokens={"oauth-token-1"}) as emu:
        with pytest.raises(anthropic.AuthenticationError) as info:
            client(emu, api_key="sk-wrong").beta.agents.list()
        assert info.value.status_code == 401
        body = info.value.body
        assert isinstance(body, dict)
        assert body["type"] == "error"
        assert body["error"]["type"] == "authentication_error"
        assert body["request_id"].startswith("req_")
        assert info.value.response.headers["request-id"] == body["request_id"]
        base = {"anthropic-version": "2023-06-01", "anthropic-beta": BETA}
        missing = httpx.get(f"{emu.base_url}/v1/agents", headers=base)
        assert missing.status_code == 401
        assert missing.json()["error"]["type"] == "authentication_error"
        # The REF's header style, and a bearer token from the allow-list, both pass.
        assert httpx.get(
            f"{emu.base_url}/v1/agents", headers={**base, "x-api-key": emu.api_key or ""}
        ).is_success
        token = client(emu, api_key=None, auth_token="oauth-token-1")
        assert token.beta.agents.list().data == []
        no_beta = httpx.get(f"{emu.base_url}/v1/agents", headers={"x-api-key": emu.api_key or ""})
        assert no_beta.status_code == 400


def test_429_once_is_retried_by_the_sdk_with_retry_after() -> None:
    with CMAEmulator() as emu:
        emu.inject(status_once(429, retry_after=0.01, method="POST", path="^/v1/agents$"))
        agent = client(emu, max_retries=2).beta.agents.create(name="a", model="claude-haiku-4-5")
        assert agent.name == "a"
        creates = [r for r in emu.requests if r.path == "/v1/agents"]
        assert len(creates) == 2
        assert [r.headers["x-stainless-retry-count"] for r in creates] == ["0", "1"]


def test_529_once_is_retried_and_is_overloaded_without_retries() -> None:
    with CMAEmulator() as emu:
        emu.inject(status_once(529, retry_after_ms=10))
        assert client(emu, max_retries=1).beta.agents.list().data == []
        emu.inject(status_once(529))
        with pytest.raises(anthropic.OverloadedError) as info:
            client(emu).beta.agents.list()
        body = info.value.body
        assert isinstance(body, dict)
        assert body["error"]["type"] == "overloaded_error"


# -- files ------------------------------------------------------------------------------------


def test_files_upload_list_download_delete() -> None:
    with CMAEmulator(script=[text_turn("done")]) as emu:
        sdk = client(emu)
        uploaded = sdk.beta.files.upload(file=("notes.csv", b"a,b\n1,2\n", "text/csv"))
        assert uploaded.type == "file"
        assert (uploaded.filename, uploaded.mime_type, uploaded.size_bytes) == ("notes.csv", "text/csv", 8)
        assert uploaded.downloadable is False
        assert "anthropic-beta" not in emu.requests[-1].headers
        assert emu.requests[-1].headers["content-type"].startswith("multipart/form-data; boundary=")
        assert sdk.beta.files.retrieve_metadata(uploaded.id).id == uploaded.id
        # Uploads are not downloadable; the SDK maps the error code to its own class.
        with pytest.raises(anthropic.BadRequestError) as info:
            sdk.beta.files.download(uploaded.id)
        assert type(info.value).__name__ == "FileNotDownloadableError"

        session_id = new_session(sdk, resources=[{"type": "file", "file_id": uploaded.id}])
        session = sdk.beta.sessions.retrieve(session_id)
        assert session.resources[0].type == "file"
        assert session.resources[0].mount_path == f"/mnt/session/uploads/{uploaded.id}"
        output = emu.add_output_file(session_id, "report.md", "# Report\n")
        scoped = sdk.beta.files.list(scope_id=session_id)
        assert [f.id for f in scoped.data] == [output["id"]]
        assert scoped.data[0].scope is not None
        assert scoped.data[0].scope.id == session_id
        assert sdk.beta.files.download(output["id"]).read() == b"# Report\n"
        assert emu.requests[-1].headers["accept"] == "application/binary"
        assert {f.id for f in sdk.beta.files.list()} == {uploaded.id, output["id"]}
        assert [f.id for f in sdk.beta.files.list(limit=1)] == [output["id"], uploaded.id]
        deleted = sdk.beta.files.delete(uploaded.id)
        assert (deleted.id, deleted.type) == (uploaded.id, "file_deleted")
        with pytest.raises(anthropic.NotFoundError):
            sdk.beta.files.retrieve_metadata(uploaded.id)


# -- the SDK's own session tool runner --------------------------------------------------------


@beta_async_tool
async def lookup_customer(id: str) -> str:
    """Fetch a customer row.

    Args:
        id: The customer id.
    """
    return json.dumps({"id": id, "tier": "gold"})


async def _provision(sdk: anthropic.AsyncAnthropic) -> str:
    agent = await sdk.beta.agents.create(name="bot", model="claude-sonnet-4-6", tools=[LOOKUP_TOOL])
    env = await sdk.beta.environments.create(name="bot_env")
    return (await sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)).id


# The runner leaves its stream iterator to the GC when it stops (an SDK matter, not the wire).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_sdk_session_tool_runner_completes_a_scripted_tool_loop() -> None:
    script = [
        tool_turn(("lookup_customer", {"id": "c9"}), ("lookup_customer", {"id": "c10"})),
        [*text_turn("Both are gold."), status_terminated()],
    ]
    with CMAEmulator(script=script) as emu:
        sdk = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key, max_retries=0)
        async with sdk:
            session_id = await _provision(sdk)
            await sdk.beta.sessions.events.send(session_id, events=[user_message("Tiers of c9 and c10?")])
            with anyio.fail_after(20):
                calls = [
                    call
                    async for call in sdk.beta.sessions.events.tool_runner(
                        session_id, tools=[lookup_customer], max_idle=None
                    )
                ]
            history = emu.history(session_id)
    assert [(c.name, c.posted, c.is_error) for c in calls] == [("lookup_customer", True, False)] * 2
    assert [c.event.input for c in calls] == [{"id": "c9"}, {"id": "c10"}]
    idles = [e["stop_reason"] for e in history if e["type"] == "session.status_idle"]
    uses = [e["id"] for e in history if e["type"] == "agent.custom_tool_use"]
    # Answering one of two re-emits an idle listing the rest (the runner posts one result per call).
    assert idles == [
        {"type": "requires_action", "event_ids": uses},
        {"type": "requires_action", "event_ids": uses[1:]},
        {"type": "end_turn"},
    ]
    assert history[-1]["type"] == "session.status_terminated"
    results = [e for e in history if e["type"] == "user.custom_tool_result"]
    assert [r["custom_tool_use_id"] for r in results] == uses
    assert json.loads(results[0]["content"][0]["text"]) == {"id": "c9", "tier": "gold"}
    # The runner opens the stream before reading history (limit=1000), as the wire reference says.
    paths = [r.path for r in emu.requests if r.method == "GET"]
    assert paths[0].endswith("/events/stream")
    assert paths[1].endswith("/events?limit=1000")


# The runner leaves its stream iterator to the GC when it stops (an SDK matter, not the wire).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_sdk_tool_runner_recovers_from_a_dropped_stream() -> None:
    script = [tool_turn(("lookup_customer", {"id": "c9"})), text_turn("Gold.")]
    with CMAEmulator(script=script) as emu:
        sdk = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key, max_retries=0)
        async with sdk:
            session_id = await _provision(sdk)
            # The first stream dies after two events of the second turn; the rest lands in the
            # history only, and the runner's reconnect + history read finds the finished turn.
            emu.inject(drop_stream_after(2), session_id=session_id)
            await sdk.beta.sessions.events.send(session_id, events=[user_message("c9?")])
            with anyio.fail_after(20):
                calls = [
                    c
                    async for c in sdk.beta.sessions.events.tool_runner(
                        session_id, tools=[lookup_customer], max_idle=0.2
                    )
                ]
            history = emu.history(session_id)
    assert [c.posted for c in calls] == [True]
    assert history[-1]["stop_reason"] == {"type": "end_turn"}
    assert len([r for r in emu.requests if r.path.endswith("/events/stream")]) == 2


# -- input validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "needle"),
    [
        ([], "non-empty"),
        ([{"type": "user.shout", "content": []}], "unknown input event type"),
        ([{"type": "user.message", "content": []}], "non-empty"),
        ([{"type": "user.message", "content": [{"type": "text", "text": ""}]}], "non-empty"),
        ([{"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_nope"}], "no tool use"),
        ([{"type": "user.tool_result", "tool_use_id": "sevt_nope"}], "self_hosted"),
        (
            [{"type": "system.message", "content": [{"type": "text", "text": "x"}]}, user_message("hi")],
            "last event",
        ),
        ([{"type": "user.define_outcome", "description": "d", "rubric": {"type": "pdf"}}], "rubric.type"),
    ],
)
def test_invalid_input_events_are_rejected_with_400(events: list[Any], needle: str) -> None:
    with CMAEmulator(script=[text_turn("unused")]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        with pytest.raises(anthropic.BadRequestError) as info:
            sdk.beta.sessions.events.send(session_id, events=events)
        body = info.value.body
        assert isinstance(body, dict)
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        assert needle in body["error"]["message"]
        assert emu.history(session_id) == []


def test_a_tool_result_for_an_answered_tool_use_is_rejected() -> None:
    with CMAEmulator(script=[tool_turn(("lookup_customer", {"id": "c9"})), text_turn("ok")]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
        use = emu.wait_for_event(session_id, "agent.custom_tool_use")
        answer: Any = {"type": "user.custom_tool_result", "custom_tool_use_id": use["id"]}
        with pytest.raises(anthropic.BadRequestError, match="already answered"):
            sdk.beta.sessions.events.send(session_id, events=[answer, answer])
        sdk.beta.sessions.events.send(session_id, events=[answer])
        with pytest.raises(anthropic.BadRequestError, match="already answered"):
            sdk.beta.sessions.events.send(session_id, events=[answer])
        message = emu.history(session_id)[1]
        not_a_tool: Any = {"type": "user.custom_tool_result", "custom_tool_use_id": message["id"]}
        with pytest.raises(anthropic.BadRequestError, match="no tool use event"):
            sdk.beta.sessions.events.send(session_id, events=[not_a_tool])


def test_running_out_of_script_is_a_loud_400() -> None:
    with CMAEmulator(script=[]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        with pytest.raises(anthropic.BadRequestError) as info:
            sdk.beta.sessions.events.send(session_id, events=[user_message("hi")])
        body = info.value.body
        assert isinstance(body, dict)
        assert body["error"]["type"] == "emulator_script_exhausted"
        assert emu.history(session_id) == []


# -- agents, environments, sessions -----------------------------------------------------------


def test_agents_are_versioned_listed_and_archived() -> None:
    with CMAEmulator() as emu:
        sdk = client(emu)
        agent = sdk.beta.agents.create(name="bot", model="claude-sonnet-4-6", metadata={"a": "1"})
        same = sdk.beta.agents.update(agent.id, name="bot")
        assert same.version == 1
        updated = sdk.beta.agents.update(
            agent.id, version=1, system="New prompt", metadata={"a": None, "b": "2"}
        )
        assert updated.version == 2
        assert updated.system == "New prompt"
        assert updated.metadata == {"b": "2"}
        with pytest.raises(anthropic.ConflictError):
            sdk.beta.agents.update(agent.id, version=1, system="stale")
        assert sdk.beta.agents.retrieve(agent.id).version == 2
        assert sdk.beta.agents.retrieve(agent.id, version=1).system is None
        versions = list(sdk.beta.agents.versions.list(agent.id, limit=1))
        assert [v.version for v in versions] == [2, 1]
        # Sessions pin the latest version by id, or a given one.
        env = sdk.beta.environments.create(name="e")
        pinned = sdk.beta.sessions.create(
            agent={"type": "agent", "id": agent.id, "version": 1}, environment_id=env.id
        )
        assert pinned.agent.version == 1
        latest = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
        assert latest.agent.version == 2
        assert latest.agent.system == "New prompt"
        others = [sdk.beta.agents.create(name=f"bot{i}", model="claude-haiku-4-5") for i in range(3)]
        listed = list(sdk.beta.agents.list(limit=2))
        assert [a.id for a in listed] == [a.id for a in reversed([agent, *others])]
        archived = sdk.beta.agents.archive(others[0].id)
        assert archived.archived_at is not None
        assert others[0].id not in {a.id for a in sdk.beta.agents.list()}
        assert others[0].id in {a.id for a in sdk.beta.agents.list(include_archived=True)}
        with pytest.raises(anthropic.NotFoundError):
            sdk.beta.agents.retrieve("agent_missing")
        with pytest.raises(anthropic.BadRequestError):
            bad_tool: Any = {**LOOKUP_TOOL, "name": "bad name"}
            sdk.beta.agents.create(name="bad", model="m", tools=[bad_tool])


def test_environments_archive_and_delete_gate_sessions() -> None:
    with CMAEmulator() as emu:
        sdk = client(emu)
        agent = sdk.beta.agents.create(name="bot", model="claude-sonnet-4-6")
        limited = sdk.beta.environments.create(
            name="locked",
            config={"type": "cloud", "networking": {"type": "limited", "allowed_hosts": ["example.com"]}},
        )
        assert limited.config.type == "cloud"
        assert limited.config.networking.type == "limited"
        assert limited.config.networking.allow_package_managers is False
        assert limited.config.packages.pip == []
        env = sdk.beta.environments.create(name="e")
        assert [e.id for e in sdk.beta.environments.list()] == [env.id, limited.id]
        sdk.beta.environments.archive(limited.id)
        assert [e.id for e in sdk.beta.environments.list()] == [env.id]
        with pytest.raises(anthropic.BadRequestError) as archived:
            sdk.beta.sessions.create(agent=agent.id, environment_id=limited.id)
        assert type(archived.value).__name__ == "BetaEnvironmentArchivedError"
        deleted = sdk.beta.environments.delete(env.id)
        assert (deleted.id, deleted.type) == (env.id, "environment_deleted")
        with pytest.raises(anthropic.NotFoundError) as missing:
            sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
        assert type(missing.value).__name__ == "BetaEnvironmentNotFoundError"


def test_sessions_list_archive_and_delete() -> None:
    with CMAEmulator() as emu:
        sdk = client(emu)
        agent = sdk.beta.agents.create(name="bot", model="claude-sonnet-4-6")
        env = sdk.beta.environments.create(name="e")
        ids = [sdk.beta.sessions.create(agent=agent.id, environment_id=env.id).id for _ in range(3)]
        first = sdk.beta.sessions.list(limit=2)
        assert [s.id for s in first.data] == ids[:0:-1]
        assert first.prev_page is None
        assert first.next_page is not None
        second = sdk.beta.sessions.list(limit=2, page=first.next_page)
        assert [s.id for s in second.data] == ids[:1]
        assert second.prev_page is not None
        back = sdk.beta.sessions.list(limit=2, page=second.prev_page)
        assert [s.id for s in back.data] == ids[:0:-1]
        assert [s.id for s in sdk.beta.sessions.list(order="asc")] == ids
        sdk.beta.sessions.archive(ids[0])
        assert ids[0] not in {s.id for s in sdk.beta.sessions.list()}
        assert ids[0] in {s.id for s in sdk.beta.sessions.list(include_archived=True)}
        with sdk.beta.sessions.events.stream(ids[1]) as stream:
            deleted = sdk.beta.sessions.delete(ids[1])
            assert deleted.type == "session_deleted"
            assert [e.type for e in stream] == ["session.deleted"]
        with pytest.raises(anthropic.NotFoundError):
            sdk.beta.sessions.retrieve(ids[1])


def test_session_update_emits_session_updated() -> None:
    with CMAEmulator() as emu:
        sdk = client(emu)
        budget: Any = {"type": "limit", "max_list_cost": {"amount": "100", "currency": "USD"}}
        session_id = new_session(sdk, budget=budget)
        updated = sdk.beta.sessions.update(session_id, title="renamed", budget=None)
        assert updated.title == "renamed"
        assert updated.budget is None
        [event] = emu.history(session_id)
        assert event["type"] == "session.updated"
        assert event["title"] == "renamed"
        assert event["budget"] is None
        with pytest.raises(anthropic.BadRequestError):
            sdk.beta.sessions.update(session_id, budget=budget)


# -- scripted agent behaviour -----------------------------------------------------------------


def test_interrupt_idles_with_end_turn() -> None:
    with CMAEmulator() as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        emu.emit(session_id, status_running())
        assert sdk.beta.sessions.retrieve(session_id).status == "running"
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        history = emu.history(session_id)
    assert [e["type"] for e in history] == ["session.status_running", "user.interrupt", "session.status_idle"]
    assert history[-1]["stop_reason"] == {"type": "end_turn"}


def test_callable_turn_sees_the_session_and_its_inputs() -> None:
    seen: list[tuple[SessionView, list[Any]]] = []

    def echo(session: SessionView, inputs: list[Any]) -> list[Any]:
        seen.append((session, inputs))
        return text_turn("echo: " + inputs[0]["content"][0]["text"])

    with CMAEmulator(script=[echo]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("ping")])
        messages = sdk.beta.sessions.events.list(session_id, types=["agent.message"]).data
    [(view, inputs)] = seen
    assert view.id == session_id
    assert view.turn_index == 0
    assert [e["type"] for e in view.history] == ["user.message"]
    assert inputs[0]["id"] == view.history[0]["id"]
    assert messages[0].type == "agent.message"
    assert messages[0].content[0].model_dump()["text"] == "echo: ping"


def test_outcome_kickoff_and_evaluation_events() -> None:
    script = [
        [
            status_running(),
            agent_message("Wrote report.md"),
            outcome_evaluation_start(),
            outcome_evaluation_ongoing(),
            outcome_evaluation_end("satisfied", "All rubric items met."),
            idle_end_turn(),
        ]
    ]
    outcome: Any = {
        "type": "user.define_outcome",
        "description": "Write report.md",
        "rubric": {"type": "text", "content": "- has a totals table"},
        "max_iterations": 2,
    }
    with CMAEmulator(script=script) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sent = sdk.beta.sessions.events.send(session_id, events=[outcome])
        assert sent.data is not None
        echo = sent.data[0]
        assert echo.type == "user.define_outcome"
        assert echo.outcome_id.startswith("outc_")
        events = list(sdk.beta.sessions.events.list(session_id))
        session = sdk.beta.sessions.retrieve(session_id)
    start, ongoing, end = (e for e in events if e.type.startswith("span.outcome_evaluation"))
    assert start.type == "span.outcome_evaluation_start"
    assert ongoing.type == "span.outcome_evaluation_ongoing"
    assert end.type == "span.outcome_evaluation_end"
    assert (start.outcome_id, start.iteration) == (echo.outcome_id, 0)
    assert end.outcome_evaluation_start_id == start.id
    assert (end.result, end.explanation) == ("satisfied", "All rubric items met.")
    [evaluation] = session.outcome_evaluations
    assert (evaluation.outcome_id, evaluation.result) == (echo.outcome_id, "satisfied")
    assert evaluation.completed_at is not None


def test_initial_events_run_at_creation_into_the_history() -> None:
    with CMAEmulator(script=[text_turn("hello")]) as emu:
        sdk = client(emu)
        agent = sdk.beta.agents.create(name="bot", model="claude-sonnet-4-6")
        env = sdk.beta.environments.create(name="e")
        session = sdk.beta.sessions.create(
            agent=agent.id, environment_id=env.id, initial_events=[user_message("hi")]
        )
        assert session.status == "idle"
        types = [e["type"] for e in emu.history(session.id)]
    assert types[0] == "user.message"
    assert types[-1] == "session.status_idle"


def test_event_deltas_preview_the_message_on_request() -> None:
    with CMAEmulator(script=[text_turn("Hello, world!")], delta_chars=5) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        with sdk.beta.sessions.events.stream(session_id, event_deltas=["agent.message"]) as stream:
            sdk.beta.sessions.events.send(session_id, events=[user_message("hi")])
            events = read_until(stream)
        stored = emu.history(session_id)
    start = next(e for e in events if e.type == "event_start")
    deltas = [e for e in events if e.type == "event_delta"]
    message = next(e for e in events if e.type == "agent.message")
    assert start.event.id == message.id
    assert "".join(d.delta.content.text for d in deltas) == "Hello, world!"
    assert {d.event_id for d in deltas} == {message.id}
    assert not [e for e in stored if e["type"] in ("event_start", "event_delta")]


def test_model_request_end_without_a_start_gets_one() -> None:
    with CMAEmulator(script=[[status_running(), model_request_end(7, 3), idle_end_turn()]]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("hi")])
        history = emu.history(session_id)
    start, end = history[2], history[3]
    assert (start["type"], end["type"]) == ("span.model_request_start", "span.model_request_end")
    assert end["model_request_start_id"] == start["id"]


# -- stream faults ----------------------------------------------------------------------------


def test_drop_stream_after_n_events_keeps_the_history() -> None:
    with CMAEmulator(script=[text_turn("hello")]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        emu.inject(drop_stream_after(2))
        received = []
        with (
            pytest.raises(httpx2.RemoteProtocolError),
            sdk.beta.sessions.events.stream(session_id) as stream,
        ):
            sdk.beta.sessions.events.send(session_id, events=[user_message("hi")])
            for event in stream:
                received.append(event.type)
        assert received == ["user.message", "session.status_running"]
        assert len(emu.history(session_id)) == 6
        assert emu.subscribers(session_id) == 0


def test_error_frame_makes_the_sdk_raise() -> None:
    with CMAEmulator() as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        emu.inject(error_frame(1, error_type="overloaded_error", message="Overloaded"), session_id=session_id)
        with (
            pytest.raises(anthropic.APIStatusError) as info,
            sdk.beta.sessions.events.stream(session_id) as stream,
        ):
            emu.emit(session_id, session_error("model busy", error_type="model_overloaded_error"))
            assert next(iter(stream)).type == "session.error"
            next(iter(stream))
    body = info.value.body
    assert isinstance(body, dict)
    assert body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_requires_action_from_an_earlier_batch() -> None:
    script = [tool_turn(("lookup_customer", {"id": "c9"})), text_turn("ok")]
    with CMAEmulator(script=script) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        emu.inject(requires_action_from_earlier_batch(delay=None))
        with sdk.beta.sessions.events.stream(session_id) as first:
            sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
            early = read_until(first, "span.model_request_end")
            assert [e["type"] for e in emu.history(session_id)][-1] == "span.model_request_end"
            use = next(e for e in early if e.type == "agent.custom_tool_use")
            # A new subscription releases the held idle: its first event references a tool use
            # that only the earlier connection (or the history) carried.
            with sdk.beta.sessions.events.stream(session_id) as second:
                late = next(iter(second))
            assert late.type == "session.status_idle"
            assert late.stop_reason.type == "requires_action"
            assert late.stop_reason.event_ids == [use.id]
            assert next(iter(first)).model_dump()["id"] == late.id


def test_requires_action_after_a_dropped_stream() -> None:
    with CMAEmulator(script=[tool_turn(("lookup_customer", {"id": "c9"}))]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        emu.inject(requires_action_from_earlier_batch(drop_stream=True), session_id=session_id)
        seen = []
        with pytest.raises(httpx2.RemoteProtocolError), sdk.beta.sessions.events.stream(session_id) as first:
            sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
            for event in first:
                seen.append(event.type)
        assert seen[-1] == "span.model_request_end"
        with sdk.beta.sessions.events.stream(session_id) as second:
            idle = next(iter(second))
        assert idle.type == "session.status_idle"
        assert idle.stop_reason.type == "requires_action"


def test_terminal_idle_lands_while_no_stream_is_connected() -> None:
    with CMAEmulator(script=[text_turn("done")]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        emu.inject(terminal_while_disconnected())
        seen = []
        with pytest.raises(httpx2.RemoteProtocolError), sdk.beta.sessions.events.stream(session_id) as stream:
            sdk.beta.sessions.events.send(session_id, events=[user_message("hi")])
            for event in stream:
                seen.append(event.type)
        assert "session.status_idle" not in seen
        assert emu.history(session_id)[-1]["type"] == "session.status_idle"
        # No replay: a new stream carries only what comes next.
        with sdk.beta.sessions.events.stream(session_id) as again:
            emu.emit(session_id, agent_message("later"))
            assert next(iter(again)).type == "agent.message"


def test_pings_on_an_idle_stream_and_raw_sse_framing() -> None:
    with CMAEmulator(ping_interval=0.05) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        headers = {"x-api-key": emu.api_key or "", "anthropic-version": "2023-06-01", "anthropic-beta": BETA}
        url = f"{emu.base_url}/v1/sessions/{session_id}/events/stream"
        with httpx.stream("GET", url, headers=headers, timeout=5) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["transfer-encoding"] == "chunked"
            emu.wait_for_subscribers(session_id)
            assert emu.subscribers(session_id) == 1
            lines = response.iter_lines()
            assert next(lines) == "event: ping"
            emu.emit(session_id, model_request_start())
            frame = [next(lines) for _ in range(3)]
            while frame[0] == "" or frame[0].startswith(("event: ping", 'data: {"type":"ping"')):
                frame = [*frame[1:], next(lines)]
        assert frame[0] == "event: span.model_request_start"
        assert frame[1].startswith("data: ")
        assert json.loads(frame[1][6:])["type"] == "span.model_request_start"


def test_custom_tool_use_with_a_pinned_id() -> None:
    script = [
        [status_running(), model_request_start(), custom_tool_use("lookup_customer", {}, id="sevt_pinned")]
    ]
    with CMAEmulator(script=[[*script[0], model_request_end(), idle_requires_action()]]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
        idle = emu.wait_for_event(session_id, "session.status_idle")
    assert idle["stop_reason"] == {"type": "requires_action", "event_ids": ["sevt_pinned"]}


def test_ask_gated_tool_use_waits_for_a_confirmation() -> None:
    gated = [
        status_running(),
        agent_tool_use("bash", {"command": "ls"}, evaluated_permission="ask", id="sevt_bash"),
    ]
    script = [
        [*gated, idle_requires_action()],
        [status_running(), agent_tool_result("sevt_bash", "README.md"), *text_turn("Listed.")[1:]],
    ]
    with CMAEmulator(script=script) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("ls")])
        idle = emu.wait_for_event(session_id, "session.status_idle")
        assert idle["stop_reason"] == {"type": "requires_action", "event_ids": ["sevt_bash"]}
        allow_with_message: Any = {
            "type": "user.tool_confirmation",
            "tool_use_id": "sevt_bash",
            "result": "allow",
            "deny_message": "no",
        }
        with pytest.raises(anthropic.BadRequestError, match="deny_message"):
            sdk.beta.sessions.events.send(session_id, events=[allow_with_message])
        allow: Any = {"type": "user.tool_confirmation", "tool_use_id": "sevt_bash", "result": "allow"}
        sdk.beta.sessions.events.send(session_id, events=[allow])
        last = emu.wait_for_event(session_id, "session.status_idle", nth=2)
        assert last["stop_reason"] == {"type": "end_turn"}
        with pytest.raises(anthropic.BadRequestError, match="already answered"):
            sdk.beta.sessions.events.send(session_id, events=[allow])
