"""The run options, listed once: their names, types and defaults, for every entry point.

``run``, ``open_session``, ``run_or_raise`` take ``**options: Unpack[RunOptions]``; ``resume`` and
``resume_session`` take ``**options: Unpack[HandlerOptions]``; an ``Agent`` holds
``AgentOptions``. Each option is declared in exactly one of ``HandlerOptions`` <
``AgentOptions`` < ``OneRunOptions`` (each extends the one before), with its default in
``DEFAULTS``; ``RunOptions`` adds the hosts' per-run options (``HOST_RUN_OPTIONS``, derived,
checked against the host the run uses). ``split`` sorts a call's keyword arguments into rma's
own, with their defaults, and the host's. ``tests/test_run_options.py`` checks that no entry
point's signature repeats an option and that ``RUN_OPTIONS`` (the core's names) agrees.

What this is not: the values' checks (``rma.session.options.validate`` and the shell's
``prepare_driver``), nor the checks of names a host takes (``rma_shell.options``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypedDict, TypeVar

from rma.session.options import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_REPROMPTS,
    DEFAULT_MAX_TURNS,
    DEFAULT_STOP_GRACE_S,
    DEFAULT_TIMEOUT_S,
)
from rma.vocabulary import JSON, Budget
from rma_shell.handler import DEFAULT_MAX_RESULT_CHARS
from rma_shell.recording import Recordable
from rma_shell.telemetry import Telemetry


class HandlerOptions(TypedDict, total=False):
    """How tools run and a call is bounded: what a run and a resumed run both take."""

    context: object
    """Handed to every handler call as ``ctx``, as is (default None)."""
    turn_guard: Callable[[Mapping[str, Any]], Any] | None
    """Called after every turn with its usage; returns ``CONTINUE`` or ``Halt(reason)``."""
    timeout: float | None
    """Seconds for the whole run (default 600; None: no limit). Not on a live session."""
    stop_grace: float
    """Seconds stopping the host's loop may take once rma stops driving a request in flight
    (default 1.0): a timed-out run returns within ``timeout + stop_grace``."""
    max_concurrency: int
    """Tool calls of one turn run at once (default 8)."""
    telemetry: Telemetry | None
    """Where the run's telemetry goes (default: the process-wide ``rma_shell.telemetry``)."""
    output_type: Any
    """A typed final answer (a Pydantic model, dataclass, TypedDict, …): ``result.output``."""
    tool_timeout: float | None
    """Seconds each tool call may take; past it the model gets an error result."""
    max_tool_result_chars: int | None
    """Cap on one tool result sent back, marked ``[truncated: …]`` (default 100,000)."""
    model_config: Mapping[str, Any] | None
    """Per-run model settings where the host picks a model per run (Local: model, URL, key)."""


class AgentOptions(HandlerOptions, total=False):
    """What does not change between an agent's runs (besides its instructions and tools)."""

    max_turns: int
    """Turns the session may drive (default 50); never exceeded."""
    require_terminal_tool: bool
    """The session must end through ``terminal_tool`` (re-prompted up to ``max_reprompts``)."""
    terminal_tool: str | None
    """The tool whose call ends the session."""
    max_reprompts: int
    """Re-prompts when the model stops without the terminal tool (default 2)."""
    outcome: Any
    """An outcome the host evaluates (Claude Managed Agents)."""
    budget: Budget | Mapping[str, Any] | None
    """A spending limit the host enforces (Claude Managed Agents)."""
    metadata: Mapping[str, JSON] | None
    """Labels for the session: its telemetry, logs and result, and the host's session where
    sessions carry metadata (Claude: string values)."""
    journal: Any
    """A ``JournalStore`` or an SQLite path: the session is written durably as it goes."""


class OneRunOptions(AgentOptions, total=False):
    """What one run adds: which session, its journal name, its recording."""

    session_id: str | None
    """Reattach to this session instead of starting one."""
    journal_key: str | None
    """The session's name in the journal (required with ``journal``; new)."""
    record: Recordable
    """A path or text stream for a replayable JSON-lines log."""


class RunOptions(OneRunOptions, total=False):
    """A run's options and the hosts' own per-run options (the union of the hosts'
    ``run_options``; a test keeps them equal), passed to the run's host and checked against it."""

    agent: Any
    agent_id: str
    environment: Any
    environment_id: str
    title: str
    resources: Any
    vault_ids: Any
    initial_events: Any
    history: Any
    context_window: int
    runtime_session_id: str
    harness_arn: str
    harness: Any
    endpoint_name: str
    user_id: str
    invoke_timeout: int
    max_iterations: int
    max_tokens: int
    model: Any
    system_prompt: Any
    tools: Any
    skills: Any
    allowed_tools: Any
    actor_id: str


HOST_RUN_OPTIONS = frozenset(RunOptions.__annotations__) - frozenset(OneRunOptions.__annotations__)
"""The names in ``RunOptions`` that belong to a host."""

HANDLER_OPTIONS = frozenset(HandlerOptions.__annotations__)
AGENT_OPTIONS = frozenset(AgentOptions.__annotations__)
OWN_RUN_OPTIONS = frozenset(OneRunOptions.__annotations__)
"""rma's own run options (without the host's): ``run``'s, besides ``handler`` and ``prompt``."""

DEFAULTS: Mapping[str, Any] = {
    "context": None,
    "turn_guard": None,
    "timeout": DEFAULT_TIMEOUT_S,
    "stop_grace": DEFAULT_STOP_GRACE_S,
    "max_concurrency": DEFAULT_MAX_CONCURRENCY,
    "telemetry": None,
    "output_type": None,
    "tool_timeout": None,
    "max_tool_result_chars": DEFAULT_MAX_RESULT_CHARS,
    "model_config": None,
    "max_turns": DEFAULT_MAX_TURNS,
    "require_terminal_tool": False,
    "terminal_tool": None,
    "max_reprompts": DEFAULT_MAX_REPROMPTS,
    "outcome": None,
    "budget": None,
    "metadata": None,
    "journal": None,
    "session_id": None,
    "journal_key": None,
    "record": None,
}
"""Every rma option's default (``OWN_RUN_OPTIONS`` exactly: a test keeps them equal)."""


def split(given: Mapping[str, Any], own: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``given`` as (rma's options among ``own``, each defaulted; everything else, for the
    host's checks: its per-run options, renamed old names, misspellings)."""
    mine = {name: DEFAULTS[name] for name in own}
    rest: dict[str, Any] = {}
    for name, value in given.items():
        if name in own:
            mine[name] = value
        else:
            rest[name] = value
    return mine, rest


def typed_options(fn: Callable[..., Any]) -> frozenset[str]:
    """The option names ``fn``'s ``**options: Unpack[SomeOptions]`` takes (empty without one)."""
    typed = _typed_dict(fn)
    return frozenset(typed.__annotations__) if typed is not None else frozenset()


def _typed_dict(fn: Callable[..., Any]) -> Any:
    import inspect
    import typing

    target = inspect.unwrap(fn)
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception:  # an annotation that does not resolve: nothing typed to report
        return None
    for hint in hints.values():
        if typing.get_origin(hint) is typing.Unpack:
            return typing.get_args(hint)[0]
    return None


F = TypeVar("F", bound=Callable[..., Any])


def spelled_out(*, host_options: bool = False, without: frozenset[str] = frozenset()) -> Callable[[F], F]:
    """Decorate an entry point taking ``**options: Unpack[...]``: its ``__signature__`` lists
    each option as a keyword parameter with its default (and ``**provider_opts`` for the host's
    options), built from the one list — so ``inspect.signature``, ``help()`` and the docs show
    them, while the code declares none of them again."""
    import inspect

    def decorate(fn: F) -> F:
        typed = _typed_dict(fn)
        if typed is None:
            raise TypeError(f"{fn.__qualname__} takes no **options: Unpack[...]")
        own = inspect.signature(fn)
        kept = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        hints = typed.__annotations__
        names = [n for n in hints if n not in HOST_RUN_OPTIONS and n not in without]
        spelled = [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=DEFAULTS.get(n), annotation=hints[n])
            for n in names
        ]
        tail = [inspect.Parameter("provider_opts", inspect.Parameter.VAR_KEYWORD, annotation=Any)]
        fn.__signature__ = own.replace(parameters=[*kept, *spelled, *(tail if host_options else [])])  # type: ignore[attr-defined]
        return fn

    return decorate
