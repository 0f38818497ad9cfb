#!/usr/bin/env python3
"""Project tasks that work on a fresh clone with nothing but python3 (pip, venv).

    python3 dev.py demo [args]   # create .venv if needed, install, run `rma demo`
    python3 dev.py test          # create .venv if needed, install dev tools, run every check
                                 # (ruff, mypy, the import layers, the docs site, the tests);
                                 # as root with apt-get, installs Debian's chromium for the
                                 # inspector's browser test
    python3 dev.py bench [--quick]

The virtual environment lives in .venv; it is (re)installed when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
PACKAGES = ("rma", "rma_shell", "rma_cli")
CHECKED = ("tests", "properties", "bench", "examples", "conftest.py")  # linted, not type-checked
BENCHMARKS = (
    "bench/core_step.py",
    "bench/sse_decode.py",
    "bench/eventstream_decode.py",
    "bench/sigv4_sign.py",
    "bench/local_loop.py",
    "bench/cma_tool_loop.py",
    "bench/agentcore_tool_loop.py",
    "bench/long_session.py",
    "bench/scale.py",
    "bench/stream_latency.py",
    "bench/temporal_overhead.py",
    "bench/journal_overhead.py",
    "bench/journal_group.py",
    "bench/agent_sync.py",
    "bench/self_hosted.py",
)


def sh(*args: str | Path) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    subprocess.run([str(a) for a in args], cwd=ROOT, check=True)


def ensure_venv(extras: str) -> None:
    if not PY.exists():
        sh(sys.executable, "-m", "venv", VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    marker = VENV / f".installed-{extras}"
    if marker.exists() and marker.read_text() == digest:
        return
    sh(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    sh(PY, "-m", "pip", "install", "--quiet", "-e", f".[{extras}]")
    marker.write_text(digest)


def ensure_bubblewrap() -> None:
    """The workspace toolset's bash runs inside bubblewrap (docs/workspace.md); its sandbox tests
    need it. Installed with apt where this runs as root on Debian/Ubuntu (CI); elsewhere those
    tests skip, and the toolset refuses unsandboxed bash unless asked for it."""
    if shutil.which("bwrap") or not sys.platform.startswith("linux") or not shutil.which("apt-get"):
        return
    if os.geteuid() != 0:
        print("note: bubblewrap is not installed; the workspace sandbox tests will skip", flush=True)
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "bubblewrap"]):
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            print("note: could not install bubblewrap; the workspace sandbox tests will skip", flush=True)
            return


def ensure_chromium() -> None:
    """The inspector's browser test drives Debian's headless Chromium: install it where apt-get
    runs as root (CI, the project's machines); elsewhere the test says why it skips."""
    if os.environ.get("RMA_CHROMIUM") or any(
        shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
    ):
        return
    if not shutil.which("apt-get") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        print("dev.py: no Chromium, and no apt-get as root to install it: the browser test skips", flush=True)
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        print("+", " ".join(step), flush=True)
        if subprocess.run(step, cwd=ROOT, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            print("dev.py: could not install chromium: the browser test skips", flush=True)
            return


def ensure_node_clients() -> None:
    """tests/ui drives the protocols' own JavaScript clients (AG-UI's HttpAgent, the AI SDK's
    transport) in Node and, bundled by esbuild, in Chromium: install Node where apt-get runs as
    root, then the locked packages (tests/ui/js/package-lock.json); elsewhere those tests say
    why they skip."""
    js = ROOT / "tests" / "ui" / "js"
    if not shutil.which("npm") and shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        step = ["apt-get", "install", "-y", "-qq", "nodejs", "npm"]
        print("+", " ".join(step), flush=True)
        subprocess.run(step, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    if not shutil.which("npm"):
        print("dev.py: no npm: the JavaScript client tests skip", flush=True)
        return
    if (js / "node_modules").exists():
        return
    step = ["npm", "ci", "--no-audit", "--no-fund", "--silent"]
    print("+", " ".join(step), f"(in {js.relative_to(ROOT)})", flush=True)
    try:
        done = subprocess.run(step, cwd=js, timeout=600).returncode
    except subprocess.TimeoutExpired:
        done = -1
    if done != 0:
        print("dev.py: npm ci failed: the JavaScript client tests skip", flush=True)


def demo(args: list[str]) -> None:
    ensure_venv("cli")
    sh(BIN / "rma", "demo", *args)


def test(args: list[str]) -> None:
    ensure_venv("dev")
    ensure_bubblewrap()
    sh(BIN / "ruff", "check", *PACKAGES, *CHECKED)
    sh(BIN / "ruff", "format", "--check", *PACKAGES, *CHECKED)
    sh(BIN / "mypy", "--strict", *PACKAGES)
    sh(BIN / "lint-imports")  # the layers (pyproject.toml [tool.importlinter])
    with tempfile.TemporaryDirectory(prefix="rma-site-") as site:  # the docs site and API reference
        sh(BIN / "mkdocs", "build", "--strict", "--quiet", "--site-dir", site)
    ensure_chromium()  # tests/inspect/test_browser.py, tests/ui/test_browser.py
    ensure_node_clients()  # tests/ui/test_clients.py, tests/ui/test_browser.py
    sh(PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", "properties", *args)
    for script in BENCHMARKS:
        if (ROOT / script).exists():
            sh(PY, script, "--quick")


def bench(args: list[str]) -> None:
    ensure_venv("dev,bench")
    for script in BENCHMARKS:
        sh(PY, script, *args)


def main() -> int:
    tasks = {"demo": demo, "test": test, "bench": bench}
    if len(sys.argv) < 2 or sys.argv[1] not in tasks:
        print(__doc__)
        return 2
    try:
        tasks[sys.argv[1]](sys.argv[2:])
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
