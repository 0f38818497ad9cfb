#!/usr/bin/env python3
"""SSE decode throughput: ``rma.wire.sse.SSEDecoder`` against ``httpx_sse`` on the same bytes.

The stream is a synthetic but realistic Claude Managed Agents session: a few thousand
``event: <type>\\ndata: {json}\\n\\n`` frames of the CMA vocabulary (status changes, short
and long ``agent.message`` texts with some non-ASCII, thinking, model-request spans with
usage, custom and built-in tool uses, tool results of a few bytes to ~16 KiB), a share of
frames whose JSON is pretty-printed over several ``data:`` lines, ``: keepalive`` comments
and ``event: ping`` frames. It is cut into chunks as a socket would hand them over (64 B,
4 KiB, 64 KiB), before the clock starts.

Both sides do the whole bytes → events path, transport excluded:

- rma: ``SSEDecoder.feed(chunk)`` per chunk (UTF-8 decoding, line splitting and field
  parsing in one object), ``close()`` at the end — what ``rma_shell`` does.
- httpx-sse: what ``EventSource.aiter_sse`` does after ``response.aiter_bytes()``: httpx's
  ``TextDecoder`` + ``TextChunker`` (the body of ``Response.aiter_text``), then
  ``httpx_sse._decoders.SSELineDecoder`` (``_aiter_sse_lines``), then ``line.rstrip("\\n")``
  and ``httpx_sse._decoders.SSEDecoder.decode(line)``.

Before timing, both decoders must produce the same events (type, data, id, retry) for
every chunk size, or the script fails. Figures are MB (10^6 bytes) of wire bytes per CPU
second (``time.process_time``), the median of N repeats; decoders alternate within a repeat
so that machine load hits both alike. Ratio > 1 means rma is faster. The load average is
printed alongside: on a busy machine absolute figures drop, ratios much less.

    python bench/sse_decode.py              # full: ~2.5 MB stream, 9 repeats
    python bench/sse_decode.py --quick      # CI smoke: tiny stream, 1 repeat, no claims
    python bench/sse_decode.py --profile    # also cProfile rma's decoder on 64 B chunks
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from httpx._decoders import TextChunker, TextDecoder
from httpx_sse._decoders import SSEDecoder as HttpxSSEDecoder
from httpx_sse._decoders import SSELineDecoder

from rma.wire.sse import SSEDecoder

Event = tuple[str, str, str, int | None]
"""(event type, data, last event id, retry) — what both decoders are compared on."""

_SENTENCE = (
    "the quarterly revenue grew by 12% while costs stayed flat; see table 3 for the "
    "regional breakdown — données, 数据, данные ✓ and a few more words to vary the length"
)
WORDS = tuple(_SENTENCE.split())


# ── the stream ──────────────────────────────────────────────────────────────────────────


def _text(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    out: list[str] = []
    size = 0
    while size < n:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def _usage(rng: random.Random) -> dict[str, int]:
    return {
        "input_tokens": rng.randint(100, 90_000),
        "output_tokens": rng.randint(1, 4_000),
        "cache_creation_input_tokens": rng.randint(0, 2_000),
        "cache_read_input_tokens": rng.randint(0, 80_000),
    }


def cma_events(rng: random.Random, n_frames: int) -> list[dict[str, object]]:
    """A plausible CMA event sequence: turns of running → work → idle."""
    events: list[dict[str, object]] = []
    n = 0

    def add(ev: dict[str, object]) -> None:
        nonlocal n
        n += 1
        events.append(
            {"id": f"sevt_{n:06d}", **ev, "processed_at": f"2026-04-01T12:{n // 60 % 60:02d}:{n % 60:02d}Z"}
        )

    while len(events) < n_frames:
        add({"type": "session.status_running"})
        for _ in range(rng.randint(1, 4)):
            add({"type": "span.model_request_start"})
            if rng.random() < 0.5:
                add({"type": "agent.thinking"})
            for _ in range(rng.randint(0, 3)):
                long = rng.random() < 0.15
                blocks = [{"type": "text", "text": _text(rng, 400, 4_000) if long else _text(rng, 20, 300)}]
                add({"type": "agent.message", "content": blocks})
            if rng.random() < 0.4:
                use = f"sevt_{n + 1:06d}"
                add({"type": "agent.tool_use", "name": "web_search", "input": {"query": _text(rng, 10, 60)}})
                result = _text(rng, 200, 16_000) if rng.random() < 0.5 else _text(rng, 10, 200)
                add(
                    {
                        "type": "agent.tool_result",
                        "tool_use_id": use,
                        "content": [{"type": "text", "text": result}],
                        "is_error": False,
                    }
                )
            add({"type": "span.model_request_end", "model_usage": _usage(rng), "is_error": False})
        ids = []
        for _ in range(rng.randint(0, 3)):
            ids.append(f"sevt_{n + 1:06d}")
            add(
                {
                    "type": "agent.custom_tool_use",
                    "name": rng.choice(["lookup", "sql_query", "render_chart"]),
                    "input": {"sql": _text(rng, 20, 400), "limit": rng.randint(1, 500)},
                }
            )
        stop = {"type": "requires_action", "event_ids": ids} if ids else {"type": "end_turn"}
        add({"type": "session.status_idle", "stop_reason": stop})
        for ref in ids:
            add(
                {
                    "type": "user.custom_tool_result",
                    "custom_tool_use_id": ref,
                    "content": [{"type": "text", "text": _text(rng, 10, 2_000)}],
                    "is_error": False,
                }
            )
    return events[:n_frames]


def sse_stream(rng: random.Random, n_frames: int, line_end: str = "\n") -> bytes:
    """The wire bytes: one frame per event, some multi-line, with pings and comments."""
    out = io.StringIO()
    for i, ev in enumerate(cma_events(rng, n_frames)):
        if i % 40 == 0:
            out.write(f": keepalive{line_end}{line_end}")
        if i % 25 == 0:
            out.write(f'event: ping{line_end}data: {{"type": "ping"}}{line_end}{line_end}')
        payload = json.dumps(ev, ensure_ascii=False, indent=1 if rng.random() < 0.1 else None)
        out.write(f"event: {ev['type']}{line_end}")
        for line in payload.split("\n"):
            out.write(f"data: {line}{line_end}")
        out.write(line_end)
    return out.getvalue().encode("utf-8")


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


# ── the two decoders ────────────────────────────────────────────────────────────────────


def decode_rma(chunks: Sequence[bytes]) -> list[Event]:
    decoder = SSEDecoder()
    out: list[Event] = []
    for chunk in chunks:
        for m in decoder.feed(chunk):
            out.append((m.event, m.data, m.id, m.retry))
    if decoder.close():
        raise AssertionError("rma: the stream ended inside an event")
    return out


def decode_httpx_sse(chunks: Sequence[bytes]) -> list[Event]:
    text_decoder = TextDecoder(encoding="utf-8")  # Response.aiter_text
    chunker = TextChunker(chunk_size=None)
    lines = SSELineDecoder()  # httpx_sse._api._aiter_sse_lines
    decoder = HttpxSSEDecoder()  # EventSource.aiter_sse
    out: list[Event] = []

    def take(texts: list[str]) -> None:
        for text in texts:
            for line in lines.decode(text):
                sse = decoder.decode(line.rstrip("\n"))
                if sse is not None:
                    out.append((sse.event, sse.data, sse.id, sse.retry))

    for chunk in chunks:
        take(chunker.decode(text_decoder.decode(chunk)))
    take(chunker.decode(text_decoder.flush()))
    take(chunker.flush())
    for line in lines.flush():
        sse = decoder.decode(line.rstrip("\n"))
        if sse is not None:
            out.append((sse.event, sse.data, sse.id, sse.retry))
    return out


DECODERS: dict[str, Callable[[Sequence[bytes]], list[Event]]] = {
    "rma": decode_rma,
    "httpx-sse": decode_httpx_sse,
}


# ── measuring ───────────────────────────────────────────────────────────────────────────


def check_agree(data: bytes, chunk_sizes: Sequence[int], n_frames: int) -> int:
    """Both decoders, every chunk size, the same events — or a loud failure."""
    reference = decode_rma([data])
    pings = sum(1 for e in reference if e[0] == "ping")
    if len(reference) - pings != n_frames:
        raise SystemExit(f"FAIL: rma decoded {len(reference) - pings} CMA frames, expected {n_frames}")
    for ev in reference:
        json.loads(ev[1])  # every data payload is one JSON document again
    for size in chunk_sizes:
        for name, decode in DECODERS.items():
            got = decode(chunked(data, size))
            if got != reference:
                first = next(
                    (i for i, (a, b) in enumerate(zip(got, reference, strict=False)) if a != b), None
                )
                raise SystemExit(
                    f"FAIL: {name} at {size} B chunks disagrees: {len(got)} vs {len(reference)} events, "
                    f"first difference at #{first}: {got[first] if first is not None else None!r} "
                    f"vs {reference[first] if first is not None else None!r}"
                )
    return len(reference)


def timed(decode: Callable[[Sequence[bytes]], list[Event]], chunks: Sequence[bytes]) -> float:
    """CPU seconds of one full decode: on a shared, loaded machine the process's CPU time
    is far steadier than the wall clock (the work is single-threaded and does no I/O)."""
    gc.collect()
    start = time.process_time()
    decode(chunks)
    return time.process_time() - start


def measure(data: bytes, size: int, repeats: int) -> dict[str, float]:
    chunks = chunked(data, size)
    times: dict[str, list[float]] = {name: [] for name in DECODERS}
    for r in range(repeats):
        order = list(DECODERS.items()) if r % 2 == 0 else list(reversed(DECODERS.items()))
        for name, decode in order:
            times[name].append(timed(decode, chunks))
    return {name: statistics.median(t) for name, t in times.items()}


def profile_rma(data: bytes, size: int) -> None:
    chunks = chunked(data, size)
    profiler = cProfile.Profile()
    profiler.enable()
    decode_rma(chunks)
    profiler.disable()
    print(f"\ncProfile of rma's decoder, {size} B chunks (tottime order):")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: tiny sizes, no figures to quote")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--frames", type=int, default=4_000)
    parser.add_argument("--profile", action="store_true", help="cProfile rma's decoder on 64 B chunks")
    args = parser.parse_args()
    frames = 150 if args.quick else args.frames
    repeats = 1 if args.quick else args.repeats
    chunk_sizes = (64, 4096, 65536)
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for label, line_end in (("LF", "\n"), ("CRLF", "\r\n")):
        data = sse_stream(random.Random(20260401), frames, line_end)
        events = check_agree(data, chunk_sizes, frames)
        mb = len(data) / 1e6
        print(
            f"stream ({label} line ends): {len(data):,} bytes, {events:,} events "
            f"({frames:,} CMA frames + pings), median of {repeats}; both decoders agree"
        )
        print(f"  {'chunk':>8}  {'rma MB/s':>10}  {'httpx-sse MB/s':>14}  {'rma/httpx-sse':>13}  (CPU time)")
        for size in chunk_sizes:
            t = measure(data, size, repeats)
            rma_rate, peer_rate = mb / t["rma"], mb / t["httpx-sse"]
            print(f"  {size:>6} B  {rma_rate:>10.1f}  {peer_rate:>14.1f}  {rma_rate / peer_rate:>12.2f}x")
        if args.profile and label == "LF":
            profile_rma(data, 64)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.quick:
        print("(--quick: smoke run only, figures not meaningful)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
