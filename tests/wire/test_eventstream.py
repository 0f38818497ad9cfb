"""rma.wire.eventstream: the §6 vectors, chunking anywhere (B-30, B-36), and every typed failure."""

from __future__ import annotations

import struct
import uuid
import zlib

import pytest
from returns.result import Failure, Success

from rma.wire.eventstream import (
    MAX_HEADERS_LENGTH,
    MAX_PAYLOAD_LENGTH,
    EventStreamDecoder,
    EventStreamError,
    Header,
    HeaderType,
    Message,
    encode_error,
    encode_event,
    encode_exception,
    encode_headers,
    encode_message,
)

EMPTY = bytes.fromhex("00000010 00000000 05c248eb 7d98c8ff")
MESSAGE_STOP = bytes.fromhex(
    "00 00 00 7a 00 00 00 51 ca 2c 46 65 0b 3a 65 76"
    "65 6e 74 2d 74 79 70 65 07 00 0b 6d 65 73 73 61"
    "67 65 53 74 6f 70 0d 3a 63 6f 6e 74 65 6e 74 2d"
    "74 79 70 65 07 00 10 61 70 70 6c 69 63 61 74 69"
    "6f 6e 2f 6a 73 6f 6e 0d 3a 6d 65 73 73 61 67 65"
    "2d 74 79 70 65 07 00 05 65 76 65 6e 74 7b 22 73"
    "74 6f 70 52 65 61 73 6f 6e 22 3a 22 65 6e 64 5f"
    "74 75 72 6e 22 7d 5f bf 09 fc"
)
ALL_TYPES = [
    Header("t", True),
    Header("f", False),
    Header("byte", -1, HeaderType.BYTE),
    Header("short", -2, HeaderType.SHORT),
    Header("int", -3, HeaderType.INTEGER),
    Header("long", -4, HeaderType.LONG),
    Header("bytes", b"\x01\x02\x03"),
    Header("string", "ok"),
    Header("ts", 1785585600000, HeaderType.TIMESTAMP),
    Header("uuid", uuid.UUID(bytes=bytes(range(16)))),
]
ALL_TYPES_DECODED = {
    "t": True,
    "f": False,
    "byte": -1,
    "short": -2,
    "int": -3,
    "long": -4,
    "bytes": b"\x01\x02\x03",
    "string": "ok",
    "ts": 1785585600000,
    "uuid": bytes(range(16)),
}


def decode(data: bytes, *, step: int | None = None) -> list[Message]:
    decoder = EventStreamDecoder()
    out: list[Message] = []
    chunks = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    for chunk in chunks:
        out.extend(decoder.feed(chunk).unwrap())
    assert decoder.finish() == Success(None)
    assert decoder.buffered == 0
    return out


def failure_of(data: bytes) -> EventStreamError:
    decoder = EventStreamDecoder()
    result = decoder.feed(data)
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, EventStreamError)
    return error


def frame(headers_block: bytes, payload: bytes = b"", *, total: int | None = None) -> bytes:
    """A frame with valid CRCs around arbitrary (possibly malformed) header bytes."""
    total = 16 + len(headers_block) + len(payload) if total is None else total
    prelude = struct.pack(">II", total, len(headers_block))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers_block + payload
    return body + struct.pack(">I", zlib.crc32(body))


def prelude_only(total: int, headers_length: int) -> bytes:
    head = struct.pack(">II", total, headers_length)
    return head + struct.pack(">I", zlib.crc32(head))


# ── vectors ────────────────────────────────────────────────────────────────────────────


def test_empty_message_vector_encodes_and_decodes() -> None:
    assert encode_message({}, b"") == EMPTY
    assert decode(EMPTY) == [Message({}, b"")]


def test_message_stop_vector_byte_for_byte_from_a_json_value() -> None:
    assert encode_event("messageStop", {"stopReason": "end_turn"}) == MESSAGE_STOP


def test_message_stop_vector_byte_for_byte_from_json_text() -> None:
    assert encode_event("messageStop", b'{"stopReason":"end_turn"}') == MESSAGE_STOP


def test_message_stop_vector_decodes_with_header_order_and_classification() -> None:
    [message] = decode(MESSAGE_STOP)
    assert list(message.headers.items()) == [
        (":event-type", "messageStop"),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ]
    assert message.payload == b'{"stopReason":"end_turn"}'
    assert message.message_type == "event"
    assert message.event_type == "messageStop"
    assert message.exception_type is None
    assert message.json() == Success({"stopReason": "end_turn"})


def test_message_stop_vector_lengths_and_crcs() -> None:
    total, headers_length, prelude_crc = struct.unpack(">III", MESSAGE_STOP[:12])
    assert (total, headers_length, prelude_crc) == (122, 81, 0xCA2C4665)
    assert struct.unpack(">I", MESSAGE_STOP[-4:]) == (0x5FBF09FC,)


def test_runtime_client_error_exception_vector() -> None:
    raw = encode_exception("runtimeClientError", {"message": "duplicate Ids"})
    assert len(raw) == 139
    assert struct.unpack(">III", raw[:12]) == (139, 96, 0xEEA63FB2)
    assert struct.unpack(">I", raw[-4:]) == (0x905AE109,)
    [message] = decode(raw)
    assert message.message_type == "exception"
    assert message.exception_type == "runtimeClientError"
    assert message.event_type is None
    assert message.json() == Success({"message": "duplicate Ids"})


def test_error_frame_carries_code_and_message_with_empty_payload() -> None:
    [message] = decode(encode_error("InternalFailure", "boom"))
    assert message.message_type == "error"
    assert (message.error_code, message.error_message) == ("InternalFailure", "boom")
    assert message.payload == b""


def test_all_ten_header_types_round_trip() -> None:
    [message] = decode(encode_message(ALL_TYPES, b"x"))
    assert dict(message.headers) == ALL_TYPES_DECODED
    assert list(message.headers) == list(ALL_TYPES_DECODED)


def test_all_ten_header_types_agree_with_botocore() -> None:
    from botocore.eventstream import EventStreamBuffer

    buffer = EventStreamBuffer()
    buffer.add_data(encode_message(ALL_TYPES, b"x"))
    [theirs] = list(buffer)
    assert theirs.headers == ALL_TYPES_DECODED


def test_missing_message_type_means_event() -> None:
    [message] = decode(encode_message({":event-type": "x"}, b"{}"))
    assert message.message_type == "event"
    assert message.error_code is None


# ── encoder choices ────────────────────────────────────────────────────────────────────


def test_int_infers_integer_then_long_when_it_does_not_fit_32_bits() -> None:
    small = encode_headers({"n": 2**31 - 1})
    big = encode_headers({"n": 2**31})
    assert small[2] == HeaderType.INTEGER and len(small) == 3 + 4
    assert big[2] == HeaderType.LONG and len(big) == 3 + 8
    assert dict(decode(encode_message({"n": 2**31}, b""))[0].headers) == {"n": 2**31}


def test_uuid_accepts_16_raw_bytes_with_explicit_type() -> None:
    raw = encode_headers([Header("u", bytes(range(16)), HeaderType.UUID)])
    assert raw == encode_headers({"u": uuid.UUID(bytes=bytes(range(16)))})


def test_mapping_and_sequence_headers_encode_alike() -> None:
    as_map = encode_message({"a": "1", "b": True}, b"p")
    assert as_map == encode_message([Header("a", "1"), Header("b", True)], b"p")


@pytest.mark.parametrize(
    "header",
    [
        Header("", "x"),
        Header("n" * 256, "x"),
        Header("b", 128, HeaderType.BYTE),
        Header("s", -(2**15) - 1, HeaderType.SHORT),
        Header("l", 2**63, HeaderType.LONG),
        Header("t", False, HeaderType.TRUE),
        Header("i", True, HeaderType.INTEGER),
        Header("s", b"x", HeaderType.STRING),
        Header("u", b"short", HeaderType.UUID),
        Header("big", "x" * 65536),
    ],
)
def test_encoder_rejects_values_the_format_cannot_carry(header: Header) -> None:
    with pytest.raises(ValueError):
        encode_message([header], b"")


def test_encoder_rejects_an_oversized_payload() -> None:
    with pytest.raises(ValueError, match="payload"):
        encode_message({}, bytes(MAX_PAYLOAD_LENGTH + 1))


def test_event_payload_is_compact_utf8_json() -> None:
    [message] = decode(encode_event("contentBlockDelta", {"delta": {"text": "héllo ✓"}, "i": 0}))
    assert message.payload == '{"delta":{"text":"héllo ✓"},"i":0}'.encode()


# ── chunking ───────────────────────────────────────────────────────────────────────────


def _stream() -> bytes:
    return b"".join(
        [
            MESSAGE_STOP,
            EMPTY,
            encode_message(ALL_TYPES, b"payload bytes"),
            encode_exception("runtimeClientError", {"message": "duplicate Ids"}),
            encode_event("contentBlockDelta", {"delta": {"text": "x" * 300}}),
            encode_error("code", "message"),
        ]
    )


def test_B30_split_at_every_byte_boundary_decodes_each_message_once() -> None:
    stream = _stream()
    whole = decode(stream)
    assert len(whole) == 6
    for cut in range(len(stream) + 1):
        decoder = EventStreamDecoder()
        first = decoder.feed(stream[:cut]).unwrap()
        second = decoder.feed(stream[cut:]).unwrap()
        assert list(first + second) == whole, cut
        assert decoder.finish() == Success(None)


@pytest.mark.parametrize("step", [1, 2, 3, 7, 12, 13, 100])
def test_fed_in_small_steps_decodes_the_same(step: int) -> None:
    stream = _stream()
    assert decode(stream, step=step) == decode(stream)


def test_buffered_counts_the_partial_message() -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(MESSAGE_STOP + MESSAGE_STOP[:50]).unwrap() == (decode(MESSAGE_STOP)[0],)
    assert decoder.buffered == 50
    assert decoder.feed(b"").unwrap() == ()
    assert len(decoder.feed(MESSAGE_STOP[50:]).unwrap()) == 1
    assert decoder.buffered == 0


def test_a_large_payload_fed_in_small_chunks_arrives_whole() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    raw = encode_message({":event-type": "chunk"}, payload)
    decoder = EventStreamDecoder()
    got: list[Message] = []
    for i in range(0, len(raw), 1000):
        got.extend(decoder.feed(raw[i : i + 1000]).unwrap())
    assert [m.payload for m in got] == [payload]


def test_decoded_headers_are_read_only() -> None:
    [message] = decode(MESSAGE_STOP)
    with pytest.raises(TypeError):
        message.headers[":event-type"] = "x"  # type: ignore[index]


# ── failures ───────────────────────────────────────────────────────────────────────────


def test_bad_prelude_crc_fails_at_once() -> None:
    bad = bytearray(MESSAGE_STOP)
    bad[8] ^= 0x01
    error = failure_of(bytes(bad[:12]))
    assert error.reason == "prelude_crc"
    assert "prelude CRC" in error.detail and error.offset == 0


def test_bad_message_crc_fails() -> None:
    bad = bytearray(MESSAGE_STOP)
    bad[-1] ^= 0x80
    decoder = EventStreamDecoder()
    assert len(decoder.feed(MESSAGE_STOP).unwrap()) == 1
    result = decoder.feed(bytes(bad))
    assert isinstance(result, Failure)
    error = result.failure()
    assert error.reason == "message_crc"
    assert error.offset == len(MESSAGE_STOP)
    assert "0x5fbf097c" in error.detail


def test_a_flipped_payload_bit_fails_the_message_crc() -> None:
    bad = bytearray(MESSAGE_STOP)
    bad[100] ^= 0x04
    assert failure_of(bytes(bad)).reason == "message_crc"


def test_good_messages_before_a_failure_come_first_then_the_failure() -> None:
    # As botocore yields the sound messages before it raises: nothing good is lost.
    bad = bytearray(MESSAGE_STOP)
    bad[-1] ^= 1
    decoder = EventStreamDecoder()
    assert decoder.feed(EMPTY + MESSAGE_STOP + bytes(bad) + EMPTY).unwrap() == (
        Message({}, b""),
        decode(MESSAGE_STOP)[0],
    )
    assert decoder.error is not None and decoder.error.reason == "message_crc"
    assert decoder.feed(b"") == Failure(decoder.error)
    assert decoder.finish() == Failure(decoder.error)


def test_total_length_below_16_is_too_short() -> None:
    error = failure_of(prelude_only(12, 0))
    assert error.reason == "too_short"
    assert "12" in error.detail


def test_oversized_headers_fail_from_the_prelude_alone() -> None:
    error = failure_of(prelude_only(MAX_HEADERS_LENGTH + 17, MAX_HEADERS_LENGTH + 1))
    assert error.reason == "headers_too_large"
    assert str(MAX_HEADERS_LENGTH + 1) in error.detail


def test_oversized_payload_fails_from_the_prelude_alone() -> None:
    error = failure_of(prelude_only(16 + MAX_PAYLOAD_LENGTH + 1, 0))
    assert error.reason == "payload_too_large"
    assert str(MAX_PAYLOAD_LENGTH + 1) in error.detail


def test_headers_length_beyond_the_message_is_bad_header() -> None:
    error = failure_of(prelude_only(20, 10))
    assert error.reason == "bad_header"
    assert "does not fit" in error.detail


@pytest.mark.parametrize(
    ("block", "detail"),
    [
        (b"\x01a\x0a", "unknown value type 10"),
        (b"\x05ab", "overruns"),
        (b"\x01a\x07\x00\x09xy", "overruns"),
        (b"\x01a\x05\x00\x00", "overruns"),
        (b"\x01a\x09" + bytes(15), "uuid overruns"),
        (b"\x01a\x07", "overruns"),
        (b"\x01\xff\x00", "not UTF-8"),
        (b"\x01a\x07\x00\x01\xff", "not UTF-8"),
    ],
)
def test_malformed_headers_are_bad_header(block: bytes, detail: str) -> None:
    error = failure_of(frame(block))
    assert error.reason == "bad_header"
    assert detail in error.detail


def test_an_empty_header_name_decodes_as_botocore_does() -> None:
    [message] = decode(frame(b"\x00\x00"))
    assert dict(message.headers) == {"": True}


def test_duplicate_header_is_an_error() -> None:
    raw = encode_message([Header(":event-type", "a"), Header(":event-type", "b")], b"")
    error = failure_of(raw)
    assert error.reason == "duplicate_header"
    assert "':event-type'" in error.detail


def test_decoder_stays_failed_with_the_same_error() -> None:
    decoder = EventStreamDecoder()
    first = decoder.feed(prelude_only(12, 0))
    assert isinstance(first, Failure)
    assert decoder.feed(MESSAGE_STOP) == first
    assert decoder.finish() == first
    assert decoder.error == first.failure()


@pytest.mark.parametrize("cut", [1, 11, 12, 50, 121])
def test_finish_inside_a_message_is_truncated(cut: int) -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(MESSAGE_STOP + MESSAGE_STOP[:cut]).unwrap() != ()
    result = decoder.finish()
    assert isinstance(result, Failure)
    error = result.failure()
    assert error.reason == "truncated"
    assert error.offset == len(MESSAGE_STOP)
    assert f"{cut}" in error.detail
    assert decoder.finish() == result


def test_finish_on_a_clean_boundary_succeeds_and_later_feeds_are_a_bug() -> None:
    decoder = EventStreamDecoder()
    decoder.feed(MESSAGE_STOP)
    assert decoder.finish() == Success(None)
    with pytest.raises(ValueError, match="after finish"):
        decoder.feed(MESSAGE_STOP)


def test_bad_json_payload_is_a_typed_failure() -> None:
    [message] = decode(encode_exception("x", b"not json"))
    result = message.json()
    assert isinstance(result, Failure)
    assert result.failure().reason == "bad_json"
    assert "not json" in result.failure().detail


def test_invalid_utf8_json_payload_is_bad_json() -> None:
    [message] = decode(encode_message({}, b'"\xff"'))
    result = message.json()
    assert isinstance(result, Failure) and result.failure().reason == "bad_json"
