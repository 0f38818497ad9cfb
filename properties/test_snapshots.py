"""Properties of ``rma.snapshots``: a delta turns one snapshot into the next, whatever changed.

The journal writes a Local turn's snapshot as the delta from the previous one and ``load``
applies the deltas in place; Temporal's workflow applies an activity's delta to the snapshot
it holds. Either way a resume must see exactly the snapshot the provider gave, so
``apply(old, delta(old, new)) == plain(new)`` for any pair, with persistent logs in them or
plain lists, in place or not.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rma import snapshots
from rma._persistent import AppendLog, GrowOnlySet

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "$c", "history"]), inner, max_size=3),
    ),
    max_leaves=8,
)
KEYS = st.sampled_from(["session_id", "history", "polls", "seen_calls", "context", "$odd"])
SNAPSHOTS = st.dictionaries(KEYS, VALUES, max_size=5)


@st.composite
def successions(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """An old snapshot and a new one that grew some of its lists, changed, added or dropped keys."""
    old = draw(SNAPSHOTS)
    new = dict(old)
    for key, value in old.items():
        how = draw(st.sampled_from(["keep", "grow", "change", "drop"]))
        if how == "grow" and isinstance(value, list):
            new[key] = [*value, *draw(st.lists(VALUES, min_size=1, max_size=3))]
        elif how == "change":
            new[key] = draw(VALUES)
        elif how == "drop":
            del new[key]
    new.update(draw(SNAPSHOTS))
    return old, new


@given(successions())
@settings(max_examples=300, deadline=None)
def test_applying_the_delta_of_two_snapshots_gives_the_second(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    old, new = pair
    kept = copy.deepcopy(old)
    change = snapshots.delta(old, new)
    json.dumps(change)  # plain JSON: it goes into a record or a payload as it is
    assert snapshots.apply(old, change) == new
    assert old == kept  # not in place: the caller's snapshot is untouched
    assert snapshots.apply(copy.deepcopy(old), json.loads(json.dumps(change)), owned=True) == new
    assert snapshots.changed(change) == (old != new)


@given(st.lists(st.lists(VALUES, max_size=3), min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_a_log_that_grew_is_written_as_its_tail_and_applied_in_place(turns: list[list[Any]]) -> None:
    # Local's history is a persistent log: each turn's snapshot holds a later version of it.
    log: AppendLog[Any] = AppendLog()
    seen: GrowOnlySet[tuple[str, str]] = GrowOnlySet()
    previous: dict[str, Any] = {"history": log, "seen_calls": seen.ordered(), "polls": 0}
    held = snapshots.plain(previous)
    assert held == {"history": [], "seen_calls": [], "polls": 0}
    for n, added in enumerate(turns, 1):
        log = log.extend(added)
        seen = seen.add(("step", str(n)))
        current = {"history": log, "seen_calls": seen.ordered(), "polls": n}
        change = snapshots.delta(previous, current)
        steps = change["$delta"]
        assert steps.get("history") == ({"$extend": added} if added else None)
        assert steps["seen_calls"] == {"$extend": [("step", str(n))]}
        held = snapshots.apply(held, json.loads(json.dumps(change)), owned=True)
        assert held == json.loads(json.dumps(snapshots.plain(current)))
        previous = current


def test_a_log_against_a_plain_list_is_compared_not_trusted() -> None:
    # After a resume the journal holds the loaded snapshot (lists); the provider's next one
    # holds logs again: the first delta compares them, and is right either way.
    loaded = {"history": [1, 2]}
    grown = {"$delta": {"history": {"$extend": [3]}}}
    assert snapshots.delta(loaded, {"history": AppendLog.of([1, 2, 3])}) == grown
    assert snapshots.delta(loaded, {"history": AppendLog.of([9])}) == {"$delta": {"history": {"$set": [9]}}}
    assert snapshots.delta(loaded, {"history": AppendLog.of([1, 2])}) == snapshots.NO_CHANGE


@pytest.mark.parametrize(
    ("old", "change"),
    [
        ({"a": 1}, ["not", "a", "mapping"]),
        ({"a": 1}, {"$delta": {"a": {"$extend": [2]}}}),
        ({"a": [1]}, {"$delta": {"a": "no change form"}}),
        ({"a": [1]}, {"$delta": {"a": {"$what": 1}}}),
        ([1], {"$delta": {}}),
    ],
)
def test_a_delta_that_does_not_fit_its_snapshot_is_a_value_error(old: Any, change: Any) -> None:
    # The journal turns it into JournalDamaged naming the record; never a silent wrong snapshot.
    with pytest.raises(ValueError, match="snapshot delta"):
        snapshots.apply(old, change, owned=True)
