"""Typed final output (issue #14): ``output_type=`` makes the session end through a required
terminal tool whose arguments are validated; an invalid answer goes back to the model with
the validation errors, bounded by ``max_reprompts``; ``SessionResult.output`` holds the typed
value — on all three hosts."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from rma.errors import InvalidOpts, OutputInvalid
from rma.provisioning import AgentSpec, EnvironmentSpec
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.provisioning import provision
from rma_shell.seams import Seams
from rma_shell.stores import MemoryStore
from rma_shell.testing import CMAEmulator, OpenAIEmulator, cma
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.tools import output_tool
from tests.tools._wire import agentcore_tool_results, cma_tool_results, local_tool_results

KEY = "sk-test-output"
SID = "rma-session-0123456789abcdef0123456789"


class Forecast(pydantic.BaseModel):
    """A forecast for one city."""

    city: str
    temp_c: float


BAD = {"city": 5}
GOOD = {"city": "Oslo", "temp_c": 3.5}
REFUSED = (
    "invalid arguments for final_result:\n"
    "- city: Input should be a valid string (got 5)\n"
    "- temp_c: Field required\n"
    "Call final_result again with the corrected answer."
)


class NoTools:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        raise AssertionError(f"the handler must never see {name}")


async def on_local(answers: list[dict[str, Any]], **kw: Any) -> tuple[Any, list[tuple[str, bool]], Any]:
    turns: list[Any] = [
        {"tool_calls": [{"id": f"call_{i}", "name": "final_result", "arguments": a}]}
        for i, a in enumerate(answers)
    ]
    with OpenAIEmulator([*turns, {"content": "done"}], api_key=KEY) as emu:
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            _seams=Seams(rand=lambda: 0.0),
        )
        outcome = await run(provider, handler=NoTools(), prompt="forecast?", output_type=Forecast, **kw)
        requests = list(emu.requests)
    return outcome, local_tool_results(requests[-1].body["messages"]), requests[0].body["tools"]


async def on_agentcore(answers: list[dict[str, Any]], **kw: Any) -> tuple[Any, list[tuple[str, bool]], Any]:
    script = [ace.tool_turn(("final_result", a, f"tooluse_{i}")) for i, a in enumerate(answers)]
    with AgentCoreEmulator([*script, ace.text_turn("done")]) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
        )
        try:
            outcome = await run(
                provider,
                handler=NoTools(),
                prompt="forecast?",
                runtime_session_id=SID,
                output_type=Forecast,
                **kw,
            )
        finally:
            await provider.close()
        invokes = [r.body for r in emu.requests if r.path.startswith("/harnesses/invoke")]
    sent = agentcore_tool_results(invokes[1:])
    return outcome, sent, invokes[0]["tools"]


async def on_cma(answers: list[dict[str, Any]], **kw: Any) -> tuple[Any, list[tuple[str, bool]], Any]:
    script = [cma.tool_turn(("final_result", a)) for a in answers]
    with CMAEmulator([*script, cma.text_turn("done")], api_key=KEY) as emu:
        provider = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={})
        try:
            # On Claude the agent's tools live on Anthropic's side: the agent declares the answer's tool.
            spec = AgentSpec.create(
                "forecaster",
                system_prompt="Forecast.",
                tools=[output_tool(Forecast)],
                model_config="claude-sonnet-4-6",
            ).unwrap()
            handles = (
                await provision(
                    provider, spec, EnvironmentSpec.create("sandbox").unwrap(), store=MemoryStore()
                )
            ).unwrap()
            outcome = await run(
                provider,
                handler=NoTools(),
                prompt="forecast?",
                agent=handles,
                environment=handles,
                output_type=Forecast,
                **kw,
            )
        finally:
            await provider.close()
        posts = [q.body for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
        declared = next(q.body for q in emu.requests if q.method == "POST" and q.path == "/v1/agents")[
            "tools"
        ]
    sent = cma_tool_results(posts[1:])
    return outcome, sent, declared


HOSTS = {"local": on_local, "agentcore": on_agentcore, "cma": on_cma}


@pytest.mark.parametrize("host", sorted(HOSTS))
async def test_an_invalid_answer_is_sent_back_and_the_valid_one_is_the_typed_output(host: str) -> None:
    outcome, sent, declared = await HOSTS[host]([BAD, GOOD])
    result = outcome.unwrap()
    assert result.output == Forecast(city="Oslo", temp_c=3.5)
    assert sent == [(REFUSED, True), ("Final answer received.", False)]
    assert "final_result" in json.dumps(declared)  # the answer's tool reached the host
    assert result.text == "done" and result.turns == 3


@pytest.mark.parametrize("host", sorted(HOSTS))
async def test_answers_that_never_validate_fail_once_the_reprompts_are_spent(host: str) -> None:
    outcome, sent, _ = await HOSTS[host]([BAD, {"city": 6}], max_reprompts=1)
    error = outcome.failure()
    assert isinstance(error, OutputInvalid) and error.tool == "final_result"
    assert "temp_c: Field required" in error.detail
    assert error.result is not None and error.result.turns == 2  # the turns' work is kept
    assert sent == [(REFUSED, True)]  # the second invalid answer ended the run instead


@pytest.mark.parametrize("host", sorted(HOSTS))
async def test_the_same_invalid_answer_twice_gets_its_errors_and_spends_the_reprompts(host: str) -> None:
    # Local's duplicate guard once answered the repeat itself, so it slipped past max_reprompts.
    outcome, sent, _ = await HOSTS[host]([BAD, BAD], max_reprompts=1)
    error = outcome.failure()
    assert isinstance(error, OutputInvalid) and error.tool == "final_result"
    assert sent == [(REFUSED, True)]
    outcome, sent, _ = await HOSTS[host]([BAD, BAD, GOOD], max_reprompts=2)
    assert outcome.unwrap().output == Forecast(city="Oslo", temp_c=3.5)
    assert sent == [(REFUSED, True), (REFUSED, True), ("Final answer received.", False)]


async def test_a_model_that_does_not_call_the_tool_is_reprompted() -> None:
    with OpenAIEmulator(
        [
            {"content": "It is cold."},
            {"tool_calls": [{"id": "c", "name": "final_result", "arguments": GOOD}]},
            {"content": "ok"},
        ],
        api_key=KEY,
    ) as emu:
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            _seams=Seams(rand=lambda: 0.0),
        )
        result = (await run(provider, handler=NoTools(), prompt="forecast?", output_type=Forecast)).unwrap()
        reprompt = emu.requests[1].body["messages"][-1]
    assert result.output == Forecast(city="Oslo", temp_c=3.5)
    assert reprompt["role"] == "user" and "final_result" in reprompt["content"]


async def test_a_type_that_is_not_an_object_is_wrapped_as_result() -> None:
    answer = {"result": ["sun", "rain"]}
    with OpenAIEmulator(
        [{"tool_calls": [{"id": "c", "name": "final_result", "arguments": answer}]}, {"content": "ok"}],
        api_key=KEY,
    ) as emu:
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            _seams=Seams(rand=lambda: 0.0),
        )
        result = (await run(provider, handler=NoTools(), prompt="words?", output_type=list[str])).unwrap()
        declared = emu.requests[0].body["tools"][0]["function"]
    assert result.output == ["sun", "rain"]
    assert declared["name"] == "final_result" and declared["parameters"]["required"] == ["result"]


async def test_output_type_and_another_terminal_tool_are_refused_up_front() -> None:
    with OpenAIEmulator([], api_key=KEY) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key=KEY)
        outcome = await run(
            provider, handler=NoTools(), prompt="x", output_type=Forecast, terminal_tool="done"
        )
        assert emu.requests == []
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "terminal_tool"


async def test_a_model_that_never_gives_an_answer_fails_with_output_invalid_not_an_empty_success() -> None:
    with OpenAIEmulator([{"content": "cold"}, {"content": "still cold"}], api_key=KEY) as emu:
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            _seams=Seams(rand=lambda: 0.0),
        )
        outcome = await run(
            provider, handler=NoTools(), prompt="forecast?", output_type=Forecast, max_reprompts=1
        )
    error = outcome.failure()
    assert isinstance(error, OutputInvalid) and "without a valid final_result call" in error.detail
    assert error.result is not None and error.result.text == "still cold"
