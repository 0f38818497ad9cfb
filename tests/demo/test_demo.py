"""``rma demo`` end to end: the real Local provider and session shell driven by the rehearsal model."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from returns.result import Success

from rma_shell.demo import DemoConfig, DemoTools, Display, RehearsalModel, ToolError, run_demo
from rma_shell.demo.rehearsal import MODEL_NAME
from rma_shell.demo.runner import describe_result, redact, safe_url
from rma_shell.demo.tools import TOOL_SPECS

BUNDLED = Path(__file__).resolve().parents[2] / "rma_shell" / "demo" / "data" / "sales.csv"


def _column(name: str) -> list[float]:
    with BUNDLED.open(newline="") as handle:
        return [float(row[name]) for row in csv.DictReader(handle)]


async def _demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any) -> tuple[Any, str]:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    demo = await run_demo(DemoConfig(workdir=tmp_path, **options), Display(plain=True, file=out))
    return demo, out.getvalue()


# ── the whole run ──


async def test_demo_writes_a_report_with_the_computed_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo, trace = await _demo(tmp_path, monkeypatch)
    assert isinstance(demo.outcome, Success), demo.outcome
    result = demo.outcome.unwrap()
    assert result.terminal == "end_turn"
    assert result.turns == 4
    assert [u.name for u in result.custom_tool_uses] == ["read_csv", "summarize", "summarize", "write_report"]
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.session_id

    report = (tmp_path / "report.md").read_text()
    revenue, units = _column("revenue"), _column("units")
    for figure in (
        f"{math.fsum(revenue):,.2f}",
        f"{statistics.fmean(revenue):,.2f}",
        f"{statistics.median(revenue):,.2f}",
        f"{min(revenue):,.2f}",
        f"{max(revenue):,.2f}",
        f"{int(sum(units)):,}",
        f"{statistics.fmean(units):,.2f}",
    ):
        assert figure in report, figure
    assert "| revenue | 40 |" in report
    assert demo.written == (("report.md", (tmp_path / "report.md").stat().st_size),)
    # The final answer carries the same numbers, and the trace showed each step live.
    assert f"{math.fsum(revenue):,.2f}" in result.text
    assert "report.md" in result.text
    for line in ("turn 1", "-> read_csv(", "turn 4", "ok  write_report: wrote report.md"):
        assert line in trace, line


async def test_the_trace_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two summarize calls run concurrently (trio shuffles its run queue on purpose); the trace
    # still prints their results in the order the model asked for them.
    traces = set()
    for n in range(6):
        work = tmp_path / str(n)
        work.mkdir()
        demo, trace = await _demo(work, monkeypatch)
        assert isinstance(demo.outcome, Success)
        traces.add(trace.replace(str(work), "<cwd>"))
    assert len(traces) == 1


async def test_rehearsal_model_recovers_from_a_tool_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sales.csv").write_bytes(BUNDLED.read_bytes())
    prompt = "Analyse `salse.csv` and write the report to `../outside.md`."
    demo, trace = await _demo(tmp_path, monkeypatch, prompt=prompt)
    assert isinstance(demo.outcome, Success), demo.outcome
    result = demo.outcome.unwrap()
    uses = [(u.name, dict(u.input)) for u in result.custom_tool_uses]
    assert uses[0] == ("read_csv", {"path": "salse.csv"})
    assert uses[1] == ("read_csv", {"path": "sales.csv"})  # the corrected argument, once
    assert uses[-2][1]["filename"] == "../outside.md"
    assert uses[-1][1]["filename"] == "outside.md"
    assert demo.tool_errors == 2
    assert not (tmp_path.parent / "outside.md").exists()
    assert (tmp_path / "outside.md").is_file()
    assert "ERR read_csv: no such CSV file" in trace


async def test_final_turn_directive_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    demo, trace = await _demo(tmp_path, monkeypatch, max_turns=2)
    assert isinstance(demo.outcome, Success), demo.outcome
    result = demo.outcome.unwrap()
    assert result.turns == 2
    assert result.text.startswith("I have to stop here")
    assert "[final turn] FINAL TURN" in trace
    assert not (tmp_path / "report.md").exists()


async def test_other_csv_via_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "inventory.csv"
    data.write_text("sku,warehouse,stock,cost\nA1,Leeds,10,2.5\nB2,York,30,4.5\nC3,Leeds,20,3.0\n")
    demo, _ = await _demo(tmp_path, monkeypatch, data=data, out="stock.md")
    assert isinstance(demo.outcome, Success), demo.outcome
    report = (tmp_path / "stock.md").read_text()
    assert "| stock | 3 | 60 | 10 | 30 | 20.00 | 20 |" in report
    assert "| cost | 3 | 10.00 |" in report


async def test_rich_output_when_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    demo = await run_demo(DemoConfig(workdir=tmp_path), Display(file=out))
    assert isinstance(demo.outcome, Success)
    assert "→ read_csv(" in out.getvalue() and "✓" in out.getvalue()


def test_plain_output_without_rich(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "rich.console", None)  # as if the cli extra were not installed
    display = Display()
    assert not display.rich
    display.tool_result("read_csv", True, "40 rows")
    display.tool_result("summarize", False, "bad column")
    assert capsys.readouterr().out == "        ok  read_csv: 40 rows\n        ERR summarize: bad column\n"


async def test_demo_is_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start = anyio.current_time()
    demo, _ = await _demo(tmp_path, monkeypatch)
    assert isinstance(demo.outcome, Success)
    assert anyio.current_time() - start < 3.0


# ── the rehearsal model on its own ──


def _body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    tools = [
        {"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
        for t in TOOL_SPECS
    ]
    return {"model": MODEL_NAME, "messages": messages, "tools": tools}


def _assistant(turn: int, *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{turn}_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for n, (name, args) in enumerate(calls)
        ],
    }


def _tool(call_id: str, content: Any, *, error: bool = False) -> dict[str, Any]:
    text = json.dumps({"error": content, "isError": True}) if error else json.dumps(content)
    return {"role": "tool", "tool_call_id": call_id, "content": text}


TABLE = {
    "path": "sales.csv",
    "columns": [{"name": "region", "type": "text"}, {"name": "revenue", "type": "number"}],
    "rows": 2,
    "first_rows": [],
}
USER = {"role": "user", "content": "Analyse `sales.csv` and write `r.md`."}


def _calls_of(response: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    message = response["choices"][0]["message"]
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])
    ]


def test_rehearsal_reads_the_conversation() -> None:
    model = RehearsalModel()
    first = model.respond(_body([USER]))
    assert _calls_of(first) == [("read_csv", {"path": "sales.csv"})]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    # The column comes from the tool result, not from a script.
    history = [USER, _assistant(1, ("read_csv", {"path": "sales.csv"})), _tool("c1_0", TABLE)]
    assert _calls_of(model.respond(_body(history))) == [
        ("summarize", {"path": "sales.csv", "column": "revenue"})
    ]
    renamed = {**TABLE, "columns": [{"name": "amount_eur", "type": "number"}]}
    history[-1] = _tool("c1_0", renamed)
    assert _calls_of(model.respond(_body(history))) == [
        ("summarize", {"path": "sales.csv", "column": "amount_eur"})
    ]
    # Deterministic, with usage that grows with the conversation.
    assert model.respond(_body(history)) == model.respond(_body(history))
    assert model.respond(_body(history))["usage"]["prompt_tokens"] > first["usage"]["prompt_tokens"]


def test_rehearsal_retries_a_failed_call_once_with_the_suggested_fix() -> None:
    model = RehearsalModel()
    failed = "column 'Revenue' not found in sales.csv. Did you mean column=\"revenue\"?"
    history = [
        USER,
        _assistant(1, ("read_csv", {"path": "sales.csv"})),
        _tool("c1_0", TABLE),
        _assistant(2, ("summarize", {"path": "sales.csv", "column": "Revenue"})),
        _tool("c2_0", failed, error=True),
    ]
    assert _calls_of(model.respond(_body(history))) == [
        ("summarize", {"path": "sales.csv", "column": "revenue"})
    ]
    # A second failure is not retried again: it answers with what went wrong.
    history += [
        _assistant(3, ("summarize", {"path": "sales.csv", "column": "revenue"})),
        _tool("c3_0", 'disk on fire. Did you mean column="x"?', error=True),
    ]
    final = model.respond(_body(history))
    assert final["choices"][0]["finish_reason"] == "stop"
    assert "could not summarise" in final["choices"][0]["message"]["content"]


def test_rehearsal_gives_up_on_an_error_it_cannot_fix() -> None:
    history = [
        USER,
        _assistant(1, ("read_csv", {"path": "sales.csv"})),
        _tool("c1_0", "permission denied", error=True),
    ]
    answer = RehearsalModel().respond(_body(history))
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert "permission denied" in answer["choices"][0]["message"]["content"]


def test_rehearsal_without_a_file_asks_for_one() -> None:
    answer = RehearsalModel().respond(_body([{"role": "user", "content": "hello"}]))
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert "Which CSV" in answer["choices"][0]["message"]["content"]


# ── the tools ──


def test_tools_confine_reads_and_writes_to_the_working_directory(tmp_path: Path) -> None:
    tools = DemoTools(tmp_path, {"sales.csv": BUNDLED})
    for bad in ("../x.md", "/tmp/x.md", "sub/../../x.md"):
        with pytest.raises(ToolError, match="inside the current directory"):
            tools.write_report(bad, "# x")
    with pytest.raises(ToolError, match=r'Did you mean filename="notes.md"'):
        tools.write_report("notes.txt", "# x")
    with pytest.raises(ToolError, match="only files in the current directory"):
        tools.read_csv("../../etc/passwd")
    assert tools.write_report("ok.md", "# fine") == {"path": "ok.md", "bytes": 7}
    assert tools.written == [("ok.md", 7)]


def test_tools_explain_bad_arguments(tmp_path: Path) -> None:
    tools = DemoTools(tmp_path, {"sales.csv": BUNDLED})
    with pytest.raises(ToolError, match=r'Did you mean column="revenue"'):
        tools.summarize("sales.csv", "Revenue")
    with pytest.raises(ToolError, match="not numeric"):
        tools.summarize("sales.csv", "region")
    with pytest.raises(ToolError, match="must be a string"):
        tools.call("read_csv", {"path": 3})
    with pytest.raises(ToolError, match="unknown tool"):
        tools.call("rm", {})
    described = tools.read_csv("sales.csv")
    assert described["rows"] == 40
    assert {c["name"]: c["type"] for c in described["columns"]}["region"] == "text"
    assert describe_result("read_csv", json.dumps(described), True).startswith("40 rows x 6 columns")


def test_secrets_stay_out_of_printed_text() -> None:
    assert redact("key sk-abcdef was rejected", "sk-abcdef") == "key *** was rejected"
    assert safe_url("https://user:pw@gateway.example/v1") == "https://***@gateway.example/v1"
    assert safe_url("http://localhost:11434/v1") == "http://localhost:11434/v1"
