"""The context-window policy (issue #26) on random Local conversations.

Random sessions — user messages, replies with calls of any size, results of any size, empty
replies, reattached histories, forks of older versions — are planned against random windows.
After every ``prepare_request``:

- the request fits the window by the policy's own count, unless nothing more may go (the
  protected tail alone is too big: then the transport's refusal path takes over);
- the policy's incremental count equals a recount of the body it builds, from scratch;
- a tool result is never sent without the message that made its call;
- the system prompt and the current request's own user messages are always sent;
- the body bytes decode to the same messages as the dict body (``chat=`` and the hook see what
  the server sees);
- replaying the same inputs plans byte-identical requests (the policy is deterministic).
"""

from __future__ import annotations

import json
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
from rma.providers.local.context import (
    _next_turn,
    _protected_from,
    count,
    estimate,
    messages_of,
    ranges,
)
from rma.providers.local.conversation import role_of
from rma.vocabulary import ToolResult, ToolUse
from rma.wire.openai_chat import encode_json

SIZES = st.integers(0, 900)
CALLS = st.lists(st.tuples(st.sampled_from(["lookup", "submit"]), st.integers(0, 3)), max_size=3)
OPS = st.lists(
    st.tuples(
        st.sampled_from(["user", "poll", "poll", "resume", "resume", "messages"]),
        st.integers(0, 1000),
        SIZES,
        CALLS,
        st.sampled_from(["stop", "tool_calls", "length"]),
        st.one_of(st.none(), st.integers(1, 3000)),
    ),
    max_size=40,
)
SEED = st.one_of(
    st.none(),
    st.lists(
        st.builds(
            lambda role, n: {"role": role, "content": "s" * n},
            st.sampled_from(["system", "user", "assistant", "tool"]),
            st.integers(0, 300),
        ),
        min_size=1,
        max_size=4,
    ),
)


def response(
    size: int, calls: list[tuple[str, int]], finish: str, usage: int | None, n: int
) -> dict[str, Any]:
    tool_calls = [
        {
            "id": f"c{n}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"k": arg})},
        }
        for i, (name, arg) in enumerate(calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": "r" * size if size % 3 else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage, "completion_tokens": 1}
    return body


def step(
    conv: Conversation, op: tuple[str, int, int, list[tuple[str, int]], str, int | None], n: int
) -> Conversation | None:
    kind, _, size, calls, finish, usage = op
    if kind == "user":
        return apply_input(conv, CODEC.user_input("u" * size)).unwrap()
    if kind == "messages":
        msgs = [{"role": "user", "content": "m" * size}, {"role": "assistant", "content": "a"}]
        return apply_input(conv, {"kind": "messages", "messages": msgs}).unwrap()
    if kind == "resume":
        uses = [ToolUse(call_id, name, {}) for call_id, name in conv.pending_calls]
        results = [ToolResult(use.id, "t" * size, size % 5 == 0) for use in uses]
        applied = apply_input(conv, CODEC.resume_input(uses, results))
        return applied.unwrap() if isinstance(applied, Success) else None
    conv, _, _ = prepare_request(conv, stream=False)
    check(conv)
    folded = apply_response(conv, response(size, calls, finish, usage, n))
    return folded.unwrap()[0] if isinstance(folded, Success) else None


def selected(conv: Conversation) -> list[int]:
    ctx = conv.context
    assert ctx is not None
    return [i for kind, a, b in ranges(ctx, len(conv.history)) if kind != "summary" for i in range(a, b)]


def check(conv: Conversation) -> None:
    ctx = conv.context
    assert ctx is not None
    history, size = conv.history, len(conv.history)
    body = json.loads(request_body_bytes(conv, stream=False))
    messages = body["messages"]
    # The dict body and the bytes agree.
    assert messages == json.loads(encode_json(request_body(conv)))["messages"]
    assert messages == json.loads(encode_json(messages_of(ctx, history)))
    # The incremental count is a recount of what is sent.
    recount = sum(estimate(encode_json(m)) for m in messages)
    num, den = ctx.scale
    assert count(ctx, size) == -(-recount * num // den) + ctx.fixed
    # Inside the window, or nothing more could go.
    protected = _protected_from(ctx, size)
    if count(ctx, size) - ctx.fixed > ctx.budget:
        assert ctx.shortened_before >= protected
        assert _next_turn(ctx, history, ctx.keep_from, size) > protected or ctx.keep_from >= protected
    # Pairs intact, system prompt and current request kept.
    chosen = selected(conv)
    kept = set(chosen)
    assert chosen == sorted(chosen) or ctx.keep_from > ctx.request_start
    for i in chosen:
        if role_of(history[i]) == "tool":
            j = i - 1
            while j >= 0 and role_of(history[j]) == "tool":
                j -= 1
            assert j < 0 or j in kept, (i, j, chosen)
    if ctx.first:
        assert chosen[0] == 0
    assert all(i in kept for i in range(ctx.request_start, min(ctx.request_end, size)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=OPS,
    window=st.integers(200, 6000),
    system=st.one_of(st.none(), st.text(alphabet="sé", max_size=200)),
    seed=SEED,
    params=st.sampled_from([{"model": "m"}, {"model": "m", "max_tokens": 300}]),
)
def test_every_planned_request_keeps_the_policy_s_promises(
    ops: list[Any], window: int, system: str | None, seed: list[dict[str, Any]] | None, params: Any
) -> None:
    def replay() -> list[Conversation]:
        started = start(
            system,
            [{"name": "lookup", "input_schema": {"type": "object"}}],
            "submit",
            params,
            1000,
            seed,
            context_window=window,
            shorten_to=120,
        )
        versions = [started.unwrap()]
        for n, op in enumerate(ops):
            # Any earlier version may be extended: forks keep their own plans.
            grown = step(versions[op[1] % len(versions)], op, n)
            if grown is not None:
                versions.append(grown)
        return versions

    first, second = replay(), replay()
    for a, b in zip(first, second, strict=True):
        assert request_body_bytes(a, stream=False) == request_body_bytes(b, stream=False)
        assert a.context == b.context
