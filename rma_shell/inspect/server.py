"""The inspector's ASGI app (Starlette) and ``serve`` (uvicorn, on 127.0.0.1 unless told).

Routes: ``/`` the sessions, ``/session?key=K`` one session, ``/version`` and
``/session/version?key=K`` what the page's script polls (the record count; a recording's
size), ``POST /session/decide`` an approval, ``/static/…`` the stylesheet and script shipped
in the package. Reads run in a worker thread (SQLite is blocking); each is short.

A decision is ``rma_shell.approve``: the same record, the same check that the call still
waits (a second decision — from this page, another tab or another process — is refused with
approve's own message), the same chain. The form carries a token made when the app was, and
a request whose ``Host`` is not the inspector's own is refused, so a web page elsewhere cannot
post a decision through the person's browser (CSRF) or read the pages through a name that
resolves to 127.0.0.1 (DNS rebinding). ``on_decision(key, tool_use_id, decision)`` runs after
a decision is written: an app that embeds the inspector can carry the session on there.

What this is not: what is read (``reading``) or how it looks (``pages``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from importlib import resources
from secrets import compare_digest, token_urlsafe
from typing import Any, TextIO
from urllib.parse import parse_qs, quote, urlencode

import anyio.to_thread
from returns.result import Failure
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from rma_shell.inspect import pages
from rma_shell.inspect.reading import JournalSource, Source, check_decision, open_source
from rma_shell.inspect.timeline import Redactor
from rma_shell.journal.store import JournalStore

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORT = 8321
_STATIC = {"inspect.css": "text/css; charset=utf-8", "inspect.js": "text/javascript; charset=utf-8"}
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",  # no framing: a click on Allow is the person's own
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
}

Decided = Callable[[str, str, str], object]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """``Host`` without its port (``[::1]:8321`` → ``::1``)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def app(
    journal: str | os.PathLike[str] | JournalStore,
    *,
    secrets: Iterable[str] = (),
    environ: dict[str, str] | None = None,
    allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
    on_decision: Decided | None = None,
    price: pages.Price | None = None,
) -> Starlette:
    """The inspector for ``journal`` (an SQLite journal, a ``JournalStore``, or a recording).

    ``secrets``: values to mask besides the credentials in ``environ`` (default: this
    process's environment). ``allowed_hosts``: the ``Host`` names served ("*": any).
    ``price``: the cost seam (``pages.Price``). Raises ``SourceError`` for a path that is
    neither a journal nor a recording."""
    redactor = Redactor.from_environment(environ, secrets)
    source = open_source(journal, redactor)
    return _build(source, frozenset(allowed_hosts), on_decision, price)


def _build(
    source: Source, hosts: frozenset[str], on_decision: Decided | None, price: pages.Price | None
) -> Starlette:
    token = token_urlsafe(24)

    def refused(request: Request) -> Response | None:
        if "*" in hosts:
            return None
        name = _host_name(request.headers.get("host", ""))
        if name not in hosts:
            return PlainTextResponse(f"rma inspect: host {name!r} is not served here", 421)
        return None

    def html(text: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(text, status, headers=_HEADERS)

    async def index(request: Request) -> Response:
        if (bad := refused(request)) is not None:
            return bad

        def render() -> str:
            return pages.sessions_page(
                source.name, source.sessions(), read_only=source.read_only, version=source.version()
            )

        return html(await anyio.to_thread.run_sync(render))

    async def version(request: Request) -> Response:
        if (bad := refused(request)) is not None:
            return bad
        key = request.query_params.get("key")
        text = await anyio.to_thread.run_sync(source.version, key)
        return PlainTextResponse(text, headers=_HEADERS)

    async def session(request: Request) -> Response:
        if (bad := refused(request)) is not None:
            return bad
        key = request.query_params.get("key", "")

        def render() -> tuple[str, int]:
            if key not in source.session_keys():
                return pages.not_found(f"no session {key!r} in {source.name}"), 404
            view = source.view(key)
            note = request.query_params.get("note")
            text = pages.session_page(view, token=token, version=source.version(key), price=price, note=note)
            return text, 200

        text, status = await anyio.to_thread.run_sync(render)
        return html(text, status)

    async def decide(request: Request) -> Response:
        if (bad := refused(request)) is not None:
            return bad
        body = (await request.body()).decode("utf-8", "replace")
        form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
        if not compare_digest(form.get("token", ""), token):
            return PlainTextResponse("rma inspect: the form's token is not this inspector's", 403)
        if not isinstance(source, JournalSource):
            return PlainTextResponse("rma inspect: a recording is read-only", 405)
        key, use_id = form.get("key", ""), form.get("id", "")
        checked = check_decision(form.get("decision", ""))
        if isinstance(checked, Failure):
            return PlainTextResponse(f"rma inspect: {checked.failure().message}", 400)
        decision = checked.unwrap()
        reason = form.get("reason") or None
        done = await anyio.to_thread.run_sync(source.decide, key, use_id, decision, reason)
        if isinstance(done, Failure):
            note = f"not recorded: {done.failure().message}"
        else:
            note = f"{decision} recorded for {use_id}"
            if on_decision is not None:
                on_decision(key, use_id, decision)
        return RedirectResponse(
            "../session?" + urlencode({"key": key, "note": note}, quote_via=quote), status_code=303
        )

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return PlainTextResponse("not found", 404)
        data = resources.files("rma_shell.inspect").joinpath("static", name).read_bytes()
        return Response(data, media_type=_STATIC[name], headers={"X-Content-Type-Options": "nosniff"})

    routes = [
        Route("/", index),
        Route("/version", version),
        Route("/session", session),
        Route("/session/version", version),
        Route("/session/decide", decide, methods=["POST"]),
        Route("/static/{name}", static),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            source.close()

    made = Starlette(routes=routes, lifespan=lifespan)
    made.state.token = token
    made.state.source = source
    return made


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port`` 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def announce(name: str, host: str, port: int) -> list[str]:
    """What ``serve`` says on start: where, and whether other machines can reach it."""
    shown = f"[{host}]" if ":" in host else host
    lines = [f"rma inspect: {name} on http://{shown}:{port}/"]
    if is_loopback(host):
        lines.append("rma inspect: listening on loopback only (this machine); --host to change")
    else:
        lines.append(
            f"rma inspect: WARNING: listening on {host}, reachable from other machines: anyone who "
            "reaches it can read these sessions and decide their approvals"
        )
    return lines


def serve(
    journal: str | os.PathLike[str] | JournalStore,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    secrets: Iterable[str] = (),
    on_decision: Decided | None = None,
    price: pages.Price | None = None,
    out: TextIO | None = None,
    **uvicorn_options: Any,
) -> None:
    """Serve the inspector until interrupted (uvicorn). Binds loopback unless ``host`` says
    otherwise, and says where it listens — and, off loopback, that anyone who reaches it can
    read the sessions and decide approvals."""
    import uvicorn

    out = sys.stdout if out is None else out
    hosts: tuple[str, ...] = LOOPBACK_HOSTS if is_loopback(host) else ("*",)
    served = app(journal, secrets=secrets, allowed_hosts=hosts, on_decision=on_decision, price=price)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    for line in announce(served.state.source.name, host, bound):
        print(line, file=out)
    out.flush()
    config = uvicorn.Config(served, log_level="warning", lifespan="on", **uvicorn_options)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
