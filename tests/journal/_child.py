"""The process the crash tests kill: ``python -m tests.journal._child`` serves runs from stdin.

It imports rma once, then for each job (a JSON line: the host, the journal's path, where to die)
forks a process that runs the scripted session (``tests.journal._scenario``) on trio with a
journal that SIGKILLs it at the chosen point, and answers with how that process ended (a JSON
line: ``{"signal": 9}`` or ``{"exit": 0}``). Forking from a process that holds no threads
spares each kill point the interpreter's start-up; each run is still a real process, killed
for real, its sockets and SQLite connection dropped by the kernel.

Where a run dies (``kill``): ``{"after": n}`` — right after its n-th journal append committed;
``{"before": n}`` — as its n-th append begins (whatever the previous record caused has
happened, the record saying so is not there); ``{"in_tool": id}`` — inside the tool for call
``id``, its effect committed, before it returns; ``{"batch_before": n}`` / ``{"batch_after":
n}`` — at the n-th shared commit of a group commit, when the job runs several ``keys`` at once
(concurrent sessions on one store). None: it runs to the end. No hook in the library: the
journal is a subclass of the public ``SQLiteJournal``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import trio

from rma_shell import SQLiteJournal, run
from tests.journal import _scenario as sc

HUNG_S = 60.0
"""A run that has not ended by then is killed and reported as hung (a resume bug, not a crash)."""


class DyingJournal(SQLiteJournal):
    """An SQLite journal that kills its process at one append (see the module docstring), or
    at one shared commit of several sessions' records (``batch_before`` / ``batch_after``: the
    n-th ``append_batch`` of a group commit). ``note``: a file where it writes, before dying or
    as the run ends, how many shared commits it made and their sizes in flushes."""

    def __init__(self, path: str, kill: Mapping[str, Any] | None, note: str | None = None) -> None:
        super().__init__(path)
        self.kill = dict(kill or {})
        self.appends = 0
        self.batches: list[int] = []
        self.note = note

    def append(self, key: str, records: Sequence[str]) -> None:
        self.appends += 1
        if self.kill.get("before") == self.appends:
            os.kill(os.getpid(), signal.SIGKILL)
        super().append(key, records)
        if self.kill.get("after") == self.appends:
            os.kill(os.getpid(), signal.SIGKILL)

    def append_batch(self, entries: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.batches.append(len(entries))
        if self.kill.get("batch_before") == len(self.batches):
            self.noted()
            os.kill(os.getpid(), signal.SIGKILL)
        super().append_batch(entries)
        if self.kill.get("batch_after") == len(self.batches):
            self.noted()
            os.kill(os.getpid(), signal.SIGKILL)

    def noted(self) -> None:
        if self.note is not None:
            with open(self.note, "w") as f:
                json.dump(self.batches, f)


async def session(job: Mapping[str, Any]) -> None:
    spec = job["spec"]
    kill = job.get("kill") or {}
    provider = sc.provider(spec)
    journal = DyingJournal(job["journal"], kill, job.get("note"))
    keys = job.get("keys") or [sc.KEY]

    async def one(key: str) -> None:
        await run(
            provider,
            handler=sc.Payments(job["effects"], die_in=kill.get("in_tool")),
            prompt=sc.PROMPT,
            journal=journal,
            journal_key=key,
            timeout=30,
            **sc.run_options(spec),
        )

    try:
        async with trio.open_nursery() as nursery:  # several keys: concurrent sessions, one store
            for key in keys:
                nursery.start_soon(one, key)
    finally:
        journal.noted()
        await provider.close()


def _run_one(job: Mapping[str, Any]) -> None:
    """In the forked process: run, then leave without the parent's buffers or atexit hooks."""
    code = 0
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stdout is the parent's pipe: keep it clean
        trio.run(session, job)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 3
    finally:
        os._exit(code)


def _wait(pid: int) -> dict[str, Any]:
    deadline = time.monotonic() + HUNG_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return {"signal": os.WTERMSIG(status)}
            return {"exit": os.WEXITSTATUS(status)}
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"hung": True}
        time.sleep(0.002)


def _preload() -> None:
    """Import what a run imports on first use (providers, the tools package), once, before any
    fork: each run then starts in milliseconds. Nothing here starts a thread."""
    import rma_shell.providers.agentcore.provider
    import rma_shell.providers.claude.provider
    import rma_shell.providers.local.provider
    import rma_shell.resuming
    import rma_shell.tools.output  # noqa: F401


def main() -> None:
    _preload()
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_one(job)
        print(json.dumps(_wait(pid)), flush=True)


if __name__ == "__main__":
    main()
