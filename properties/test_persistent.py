"""Model-based properties of ``rma._persistent``: ``AppendLog`` vs ``list``, ``SeenIds`` vs a window.

Both containers share one backing store between versions and fork when an older version
is appended to. The models keep every version as a plain value, so any version that sees
an item it never held (or loses one it held) after a fork is caught, whichever version
was touched last.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rma._persistent import AppendLog, SeenIds

MAX_VERSIONS = 24
ITEMS = st.integers(0, 9)

# ── AppendLog ──────────────────────────────────────────────────────────────────────────


class AppendLogModel(RuleBasedStateMachine):
    """Every version ever made, paired with the list it must keep showing."""

    def __init__(self) -> None:
        super().__init__()
        self.versions: list[tuple[AppendLog[int], list[int]]] = [(AppendLog(), [])]

    def _pick(self, i: int) -> tuple[AppendLog[int], list[int]]:
        return self.versions[i % len(self.versions)]

    def _keep(self, log: AppendLog[int], model: list[int]) -> None:
        if len(self.versions) < MAX_VERSIONS:
            self.versions.append((log, model))
        else:  # keep the oldest ones: they are the ones forks can corrupt
            self.versions[-1] = (log, model)

    @rule(i=st.integers(0, MAX_VERSIONS), item=ITEMS)
    def append(self, i: int, item: int) -> None:
        log, model = self._pick(i)
        self._keep(log.append(item), [*model, item])

    @rule(i=st.integers(0, MAX_VERSIONS), items=st.lists(ITEMS, max_size=4))
    def extend(self, i: int, items: list[int]) -> None:
        log, model = self._pick(i)
        self._keep(log.extend(items), [*model, *items])

    @rule(i=st.integers(0, MAX_VERSIONS))
    def extend_with_itself(self, i: int) -> None:
        log, model = self._pick(i)
        self._keep(log.extend(log), [*model, *model])

    @rule(items=st.lists(ITEMS, max_size=5))
    def of(self, items: list[int]) -> None:
        self._keep(AppendLog.of(items), list(items))

    @rule(i=st.integers(0, MAX_VERSIONS), j=st.integers(-12, 12))
    def index(self, i: int, j: int) -> None:
        log, model = self._pick(i)
        if -len(model) <= j < len(model):
            assert log[j] == model[j]
        else:
            with pytest.raises(IndexError):
                log[j]

    @rule(i=st.integers(0, MAX_VERSIONS), item=ITEMS)
    def a_version_grown_from_its_newest_self_says_what_it_added(self, i: int, item: int) -> None:
        # What a journal's snapshot delta relies on: the tail, read without comparing.
        log, model = self._pick(i)
        newest = log.append(item)  # just made: nothing was appended to its store since
        grown = newest.extend([item, item])
        assert grown.grown_from(newest) == [item, item]
        assert grown.grown_from(grown) == []
        assert newest.grown_from(grown) is None  # not an earlier version
        self._keep(grown, [*model, item, item, item])

    @invariant()
    def every_version_shows_its_model(self) -> None:
        for log, model in self.versions:
            assert len(log) == len(model)
            assert list(log) == model
            assert log.to_tuple() == tuple(model)
            assert log.to_list() == model
            assert log == AppendLog.of(model)
            assert hash(log) == hash(AppendLog.of(model))

    @invariant()
    def grown_from_never_claims_a_tail_a_version_does_not_have(self) -> None:
        for older, older_model in self.versions:
            for newer, newer_model in self.versions:
                tail = newer.grown_from(older)
                if tail is not None:
                    assert [*older_model, *tail] == newer_model
        assert self.versions[0][0].grown_from([]) is None  # not a log: compared, not trusted


AppendLogModel.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestAppendLog = AppendLogModel.TestCase


# ── SeenIds ────────────────────────────────────────────────────────────────────────────

IDS = [f"e{i}" for i in range(8)]


def model_add(inserted: tuple[str, ...], window: int, event_id: str) -> tuple[str, ...]:
    """The window semantics: member iff among the last ``window`` insertions."""
    return inserted if event_id in inserted[-window:] else (*inserted, event_id)


class SeenIdsModel(RuleBasedStateMachine):
    """Versions of a ``SeenIds`` against the tuple of insertions each one has seen.

    Ids come from a small pool against windows of 1–4, so ids keep falling out of windows
    and coming back, on the newest version and on forks of older ones.
    """

    def __init__(self) -> None:
        super().__init__()
        self.window = 1
        self.versions: list[tuple[SeenIds, tuple[str, ...]]] = []

    @precondition(lambda self: not self.versions)
    @rule(window=st.integers(1, 4))
    def start(self, window: int) -> None:
        self.window = window
        self.versions = [(SeenIds(window=window), ())]

    def _pick(self, i: int) -> tuple[SeenIds, tuple[str, ...]]:
        return self.versions[i % len(self.versions)]

    def _keep(self, seen: SeenIds, model: tuple[str, ...]) -> None:
        if len(self.versions) < MAX_VERSIONS:
            self.versions.append((seen, model))
        else:
            self.versions[-1] = (seen, model)

    @precondition(lambda self: bool(self.versions))
    @rule(i=st.integers(0, MAX_VERSIONS), event_id=st.sampled_from(IDS))
    def add(self, i: int, event_id: str) -> None:
        seen, model = self._pick(i)
        self._keep(seen.add(event_id), model_add(model, self.window, event_id))

    @precondition(lambda self: bool(self.versions))
    @rule(i=st.integers(0, MAX_VERSIONS), ids=st.lists(st.sampled_from(IDS), max_size=4))
    def union(self, i: int, ids: list[str]) -> None:
        seen, model = self._pick(i)
        expected = model
        for event_id in ids:
            expected = model_add(expected, self.window, event_id)
        self._keep(seen.union(ids), expected)

    @invariant()
    def every_version_shows_its_window(self) -> None:
        for seen, model in self.versions:
            members = model[-self.window :]
            assert seen.ids() == members
            assert len(seen) == len(members)
            for event_id in IDS:
                assert (event_id in seen) == (event_id in members), (event_id, seen.ids(), model)
            assert seen == SeenIds(window=self.window).union(members)
            assert 5 not in seen  # non-strings are never members


SeenIdsModel.TestCase.settings = settings(
    max_examples=50, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestSeenIds = SeenIdsModel.TestCase


def test_seen_ids_compaction_keeps_memory_bounded() -> None:
    seen = SeenIds(window=3)
    for i in range(100):
        seen = seen.add(f"id{i}")
    assert seen.ids() == ("id97", "id98", "id99")
    assert len(seen._order) <= 2 * 3 + 1  # the backing store is compacted (R-17 Better)


def test_seen_ids_readding_a_forgotten_id_keeps_older_versions() -> None:
    """Regression: re-adding an id that fell out of the window forks instead of
    overwriting the shared index entry older versions still read."""
    a = SeenIds(window=2).add("x")  # [x]
    b = a.add("y").add("z")  # [x y z]: x is outside b's window
    assert "x" not in b
    b.add("x")  # re-add x to the newest version
    assert "x" in a  # a = [x] must still hold x
