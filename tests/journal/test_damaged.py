"""Damaged journals through the public API: never a wrong resume, nothing sent to the host.

A journal cut short is what a crash leaves: ``resume`` carries on from there to the undisturbed
result, wherever the cut is. A record missing in the middle, edited, re-chained, reordered or
unreadable is ``JournalDamaged``; another session's records (another key, another provider)
are ``JournalMismatch``; a file that is no SQLite database is ``InvalidOpts('journal')``. In
every error case the host's emulator received nothing from the resume.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from returns.result import Failure

from rma.journal import chain, genesis
from rma_shell import resume, run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import CMAEmulator
from tests.journal import _scenario as sc


@contextmanager
def _db(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(path)) as db, db:
        yield db


def _rows(path: Path, key: str = sc.KEY) -> list[tuple[int, str, str]]:
    with _db(path) as db:
        return list(db.execute("SELECT seq, body, chain FROM rma_journal WHERE key = ? ORDER BY seq", (key,)))


def _copy(src: Path, dst: Path) -> Path:
    # The WAL holds the latest records until a checkpoint: copy it with the file.
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


class Ran:
    """One undisturbed journaled Local run, its journal file, and its emulator (still up)."""

    def __init__(self, tmp: Path, emu: Any, spec: dict[str, Any]) -> None:
        self.tmp, self.emu, self.spec = tmp, emu, spec
        self.effects = str(tmp / "effects.db")
        sc.create_effects(self.effects)
        self.journal = tmp / "journal.db"
        self.result = anyio.run(self._run, backend="trio").unwrap()

    async def _run(self) -> Any:
        provider = sc.provider(self.spec)
        try:
            return await run(
                provider,
                handler=sc.Payments(self.effects),
                prompt=sc.PROMPT,
                journal=str(self.journal),
                journal_key=sc.KEY,
                timeout=30,
            )
        finally:
            await provider.close()

    def resume(self, journal: Path, key: str = sc.KEY, provider: Any = None) -> Any:
        async def go() -> Any:
            p = provider or sc.provider(self.spec)
            try:
                return await resume(
                    str(journal), key, provider=p, handler=sc.Payments(self.effects), timeout=30
                )
            finally:
                await p.close()

        return anyio.run(go, backend="trio")

    def refused(self, journal: Path, kind: str, key: str = sc.KEY) -> Any:
        """Resume ``journal``: a ``kind`` error, and not one request sent, not one tool run."""
        sent, ran = len(self.emu.requests), len(sc.read_effects(self.effects).executions)
        outcome = self.resume(journal, key)
        assert isinstance(outcome, Failure), outcome
        assert outcome.failure().kind == kind, outcome.failure()
        assert len(self.emu.requests) == sent and len(sc.read_effects(self.effects).executions) == ran
        return outcome.failure()


@pytest.fixture
def ran(tmp_path: Path) -> Iterator[Ran]:
    with sc.emulator("local") as (emu, spec):
        yield Ran(tmp_path, emu, spec)


def _edit(ran: Ran, name: str, sql: str, *args: Any) -> Path:
    path = _copy(ran.journal, ran.tmp / name)
    with _db(path) as db:
        db.execute(sql, args)
    return path


# ── cut short: what a crash leaves ───────────────────────────────────────────────────


def test_a_journal_cut_after_any_record_resumes_to_the_undisturbed_result(ran: Ran) -> None:
    total = len(_rows(ran.journal))
    for keep in range(1, total):
        cut = _edit(ran, f"cut-{keep}.db", "DELETE FROM rma_journal WHERE seq > ?", keep)
        outcome = ran.resume(cut)
        assert sc.comparable(outcome.unwrap(), "local") == sc.comparable(ran.result, "local"), keep
    # Every call's effect once, by its key, however many resumes ran it again.
    assert sorted(sc.read_effects(ran.effects).effects) == sorted(
        f"{sc.KEY}:{u.id}" for u in ran.result.custom_tool_uses
    )


# ── damaged ──────────────────────────────────────────────────────────────────────────


def test_a_record_missing_in_the_middle_is_journal_damaged(ran: Ran) -> None:
    for seq in (2, 5, len(_rows(ran.journal)) - 1):
        damaged = _edit(ran, f"gap-{seq}.db", "DELETE FROM rma_journal WHERE seq = ?", seq)
        error = ran.refused(damaged, "journal_damaged")
        assert error.seq == seq and "missing" in error.detail


def test_an_edited_record_is_journal_damaged_where_it_was_edited(ran: Ran) -> None:
    rows = _rows(ran.journal)
    seq, body, _ = next(r for r in rows if json.loads(r[1])["kind"] == "tool_result")
    forged = body.replace("paid invoice", "refunded invoice")
    damaged = _edit(ran, "edited.db", "UPDATE rma_journal SET body = ? WHERE seq = ?", forged, seq)
    error = ran.refused(damaged, "journal_damaged")
    assert error.seq == seq


def test_a_record_re_chained_after_an_edit_breaks_the_next_record(ran: Ran) -> None:
    # Whoever edits a record and seals it again still breaks the chain of the one after it.
    rows = _rows(ran.journal)
    i = next(i for i, r in enumerate(rows) if json.loads(r[1])["kind"] == "tool_start")
    seq, body, _ = rows[i]
    forged = body.replace('"attempt":1', '"attempt":2')
    assert forged != body
    resealed = chain(rows[i - 1][2], forged)
    damaged = _edit(
        ran, "resealed.db", "UPDATE rma_journal SET body = ?, chain = ? WHERE seq = ?", forged, resealed, seq
    )
    assert ran.refused(damaged, "journal_damaged").seq == seq + 1


def test_a_broken_chain_value_is_journal_damaged(ran: Ran) -> None:
    damaged = _edit(ran, "chain.db", "UPDATE rma_journal SET chain = ? WHERE seq = 4", "0" * 64)
    assert ran.refused(damaged, "journal_damaged").seq == 4


def test_two_records_swapped_are_journal_damaged(ran: Ran) -> None:
    path = _copy(ran.journal, ran.tmp / "swapped.db")
    rows = _rows(path)
    (a, body_a, chain_a), (b, body_b, chain_b) = rows[5], rows[6]
    with _db(path) as db:
        db.execute("UPDATE rma_journal SET body = ?, chain = ? WHERE seq = ?", (body_b, chain_b, a))
        db.execute("UPDATE rma_journal SET body = ?, chain = ? WHERE seq = ?", (body_a, chain_a, b))
    assert ran.refused(path, "journal_damaged").seq == a


def test_a_record_that_is_not_json_is_journal_damaged_even_when_sealed(ran: Ran) -> None:
    rows = _rows(ran.journal)
    garbage = '{"kind":"event","event":{"$type":'
    path = _copy(ran.journal, ran.tmp / "garbage.db")
    with _db(path) as db:  # sealed as the store would have: only its reading can fail
        db.execute("DELETE FROM rma_journal WHERE seq > 4")
        db.execute(
            "UPDATE rma_journal SET body = ?, chain = ? WHERE seq = 4", (garbage, chain(rows[2][2], garbage))
        )
    error = ran.refused(path, "journal_damaged")
    assert error.seq == 4 and "cannot read" in error.detail


def test_a_sealed_record_of_an_unknown_kind_is_journal_damaged(ran: Ran) -> None:
    rows = _rows(ran.journal)
    odd = '{"kind":"surprise"}'
    path = _edit(
        ran,
        "odd.db",
        "INSERT INTO rma_journal VALUES (?, ?, ?, ?)",
        sc.KEY,
        len(rows) + 1,
        odd,
        chain(rows[-1][2], odd),
    )
    assert ran.refused(path, "journal_damaged").seq == len(rows) + 1


# ── another session's ────────────────────────────────────────────────────────────────


def test_records_copied_under_another_key_are_journal_mismatch(ran: Ran) -> None:
    path = _edit(
        ran,
        "copied.db",
        "INSERT INTO rma_journal SELECT 'other-key', seq, body, chain FROM rma_journal WHERE key = ?",
        sc.KEY,
    )
    assert "another session" in ran.refused(path, "journal_mismatch", key="other-key").detail


def test_records_copied_and_re_chained_under_another_key_are_journal_mismatch(ran: Ran) -> None:
    # Sealed again from the other key's genesis, the header still names the session it is.
    path = _copy(ran.journal, ran.tmp / "rechained.db")
    previous = genesis("other-key")
    with _db(path) as db:
        for seq, body, _ in _rows(path):
            previous = chain(previous, body)
            db.execute("INSERT INTO rma_journal VALUES ('other-key', ?, ?, ?)", (seq, body, previous))
    assert sc.KEY in ran.refused(path, "journal_mismatch", key="other-key").detail


def test_an_unknown_key_is_journal_mismatch(ran: Ran) -> None:
    ran.refused(ran.journal, "journal_mismatch", key="never-journaled")


def test_a_local_journal_resumed_on_a_claude_provider_is_journal_mismatch(ran: Ran) -> None:
    cut = _edit(ran, "cut.db", "DELETE FROM rma_journal WHERE seq > 6")
    with CMAEmulator(api_key=sc.CMA_KEY) as claude:
        provider = ClaudeManagedAgents(api_key=sc.CMA_KEY, base_url=claude.base_url, env={})
        outcome = ran.resume(cut, provider=provider)
        assert claude.requests == []
    assert isinstance(outcome, Failure) and outcome.failure().kind == "journal_mismatch", outcome
    assert "local" in outcome.failure().detail


def test_a_file_that_is_not_a_database_is_invalid_opts_journal(ran: Ran) -> None:
    path = ran.tmp / "not-a-db.db"
    path.write_bytes(b"this is a text file, not an SQLite database\n" * 100)
    sent = len(ran.emu.requests)
    outcome = ran.resume(path)
    assert isinstance(outcome, Failure), outcome
    error = outcome.failure()
    assert (error.kind, error.option) == ("invalid_opts", "journal"), error
    assert str(path) in str(error) and len(ran.emu.requests) == sent
