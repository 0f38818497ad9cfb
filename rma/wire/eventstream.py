"""A sans-IO codec for AWS event-stream framing (``application/vnd.amazon.eventstream``).

The binary framing of Bedrock AgentCore's ``InvokeHarness`` and command streams (wire
reference §6): each message is a 12-byte prelude (total length, headers length, prelude
CRC-32), typed headers, a payload and a trailing CRC-32 over everything before it.

- ``EventStreamDecoder``: h11/wsproto style. ``feed(bytes)`` returns every whole message
  now available, ``finish()`` says whether the body ended cleanly. Malformed input never
  raises: it comes back as ``Failure(EventStreamError)`` and the decoder stays failed,
  because once a prelude or CRC is wrong the frame boundaries can no longer be trusted.
  Bad CRCs fail (as botocore raises), where the Elixir reference silently drops the frame.
- ``encode_message`` / ``encode_event`` / ``encode_exception`` / ``encode_error``: the
  other direction, for the loopback emulator and the tests.

It is not a client and does not classify events into the service's union (dropping
unknown ``:event-type`` values, raising on exception frames): that is the AgentCore
codec's job. Decoded header values are what botocore's ``EventStreamBuffer`` yields, so the
two compare equal: TRUE/FALSE → bool, BYTE/SHORT/INTEGER/LONG → int, TIMESTAMP → int
(milliseconds since the epoch), BYTE_ARRAY → bytes, STRING → str, UUID → the 16 raw bytes.
(The core may not import ``uuid``; a ``uuid.UUID`` is still accepted when encoding, through
its ``bytes`` attribute.)
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Literal, Protocol, TypeAlias, runtime_checkable
from zlib import crc32

import attrs
from returns.result import Failure, Result, Success

from rma.vocabulary import JSON

MAX_HEADERS_LENGTH = 128 * 1024
"""Largest headers section botocore accepts (bytes)."""
MAX_PAYLOAD_LENGTH = 24 * 1024 * 1024
"""Largest payload botocore accepts (bytes)."""
PRELUDE_LENGTH = 12
MIN_MESSAGE_LENGTH = 16
"""A prelude plus the message CRC: an empty message."""

_PRELUDE = struct.Struct(">III")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class HeaderType(enum.IntEnum):
    """The header value type byte."""

    TRUE = 0
    FALSE = 1
    BYTE = 2
    SHORT = 3
    INTEGER = 4
    LONG = 5
    BYTE_ARRAY = 6
    STRING = 7
    TIMESTAMP = 8
    UUID = 9


@runtime_checkable
class UUIDLike(Protocol):
    """Anything with the 16 raw bytes of a UUID (``uuid.UUID`` is one)."""

    @property
    def bytes(self) -> bytes: ...


HeaderValue: TypeAlias = bool | int | bytes | str | UUIDLike
"""A header value. Decoding yields only bool, int, bytes or str (see the module docstring)."""

_INT_RANGES: dict[HeaderType, tuple[int, int, struct.Struct]] = {
    HeaderType.BYTE: (-(2**7), 2**7 - 1, _I8),
    HeaderType.SHORT: (-(2**15), 2**15 - 1, _I16),
    HeaderType.INTEGER: (-(2**31), 2**31 - 1, _I32),
    HeaderType.LONG: (-(2**63), 2**63 - 1, _I64),
    HeaderType.TIMESTAMP: (-(2**63), 2**63 - 1, _I64),
}


@attrs.frozen
class Header:
    """One header to encode. ``type`` None infers it from the value.

    Inference: bool → TRUE/FALSE; int → INTEGER when it fits 32 bits, else LONG (decoding
    yields a plain int either way); str → STRING; bytes → BYTE_ARRAY; ``uuid.UUID`` (any
    object with 16 ``bytes``) → UUID. BYTE, SHORT and TIMESTAMP must be asked for; a UUID
    may also be given as 16 bytes with ``type=HeaderType.UUID``.
    """

    name: str
    value: HeaderValue
    type: HeaderType | None = None


# ── encoding ────────────────────────────────────────────────────────────────────────────


def _infer_type(value: HeaderValue) -> HeaderType:
    if isinstance(value, bool):
        return HeaderType.TRUE if value else HeaderType.FALSE
    if isinstance(value, int):
        return HeaderType.INTEGER if -(2**31) <= value < 2**31 else HeaderType.LONG
    if isinstance(value, str):
        return HeaderType.STRING
    if isinstance(value, bytes | bytearray | memoryview):
        return HeaderType.BYTE_ARRAY
    if isinstance(value, UUIDLike):
        return HeaderType.UUID
    raise TypeError(f"cannot infer an event-stream header type for {type(value).__name__}")


def _encode_header(header: Header) -> bytes:
    name = header.name.encode("utf-8")
    if not 1 <= len(name) <= 255:
        raise ValueError(f"header name must be 1-255 UTF-8 bytes, got {len(name)}: {header.name!r}")
    value = header.value
    kind = _infer_type(value) if header.type is None else HeaderType(header.type)
    head = bytes((len(name),)) + name + bytes((kind,))
    if kind in (HeaderType.TRUE, HeaderType.FALSE):
        if value is not (kind is HeaderType.TRUE):
            raise ValueError(
                f"header {header.name!r}: type {kind.name} needs value {kind is HeaderType.TRUE}"
            )
        return head
    if kind in _INT_RANGES:
        lo, hi, packer = _INT_RANGES[kind]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(
                f"header {header.name!r}: {kind.name} needs an int in [{lo}, {hi}], got {value!r}"
            )
        return head + packer.pack(value)
    if kind is HeaderType.UUID:
        raw = value if isinstance(value, bytes | bytearray) else getattr(value, "bytes", None)
        if not isinstance(raw, bytes | bytearray) or len(raw) != 16:
            raise ValueError(f"header {header.name!r}: UUID needs 16 bytes or a uuid.UUID, got {value!r}")
        return head + bytes(raw)
    if kind is HeaderType.STRING:
        if not isinstance(value, str):
            raise ValueError(f"header {header.name!r}: STRING needs a str, got {type(value).__name__}")
        raw = value.encode("utf-8")
    else:  # BYTE_ARRAY
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ValueError(f"header {header.name!r}: BYTE_ARRAY needs bytes, got {type(value).__name__}")
        raw = bytes(value)
    if len(raw) > 0xFFFF:
        raise ValueError(f"header {header.name!r}: value of {len(raw)} bytes exceeds 65535")
    return head + _U16.pack(len(raw)) + raw


def encode_headers(headers: Sequence[Header] | Mapping[str, HeaderValue]) -> bytes:
    """The headers section alone, in the given order.

    Duplicate names are encoded as given (the decoder rejects them): the tests need such
    frames, and the wire format itself does not forbid writing them.
    """
    items = [Header(k, v) for k, v in headers.items()] if isinstance(headers, Mapping) else headers
    return b"".join(_encode_header(h) for h in items)


def encode_message(headers: Sequence[Header] | Mapping[str, HeaderValue], payload: bytes) -> bytes:
    """One whole message: prelude, headers, payload, message CRC.

    Raises ``ValueError`` for values the format cannot carry or over botocore's limits —
    building a frame is the caller's own doing, not untrusted input.
    """
    head = encode_headers(headers)
    if len(head) > MAX_HEADERS_LENGTH:
        raise ValueError(f"headers of {len(head)} bytes exceed {MAX_HEADERS_LENGTH}")
    if len(payload) > MAX_PAYLOAD_LENGTH:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_LENGTH}")
    total = PRELUDE_LENGTH + len(head) + len(payload) + 4
    prelude = _U32.pack(total) + _U32.pack(len(head))
    prelude_crc = crc32(prelude)
    body = _U32.pack(prelude_crc) + head + bytes(payload)
    return prelude + body + _U32.pack(crc32(body, prelude_crc))


def _json_payload(payload: JSON | bytes) -> bytes:
    # Bytes are taken as already-encoded JSON text, so a recorded frame can be rebuilt
    # byte for byte; anything else is serialised compactly, as AWS services send it.
    if isinstance(payload, bytes | bytearray):
        return bytes(payload)
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def encode_event(event_type: str, payload: JSON | bytes) -> bytes:
    """An ``event`` frame: ``:event-type``, ``:content-type: application/json``, ``:message-type``.

    ``payload`` is a JSON value (encoded compactly) or JSON text as bytes (used verbatim).
    """
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, _json_payload(payload))


def encode_exception(exception_type: str, payload: JSON | bytes) -> bytes:
    """An ``exception`` frame (a modeled error such as ``runtimeClientError``)."""
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, _json_payload(payload))


def encode_error(code: str, message: str) -> bytes:
    """An ``error`` frame: ``:error-code``, ``:error-message``, empty payload."""
    headers = {":error-code": code, ":error-message": message, ":message-type": "error"}
    return encode_message(headers, b"")


# ── values ──────────────────────────────────────────────────────────────────────────────

ErrorReason = Literal[
    "prelude_crc",
    "message_crc",
    "too_short",
    "headers_too_large",
    "payload_too_large",
    "bad_header",
    "duplicate_header",
    "truncated",
    "bad_json",
]


@attrs.frozen
class EventStreamError:
    """Why a stream (or one payload) could not be decoded. A value, not an exception.

    ``offset`` is where the offending message starts in the stream (bytes fed before it),
    or None for a payload's ``bad_json``.
    """

    reason: ErrorReason
    detail: str
    offset: int | None = None


@attrs.frozen
class Message:
    """One decoded message: its headers (in wire order) and raw payload.

    Decoded headers are a read-only mapping, shared by the messages of a stream that carry
    the same header bytes.
    """

    headers: Mapping[str, HeaderValue]
    payload: bytes

    @property
    def message_type(self) -> str:
        """``:message-type`` — ``event``, ``exception`` or ``error``; absent means ``event``."""
        value = self.headers.get(":message-type", "event")
        return value if isinstance(value, str) else "event"

    @property
    def event_type(self) -> str | None:
        return self._str_header(":event-type")

    @property
    def exception_type(self) -> str | None:
        return self._str_header(":exception-type")

    @property
    def error_code(self) -> str | None:
        return self._str_header(":error-code")

    @property
    def error_message(self) -> str | None:
        return self._str_header(":error-message")

    @property
    def content_type(self) -> str | None:
        return self._str_header(":content-type")

    def _str_header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return value if isinstance(value, str) else None

    def json(self) -> Result[JSON, EventStreamError]:
        """The payload decoded as JSON, or ``Failure`` with reason ``bad_json``."""
        try:
            return Success(json.loads(self.payload))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError
            head = self.payload[:64]
            return Failure(EventStreamError("bad_json", f"payload is not JSON ({exc}): {head!r}"))


# ── decoding ────────────────────────────────────────────────────────────────────────────

_Headers = Mapping[str, HeaderValue]

# Streams repeat a handful of header blocks (``:event-type contentBlockDelta`` …) thousands
# of times; parsing each block once and sharing the read-only mapping halves the cost of a
# small frame. Bounded so that a hostile stream cannot grow it without limit.
_CACHE_MAX_ENTRIES = 256
_CACHE_MAX_BLOCK = 512


def _parse_headers(block: bytes) -> _Headers | tuple[ErrorReason, str]:
    """Parse a headers section; a (reason, detail) pair when it is malformed."""
    headers: dict[str, HeaderValue] = {}
    end = len(block)
    i = 0
    while i < end:
        name_len = block[i]
        i += 1
        if i + name_len + 1 > end:
            return ("bad_header", f"header name overruns the {end}-byte headers section")
        # A zero-length name breaks the spec's 1-255, but botocore decodes it as "" and so do
        # we: a frame botocore decodes soundly must not fail here.
        try:
            name = block[i : i + name_len].decode("utf-8")
        except UnicodeDecodeError:
            return ("bad_header", f"header name is not UTF-8: {block[i : i + name_len]!r}")
        i += name_len
        kind = block[i]
        i += 1
        value: HeaderValue
        if kind == 7 or kind == 6:
            if i + 2 > end:
                return ("bad_header", f"header {name!r}: length overruns the headers section")
            (size,) = _U16.unpack_from(block, i)
            i += 2
            if i + size > end:
                return ("bad_header", f"header {name!r}: {size}-byte value overruns the headers")
            raw = block[i : i + size]
            i += size
            if kind == 6:
                value = raw
            else:
                try:
                    value = raw.decode("utf-8")
                except UnicodeDecodeError:
                    return ("bad_header", f"header {name!r}: string value is not UTF-8")
        elif kind <= 1:
            value = kind == 0
        elif kind <= 5 or kind == 8:
            packer = _I8 if kind == 2 else _I16 if kind == 3 else _I32 if kind == 4 else _I64
            if i + packer.size > end:
                return ("bad_header", f"header {name!r}: value overruns the headers section")
            (value,) = packer.unpack_from(block, i)
            i += packer.size
        elif kind == 9:
            if i + 16 > end:
                return ("bad_header", f"header {name!r}: uuid overruns the headers section")
            value = block[i : i + 16]
            i += 16
        else:
            return ("bad_header", f"header {name!r}: unknown value type {kind}")
        if name in headers:
            return ("duplicate_header", f"header {name!r} appears twice")
        headers[name] = value
    return MappingProxyType(headers)


_NOTHING: Result[tuple[Message, ...], EventStreamError] = Success(())


class EventStreamDecoder:
    """Incremental event-stream decoder. Not thread-safe; one instance per response body."""

    __slots__ = ("_buf", "_cache", "_consumed", "_error", "_finished", "_need")

    def __init__(self) -> None:
        self._buf = bytearray()
        # Stream offset of ``_buf[0]``: only for error details.
        self._consumed = 0
        # Length of the message at the head of the buffer once its prelude is verified.
        self._need = 0
        self._error: EventStreamError | None = None
        self._finished = False
        self._cache: dict[bytes, _Headers] = {}

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet make a whole message."""
        return len(self._buf)

    @property
    def error(self) -> EventStreamError | None:
        """The error the decoder failed with, if it has."""
        return self._error

    def feed(self, data: bytes) -> Result[tuple[Message, ...], EventStreamError]:
        """Add ``data`` (any slice of the body); return the messages it completed.

        When ``data`` completes some good messages and then fails, the good ones come back
        now and the failure on the next ``feed`` or ``finish`` — so call ``finish`` at the
        end of the body.
        """
        if self._error is not None:
            return Failure(self._error)
        if self._finished:
            raise ValueError("EventStreamDecoder.feed called after finish()")
        buf = self._buf
        buf += data
        size = len(buf)
        need = self._need
        if need > size or (not need and size < PRELUDE_LENGTH):
            return _NOTHING
        out: list[Message] = []
        pos = 0
        failure: EventStreamError | None = None
        cache = self._cache
        unpack_prelude = _PRELUDE.unpack_from
        unpack_u32 = _U32.unpack_from
        view = memoryview(buf)
        try:
            while size - pos >= PRELUDE_LENGTH:
                total, headers_length, prelude_crc = unpack_prelude(buf, pos)
                if not need:
                    if (
                        crc32(view[pos : pos + 8]) != prelude_crc
                        or total < MIN_MESSAGE_LENGTH + headers_length
                        or headers_length > MAX_HEADERS_LENGTH
                        or total - headers_length - MIN_MESSAGE_LENGTH > MAX_PAYLOAD_LENGTH
                    ):
                        failure = self._bad_prelude(view, pos)
                        break
                    # Verified once: a big body arriving in small chunks is not re-checked.
                    need = total
                end = pos + total
                if end > size:
                    break
                payload_end = end - 4
                (message_crc,) = unpack_u32(buf, payload_end)
                if crc32(view[pos + 8 : payload_end], prelude_crc) != message_crc:
                    failure = self._bad_message_crc(view, pos, end, message_crc)
                    break
                headers_end = pos + PRELUDE_LENGTH + headers_length
                block = bytes(view[pos + PRELUDE_LENGTH : headers_end])
                headers = cache.get(block)
                if headers is None:
                    parsed = _parse_headers(block)
                    if isinstance(parsed, tuple):
                        failure = EventStreamError(parsed[0], parsed[1], self._consumed + pos)
                        break
                    headers = parsed
                    if headers_length <= _CACHE_MAX_BLOCK:
                        if len(cache) >= _CACHE_MAX_ENTRIES:
                            cache.clear()
                        cache[block] = headers
                out.append(Message(headers, bytes(view[headers_end:payload_end])))
                pos = end
                need = 0
        finally:
            view.release()
        self._need = need
        if pos:
            # CPython drops a bytearray's prefix by moving its start, without copying.
            del buf[:pos]
            self._consumed += pos
        if failure is not None:
            self._error = failure
            if not out:
                return Failure(failure)
            # The messages before the bad one are sound: hand them over now (botocore yields
            # them before it raises) and report the failure on the next feed or finish.
        return Success(tuple(out))

    def finish(self) -> Result[None, EventStreamError]:
        """End of body. Leftover bytes of a partial message fail with ``truncated``."""
        if self._error is not None:
            return Failure(self._error)
        self._finished = True
        left = len(self._buf)
        if not left:
            return Success(None)
        if self._need:
            where = f"{left} of a {self._need}-byte message"
        else:
            where = f"{left} byte(s) of a {PRELUDE_LENGTH}-byte prelude"
        self._error = EventStreamError(
            "truncated", f"body ended inside a message: {where} received", self._consumed
        )
        return Failure(self._error)

    def _bad_prelude(self, view: memoryview, pos: int) -> EventStreamError:
        """Why the prelude at ``pos`` was rejected (the checks are inlined in ``feed``)."""
        total, headers_length, prelude_crc = _PRELUDE.unpack_from(view, pos)
        offset = self._consumed + pos
        actual = crc32(view[pos : pos + 8])
        if actual != prelude_crc:
            return EventStreamError(
                "prelude_crc",
                f"prelude CRC {prelude_crc:#010x} != computed {actual:#010x} "
                f"(total_length {total}, headers_length {headers_length}); frame boundaries lost",
                offset,
            )
        if total < MIN_MESSAGE_LENGTH:
            return EventStreamError(
                "too_short", f"total_length {total} is below the {MIN_MESSAGE_LENGTH}-byte minimum", offset
            )
        if headers_length > MAX_HEADERS_LENGTH:
            return EventStreamError(
                "headers_too_large",
                f"headers_length {headers_length} exceeds the maximum of {MAX_HEADERS_LENGTH}",
                offset,
            )
        payload_length = total - headers_length - MIN_MESSAGE_LENGTH
        if payload_length > MAX_PAYLOAD_LENGTH:
            return EventStreamError(
                "payload_too_large",
                f"payload length {payload_length} exceeds the maximum of {MAX_PAYLOAD_LENGTH}",
                offset,
            )
        return EventStreamError(
            "bad_header", f"headers_length {headers_length} does not fit in a {total}-byte message", offset
        )

    def _bad_message_crc(self, view: memoryview, pos: int, end: int, expected: int) -> EventStreamError:
        actual = crc32(view[pos : end - 4])
        return EventStreamError(
            "message_crc",
            f"message CRC {expected:#010x} != computed {actual:#010x} ({end - pos}-byte message)",
            self._consumed + pos,
        )
