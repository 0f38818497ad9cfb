"""What the stream adapters' tests share: SSE bodies split into their JSON events, and an app
serving an endpoint, posted to through httpx."""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.routing import Route

from rma_shell.tools import tool


@tool
def lookup_customer(email: str) -> str:
    """Find a customer by email.

    Args:
        email: the customer's email address
    """
    return f"Customer {email}: Pro plan, active."


@tool(requires_approval=True)
def refund(order_id: str, cents: int) -> str:
    """Refund an order.

    Args:
        order_id: the order
        cents: how much
    """
    return f"refunded {cents} on {order_id}"


LOOKUP_SCRIPT = [
    {
        "content": "Let me look that up. ",
        "tool_calls": [{"name": "lookup_customer", "arguments": {"email": "ada@example.com"}}],
    },
    {"content": "Ada is on the Pro plan."},
]

REFUND_SCRIPT = [
    {
        "content": "Refunding.",
        "tool_calls": [{"name": "refund", "arguments": {"order_id": "42", "cents": 250}}],
    },
    {"content": "The refund is done."},
]


def data_lines(body: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order (every event here is one data line)."""
    out = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        lines = block.splitlines()
        assert len(lines) == 1 and lines[0].startswith("data: "), block
        out.append(lines[0][len("data: ") :])
    return out


def events(body: str) -> list[Any]:
    return [json.loads(line) for line in data_lines(body) if line != "[DONE]"]


def app_of(endpoint: Any, path: str = "/agent") -> Starlette:
    return Starlette(routes=[Route(path, endpoint, methods=["POST", "GET"])])


async def post(app: Any, body: Any, path: str = "/agent") -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        if isinstance(body, bytes):
            return await client.post(path, content=body)
        return await client.post(path, json=body)
