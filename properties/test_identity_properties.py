"""Properties of rma.provisioning.identity: names always fit their policy, digests ignore key order."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from rma.provisioning import AGENTCORE_HARNESS_NAMES, CLAUDE_NAMES, canonical_json, compose_name, digest_of
from rma.provisioning.identity import digest_of_name, name_stem

HARNESS_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,39}")

# Any Unicode text a user might type as a base: letters of every script, punctuation, emoji,
# combining marks — but valid Unicode (no lone surrogates) and no NUL.
bases = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=80)
digests = st.text(alphabet="0123456789abcdef", min_size=8, max_size=64)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(alphabet=st.characters(codec="utf-8"), max_size=6), children, max_size=4)
    ),
    max_leaves=25,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in another insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@settings(max_examples=400, deadline=None)
@given(base=bases, digest=digests)
def test_agentcore_names_always_match_the_harness_pattern(base: str, digest: str) -> None:
    name = compose_name(base, digest, AGENTCORE_HARNESS_NAMES)
    assert HARNESS_NAME.fullmatch(name), name
    assert name.endswith("_" + digest[:8])
    assert digest_of_name(name, base, AGENTCORE_HARNESS_NAMES) == digest[:8]


@settings(max_examples=400, deadline=None)
@given(base=bases, digest=digests)
def test_claude_names_fit_256_utf8_bytes_and_keep_short_bases_whole(base: str, digest: str) -> None:
    name = compose_name(base, digest, CLAUDE_NAMES)
    raw = name.encode("utf-8")
    assert len(raw) <= 256
    assert raw.decode("utf-8") == name
    assert CLAUDE_NAMES.accepts(name)
    assert name.endswith("_" + digest[:8])
    if len(base.encode("utf-8")) <= 256 - 9:
        assert name == f"{base}_{digest[:8]}"
    assert digest_of_name(name, base, CLAUDE_NAMES) == digest[:8]


@settings(max_examples=300, deadline=None)
@given(a=bases, b=bases)
@example(a="", b="a")
@example(a="billing-support", b="billing_support")
def test_distinct_bases_get_distinct_harness_stems_unless_they_differ_only_by_hyphens(a: str, b: str) -> None:
    if a.replace("-", "_") == b.replace("-", "_") or {a, b} == {"", "a"}:
        # B-50 pins an empty base to the stem "a" (a_<digest>), the stem of the base "a" too.
        assert name_stem(a, AGENTCORE_HARNESS_NAMES) == name_stem(b, AGENTCORE_HARNESS_NAMES)
    else:
        # Different unless a 24-bit truncation hash collides — never within these examples.
        assert name_stem(a, AGENTCORE_HARNESS_NAMES) != name_stem(b, AGENTCORE_HARNESS_NAMES)


@settings(max_examples=150, deadline=None)
@given(value=json_values, seed=st.integers(min_value=0, max_value=2**32))
def test_a_digest_does_not_depend_on_key_order(value: Any, seed: int) -> None:
    assert digest_of(_shuffled(value, random.Random(seed))) == digest_of(value)


@settings(max_examples=150, deadline=None)
@given(value=json_values)
def test_canonical_json_is_compact_parseable_and_a_fixed_point(value: Any) -> None:
    text = canonical_json(value).unwrap()
    reparsed = json.loads(text)
    assert canonical_json(reparsed).unwrap() == text
    assert text == json.dumps(reparsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
