"""Bedrock AgentCore honours botocore's endpoint variables (``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``,
``…_CONTROL``, ``AWS_ENDPOINT_URL``), so ``AgentCoreEmulator.credentials_env()`` alone points the
provider at the emulator, as it does boto3; an explicit ``data_url``/``control_url`` wins."""

from __future__ import annotations

from typing import Any

from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore, new_runtime_session_id
from rma_shell.testing import agentcore as ace


class Echo:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "ok"


async def _run(provider: BedrockAgentCore) -> Any:
    try:
        return await run(
            provider, handler=Echo(), prompt="hi", runtime_session_id=new_runtime_session_id(), timeout=30
        )
    finally:
        await provider.close()


async def test_credentials_env_alone_reaches_the_emulator() -> None:
    with ace.AgentCoreEmulator([ace.text_turn("hello")]) as emu:
        outcome = await _run(BedrockAgentCore(harness_arn=emu.harness_arn, env=emu.credentials_env()))
        assert isinstance(outcome, Success), outcome
        assert outcome.unwrap().text == "hello"
        assert any(r.path.startswith("/harnesses/invoke") for r in emu.requests)


async def test_the_generic_variable_serves_both_planes_and_control_has_its_own() -> None:
    with ace.AgentCoreEmulator([ace.text_turn("generic")]) as emu:
        env = {k: v for k, v in emu.credentials_env().items() if not k.startswith("AWS_ENDPOINT_URL")}
        outcome = await _run(
            BedrockAgentCore(harness_arn=emu.harness_arn, env={**env, "AWS_ENDPOINT_URL": emu.base_url})
        )
        assert outcome.unwrap().text == "generic"
        provider = BedrockAgentCore(
            env={**env, "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL": emu.base_url}, aws_region="us-east-1"
        )
        client = (await provider.control_client()).unwrap()
        assert client.control_url == emu.base_url
        assert "amazonaws.com" in client.data_url  # the data plane keeps the derived host
        await provider.close()


async def test_an_explicit_url_wins_and_ignore_configured_turns_the_variables_off() -> None:
    with ace.AgentCoreEmulator([ace.text_turn("explicit")]) as emu:
        env = {**emu.credentials_env(), "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": "http://127.0.0.1:9"}
        outcome = await _run(BedrockAgentCore(harness_arn=emu.harness_arn, env=env, data_url=emu.base_url))
        assert outcome.unwrap().text == "explicit"
    provider = BedrockAgentCore(
        env={**env, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}, aws_region="eu-west-1"
    )
    client = (await provider.control_client()).unwrap()
    assert client.data_url == "https://bedrock-agentcore.eu-west-1.amazonaws.com"
    await provider.close()


async def test_a_variable_that_is_not_a_url_is_invalid_opts_naming_it() -> None:
    with ace.AgentCoreEmulator([ace.text_turn("never")]) as emu:
        env = {**emu.credentials_env(), "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": "127.0.0.1:9"}
        outcome = await _run(BedrockAgentCore(harness_arn=emu.harness_arn, env=env))
    assert isinstance(outcome, Failure)
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"
