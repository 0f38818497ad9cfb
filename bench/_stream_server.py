#!/usr/bin/env python3
"""A loopback server streaming timestamped text deltas on three wires, for ``bench/stream_latency.py``.

Stdlib only (plus rma's event-stream encoder), a process of its own, HTTP/1.1 on 127.0.0.1 with
``TCP_NODELAY``. Every reply is ``--chunks`` text deltas, one every ``--interval-ms``; a delta's
text is ``"<t>;"`` where ``t`` is ``time.monotonic_ns()`` read just before the bytes are written
to the socket (Linux: CLOCK_MONOTONIC, the same clock in every process), so a client can tell how
long each delta took from the server's socket to wherever it measures.

- OpenAI chat completions: ``POST /v1/chat/completions`` with ``stream: true`` → SSE
  ``chat.completion.chunk`` objects, a finish chunk, a usage chunk, ``data: [DONE]``.
- Bedrock AgentCore: ``POST /harnesses/invoke?harnessArn=…`` → ``application/vnd.amazon.eventstream``
  frames: ``messageStart``, one ``contentBlockDelta`` per delta, ``contentBlockStop``,
  ``messageStop`` (``end_turn``), ``metadata``. Signatures are not checked.
- Claude Managed Agents: ``POST /v1/sessions`` creates a session; ``GET
  /v1/sessions/{id}/events/stream`` is its SSE stream; ``POST /v1/sessions/{id}/events`` with a
  ``user.message`` makes the stream send ``session.status_running``, one ``agent.message`` per
  delta, ``span.model_request_end`` and ``session.status_idle`` (``end_turn``); a stream that
  asks ``event_deltas=agent.message`` gets one message instead, previewed: ``event_start``, one
  ``event_delta`` per delta, then the whole ``agent.message``.

    python bench/_stream_server.py --chunks 200 --interval-ms 5   # prints "PORT <n>"

It exits when its stdin closes (the parent is done) or on SIGTERM.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rma.wire.eventstream import encode_event

CHUNKS = 100
INTERVAL_S = 0.005
_ids = itertools.count(1)
_sessions: dict[str, threading.Event] = {}
_lock = threading.Lock()


def stamp() -> str:
    return f"{time.monotonic_ns()};"


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._body()
        if path == "/v1/chat/completions":
            self._openai(json.loads(body))
        elif path == "/harnesses/invoke":
            self._agentcore()
        elif path == "/v1/sessions":
            session_id = f"sesn_bench{next(_ids):06d}"
            with _lock:
                _sessions[session_id] = threading.Event()
            self._json(
                200, {"id": session_id, "type": "session", "status": "idle", "agent": {"id": "agent_b"}}
            )
        elif path.startswith("/v1/sessions/") and path.endswith("/events"):
            session_id = path.split("/")[3]
            with _lock:
                started = _sessions.get(session_id)
            if started is not None:
                started.set()
            self._json(200, {"data": [{"type": "user.message", "id": f"sevt_in{next(_ids)}"}]})
        else:
            self._json(404, {"error": {"type": "not_found_error", "message": path}})

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path.startswith("/v1/sessions/") and path.endswith("/events/stream"):
            self._cma_stream(path.split("/")[3], previews="agent.message" in unquote(query))
        else:
            self._json(404, {"error": {"type": "not_found_error", "message": path}})

    def do_DELETE(self) -> None:
        self._json(200, {"type": "session_deleted"})

    # -- the three wires --

    def _openai(self, request: dict[str, Any]) -> None:
        base = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": request["model"],
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        self._chunked("text/event-stream; charset=utf-8")
        self._write(chunk({"role": "assistant", "content": ""}))
        for _ in range(CHUNKS):
            time.sleep(INTERVAL_S)
            self._write(chunk({"content": stamp()}))
        self._write(chunk({}, "stop"))
        usage = {"prompt_tokens": 10, "completion_tokens": CHUNKS, "total_tokens": 10 + CHUNKS}
        self._write(b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n")
        self._write(b"data: [DONE]\n\n")
        self._end()

    def _agentcore(self) -> None:
        self._chunked("application/vnd.amazon.eventstream")
        self._write(encode_event("messageStart", {"role": "assistant"}))
        for _ in range(CHUNKS):
            time.sleep(INTERVAL_S)
            delta = {"contentBlockIndex": 0, "delta": {"text": stamp()}}
            self._write(encode_event("contentBlockDelta", delta))
        self._write(encode_event("contentBlockStop", {"contentBlockIndex": 0}))
        self._write(encode_event("messageStop", {"stopReason": "end_turn"}))
        usage = {"inputTokens": 10, "outputTokens": CHUNKS, "totalTokens": 10 + CHUNKS}
        self._write(encode_event("metadata", {"usage": usage, "metrics": {"latencyMs": 1}}))
        self._end()

    def _cma_stream(self, session_id: str, *, previews: bool) -> None:
        with _lock:
            started = _sessions.get(session_id)
        self._chunked("text/event-stream; charset=utf-8")

        def frame(event: dict[str, Any]) -> None:
            event = {"id": f"sevt_{next(_ids):08d}", "processed_at": "2026-01-01T00:00:00Z", **event}
            self._write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())

        if started is None or not started.wait(30):
            self._end()
            return
        frame({"type": "session.status_running"})
        if previews:  # event_deltas=agent.message: one message, previewed delta by delta
            message_id, said = f"sevt_{next(_ids):08d}", []
            self._write(
                b"event: event_start\ndata: "
                + json.dumps(
                    {"type": "event_start", "event": {"type": "agent.message", "id": message_id}}
                ).encode()
                + b"\n\n"
            )
            for _ in range(CHUNKS):
                time.sleep(INTERVAL_S)
                said.append(stamp())
                content = {"type": "text", "text": said[-1]}
                delta = {"type": "content_delta", "index": 0, "content": content}
                data = json.dumps({"type": "event_delta", "event_id": message_id, "delta": delta})
                self._write(b"event: event_delta\ndata: " + data.encode() + b"\n\n")
            whole = [{"type": "text", "text": "".join(said)}]
            frame({"type": "agent.message", "id": message_id, "content": whole})
        else:
            for _ in range(CHUNKS):
                time.sleep(INTERVAL_S)
                frame({"type": "agent.message", "content": [{"type": "text", "text": stamp()}]})
        usage = {"input_tokens": 10, "output_tokens": CHUNKS, "cache_read_input_tokens": 0}
        frame({"type": "span.model_request_end", "model_usage": {**usage, "cache_creation_input_tokens": 0}})
        frame({"type": "session.status_idle", "stop_reason": {"type": "end_turn"}})
        self._end()


def main() -> int:
    global CHUNKS, INTERVAL_S
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--interval-ms", type=float, default=INTERVAL_S * 1000)
    args = parser.parse_args()
    CHUNKS, INTERVAL_S = args.chunks, args.interval_ms / 1000
    server = Server(("127.0.0.1", args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"PORT {server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
