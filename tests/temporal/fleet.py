"""A fleet of rma Temporal workers in subprocesses, a keyed ledger tool, and deterministic hosts.

Shared by the crash tests and ``bench/temporal_overhead.py``. A worker process
(``python -m tests.temporal.fleet CONFIG``) registers one provider per host, pointed at the
emulators the test process runs, and the ``ledger`` handler: its ``charge`` tool records every
start (``starts``), applies its effect once per idempotency key (``effects``: ``INSERT OR
IGNORE``) and records every completed run (``finishes``), all in one SQLite file, so a test can
count what ran where. A call with ``"hold": true`` waits, on its first attempt, while the hold
file exists: the moment to kill its worker.

The emulators' turns are computed from the request (how many tool results it carries), never
from a position in a script, so a turn retried on another worker gets the same answer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

CHARGE = {
    "name": "charge",
    "description": "Charge an amount, once",
    "input_schema": {
        "type": "object",
        "properties": {"amount": {"type": "integer"}, "hold": {"type": "boolean"}},
        "required": ["amount"],
    },
}
FINAL_TEXT = "charged 1 and 2: done"


# ── the ledger ────────────────────────────────────────────────────────────────────────


def init_ledger(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(
            """
            CREATE TABLE IF NOT EXISTS starts (key TEXT, attempt INTEGER, pid INTEGER);
            CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, amount INTEGER, pid INTEGER);
            CREATE TABLE IF NOT EXISTS finishes (key TEXT, attempt INTEGER, pid INTEGER);
            """
        )


def rows(path: Path, table: str, key_prefix: str = "") -> list[tuple[Any, ...]]:
    with sqlite3.connect(path, timeout=30) as db:
        return list(db.execute(f"SELECT * FROM {table} WHERE key LIKE ? ORDER BY rowid", (key_prefix + "%",)))


class Ledger:
    """The handler: ``charge(amount[, hold])``, keyed by the call's idempotency key."""

    def __init__(self, db: str, hold: str) -> None:
        self.db, self.hold = db, hold

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object, info: Any) -> str:
        key, pid = info.idempotency_key, os.getpid()
        with sqlite3.connect(self.db, timeout=30) as db:
            db.execute("INSERT INTO starts VALUES (?, ?, ?)", (key, info.attempt, pid))
        if input.get("hold") and info.attempt == 1:
            while os.path.exists(self.hold):
                time.sleep(0.02)
        with sqlite3.connect(self.db, timeout=30) as db:
            db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?, ?)", (key, input["amount"], pid))
            db.execute("INSERT INTO finishes VALUES (?, ?, ?)", (key, info.attempt, pid))
        return f"charged {input['amount']}"


# ── deterministic hosts ───────────────────────────────────────────────────────────────


class Gate:
    """Holds a turn (the final one unless told: ``arm(turn=0)`` the first) of the next request
    that reaches it, until released."""

    def __init__(self) -> None:
        self.armed = False
        self.turn = 2
        self.reached = threading.Event()
        self.release = threading.Event()

    def arm(self, turn: int = 2) -> None:
        self.armed, self.turn, self.reached, self.release = True, turn, threading.Event(), threading.Event()

    def pass_through(self, answered: int) -> None:
        if self.armed and answered == self.turn:
            self.armed = False
            self.reached.set()
            self.release.wait(60)


def _step(answered: int, gate: Gate | None) -> tuple[str, dict[str, Any]] | None:
    """The scripted conversation: charge 1, charge 2 (held), then the answer."""
    if gate is not None:
        gate.pass_through(answered)
    if answered == 0:
        return ("c1", {"amount": 1})
    if answered == 1:
        return ("c2", {"amount": 2, "hold": True})
    return None


def openai_reply(gate: Gate | None = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
        call = _step(answered, gate)
        if call is None:
            return {"content": FINAL_TEXT}
        return {"tool_calls": [{"id": f"call_{call[0]}", "name": "charge", "arguments": call[1]}]}

    return reply


def cma_turn(gate: Gate | None = None) -> Callable[[Any, list[dict[str, Any]]], list[dict[str, Any]]]:
    from rma_shell.testing import cma

    def turn(view: Any, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        answered = sum(1 for e in view.history if e.get("type") == "user.custom_tool_result")
        call = _step(answered, gate)
        if call is None:
            return cma.text_turn(FINAL_TEXT)
        return cma.tool_turn(("charge", call[1]))

    return turn


def agentcore_turn(gate: Gate | None = None) -> Callable[[Any, dict[str, Any]], list[Any]]:
    from rma_shell.testing import agentcore

    def turn(view: Any, body: dict[str, Any]) -> list[Any]:
        answered = sum(
            1
            for m in view.messages
            for b in m.get("content", [])
            if isinstance(b, dict) and "toolResult" in b
        )
        call = _step(answered, gate)
        if call is None:
            return agentcore.text_turn(FINAL_TEXT)
        return agentcore.tool_turn(("charge", call[1], f"tooluse_{call[0]}"))

    return turn


_VOLATILE = re.compile(r"(sevt_emu\w+|sesn_emu\w+|local_[0-9a-f]{16}|rma-[\w-]+)")


def normalized(value: Any) -> Any:
    """A result's JSON with what the host assigns per session (event and session ids, times)
    replaced by its order of first appearance: two runs of one script compare equal."""
    names: dict[str, str] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items() if k != "processed_at"}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str):
            return _VOLATILE.sub(lambda m: names.setdefault(m.group(0), f"<id{len(names)}>"), v)
        return v

    return walk(value)


# ── worker processes ──────────────────────────────────────────────────────────────────


class WorkerProcess:
    """One worker subprocess; ``ready`` once it polls the task queue."""

    def __init__(self, config: Mapping[str, Any], config_path: Path) -> None:
        config_path.write_text(json.dumps(config))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.temporal.fleet", str(config_path)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(str(config_path) + ".log", "ab"),  # noqa: SIM115 - the child owns it
            text=True,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if line.strip() != "ready":
            self.kill()
            log = Path(str(config_path) + ".log").read_text()[-3000:]
            raise RuntimeError(f"worker did not start: {line!r}\n{log}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: no shutdown, no goodbye — what a lost machine looks like."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise TimeoutError(f"timed out waiting for {what}")


def fleet(configs: Iterator[tuple[Mapping[str, Any], Path]]) -> list[WorkerProcess]:
    return [WorkerProcess(c, p) for c, p in configs]


# ── the worker process itself ─────────────────────────────────────────────────────────


async def _serve(config: dict[str, Any]) -> None:
    import asyncio

    import anyio

    from rma_shell.providers.agentcore import BedrockAgentCore
    from rma_shell.providers.claude import ClaudeManagedAgents
    from rma_shell.providers.local import Local
    from rma_shell.temporal import connect, session_worker

    client = await connect(config["address"])
    providers: dict[str, Any] = {}
    if "local" in config:
        providers["local"] = Local(base_url=config["local"], model="test-model", tools=[CHARGE])
    if "cma" in config:
        providers["cma"] = ClaudeManagedAgents(api_key=config["cma"]["key"], base_url=config["cma"]["url"])
    if "agentcore" in config:
        ac = config["agentcore"]
        providers["agentcore"] = BedrockAgentCore(harness_arn=ac["arn"], tools=[CHARGE], env=ac["env"])
    from datetime import timedelta

    worker = session_worker(
        client,
        task_queue=config["task_queue"],
        providers=providers,
        handlers={"ledger": Ledger(config["db"], config["hold"])},
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=config.get("sticky_s", 1.0)),
        max_concurrent_activities=config.get("max_activities", 200),
    )
    stop = anyio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()
    for provider in providers.values():
        await provider.close()


def main() -> None:
    import asyncio

    config = json.loads(Path(sys.argv[1]).read_text())
    asyncio.run(_serve(config))


if __name__ == "__main__":
    main()
