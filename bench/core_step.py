#!/usr/bin/env python3
"""Time the pure session machine over recorded sessions of 10k and 100k events.

A session is recorded the way ``rma_shell`` records one (the core's input events, in
order): a streaming host emitting, per turn, a few text events, a usage event, a tool use
and a requires_action idle, answered by tool results and accepted pushes, with a final
end_turn. The same log is folded through ``rma.session.machine.step`` and timed; the
100k/10k ratio shows whether work per event stays flat (≈10 means linear).

    python bench/core_step.py            # full: 10k and 100k events, a warm-up and 7 repeats
    python bench/core_step.py --quick    # CI smoke: small sizes, 1 repeat, no claims
    python bench/core_step.py --profile  # also cProfile a 20k-event fold
    python bench/core_step.py --instructions  # machine instructions per event, under valgrind

Figures are medians of wall time and of process CPU time: on a shared machine the wall
clock moves with the neighbours, the CPU time less so. ``--instructions`` is the
deterministic figure: it runs folds of two sizes under cachegrind, with and without the
fold loop, and reports the difference per event — the instructions ``step`` itself
executes, the same on every run (it needs ``valgrind`` on the PATH).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import shutil
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


def fold(log: list[Event], max_turns: int, observed: bool = True) -> tuple[float, float]:
    """Wall and CPU seconds to fold ``log``, looking at every command as ``rma replay`` does.

    ``observed``: the handler has ``handle_event``, so every event is delivered and text events
    also yield a delta; otherwise the shell configures the core to build no deliveries.
    """
    config = SessionConfig(
        codec=ScriptedStreamingCodec(), max_turns=max_turns, text_deltas=True, deliver_events=observed
    )
    state = initial_state(config)
    gc.collect()
    gc.freeze()
    start, start_cpu = time.perf_counter(), time.process_time()
    finished = 0
    for ev in log:
        state, commands = step(state, ev)
        for c in commands:
            if isinstance(c, Finish):
                finished += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    assert finished == 1, "the recorded session must end with exactly one result"
    return elapsed, cpu


def measure(n: int, repeats: int, warm_up: bool, observed: bool) -> tuple[int, float, float]:
    log = recorded_session(n)
    if warm_up:
        fold(log, max_turns=len(log), observed=observed)
    runs = [fold(log, max_turns=len(log), observed=observed) for _ in range(repeats)]
    return len(log), statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def profile(n: int) -> None:
    log = recorded_session(n)
    profiler = cProfile.Profile()
    profiler.enable()
    fold(log, max_turns=len(log))
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def _fold_only(n: int, observed: bool, run: bool) -> None:
    """The body timed by --instructions: build the log, and fold it only when ``run``."""
    log = recorded_session(n)
    config = SessionConfig(
        codec=ScriptedStreamingCodec(), max_turns=len(log), text_deltas=True, deliver_events=observed
    )
    state = initial_state(config)
    if run:
        for ev in log:
            state, _ = step(state, ev)


def _instructions(n: int, observed: bool, run: bool) -> int:
    from _cachegrind import run as counted

    return counted([sys.executable, __file__, "--fold-only", str(n), str(int(observed)), str(int(run))])


def count_instructions(small: int, big: int) -> None:
    if shutil.which("valgrind") is None:
        print("--instructions needs valgrind on the PATH")
        return
    for observed in (False, True):
        counts = {(n, r): _instructions(n, observed, r) for n in (small, big) for r in (False, True)}
        events = len(recorded_session(big)) - len(recorded_session(small))
        per_event = (
            (counts[big, True] - counts[small, True]) - (counts[big, False] - counts[small, False])
        ) / events
        label = "with handle_event" if observed else "without handle_event"
        print(f"  {label:22s} {per_event:10,.0f} instructions per event of step")


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--fold-only":
        _fold_only(int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1")
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: small sizes, no figures to quote")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="also cProfile a 20k-event fold")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions per event under valgrind"
    )
    args = parser.parse_args()
    sizes = (1_000, 10_000) if args.quick else (10_000, 100_000)
    repeats = 1 if args.quick else args.repeats
    for observed in (False, True):
        print(
            "handler with handle_event (deliveries + text deltas):"
            if observed
            else "handler without handle_event:"
        )
        rows = []
        for n in sizes:
            count, secs, cpu = measure(n, repeats, warm_up=not args.quick, observed=observed)
            rows.append((count, secs, cpu))
            print(
                f"  {count:>8} events  {secs * 1000:9.1f} ms  {count / secs:12,.0f} events/s"
                f"   (CPU {cpu * 1000:9.1f} ms  {count / cpu:12,.0f} events/s)"
            )
        (small_n, small_t, small_c), (big_n, big_t, big_c) = rows
        print(
            f"  time ratio {big_n // small_n}x events: {big_t / small_t:.2f} (CPU {big_c / small_c:.2f};"
            f" linear ≈ {big_n / small_n:.0f})"
        )
    if args.profile:
        profile(20_000)
    if args.instructions:
        count_instructions(3_000, 9_000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
