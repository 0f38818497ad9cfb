"""The CMA stream's event decoder (shared keys, issue #17) decodes exactly what ``json.loads`` does."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rma_shell.providers.claude import provider as cma

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, floats included (``-0.0`` and ``0.0`` apart), key order too."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float):
        return isinstance(b, float) and math.copysign(1, a) == math.copysign(1, b) and a == b
    return type(a) is type(b) and a == b


@given(_json)
def test_decoding_a_frame_is_json_loads(value: Any) -> None:
    text = json.dumps(value)
    assert _same(cma._decode_event(text), json.loads(text))


@given(st.lists(st.tuples(st.text(max_size=6), st.integers()), max_size=6))
def test_a_repeated_key_keeps_the_last_value_as_json_loads_does(pairs: list[tuple[str, int]]) -> None:
    text = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}"
    assert _same(cma._decode_event(text), json.loads(text))
