"""Options that refuse typos (issue #13 §3, §4; #12 item 22): on all three hosts, through the
public API, every misspelled or misplaced option is an ``InvalidOpts`` naming it — with a
"did you mean …?" suggestion — before any request reaches the host's emulator."""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma.session.option_checks import LIVE_OPTIONS, RUN_OPTIONS, check_names, suggest
from rma_shell import SessionFailed, open_session, run
from rma_shell.options import InvalidOptions, constructor_options
from rma_shell.providers.agentcore import BedrockAgentCore, new_runtime_session_id
from rma_shell.providers.base import Provider
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import (
    AgentCoreEmulator,
    CMAEmulator,
    OpenAIEmulator,
    ScriptedProvider,
    agentcore,
    text_turn,
)
from tests.helpers import Recorder, end

KEY = "sk-test-options"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def handler(name: str, input: dict[str, Any], ctx: object) -> str:
    return "ok"


# ── the three hosts, each with its emulator's request log ──────────────────────────────


@contextmanager
def local_host() -> Iterator[tuple[Provider[Any], list[Any], dict[str, Any]]]:
    with OpenAIEmulator([{"content": "hi"}], api_key=KEY) as emu:
        yield Local(base_url=emu.base_url, model="m", api_key=KEY), emu.requests, {}


@contextmanager
def cma_host() -> Iterator[tuple[Provider[Any], list[Any], dict[str, Any]]]:
    with CMAEmulator([text_turn("hi")], api_key=KEY) as emu:
        provider = ClaudeManagedAgents(
            api_key=KEY, base_url=emu.base_url, env={}, agent_id="agent_x", environment_id="env_x"
        )
        yield provider, emu.requests, {}


@contextmanager
def agentcore_host() -> Iterator[tuple[Provider[Any], list[Any], dict[str, Any]]]:
    with AgentCoreEmulator([agentcore.text_turn("hi")]) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
        )
        yield provider, emu.requests, {"runtime_session_id": new_runtime_session_id()}


HOSTS: dict[str, Callable[[], Any]] = {"local": local_host, "cma": cma_host, "agentcore": agentcore_host}


async def _close(provider: Provider[Any]) -> None:
    close = getattr(provider, "close", None)
    if close is not None:
        await close()


@pytest.mark.parametrize("host", sorted(HOSTS))
@pytest.mark.parametrize(
    ("typo", "meant"), [("turn_gaurd", "turn_guard"), ("timout", "timeout"), ("max_turn", "max_turns")]
)
async def test_a_misspelled_run_option_is_refused_with_a_suggestion_before_any_request(
    host: str, typo: str, meant: str
) -> None:
    with HOSTS[host]() as (provider, requests, needed):
        outcome = await run(provider, handler=handler, prompt="x", **needed, **{typo: 5})
        assert requests == []  # nothing reached the host
        error = outcome.failure()
        assert isinstance(error, InvalidOpts)
        assert (error.option, error.suggestion) == (typo, meant)
        assert f"did you mean {meant!r}?" in error.message
        # The control: the same call without the typo does reach the host.
        await run(provider, handler=handler, prompt="x", timeout=20, **needed)
        assert requests != []
        await _close(provider)


@pytest.mark.parametrize("host", sorted(HOSTS))
async def test_a_misspelled_open_session_option_fails_the_start_before_any_request(host: str) -> None:
    with HOSTS[host]() as (provider, requests, needed):
        with pytest.raises(SessionFailed) as failed:
            async with open_session(provider, handler=handler, prompt="x", turn_gaurd=None, **needed):
                pass
        assert requests == []
        assert isinstance(failed.value, InvalidOpts)
        assert (failed.value.option, failed.value.suggestion) == ("turn_gaurd", "turn_guard")
        await _close(provider)


@pytest.mark.parametrize("host", sorted(HOSTS))
async def test_open_session_has_no_timeout_and_says_what_to_use(host: str) -> None:
    with HOSTS[host]() as (provider, requests, needed):
        with pytest.raises(SessionFailed) as failed:
            async with open_session(provider, handler=handler, prompt="x", timeout=5, **needed):
                pass
        assert requests == []
        assert failed.value.option == "timeout"
        assert "fail_after" in failed.value.message
        await _close(provider)


@pytest.mark.parametrize(
    ("host", "setting"), [("local", "base_url"), ("cma", "api_key"), ("agentcore", "data_url")]
)
async def test_a_provider_setting_given_to_run_says_it_belongs_to_the_provider(
    host: str, setting: str
) -> None:
    with HOSTS[host]() as (provider, requests, needed):
        outcome = await run(provider, handler=handler, prompt="x", **needed, **{setting: "http://x"})
        assert requests == []
        error = outcome.failure()
        assert isinstance(error, InvalidOpts) and error.option == setting
        assert f"pass it to {type(provider).__name__}(...)" in error.detail
        await _close(provider)


@pytest.mark.parametrize(
    ("host", "foreign"),
    [("local", "runtime_session_id"), ("local", "agent_id"), ("cma", "history"), ("agentcore", "title")],
)
async def test_another_hosts_per_run_option_is_refused(host: str, foreign: str) -> None:
    with HOSTS[host]() as (provider, requests, needed):
        outcome = await run(provider, handler=handler, prompt="x", **needed, **{foreign: "v"})
        assert requests == []
        assert isinstance(outcome.failure(), InvalidOpts) and outcome.failure().option == foreign
        await _close(provider)


async def test_a_declared_per_run_option_reaches_the_host() -> None:
    with cma_host() as (provider, requests, _):
        await run(provider, handler=handler, prompt="x", title="quarterly report", timeout=20)
        creates = [r for r in requests if r.method == "POST" and r.path.endswith("/sessions")]
        assert creates and creates[0].body["title"] == "quarterly report"
        await _close(provider)


# ── provider constructors ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("make", "typo", "meant"),
    [
        (ClaudeManagedAgents, "agnet_id", "agent_id"),
        (ClaudeManagedAgents, "max_retry", "max_retries"),
        (Local, "modle", "model"),
        (Local, "base_ulr", "base_url"),
        (BedrockAgentCore, "harness_ar", "harness_arn"),
        (BedrockAgentCore, "idle_timout", "idle_timeout"),
    ],
)
def test_a_misspelled_constructor_option_raises_with_a_suggestion(
    make: Callable[..., Provider[Any]], typo: str, meant: str
) -> None:
    with pytest.raises(InvalidOptions) as raised:
        make(**{typo: "a"})
    assert isinstance(raised.value, TypeError)  # what Python raises for an unexpected keyword
    assert (raised.value.error.option, raised.value.error.suggestion) == (typo, meant)
    assert f"did you mean {meant!r}?" in str(raised.value)


@pytest.mark.parametrize(
    ("make", "per_run"),
    [
        (BedrockAgentCore, "runtime_session_id"),
        (Local, "history"),
        (ClaudeManagedAgents, "session_id"),
        (Local, "max_turns"),
    ],
)
def test_a_per_run_option_given_to_a_constructor_points_to_run(
    make: Callable[..., Provider[Any]], per_run: str
) -> None:
    with pytest.raises(InvalidOptions) as raised:
        make(**{per_run: "x"})
    assert raised.value.error.option == per_run
    assert f"pass {per_run}= to run()/open_session()" in raised.value.error.detail


def test_cma_takes_agent_and_environment_handles_in_its_constructor() -> None:
    provider = ClaudeManagedAgents(
        api_key=KEY, agent={"agent_id": "a1"}, environment={"id": "e", "type": "environment"}
    )
    assert (provider.agent_id, provider.environment_id) == ("a1", "e")


# ── session identity: one rule on every host ──────────────────────────────────────────


async def test_local_session_id_without_history_is_refused_not_a_silent_fresh_start() -> None:
    with local_host() as (provider, requests, _):
        outcome = await run(provider, handler=handler, prompt="x", session_id="local_abc")
        assert requests == []
        assert isinstance(outcome.failure(), InvalidOpts) and outcome.failure().option == "session_id"
        history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "reply"}]
        resumed = (
            await run(provider, handler=handler, prompt="x", session_id="local_abc", history=history)
        ).unwrap()
        assert resumed.resumed and resumed.session_id == "local_abc"
        await _close(provider)


async def test_cma_reattach_refuses_options_that_only_shape_a_fresh_session() -> None:
    with cma_host() as (provider, requests, _):
        outcome = await run(provider, handler=handler, prompt="x", session_id="sesn_1", title="t")
        assert requests == []
        assert outcome.failure().option == "title"
        await _close(provider)


@pytest.mark.parametrize("host", ["cma", "agentcore"])
async def test_model_config_beyond_metadata_is_refused_where_the_agent_owns_the_model(host: str) -> None:
    with HOSTS[host]() as (provider, requests, needed):
        outcome = await run(provider, handler=handler, prompt="x", model_config={"model": "m"}, **needed)
        assert requests == []
        assert outcome.failure().option == "model_config" and "model" in outcome.failure().detail
        await _close(provider)


# ── connection settings and durations (§4, #12 item 22) ────────────────────────────────


@pytest.mark.parametrize("port", ["99999", "0"])
async def test_an_impossible_port_is_refused_up_front_on_every_host(port: str) -> None:
    url = f"http://127.0.0.1:{port}"
    cases: list[tuple[Provider[Any], str, dict[str, Any]]] = [
        (Local(base_url=url + "/v1", model="m"), "base_url", {}),
        (
            ClaudeManagedAgents(api_key=KEY, base_url=url, env={}, agent_id="a", environment_id="e"),
            "base_url",
            {},
        ),
        (
            BedrockAgentCore(
                harness_arn="arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h-0123456789",
                data_url=url,
                env={"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"},
            ),
            "data_url",
            {"runtime_session_id": new_runtime_session_id()},
        ),
    ]
    for provider, option, needed in cases:
        # A hang guard only: InvalidOpts (not a transport error after retries) is what says
        # the port was refused before any connection. 2 s was tight for a first botocore import.
        with anyio.fail_after(30):
            outcome = await run(provider, handler=handler, prompt="x", **needed)
        assert isinstance(outcome.failure(), InvalidOpts), (provider, outcome)
        assert outcome.failure().option == option and "port" in outcome.failure().detail
        await _close(provider)


async def test_a_gateway_lanes_impossible_port_names_model_config() -> None:
    with local_host() as (provider, requests, _):
        lane = {"base_url": "http://127.0.0.1:0/v1", "model": "lane"}
        outcome = await run(provider, handler=handler, prompt="x", model_config=lane)
        assert requests == [] and outcome.failure().option == "model_config.base_url"
        await _close(provider)


@pytest.mark.parametrize("bad", [math.nan, -1.0, 0, "10", True])
async def test_a_run_timeout_must_be_a_positive_number(bad: object) -> None:
    provider = ScriptedProvider([end("x")])
    outcome = await run(provider, handler=Recorder(), prompt="x", timeout=bad)  # type: ignore[arg-type]
    assert isinstance(outcome.failure(), InvalidOpts) and outcome.failure().option == "timeout"
    assert provider.opened == []


async def test_an_infinite_run_timeout_means_no_deadline() -> None:
    outcome = await run(ScriptedProvider([end("x")]), handler=Recorder(), prompt="x", timeout=math.inf)
    assert isinstance(outcome, Success) and outcome.unwrap().text == "x"


@pytest.mark.parametrize("bad", [math.nan, -1.0])
async def test_send_event_timeout_must_be_a_number_of_seconds(bad: float) -> None:
    async with open_session(ScriptedProvider([], streaming=True), handler=Recorder()) as session:
        sent = await session.send_event({"type": "user.message"}, timeout=bad)
    assert isinstance(sent.failure(), InvalidOpts) and sent.failure().option == "timeout"


@pytest.mark.parametrize(
    ("host", "setting", "value"),
    [
        ("local", "timeout", math.nan),
        ("local", "backoff_base", -1.0),
        ("local", "timeout", math.inf),
        ("cma", "stream_idle_timeout", math.nan),
        ("cma", "max_retries", -1),
        ("agentcore", "idle_timeout", math.nan),
        ("agentcore", "backoff_cap", -0.5),
        ("agentcore", "max_retries", -1),
    ],
)
async def test_provider_durations_and_counts_are_checked_before_any_request(
    host: str, setting: str, value: object
) -> None:
    with HOSTS[host]() as (provider, _, needed):
        made = type(provider)
        kwargs = {
            "local": lambda: {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "cma": lambda: {"api_key": KEY, "base_url": "http://127.0.0.1:9", "env": {}, "agent_id": "a"},
            "agentcore": lambda: {
                "harness_arn": provider.defaults["harness_arn"],
                "data_url": "http://127.0.0.1:9",
            },
        }[host]()
        if host == "agentcore":
            kwargs["env"] = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}
        bad = made(**kwargs, **{setting: value})
        with anyio.fail_after(30):  # a hang guard: InvalidOpts says nothing was sent
            outcome = await run(bad, handler=handler, prompt="x", **needed)
        assert isinstance(outcome.failure(), InvalidOpts) and outcome.failure().option == setting
        await _close(provider)


# ── the declarations, the pure check and the table in the docs ─────────────────────────


def test_the_core_declares_exactly_run_and_open_sessions_parameters() -> None:
    def keywords(fn: Callable[..., Any]) -> set[str]:
        params = inspect.signature(fn).parameters.values()
        return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}

    assert keywords(run) == RUN_OPTIONS
    assert keywords(open_session) == LIVE_OPTIONS


def test_suggestions_are_the_closest_accepted_name_or_none() -> None:
    assert suggest("Turn_Gaurd", RUN_OPTIONS) == "turn_guard"
    assert suggest("zzz", RUN_OPTIONS) is None
    found = check_names(["prompt", "qqqq"], {"prompt"}, where="run()")
    assert isinstance(found, Failure) and found.failure().option == "qqqq"
    assert "accepted: prompt" in found.failure().detail  # no close name: the list instead
    assert check_names(["prompt"], {"prompt"}, where="run()") == Success(None)


def test_the_option_table_covers_every_option_of_run_and_each_provider() -> None:
    text = DOCS.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z_]+)`", text, flags=re.MULTILINE))
    names = set(RUN_OPTIONS)
    for provider in (Local, ClaudeManagedAgents, BedrockAgentCore):
        names |= constructor_options(provider) | provider.run_options
    names = {n for n in names if not n.startswith("_")}  # _seams: tests only, not an option
    assert names - documented == set()
    assert documented - names == set()  # and nothing that is not an option


# ── provisioning's facade (its **options went to flows that raised TypeError or ignored them) ──


@pytest.mark.parametrize(
    ("host", "typo", "meant"), [("cma", "agent_bse", "agent_base"), ("agentcore", "prefx", "prefix")]
)
async def test_provision_refuses_a_misspelled_option_before_any_request(
    host: str, typo: str, meant: str
) -> None:
    from rma.provisioning.spec import AgentSpec
    from rma_shell.provisioning import provision, teardown
    from rma_shell.stores import MemoryStore

    spec = AgentSpec.create("bot", model_config="claude-sonnet-4-6").unwrap()
    with HOSTS[host]() as (provider, requests, _):
        extra = {"execution_role_arn": "arn:aws:iam::123456789012:role/r"} if host == "agentcore" else {}
        made = await provision(provider, spec, store=MemoryStore(), **extra, **{typo: "x"})
        assert isinstance(made.failure(), InvalidOpts)
        assert (made.failure().option, made.failure().suggestion) == (typo, meant)
        gone = await teardown(provider, None, store=MemoryStore(), delete_everything=True)
        assert isinstance(gone.failure(), InvalidOpts) and gone.failure().option == "delete_everything"
        assert requests == []
        await _close(provider)


async def test_a_provider_of_your_own_declares_what_it_reads_per_run() -> None:
    class Sharded(ScriptedProvider):
        run_options = ScriptedProvider.run_options | {"shard"}

    provider = Sharded([end("x"), end("y")])
    assert (await run(provider, handler=Recorder(), prompt="x", shard=3)).unwrap().text == "x"
    assert provider.opened[0].extra["shard"] == 3
    refused = await run(provider, handler=Recorder(), prompt="x", shrad=3)
    assert (refused.failure().option, refused.failure().suggestion) == ("shrad", "shard")
    assert len(provider.opened) == 1


async def test_agentcore_reattach_with_a_different_fresh_id_is_refused_not_one_ignored() -> None:
    with agentcore_host() as (provider, requests, needed):
        other = new_runtime_session_id()
        outcome = await run(provider, handler=handler, prompt="x", session_id=other, **needed)
        assert requests == [] and outcome.failure().option == "runtime_session_id"
        same = await run(
            provider, handler=handler, prompt="x", session_id=needed["runtime_session_id"], **needed
        )
        assert same.unwrap().resumed  # the same id twice is just a reattach
        await _close(provider)
