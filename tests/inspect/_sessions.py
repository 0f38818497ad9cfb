"""Journals and recordings for the inspector's tests: one session in each state, built by
running real sessions on the scripted host (no network)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import anyio
from returns.result import Result

from rma.errors import ProviderError
from rma_shell import resume, run
from rma_shell.journal import JournalStore
from rma_shell.testing.scripted import ScriptedProvider
from rma_shell.tools import Toolbox, tool
from tests.helpers import calls, end, text
from tests.helpers import tool as use

SECRET = "sk-inspect-7f3a9c2e5b1d"
"""A credential the sessions leak into a tool's input and result: never shown."""

APPROVAL = [
    [
        text("Let me look the order up."),
        *calls(use("lookup", "t1", q="4417"), use("refund", "t2", amount=120), i=120, o=30),
    ],
    end("Refunded 120 for order 4417.", i=210, o=14),
]
ENDED = [
    [text("Checking."), *calls(use("lookup", "u1", q="5302", api_key=SECRET), i=50, o=9)],
    end("All good.", i=80, o=5),
]
FAILED = [
    calls(use("lookup", "f1", q="6203"), i=10, o=2),
    ProviderError(detail="the host is down (503)"),
]
refunds: list[int] = []


@tool
def lookup(q: str, api_key: str = "") -> str:
    """Look up an order."""
    return f"order {q} (token {api_key})" if api_key else f"order {q}: paid 120"


@tool(requires_approval=lambda args: args["amount"] > 100)
def refund(amount: int) -> str:
    """Refund an amount."""
    refunds.append(amount)
    return f"refunded {amount}"


TOOLS = Toolbox(lookup, refund)
PLAIN_TOOLS = Toolbox(lookup)
"""For a run without a journal (a recording): no tool that may wait for a person."""


def host(script: list[Any]) -> ScriptedProvider:
    return ScriptedProvider(copy.deepcopy(script))


def run_sync(backend: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    name, options = (backend, {}) if isinstance(backend, str) else backend
    return anyio.run(functools.partial(fn, *args, **kwargs), backend=name, backend_options=options)


def journal_of(
    backend: Any, journal: str | Path | JournalStore, key: str, script: list[Any]
) -> Result[Any, Any]:
    """Run ``script`` journaled under ``key``; its outcome (a pause is AwaitingApproval)."""
    return run_sync(
        backend, run, host(script), handler=TOOLS, prompt=f"help with {key}", journal=journal, journal_key=key
    )  # type: ignore[no-any-return]


def resume_of(
    backend: Any, journal: str | Path | JournalStore, key: str, script: list[Any]
) -> Result[Any, Any]:
    return run_sync(backend, resume, journal, key, provider=host(script), handler=TOOLS)  # type: ignore[no-any-return]


def every_state(backend: Any, journal: str | Path | JournalStore) -> None:
    """Sessions ``waiting`` (an approval), ``ended``, ``failed`` in ``journal``."""
    journal_of(backend, journal, "waiting", APPROVAL)
    journal_of(backend, journal, "ended", ENDED)
    journal_of(backend, journal, "failed", FAILED)
