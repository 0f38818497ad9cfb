"""Run the fenced Python blocks of a Markdown page against the loopback emulators.

``python -m tests.docs_harness PAGE.md`` executes every ```` ```python ```` block of the page
in order, in one namespace (a block may use what an earlier block on the page defined, as a
reader would), in a fresh working directory, and prints one JSON line per block:
``{"line", "status": "ok" | "skip" | "fail", "detail", "output"}``. ``tests/test_docs_examples.py``
runs it once per page in a subprocess, so global state a block sets (logging handlers,
OpenTelemetry providers, environment variables) never leaks into other pages or tests.

A block runs **as a reader would run it**: with only what the page's earlier blocks defined
(so a page may open with a visible set-up block — start an emulator, define the handler — that
later blocks use). A block that needs what a reader must supply (a real server's URL, a key,
an ``agent_…`` id, "your" handler) says so where the reader sees it: its first line is a
``# Fragment: …`` comment naming what it needs. Only such a fragment gets the hidden help below
— fixtures, placeholder rewriting, the stand-ins for "your code" — and only while it runs; a
block with a ``setup`` directive that is not marked as a fragment fails.

A block may be preceded by a directive, an HTML comment the rendered page does not show:

    <!-- docs-test: setup=openai -->              start the OpenAI emulator for this block
    <!-- docs-test: setup=cma,otlp expect="end_turn" -->   stdout must contain the text
    <!-- docs-test: skip reason="a class outline, not code to run" -->
    <!-- docs-test: needs=fastapi -->             skipped (saying so) where the module is not installed

``setup`` names fixtures (``FIXTURES``), started once per page and kept until its end; each
sets environment variables, rewrites the placeholders a user would replace (the Ollama URL,
``agent_…`` ids, a harness ARN) to point at the emulator, and offers names (``provider``,
``client``) to blocks that are fragments of a larger program; the OpenAI one is started for
every page (``DEFAULT_SETUP``), so a fragment that runs on ``provider`` needs no directive.
A block with a ``setup`` must make at least one request to each of its emulators, and if it
(re)binds ``outcome`` must leave it a ``Success`` — an example that quietly failed is a
failing example (a block without a directive may show a ``Failure`` on purpose, e.g. an
invalid option). Every page also gets ``your_code()``: stand-ins for what the docs call
"your" handler and tool schemas (``MyTools``, ``LOOKUP``, …).

Code with a top-level ``await`` (or ``async with``/``async for``) runs as the body of an async
function under trio, as in an async REPL. ``trio.run(main)`` and ``asyncio.run(main())`` run
as written.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import sys
import tempfile
import threading
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DIRECTIVE = re.compile(r"<!--\s*docs-test:(?P<body>.*?)-->", re.S)
KNOWN_KEYS = {"setup", "skip", "reason", "expect", "needs"}


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the first code line
    code: str
    directive: dict[str, str] = field(default_factory=dict)

    @property
    def setups(self) -> list[str]:
        return [s for s in self.directive.get("setup", "").split(",") if s]

    @property
    def fragment(self) -> bool:
        """Visibly marked as needing what the reader supplies: its first line is ``# Fragment:``."""
        first = self.code.lstrip().split("\n", 1)[0]
        return first.lower().startswith("# fragment")


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def parse_directive(body: str) -> dict[str, str]:
    """``setup=a,b expect="x y" skip reason=...`` → a dict (a bare word maps to "")."""
    out: dict[str, str] = {}
    for word in shlex.split(body):
        key, _, value = word.partition("=")
        out[key] = value
    return out


def blocks(path: Path) -> list[Block]:
    """Every ```python block of a Markdown file, with the directive just above it (if any)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped in ("```python", "```py"):
            indent = len(lines[i]) - len(lines[i].lstrip())
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            code = "\n".join(line[indent:] for line in lines[i + 1 : j]) + "\n"
            found.append(Block(path, i + 2, code, _directive_above(lines, i)))
            i = j + 1
        else:
            i += 1
    return found


def _directive_above(lines: list[str], fence: int) -> dict[str, str]:
    k = fence - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    end = k
    if k < 0 or not lines[end].rstrip().endswith("-->"):
        return {}
    while k >= 0 and "<!--" not in lines[k]:
        k -= 1
    match = DIRECTIVE.search("\n".join(lines[k : end + 1]))
    return parse_directive(match.group("body")) if match else {}


def pages() -> list[Path]:
    """README.md and every page under docs/ that holds a Python block."""
    candidates = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in candidates if blocks(p)]


# --------------------------------------------------------------------------------------------
# "Your code": what the docs leave to the reader
# --------------------------------------------------------------------------------------------

LOOKUP = {
    "name": "lookup_customer",
    "description": "Find a customer by email",
    "input_schema": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
}


class MyTools:
    """A handler answering every tool: the docs' "your handler"."""

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return f"{name}: Pro plan, active"


class LookupCustomer:
    """A tool object: rma reads its name, description and input_schema."""

    name = LOOKUP["name"]
    description = LOOKUP["description"]
    input_schema = LOOKUP["input_schema"]


def your_code() -> dict[str, Any]:
    return {
        "LOOKUP": LOOKUP,
        "lookup_customer_schema": LOOKUP,
        "LookupCustomer": LookupCustomer,
        "finish_schema": {
            "name": "finish",
            "description": "Submit the final answer",
            "input_schema": {"type": "object", "properties": {"answer": {"type": "string"}}},
        },
        "MyTools": MyTools,
        "Tools": MyTools,
        "my_tools": MyTools(),
        "h": MyTools(),
        "p": "Which plan is ada@example.com on?",
    }


# --------------------------------------------------------------------------------------------
# A scripted "model" for every emulator: call each declared tool once, then answer
# --------------------------------------------------------------------------------------------

ANSWER = "ada@example.com is on the Pro plan."


def _arguments(schema: Any) -> dict[str, Any]:
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    samples = {"string": "example", "number": 2, "integer": 2, "boolean": True, "array": [], "object": {}}
    args: dict[str, Any] = {}
    for key, spec in props.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        args[key] = "ada@example.com" if "email" in key else samples.get(kind or "string", "example")
    return args


def _next_tool(declared: list[tuple[str, Any]], called: set[str]) -> tuple[str, dict[str, Any]] | None:
    for name, schema in declared:
        if name not in called:
            return name, _arguments(schema)
    return None


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@dataclass
class Fixture:
    names: dict[str, Any] = field(default_factory=dict)
    replacements: list[tuple[re.Pattern[str], str]] = field(default_factory=list)
    requests: Callable[[], int] = lambda: 0
    env: dict[str, str] = field(default_factory=dict)  # set only while a fragment runs
    patches: list[tuple[Any, str, Any]] = field(default_factory=list)  # (object, attribute, value)


def _openai(stack: contextlib.ExitStack) -> Fixture:
    from rma_shell.providers.local import provider as local
    from rma_shell.testing import OpenAIEmulator, Turn

    def model(body: dict[str, Any]) -> dict[str, Any]:
        declared = [(t["function"]["name"], t["function"].get("parameters")) for t in body.get("tools", [])]
        called = {
            c["function"]["name"]
            for m in body["messages"]
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
        }
        call = _next_tool(declared, called)
        if call is None:
            return {"content": ANSWER}
        return {"tool_calls": [{"name": call[0], "arguments": call[1]}]}

    emu = stack.enter_context(OpenAIEmulator([Turn(model)] * 1000))
    return Fixture(
        names={"provider": local.Local(base_url=emu.base_url, model="qwen3:8b", tools=[LOOKUP])},
        replacements=[(re.compile(r"http://localhost:11434/v1"), emu.base_url)],
        requests=lambda: len(emu.requests),
        # Local() without base_url= talks to the emulator, while a fragment runs.
        patches=[(local, "DEFAULT_BASE_URL", emu.base_url)],
    )


def _cma(stack: contextlib.ExitStack) -> Fixture:
    import httpx

    from rma_shell.providers.claude import ClaudeManagedAgents
    from rma_shell.testing import CMAEmulator, cma

    def model(view: Any, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        agent = view.resource.get("agent") or {}
        declared = [
            (t["name"], t.get("input_schema")) for t in agent.get("tools", []) if t.get("type") == "custom"
        ]
        called = {e["name"] for e in view.history if e.get("type") == "agent.custom_tool_use"}
        call = _next_tool(declared, called)
        if call is None:
            return cma.text_turn(ANSWER)
        return cma.tool_turn(call)

    key = "sk-ant-docs-emulator"
    emu = stack.enter_context(CMAEmulator([model] * 1000, api_key=key))
    headers = {
        "authorization": f"Bearer {key}",
        "anthropic-beta": cma.BETA,
        "anthropic-version": "2023-06-01",
    }
    with httpx.Client(base_url=emu.base_url, headers=headers) as http:
        tool = {"type": "custom", **LOOKUP}
        agent = http.post("/v1/agents", json={"name": "docs", "model": "claude-sonnet-4-6", "tools": [tool]})
        env = http.post("/v1/environments", json={"name": "docs", "config": {"type": "cloud"}})
        agent_id, env_id = agent.json()["id"], env.json()["id"]
        session = http.post("/v1/sessions", json={"agent": agent_id, "environment_id": env_id})
        session_id = session.json()["id"]
    settings = {"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": emu.base_url}
    with _environ(settings):
        provider = ClaudeManagedAgents(agent_id=agent_id, environment_id=env_id)
        client = provider.client().unwrap()
    return Fixture(
        env=settings,
        names={"provider": provider, "client": client},
        replacements=[
            (re.compile(r"agent_…"), agent_id),
            (re.compile(r"env_…"), env_id),
            (re.compile(r"sesn_…"), session_id),
        ],
        requests=lambda: len(emu.requests),
    )


def _agentcore(stack: contextlib.ExitStack) -> Fixture:
    from rma_shell.providers.agentcore import BedrockAgentCore
    from rma_shell.testing import agentcore as ace

    def model(view: Any, body: dict[str, Any]) -> list[Any]:
        declared = [
            (t["name"], t.get("config", {}).get("inlineFunction", {}).get("inputSchema"))
            for t in body.get("tools", [])
            if t.get("type") == "inline_function"
        ]
        called = {
            block["toolUse"]["name"]
            for m in view.messages
            for block in m.get("content", [])
            if isinstance(block, dict) and "toolUse" in block
        }
        call = _next_tool(declared, called)
        return ace.text_turn(ANSWER) if call is None else ace.tool_turn(call)

    emu = stack.enter_context(
        ace.AgentCoreEmulator(
            [model] * 1000, ready_after_s=0, endpoint_ready_after_s=0, update_after_s=0, delete_after_s=0
        )
    )
    settings = emu.credentials_env()
    with _environ(settings):
        provider = BedrockAgentCore(harness_arn=emu.harness_arn, tools=[LOOKUP])
    return Fixture(
        env=settings,
        names={"provider": provider},
        replacements=[
            (re.compile(r"arn:aws:bedrock-agentcore:[a-z0-9-]+:\d{12}:harness/[^\"'\s]+"), emu.harness_arn)
        ],
        requests=lambda: len(emu.requests),
    )


def _otlp(stack: contextlib.ExitStack) -> Fixture:
    """An OTLP/HTTP collector stand-in: 200 to every POST, the paths kept."""
    received: list[str] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            received.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stack.callback(server.server_close)
    stack.callback(server.shutdown)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return Fixture(
        names={"otlp_received": received},
        replacements=[(re.compile(r"http://localhost:4318"), url)],
        requests=lambda: len(received),
    )


DEFAULT_SETUP = ("openai",)
"""Given to every fragment: Local's default URL and the Ollama URL in it reach the OpenAI
emulator, and ``provider`` (a ``Local``), ``h`` and ``p`` exist unless the page defines them."""


@contextlib.contextmanager
def _environ(settings: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _hidden_help(fixtures: list[Fixture]) -> Iterator[None]:
    """A fragment's fixtures' environment and patches, undone when it ends."""
    env = {k: v for f in fixtures for k, v in f.env.items()}
    undo: list[tuple[Any, str, Any]] = []
    with _environ(env):
        try:
            for f in fixtures:
                for target, attribute, value in f.patches:
                    undo.append((target, attribute, getattr(target, attribute)))
                    setattr(target, attribute, value)
            yield
        finally:
            for target, attribute, value in reversed(undo):
                setattr(target, attribute, value)


FIXTURES: dict[str, Callable[[contextlib.ExitStack], Fixture]] = {
    "openai": _openai,
    "cma": _cma,
    "agentcore": _agentcore,
    "otlp": _otlp,
}


# --------------------------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------------------------


def _execute(code: str, namespace: dict[str, Any], filename: str) -> None:
    compiled = compile(code, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)
    if isinstance(result, types.CoroutineType):
        import trio

        async def body() -> None:
            await result

        trio.run(body)


def _is_failure(value: object) -> bool:
    from returns.result import Failure

    return isinstance(value, Failure)


def run_page(path: Path) -> Iterator[dict[str, Any]]:
    module = types.ModuleType("docs_page")
    sys.modules["docs_page"] = module
    namespace = module.__dict__  # what the page's blocks define, as a reader's session holds it
    started: dict[str, Fixture] = {}
    with contextlib.ExitStack() as stack:
        for block in blocks(path):
            report: dict[str, Any] = {"line": block.line, "status": "ok", "detail": "", "output": ""}
            unknown = set(block.directive) - KNOWN_KEYS
            bad_setup = [s for s in block.setups if s not in FIXTURES]
            if unknown or bad_setup:
                report |= {
                    "status": "fail",
                    "detail": f"unknown directive keys {unknown} or setups {bad_setup}",
                }
                yield report
                continue
            missing = [m for m in block.directive.get("needs", "").split(",") if m and not _importable(m)]
            if missing:
                report |= {"status": "skip", "detail": f"needs {', '.join(missing)} (not installed)"}
                yield report
                continue
            if "skip" in block.directive:
                reason = block.directive.get("reason", "")
                if not reason:
                    report |= {"status": "fail", "detail": "skip needs reason="}
                elif not block.fragment:  # a reader must see that it is not run as shown
                    report |= {"status": "fail", "detail": "a skipped block starts with `# Fragment: …`"}
                else:
                    report |= {"status": "skip", "detail": reason}
                yield report
                continue
            if block.setups and not block.fragment:
                report |= {
                    "status": "fail",
                    "detail": f"setup={','.join(block.setups)} is hidden from the reader: make the block "
                    "run on its own (a visible set-up block above it) or start it with `# Fragment: …`",
                }
                yield report
                continue
            code = block.code
            try:
                used: list[Fixture] = []
                hidden: dict[str, Any] = {}  # under the page's own names
                named: dict[str, Any] = {}  # the block's own setups' names: over the page's
                if block.fragment:
                    hidden.update(your_code())
                    for name in (*DEFAULT_SETUP, *block.setups):
                        if name not in started:
                            started[name] = FIXTURES[name](stack)
                        used.append(started[name])
                        (named if name in block.setups else hidden).update(started[name].names)
                        for pattern, value in started[name].replacements:
                            code = pattern.sub(value, code)
                    hidden.update(named)
                before = {name: started[name].requests() for name in block.setups}
                previous_outcome = namespace.get("outcome")
                out = io.StringIO()
                # A fragment sees the hidden names under the page's own (which win); what it
                # defines stays on the page, as the visible code a reader ran.
                scope = {**hidden, **namespace, **named} if block.fragment else namespace
                with contextlib.redirect_stdout(out), _hidden_help(used):
                    _execute(code, scope, f"{path.name}:{block.line}")
                if scope is not namespace:
                    namespace.update(
                        {k: v for k, v in scope.items() if k not in hidden or v is not hidden[k]}
                    )
                report["output"] = out.getvalue()
                idle = [name for name in block.setups if started[name].requests() == before[name]]
                expect = block.directive.get("expect")
                outcome = namespace.get("outcome")
                if idle:
                    report |= {"status": "fail", "detail": f"the block never reached its emulator(s) {idle}"}
                elif block.setups and outcome is not previous_outcome and _is_failure(outcome):
                    report |= {"status": "fail", "detail": f"the block's `outcome` is {outcome!r}"}
                elif expect is not None and expect not in report["output"]:
                    report |= {"status": "fail", "detail": f"expected {expect!r} in the block's output"}
            except BaseException:
                report |= {"status": "fail", "detail": traceback.format_exc(limit=12)}
            yield report


def main(argv: list[str]) -> int:
    path = Path(argv[0]).resolve()
    with tempfile.TemporaryDirectory(prefix="rma-docs-") as tmp:
        os.chdir(tmp)
        os.environ["XDG_STATE_HOME"] = tmp  # open_store() stays inside the scratch directory
        real_stdout = sys.stdout
        for report in run_page(path):
            print(json.dumps(report), file=real_stdout, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
