"""An exception inside a bundled emulator is answered, not a dropped connection (issue #23 item 3).

Each emulator answers a 500 in its service's error shape naming the exception, so the client
under test reports an HTTP error that says what failed — not ``RemoteProtocolError: Server
disconnected``; and ``AgentCoreEmulator`` refuses at construction without botocore, naming the
extra to install (issue #22), instead of failing every request.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import httpx
import pytest

from rma.errors import HttpError
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import AgentCoreEmulator, CMAEmulator, OpenAIEmulator, text_turn
from rma_shell.testing import agentcore as ace
from rma_shell.testing._loopback import LoopbackEmulator, LoopbackHandler
from tests.providers.test_cma_session import KEY as CMA_KEY
from tests.providers.test_cma_session import emu_agent_and_environment

SID = "rma-session-0123456789abcdef0123456789"


def boom(*args: Any, **kwargs: Any) -> NoReturn:
    """What the reported case raised inside the AgentCore emulator's SigV4 check."""
    raise ModuleNotFoundError("No module named 'botocore'")


# Where each emulator's handling is broken: a step every request goes through, inside the
# emulator's own handling (not the shared loopback plumbing that must catch it).
BROKEN_STEP = {"openai": "_route", "cma": "_serve", "agentcore": "_check_signature"}


def emulator(kind: str) -> LoopbackEmulator:
    if kind == "openai":
        return OpenAIEmulator([{"content": "never"}])
    if kind == "cma":
        return CMAEmulator([text_turn("never")], api_key=CMA_KEY)
    return AgentCoreEmulator([ace.text_turn("never")])


@contextmanager
def broken(kind: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackEmulator]:
    with emulator(kind) as emu:
        monkeypatch.setattr(emu, BROKEN_STEP[kind], boom)
        yield emu


@pytest.mark.parametrize("kind", ["openai", "cma", "agentcore"])
def test_an_exception_inside_an_emulator_answers_a_500_in_its_services_error_shape(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with broken(kind, monkeypatch) as emu:
        response = httpx.post(f"http://127.0.0.1:{emu.port}/v1/chat/completions", json={"x": 1})
    assert response.status_code == 500
    body = response.json()
    if kind == "openai":
        assert body["error"]["type"] == "server_error"
        message = body["error"]["message"]
        assert response.headers["x-request-id"] == "req_emu_0000"
    elif kind == "cma":
        assert body["type"] == "error" and body["error"]["type"] == "api_error"
        message = body["error"]["message"]
        assert response.headers["request-id"] == body["request_id"]
    else:
        assert response.headers["x-amzn-ErrorType"] == "InternalServerException"
        assert response.headers["x-amzn-RequestId"]
        message = body["message"]
    assert f"{kind} emulator raised ModuleNotFoundError: No module named 'botocore'" in message
    assert "POST /v1/chat/completions" in message


@pytest.mark.parametrize("kind", ["openai", "cma", "agentcore"])
async def test_the_client_reports_an_emulator_failure_as_an_HttpError_naming_it(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def noop(name: str, input: dict[str, Any], ctx: object) -> str:
        return "unused"

    options: dict[str, Any] = {}
    with emulator(kind) as emu:
        if isinstance(emu, OpenAIEmulator):
            provider: Any = Local(base_url=emu.base_url, model="m", max_retries=0)
        elif isinstance(emu, CMAEmulator):
            ids = emu_agent_and_environment(emu)  # made before it breaks
            provider = ClaudeManagedAgents(
                api_key=CMA_KEY, base_url=emu.base_url, env={}, max_retries=0, **ids
            )
        else:
            assert isinstance(emu, AgentCoreEmulator)
            provider = BedrockAgentCore(
                harness_arn=emu.harness_arn,
                data_url=emu.base_url,
                aws_access_key_id=emu.access_key_id,
                aws_secret_access_key=emu.secret_access_key,
                env={},
                max_retries=0,
            )
            options["runtime_session_id"] = SID
        # The very first step of every emulator's handling, before any of its own error
        # handling: the request body is left unread too.
        monkeypatch.setattr(LoopbackHandler, "read_body", boom)
        try:
            outcome = await run(provider, handler=noop, prompt="x", **options)
        finally:
            await provider.close()
    error = outcome.failure()
    assert isinstance(error, HttpError), error
    assert error.status == 500
    assert "ModuleNotFoundError: No module named 'botocore'" in error.message


def test_a_crash_after_the_answer_began_cuts_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mid-stream a 500 can no longer be sent: the connection is cut (never a second status
    line inside the body), so the client sees an incomplete answer; the next request works."""
    with OpenAIEmulator([{"content": "hello"}]) as emu:
        real = emu._chunks
        calls: list[int] = []

        def chunks_once_broken(*args: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("broken chunker")
            return real(*args)

        monkeypatch.setattr(emu, "_chunks", chunks_once_broken)
        request = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
        with socket.create_connection(("127.0.0.1", emu.port), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: emu\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(request)}\r\n\r\n{request}".encode()
            )
            received = b""
            while chunk := sock.recv(65536):  # until the server closes the connection
                received += chunk
        assert received.startswith(b"HTTP/1.1 200 ")
        assert received.count(b"HTTP/1.1") == 1 and not received.endswith(b"0\r\n\r\n")
        with httpx.stream("POST", f"{emu.base_url}/chat/completions", content=request) as response:
            assert response.read().endswith(b"data: [DONE]\n\n")
        assert emu.answered == 1  # the cut answer did not use up the turn


def test_AgentCoreEmulator_without_botocore_refuses_at_construction_naming_the_extra() -> None:
    # A fresh interpreter where botocore cannot be imported: the base install.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["botocore"] = None
        from rma_shell.testing import AgentCoreEmulator
        try:
            AgentCoreEmulator()
        except ImportError as exc:
            print("refused:", exc)
        else:
            print("constructed")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: AgentCoreEmulator needs botocore"), done.stdout
    assert 'pip install "rma-agents[aws]"' in done.stdout
