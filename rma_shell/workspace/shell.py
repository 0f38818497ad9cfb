"""A persistent bash per session: its directory, variables and jobs survive between calls.

What this is: one ``/bin/bash`` process (inside the sandbox ``rma_shell.workspace.sandbox``
builds), fed one command at a time on its stdin and read back up to a per-call nonce sentinel
carrying the exit status. Output is capped (the last ``OUTPUT_LIMIT`` bytes are kept, marked
as truncated); a call past its timeout, or a cancelled call, tears the whole shell down —
the next call starts a fresh one — so a runaway command can never bleed into the next
call's output. Teardown kills the process *group* (the shell starts its own session) and
then the sandbox; under bubblewrap the shell's PID namespace dies with it, so no background
job survives, and ``--die-with-parent`` covers a worker killed by SIGKILL.

What this is not: safe to share between sessions (one shell per session), a terminal
(no TTY: programs that need one fail), or a place for interactive input (stdin is
``/dev/null`` for every command).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import uuid
from collections.abc import Mapping, Sequence

import anyio
import anyio.abc

from rma_shell.workspace.sandbox import Sandbox, bash_argv

OUTPUT_LIMIT = 100 * 1024
DEFAULT_TIMEOUT = 120.0
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


class ShellTimeout(Exception):
    """A command ran past its timeout; the shell was torn down."""


class Shell:
    """One persistent bash. ``run`` one command at a time; ``close`` kills everything it started."""

    def __init__(
        self,
        workspace: str,
        mode: Sandbox,
        env: Mapping[str, str],
        *,
        network: bool = False,
        read_only: Sequence[str] = (),
    ) -> None:
        self._argv = bash_argv(mode, workspace, env, network=network, read_only=read_only)
        self._env = dict(env)
        self._workspace = workspace
        self._mode = mode
        self._proc: anyio.abc.Process | None = None
        self._lock = anyio.Lock()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    async def _start(self) -> anyio.abc.Process:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await anyio.open_process(
                self._argv,
                cwd=self._workspace,
                env=self._env
                if self._mode is Sandbox.NONE
                else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: teardown kills the group
            )
        return self._proc

    async def run(self, command: str, timeout: float = DEFAULT_TIMEOUT) -> tuple[str, int]:
        """(output, exit status) of ``command``; ShellTimeout past ``timeout`` seconds."""
        async with self._lock:
            proc = await self._start()
            assert proc.stdin is not None and proc.stdout is not None
            sentinel = f"__RMA_{uuid.uuid4().hex}_DONE__"
            # The split keeps the literal out of what is written: only printf reassembles it,
            # so a command echoing its own input cannot fake the end of its output.
            split = f"{sentinel[:8]}''{sentinel[8:]}"
            wrapped = f"{{ {command}\n}} </dev/null 2>&1; printf '\\n{split}%d\\n' $?\n"
            buf = bytearray()
            truncated = False
            marker = sentinel.encode()
            try:
                with anyio.fail_after(timeout):
                    await proc.stdin.send(wrapped.encode())
                    while marker not in buf:
                        try:
                            chunk = await proc.stdout.receive(65536)
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            break
                        buf.extend(chunk)
                        if len(buf) > OUTPUT_LIMIT + 4096:
                            del buf[: len(buf) - OUTPUT_LIMIT - 4096]
                            truncated = True
            except TimeoutError:
                with anyio.CancelScope(shield=True):
                    await self._kill()
                raise ShellTimeout(
                    f"bash: command timed out after {timeout:g}s; the shell was restarted"
                ) from None
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._kill()  # a cancelled call must not leave its command running
                raise
            at = buf.find(marker)
            if at < 0:
                with anyio.CancelScope(shield=True):
                    await self._kill()
                out = _clean(bytes(buf), truncated)
                return (out + "\n[the shell exited; the next command starts a new one]").strip(), -1
            tail = bytes(buf[at + len(marker) :]).split(b"\n", 1)[0]
            code = int(tail) if tail.strip().lstrip(b"-").isdigit() else -1
            body = bytes(buf[:at])
            if body.endswith(b"\n"):
                body = body[:-1]
            return _clean(body, truncated), code

    async def restart(self) -> None:
        async with self._lock:
            await self._kill()
            await self._start()

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await self._kill()

    async def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the shell's group: its jobs too
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await proc.aclose()


def _clean(data: bytes, truncated: bool) -> str:
    text = _ANSI.sub(b"", data)
    if len(text) > OUTPUT_LIMIT:
        text = text[-OUTPUT_LIMIT:]
        truncated = True
    out = text.decode("utf-8", errors="replace")
    if truncated:
        out = f"[output truncated: only the last {OUTPUT_LIMIT} bytes are shown]\n" + out
    return out
