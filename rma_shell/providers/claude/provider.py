"""The Claude Managed Agents provider: the loop runs on Anthropic's servers, tools run here.

Pairs the pure codec (``rma.providers.claude.codec``) with the control-plane client
(``rma_shell.providers.claude.client``). ``open`` creates a session for an agent and an
environment (or reattaches with ``session_id=``), confirming a budget against the create
response before any prompt goes out; ``stream`` holds the SSE stream (``event: error``
frames fail it, pings are skipped, silence beyond ``stream_idle_timeout`` fails it);
``push_input`` posts events; ``reconnect`` lists the history and consolidates it against
what the session machine saw (the driver subscribes the new stream first); ``stop_remote``
interrupts a session rma stops driving mid-request (issue #15) and waits for it to read idle.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import anyio
import attrs
import httpx
from returns.result import Failure, Result, Success

from rma.config import BASE_URL, resolve_anthropic, resolve_key
from rma.errors import (
    BudgetNotConfirmed,
    HttpError,
    InvalidOpts,
    MalformedResponse,
    ProviderError,
    SessionError,
    StreamDropped,
    Timeout,
    TransportError,
)
from rma.origin import error_code, request_id, with_origin
from rma.provider import Input
from rma.providers.claude.codec import (
    CODEC,
    USER_CUSTOM_TOOL_RESULT,
    USER_TOOL_CONFIRMATION,
    ClaudeManagedAgentsCodec,
    consolidate,
    event_id,
    event_type,
)
from rma.session.events import Reconnected
from rma.session.option_checks import check_count, check_seconds
from rma.session.options import lift_handles
from rma.vocabulary import JSON
from rma.wire.sse import SSEDecoder
from rma_shell.logging import log_fields
from rma_shell.options import refuses_unknown_options
from rma_shell.providers.base import OpenRequest, Provider, StopReport
from rma_shell.providers.claude.client import STALE_OR_CUT, CMAClient, StreamResponse
from rma_shell.providers.claude.session_options import FRESH_ONLY, check_deltas, initial_events, vault_ids
from rma_shell.seams import Seams
from rma_shell.telemetry import Telemetry
from rma_shell.transport import deadline as silence
from rma_shell.transport.http import of_another_loop, running_loop, same_origin
from rma_shell.transport.lean_http import Response as LeanResponse

log = logging.getLogger("rma.providers.claude_managed_agents")

_ECHOED_BY_ID = frozenset({USER_CUSTOM_TOOL_RESULT, USER_TOOL_CONFIRMATION})
"""Posted events whose echo names the call they answer, so only their own echo matches."""

OUTPUTS_DIR = "/mnt/session/outputs/"
"""Only files the agent writes here become downloadable session artifacts (wire §13)."""


STOP_POLL_INTERVAL_S = 0.25
"""How often ``stop_remote`` reads the session's status after its interrupt was accepted."""

_STOPPED_STATUSES = frozenset({"idle", "terminated"})


def _session_labels(metadata: object) -> Result[dict[str, str], InvalidOpts]:
    """A run's ``metadata=`` as a Claude session's metadata: string values only (the API's
    ``metadata: Dict[str, str]``), refused before anything is created."""
    if metadata is None:
        return Success({})
    if not isinstance(metadata, Mapping):
        return Failure(InvalidOpts("metadata", f"expected a mapping, got {type(metadata).__name__}"))
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            return Failure(
                InvalidOpts(
                    "metadata",
                    "a Claude session's metadata takes string keys and values; "
                    f"{key!r} is {type(value).__name__}",
                )
            )
    return Success(dict(metadata))


def output_path(name: str) -> str:
    """A path under the outputs directory, for system prompts and artifact lookups."""
    clean = name.strip().lstrip("/")
    if not clean or any(part in ("", ".", "..") for part in clean.split("/")):
        raise ValueError(f"not a relative file name: {name!r}")
    return OUTPUTS_DIR + clean


_UNSET: Any = object()


@attrs.define
class CMAConn:
    session_id: str
    resumed: bool = False
    attached: bool = False
    session: JSON = None
    client: CMAClient | None = attrs.field(default=None, eq=False, repr=False)
    """This run's own client, when ``model_config`` gave it credentials or a host (C-5); it is
    closed with the session. None: the provider's client."""


class ClaudeManagedAgents(Provider[CMAConn]):
    """Claude Managed Agents (beta ``managed-agents-2026-04-01``).

    Settings resolve explicit option > ``app_config`` > environment variable > default (K-1):
    ``api_key`` (``ANTHROPIC_API_KEY``) or ``bearer_token_file``
    (``ANTHROPIC_BEARER_TOKEN_FILE``), ``base_url``, ``beta``, ``anthropic_version``,
    ``files_beta``, ``read_timeout`` (seconds; the older ``receive_timeout`` in milliseconds is
    still read, as an option or an ``app_config`` key). ``agent_id``/``environment_id`` (or
    ``agent=``/``environment=`` handles, S-13) may be given here or per run (a run's wins).
    ``event_deltas`` (``("agent.message",)``) asks every event stream for previews of those
    types: an ``agent.message`` then reaches live updates token by token (``TextDelta``s), its
    final event still the source of truth (``()``: one delta per message).
    ``stream_idle_timeout`` (1800 s) bounds silence on the event stream;
    ``cleanup_timeout`` (5 s) bounds, in total, deleting a session whose budget the API did
    not confirm (S-73). The client's ``max_retries`` (default 2) and ``http_client`` are
    passed to ``CMAClient``.

    ``model`` is what an ``rma_shell.Agent`` run here provisions its agent with, unless the
    ``Agent`` names a model itself.

    Per run (``run_options``): the agent and environment as above, and for a fresh session
    its ``title`` and ``resources``. ``session_id=`` reattaches instead; then those cannot
    apply and are refused. A run's ``metadata=`` (``run()``'s own option: it labels the
    run's telemetry too) is the fresh session's metadata, merged over the provider's
    ``metadata``; Claude takes string values only. The older ``session_metadata=`` (the
    session's metadata only, not the telemetry's) is still accepted, deprecated.
    """

    codec: ClaudeManagedAgentsCodec = CODEC
    # How ``reconnect`` folds the listed history (a self-hosted worker replays its built-in calls).
    _consolidate = staticmethod(consolidate)
    model_config_keys = frozenset({"metadata", "api_key", "base_url"})
    """What a run's ``model_config`` may carry here: its metadata and, for this session only,
    credentials and a base URL (C-5). The model is the agent's."""
    run_options = frozenset(
        {
            "agent",
            "agent_id",
            "environment",
            "environment_id",
            "title",
            "resources",
            "vault_ids",
            "initial_events",
        }
    )

    @refuses_unknown_options
    def __init__(
        self,
        *,
        api_key: Any = _UNSET,
        bearer_token_file: Any = _UNSET,
        base_url: Any = _UNSET,
        beta: Any = _UNSET,
        anthropic_version: Any = _UNSET,
        files_beta: Any = _UNSET,
        read_timeout: Any = _UNSET,
        app_config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        api_key_header: str = "authorization",
        agent_id: str | None = None,
        environment_id: str | None = None,
        agent: Any = None,
        environment: Any = None,
        title: str | None = None,
        metadata: Mapping[str, str] | None = None,
        resources: Sequence[Mapping[str, Any]] | None = None,
        vault_ids: Sequence[str] | None = None,
        initial_events: Sequence[Mapping[str, Any]] | None = None,
        model: str | Mapping[str, Any] | None = None,
        stream_idle_timeout: float = 1800.0,
        cleanup_timeout: float = 5.0,
        event_deltas: Sequence[str] = ("agent.message",),
        client: CMAClient | None = None,
        telemetry: Telemetry | None = None,
        max_retries: int = 2,
        http_client: httpx.AsyncClient | None = None,
        _seams: Seams | None = None,
    ) -> None:
        given = {
            "api_key": api_key,
            "bearer_token_file": bearer_token_file,
            "base_url": base_url,
            "beta": beta,
            "anthropic_version": anthropic_version,
            "files_beta": files_beta,
            "read_timeout": read_timeout,
        }
        self._opts = {k: v for k, v in given.items() if v is not _UNSET}
        self._app = dict(app_config or {})
        self._env = env
        self._api_key_header = api_key_header
        self._client = client
        self._injected = client is not None
        self._loop: object | None = None  # the event loop the built client's connections belong to
        self._client_options: dict[str, Any] = {
            "max_retries": max_retries,
            "http_client": http_client,
            "_seams": _seams,
        }
        self._telemetry = telemetry
        lifted = lift_handles(
            {
                "agent_id": agent_id,
                "environment_id": environment_id,
                "agent": agent,
                "environment": environment,
            }
        )
        self.agent_id: str | None = lifted.get("agent_id")
        self.environment_id: str | None = lifted.get("environment_id")
        self.title = title
        self.metadata = dict(metadata or {})
        self.resources = list(resources or [])
        self.vault_ids = list(vault_ids or [])
        self.initial_events = list(initial_events or [])
        self.model = model
        """The model an ``Agent`` provisions its Claude agent with when it names none itself
        (a run on an existing agent uses that agent's model)."""
        self.stream_idle_timeout = stream_idle_timeout
        self.cleanup_timeout = cleanup_timeout
        self.event_deltas: tuple[str, ...] = (
            (event_deltas,) if isinstance(event_deltas, str) else tuple(event_deltas)
        )
        """The event types every stream asks previews of (``event_deltas``): token-sized
        ``TextDelta``s for ``agent.message``; ``agent.thinking`` previews are start-only."""

    def __repr__(self) -> str:
        return f"ClaudeManagedAgents(agent_id={self.agent_id!r}, environment_id={self.environment_id!r})"

    def client(self) -> Result[CMAClient, SessionError]:
        """The control-plane client, built once from the resolved settings."""
        for checked in (
            check_count(self._client_options["max_retries"], "max_retries"),
            check_seconds(self.stream_idle_timeout, "stream_idle_timeout", allow_inf=True),
            check_seconds(self.cleanup_timeout, "cleanup_timeout", allow_zero=True, allow_inf=True),
            check_deltas(self.event_deltas),
        ):
            if isinstance(checked, Failure):
                return Failure(checked.failure())
        loop = running_loop()
        if not self._injected and of_another_loop(self._loop, loop):
            self._client = None  # its connections belong to a loop that is gone: new ones
        if loop is not None:
            self._loop = loop
        if self._client is None:
            env = self._env if self._env is not None else os.environ
            settings = resolve_anthropic(opts=self._opts, app=self._app, env=env)
            if isinstance(settings, Failure):
                return Failure(settings.failure())
            self._client = CMAClient(
                settings.unwrap(),
                api_key_header=self._api_key_header,
                telemetry=self._telemetry,
                **self._client_options,
            )
        return Success(self._client)

    # ── lifecycle ──

    def _run_client(self, run_config: object) -> Result[CMAClient | None, SessionError]:
        """C-5: a client of this run's own when ``model_config`` carries ``api_key`` and/or
        ``base_url`` (a gateway lane's granted key, say); its other keys configure nothing here —
        the model is the agent's. A client given to the provider (``client=``) wins, as in the
        reference. The provider's credentials are never sent to another host: a ``base_url``
        on another origin needs the run's own ``api_key``."""
        if self._injected or not isinstance(run_config, Mapping):
            return Success(None)
        key, url = run_config.get("api_key"), run_config.get("base_url")
        if key is None and url is None:
            return Success(None)
        env = self._env if self._env is not None else os.environ
        opts = dict(self._opts)
        if key is not None:
            opts["api_key"], opts["bearer_token_file"] = key, None
        if url is not None:
            own = resolve_key(BASE_URL, opts=self._opts, app=self._app, env=env)
            if key is None and not (isinstance(url, str) and isinstance(own, str) and same_origin(url, own)):
                return Failure(
                    InvalidOpts(
                        "model_config",
                        "a per-run base_url on another host needs its own api_key: "
                        "the provider's credentials are only sent to the provider's host",
                    )
                )
            opts["base_url"] = url
        settings = resolve_anthropic(opts=opts, app=self._app, env=env)
        if isinstance(settings, Failure):
            error = settings.failure()
            return Failure(attrs.evolve(error, option=f"model_config.{error.option}"))
        return Success(
            CMAClient(
                settings.unwrap(),
                api_key_header=self._api_key_header,
                telemetry=self._telemetry,
                **self._client_options,
            )
        )

    def _client_of(self, conn: CMAConn) -> Result[CMAClient, SessionError]:
        return Success(conn.client) if conn.client is not None else self.client()

    async def open(self, request: OpenRequest) -> Result[CMAConn, SessionError]:
        own = self._run_client(request.extra.get("model_config"))
        if isinstance(own, Failure):
            return Failure(own.failure())
        run_client = own.unwrap()
        opened = await self._open(request, run_client)
        if isinstance(opened, Failure) and run_client is not None:
            await run_client.aclose()
        return opened

    def snapshot(self, conn: CMAConn) -> Mapping[str, JSON] | None:
        """The session id — the host keeps the rest (its history is listed on reattach) — and
        whether the run itself was a reattach whose first listing is still to come."""
        return {"session_id": conn.session_id, "resumed": conn.resumed, "attached": conn.attached}

    async def restore(
        self, request: OpenRequest, snapshot: Mapping[str, JSON]
    ) -> Result[CMAConn, SessionError]:
        session_id = snapshot.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            return Failure(InvalidOpts("journal", "the journaled Claude snapshot has no session id"))
        # A reattach: what only a fresh session takes (its title, metadata, resources, budget)
        # was applied when it was created.
        extra = {k: v for k, v in request.extra.items() if k not in FRESH_ONLY}
        opened = await self.open(attrs.evolve(request, session_id=session_id, extra=extra, budget=None))
        if isinstance(opened, Success):
            # The journal knows what the stopped process took of the history (the machine's seen
            # ids): its reconnects consolidate from there, not as a first attach — unless the
            # journaled run was itself a reattach that had not listed yet: then, as for it, the
            # history before it is settled (``consolidate``'s attach).
            opened.unwrap().attached = snapshot.get("attached") is True or snapshot.get("resumed") is not True
        return opened

    async def _open(
        self, request: OpenRequest, run_client: CMAClient | None
    ) -> Result[CMAConn, SessionError]:
        built = Success(run_client) if run_client is not None else self.client()
        if isinstance(built, Failure):
            return Failure(built.failure())
        client = built.unwrap()
        if request.session_id is not None:
            for option in FRESH_ONLY:
                if request.extra.get(option) is not None:
                    return Failure(
                        InvalidOpts(option, "applies to a fresh session; it cannot be set on reattach")
                    )
            got = await client.get_session(request.session_id)
            if isinstance(got, Failure):
                return Failure(got.failure())
            summary = _agent_summary(got.unwrap())
            return Success(CMAConn(request.session_id, resumed=True, session=summary, client=run_client))
        agent = request.extra.get("agent_id") or self.agent_id
        environment = request.extra.get("environment_id") or self.environment_id
        if not isinstance(agent, str) or not agent:
            return Failure(
                InvalidOpts("agent_id", "Claude Managed Agents needs agent_id= (or an agent= handle)")
            )
        if not isinstance(environment, str) or not environment:
            return Failure(
                InvalidOpts(
                    "environment_id",
                    "Claude Managed Agents needs environment_id= (or an environment= handle)",
                )
            )
        body: dict[str, JSON] = {"agent": agent, "environment_id": environment}
        title = request.extra.get("title", self.title)
        if title:
            body["title"] = title
        labels = _session_labels(request.extra.get("metadata"))
        if isinstance(labels, Failure):
            return Failure(labels.failure())
        metadata = {**self.metadata, **labels.unwrap(), **dict(request.extra.get("session_metadata") or {})}
        if metadata:
            body["metadata"] = metadata
        resources = list(request.extra.get("resources") or self.resources)
        if resources:
            body["resources"] = resources
        vaults = vault_ids(request.extra.get("vault_ids") or self.vault_ids)
        if isinstance(vaults, Failure):
            return Failure(vaults.failure())
        if vaults.unwrap():
            body["vault_ids"] = list(vaults.unwrap())
        initial = initial_events(request.extra.get("initial_events") or self.initial_events, request)
        if isinstance(initial, Failure):
            return Failure(initial.failure())
        if initial.unwrap():
            body["initial_events"] = list(initial.unwrap())
        wanted = request.budget.to_wire() if request.budget is not None else None
        if wanted is not None:
            body["budget"] = wanted
        created = await client.create_session(body)
        if isinstance(created, Failure):
            return Failure(created.failure())
        session = created.unwrap()
        session_id = session.get("id") if isinstance(session, dict) else None
        if not isinstance(session_id, str):
            return Failure(
                MalformedResponse(detail="session create answered without an id", response=session)
            )
        if wanted is not None and not _same_budget(wanted, session.get("budget")):
            # S-73: never prompt an uncapped session; do not leave it behind either.
            cleanup, cleanup_error = await self._discard(client, session_id)
            return Failure(
                BudgetNotConfirmed(
                    requested=wanted,
                    confirmed=session.get("budget"),
                    session_id=session_id,
                    cleanup=cleanup,
                    cleanup_error=cleanup_error,
                )
            )
        # A session created with initial events is already at work: the run follows that
        # turn the way it follows a reattached session's (no kickoff; its prompt comes after),
        # all of it — nothing of its history is settled (``attached``: not a first attach).
        started = bool(initial.unwrap())
        return Success(
            CMAConn(
                session_id,
                resumed=started,
                attached=started,
                session=_agent_summary(session),
                client=run_client,
            )
        )

    async def _discard(self, client: CMAClient, session_id: str) -> tuple[str, SessionError | None]:
        """Delete a session no prompt may reach, within ``cleanup_timeout`` in total —
        retries and a server trickling its answer included — and shielded from the caller's
        cancellation, so a run's timeout cannot leave it behind unasked."""
        deleted: Result[JSON, SessionError] | None = None
        with anyio.move_on_after(self.cleanup_timeout, shield=True):
            deleted = await client.delete_session(session_id)
        if deleted is None:
            return "timed_out", Timeout(timeout_s=self.cleanup_timeout, operation="delete_session")
        if isinstance(deleted, Success):
            return "deleted", None
        error = deleted.failure()
        if isinstance(error, HttpError) and error.status == 404:
            return "deleted", None  # already gone: what the cleanup wanted
        return "failed", error

    def session_id(self, conn: CMAConn) -> str | None:
        return conn.session_id

    def describe(self, conn: CMAConn) -> Mapping[str, JSON]:
        """The agent's name, id and model as the session reported them, and the API host."""
        out: dict[str, JSON] = {"gen_ai_provider": "anthropic"}
        agent = conn.session.get("agent") if isinstance(conn.session, dict) else None
        if isinstance(agent, dict):
            model = agent.get("model")
            model = model.get("id") if isinstance(model, dict) else model
            for key, value in (
                ("model", model),
                ("agent_name", agent.get("name")),
                ("agent_id", agent.get("id")),
            ):
                if isinstance(value, str) and value:
                    out[key] = value
        client = conn.client if conn.client is not None else self._client
        if client is not None:
            try:
                url = httpx.URL(client.settings.base_url)
            except (httpx.InvalidURL, TypeError, ValueError):
                return out
            out["server_address"] = url.host or None
            out["server_port"] = url.port or (443 if url.scheme == "https" else 80)
        return out

    def resumed(self, conn: CMAConn) -> bool:
        return conn.resumed

    async def aclose(self, conn: CMAConn) -> None:
        if conn.client is not None:  # this run's own client (C-5); the provider's outlives it
            client, conn.client = conn.client, None
            await client.aclose()
        else:
            await anyio.lowlevel.checkpoint()

    async def close(self) -> None:
        """Close the client this provider built (providers are reusable across runs)."""
        client = self._client
        if client is not None:
            if not self._injected:
                self._client = None  # built again on next use: its connections belong to one loop
            await client.aclose()

    # ── turns ──

    async def push_input(self, conn: CMAConn, input: Input) -> Result[None, SessionError]:
        built = self._client_of(conn)
        if isinstance(built, Failure):
            return Failure(built.failure())
        if not isinstance(input, list) or not input:
            return Failure(ProviderError(detail="refusing to post an empty or non-list input"))
        client = built.unwrap()
        sent = await client.send_events(conn.session_id, input)
        if isinstance(sent, Success):
            return Success(None)
        return await self._unless_landed(client, conn, input, sent.failure())

    async def _unless_landed(
        self, client: CMAClient, conn: CMAConn, input: list[JSON], error: SessionError
    ) -> Result[None, SessionError]:
        """A post that failed after it went out may still have landed: the client never sends
        one again once any of an answer arrived, nor on httpx when it cannot tell (issue
        #23). The host's event list says, as a resumed journal's does (``input_landed``): a
        post lands whole or not at all, so one echo missing means none landed. Tool results
        and confirmations all echoed: it landed, and the run goes on. None of it echoed after a
        ``stale_or_cut`` failure (the keep-alive race, as far as httpx can tell): it is posted
        again, the retry the client left to this check. Otherwise — other events, whose echo
        an earlier event of their type also matches, or no list — the error stands."""
        if not isinstance(error, TransportError) or error.error_type == "connect":
            return Failure(error)  # an answer, or a connection that never opened: nothing unsure
        listed = await client.list_events(conn.session_id)
        if isinstance(listed, Failure):
            return Failure(error)
        if self.codec.input_landed(input, listed.unwrap()):
            if not all(event_type(e) in _ECHOED_BY_ID for e in input):
                return Failure(error)
            log.warning(
                "the events post failed (%s) but the host has its events: taken as posted",
                error.message,
                extra=log_fields(provider="claude_managed_agents", session_id=conn.session_id),
            )
            return Success(None)
        if error.error_type != STALE_OR_CUT:
            return Failure(error)
        again = await client.send_events(conn.session_id, input)
        return Success(None) if isinstance(again, Success) else Failure(again.failure())

    async def stream(
        self,
        conn: CMAConn,
        on_connected: Callable[[], Awaitable[None]],
        on_event: Callable[[JSON], Awaitable[None]],
    ) -> Result[None, SessionError]:
        return await self._stream(conn, on_connected, on_event, None)

    async def _stream(
        self,
        conn: CMAConn,
        on_connected: Callable[[], Awaitable[None]],
        on_event: Callable[[JSON], Awaitable[None]],
        thread_id: str | None,
    ) -> Result[None, SessionError]:
        built = self._client_of(conn)
        if isinstance(built, Failure):
            return Failure(built.failure())
        client = built.unwrap()
        opening = client.stream_events(conn.session_id, event_deltas=self.event_deltas, thread_id=thread_id)
        async with opening as opened:
            if isinstance(opened, Failure):
                return Failure(opened.failure())
            response = opened.unwrap()
            url, rid = client.stream_url(conn.session_id, thread_id), request_id(response.headers)
            await on_connected()
            idle_s = self.stream_idle_timeout
            with anyio.CancelScope() as idle:
                dropped = await self._read(client, response, on_event, idle, url, rid)
            if idle.cancelled_caught:
                idle_drop = StreamDropped(detail=f"no data for {idle_s}s")
                return Failure(with_origin(idle_drop, url=url, request_id=rid))
            return dropped

    async def _read(
        self,
        client: CMAClient,
        response: StreamResponse,
        on_event: Callable[[JSON], Awaitable[None]],
        idle: anyio.CancelScope,
        url: str,
        rid: str | None,
    ) -> Result[None, SessionError]:
        """Decode the stream into ``on_event`` until it ends; ``idle`` fails silence.

        One deadline for the whole stream, moved on as data arrives (``rma_shell.transport.deadline``),
        so silence fails the stream after between 1 and 1.1 times ``stream_idle_timeout``.
        """
        idle_s = self.stream_idle_timeout
        silence.arm(idle, idle_s)
        decoder = SSEDecoder()
        receive = _receiver(response)
        while True:
            try:
                chunk = await receive()
            except Exception as exc:  # the connection broke mid-stream
                return Failure(with_origin(StreamDropped(detail=type(exc).__name__), url=url, request_id=rid))
            if not chunk:
                return Success(None)  # a clean close: the machine treats it as a drop
            silence.keep_ahead(idle, idle_s)
            for message in decoder.feed(chunk):
                if message.event == "ping" or not message.data:
                    continue
                if message.event == "error":
                    payload = _json_or_text(message.data)
                    frame = with_origin(
                        ProviderError(
                            detail=_frame_message(payload) or "stream error frame",
                            error_type=error_code(payload),
                            payload=payload,
                        ),
                        url=url,
                        request_id=rid,
                    )
                    return Failure(client.redact_error(frame))
                if message.event == "message":
                    continue  # the SDK drops frames without an event name
                try:
                    event = _decode_event(message.data)
                except ValueError:
                    bad = MalformedResponse(detail="stream frame is not JSON", response=message.data[:500])
                    return Failure(client.redact_error(with_origin(bad, url=url, request_id=rid)))
                await on_event(event)

    async def reconnect(
        self, conn: CMAConn, seen: tuple[str, ...]
    ) -> Result[tuple[CMAConn, Reconnected], SessionError]:
        built = self._client_of(conn)
        if isinstance(built, Failure):
            return Failure(built.failure())
        return await self._consolidated(built.unwrap(), conn, seen)

    async def reconnect_after(
        self, conn: CMAConn, boundary: str, processed_at: str | None
    ) -> Result[tuple[CMAConn, Reconnected], SessionError]:
        """The events from ``boundary`` on, listed from its ``processed_at`` (the boundary itself
        included: ``created_at[gte]``), so a Temporal turn reads what it needs, not the whole
        session each time. What it finds is ``reconnect``'s, but for ``seen``: only the ids
        listed, from the boundary on (the client processed what came before). A listing that
        lacks the boundary (a time the host does not compare as it stamped) is read again
        whole: the consolidation needs its position."""
        built = self._client_of(conn)
        if isinstance(built, Failure):
            return Failure(built.failure())
        client = built.unwrap()
        if processed_at is not None:
            listed = await client.list_events(conn.session_id, since=processed_at)
            if isinstance(listed, Failure):
                return Failure(listed.failure())
            if any(event_id(e) == boundary for e in listed.unwrap()):
                return Success(self._consolidation(conn, listed.unwrap(), (boundary,)))
        return await self._consolidated(client, conn, (boundary,))

    async def _consolidated(
        self, client: CMAClient, conn: CMAConn, seen: tuple[str, ...]
    ) -> Result[tuple[CMAConn, Reconnected], SessionError]:
        history = await client.list_events(conn.session_id)
        if isinstance(history, Failure):
            return Failure(history.failure())
        return Success(self._consolidation(conn, history.unwrap(), seen))

    def _consolidation(
        self, conn: CMAConn, history: list[JSON], seen: tuple[str, ...]
    ) -> tuple[CMAConn, Reconnected]:
        attach = conn.resumed and not conn.attached
        conn.attached = True
        found = self._consolidate(history, seen, (), attach=attach)
        return conn, found.reconnected(conn.session_id)

    # ── live-session extras ──

    async def threads(self, conn: CMAConn) -> Result[list[JSON], SessionError]:
        """The session's threads: the primary one and each sub-agent's (multi-agent sessions)."""
        built = self._client_of(conn)
        if isinstance(built, Failure):
            return Failure(built.failure())
        return await built.unwrap().list_threads(conn.session_id)

    async def thread_events(self, conn: CMAConn, thread_id: str) -> Result[list[JSON], SessionError]:
        built = self._client_of(conn)
        if isinstance(built, Failure):
            return Failure(built.failure())
        return await built.unwrap().list_thread_events(conn.session_id, thread_id)

    async def thread_stream(
        self, conn: CMAConn, thread_id: str, on_event: Callable[[JSON], Awaitable[None]]
    ) -> Result[None, SessionError]:
        """One thread's stream (with the provider's ``event_deltas``), read as the session's
        own is; the session machine never sees it: it is for watching a sub-agent."""
        return await self._stream(conn, anyio.lowlevel.checkpoint, on_event, thread_id)

    async def interrupt(self, conn: CMAConn) -> Result[None, SessionError]:
        return await self.push_input(conn, self.codec.interrupt_input())

    async def stop_remote(self, conn: CMAConn) -> Result[StopReport, SessionError]:
        """Issue #15: ``user.interrupt`` (wire §8.2: the agent pauses, control returns to the
        user), then the session's status read until it is idle (or terminated): confirmed. The
        runner's deadline cuts the wait short (unconfirmed); a refused interrupt is a Failure."""
        built = self._client_of(conn)
        if isinstance(built, Failure):
            return Failure(built.failure())
        client = built.unwrap()
        sent = await client.send_events(conn.session_id, self.codec.interrupt_input())
        if isinstance(sent, Failure):
            return Failure(sent.failure())
        while True:
            got = await client.get_session(conn.session_id)
            if isinstance(got, Failure):
                return Success(StopReport("unconfirmed", f"interrupt accepted; {got.failure().kind}"))
            session = got.unwrap()
            status = session.get("status") if isinstance(session, dict) else None
            if status in _STOPPED_STATUSES:
                return Success(StopReport("confirmed"))
            await anyio.sleep(STOP_POLL_INTERVAL_S)


def _receiver(response: StreamResponse) -> Callable[[], Awaitable[bytes]]:
    """The next piece of the stream's body, ``b""`` once it ended: a lean response is read
    directly, without a read timeout (the stream's idle deadline bounds it)."""
    if isinstance(response, LeanResponse):
        return functools.partial(response.receive, math.inf)
    chunks = response.aiter_bytes().__aiter__()

    async def receive() -> bytes:
        try:
            return await chunks.__anext__()
        except StopAsyncIteration:
            return b""

    return receive


def _agent_summary(session: JSON) -> JSON:
    """The part of a session resource ``describe`` reads: its agent's id, name and model.

    A live session keeps its conn for its whole life; the full resource (the agent's system
    prompt and tool schemas among it) was the largest thing an idle session held (bench/scale.py).
    """
    agent = session.get("agent") if isinstance(session, dict) else None
    if not isinstance(agent, dict):
        return None
    return {"agent": {key: agent[key] for key in ("id", "name", "model") if key in agent}}


def _same_budget(wanted: JSON, echoed: JSON) -> bool:
    if not isinstance(echoed, dict) or not isinstance(wanted, dict):
        return False
    w, e = wanted.get("max_list_cost") or {}, echoed.get("max_list_cost") or {}
    try:
        same_amount = Decimal(str(w.get("amount"))) == Decimal(str(e.get("amount")))
    except ArithmeticError:
        return False
    return echoed.get("type") == wanted.get("type") and same_amount and w.get("currency") == e.get("currency")


def _frame_message(payload: JSON) -> str | None:
    """The ``error.message`` of an Anthropic error frame ``{"type": "error", "error": {…}}``."""
    inner = payload.get("error") if isinstance(payload, Mapping) else None
    message = inner.get("message") if isinstance(inner, Mapping) else None
    return message if isinstance(message, str) and message else None


_KEYS: dict[str, str] = {}
"""One string per key seen in stream events, shared by every event that has it (about
``_KEYS_MAX`` at most: keys a server invents once it is full are left as decoded)."""
_KEYS_MAX = 4096


def _shared_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A decoded JSON object whose keys are the strings of ``_KEYS``.

    ``json.loads`` makes every key a new string object (it shares them only within one
    document), and a live session keeps its finished request's events until the next request
    starts (S-67): with shared keys, the ``type``, ``id``, ``processed_at`` … of every event
    are one string each, not one per event — ~4 KiB of an idle session's ~48 at one tool
    round trip (``bench/scale.py``: issue #17's 50 KiB target), for ~1 µs per event.
    """
    keys = _KEYS
    if len(keys) < _KEYS_MAX:
        return {keys.setdefault(key, key): value for key, value in pairs}
    return {keys.get(key, key): value for key, value in pairs}


_decode_event = json.JSONDecoder(object_pairs_hook=_shared_keys).decode
"""``json.loads`` for stream frames: the same values, the keys shared (``_shared_keys``)."""


def _json_or_text(data: str) -> JSON:
    try:
        return json.loads(data)
    except ValueError:
        return data[:2000]
