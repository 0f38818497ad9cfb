"""The rehearsal model: a deterministic, scripted stand-in for an LLM, for ``rma demo``.

It implements the Local provider's pluggable ``chat(body) -> response`` contract: it gets
an OpenAI chat-completions request body (model, messages, tools) and answers with a
non-streamed chat-completions response, usage included. It is not a language model, and
it is not a replay of a fixed list either: every answer is derived from the conversation
it is sent — the task in the first user message, the tool calls made so far, their
results and errors, and the directives the loop added — so the real agent loop, tools
and handler run exactly as they would with a real model behind the same endpoint.

It knows one task: inspect a CSV with ``read_csv``, ``summarize`` the numeric columns it
learned about from that result, write a Markdown report of the numbers with
``write_report``, then answer. A tool error whose message suggests a fix (``Did you mean
column='revenue'?``) is retried once with the corrected argument; an error it cannot fix,
or a final-turn directive, makes it answer with what it has. Token counts are estimated
from message sizes (about four characters a token). No I/O, no clock, no randomness.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

MODEL_NAME = "rma-rehearsal"
DESCRIPTION = "a scripted rehearsal model bundled with rma: deterministic, offline, no API key"

CHARS_PER_TOKEN = 4
MAX_COLUMNS = 2
"""How many numeric columns it summarizes (in one turn, as parallel tool calls)."""

# Which numeric columns matter most in a sales-like table, best first.
_KEY_COLUMNS = ("revenue", "sales", "amount", "total", "profit", "units", "quantity", "qty", "count", "price")
_HINT = re.compile(r"Did you mean (\w+)=(\"(?:[^\"\\]|\\.)*\")\?")
_BACKTICKED = re.compile(r"`([^`\n]+)`")
_BARE_CSV = re.compile(r"[\w./\\-]+\.csv\b", re.IGNORECASE)
_BARE_MD = re.compile(r"[\w./\\-]+\.(?:md|markdown)\b", re.IGNORECASE)


@attrs.frozen
class _Call:
    """One tool call the model made, with what came back for it."""

    turn: int
    id: str
    name: str
    args: Mapping[str, Any] = attrs.field(hash=False)
    answered: bool
    ok: bool
    result: Any = attrs.field(hash=False)
    error: str | None

    def call_path(self) -> str:
        """The file this call was about, as the tool reported it."""
        if isinstance(self.result, Mapping) and isinstance(self.result.get("path"), str):
            return str(self.result["path"])
        return str(self.args.get("path"))


@attrs.frozen
class _Task:
    data: str | None
    out: str
    words: frozenset[str]


@attrs.frozen
class _Say:
    text: str


@attrs.frozen
class _Use:
    note: str
    calls: tuple[tuple[str, dict[str, Any]], ...]


_Step = _Say | _Use


class RehearsalModel:
    """``await model(body)`` → a chat-completions response dict (the ``Local(chat=...)`` contract)."""

    name = MODEL_NAME

    async def __call__(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.respond(body)

    def respond(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to one request body; a pure function of the body."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
        tools = _tool_names(body.get("tools"))
        step = _decide(_task(messages), _calls(messages), tools, final=_final_turn(messages))
        turn = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        message: dict[str, Any] = {"role": "assistant"}
        if isinstance(step, _Say):
            message["content"] = step.text
            finish = "stop"
        else:
            message["content"] = step.note
            message["tool_calls"] = [
                {
                    "id": f"call_{turn}_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                }
                for n, (name, args) in enumerate(step.calls)
            ]
            finish = "tool_calls"
        prompt_tokens = _tokens(json.dumps(messages, ensure_ascii=False)) + _tokens(
            json.dumps(body.get("tools") or [], ensure_ascii=False)
        )
        completion_tokens = _tokens(json.dumps(message, ensure_ascii=False))
        return {
            "id": f"chatcmpl-rehearsal-{turn}",
            "object": "chat.completion",
            "created": 0,
            "model": str(body.get("model") or MODEL_NAME),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


# ── reading the conversation ─────────────────────────────────────────────────────────


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def _tool_names(tools: object) -> frozenset[str]:
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return frozenset(names)


def _task(messages: Sequence[Mapping[str, Any]]) -> _Task:
    prompt = next((_content(m) for m in messages if m.get("role") == "user"), "")
    quoted = _BACKTICKED.findall(prompt)
    data = next((q for q in quoted if q.lower().endswith(".csv")), None)
    out = next((q for q in quoted if q.lower().endswith((".md", ".markdown"))), None)
    if data is None:
        bare = _BARE_CSV.search(prompt)
        data = bare.group(0) if bare else None
    if out is None:
        bare = _BARE_MD.search(prompt)
        out = bare.group(0) if bare else "report.md"
    return _Task(data, out, frozenset(re.findall(r"[a-z_]+", prompt.lower())))


def _final_turn(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Did the loop tell it, after its last reply, that this is the final turn?"""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return False
        if message.get("role") == "user" and _content(message).startswith("FINAL TURN"):
            return True
    return False


def _outcome(content: str) -> tuple[bool, Any, str | None]:
    """(ok, parsed result, error) of a tool message's content."""
    try:
        value = json.loads(content)
    except ValueError:
        return True, content, None
    if isinstance(value, Mapping) and value.get("isError") is True:
        return False, None, str(value.get("error", "tool error"))
    if isinstance(value, Mapping) and value.get("duplicate") is True:
        return False, None, str(value.get("message", "duplicate call"))
    return True, value, None


def _calls(messages: Sequence[Mapping[str, Any]]) -> list[_Call]:
    answers = {m.get("tool_call_id"): _content(m) for m in messages if m.get("role") == "tool"}
    calls: list[_Call] = []
    turn = 0
    for message in messages:
        if message.get("role") != "assistant":
            continue
        turn += 1
        for raw in message.get("tool_calls") or []:
            function = raw.get("function") if isinstance(raw, Mapping) else None
            if not isinstance(function, Mapping):
                continue
            arguments = function.get("arguments")
            try:
                args = json.loads(arguments) if isinstance(arguments, str) else arguments
            except ValueError:
                args = None
            call_id = str(raw.get("id"))
            answer = answers.get(call_id)
            ok, result, error = _outcome(answer) if answer is not None else (False, None, "no result")
            calls.append(
                _Call(
                    turn=turn,
                    id=call_id,
                    name=str(function.get("name")),
                    args=args if isinstance(args, Mapping) else {},
                    answered=answer is not None,
                    ok=ok,
                    result=result,
                    error=error,
                )
            )
    return calls


# ── deciding ─────────────────────────────────────────────────────────────────────────


def _decide(task: _Task, calls: Sequence[_Call], tools: frozenset[str], *, final: bool) -> _Step:
    """The next step, from the task and every call so far (oldest first)."""
    missing = [t for t in ("read_csv", "summarize", "write_report") if t not in tools]
    if missing and not calls:
        return _Say(f"I can't do this task without the {', '.join(missing)} tool(s).")
    if task.data is None:
        return _Say("Which CSV file should I analyse? Name it in backticks, e.g. `sales.csv`.")

    reads = [c for c in calls if c.name == "read_csv"]
    table = next((c for c in reversed(reads) if c.ok and _is_table(c.result)), None)
    summaries = [c for c in calls if c.name == "summarize" and c.ok and _is_summary(c.result)]
    reports = [c for c in calls if c.name == "write_report"]
    written = next((c for c in reversed(reports) if c.ok and isinstance(c.result, Mapping)), None)

    if final:
        return _Say(_final_answer(task, table, summaries, written, cut_short=True))

    if table is None:
        if not reads:
            return _Use("Let me look at the data first.", (("read_csv", {"path": task.data}),))
        retry = _retry(reads[-1], calls)
        if retry is not None:
            return _Use(_retry_note(reads[-1], retry), (retry,))
        return _Say(f"I could not read `{task.data}`: {reads[-1].error}")

    path = table.call_path()
    tried = [c for c in calls if c.name == "summarize"]
    if not tried:
        columns = _choose_columns(table.result, task)
        if not columns:
            return _Say(f"`{path}` has no numeric column I could summarise.\n\n{_describe(table.result)}")
        what = " and ".join(columns)
        plural = "s look like" if len(columns) > 1 else " looks like"
        rows = fmt(table.result["rows"])
        note = f"`{path}` has {rows} rows; the key numeric column{plural} {what}. Summarising."
        return _Use(note, tuple(("summarize", {"path": path, "column": c}) for c in columns))

    last_turn = max(c.turn for c in calls)
    fixes = [(c, r) for c in tried if c.turn == last_turn and (r := _retry(c, calls)) is not None]
    if fixes:
        return _Use(" ".join(_retry_note(c, r) for c, r in fixes), tuple(r for _, r in fixes))
    if not summaries:
        errors = "; ".join(str(c.error) for c in tried if not c.ok)
        return _Say(f"I read `{path}` but could not summarise any column: {errors}")

    if written is not None:
        return _Say(_final_answer(task, table, summaries, written, cut_short=False))
    if not reports:
        markdown = _report_markdown(path, table.result, [s.result for s in summaries])
        return _Use(
            f"Writing the report to `{task.out}`.",
            (("write_report", {"filename": task.out, "markdown": markdown}),),
        )
    retry = _retry(reports[-1], calls)
    if retry is not None:
        return _Use(_retry_note(reports[-1], retry), (retry,))
    return _Say(
        f"I could not write the report: {reports[-1].error}\n\n"
        + _final_answer(task, table, summaries, None, cut_short=True)
    )


def _retry(call: _Call, calls: Sequence[_Call]) -> tuple[str, dict[str, Any]] | None:
    """The corrected call for a failed one, once per tool: only if the error names a fix."""
    if call.ok or not call.answered or call.error is None:
        return None
    if any(c.name == call.name and not c.ok and c.turn < call.turn for c in calls):
        return None  # it already retried this tool once
    hint = _HINT.search(call.error)
    if hint is None:
        return None
    try:
        argument, value = hint.group(1), json.loads(hint.group(2))
    except ValueError:
        return None
    if argument not in call.args or call.args.get(argument) == value:
        return None
    args = {**call.args, argument: value}
    if any(c.name == call.name and dict(c.args) == args for c in calls):
        return None
    return call.name, args


def _retry_note(call: _Call, retry: tuple[str, dict[str, Any]]) -> str:
    problem = (call.error or "").split(". Did you mean")[0]
    changed = ", ".join(f"{k}={json.dumps(v)}" for k, v in retry[1].items() if call.args.get(k) != v)
    return f"{call.name} failed ({problem}); trying again with {changed}."


def _is_table(value: object) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("columns"), list) and "rows" in value


def _is_summary(value: object) -> bool:
    return isinstance(value, Mapping) and all(k in value for k in ("column", "count", "mean", "median"))


def _choose_columns(table: Mapping[str, Any], task: _Task) -> list[str]:
    numeric = [
        str(c.get("name"))
        for c in table.get("columns", [])
        if isinstance(c, Mapping) and c.get("type") == "number"
    ]

    def rank(item: tuple[int, str]) -> tuple[int, int, int]:
        index, name = item
        lowered = name.lower()
        mentioned = 0 if lowered in task.words else 1
        key = next((n for n, k in enumerate(_KEY_COLUMNS) if k in lowered), len(_KEY_COLUMNS))
        return mentioned, key, index

    return [name for _, name in sorted(enumerate(numeric), key=rank)[:MAX_COLUMNS]]


# ── writing ──────────────────────────────────────────────────────────────────────────


def fmt(value: object) -> str:
    """How the report prints a number: thousands separators, two decimals unless integral."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}"


def _column_names(table: Mapping[str, Any]) -> list[str]:
    return [str(c.get("name")) for c in table.get("columns", []) if isinstance(c, Mapping)]


def _describe(table: Mapping[str, Any]) -> str:
    names = _column_names(table)
    return f"{table.get('rows')} rows, {len(names)} columns ({', '.join(names)})"


def _report_markdown(path: str, table: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        f"# Report: {path}",
        "",
        f"Source: `{path}` — {_describe(table)}.",
        "",
        "## Key figures",
        "",
        "| column | count | sum | min | max | mean | median |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        cells = [s.get(k) for k in ("count", "sum", "min", "max", "mean", "median")]
        lines.append(f"| {s.get('column')} | " + " | ".join(fmt(v) for v in cells) + " |")
    lines += ["", "## Observations", ""]
    for s in summaries:
        mean, median = s.get("mean"), s.get("median")
        if isinstance(mean, int | float) and isinstance(median, int | float) and median:
            gap = (mean - median) / abs(median) * 100
            shape = (
                "roughly symmetric"
                if abs(gap) < 2
                else "pulled up by a few large values"
                if gap > 0
                else "pulled down by a few small values"
            )
            lines.append(
                f"- **{s.get('column')}** ranges from {fmt(s.get('min'))} to {fmt(s.get('max'))}; "
                f"its mean ({fmt(mean)}) is {abs(gap):.1f}% {'above' if gap >= 0 else 'below'} "
                f"the median ({fmt(median)}), so the distribution is {shape}."
            )
    preview = [r for r in table.get("first_rows", []) if isinstance(r, Mapping)][:3]
    names = _column_names(table)
    if preview and names:
        lines += ["", "## First rows", "", "| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
        lines += ["| " + " | ".join(fmt(row.get(n, "")) for n in names) + " |" for row in preview]
    lines += [
        "",
        "---",
        f"*Every figure above was computed by the `summarize` tool; the report was drafted by "
        f"{MODEL_NAME}, rma's scripted rehearsal model.*",
    ]
    return "\n".join(lines) + "\n"


def _final_answer(
    task: _Task,
    table: _Call | None,
    summaries: Sequence[_Call],
    written: _Call | None,
    *,
    cut_short: bool,
) -> str:
    if table is None:
        return f"I was stopped before I could read `{task.data}`, so I have no figures to report."
    rows, columns = table.result.get("rows"), len(_column_names(table.result))
    done = [f"read `{table.call_path()}` ({fmt(rows)} rows, {columns} columns)"]
    if summaries:
        done.append("summarised " + " and ".join(str(s.result.get("column")) for s in summaries))
    if written is not None:
        done.append(
            f"wrote the report to `{written.result.get('path')}` ({fmt(written.result.get('bytes'))} bytes)"
        )
    sentence = done[0] if len(done) == 1 else ", ".join(done[:-1]) + " and " + done[-1]
    lines = [("I have to stop here: I " if cut_short else "Done: I ") + sentence + "."]
    for s in summaries:
        r = s.result
        lines.append(
            f"- {r.get('column')}: total {fmt(r.get('sum'))}, mean {fmt(r.get('mean'))}, "
            f"median {fmt(r.get('median'))}, from {fmt(r.get('min'))} to {fmt(r.get('max'))} "
            f"({fmt(r.get('count'))} values)"
        )
    return "\n".join(lines)
