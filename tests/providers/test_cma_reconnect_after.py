"""``reconnect_after``: a Claude consolidation from one turn boundary lists the session's events
from that boundary's ``processed_at`` (``created_at[gte]``), not from the start — and gives what
``reconnect`` gives; a listing that lacks the boundary is read again whole."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx

from rma.session.events import Reconnected
from rma_shell import run
from rma_shell.providers.base import OpenRequest
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import CMAEmulator, text_turn, tool_turn
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-after"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "managed-agents-2026-04-01"}
LOOKUP: Any = {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}}


class Tools:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "found"


def _listings(emu: CMAEmulator, since: int) -> list[dict[str, list[str]]]:
    return [
        parse_qs(urlsplit(r.path).query)
        for r in emu.requests[since:]
        if r.method == "GET" and urlsplit(r.path).path.endswith("/events")
    ]


def same(narrowed: Reconnected, whole: Reconnected) -> bool:
    """Equal but for ``seen``, which holds only the ids listed: those from the boundary on
    (what came before it the client had processed, so its dedupe holds them already)."""
    return attrs.evolve(narrowed, seen=()) == attrs.evolve(whole, seen=()) and set(narrowed.seen) <= set(
        whole.seen
    )


async def test_a_consolidation_from_a_boundary_lists_from_its_time_and_equals_a_whole_one() -> None:
    script = [tool_turn(("lookup", {})), tool_turn(("lookup", {})), text_turn("done")]
    with CMAEmulator(script, api_key=KEY) as emu:
        ids = cma_agent_and_environment(emu, KEY)
        provider = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, **ids)
        try:
            ran = (await run(provider, handler=Tools(), prompt="look twice", timeout=30)).unwrap()
            async with httpx.AsyncClient(base_url=emu.base_url, headers=HEADERS) as http:
                got = await http.get(f"/v1/sessions/{ran.session_id}/events", params={"limit": 1000})
                listed = got.json()
            idles = [e for e in listed["data"] if e["type"] == "session.status_idle"]
            assert len(idles) == 3
            first = idles[0]

            async def attached() -> Any:
                return (await provider.open(OpenRequest(session_id=ran.session_id))).unwrap()

            whole = (await provider.reconnect(await attached(), (first["id"],))).unwrap()[1]
            before = len(emu.requests)
            narrowed = (
                await provider.reconnect_after(await attached(), first["id"], first["processed_at"])
            ).unwrap()[1]
            (query,) = _listings(emu, before)
            assert query["created_at[gte]"] == [first["processed_at"]]
            assert same(narrowed, whole)

            # A time that leaves the boundary out cannot place it: the listing is read again whole.
            before = len(emu.requests)
            late = idles[-1]["processed_at"]
            again = (await provider.reconnect_after(await attached(), first["id"], late)).unwrap()[1]
            assert [q.get("created_at[gte]") for q in _listings(emu, before)] == [[late], None]
            assert again == whole  # read whole: the very same consolidation
        finally:
            await provider.close()
