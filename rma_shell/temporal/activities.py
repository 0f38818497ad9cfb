"""The session's I/O as Temporal activities: open, a turn, a tool call, the guard, consolidation.

Each command of the session machine that touches the world runs here, on whichever worker
Temporal hands it to, against the provider, handler and turn guard that worker registered by
name (``Registry``). Inputs and outputs are JSON (the core's values through
``rma.codec_json``), so the workflow history records them verbatim.

Failures that rma already types — a provider error, a refused push, a raising tool — come back
as **values** (a ``Failure`` in the output, an ``is_error`` tool result), never as activity
failures: rma's own rules decide them, and Temporal must not retry them. An activity only
*fails* when its worker dies or a bug escapes; Temporal then retries it on another worker
(bounded by ``Timeouts``). Every activity that can run long heartbeats, so a killed worker is
noticed within ``Timeouts.heartbeat``.

One tool call is one activity: a call whose completion Temporal recorded is never run again,
and a call cut short by a crash is retried with the same ``idempotency_key``
(``"{workflow_id}:{tool_use_id}"``) and the next ``attempt``. Under ``fused_turns`` a batch
and the turn after it are one activity (``rma.fused``, ``rma_shell.temporal.fusing``): retried,
it runs the batch's calls again, each with the same key and the next attempt.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
from returns.result import Failure, Result, Success
from temporalio import activity

from rma import snapshots
from rma.codec_json import from_jsonable, to_jsonable
from rma.errors import InvalidOpts, ProviderError, RemoteStop, SessionError
from rma.provider import Mode
from rma.session.completing import ToolsAnswer, tools_answer
from rma.session.events import GuardVerdict
from rma.session.options import DEFAULT_STOP_GRACE_S, SessionConfig, interpret_guard
from rma.vocabulary import JSON, SessionInfo, ToolResult, ToolUse
from rma_shell.handler import Capabilities, HandlerAdapter, accepts
from rma_shell.journal.writer import INTERRUPTED
from rma_shell.providers.base import OpenRequest, Provider
from rma_shell.temporal import streaming
from rma_shell.temporal.carry import pack_payload, pack_result, unpack_result
from rma_shell.temporal.conns import ConnCache, restore, snapshot
from rma_shell.temporal.fusing import input_digest
from rma_shell.temporal.spec import SessionSpec

log = logging.getLogger("rma.temporal")


@attrs.frozen
class Registry:
    """What a worker can run, by the names a ``SessionSpec`` uses."""

    providers: Mapping[str, Provider[Any]]
    handlers: Mapping[str, object]
    turn_guards: Mapping[str, Callable[[Mapping[str, Any]], Any]] = attrs.field(factory=dict)
    contexts: Mapping[str, object] = attrs.field(factory=dict)
    """Objects handed to tools as ``ctx`` (``run()``'s ``context=``), by the name a spec gives."""


@attrs.define
class _Prepared:
    """A session's static settings on this worker, built once from its spec."""

    provider: Provider[Any]
    handler: object
    config: SessionConfig
    request: OpenRequest
    adapter: HandlerAdapter
    spec: SessionSpec
    context: object = None


def _error(exc: BaseException) -> ProviderError:
    return ProviderError(detail=str(exc)[:2000], error_type=type(exc).__name__)


def _encode(value: Any) -> Any:
    return to_jsonable(value)


@asynccontextmanager
async def _heartbeating(every_s: float) -> AsyncIterator[Callable[[], None]]:
    """Heartbeat every ``every_s`` while the body runs (the body may beat more often)."""

    def beat() -> None:
        activity.heartbeat()

    async def ticker() -> None:
        # The first beat after an interval, not at the start: the heartbeat timeout runs from
        # the start anyway, and an activity that ends sooner (most of them) then costs the
        # server no heartbeat call at all (issue #28).
        while True:
            await anyio.sleep(every_s)
            beat()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ticker)
        try:
            yield beat
        finally:
            tasks.cancel_scope.cancel()


Act = Callable[[Any, dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]


def _beating(fn: Act) -> Act:
    """Run the activity under a heartbeat ticker (``Timeouts.heartbeat`` / 4)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, inp: dict[str, Any]) -> dict[str, Any]:
        inp = unpack_result(inp)  # a long input comes compressed, as a long output leaves
        info = activity.info()
        if info.is_local:  # no heartbeats: its workflow task's timeout rules
            out = await fn(self, inp)
        else:
            recorded = inp["spec"].get("timeouts", {})  # the recorded keys (Timeouts.to_json)
            every = max(0.05, float(recorded.get("heartbeat_s", 10.0)) / 4)
            async with _heartbeating(every):
                out = await fn(self, inp)
        return pack_payload(out, f"{info.activity_type}'s output")

    return wrapper


class Activities:
    """The activities of ``rma.session`` workflows, bound to one worker's registry."""

    def __init__(self, registry: Registry, *, cache_size: int = 4096) -> None:
        self.registry = registry
        self.conns = ConnCache(cache_size)
        self._prepared: OrderedDict[str, _Prepared] = OrderedDict()
        self._cache_size = cache_size

    def definitions(self) -> list[Callable[..., Any]]:
        """The activity callables to hand to ``temporalio.worker.Worker(activities=...)``."""
        return [
            self.open,
            self.poll,
            self.exchange,
            self.push,
            self.resync,
            self.tool,
            self.fused,
            self.confirm,
            self.guard,
            self.transcript,
            self.stop,
        ]

    # ── the session's settings and connection on this worker ──

    def _prepare(self, key: str, spec_json: Mapping[str, Any], scope: str) -> Result[_Prepared, SessionError]:
        known = self._prepared.get(key)
        if known is not None:
            self._prepared.move_to_end(key)
            return Success(known)
        spec = SessionSpec.from_json(spec_json)
        provider = self.registry.providers.get(spec.provider)
        if provider is None:
            return Failure(InvalidOpts("provider", f"this worker registered no provider {spec.provider!r}"))
        handler = self.registry.handlers.get(spec.handler)
        if handler is None:
            return Failure(InvalidOpts("handler", f"this worker registered no handler {spec.handler!r}"))
        guard = None
        if spec.turn_guard is not None:
            guard = self.registry.turn_guards.get(spec.turn_guard)
            if guard is None:
                return Failure(
                    InvalidOpts("turn_guard", f"this worker registered no turn guard {spec.turn_guard!r}")
                )
        context = None
        if spec.context is not None:
            if spec.context not in self.registry.contexts:
                return Failure(InvalidOpts("context", f"this worker registered no context {spec.context!r}"))
            context = self.registry.contexts[spec.context]
        # run()'s own checks and defaults, so a session means the same under Temporal.
        from rma_shell.run_options import OWN_RUN_OPTIONS, split
        from rma_shell.session import prepare_driver

        given = {
            "max_turns": spec.max_turns,
            "timeout": spec.timeout,
            "turn_guard": guard,
            "require_terminal_tool": spec.require_terminal_tool,
            "terminal_tool": spec.terminal_tool,
            "max_reprompts": spec.max_reprompts,
            "outcome": spec.outcome,
            "budget": spec.budget,
            "session_id": spec.session_id,
            "metadata": spec.metadata,
            "model_config": spec.model_config,
            "max_concurrency": spec.max_concurrency,
            "tool_timeout": spec.tool_timeout,
            "max_tool_result_chars": spec.max_tool_result_chars,
            "stop_grace": spec.stop_grace,
            "context": context,
        }
        options, _ = split(given, OWN_RUN_OPTIONS)
        try:
            driver = prepare_driver(
                provider,
                live=spec.live,
                handler=handler,
                prompt=spec.prompt,
                options=options,
                provider_opts=dict(spec.provider_opts),
                approvals_elsewhere=True,  # a call waiting for a person waits in the workflow
            )
        except SessionError as error:  # an activity's answer is a value, as run()'s is
            return Failure(error.with_traceback(None))
        adapter = driver.tools
        adapter.key_scope = scope
        # Observers run nowhere under Temporal (see docs/temporal.md): the workflow asks for
        # no deliveries, so the machine builds none.
        config = attrs.evolve(driver.config, deliver_events=False, deliver_updates=False)
        out = _Prepared(provider, handler, config, driver.opts.open_request, adapter, spec, context)
        self._prepared[key] = out
        while len(self._prepared) > self._cache_size:
            self._prepared.popitem(last=False)
        return Success(out)

    async def _conn(self, p: _Prepared, key: str, snap: Any, version: int) -> Result[Any, SessionError]:
        conn = self.conns.get(key, version)
        if conn is not None:
            return Success(conn)
        try:
            restored = await restore(p.provider, p.request, snap)
        except Exception as exc:
            return Failure(_error(exc))
        if isinstance(restored, Success):
            await self.conns.put(key, version, p.provider, restored.unwrap(), snap, _size(snap))
        return restored

    def _lacks_snap(self, inp: Mapping[str, Any]) -> dict[str, Any] | None:
        """``{"need_snap": …}`` when the workflow sent its snapshot by reference (``snap_ref``)
        and this worker does not hold that version: the workflow sends it again, inline."""
        if inp.get("snap_ref") and self.conns.get(inp["key"], inp["version"]) is None:
            return {"need_snap": True, "attempt": activity.info().attempt}
        return None

    async def _session(self, inp: Mapping[str, Any]) -> Result[tuple[_Prepared, Any], SessionError]:
        key = inp["key"]
        prepared = self._prepare(key, inp["spec"], inp["scope"])
        if isinstance(prepared, Failure):
            return Failure(prepared.failure())
        p = prepared.unwrap()
        conn = await self._conn(p, key, inp["snap"], inp["version"])
        if isinstance(conn, Failure):
            return Failure(conn.failure())
        return Success((p, conn.unwrap()))

    async def _changed(self, inp: Mapping[str, Any], p: _Prepared, conn: Any) -> dict[str, Any]:
        """What changed in the conn's snapshot when an activity changed it (``snap_delta``,
        ``rma.snapshots.delta``: a Local turn records the messages it added, not the whole
        conversation again) and about how large it now is (``snap_bytes``); the conn cached
        under the next version. Nothing when nothing changed."""
        snap = snapshot(p.provider, conn)
        held = self.conns.entry(inp["key"], inp["version"])
        old, size = (held.snap, held.size) if held is not None else (inp.get("snap"), _size(inp.get("snap")))
        delta = snapshots.delta(old, snap)  # O(what the turn added): the logs are views
        if not snapshots.changed(delta):
            return {}
        size += len(json.dumps(delta))
        await self.conns.put(inp["key"], inp["version"] + 1, p.provider, conn, snap, size)
        return {"snap_delta": delta, "snap_bytes": size}

    # ── activities ──

    @activity.defn(name="rma.open")
    @_beating
    async def open(self, inp: dict[str, Any]) -> dict[str, Any]:
        """Validate the run's options (as ``run()`` does) and open the provider's session."""
        prepared = self._prepare(inp["key"], inp["spec"], inp["scope"])
        if isinstance(prepared, Failure):
            return {"outcome": _encode(Failure(prepared.failure()))}
        p = prepared.unwrap()
        try:
            opened = await p.provider.open(p.request)
        except Exception as exc:  # S-14: the provider's own error
            opened = Failure(_error(exc))
        if isinstance(opened, Failure):
            return {"outcome": _encode(Failure(opened.failure()))}
        conn = opened.unwrap()
        snap = snapshot(p.provider, conn)
        sent = snapshots.plain(snap)  # Temporal's converter knows no logs
        size = _size(sent)
        await self.conns.put(inp["key"], 0, p.provider, conn, snap, size)
        body = {
            "session_id": p.provider.session_id(conn),
            "resumed": p.provider.resumed(conn),
            "config": to_jsonable(p.config),
            "snap": sent,
            "snap_bytes": size,
            "has_transcript": type(p.provider).transcript is not Provider.transcript,
            "streaming": p.config.codec.mode is Mode.STREAMING,
            # Tools the workflow never runs as local activities (a retry there starts at attempt 1).
            "at_most_once": sorted(_at_most_once(p.handler)),
        }
        return {"outcome": {"$ok": None}, "opened": body}

    @activity.defn(name="rma.poll")
    @_beating
    async def poll(self, inp: dict[str, Any]) -> dict[str, Any]:
        """One request/response turn (``PollTurn``): the turn's events, or its error."""
        lacking = self._lacks_snap(inp)
        if lacking is not None:
            return lacking
        return await self._poll(inp, from_jsonable(inp["input"]))

    async def _poll(self, inp: Mapping[str, Any], input: JSON) -> dict[str, Any]:
        session = await self._session(inp)
        if isinstance(session, Failure):
            return {"result": _encode(Failure(session.failure())), "snap": None}
        p, conn = session.unwrap()
        try:
            polled = await p.provider.poll_turn(conn, input, None)
        except Exception as exc:  # S-22: a raising poll is a provider error
            return {"result": _encode(Failure(_error(exc))), "snap": None}
        return {"result": _encode(polled.result), **await self._changed(inp, p, polled.conn)}

    @activity.defn(name="rma.exchange")
    @_beating
    async def exchange(self, inp: dict[str, Any]) -> dict[str, Any]:
        """One streaming turn (``PushInput``): post, read to the turn boundary."""
        lacking = self._lacks_snap(inp)
        if lacking is not None:
            return lacking
        return await self._exchange(inp, from_jsonable(inp["input"]))

    async def _exchange(self, inp: Mapping[str, Any], input: JSON) -> dict[str, Any]:
        session = await self._session(inp)
        if isinstance(session, Failure):
            return {"push": _encode(Failure(session.failure())), "events": [], "end": None, "snap": None}
        p, conn = session.unwrap()
        # A first attempt after one that found no snapshot here is a retry all the same. A local
        # activity cannot tell: one replayed on another worker after its worker died starts at
        # attempt 1 again. So a local turn always asks the host first whether its input already
        # landed (one history listing) and never posts twice — except the first turn of a
        # reattached session (not ``fresh``), whose listing holds earlier requests' inputs and
        # no boundary of ours to read it from yet.
        info = activity.info()
        retried = (
            info.attempt > 1
            or int(inp.get("after_attempt") or 1) > 1
            or (info.is_local and (inp.get("after") is not None or bool(inp.get("fresh"))))
        )
        beat = _beat
        try:
            pushed, read, conn = await streaming.exchange(
                p.provider,
                conn,
                input,
                inp.get("after"),
                retried=retried,
                beat=beat,
                after_at=inp.get("after_at"),
            )
        except Exception as exc:
            pushed, read = Failure(_error(exc)), streaming.Read((), None)
        return {
            "push": _encode(pushed),
            "events": _encode(list(read.events)),
            "end": None if read.end is None else _encode(read.end),
            **await self._changed(inp, p, conn),
        }

    @activity.defn(name="rma.push")
    @_beating
    async def push(self, inp: dict[str, Any]) -> dict[str, Any]:
        """A push that starts no turn: ``send_event``'s raw events."""
        lacking = self._lacks_snap(inp)
        if lacking is not None:
            return lacking
        session = await self._session(inp)
        if isinstance(session, Failure):
            return {"outcome": _encode(Failure(session.failure()))}
        p, conn = session.unwrap()
        try:
            pushed = await p.provider.push_input(conn, from_jsonable(inp["input"]))
        except Exception as exc:
            pushed = Failure(_error(exc))
        return {"outcome": _encode(pushed)}

    @activity.defn(name="rma.resync")
    @_beating
    async def resync(self, inp: dict[str, Any]) -> dict[str, Any]:
        """The machine's ``Reconnect``: consolidate (and read on, for a running remote turn)."""
        lacking = self._lacks_snap(inp)
        if lacking is not None:
            return lacking
        session = await self._session(inp)
        if isinstance(session, Failure):
            return {"outcome": _encode(Failure(session.failure())), "events": [], "end": None, "snap": None}
        p, conn = session.unwrap()
        streaming_mode = p.config.codec.mode is Mode.STREAMING
        beat = _beat
        try:
            found, read, conn = await streaming.resync(
                p.provider, conn, tuple(inp["seen"]), streaming=streaming_mode, beat=beat
            )
        except Exception as exc:
            found, read = Failure(_error(exc)), streaming.Read((), None)
        return {
            "outcome": _encode(found),
            "events": _encode(list(read.events)),
            "end": None if read.end is None else _encode(read.end),
            **await self._changed(inp, p, conn),
        }

    @activity.defn(name="rma.tool")
    @_beating
    async def tool(self, inp: dict[str, Any]) -> dict[str, Any]:
        """One tool call, through the same ``HandlerAdapter`` as ``run()`` (results alike)."""
        prepared = self._prepare(inp["key"], inp["spec"], inp["scope"])
        use: ToolUse = from_jsonable(inp["use"])
        if isinstance(prepared, Failure):
            text = f"tool error: the worker cannot run this session: {prepared.failure().message}"
            return {"result": _encode(ToolResult(use.id, text, True))}
        p = prepared.unwrap()
        info = SessionInfo(
            provider=p.config.provider_name, metadata=p.config.metadata, session_id=inp.get("session_id")
        )
        if not inp.get("approved") and await self._needs_approval(p, use, info):
            return {"needs_approval": True}
        attempt = activity.info().attempt  # a retry after a lost worker: 2, 3, …
        if attempt > 1 and use.name in _at_most_once(p.handler):
            # An earlier attempt may have started the body: an at-most-once tool is not run again.
            return {"result": _encode(ToolResult(use.id, INTERRUPTED.format(name=use.name), True))}
        if use.id is not None:
            p.adapter.attempts[use.id] = attempt
        result = await p.adapter.run_one(use, info)
        return {"result": _encode(result)}

    @activity.defn(name="rma.fused")
    @_beating
    async def fused(self, inp: dict[str, Any]) -> dict[str, Any]:
        """A tool batch and the model turn after it, in one activity (``SessionSpec.fused_turns``).

        The calls run as ``rma.tool`` runs them (the approval question first, then the same
        ``HandlerAdapter``: its ``max_concurrency``, truncation, idempotency key and attempt);
        a call that waits for a person comes back unanswered (None), and then nothing more
        runs here. Once every call has its result, the turn runs with the input the machine
        will send — ``rma.session.completing.tools_answer`` over the batch's facts the workflow
        gave (``answer_uses``: the batch's uses, the rejected ones too) — as ``rma.poll`` or
        ``rma.exchange`` runs it, and that input's ``digest`` goes back with it: the workflow
        takes the turn's outcome only when the machine's own next input has the same one.
        ``rerun_safe``: the host keeps nothing of a turn beyond the snapshot (Local), so a
        turn the workflow does not take may simply be asked again."""
        lacking = self._lacks_snap(inp)
        if lacking is not None:
            return lacking
        uses: list[ToolUse] = from_jsonable(inp["uses"])
        prepared = self._prepare(inp["key"], inp["spec"], inp["scope"])
        if isinstance(prepared, Failure):
            text = f"tool error: the worker cannot run this session: {prepared.failure().message}"
            return {"results": _encode([ToolResult(u.id, text, True) for u in uses])}
        p = prepared.unwrap()
        info = SessionInfo(
            provider=p.config.provider_name, metadata=p.config.metadata, session_id=inp.get("session_id")
        )
        asks = [await self._needs_approval(p, use, info) for use in uses]
        attempt = activity.info().attempt  # a retry after a lost worker: 2, 3, … for every call
        runnable = [use for use, ask in zip(uses, asks, strict=True) if not ask]
        for use in runnable:
            if use.id is not None:
                p.adapter.attempts[use.id] = attempt
        ran = iter(await p.adapter.run_batch(runnable, info))
        results = [None if ask else next(ran) for ask in asks]
        out: dict[str, Any] = {"results": _encode(results)}
        if any(asks):
            return {**out, "needs_approval": True}
        done = [r for r in results if r is not None]
        answer = tools_answer(p.config, from_jsonable(inp["answer_uses"]), (), done, ())
        if not isinstance(answer, ToolsAnswer):  # the request ends instead: the machine says how
            return out
        sent = to_jsonable(answer.input)
        request_response = p.config.codec.mode is Mode.REQUEST_RESPONSE
        turn_input = from_jsonable(sent)  # exactly what a turn activity would be handed
        turn = await (self._poll(inp, turn_input) if request_response else self._exchange(inp, turn_input))
        # A host whose model keeps nothing between requests (``Provider.turn_in_doubt``'s default,
        # which a journal's resume reads the same way: asking a turn again is safe there).
        rerun_safe = request_response and type(p.provider).turn_in_doubt is Provider.turn_in_doubt
        return {**out, "digest": input_digest(sent), "turn": turn, "rerun_safe": rerun_safe}

    async def _needs_approval(self, p: _Prepared, use: ToolUse, info: SessionInfo) -> bool:
        """The handler's ``requires_approval(name, input, ctx[, info])`` — what a ``Toolbox``
        or a ``@tool(requires_approval=…)`` answers — as a journaled run asks it."""
        caps = Capabilities.of(p.handler)
        ask = caps.requires_approval if caps is not None else None
        if ask is None:
            return False
        args: tuple[Any, ...] = (use.name, dict(use.input), p.context)
        try:
            value = ask(*args, info) if accepts(ask, 4) else ask(*args)
            if inspect.isawaitable(value):
                value = await value
        except Exception:  # undecidable: a person decides, the call is not run unasked
            log.exception("requires_approval raised; %s waits for approval", use.name)
            return True
        return bool(value)

    @activity.defn(name="rma.confirm")
    @_beating
    async def confirm(self, inp: dict[str, Any]) -> dict[str, Any]:
        """Host-run calls awaiting allow/deny: the handler's ``confirm_tool_use``."""
        prepared = self._prepare(inp["key"], inp["spec"], inp["scope"])
        uses: list[ToolUse] = from_jsonable(inp["uses"])
        if isinstance(prepared, Failure):
            denied = [ToolResult(u.id, f"denied: {prepared.failure().message}", True) for u in uses]
            return {"verdicts": _encode(denied)}
        p = prepared.unwrap()
        if not callable(getattr(p.handler, "confirm_tool_use", None)):
            return {"needs_approval": True}  # nobody here decides: a person will (the host waits)
        info = SessionInfo(
            provider=p.config.provider_name, metadata=p.config.metadata, session_id=inp.get("session_id")
        )
        verdicts = await p.adapter.confirm_batch(uses, info)
        return {"verdicts": _encode(list(verdicts))}

    @activity.defn(name="rma.guard")
    @_beating
    async def guard(self, inp: dict[str, Any]) -> dict[str, Any]:
        """The turn guard (``CallGuard``): its verdict, a raising guard a typed failure (S-43)."""
        prepared = self._prepare(inp["key"], inp["spec"], inp["scope"])
        if isinstance(prepared, Failure):
            failed = GuardVerdict("failed", error_type="InvalidOpts", detail=prepared.failure().message)
            return {"verdict": _encode(failed)}
        p = prepared.unwrap()
        guard = self.registry.turn_guards.get(p.spec.turn_guard or "")
        payload = from_jsonable(inp["payload"])
        try:
            assert guard is not None
            value = guard(dict(payload))
            if inspect.isawaitable(value):
                value = await value
            verdict = interpret_guard(value)
        except Exception as exc:
            verdict = GuardVerdict("failed", error_type=type(exc).__name__, detail=str(exc)[:2000])
        return {"verdict": _encode(verdict)}

    @activity.defn(name="rma.transcript")
    @_beating
    async def transcript(self, inp: dict[str, Any]) -> dict[str, Any]:
        """The provider's transcript of the session (``SessionResult.transcript``)."""
        lacking = self._lacks_snap(inp)
        if lacking is not None:
            return lacking
        session = await self._session(inp)
        if isinstance(session, Failure):
            return {"transcript": None}
        p, conn = session.unwrap()
        value = p.provider.transcript(conn)
        # One payload, like the result it goes into: a long one leaves compressed.
        return {"transcript": None if value is None else pack_result(list(value))}

    @activity.defn(name="rma.stop")
    @_beating
    async def stop(self, inp: dict[str, Any]) -> dict[str, Any]:
        """Stop the host's loop (``Provider.stop_remote``), as ``run()`` does when it times out
        or is cancelled mid-request: bounded by the spec's ``stop_grace`` from the activity's
        start, reattaching included (the workflow waits no longer either); what came of it."""
        grace = float(inp["spec"].get("stop_grace") or DEFAULT_STOP_GRACE_S)
        outcome: RemoteStop = "unconfirmed"
        detail: str | None = f"no confirmation within {grace}s"
        with anyio.move_on_after(grace):
            session = await self._session(inp)
            if isinstance(session, Failure):
                return {"remote_stop": "failed", "detail": session.failure().message[:500]}
            p, conn = session.unwrap()
            try:
                stopped = await p.provider.stop_remote(conn)
            except Exception as exc:  # a provider bug costs the stop, never the session's result
                outcome, detail = "failed", f"{type(exc).__name__}: {exc}"[:500]
            else:
                if isinstance(stopped, Success):
                    outcome, detail = stopped.unwrap().outcome, stopped.unwrap().detail
                else:
                    outcome, detail = "failed", stopped.failure().message[:500]
        level = logging.INFO if outcome in ("confirmed", "not_needed") else logging.WARNING
        log.log(level, "stopping the host's loop: %s%s", outcome, f" ({detail})" if detail else "")
        return {"remote_stop": outcome, "detail": detail}


def _size(snap: JSON) -> int:
    """About how large a plain snapshot (one a payload carries) is, as JSON."""
    return 0 if snap is None else len(json.dumps(snap))


def _beat() -> None:
    """Heartbeat a regular activity; a local one has none (its workflow task's timeout rules)."""
    if not activity.info().is_local:
        activity.heartbeat()


def _at_most_once(handler: object) -> Collection[str]:
    """The tools a ``Toolbox(at_most_once=…)`` (or any handler's ``at_most_once``) names."""
    caps = Capabilities.of(handler)
    return caps.at_most_once if caps is not None else frozenset()
