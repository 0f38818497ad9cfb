"""A process that holds a journal key: ``python -m tests.journal._holder JOB`` (JSON).

``{"do": "run", ...}`` runs a Local session with a journal at ``journal`` under ``key`` whose
one tool writes ``started`` (its pid) and then waits forever — the process holds the key
until it is killed. ``{"do": "approve", ...}`` approves ``tool_use_id`` and prints the outcome
(``ok`` or the error's kind). ``{"do": "resume", ...}`` resumes the key and prints the
outcome's kind (``ok`` or the error's) and the holder it names, one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import trio

from rma_shell import approve, resume, run
from rma_shell.providers.local import Local

PAY = {
    "name": "pay",
    "description": "Pay an invoice",
    "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
}


class Waits:
    """A tool that says it started, then never returns."""

    def __init__(self, started: str) -> None:
        self.started = started

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        Path(self.started).write_text(str(os.getpid()))
        while True:
            time.sleep(1)


class Pays:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return f"paid invoice {input['n']}"


async def main(job: dict[str, Any]) -> None:
    provider = Local(base_url=job["base_url"], model="m", tools=[PAY])
    try:
        if job["do"] == "run":
            await run(
                provider,
                handler=Waits(job["started"]),
                prompt="Pay invoice 1.",
                journal=job["journal"],
                journal_key=job["key"],
            )
        elif job["do"] == "approve":
            done = approve(job["journal"], job["key"], job["tool_use_id"], "allow", "ok")
            print(json.dumps({"kind": done.failure().kind if _failed(done) else "ok"}))
        else:
            outcome = await resume(job["journal"], job["key"], provider=provider, handler=Pays(), timeout=20)
            error = outcome.failure() if _failed(outcome) else None
            print(
                json.dumps(
                    {"kind": "ok" if error is None else error.kind, "holder": getattr(error, "holder", None)}
                )
            )
    finally:
        await provider.close()


def _failed(outcome: Any) -> bool:
    from returns.result import Failure

    return isinstance(outcome, Failure)


if __name__ == "__main__":
    trio.run(main, json.loads(sys.argv[1]))
