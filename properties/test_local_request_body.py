"""Local request bodies: the single-copy splice is byte-identical to the per-message algorithm.

``request_body_bytes`` used to pick the window's message indexes one by one and join the
pre-encoded messages through a generator; it now splices them from one comma-joined buffer.
On random conversations — user messages, tool calls with odd ids and arguments, results,
empty replies, directives, reattached histories, truncation windows of any size, and forks
of older versions — the bytes must be exactly the old ones, and the dict body for chat
callables must decode to the same value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Success

from rma.providers.local.codec import (
    CODEC,
    Conversation,
    apply_input,
    apply_response,
    prepare_request,
    request_body,
    request_body_bytes,
    start,
)
from rma.providers.local.conversation import role_of
from rma.vocabulary import ToolResult, ToolUse
from rma.wire.openai_chat import encode_json


def old_window(conv: Conversation) -> Iterator[int]:
    """The request window before the splice (verbatim, as an oracle)."""
    size = len(conv.history)
    limit = conv.max_history_messages
    if limit is None or size <= limit:
        yield from range(size)
        return
    first = 1 if role_of(conv.history[0]) in ("system", "developer") else 0
    keep_from = max(first, size - limit)
    cut = keep_from
    while cut < size and role_of(conv.history[cut]) == "tool":
        cut += 1
    if cut == size:
        cut = keep_from
        while cut > first and role_of(conv.history[cut]) == "tool":
            cut -= 1
    if first:
        yield 0
    yield from range(cut, size)


def old_body_bytes(conv: Conversation, stream: bool) -> bytes:
    encoded = conv.encoded.to_tuple()
    assert encoded == tuple(encode_json(m) for m in conv.history)
    return conv.template.body_bytes((encoded[i] for i in old_window(conv)), stream=stream)


TEXT = st.text(alphabet=st.sampled_from('ab ,"\\é\U0001f600\n'), max_size=6)
NAMES = st.sampled_from(["get_weather", "submit", "nope"])
ARGS = st.one_of(
    st.dictionaries(st.sampled_from(["c", "d"]), st.integers(0, 3), max_size=2).map(json.dumps),
    st.sampled_from(["", "null", "[1]", "{bad", '{"c": NaN}']),
    st.none(),
)
CALL = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries({"name": NAMES, "arguments": ARGS})},
    optional={"id": st.sampled_from(["a", "b", "", "call_1"]), "type": st.just("function")},
)
RESPONSE = st.builds(
    lambda content, calls, finish: {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content,
                    **({"tool_calls": calls} if calls else {}),
                },
                "finish_reason": finish,
            }
        ]
    },
    st.one_of(st.none(), TEXT),
    st.lists(CALL, max_size=3),
    st.sampled_from(["stop", "tool_calls", "length"]),
)
OPS = st.lists(
    st.tuples(
        st.sampled_from(["user", "poll", "resume", "messages"]),
        st.integers(0, 64),
        TEXT,
        RESPONSE,
        st.booleans(),
    ),
    max_size=14,
)
SEED = st.one_of(
    st.none(),
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]), "content": TEXT}
        ),
        min_size=1,
        max_size=4,
    ),
)


def step(conv: Conversation, op: str, text: str, resp: dict[str, Any], error: bool) -> Conversation | None:
    if op == "user":
        return apply_input(conv, CODEC.user_input(text)).unwrap()
    if op == "messages":
        msgs = [{"role": "user", "content": text}, {"role": "assistant", "content": text}]
        return apply_input(conv, {"kind": "messages", "messages": msgs}).unwrap()
    if op == "resume":
        uses = [ToolUse(call_id, name, {}) for call_id, name in conv.pending_calls]
        results = [ToolResult(use.id, text, error) for use in uses]
        applied = apply_input(conv, CODEC.resume_input(uses, results))
        return applied.unwrap() if isinstance(applied, Success) else None
    conv, _, _ = prepare_request(conv, stream=False)
    folded = apply_response(conv, resp)
    return folded.unwrap()[0] if isinstance(folded, Success) else None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=OPS,
    limit=st.one_of(st.none(), st.integers(1, 6)),
    system=st.one_of(st.none(), TEXT),
    seed=SEED,
    max_turns=st.integers(1, 6),
    params=st.sampled_from([None, {"model": "m", "temperature": 0.5}, "m"]),
)
def test_spliced_body_is_byte_identical_to_the_per_message_join(
    ops: list[tuple[str, int, str, dict[str, Any], bool]],
    limit: int | None,
    system: str | None,
    seed: list[dict[str, Any]] | None,
    max_turns: int,
    params: Any,
) -> None:
    started = start(
        system,
        [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "submit",
        params,
        max_turns,
        seed,
        max_history_messages=limit,
    )
    versions = [started.unwrap()]
    for op, pick, text, resp, error in ops:
        # Any earlier version may be extended: forks must keep their own bytes.
        grown = step(versions[pick % len(versions)], op, text, resp, error)
        if grown is not None:
            versions.append(grown)
    for conv in versions:
        for stream in (False, True):
            body = request_body_bytes(conv, stream=stream)
            assert body == old_body_bytes(conv, stream)
            assert json.loads(body) == json.loads(encode_json(request_body(conv, stream=stream)))
