"""The Claude Managed Agents control-plane client: agents, environments, sessions, events, files.

A client speaking the wire described in ``shared/reference/claude-managed-agents-wire.md``
(the SDK's current values as defaults), over lean h11 lanes of its own (``rma_shell.transport.lean_http``)
or httpx — a caller's ``http_client``, file uploads, a proxy (see ``CMAClient``). What it does
around each call:

- **Auth** — an API key (sent as ``Authorization: Bearer`` like the SDK, or ``x-api-key`` with
  ``api_key_header="x-api-key"``) or a bearer-token file re-read on every attempt, retries
  included; a token with 30 s or less left fails before dispatch (``AuthenticationError``).
  Redirects are never followed with a bearer token.
- **Retries** — 408, 409, 429, 5xx and 529, connection failures, honouring ``x-should-retry``,
  ``retry-after-ms`` and ``retry-after``; the event stream's opening too. Calls that are not
  idempotent (creates, event posts, file uploads) are retried only when the request cannot
  have been processed: a connection that never opened, 429 and 529, or a kept-alive
  connection the server had closed — one that broke before any byte of an answer arrived
  (a host that began answering had read the request), which only the lean lanes can tell:
  on httpx that failure is ``stale_or_cut`` and not retried. Gets, lists, archives, deletes
  and updates are retried on every transient failure.
- **Errors as values** — every method returns ``Result[..., SessionError]``: ``HttpError`` with
  the API's error body, ``AuthenticationError`` for 401, ``TransportError`` for the network.
- **Telemetry** — ``rma.request.start/stop/exception`` with method, path and status.

Secrets (API key, token, token file path) never appear in a repr, a log line or telemetry.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Literal

import anyio
import httpx
from returns.result import Failure, Result, Success

from rma.config import AnthropicSettings, ApiKeyAuth, BearerFileAuth, parse_bearer_file
from rma.errors import (
    AuthenticationError,
    HttpError,
    MalformedResponse,
    SessionError,
    TransportError,
    error_text,
)
from rma.origin import error_code, request_id, undialable, with_origin
from rma.redact import redact_error
from rma.retry import next_delay_s
from rma.vocabulary import JSON
from rma_shell.logging import log_fields
from rma_shell.providers.claude.token_file import TokenFileError, read_token_file, read_token_file_async
from rma_shell.seams import Seams, pick
from rma_shell.telemetry import Telemetry
from rma_shell.telemetry import default as default_telemetry
from rma_shell.transport.http import async_client, env_proxies, host_of, shared_ssl_context
from rma_shell.transport.lean_http import Connection as LeanConnection
from rma_shell.transport.lean_http import LeanPool, Timeouts
from rma_shell.transport.lean_http import Response as LeanResponse

log = logging.getLogger("rma.providers.claude_managed_agents")

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# Answers that say the server did not process the request: safe to retry even a create.
UNPROCESSED_STATUSES = frozenset({429, 529})
Sleep = Callable[[float], Awaitable[None]]
Verdict = Literal["always", "if_idempotent", "never"]
"""How a failed attempt may be retried: ``always`` (the request cannot have been processed,
or the server said ``x-should-retry: true``), ``if_idempotent`` (a transient failure of an
idempotent call) or ``never`` (``x-should-retry: false``, 401, a non-transient failure)."""
# Transport failures raised before the request left: the request cannot have been processed.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_MAX_CONNECTIONS = 100
"""The client's own lean lanes at most: httpx's default connection cap, which they replace."""


def _describe(exc: BaseException) -> str:
    """``ConnectError: [Errno 111] Connection refused`` — the type and what it said."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__


# Failures that, on a reused connection with no answer yet, mean the server had closed it.
_STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)

STALE_OR_CUT: Final = "stale_or_cut"
"""``TransportError.error_type`` of a call that failed on a reused httpx connection while its
answer was awaited: either the keep-alive race (the server had closed the connection and
never read the request) or an answer cut short after the server had read it — httpx cannot
tell which (see ``_WireTrace``), so a non-idempotent call is not sent again blind; a caller
that can check whether it landed may (``ClaudeManagedAgents.push_input`` does for events)."""


class _WireTrace:
    """httpcore's ``trace`` extension for one request: was it sent on a reused (kept-alive)
    connection, and had any of an answer arrived when it failed? Without trace events (a mock
    transport) it claims nothing, so only a real reused connection makes a failure look like
    the keep-alive race. On a lean lane, ``CMAClient._lean_call`` sets the same facts, exactly.

    ``heard`` is False while nothing of an answer has arrived, True once some has — and None
    on httpx from the moment the response head is awaited until it is complete: httpcore
    raises the same ``RemoteProtocolError`` ("Server disconnected without sending a
    response.") or ``ReadError`` whether the server sent nothing or part of a head, and its
    trace has no event for the bytes in between. A lane counts them (``response_began``)."""

    __slots__ = ("fresh", "heard", "reused")

    def __init__(self) -> None:
        self.fresh = False
        self.reused = False
        self.heard: bool | None = False

    async def __call__(self, name: str, info: Mapping[str, Any]) -> None:
        if name.startswith("connection.connect_tcp."):
            self.fresh = True
        elif name.endswith(".send_request_headers.started"):
            self.reused = not self.fresh
        elif name.endswith(".receive_response_headers.started"):
            self.heard = None
        elif name.endswith(".receive_response_headers.complete"):
            self.heard = True

    @property
    def stale_keep_alive(self) -> bool:
        """A reused connection that failed before any of an answer arrived: the server had
        closed it, so it never read the request."""
        return self.reused and self.heard is False

    @property
    def stale_or_cut(self) -> bool:
        """A reused connection that failed while httpx awaited the head: see ``STALE_OR_CUT``."""
        return self.reused and self.heard is None


class CMAClient:
    """One client per set of credentials; safe to share between sessions.

    With no ``http_client`` given, the JSON calls (event posts, session and history reads …) go
    over the client's own lean lanes (``rma_shell.transport.lean_http``, up to 100 keep-alive
    connections) and each event stream over a lean connection of its own (see
    ``_open_stream``); file uploads, and everything while the environment configures a proxy,
    over httpx. A caller-owned ``http_client`` carries everything, the streams too, so its
    limits must allow one connection per concurrent live session plus the posts.
    """

    def __init__(
        self,
        settings: AnthropicSettings,
        *,
        api_key_header: str = "authorization",
        max_retries: int = 2,
        http_client: httpx.AsyncClient | None = None,
        telemetry: Telemetry | None = None,
        _seams: Seams | None = None,
    ) -> None:
        if api_key_header not in ("authorization", "x-api-key"):
            raise ValueError("api_key_header must be 'authorization' or 'x-api-key'")
        self.settings = settings
        self.api_key_header = api_key_header
        self.max_retries = max_retries
        self._own_client = http_client is None
        timeout = httpx.Timeout(settings.read_timeout, connect=30.0)
        self._http = http_client or async_client(timeout=timeout, follow_redirects=False)
        self._lean: LeanPool | None = None
        """The client's own lean lanes (``rma_shell.transport.lean_http``), which carry its JSON calls —
        the event posts of every tool round trip among them — when the client is its own and
        the environment configures no proxy (only httpx honours one); otherwise httpx."""
        if self._own_client and not env_proxies():
            self._lean = LeanPool(_MAX_CONNECTIONS, ssl_context=shared_ssl_context())
        self._timeouts = Timeouts(connect=30.0, read=timeout.read or math.inf, write=timeout.read or math.inf)
        self._seams = _seams
        self._sleep: Sleep = pick(_seams, "sleep", anyio.sleep)
        self._rand: Callable[[], float] = pick(_seams, "rand", random.random)
        self._clock: Callable[[], float] = pick(_seams, "clock", time.time)
        self._read_file: Callable[[str], str] = pick(_seams, "read_file", read_token_file)
        self.telemetry = telemetry or default_telemetry
        self._last_token: str | None = None
        """The bearer token last read from the file: masked in every error, like the key."""

    def __repr__(self) -> str:
        kind = "api_key" if isinstance(self.settings.auth, ApiKeyAuth) else "bearer_token_file"
        return f"CMAClient(base_url={self.settings.base_url!r}, auth={kind}=***)"

    async def aclose(self) -> None:
        if self._own_client:
            await self._http.aclose()
        if self._lean is not None:
            await self._lean.aclose()

    def redact_error(self, error: SessionError) -> SessionError:
        """``error`` with this client's credentials masked wherever a server echoed them."""
        auth = self.settings.auth
        if isinstance(auth, ApiKeyAuth):
            return redact_error(error, (auth.api_key.reveal(),))
        return redact_error(error, (auth.path.reveal(), self._last_token))

    def _scrubbed(self, outcome: Result[Any, SessionError]) -> Result[Any, SessionError]:
        return Failure(self.redact_error(outcome.failure())) if isinstance(outcome, Failure) else outcome

    # ── auth and headers ──

    async def _auth_headers(self) -> Result[dict[str, str], SessionError]:
        auth = self.settings.auth
        if isinstance(auth, ApiKeyAuth):
            key = auth.api_key.reveal()
            if self.api_key_header == "x-api-key":
                return Success({"x-api-key": key})
            return Success({"authorization": f"Bearer {key}"})
        assert isinstance(auth, BearerFileAuth)
        try:  # off the event loop, abandoned when the run's deadline cancels it
            text = await read_token_file_async(auth.path.reveal(), self._read_file)
        except TokenFileError as exc:  # a FIFO, a device, a directory, too large
            return Failure(AuthenticationError(detail=f"bearer token file {exc.reason}"))
        except (OSError, ValueError) as exc:  # ValueError: UnicodeDecodeError on a binary file
            return Failure(AuthenticationError(detail=f"bearer token file unreadable: {type(exc).__name__}"))
        token = parse_bearer_file(text, self._clock())
        if isinstance(token, Failure):
            return Failure(token.failure())
        self._last_token = token.unwrap().reveal()
        return Success({"authorization": f"Bearer {self._last_token}"})

    async def _headers(
        self, *, beta: str | None, accept: str = "application/json"
    ) -> Result[dict[str, str], SessionError]:
        auth = await self._auth_headers()
        if isinstance(auth, Failure):
            return auth
        headers = {"anthropic-version": self.settings.anthropic_version, "accept": accept, **auth.unwrap()}
        if beta:
            headers["anthropic-beta"] = beta
        return Success(headers)

    def _url(self, path: str) -> str:
        return self.settings.base_url.rstrip("/") + path

    def _rejected(self, method: str, path: str, body: JSON) -> AuthenticationError:
        """A 401: what was rejected (the API's error type and message) and by which host."""
        error = body.get("error") if isinstance(body, dict) else None
        code = error.get("type") if isinstance(error, dict) else None
        return AuthenticationError(
            detail=f"HTTP 401 on {method} {path}: {error_text(body)}",
            status=401,
            error_code=code if isinstance(code, str) else None,
            error_message=error_text(body),
            host=host_of(self.settings.base_url),
        )

    # ── the one request path ──

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: JSON = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
        beta: str | None = "",
        files: Mapping[str, Any] | None = None,
        data: Mapping[str, str] | None = None,
        raw: bool = False,
    ) -> Result[Any, SessionError]:
        """Send one API call with retries. ``beta=""`` means the managed-agents beta header.

        A failure never carries the credentials, even when the server echoed them."""
        outcome = await self._request(method, path, json_body, params, idempotent, beta, files, data, raw)
        return self._scrubbed(outcome)

    async def _request(
        self,
        method: str,
        path: str,
        json_body: JSON,
        params: Mapping[str, Any] | None,
        idempotent: bool | None,
        beta: str | None,
        files: Mapping[str, Any] | None,
        data: Mapping[str, str] | None,
        raw: bool,
    ) -> Result[Any, SessionError]:
        if idempotent is None:
            idempotent = method in ("GET", "DELETE")
        beta_value = self.settings.beta if beta == "" else beta
        attempt = 0
        while True:
            headers = await self._headers(
                beta=beta_value, accept="application/binary" if raw else "application/json"
            )
            if isinstance(headers, Failure):
                return headers  # K-17: before dispatch, every attempt
            outcome, retry_after, verdict = await self._attempt(
                method, path, headers.unwrap(), json_body, params, files, data, raw, attempt
            )
            if isinstance(outcome, Success):
                return outcome
            error = outcome.failure()
            retryable = verdict == "always" or (
                verdict == "if_idempotent" and idempotent and _transient(error)
            )
            if attempt >= self.max_retries or not retryable:
                return outcome
            await self._back_off(method, path, error, attempt, retry_after)
            attempt += 1

    async def _back_off(
        self, method: str, path: str, error: SessionError, attempt: int, retry_after: Mapping[str, str] | None
    ) -> None:
        """Log a retryable failure and sleep the backoff (``Retry-After`` honoured) before
        attempt ``attempt + 1`` — one schedule for every request and for opening the stream."""
        delay = next_delay_s(
            attempt,
            headers=retry_after,
            now_epoch_s=self._clock(),
            jitter=min(1.0, max(0.0, self._rand())),
            base_s=0.5,
            cap_s=8.0,
        )
        log.warning(
            "%s %s failed (%s); retry %d in %.2fs",
            method,
            path,
            error.kind,
            attempt + 1,
            delay,
            extra=log_fields(
                provider="claude_managed_agents",
                method=method,
                path=path,
                attempt=attempt,
                error=error.kind,
                status=getattr(error, "status", None),
                delay_s=delay,
            ),
        )
        await self._sleep(delay)

    async def _attempt(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        json_body: JSON,
        params: Mapping[str, Any] | None,
        files: Mapping[str, Any] | None,
        data: Mapping[str, str] | None,
        raw: bool,
        attempt: int,
    ) -> tuple[Result[Any, SessionError], Mapping[str, str] | None, Verdict]:
        bad_url = undialable(self._url(path), "base_url")
        if bad_url is not None:
            return Failure(bad_url), None, "never"
        meta = {"provider": "claude_managed_agents", "method": method, "path": path, "attempt": attempt}
        t0 = time.perf_counter()
        if self.telemetry.listening("rma.request.start"):  # built only for a subscriber
            self.telemetry.emit("rma.request.start", {"system_time": time.time()}, meta)
        wire = _WireTrace()
        try:
            if self._lean is not None and files is None and data is None:
                status, got, content = await self._lean_call(method, path, headers, json_body, params, wire)
            else:
                response = await self._http.request(
                    method,
                    self._url(path),
                    headers=headers,
                    json=json_body if files is None and json_body is not None else None,
                    params=_query(params),
                    files=files,
                    data=data,
                    follow_redirects=False,  # K-18, whatever the injected client's default
                    extensions={"trace": wire},
                )
                status, got, content = response.status_code, response.headers, response.content
        except _NEVER_SENT as exc:
            self._stop(meta, t0, error="transport_error")
            failure = TransportError(detail=_describe(exc), error_type="connect")
            return Failure(with_origin(failure, url=self._url(path))), None, "always"
        except httpx.HTTPError as exc:
            self._stop(meta, t0, error="transport_error")
            if isinstance(exc, _STALE_CONNECTION) and wire.stale_keep_alive:
                # The server closed an idle keep-alive connection as the request went out on
                # it, and answered nothing at all: another attempt opens a fresh connection
                # (the pool discarded the closed one), whatever the method (issue #12).
                why = "the server closed a kept-alive connection before answering"
                stale = TransportError(detail=f"{type(exc).__name__}: {why}", error_type="stale_connection")
                return Failure(with_origin(stale, url=self._url(path))), None, "always"
            if isinstance(exc, _STALE_CONNECTION) and wire.stale_or_cut:
                # The same failure on httpx, which cannot say whether part of an answer had
                # come — a server that began answering had read the request, and an event
                # post sent again would be taken twice (issue #23): retried only if idempotent.
                why = "a kept-alive connection broke before a whole answer; it may have been read"
                unsure = TransportError(detail=f"{_describe(exc)} ({why})", error_type=STALE_OR_CUT)
                return Failure(with_origin(unsure, url=self._url(path))), None, "if_idempotent"
            detail = _describe(exc)
            if wire.heard:  # the server had begun answering: it read the request
                detail += " (after the answer began)"
            failure = TransportError(detail=detail, error_type=type(exc).__name__)
            return Failure(with_origin(failure, url=self._url(path))), None, "if_idempotent"
        except BaseException as exc:
            elapsed = {"duration": time.perf_counter() - t0}
            self.telemetry.emit("rma.request.exception", elapsed, {**meta, "kind": type(exc).__name__})
            raise
        self._stop(meta, t0, status=status)
        if 200 <= status < 300:
            if raw:
                return Success(content), None, "never"
            try:
                return Success(json.loads(content) if content else None), None, "never"
            except ValueError:
                malformed = MalformedResponse(detail=f"{method} {path}: body is not JSON")
                origin = with_origin(malformed, url=self._url(path), request_id=request_id(got))
                return Failure(origin), None, "never"
        body: JSON
        try:
            body = json.loads(content)
        except ValueError:
            body = content.decode("utf-8", "replace")[:2000]
        should_retry = got.get("x-should-retry")
        if status == 401:
            return Failure(self._rejected(method, path, body)), None, "never"
        error = with_origin(
            HttpError(status=status, body=body, method=method, url=path),
            url=self._url(path),
            request_id=request_id(got, body),
            code=error_code(body),
        )
        if should_retry == "false":
            return Failure(error), None, "never"  # the server's word beats the status rules
        if should_retry == "true" or status in UNPROCESSED_STATUSES:
            return Failure(error), got, "always"
        return Failure(error), got, "if_idempotent"

    async def _lean_call(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        json_body: JSON,
        params: Mapping[str, Any] | None,
        wire: _WireTrace,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One call on a lean lane: its status, headers and whole body. Raises httpx's
        exception classes (``rma_shell.transport.lean_http``); ``wire`` learns whether a failed request
        went out on a kept-alive connection and whether any of an answer had arrived — which
        the lane knows to the byte, where httpx's trace knows only a whole head."""
        assert self._lean is not None
        url = httpx.URL(self._url(path), params=_query(params))
        body = b""
        if json_body is not None:
            # What httpx sends for ``json=`` (0.28): compact, UTF-8, NaN refused.
            body = json.dumps(json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
            headers = {**headers, "content-type": "application/json"}
        lane = await self._lean.acquire(self._timeouts.read)
        connects = lane.connects
        try:
            wire.reused = lane.is_open
            try:
                response = await lane.request(method, url, headers, body, self._timeouts)
            except BaseException:
                wire.reused = wire.reused and lane.connects == connects  # not a stale lane reopened
                wire.heard = lane.response_began  # a head cut short is no keep-alive race
                raise
            wire.heard = True
            return response.status_code, response.headers, await response.aread()
        finally:
            self._lean.release(lane)

    def _stop(self, meta: Mapping[str, Any], t0: float, **extra: Any) -> None:
        if self.telemetry.listening("rma.request.stop"):
            self.telemetry.emit("rma.request.stop", {"duration": time.perf_counter() - t0}, {**meta, **extra})

    async def _list_all(
        self, path: str, params: Mapping[str, Any] | None = None, *, beta: str | None = ""
    ) -> Result[list[JSON], SessionError]:
        """Follow ``next_page`` to the end (a repeated cursor stops the walk)."""
        items: list[JSON] = []
        query = dict(params or {})
        seen_cursors: set[str] = set()
        while True:
            page = await self.request("GET", path, params=query, beta=beta)
            if isinstance(page, Failure):
                return page
            body = page.unwrap()
            if not isinstance(body, dict) or not isinstance(body.get("data"), list):
                malformed = MalformedResponse(detail=f"GET {path}: expected a page with data", response=body)
                return Failure(self.redact_error(malformed))
            items.extend(body["data"])
            cursor = body.get("next_page")
            if not cursor or cursor in seen_cursors:
                return Success(items)
            seen_cursors.add(cursor)
            query["page"] = cursor

    # ── agents ──

    async def create_agent(self, body: Mapping[str, JSON]) -> Result[JSON, SessionError]:
        return await self.request("POST", "/v1/agents", json_body=dict(body))

    async def get_agent(self, agent_id: str, version: int | None = None) -> Result[JSON, SessionError]:
        return await self.request("GET", f"/v1/agents/{agent_id}", params={"version": version})

    async def update_agent(self, agent_id: str, body: Mapping[str, JSON]) -> Result[JSON, SessionError]:
        return await self.request("POST", f"/v1/agents/{agent_id}", json_body=dict(body), idempotent=True)

    async def list_agents(
        self, *, include_archived: bool = False, limit: int = 100
    ) -> Result[list[JSON], SessionError]:
        return await self._list_all("/v1/agents", {"include_archived": include_archived, "limit": limit})

    async def list_agent_versions(self, agent_id: str) -> Result[list[JSON], SessionError]:
        return await self._list_all(f"/v1/agents/{agent_id}/versions", {"limit": 100})

    async def archive_agent(self, agent_id: str) -> Result[JSON, SessionError]:
        return await self.request("POST", f"/v1/agents/{agent_id}/archive", idempotent=True)

    # ── environments ──

    async def create_environment(self, body: Mapping[str, JSON]) -> Result[JSON, SessionError]:
        return await self.request("POST", "/v1/environments", json_body=dict(body))

    async def get_environment(self, environment_id: str) -> Result[JSON, SessionError]:
        return await self.request("GET", f"/v1/environments/{environment_id}")

    async def list_environments(self, *, include_archived: bool = False) -> Result[list[JSON], SessionError]:
        return await self._list_all("/v1/environments", {"include_archived": include_archived, "limit": 100})

    async def archive_environment(self, environment_id: str) -> Result[JSON, SessionError]:
        return await self.request("POST", f"/v1/environments/{environment_id}/archive", idempotent=True)

    async def delete_environment(self, environment_id: str) -> Result[JSON, SessionError]:
        return await self.request("DELETE", f"/v1/environments/{environment_id}")

    # ── sessions ──

    async def create_session(self, body: Mapping[str, JSON]) -> Result[JSON, SessionError]:
        return await self.request("POST", "/v1/sessions", json_body=dict(body))

    async def get_session(self, session_id: str) -> Result[JSON, SessionError]:
        return await self.request("GET", f"/v1/sessions/{session_id}")

    async def update_session(self, session_id: str, body: Mapping[str, JSON]) -> Result[JSON, SessionError]:
        return await self.request("POST", f"/v1/sessions/{session_id}", json_body=dict(body), idempotent=True)

    async def list_sessions(self, **params: Any) -> Result[list[JSON], SessionError]:
        return await self._list_all("/v1/sessions", {"limit": 100, **params})

    async def archive_session(self, session_id: str) -> Result[JSON, SessionError]:
        return await self.request("POST", f"/v1/sessions/{session_id}/archive", idempotent=True)

    async def delete_session(self, session_id: str) -> Result[JSON, SessionError]:
        return await self.request("DELETE", f"/v1/sessions/{session_id}")

    # ── events ──

    async def send_events(self, session_id: str, events: Sequence[JSON]) -> Result[JSON, SessionError]:
        if not events:
            # The API rejects an empty list; never send one (S-53).
            return Failure(MalformedResponse(detail="refusing to post an empty events list"))
        return await self.request(
            "POST", f"/v1/sessions/{session_id}/events", json_body={"events": list(events)}
        )

    async def list_events(
        self, session_id: str, *, limit: int = 1000, since: str | None = None
    ) -> Result[list[JSON], SessionError]:
        """The session's events, oldest first; ``since``: only those processed at or after that
        time (``created_at[gte]``, which the API compares with each event's ``processed_at``)."""
        params: dict[str, Any] = {"order": "asc", "limit": limit}
        if since is not None:
            params["created_at[gte]"] = since
        return await self._list_all(f"/v1/sessions/{session_id}/events", params)

    @asynccontextmanager
    async def stream_events(
        self, session_id: str, *, event_deltas: Sequence[str] = (), thread_id: str | None = None
    ) -> AsyncIterator[Result[StreamResponse, SessionError]]:
        """Open ``GET …/events/stream``; yields the streaming response (``aiter_bytes``,
        ``aread``, ``headers``; an ``httpx.Response`` on httpx, a lean one on a lean lane).
        ``event_deltas`` asks previews of those event types (``agent.message``,
        ``agent.thinking``: ``event_deltas[]=…``, as the SDK encodes it); ``thread_id`` opens
        that session thread's stream (``…/threads/{id}/stream``) instead.

        Opening it is retried like any idempotent call (issue #12): a transient status (408,
        409, 429, 5xx, 529, or ``x-should-retry: true``) or a connection that failed, up to
        ``max_retries`` times, honouring ``retry-after-ms`` / ``retry-after``. Once the stream is
        open nothing is retried here: a drop mid-stream is the session machine's to reconnect.
        """
        path = self._stream_path(session_id, thread_id)
        query = _query({"event_deltas": list(event_deltas)}) if event_deltas else None
        target = f"{path}?{query}" if query else path
        attempt = 0
        while True:
            opened, retry_after, retryable, held = await self._open_stream(target)
            try:
                if isinstance(opened, Success) or not retryable or attempt >= self.max_retries:
                    yield opened
                    return
            finally:
                await _release(held)
            error = opened.failure()
            await self._back_off("GET", path, error, attempt, retry_after)
            attempt += 1

    def stream_url(self, session_id: str, thread_id: str | None = None) -> str:
        """Where ``stream_events`` reads ``session_id``'s events (for errors that name it)."""
        return self._url(self._stream_path(session_id, thread_id))

    @staticmethod
    def _stream_path(session_id: str, thread_id: str | None) -> str:
        if thread_id is None:
            return f"/v1/sessions/{session_id}/events/stream"
        return f"/v1/sessions/{session_id}/threads/{thread_id}/stream"

    # ── session threads (multi-agent sessions) ──

    async def list_threads(self, session_id: str) -> Result[list[JSON], SessionError]:
        return await self._list_all(f"/v1/sessions/{session_id}/threads", {"limit": 1000})

    async def get_thread(self, session_id: str, thread_id: str) -> Result[JSON, SessionError]:
        return await self.request("GET", f"/v1/sessions/{session_id}/threads/{thread_id}")

    async def list_thread_events(
        self, session_id: str, thread_id: str, *, limit: int = 1000
    ) -> Result[list[JSON], SessionError]:
        return await self._list_all(
            f"/v1/sessions/{session_id}/threads/{thread_id}/events", {"order": "asc", "limit": limit}
        )

    async def _open_stream(
        self, path: str
    ) -> tuple[Result[StreamResponse, SessionError], Mapping[str, str] | None, bool, _Held]:
        """One attempt at opening the stream: the outcome, the headers a retry honours,
        whether a retry may help, and what to close once done with it.

        A stream holds its connection for the session's whole life, so with the client's own
        connections it gets one of its own: in the shared pool, 100 live sessions would
        deadlock (the cap: the next stream and every event post wait for a connection the
        streams never return), and past it httpcore's pool, which walks every connection on
        each request and each response close, would make every post cost O(sessions). That
        connection is a lean one (``rma_shell.transport.lean_http``: ~6 KiB less per live session than
        an ``httpx.AsyncClient`` of its own, and no generator stack per chunk), or, with a
        proxy in the environment, a client of its own, which honours it as the shared one does.
        """
        headers = await self._headers(beta=self.settings.beta, accept="text/event-stream")
        if isinstance(headers, Failure):
            return Failure(headers.failure()), None, False, ()  # K-17: before dispatch, every attempt
        # Only the opening is guarded: an error the caller's body raises while reading must
        # propagate as itself, not be caught here (a second yield would turn it into
        # "generator didn't stop after athrow()").
        held: _Held = ()
        response: StreamResponse
        try:
            if self._lean is not None:
                lane = LeanConnection(shared_ssl_context())
                held = (lane,)
                response = await lane.request(
                    "GET", httpx.URL(self._url(path)), headers.unwrap(), b"", _STREAM
                )
            else:
                client = self._http if not self._own_client else async_client(follow_redirects=False)
                held = () if client is self._http else (client,)
                request = client.build_request(
                    "GET",
                    self._url(path),
                    headers=headers.unwrap(),
                    timeout=httpx.Timeout(None, connect=30.0),
                )
                response = await client.send(request, stream=True, follow_redirects=False)  # K-18
            held = (response, *held)
            content = await response.aread() if response.status_code != 200 else b""
        except httpx.HTTPError as exc:
            await _release(held)
            failure = TransportError(detail=_describe(exc), error_type=type(exc).__name__)
            return Failure(with_origin(failure, url=self._url(path))), None, True, ()
        except BaseException:
            await _release(held)
            raise
        status = response.status_code
        if status == 200:
            return Success(response), None, False, held
        body: JSON
        try:
            body = json.loads(content)
        except ValueError:
            body = content.decode("utf-8", "replace")[:2000]
        if status == 401:
            return Failure(self.redact_error(self._rejected("GET", path, body))), None, False, held
        error = with_origin(
            HttpError(status=status, body=body, method="GET", url=path),
            url=self._url(path),
            request_id=request_id(response.headers, body),
            code=error_code(body),
        )
        should_retry = response.headers.get("x-should-retry")
        retryable = should_retry == "true" or (should_retry != "false" and status in RETRY_STATUSES)
        return Failure(self.redact_error(error)), dict(response.headers), retryable, held

    # ── session resources and files ──

    async def add_session_resource(
        self, session_id: str, body: Mapping[str, JSON]
    ) -> Result[JSON, SessionError]:
        return await self.request("POST", f"/v1/sessions/{session_id}/resources", json_body=dict(body))

    def _files_beta(self) -> str | None:
        """Both betas by default (session-scoped listing needs the managed-agents one, wire
        §13); ``files_beta=None`` sends no beta header on Files calls, exactly as the SDK."""
        files_beta = self.settings.files_beta
        if not files_beta:
            return None
        return ",".join(b for b in (files_beta, self.settings.beta) if b)

    async def upload_file(
        self, filename: str, content: bytes, mime_type: str | None = None
    ) -> Result[JSON, SessionError]:
        """``POST /v1/files``; without ``mime_type`` the part's type is inferred from the name
        (``ClaudeFiles.put`` checks an explicit one first)."""
        if mime_type is None:
            from rma_shell.artifacts.claude_files import OCTET_STREAM, content_type

            mime_type = content_type(filename).value_or(OCTET_STREAM)
        files = {"file": (filename, content, mime_type)}
        return await self.request("POST", "/v1/files", files=files, beta=self._files_beta())

    async def list_files(self, *, scope_id: str | None = None) -> Result[list[JSON], SessionError]:
        # Any repeated cursor ends the walk (an A → B → A cycle too, not only A → A).
        return await self._list_all(
            "/v1/files", {"limit": 1000, "scope_id": scope_id}, beta=self._files_beta()
        )

    async def get_file(self, file_id: str) -> Result[JSON, SessionError]:
        return await self.request("GET", f"/v1/files/{file_id}", beta=self._files_beta())

    async def download_file(self, file_id: str) -> Result[bytes, SessionError]:
        return await self.request("GET", f"/v1/files/{file_id}/content", beta=self._files_beta(), raw=True)

    async def delete_file(self, file_id: str) -> Result[JSON, SessionError]:
        return await self.request("DELETE", f"/v1/files/{file_id}", beta=self._files_beta())


StreamResponse = httpx.Response | LeanResponse
"""An opened event stream: on the caller's client or a proxy's, httpx's; otherwise a lean one."""
_STREAM = Timeouts(connect=30.0, read=math.inf, write=math.inf)
"""A stream's: only connecting is bounded (the provider bounds its silence)."""
_Held = tuple[httpx.Response | LeanResponse | LeanConnection | httpx.AsyncClient, ...]
"""What an opened stream holds: its response, then the connection or client of its own."""


async def _release(held: _Held) -> None:
    """Close an opened stream's response, then its own pool, even when the first close fails."""
    if not held:
        return
    try:
        await held[0].aclose()
    finally:
        await _release(held[1:])


def _query(params: Mapping[str, Any] | None) -> httpx.QueryParams | None:
    """Drop Nones; arrays use bracket encoding (``types[]=a&types[]=b``); bools as true/false."""
    if not params:
        return None
    out: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            out.extend((f"{key}[]", str(v)) for v in value)
        elif isinstance(value, bool):
            out.append((key, "true" if value else "false"))
        else:
            out.append((key, str(value)))
    return httpx.QueryParams(out)


def _transient(error: SessionError) -> bool:
    if isinstance(error, TransportError):
        return True
    return isinstance(error, HttpError) and error.status in RETRY_STATUSES


__all__ = ["CMAClient"]
