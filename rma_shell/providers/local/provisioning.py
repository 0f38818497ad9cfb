"""Provisioning for Local: nothing to create, so the handle is the spec (L-1, P-8).

Local runs the agent loop in this process against a chat-completions endpoint; there is no
remote agent, environment or harness. ``provision`` validates the specs as the managed
providers do (a bad spec fails the same way on every host) and returns the agent spec itself
as the handle; ``teardown`` releases nothing and succeeds. Neither sends a request or touches
the store, so provider-agnostic code can call both on every host::

    made = (await provision(provider, agent_spec, environment_spec, store=store)).unwrap()
    await run(provider, handler=..., prompt=..., agent=made, environment=made)
    await teardown(provider, made, store=store)

(On Local the handle's system prompt, tools, terminal tool and model win over the provider's
for that run, as a run's agent handle does on the managed hosts.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
from returns.result import Failure, Result, Success

from rma.errors import SessionError
from rma.provisioning.spec import AgentSpec, EnvironmentSpec


async def provision(
    agent_spec: AgentSpec | Mapping[str, Any],
    environment_spec: EnvironmentSpec | Mapping[str, Any] | None = None,
    **options: Any,
) -> Result[AgentSpec, SessionError]:
    """The identity handle: ``agent_spec`` as an ``AgentSpec`` (the same object when it is one).

    Both specs are validated (``InvalidSpec`` naming the field, as for the other providers);
    ``options`` meant for other hosts (``execution_role_arn``, ``prefix``, …) are accepted and
    ignored, and nothing is stored.
    """
    await anyio.lowlevel.checkpoint()
    agent = AgentSpec.coerce(agent_spec)
    if isinstance(agent, Failure):
        return Failure(agent.failure())
    environment = EnvironmentSpec.coerce_optional(environment_spec)
    if isinstance(environment, Failure):
        return Failure(environment.failure())
    return Success(agent.unwrap())


async def teardown(handle: object, **options: Any) -> Result[None, SessionError]:
    """Nothing was created, so nothing is released: ``Success(None)`` for any handle."""
    await anyio.lowlevel.checkpoint()
    return Success(None)


__all__ = ["provision", "teardown"]
