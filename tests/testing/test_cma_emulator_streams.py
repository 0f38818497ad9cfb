"""The CMA emulator's event streams at scale: hang-ups noticed, high file descriptors served."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator

import httpx
import pytest

from rma_shell.testing.claude import BETA, CMAEmulator, model_request_start

HIGH_FD = 1100  # past select()'s FD_SETSIZE (1024)


def headers(emu: CMAEmulator) -> dict[str, str]:
    return {"x-api-key": emu.api_key or "", "anthropic-version": "2023-06-01", "anthropic-beta": BETA}


def new_session(emu: CMAEmulator) -> str:
    with httpx.Client(base_url=emu.base_url, headers=headers(emu), timeout=10) as http:
        agent = http.post("/v1/agents", json={"name": "a", "model": "claude-sonnet-4-6"}).json()
        env = http.post("/v1/environments", json={"name": "e"}).json()
        session = http.post("/v1/sessions", json={"agent": agent["id"], "environment_id": env["id"]})
        session_id: str = session.json()["id"]
        return session_id


def stream_url(emu: CMAEmulator, session_id: str) -> str:
    return f"{emu.base_url}/v1/sessions/{session_id}/events/stream"


@pytest.fixture
def high_descriptors() -> Iterator[None]:
    """Hold enough descriptors open that every socket opened meanwhile gets one above 1023."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = HIGH_FD + 200
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the fd limit ({hard}) is too low to reach descriptor {HIGH_FD}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(HIGH_FD)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def released(emu: CMAEmulator, session_id: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if emu.subscribers(session_id) == 0:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("descriptors", ["low", "above 1023"])
def test_a_client_hanging_up_on_an_idle_stream_is_let_go(
    descriptors: str, request: pytest.FixtureRequest
) -> None:
    if descriptors != "low":
        request.getfixturevalue("high_descriptors")
    with CMAEmulator() as emu:
        session_id = new_session(emu)
        with httpx.stream("GET", stream_url(emu, session_id), headers=headers(emu), timeout=10) as response:
            assert response.status_code == 200
            emu.wait_for_subscribers(session_id)
        assert released(emu, session_id)


def test_a_stream_on_a_descriptor_above_1023_stays_open_while_it_idles(high_descriptors: None) -> None:
    with CMAEmulator(ping_interval=0.02) as emu:
        session_id = new_session(emu)
        with httpx.stream("GET", stream_url(emu, session_id), headers=headers(emu), timeout=10) as response:
            emu.wait_for_subscribers(session_id)
            lines = response.iter_lines()
            pings = 0
            while pings < 3:  # each ping follows an idle wait that looked at the socket
                pings += next(lines) == "event: ping"
            emu.emit(session_id, model_request_start())
            while (line := next(lines)) != "event: span.model_request_start":
                assert line == "" or "ping" in line
