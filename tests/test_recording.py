"""Recording (``record=``) and ``rma replay``: recording never changes a run's outcome (#12 item 22),
every host's recording replays from the CLI, and a damaged log is reported as such."""

from __future__ import annotations

import datetime
import io
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

from rma.codec_json import dumps
from rma.errors import AuthenticationError, InvalidOpts
from rma_shell import open_session, run
from rma_shell.cli import main
from rma_shell.testing import CMAEmulator, ScriptedProvider, text_turn, tool_turn
from rma_shell.testing import agentcore as ace
from tests.helpers import Recorder, calls, end, tool


def replay_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``rma replay`` in a fresh interpreter: it must load every codec itself."""
    return subprocess.run(
        [sys.executable, "-m", "rma_shell", "replay", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def scripted_log(path: Path) -> Any:
    """A recorded tool loop: header, events, a transcript-less result, end."""
    turns = [calls(tool("lookup", "t1", q=1)), calls(tool("lookup", "t2", q=2)), end("all done")]
    outcome = await run(ScriptedProvider(turns), handler=Recorder(), prompt="go", record=str(path))
    assert isinstance(outcome, Success), outcome
    return outcome


# ── every host's recording replays from the CLI ──


class Tools:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return f"{name} -> {json.dumps(input, sort_keys=True)}"


async def test_a_recorded_claude_managed_agents_run_replays_from_the_cli(tmp_path: Path) -> None:
    from tests.providers.test_cma_session import setup

    script = [tool_turn(("lookup", {"id": "c9"}), text="checking"), text_turn("Ada is gold.")]
    log = tmp_path / "cma.jsonl"
    with CMAEmulator(script, api_key="sk-ant-test-5c1f") as emu:
        provider = setup(emu)
        try:
            outcome = await run(provider, handler=Tools(), prompt="Who is c9?", timeout=20, record=log)
        finally:
            await provider.close()
    assert isinstance(outcome, Success), outcome
    shown = replay_cli(str(log))
    assert shown.returncode == 0, shown.stderr
    assert "1 result (verified)" in shown.stdout
    assert "result 1: end_turn" in shown.stdout and "Ada is gold." in shown.stdout
    assert "lookup x1" in shown.stdout
    as_json = replay_cli(str(log), "--json")
    assert as_json.stdout.splitlines() == [dumps(outcome)]


async def test_a_recorded_agentcore_run_replays_from_the_cli(tmp_path: Path) -> None:
    from rma_shell.providers.agentcore import BedrockAgentCore, new_runtime_session_id

    script = [
        ace.tool_turn(("lookup", {"id": "c9"}, "tooluse_a1"), text="checking"),
        ace.text_turn("Pro plan."),
    ]
    lookup = {"name": "lookup", "description": "Find", "input_schema": {"type": "object"}}
    log = tmp_path / "agentcore.jsonl"
    with ace.AgentCoreEmulator(script) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
            tools=[lookup],
        )
        try:
            outcome = await run(
                provider,
                handler=Tools(),
                prompt="Which plan?",
                timeout=20,
                record=str(log),
                runtime_session_id=new_runtime_session_id(),
            )
        finally:
            await provider.close()
    assert isinstance(outcome, Success), outcome
    shown = replay_cli(str(log))
    assert shown.returncode == 0, shown.stderr
    assert "1 result (verified)" in shown.stdout and "Pro plan." in shown.stdout
    as_json = replay_cli(str(log), "--json")
    assert as_json.stdout.splitlines() == [dumps(outcome)]


# ── a damaged log is reported, never replayed into a different result ──


def _swap(lines: list[str]) -> list[str]:
    lines[2], lines[3] = lines[3], lines[2]
    return lines


def _edit(lines: list[str]) -> list[str]:
    lines[-4] = lines[-4].replace("all done", "all good")  # the final turn's text
    return lines


TAMPERING = {
    "edited": (_edit, "line 7: the line does not match its digest"),
    "reordered": (_swap, "line 3: the line is out of place"),
    "deleted": (lambda lines: lines[:4] + lines[5:], "line 5: the line does not match its digest"),
    "truncated": (lambda lines: lines[:-2], "the log is truncated: it ends at line 8 without its end record"),
    "cut mid-line": (lambda lines: [*lines[:-1], lines[-1][:20]], "truncated: its last line is incomplete"),
    "appended": (lambda lines: [*lines, lines[-1]], "line 11: the line is out of place"),
    "joined": (lambda lines: lines + lines, "line 11: the line is out of place"),
    "no header": (lambda lines: lines[1:], "line 1: the log has no header line"),
    "stripped digest": (
        lambda lines: [lines[0], lines[1].split(',"chain"')[0] + "}", *lines[2:]],
        "line 2: the line has no digest",
    ),
}


@pytest.mark.parametrize("damage", sorted(TAMPERING))
async def test_a_damaged_log_is_reported_not_replayed(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    await scripted_log(log)
    lines = log.read_text(encoding="utf-8").splitlines()
    assert main(["replay", str(log)]) == 0
    assert len(lines) == 10 and lines[-4].startswith('{"kind":"event"') and "all done" in lines[-4]
    change, message = TAMPERING[damage]
    log.write_text("\n".join(change(list(lines))) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["replay", str(log)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no result is printed from a damaged log
    assert "damaged recording" in captured.err and message in captured.err, captured.err
    assert "Traceback" not in captured.err


async def test_a_result_the_core_no_longer_reproduces_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A sealed log whose recorded result digest is not what the fold gives (another rma version):
    # re-seal the lines with a forged result digest; the chain holds but the replay differs.
    from rma.recording import GENESIS, seal

    log = tmp_path / "log.jsonl"
    await scripted_log(log)
    previous, out = GENESIS, []
    for line in log.read_text(encoding="utf-8").splitlines():
        body = line.rsplit(',"chain":', 1)[0] + "}"
        if body.startswith('{"kind":"result"'):
            body = '{"kind":"result","digest":"' + "0" * 64 + '"}'
        sealed, previous = seal(previous, body)
        out.append(sealed)
    log.write_text("\n".join(out) + "\n", encoding="utf-8")
    assert main(["replay", str(log)]) == 1
    assert "result 1 replays differently from the recorded run" in capsys.readouterr().err


# ── recording never changes a run's outcome ──


async def test_an_unwritable_record_path_is_invalid_opts_before_the_session_starts(tmp_path: Path) -> None:
    provider = ScriptedProvider([end()])
    got = await run(provider, handler=Recorder(), prompt="go", record=str(tmp_path / "no" / "such" / "log"))
    assert isinstance(got, Failure) and isinstance(got.failure(), InvalidOpts)
    assert got.failure().option == "record" and "cannot write" in got.failure().message
    assert provider.opened == []  # checked before the session opened


@pytest.mark.parametrize("target", [42, object(), b"log.jsonl"])
async def test_a_record_target_that_is_neither_path_nor_stream_is_invalid_opts(target: object) -> None:
    got = await run(ScriptedProvider([end()]), handler=Recorder(), prompt="go", record=target)  # type: ignore[arg-type]
    assert isinstance(got, Failure) and isinstance(got.failure(), InvalidOpts)
    assert got.failure().option == "record"


async def test_a_path_object_is_a_record_target(tmp_path: Path) -> None:
    got = await run(ScriptedProvider([end()]), handler=Recorder(), prompt="go", record=tmp_path / "log.jsonl")
    assert isinstance(got, Success)
    assert (tmp_path / "log.jsonl").read_text().splitlines()[-1].startswith('{"kind":"end"')


async def test_metadata_that_is_not_json_is_invalid_opts_only_when_recording() -> None:
    meta = {"when": datetime.datetime(2026, 1, 1)}
    unrecorded = await run(ScriptedProvider([end()]), handler=Recorder(), prompt="go", metadata=meta)
    assert isinstance(unrecorded, Success)
    recorded = await run(
        ScriptedProvider([end()]),
        handler=Recorder(),
        prompt="go",
        metadata=meta,
        record=io.StringIO(),
    )
    assert isinstance(recorded, Failure) and isinstance(recorded.failure(), InvalidOpts)
    assert recorded.failure().option == "record"
    assert "metadata is not JSON" in recorded.failure().message


async def test_a_reply_with_a_lone_surrogate_is_recorded_and_replays(tmp_path: Path) -> None:
    turns = [end("bad \ud800 byte")]
    unrecorded = await run(ScriptedProvider(turns), handler=Recorder(), prompt="go")
    log = tmp_path / "log.jsonl"
    recorded = await run(ScriptedProvider(turns), handler=Recorder(), prompt="go", record=str(log))
    assert isinstance(recorded, Success) and recorded.unwrap().text == "bad \ud800 byte"
    assert dumps(recorded) == dumps(unrecorded)
    log.read_bytes().decode("utf-8")  # the log is valid UTF-8 (the surrogate is escaped)
    shown = replay_cli(str(log), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["$ok"]["text"] == "bad \ud800 byte"


class BreaksAfter(io.StringIO):
    """A stream whose writes start failing (a full disk) after ``n`` lines."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    def write(self, text: str) -> int:
        if self.left == 0:
            raise OSError(28, "No space left on device")
        self.left -= 1
        return super().write(text)


async def test_a_recording_that_fails_mid_run_stops_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    turns = [calls(tool("lookup", "t1", q=1)), end("finished")]
    unrecorded = await run(ScriptedProvider(turns), handler=Recorder(), prompt="go")
    stream = BreaksAfter(3)
    with caplog.at_level(logging.WARNING, logger="rma.session"):
        recorded = await run(ScriptedProvider(turns), handler=Recorder(), prompt="go", record=stream)
    assert isinstance(recorded, Success)
    assert dumps(recorded) == dumps(unrecorded)
    assert [r.getMessage() for r in caplog.records if "recording stopped" in r.getMessage()] == [
        "recording stopped: OSError: [Errno 28] No space left on device (the session goes on unrecorded)"
    ]
    log = tmp_path / "partial.jsonl"
    log.write_text(stream.getvalue(), encoding="utf-8")
    assert len(stream.getvalue().splitlines()) == 3
    shown = replay_cli(str(log))
    assert shown.returncode == 1 and "truncated" in shown.stderr


async def test_a_run_that_failed_at_open_records_the_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = AuthenticationError(detail="bad key")
    log = tmp_path / "open.jsonl"
    got = await run(ScriptedProvider(open_error=error), handler=Recorder(), prompt="go", record=str(log))
    assert got == Failure(error)
    assert main(["replay", str(log)]) == 0
    out = capsys.readouterr().out
    assert "1 result (verified)" in out
    assert f"result 1: error ({error.kind}) (the session failed to open)" in out
    assert main(["replay", str(log), "--json"]) == 0
    assert capsys.readouterr().out.splitlines() == [dumps(got)]


async def test_a_live_session_that_failed_at_open_records_the_failure(tmp_path: Path) -> None:
    from rma_shell.session import SessionFailed

    error = AuthenticationError(detail="bad key")
    log = tmp_path / "open.jsonl"
    with pytest.raises(SessionFailed):
        async with open_session(ScriptedProvider(open_error=error), handler=Recorder(), record=str(log)):
            pass
    shown = replay_cli(str(log), "--json")
    assert shown.stdout.splitlines() == [dumps(Failure(error))]


async def test_a_live_sessions_results_replay_in_order(tmp_path: Path) -> None:
    log = tmp_path / "live.jsonl"
    results = []
    async with open_session(
        ScriptedProvider([end("one"), end("two")]), handler=Recorder(), prompt="first", record=str(log)
    ) as session:
        results.append(await session.next_result())
        await session.message("second")
        results.append(await session.next_result())
    shown = replay_cli(str(log), "--json")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [dumps(r) for r in results]


async def test_a_log_cut_short_replays_as_far_as_it_goes_with_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "live.jsonl"
    async with open_session(
        ScriptedProvider([end("one"), end("two")]), handler=Recorder(), prompt="first", record=str(log)
    ) as session:
        first = await session.next_result()
        await session.message("second")
        await session.next_result()
    lines = log.read_text(encoding="utf-8").splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith('{"kind":"result"')) + 1
    # The process died while writing the next line: the first result and half a line are there.
    log.write_text("\n".join([*lines[:cut], lines[cut][:30]]), encoding="utf-8")
    assert main(["replay", str(log)]) == 1
    assert "(--partial replays it as far as it goes)" in capsys.readouterr().err
    assert main(["replay", str(log), "--partial", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [dumps(first)]
    assert "the log was cut short; replayed as far as it goes" in captured.err
    # --partial still refuses an edited line.
    log.write_text("\n".join([*lines[:cut]]).replace('"one"', '"uno"'), encoding="utf-8")
    assert main(["replay", str(log), "--partial"]) == 1
    assert "the line does not match its digest" in capsys.readouterr().err


async def test_a_record_stream_that_cannot_take_text_is_invalid_opts() -> None:
    closed = io.StringIO()
    closed.close()
    for target in (io.BytesIO(), closed):
        got = await run(ScriptedProvider([end()]), handler=Recorder(), prompt="go", record=target)  # type: ignore[arg-type]
        assert isinstance(got, Failure) and got.failure().option == "record"  # type: ignore[attr-defined]
        assert "cannot write the recording" in got.failure().message


# ── Ctrl-C reaches the caller as itself ──


class Interrupts:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        raise KeyboardInterrupt


@pytest.mark.trio_only  # asyncio lets a KeyboardInterrupt in a task escape the loop itself
async def test_a_keyboard_interrupt_in_a_tool_reaches_the_caller_unwrapped(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    turns = [calls(tool("lookup", "t1", q=1)), end()]
    with pytest.raises(KeyboardInterrupt) as raised:
        await run(ScriptedProvider(turns), handler=Interrupts(), prompt="go", record=str(log))
    assert type(raised.value) is KeyboardInterrupt
    assert json.loads(log.read_text().splitlines()[-1])["stopped"] == "KeyboardInterrupt"
    shown = replay_cli(str(log))
    assert shown.returncode == 1 and "the recorded run was interrupted (Ctrl-C" in shown.stderr


@pytest.mark.trio_only
async def test_a_keyboard_interrupt_in_a_live_sessions_tool_reaches_the_caller_unwrapped() -> None:
    turns = [calls(tool("lookup", "t1", q=1)), end()]
    with pytest.raises(KeyboardInterrupt) as raised:
        async with open_session(ScriptedProvider(turns), handler=Interrupts(), prompt="go") as session:
            await session.next_result()
    assert type(raised.value) is KeyboardInterrupt


async def test_a_run_cancelled_by_its_caller_records_that(tmp_path: Path) -> None:
    import anyio

    log = tmp_path / "log.jsonl"
    with anyio.move_on_after(0.2):
        await run(ScriptedProvider([end()], turn_delay=30), handler=Recorder(), prompt="go", record=str(log))
    assert json.loads(log.read_text().splitlines()[-1])["stopped"] == "cancelled"
    shown = replay_cli(str(log))
    assert shown.returncode == 1 and "the recorded run was cancelled by its caller" in shown.stderr
