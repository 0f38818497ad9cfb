"""Many concurrent journaled sessions on one store, killed (SIGKILL, a real process) at a shared
commit, each resumed: none repeats a tool whose result was journaled, each ends as it would have.

A child process (``tests.journal._child``, forked per kill point) runs ``SESSIONS`` sessions of
the scripted Local tool loop (``tests.journal._scenario``: two calls, one call, an answer) at
once, each under its own key, on one ``SQLiteJournal``: their flushes share commits (the group
commit, ``rma_shell.journal.group``). An undisturbed run first counts the shared commits (and
checks that several sessions' flushes did share one); then, for kill points spread over them,
the child dies right before or right after the n-th shared commit, and every key is resumed
here, all at once on one store again — on trio and asyncio in turn. What must hold, per key:
a call whose result was journaled never runs again; a call that had started runs again as
attempt 2 with the same idempotency key; each call's effect is applied once; the session ends
with the loop's answer; a key whose header never became durable is not a session to resume and
no tool of it ran.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from returns.result import Failure, Success

from rma_shell import SQLiteJournal, resume
from rma_shell.testing import OpenAIEmulator
from tests.journal import _scenario as sc
from tests.journal.test_crash import Zygote

SESSIONS = 8
POINTS = 8
"""Kill points per side (before / after a shared commit), spread over the undisturbed run's."""
KEYS = [f"group-{n}" for n in range(SESSIONS)]


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


def _run(
    zygote: Zygote, tmp: Path, kill: dict[str, Any] | None, emu: OpenAIEmulator
) -> tuple[dict[str, Any], list[int]]:
    note = tmp / "batches.json"
    ended = zygote.run(
        {
            "spec": {"host": "local", "base_url": emu.base_url},
            "kill": kill,
            "journal": str(tmp / "journal.db"),
            "effects": str(tmp / "effects.db"),
            "keys": KEYS,
            "note": str(note),
        }
    )
    return ended, json.loads(note.read_text()) if note.exists() else []


def _points(batches: int) -> list[dict[str, Any]]:
    step = max(1, batches // POINTS)
    picked = sorted({*range(1, batches + 1, step), batches})
    return [{side: n} for n in picked for side in ("batch_before", "batch_after")]


def test_many_sessions_killed_at_a_shared_commit_each_resume_without_repeating_a_tool(
    zygote: Zygote, tmp_path: Path
) -> None:
    base = tmp_path / "baseline"
    base.mkdir()
    sc.create_effects(str(base / "effects.db"))
    with OpenAIEmulator([sc.local_reply] * (3 * SESSIONS)) as emu:
        ended, batches = _run(zygote, base, None, emu)
    assert ended == {"exit": 0}, ended
    assert batches and max(batches) >= 2, f"no commit was shared: {batches}"
    print(f"shared commits of the undisturbed run, in flushes: {batches}")
    for key in KEYS:  # the undisturbed run: every key's three calls, once
        rows = SQLiteJournal(base / "journal.db").rows(key)
        assert json.loads(rows[-1][1])["kind"] == "end", key
    assert len(sc.read_effects(str(base / "effects.db")).effects) == 3 * SESSIONS

    points = _points(len(batches))
    killed = 0
    for i, kill in enumerate(points):
        scratch = tmp_path / f"kill-{i}"
        scratch.mkdir()
        killed += _check(zygote, scratch, kill, ("trio", "asyncio")[i % 2])
    assert killed >= len(points) // 2, f"only {killed} of {len(points)} runs died at their kill point"


def _check(zygote: Zygote, tmp: Path, kill: dict[str, Any], backend: str) -> bool:
    """Whether the child died at ``kill`` (rather than ending first)."""
    where = f"kill {kill}, resumed on {backend}"
    effects, journal = str(tmp / "effects.db"), tmp / "journal.db"
    sc.create_effects(effects)
    with OpenAIEmulator([sc.local_reply] * (6 * SESSIONS)) as emu:
        ended, _ = _run(zygote, tmp, kill, emu)
        # A concurrent run may make fewer shared commits than the undisturbed one did: then it
        # ends on its own, and resuming returns each session's journaled end.
        assert ended in ({"signal": signal.SIGKILL}, {"exit": 0}), f"{where}: the child ended {ended}"
        store = SQLiteJournal(journal)
        records = {key: [json.loads(text) for _, text, _ in store.rows(key)] for key in KEYS}
        store.close()
        before = sc.read_effects(effects)

        async def go() -> dict[str, Any]:
            outcomes: dict[str, Any] = {}
            shared = SQLiteJournal(journal)
            provider = sc.provider({"host": "local", "base_url": emu.base_url})

            async def one(key: str) -> None:
                outcomes[key] = await resume(
                    shared, key, provider=provider, handler=sc.Payments(effects), timeout=30
                )

            try:
                async with anyio.create_task_group() as tg:
                    for key in KEYS:
                        tg.start_soon(one, key)
            finally:
                await provider.close()
                shared.close()
            return outcomes

        outcomes = anyio.run(go, backend=backend)
    after = sc.read_effects(effects)
    again = after.executions[len(before.executions) :]
    for key in KEYS:
        done = records[key]
        journaled = {r["id"] for r in done if r["kind"] == "tool_result"}
        started = {r["id"] for r in done if r["kind"] == "tool_start"}
        mine = [(i, a) for i, k, a in again if k.startswith(f"{key}:")]
        outcome = outcomes[key]
        if not done:  # its header never became durable: nothing of it ran, nothing to resume
            assert isinstance(outcome, Failure) and outcome.failure().kind == "journal_mismatch", where
            assert not [e for e in after.executions if e[1].startswith(f"{key}:")], where
            continue
        for tool_use_id, attempt in mine:
            assert tool_use_id not in journaled, (
                f"{where}: {key} ran {tool_use_id} again after its result was journaled"
            )
            assert attempt == (2 if tool_use_id in started else 1), (
                f"{where}: {key} {tool_use_id} attempt {attempt}"
            )
        assert isinstance(outcome, Success), f"{where}: {key}: {outcome}"
        assert outcome.unwrap().text == sc.FINAL, f"{where}: {key}"
        applied = sorted(k for k in after.effects if k.startswith(f"{key}:"))
        assert applied == [f"{key}:call_{n}" for n in (1, 2, 3)], f"{where}: {key}: {applied}"
    return ended == {"signal": signal.SIGKILL}
