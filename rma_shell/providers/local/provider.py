"""The Local provider's transport: one chat-completions call per turn, on anyio.

``Local(...)`` pairs the pure ``rma.providers.local.codec`` codec and conversation with the I/O
they need: it POSTs the body ``prepare_request`` built to ``{base_url}/chat/completions``
(plain JSON, or SSE when ``stream=True``, decoded with ``rma.wire.sse`` and assembled with
``rma.wire.openai_chat.ChunkAssembler``), retries transient failures as ``rma.retry``
decides, and hands the decoded response back to ``apply_response``. The provider's own
connections are lean h11 lanes (``rma_shell.transport.lean_http``; httpx lanes when the environment
sets a proxy); a caller's ``http_client`` is used as it is. A pluggable ``chat``
callable replaces the HTTP call for any gateway or SDK.

It makes no loop decisions. With ``stream=True`` every decoded chunk goes to the session at
once through ``poll_turn``'s ``live`` (``rma.providers.local.stream``: text and tool-call
argument deltas), and so do the turn's own events when the reply is whole (marked
``streamed``), so each reaches ``handle_event`` once (E-5). An attempt that streamed something
and then failed — retried or not — is followed by an ``rma.attempt_discarded`` event. Without
``stream`` events are returned in batch and the delta granularity is the whole reply (E-10). A
failed poll returns the conn it was given, unchanged, so nothing of a failed attempt leaks into
the history. Cancelling the caller's cancel scope aborts an in-flight request.

Over 800 lines (831) for now: the provider's open, snapshot/restore and its one request path
(retries, streamed and whole replies, the lean lanes or a caller's client) share ``LocalConn``
and the provider's settings; the request path is the part that could become a module of its own.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import random
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import attrs
import httpx
from returns.result import Failure, Result, Success

from rma._persistent import GrowOnlySet
from rma.errors import (
    AuthenticationError,
    HttpError,
    InvalidOpts,
    MalformedResponse,
    SessionError,
    StreamDropped,
    TransportError,
    error_text,
)
from rma.live import attempt_discarded_event
from rma.origin import error_code, request_id, undialable, with_origin
from rma.provider import Input
from rma.providers.local.codec import (
    CODEC,
    Conversation,
    LocalCodec,
    apply_input,
    apply_response,
    prepare_request,
    request_body,
    start,
    transcript,
)
from rma.providers.local.stream import StreamedReply
from rma.provisioning.spec import AgentSpec, EnvironmentSpec
from rma.redact import redact_error, redact_text
from rma.retry import is_transient_error, next_delay_s
from rma.session.option_checks import check_count, check_seconds, check_url
from rma.vocabulary import JSON
from rma.wire.sse import SSEDecoder
from rma_shell.logging import log_fields
from rma_shell.options import refuses_unknown_options
from rma_shell.providers.base import LiveSink, OpenRequest, PollOutcome, Provider
from rma_shell.providers.local.pool import (
    DEFAULT_MAX_CONNECTIONS,
    LocalPool,
    SlotTimeout,
    check_max_connections,
)
from rma_shell.seams import Seams, pick
from rma_shell.telemetry import Telemetry
from rma_shell.telemetry import default as default_telemetry
from rma_shell.transport.http import (
    env_proxies,
    host_of,
    of_another_loop,
    running_loop,
    same_origin,
    shared_ssl_context,
)
from rma_shell.transport.lean_http import LeanPool, Timeouts
from rma_shell.transport.lean_http import PoolTimeout as LanePoolTimeout
from rma_shell.transport.lean_http import Response as LeanResponse

logger = logging.getLogger("rma.providers.local")

DEFAULT_BASE_URL = "http://localhost:11434/v1"
"""Ollama's OpenAI-compatible endpoint: the common "local model" default."""

ChatFn = Callable[[dict[str, JSON]], Any]
"""``chat(body) -> response`` (async or sync): a non-streamed chat-completions response
dict, or a ``returns`` Result of one (a ``Failure`` carrying a ``SessionError`` is retried
when transient). Exceptions propagate; the session reports them as a provider error."""

Sleep = Callable[[float], Awaitable[None]]

_BODY_PREVIEW = 2000
_CHUNK_PREVIEW = 120
_DRAIN_S = 1.0
"""How long the rest of a stream may take to end after ``data: [DONE]``."""


def _default_session_id() -> str:
    """L-6: "local_" + 16 lowercase hex characters (8 random bytes)."""
    return "local_" + secrets.token_hex(8)


@attrs.frozen
class LocalConn:
    """A Local session: its id and conversation, plus the HTTP client it talks through."""

    session_id: str
    conversation: Conversation
    client: httpx.AsyncClient | LeanPool | None = attrs.field(default=None, eq=False, repr=False)
    """The caller's client, the provider's own httpx lanes, or its own lean lanes."""
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = attrs.field(default=None, repr=False)
    """Per session: ``run(model_config=...)`` may carry a gateway lane's URL and granted key."""
    target: httpx.URL | str = attrs.field(default="", eq=False, repr=False)
    """``url`` parsed once (httpx parses a string URL twice per request); ``url`` itself when
    it does not parse, so the request fails as it would have."""

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def redact(self, text: str) -> str:
        return redact_text(text, (self.api_key,))

    def redact_error(self, error: SessionError) -> SessionError:
        """The error with the key masked wherever a server may have echoed it (bodies included)."""
        return redact_error(error, (self.api_key,))


@attrs.define
class _LiveAttempt:
    """Where one poll's streamed chunks go, and how many events its current attempt sent."""

    live: LiveSink
    poll: int
    sent: int = 0
    attempt: int = 0


def _target(url: str) -> httpx.URL | str:
    try:
        return httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return url


class Local(Provider[LocalConn]):
    """An in-process agent loop over any OpenAI-compatible chat-completions endpoint.

    Keyword options (explicit option > the same key in ``model_config`` > default):
    ``base_url`` (default ``DEFAULT_BASE_URL``), ``model``, ``api_key`` (sent as a bearer
    token; never shown in repr or logs), ``system_prompt``, ``tools`` (dicts or objects with
    ``name``, ``description``, ``input_schema``), ``terminal_tool``, ``model_config`` (model,
    base_url, api_key, metadata and extra request params such as temperature), ``stream``,
    ``max_history_messages`` (request truncation, off by default),
    ``max_retries``/``backoff_base``/``backoff_cap`` (transient failures, L-31; seconds),
    ``timeout`` (seconds per HTTP request), ``chat`` (replaces HTTP entirely), ``http_client`` (a
    caller-owned ``httpx.AsyncClient``; without one the provider builds its own on first use,
    shared by its sessions, closed by ``close()``), ``max_connections`` (that own client's
    pool: requests in flight at once, the rest queue fairly; default 100).
    ``gen_ai_provider_name`` names who serves the model in
    OpenTelemetry's ``gen_ai.provider.name`` vocabulary (default ``"openai"``: the wire is
    OpenAI's; say ``"ollama"``, ``"vllm"``, ``"deepseek"`` … when you know better).

    Per run (``run_options``): ``history`` — a previous transcript to continue (the result is
    ``resumed``; ``session_id=`` may name the continued session, and without ``history`` it
    is refused: Local keeps no session anywhere to reattach to) — and ``model_config`` (L-3:
    a gateway lane's model, ``base_url``, ``api_key`` and params for this run) — and
    ``agent=``/``environment=``, the handle ``provision(local, spec)`` returned (the
    ``AgentSpec`` itself), so provider-agnostic code runs here too: the spec's system prompt,
    tools, terminal tool and model (a model id as its ``model_config``) win over the
    provider's for that run; Local has no environment, so ``environment=`` only has to be
    such a handle.
    """

    codec: LocalCodec = CODEC
    run_options = frozenset({"history", "model_config", "agent", "environment"})

    @refuses_unknown_options
    def __init__(
        self,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        system_prompt: str | None = None,
        tools: Sequence[object] = (),
        terminal_tool: str | None = None,
        model_config: Mapping[str, Any] | str | None = None,
        stream: bool = False,
        max_history_messages: int | None = None,
        max_retries: int = 3,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        timeout: float = 120.0,
        chat: ChatFn | None = None,
        http_client: httpx.AsyncClient | None = None,
        max_connections: int | None = None,
        telemetry: Telemetry | None = None,
        gen_ai_provider_name: str = "openai",
        _seams: Seams | None = None,
    ) -> None:
        # L-3: a non-mapping model_config is the model name.
        config: dict[str, Any] = (
            dict(model_config)
            if isinstance(model_config, Mapping)
            else ({} if model_config is None else {"model": model_config})
        )
        self.model: str | None = model if model is not None else config.get("model")
        self.base_url: str = base_url or config.get("base_url") or DEFAULT_BASE_URL
        key = api_key if api_key is not None else config.get("api_key")
        self._api_key: str | None = key if isinstance(key, str) and key else None
        # What the pure conversation sees: the model and the request params, never the key.
        self._model_config = {k: v for k, v in config.items() if k not in ("api_key", "base_url")}
        if self.model is not None:
            self._model_config["model"] = self.model
        self.system_prompt = system_prompt
        self.tools = tuple(tools)
        self.terminal_tool = terminal_tool
        self.streaming = stream
        self.max_history_messages = max_history_messages
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.timeout = timeout
        self._chat = chat
        self._http_client = http_client
        self._own_client: httpx.AsyncClient | LeanPool | None = None
        self._loop: object | None = None  # the event loop ``_own_client`` belongs to
        self.max_connections = max_connections
        self._pool: LocalPool | None = None
        self._timeouts = Timeouts.of(timeout)
        self._rand: Callable[[], float] = pick(_seams, "rand", random.random)
        self._sleep: Sleep = pick(_seams, "sleep", anyio.sleep)
        self._clock: Callable[[], float] = pick(_seams, "clock", time.time)
        self._session_id_factory: Callable[[], str] = pick(_seams, "session_id_factory", _default_session_id)
        self.telemetry = telemetry or default_telemetry
        self.gen_ai_provider_name = gen_ai_provider_name
        self._targets: dict[str, httpx.URL | str] = {}
        """Parsed request URLs by URL string (an ``httpx.URL`` is immutable: sessions share it)."""

    def __repr__(self) -> str:
        names = [
            getattr(t, "name", None) or (t.get("name") if isinstance(t, Mapping) else "?") for t in self.tools
        ]
        return (
            f"Local(base_url={self.base_url!r}, model={self.model!r}, stream={self.streaming}, "
            f"tools={names!r}, api_key={'***' if self._api_key else None})"
        )

    # -- lifecycle --

    def declared_tools(self, request: OpenRequest) -> Sequence[object]:
        agent = request.extra.get("agent")
        if isinstance(agent, AgentSpec) and agent.tools:
            return agent.tools
        return self.tools

    def _check_settings(self) -> Result[None, InvalidOpts]:
        """The provider's numeric settings, before any request (no NaN, no negative)."""
        for checked in (
            check_count(self.max_retries, "max_retries"),
            check_seconds(self.timeout, "timeout"),
            check_seconds(self.backoff_base, "backoff_base", allow_zero=True),
            check_seconds(self.backoff_cap, "backoff_cap", allow_zero=True),
        ):
            if isinstance(checked, Failure):
                return Failure(checked.failure())
        return Success(None)

    async def open(self, request: OpenRequest) -> Result[LocalConn, SessionError]:
        settings = self._check_settings()
        if isinstance(settings, Failure):
            return Failure(settings.failure())
        pool_size = check_max_connections(
            self.max_connections, http_client=self._http_client, chat=self._chat
        )
        if isinstance(pool_size, Failure):
            return Failure(pool_size.failure())
        run_config = request.extra.get("model_config")
        model_config = dict(self._model_config)
        base_url, api_key = self.base_url, self._api_key
        url_option = "base_url"
        if isinstance(run_config, Mapping):
            # L-3 per run: a gateway lane's model, URL and granted key override the provider's.
            run_url, run_key = run_config.get("base_url"), run_config.get("api_key")
            if run_url:
                url_option = "model_config.base_url"
            if isinstance(run_key, str) and run_key:
                api_key = run_key
            elif run_url and not same_origin(run_url, base_url):
                api_key = None  # the provider's key is for its own host, never another one
            base_url = run_url or base_url
            model_config.update({k: v for k, v in run_config.items() if k not in ("api_key", "base_url")})
        elif isinstance(run_config, str):
            model_config["model"] = run_config
        if self._chat is None and model_config.get("model") is None:
            return Failure(
                InvalidOpts(
                    option="model",
                    detail="Local needs a model (model= or model_config) unless chat= is given",
                )
            )
        if self._chat is None:
            checked_url = check_url(base_url, url_option)
            if isinstance(checked_url, Failure):
                return Failure(checked_url.failure())
        system_prompt, tools, terminal_tool = self.system_prompt, self.tools, self.terminal_tool
        agent = request.extra.get("agent")
        for option in ("agent", "environment"):
            handle = request.extra.get(option)
            if handle is not None and not isinstance(handle, AgentSpec | EnvironmentSpec):
                return Failure(
                    InvalidOpts(
                        option=option,
                        detail="Local takes the handle provision(local, spec) returned (an AgentSpec), "
                        f"got {type(handle).__name__}",
                    )
                )
        if isinstance(agent, AgentSpec):  # the run's handle wins, as on the managed hosts
            system_prompt = agent.system_prompt if agent.system_prompt is not None else system_prompt
            tools = agent.tools or tools
            terminal_tool = agent.terminal_tool or terminal_tool
            spec_model = agent.model_config
            if isinstance(spec_model, Mapping):
                spec_model = spec_model.get("id") or spec_model.get("model")
            if (
                isinstance(spec_model, str)
                and spec_model
                and not (isinstance(run_config, Mapping) and run_config.get("model"))
            ):
                model_config["model"] = spec_model  # as written: "qwen3:8b" is an Ollama id
        if request.extra.get("output_tool") is not None:  # output_type='s terminal tool
            tools = (*tools, request.extra["output_tool"])
        history = request.extra.get("history")
        if request.session_id is not None and not history:
            return Failure(
                InvalidOpts(
                    option="session_id",
                    detail="Local keeps no session to reattach to: continue one with "
                    "history=<its transcript> (session_id= then names it)",
                )
            )
        started = start(
            system_prompt,
            tools,
            terminal_tool,
            model_config,
            request.max_turns,
            history,
            max_history_messages=self.max_history_messages,
        )
        if isinstance(started, Failure):
            return Failure(started.failure())
        bad_url = undialable(base_url, "base_url") if self._chat is None else None
        if bad_url is not None:
            return Failure(bad_url)
        session_id = request.session_id or self._session_id_factory()
        client: httpx.AsyncClient | LeanPool | None = self._http_client
        if self._chat is None and client is None:
            client = self._client()
        await anyio.lowlevel.checkpoint()
        url = base_url.rstrip("/") + "/chat/completions"
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= 64:  # per-run gateway URLs: keep the memo bounded
                self._targets.clear()
            target = self._targets[url] = _target(url)
        return Success(LocalConn(session_id, started.unwrap(), client, base_url, api_key, target))

    def session_id(self, conn: LocalConn) -> str | None:
        return conn.session_id

    def resumed(self, conn: LocalConn) -> bool:
        return conn.conversation.resumed

    def transcript(self, conn: LocalConn) -> tuple[JSON, ...] | None:
        return transcript(conn.conversation)

    def snapshot(self, conn: LocalConn) -> Mapping[str, JSON] | None:
        """The session id and the whole conversation state: its history, and what the loop's
        guards remember of the open request (calls seen, errors, answers held back)."""
        c = conn.conversation
        return {
            "session_id": conn.session_id,
            "history": list(c.history.to_tuple()),
            "resumed": c.resumed,
            "polls": c.polls,
            "seen_calls": [list(call) for call in c.seen_calls],
            "error_counts": dict(c.error_counts),
            "pending_calls": [list(call) for call in c.pending_calls],
            "held_answers": list(c.held_answers),
            "call_order": list(c.call_order),
            "nudged": c.nudged,
        }

    async def restore(
        self, request: OpenRequest, snapshot: Mapping[str, JSON]
    ) -> Result[LocalConn, SessionError]:
        history = snapshot.get("history")
        session_id = snapshot.get("session_id")
        if not isinstance(history, list) or not isinstance(session_id, str):
            return Failure(
                InvalidOpts("journal", "the journaled Local snapshot has no history or session id")
            )
        extra = {**request.extra, "history": history}
        opened = await self.open(
            attrs.evolve(request, session_id=session_id if history else None, extra=extra)
        )
        if isinstance(opened, Failure):
            return opened
        conn = opened.unwrap()
        try:
            conversation = attrs.evolve(
                conn.conversation,
                resumed=bool(snapshot.get("resumed")),
                polls=int(snapshot.get("polls") or 0),
                seen_calls=GrowOnlySet(tuple(call) for call in snapshot.get("seen_calls") or ()),
                error_counts=dict(snapshot.get("error_counts") or {}),
                pending_calls=tuple(tuple(call) for call in snapshot.get("pending_calls") or ()),
                held_answers=tuple(snapshot.get("held_answers") or ()),
                call_order=tuple(snapshot.get("call_order") or ()),
                nudged=bool(snapshot.get("nudged")),
            )
        except (TypeError, ValueError) as exc:
            return Failure(InvalidOpts("journal", f"the journaled Local snapshot does not fit: {exc}"))
        return Success(attrs.evolve(conn, session_id=session_id, conversation=conversation))

    def describe(self, conn: LocalConn) -> Mapping[str, JSON]:
        out: dict[str, JSON] = {
            "model": conn.conversation.model,
            "gen_ai_provider": self.gen_ai_provider_name,
        }
        if self._chat is None:
            try:
                url = httpx.URL(conn.base_url)
            except (httpx.InvalidURL, TypeError, ValueError):
                return out
            out["server_address"] = url.host or None
            out["server_port"] = url.port or (443 if url.scheme == "https" else 80)
        return out

    def _client(self) -> httpx.AsyncClient | LeanPool:
        """The provider's own connections, built on first use and shared by its sessions: a
        session then reuses a pooled connection instead of opening one (the CMA and AgentCore
        providers do the same). ``close()`` closes them; closed ones are rebuilt. Lean h11
        lanes (``rma_shell.transport.lean_http``) unless the environment configures a proxy, which only
        httpx honours: then httpx lanes (``LocalPool``). Connections opened under another event
        loop are left to the garbage collector with it, and new ones built."""
        loop = running_loop()
        if of_another_loop(self._loop, loop):
            self._own_client = self._pool = None
        if loop is not None:
            self._loop = loop
        if self._own_client is None or self._own_client.is_closed:
            size = self.max_connections or DEFAULT_MAX_CONNECTIONS
            self._timeouts = Timeouts.of(self.timeout)
            if env_proxies():
                self._pool = LocalPool.build(size, self.timeout)
                self._own_client = self._pool.client
            else:
                self._pool = None
                self._own_client = LeanPool(size, ssl_context=shared_ssl_context())
        return self._own_client

    async def aclose(self, conn: LocalConn) -> None:
        await anyio.lowlevel.checkpoint()  # the client outlives the session; close() closes it

    async def close(self) -> None:
        """Close the HTTP client this provider built (providers are reusable across runs)."""
        own, pool, self._own_client, self._pool = self._own_client, self._pool, None, None
        closing = pool if pool is not None else own if isinstance(own, LeanPool) else None
        if closing is not None:
            try:
                await closing.aclose()
            except (httpx.HTTPError, OSError) as exc:
                logger.debug(
                    "closing the Local HTTP client failed: %s",
                    type(exc).__name__,
                    extra=log_fields(provider="local"),
                )

    # -- turns --

    async def poll_turn(self, conn: LocalConn, input: Input, live: LiveSink | None) -> PollOutcome[LocalConn]:
        applied = apply_input(conn.conversation, input)
        if isinstance(applied, Failure):
            return PollOutcome(Failure(applied.failure()), conn)
        stream = self.streaming and self._chat is None
        conv, body, directives = prepare_request(applied.unwrap(), stream=stream)
        sink = _LiveAttempt(live, conv.polls) if stream and live is not None else None
        if sink is not None:
            for event in directives:  # this poll's directives lead its events (L-20)
                await sink.live(event)
        if self._chat is not None:
            response = await self._with_retries(conn, lambda: self._call_chat(conv))
        else:
            response = await self._with_retries(
                conn, lambda: self._post(conn, body, stream=stream, sink=sink), sink
            )
        if isinstance(response, Failure):
            return PollOutcome(Failure(conn.redact_error(response.failure())), conn)
        folded = apply_response(conv, response.unwrap(), streamed=sink is not None)
        if isinstance(folded, Failure):
            refused = folded.failure()
            if self._chat is None:  # an error body in a 2xx answer: still the host's
                refused = with_origin(refused, url=conn.url)
            await _discarded(sink, refused)
            return PollOutcome(Failure(conn.redact_error(refused)), conn)
        new_conv, events = folded.unwrap()
        if sink is not None:
            # The turn's own events, live too: with the deltas nothing is left for a batch.
            for event in events[len(directives) :]:
                await sink.live(event)
        return PollOutcome(Success(events), attrs.evolve(conn, conversation=new_conv))

    async def _with_retries(
        self,
        conn: LocalConn,
        attempt: Callable[[], Awaitable[tuple[Result[JSON, SessionError], Mapping[str, str] | None]]],
        sink: _LiveAttempt | None = None,
    ) -> Result[JSON, SessionError]:
        """L-31/L-32 Better: retry transient failures with backoff, honouring Retry-After.

        An attempt that streamed events live and failed is followed by ``rma.attempt_discarded``
        (before the backoff), whether or not it is retried.
        """
        retry = 0
        while True:
            if sink is not None:
                sink.attempt = retry
            result, headers = await self._attempt(conn, attempt, retry)
            if not isinstance(result, Failure):
                return result
            error = result.failure()
            await _discarded(sink, error)
            if retry >= self.max_retries or not is_transient_error(error):
                return result
            delay = next_delay_s(
                retry,
                headers=headers,
                now_epoch_s=self._clock(),
                jitter=min(1.0, max(0.0, self._rand())),
                base_s=self.backoff_base,
                cap_s=self.backoff_cap,
            )
            logger.warning(
                "chat completion attempt %d of %d failed (%s); retrying in %.2fs",
                retry + 1,
                self.max_retries + 1,
                conn.redact(error.message),
                delay,
                extra=log_fields(
                    session_id=conn.session_id,
                    provider="local",
                    attempt=retry,
                    error=error.kind,
                    status=getattr(error, "status", None),
                    delay_s=delay,
                ),
            )
            await self._sleep(delay)
            retry += 1

    async def _attempt(
        self,
        conn: LocalConn,
        attempt: Callable[[], Awaitable[tuple[Result[JSON, SessionError], Mapping[str, str] | None]]],
        retry: int,
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        """One chat call, wrapped in ``rma.request.*`` telemetry (method, url, status, attempt).

        Each event is built only when someone listens at that moment (``emit`` would drop it).
        """
        telemetry = self.telemetry
        t0 = time.perf_counter()
        if telemetry.listening():
            telemetry.emit("rma.request.start", {"system_time": time.time()}, self._request_meta(conn, retry))
        try:
            result, headers = await attempt()
        except BaseException as exc:
            if telemetry.listening():
                telemetry.emit(
                    "rma.request.exception",
                    {"duration": time.perf_counter() - t0},
                    {**self._request_meta(conn, retry), "kind": type(exc).__name__},
                )
            raise
        if telemetry.listening():
            stop = self._request_meta(conn, retry)
            if isinstance(result, Failure):
                error = result.failure()
                stop["error"] = error.kind
                stop["status"] = getattr(error, "status", None)
            else:
                stop["status"] = 200
            telemetry.emit("rma.request.stop", {"duration": time.perf_counter() - t0}, stop)
        return result, headers

    def _request_meta(self, conn: LocalConn, retry: int) -> dict[str, Any]:
        return {
            "provider": "local",
            "method": "POST" if self._chat is None else "chat",
            "url": conn.redact(conn.url) if self._chat is None else None,
            "attempt": retry,
            "session_id": conn.session_id,
        }

    async def _call_chat(self, conv: Conversation) -> tuple[Result[JSON, SessionError], None]:
        assert self._chat is not None
        produced = self._chat(request_body(conv, stream=False))
        if inspect.isawaitable(produced):
            produced = await produced
        else:
            await anyio.lowlevel.checkpoint()
        if isinstance(produced, Result):
            return produced, None
        if not isinstance(produced, Mapping):
            return Failure(
                MalformedResponse(detail="chat returned a non-mapping", response=repr(produced)[:300])
            ), None
        return Success(produced), None

    # -- HTTP --

    def _headers(self, conn: LocalConn, *, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
        }
        if conn.api_key:
            headers["Authorization"] = f"Bearer {conn.api_key}"
        return headers

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    async def _post(
        self, conn: LocalConn, body: bytes, *, stream: bool, sink: _LiveAttempt | None = None
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        """One POST; a failure names the host (and port), the code and the ``x-request-id``."""
        result, headers = await self._post_once(conn, body, stream=stream, sink=sink)
        if isinstance(result, Failure):
            error = result.failure()
            code = error_code(error.body) if isinstance(error, HttpError) else None
            stamped = with_origin(error, url=conn.url, request_id=request_id(headers), code=code)
            return Failure(stamped), headers
        return result, headers

    async def _post_once(
        self, conn: LocalConn, body: bytes, *, stream: bool, sink: _LiveAttempt | None
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        client = conn.client
        if client is None:
            return Failure(
                TransportError(detail="the Local conn has no HTTP client", error_type="no_client")
            ), None
        pool = self._pool if self._pool is not None and client is self._pool.client else None
        if pool is not None:  # the provider's httpx lanes: queue fairly for one of its connections
            try:
                async with pool.lane(self.timeout) as lane:
                    return await self._send(conn, lane, body, stream=stream, sink=sink)
            except SlotTimeout as exc:
                return Failure(TransportError(detail=str(exc), error_type="timeout")), None
        return await self._send(conn, client, body, stream=stream, sink=sink)

    async def _send(
        self,
        conn: LocalConn,
        client: httpx.AsyncClient | LeanPool,
        body: bytes,
        *,
        stream: bool,
        sink: _LiveAttempt | None,
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        """One POST over httpx or the provider's lean lanes (which raise httpx's exception
        classes, so a failure is reported the same either way)."""
        headers = self._headers(conn, stream=stream)
        try:
            if isinstance(client, LeanPool):
                url = conn.target if isinstance(conn.target, httpx.URL) else httpx.URL(conn.url)
                try:
                    lean = await client.request("POST", url, headers, body, self._timeouts)
                except LanePoolTimeout as exc:
                    return Failure(TransportError(detail=str(exc), error_type="timeout")), None
                try:
                    if stream:
                        return await self._read_stream(conn, lean, sink)
                    return self._decode(conn, lean.status_code, await lean.aread()), lean.headers
                finally:
                    await lean.aclose()
            target, timeout = conn.target or conn.url, self.timeout
            if stream:
                async with client.stream(
                    "POST", target, content=body, headers=headers, timeout=timeout
                ) as response:
                    return await self._read_stream(conn, response, sink)
            response = await client.post(target, content=body, headers=headers, timeout=timeout)
            return self._decode(conn, response.status_code, response.content), response.headers
        except httpx.DecodingError as exc:
            return Failure(MalformedResponse(detail=f"undecodable response body: {exc}")), None
        except httpx.HTTPError as exc:
            return Failure(
                TransportError(detail=conn.redact(f"{type(exc).__name__}: {exc}"), error_type=_kind(exc))
            ), None

    async def _read_stream(
        self, conn: LocalConn, response: httpx.Response | LeanResponse, sink: _LiveAttempt | None
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        """An SSE reply read chunk by chunk, each decoded chunk fed live as it arrives."""
        content_type = response.headers.get("content-type", "")
        if not 200 <= response.status_code < 300 or "text/event-stream" not in content_type:
            # An error, or a server that ignored "stream": decode it as a plain body.
            return self._decode(conn, response.status_code, await response.aread()), response.headers
        decoder = SSEDecoder()
        reply = StreamedReply(sink.poll if sink is not None else 0)
        chunks = response.aiter_bytes()
        try:
            async for data in chunks:
                for message in decoder.feed(data):
                    if message.data == "[DONE]":
                        await _drain(chunks)
                        return reply.finish(), response.headers
                    try:
                        chunk = json.loads(message.data)
                    except ValueError:
                        # A corrupt chunk could have been any part of the reply: the attempt
                        # fails like a drop, so the request is re-sent (bounded by
                        # max_retries) and nothing of this stream's partial reply is kept.
                        detail = f"a stream chunk is not JSON: {message.data[:_CHUNK_PREVIEW]!r}"
                        return Failure(StreamDropped(detail=detail)), response.headers
                    fed = reply.feed(chunk)
                    if isinstance(fed, Failure):
                        return Failure(fed.failure()), response.headers
                    if sink is not None:
                        for event in fed.unwrap():
                            sink.sent += 1
                            await sink.live(event)
        except httpx.DecodingError:
            raise  # an undecodable body: MalformedResponse in _send
        except httpx.HTTPError as exc:  # the stream broke after the response began
            broke = TransportError(detail=conn.redact(f"{type(exc).__name__}: {exc}"), error_type=_kind(exc))
            return Failure(broke), response.headers
        finally:
            # Closed here, not whenever the event loop gets to finalise it.
            await _aclose(chunks)
        decoder.close()
        if reply.finish_reason is not None:
            # The server closed cleanly after the last choice without "data: [DONE]"
            # (some do); the reply is complete.
            return reply.finish(), response.headers
        return Failure(
            StreamDropped(detail="stream closed before data: [DONE]", clean_close=True)
        ), response.headers

    def _decode(self, conn: LocalConn, status: int, content: bytes) -> Result[JSON, SessionError]:
        try:
            decoded: JSON = json.loads(content) if content else None
            is_json = True
        except ValueError:
            decoded, is_json = content[:_BODY_PREVIEW].decode("utf-8", errors="replace"), False
        if 200 <= status < 300:
            if not is_json:
                return Failure(MalformedResponse(detail="response body is not JSON", response=decoded))
            return Success(decoded)
        if status == 401:
            message = conn.redact(error_text(decoded))
            error = decoded.get("error") if isinstance(decoded, Mapping) else None
            code = (error.get("code") or error.get("type")) if isinstance(error, Mapping) else None
            return Failure(
                AuthenticationError(
                    detail=f"HTTP 401: {message}",
                    status=401,
                    error_code=code if isinstance(code, str) else None,
                    error_message=message,
                    host=host_of(conn.target),
                )
            )
        return Failure(HttpError(status=status, body=decoded, method="POST", url=conn.redact(conn.url)))


async def _discarded(sink: _LiveAttempt | None, error: SessionError) -> None:
    """Tell the session the attempt's streamed events are void (only if it streamed any)."""
    if sink is not None and sink.sent:
        sink.sent = 0
        await sink.live(attempt_discarded_event(sink.attempt, error.kind))


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read a stream that sent ``data: [DONE]`` to its end (servers end the body right after).

    The response then completes: httpx's stream iterators finish here instead of being
    finalised later by the event loop, and the connection goes back to the pool rather than
    being closed half-read. Bounded by ``_DRAIN_S``; whatever follows [DONE] is ignored, and a
    failure to read it does not matter — the reply is whole.
    """
    with anyio.move_on_after(_DRAIN_S), contextlib.suppress(httpx.HTTPError):
        async for _ in chunks:
            pass


async def _aclose(chunks: AsyncIterator[bytes]) -> None:
    """Close an async byte iterator now (a no-op once it is exhausted)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


def _kind(exc: httpx.HTTPError) -> str:
    """The rma.retry transport kind of an httpx failure."""
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect_timeout"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "econnrefused"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "closed"
    if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.CloseError)):
        return "econnreset"
    return "protocol"
