"""The core (rma/) stays pure: no I/O, clock, randomness or environment (issue #2 §1)."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import rma

CORE = Path(rma.__file__).parent
FORBIDDEN_MODULES = {
    "trio",
    "httpx",
    "anyio",
    "asyncio",
    "socket",
    "time",
    "random",
    "subprocess",
    "threading",
    "requests",
    "secrets",
    "sqlite3",
    "shutil",
    "tempfile",
    "signal",
    "selectors",
    "logging",
    "uuid",
    "io",
    "pathlib",
}
FORBIDDEN_CALLS = {
    "now",
    "utcnow",
    "today",
    "uuid4",
    "urandom",
    "getenv",
    "open",
    "monotonic",
    "perf_counter",
}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name.split(".")[0] in FORBIDDEN_MODULES:
                out.append(f"{path}:{node.lineno} imports {name}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in {"environ", "getenv", "system", "urandom"}
        ):
            out.append(f"{path}:{node.lineno} uses os.{node.attr}")
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in FORBIDDEN_CALLS:
                out.append(f"{path}:{node.lineno} calls {name}()")
    return out


def test_no_core_module_imports_io_clock_randomness_or_environment() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 10
    problems = [v for f in files for v in _violations(f)]
    assert problems == []


def test_the_checker_itself_catches_violations(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nimport os\nx = os.environ['A']\nfrom trio import sleep\nopen('f')\n")
    found = _violations(bad)
    assert len(found) == 4


def test_importing_every_core_module_loads_no_io_library() -> None:
    modules = [m.name for m in pkgutil.walk_packages([str(CORE)], prefix="rma.")]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in ('trio', 'httpx', 'anyio', 'asyncio', 'sqlite3', 'h11') "
        "if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
