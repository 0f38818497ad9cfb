#!/usr/bin/env python3
"""Time the pure session machine over recorded sessions of 10k and 100k events.

A session is recorded the way ``rma_shell`` records one (the core's input events, in
order): a streaming host emitting, per turn, a few text events, a usage event, a tool use
and a requires_action idle, answered by tool results and accepted pushes, with a final
end_turn. The same log is folded through ``rma.session.machine.step`` and timed; the
100k/10k ratio shows whether work per event stays flat (≈10 means linear).

    python bench/core_step.py            # full: 10k and 100k events, 5 repeats
    python bench/core_step.py --quick    # CI smoke: small sizes, 1 repeat, no claims
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from returns.result import Success

from rma.providers.scripted import ScriptedStreamingCodec
from rma.session.commands import Finish
from rma.session.events import (
    Event,
    Opened,
    PushFinished,
    StreamConnected,
    StreamEvent,
    ToolsFinished,
)
from rma.session.machine import initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import ToolResult

EVENTS_PER_TURN = 8  # 5 texts + usage + tool_use + idle, plus 2 shell answers = 10 inputs


def recorded_session(n_events: int) -> list[Event]:
    log: list[Event] = [Opened("sess_bench"), StreamConnected(0), PushFinished(Success(None))]
    turns = max(1, n_events // (EVENTS_PER_TURN + 2))
    eid = 0
    for turn in range(1, turns + 1):
        for _ in range(5):
            eid += 1
            log.append(StreamEvent(0, {"type": "text", "text": "lorem ipsum ", "id": f"e{eid}"}))
        eid += 1
        log.append(StreamEvent(0, {"type": "usage", "input_tokens": 10, "output_tokens": 5, "id": f"e{eid}"}))
        last = turn == turns
        if not last:
            eid += 1
            tid = f"t{turn}"
            log.append(StreamEvent(0, {"type": "tool_use", "id": tid, "name": "step", "input": {"n": turn}}))
            eid += 1
            log.append(
                StreamEvent(
                    0,
                    {
                        "type": "idle",
                        "stop_reason": {"type": "requires_action"},
                        "event_ids": [tid],
                        "id": f"e{eid}",
                    },
                )
            )
            log.append(ToolsFinished(turn, (ToolResult(tid, "ok"),)))
            log.append(PushFinished(Success(None)))
        else:
            eid += 1
            log.append(StreamEvent(0, {"type": "idle", "stop_reason": {"type": "end_turn"}, "id": f"e{eid}"}))
    return log


def fold(log: list[Event], max_turns: int) -> float:
    config = SessionConfig(codec=ScriptedStreamingCodec(), max_turns=max_turns, text_deltas=True)
    state = initial_state(config)
    gc.collect()
    gc.freeze()
    start = time.perf_counter()
    finished = 0
    for ev in log:
        state, commands = step(state, ev)
        for c in commands:
            if isinstance(c, Finish):
                finished += 1
    elapsed = time.perf_counter() - start
    assert finished == 1, "the recorded session must end with exactly one result"
    return elapsed


def measure(n: int, repeats: int) -> tuple[int, float]:
    log = recorded_session(n)
    times = [fold(log, max_turns=len(log)) for _ in range(repeats)]
    return len(log), statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: small sizes, no figures to quote")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = (1_000, 10_000) if args.quick else (10_000, 100_000)
    repeats = 1 if args.quick else args.repeats
    rows = []
    for n in sizes:
        count, secs = measure(n, repeats)
        rows.append((count, secs))
        print(f"{count:>8} events  {secs * 1000:9.1f} ms  {count / secs:12,.0f} events/s")
    (small_n, small_t), (big_n, big_t) = rows
    print(f"time ratio {big_n // small_n}x events: {big_t / small_t:.2f} (linear ≈ {big_n / small_n:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
