"""Properties of rma.wire.sse: chunking never matters, and httpx-sse (dev oracle) agrees."""

from __future__ import annotations

import re

from httpx_sse._decoders import SSEDecoder as OracleDecoder
from hypothesis import given, settings
from hypothesis import strategies as st

from rma.wire.sse import SSEDecoder, SSEMessage, encode_message

_LINE_END = re.compile(r"\r\n|\r|\n")

# Text without line breaks and without NUL (an id with NUL is ignored — tested by example).
_line_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\r\n\x00"),
    max_size=20,
)
_event_name = _line_text.filter(lambda s: s not in ("", "message"))

messages_strategy = st.lists(
    st.builds(
        SSEMessage,
        event=st.one_of(st.just("message"), _event_name),
        data=st.lists(_line_text, min_size=1, max_size=4).map("\n".join),
        id=st.one_of(st.just(""), _line_text.filter(bool)),
        retry=st.one_of(st.none(), st.integers(min_value=0, max_value=10**9)),
    ),
    max_size=12,
)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


def _decode(pieces: list[bytes]) -> list[SSEMessage]:
    decoder = SSEDecoder()
    out: list[SSEMessage] = []
    for piece in pieces:
        out.extend(decoder.feed(piece))
    assert decoder.close() == []
    return out


@settings(max_examples=300)
@given(
    messages=messages_strategy,
    line_end=st.sampled_from(["\n", "\r", "\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_sse_any_split_decodes_to_the_same_messages(
    messages: list[SSEMessage], line_end: str, cuts: list[int]
) -> None:
    encoded = b"".join(encode_message(m, line_end=line_end) for m in messages)
    # Ids persist in the decoder: a message written without an id inherits the last one.
    expected, last_id = [], ""
    for m in messages:
        last_id = m.id or last_id
        expected.append(SSEMessage(m.event, m.data, last_id, m.retry))
    assert _decode(_split(encoded, cuts)) == expected


# --- oracle: httpx-sse ------------------------------------------------------------------

_field = st.sampled_from(["data", "event", "id", "retry", "foo", ""])
_value = st.text(alphabet="ab: 1\u00e9", max_size=6)
_retry_value = st.one_of(
    st.text(alphabet="0123456789", min_size=1, max_size=4), st.text(alphabet="xyz", max_size=3)
)


@st.composite
def _lines(draw: st.DrawFn) -> list[str]:
    lines: list[str] = []
    for _ in range(draw(st.integers(min_value=0, max_value=25))):
        kind = draw(st.sampled_from(["field", "blank", "comment", "bare"]))
        if kind == "blank":
            lines.append("")
        elif kind == "comment":
            lines.append(":" + draw(_value))
        elif kind == "bare":
            lines.append(draw(st.sampled_from(["data", "event", "id", "retry", "x"])))
        else:
            name = draw(_field)
            value = draw(_retry_value) if name == "retry" else draw(_value)
            sep = draw(st.sampled_from([":", ": "]))
            lines.append(f"{name}{sep}{value}")
    return lines


def _oracle(lines: list[str]) -> list[SSEMessage]:
    """httpx-sse, filtered to the WHATWG dispatch rule it relaxes.

    httpx-sse dispatches a block on a blank line whenever it saw *any* field (or once an
    id was ever set), even with an empty data buffer; the spec dispatches only when the
    block had a data line. Which blocks had one is read off the lines themselves.
    """
    decoder = OracleDecoder()
    out: list[SSEMessage] = []
    had_data = False
    for line in [*lines, ""]:
        if line and not line.startswith(":") and line.partition(":")[0] == "data":
            had_data = True
        event = decoder.decode(line)
        if not line:
            if event is not None and had_data:
                out.append(SSEMessage(event.event or "message", event.data, event.id, event.retry))
            had_data = False
    return out


@settings(max_examples=500)
@given(
    lines=_lines(),
    line_end=st.sampled_from(["\n", "\r", "\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
)
def test_sse_agrees_with_httpx_sse_oracle(lines: list[str], line_end: str, cuts: list[int]) -> None:
    # Both sides see the same terminated lines; ours gets the bytes in arbitrary chunks.
    raw = "".join(line + line_end for line in [*lines, ""]).encode()
    assert _decode(_split(raw, cuts)) == _oracle(lines)


# --- the last event id: committed at a blank line only -----------------------------------


def _committed_id(text: str) -> str:
    """The WHATWG last event id after ``text``: the id buffer as of the last blank line among
    the lines ``text`` has ended (an id line of a still-open block does not count yet)."""
    complete = _LINE_END.split(text)[:-1]  # what follows the last line end is not a line yet
    buffer = committed = ""
    for line in complete:
        if not line:
            committed = buffer
            continue
        name, colon, value = line.partition(":")
        if name != "id":
            continue
        if colon and value.startswith(" "):
            value = value[1:]
        if "\x00" not in value:
            buffer = value
    return committed


@settings(max_examples=400)
@given(
    lines=_lines(),
    line_end=st.sampled_from(["\n", "\r", "\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
)
def test_sse_last_event_id_changes_only_at_a_blank_line(
    lines: list[str], line_end: str, cuts: list[int]
) -> None:
    # No closing blank line: the stream may end inside a block, whose id must never count.
    raw = "".join(line + line_end for line in lines).encode()
    decoder = SSEDecoder()
    received = b""
    for piece in _split(raw, cuts):
        decoder.feed(piece)
        received += piece
        # A cut inside "é" leaves an incomplete sequence at the end: it is inside a line.
        assert decoder.last_event_id == _committed_id(received.decode("utf-8", errors="ignore"))
    committed = decoder.last_event_id
    decoder.close()
    assert decoder.last_event_id == committed
