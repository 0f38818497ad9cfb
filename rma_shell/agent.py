"""``Agent``: an agent configured once — instructions, tools, typed output, limits, durability —
and run on any host by naming the host.

    agent = Agent(instructions="You are a support agent.", tools=[lookup_customer], host=Local(...))
    result = agent.run_sync("Who is ada@example.com?")          # or: await agent.run(...)

The agent declares its instructions and tools to each host itself:

- **Local**: directly, as the run's agent spec (the OpenAI-compatible request carries them).
- **Claude Managed Agents**: through content-addressed provisioning (``rma_shell.provisioning``):
  the same spec is the same agent and environment, reused across runs, and across processes by
  adopting the one the host already lists — never a duplicate.
- **Bedrock AgentCore**: as the harness's per-invoke overrides (system prompt, tools, model),
  with a fresh valid runtime session id per run unless one is given.

Every run goes through the one session entry point (``rma_shell.session.run``/``open_session``,
``rma_shell.resuming.resume``), so its options are checked exactly as there; a misspelled
option is an ``InvalidOpts`` naming it. What this is not: a second session loop, or a place for
host wire details (each provider owns those).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Unpack

import anyio
import attrs
from returns.result import Failure, Result

from rma.errors import InvalidOpts, SessionError
from rma.journal import PendingApproval
from rma.live import LiveUpdate
from rma.session.option_checks import check_names
from rma.vocabulary import SessionResult
from rma_shell.options import kept_aliases, owners_of, refuses_unknown_options, take_renamed
from rma_shell.providers.base import Provider
from rma_shell.results import ok
from rma_shell.run_options import AGENT_OPTIONS, HANDLER_OPTIONS, AgentOptions, spelled_out, split
from rma_shell.session import LiveSession, on_next_driver, open_session, run

RUN_OVERRIDES = frozenset(
    {"host", "context", "session_id", "journal_key", "max_turns", "timeout", "budget", "metadata", "record"}
)
"""What one run may change of an agent (besides its host's own per-run options, such as
``runtime_session_id=`` on AgentCore or ``model_config=`` on Local)."""

LIVE_OVERRIDES = RUN_OVERRIDES - {"timeout"}
"""What a live session may change (a live session has no overall deadline)."""

_UNSET: Any = object()


@attrs.frozen
class RunFinished:
    """The last item of ``Agent.stream``: the run's one result, as ``Agent.run`` returns it."""

    result: Result[SessionResult, SessionError]


class Agent:
    """An agent configured once and run on any host. See the module docstring.

    Args:
        host: where the loop runs (``Local``, ``ClaudeManagedAgents``, ``BedrockAgentCore``);
            may be left out here and given per run (``agent.run(prompt, host=...)``).
        name: the agent's name (the base of its provisioned name on managed hosts).
        instructions: the system prompt.
        model: the model on every host (a Local model id, a Claude model, a Bedrock model id
            or a harness model mapping); None: each host's own (``Local(model=)``,
            ``ClaudeManagedAgents(model=)``, the harness's configured model).
        tools: typed functions (``@tool`` or plain), tool sources (MCP servers), toolboxes,
            and hand-written tool declarations (mappings) answered by ``handler``.
        handler: a raw handler (``handle_tool_call``, or a callable of 3–4 arguments) for the
            declared mappings in ``tools``; functions and sources beside them answer their own.
        output_type: a type the run's answer is validated into (``result.output``).
        environment: the Claude environment spec (default: a cloud sandbox).
        store: where Claude provisioning remembers what it made (default: one in-memory store
            per host; a new process adopts what the host already lists).
        require_approval, at_most_once: tool names whose calls wait for a person / never run
            twice (with ``journal``).
        The rest are ``run``'s options of the same names (docs/options.md).
    """

    @spelled_out()
    @functools.partial(refuses_unknown_options, also=AGENT_OPTIONS)
    def __init__(
        self,
        *,
        host: Provider[Any] | None = None,
        name: str = "agent",
        instructions: str | None = None,
        model: str | Mapping[str, Any] | None = None,
        tools: Sequence[object] = (),
        handler: object = None,
        environment: Any = None,
        store: Any = None,
        require_approval: Collection[str] = (),
        at_most_once: Collection[str] = (),
        **options: Unpack[AgentOptions],
    ) -> None:
        if not isinstance(name, str) or not name:
            raise _invalid("name", f"must be a non-empty string, got {name!r}")
        if instructions is not None and not isinstance(instructions, str):
            raise _invalid("instructions", f"must be a string or None, got {type(instructions).__name__}")
        if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
            raise _invalid("tools", f"must be a list of tools, got {type(tools).__name__}")
        if host is not None and getattr(host, "codec", None) is None:
            raise _invalid(
                "host", f"{type(host).__name__} is not an rma host (Local, ClaudeManagedAgents, …)"
            )
        for option, names in (("require_approval", require_approval), ("at_most_once", at_most_once)):
            if isinstance(names, str):
                raise _invalid(option, "takes a collection of tool names, not a str")
        self.host = host
        self.name = name
        self.instructions = instructions
        self.model = model
        self.output_type = options.get("output_type")
        self.environment = environment
        self.journal = options.get("journal")
        # Imported here: rma_shell.tools needs the tools extra only for typed functions.
        from rma_shell.tools.routing import ToolSet, ToolSetError

        try:
            self._tools = ToolSet.of(
                tools,
                handler,
                require_approval=frozenset(require_approval),
                at_most_once=frozenset(at_most_once),
            )
        except ToolSetError as bad:
            raise _invalid(bad.option, bad.detail) from None
        self._store = store
        self._stores: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        # The agent's run options: the timeout only when given, so a live session (which has
        # none) can take the rest as they are.
        self._options: dict[str, Any] = {**split(options, AGENT_OPTIONS - {"timeout"})[0]}
        if "timeout" in options:
            self._options["timeout"] = options["timeout"]
        self._entered: AsyncExitStack | None = None

    def __repr__(self) -> str:
        host = type(self.host).__name__ if self.host is not None else None
        return f"Agent(name={self.name!r}, host={host}, tools={self._tools.names()!r})"

    # ── lifecycle: tool sources (MCP servers) start once for many runs inside ``async with`` ──

    async def __aenter__(self) -> Agent:
        if self._entered is not None:
            raise RuntimeError("this Agent is already entered")
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            await self._tools.start(stack)
        except BaseException:
            await stack.aclose()
            raise
        self._entered = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._entered = self._entered, None
        if stack is not None:
            await stack.aclose()

    # ── runs ──

    async def run(self, prompt: str | None = None, **overrides: Any) -> Result[SessionResult, SessionError]:
        """Run a session to its end and return its one result (``Success``/``Failure``), as
        ``rma_shell.run`` does. ``overrides``: any of ``RUN_OVERRIDES`` and the host's per-run
        options; anything else is ``Failure(InvalidOpts)`` naming it."""
        try:
            async with self._prepared(prompt, overrides, live=False) as (host, kwargs):
                return await run(host, **kwargs)
        except SessionError as error:  # the one place an agent's run becomes a value
            return Failure(error.with_traceback(None))

    async def run_or_raise(self, prompt: str | None = None, **overrides: Any) -> SessionResult:
        """``run``, raising the ``SessionError`` (an exception) instead of returning a ``Failure``."""
        outcome = await self.run(prompt, **overrides)
        if isinstance(outcome, Failure):
            raise outcome.failure().with_traceback(None)
        return outcome.unwrap()

    def run_sync(self, prompt: str | None = None, **overrides: Any) -> Result[SessionResult, SessionError]:
        """``run`` from synchronous code: a script, a notebook cell, a thread of a sync server.

        Runs its own event loop (asyncio) for the call and closes the host's connections at the
        end, so the next call starts clean. Inside a running event loop it raises
        ``RuntimeError`` (await ``agent.run`` there instead).
        """
        _refuse_in_loop("run_sync", "run")

        async def main() -> Result[SessionResult, SessionError]:
            hosts = {id(h): h for h in (overrides.get("host"), self.host) if h is not None}
            try:
                return await self.run(prompt, **overrides)
            finally:
                with anyio.CancelScope(shield=True):
                    for h in hosts.values():  # its clients belong to this call's loop
                        close = getattr(h, "close", None)
                        if close is not None:
                            await close()

        return anyio.run(main, backend="asyncio")

    def run_sync_or_raise(self, prompt: str | None = None, **overrides: Any) -> SessionResult:
        """``run_sync``, raising the ``SessionError`` instead of returning a ``Failure``."""
        outcome = self.run_sync(prompt, **overrides)
        if isinstance(outcome, Failure):
            raise outcome.failure().with_traceback(None)
        return outcome.unwrap()

    @asynccontextmanager
    async def stream(
        self, prompt: str | None = None, **overrides: Any
    ) -> AsyncIterator[AsyncIterator[LiveUpdate | RunFinished]]:
        """Run a session and read its live updates as they happen (``rma.live``: text deltas,
        tool calls started and finished, turns, discarded attempts), then a ``RunFinished``
        with the run's result, which ends the iteration::

            async with agent.stream("Who is ada@example.com?") as updates:
                async for update in updates:
                    match update:
                        case TextDelta(text=text): print(text, end="")
                        case RunFinished(result=result): ...

        Leaving the block early cancels the run (its host is stopped, as for a cancelled run).
        """
        async with _streamed(lambda: self.run(prompt, **overrides)) as updates:
            yield updates

    @asynccontextmanager
    async def stream_resume(
        self, journal_key: str, *, host: Provider[Any] | None = None, timeout: float | None = _UNSET
    ) -> AsyncIterator[AsyncIterator[LiveUpdate | RunFinished]]:
        """``resume``, read as ``stream`` reads ``run``: the resumed run's live updates (the
        calls approved or carried on, then the turns that follow), then a ``RunFinished``.
        The stream adapters (``rma_shell.ui``) carry a run on this way once a person has
        decided its approvals."""
        async with _streamed(lambda: self.resume(journal_key, host=host, timeout=timeout)) as updates:
            yield updates

    @asynccontextmanager
    async def session(self, prompt: str | None = None, **overrides: Any) -> AsyncIterator[LiveSession]:
        """A live session (``open_session``): follow-ups with ``message``, one result per
        request, live updates. Raises the ``SessionError`` when it cannot start."""
        async with (
            self._prepared(prompt, overrides, live=True) as (host, kwargs),
            open_session(host, **kwargs) as live,
        ):
            yield live

    # ── durable sessions: resume and approvals (needs ``journal=``) ──

    async def resume(
        self, journal_key: str, *, host: Provider[Any] | None = None, timeout: float | None = _UNSET
    ) -> Result[SessionResult, SessionError]:
        """Carry on the run journaled under ``journal_key`` (after a crash, or once its
        approvals are decided) and return its one result, without running a journaled tool
        again (``rma_shell.resume``)."""
        from rma_shell.resuming import resume

        try:
            journal = self._journal("resume")
            chosen = self._host(host)
        except SessionError as error:
            return Failure(error.with_traceback(None))
        kwargs: dict[str, Any] = {k: v for k, v in self._options.items() if k in HANDLER_OPTIONS}
        if timeout is not _UNSET:
            kwargs["timeout"] = timeout
        async with AsyncExitStack() as stack:
            handler, _ = await self._tools.handler(stack, self._entered is not None)
            return await resume(journal, journal_key, provider=chosen, handler=handler, **kwargs)

    def worker(self, *, environment_id: str, workspaces: Any, **options: Any) -> Any:
        """A ``rma_shell.environments.Worker`` serving this agent's sessions on a self-hosted
        Claude environment: the workspace toolset plus this agent's typed functions and tool
        sources, its journal, approvals and run options. ``options``: the ``Worker``'s own
        (``sandbox=``, ``network=``, ``confirm=``, ``max_sessions=``, ``on_event=``, …).

            async with agent.worker(environment_id="env_…", workspaces="/srv/ws") as worker:
                await worker.serve()
        """
        from rma_shell.environments import Worker
        from rma_shell.providers.claude import ClaudeManagedAgents
        from rma_shell.providers.claude.self_hosted import ClaudeSelfHosted

        host = options.pop("host", None) or self.host
        if not isinstance(host, ClaudeManagedAgents):
            raise _invalid(
                "host", "a worker serves a self-hosted Claude environment: give a ClaudeManagedAgents host"
            )
        if self._tools.boxes or self._tools.raw is not None:
            raise _invalid(
                "tools", "a worker takes typed functions and tool sources (not toolboxes or a handler)"
            )
        run_options = {k: v for k, v in self._options.items() if k not in ("journal", "timeout")}
        return Worker(
            environment_id=environment_id,
            workspaces=workspaces,
            host=ClaudeSelfHosted.like(host),
            tools=self._tools.functions,
            require_approval=self._tools.require_approval,
            journal=options.pop("journal", self.journal),
            run_options={**run_options, **options.pop("run_options", {})},
            **options,
        )

    def pending_approvals(self, journal_key: str) -> Result[tuple[PendingApproval, ...], SessionError]:
        """The calls of ``journal_key`` that wait for a person's decision."""
        from rma_shell.resuming import pending_approvals

        try:
            journal = self._journal("pending_approvals")
        except SessionError as error:
            return Failure(error.with_traceback(None))
        return pending_approvals(journal, journal_key)

    def approve(
        self, journal_key: str, tool_use_id: str, decision: str, reason: str | None = None
    ) -> Result[None, SessionError]:
        """Decide a waiting call (``"allow"`` or ``"deny"``); ``resume`` then carries on."""
        from rma_shell.resuming import approve

        try:
            journal = self._journal("approve")
        except SessionError as error:
            return Failure(error.with_traceback(None))
        return approve(journal, journal_key, tool_use_id, decision, reason)  # type: ignore[arg-type]

    # ── what a run is made of ──

    def _journal(self, what: str) -> Any:
        if self.journal is None:
            raise InvalidOpts("journal", f"{what} needs an agent with journal= (docs/durable.md)")
        return self.journal

    def _host(self, given: Provider[Any] | None) -> Provider[Any]:
        host = given if given is not None else self.host
        if host is None:
            raise InvalidOpts("host", "no host: give Agent(host=...) or run(..., host=...)")
        if getattr(host, "codec", None) is None:
            raise InvalidOpts("host", f"{type(host).__name__} is not an rma host")
        return host

    @asynccontextmanager
    async def _prepared(
        self, prompt: str | None, overrides: Mapping[str, Any], *, live: bool
    ) -> AsyncIterator[tuple[Provider[Any], dict[str, Any]]]:
        """The host and ``run``'s keyword arguments for one run, with the tools started for
        its length (unless the agent is entered); raises the ``SessionError`` saying why a run
        cannot start."""
        chosen = self._host(overrides.get("host"))
        own = LIVE_OVERRIDES if live else RUN_OVERRIDES
        accepted = own | frozenset(getattr(chosen, "run_options", ())) | kept_aliases(type(chosen))
        where = f"Agent.{'session' if live else 'run'}()"
        overrides = ok(take_renamed(overrides, owners_of(type(chosen), ".run"), where=where))
        ok(check_names(overrides, accepted, where=f"{where} with {type(chosen).__name__}"))
        kwargs = {k: v for k, v in self._options.items() if not (live and k == "timeout")}
        for key, value in overrides.items():
            if key != "host":
                kwargs[key] = value
        if self.journal is not None:
            kwargs["journal"] = self.journal
        async with AsyncExitStack() as stack:
            try:
                handler, declared = await self._tools.handler(stack, self._entered is not None)
            except SessionError:
                raise
            except Exception as exc:  # two parts declaring one name; a source that cannot start
                bad = getattr(exc, "option", None)
                raise (InvalidOpts(bad, str(exc)) if isinstance(bad, str) else _crashed(exc)) from None
            kwargs["handler"] = handler
            kwargs["prompt"] = prompt
            extra = await self._declare(chosen, declared, kwargs)
            yield chosen, {**kwargs, **extra}

    async def _declare(
        self, host: Provider[Any], declared: list[Any], kwargs: Mapping[str, Any]
    ) -> dict[str, Any]:
        """What tells ``host`` this agent's instructions, tools and model (see the module doc)."""
        from rma.provisioning import AgentSpec
        from rma_shell.providers.agentcore import BedrockAgentCore, new_runtime_session_id
        from rma_shell.providers.claude import ClaudeManagedAgents

        if isinstance(host, BedrockAgentCore):
            extra: dict[str, Any] = {}
            if self.instructions is not None and "system_prompt" not in kwargs:
                extra["system_prompt"] = self.instructions
            if declared and "tools" not in kwargs:
                extra["tools"] = declared
            if self.model is not None and "model" not in kwargs:
                own = self.model
                extra["model"] = {"bedrockModelConfig": {"modelId": own}} if isinstance(own, str) else own
            if kwargs.get("session_id") is None and kwargs.get("runtime_session_id") is None:
                extra["runtime_session_id"] = new_runtime_session_id()
            return extra
        model: Any = self.model if self.model is not None else getattr(host, "model", None)
        if isinstance(host, ClaudeManagedAgents):
            if kwargs.get("session_id") is not None or kwargs.get("agent") or kwargs.get("agent_id"):
                return {}  # a reattach, or the caller's own agent: nothing to declare
            if model is None:
                raise InvalidOpts(
                    "model", "a Claude agent needs a model: Agent(model=) or ClaudeManagedAgents(model=)"
                )
            tools = list(declared)
            if self.output_type is not None:
                from rma_shell.tools.output import output_tool

                tools.append(output_tool(self.output_type))
            spec = ok(
                AgentSpec.create(self.name, system_prompt=self.instructions, tools=tools, model_config=model)
            )
            from rma_shell.provisioning import provision

            handles = ok(await provision(host, spec, self.environment, store=self._store_for(host)))
            return {"agent": handles, "environment": handles}
        if "agent" in kwargs or "agent" not in getattr(host, "run_options", ()):
            return {}  # the caller's own spec, or a host (a scripted one) that takes none
        local_spec = AgentSpec.create(
            self.name,
            system_prompt=self.instructions,
            tools=declared,
            model_config=model if isinstance(model, str | Mapping) else None,
        )
        return {"agent": ok(local_spec)}

    def _store_for(self, host: object) -> Any:
        if self._store is not None:
            return self._store
        # One store per host object, not the process-wide default: two hosts may be two
        # accounts, and an id remembered for one is not valid on the other.
        from rma_shell.stores import MemoryStore

        store = self._stores.get(host)
        if store is None:
            store = self._stores[host] = MemoryStore()
        return store


@asynccontextmanager
async def _streamed(
    start: Callable[[], Awaitable[Result[SessionResult, SessionError]]],
) -> AsyncIterator[AsyncIterator[LiveUpdate | RunFinished]]:
    """The live updates of the run ``start`` begins (its driver is announced through
    ``on_next_driver``), then its ``RunFinished``; leaving early cancels the run."""
    finished = anyio.Event()
    subscribed = anyio.Event()
    box: dict[str, Any] = {}

    def attach(driver: Any) -> None:
        box["updates"] = driver.updates.subscribe()
        subscribed.set()

    async def go() -> None:
        try:
            with on_next_driver(attach):
                box["result"] = await start()
        finally:
            subscribed.set()
            finished.set()

    async def relay() -> AsyncIterator[LiveUpdate | RunFinished]:
        await subscribed.wait()
        updates = box.get("updates")
        if updates is not None:
            async with updates:
                async for update in updates:
                    yield update
        await finished.wait()
        if "result" in box:
            yield RunFinished(box["result"])

    async with anyio.create_task_group() as group:
        group.start_soon(go)
        iterator = relay()
        try:
            yield iterator
        finally:
            await iterator.aclose()  # type: ignore[attr-defined]
            if not finished.is_set():
                group.cancel_scope.cancel()


def _invalid(option: str, detail: str) -> Exception:
    from rma_shell.options import InvalidOptions

    return InvalidOptions(InvalidOpts(option, detail))


def _crashed(exc: Exception) -> SessionError:
    from rma_shell.machinery.driver import crash_error

    return crash_error(exc)


def _refuse_in_loop(name: str, instead: str) -> None:
    import sniffio

    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return
    raise RuntimeError(
        f"Agent.{name}() was called inside a running {library} event loop: await agent.{instead}(...) instead"
    )
