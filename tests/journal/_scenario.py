"""The scripted tool loop the crash tests kill and resume: one per host, and its tool.

Each host's emulator runs in the test's process; the session runs in a child
(``tests.journal._child``) or in the test itself. Both build the provider from a ``Host`` (plain
JSON, so it crosses to the child on a pipe) and run the same ``Payments`` tool, whose effect is
an ``INSERT OR IGNORE`` keyed by the call's idempotency key in an SQLite file — applied once
however often the call runs — and whose every execution is counted there too.

The loop: a turn with two calls (one batch of two), a turn with one call, a final answer; so a
run crosses every record kind a journal has (header, event, conn, tool_start, tool_result, end).
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from typing import Any

import attrs

from rma.vocabulary import SessionResult
from rma_shell.providers.base import Provider

KEY = "crash-test"
"""The journal key of every run: the idempotency keys (and so the tool's texts) depend on it."""
CMA_KEY = "sk-ant-crash"
FINAL = "Paid 1, 2 and 3."
SID = "rma-crash-0123456789abcdef0123456789abcdef"
"""The AgentCore runtime session (33+ characters)."""

PAY = {
    "name": "pay",
    "description": "Pay an invoice",
    "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
}
CMA_PAY = {"type": "custom", **PAY}


# ── the tool ─────────────────────────────────────────────────────────────────────────


_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (idempotency_key TEXT PRIMARY KEY, tool_use_id TEXT, n INTEGER);
CREATE TABLE IF NOT EXISTS executions (
    tool_use_id TEXT, idempotency_key TEXT, attempt INTEGER, pid INTEGER
);
"""


def create_effects(path: str) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.executescript(_SCHEMA)


class Payments:
    """The side-effecting tool. ``die_in`` names a tool-use id: after its effect is committed
    the process SIGKILLs itself before the tool returns (the window the idempotency key covers)."""

    def __init__(self, effects: str, die_in: str | None = None) -> None:
        self.effects = effects
        self.die_in = die_in

    def handle_tool_call(self, name: str, input: Mapping[str, Any], ctx: object, info: Any) -> str:
        with closing(sqlite3.connect(self.effects)) as db, db:
            db.execute(
                "INSERT INTO executions VALUES (?, ?, ?, ?)",
                (info.tool_use_id, info.idempotency_key, info.attempt, os.getpid()),
            )
            db.execute(
                "INSERT OR IGNORE INTO effects VALUES (?, ?, ?)",
                (info.idempotency_key, info.tool_use_id, input["n"]),
            )
        if info.tool_use_id == self.die_in:
            os.kill(os.getpid(), signal.SIGKILL)
        # What the model sees does not depend on the attempt: a re-run answers the same.
        return f"paid invoice {input['n']}"


@attrs.frozen
class Effects:
    """What the tool did: effects by idempotency key, executions as (id, key, attempt)."""

    effects: dict[str, str]
    executions: list[tuple[str, str, int]]


def read_effects(path: str) -> Effects:
    with closing(sqlite3.connect(path)) as db:
        effects = dict(db.execute("SELECT idempotency_key, tool_use_id FROM effects"))
        executions = [
            (str(i), str(k), int(a))
            for i, k, a in db.execute("SELECT tool_use_id, idempotency_key, attempt FROM executions")
        ]
    return Effects(effects, executions)


# ── the hosts ────────────────────────────────────────────────────────────────────────


def local_reply(body: Mapping[str, Any]) -> dict[str, Any]:
    """The model, as a function of the conversation: a re-asked turn gets the same answer (and
    the same call ids, which the emulator would otherwise number by the turns it served)."""
    n = len(body["messages"])
    if n == 1:
        return {
            "tool_calls": [
                {"id": "call_1", "name": "pay", "arguments": {"n": 1}},
                {"id": "call_2", "name": "pay", "arguments": {"n": 2}},
            ]
        }
    if n == 4:
        return {"tool_calls": [{"id": "call_3", "name": "pay", "arguments": {"n": 3}}]}
    return {"content": FINAL}


def cma_script() -> list[Any]:
    from rma_shell.testing import text_turn, tool_turn

    return [tool_turn(("pay", {"n": 1}), ("pay", {"n": 2})), tool_turn(("pay", {"n": 3})), text_turn(FINAL)]


def agentcore_script() -> list[Any]:
    from rma_shell.testing import agentcore as ace

    # One fragment per tool input and one text chunk: fewer live-event records, same loop.
    return [
        ace.tool_turn(
            ("pay", {"n": 1}, "tooluse_crash00000000001"),
            ("pay", {"n": 2}, "tooluse_crash00000000002"),
            fragments=1,
        ),
        ace.tool_turn(("pay", {"n": 3}, "tooluse_crash00000000003"), fragments=1),
        ace.text_turn(FINAL, chunks=1),
    ]


@contextmanager
def emulator(host: str, script: list[Any] | None = None) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A fresh emulator for ``host`` (Claude's: ``script`` instead of the loop's) and the JSON a
    child needs to build the provider. Fresh per run, so the ids the emulator generates
    (Claude's event ids) come out the same."""
    if host == "local":
        from rma_shell.testing import OpenAIEmulator

        with OpenAIEmulator([local_reply] * 64) as emu:
            yield emu, {"host": host, "base_url": emu.base_url}
    elif host == "cma":
        from rma_shell.testing import CMAEmulator
        from tests.helpers import cma_agent_and_environment

        with CMAEmulator(script or cma_script(), api_key=CMA_KEY) as emu:
            yield emu, {"host": host, "base_url": emu.base_url, **cma_agent_and_environment(emu, CMA_KEY)}
    elif host == "agentcore":
        from rma_shell.testing import AgentCoreEmulator

        with AgentCoreEmulator(agentcore_script()) as emu:
            yield emu, {"host": host, "harness_arn": emu.harness_arn, "env": emu.credentials_env()}
    else:
        raise ValueError(host)


def provider(spec: Mapping[str, Any]) -> Provider[Any]:
    host = spec["host"]
    if host == "local":
        from rma_shell.providers.local import Local

        return Local(base_url=spec["base_url"], model="test-model", tools=[PAY])
    if host == "cma":
        from rma_shell.providers.claude import ClaudeManagedAgents

        return ClaudeManagedAgents(
            api_key=CMA_KEY,
            base_url=spec["base_url"],
            env={},
            agent_id=spec["agent_id"],
            environment_id=spec["environment_id"],
        )
    if host == "agentcore":
        from rma_shell.providers.agentcore import BedrockAgentCore

        return BedrockAgentCore(harness_arn=spec["harness_arn"], tools=[PAY], env=dict(spec["env"]))
    raise ValueError(host)


def run_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``run``'s per-host options beside the prompt (AgentCore's runtime session)."""
    return {"runtime_session_id": SID} if spec["host"] == "agentcore" else {}


PROMPT = "Pay invoices 1, 2 and 3."


def comparable(result: SessionResult, host: str) -> SessionResult:
    """``result`` without what differs between two sessions that did the same: Local's session
    id (drawn per session: the undisturbed run is another session), and the time a Claude host
    stamps on each event (``processed_at``, its clock). Everything else must be equal: the
    turns, text, tool uses, usage, events (their ids included: each run has a fresh emulator,
    so an event posted twice would shift every later id), transcript, terminal, stop reason."""
    events = tuple(
        {k: v for k, v in e.items() if k != "processed_at"} if isinstance(e, dict) else e
        for e in result.events
    )
    return attrs.evolve(result, session_id=None if host == "local" else result.session_id, events=events)
