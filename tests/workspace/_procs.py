"""Helpers for the workspace tests: find processes by a marker in their command line."""

from __future__ import annotations

import os
import shutil
import time

import pytest

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def with_marker(marker: str) -> list[int]:
    """PIDs whose command line contains ``marker`` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != b"Z":
            found.append(int(entry))
    return found


def gone(marker: str, within: float = 20.0) -> bool:
    """Whether every process carrying ``marker`` has exited (polled; the bound is generous:
    the kernel kills a dead sandbox's namespace at once, this only waits for it to be reaped)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not with_marker(marker):
            return True
        time.sleep(0.05)
    return not with_marker(marker)


def present(marker: str, within: float = 20.0) -> bool:
    """Whether a process carrying ``marker`` shows up (a background job may exec a moment late)."""
    deadline = time.monotonic() + within
    while not with_marker(marker):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def gone_pid(pid: int, within: float = 20.0) -> bool:
    """Whether process ``pid`` has exited (a zombie counts as exited)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return True
        except OSError:
            return True
        time.sleep(0.02)
    return False
