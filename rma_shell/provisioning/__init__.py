"""Provisioning: managed agents, environments and harnesses as content-addressed entities.

``provision(provider, agent, environment, store=...)`` creates what a managed provider needs
for a spec — or reuses what an earlier call (in any process sharing the store) created — and
returns a handle to pass to ``run``; ``teardown(provider, handle, store=...)`` releases it and
evicts it from the store. Per provider:

- **Claude Managed Agents** (``rma_shell.providers.claude.provisioning``): an agent and an
  environment, named ``<base>_<digest8>``; tags, resolve, prune (archive).
- **Bedrock AgentCore** (``rma_shell.providers.agentcore.provisioning``): one harness per (agent,
  environment), waited for until it and its endpoint are READY on one deadline; tags,
  resolve, prune (delete).
- **Local** (``rma_shell.providers.local.provisioning``): nothing server-side (L-1, P-8) — ``provision``
  validates the specs and returns the agent spec as the handle, ``teardown`` succeeds; no
  request, no store use. Provider-agnostic code can call both on every host.

The default store is process-wide and in memory (V-41); pass ``store=SqliteStore(path)`` (or
``open_store()``, the documented default path) for anything that outlives the process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts, SessionError, Unsupported
from rma.provisioning.harness import HarnessHandle
from rma.provisioning.spec import AgentSpec, EnvironmentSpec
from rma.session.option_checks import check_names
from rma_shell.options import take_renamed
from rma_shell.stores import MemoryStore, Store

_DEFAULT_STORE: Store | None = None


def default_store() -> Store:
    """The process-wide in-memory store used when none is given (empty in every new process)."""
    global _DEFAULT_STORE
    if _DEFAULT_STORE is None:
        _DEFAULT_STORE = MemoryStore()
    return _DEFAULT_STORE


def _specs(
    agent: AgentSpec | Mapping[str, Any], environment: EnvironmentSpec | Mapping[str, Any] | None
) -> Result[tuple[AgentSpec, EnvironmentSpec | None], SessionError]:
    a = AgentSpec.coerce(agent)
    if isinstance(a, Failure):
        return Failure(a.failure())
    e = EnvironmentSpec.coerce_optional(environment)
    if isinstance(e, Failure):
        return Failure(e.failure())
    return Success((a.unwrap(), e.unwrap()))


async def provision(
    provider: object,
    agent: AgentSpec | Mapping[str, Any],
    environment: EnvironmentSpec | Mapping[str, Any] | None = None,
    *,
    store: Store | None = None,
    **options: Any,
) -> Result[Any, SessionError]:
    """Create-or-reuse what ``provider`` needs for ``agent`` (in ``environment``).

    Claude Managed Agents → a ``Provisioned`` (agent and environment handles; pass it as both
    ``agent=`` and ``environment=`` to ``run``). Bedrock AgentCore → a ``HarnessHandle`` (pass
    it as ``harness=``); ``execution_role_arn`` is required and ``prefix``, ``endpoint_name``,
    ``timeout`` (default 365 s), ``poll_interval``, ``max_polls``, ``environment_variables``
    and ``extra`` are passed to the harness flow. Local → the ``AgentSpec`` itself (an
    identity handle; nothing is created, stored or sent, and ``options`` are ignored).
    """
    from rma_shell.providers.agentcore import BedrockAgentCore
    from rma_shell.providers.claude import ClaudeManagedAgents
    from rma_shell.providers.local import Local

    if isinstance(provider, Local):
        from rma_shell.providers.local import provisioning as local

        return await local.provision(agent, environment, **options)

    specs = _specs(agent, environment)
    if isinstance(specs, Failure):
        return Failure(specs.failure())
    agent_spec, environment_spec = specs.unwrap()
    chosen = store if store is not None else default_store()
    if isinstance(provider, ClaudeManagedAgents):
        from rma_shell.providers.claude import provisioning as cma

        client = provider.client()
        if isinstance(client, Failure):
            return Failure(client.failure())
        named = _known(options, cma.provision, {"provider_kind", "client", "agent_spec", "environment_spec"})
        if isinstance(named, Failure):
            return named
        return await cma.provision(
            cma.PROVIDER, client.unwrap(), agent_spec, environment_spec, store=chosen, **options
        )
    if isinstance(provider, BedrockAgentCore):
        from rma_shell.providers.agentcore.provisioning import ensure_harness, provision_harness

        renamed = take_renamed(options, ["provision_harness"], where="provision()")
        if isinstance(renamed, Failure):
            return Failure(renamed.failure())
        options = renamed.unwrap()
        named = _known(options, provision_harness, {"client", "agent", "environment"})
        if isinstance(named, Failure):
            return named
        role = options.pop("execution_role_arn", None)
        if not isinstance(role, str):
            return Failure(InvalidOpts(option="execution_role_arn", detail="an IAM role ARN is required"))
        control = await provider.control_client()
        if isinstance(control, Failure):
            return Failure(control.failure())
        return await ensure_harness(
            control.unwrap(), agent_spec, environment_spec, store=chosen, execution_role_arn=role, **options
        )
    return Failure(Unsupported(operation=f"provision on {type(provider).__name__}"))


async def teardown(
    provider: object, handle: Any, *, store: Store | None = None, **options: Any
) -> Result[Any, SessionError]:
    """Release what ``provision`` returned and evict it from the store (V-15). Local releases
    nothing: ``Success(None)``."""
    from rma_shell.providers.agentcore import BedrockAgentCore
    from rma_shell.providers.claude import ClaudeManagedAgents
    from rma_shell.providers.local import Local

    if isinstance(provider, Local):
        from rma_shell.providers.local import provisioning as local

        return await local.teardown(handle, **options)

    chosen = store if store is not None else default_store()
    if isinstance(provider, ClaudeManagedAgents):
        from rma_shell.providers.claude import provisioning as cma

        if options:  # Claude's teardown takes none: refuse rather than ignore them
            return Failure(
                InvalidOpts(option=next(iter(options)), detail="teardown() with Claude takes no options")
            )
        client = provider.client()
        if isinstance(client, Failure):
            return Failure(client.failure())
        return await cma.teardown(client.unwrap(), chosen, handle)
    if isinstance(provider, BedrockAgentCore):
        from rma_shell.providers.agentcore.provisioning import release_harness, teardown_harness

        renamed = take_renamed(options, ["teardown_harness"], where="teardown()")
        if isinstance(renamed, Failure):
            return Failure(renamed.failure())
        options = renamed.unwrap()
        named = _known(options, teardown_harness, {"client", "harness"})
        if isinstance(named, Failure):
            return named

        if not isinstance(handle, HarnessHandle):
            return Failure(
                InvalidOpts(option="handle", detail="a HarnessHandle from provision() is required")
            )
        control = await provider.control_client()
        if isinstance(control, Failure):
            return Failure(control.failure())
        return await release_harness(control.unwrap(), handle, store=chosen, **options)
    return Failure(Unsupported(operation=f"teardown on {type(provider).__name__}"))


def _known(options: Mapping[str, Any], target: Any, positional: set[str]) -> Result[None, InvalidOpts]:
    """``options`` against what ``target`` takes by keyword: a typo is an ``InvalidOpts`` with a
    suggestion, not a ``TypeError`` out of the flow."""
    from rma_shell.options import parameter_names

    accepted = parameter_names(target) - positional
    return check_names(options, accepted, where=f"{target.__module__.rsplit('.', 1)[-1]}.{target.__name__}()")


__all__ = ["default_store", "provision", "teardown"]
