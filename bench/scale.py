#!/usr/bin/env python3
"""Many live Claude Managed Agents sessions in one process, on trio and on asyncio: memory, latency, CPU.

The loopback ``CMAEmulator`` runs in a process of its own (``bench/_cma_server.py --scale``:
fd limit raised, small thread stacks, a deep listen backlog; one thread per open stream).
For each size K (100, 1,000, 10,000) a fresh worker process:

1. builds one ``ClaudeManagedAgents`` provider (its HTTP client shared by every session) and
   warms up with one session;
2. opens K live sessions (``open_session``, at most ``--open-concurrency`` opening at a time),
   each kicking off with a prompt that plays one tool round trip and a final answer, and waits
   for every session's first result: all K are now **open and idle** (stream connected,
   nothing in flight);
3. measures **memory per idle session**: the resident set (``VmRSS``) after ``gc.collect()``
   minus the same figure before step 2, divided by K; with ``--tracemalloc`` (a second worker
   run, because tracing slows everything down and costs memory itself) the growth of the
   Python heap that ``tracemalloc`` traces, divided by K, and the allocation sites that hold it;
4. measures **idle CPU**: the worker's CPU time over a few seconds while all K sessions idle;
5. runs a **steady phase** per rate in ``--rates`` (20 and 50 per second by default): for
   ``--duration`` seconds follow-up messages arrive at that rate (Poisson arrivals), each sent
   to a random idle session; each plays one tool round trip (``agent.custom_tool_use`` +
   ``requires_action`` idle → the handler runs → the result is posted) and a final text turn.
   The offered load is the same at every K, so the figures show what the number of live
   sessions costs; the two rates show how the latency grows with the load itself. Full
   (generation 2) garbage collections during the phase are timed with ``gc.callbacks``; before
   the phases, one full collection is timed with the K sessions open (the pause every session
   suffers whenever the collector runs one), and again after ``gc.freeze()``.

What the latency is, exactly: for each tool call, the time from the moment the provider's
stream task hands the ``requires_action`` idle that releases it to the session (a thin
``ClaudeManagedAgents.stream`` override records ``perf_counter()`` in its ``on_event``
callback, right after the SSE frame is decoded and before it is queued to the session's
inbox) to the moment the tool call starts (the session's ``rma.tool.start`` telemetry, emitted
just before the handler is awaited). So it covers the session's queue, the core's ``step``
and the shell's tool dispatch — the client's own work — and not the kernel or the server.
Beside it, ``busy99`` is the 99th percentile of the process's CPU time between the same two
moments — on a single-threaded event loop, the work the loop did meanwhile, for this session or
any other — and ``busy%`` is, over the slowest 1% of tool calls, the share of their wait during
which the process ran at all: the rest of it, the machine's other processes had the cores. The
end-to-end figure starts instead at the emulator's ``processed_at`` stamp of that idle (the
same machine's wall clock), so it adds the emulator's write, the socket, and the time the
bytes wait before the client's event loop reads them.

**CPU per event**: the worker's CPU time during the steady phase divided by the stream events
it received (the echoes of its own inputs included); this is the whole client loop's cost —
SSE decoding, the core, telemetry, the HTTP posts — per event.

    python bench/scale.py                # full: 100, 1,000 and 10,000 sessions (~15 min)
    python bench/scale.py --quick        # CI smoke: 100 sessions, short phases, no claims
    python bench/scale.py --sizes 1000 --profile /tmp/scale.prof   # cProfile the steady phase

**Many sessions on one Local provider** (``--local``, ``bench/_scale_local.py``): K concurrent
two-turn ``run`` calls share one ``Local`` provider (its own pooled HTTP client) against the
loopback ``bench/_chat_server.py`` answering each request after 0.5 s, as a model would (the
server is slower than the client, so requests queue in the client); the wall time until all
K finish (the floor is 2 K × 0.5 s / 100 connections), per-session p50/p99, CPU.
``--quick`` runs its 1,000-session case after the 100 CMA sessions and fails when any of the
1,000 does not finish within ``--local-deadline`` (60 s).

    python bench/scale.py --local        # Local only: 100, 400, 700 and 1,000 sessions
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _scale_minimal  # noqa: E402
import _sched_counts  # noqa: E402
from _scale_report import _short, report, targets  # noqa: E402
from local_loop import load, machine, source_digest  # noqa: E402

API_KEY = "sk-ant-bench"
PROMPT = "Run the step."
FULL_SIZES = (100, 1_000, 10_000)
QUICK_SIZES = (100,)
TRACED_SIZES_MAX = 1_000
REQUESTS_PER_SESSION = 200  # per session; the steady phase gives a session ~10 follow-ups at most


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


# ── the worker: K sessions in this process ────────────────────────────────────────────────


async def worker(args: argparse.Namespace) -> dict[str, Any]:
    import anyio

    from rma_shell import open_session
    from rma_shell.providers.claude import ClaudeManagedAgents
    from rma_shell.telemetry import Telemetry

    k = args.worker
    raise_fd_limit()
    if args.count:
        _sched_counts.install(args.backend)
    # tool_use_id -> (perf_counter, process_time, processed_at) when its idle was handed over
    arrivals: dict[str, tuple[float, float, str]] = {}
    # (client latency s, the process's CPU time meanwhile s, tool start wall clock, processed_at)
    samples: list[tuple[float, float, float, str]] = []
    counters = {"events": 0}
    measuring = [False]

    class TimedCMA(ClaudeManagedAgents):
        """Records when each ``requires_action`` idle leaves the stream task (see the docstring)."""

        async def stream(
            self, conn: Any, on_connected: Any, on_event: Callable[[Any], Awaitable[None]]
        ) -> Any:
            async def timed(event: Any) -> None:
                counters["events"] += 1
                stop = event.get("stop_reason") if event.get("type") == "session.status_idle" else None
                if measuring[0] and isinstance(stop, dict) and stop.get("type") == "requires_action":
                    now, cpu = time.perf_counter(), time.process_time()
                    for ident in stop.get("event_ids") or ():
                        arrivals[ident] = (now, cpu, event.get("processed_at", ""))
                await on_event(event)

            return await super().stream(conn, on_connected, timed)

    def tool_started(name: str, measurements: Any, metadata: Any) -> None:
        arrival = arrivals.pop(metadata.get("tool_use_id"), None)
        if arrival is not None:
            waited, busy = time.perf_counter() - arrival[0], time.process_time() - arrival[1]
            samples.append((waited, busy, time.time(), arrival[2]))

    telemetry = Telemetry()
    telemetry.attach("bench.scale", "rma.tool.start", tool_started)

    class Tools:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return f"step {input['n']} done"

    tools = Tools()
    provider = TimedCMA(
        api_key=API_KEY, base_url=args.base_url, env={}, agent_id=args.agent, environment_id=args.env
    )
    expected = "done after 1 steps"
    out: dict[str, Any] = {"sessions": k}

    async def warm_up() -> None:
        async with open_session(provider, handler=tools, prompt=PROMPT, telemetry=telemetry) as s:
            assert (await s.next_result()).unwrap().text == expected
            await s.message("again")
            assert (await s.next_result()).unwrap().text == expected

    if args.client == "minimal":
        minimal = _scale_minimal.MinimalClient(args.base_url, API_KEY, args.agent, args.env, None)
    else:
        await warm_up()
    live: list[Any] = []
    busy: list[bool] = []
    failures: list[str] = []
    all_open = anyio.Event()
    opening = anyio.Semaphore(args.open_concurrency)
    done_rounds = [0]
    round_done = [anyio.Event() for _ in range(k)]

    async def check(session: Any, what: str) -> None:
        """Wait for the session's next result and check it; keep no reference to it (a result
        holds every event of its request, which is not an idle session's cost)."""
        outcome = await session.next_result()
        try:
            ok = outcome.unwrap().text == expected
        except Exception:
            ok = False
        if not ok:
            failures.append(f"{what}: {outcome!r}"[:300])

    async def one(index: int) -> None:
        await opening.acquire()
        released = False
        try:
            async with open_session(
                provider, handler=tools, prompt=PROMPT, telemetry=telemetry, max_turns=1_000_000
            ) as session:
                await check(session, "first result")
                opening.release()
                released = True
                live.append(session)
                busy.append(False)
                slot = len(live) - 1
                if len(live) == k:
                    all_open.set()
                while True:
                    await check(session, "result")
                    busy[slot] = False
                    done_rounds[0] += 1
                    round_done[slot].set()
        finally:
            if not released:
                opening.release()

    def minimal_tool(input: dict[str, Any]) -> str:
        return f"step {input['n']} done"

    def minimal_event(event: dict[str, Any]) -> None:
        counters["events"] += 1
        stop = event.get("stop_reason") if event.get("type") == "session.status_idle" else None
        if measuring[0] and isinstance(stop, dict) and stop.get("type") == "requires_action":
            now, cpu = time.perf_counter(), time.process_time()
            for ident in stop.get("event_ids") or ():
                arrivals[ident] = (now, cpu, event.get("processed_at", ""))

    def minimal_tool_started(ident: str) -> None:
        tool_started("", {}, {"tool_use_id": ident})

    async def one_minimal(index: int) -> None:
        """The floor (``bench/_scale_minimal.py``): the same bookkeeping, no rma session."""
        await opening.acquire()
        session = _scale_minimal.MinimalSession(minimal)
        slot = [-1]

        def on_result(text: str) -> None:
            if text != expected:
                failures.append(f"result: {text!r}"[:300])
            if slot[0] < 0:
                opening.release()
                live.append(session)
                busy.append(False)
                slot[0] = len(live) - 1
                if len(live) == k:
                    all_open.set()
            else:
                busy[slot[0]] = False
                done_rounds[0] += 1
                round_done[slot[0]].set()

        try:
            await session.run(PROMPT, minimal_tool, minimal_event, minimal_tool_started, on_result)
        finally:
            if slot[0] < 0:
                opening.release()

    gc_pauses: list[float] = []
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            gc_started[0] = time.perf_counter()
        elif measuring[0]:
            gc_pauses.append((time.perf_counter() - gc_started[0]) * 1000)

    gc.callbacks.append(on_gc)

    async def steady(rate: float) -> dict[str, Any]:
        """Follow-ups at ``rate`` per second (Poisson arrivals) to random idle sessions."""
        rng = random.Random(7)
        samples.clear()
        gc_pauses.clear()
        counters["events"] = 0
        started_rounds = 0
        done_before = done_rounds[0]
        gc.collect()
        measuring[0] = True
        c0, w0 = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        counted0 = _sched_counts.snapshot()
        deadline = w0 + args.duration
        next_at = w0
        while True:
            next_at += rng.expovariate(rate)
            if next_at >= deadline:
                break
            await anyio.sleep(max(0.0, next_at - time.perf_counter()))
            for _ in range(20):  # a random idle session (skip the few that are still busy)
                slot = rng.randrange(k)
                if not busy[slot]:
                    break
            else:
                continue
            busy[slot] = True
            started_rounds += 1
            await live[slot].message("again")
        with anyio.move_on_after(60):
            while done_rounds[0] - done_before < started_rounds:  # noqa: ASYNC110 - a bench's poll
                await anyio.sleep(0.01)
        if profiler:
            profiler.disable()
        counted = _sched_counts.snapshot()
        wall = time.perf_counter() - w0
        cpu = time.process_time() - c0
        measuring[0] = False
        client = [s[0] * 1000 for s in samples]
        on_cpu = [s[1] * 1000 for s in samples]
        e2e = [
            (wall_at - datetime.fromisoformat(stamp).timestamp()) * 1000
            for _, _, wall_at, stamp in samples
            if stamp
        ]
        # The slowest 1%: how much of their wait the process spent running (its own queue) and
        # how much it was not running at all (the OS gave the core to another process).
        slowest = sorted(samples, reverse=True)[: max(1, len(samples) // 100)]
        busy_share = sum(s[1] for s in slowest) / max(1e-9, sum(s[0] for s in slowest))
        return {
            "rate": rate,
            "round_trips": started_rounds,
            "completed": done_rounds[0] - done_before,
            "events": counters["events"],
            "steady_wall_s": wall,
            "cpu_pct": cpu / wall * 100,
            "cpu_us_per_event": cpu / max(1, counters["events"]) * 1e6,
            "latencies": len(client),
            "p50_ms": statistics.median(client) if client else None,
            "p99_ms": percentile(client, 99),
            "max_ms": max(client) if client else None,
            "on_cpu_p99_ms": percentile(on_cpu, 99),
            "slowest_on_cpu_share": busy_share if samples else None,
            "e2e_p50_ms": statistics.median(e2e) if e2e else None,
            "e2e_p99_ms": percentile(e2e, 99),
            "gc2_pauses": len(gc_pauses),
            "gc2_max_ms": max(gc_pauses) if gc_pauses else 0.0,
            "per_event": {
                name: (counted[name] - counted0.get(name, 0)) / max(1, counters["events"]) for name in counted
            },
        }

    async def closed_loop(rounds: int) -> dict[str, Any]:
        """``--closed R``: every session plays R round trips back to back (``--instructions``)."""
        counters["events"] = 0
        failed = len(failures)

        async def drive(slot: int) -> None:
            for _ in range(rounds):
                round_done[slot] = anyio.Event()
                busy[slot] = True
                await live[slot].message("again")
                await round_done[slot].wait()

        async with anyio.create_task_group() as drivers:
            for slot in range(k):
                drivers.start_soon(drive, slot)
        return {"events": counters["events"], "round_trips": rounds * k, "failed": len(failures) - failed}

    profiler = cProfile.Profile(time.process_time) if args.profile else None
    async with anyio.create_task_group() as nursery:
        gc.collect()
        rss0 = rss_bytes()
        if args.tracemalloc:
            tracemalloc.start(args.tracemalloc_frames)
            snap0 = tracemalloc.take_snapshot()
            traced0 = tracemalloc.get_traced_memory()[0]
        w0, c0 = time.perf_counter(), time.process_time()
        if args.client == "minimal":
            minimal.nursery = nursery
        for index in range(k):
            nursery.start_soon(one_minimal if args.client == "minimal" else one, index)
        with anyio.move_on_after(args.open_timeout) as opened_in_time:
            await all_open.wait()
        if opened_in_time.cancelled_caught:
            out["error"] = f"only {len(live)} of {k} sessions opened within {args.open_timeout:.0f} s"
            nursery.cancel_scope.cancel()
            return out
        out["open_s"] = time.perf_counter() - w0
        out["open_cpu_ms_per_session"] = (time.process_time() - c0) / k * 1000
        await anyio.sleep(0.5)  # let closed keep-alive connections and finished tasks go
        if args.closed:
            out.update(await closed_loop(args.closed))
            nursery.cancel_scope.cancel()
            return out
        gc.collect()
        out["rss_per_idle_kib"] = (rss_bytes() - rss0) / k / 1024
        out["rss_mib"] = rss_bytes() / 2**20
        if args.tracemalloc:
            traced1 = tracemalloc.get_traced_memory()[0]
            snap1 = tracemalloc.take_snapshot()
            out["traced_per_idle_kib"] = (traced1 - traced0) / k / 1024
            if args.tracemalloc_key == "caller":
                out["traced_by_file"] = _by_caller(snap1.compare_to(snap0, "traceback"), k)[: args.top]
                tracemalloc.stop()
                nursery.cancel_scope.cancel()
                return out
            top = snap1.compare_to(snap0, args.tracemalloc_key)
            out["traced_by_file"] = [
                [_site(stat.traceback[0], args.tracemalloc_key), stat.size_diff / k]
                for stat in top[: args.top]
            ]
            tracemalloc.stop()
            nursery.cancel_scope.cancel()
            return out
        # What a full (generation 2) collection costs with K sessions open — the pause the
        # collector inflicts on every session whenever it runs one — and after gc.freeze().
        t0 = time.perf_counter()
        gc.collect()
        out["full_gc_ms"] = (time.perf_counter() - t0) * 1000
        gc.freeze()  # the open sessions' objects leave the collector's generations
        t0 = time.perf_counter()
        gc.collect()
        out["full_gc_frozen_ms"] = (time.perf_counter() - t0) * 1000
        if not args.gc_freeze:
            gc.unfreeze()
        c0 = time.process_time()
        await anyio.sleep(args.idle_seconds)
        out["idle_cpu_pct"] = (time.process_time() - c0) / args.idle_seconds * 100

        out["steady"] = [await steady(rate) for rate in args.rates]
        if profiler:
            profiler.dump_stats(args.profile)
        out["failures"] = failures[:5]
        out["failed"] = len(failures)
        nursery.cancel_scope.cancel()
    return out


# ── the driver ────────────────────────────────────────────────────────────────────────────


class Emulator:
    def __init__(self) -> None:
        cmd = [
            sys.executable,
            str(ROOT / "bench" / "_cma_server.py"),
            "--steps",
            "1",
            "--requests",
            str(REQUESTS_PER_SESSION),
            "--scale",
        ]
        # The emulator's stderr goes to a file: socketserver prints a traceback for every
        # connection a finished worker leaves behind, but one during the run is a finding.
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            self.close()
            raise SystemExit(f"the CMA emulator did not start: {line!r}")
        self.base_url, self.agent, self.env = f"http://127.0.0.1:{line[1]}", line[2], line[3]

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def errors(self) -> list[str]:
        """The exception line of each traceback the emulator printed so far, but for the
        connection resets a worker leaves behind when it exits."""
        self.log.flush()
        self.log.seek(0)
        return [
            line
            for line in self.log.read().splitlines()
            if re.match(r"[A-Za-z_.]*(Error|Exception)\b", line)
            and not line.startswith(("Exception occurred", "Exception in thread"))
            and not line.startswith(("ConnectionResetError", "BrokenPipeError"))
        ]

    def close(self) -> None:
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def run_worker(
    k: int,
    args: argparse.Namespace,
    *,
    traced: bool,
    backend: str = "trio",
    client: str = "rma",
    closed: int = 0,
    wrap: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One worker process against an emulator of its own; ``closed``/``wrap``: ``--instructions``."""
    emulator = Emulator()
    cmd = [
        *wrap,
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        str(k),
        "--backend",
        backend,
        "--client",
        client,
        "--base-url",
        emulator.base_url,
        "--agent",
        emulator.agent,
        "--env",
        emulator.env,
        "--rates",
        ",".join(f"{r:g}" for r in args.rates),
        "--duration",
        str(args.duration),
        "--idle-seconds",
        str(args.idle_seconds),
        "--open-concurrency",
        str(args.open_concurrency),
        "--open-timeout",
        str(args.open_timeout),
    ]
    if traced:
        cmd.append("--tracemalloc")
    if args.profile and not traced:
        cmd += ["--profile", args.profile]
    if args.gc_freeze:
        cmd.append("--gc-freeze")
    if args.count:
        cmd.append("--count")
    if closed:
        cmd += ["--closed", str(closed)]
    cpu0 = emulator.cpu_s()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.open_timeout + 600)
        emulator_cpu = emulator.cpu_s() - cpu0
        emulator_rss = emulator.rss_mib()
        emulator_errors = [line for line in emulator.errors() if line.strip()]
    except subprocess.TimeoutExpired:
        raise SystemExit(f"the {k}-session worker did not finish") from None
    finally:
        emulator.close()
    if done.returncode != 0:
        errors = "\n".join(emulator_errors[:5])
        raise SystemExit(f"the {k}-session worker failed:\n{done.stderr[-4000:]}\nemulator errors:\n{errors}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["emulator_cpu_s"] = emulator_cpu
    result["emulator_errors"] = len(emulator_errors)
    result["emulator_rss_mib"] = emulator_rss
    result["backend"] = backend
    result["client"] = client
    if wrap:
        result["valgrind"] = done.stderr
    return result


def versions() -> dict[str, str]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("rma-agents", "anyio", "trio", "httpx", "httpcore", "h11"):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def _by_caller(stats: list[tracemalloc.StatisticDiff], k: int) -> list[list[Any]]:
    """``--tracemalloc-key caller`` (with ``--tracemalloc-frames 25`` or so): the traced growth
    grouped by the innermost frame in rma or the bench that led to each allocation, beside the
    frame that made it — which line of rma holds what, per session."""
    sizes: dict[str, float] = {}
    for stat in stats:
        frames = list(stat.traceback)  # oldest first
        ours = [f for f in frames if "/rma" in f.filename or "/bench/" in f.filename]
        site = "?"
        if ours:
            inner = frames[-1]
            site = f"{_short(ours[-1].filename)}:{ours[-1].lineno} <- {_short(inner.filename)}:{inner.lineno}"
        sizes[site] = sizes.get(site, 0) + stat.size_diff
    return sorted(([site, size / k] for site, size in sizes.items()), key=lambda row: -row[1])


def _site(frame: Any, key: str) -> str:
    return f"{frame.filename}:{frame.lineno}" if key == "lineno" else str(frame.filename)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: 100 sessions, short phases")
    parser.add_argument("--sizes", help="comma-separated session counts (default 100,1000,10000)")
    parser.add_argument("--rates", help="steady-phase rates, follow-ups per second (default 20,50)")
    parser.add_argument("--duration", type=float, default=None, help="steady phase seconds (default 20)")
    parser.add_argument("--idle-seconds", type=float, default=None, help="idle CPU window (default 3)")
    parser.add_argument("--open-concurrency", type=int, default=50, help="sessions opening at once")
    parser.add_argument("--open-timeout", type=float, default=1200.0)
    parser.add_argument("--no-tracemalloc", action="store_true", help="skip the tracemalloc runs")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="gc.freeze() once the sessions are open (see the docs)"
    )
    parser.add_argument("--profile", help="cProfile the steady phases into this file (one size)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--backends", default="trio,asyncio", help="anyio backends to run, in order (default trio,asyncio)"
    )
    parser.add_argument("--backend", default="trio", help=argparse.SUPPRESS)
    parser.add_argument(
        "--clients",
        default="rma,minimal",
        help="clients to run, in order: rma, minimal (the httpx-streams floor; default both)",
    )
    parser.add_argument("--client", default="rma", help=argparse.SUPPRESS)
    parser.add_argument(
        "--count", action="store_true", help="count reschedules, spawns, cancel scopes (slows the run)"
    )
    parser.add_argument("--local", action="store_true", help="only the many-sessions-on-one-Local case")
    parser.add_argument("--local-deadline", type=float, default=60.0, help="seconds for the Local case")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--agent", help=argparse.SUPPRESS)
    parser.add_argument("--env", help=argparse.SUPPRESS)
    parser.add_argument("--tracemalloc", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tracemalloc-frames", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--closed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per stream event under valgrind (rma and the minimal client)",
    )
    parser.add_argument("--instructions-sessions", type=int, default=10, help=argparse.SUPPRESS)
    parser.add_argument(
        "--instructions-rounds",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        default=(2, 8),
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--tracemalloc-key", default="filename", help=argparse.SUPPRESS)
    parser.add_argument("--top", type=int, default=12, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.rates = [float(r) for r in (args.rates or ("30" if args.quick else "20,50")).split(",")]
    args.duration = args.duration or (2.0 if args.quick else 20.0)
    args.idle_seconds = args.idle_seconds or (1.0 if args.quick else 3.0)

    if args.worker:
        import anyio

        print(json.dumps(anyio.run(worker, args, backend=args.backend)))
        sys.stdout.flush()
        os._exit(0)  # tearing down thousands of sessions measures nothing; the emulator copes

    if args.instructions:
        import _scale_instructions

        print(f"machine: {machine()}; load average at start {load()}")
        _scale_instructions.count(args, run_worker)
        return 0

    if args.local or args.quick:
        from _scale_local import main_local

        print("one Local provider, K concurrent two-turn sessions:")
        chosen = tuple(int(s) for s in args.sizes.split(",")) if args.sizes and args.local else None
        local_rows = main_local(chosen, args.quick, args.local_deadline)
        local_bad = [r for r in local_rows if "error" in r or r["completed"] != r["sessions"]]
        if args.local:
            return 1 if local_bad else 0
        if local_bad:
            print("the Local case FAILED: not every session finished")
            return 1

    sizes = (
        tuple(int(s) for s in args.sizes.split(","))
        if args.sizes
        else (QUICK_SIZES if args.quick else FULL_SIZES)
    )
    print(f"machine: {machine()}; load average at start {load()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    digest = source_digest()
    print(f"rma sources: {digest}; fd limit {raise_fd_limit()}")
    started = time.perf_counter()
    rows = []
    for k in sizes:
        for backend in args.backends.split(","):
            for client in args.clients.split(","):
                row = run_worker(k, args, traced=False, backend=backend, client=client)
                # The traced heap per session does not depend on K (nor on the backend much);
                # 10,000 traced opens take long.
                traced_run = k <= TRACED_SIZES_MAX and not args.no_tracemalloc and not args.quick
                if traced_run and "error" not in row and backend == "trio":
                    traced = run_worker(k, args, traced=True, backend=backend, client=client)
                    row["traced_per_idle_kib"] = traced.get("traced_per_idle_kib")
                    row["traced_by_file"] = traced.get("traced_by_file")
                rows.append(row)
                elapsed = time.perf_counter() - started
                print(f"  {k} sessions, {client} on {backend} done ({elapsed:.0f} s)", flush=True)
    report(rows, args)
    if args.profile:
        buf = io.StringIO()
        pstats.Stats(args.profile, stream=buf).sort_stats("tottime").print_stats(25)
        print(buf.getvalue())
    if source_digest() != digest:
        print("\nWARNING: the rma sources changed during the run; the figures mix two versions")
    if not args.quick:
        targets(rows)
    print(f"\nload average at end {load()}; {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"versions": versions(), "machine": machine(), "sources": digest, "results": rows}, indent=2
            )
        )
    bad = [r for r in rows if "error" in r or r.get("failed")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
