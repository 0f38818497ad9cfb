"""A sans-IO Server-Sent Events decoder (WHATWG "event stream interpretation").

Feed it the response body in chunks of any size, get ``SSEMessage`` values back — in the
style of h11: ``SSEDecoder().feed(data) -> list[SSEMessage]`` and ``close()`` at end of
stream. It handles CR, LF and CRLF line endings (a chunk may end between the CR and the
LF), ``:`` comment lines, fields without a colon, the single optional space after the
colon, multi-line ``data`` joined by ``"\\n"``, a leading UTF-8 BOM, and UTF-8 characters
split across chunks (invalid bytes decode to U+FFFD, as the spec says).

It is not an HTTP client and knows nothing about reconnection: it only tracks the last
event id and the server's ``retry`` hint so the caller can decide what to do with them.
"""

from __future__ import annotations

import codecs
import re

import attrs

_LINE_END = re.compile(r"\r\n|\r|\n")


@attrs.frozen
class SSEMessage:
    """One dispatched event.

    ``event`` is the event type (``"message"`` when the block named none). ``id`` is the
    stream's last event id at dispatch time — ids persist across events, per the spec.
    ``retry`` is the reconnection time (ms) set *in this event's block*, or None.
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


@attrs.frozen
class SSEDiscarded:
    """What ``close`` threw away: an event block the stream ended in the middle of.

    The spec discards it; this value only lets the caller tell a truncated stream from a
    clean one (and say what was lost when it reports the error).
    """

    event: str
    data: str
    partial_line: str


class SSEDecoder:
    """Incremental SSE decoder. Not thread-safe; one instance per stream."""

    __slots__ = (
        "_bom_checked",
        "_closed",
        "_data",
        "_event",
        "_has_fields",
        "_last_id",
        "_partial",
        "_retry",
        "_skip_lf",
        "_utf8",
        "retry",
    )

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._bom_checked = False
        self._partial: list[str] = []
        # A chunk that ends in CR has already ended its line; an LF opening the next
        # chunk belongs to that CR and must not end a second (blank) line.
        self._skip_lf = False
        self._event = ""
        self._data: list[str] = []
        self._retry: int | None = None
        self._has_fields = False
        self._last_id = ""
        self._closed = False
        self.retry: int | None = None
        """The latest reconnection time (ms) the server asked for, across all events."""

    @property
    def last_event_id(self) -> str:
        """The id to send as ``Last-Event-ID`` when reconnecting ("" when none)."""
        return self._last_id

    @property
    def pending(self) -> bool:
        """True when bytes of an undispatched event (or an unterminated line) are held."""
        return self._has_fields or bool(self._partial) or bool(self._utf8.getstate()[0])

    def feed(self, data: bytes) -> list[SSEMessage]:
        """Decode ``data`` (any slice of the stream) and return the events it completed."""
        if self._closed:
            raise ValueError("SSEDecoder.feed called after close()")
        return self._feed_text(self._utf8.decode(data, final=False))

    def close(self) -> list[SSEDiscarded]:
        """End of stream. Dispatches nothing (the spec discards an unfinished event).

        Returns the discarded block, if any, so a truncated stream can be reported.
        """
        if self._closed:
            return []
        self._closed = True
        tail = self._utf8.decode(b"", final=True)
        if tail:
            # Only U+FFFD can come out here (an incomplete sequence); it belongs to the
            # unterminated line and is discarded with it.
            self._partial.append(tail)
        partial_line = "".join(self._partial)
        self._partial = []
        if not self._has_fields and not partial_line:
            return []
        discarded = SSEDiscarded(self._event, "\n".join(self._data), partial_line)
        self._reset_block()
        return [discarded]

    def _feed_text(self, text: str) -> list[SSEMessage]:
        if not text:
            return []
        if not self._bom_checked:
            self._bom_checked = True
            if text[0] == "\ufeff":
                text = text[1:]
        pos = 0
        if self._skip_lf:
            self._skip_lf = False
            if text.startswith("\n"):
                pos = 1
        out: list[SSEMessage] = []
        for match in _LINE_END.finditer(text, pos):
            start, end = match.span()
            if self._partial:
                self._partial.append(text[pos:start])
                line = "".join(self._partial)
                self._partial = []
            else:
                line = text[pos:start]
            pos = end
            if end == len(text) and text[start] == "\r":
                self._skip_lf = True
            message = self._process_line(line)
            if message is not None:
                out.append(message)
        if pos < len(text):
            self._partial.append(text[pos:])
        return out

    def _process_line(self, line: str) -> SSEMessage | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            # The spec ignores an id containing NULL (it could not be sent back as a header).
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
                self.retry = self._retry
        else:
            return None
        self._has_fields = True
        return None

    def _dispatch(self) -> SSEMessage | None:
        if not self._data:
            # An empty data buffer dispatches nothing (spec step 1), only clears the block.
            self._reset_block()
            return None
        message = SSEMessage(self._event or "message", "\n".join(self._data), self._last_id, self._retry)
        self._reset_block()
        return message

    def _reset_block(self) -> None:
        self._event = ""
        self._data = []
        self._retry = None
        self._has_fields = False


def encode_message(message: SSEMessage, *, line_end: str = "\n") -> bytes:
    """Encode one message as an SSE block (for emulators and tests).

    ``id`` is written whenever it is non-empty; since ids persist in the decoder, a
    round trip reproduces ``id`` only when every message carries its own (or the same).
    """
    lines: list[str] = []
    if message.event != "message":
        lines.append(f"event: {message.event}")
    if message.id:
        lines.append(f"id: {message.id}")
    if message.retry is not None:
        lines.append(f"retry: {message.retry}")
    lines.extend(f"data: {part}" for part in _split_lines(message.data))
    lines.append("")
    return (line_end.join(lines) + line_end).encode("utf-8")


def _split_lines(data: str) -> list[str]:
    # Any of CR, LF, CRLF inside data would end the line on the wire; the decoder joins
    # data lines with LF, so split on all three here.
    return _LINE_END.split(data)
