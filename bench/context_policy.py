#!/usr/bin/env python3
"""The context policy's CPU per turn (issue #26): does planning each request stay O(1)?

A Local conversation is driven through the pure core only — ``apply_input`` (the tool result),
``prepare_request`` (the plan and the body), ``apply_response`` (a reply with one call) — for
500 turns, each turn adding an assistant call and a ~600-character tool result, as a tool
loop does. Three configurations:

- ``plain``: no window, the whole history in every request (the default, and today's cost);
- ``policy, roomy``: ``context_window=10**9`` — the policy's bookkeeping on every message and a
  plan per request that never has to compact;
- ``policy, 2k``: ``context_window=2048`` — every request compacted to the window (old tool
  results shortened with a marker, the oldest turns dropped whole).

Per turn the CPU (``process_time``) of one poll is stamped; the median over turns 41–50 and
491–500 is reported, best of ``--repeat`` runs (5). The request body's size is reported beside it.
No network, no event loop: this is the core's own cost.

    python bench/context_policy.py            # 500 turns, 5 repeats
    python bench/context_policy.py --quick    # 100 turns, 1 repeat (smoke)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rma.providers.local.codec import CODEC, apply_input, apply_response, prepare_request, start  # noqa: E402
from rma.vocabulary import ToolResult, ToolUse  # noqa: E402

TOOL = {"name": "lookup", "description": "Look a record up", "input_schema": {"type": "object"}}
RESULT = "record " + "x" * 600
CONFIGS: dict[str, int | None] = {"plain": None, "policy, roomy": 10**9, "policy, 2k": 2048}


def reply(n: int, prompt_tokens: int) -> dict[str, Any]:
    call = {
        "id": f"c{n}",
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"n": n})},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 12},
    }


def session(turns: int, window: int | None) -> tuple[list[float], list[int]]:
    conv = start(
        "You look records up.", [TOOL], None, {"model": "m"}, turns + 10, context_window=window
    ).unwrap()
    conv = apply_input(conv, CODEC.user_input("look them all up")).unwrap()
    times: list[float] = []
    sizes: list[int] = []
    gc.collect()
    for n in range(turns):
        t0 = time.process_time()
        if n:
            use = ToolUse(f"c{n - 1}", "lookup", {})
            conv = apply_input(
                conv, CODEC.resume_input([use], [ToolResult(use.id, f"{RESULT} #{n}")])
            ).unwrap()
        conv, body, _ = prepare_request(conv, stream=False)
        # The server's count of what was sent: a token per four bytes, as the emulator counts.
        conv, _ = apply_response(conv, reply(n, len(body) // 4)).unwrap()
        times.append(time.process_time() - t0)
        sizes.append(len(body))
    return times, sizes


def window_median(times: list[float], last: int) -> float:
    return statistics.median(times[last - 10 : last])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    turns, repeat = (100, 1) if args.quick else (args.turns, args.repeat)
    print(f"Python {sys.version.split()[0]}, {turns} turns, best of {repeat}")
    print(f"| Configuration | CPU per turn at 50 | at {turns} | {turns} / 50 | request at 50 | at {turns} |")
    print("|---|---|---|---|---|---|")
    for name, window in CONFIGS.items():
        best_50, best_last = float("inf"), float("inf")
        sizes: list[int] = []
        for _ in range(repeat):
            times, sizes = session(turns, window)
            best_50 = min(best_50, window_median(times, 50))
            best_last = min(best_last, window_median(times, turns))
        print(
            f"| {name} | {best_50 * 1e6:.0f} µs | {best_last * 1e6:.0f} µs | {best_last / best_50:.2f} "
            f"| {sizes[49] / 1024:.1f} KiB | {sizes[-1] / 1024:.1f} KiB |"
        )


if __name__ == "__main__":
    main()
