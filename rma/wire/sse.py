"""A sans-IO Server-Sent Events decoder (WHATWG "event stream interpretation").

Feed it the response body in chunks of any size, get ``SSEMessage`` values back — in the
style of h11: ``SSEDecoder().feed(data) -> list[SSEMessage]`` and ``close()`` at end of
stream. It handles CR, LF and CRLF line endings (a chunk may end between the CR and the
LF), ``:`` comment lines, fields without a colon, the single optional space after the
colon, multi-line ``data`` joined by ``"\\n"``, a leading UTF-8 BOM, and UTF-8 characters
split across chunks (invalid bytes decode to U+FFFD, as the spec says).

It is not an HTTP client and knows nothing about reconnection: it only tracks the last
event id and the server's ``retry`` hint so the caller can decide what to do with them.
The last event id changes only when a block ends (a blank line), as the spec's "dispatch
the event" step sets it: an ``id:`` line of a block the stream never finished is not the
id of anything the caller received, so a reconnect must not claim it.
"""

from __future__ import annotations

import re
from codecs import utf_8_decode

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
        "_id_buffer",
        "_last_id",
        "_partial",
        "_retry",
        "_skip_lf",
        "_undecoded",
        "retry",
    )

    def __init__(self) -> None:
        # The bytes of a UTF-8 sequence split across chunks, kept for the next chunk.
        self._undecoded = b""
        self._bom_checked = False
        self._partial: list[str] = []
        # A chunk that ends in CR has already ended its line; an LF opening the next
        # chunk belongs to that CR and must not end a second (blank) line.
        self._skip_lf = False
        self._event = ""
        self._data: list[str] = []
        self._retry: int | None = None
        self._has_fields = False
        # The spec's "last event ID buffer": set by an id line, copied to the last event id
        # (and never reset) when a blank line ends the block.
        self._id_buffer = ""
        self._last_id = ""
        self._closed = False
        self.retry: int | None = None
        """The latest reconnection time (ms) the server asked for, across all events."""

    @property
    def last_event_id(self) -> str:
        """The id to send as ``Last-Event-ID`` when reconnecting ("" when none).

        It changes only at a blank line: an ``id:`` of a block still open (or one ``close``
        discarded) does not count until that block ends.
        """
        return self._last_id

    @property
    def pending(self) -> bool:
        """True when bytes of an undispatched event (or an unterminated line) are held."""
        return self._has_fields or bool(self._partial) or bool(self._undecoded)

    def feed(self, data: bytes) -> list[SSEMessage]:
        """Decode ``data`` (any slice of the stream) and return the events it completed."""
        if self._closed:
            raise ValueError("SSEDecoder.feed called after close()")
        if self._undecoded:
            data = self._undecoded + data
        # What ``codecs``' incremental UTF-8 decoder does, minus its Python-level wrapper:
        # an incomplete sequence at the end stays undecoded, invalid bytes become U+FFFD.
        text, used = utf_8_decode(data, "replace", False)
        self._undecoded = data[used:]
        return self._feed_text(text)

    def close(self) -> list[SSEDiscarded]:
        """End of stream. Dispatches nothing (the spec discards an unfinished event).

        Returns the discarded block, if any, so a truncated stream can be reported.
        """
        if self._closed:
            return []
        self._closed = True
        tail = utf_8_decode(self._undecoded, "replace", True)[0]
        self._undecoded = b""
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
        self._id_buffer = self._last_id
        return [discarded]

    def _feed_text(self, text: str) -> list[SSEMessage]:
        if not text:
            return []
        if not self._bom_checked:
            self._bom_checked = True
            if text[0] == "\ufeff":
                text = text[1:]
        if self._skip_lf:
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        if "\r" in text:
            # A CR ending the text has ended its line; an LF opening the next text is its pair.
            self._skip_lf = text.endswith("\r")
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        # str.split runs in C; a regex scan over long data lines costs several times more.
        lines = text.split("\n")
        rest = lines.pop()  # after the last line end: the start of an unterminated line
        out: list[SSEMessage] = []
        if lines:
            if self._partial:
                self._partial.append(lines[0])
                lines[0] = "".join(self._partial)
                self._partial = []
            self._process_lines(lines, out)
        if rest:
            self._partial.append(rest)
        return out

    def _process_lines(self, lines: list[str], out: list[SSEMessage]) -> None:
        data = self._data
        for line in lines:
            if not line:
                # Dispatch step 1: the block's id (or the one it inherited) becomes the last
                # event id, whether or not the block carried data.
                self._last_id = self._id_buffer
                if data:
                    joined = "\n".join(data)
                    out.append(SSEMessage(self._event or "message", joined, self._last_id, self._retry))
                # An empty data buffer dispatches nothing (spec step 1), only clears the block.
                self._reset_block()
                data = self._data
            elif line.startswith("data:"):  # the hot path: one slice, no partition
                data.append(line[6:] if line.startswith(" ", 5) else line[5:])
                self._has_fields = True
            elif line[0] != ":":  # ":" starts a comment
                self._process_field(line)

    def _process_field(self, line: str) -> None:
        """A non-empty, non-comment line other than ``data:…``."""
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":  # "data" with no colon: an empty data line
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            # The spec ignores an id containing NULL (it could not be sent back as a header).
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
                self.retry = self._retry
        else:
            return
        self._has_fields = True

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
