"""The plumbing every loopback emulator shares: a threaded HTTP/1.1 server on 127.0.0.1.

Emulators subclass ``LoopbackEmulator`` and name their request handler; this module starts the
server on a free port in a daemon thread, sets TCP_NODELAY on every connection (small SSE
writes must leave at once, not wait for Nagle), and stops it cleanly; ``reset_after_delivery``
resets a connection once the client has what was written to it.

It is also the one place an exception escaping an emulator's request handling is caught: a
bug in the emulator, a scripted callable that raised, a missing optional dependency. Before
the status line is out, the request is answered with a 500 in the emulated service's error
shape (``LoopbackEmulator._crash_reply``) naming the exception, so the client under test
reports an HTTP error that says what went wrong instead of a dropped connection; after it
(mid-stream), the connection is cut. Either way the traceback goes to stderr. Not an HTTP
framework.
"""

from __future__ import annotations

import array
import contextlib
import json
import socket
import struct
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class LoopbackHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    """The listen backlog. socketserver's default (5) drops the SYNs of a burst of connects —
    a pool opening its lanes for 1,000 sessions — and the kernel retransmits them 1 s, 3 s,
    7 s later: stragglers a real server's backlog would not make."""
    emulator: Any

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-request (a killed process) is not the server's error.
        if isinstance(sys.exc_info()[1], _DISCONNECTS):
            return
        super().handle_error(request, client_address)


class LoopbackEmulator:
    """Start/stop/port for an emulator; use as a context manager."""

    handler_class: ClassVar[type[BaseHTTPRequestHandler]]
    server_class: ClassVar[type[LoopbackHTTPServer]] = LoopbackHTTPServer
    thread_name: ClassVar[str] = "loopback-emulator"
    label: ClassVar[str] = "loopback emulator"
    """How a crash answer names the emulator (``"openai emulator"``)."""

    def _init_loopback(self) -> None:
        self._stopping = threading.Event()
        self._server: LoopbackHTTPServer | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        if self._server is not None:
            return
        server = self.server_class(("127.0.0.1", 0), self.handler_class)
        server.emulator = self
        self._server = server
        self._port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True
        )
        self._thread.start()

    def _before_close(self) -> None:
        """Release what blocks handler threads (open streams, timers) before shutdown."""

    def close(self) -> None:
        self._stopping.set()
        self._before_close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _crash_reply(self, h: LoopbackHandler, message: str) -> tuple[dict[str, str], bytes]:
        """The headers and body of the 500 answering an exception raised while handling a
        request, in the emulated service's error shape; ``message`` names the exception.
        Subclasses override it; this default is JSON ``{"message": …}``."""
        return {"Content-Type": "application/json"}, json.dumps({"message": message}).encode()

    @property
    def port(self) -> int:
        """The bound port (kept after ``close`` so tests can still build expected URLs)."""
        if self._port is None:
            raise RuntimeError("the emulator was never started")
        return self._port


class LoopbackHandler(BaseHTTPRequestHandler):
    """Hands every request to ``server.emulator._handle(handler)``; quiet on stderr, except for
    the traceback of an exception the emulator raised (answered as a 500 when still possible)."""

    protocol_version = "HTTP/1.1"
    server: LoopbackHTTPServer
    request_id: str | None = None
    """The id the emulator gave the current request, for its crash answer's headers."""
    _answered = False
    """Whether the current response's head has left (a 500 can no longer replace it)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests assert on ``emulator.requests``, not on stderr."""

    def read_body(self) -> bytes:
        """The request body, Content-Length or chunked (trailers skipped)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def flush_headers(self) -> None:
        self._answered = True
        super().flush_headers()

    def dispatch(self) -> None:
        """Run the emulator on this request; an exception it lets out is answered here."""
        self.request_id = None
        self._answered = False
        try:
            self.server.emulator._handle(self)
        except _DISCONNECTS:
            self.close_connection = True  # the client went away: nothing to answer
        except Exception as exc:
            self._crashed(exc)

    def _crashed(self, exc: Exception) -> None:
        emulator = self.server.emulator
        # The cause first: clients and error messages may shorten a long body.
        message = (
            f"{emulator.label} raised {type(exc).__name__}: {exc} on {self.command} "
            f"{self.path.split('?', 1)[0]} (in the emulator or a scripted callable; traceback on stderr)"
        )
        sys.stderr.write(f"{message}\n{''.join(traceback.format_exception(exc))}")
        # The request body may be unread and the emulator's state for this connection is
        # unknown: whatever is answered, the connection ends with it.
        self.close_connection = True
        if self._answered:
            # A status line (and maybe part of a body) is out: a 500 can't follow it, and
            # cutting the connection is what tells the client the answer is incomplete.
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        # Headers queued but not yet flushed are dropped with the answer they began.
        self._headers_buffer: list[bytes] = []
        try:
            headers, body = emulator._crash_reply(self, message)
            self.send_response(500)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except _DISCONNECTS:
            pass

    def do_GET(self) -> None:
        self.dispatch()

    def do_POST(self) -> None:
        self.dispatch()

    def do_DELETE(self) -> None:
        self.dispatch()


_DELIVERY_WAIT_S = 2.0
"""How long ``reset_after_delivery`` waits for the peer to acknowledge what was written."""


def reset_after_delivery(sock: socket.socket) -> None:
    """Reset the connection (RST, not FIN) once the peer's kernel has acknowledged every byte
    written to it, so the client reads those bytes before the reset: a reset that overtook
    them would make the client see no answer at all, which is another fault. The send queue
    is read with ``TIOCOUTQ`` (bytes not yet acknowledged, on Linux); where it cannot be read,
    a short grace stands in. Waiting is bounded either way."""
    if not _acknowledged(sock, time.monotonic() + _DELIVERY_WAIT_S):
        time.sleep(0.05)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _acknowledged(sock: socket.socket, deadline: float) -> bool:
    """Whether the peer acknowledged all that was sent before ``deadline``; False when the
    platform cannot say."""
    try:
        import fcntl
        import termios

        request = termios.TIOCOUTQ
    except (ImportError, AttributeError):
        return False
    pending = array.array("i", [0])
    while time.monotonic() < deadline:
        try:
            fcntl.ioctl(sock.fileno(), request, pending, True)
        except OSError:
            return False
        if pending[0] == 0:
            return True
        time.sleep(0.001)
    return False
