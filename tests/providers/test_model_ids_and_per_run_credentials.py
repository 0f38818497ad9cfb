"""Model ids and per-run credentials (issue #12 items 5 and 20, C-5, C-26).

Provider-qualified model ids (``anthropic:claude-sonnet-4-6``) reach the agents API bare; a
run's ``model_config`` may carry its own ``api_key`` and ``base_url`` (a gateway lane's), which
Claude Managed Agents honours like Local does; and a per-run ``base_url`` on another host never
receives the provider's own key unless the run gives one.
"""

from __future__ import annotations

from typing import Any

from rma.config import AnthropicSettings, ApiKeyAuth, Secret
from rma.errors import AuthenticationError, InvalidOpts
from rma.provisioning import AgentSpec
from rma_shell import run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.claude.client import CMAClient
from rma_shell.providers.claude.provisioning import ensure_agent
from rma_shell.providers.local import Local
from rma_shell.stores import MemoryStore
from rma_shell.testing import CMAEmulator, OpenAIEmulator, text_turn
from tests.helpers import cma_agent_and_environment

PROVIDER_KEY = "sk-provider-own-key-1111"
LANE_KEY = "sk-lane-granted-key-2222"


def noop(name: str, input: dict[str, Any], ctx: object) -> str:
    return "unused"


def agent_and_environment(emu: CMAEmulator, key: str) -> dict[str, str]:
    return cma_agent_and_environment(emu, key)


def authorizations(emu: Any) -> set[str | None]:
    return {q.headers.get("authorization") for q in emu.requests}


# ── C-26: bare model ids on the agents API ───────────────────────────────────────────


async def test_C26_a_provider_qualified_model_id_is_sent_bare_when_an_agent_is_created() -> None:
    specs = [
        ("qualified", "anthropic:claude-sonnet-4-6", "claude-sonnet-4-6"),
        (
            "mapped",
            {"id": "anthropic:claude-opus-4-1", "speed": "fast"},
            {"id": "claude-opus-4-1", "speed": "fast"},
        ),
        ("bare", "claude-haiku-4-5", "claude-haiku-4-5"),
    ]
    with CMAEmulator(api_key=PROVIDER_KEY) as emu:
        settings = AnthropicSettings(auth=ApiKeyAuth(Secret(PROVIDER_KEY)), base_url=emu.base_url)
        client = CMAClient(settings)
        try:
            made = [
                await ensure_agent(
                    client, AgentSpec.create(name, model_config=model).unwrap(), store=MemoryStore()
                )
                for name, model, _ in specs
            ]
        finally:
            await client.aclose()
        bodies = [q.body for q in emu.requests if q.method == "POST" and q.path == "/v1/agents"]
    for handle in made:
        handle.unwrap()  # the emulator, like the API, refuses a provider prefix
    assert [b["model"] for b in bodies] == [wire for _, _, wire in specs]


# ── C-5: a run's own credentials and host on Claude Managed Agents ───────────────────


async def test_C5_a_per_run_api_key_in_model_config_is_the_one_sent() -> None:
    with CMAEmulator([text_turn("via the lane's key")], api_key=LANE_KEY) as emu:
        ids = agent_and_environment(emu, LANE_KEY)
        provider = ClaudeManagedAgents(api_key=PROVIDER_KEY, base_url=emu.base_url, env={}, **ids)
        try:
            refused = await run(provider, handler=noop, prompt="x")
            mark = len(emu.requests)
            outcome = await run(provider, handler=noop, prompt="x", model_config={"api_key": LANE_KEY})
        finally:
            await provider.close()
        lane_requests = emu.requests[mark:]
    assert isinstance(refused.failure(), AuthenticationError)  # the provider's own key is not the lane's
    assert outcome.unwrap().text == "via the lane's key"
    assert {q.headers.get("authorization") for q in lane_requests} == {f"Bearer {LANE_KEY}"}


async def test_C5_a_per_run_base_url_and_key_send_the_whole_session_to_that_host() -> None:
    with (
        CMAEmulator(api_key=PROVIDER_KEY) as home,
        CMAEmulator([text_turn("lane")], api_key=LANE_KEY) as lane,
    ):
        ids = agent_and_environment(lane, LANE_KEY)
        provider = ClaudeManagedAgents(api_key=PROVIDER_KEY, base_url=home.base_url, env={})
        lane_config = {"base_url": lane.base_url, "api_key": LANE_KEY}  # a "model" here is refused
        try:
            outcome = await run(provider, handler=noop, prompt="x", model_config=lane_config, **ids)
        finally:
            await provider.close()
        home_requests, lane_paths = list(home.requests), [q.path for q in lane.requests]
    result = outcome.unwrap()
    assert result.text == "lane" and home_requests == []
    assert "/v1/sessions" in lane_paths and any(
        p.split("?")[0].endswith("/events/stream") for p in lane_paths
    )


async def test_C5_a_per_run_base_url_on_another_host_without_its_own_key_is_refused_before_any_request() -> (
    None
):
    with CMAEmulator(api_key=PROVIDER_KEY) as home, CMAEmulator(api_key=None) as elsewhere:
        ids = agent_and_environment(home, PROVIDER_KEY)
        mark = len(home.requests)
        provider = ClaudeManagedAgents(api_key=PROVIDER_KEY, base_url=home.base_url, env={}, **ids)
        try:
            outcome = await run(
                provider, handler=noop, prompt="x", model_config={"base_url": elsewhere.base_url}
            )
        finally:
            await provider.close()
        sent = home.requests[mark:] + elsewhere.requests
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "model_config"
    assert sent == []


async def test_C5_Weak_a_model_string_as_model_config_is_refused_not_a_crash() -> None:
    with CMAEmulator([text_turn("fine")], api_key=PROVIDER_KEY) as emu:
        ids = agent_and_environment(emu, PROVIDER_KEY)
        provider = ClaudeManagedAgents(api_key=PROVIDER_KEY, base_url=emu.base_url, env={}, **ids)
        try:
            outcome = await run(provider, handler=noop, prompt="x", model_config="claude-sonnet-4-6")
        finally:
            await provider.close()
        sessions = [q for q in emu.requests if q.path == "/v1/sessions"]
    # The agent has the model: a per-run model is refused up front (never ignored, never a crash).
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "model_config"
    assert sessions == []


# ── Local: the provider's key stays on the provider's host ───────────────────────────


async def test_Local_a_per_run_base_url_on_another_host_gets_no_provider_key() -> None:
    with OpenAIEmulator([{"content": "elsewhere"}]) as elsewhere:
        provider = Local(base_url="http://127.0.0.1:9/v1", model="m", api_key=PROVIDER_KEY, max_retries=0)
        try:
            outcome = await run(
                provider, handler=noop, prompt="x", model_config={"base_url": elsewhere.base_url}
            )
        finally:
            await provider.close()
        sent = authorizations(elsewhere)
    assert outcome.unwrap().text == "elsewhere"
    assert sent == {None}  # no Authorization header at all


async def test_Local_a_per_run_base_url_with_its_own_key_sends_that_key() -> None:
    with OpenAIEmulator([{"content": "lane"}], api_key=LANE_KEY) as lane:
        provider = Local(base_url="http://127.0.0.1:9/v1", model="m", api_key=PROVIDER_KEY, max_retries=0)
        lane_config = {"base_url": lane.base_url, "api_key": LANE_KEY}
        try:
            outcome = await run(provider, handler=noop, prompt="x", model_config=lane_config)
        finally:
            await provider.close()
        sent = authorizations(lane)
    assert outcome.unwrap().text == "lane" and sent == {f"Bearer {LANE_KEY}"}


async def test_Local_a_per_run_base_url_on_the_providers_own_host_keeps_the_providers_key() -> None:
    with OpenAIEmulator([{"content": "home"}], api_key=PROVIDER_KEY) as home:
        provider = Local(base_url=home.base_url, model="m", api_key=PROVIDER_KEY, max_retries=0)
        same_host = {"base_url": home.base_url + "/"}  # another spelling of the same origin
        try:
            outcome = await run(provider, handler=noop, prompt="x", model_config=same_host)
        finally:
            await provider.close()
        sent = authorizations(home)
    assert outcome.unwrap().text == "home" and sent == {f"Bearer {PROVIDER_KEY}"}
