"""Model-based property of ``rma._persistent.GrowOnlySet`` against ``frozenset``.

Versions share one insertion-ordered dict and fork when an older version is added to; every
version must keep showing exactly its items, in the order they were added (``ordered``: a
Local snapshot writes what a version added), compare equal to the frozenset of them and hash
like it (the Local conversation is a frozen attrs value that holds one).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rma._persistent import GrowOnlySet

MAX_VERSIONS = 16
ITEMS = st.sampled_from([("a", "{}"), ("a", '{"n":1}'), ("b", "{}"), ("c", "[]"), ("b", '{"n":1}')])


class GrowOnlySetModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.versions: list[tuple[GrowOnlySet[tuple[str, str]], tuple[tuple[str, str], ...]]] = [
            (GrowOnlySet(), ())
        ]

    def _pick(self, i: int) -> tuple[GrowOnlySet[tuple[str, str]], tuple[tuple[str, str], ...]]:
        return self.versions[i % len(self.versions)]

    def _keep(self, grown: GrowOnlySet[tuple[str, str]], order: tuple[tuple[str, str], ...]) -> None:
        if len(self.versions) < MAX_VERSIONS:
            self.versions.append((grown, order))
        else:  # keep the oldest ones: they are the ones forks can corrupt
            self.versions[-1] = (grown, order)

    @rule(i=st.integers(0, MAX_VERSIONS), item=ITEMS)
    def add(self, i: int, item: tuple[str, str]) -> None:
        grown, order = self._pick(i)
        added = grown.add(item)
        assert (added is grown) == (item in order)
        self._keep(added, order if item in order else (*order, item))
        if added is not grown:
            assert added.ordered().grown_from(grown.ordered()) in ([item], None)

    @rule(items=st.lists(ITEMS, max_size=4))
    def of(self, items: list[tuple[str, str]]) -> None:
        self._keep(GrowOnlySet(items), tuple(dict.fromkeys(items)))

    @rule(i=st.integers(0, MAX_VERSIONS), item=ITEMS)
    def membership(self, i: int, item: tuple[str, str]) -> None:
        grown, order = self._pick(i)
        assert (item in grown) == (item in order)
        assert [] not in grown  # unhashable: never a member, never an error

    @invariant()
    def every_version_shows_its_model(self) -> None:
        for grown, order in self.versions:
            model = frozenset(order)
            assert tuple(grown) == order
            assert grown.ordered().to_tuple() == order
            assert len(grown) == len(model)
            assert frozenset(grown) == model
            assert grown == model and model == grown
            assert hash(grown) == hash(model)
            assert bool(grown) == bool(model)


GrowOnlySetModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestGrowOnlySet = GrowOnlySetModel.TestCase
