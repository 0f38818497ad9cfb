#!/usr/bin/env python3
"""Event-stream decode throughput: ``rma.wire.eventstream`` against botocore on the same bytes.

Two synthetic but realistic ``application/vnd.amazon.eventstream`` bodies, built with our
encoder (whose frames botocore decodes, checked below):

- ``invoke``: an InvokeHarness response — turns of ``messageStart``, ``contentBlockStart``,
  many small ``contentBlockDelta`` frames (a few words of text each, some tool-input JSON
  fragments and reasoning), ``contentBlockStop``, ``messageStop`` and ``metadata``. Many
  ~150-byte frames: per-message overhead dominates.
- ``command``: an InvokeAgentRuntimeCommand stream — ``chunk`` events wrapping
  ``contentStart`` / ``contentDelta`` (stdout and stderr, 1 KiB to 256 KiB, a few of 1 MiB) /
  ``contentStop``. Few, large frames: buffering and CRC dominate.

Each is cut into chunks as a socket would hand them over (1 KiB, 16 KiB, whole body),
before the clock starts. Both sides do the same framing work, bytes → (headers, payload),
transport and JSON excluded:

- rma: ``EventStreamDecoder.feed(chunk)`` per chunk, ``finish()`` at the end.
- botocore: ``EventStreamBuffer.add_data(chunk)`` then iterate it for the messages now
  complete — what ``botocore.eventstream.EventStream`` does before its response parser.

Before timing, both decoders must yield the same headers and payloads for every chunk
size, or the script fails. Figures are MB (10^6 bytes) of wire bytes per CPU second
(``time.process_time``), the median of N repeats; decoders alternate within a repeat so
that machine load hits both alike. Ratio > 1 means rma is faster.

    python bench/eventstream_decode.py            # full: ~3 MB invoke, ~12 MB command, 7 repeats
    python bench/eventstream_decode.py --quick    # CI smoke: small streams, 1 repeat, no claims
    python bench/eventstream_decode.py --json     # the same figures as one JSON document
    python bench/eventstream_decode.py --profile  # also cProfile rma's decoder on 1 KiB chunks
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from botocore.eventstream import EventStreamBuffer

from rma.wire.eventstream import EventStreamDecoder, encode_event

Decoded = list[tuple[Mapping[str, Any], bytes]]

_SENTENCE = (
    "the quarterly revenue grew by 12% while costs stayed flat; see table 3 for the "
    "regional breakdown — données, 数据, данные ✓ and a few more words to vary the length"
)
WORDS = tuple(_SENTENCE.split())
CHUNK_SIZES: tuple[int | None, ...] = (1024, 16 * 1024, None)  # None: the whole body at once


# ── the streams ─────────────────────────────────────────────────────────────────────────


def _text(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    out: list[str] = []
    size = 0
    while size < n:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def invoke_stream(rng: random.Random, n_frames: int) -> bytes:
    """An InvokeHarness body: Converse-style stream events, mostly small deltas."""
    frames: list[bytes] = []
    while len(frames) < n_frames:
        frames.append(encode_event("messageStart", {"role": "assistant"}))
        for index in range(rng.randint(1, 3)):
            kind = rng.random()
            if kind < 0.2:
                start = {"toolUse": {"toolUseId": f"tooluse_{rng.getrandbits(64):016x}", "name": "lookup"}}
                frames.append(encode_event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
                args = json.dumps({"query": _text(rng, 20, 200), "limit": rng.randint(1, 50)})
                for i in range(0, len(args), 24):
                    delta = {"toolUse": {"input": args[i : i + 24]}}
                    frames.append(
                        encode_event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})
                    )
            else:
                key = "reasoningContent" if kind < 0.3 else "text"
                for _ in range(rng.randint(5, 120)):
                    text = _text(rng, 3, 60)
                    text_delta: dict[str, object] = (
                        {key: {"text": text}} if key == "reasoningContent" else {"text": text}
                    )
                    frames.append(
                        encode_event("contentBlockDelta", {"contentBlockIndex": index, "delta": text_delta})
                    )
            frames.append(encode_event("contentBlockStop", {"contentBlockIndex": index}))
        frames.append(encode_event("messageStop", {"stopReason": rng.choice(["end_turn", "tool_use"])}))
        usage = {"inputTokens": rng.randint(100, 9000), "outputTokens": rng.randint(1, 4000)}
        usage["totalTokens"] = usage["inputTokens"] + usage["outputTokens"]
        frames.append(
            encode_event("metadata", {"usage": usage, "metrics": {"latencyMs": rng.randint(50, 9000)}})
        )
    return b"".join(frames)


def command_stream(rng: random.Random, n_commands: int) -> bytes:
    """An InvokeAgentRuntimeCommand body: chunk events carrying big stdout/stderr deltas."""
    frames: list[bytes] = []
    for c in range(n_commands):
        frames.append(encode_event("chunk", {"contentStart": {}}))
        for _ in range(rng.randint(2, 10)):
            size = 1 << 20 if rng.random() < 0.03 else rng.choice((1024, 4096, 16384, 65536, 262144))
            stream = "stdout" if rng.random() < 0.9 else "stderr"
            body = (_text(rng, 200, 400) + "\n") * (size // 300 + 1)
            frames.append(encode_event("chunk", {"contentDelta": {stream: body[:size]}}))
        stop = {"exitCode": 1 if c % 3 == 0 else 0, "status": "COMPLETED"}
        frames.append(encode_event("chunk", {"contentStop": stop}))
    return b"".join(frames)


def chunked(data: bytes, size: int | None) -> list[bytes]:
    if size is None:
        return [data]
    return [data[i : i + size] for i in range(0, len(data), size)]


# ── the two decoders ────────────────────────────────────────────────────────────────────


def decode_rma(chunks: Sequence[bytes]) -> Decoded:
    decoder = EventStreamDecoder()
    out: Decoded = []
    for chunk in chunks:
        for m in decoder.feed(chunk).unwrap():
            out.append((m.headers, m.payload))
    decoder.finish().unwrap()
    return out


def decode_botocore(chunks: Sequence[bytes]) -> Decoded:
    buffer = EventStreamBuffer()
    out: Decoded = []
    for chunk in chunks:
        buffer.add_data(chunk)
        for m in buffer:
            out.append((m.headers, m.payload))
    return out


DECODERS: dict[str, Callable[[Sequence[bytes]], Decoded]] = {
    "rma": decode_rma,
    "botocore": decode_botocore,
}


# ── measuring ───────────────────────────────────────────────────────────────────────────


def check_agree(data: bytes) -> int:
    """Both decoders, every chunk size, the same messages — or a loud failure."""
    reference = [(dict(h), p) for h, p in decode_botocore([data])]
    for size in CHUNK_SIZES:
        for name, decode in DECODERS.items():
            got = [(dict(h), p) for h, p in decode(chunked(data, size))]
            if got != reference:
                first = next(
                    (i for i, (a, b) in enumerate(zip(got, reference, strict=False)) if a != b), None
                )
                raise SystemExit(
                    f"FAIL: {name} at {size} B chunks disagrees: {len(got)} vs {len(reference)} "
                    f"messages, first difference at #{first}"
                )
    return len(reference)


def timed(decode: Callable[[Sequence[bytes]], Decoded], chunks: Sequence[bytes]) -> float:
    """CPU seconds of one full decode: on a shared machine the process's CPU time is far
    steadier than the wall clock (the work is single-threaded and does no I/O)."""
    gc.collect()
    start = time.process_time()
    decode(chunks)
    return time.process_time() - start


def measure(data: bytes, size: int | None, repeats: int) -> dict[str, float]:
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
    pstats.Stats(profiler).sort_stats("tottime").print_stats(10)


def _label(size: int | None) -> str:
    return "whole" if size is None else f"{size // 1024} KiB"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI smoke run: small streams, no figures to quote"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    parser.add_argument("--profile", action="store_true", help="cProfile rma's decoder on 1 KiB chunks")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    streams = {
        "invoke": invoke_stream(random.Random(20260401), 1_500 if args.quick else 20_000),
        "command": command_stream(random.Random(20260402), 4 if args.quick else 40),
    }
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "load_average": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "repeats": repeats,
        "quick": args.quick,
        "streams": [],
    }
    say = (lambda *_: None) if args.json else print
    say(f"python {report['python']}, load average {report['load_average']:.2f} on {report['cpus']} CPUs")
    for name, data in streams.items():
        messages = check_agree(data)
        mb = len(data) / 1e6
        rows = []
        say(
            f"{name} stream: {len(data):,} bytes, {messages:,} messages "
            f"(mean {len(data) // messages:,} B), median of {repeats}; both decoders agree"
        )
        say(f"  {'chunk':>8}  {'rma MB/s':>10}  {'botocore MB/s':>13}  {'rma/botocore':>12}  (CPU time)")
        for size in CHUNK_SIZES:
            t = measure(data, size, repeats)
            rma_rate, peer_rate = mb / t["rma"], mb / t["botocore"]
            rows.append(
                {
                    "chunk": size,
                    "rma_mb_s": rma_rate,
                    "botocore_mb_s": peer_rate,
                    "ratio": rma_rate / peer_rate,
                }
            )
            say(f"  {_label(size):>8}  {rma_rate:>10.1f}  {peer_rate:>13.1f}  {rma_rate / peer_rate:>11.2f}x")
        report["streams"].append({"name": name, "bytes": len(data), "messages": messages, "rows": rows})
        if args.profile:
            profile_rma(data, 1024)
    report["load_average_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"load average at the end {report['load_average_end']:.2f}")
    if args.quick:
        print("(--quick: smoke run only, figures not meaningful)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
