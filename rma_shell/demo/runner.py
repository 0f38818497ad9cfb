"""``rma demo``: one real agent run — the Local provider, the session shell, real tools.

The loop, the provider and the tools are the library's own; only the model is
swappable. By default it is the bundled rehearsal model (``Local(chat=RehearsalModel())``:
offline, deterministic, no key); given a base URL it is whatever OpenAI-compatible
server lives there, over HTTP. The handler runs the demo tools and prints the run as it
happens. This module wires and reports; every loop decision is the core's.
"""

from __future__ import annotations

import collections
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import SessionError
from rma.vocabulary import JSON, SessionInfo, SessionResult
from rma_shell.demo.display import Display
from rma_shell.demo.rehearsal import DESCRIPTION, MODEL_NAME, RehearsalModel, fmt
from rma_shell.demo.tools import TOOL_SPECS, DemoTools, ToolError
from rma_shell.session import run

BUNDLED_DATASET = "sales.csv"
DEFAULT_REPORT = "report.md"
DEFAULT_MAX_TURNS = 10
DEFAULT_TIMEOUT_S = 300.0

SYSTEM_PROMPT = (
    "You are a careful data analyst working with tools. Use read_csv to see what a CSV file holds, "
    "summarize for statistics of its numeric columns, and write_report to save a Markdown report. "
    "Never invent numbers: every figure you report must come from a tool result. If a tool returns "
    "an error, fix the argument it names and try again. When the report is written, answer briefly."
)

PROMPT_TEMPLATE = (
    "Analyse the data in `{data}`: find out what it contains, summarise its key numeric columns, "
    "and write a short Markdown report with the figures the tools return to `{out}`. "
    "Then tell me the highlights in a few sentences."
)

Chat = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@attrs.frozen
class DemoConfig:
    """One demo run. Without ``base_url`` the model is the rehearsal model."""

    workdir: Path
    data: Path | None = None
    """A CSV to analyse instead of the bundled one."""
    out: str = DEFAULT_REPORT
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    max_turns: int = DEFAULT_MAX_TURNS
    timeout: float = DEFAULT_TIMEOUT_S
    record: TextIO | None = None
    prompt: str | None = None
    """Overrides the task prompt (the rehearsal model reads the file names from it)."""
    progress: Any = None
    """A ``rma_shell.cli.progress.Progress`` that shows the waits for a ``base_url`` model."""


@attrs.frozen
class DemoRun:
    """What a demo run produced: the session's outcome and what the tools did."""

    outcome: Result[SessionResult, SessionError]
    written: tuple[tuple[str, int], ...]
    tool_errors: int


class DemoHandler:
    """Runs the demo tools and narrates the session as its events arrive.

    Tool calls of one turn run concurrently, so their results are printed in the order the
    model asked for them (held until the earlier ones are done), keeping the trace stable.
    """

    def __init__(self, tools: DemoTools, display: Display) -> None:
        self.tools = tools
        self.display = display
        self.turns = 0
        self.tool_errors = 0
        self._awaiting: collections.deque[tuple[str, str]] = collections.deque()
        self._finished: dict[tuple[str, str], tuple[str, bool, str]] = {}

    def handle_event(self, event: JSON, ctx: object) -> None:
        if not isinstance(event, Mapping):
            return
        kind = event.get("type")
        if kind == "local.model_response":
            self._model_response(event)
        elif kind == "local.directive":
            self.display.notice(
                str(event.get("role", "directive")).replace("_", " "), str(event.get("text", ""))
            )
        elif kind == "local.duplicate_tool_call":
            self.display.notice("duplicate call", f"{event.get('name')}: answered by the loop, not run again")
        elif kind == "local.rejected_tool_call":
            self.display.notice("rejected call", f"{event.get('name')}: {event.get('message', '')}")

    def _model_response(self, event: Mapping[str, Any]) -> None:
        self.turns += 1
        message = event.get("message")
        message = message if isinstance(message, Mapping) else {}
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        calls: list[tuple[str, Mapping[str, Any]]] = []
        for raw in message.get("tool_calls") or []:
            function = raw.get("function") if isinstance(raw, Mapping) else None
            if isinstance(function, Mapping):
                calls.append((str(function.get("name")), _arguments(function.get("arguments"))))
        self._awaiting = collections.deque((name, _key(args)) for name, args in calls)
        self._finished.clear()
        self.display.model_turn(self.turns, text, calls)

    async def handle_tool_call(
        self, name: str, input: dict[str, Any], ctx: object, info: SessionInfo
    ) -> object:
        try:
            text = await anyio.to_thread.run_sync(self.tools.call, name, input)
        except ToolError as exc:
            outcome: Result[str, str] = Failure(str(exc))
        except Exception as exc:  # disk full, permissions: the model hears about it like any tool error
            outcome = Failure(f"{type(exc).__name__}: {exc}")
        else:
            outcome = Success(text)
        ok = isinstance(outcome, Success)
        if not ok:
            self.tool_errors += 1
        shown = describe_result(name, outcome.unwrap() if ok else outcome.failure(), ok)
        self._report((name, _key(input)), name, ok, shown)
        return outcome

    def _report(self, key: tuple[str, str], name: str, ok: bool, shown: str) -> None:
        if key not in self._awaiting:
            self.display.tool_result(name, ok, shown)
            return
        self._finished[key] = (name, ok, shown)
        while self._awaiting and self._awaiting[0] in self._finished:
            self.display.tool_result(*self._finished.pop(self._awaiting.popleft()))


def _arguments(raw: object) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


def _key(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, default=str)


def describe_result(name: str, text: str, ok: bool) -> str:
    """One line about a tool result, for the trace."""
    if not ok:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text[:120]
    if not isinstance(value, Mapping):
        return text[:120]
    if name == "read_csv":
        columns = [str(c.get("name")) for c in value.get("columns", []) if isinstance(c, Mapping)]
        return f"{value.get('rows')} rows x {len(columns)} columns ({', '.join(columns)})"
    if name == "summarize":
        return (
            f"{value.get('column')}: count {fmt(value.get('count'))}, sum {fmt(value.get('sum'))}, "
            f"mean {fmt(value.get('mean'))}, median {fmt(value.get('median'))}"
        )
    if name == "write_report":
        return f"wrote {value.get('path')} ({fmt(value.get('bytes'))} bytes)"
    return text[:120]


def redact(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` masked, for anything printed while a key is in play."""
    if secret and len(secret) >= 4:
        return text.replace(secret, "***")
    return text


def safe_url(url: str) -> str:
    """A URL without user:password@ (some gateways take credentials there)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    host = rest.split("@", 1)[1]
    return f"{scheme}://***@{host}"


@contextmanager
def _dataset(config: DemoConfig) -> Iterator[tuple[str, Path, bool]]:
    """(name the model sees, real file, bundled?) of the CSV to analyse."""
    if config.data is not None:
        yield config.data.name, config.data.resolve(), False
        return
    bundled = resources.files("rma_shell.demo").joinpath("data", BUNDLED_DATASET)
    with resources.as_file(bundled) as path:
        yield BUNDLED_DATASET, path, True


def _provider(config: DemoConfig, chat: Chat | None, http_client: Any = None) -> Any:
    from rma_shell.providers.local import Local

    tools = [dict(spec) for spec in TOOL_SPECS]
    if config.base_url:
        return Local(
            base_url=config.base_url,
            model=config.model,
            api_key=config.api_key,
            system_prompt=SYSTEM_PROMPT,
            tools=tools,
            http_client=http_client,
        )
    return Local(chat=chat or RehearsalModel(), model=MODEL_NAME, system_prompt=SYSTEM_PROMPT, tools=tools)


def _header_rows(config: DemoConfig, name: str, bundled: bool) -> list[tuple[str, str]]:
    if config.base_url:
        key = "API key set" if config.api_key else "no API key"
        model = f"{config.model or '(server default)'} at {safe_url(config.base_url)} ({key})"
    else:
        model = f"{MODEL_NAME} ({DESCRIPTION})"
    return [
        ("model", model),
        ("loop", "rma Local provider: the agent loop runs in this process"),
        ("tools", ", ".join(spec["name"] for spec in TOOL_SPECS)),
        ("data", f"{name} (bundled sample)" if bundled else name),
        ("report", f"{config.out} in {config.workdir}"),
    ]


async def run_demo(config: DemoConfig, display: Display, *, chat: Chat | None = None) -> DemoRun:
    """Run the demo once and print it; ``chat`` replaces the rehearsal model (tests)."""
    with _dataset(config) as (name, path, bundled):
        tools = DemoTools(config.workdir, {name: path})
        handler = DemoHandler(tools, display)
        display.header(
            "rma demo: an agent analyses a CSV and writes a report", _header_rows(config, name, bundled)
        )
        prompt = config.prompt or PROMPT_TEMPLATE.format(data=name, out=config.out)
        async with contextlib.AsyncExitStack() as stack:
            http_client = None
            progress = config.progress
            if config.base_url and progress is not None and progress.enabled:
                from rma_shell.cli.progress import traced_http_client

                what = f"model {config.model} at {safe_url(config.base_url)}"
                http_client = await stack.enter_async_context(traced_http_client(progress, what))
                display.before_line = progress.clear
                await stack.enter_async_context(progress.running())
            outcome = await run(
                _provider(config, chat, http_client),
                handler=handler,
                prompt=prompt,
                max_turns=config.max_turns,
                timeout=config.timeout,
                record=config.record,
            )
    return DemoRun(outcome, tuple(tools.written), handler.tool_errors)


def outcome_line(result: SessionResult) -> str:
    """``end_turn (stop) after 4 turns``."""
    stop = f" ({result.stop_reason})" if result.stop_reason not in (None, result.terminal.value) else ""
    plural = "s" if result.turns != 1 else ""
    return f"{result.terminal.value}{stop} after {result.turns} turn{plural}"


def summary_rows(demo: DemoRun, result: SessionResult) -> list[tuple[str, str]]:
    """The summary table: turns, tokens, tools, the file written."""
    counts = collections.Counter(use.name for use in result.custom_tool_uses)
    tools = ", ".join(f"{name} x{n}" for name, n in counts.items()) or "none"
    if demo.tool_errors:
        tools += f" ({demo.tool_errors} returned an error)"
    if demo.written:
        path, size = demo.written[-1]
        report = f"{path} ({size:,} bytes)"
    else:
        report = "none written"
    return [
        ("result", outcome_line(result)),
        ("tokens", f"{result.usage.input_tokens:,} in / {result.usage.output_tokens:,} out"),
        ("tools", tools),
        ("report", report),
    ]


def report(demo: DemoRun, display: Display, *, secret: str | None = None) -> int:
    """Print the summary (or the error) and return the exit code: 0 success, 1 session error."""
    if isinstance(demo.outcome, Failure):
        error = demo.outcome.failure()
        display.error(redact(error.message, secret))
        return 1
    result = demo.outcome.unwrap()
    display.summary(summary_rows(demo, result), redact(result.text, secret))
    return 0
