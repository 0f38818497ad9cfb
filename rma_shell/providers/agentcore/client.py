"""The Bedrock AgentCore HTTP client: SigV4-signed requests, event-stream responses, on anyio.

``AgentCoreClient`` moves bytes for the AgentCore provider and the session-storage artifact
store: one ``InvokeHarness`` attempt (``invoke_harness``: every decoded event handed to
``on_event`` as it arrives, silence beyond ``idle_timeout`` fails the attempt, B-28/B-29),
``InvokeAgentRuntimeCommand`` (``run_command``: stdout/stderr streamed to ``on_output``,
retried before any stream byte on throttling, transient 5xx and ``RetryableConflictException``),
``StopRuntimeSession`` (``stop_runtime_session``, issue #15) and signed JSON requests for the
control plane (``request_json``). Credentials come from a
``CredentialSource`` asked before every request, so refreshing credentials (roles, SSO) work.

What it is not: it makes no loop decisions and never retries an invoke itself — whether a
failed turn may be re-sent is the provider's call (B-9…B-12). Requests are signed exactly as
sent: the URL is percent-encoded once here and httpx (or the lean lanes, which send
``httpx.URL(url).raw_path``) keeps it byte for byte. ``InvokeHarness`` goes over the client's
own lean h11 lanes (``rma_shell.transport.lean_http``) unless the caller gave an ``http_client``.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import random
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs
import httpx
from returns.result import Failure, Result, Success

from rma.errors import (
    AuthenticationError,
    CommandException,
    EarlyTermination,
    HttpError,
    MalformedFrame,
    MalformedResponse,
    SessionError,
    StreamDropped,
    StreamException,
    TransportError,
)
from rma.origin import request_id, undialable, with_origin
from rma.providers.agentcore.codec import (
    AUTH_CODES,
    EVENT_STREAM_TYPE,
    SERVICE,
    SESSION_HEADER,
    USER_HEADER,
    StreamFault,
    classify,
    error_code,
    invoke_url,
    is_retryable,
    quote_value,
    stop_runtime_session_body,
    stop_runtime_session_url,
)
from rma.providers.agentcore.commands import CommandAssembler, CommandResult, command_body
from rma.redact import redact_error
from rma.retry import is_transient_error, next_delay_s
from rma.vocabulary import JSON
from rma.wire.eventstream import EventStreamDecoder, EventStreamError, Message
from rma.wire.sigv4 import sign
from rma_shell.aws_credentials import CredentialSource
from rma_shell.options import renamed_options
from rma_shell.seams import Seams, pick
from rma_shell.telemetry import Telemetry
from rma_shell.telemetry import default as default_telemetry
from rma_shell.transport import deadline as silence
from rma_shell.transport.http import host_of, shared_ssl_context, user_agent
from rma_shell.transport.lean_http import LeanPool, Timeouts
from rma_shell.transport.lean_http import Response as LeanResponse

logger = logging.getLogger("rma.providers.bedrock_agentcore")

_KEEPALIVE = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]

DEFAULT_IDLE_TIMEOUT_S = 300.0
"""B-29: only silence between chunks fails a stream; the server's budget is timeoutSeconds."""

_BODY_PREVIEW = 2000
_MAX_CONNECTIONS = 100
"""httpx's default pool size: invokes in flight at once on the client's own lanes."""

Response = httpx.Response | LeanResponse


@attrs.frozen
class Invoked:
    """One InvokeHarness attempt that got a 200: the events it carried, in order."""

    events: tuple[JSON, ...]
    complete: bool
    """A ``messageStop`` arrived (B-10); False means the stream ended early."""
    url: str | None = None
    """Where it was sent, for errors about it."""
    request_id: str | None = None
    """The response's ``x-amzn-RequestId``."""


OnEvent = Callable[[JSON], Awaitable[None]]
OnOutput = Callable[[str, str], Awaitable[None]]


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _json_or_text(raw: bytes) -> JSON:
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text[:_BODY_PREVIEW]


class AgentCoreClient:
    """Signed access to the AgentCore data and control planes of one region."""

    @renamed_options("AgentCoreClient")
    def __init__(
        self,
        *,
        region: str,
        credentials: CredentialSource,
        data_url: str,
        control_url: str,
        http_client: httpx.AsyncClient | None = None,
        connect_timeout: float = 30.0,
        read_timeout: float = 600.0,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
        max_retries: int = 2,
        backoff_base: float = 0.5,
        backoff_cap: float = 20.0,
        telemetry: Telemetry | None = None,
        _seams: Seams | None = None,
    ) -> None:
        self.telemetry = telemetry or default_telemetry
        self.region = region
        self.credentials = credentials
        self.data_url = data_url.rstrip("/")
        self.control_url = control_url.rstrip("/")
        self.idle_timeout = idle_timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.seams = _seams
        """The test seams it was built with (provisioning reads its clock, sleep and tokens)."""
        self._now: Callable[[], datetime.datetime] = pick(_seams, "now", _utcnow)
        self._rand: Callable[[], float] = pick(_seams, "rand", random.random)
        self._sleep: Callable[[float], Awaitable[None]] = pick(_seams, "sleep", anyio.sleep)
        self._owns = http_client is None
        # Streams are read chunk by chunk under our own idle timer; read_timeout bounds one read.
        # B-33: TCP keep-alive, so a long silent turn is not cut by a middlebox idling it out.
        self.http = http_client or httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(verify=shared_ssl_context(), socket_options=_KEEPALIVE),
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            follow_redirects=False,
            headers={"User-Agent": user_agent()},
        )
        # InvokeHarness, the per-turn call, goes over lean h11 lanes when the client is ours
        # (``rma_shell.transport.lean_http``: the same timeouts, TLS context and keep-alive; httpx adds
        # nothing here, it has no proxies mounted with an explicit transport); commands and
        # the control plane stay on httpx.
        self._lanes = (
            LeanPool(_MAX_CONNECTIONS, ssl_context=shared_ssl_context(), socket_options=_KEEPALIVE)
            if self._owns
            else None
        )
        self._timeouts = Timeouts(connect=connect_timeout, read=read_timeout, write=read_timeout)
        self._read_timeout = read_timeout
        self._invoke_urls: dict[tuple[str, str | None], str] = {}
        self._urls: dict[str, httpx.URL] = {}
        """Parsed invoke URLs (a harness and endpoint have one): httpx parses one in ~0.1 ms."""
        self._secrets: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"AgentCoreClient(region={self.region!r}, data_url={self.data_url!r})"

    async def aclose(self) -> None:
        if self._owns:
            try:
                if self._lanes is not None:
                    await self._lanes.aclose()
                await self.http.aclose()
            except (httpx.HTTPError, OSError):
                logger.debug("closing the AgentCore HTTP client failed")
        else:
            await anyio.lowlevel.checkpoint()

    def redact_error(self, error: SessionError) -> SessionError:
        return redact_error(error, self._secrets)

    def now_epoch_s(self) -> float:
        """The wall clock this client signs with, as epoch seconds (for HTTP-date Retry-After)."""
        return self._now().timestamp()

    # -- signing ---------------------------------------------------------------------------

    async def _headers(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> Result[dict[str, str], SessionError]:
        got = await self.credentials.get()
        if isinstance(got, Failure):
            return Failure(got.failure())
        creds = got.unwrap()
        # The access key id too: a server echoing the Authorization header puts
        # ``Credential=<access key id>/…`` in its error, and the id names the account's key.
        secrets = (creds.access_key_id, creds.secret_access_key, creds.session_token)
        self._secrets = tuple(s for s in secrets if s)
        return Success(
            sign(
                method,
                url,
                headers,
                body,
                credentials=creds,
                region=self.region,
                service=SERVICE,
                now=self._now(),
            )
        )

    def _http_failure(
        self, method: str, url: str, status: int, headers: Mapping[str, str], raw: bytes
    ) -> SessionError:
        body = _json_or_text(raw)
        code = error_code(status, headers, body)
        if isinstance(body, dict):
            body = {**body, "code": body.get("code", code)}
        else:
            body = {"code": code, "message": body}
        if code in AUTH_CODES and status in (401, 403):
            message = body.get("message") or body.get("Message") or ""
            return AuthenticationError(
                detail=f"{code}: {message}".rstrip(": "),
                status=status,
                error_code=code,
                error_message=str(message),
                host=host_of(url),
            )
        error = HttpError(status=status, body=body, method=method, url=url.split("?", 1)[0])
        return with_origin(error, url=url, request_id=request_id(headers), code=code)

    async def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        operation: str,
        path: str,
        read_timeout: float | None = None,
        lean: bool = False,
    ) -> Result[Response, SessionError]:
        """Sign and send; the response is open for streaming (the caller closes it). ``lean``:
        over the client's own lanes when it has them.

        Emits ``rma.agent_core.request.start`` / ``.stop`` (M-2, B-46: operation, service,
        method, templated path, status) around the exchange up to the response head.
        """
        on_control = url.startswith(self.control_url) and not url.startswith(self.data_url)
        bad_url = undialable(url, "control_url" if on_control else "data_url")
        if bad_url is not None:
            return Failure(bad_url)
        signed = await self._headers(method, url, headers, body)
        if isinstance(signed, Failure):
            return Failure(signed.failure())
        if lean and self._lanes is not None:
            return await self._send_lean(method, url, signed.unwrap(), body, operation=operation, path=path)
        extensions: dict[str, Any] = {}
        if read_timeout is not None:
            read = max(0.001, read_timeout)
            extensions["timeout"] = {"connect": 30.0, "read": read, "write": 30.0, "pool": 30.0}
        request = self.http.build_request(
            method, url, headers=signed.unwrap(), content=body or None, extensions=extensions
        )
        meta = {
            "provider": "bedrock_agentcore",
            "operation": operation,
            "service": SERVICE,
            "method": method,
            "path": path,
        }
        with self.telemetry.span("rma.agent_core.request", meta) as stop:
            try:
                response = await self.http.send(request, stream=True)
            except (httpx.HTTPError, OSError) as exc:
                stop["error"] = "transport_error"
                return Failure(with_origin(_transport(exc, method), url=url))
            stop["status"] = response.status_code
        return Success(response)

    async def _send_lean(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes, *, operation: str, path: str
    ) -> Result[Response, SessionError]:
        """``_send`` over the lean lanes; the telemetry span only when someone listens."""
        assert self._lanes is not None
        target = self._urls.get(url)
        if target is None:
            if len(self._urls) >= 64:  # per-run harnesses and endpoints: keep the memo bounded
                self._urls.clear()
            target = self._urls[url] = httpx.URL(url)
        if not self.telemetry.listening():
            try:
                return Success(await self._lanes.request(method, target, headers, body, self._timeouts))
            except (httpx.HTTPError, OSError) as exc:
                return Failure(with_origin(_transport(exc, method), url=url))
        meta = {
            "provider": "bedrock_agentcore",
            "operation": operation,
            "service": SERVICE,
            "method": method,
            "path": path,
        }
        with self.telemetry.span("rma.agent_core.request", meta) as stop:
            try:
                response = await self._lanes.request(method, target, headers, body, self._timeouts)
            except (httpx.HTTPError, OSError) as exc:
                stop["error"] = "transport_error"
                return Failure(with_origin(_transport(exc, method), url=url))
            stop["status"] = response.status_code
        return Success(response)

    # -- InvokeHarness -----------------------------------------------------------------------

    async def invoke_harness(
        self,
        *,
        harness_arn: str,
        runtime_session_id: str,
        body: bytes,
        endpoint_name: str | None = None,
        user_id: str | None = None,
        on_event: OnEvent | None = None,
    ) -> Result[Invoked, SessionError]:
        """One attempt (B-27…B-32): never retried here."""
        invoked, _ = await self.invoke_harness_attempt(
            harness_arn=harness_arn,
            runtime_session_id=runtime_session_id,
            body=body,
            endpoint_name=endpoint_name,
            user_id=user_id,
            on_event=on_event,
        )
        return invoked

    async def invoke_harness_attempt(
        self,
        *,
        harness_arn: str,
        runtime_session_id: str,
        body: bytes,
        endpoint_name: str | None = None,
        user_id: str | None = None,
        on_event: OnEvent | None = None,
    ) -> tuple[Result[Invoked, SessionError], Mapping[str, str] | None]:
        """``invoke_harness``, and the headers of an error answer (``Retry-After`` for the
        caller's retry; None when no answer came or it was a 2xx)."""
        url = self._invoke_urls.get((harness_arn, endpoint_name))
        if url is None:
            if len(self._invoke_urls) >= 64:  # per-run harnesses and endpoints: keep it bounded
                self._invoke_urls.clear()
            url = self._invoke_urls[harness_arn, endpoint_name] = invoke_url(
                self.data_url, harness_arn, endpoint_name
            )
        headers = {"Content-Type": "application/json", SESSION_HEADER: runtime_session_id}
        if user_id is not None:
            headers[USER_HEADER] = user_id
        sent = await self._send(
            "POST", url, headers, body, operation="InvokeHarness", path="/harnesses/invoke", lean=True
        )
        if isinstance(sent, Failure):
            return Failure(self.redact_error(sent.failure())), None
        response = sent.unwrap()
        try:
            if response.status_code // 100 != 2:
                raw = await self._read_capped(response)
                failure = self._http_failure("POST", url, response.status_code, response.headers, raw)
                return Failure(self.redact_error(failure)), dict(response.headers)
            events: list[JSON] = []
            complete = False

            async def take(message: Message) -> SessionError | None:
                nonlocal complete
                event = self._event(message, StreamException)
                if isinstance(event, SessionError):
                    return event
                events.append(event)
                if isinstance(event, dict) and "messageStop" in event:
                    complete = True
                if on_event is not None:
                    await on_event(event)
                return None

            read = await self._read_stream(response, take)
            if isinstance(read, Failure):
                return Failure(self.redact_error(_stamped(read.failure(), url, response))), None
            return Success(Invoked(tuple(events), complete, url, request_id(response.headers))), None
        finally:
            await response.aclose()

    def _event(
        self, message: Message, exception: type[StreamException] | type[CommandException]
    ) -> JSON | SessionError:
        """A decoded frame's event, or the typed failure it is: an exception/error frame is
        ``exception`` (``StreamException`` on a turn, ``CommandException`` on a command), a
        payload that is not JSON a ``MalformedFrame``."""
        headers = message.headers
        name = headers.get(":event-type")
        if headers.get(":message-type", "event") == "event" and name and isinstance(name, str):
            # The common frame, as ``classify`` builds it, without its general path.
            if not message.payload:
                return {name: {}}
            try:
                value = json.loads(message.payload)
            except (ValueError, RecursionError):
                return MalformedFrame(
                    detail=f"{name} frame payload is not JSON",
                    response=message.payload[:_BODY_PREVIEW].decode("utf-8", "replace"),
                    reason="bad_json",
                )
            return {name: {} if value is None else value}
        payload = message.json() if message.payload else Success(None)
        if isinstance(payload, Failure):
            if message.message_type in ("exception", "error"):
                text = message.payload.decode("utf-8", "replace")[:_BODY_PREVIEW]
                payload = Success(text)
            else:
                return MalformedFrame(
                    detail=f"{message.event_type or 'event'} frame payload is not JSON",
                    response=message.payload[:_BODY_PREVIEW].decode("utf-8", "replace"),
                    reason="bad_json",
                )
        type_name = {
            "exception": message.exception_type,
            "error": message.error_code,
        }.get(message.message_type, message.event_type)
        frame = classify(message.message_type, type_name, payload.unwrap(), message.error_message)
        if isinstance(frame, StreamFault):
            return exception(detail=frame.message, error_type=frame.error_type, payload=frame.payload)
        return frame

    async def _read_capped(self, response: Response) -> bytes:
        parts: list[bytes] = []
        size = 0
        try:
            with anyio.move_on_after(self.idle_timeout):
                async for chunk in response.aiter_bytes():
                    parts.append(chunk)
                    size += len(chunk)
                    if size > 64_000:
                        break
        except (httpx.HTTPError, OSError):
            pass
        return b"".join(parts)

    async def _read_stream(
        self, response: Response, take: Callable[[Message], Awaitable[SessionError | None]]
    ) -> Result[None, SessionError]:
        """Decode frames as chunks arrive; a stall beyond the idle timeout fails the read."""
        content_type = response.headers.get("content-type", "")
        if EVENT_STREAM_TYPE not in content_type:
            raw = await self._read_capped(response)
            return Failure(
                MalformedResponse(
                    detail=f"expected {EVENT_STREAM_TYPE}, got {content_type or 'no content type'}",
                    response=_json_or_text(raw),
                )
            )
        decoder = EventStreamDecoder()
        if isinstance(response, LeanResponse):
            return await self._read_lean(response, decoder, take)
        chunks = response.aiter_bytes().__aiter__()
        while True:
            with anyio.move_on_after(self.idle_timeout) as idle:
                try:
                    chunk: bytes | SessionError = await chunks.__anext__()
                except StopAsyncIteration:
                    chunk = b""
                except (httpx.HTTPError, OSError) as exc:
                    chunk = StreamDropped(detail=f"the stream broke: {type(exc).__name__}")
            if idle.cancelled_caught:
                chunk = self._idle()
            done = await self._feed(decoder, chunk, take)
            if done is not None:
                return done

    async def _read_lean(
        self,
        response: LeanResponse,
        decoder: EventStreamDecoder,
        take: Callable[[Message], Awaitable[SessionError | None]],
    ) -> Result[None, SessionError]:
        """``_read_stream`` over a lean lane: one cancel scope and one deadline for the whole
        stream, moved on as data arrives (``rma_shell.transport.deadline``) — so silence fails the read
        after between 1 and 1.1 times the wait, the shorter of the idle timeout (``_idle``)
        and the read timeout (a broken stream, as httpx's ``ReadTimeout`` is). Setting the
        deadline before each read and lifting it after, as this did, cost two deadline updates
        per frame (~2.5 µs each on trio; the frames of a turn mostly arrive in one read, so
        each read returns one of them): 4% of a turn's instructions."""
        idle_first = self.idle_timeout <= self._read_timeout
        wait = self.idle_timeout if idle_first else self._read_timeout
        with anyio.CancelScope() as deadline:
            silence.arm(deadline, wait)
            while True:
                try:
                    chunk: bytes | SessionError = await response.receive(math.inf)
                except (httpx.HTTPError, OSError) as exc:
                    chunk = StreamDropped(detail=f"the stream broke: {type(exc).__name__}")
                silence.keep_ahead(deadline, wait)
                done = await self._feed(decoder, chunk, take)
                if done is not None:
                    return done
        return Failure(self._idle() if idle_first else StreamDropped(detail="the stream broke: ReadTimeout"))

    async def _feed(
        self,
        decoder: EventStreamDecoder,
        chunk: bytes | SessionError,
        take: Callable[[Message], Awaitable[SessionError | None]],
    ) -> Result[None, SessionError] | None:
        """One chunk through the decoder and its frames through ``take``: the stream's
        outcome once it ended or failed, None while it goes on."""
        if not isinstance(chunk, bytes):
            return Failure(chunk)
        if not chunk:
            ended = decoder.finish()
            if isinstance(ended, Failure):
                return Failure(StreamDropped(detail=f"the stream ended mid-frame: {ended.failure().detail}"))
            return Success(None)
        decoded = decoder.feed(chunk)
        if isinstance(decoded, Failure):
            return Failure(_malformed(decoded.failure()))
        for message in decoded.unwrap():
            failed = await take(message)
            if failed is not None:
                return Failure(failed)
        if decoder.error is not None:  # a bad frame after the good ones of this chunk
            return Failure(_malformed(decoder.error))
        return None

    def _idle(self) -> TransportError:
        return TransportError(
            detail=f"no data for {self.idle_timeout:g}s (idle timeout)", error_type="timeout"
        )

    # -- InvokeAgentRuntimeCommand -------------------------------------------------------------

    @renamed_options("AgentCoreClient.run_command")
    async def run_command(
        self,
        *,
        runtime_arn: str,
        runtime_session_id: str,
        command: str,
        timeout: int | None = None,
        endpoint_name: str | None = None,
        on_output: OnOutput | None = None,
    ) -> Result[CommandResult, SessionError]:
        """B-85…B-88: run a shell command in the session's microVM; a non-zero exit is a result.

        Retried (with backoff) only while no stream byte has arrived: throttling, transient
        5xx, ``RetryableConflictException`` and connection failures.
        """
        body = command_body(command, timeout)
        if isinstance(body, Failure):
            return Failure(body.failure())
        url = f"{self.data_url}/runtimes/{quote_value(runtime_arn)}/commands"
        if endpoint_name is not None:
            url += f"?qualifier={quote_value(endpoint_name)}"
        headers = {"Content-Type": "application/json", SESSION_HEADER: runtime_session_id}
        attempt = 0
        while True:
            result, retry_headers = await self._command_attempt(url, headers, body.unwrap(), on_output)
            if isinstance(result, Success) or retry_headers is None or attempt >= self.max_retries:
                return result if isinstance(result, Success) else Failure(self.redact_error(result.failure()))
            delay = self._retry_delay(attempt, retry_headers)
            logger.warning(
                "runtime command attempt %d failed (%s); retrying in %.2fs", attempt + 1, result, delay
            )
            await self._sleep(delay)
            attempt += 1

    async def _command_attempt(
        self, url: str, headers: Mapping[str, str], body: bytes, on_output: OnOutput | None
    ) -> tuple[Result[CommandResult, SessionError], Mapping[str, str] | None]:
        """One attempt; the second value is the headers to honour when it may be retried."""
        sent = await self._send(
            "POST", url, headers, body, operation="InvokeAgentRuntimeCommand", path="/runtimes/{arn}/commands"
        )
        if isinstance(sent, Failure):
            error = sent.failure()
            retry = isinstance(error, TransportError) and error.error_type in ("econnrefused", "timeout")
            return sent, ({} if retry else None)
        response = sent.unwrap()
        try:
            if response.status_code // 100 != 2:
                raw = await self._read_capped(response)
                failure = self._http_failure("POST", url, response.status_code, response.headers, raw)
                code = failure.body.get("code", "") if isinstance(failure, HttpError) else ""
                retry = isinstance(failure, HttpError) and is_retryable(failure.status, str(code))
                return Failure(failure), (dict(response.headers) if retry else None)
            assembler = CommandAssembler()

            async def take(message: Message) -> SessionError | None:
                frame = self._event(message, CommandException)
                if isinstance(frame, SessionError):
                    return frame
                for stream, text in assembler.feed(frame):
                    if on_output is not None:
                        await on_output(stream, text)
                return None

            read = await self._read_stream(response, take)
            if isinstance(read, Failure):
                error = read.failure()
                if isinstance(error, StreamDropped):  # a command is never re-sent: one attempt
                    error = EarlyTermination(detail=error.detail, attempts=1)
                return Failure(_stamped(error, url, response)), None
            finished = assembler.finish()
            if isinstance(finished, Failure):
                return Failure(_stamped(finished.failure(), url, response)), None
            return finished, None
        finally:
            await response.aclose()

    # -- StopRuntimeSession ----------------------------------------------------------------------

    async def stop_runtime_session(
        self,
        *,
        runtime_arn: str,
        runtime_session_id: str,
        endpoint_name: str | None = None,
    ) -> Result[int, SessionError]:
        """Issue #15: stop a runtime session's work (``StopRuntimeSession``); the HTTP status
        on success. One ``clientToken`` for every attempt, so retries — throttling, transient
        5xx, ``RetryableConflictException``, connection failures — are the same request."""
        url = stop_runtime_session_url(self.data_url, runtime_arn, endpoint_name)
        headers = {"Content-Type": "application/json", SESSION_HEADER: runtime_session_id}
        body = stop_runtime_session_body(str(uuid.uuid4()))
        attempt = 0
        while True:
            outcome, retry_headers = await self._json_attempt(
                "POST",
                url,
                headers,
                body,
                operation="StopRuntimeSession",
                path="/runtimes/{arn}/stopruntimesession",
                read_timeout=None,
            )
            if isinstance(outcome, Success):
                return Success(outcome.unwrap()[0])
            if retry_headers is None or attempt >= self.max_retries:
                return Failure(self.redact_error(outcome.failure()))
            delay = self._retry_delay(attempt, retry_headers)
            await self._sleep(delay)
            attempt += 1

    def _retry_delay(self, attempt: int, retry_headers: Mapping[str, str]) -> float:
        """Seconds before retry ``attempt + 1``: the host's Retry-After where it gave one, else
        jittered exponential backoff within ``backoff_base``/``backoff_cap``."""
        return next_delay_s(
            attempt,
            headers=retry_headers,
            now_epoch_s=self._now().timestamp(),
            jitter=min(1.0, max(0.0, self._rand())),
            base_s=self.backoff_base,
            cap_s=self.backoff_cap,
        )

    # -- control plane ---------------------------------------------------------------------------

    @renamed_options("AgentCoreClient.request_json")
    async def request_json(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        body: JSON = None,
        operation: str,
        path_template: str | None = None,
        idempotent: bool | None = None,
        read_timeout: float | None = None,
    ) -> Result[tuple[int, JSON], SessionError]:
        """A signed control-plane call; ``path`` is already percent-encoded. Retried with
        backoff on throttling, transient 5xx and connection failures when the call is
        idempotent (GET/DELETE, or a POST/PATCH carrying a ``clientToken``)."""
        url = f"{self.control_url}{path}" + (f"?{query}" if query else "")
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        safe = idempotent if idempotent is not None else method in ("GET", "DELETE", "HEAD")
        attempt = 0
        while True:
            outcome, retry_headers = await self._json_attempt(
                method,
                url,
                headers,
                payload,
                operation=operation,
                path=path_template or path,
                read_timeout=read_timeout,
            )
            if (
                isinstance(outcome, Success)
                or retry_headers is None
                or not safe
                or attempt >= self.max_retries
            ):
                return (
                    outcome if isinstance(outcome, Success) else Failure(self.redact_error(outcome.failure()))
                )
            delay = self._retry_delay(attempt, retry_headers)
            await self._sleep(delay)
            attempt += 1

    async def _json_attempt(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        payload: bytes,
        *,
        operation: str,
        path: str,
        read_timeout: float | None,
    ) -> tuple[Result[tuple[int, JSON], SessionError], Mapping[str, str] | None]:
        sent = await self._send(
            method, url, headers, payload, operation=operation, path=path, read_timeout=read_timeout
        )
        if isinstance(sent, Failure):
            error = sent.failure()
            retry = isinstance(error, TransportError) and is_transient_error(error)
            return sent, ({} if retry else None)
        response = sent.unwrap()
        try:
            try:
                content = await response.aread()
            except (httpx.HTTPError, OSError) as exc:
                return Failure(with_origin(_transport(exc, method), url=url)), {}
        finally:
            await response.aclose()
        if response.status_code // 100 != 2:
            failure = self._http_failure(method, url, response.status_code, response.headers, content)
            code = failure.body.get("code", "") if isinstance(failure, HttpError) else ""
            retry = isinstance(failure, HttpError) and is_retryable(failure.status, str(code))
            return Failure(failure), (dict(response.headers) if retry else None)
        return Success((response.status_code, _json_or_text(content))), None


def _malformed(error: EventStreamError) -> MalformedFrame:
    # A corrupt frame is damage in transit, like a drop: the turn cannot be trusted
    # (InvokeHarness re-invokes it, bedrock_agentcore._retryable).
    return MalformedFrame(detail=error.detail, reason=error.reason)


def _stamped(error: SessionError, url: str, response: Response) -> SessionError:
    """A stream's failure with the host and the ``x-amzn-RequestId`` of its response."""
    return with_origin(error, url=url, request_id=request_id(response.headers))


def _transport(exc: BaseException, method: str) -> TransportError:
    """A failure before any response: its kind says whether another attempt may help."""
    if isinstance(exc, httpx.TimeoutException):
        return TransportError(detail=f"{type(exc).__name__} on {method}", error_type="timeout")
    if isinstance(exc, httpx.ConnectError):
        return TransportError(detail=f"cannot connect: {exc}", error_type="econnrefused")
    return TransportError(detail=f"{type(exc).__name__}: {exc}", error_type="closed")
