#!/usr/bin/env python3
"""A cheap, deterministic OpenAI-compatible chat-completions server for ``bench/local_loop.py``.

Stdlib only, one process of its own, HTTP/1.1 keep-alive on 127.0.0.1 with ``TCP_NODELAY``
(without it the client's next request waits out Nagle + delayed ACK, ~40 ms a turn). It is
not a model and keeps no per-conversation state: the request's ``model`` is ``step-N``, and

- while the request's messages hold fewer than N tool results it answers with one tool call
  ``step`` with arguments ``{"n": k}`` (k = tool results so far + 1, call id ``call_k``);
- then it answers with the final text ``done after N steps``.

So a conversation of N tool calls takes N + 1 requests ("turns"). The body is never
JSON-decoded: the model and the tool results are found with two byte regexes, so the
server's cost stays small and the same for every client. The response is written with one
``send``. ``GET /stats`` answers ``{"requests": …, "connections": …}`` (counted since start),
which the benchmark uses to check that every client made exactly the expected requests.

    python bench/_chat_server.py [--port 0]    # prints "PORT <n>" once listening
    python bench/_chat_server.py --latency-ms 50   # each answer waits 50 ms, like a model
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_MODEL = re.compile(rb'"model"\s*:\s*"step-(\d+)"')
_TOOL_RESULT = re.compile(rb'"role"\s*:\s*"tool"')

_lock = threading.Lock()
_stats = {"requests": 0, "connections": 0}
_latency_s = [0.0]


def reply_body(model: str, n_steps: int, tool_results: int) -> bytes:
    """The chat.completion answering a request that carries ``tool_results`` tool messages."""
    if tool_results < n_steps:
        k = tool_results + 1
        message: dict[str, object] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{k}",
                    "type": "function",
                    "function": {"name": "step", "arguments": json.dumps({"n": k})},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": f"done after {n_steps} steps"}
        finish = "stop"
    return json.dumps(
        {
            "id": f"chatcmpl-{tool_results}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {
                "prompt_tokens": 20 + 10 * tool_results,
                "completion_tokens": 8,
                "total_tokens": 28 + 10 * tool_results,
            },
        },
        separators=(",", ":"),
    ).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection serves a whole client run
    server_version = "bench-chat/1"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with _lock:
            _stats["connections"] += 1

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes) -> None:
        head = (
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: keep-alive\r\n\r\n"
        ).encode()
        self.wfile.write(head + body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/stats":
            with _lock:
                body = json.dumps(_stats).encode()
            self._send(200, body)
        else:
            self._send(404, b'{"error":{"message":"not found","type":"invalid_request_error"}}')

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        match = _MODEL.search(body)
        if not self.path.endswith("/chat/completions") or match is None:
            self._send(400, b'{"error":{"message":"model must be step-N","type":"invalid_request_error"}}')
            return
        with _lock:
            _stats["requests"] += 1
        n_steps = int(match.group(1))
        if _latency_s[0]:
            time.sleep(_latency_s[0])  # the model "thinks" (one thread per connection)
        self._send(200, reply_body(f"step-{n_steps}", n_steps, len(_TOOL_RESULT.findall(body))))


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # many clients connecting at once: no SYN dropped


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="wait before each answer")
    args = parser.parse_args()
    _latency_s[0] = args.latency_ms / 1000
    server = Server(("127.0.0.1", args.port), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
