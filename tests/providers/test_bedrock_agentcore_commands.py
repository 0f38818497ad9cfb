"""AgentCore runtime commands and session-storage artifacts against the emulator (B-85…B-88, wire §7.1)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts, NotFound, ProviderError
from rma.providers.agentcore.commands import PUT_CHUNK_CHARS, CommandAssembler, shell_quote
from rma_shell.artifacts import SessionStorage
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator

SID = "rma-session-0123456789abcdef0123456789"


@pytest.fixture
async def emu_provider() -> AsyncIterator[tuple[AgentCoreEmulator, BedrockAgentCore]]:
    with AgentCoreEmulator() as emu:
        p = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            env=emu.credentials_env(),
            backoff_base=0.01,
            backoff_cap=0.02,
        )
        yield emu, p
        await p.close()


async def test_B86_B87_stdout_stderr_and_exit_code_stream(emu_provider: Any) -> None:
    emu, p = emu_provider
    pieces: list[tuple[str, str]] = []

    async def on_output(stream: str, text: str) -> None:
        pieces.append((stream, text))

    got = await p.run_command("echo out; echo err >&2; exit 7", runtime_session_id=SID, on_output=on_output)
    result = got.unwrap()
    assert (result.stdout, result.stderr, result.exit_code, result.status) == (
        "out\n",
        "err\n",
        7,
        "COMPLETED",
    )
    assert not result.ok  # a non-zero exit is a result, not an error
    assert "".join(t for s, t in pieces if s == "stdout") == "out\n"
    assert "".join(t for s, t in pieces if s == "stderr") == "err\n"
    path = next(r.path for r in emu.requests if "/commands" in r.path)
    assert path.startswith("/runtimes/arn%3Aaws%3Abedrock-agentcore%3A")  # the ARN as one encoded label


async def test_timed_out_status_is_surfaced(emu_provider: Any) -> None:
    _, p = emu_provider
    result = (await p.run_command("sleep 5", runtime_session_id=SID, timeout=1)).unwrap()
    assert result.timed_out and result.status == "TIMED_OUT" and not result.ok


async def test_commands_are_retried_on_throttling_but_not_on_validation(emu_provider: Any) -> None:
    emu, p = emu_provider
    emu.inject(ace.throttle_once(operation="InvokeAgentRuntimeCommand"))
    assert (await p.run_command("echo hi", runtime_session_id=SID)).unwrap().stdout == "hi\n"
    emu.inject(ace.error_once(400, "ValidationException", "no", operation="InvokeAgentRuntimeCommand"))
    got = await p.run_command("echo hi", runtime_session_id=SID)
    assert isinstance(got, Failure) and got.failure().kind == "http_error"


async def test_B88_a_stream_exception_is_a_typed_error(emu_provider: Any) -> None:
    emu, p = emu_provider
    emu.inject(ace.exception_frame("runtimeClientError", "vm gone", operation="InvokeAgentRuntimeCommand"))
    got = await p.run_command("echo hi", runtime_session_id=SID)
    error = got.failure()
    assert isinstance(error, ProviderError) and error.error_type == "runtimeClientError"


async def test_the_runtime_arn_is_accepted_as_the_target(emu_provider: Any) -> None:
    emu, p = emu_provider
    got = await p.run_command("echo ok", runtime_session_id=SID, runtime_arn=emu.runtime_arn)
    assert got.unwrap().stdout == "ok\n"


async def test_invalid_command_options_fail_before_sending(emu_provider: Any) -> None:
    emu, p = emu_provider
    for kwargs in ({"runtime_session_id": "short"}, {"runtime_session_id": SID, "timeout": 0}):
        got = await p.run_command("echo", **kwargs)
        assert isinstance(got.failure(), InvalidOpts)
    assert isinstance((await p.run_command("x" * 70_000, runtime_session_id=SID)).failure(), InvalidOpts)
    assert emu.requests == []


class TestSessionStorage:
    async def test_A11_A12_A13_put_list_fetch_delete_round_trip(self, emu_provider: Any) -> None:
        emu, p = emu_provider
        store = p.storage(SID)
        data = os.urandom(PUT_CHUNK_CHARS)  # its base64 needs two put commands
        put = (await store.put("report.bin", data)).unwrap()
        assert (put.name, put.size, put.ref) == ("report.bin", len(data), "/mnt/data/report.bin")
        assert (await store.put("notes.md", b"# hi\n")).unwrap().size == 5
        listed = (await store.list()).unwrap()
        assert [(a.name, a.size) for a in listed] == [("notes.md", 5), ("report.bin", len(data))]
        assert [a.ref for a in listed] == ["/mnt/data/notes.md", "/mnt/data/report.bin"]
        assert all(a.created_at is not None and a.created_at.tzinfo is not None for a in listed)
        assert (await store.fetch("report.bin")).unwrap() == data
        assert (emu.storage_dir(SID) / "report.bin").read_bytes() == data  # really in the mount
        assert await store.delete("notes.md") == Success(None)
        assert [a.name for a in (await store.list()).unwrap()] == ["report.bin"]

    async def test_A12_A14_missing_names_are_not_found(self, emu_provider: Any) -> None:
        _, p = emu_provider
        store = p.storage(SID)
        assert (await store.fetch("nope.txt")).failure() == NotFound(resource="artifact", name="nope.txt")
        assert (await store.delete("nope.txt")).failure() == NotFound(resource="artifact", name="nope.txt")
        assert (await store.list()).unwrap() == ()

    async def test_an_empty_file_round_trips(self, emu_provider: Any) -> None:
        _, p = emu_provider
        store = p.storage(SID)
        assert (await store.put("empty", b"")).unwrap().size == 0
        assert (await store.fetch("empty")).unwrap() == b""

    @pytest.mark.parametrize("name", ["../etc", "a/b", "", ".", "..", "x y", "it's", "x.rma_b64_part"])
    async def test_bad_names_never_reach_the_shell(self, name: str, emu_provider: Any) -> None:
        emu, p = emu_provider
        store = p.storage(SID)
        for got in (await store.fetch(name), await store.put(name, b"x"), await store.delete(name)):
            assert isinstance(got.failure(), InvalidOpts) and got.failure().option == "name"
        assert emu.requests == []

    async def test_sessions_have_separate_storage(self, emu_provider: Any) -> None:
        _, p = emu_provider
        other = "rma-session-other-0123456789abcdef01234"
        await p.storage(SID).put("mine.txt", b"1")
        assert (await p.storage(other).list()).unwrap() == ()

    async def test_A13_a_failed_put_leaves_no_part_file(self, emu_provider: Any) -> None:
        emu, p = emu_provider
        broken = ProviderError(detail="vm gone", error_type="runtimeClientError")
        seen: list[str] = []

        async def run(command: str) -> Any:
            if "os.replace" in command:  # the finishing command fails after every part was written
                seen.extend(f.name for f in emu.storage_dir(SID).iterdir())
                return Failure(broken)
            return await p.run_command(command, runtime_session_id=SID)

        store = SessionStorage(run)
        assert (await store.put("big.bin", os.urandom(PUT_CHUNK_CHARS))).failure() == broken
        assert seen == ["big.bin.rma_b64_part"]
        assert sorted(f.name for f in emu.storage_dir(SID).iterdir()) == []

    async def test_A13_a_cancelled_put_leaves_no_part_file(self, emu_provider: Any) -> None:
        emu, p = emu_provider
        with anyio.CancelScope() as scope:

            async def run(command: str) -> Any:
                if "os.replace" in command:  # cancelled while finishing
                    scope.cancel()
                    await anyio.sleep_forever()
                return await p.run_command(command, runtime_session_id=SID)

            await SessionStorage(run).put("big.bin", b"x" * 10)
        assert scope.cancelled_caught
        assert sorted(f.name for f in emu.storage_dir(SID).iterdir()) == []

    async def test_A8_base_path_with_a_quote_is_refused(self, emu_provider: Any) -> None:
        _, p = emu_provider
        with pytest.raises(ValueError, match="base_path"):
            p.storage(SID, base_path="/mnt/it's")


def test_command_assembler_tolerates_bare_events_and_requires_a_stop() -> None:
    assembler = CommandAssembler()
    assert assembler.feed({"contentStart": {}}) == ()
    assert assembler.feed({"chunk": {"contentDelta": {"stdout": "a", "stderr": "b"}}}) == (
        ("stdout", "a"),
        ("stderr", "b"),
    )
    assert isinstance(assembler.finish(), Failure)
    assembler.feed({"chunk": {"contentStop": {"exitCode": 0, "status": "COMPLETED"}}})
    assert assembler.finish().unwrap().ok


def test_A9_shell_quote_survives_single_quotes() -> None:
    assert shell_quote("it's") == "'it'\\''s'"
