"""What both stream adapters share: the request's bad field as a typed error, the approval id a
UI hands back, the tool calls a stream has shown (``CallBook``), and starting a run — or, once
a person has decided its approvals, carrying the paused run on — as one stream of live updates
ending in ``RunFinished``.

Not a protocol: no AG-UI or Vercel shape lives here (``agui.py``, ``vercel.py``), and no ASGI
(``_asgi.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
from returns.result import Failure

from rma.errors import SessionError
from rma.live import LiveUpdate, ToolCallFinished
from rma_shell.agent import Agent, RunFinished


@attrs.define
class ShownCall:
    """A tool call a stream has shown; ``closed`` once its input was shown in full (after
    which only its result or its end may follow)."""

    id: str
    name: str
    closed: bool = False


class CallBook:
    """The tool calls one stream has shown, by id, and those of the model's attempt in flight
    (an ``AttemptDiscarded`` voids the ones still open). A host without call ids (D-2) gets ids
    of our own, ``<prefix>-call<n>``, in call order."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.calls: dict[str, ShownCall] = {}
        self.attempt: list[str] = []
        self._anonymous = 0

    def started(self, given: str | None, name: str) -> ShownCall:
        """A call the model began in the attempt in flight."""
        call = ShownCall(self._id(given), name)
        self.calls[call.id] = call
        self.attempt.append(call.id)
        return call

    def known(self, call_id: str) -> ShownCall | None:
        return self.calls.get(call_id)

    def add(self, call_id: str, name: str) -> ShownCall:
        """A call first seen at the run's end (one waiting for approval the stream never showed)."""
        call = self.calls[call_id] = ShownCall(call_id, name)
        return call

    def finished_id(self, update: ToolCallFinished) -> str:
        """The id of the call ``update`` answers: its own, else the first open call of that name
        among our own ids, else a fresh one of ours."""
        if update.id is not None:
            return update.id
        own = f"{self.prefix}-call"
        for call in self.calls.values():
            if not call.closed and call.name == update.name and call.id.startswith(own):
                return call.id
        return self._id(None)

    def open_in_attempt(self) -> list[ShownCall]:
        """The attempt's calls whose input was never shown in full: what a discard voids."""
        return [self.calls[c] for c in self.attempt if not self.calls[c].closed]

    def new_attempt(self) -> None:
        self.attempt = []

    def _id(self, given: str | None) -> str:
        if given is not None:
            return given
        self._anonymous += 1
        return f"{self.prefix}-call{self._anonymous}"


Overrides = Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""A per-request hook: the protocol's request body (parsed JSON) → ``agent.run`` overrides
(``history=``, ``session_id=``, ``metadata=``, …) — how an app carries a conversation on."""


class BadRequest(ValueError):
    """The request body is not what the protocol sends; ``field`` names the part that is wrong
    (answered as HTTP 400 with ``{"error": …, "field": …}``)."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


@attrs.frozen
class Decision:
    """A person's answer to one waiting call: which journaled run, which call, allow or deny."""

    journal_key: str
    tool_use_id: str
    allow: bool
    reason: str | None = None


def approval_id(journal_key: str, tool_use_id: str) -> str:
    """The id a protocol's approval request carries: the paused run's journal key and the call's
    id, so the answer finds both with no state kept in the server (any process may take it)."""
    return f"{journal_key}/{tool_use_id}"


def parse_approval_id(value: object, field: str) -> tuple[str, str]:
    """``approval_id``'s parts, or ``BadRequest`` naming ``field``."""
    if not isinstance(value, str) or "/" not in value:
        raise BadRequest(field, f"not an approval id this server issued: {value!r}"[:300])
    key, _, call = value.rpartition("/")
    if not key or not call:
        raise BadRequest(field, f"not an approval id this server issued: {value!r}"[:300])
    return key, call


def new_journal_key(prefix: str) -> str:
    """A fresh journal key for one run started from a UI (a run's key must be new)."""
    return f"{prefix}-{uuid.uuid4().hex}"


def decide(agent: Agent, decisions: Sequence[Decision]) -> str:
    """Record ``decisions`` (as ``approve`` does) and return the one journal key they belong
    to; ``BadRequest`` when they name several runs, or a decision is refused (already decided,
    no such call, no journal)."""
    keys = {d.journal_key for d in decisions}
    if len(keys) != 1:
        raise BadRequest("approval", f"the decisions must belong to one paused run, got {len(keys)}")
    for d in decisions:
        done = agent.approve(d.journal_key, d.tool_use_id, "allow" if d.allow else "deny", d.reason)
        if isinstance(done, Failure):
            raise BadRequest("approval", str(done.failure()))
    return keys.pop()


@asynccontextmanager
async def updates_of(
    agent: Agent,
    *,
    prompt: str | None,
    resume_key: str | None,
    overrides: Mapping[str, Any],
    key_prefix: str,
) -> AsyncIterator[AsyncIterator[LiveUpdate | RunFinished]]:
    """A new run of ``prompt`` — journaled under a fresh key when the agent has a journal, so
    its approvals can pause it — or, with ``resume_key`` (its decisions recorded by ``decide``),
    the paused run carried on."""
    if resume_key is not None:
        async with agent.stream_resume(resume_key) as updates:
            yield updates
        return
    extra = dict(overrides)
    if agent.journal is not None and "journal_key" not in extra:
        extra["journal_key"] = new_journal_key(key_prefix)
    async with agent.stream(prompt, **extra) as updates:
        yield updates


def one_line(error: SessionError) -> str:
    """The error as a person reads it (its ``str``), cut to a line a UI can show."""
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:2000]
