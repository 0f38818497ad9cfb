"""The AgentCore emulator's ``InvokeAgentRuntimeCommand``: a real shell command, streamed.

Runs ``/bin/sh -c <command>`` in its own process group with a minimal environment, in the
runtime session's working directory, with ``mount_path`` rewritten to the session's storage
directory; streams stdout and stderr as ``chunk`` events as they come; kills the group on
``timeout``, when the client goes away or when the emulator closes. Not ``InvokeHarness``
(``invoke``).
"""

from __future__ import annotations

import codecs
import contextlib
import os
import selectors
import signal
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import unquote

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import (
    _DEFAULT_COMMAND_TIMEOUT,
    _client_gone,
    _StreamEnded,
)
from rma_shell.testing.agentcore.faults import _fault_error
from rma_shell.testing.agentcore.frames import Frame
from rma_shell.testing.agentcore.state import _Core
from rma_shell.testing.agentcore.stream import _Stream
from rma_shell.testing.agentcore.validation import _json_object, _params, _validate


class _Commands(_Core):
    """``InvokeAgentRuntimeCommand`` (runs on a server thread)."""

    def _invoke_command(
        self, h: LoopbackHandler, raw_label: str, query: list[tuple[str, str]], raw: bytes, request_id: str
    ) -> None:
        body = _json_object(raw)
        label = unquote(raw_label)
        params = _params("InvokeAgentRuntimeCommand", h, query, body, label)
        _validate("InvokeAgentRuntimeCommand", params)
        by_id = params.get("accountId") in (None, self.account)
        self.control._serving(
            lambda harness: (
                label in (harness.arn, harness.runtime_arn)
                or (by_id and label in (harness.id, harness.runtime_id))
            ),
            f"Agent runtime not found: {label}",
            params.get("qualifier"),
            lambda harness: label,
        )
        session_id: str = params.get("runtimeSessionId") or str(uuid.uuid4())
        command: str = body["command"]
        timeout = int(body.get("timeout", _DEFAULT_COMMAND_TIMEOUT))
        with self._lock:
            status = self._take(("status",), session_id, "InvokeAgentRuntimeCommand")
            if status:
                fault = status[0]
                raise _fault_error(fault, h)
            session = self._session(session_id)
            session.commands.append(command)
            workdir, storage = self._dirs(session)
            stream_faults = self._take(
                ("drop", "truncate", "bad_crc", "exception", "stall"), session_id, "InvokeAgentRuntimeCommand"
            )
        stream = _Stream(
            self, h, stream_faults, filler=Frame("event", "chunk", {"contentDelta": {"stdout": ""}})
        )
        stream.begin(request_id, session_id)
        rewritten = command.replace(self.mount_path, str(storage)) if self.mount_path else command
        with contextlib.suppress(_StreamEnded):
            self._run(stream, rewritten, workdir, timeout)
            stream.finish()

    def _run(self, stream: _Stream, command: str, workdir: Path, timeout: int) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(workdir),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        with self._lock:
            self._procs[proc.pid] = proc
        assert proc.stdout is not None and proc.stderr is not None
        try:
            stream.send_frame(Frame("event", "chunk", {"contentStart": {}}))
            exit_code, status = self._pump(stream, proc, timeout)
            stream.send_frame(
                Frame("event", "chunk", {"contentStop": {"exitCode": exit_code, "status": status}})
            )
        finally:
            self._end_process(proc)

    def _pump(self, stream: _Stream, proc: subprocess.Popen[bytes], timeout: int) -> tuple[int, str]:
        assert proc.stdout is not None and proc.stderr is not None
        selector = selectors.DefaultSelector()
        decoders = {}
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            selector.register(pipe.fileno(), selectors.EVENT_READ, name)
            decoders[name] = codecs.getincrementaldecoder("utf-8")(errors="replace")
        deadline = time.monotonic() + timeout
        exited_at: float | None = None
        try:
            while selector.get_map():
                now = time.monotonic()
                if now >= deadline:
                    self._kill_group(proc)
                    return -1, "TIMED_OUT"
                if self._stopping.is_set() or _client_gone(stream.h.connection):
                    raise _StreamEnded
                if exited_at is None and _exited(proc):
                    exited_at = now
                if exited_at is not None and now - exited_at > 0.5:
                    # The shell is gone but a background child still holds the pipes.
                    self._kill_group(proc)
                for key, _ in selector.select(timeout=min(0.1, max(0.0, deadline - now))):
                    name = str(key.data)
                    data = os.read(int(key.fd), 65536)
                    text = decoders[name].decode(data, final=not data)
                    if not data:
                        selector.unregister(key.fd)
                    if text:
                        stream.send_frame(Frame("event", "chunk", {"contentDelta": {name: text}}))
            while not _exited(proc):
                if time.monotonic() >= deadline:
                    self._kill_group(proc)
                    return -1, "TIMED_OUT"
                if self._stopping.wait(0.01):
                    raise _StreamEnded
            self._kill_group(proc)  # background leftovers (the leader is a zombie: the group is still ours)
            code = self._reap(proc)
            return (code if code >= 0 else 128 - code), "COMPLETED"
        finally:
            selector.close()

    @staticmethod
    def _kill_group(proc: subprocess.Popen[bytes]) -> None:
        # Never after reaping: until then the group id cannot have been reused.
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def _reap(self, proc: subprocess.Popen[bytes]) -> int:
        with self._lock:
            # Unregistered first, so close() no longer signals a group that is about to go.
            self._procs.pop(proc.pid, None)
        try:
            return proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return -1

    def _end_process(self, proc: subprocess.Popen[bytes]) -> None:
        self._kill_group(proc)
        self._reap(proc)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process ended, without reaping it (its group id stays ours to signal)."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid != 0
