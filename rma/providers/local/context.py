"""The context window of a Local conversation: counting it, and keeping each request inside it.

Local holds its history client-side, so a long session grows its transcript until the server
refuses the request for its length. With a window (``Local(context_window=…)`` or discovered
from the server) every request is planned here, as decisions of the pure core:

1. **Count.** Each message's tokens are estimated when it is appended (its encoded bytes / 4,
   plus a per-message overhead), into prefix sums, so a request's count is two subtractions.
   The last reply's ``usage.prompt_tokens`` — or the server's ``/tokenize`` count, which the
   transport feeds back with ``measured`` — scales the estimate to the server's tokenizer.
2. **Shorten old tool results.** From the oldest kept message on, a tool result longer than
   ``shorten_to`` characters is replaced by its head and a visible marker
   (``SHORTENED_MARKER``) saying how much was cut.
3. **Drop the oldest turns, whole.** A turn is a message with the tool results that follow
   it, so a tool call never loses its result. The system prompt, the current request's own
   user message(s) and the latest model reply with what followed it are never dropped.

Both steps only move forward (``shortened_before`` and ``keep_from`` never decrease), and each
message is shortened at most once, so the policy costs O(1) amortized per turn however long
the conversation: a request body is spliced from the pre-encoded history (and the shortened
copies) as before. Everything is a function of the conversation, so a replay plans the same
requests. The transport asks for a second, harder plan (``compacted_after_refusal``) when the
server still refuses the request for its length; that is retried once.

4. **Summarize (when asked).** With ``summarize`` the dropped turns are condensed by the same
   model: ``summary_due`` says which messages no summary covers yet, ``summary_messages``
   builds that request, the transport makes it and hands the text to ``with_summary``; the
   summary then goes after the system prompt in every request.

A compaction aims a quarter below the budget, so the requests after it only append and the
prompt's prefix — and a server's prefix cache — hold for several turns.

What this is not: the history itself is never rewritten (``transcript`` stays whole), and the
summary is written by the model through the transport: this module only asks for and places it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from rma._persistent import AppendLog, JoinedBytes
from rma.vocabulary import JSON
from rma.wire.openai_chat import encode_json

SHORTENED_MARKER = "[rma: tool result shortened from {total} to {kept} characters to fit the context window]"
"""Appended to the head of a shortened tool result, so the model knows it sees part of it."""

CONTEXT_COMPACTED = "local.context_compacted"
"""The event a poll reports when its request left out or shortened history: ``dropped`` and
``shortened`` (messages, in total so far), ``tokens_before``/``tokens_after`` (this request, by
the policy's count), ``window``, ``reason`` (``"window"`` or ``"refused"``)."""

CONTEXT_WINDOW = "local.context_window"
"""The event the first poll reports when a window is known: ``tokens`` and ``source``."""

SUMMARY_PREFIX = "Summary of the earlier conversation, which no longer fits the context window:\n"

LOW_WATER_DIVISOR = 4
"""A compaction aims a quarter below the budget (see ``plan``)."""

DEFAULT_SHORTEN_TO = 400
"""Characters a shortened tool result keeps."""

_BYTES_PER_TOKEN = 4
_MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds per message (role markers, separators)."""

_REFUSAL = re.compile(
    r"maximum context length is (?P<limit>\d+) tokens?"
    r"(?:.*?(?:your request has|you requested|request has) (?P<tokens>\d+))?",
    re.IGNORECASE | re.DOTALL,
)
_LLAMA_CPP_REFUSAL = re.compile(r"exceeds the available context size", re.IGNORECASE)


def estimate(encoded: bytes) -> int:
    """A message's tokens by the policy's own rule: its encoded bytes / 4, rounded up, plus the
    per-message overhead. Deterministic and cheap; calibrated by ``ContextState.scale``."""
    return -(-len(encoded) // _BYTES_PER_TOKEN) + _MESSAGE_OVERHEAD


@attrs.frozen
class ContextState:
    """What the policy knows of one conversation: the window and where the request now starts.

    ``sums[i]`` is the estimated tokens of history messages ``[0, i)``; ``short_sums`` and
    ``short_encoded`` the same for the shortened copies of messages ``[0, shortened_before)``.
    """

    window: int
    reserve: int
    """Tokens left free for the reply (``max_tokens`` when the request sets one)."""
    fixed: int
    """Estimated tokens of what every request carries besides messages (the tool declarations)."""
    shorten_to: int = DEFAULT_SHORTEN_TO
    source: str = "option"
    """Where the window came from: ``option`` or the server endpoint that said it."""
    sums: AppendLog[int] = attrs.field(factory=lambda: AppendLog.of((0,)), eq=False)
    short_sums: AppendLog[int] = attrs.field(factory=lambda: AppendLog.of((0,)), eq=False)
    short_encoded: JoinedBytes = attrs.field(factory=JoinedBytes, eq=False, repr=False)
    first: int = 0
    """1 when the history opens with a system (or developer) message, which is always sent."""
    keep_from: int = 0
    """The first message (after the system prompt) a request carries; those before are dropped."""
    shortened_before: int = 0
    """Messages before this index are sent in their shortened form."""
    last_reply: int = -1
    """Index of the latest assistant message: it and what follows are never compacted."""
    request_start: int = 0
    request_end: int = 0
    """The current request's own user message(s): ``[request_start, request_end)``, always sent."""
    scale: tuple[int, int] = (1, 1)
    """Server tokens per estimated token, as a fraction, from the last measurement."""
    planned: int = 0
    """The estimated (unscaled) tokens of the last planned request, for calibration."""
    dropped: int = 0
    shortened: int = 0
    summary: bytes | None = attrs.field(default=None, repr=False)
    summary_tokens: int = 0
    summarize: bool = False
    """Whether dropped turns are condensed into a summary by the model (``summary_due``)."""
    summarized_to: int = 0
    """The summary covers the dropped messages before this index."""
    announced: bool = False
    """Whether the window was reported (``CONTEXT_WINDOW``) yet."""

    @property
    def budget(self) -> int:
        """Tokens the messages of a request may take, by the policy's count."""
        return self.window - self.reserve - self.fixed


def reserve_for(params: Mapping[str, JSON], window: int) -> int:
    """Tokens kept free for the reply: the request's ``max_tokens``/``max_completion_tokens``
    when set, else an eighth of the window (at most 1024)."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(value, window // 2)
    return min(1024, window // 8)


def new_state(
    window: int,
    history: Sequence[JSON],
    encoded: Sequence[bytes],
    *,
    params: Mapping[str, JSON],
    fixed_bytes: int,
    shorten_to: int = DEFAULT_SHORTEN_TO,
    source: str = "option",
    summarize: bool = False,
) -> ContextState:
    """The policy's state for a conversation opening with ``history`` (already encoded)."""
    state = ContextState(
        window=window,
        reserve=reserve_for(params, window),
        fixed=-(-fixed_bytes // _BYTES_PER_TOKEN),
        shorten_to=shorten_to,
        source=source,
        summarize=summarize,
    )
    first = 1 if history and _role(history[0]) in ("system", "developer") else 0
    state = attrs.evolve(state, first=first, keep_from=first, shortened_before=0, summarized_to=first)
    state = grown(state, history, encoded, 0)
    return attrs.evolve(state, request_start=len(history), request_end=len(history))


def _role(message: JSON) -> object:
    return message.get("role") if isinstance(message, Mapping) else None


def grown(state: ContextState, messages: Sequence[JSON], encoded: Sequence[bytes], size: int) -> ContextState:
    """The state after ``messages`` (encoded as ``encoded``) were appended to a history of
    ``size`` messages: their estimates join the prefix sums (O(1) per message)."""
    if not messages:
        return state
    total = state.sums[-1]
    sums: list[int] = []
    last_reply = state.last_reply
    for n, (message, data) in enumerate(zip(messages, encoded, strict=True)):
        total += estimate(data)
        sums.append(total)
        if _role(message) == "assistant":
            last_reply = size + n
    return attrs.evolve(state, sums=state.sums.extend(sums), last_reply=last_reply)


def request_started(state: ContextState, start: int, end: int) -> ContextState:
    """A user message opened a new request: its messages are ``[start, end)`` of the history."""
    return attrs.evolve(state, request_start=start, request_end=end)


def _scaled(state: ContextState, tokens: int) -> int:
    num, den = state.scale
    return -(-tokens * num // den)


def _pinned(state: ContextState) -> bool:
    """Whether the current request's user message(s) lie in the dropped part (then they are
    sent on their own, after the system prompt)."""
    return state.keep_from > state.request_start


def raw_count(state: ContextState, size: int) -> int:
    """The estimated (unscaled) tokens of the request's messages for a history of ``size``."""
    s = state
    total = s.sums[s.first] + s.summary_tokens
    if _pinned(s):
        total += _range_tokens(s, s.request_start, s.request_end)
    total += _range_tokens(s, s.keep_from, size)
    return total


def _range_tokens(s: ContextState, start: int, stop: int) -> int:
    """Tokens of messages ``[start, stop)`` as sent: shortened below ``shortened_before``."""
    if start >= stop:
        return 0
    split = min(max(start, s.shortened_before), stop)
    total = s.sums[stop] - s.sums[split]
    if split > start:
        total += s.short_sums[split] - s.short_sums[start]
    return total


def count(state: ContextState, size: int) -> int:
    """The request's tokens by the policy's count: the messages' estimate scaled to the server's
    last measurement, plus the fixed part."""
    return _scaled(state, raw_count(state, size)) + state.fixed


def _protected_from(state: ContextState, size: int) -> int:
    """Messages from here on are never shortened or dropped: the latest reply and what followed
    it, or the whole current request when the model has not replied in it yet."""
    tail = state.last_reply if state.last_reply >= state.request_start else state.request_start
    return min(max(tail, state.first), size)


def shortened_message(message: JSON, limit: int) -> JSON | None:
    """A tool message's shortened copy (head + marker), or None when it is short enough."""
    if _role(message) != "tool" or not isinstance(message, Mapping):
        return None
    content = message.get("content")
    if not isinstance(content, str) or len(content) <= limit:
        return None
    marker = SHORTENED_MARKER.format(total=len(content), kept=limit)
    return {**message, "content": content[:limit] + "\n" + marker}


def plan(
    state: ContextState,
    history: AppendLog[JSON] | Sequence[JSON],
    encoded: JoinedBytes,
    *,
    budget: int | None = None,
) -> ContextState:
    """Move ``shortened_before`` and then ``keep_from`` forward until the request's count fits
    ``budget`` (the state's own by default) or nothing more may go. O(what moved)."""
    s = state
    size = len(history)
    limit = s.budget if budget is None else budget
    protected = _protected_from(s, size)
    if count(s, size) - s.fixed <= limit:
        return s
    # Once over, compact down to a low-water mark: the next requests then only append, so the
    # prompt's prefix (and a server's prefix cache) holds for several turns, and a summary is
    # written once per chunk rather than every turn.
    limit -= limit // LOW_WATER_DIVISOR
    # 1. Shorten old tool results, oldest first, up to the protected tail.
    sb = s.shortened_before
    if sb < protected:
        short_sums: list[int] = []
        short_bytes: list[bytes] = []
        total = s.short_sums[-1]
        shortened = s.shortened
        over = count(s, size) - s.fixed - limit
        while sb < protected and over > 0:
            message = history[sb]
            short = shortened_message(message, s.shorten_to)
            data = encoded[sb] if short is None else encode_json(short)
            gain = 0
            if short is not None:
                shortened += 1
                gain = (s.sums[sb + 1] - s.sums[sb]) - estimate(data)
            total += estimate(data)
            short_sums.append(total)
            short_bytes.append(data)
            sb += 1
            if sb > s.keep_from:  # only what the request carries counts toward the gain
                over -= _scaled(s, max(gain, 0))
        s = attrs.evolve(
            s,
            short_sums=s.short_sums.extend(short_sums),
            short_encoded=s.short_encoded.extend(short_bytes),
            shortened_before=sb,
            shortened=shortened,
        )
    # 2. Drop the oldest turns whole: a turn ends where the next non-tool message begins.
    keep, dropped = s.keep_from, s.dropped
    while count(s, size) - s.fixed > limit:
        nxt = _next_turn(s, history, keep, size)
        if nxt > protected or nxt == keep:
            break
        dropped += nxt - keep - (_overlap(s, keep, nxt))
        keep = nxt
        s = attrs.evolve(s, keep_from=keep, dropped=dropped)
    return s


def _overlap(s: ContextState, start: int, stop: int) -> int:
    """How many of ``[start, stop)`` are the current request's pinned user messages (sent anyway)."""
    lo, hi = max(start, s.request_start), min(stop, s.request_end)
    return max(0, hi - lo)


def _next_turn(s: ContextState, history: AppendLog[JSON] | Sequence[JSON], at: int, size: int) -> int:
    """The start of the turn after the one starting at ``at``."""
    j = at + 1
    while j < size and (_role(history[j]) == "tool" or s.request_start <= j < s.request_end):
        j += 1
    return j


def ranges(state: ContextState, size: int) -> tuple[tuple[str, int, int], ...]:
    """The request's messages as (buffer, start, stop) pieces in order: ``"full"`` ranges of the
    encoded history and ``"short"`` ranges of the shortened copies (the summary goes after the
    system prompt, see ``body_parts``)."""
    s = state
    out: list[tuple[str, int, int]] = []
    if s.first:
        out.append(("full", 0, s.first))
    if s.summary is not None:
        out.append(("summary", 0, 0))
    spans = [(s.request_start, s.request_end)] if _pinned(s) else []
    spans.append((s.keep_from, size))
    for start, stop in spans:
        split = min(max(start, s.shortened_before), stop)
        if split > start:
            out.append(("short", start, split))
        if stop > split:
            out.append(("full", split, stop))
    return tuple(out)


def messages_of(state: ContextState, history: AppendLog[JSON] | Sequence[JSON]) -> list[JSON]:
    """The request's messages as values (for ``chat=`` callables and the user's hook)."""
    out: list[JSON] = []
    for kind, start, stop in ranges(state, len(history)):
        if kind == "summary":
            assert state.summary is not None
            out.append({"role": "user", "content": _summary_text(state)})
            continue
        for i in range(start, stop):
            message = history[i]
            short = shortened_message(message, state.shorten_to) if kind == "short" else None
            out.append(message if short is None else short)
    return out


def _summary_text(state: ContextState) -> str:
    assert state.summary is not None
    decoded = json.loads(state.summary)
    text = decoded.get("content") if isinstance(decoded, Mapping) else None
    return text if isinstance(text, str) else ""


def body_parts(state: ContextState, encoded: JoinedBytes) -> list[bytes]:
    """The request's encoded messages, joined per piece (one copy of each kept range)."""
    parts: list[bytes] = []
    size = len(encoded)
    for kind, start, stop in ranges(state, size):
        if kind == "summary":
            assert state.summary is not None
            parts.append(state.summary)
        elif kind == "short":
            parts.append(state.short_encoded.splice(b"", ((start, stop),), b""))
        else:
            parts.append(encoded.splice(b"", ((start, stop),), b""))
    return parts


SUMMARY_INSTRUCTION = (
    "You condense a conversation between a user, an assistant and its tools so that the "
    "assistant can continue the task without it. Write a short summary: the user's goal, what "
    "was done and found (facts, numbers, names, results of tool calls), what is still open. "
    "No preamble."
)
"""The system prompt of the summary request."""


def summary_due(state: ContextState) -> tuple[int, int] | None:
    """The dropped messages ``[start, stop)`` that no summary covers yet, when summaries are on."""
    if not state.summarize or state.keep_from <= state.summarized_to:
        return None
    return state.summarized_to, state.keep_from


def summary_messages(state: ContextState, history: AppendLog[JSON] | Sequence[JSON]) -> list[JSON]:
    """The messages of the request that asks the model for a summary: the instruction, and the
    earlier summary with the newly dropped messages as a transcript (tool results as sent:
    shortened ones stay shortened)."""
    due = summary_due(state)
    assert due is not None
    lines: list[str] = []
    if state.summary is not None:
        lines.append("Earlier summary:\n" + _summary_text(state).removeprefix(SUMMARY_PREFIX))
    for i in range(*due):
        if state.request_start <= i < state.request_end:
            continue  # the current request is sent as itself
        message = history[i]
        if i < state.shortened_before:
            message = shortened_message(message, state.shorten_to) or message
        role = _role(message)
        content = message.get("content") if isinstance(message, Mapping) else None
        calls = message.get("tool_calls") if isinstance(message, Mapping) else None
        text = content if isinstance(content, str) else ""
        if isinstance(calls, list):
            text += "".join(
                f" [calls {c['function'].get('name')}({c['function'].get('arguments')})]"
                for c in calls
                if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)
            )
        lines.append(f"{role}: {text}")
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTION},
        {"role": "user", "content": "\n".join(lines)},
    ]


def with_summary(state: ContextState, text: str) -> ContextState:
    """The state with the dropped part's summary (written by the model) sent after the system
    prompt, in place of any earlier summary; it covers what was dropped so far."""
    message = {"role": "user", "content": SUMMARY_PREFIX + text}
    data = encode_json(message)
    return attrs.evolve(
        state,
        summary=data,
        summary_tokens=estimate(data),
        summarized_to=max(state.keep_from, state.summarized_to),
    )


def calibrated(state: ContextState, prompt_tokens: int) -> ContextState:
    """The state after the server counted the last planned request as ``prompt_tokens``: the
    ratio becomes the scale of later counts (never below a half, to stay on the safe side)."""
    planned = state.planned
    if planned <= 0 or prompt_tokens <= 0:
        return state
    messages_tokens = max(prompt_tokens - state.fixed, 1)
    if messages_tokens * 2 < planned:
        messages_tokens = -(-planned // 2)
    return attrs.evolve(state, scale=(messages_tokens, planned))


def refusal_of(body: JSON) -> tuple[int | None, int | None] | None:
    """(window, request tokens) when an error body is a server's refusal of a request for its
    length — vLLM's ``This model's maximum context length is N tokens. However, your request
    has M input tokens.``, OpenAI's ``context_length_exceeded``, llama.cpp's
    ``exceed_context_size_error`` — else None. Either number may be unknown (None)."""
    error = body.get("error") if isinstance(body, Mapping) else None
    where: Mapping[str, JSON] | None = (
        error if isinstance(error, Mapping) else body if isinstance(body, Mapping) else None
    )
    if where is None:
        return None
    message = where.get("message")
    text = message if isinstance(message, str) else ""
    kind = where.get("type")
    code = where.get("code")
    if kind == "exceed_context_size_error" or _LLAMA_CPP_REFUSAL.search(text):
        n_ctx, n_prompt = where.get("n_ctx"), where.get("n_prompt_tokens")
        return (
            n_ctx if isinstance(n_ctx, int) else None,
            n_prompt if isinstance(n_prompt, int) else None,
        )
    found = _REFUSAL.search(text)
    if found is not None:
        tokens = found.group("tokens")
        return int(found.group("limit")), int(tokens) if tokens else None
    if code == "context_length_exceeded" or kind == "context_length_exceeded":
        return None, None
    return None


_SAVED = (
    "keep_from",
    "shortened_before",
    "request_start",
    "request_end",
    "dropped",
    "shortened",
    "summarized_to",
)


def saved(state: ContextState) -> dict[str, JSON]:
    """What a snapshot keeps of the policy's state: where requests start, the scale, the summary
    (the prefix sums and shortened copies are rebuilt from the history)."""
    out: dict[str, JSON] = {name: getattr(state, name) for name in _SAVED}
    out["scale"] = list(state.scale)
    out["window"] = state.window
    out["announced"] = state.announced
    out["planned"] = state.planned
    out["summary"] = _summary_text(state) if state.summary is not None else None
    return out


def restored(
    state: ContextState,
    history: AppendLog[JSON] | Sequence[JSON],
    encoded: JoinedBytes,
    data: Mapping[str, JSON],
) -> ContextState:
    """``state`` (fresh for the same history) as a snapshot left it: the shortened copies are
    rebuilt for the messages before ``shortened_before``, once. Raises ValueError on a snapshot
    that does not fit the history."""
    fields: dict[str, Any] = {}
    for name in _SAVED:
        value = data.get(name, getattr(state, name))
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= len(history):
            raise ValueError(f"context {name} {value!r} does not fit a history of {len(history)}")
        fields[name] = value
    scale = data.get("scale")
    if isinstance(scale, list) and len(scale) == 2 and all(isinstance(v, int) and v > 0 for v in scale):
        fields["scale"] = (scale[0], scale[1])
    window = data.get("window")
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        fields["window"] = window
    fields["announced"] = data.get("announced") is True
    planned = data.get("planned")
    if isinstance(planned, int) and not isinstance(planned, bool) and planned >= 0:
        fields["planned"] = planned
    total = 0
    short_sums: list[int] = [0]
    short_bytes: list[bytes] = []
    for i in range(fields["shortened_before"]):
        short = shortened_message(history[i], state.shorten_to)
        item = encoded[i] if short is None else encode_json(short)
        total += estimate(item)
        short_sums.append(total)
        short_bytes.append(item)
    out = attrs.evolve(
        state, short_sums=AppendLog.of(short_sums), short_encoded=JoinedBytes.of(short_bytes), **fields
    )
    summary = data.get("summary")
    if isinstance(summary, str):
        out = attrs.evolve(
            with_summary(out, summary.removeprefix(SUMMARY_PREFIX)), summarized_to=out.summarized_to
        )
    return out
