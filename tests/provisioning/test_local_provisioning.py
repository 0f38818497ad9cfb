"""Local through the provisioning facade: an identity handle, nothing server-side (L-1, P-8)."""

from __future__ import annotations

from typing import Any

from returns.result import Failure, Success

from rma.errors import Unsupported
from rma.provisioning import AgentSpec, InvalidSpec
from rma_shell import run
from rma_shell.providers.local import Local
from rma_shell.provisioning import provision, teardown
from rma_shell.testing import OpenAIEmulator

TOOL = {"name": "lookup", "description": "Look a thing up", "input_schema": {"type": "object"}}
SPEC = {"name": "support_bot", "system_prompt": "Be brief.", "tools": [TOOL], "terminal_tool": "lookup"}


class UntouchedStore:
    """A store that fails the test on any use."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the store was used: {name}")


class Echo:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "ok"


async def test_P8_local_provision_returns_the_spec_and_touches_nothing() -> None:
    spec = AgentSpec.coerce(SPEC).unwrap()
    with OpenAIEmulator([]) as emu:
        provider = Local(base_url=emu.base_url, model="m")
        given = await provision(provider, spec, {"type": "cloud"}, store=UntouchedStore())
        from_mapping = await provision(provider, SPEC, store=UntouchedStore(), execution_role_arn="ignored")
    assert isinstance(given, Success)
    assert given.unwrap() is spec  # the identity handle
    assert from_mapping.unwrap() == spec
    assert emu.requests == []


async def test_P8_local_provision_validates_the_specs_like_the_managed_providers() -> None:
    provider = Local(model="m")
    bad_agent = await provision(provider, {**SPEC, "tools": [{"name": "x", "input_schema": "object"}]})
    assert isinstance(bad_agent, Failure)
    assert isinstance(bad_agent.failure(), InvalidSpec)
    assert bad_agent.failure().path == "tools[0].description"
    bad_environment = await provision(provider, SPEC, {"config": "not an object"})
    assert isinstance(bad_environment, Failure)
    assert isinstance(bad_environment.failure(), InvalidSpec)
    assert bad_environment.failure().spec == "environment"


async def test_P8_local_teardown_succeeds_and_sends_nothing() -> None:
    with OpenAIEmulator([]) as emu:
        provider = Local(base_url=emu.base_url, model="m")
        handle = (await provision(provider, SPEC)).unwrap()
        assert await teardown(provider, handle, store=UntouchedStore()) == Success(None)
    assert emu.requests == []


async def test_provider_agnostic_provision_run_teardown_works_on_local() -> None:
    with OpenAIEmulator([{"content": "hello"}]) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[TOOL])
        made = (await provision(provider, SPEC)).unwrap()
        result = await run(provider, handler=Echo(), prompt="hi", agent=made, environment=made)
        released = await teardown(provider, made)
        await provider.close()
    assert result.unwrap().text == "hello"
    assert released == Success(None)
    assert len(emu.requests) == 1


async def test_a_provider_without_provisioning_is_still_unsupported() -> None:
    got = await provision(object(), SPEC)
    assert isinstance(got, Failure)
    assert isinstance(got.failure(), Unsupported)
    gone = await teardown(object(), None)
    assert isinstance(gone, Failure)
    assert isinstance(gone.failure(), Unsupported)
