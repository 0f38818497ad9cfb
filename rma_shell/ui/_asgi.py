"""The ASGI side of the stream adapters: a POST endpoint that reads a JSON body, answers a bad
one with 400 naming the field, and otherwise streams server-sent events until the run ends —
cancelling the run when the client goes away.

Plain ASGI, no toolkit: an instance mounts in Starlette (``Route("/chat", endpoint,
methods=["POST"])``) and FastAPI (``app.add_route(...)``, ``app.mount(...)``) alike, and the
adapters need no dependency of their own. Not a protocol: the events' shapes are the adapters'.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from contextlib import aclosing
from typing import Any

import anyio

from rma_shell.ui._runs import BadRequest

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY_BYTES = 8 * 1024 * 1024
"""The largest request body read (a long conversation with its tool results fits); past it, 413."""


def sse(data: object) -> bytes:
    """One server-sent event carrying ``data`` as compact JSON (``data: …`` and a blank line)."""
    return b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


class SseEndpoint:
    """An ASGI app: POST a JSON body, get ``text/event-stream``. Subclasses say what a body
    starts (``prepare``, which may raise ``BadRequest`` — answered before any event) and what
    it streams (``events``)."""

    headers: tuple[tuple[bytes, bytes], ...] = (
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
    )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise RuntimeError(f"{type(self).__name__} serves HTTP, not {scope['type']!r}")
        if scope.get("method") != "POST":
            await _plain(send, 405, {"error": "POST a JSON body", "field": None}, allow=True)
            return
        body = await _body(receive)
        if body is None:
            await _plain(send, 413, {"error": f"body over {MAX_BODY_BYTES} bytes", "field": None})
            return
        try:
            parsed = json.loads(body)
            plan = self.prepare(parsed)
        except json.JSONDecodeError as bad:
            await _plain(send, 400, {"error": f"not JSON: {bad}", "field": None})
            return
        except BadRequest as bad:
            await _plain(send, 400, {"error": bad.detail, "field": bad.field})
            return
        await send({"type": "http.response.start", "status": 200, "headers": list(self.headers)})
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                # The client went away (a closed tab): stop the run, and with it its host.
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(watch)
            # aclosing: a send that raises (the socket is gone) still ends the run at once.
            async with aclosing(self.events(plan)) as chunks:
                async for chunk in chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            group.cancel_scope.cancel()

    def prepare(self, body: Any) -> Any:
        raise NotImplementedError

    def events(self, plan: Any) -> AsyncGenerator[bytes, None]:
        raise NotImplementedError


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _plain(send: Send, status: int, payload: object, *, allow: bool = False) -> None:
    headers = [(b"content-type", b"application/json")]
    if allow:
        headers.append((b"allow", b"POST"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode(), "more_body": False})
