"""The AgentCore emulator's 200 event stream: chunked frames, and where stream faults happen.

``_Stream`` writes one event-stream frame per HTTP chunk, fires the armed stream faults at
their frame (drop, truncate, bad CRC, exception frame, stall), ends early when the client
goes away or the emulator closes, and runs a hook just before the client can see the end.
Not what goes in it (``invoke``, ``commands``).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rma.wire.eventstream import encode_exception
from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import (
    EVENT_STREAM,
    SESSION_HEADER,
    _client_gone,
    _StreamEnded,
)
from rma_shell.testing.agentcore.faults import AgentCoreFault
from rma_shell.testing.agentcore.frames import Frame

if TYPE_CHECKING:
    from rma_shell.testing.agentcore.state import _Core


class _Stream:
    def __init__(
        self,
        emulator: _Core,
        h: LoopbackHandler,
        faults: Sequence[AgentCoreFault],
        filler: Frame,
        cut: threading.Event | None = None,
    ):
        self.emulator = emulator
        self.cut = cut
        """Set when ``StopRuntimeSession`` stops the session: the stream is cut there."""
        self.h = h
        self.faults = sorted(faults, key=lambda f: f.after)
        self.filler = filler
        self.sent = 0
        self.faulted = False
        self.kept = False
        """A fault with ``kept``: the harness finishes the turn and keeps it, cut stream or not."""
        self.muted = False
        """The connection was cut by a kept fault: the turn plays on, unwritten."""
        self.before_end: Callable[[], None] | None = None

    def _ending(self) -> None:
        hook, self.before_end = self.before_end, None
        if hook is not None:
            hook()

    def begin(self, request_id: str, session_id: str) -> None:
        h = self.h
        try:
            h.send_response(200)
            h.send_header("Content-Type", EVENT_STREAM)
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("x-amzn-RequestId", request_id)
            h.send_header(SESSION_HEADER, session_id)
            h.end_headers()
        except OSError:
            h.close_connection = True
            raise _StreamEnded from None

    def _write(self, data: bytes) -> None:
        if self.muted:
            return
        try:
            self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except OSError:
            self.h.close_connection = True
            raise _StreamEnded from None

    def _abort(self) -> None:
        self._ending()
        self._cut()
        raise _StreamEnded

    def _cut(self) -> None:
        """The client loses the connection (no terminating chunk)."""
        self.h.close_connection = True
        with contextlib.suppress(OSError):
            self.h.connection.shutdown(socket.SHUT_RDWR)

    def wait(self, seconds: float) -> None:
        if self.muted:  # nobody reads the rest of this turn: it plays on at once
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.emulator._stopping.wait(min(0.05, left)) or self._stopped():
                self._abort()

    def _stopped(self) -> bool:
        return (self.cut is not None and self.cut.is_set()) or _client_gone(self.h.connection)

    def _due(self, data: bytes | None) -> bytes | None:
        """Fire the faults due before frame number ``self.sent`` (every one left when ``data``
        is None: the end of the stream); return what to write in place of ``data``."""
        while self.faults and (data is None or self.faults[0].after <= self.sent):
            fault = self.faults.pop(0)
            if fault.kind == "stall":
                self.wait(fault.seconds)
                continue
            self.faulted = True
            self.kept = self.kept or fault.kept
            frame_bytes = data if data is not None else self.filler.encode()
            if fault.kind in ("drop", "truncate"):
                if fault.kind == "truncate":
                    self._write(frame_bytes[: max(1, len(frame_bytes) // 2)])
                if not fault.kept:
                    self._abort()
                # Kept: the turn goes on to its end, unwritten, and is kept (``invoke``).
                self._cut()
                self.muted = True
                return None
            if fault.kind == "bad_crc":
                self._write(frame_bytes[:-4] + bytes(b ^ 0xFF for b in frame_bytes[-4:]))
                if data is not None:
                    self.sent += 1
                    return None
            elif fault.kind == "exception":
                self._write(encode_exception(fault.code, {"message": fault.message, **fault.fields}))
                self._ending()
                self._write(b"")
                raise _StreamEnded
        return data

    def send_frame(self, item: Frame) -> None:
        if self.cut is not None and self.cut.is_set():
            self._abort()  # the runtime session was stopped: nothing more goes out
        data = self._due(item.encode())
        if data is None:
            return
        self._write(data)
        self.sent += 1

    def finish(self) -> None:
        self._due(None)
        self._ending()
        self._write(b"")
