"""The run options are listed once (``rma_shell.run_options``): no entry point's signature
repeats them, each is declared in one place with one default, and the core's names agree."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from rma.session.option_checks import RUN_OPTIONS
from rma_shell import Agent, open_session, resume, resume_session, run, run_or_raise
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.run_options import (
    AGENT_OPTIONS,
    DEFAULTS,
    HANDLER_OPTIONS,
    HOST_RUN_OPTIONS,
    OWN_RUN_OPTIONS,
    AgentOptions,
    HandlerOptions,
    RunOptions,
    typed_options,
)

ENTRY_POINTS: dict[str, tuple[Callable[..., Any], frozenset[str]]] = {
    "run": (run, frozenset(RunOptions.__annotations__)),
    "open_session": (open_session, frozenset(RunOptions.__annotations__)),
    "run_or_raise": (run_or_raise, frozenset(RunOptions.__annotations__)),
    "resume": (resume, HANDLER_OPTIONS),
    "resume_session": (resume_session, HANDLER_OPTIONS),
    "Agent": (Agent.__init__, AGENT_OPTIONS),
}


def own_parameters(fn: Callable[..., Any]) -> set[str]:
    """Its keyword-only parameters: what it takes as options (``resume(journal, key)``'s
    positional subjects are not options)."""
    code = inspect.unwrap(fn).__code__  # the code's own parameters, not the spelled-out signature
    return set(code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount])


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_no_entry_point_repeats_the_option_list_it_takes_them_typed(name: str) -> None:
    fn, expected = ENTRY_POINTS[name]
    assert typed_options(fn) == expected
    # (An Agent's own model, tools and environment are what it declares to every host: not
    # the per-run host options of the same names.)
    repeated = own_parameters(fn) & (OWN_RUN_OPTIONS | (HOST_RUN_OPTIONS if name != "Agent" else set()))
    assert not repeated, f"{name} lists run options in its own signature: {sorted(repeated)}"


@pytest.mark.parametrize("method", ["run", "run_or_raise", "run_sync", "stream", "session", "resume"])
def test_the_agents_methods_take_overrides_not_another_copy_of_the_list(method: str) -> None:
    repeated = own_parameters(getattr(Agent, method)) & (OWN_RUN_OPTIONS - {"timeout"})
    assert not repeated, f"Agent.{method} lists {sorted(repeated)}"


def test_each_option_is_declared_once_with_one_default() -> None:
    own = [
        set(HandlerOptions.__annotations__),
        set(AgentOptions.__annotations__) - set(HandlerOptions.__annotations__),
        set(RunOptions.__annotations__) - set(AgentOptions.__annotations__),
    ]
    assert sum(len(o) for o in own) == len(set().union(*own))
    assert set(DEFAULTS) == OWN_RUN_OPTIONS


def test_the_core_and_the_hosts_agree_with_the_list() -> None:
    assert OWN_RUN_OPTIONS | {"handler", "prompt"} == RUN_OPTIONS
    hosts = set().union(*(h.run_options for h in (Local, ClaudeManagedAgents, BedrockAgentCore)))
    assert hosts - OWN_RUN_OPTIONS == HOST_RUN_OPTIONS


async def test_a_misspelled_option_still_gets_a_suggestion_everywhere() -> None:
    from returns.result import Failure

    from rma.errors import InvalidOpts
    from rma_shell.journal.store import MemoryJournal
    from rma_shell.providers.local import Local

    host = Local(base_url="http://127.0.0.1:9/v1", model="m")
    outcome = await run(host, handler=lambda n, i, c: "x", prompt="p", max_turn=3)  # type: ignore[call-arg]
    assert isinstance(outcome, Failure) and outcome.failure().suggestion == "max_turns"
    resumed = await resume(MemoryJournal(), "k", provider=host, handler=lambda n, i, c: "x", tool_timout=1)  # type: ignore[call-arg]
    assert isinstance(resumed, Failure) and isinstance(resumed.failure(), InvalidOpts)
    assert resumed.failure().suggestion == "tool_timeout"


def test_the_signatures_spell_every_option_out_with_its_default() -> None:
    """For help(), IDEs and the docs: built from the one list, not written again."""
    params = inspect.signature(run).parameters
    assert params["max_turns"].default == 50 and params["timeout"].default == 600
    assert params["max_tool_result_chars"].default == 100_000
    assert params["provider_opts"].kind is inspect.Parameter.VAR_KEYWORD
    assert "timeout" not in inspect.signature(open_session).parameters
    assert set(inspect.signature(resume).parameters) >= HANDLER_OPTIONS
    agent = inspect.signature(Agent.__init__).parameters
    assert agent["max_turns"].default == 50 and "session_id" not in agent
