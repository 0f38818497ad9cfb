"""The escape battery: every attempt to leave the workspace through the toolset is refused —
``..``, absolute paths, symlinks in and out, a link swapped between check and use, hard
links, bash writing outside, bash reaching the network, bash leaving processes behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

from rma_shell.workspace import Workspace
from tests.workspace._procs import gone, needs_bwrap, present

pytestmark = pytest.mark.anyio


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "secret.txt").write_text("TOP SECRET\n")
    return secret


@pytest.fixture
def ws_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    (d / "inside.txt").write_text("inside\n")
    return d


def _real(path: Any) -> str:
    return os.path.realpath(path)


def _exists(path: Any) -> bool:
    return os.path.exists(path)


def refused(out: Any) -> str:
    assert isinstance(out, Failure), out
    text = str(out.failure())
    assert "TOP SECRET" not in text
    return text


@pytest.mark.parametrize("tool", ["read", "write", "edit"])
@pytest.mark.parametrize("path", ["../outside/secret.txt", "sub/../../outside/secret.txt", "a/../inside.txt"])
async def test_dotdot_is_refused_by_every_file_tool(
    anyio_backend: Any, ws_dir: Path, outside: Path, tool: str, path: str
) -> None:
    args: dict[str, Any] = {"file_path": path, "content": "x", "old_string": "TOP", "new_string": "X"}
    async with Workspace(ws_dir) as ws:
        assert "'..' is not permitted" in refused(await ws.call(tool, args))
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_absolute_paths_outside_are_refused_inside_accepted(
    anyio_backend: Any, ws_dir: Path, outside: Path
) -> None:
    async with Workspace(ws_dir) as ws:
        assert "outside the workspace" in refused(
            await ws.call("read", {"file_path": str(outside / "secret.txt")})
        )
        assert "outside the workspace" in refused(await ws.call("read", {"file_path": "/etc/passwd"}))
        w = await ws.call("write", {"file_path": str(outside / "new.txt"), "content": "x"})
        assert "outside the workspace" in refused(w)
        assert await ws.call("read", {"file_path": os.path.join(_real(ws_dir), "inside.txt")}) == "inside\n"
    assert not (outside / "new.txt").exists()


async def test_symlinks_out_are_refused_for_every_file_tool(
    anyio_backend: Any, ws_dir: Path, outside: Path
) -> None:
    (ws_dir / "link.txt").symlink_to(outside / "secret.txt")
    (ws_dir / "linkdir").symlink_to(outside)
    (ws_dir / "dangling").symlink_to(outside / "not-yet.txt")
    async with Workspace(ws_dir) as ws:
        refused(await ws.call("read", {"file_path": "link.txt"}))
        refused(await ws.call("read", {"file_path": "linkdir/secret.txt"}))
        refused(await ws.call("edit", {"file_path": "link.txt", "old_string": "TOP", "new_string": "X"}))
        refused(await ws.call("write", {"file_path": "linkdir/new.txt", "content": "x"}))
        refused(
            await ws.call("write", {"file_path": "dangling", "content": "mine"})
        )  # not even a dangling one
        assert await ws.call("glob", {"pattern": "**/*"}) == "inside.txt"
        assert await ws.call("grep", {"pattern": "SECRET"}) == "no matches"
        refused(await ws.call("grep", {"pattern": "SECRET", "path": "linkdir"}))
        refused(await ws.call("glob", {"pattern": "*", "path": "linkdir"}))
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert not (outside / "not-yet.txt").exists() and not (outside / "new.txt").exists()


async def test_symlinks_pointing_inside_are_not_followed_either(anyio_backend: Any, ws_dir: Path) -> None:
    (ws_dir / "alias.txt").symlink_to(ws_dir / "inside.txt")
    async with Workspace(ws_dir) as ws:
        assert "symbolic link" in refused(await ws.call("read", {"file_path": "alias.txt"}))


async def test_hard_links_are_refused(anyio_backend: Any, ws_dir: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", ws_dir / "hard.txt")
    async with Workspace(ws_dir) as ws:
        assert "hard links" in refused(await ws.call("read", {"file_path": "hard.txt"}))
        refused(await ws.call("edit", {"file_path": "hard.txt", "old_string": "TOP", "new_string": "X"}))
        assert await ws.call("grep", {"pattern": "SECRET"}) == "no matches"
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_a_link_swapped_between_check_and_use_never_escapes(
    anyio_backend: Any, ws_dir: Path, outside: Path
) -> None:
    """A thread flips ``d`` between a real directory and a link to the outside while the tools
    read and write ``d/secret.txt``: no read sees the secret, no write lands outside."""
    real = ws_dir / "d-real"
    real.mkdir()
    (real / "secret.txt").write_text("harmless\n")
    stop = threading.Event()

    # ``d`` alternates between a link to the outside and a real directory renamed into place.
    def flip_real() -> None:
        d = ws_dir / "d"
        steps = (
            lambda: os.rename(real, d),  # d is the real directory
            lambda: os.rename(d, real),
            lambda: os.symlink(outside, d),  # d -> outside
            lambda: os.unlink(d),
        )
        while not stop.is_set():
            for step in steps:
                with contextlib.suppress(OSError):
                    step()
            if real.is_dir() and d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)  # a tool's write made ``d`` in a gap

    flipper = threading.Thread(target=flip_real, daemon=True)
    flipper.start()
    try:
        async with Workspace(ws_dir) as ws:
            for _ in range(300):
                got = await ws.call("read", {"file_path": "d/secret.txt"})
                assert "TOP SECRET" not in str(got)
                await ws.call("write", {"file_path": "d/secret.txt", "content": "overwritten"})
                await ws.call("edit", {"file_path": "d/secret.txt", "old_string": "TOP", "new_string": "X"})
    finally:
        stop.set()
        flipper.join()
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


@needs_bwrap
async def test_bash_cannot_write_outside_the_workspace(
    anyio_backend: Any, ws_dir: Path, outside: Path
) -> None:
    async with Workspace(ws_dir) as ws:
        attempts = [
            f"echo pwned > {outside}/secret.txt",
            f"echo pwned > {outside}/new.txt",
            "echo pwned > ../escape.txt",
            "echo pwned > /etc/rma-escape",
            f"ln -s {outside}/secret.txt ./l && echo pwned > ./l",
        ]
        for command in attempts:
            await ws.call("bash", {"command": command})
        read = await ws.call("bash", {"command": f"cat {outside}/secret.txt"})
        assert isinstance(read, Failure) and "TOP SECRET" not in str(read.failure())
        ok = await ws.call("bash", {"command": "echo fine > made-by-bash.txt && cat made-by-bash.txt"})
        assert ok == Success("fine\n")
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert not _exists(ws_dir.parent / "escape.txt") and not _exists("/etc/rma-escape")
    assert (ws_dir / "made-by-bash.txt").read_text() == "fine\n"


@needs_bwrap
async def test_bash_does_not_see_the_workers_environment_or_home(anyio_backend: Any, ws_dir: Path) -> None:
    os.environ["ANTHROPIC_API_KEY_RMA_TEST"] = "sk-should-not-leak"
    try:
        async with Workspace(ws_dir) as ws:
            out = await ws.call("bash", {"command": "env; ls /root /home /work 2>&1; echo $HOME"})
    finally:
        del os.environ["ANTHROPIC_API_KEY_RMA_TEST"]
    text = str(out)
    assert "sk-should-not-leak" not in text
    assert "No such file or directory" in text and _real(ws_dir) in text


@needs_bwrap
async def test_bash_cannot_reach_the_network_unless_allowed(anyio_backend: Any, ws_dir: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0)
    port = server.getsockname()[1]
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"
    try:
        async with Workspace(ws_dir) as ws:
            denied = await ws.call("bash", {"command": probe})
        assert isinstance(denied, Failure) and "CONNECTED" not in str(denied.failure())
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever connected
        async with Workspace(ws_dir, network=True) as ws:
            allowed = await ws.call("bash", {"command": probe})
        assert allowed == Success("CONNECTED\n")  # the control: the same probe with network on
    finally:
        server.close()


@needs_bwrap
async def test_bash_leaves_no_process_behind_on_close_timeout_or_restart(
    anyio_backend: Any, ws_dir: Path
) -> None:
    marker = f"rmamark{uuid.uuid4().hex[:10]}"
    spawn = f"(exec -a {marker} sleep 1000 &) ; setsid bash -c 'exec -a {marker} sleep 1000' &"
    async with Workspace(ws_dir) as ws:
        assert isinstance(await ws.call("bash", {"command": spawn}), Success)
        assert present(marker)
        assert await ws.call("bash", {"restart": True}) == "bash session restarted"
        assert gone(marker)
        await ws.call("bash", {"command": spawn})
        timed = await ws.call("bash", {"command": f"exec -a {marker} sleep 1000", "timeout_ms": 200})
        assert isinstance(timed, Failure) and "timed out" in timed.failure()
        assert gone(marker)
        await ws.call("bash", {"command": spawn})
        assert present(marker)
    assert gone(marker)
