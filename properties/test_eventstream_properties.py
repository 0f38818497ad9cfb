"""Properties of rma.wire.eventstream: botocore (dev oracle) agrees, and no corruption slips by.

- Random messages (every header type, random payloads), concatenated and cut anywhere,
  decode to exactly the input and to what botocore's ``EventStreamBuffer`` yields.
- Any single flipped bit, anywhere in the stream, fails with a typed error naming the
  right check (CRC-32 catches every single-bit error), after exactly the messages before
  the damaged one; truncation anywhere is ``truncated`` unless it falls on a boundary.
- Garbage, and garbage headers inside valid CRCs, come back as a Result, never raise;
  whatever we accept there, botocore accepts with the same values.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping

from botocore.eventstream import EventStreamBuffer
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from rma.wire.eventstream import (
    EventStreamDecoder,
    EventStreamError,
    Header,
    HeaderType,
    HeaderValue,
    Message,
    encode_message,
)

_names = st.text(min_size=1, max_size=12).filter(lambda s: len(s.encode()) <= 255)


def _ints(bits: int) -> st.SearchStrategy[int]:
    return st.integers(min_value=-(2 ** (bits - 1)), max_value=2 ** (bits - 1) - 1)


_VALUES: dict[HeaderType, st.SearchStrategy[HeaderValue]] = {
    HeaderType.TRUE: st.just(True),
    HeaderType.FALSE: st.just(False),
    HeaderType.BYTE: _ints(8),
    HeaderType.SHORT: _ints(16),
    HeaderType.INTEGER: _ints(32),
    HeaderType.LONG: _ints(64),
    HeaderType.BYTE_ARRAY: st.binary(max_size=40),
    HeaderType.STRING: st.text(max_size=20),
    HeaderType.TIMESTAMP: _ints(64),
    HeaderType.UUID: st.one_of(
        st.binary(min_size=16, max_size=16),
        st.builds(lambda b: uuid.UUID(bytes=b), st.binary(min_size=16, max_size=16)),
    ),
}


@st.composite
def _header(draw: st.DrawFn) -> Header:
    kind = draw(st.sampled_from(list(HeaderType)))
    inferred = draw(st.booleans()) and kind in (
        HeaderType.TRUE,
        HeaderType.FALSE,
        HeaderType.INTEGER,
        HeaderType.BYTE_ARRAY,
        HeaderType.STRING,
    )
    return Header(draw(_names), draw(_VALUES[kind]), None if inferred else kind)


_message = st.tuples(
    st.lists(_header(), max_size=6, unique_by=lambda h: h.name),
    st.binary(max_size=300),
)
_messages = st.lists(_message, min_size=1, max_size=6)
_cuts = st.lists(st.integers(min_value=0, max_value=100_000), max_size=10)


def _expected(headers: list[Header], payload: bytes) -> Message:
    def plain(value: HeaderValue) -> HeaderValue:
        return value.bytes if isinstance(value, uuid.UUID) else value

    return Message({h.name: plain(h.value) for h in headers}, payload)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


def _ours(pieces: list[bytes]) -> tuple[list[Message], EventStreamError | None]:
    """Everything our decoder yields, and the error it ends with (None: clean finish)."""
    decoder = EventStreamDecoder()
    out: list[Message] = []
    for piece in pieces:
        result = decoder.feed(piece)
        if isinstance(result, Failure):
            return out, result.failure()
        out.extend(result.unwrap())
    end = decoder.finish()
    return out, (end.failure() if isinstance(end, Failure) else None)


def _botocore(pieces: list[bytes]) -> list[tuple[Mapping[str, object], bytes]]:
    buffer = EventStreamBuffer()
    out: list[tuple[Mapping[str, object], bytes]] = []
    for piece in pieces:
        buffer.add_data(piece)
        out.extend((m.headers, m.payload) for m in buffer)
    return out


@settings(max_examples=200, deadline=None)
@given(messages=_messages, cuts=_cuts)
def test_random_messages_cut_anywhere_decode_to_the_input_and_to_botocore(
    messages: list[tuple[list[Header], bytes]], cuts: list[int]
) -> None:
    stream = b"".join(encode_message(h, p) for h, p in messages)
    pieces = _split(stream, cuts)
    ours, error = _ours(pieces)
    assert error is None
    assert ours == [_expected(h, p) for h, p in messages]
    theirs = _botocore(pieces)
    assert [(dict(m.headers), m.payload) for m in ours] == [(dict(h), p) for h, p in theirs]
    assert [list(m.headers) for m in ours] == [list(h) for h, _ in theirs]


@settings(max_examples=300, deadline=None)
@given(messages=_messages, data=st.data())
def test_any_single_bit_flip_fails_after_exactly_the_sound_messages(
    messages: list[tuple[list[Header], bytes]], data: st.DataObject
) -> None:
    frames = [encode_message(h, p) for h, p in messages]
    stream = bytearray(b"".join(frames))
    where = data.draw(
        st.sampled_from(["prelude_lengths", "prelude_crc", "headers", "payload", "message_crc", "any"])
    )
    victim = data.draw(st.integers(min_value=0, max_value=len(frames) - 1))
    start = sum(len(f) for f in frames[:victim])
    frame = frames[victim]
    (headers_length,) = struct.unpack_from(">I", frame, 4)
    span = {
        "prelude_lengths": (0, 8),
        "prelude_crc": (8, 12),
        "headers": (12, 12 + headers_length),
        "payload": (12 + headers_length, len(frame) - 4),
        "message_crc": (len(frame) - 4, len(frame)),
        "any": (0, len(frame)),
    }[where]
    if span[0] == span[1]:
        span = (0, len(frame))
    byte = start + data.draw(st.integers(min_value=span[0], max_value=span[1] - 1))
    stream[byte] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
    ours, error = _ours(_split(bytes(stream), data.draw(_cuts)))
    assert ours == [_expected(h, p) for h, p in messages[:victim]]
    assert error is not None
    assert error.offset == start
    assert error.reason == ("prelude_crc" if byte - start < 12 else "message_crc")


@settings(max_examples=200, deadline=None)
@given(messages=_messages, data=st.data())
def test_truncation_anywhere_is_truncated_unless_on_a_boundary(
    messages: list[tuple[list[Header], bytes]], data: st.DataObject
) -> None:
    frames = [encode_message(h, p) for h, p in messages]
    stream = b"".join(frames)
    keep = data.draw(st.integers(min_value=0, max_value=len(stream) - 1))
    ours, error = _ours(_split(stream[:keep], data.draw(_cuts)))
    ends = [sum(len(f) for f in frames[: i + 1]) for i in range(len(frames))]
    whole = sum(1 for e in ends if e <= keep)
    assert ours == [_expected(h, p) for h, p in messages[:whole]]
    if keep in (0, *ends):
        assert error is None
    else:
        assert error is not None and error.reason == "truncated"
        assert error.offset == (ends[whole - 1] if whole else 0)


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=400), cuts=_cuts, prefix=st.booleans())
def test_garbage_comes_back_as_a_result_never_an_exception(
    garbage: bytes, cuts: list[int], prefix: bool
) -> None:
    stream = (encode_message({"a": 1}, b"ok") if prefix else b"") + garbage
    decoder = EventStreamDecoder()
    for piece in _split(stream, cuts):
        result = decoder.feed(piece)
        assert isinstance(result, Success | Failure)
        if isinstance(result, Failure):
            assert isinstance(result.failure(), EventStreamError)
            break
    end = decoder.finish()
    assert isinstance(end, Success | Failure)


def _crc_valid_frame(block: bytes, payload: bytes) -> bytes:
    prelude = struct.pack(">II", 16 + len(block) + len(payload), len(block))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


# Header-shaped noise: mostly well-formed headers (so that some frames are accepted and
# compared), with wrong lengths, unknown types, bad UTF-8 and repeated names mixed in.
_VALUE_SIZES = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}


@st.composite
def _noise_header(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from([b"a", b"b", b"c", b"d", b":event-type", b"", b"\xff", b"\xc3"]))
    name_len = len(name) if draw(st.integers(0, 9)) else draw(st.integers(0, 5))
    kind = draw(st.integers(0, 9)) if draw(st.integers(0, 9)) else draw(st.integers(10, 255))
    if kind in (6, 7):
        value = draw(st.sampled_from([b"", b"ok", b"\xe2\x9c\x93", b"\xff\xfe"]))
        size = len(value) if draw(st.integers(0, 9)) else draw(st.integers(0, 8))
        value = struct.pack(">H", size) + value
    else:
        value = bytes(_VALUE_SIZES.get(kind, 0))
        if not draw(st.integers(0, 9)):
            value = value[: draw(st.integers(0, len(value)))]
    return bytes((name_len,)) + name + bytes((kind,)) + value


@settings(max_examples=300, deadline=None)
@given(
    block=st.one_of(st.binary(max_size=40), st.lists(_noise_header(), max_size=4).map(b"".join)),
    payload=st.binary(max_size=20),
)
def test_garbage_headers_inside_valid_crcs_never_raise_and_never_out_accept_botocore(
    block: bytes, payload: bytes
) -> None:
    raw = _crc_valid_frame(block, payload)
    ours, error = _ours([raw])
    if error is not None:
        assert error.reason in ("bad_header", "duplicate_header")
        return
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    [theirs] = list(buffer)  # botocore raising here would mean we accepted what it rejects
    assert [(dict(m.headers), m.payload) for m in ours] == [(theirs.headers, theirs.payload)]
