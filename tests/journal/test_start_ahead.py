"""A batch's start records are written ahead of it (issue #28): the driver commits the starts of
the calls that start at once with the turn that asked for them, before it hands the batch to its
tools, so no tool task waits for a commit of its own. What a start record means is unchanged: a
tool never runs before its start is durable, and a call that is answered without running — its
arguments refused by the declared schema, the typed answer, a call waiting for a free slot or a
person's approval — has no start record until it really starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio.lowlevel
import pydantic

from rma_shell import AwaitingApproval, SQLiteJournal, run
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator
from rma_shell.tools import Toolbox, tool
from tests.tools.test_raw_handler_validation import ADD

KEY = "sk-test-ahead"


def _records(path: Path, key: str) -> list[dict[str, Any]]:
    """The key's records as another connection reads them: what is durable."""
    return [json.loads(text) for _, text, _ in SQLiteJournal(path).rows(key)]


def _started(path: Path, key: str) -> list[str]:
    return [r["id"] for r in _records(path, key) if r["kind"] == "tool_start"]


class Adder:
    """Notes, as each call runs, which starts another connection finds durable."""

    def __init__(self, path: Path, key: str, *, pause: bool = False) -> None:
        self.path, self.key, self.pause = path, key, pause
        self.seen: dict[str, list[str]] = {}

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.seen[f"{input['a']}+{input['b']}"] = _started(self.path, self.key)
        if self.pause:
            await anyio.lowlevel.checkpoint()  # let a call waiting for a slot try to start
        return str(input["a"] + input["b"])


def _local(emu: OpenAIEmulator, **kw: Any) -> Local:
    return Local(base_url=emu.base_url, model="m", api_key=KEY, _seams=Seams(rand=lambda: 0.0), **kw)


async def _run(emu: OpenAIEmulator, handler: object, path: Path, **kw: Any) -> Any:
    return await run(
        _local(emu, tools=[ADD]), handler=handler, prompt="add", journal=str(path), journal_key="k", **kw
    )


def _calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"id": i, "name": "add", "arguments": a} for i, a in calls]}


async def test_every_call_of_a_batch_is_durably_started_before_any_of_them_runs(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    turns = [_calls(("c1", {"a": 1, "b": 2}), ("c2", {"a": 3, "b": 4})), {"content": "3 and 7"}]
    with OpenAIEmulator(turns, api_key=KEY) as emu:
        adder = Adder(path, "k")
        outcome = await _run(emu, adder, path)
    assert outcome.unwrap().text == "3 and 7"
    assert adder.seen == {"1+2": ["c1", "c2"], "3+4": ["c1", "c2"]}
    # The starts follow the event of the turn that asked for the calls, as before.
    records = _records(path, "k")
    first = next(i for i, r in enumerate(records) if r["kind"] == "tool_start")
    assert [r["kind"] for r in records[first : first + 2]] == ["tool_start", "tool_start"]
    asked = records[first - 1]
    assert asked["kind"] == "event"
    assert '"c1"' in json.dumps(asked["event"]) and '"c2"' in json.dumps(asked["event"])


async def test_a_call_refused_by_its_schema_has_no_start_record(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    turns = [_calls(("bad", {"a": "2"}), ("good", {"a": 2, "b": 3})), {"content": "5"}]
    with OpenAIEmulator(turns, api_key=KEY) as emu:
        adder = Adder(path, "k")
        outcome = await _run(emu, adder, path)
        answers = [m["content"] for m in emu.requests[-1].body["messages"] if m["role"] == "tool"]
    assert outcome.unwrap().text == "5" and list(adder.seen) == ["2+3"]
    assert json.loads(answers[0])["error"].startswith("invalid arguments for add:")
    assert _started(path, "k") == ["good"]
    events = [r["event"] for r in _records(path, "k") if r["kind"] == "event"]
    (finished,) = [e for e in events if e["$type"] == "ToolsFinished"]
    assert [x["tool_use_id"] for x in finished["results"]] == ["bad", "good"]


class Forecast(pydantic.BaseModel):
    city: str
    temp_c: float


async def test_the_typed_answer_is_not_started_as_a_tool(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    oslo = {"city": "Oslo", "temp_c": 3.5}
    answer = {"tool_calls": [{"id": "ans", "name": "final_result", "arguments": oslo}]}
    with OpenAIEmulator([answer, {"content": "done"}], api_key=KEY) as emu:
        outcome = await run(
            _local(emu),
            handler=Adder(path, "k"),
            prompt="forecast?",
            output_type=Forecast,
            journal=SQLiteJournal(path),
            journal_key="k",
        )
    assert outcome.unwrap().output == Forecast(city="Oslo", temp_c=3.5)
    assert _started(path, "k") == []


async def test_a_call_waiting_for_a_free_slot_is_started_when_it_gets_one(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    turns = [_calls(("c1", {"a": 1, "b": 2}), ("c2", {"a": 3, "b": 4})), {"content": "3 and 7"}]
    with OpenAIEmulator(turns, api_key=KEY) as emu:
        adder = Adder(path, "k", pause=True)
        outcome = await _run(emu, adder, path, max_concurrency=1)
    assert outcome.unwrap().text == "3 and 7"
    # One call at a time: the one waiting for the slot has not started while the other runs.
    first, second = sorted(adder.seen.values(), key=len)
    assert len(first) == 1 and sorted(second) == ["c1", "c2"]


@tool
def lookup(q: str) -> str:
    """Look up an order."""
    return f"order for {q}"


@tool(requires_approval=lambda args: args["amount"] > 100)
def refund(amount: int) -> str:
    """Refund an amount."""
    return f"refunded {amount}"


async def test_a_call_waiting_for_approval_has_no_start_record(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    turn = {
        "tool_calls": [
            {"id": "t1", "name": "lookup", "arguments": {"q": "x"}},
            {"id": "t2", "name": "refund", "arguments": {"amount": 120}},
        ]
    }
    tools = Toolbox(lookup, refund)
    with OpenAIEmulator([turn, {"content": "refunded"}], api_key=KEY) as emu:
        outcome = await run(
            _local(emu, tools=tools.tools()),
            handler=tools,
            prompt="refund",
            journal=SQLiteJournal(path),
            journal_key="k",
        )
    assert isinstance(outcome.failure(), AwaitingApproval)
    assert _started(path, "k") == ["t1"]
