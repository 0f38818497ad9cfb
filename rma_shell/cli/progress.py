"""Progress for the CLI's long waits: one status line on a terminal, nothing anywhere else.

``Progress`` draws ``what: detail (12s)`` on stderr, redrawn every second while something is
awaited, and erases it when the wait is over or before other output is printed. It is off
unless its stream is a terminal (and ``TERM`` is not ``dumb``), and off with ``--json``: logs,
pipes and CI see none of it. What feeds it:

- ``harness_wait_telemetry`` — AgentCore provisioning's status polls (``rma.agent_core.provision.
  poll``: the harness or endpoint, the status it last reported) until the wait stops;
- ``traced_http_client`` — a model server over HTTP: connecting, then "connected, waiting for
  the answer" once the request is sent and no response has started, then receiving it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TextIO

import anyio
import httpx

from rma_shell.telemetry import Telemetry

ERASE = "\r\x1b[K"
"""Carriage return, then erase to the end of the line."""


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


def _is_terminal(stream: object) -> bool:
    try:
        return bool(getattr(stream, "isatty", lambda: False)())
    except (OSError, ValueError):
        return False


class Progress:
    """A status line for the current wait; a no-op unless built on a terminal (``for_stream``)."""

    def __init__(
        self, stream: TextIO | None, *, clock: Callable[[], float] = anyio.current_time, interval: float = 1.0
    ) -> None:
        self._stream = stream
        self._clock = clock
        self._interval = interval
        self._what: str | None = None
        self._detail = ""
        self._since = 0.0
        self._shown = False

    @classmethod
    def for_stream(
        cls, stream: TextIO, *, enabled: bool = True, environ: Mapping[str, str] | None = None
    ) -> Progress:
        """On when ``enabled`` and ``stream`` is a terminal; a silent Progress otherwise."""
        env = os.environ if environ is None else environ
        on = enabled and _is_terminal(stream) and env.get("TERM") != "dumb"
        return cls(stream if on else None)

    @property
    def enabled(self) -> bool:
        return self._stream is not None

    def waiting(self, what: str, detail: str = "") -> None:
        """Now waiting for ``what`` (its clock restarts when it changes); ``detail``: the latest news."""
        if self._stream is None:
            return
        if what != self._what:
            self._what = what
            self._since = self._clock()
        self._detail = detail
        self._draw()

    def done(self) -> None:
        """The wait is over: erase the line."""
        self._what = None
        self.clear()

    def clear(self) -> None:
        """Erase the line (before printing something else); the next tick draws it again."""
        if self._shown:
            self._write(ERASE)
            self._shown = False

    def _draw(self) -> None:
        if self._what is None:
            return
        detail = f": {self._detail}" if self._detail else ""
        self._write(f"{ERASE}{self._what}{detail} ({_elapsed(self._clock() - self._since)})")
        self._shown = True

    def _write(self, text: str) -> None:
        if self._stream is None:
            return
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: no more progress
            self._stream = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Progress]:
        """Redraw every ``interval`` while inside; the line is erased on the way out."""
        if self._stream is None:
            yield self
            return
        async with anyio.create_task_group() as ticker:
            ticker.start_soon(self._tick)
            try:
                yield self
            finally:
                ticker.cancel_scope.cancel()
                self.done()

    async def _tick(self) -> None:
        while True:
            await anyio.sleep(self._interval)
            self._draw()


def harness_wait_telemetry(progress: Progress) -> Telemetry:
    """A Telemetry that shows AgentCore provisioning's status polls on ``progress``."""
    telemetry = Telemetry()

    def polled(name: str, measurements: Mapping[str, Any], metadata: Mapping[str, Any]) -> None:
        harness = metadata.get("harness_id", "?")
        phase = str(metadata.get("phase", "ready"))
        if phase == "endpoint":
            what = f"waiting for endpoint {metadata.get('endpoint', '?')} of harness {harness} to be READY"
        elif phase == "deleted":
            what = f"waiting for harness {harness} to be deleted"
        else:
            what = f"waiting for harness {harness} to be READY"
        status = metadata.get("status") or "not reported yet"
        progress.waiting(what, f"status {status}, poll {measurements.get('poll_n', '?')}")

    def stopped(name: str, measurements: Mapping[str, Any], metadata: Mapping[str, Any]) -> None:
        progress.done()

    telemetry.attach("rma.cli.progress.poll", "rma.agent_core.provision.poll", polled)
    telemetry.attach(
        "rma.cli.progress.stop",
        ["rma.agent_core.provision.stop", "rma.agent_core.provision.exception"],
        stopped,
    )
    return telemetry


class _Traced(httpx.AsyncBaseTransport):
    """A transport that reports each request's connection phases to ``progress``."""

    def __init__(self, inner: httpx.AsyncBaseTransport, progress: Progress, what: str) -> None:
        self._inner = inner
        self._progress = progress
        self._what = what

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        progress, what = self._progress, self._what

        async def trace(event: str, info: Mapping[str, Any]) -> None:
            if event == "connection.connect_tcp.started":
                progress.waiting(what, f"connecting to {request.url.host}")
            elif event == "http11.send_request_body.complete":
                progress.waiting(what, "connected, waiting for the answer")
            elif event == "http11.receive_response_headers.complete":
                progress.waiting(what, "receiving the answer")
            elif event == "http11.response_closed.complete":
                progress.done()

        request.extensions = {**request.extensions, "trace": trace}
        progress.waiting(what, "sending the request")
        try:
            return await self._inner.handle_async_request(request)
        except BaseException:
            progress.done()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


def traced_http_client(progress: Progress, what: str, *, timeout_s: float = 120.0) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose requests show their phases on ``progress`` (the caller closes it)."""
    from rma_shell.transport.http import shared_ssl_context, user_agent

    inner = httpx.AsyncHTTPTransport(verify=shared_ssl_context())
    return httpx.AsyncClient(
        transport=_Traced(inner, progress, what),
        timeout=httpx.Timeout(timeout_s),
        headers={"User-Agent": user_agent()},  # rma's own client, though handed in as http_client
    )
