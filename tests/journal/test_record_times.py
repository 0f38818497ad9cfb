"""Journal records carry ``at`` (when the shell wrote them, for ``rma inspect``'s durations);
reading a journal ignores it, so a journal written before it existed loads the same."""

from __future__ import annotations

import json
import re

import attrs
from returns.result import Success

from rma.journal import load
from rma_shell import MemoryJournal, approve
from rma_shell.inspect.reading import codec_for
from tests.inspect import _sessions as s


def test_every_record_carries_when_it_was_written_in_order() -> None:
    journal = MemoryJournal()
    s.journal_of("trio", journal, "k", s.APPROVAL)
    assert isinstance(approve(journal, "k", "t2", "allow"), Success)
    records = [json.loads(text) for _, text, _ in journal.rows("k")]
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "header" and kinds[-2:] == ["waiting", "approval"]
    times = [r["at"] for r in records]
    assert all(isinstance(t, float) for t in times) and times == sorted(times)


def test_a_journal_without_times_loads_the_same() -> None:
    journal, bare = MemoryJournal(), MemoryJournal()
    s.journal_of("trio", journal, "k", s.ENDED)
    stamped = [text for _, text, _ in journal.rows("k")]
    bare.append("k", [re.sub(r',"at":[0-9.]+', "", text) for text in stamped])
    assert all('"at"' not in text for _, text, _ in bare.rows("k"))
    with_times = load("k", journal.rows("k"), codec_for).unwrap()
    without = load("k", bare.rows("k"), codec_for).unwrap()
    assert attrs.evolve(with_times, last_chain="") == attrs.evolve(without, last_chain="")
