"""rma.wire.sse: the WHATWG event-stream interpretation, fed in chunks of any size."""

from __future__ import annotations

import pytest

from rma.wire.sse import SSEDecoder, SSEDiscarded, SSEMessage, encode_message


def decode_all(data: bytes, *, step: int | None = None) -> list[SSEMessage]:
    decoder = SSEDecoder()
    out: list[SSEMessage] = []
    if step is None:
        out.extend(decoder.feed(data))
    else:
        for i in range(0, len(data), step):
            out.extend(decoder.feed(data[i : i + step]))
    assert decoder.close() == []
    return out


def test_sse_simple_data_event() -> None:
    assert decode_all(b"data: hello\n\n") == [SSEMessage("message", "hello", "", None)]


def test_sse_event_type_id_and_retry() -> None:
    msgs = decode_all(b"event: ping\nid: 7\nretry: 1500\ndata: x\n\n")
    assert msgs == [SSEMessage("ping", "x", "7", 1500)]


def test_sse_multiline_data_joined_with_lf() -> None:
    assert decode_all(b"data: a\ndata: b\ndata:\n\n") == [SSEMessage(data="a\nb\n")]


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_sse_all_line_endings(eol: bytes) -> None:
    raw = b"data: one" + eol + b"data: two" + eol + eol + b"data: three" + eol + eol
    assert [m.data for m in decode_all(raw)] == ["one\ntwo", "three"]


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7])
def test_sse_chunk_boundaries_anywhere(step: int) -> None:
    raw = b"event: a\r\ndata: x\r\n\r\n: comment\rdata: y\r\rdata:z\n\n"
    assert decode_all(raw, step=step) == decode_all(raw)
    assert [m.data for m in decode_all(raw)] == ["x", "y", "z"]


def test_sse_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    # The LF belongs to the CR above; a second line end is needed to dispatch.
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\r") == [SSEMessage(data="x")]
    assert decoder.feed(b"\n") == []
    assert not decoder.pending


def test_sse_cr_at_chunk_end_then_blank_line_dispatches_without_waiting() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r\r") == [SSEMessage(data="x")]


def test_sse_comment_lines_ignored() -> None:
    assert decode_all(b": keep-alive\n\n:another\ndata: x\n\n") == [SSEMessage(data="x")]


def test_sse_field_without_colon() -> None:
    # "data" alone appends an empty line: the buffer is "\n", so the event dispatches with "".
    assert decode_all(b"data\n\n") == [SSEMessage(data="")]
    assert decode_all(b"event\ndata: x\n\n") == [SSEMessage(event="message", data="x")]


def test_sse_only_one_leading_space_stripped() -> None:
    assert decode_all(b"data:  two spaces\n\n") == [SSEMessage(data=" two spaces")]
    assert decode_all(b"data:no space\n\n") == [SSEMessage(data="no space")]
    assert decode_all(b"data: a: b\n\n") == [SSEMessage(data="a: b")]


def test_sse_empty_data_buffer_does_not_dispatch() -> None:
    assert decode_all(b"event: lonely\n\n\n\nid: 3\n\n") == []
    # The event type of the undispatched block does not leak into the next one.
    assert decode_all(b"event: lonely\n\ndata: x\n\n") == [SSEMessage(data="x")]


def test_sse_last_event_id_persists_across_events_and_can_be_cleared() -> None:
    decoder = SSEDecoder()
    msgs = decoder.feed(b"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n")
    assert [(m.data, m.id) for m in msgs] == [("a", "1"), ("b", "1"), ("c", "")]
    assert decoder.last_event_id == ""


def test_sse_last_event_id_changes_only_when_a_blank_line_ends_the_block() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 41\ndata: a\n\nid: 42\ndata: b\n") == [SSEMessage(data="a", id="41")]
    # Event 42 is not complete: a reconnect now must not claim it.
    assert decoder.last_event_id == "41"
    assert decoder.feed(b"\n") == [SSEMessage(data="b", id="42")]
    assert decoder.last_event_id == "42"


def test_sse_id_of_a_block_discarded_at_close_is_never_the_last_event_id() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"id: 1\ndata: a\n\nid: 2\ndata: cut off")
    assert decoder.last_event_id == "1"
    assert decoder.close() == [SSEDiscarded(event="", data="", partial_line="data: cut off")]
    assert decoder.last_event_id == "1"


def test_sse_blank_line_commits_the_id_even_without_data() -> None:
    # WHATWG dispatch step 1 sets the last event id before the empty-data check.
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 7\n") == []
    assert decoder.last_event_id == ""
    assert decoder.feed(b"\n") == []
    assert decoder.last_event_id == "7"


def test_sse_id_with_null_is_ignored() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 1\n\nid: a\x00b\ndata: x\n\n") == [SSEMessage(data="x", id="1")]
    assert decoder.last_event_id == "1"


def test_sse_retry_only_ascii_digits() -> None:
    decoder = SSEDecoder()
    msgs = decoder.feed(
        b"retry: 12x\ndata: a\n\nretry: -5\ndata: b\n\nretry: \xd9\xa3\ndata: c\n\nretry: 42\n\n"
    )
    assert [m.retry for m in msgs] == [None, None, None]
    assert decoder.retry == 42


def test_sse_unknown_fields_ignored() -> None:
    assert decode_all(b"foo: bar\ndata: x\nbaz\n\n") == [SSEMessage(data="x")]


def test_sse_utf8_split_across_chunks() -> None:
    raw = "data: héllo — 🙂\n\n".encode()
    for step in range(1, 6):
        assert decode_all(raw, step=step) == [SSEMessage(data="héllo — 🙂")]


def test_sse_invalid_utf8_becomes_replacement_char() -> None:
    assert decode_all(b"data: a\xffb\n\n") == [SSEMessage(data="a\ufffdb")]


def test_sse_leading_bom_stripped_once() -> None:
    raw = "\ufeffdata: x\n\n".encode()
    assert decode_all(raw, step=1) == [SSEMessage(data="x")]
    # A BOM later in the stream is data, not a marker.
    assert decode_all(b"data: x\n\n" + "\ufeffdata: y\n\n".encode()) == [SSEMessage(data="x")]


def test_sse_close_discards_partial_event_and_reports_it() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: complete\n\nevent: e\ndata: part") == [SSEMessage(data="complete")]
    assert decoder.pending
    assert decoder.close() == [SSEDiscarded(event="e", data="", partial_line="data: part")]
    assert decoder.close() == []


def test_sse_close_reports_block_with_terminated_lines_but_no_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\ndata: b\n") == []
    assert decoder.close() == [SSEDiscarded(event="", data="a\nb", partial_line="")]


def test_sse_close_on_clean_stream_reports_nothing() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\n: trailing comment\n")
    assert not decoder.pending
    assert decoder.close() == []


def test_sse_feed_after_close_is_an_error() -> None:
    decoder = SSEDecoder()
    decoder.close()
    with pytest.raises(ValueError, match="after close"):
        decoder.feed(b"data: x\n\n")


def test_sse_openai_style_stream() -> None:
    raw = b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
    assert [m.data for m in decode_all(raw, step=4)] == ['{"a":1}', '{"a":2}', "[DONE]"]


def test_sse_encode_message_round_trip() -> None:
    msg = SSEMessage(event="update", data="line1\nline2", id="9", retry=100)
    assert decode_all(encode_message(msg, line_end="\r\n")) == [msg]


def test_sse_long_stream_of_lf_lines_is_linear() -> None:
    # Regression guard for an O(n^2) line scan: 20k events in one chunk.
    raw = b"data: x\n\n" * 20_000
    assert len(decode_all(raw)) == 20_000


def test_crlf_at_a_chunk_end_then_a_bare_lf_ends_the_event() -> None:
    """Regression: a chunk ending in CRLF must not swallow the next chunk's leading LF."""
    from rma.wire.sse import SSEDecoder

    d = SSEDecoder()
    assert d.feed(b"data: x\r\n") == []
    [first] = d.feed(b"\n")
    assert first.data == "x"
    [second] = d.feed(b"data: y\n\n")
    assert second.data == "y"
