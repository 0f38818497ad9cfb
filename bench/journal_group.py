#!/usr/bin/env python3
"""What the journal costs per turn with 1 and with 1,000 concurrent journaled Local sessions,
base against this tree in the same run (issue #28's group commit).

One loopback OpenAI-compatible server process (``bench/_chat_server.py``, instant answers) plays
``--steps`` tool calls and a final text per session (``steps + 1`` turns). A worker process runs
one (tree, anyio backend, K) and alternates three variants sample by sample, in a rotating
order: **plain** (``run`` without a journal), **sqlite** (``journal=`` one ``SQLiteJournal`` for
the worker's whole run, every session a fresh key) and **memory** (one ``MemoryJournal``: the
journal's encoding and sealing without the disk, to tell the two apart). A sample is K
sessions run concurrently, ``--repeat`` times over (K = 1: one session at a time); its CPU
time (``process_time``: user + kernel of the worker, not the server's) is divided by its turns.
The journal's share is ``(sqlite - plain) / plain`` per turn, medians of the samples. The
trees alternate worker by worker (``base``, then this tree, then base...), so load bursts on a
shared machine hit both.
Every session is checked (its text and turns), and every journaled session's records read back
after the timed samples. Where the tree has group commit, the worker also reports how many
flushes shared a commit (``flushes / commits``).

    python bench/journal_group.py                      # K = 1 and 1,000, trio and asyncio
    python bench/journal_group.py --base-ref main      # base: that commit, exported with git archive
    python bench/journal_group.py --base /path/tree    # base: a checkout
    python bench/journal_group.py --quick              # smoke: this tree, K = 1 and 20, no figures
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEP = {
    "name": "step",
    "description": "Run step n.",
    "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
}
VARIANTS = ("plain", "sqlite", "memory", "floor")
FLOOR_START = json.dumps(
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_00", "type": "function",
     "function": {"name": "step", "arguments": '{"n": 0}'}}], "finish_reason": "tool_calls",
     "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}}
)  # fmt: skip
"""The floor's record before a tool runs: the model's answer that asked for it, as sent."""
FLOOR_RESULT = json.dumps({"id": "call_00", "text": "step 0 done", "is_error": False})
TARGET = 0.10
"""Issue #28: at 1,000 sessions, the journal's CPU per turn at most 10% of the plain turn."""


class Handler:
    """The sessions' tool: answers at once."""

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return f"step {input['n']} done"


class Floor:
    """The floor's tool: the two records a turn must make durable, ready-made, through the
    group commit of ``store`` (its ``group``), under the run's ``context`` as the key."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.group = store.group

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        assert isinstance(ctx, str)
        await self.group.append(self.store, ctx, [FLOOR_START])
        done = f"step {input['n']} done"
        await self.group.append(self.store, ctx, [FLOOR_RESULT])
        return done


# ── the worker: rma imported from the tree it is given ──────────────────────────────────────


def worker(job: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, job["tree"])
    import anyio

    import rma_shell
    from rma_shell import Failure, MemoryJournal, SQLiteJournal, run
    from rma_shell.providers.local import Local

    assert Path(rma_shell.__file__).resolve().is_relative_to(Path(job["tree"]).resolve()), rma_shell.__file__
    k, steps, repeat = job["k"], job["steps"], job["repeat"]
    if job.get("gc_threshold"):
        gc.set_threshold(job["gc_threshold"], 10, 10)
    scratch = tempfile.TemporaryDirectory(prefix="rma-journal-group-")
    store = SQLiteJournal(Path(scratch.name) / "journal.db")
    stores: dict[str, Any] = {"plain": None, "sqlite": store, "memory": MemoryJournal(), "floor": None}
    floor = SQLiteJournal(Path(scratch.name) / "floor.db")
    floor_group = getattr(floor, "group", None)
    keys = iter(range(10**9))
    journaled: list[str] = []

    async def one(provider: Any, variant: str) -> None:
        key = f"s{next(keys)}" if stores[variant] is not None else None
        if variant == "floor":
            if floor_group is None:  # a tree without group commit: no floor to measure
                return
            floor_group.enter()
            try:
                outcome = await run(
                    provider, handler=Floor(floor), context=f"f{next(keys)}", prompt="Run the steps.",
                    max_turns=steps + 6, timeout=600,
                )  # fmt: skip
            finally:
                floor_group.leave()
            if isinstance(outcome, Failure) or outcome.unwrap().turns != steps + 1:
                raise RuntimeError(f"floor: {outcome!r}")
            return
        outcome = await run(
            provider,
            handler=Handler(),
            prompt="Run the steps.",
            max_turns=steps + 6,
            timeout=600,
            journal=stores[variant],
            journal_key=key,
        )
        if isinstance(outcome, Failure):
            raise RuntimeError(f"{variant}: the session failed: {outcome.failure()!r}")
        result = outcome.unwrap()
        if result.text != f"done after {steps} steps" or result.turns != steps + 1:
            raise RuntimeError(f"{variant}: {result.turns} turns, {result.text!r}")
        if variant == "sqlite":
            journaled.append(key)

    async def sample(provider: Any, variant: str) -> None:
        for _ in range(repeat):
            async with anyio.create_task_group() as tg:
                for _ in range(k):
                    tg.start_soon(one, provider, variant)

    collecting = [0.0, 0.0]  # the collector's seconds so far, and when the running one began

    def collector(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collecting[1] = time.perf_counter()
        else:
            collecting[0] += time.perf_counter() - collecting[1]

    async def body() -> dict[str, list[float]]:
        provider = Local(base_url=job["base_url"], model=f"step-{steps}", api_key="sk-bench", tools=[STEP])
        got: dict[str, list[float]] = {v: [] for v in VARIANTS}
        got.update({f"gc {v}": [] for v in VARIANTS})
        gc.callbacks.append(collector)
        try:
            for variant in VARIANTS:  # warm-up: imports, the client's pool, the SQLite file
                await one(provider, variant)
            group = getattr(store, "group", None)
            base = (getattr(group, "flushes", 0), getattr(group, "commits", 0))
            for i in range(job["inner"]):
                for variant in VARIANTS[i % len(VARIANTS) :] + VARIANTS[: i % len(VARIANTS)]:
                    gc.collect()
                    c0, g0 = time.process_time(), collecting[0]
                    await sample(provider, variant)
                    turns = k * repeat * (steps + 1)
                    got[variant].append((time.process_time() - c0) / turns)
                    got[f"gc {variant}"].append((collecting[0] - g0) / turns)
            if group is not None:
                got["shared"] = [group.flushes - base[0], group.commits - base[1]]
        finally:
            gc.callbacks.remove(collector)
            await provider.close()
        return got

    try:
        samples = anyio.run(body, backend=job["backend"])
        for key in journaled[-5:]:  # read back: a journaled session's records are there
            if key is None or len(store.rows(key)) < 2 * (steps + 1):
                raise RuntimeError(f"{key}: {len(store.rows(key))} records")
        samples["read"] = _read_back(store, journaled[-1])
    finally:
        store.close()
        floor.close()
        scratch.cleanup()
    return {**job, "samples": samples}


def _read_back(store: Any, key: str) -> list[float]:
    """One session's journal: its size in bytes, and the CPU seconds ``load`` (what ``resume``
    and ``rma inspect`` start from) takes to check and read it, best of three."""
    from returns.result import Success

    from rma.journal import load
    from rma.provider import codec_for

    rows = store.rows(key)
    times = []
    for _ in range(3):
        c0 = time.process_time()
        loaded = load(key, rows, codec_for)
        times.append(time.process_time() - c0)
        if not isinstance(loaded, Success):
            raise RuntimeError(f"{key}: {loaded}")
    return [float(sum(len(text.encode()) for _, text, _ in rows)), min(times)]


# ── the driver ────────────────────────────────────────────────────────────────────────────


def run_worker(job: dict[str, Any]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
        cwd=job["tree"],
    )
    if done.returncode != 0:
        raise SystemExit(
            f"worker {job['label']} {job['backend']} K={job['k']} failed:\n{done.stderr[-4000:]}"
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def export(ref: str) -> tempfile.TemporaryDirectory[str]:
    """``ref`` of this repository as a tree in a temporary directory (``git archive``)."""
    out = tempfile.TemporaryDirectory(prefix="rma-base-")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", out.name], input=archive.stdout, check=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: this tree, K = 1 and 20, one sample")
    parser.add_argument("--sizes", default="1,1000", help="concurrent sessions K (comma-separated)")
    parser.add_argument("--steps", type=int, default=10, help="tool calls a session (turns: steps + 1)")
    parser.add_argument(
        "--single-repeat", type=int, default=40, help="K = 1: sessions a sample, one at a time"
    )
    parser.add_argument("--inner", type=int, default=3, help="samples per variant per worker")
    parser.add_argument("--rounds", type=int, default=2, help="workers per (tree, backend, K), interleaved")
    parser.add_argument("--backend", choices=("trio", "asyncio"), action="append")
    parser.add_argument("--base-ref", default="main", help="the base: this commit, via git archive")
    parser.add_argument("--base", help="the base: this checkout instead of --base-ref")
    parser.add_argument("--no-base", action="store_true", help="this tree only")
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument(
        "--gc-threshold",
        type=int,
        help="the workers' gc.set_threshold(N, 10, 10) (default: Python's, 700): what tuning the "
        "cyclic GC does for a process carrying many sessions",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(sys.stdin.read()))))
        return 0

    sys.path.insert(0, str(HERE))
    from local_loop import ChatServer, load, machine

    sizes = [1, 20] if args.quick else [int(s) for s in args.sizes.split(",")]
    inner, rounds = (1, 1) if args.quick else (args.inner, args.rounds)
    steps = 3 if args.quick else args.steps
    backends = args.backend or ["trio", "asyncio"]
    exported = None
    trees = {"branch": str(ROOT)}
    if not (args.no_base or (args.quick and not args.base)):  # the smoke run: this tree only
        if args.base:
            trees = {"base": str(Path(args.base).resolve()), **trees}
        else:
            exported = export(args.base_ref)
            trees = {"base": exported.name, **trees}
    print(f"machine: {machine()}; load average at start {load()}")
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    print(f"trees: {trees} (branch at {commit.stdout.strip()}, base {args.base or args.base_ref})")
    started = time.perf_counter()
    server = ChatServer()
    results: list[dict[str, Any]] = []
    try:
        for k in sizes:
            for backend in backends:
                for r in range(rounds):
                    labels = list(trees) if r % 2 == 0 else list(reversed(trees))
                    for label in labels:
                        job = {
                            "label": label,
                            "tree": trees[label],
                            "backend": backend,
                            "k": k,
                            "steps": steps,
                            "repeat": args.single_repeat if k == 1 else 1,
                            "inner": inner,
                            "base_url": server.base_url,
                            "gc_threshold": args.gc_threshold,
                        }
                        results.append(run_worker(job))
                        print(
                            f"  ran {label} {backend} K={k} ({time.perf_counter() - started:.0f} s)",
                            flush=True,
                        )
    finally:
        server.close()
        if exported is not None:
            exported.cleanup()
    rows = report(results, trees)
    print(f"\nload average at end {load()}; {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2))
    return 0


def report(results: list[dict[str, Any]], trees: dict[str, str]) -> list[dict[str, Any]]:
    grouped: dict[tuple[int, str, str], dict[str, list[float]]] = {}
    for r in results:
        into = grouped.setdefault((r["k"], r["backend"], r["label"]), {v: [] for v in (*VARIANTS, "shared")})
        for v in VARIANTS:
            into[v] += r["samples"][v]
        if "read" in r["samples"]:
            into.setdefault("read", []).append(r["samples"]["read"])
        for v in VARIANTS:  # the collector's time (trees whose worker timed it)
            into.setdefault(f"gc {v}", []).extend(r["samples"].get(f"gc {v}", []))
        if "shared" in r["samples"]:
            into["shared"].append(r["samples"]["shared"][0] / max(1, r["samples"]["shared"][1]))
    print(
        f"\n  {'K':>5} {'backend':<8} {'tree':<7} {'plain ms/turn':>13} {'sqlite':>8} {'journal ms':>10}"
        f" {'journal %':>9} {'memory +%':>9} {'floor +%':>8} {'flushes/commit':>14}"
    )
    rows = []
    for (k, backend, label), s in sorted(
        grouped.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "base")
    ):
        plain, sqlite = statistics.median(s["plain"]) * 1000, statistics.median(s["sqlite"]) * 1000
        memory = statistics.median(s["memory"]) * 1000
        share, memory_share = (sqlite - plain) / plain, (memory - plain) / plain
        floor = statistics.median(s["floor"]) * 1000 if s["floor"] and min(s["floor"]) > 0 else None
        floor_share = None if floor is None else (floor - plain) / plain
        shared = statistics.median(s["shared"]) if s["shared"] else None
        rows.append(
            {"k": k, "backend": backend, "tree": label, "plain_ms": plain, "sqlite_ms": sqlite,
             "memory_ms": memory, "journal_share": share, "memory_share": memory_share,
             "floor_ms": floor, "floor_share": floor_share,
             "flushes_per_commit": shared, "samples": len(s["plain"])}
        )  # fmt: skip
        print(
            f"  {k:>5} {backend:<8} {label:<7} {plain:13.3f} {sqlite:8.3f} {sqlite - plain:10.3f}"
            f" {share:9.1%} {memory_share:9.1%} {'—' if floor_share is None else f'{floor_share:8.1%}'}"
            f" {'' if shared is None else f'{shared:14.1f}'}"
        )
    print(f"\n  {'K':>5} {'backend':<8} {'tree':<7} {'journal KB/session':>18} {'load ms':>8}")
    for (k, backend, label), s in sorted(
        grouped.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "base")
    ):
        reads = s.get("read") or []
        if reads:
            size = statistics.median(r[0] for r in reads) / 1024
            loading = statistics.median(r[1] for r in reads) * 1000
            print(f"  {k:>5} {backend:<8} {label:<7} {size:18.1f} {loading:8.2f}")
            for row in rows:
                if (row["k"], row["backend"], row["tree"]) == (k, backend, label):
                    row["journal_kb"], row["load_ms"] = size, loading
    print("\n  the cyclic collector's time, µs a turn (wall time inside gc.callbacks):")
    print(f"  {'K':>5} {'backend':<8} {'tree':<7} {'plain':>7} {'sqlite':>7} {'memory':>7} {'floor':>7}")
    for (k, backend, label), s in sorted(
        grouped.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "base")
    ):
        if s.get("gc plain"):
            per = {v: statistics.median(s[f"gc {v}"]) * 1e6 if s.get(f"gc {v}") else 0.0 for v in VARIANTS}
            print(f"  {k:>5} {backend:<8} {label:<7}" + "".join(f" {per[v]:7.1f}" for v in VARIANTS))
            for row in rows:
                if (row["k"], row["backend"], row["tree"]) == (k, backend, label):
                    row["gc_us"] = per
    for row in rows:
        if row["k"] >= 1000 and row["tree"] == "branch":
            verdict = "holds" if row["journal_share"] <= TARGET else "FAILS"
            share = row["journal_share"]
            print(f"  target ≤{TARGET:.0%} at K={row['k']} {row['backend']}: {share:+.1%} {verdict}")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
