"""A journaled Local turn writes what it added to the conversation, not the conversation again.

Format 3 (issue #28): an event's snapshot is written whole once (``conn``), then as the delta
from the journal's previous one (``conn_delta``); ``load`` applies the deltas in place. Before
it, each turn re-encoded the calls seen so far (a request-long list) and ``load`` copied the
history once per turn: a 2,000-turn session's journal was quadratic in size and in CPU.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rma.journal import load
from rma.provider import codec_for
from rma.recording import encode
from rma.session.options import SessionConfig
from rma_shell import MemoryJournal, resume, run
from rma_shell.journal import JournalStoreError
from rma_shell.providers.local import Local
from rma_shell.testing.local import OpenAIEmulator, Turn

STEPS = 120
TOOL = {
    "name": "step",
    "description": "Run step n.",
    "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
}


def _reply(body: dict[str, Any]) -> Turn:
    done = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if done >= STEPS:
        return Turn({"content": f"done after {done} steps"})
    return Turn({"tool_calls": [{"name": "step", "arguments": {"n": done + 1}}]})


class Steps:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return f"step {input['n']} done"


async def _journaled(journal: MemoryJournal, key: str = "long") -> Any:
    with OpenAIEmulator([_reply] * (STEPS + 1)) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key="sk", tools=[TOOL])
        try:
            return await run(
                provider,
                handler=Steps(),
                prompt="Run the steps.",
                max_turns=STEPS + 5,
                timeout=60,
                journal=journal,
                journal_key=key,
            )
        finally:
            await provider.close()


async def test_each_turn_s_record_holds_what_the_turn_added_however_long_the_session() -> None:
    journal = MemoryJournal()
    ran = (await _journaled(journal)).unwrap()
    assert ran.text.startswith(f"done after {STEPS} steps")
    records = [json.loads(text) for _, text, _ in journal.rows("long")]
    assert records[0]["format"] == 3
    whole = [r for r in records if "conn" in r]
    deltas = [r for r in records if "conn_delta" in r]
    assert len(whole) == 1 and whole[0]["event"]["$type"] == "Opened"
    assert len(deltas) == STEPS + 1  # every model turn changed the conversation
    turn = [r["conn_delta"]["$delta"] for r in deltas[1:-1]]
    # Turn n adds its call and the previous call's answer, nothing the journal holds already.
    for n, change in enumerate(turn, 2):
        assert len(change["history"]["$extend"]) == 2, change
        assert change["seen_calls"] == {"$extend": [["step", json.dumps({"n": n}, separators=(",", ":"))]]}
        assert "session_id" not in change and "held_answers" not in change
    sizes = [len(json.dumps(change)) for change in turn]
    assert max(sizes[-10:]) <= min(sizes[:10]) + 16  # the digits of n grow; nothing else does


async def test_load_and_resume_rebuild_the_conversation_from_the_deltas() -> None:
    journal = MemoryJournal()
    ran = (await _journaled(journal)).unwrap()
    loaded = load("long", journal.rows("long"), codec_for).unwrap()
    assert loaded.snapshot is not None
    assert tuple(loaded.snapshot["history"]) == tuple(json.loads(json.dumps(ran.transcript)))
    assert len(loaded.snapshot["seen_calls"]) == STEPS
    assert loaded.snapshot["polls"] == STEPS + 1
    provider = Local(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk", tools=[TOOL])
    try:  # an ended session: resume reads its outcome, the host is not asked again
        again = (await resume(journal, "long", provider=provider, handler=Steps(), timeout=30)).unwrap()
    finally:
        await provider.close()
    assert again.text == ran.text and again.transcript == ran.transcript


def test_a_snapshot_is_read_back_as_the_provider_gave_it_whatever_its_keys() -> None:
    # A provider's snapshot is plain JSON read back as it is: a key starting with "$" (a
    # custom provider's, a vendor field) is not the recording codec's tag and must not be
    # written as one (formats 1 and 2 did: it came back wrapped in {"$dict": …}).
    from rma.session.events import Opened
    from rma_shell.journal.writer import SessionJournal

    store = MemoryJournal()
    writer = SessionJournal(store, "k")
    config = SessionConfig(codec_for("local"), provider_name="local")
    writer.begin("local", encode(config), {})
    first = {"session_id": "s", "meta": {"$schema": "x", "$ref": ["#/a"]}, "log": [{"$id": 1}]}
    writer.event(Opened("s", False), first)
    second = {**first, "log": [{"$id": 1}, {"$id": 2}], "meta": {"$schema": "y", "$ref": ["#/a"]}}
    writer.event(Opened("s", False), second)
    writer.flush()
    assert load("k", store.rows("k"), codec_for).unwrap().snapshot == second


def test_a_delta_before_any_snapshot_or_one_that_does_not_fit_is_damage_named_by_its_record() -> None:
    from rma.journal import JournalDamaged, chain, genesis

    config = encode(SessionConfig(codec_for("local"), provider_name="local"))
    header = '{"kind":"header","format":3,"key":"k","provider":"local","config":' + config + "}"
    opened = '{"$type":"Opened","session_id":"s","resumed":false}'

    def rows(*conns: str) -> list[tuple[int, str, str]]:
        texts = [header] + ['{"kind":"event","event":' + opened + "," + c + "}" for c in conns]
        sealed, previous = [], genesis("k")
        for seq, text in enumerate(texts, 1):
            previous = chain(previous, text)
            sealed.append((seq, text, previous))
        return sealed

    early = load("k", rows('"conn_delta":{"$delta":{"polls":{"$set":1}}}'), codec_for).failure()
    assert isinstance(early, JournalDamaged) and early.seq == 2 and "before any snapshot" in early.detail
    unfit = load(
        "k", rows('"conn":{"polls":0}', '"conn_delta":{"$delta":{"polls":{"$extend":[1]}}}'), codec_for
    ).failure()
    assert isinstance(unfit, JournalDamaged) and unfit.seq == 3 and "not a list" in unfit.detail


class _StopsAfter(MemoryJournal):
    """Takes ``appends`` appends, then refuses every one (a disk that filled mid-run)."""

    def __init__(self, appends: int) -> None:
        super().__init__()
        self.left = appends

    def append(self, key: str, records: Sequence[str]) -> None:
        if self.left <= 0:
            raise JournalStoreError("stopped here by the test")
        self.left -= 1
        super().append(key, records)


async def test_a_journal_an_older_rma_began_is_continued_in_its_own_format(monkeypatch: Any) -> None:
    # An rma that reads format 2 only must still read the journal after this one resumed it:
    # whole snapshots, not deltas, under a format 2 header.
    import rma.journal

    journal = _StopsAfter(40)
    monkeypatch.setattr(rma.journal, "FORMAT", 2)  # written by "an older rma"
    stopped = await _journaled(journal)
    assert stopped.failure().kind == "journal_unavailable"
    monkeypatch.undo()
    journal.left = 10**6
    with OpenAIEmulator([_reply] * (STEPS + 1)) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key="sk", tools=[TOOL])
        try:
            ran = (await resume(journal, "long", provider=provider, handler=Steps(), timeout=60)).unwrap()
        finally:
            await provider.close()
    assert ran.text.startswith(f"done after {STEPS} steps")
    records = [json.loads(text) for _, text, _ in journal.rows("long")]
    assert records[0]["format"] == 2 and len(records) > 80
    assert not [r for r in records if "conn_delta" in r]
    assert records[-1] == {"kind": "end", "at": records[-1]["at"], "transcript": "history", "outcome": "fold"}
    loaded = load("long", journal.rows("long"), codec_for).unwrap()
    assert loaded.format == 2
    assert tuple(loaded.snapshot["history"]) == tuple(json.loads(json.dumps(ran.transcript)))
