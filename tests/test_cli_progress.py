"""Progress on a terminal for the CLI's long waits, silence elsewhere; Ctrl-C during a wait.

The subprocess tests give the CLI a real terminal (a pty) as stderr, the way a person runs it.
"""

from __future__ import annotations

import io
import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio.testing

from rma_shell.cli.progress import ERASE, Progress, traced_http_client
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.testing.local.emulator import OpenAIEmulator, Turn, delay
from rma_shell.transport.http import user_agent
from tests.helpers import rma_interruptible

ROLE = "arn:aws:iam::123456789012:role/harness-role"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# ── the status line ──


async def test_a_wait_on_a_terminal_shows_what_and_how_long(autojump_clock: trio.testing.MockClock) -> None:
    screen = Terminal()
    progress = Progress.for_stream(screen, environ={"TERM": "xterm"})
    assert progress.enabled
    async with progress.running():
        progress.waiting("waiting for harness h1", "CREATING")
        await anyio.sleep(2.5)
        progress.waiting("waiting for harness h1", "READY soon")  # same wait: its clock goes on
        await anyio.sleep(60)
    drawn = screen.getvalue()
    assert drawn.startswith(f"{ERASE}waiting for harness h1: CREATING (0s)")
    assert f"{ERASE}waiting for harness h1: CREATING (2s)" in drawn
    assert f"{ERASE}waiting for harness h1: READY soon (2s)" in drawn
    assert f"{ERASE}waiting for harness h1: READY soon (1m02s)" in drawn
    assert drawn.endswith(ERASE)  # erased on the way out


async def test_a_new_wait_restarts_the_clock(autojump_clock: trio.testing.MockClock) -> None:
    screen = Terminal()
    progress = Progress.for_stream(screen, environ={})
    async with progress.running():
        progress.waiting("first")
        await anyio.sleep(5.5)
        progress.waiting("second")
    assert f"{ERASE}first (5s)" in screen.getvalue() and f"{ERASE}second (0s)" in screen.getvalue()


@pytest.mark.parametrize(
    ("stream", "enabled", "environ"),
    [(io.StringIO(), True, {}), (Terminal(), False, {}), (Terminal(), True, {"TERM": "dumb"})],
    ids=["not-a-terminal", "json", "dumb-terminal"],
)
async def test_progress_is_silent_off_a_terminal_and_with_json(
    autojump_clock: trio.testing.MockClock, stream: io.StringIO, enabled: bool, environ: dict[str, str]
) -> None:
    progress = Progress.for_stream(stream, enabled=enabled, environ=environ)
    assert not progress.enabled
    async with progress.running():
        progress.waiting("something", "slow")
        await anyio.sleep(3)
    assert stream.getvalue() == ""


async def test_the_demos_traced_client_sends_rmas_user_agent() -> None:
    # Handed to the provider as its http_client, but built by rma: it says who is calling.
    with OpenAIEmulator([{"content": "hi"}]) as emu:
        async with traced_http_client(Progress(None), "model") as client:
            await client.post(f"{emu.base_url}/chat/completions", json={"model": "m", "messages": []})
        assert emu.requests[0].headers["user-agent"] == user_agent()


# ── through the CLI, on a real terminal ──


def _spawn(args: list[str], cwd: Path, *, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """Run ``python -m rma_shell ARGS`` with a pty as stderr; returns it and the pty's master."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rma_shell", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
        env={**os.environ, "TERM": "xterm", **env},
    )
    os.close(slave)
    return proc, master


def _screen(master: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def _provision_argv(tmp_path: Path, emu: AgentCoreEmulator, *extra: str) -> list[str]:
    spec = tmp_path / "agent.json"
    spec.write_text(json.dumps({"name": "support", "system_prompt": "Help.", "model_config": "m"}))
    return [
        "provision",
        "--provider",
        "agentcore",
        "--store",
        str(tmp_path / "s.json"),
        "--data-url",
        emu.base_url,
        "--control-url",
        emu.base_url,
        "--agent",
        str(spec),
        "--execution-role-arn",
        ROLE,
        "--timeout",
        "30",
        *extra,
    ]


def test_provision_shows_its_harness_wait_on_a_terminal(tmp_path: Path) -> None:
    # READY 4 s after the create: the first poll must still see CREATING, however slowly the
    # CLI's process gets to it on a busy machine.
    with AgentCoreEmulator(ready_after_s=4, endpoint_ready_after_s=0.1) as emu:
        proc, master = _spawn(_provision_argv(tmp_path, emu), tmp_path, env=emu.credentials_env())
        out, _ = proc.communicate(timeout=60)
        screen = _screen(master)
    assert proc.returncode == 0, screen
    handle = json.loads(out)  # stdout is the JSON result only
    assert handle["provisioned"] == "created"
    assert f"waiting for harness {handle['harness_id']} to be READY: status CREATING, poll 1 (0s)" in screen
    assert "(1s)" in screen or "(2s)" in screen  # redrawn while it waits, with the time so far
    assert screen.rstrip("\r\n").endswith(f"rma provision: harness {handle['name']}: created")


def test_provision_with_json_shows_nothing_on_the_terminal(tmp_path: Path) -> None:
    with AgentCoreEmulator(ready_after_s=1.5, endpoint_ready_after_s=0.1) as emu:
        proc, master = _spawn(_provision_argv(tmp_path, emu, "--json"), tmp_path, env=emu.credentials_env())
        out, _ = proc.communicate(timeout=60)
        screen = _screen(master)
    assert proc.returncode == 0 and json.loads(out)["provisioned"] == "created"
    assert screen == ""


def test_provision_off_a_terminal_prints_no_progress(tmp_path: Path) -> None:
    with AgentCoreEmulator(ready_after_s=1.5, endpoint_ready_after_s=0.1) as emu:
        proc = subprocess.run(
            [sys.executable, "-m", "rma_shell", *_provision_argv(tmp_path, emu)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "TERM": "xterm", **emu.credentials_env()},
            check=False,
        )
    assert proc.returncode == 0
    name = json.loads(proc.stdout)["name"]
    assert proc.stderr == f"rma provision: harness {name}: created\n"


def test_ctrl_c_during_a_harness_wait_exits_130_with_one_line(tmp_path: Path) -> None:
    with AgentCoreEmulator(ready_after_s=60, endpoint_ready_after_s=0.1) as emu:
        proc = subprocess.Popen(
            rma_interruptible(*_provision_argv(tmp_path, emu)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **emu.credentials_env()},
        )
        deadline = time.monotonic() + 30
        while emu.control.count("GetHarness") < 1:
            assert time.monotonic() < deadline and proc.poll() is None, "the wait never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.splitlines() == ["rma provision: interrupted"]
    assert out == ""


def _slow_model(body: dict[str, Any]) -> Turn:
    return Turn({"role": "assistant", "content": "No tools needed. Done."})


def test_demo_shows_a_model_that_accepted_the_connection_but_has_not_answered(tmp_path: Path) -> None:
    # Answered 3 s after the request: the redraw due at 1 s (or, late, at 2 s) comes first
    # even on a busy machine (at 2.5 s, the one due at 2 s had 0.5 s to spare).
    with OpenAIEmulator([_slow_model], faults={0: delay(3.0)}) as emu:
        proc, master = _spawn(["demo", "--base-url", emu.base_url, "--model", "slow"], tmp_path, env={})
        out, _ = proc.communicate(timeout=60)
        screen = _screen(master)
    assert proc.returncode == 0, screen
    waiting = f"model slow at {emu.base_url}: connected, waiting for the answer"
    assert f"{waiting} (1s)" in screen or f"{waiting} (2s)" in screen, screen
    assert "waiting" not in out  # the trace on stdout has none of it
