"""``rma worker``: serves a self-hosted environment with one progress line per event, refuses
to start without a sandbox unless told, and reports an API error on one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rma_shell.cli import main
from rma_shell.testing.claude import CMAEmulator
from rma_shell.workspace import sandbox as sandbox_module
from tests.environments._setup import KEY, self_hosted, start_session
from tests.environments.test_worker import CODING_TURNS
from tests.workspace._procs import needs_bwrap


@needs_bwrap
def test_rma_worker_serves_the_queue_and_prints_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with CMAEmulator(script=CODING_TURNS) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        argv = ["worker", env_id, "--workspaces", str(tmp_path), "--base-url", emu.base_url, "--drain"]
        code = main(argv, env={"ANTHROPIC_API_KEY": KEY})
    err = capsys.readouterr().err
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0].startswith(f"rma worker: serving {env_id} as ")
    assert any(line.startswith("rma worker: claimed work_") and sid in line for line in lines)
    assert any("ended (done)" in line and "end_turn, 3 tool call(s)" in line for line in lines)
    assert lines[-1] == "rma worker: served 1 item(s)"
    assert KEY not in err


def test_rma_worker_refuses_to_start_without_a_sandbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_module, "bwrap_path", lambda: None)
    code = main(["worker", "env_x", "--workspaces", str(tmp_path)], env={"ANTHROPIC_API_KEY": KEY})
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("rma worker: error: the workspace's bash runs inside bubblewrap")
    assert "sandbox='none'" in err


def test_rma_worker_reports_an_unknown_environment_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with CMAEmulator() as emu:
        argv = [
            "worker",
            "env_missing",
            "--workspaces",
            str(tmp_path),
            "--base-url",
            emu.base_url,
            "--sandbox",
            "none",
        ]
        code = main(argv, env={"ANTHROPIC_API_KEY": KEY})
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("rma worker: error: http_error: HTTP 404") and "env_missing" in err[-1]
