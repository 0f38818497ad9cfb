"""``rma inspect``: it serves the page on loopback and says so, ends on Ctrl-C with one line and
130, and refuses a missing file, a bad port or a missing extra with a message and 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the 'inspect' extra (Starlette) is not installed")
pytest.importorskip("uvicorn", reason="the 'inspect' extra (uvicorn) is not installed")

from rma_shell.cli import main
from rma_shell.inspect.server import announce, is_loopback
from tests.helpers import rma_interruptible
from tests.inspect import _sessions as s

ROOT = Path(__file__).resolve().parents[2]


def test_rma_inspect_serves_on_loopback_says_so_and_ends_on_ctrl_c(tmp_path: Path) -> None:
    journal = tmp_path / "sessions.db"
    s.every_state("trio", journal)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        rma_interruptible("inspect", str(journal), "--port", "0"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first, second = proc.stdout.readline(), proc.stdout.readline()
        assert first.startswith(f"rma inspect: {journal} on http://127.0.0.1:")
        assert second.strip() == "rma inspect: listening on loopback only (this machine); --host to change"
        url = first.split(" on ", 1)[1].strip()
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200 and "waiting for approval" in page.text
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and err.splitlines()[-1] == "rma inspect: interrupted"
    assert "Traceback" not in err


def test_off_loopback_it_warns_that_other_machines_can_reach_it() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.7")
    assert "loopback only" in announce("j.db", "127.0.0.1", 8321)[1]
    assert announce("j.db", "::1", 8321)[0] == "rma inspect: j.db on http://[::1]:8321/"
    warning = announce("j.db", "0.0.0.0", 8321)[1]
    assert "WARNING" in warning and "reachable from other machines" in warning and "decide" in warning


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "missing.db"], "rma inspect: error: missing.db: no such file"),
        (["inspect", "x.db", "--port", "70000"], "expected a port number (0-65535), got '70000'"),
        (["inspect"], "the following arguments are required: JOURNAL_OR_RECORDING"),
    ],
)
def test_bad_usage_is_a_message_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_without_the_extra_it_says_which_to_install(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    assert main(["inspect", "j.db"]) == 2
    assert "needs the 'inspect' extra: pip install 'rma-agents[inspect]'" in capsys.readouterr().err


def test_a_port_in_use_is_a_message_and_exit_1(tmp_path: Path, capsys: Any) -> None:
    journal = tmp_path / "sessions.db"
    s.every_state("trio", journal)
    from rma_shell.inspect.server import bind

    taken = bind("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        assert main(["inspect", str(journal), "--port", str(port)]) == 1
    finally:
        taken.close()
    assert f"rma inspect: error: cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
