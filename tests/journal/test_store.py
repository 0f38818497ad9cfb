"""The journal stores: sealing, and several writers on one SQLite file."""

from __future__ import annotations

from pathlib import Path

from rma.journal import chain, genesis
from rma_shell import MemoryJournal, SQLiteJournal


def _chained(rows: list[tuple[int, str, str]], key: str) -> bool:
    previous = genesis(key)
    for n, (seq, text, sealed) in enumerate(rows, 1):
        if seq != n or chain(previous, text) != sealed:
            return False
        previous = sealed
    return True


def test_two_writers_on_one_file_keep_one_chain(tmp_path: Path) -> None:
    # A session's store seals each record onto the tail it wrote last, without reading it; a
    # record another process appended meanwhile (an approval) must not fork the chain.
    path = tmp_path / "journal.db"
    session, approver = SQLiteJournal(path), SQLiteJournal(path)
    for n in range(6):
        session.append("k", [f'{{"n":{n}}}'])
        if n % 2:
            approver.append("k", [f'{{"approval":{n}}}'])
    session.append("k", ['{"after":1}', '{"after":2}'])  # several records: one transaction
    session.append("k", ['{"last":true}'])
    rows = list(SQLiteJournal(path).rows("k"))
    assert len(rows) == 6 + 3 + 3 and _chained(rows, "k")
    assert [text for _, text, _ in rows][-3:] == ['{"after":1}', '{"after":2}', '{"last":true}']


def test_a_store_reopened_carries_on_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    first = SQLiteJournal(path)
    first.append("k", ['{"a":1}'])
    first.close()
    again = SQLiteJournal(path)
    again.append("k", ['{"b":2}'])
    again.append("k", ['{"c":3}'])
    assert _chained(list(again.rows("k")), "k")


def test_memory_and_sqlite_seal_alike(tmp_path: Path) -> None:
    texts = ['{"kind":"header","format":1}', '{"x":"é"}', '{"y":[1,2]}']
    memory, sqlite = MemoryJournal(), SQLiteJournal(tmp_path / "journal.db")
    for text in texts:
        memory.append("k", [text])
        sqlite.append("k", [text])
    assert list(memory.rows("k")) == list(sqlite.rows("k"))
