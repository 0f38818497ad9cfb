"""The bearer-token file is read safely (K-15…K-17 hardening): off the loop, bounded, regular
files only, with a warning for loose permissions and symlinks."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from returns.result import Failure

from rma.config import AnthropicSettings, BearerFileAuth, Secret
from rma.errors import AuthenticationError
from rma_shell import run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.claude.client import CMAClient
from rma_shell.providers.claude.token_file import MAX_TOKEN_FILE_BYTES
from rma_shell.seams import Seams
from rma_shell.testing.claude import CMAEmulator

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, devices and modes are POSIX")
TOKEN = "tok-file-5e5e"
LOGGER = "rma.providers.claude_managed_agents"


def token_text(expires_at: float = 4_000_000_000) -> str:
    return json.dumps({"access_token": TOKEN, "expires_at": expires_at})


def client_for(path: Path | str, seen: list[httpx.Request], **kw: Any) -> CMAClient:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "sesn_1"})

    settings = AnthropicSettings(auth=BearerFileAuth(Secret(str(path))), base_url="http://cma.test")
    http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return CMAClient(settings, http_client=http, **kw)


async def refused(path: Path | str) -> tuple[AuthenticationError, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    got = await client_for(path, seen).get_session("sesn_1")
    assert isinstance(got, Failure), got
    error = got.failure()
    assert isinstance(error, AuthenticationError), error
    return error, seen


class Tools:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "unused"


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO nobody writes to. Should a reader block on it (the old behaviour), a rescuer opens
    it for writing after 40 s so the test fails on its timing assertion instead of hanging."""
    path = tmp_path / "token.fifo"
    os.mkfifo(path)
    done = threading.Event()

    def rescue() -> None:
        if done.wait(40.0):
            return
        while not done.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:
                time.sleep(0.05)

    rescuer = threading.Thread(target=rescue, daemon=True)
    rescuer.start()
    yield path
    done.set()
    rescuer.join(timeout=5)


@posix_only
async def test_a_fifo_token_file_fails_the_run_at_once_instead_of_hanging_it(fifo: Path) -> None:
    with CMAEmulator(api_key="sk-ant-unused") as emu:
        provider = ClaudeManagedAgents(
            api_key=None,
            bearer_token_file=str(fifo),
            base_url=emu.base_url,
            env={},
            agent_id="agent_1",
            environment_id="env_1",
        )
        started = time.monotonic()
        try:
            got = await run(provider, handler=Tools(), prompt="hi", timeout=20)
        finally:
            await provider.close()
        elapsed = time.monotonic() - started
        reached = [r for r in emu.requests if r.path.startswith("/v1/sessions")]
    assert elapsed < 20, elapsed  # failed at once: not cut by the run's timeout or the rescuer
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, AuthenticationError) and "not a regular file (a FIFO)" in error.message
    assert str(fifo) not in error.message and reached == []


@posix_only
async def test_a_device_is_refused_unread() -> None:
    error, seen = await refused("/dev/zero")  # read to the end, this never ends
    assert "not a regular file (a character device)" in error.message and seen == []


@posix_only
async def test_a_directory_is_refused(tmp_path: Path) -> None:
    error, seen = await refused(tmp_path)
    assert seen == [] and "not a regular file (a directory)" in error.message


async def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token.json"
    path.write_text(token_text() + " " * MAX_TOKEN_FILE_BYTES)
    os.chmod(path, 0o600)
    error, seen = await refused(path)
    assert f"larger than {MAX_TOKEN_FILE_BYTES} bytes" in error.message and seen == []


async def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "token.json"
    text = token_text()
    path.write_text(text + " " * (MAX_TOKEN_FILE_BYTES - len(text)))
    os.chmod(path, 0o600)
    seen: list[httpx.Request] = []
    got = await client_for(path, seen).get_session("sesn_1")
    assert got.unwrap() == {"id": "sesn_1"} and seen[0].headers["authorization"] == f"Bearer {TOKEN}"


@posix_only
async def test_a_group_or_world_readable_file_works_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token.json"
    path.write_text(token_text())
    os.chmod(path, 0o644)
    seen: list[httpx.Request] = []
    client = client_for(path, seen)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            assert (await client.get_session("sesn_1")).unwrap() == {"id": "sesn_1"}
    warnings = [r.getMessage() for r in caplog.records if "bearer token file" in r.getMessage()]
    assert warnings == ["bearer token file is accessible by group or others (mode 0644; chmod 600 it)"]
    assert str(path) not in warnings[0]  # the path is a secret (K-20)
    assert len(seen) == 3


@posix_only
async def test_a_private_file_reads_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token.json"
    path.write_text(token_text())
    os.chmod(path, 0o600)
    seen: list[httpx.Request] = []
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert (await client_for(path, seen).get_session("sesn_1")).unwrap() == {"id": "sesn_1"}
    assert not [r for r in caplog.records if "bearer token file" in r.getMessage()]


@posix_only
async def test_a_symlink_is_followed_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = tmp_path / "real.json"
    target.write_text(token_text())
    os.chmod(target, 0o600)
    link = tmp_path / "token.json"
    link.symlink_to(target)
    seen: list[httpx.Request] = []
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert (await client_for(link, seen).get_session("sesn_1")).unwrap() == {"id": "sesn_1"}
    warnings = [r.getMessage() for r in caplog.records if "bearer token file" in r.getMessage()]
    assert warnings == [
        "bearer token file is a symlink (it is followed; point the option at the file itself)"
    ]


async def test_a_read_that_blocks_is_abandoned_when_the_deadline_passes() -> None:
    release = threading.Event()

    def stuck(path: str) -> str:  # a hung network filesystem
        release.wait(60)
        return token_text()

    seen: list[httpx.Request] = []
    client = client_for(
        "/mnt/nfs/token.json",
        seen,
        _seams=Seams(read_file=stuck),
    )
    started = time.monotonic()
    try:
        with anyio.move_on_after(0.3) as scope:
            await client.get_session("sesn_1")
    finally:
        release.set()
    # Abandoned, not waited for: the read would hold the caller 60 s.
    assert scope.cancelled_caught and time.monotonic() - started < 30 and seen == []
