"""Both adapters over a real socket: a Starlette app served by uvicorn on 127.0.0.1 (in a
thread, its own asyncio loop), read with httpx on trio and asyncio — the events arrive as the
model streams, the first text read while the model is still held mid-reply. And, called as an
ASGI server calls them on either backend, a client that leaves cancels the run."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
import pytest

from rma_shell import Agent
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing.local import hold
from rma_shell.tools import tool
from rma_shell.ui import agui_endpoint, vercel_endpoint
from tests.ui.common import LOOKUP_SCRIPT, app_of, lookup_customer

uvicorn = pytest.importorskip("uvicorn")


@contextmanager
def serving(app: Any) -> Iterator[str]:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # a bound on a hang, not on speed
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


AGUI_BODY = {
    "threadId": "t",
    "runId": "r",
    "messages": [{"id": "u1", "role": "user", "content": "Who is ada@example.com?"}],
}
CHAT_BODY = {
    "id": "c",
    "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Who is ada?"}]}],
}


@pytest.mark.parametrize(
    ("endpoint", "body", "first_text", "last"),
    [
        (agui_endpoint, AGUI_BODY, "TEXT_MESSAGE_CONTENT", "RUN_FINISHED"),
        (vercel_endpoint, CHAT_BODY, "text-delta", "[DONE]"),
    ],
)
async def test_events_arrive_while_the_model_is_still_replying(
    endpoint: Any, body: Any, first_text: str, last: str
) -> None:
    release = threading.Event()
    with OpenAIEmulator(LOOKUP_SCRIPT, faults={0: hold(2, release)}) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        agent = Agent(tools=[lookup_customer], host=host)
        with serving(app_of(endpoint(agent))) as url:
            async with (
                httpx.AsyncClient(base_url=url, timeout=30) as client,
                client.stream("POST", "/agent", json=body) as response,
            ):
                lines = response.aiter_lines()
                seen: list[str] = []
                async for line in lines:
                    if line:
                        seen.append(line)
                    if first_text in line:
                        break
                assert not release.is_set()  # the model has not finished its first reply
                release.set()
                async for line in lines:
                    if line:
                        seen.append(line)
    assert model.holds == [True]
    payloads = [line.removeprefix("data: ") for line in seen]
    assert last in (payloads[-1] if payloads[-1] == "[DONE]" else json.loads(payloads[-1])["type"])


@pytest.mark.parametrize("endpoint", [agui_endpoint, vercel_endpoint])
async def test_a_client_that_leaves_cancels_the_run(endpoint: Any) -> None:
    # Called as an ASGI server calls it: the body, then — once the first text has been sent —
    # the client's disconnect. The model is held mid-reply and released only after the
    # endpoint has returned, so the run can only have ended by being cancelled.
    release = threading.Event()
    ran: list[str] = []

    @tool(name="lookup_customer")
    def spy(email: str) -> str:
        """Find a customer.

        Args:
            email: the customer's email
        """
        ran.append(email)
        return "found"

    body = json.dumps(AGUI_BODY if endpoint is agui_endpoint else CHAT_BODY).encode()
    sent: list[dict[str, Any]] = []
    left = anyio.Event()

    async def receive() -> dict[str, Any]:
        if not sent:
            return {"type": "http.request", "body": body, "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if b"TEXT_MESSAGE_CONTENT" in message.get("body", b"") or b"text-delta" in message.get("body", b""):
            left.set()

    scope = {"type": "http", "method": "POST", "path": "/agent", "headers": []}
    with OpenAIEmulator(LOOKUP_SCRIPT, faults={0: hold(2, release)}) as model:
        host = Local(base_url=model.base_url, model="m", stream=True)
        await endpoint(Agent(tools=[spy], host=host))(scope, receive, send)
        release.set()
        await host.close()
    assert left.is_set() and ran == [] and len(model.requests) == 1
    assert sent[0]["status"] == 200 and sent[-1]["more_body"] is True  # never ended: cut off
