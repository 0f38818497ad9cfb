"""Properties of the recording format (``rma.recording``): any damage to a sealed log is caught.

A log of random records is sealed line by line as the recorder does; then one change is made —
a line edited, two distinct lines swapped, a line deleted or duplicated, the tail cut off — and
``check`` must refuse it. The untouched log always passes and gives back its records, and a log
cut short passes with ``partial=True`` only, still refusing every other change.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from rma.recording import GENESIS, check, end_body, event_body, header_body, seal

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


def sealed(bodies: list[str]) -> list[str]:
    previous, lines = GENESIS, []
    for body in bodies:
        line, previous = seal(previous, body)
        lines.append(line)
    return lines


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    events = draw(st.lists(VALUE, min_size=1, max_size=8))
    bodies = [header_body('{"provider_name":"p"}')]
    bodies += [event_body(json.dumps(e, ensure_ascii=False, separators=(",", ":"))) for e in events]
    bodies.append(end_body())
    return bodies, sealed(bodies)


@settings(max_examples=150, deadline=None)
@given(logs())
def test_an_untouched_log_passes_and_gives_its_records_back(log: tuple[list[str], list[str]]) -> None:
    bodies, lines = log
    checked = check(lines)
    assert isinstance(checked, Success)
    assert [record for _, record in checked.unwrap().records] == [json.loads(b) for b in bodies]


@settings(max_examples=300, deadline=None)
@given(logs(), st.data())
def test_any_single_change_is_refused(log: tuple[list[str], list[str]], data: st.DataObject) -> None:
    _, lines = log
    n = len(lines)
    change = data.draw(st.sampled_from(["edit", "swap", "delete", "duplicate", "truncate"]))
    damaged = list(lines)
    if change == "edit":
        i = data.draw(st.integers(0, n - 1))
        body, chain = damaged[i].rsplit(',"chain":', 1)
        k = data.draw(st.integers(1, len(body) - 1))  # keep the opening brace
        replacement = data.draw(st.sampled_from(["x", "0", " ", '"', "}", "é"]))
        edited = body[:k] + replacement + body[k + 1 :]
        if edited == body:
            edited = body[:k] + "Z" + body[k:]
        damaged[i] = edited + ',"chain":' + chain
    elif change == "swap":
        i, j = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        if damaged[i] == damaged[j]:
            return
        damaged[i], damaged[j] = damaged[j], damaged[i]
    elif change == "delete":
        i = data.draw(st.integers(0, n - 1))
        del damaged[i]
        if i == n - 1:
            change = "truncate"  # deleting the end record is cutting the log short
    elif change == "duplicate":
        i = data.draw(st.integers(0, n - 1))
        damaged.insert(data.draw(st.integers(0, n)), damaged[i])
    else:
        damaged = damaged[: data.draw(st.integers(1, n - 1))]
    assert isinstance(check(damaged), Failure), (change, damaged)
    if change != "truncate":
        assert isinstance(check(damaged, partial=True), Failure), (change, damaged)


@settings(max_examples=100, deadline=None)
@given(logs(), st.data())
def test_a_log_cut_short_passes_only_as_partial(
    log: tuple[list[str], list[str]], data: st.DataObject
) -> None:
    bodies, lines = log
    keep = data.draw(st.integers(1, len(lines) - 1))
    cut = lines[:keep]
    if data.draw(st.booleans()):  # the line being written when the process died
        cut.append(lines[keep][: data.draw(st.integers(0, len(lines[keep]) - 2))])
    assert isinstance(check(cut), Failure)
    partial = check(cut, partial=True)
    assert isinstance(partial, Success) and not partial.unwrap().complete
    assert [record for _, record in partial.unwrap().records] == [json.loads(b) for b in bodies[:keep]]
