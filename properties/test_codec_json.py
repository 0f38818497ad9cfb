"""``rma.codec_json.dumps`` — the fast text encoder a journal uses — writes exactly the text of
the reference encoding, ``json.dumps(to_jsonable(value))``, and it decodes to the same value.

The fast path hands plain JSON to the C encoder and walks only what it must tag or escape; the
values here mix both: raw JSON with ``$``-keys and ``$``-strings at any depth, tuples, enums,
results, attrs values holding raw JSON.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from properties._world import scaled
from rma.codec_json import dumps, from_jsonable, loads, to_jsonable
from rma.errors import StreamDropped
from rma.session.events import StreamEvent, ToolsFinished, TurnPolled
from rma.vocabulary import Terminal, ToolResult, ToolUse

keys = st.one_of(st.text(max_size=6), st.sampled_from(["$type", "$dict", "$ok", "$ref", "a$", '"$q']))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["$5", "$", "é", "\u2028"]),
)
raw = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=20,
)
tagged = st.one_of(
    raw.map(lambda e: StreamEvent(0, e)),
    st.lists(raw, max_size=3).map(lambda es: TurnPolled(tuple(es))),
    st.builds(ToolResult, st.text(max_size=5), st.text(max_size=8), st.booleans()),
    st.builds(
        lambda i, d: ToolUse(i, "tool", d), st.text(max_size=5), st.dictionaries(keys, raw, max_size=3)
    ),
    st.sampled_from(list(Terminal)),
    st.builds(StreamDropped, detail=st.text(max_size=8)),
)
values = st.recursive(
    st.one_of(raw, tagged),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(keys, inner, max_size=3),
        inner.map(Success),
        inner.map(Failure),
        st.lists(st.builds(ToolResult, st.text(max_size=4), st.text(max_size=4)), max_size=3).map(
            lambda rs: ToolsFinished(1, tuple(rs), ())
        ),
    ),
    max_leaves=12,
)


def reference(value: Any) -> str:
    return json.dumps(to_jsonable(value), ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=scaled(400), deadline=None)
@given(values)
def test_dumps_writes_the_reference_text(value: Any) -> None:
    assert dumps(value) == reference(value)


@settings(max_examples=scaled(200), deadline=None)
@given(values)
def test_dumps_decodes_to_what_the_reference_decodes_to(value: Any) -> None:
    assert loads(dumps(value)) == from_jsonable(json.loads(reference(value)))
