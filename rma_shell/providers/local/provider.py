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

The POST itself and the reading of its answer (streamed or whole, the lean lanes or a caller's
client) are ``rma_shell.providers.local.transport``'s (``RequestPath``, mixed in; ``LocalConn``
lives there and is re-exported here); the context window's I/O (discovery, token counts,
summaries, refusals) is ``rma_shell.providers.local.window``'s.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import attrs
import httpx
from returns.result import Failure, Result, Success

from rma._persistent import GrowOnlySet
from rma.errors import (
    InvalidOpts,
    MalformedResponse,
    SessionError,
)
from rma.origin import undialable, with_origin
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
from rma.providers.local.context import DEFAULT_SHORTEN_TO, restored, saved
from rma.providers.local.request import (
    compacted_after_refusal,
    request_body_bytes,
)
from rma.provisioning.spec import AgentSpec, EnvironmentSpec
from rma.retry import is_transient_error, next_delay_s
from rma.session.option_checks import check_count, check_seconds, check_url
from rma.snapshots import plain
from rma.vocabulary import JSON
from rma.wire.openai_chat import encode_json
from rma_shell.logging import log_fields
from rma_shell.options import refuses_unknown_options
from rma_shell.providers.base import LiveSink, OpenRequest, PollOutcome, Provider
from rma_shell.providers.local.pool import (
    DEFAULT_MAX_CONNECTIONS,
    LocalPool,
    check_max_connections,
)
from rma_shell.providers.local.transport import (
    DEFAULT_BASE_URL,
    LiveAttempt,
    LocalConn,
    RequestPath,
    discarded,
    target_of,
)
from rma_shell.providers.local.window import (
    ContextHook,
    Discovered,
    counted,
    discover,
    exceeded,
    hooked,
    refusal,
    summarized_by_model,
)
from rma_shell.seams import Seams, pick
from rma_shell.telemetry import Telemetry
from rma_shell.telemetry import default as default_telemetry
from rma_shell.transport.http import (
    env_proxies,
    of_another_loop,
    running_loop,
    same_origin,
    shared_ssl_context,
)
from rma_shell.transport.lean_http import LeanPool, Timeouts

logger = logging.getLogger("rma.providers.local")

ChatFn = Callable[[dict[str, JSON]], Any]
"""``chat(body) -> response`` (async or sync): a non-streamed chat-completions response
dict, or a ``returns`` Result of one (a ``Failure`` carrying a ``SessionError`` is retried
when transient). Exceptions propagate; the session reports them as a provider error."""

Sleep = Callable[[float], Awaitable[None]]


def _default_session_id() -> str:
    """L-6: "local_" + 16 lowercase hex characters (8 random bytes)."""
    return "local_" + secrets.token_hex(8)


class Local(RequestPath, Provider[LocalConn]):
    """An in-process agent loop over any OpenAI-compatible chat-completions endpoint.

    Keyword options (explicit option > the same key in ``model_config`` > default):
    ``base_url`` (default ``DEFAULT_BASE_URL``), ``model``, ``api_key`` (sent as a bearer
    token; never shown in repr or logs), ``system_prompt``, ``tools`` (dicts or objects with
    ``name``, ``description``, ``input_schema``), ``terminal_tool``, ``model_config`` (model,
    base_url, api_key, metadata and extra request params such as temperature), ``stream``,
    ``max_history_messages`` (request truncation, off by default), ``context_window`` (tokens,
    or ``"auto"`` to ask the server; every request is then planned to fit it by
    ``rma.providers.local.context``; also per run), ``shorten_to`` (characters an old tool result
    keeps when shortened), ``context_hook`` (``fn(messages) -> messages`` before each call),
    ``summarize`` (the dropped turns condensed by the model),
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
    run_options = frozenset({"history", "model_config", "agent", "environment", "context_window"})

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
        context_window: int | str | None = None,
        shorten_to: int = DEFAULT_SHORTEN_TO,
        context_hook: ContextHook | None = None,
        summarize: bool = False,
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
        self.context_window = context_window
        self.shorten_to = shorten_to
        self.context_hook = context_hook
        self.summarize = summarize
        self._discovered: dict[tuple[str, str | None], Discovered] = {}
        self._probes: httpx.AsyncClient | None = None
        """Windows the servers said, by (base URL, model): asked once per provider."""
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
        window = request.extra.get("context_window", self.context_window)
        found = Discovered()
        if window == "auto":
            if self._chat is not None:
                return Failure(
                    InvalidOpts(option="context_window", detail='"auto" asks the server: not with chat=')
                )
            model_name = model_config.get("model")
            key = (base_url, model_name if isinstance(model_name, str) else None)
            found = self._discovered.get(key) or await discover(
                base_url, key[1], api_key, self._probe_client()
            )
            self._discovered[key] = found
            window = found.window
        elif window is not None and (not isinstance(window, int) or isinstance(window, bool)):
            return Failure(
                InvalidOpts(option="context_window", detail=f'tokens (an int) or "auto", got {window!r}')
            )
        started = start(
            system_prompt,
            tools,
            terminal_tool,
            model_config,
            request.max_turns,
            history,
            max_history_messages=self.max_history_messages,
            context_window=window,
            window_source=found.source or "option",
            shorten_to=self.shorten_to,
            summarize=self.summarize,
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
            target = self._targets[url] = target_of(url)
        return Success(
            LocalConn(session_id, started.unwrap(), client, base_url, api_key, found.tokenize_url, target)
        )

    def session_id(self, conn: LocalConn) -> str | None:
        return conn.session_id

    def resumed(self, conn: LocalConn) -> bool:
        return conn.conversation.resumed

    def transcript(self, conn: LocalConn) -> tuple[JSON, ...] | None:
        return transcript(conn.conversation)

    def snapshot(self, conn: LocalConn) -> Mapping[str, JSON] | None:
        """The session id and the whole conversation state: its history, and what the loop's
        guards remember of the open request (calls seen, errors, answers held back). The
        history and the calls seen are the conversation's own logs, and the rest its own
        values (it replaces them, never changes them), not copies: a journal writes what a
        turn added to the logs and compares the rest by identity first (``rma.snapshots``), so
        a snapshot costs O(1) a turn and its record O(the turn), however long the session."""
        c = conn.conversation
        seen = c.seen_calls
        return {
            "session_id": conn.session_id,
            "history": c.history,
            "resumed": c.resumed,
            "polls": c.polls,
            "seen_calls": seen.ordered() if isinstance(seen, GrowOnlySet) else [list(call) for call in seen],
            "error_counts": c.error_counts,
            "pending_calls": c.pending_calls,
            "held_answers": c.held_answers,
            "call_order": c.call_order,
            "nudged": c.nudged,
            "context": saved(c.context) if c.context is not None else None,
        }

    async def restore(
        self, request: OpenRequest, snapshot: Mapping[str, JSON]
    ) -> Result[LocalConn, SessionError]:
        snapshot = plain(snapshot)  # ``snapshot``'s own, its logs included, or one read back as JSON
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
            context = snapshot.get("context")
            if conversation.context is not None and isinstance(context, Mapping):
                conversation = attrs.evolve(
                    conversation,
                    context=restored(
                        conversation.context, conversation.history, conversation.encoded, context
                    ),
                )
        except (TypeError, ValueError) as exc:
            return Failure(InvalidOpts("journal", f"the journaled Local snapshot does not fit: {exc}"))
        return Success(attrs.evolve(conn, session_id=session_id, conversation=conversation))

    def describe(self, conn: LocalConn) -> Mapping[str, JSON]:
        out: dict[str, JSON] = {
            "model": conn.conversation.model,
            "gen_ai_provider": self.gen_ai_provider_name,
        }
        context = conn.conversation.context
        if context is not None:  # the window the run plans against, and who said it
            out["context_window"] = context.window
            out["context_window_source"] = context.source
        if self._chat is None:
            try:
                url = httpx.URL(conn.base_url)
            except (httpx.InvalidURL, TypeError, ValueError):
                return out
            out["server_address"] = url.host or None
            out["server_port"] = url.port or (443 if url.scheme == "https" else 80)
        return out

    def _probe_client(self) -> httpx.AsyncClient:
        """The client window discovery and token counting use: the caller's, else one of the
        provider's own, built on first use and closed by ``close()``."""
        if self._http_client is not None:
            return self._http_client
        if self._probes is None or self._probes.is_closed:
            self._probes = httpx.AsyncClient(trust_env=bool(env_proxies()))
        return self._probes

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
        probes, self._probes = self._probes, None
        if probes is not None:
            with contextlib.suppress(httpx.HTTPError, OSError):
                await probes.aclose()
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
        if conv.context is not None:
            conv, body, directives = await self._fitted(conn, conv, body, directives, stream)
        sink = LiveAttempt(live, conv.polls) if stream and live is not None else None
        if sink is not None:
            for event in directives:  # this poll's directives lead its events (L-20)
                await sink.live(event)
        response = await self._send_request(conn, conv, body, stream, sink)
        refused_for_length = refusal(response)
        if refused_for_length is not None:
            # The server refused the request for its length: compact harder and retry once.
            window, tokens = refused_for_length
            again = compacted_after_refusal(conv, window, tokens)
            if again is None:
                return PollOutcome(Failure(exceeded(window, tokens, "nothing more could be left out")), conn)
            conv, more = again
            directives = (*directives, *more)
            if sink is not None:
                for event in more:
                    await sink.live(event)
            body = request_body_bytes(conv, stream=stream)
            response = await self._send_request(conn, conv, body, stream, sink)
            refused_for_length = refusal(response)
            if refused_for_length is not None:
                window, tokens = refused_for_length
                return PollOutcome(Failure(exceeded(window, tokens, "refused again after compacting")), conn)
        if isinstance(response, Failure):
            return PollOutcome(Failure(conn.redact_error(response.failure())), conn)
        folded = apply_response(conv, response.unwrap(), streamed=sink is not None)
        if isinstance(folded, Failure):
            refused = folded.failure()
            if self._chat is None:  # an error body in a 2xx answer: still the host's
                refused = with_origin(refused, url=conn.url)
            await discarded(sink, refused)
            return PollOutcome(Failure(conn.redact_error(refused)), conn)
        new_conv, events = folded.unwrap()
        if sink is not None:
            # The turn's own events, live too: with the deltas nothing is left for a batch.
            for event in events[len(directives) :]:
                await sink.live(event)
        return PollOutcome(Success(events), attrs.evolve(conn, conversation=new_conv))

    async def _fitted(
        self, conn: LocalConn, conv: Conversation, body: bytes, directives: tuple[JSON, ...], stream: bool
    ) -> tuple[Conversation, bytes, tuple[JSON, ...]]:
        """The planned request checked by the server's tokenizer where it has one, and the dropped
        turns summarized when ``summarize`` is on (``rma_shell.providers.local.window``)."""
        events: tuple[JSON, ...] = ()
        if conn.tokenize_url is not None:
            conv, counted_events = await counted(conv, conn.tokenize_url, conn.api_key, self._probe_client())
            events += counted_events
        if self.summarize:
            conv, summary_events = await summarized_by_model(
                conv, lambda request: self._send_body(conn, request), session_id=conn.session_id
            )
            events += summary_events
        if not events:
            return conv, body, directives
        return conv, request_body_bytes(conv, stream=stream), (*directives, *events)

    async def _send_body(self, conn: LocalConn, request: dict[str, JSON]) -> Result[JSON, SessionError]:
        """A request of rma's own (the summary): not streamed, retried as any call."""
        if self._chat is not None:
            return await self._with_retries(conn, lambda: self._call_chat_body(request))
        encoded = encode_json(request)
        return await self._with_retries(conn, lambda: self._post(conn, encoded, stream=False))

    async def _send_request(
        self, conn: LocalConn, conv: Conversation, body: bytes, stream: bool, sink: LiveAttempt | None
    ) -> Result[JSON, SessionError]:
        """One chat call with its retries: the body as planned, or as the user's hook rewrote it."""
        hook = self.context_hook
        if self._chat is not None:
            return await self._with_retries(conn, lambda: self._call_chat(conv))
        if hook is not None:
            body = encode_json(hooked(hook, request_body(conv, stream=stream)))
        return await self._with_retries(conn, lambda: self._post(conn, body, stream=stream, sink=sink), sink)

    async def _with_retries(
        self,
        conn: LocalConn,
        attempt: Callable[[], Awaitable[tuple[Result[JSON, SessionError], Mapping[str, str] | None]]],
        sink: LiveAttempt | None = None,
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
            await discarded(sink, error)
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
        body = request_body(conv, stream=False)
        if self.context_hook is not None:
            body = hooked(self.context_hook, body)
        return await self._call_chat_body(body)

    async def _call_chat_body(self, body: dict[str, JSON]) -> tuple[Result[JSON, SessionError], None]:
        assert self._chat is not None
        produced = self._chat(body)
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

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"
