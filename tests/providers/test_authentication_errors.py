"""Rejected credentials say what was rejected, on all three providers (issue #12 item 12): the
``AuthenticationError`` carries the HTTP status, the provider's error code and message, and the
host that answered — and still never the credential."""

from __future__ import annotations

from typing import Any

from rma.errors import AuthenticationError
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import CMAEmulator, OpenAIEmulator, text_turn
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from tests.providers.test_cma_session import KEY as CMA_KEY
from tests.providers.test_cma_session import emu_agent_and_environment

WRONG = "sk-wrong-credential-4e5f"


def noop(name: str, input: dict[str, Any], ctx: object) -> str:
    return "unused"


async def test_a_401_from_an_OpenAI_compatible_server_names_status_code_message_and_host() -> None:
    with OpenAIEmulator([{"content": "never"}], api_key="sk-right-1234") as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key=WRONG, max_retries=0)
        try:
            outcome = await run(provider, handler=noop, prompt="x")
        finally:
            await provider.close()
    error = outcome.failure()
    assert isinstance(error, AuthenticationError)
    assert (error.status, error.error_code, error.host) == (401, "invalid_api_key", f"127.0.0.1:{emu.port}")
    assert error.error_message is not None and error.error_message.startswith("Incorrect API key provided.")
    assert f"127.0.0.1:{emu.port}" in error.message and WRONG not in repr(error)


async def test_a_401_from_Claude_names_status_code_message_and_host() -> None:
    with CMAEmulator([text_turn("x")], api_key=CMA_KEY) as emu:
        ids = emu_agent_and_environment(emu)
        provider = ClaudeManagedAgents(api_key=WRONG, base_url=emu.base_url, env={}, **ids)
        try:
            outcome = await run(provider, handler=noop, prompt="x")
        finally:
            await provider.close()
    error = outcome.failure()
    assert isinstance(error, AuthenticationError)
    assert (error.status, error.error_code, error.host) == (
        401,
        "authentication_error",
        f"127.0.0.1:{emu.port}",
    )
    assert error.error_message == "invalid x-api-key"
    assert WRONG not in repr(error)


async def test_AgentCores_403_InvalidSignatureException_names_status_code_message_and_host() -> None:
    secret = "wrong-secret-value-77aa"
    with AgentCoreEmulator([ace.text_turn("x")]) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            aws_access_key_id=emu.access_key_id,
            aws_secret_access_key=secret,
            env={},
        )
        try:
            outcome = await run(
                provider,
                handler=noop,
                prompt="x",
                runtime_session_id="rma-session-0123456789abcdef0123456789",
            )
        finally:
            await provider.close()
    error = outcome.failure()
    assert isinstance(error, AuthenticationError)
    assert (error.status, error.error_code, error.host) == (
        403,
        "InvalidSignatureException",
        f"127.0.0.1:{emu.port}",
    )
    assert error.error_message and "signature" in error.error_message.lower()
    assert secret not in repr(error)


async def test_an_error_raised_before_any_request_has_no_status_or_host(tmp_path: Any) -> None:
    token_file = tmp_path / "token.json"
    token_file.write_text('{"access_token": "tok-1234", "expires_at": 1}')  # long expired
    with CMAEmulator([text_turn("x")], api_key=CMA_KEY) as emu:
        ids = emu_agent_and_environment(emu)
        provider = ClaudeManagedAgents(
            api_key=None, bearer_token_file=str(token_file), base_url=emu.base_url, env={}, **ids
        )
        try:
            outcome = await run(provider, handler=noop, prompt="x")
        finally:
            await provider.close()
        sessions = [q for q in emu.requests if q.path == "/v1/sessions"]
    error = outcome.failure()
    assert isinstance(error, AuthenticationError) and sessions == []
    assert (error.status, error.error_code, error.host) == (None, None, None)
