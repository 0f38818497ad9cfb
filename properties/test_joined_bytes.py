"""Model-based property of ``rma._persistent.JoinedBytes`` against a list of byte strings.

Versions share one growing buffer and fork when an older version is extended (as
``AppendLog`` does); every version must keep showing exactly its items, and ``splice``
must equal ``head + sep.join(the items of its ranges) + tail`` for any ranges.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rma._persistent import JoinedBytes

MAX_VERSIONS = 16
# Empty items and items holding the separator are the cases offset bookkeeping gets wrong.
ITEMS = st.sampled_from([b"", b",", b"a", b"bc", b'{"x":1}', b",,", b"\xff"])
RANGES = st.lists(st.tuples(st.integers(-2, 12), st.integers(-2, 12)), max_size=4)


def model_splice(items: list[bytes], head: bytes, ranges: list[tuple[int, int]], tail: bytes) -> bytes:
    picked = []
    for start, stop in ranges:
        start, stop = max(0, start), min(stop, len(items))
        if start < stop:
            picked.append(b",".join(items[start:stop]))
    return head + b",".join(picked) + tail


class JoinedBytesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.versions: list[tuple[JoinedBytes, list[bytes]]] = [(JoinedBytes(), [])]

    def _pick(self, i: int) -> tuple[JoinedBytes, list[bytes]]:
        return self.versions[i % len(self.versions)]

    def _keep(self, joined: JoinedBytes, model: list[bytes]) -> None:
        if len(self.versions) < MAX_VERSIONS:
            self.versions.append((joined, model))
        else:  # keep the oldest ones: they are the ones forks can corrupt
            self.versions[-1] = (joined, model)

    @rule(i=st.integers(0, MAX_VERSIONS), items=st.lists(ITEMS, max_size=4))
    def extend(self, i: int, items: list[bytes]) -> None:
        joined, model = self._pick(i)
        self._keep(joined.extend(items), [*model, *items])

    @rule(items=st.lists(ITEMS, max_size=5))
    def of(self, items: list[bytes]) -> None:
        self._keep(JoinedBytes.of(items), list(items))

    @rule(i=st.integers(0, MAX_VERSIONS))
    def extend_fails_midway(self, i: int) -> None:
        # An encoder that raises after the first item leaves the shared store ahead of every
        # version; the version must still show its items and fork on its next extend.
        joined, _ = self._pick(i)

        def items() -> object:
            yield b"partial"
            raise ValueError("not JSON")

        with pytest.raises(ValueError):
            joined.extend(items())  # type: ignore[arg-type]

    @rule(i=st.integers(0, MAX_VERSIONS), j=st.integers(-8, 8))
    def index(self, i: int, j: int) -> None:
        joined, model = self._pick(i)
        if -len(model) <= j < len(model):
            assert joined[j] == model[j]
        else:
            with pytest.raises(IndexError):
                joined[j]

    @rule(i=st.integers(0, MAX_VERSIONS), head=ITEMS, tail=ITEMS, ranges=RANGES)
    def splice(self, i: int, head: bytes, tail: bytes, ranges: list[tuple[int, int]]) -> None:
        joined, model = self._pick(i)
        assert joined.splice(head, ranges, tail) == model_splice(model, head, ranges, tail)

    @invariant()
    def every_version_shows_its_model(self) -> None:
        for joined, model in self.versions:
            assert len(joined) == len(model)
            assert joined.to_tuple() == tuple(model)
            assert joined.splice(b"[", [(0, len(model))], b"]") == b"[" + b",".join(model) + b"]"
            assert joined == JoinedBytes.of(model)
            assert hash(joined) == hash(JoinedBytes.of(model))


JoinedBytesModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestJoinedBytes = JoinedBytesModel.TestCase


@settings(max_examples=100, deadline=None)
@given(items=st.lists(st.binary(max_size=6), max_size=8), sep=st.sampled_from([b",", b"", b"\n--\n"]))
def test_any_separator_joins_like_bytes_join(items: list[bytes], sep: bytes) -> None:
    joined = JoinedBytes.of(items, sep)
    assert joined.sep == sep
    assert joined.to_tuple() == tuple(items)
    assert joined.splice(b"", [(0, len(items))], b"") == sep.join(items)
    if len(items) > 2:
        assert joined.splice(b"<", [(0, 1), (2, len(items))], b">") == (
            b"<" + sep.join([items[0], *items[2:]]) + b">"
        )


def test_a_splice_leaves_no_export_behind() -> None:
    # A memoryview left alive would make the next in-place append raise BufferError.
    joined = JoinedBytes.of([b"a", b"b", b"c"])
    older = joined
    joined = joined.extend([b"d"])
    assert older.splice(b"", [(0, 1), (2, 3)], b"") == b"a,c"
    assert joined.splice(b"", [(1, 4)], b"") == b"b,c,d"
    joined = joined.extend([b"e"])
    assert joined.splice(b"", [(0, 5)], b"") == b"a,b,c,d,e"
