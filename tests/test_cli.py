"""The ``rma`` command line: ``demo`` (offline and over HTTP), ``replay``, exit codes."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from returns.result import Success

from rma.codec_json import dumps
from rma_shell.cli import main
from rma_shell.demo import DemoConfig, Display, RehearsalModel, run_demo
from rma_shell.testing.local.emulator import OpenAIEmulator, Turn, delay, status
from tests.helpers import rma_interruptible

KEY = "sk-test-SECRET-4f2a9c"


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ── a loopback OpenAI-compatible endpoint whose replies come from the rehearsal model ──


def _rehearsal_turn(body: dict[str, Any]) -> Turn:
    response = RehearsalModel().respond(body)
    return Turn(response["choices"][0]["message"], usage=response["usage"])


def _emulator(**options: Any) -> OpenAIEmulator:
    return OpenAIEmulator([_rehearsal_turn] * 8, **options)


# ── demo ──


def test_demo_offline(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--plain"], env={}) == 0
    out = capsys.readouterr().out
    assert "rma-rehearsal" in out and "rehearsal model" in out
    assert "-> summarize(" in out
    assert "Summary" in out and "after 4 turns" in out and "read_csv x1, summarize x2, write_report x1" in out
    assert "Final answer" in out
    assert (cwd / "report.md").is_file()


def test_demo_quiet_prints_only_the_summary(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quiet", "--out", "q.md"], env={}) == 0
    out = capsys.readouterr().out
    assert "turn 1" not in out and "Summary" in out
    assert (cwd / "q.md").is_file()


def test_demo_session_error_exits_1(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _emulator(model="served-model") as emu:
        assert main(["demo", "--base-url", emu.base_url, "--model", "other-model"], env={}) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "404" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["demo", "--max-turns", "0"],
        ["demo", "--max-turns", "x"],
        ["demo", "--data", "no-such.csv"],
        ["demo", "--out", "../up.md"],
        ["demo", "--out", "report.txt"],
        ["demo", "--record", "no/such/dir/log.jsonl"],
        ["demo", "--base-url", "http://127.0.0.1:9/v1"],
        ["replay"],
    ],
)
def test_bad_usage_exits_2(cwd: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv, env={}) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("rma ")


# ── demo against an OpenAI-compatible endpoint ──


def test_demo_over_http_never_prints_the_key(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _emulator(api_key=KEY, model="tiny-model") as emu:
        base_url = emu.base_url
        argv = ["demo", "--base-url", base_url, "--model", "tiny-model", "--api-key", KEY]
        assert main([*argv, "--record", "http.jsonl"], env={}) == 0
    captured = capsys.readouterr()
    assert KEY not in captured.out and KEY not in captured.err
    assert KEY not in (cwd / "http.jsonl").read_text()
    assert f"tiny-model at {base_url} (API key set)" in captured.out
    assert "after 4 turns" in captured.out
    assert len(emu.requests) == 4
    assert {r.headers["authorization"] for r in emu.requests} == {f"Bearer {KEY}"}
    first = emu.requests[0].body
    assert {t["function"]["name"] for t in first["tools"]} == {"read_csv", "summarize", "write_report"}
    assert (cwd / "report.md").is_file()


def test_demo_settings_from_the_environment(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _emulator(api_key=KEY, model="env-model") as emu:
        env = {"RMA_BASE_URL": emu.base_url, "RMA_MODEL": "env-model", "OPENAI_API_KEY": KEY}
        assert main(["demo", "--quiet"], env=env) == 0
    captured = capsys.readouterr()
    assert KEY not in captured.out + captured.err
    assert "after 4 turns" in captured.out


def test_rejected_key_is_an_error_without_the_key(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Servers echo (part of) a rejected key; the CLI masks it in whatever it prints.
    echo = status(401, message=f"Incorrect API key provided: {KEY}.")
    with _emulator(faults={0: echo}) as emu:
        argv = ["demo", "--base-url", emu.base_url, "--model", "m", "--api-key", KEY, "--record", "bad.jsonl"]
        assert main(argv, env={}) == 1
    captured = capsys.readouterr()
    assert "error:" in captured.err and ("401" in captured.err or "authentication" in captured.err.lower())
    assert KEY not in captured.out + captured.err
    # The log replays to the same error.
    assert main(["replay", "bad.jsonl"]) == 0
    assert "result 1: error" in capsys.readouterr().out


# ── replay ──


async def test_replay_reproduces_the_recorded_result(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (cwd / "demo.jsonl").open("w") as log:
        demo = await run_demo(DemoConfig(workdir=cwd, record=log), Display(quiet=True, file=io.StringIO()))
    assert isinstance(demo.outcome, Success)
    assert main(["replay", "demo.jsonl", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [dumps(demo.outcome)]


def test_cli_record_then_replay(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--record", "demo.jsonl", "--plain"], env={}) == 0
    demo_out = capsys.readouterr().out
    assert main(["replay", "demo.jsonl"]) == 0
    out = capsys.readouterr().out
    assert "1 result" in out and "result 1: end_turn (stop) after 4 turns" in out
    tokens = next(line for line in demo_out.splitlines() if line.strip().startswith("tokens"))
    assert tokens.strip() in out
    answer = demo_out.split("Final answer\n", 1)[1].strip().splitlines()[0].strip()
    assert answer in out
    assert main(["replay", "demo.jsonl", "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    replayed = json.loads(line)["$ok"]
    assert replayed["turns"] == 4 and replayed["terminal"] == "end_turn"


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        (None, 2, "no such file"),
        ("", 1, "no header"),
        ("this is not json\n", 1, "line 1: not JSON"),
        (
            '{"kind":"header","format":1,"config":{"$type":"SessionConfig","provider_name":"nope"}}\n',
            1,
            "nope",
        ),
        ('{"kind":"event","event":{"$type":"NoSuchEvent"}}\n', 1, "no header line"),
        (
            '{"kind":"header","format":1,"config":{"$type":"SessionConfig","provider_name":"scripted"}}\n'
            '{"kind":"event","event":{"$type":"NoSuchEvent"}}\n',
            1,
            "not a valid event log",
        ),
        (b"\xff\xfe\x00garbage", 1, "not a text"),
    ],
)
def test_replay_of_a_bad_log(
    cwd: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, code: int, message: str
) -> None:
    if isinstance(content, bytes):
        (cwd / "log.jsonl").write_bytes(content)
    elif content is not None:
        (cwd / "log.jsonl").write_text(content)
    assert main(["replay", "log.jsonl"]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_replay_of_a_cut_short_log(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--record", "full.jsonl", "--quiet"], env={}) == 0
    lines = (cwd / "full.jsonl").read_text().splitlines()
    (cwd / "cut.jsonl").write_text("\n".join(lines[:3]) + "\n")
    (cwd / "dir.jsonl").mkdir()
    capsys.readouterr()
    assert main(["replay", "cut.jsonl"]) == 1
    assert "the log is truncated: it ends at line 3 without its end record" in capsys.readouterr().err
    assert main(["replay", "dir.jsonl"]) == 2


# ── a Unix tool: Ctrl-C, closed pipes ──


def _rma(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        rma_interruptible(*args),  # the Ctrl-C test signals it
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(predicate: Any, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_ctrl_c_during_a_run_exits_130_with_one_line(cwd: Path) -> None:
    # The model server accepts the request and does not answer: Ctrl-C must end it cleanly.
    with _emulator(faults={0: delay(60)}) as emu:
        proc = _rma(cwd, "demo", "--base-url", emu.base_url, "--model", "m", "--record", "int.jsonl")
        _wait_for(lambda: len(emu.requests) >= 1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.splitlines() == ["rma demo: interrupted"]
    assert "Traceback" not in out
    # The recording says how it ended, and replay reports it rather than a result.
    last = json.loads((cwd / "int.jsonl").read_text().splitlines()[-1])
    assert last["kind"] == "end" and last["stopped"] == "KeyboardInterrupt"
    replayed = _rma(cwd, "replay", "int.jsonl")
    _, err = replayed.communicate(timeout=30)
    assert replayed.returncode == 1 and "the recorded run was interrupted (Ctrl-C, KeyboardInterrupt)" in err


# The console script pip writes for pyproject's [project.scripts] entry, with one change: a
# meta-path finder that, when ``anyio`` is first imported (the CLI's imports are under way),
# says so on stdout and waits there for the test's SIGINT.
_SCRIPT_INTERRUPTED_IN_IMPORTS = """
import importlib, sys, time

class Stall:
    def find_spec(self, name, path=None, target=None):
        if name == "anyio":
            print("importing", flush=True)
            time.sleep(60)  # the SIGINT's KeyboardInterrupt is raised here, inside the import
        return None

sys.meta_path.insert(0, Stall())
module, _, function = sys.argv.pop(1).partition(":")
sys.exit(getattr(importlib.import_module(module), function)())
"""


def test_ctrl_c_while_the_cli_is_still_importing_exits_130_with_one_line(cwd: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    entry = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]["rma"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT_INTERRUPTED_IN_IMPORTS, entry, "demo"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as from a terminal, even when this run was started with SIGINT ignored (a
        # background job): the child would inherit the ignore (see tests.helpers).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "importing\n"  # an event, not a delay: it is in the imports
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert err.splitlines() == ["rma demo: interrupted"], err
    assert proc.returncode == 130
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["demo", "--plain"], 141),
        (["demo"], 141),
        (["replay", "demo.jsonl"], 141),
        (["--help"], 0),  # argparse drops a failed help write itself; the help did succeed
    ],
)
def test_a_closed_stdout_ends_quietly(cwd: Path, argv: list[str], code: int) -> None:
    # `rma ... | head`: the reader is gone before the first line; no traceback, exit 141 (SIGPIPE).
    assert main(["demo", "--quiet", "--record", "demo.jsonl", "--out", "first.md"], env={}) == 0
    proc = _rma(cwd, *argv)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert err == ""
    assert proc.returncode == code
    if argv[0] == "demo":  # the run itself went on to the end
        assert (cwd / "report.md").is_file()


# ── help and usage errors ──

SUBCOMMANDS = ["demo", "replay", "provision", "tag", "resolve", "prune", "teardown"]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_a_plain_text_description(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith(f"usage: rma {command}")
    assert len(description.split()) >= 8, description  # a sentence, not just the usage
    for rest in ("``", ":class:", ":func:", ".. ", "`rma"):  # no raw reST or Markdown
        assert rest not in text, (rest, text)
    assert "Exit codes:" in text or command in ("tag", "resolve", "prune", "teardown")


def test_the_command_list_names_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"    {command}" in out for command in SUBCOMMANDS)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_a_usage_error_names_the_subcommand(
    cwd: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--no-such-flag"], env={}) == 2
    err = capsys.readouterr().err
    assert f"rma {command}: error:" in err, err
    assert "--no-such-flag" in err or "required" in err, err
    assert "Traceback" not in err


def test_a_missing_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([], env={}) == 2
    assert "rma: error: a command is required" in capsys.readouterr().err
