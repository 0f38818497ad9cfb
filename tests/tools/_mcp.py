"""Helpers for the MCP tests: start the SDK-built test server (stdio or HTTP on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rma_shell.tools.mcp import MCPServer

SERVER = str(Path(__file__).with_name("_mcp_server.py"))


def stdio_server(env: Mapping[str, str] | None = None, **options: Any) -> MCPServer:
    """The test server spawned over stdio."""
    return MCPServer.stdio(sys.executable, [SERVER], env=env, **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(env: Mapping[str, str] | None = None, port: int | None = None) -> Iterator[str]:
    """The test server on streamable HTTP; yields its URL once it accepts connections."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the MCP test server did not listen within 30 s") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts: it was not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
