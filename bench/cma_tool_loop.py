#!/usr/bin/env python3
"""Claude Managed Agents tool loop: rma's provider vs the ``anthropic`` SDK's session tool runner.

Both clients drive the same loopback ``CMAEmulator``, run in a process of its own
(``bench/_cma_server.py``) so the server's CPU is not billed to the client. Every session plays
the same script: N tool turns (one ``agent.custom_tool_use`` ``step`` each, then a
``requires_action`` idle) and a final text turn ``done after N steps`` ending on ``end_turn``.
Each client answers every tool call with ``"step {n} done"`` from an ``async def``.

- ``rma``: ``rma_shell.run(ClaudeManagedAgents(...), handler=..., prompt=...)`` under trio; the
  provider (and so its HTTP client) is built once per worker and reused by every session.
- ``rma-live``: the same through ``open_session`` + ``next_result()`` (a live session; both
  forms reconnect after a drop — ``run`` since issue #12, R-14 Better).
- ``rma-asyncio`` / ``rma-live-asyncio``: the same two under ``asyncio.run`` (one shell on anyio).
- ``sdk-asyncio`` / ``sdk-trio``: ``AsyncAnthropic`` built once per worker;
  per session ``beta.sessions.create``, ``events.send`` (the kickoff ``user.message``), then
  ``async for call in beta.sessions.events.tool_runner(session_id, tools=[step],
  max_idle=0)``. ``max_idle=0`` makes the runner stop as soon as the ``end_turn`` idle arrives
  (its default waits 60 s for more work); the runner yields tool calls, not the final text,
  so the final message is checked from the event history after the timer stops.

A sample times ``sessions`` whole sessions run one after the other (create → final
``end_turn``): wall time (``perf_counter``) and the worker's CPU time (``process_time``),
divided by sessions × N = ms per tool round trip. Each (client, scenario) runs in a fresh worker
process (one warm-up session, then ``--inner`` samples); workers interleave over ``--rounds``
rounds; medians are reported with ratios to ``sdk-asyncio``. Every session is checked: the
final text, N tool calls, each executed once.

Drops: the same with ``drop_stream_after(K)`` armed on each session's first stream. K = 3
drops the stream right before an ``agent.custom_tool_use`` (the tool call lands in the history
while nobody listens: an unanswered tool call the client must find); K = 6 drops it right after
a ``requires_action`` idle (the tool runs, and its result is posted, during the gap). The report
says, per client, whether every session still ended correctly, how many tool executions it
took, and the wall time per session next to the same client's time without a drop.

    python bench/cma_tool_loop.py             # full: 50×1, 10×10, 1×100 and the drops
    python bench/cma_tool_loop.py --quick     # CI smoke: 2×3 and one drop, no figures to quote
    python bench/cma_tool_loop.py --profile rma --scenarios 1x100   # cProfile one worker
    python bench/cma_tool_loop.py --no-drops --tree main=/tmp/main --clients rma,rma@main
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from local_loop import load, machine, source_digest  # noqa: E402

API_KEY = "sk-ant-bench"
PROMPT = "Run the steps."
CLIENTS = (
    "rma",
    "rma-live",
    "rma-asyncio",
    "rma-live-asyncio",
    "sdk-asyncio",
    "sdk-trio",
    "httpx-trio",
    "httpx-asyncio",
    "h11-trio",
    "h11-asyncio",
)
FLOORS = ("httpx-trio", "httpx-asyncio", "h11-trio", "h11-asyncio")
"""Plain loops with no recovery: they run the scenarios without drops."""
BASELINE = "sdk-asyncio"
FULL_SCENARIOS = ((50, 1), (10, 10), (1, 100))
QUICK_SCENARIOS = ((2, 3),)
DROP_POINTS = {3: "before a tool use", 6: "after a requires_action idle"}
FULL_DROPS = ((5, 10, 3), (5, 10, 6))  # (sessions, steps, drop after K events)
QUICK_DROPS = ((1, 3, 3),)


def expected_text(steps: int) -> str:
    return f"done after {steps} steps"


# ── clients: each returns (loop, setup, run_once) ─────────────────────────────────────────
# ``setup`` builds what every session shares; ``run_once(shared)`` runs one whole session
# and returns a check callable (run after the timer stops) that raises if the session went wrong.

Check = Callable[[], Awaitable[dict[str, Any]]]
RunOnce = Callable[[Any], Awaitable[Check]]


def client_rma(
    base_url: str, agent: str, env: str, steps: int, *, live: bool
) -> tuple[Callable[[], Awaitable[Any]], RunOnce]:
    from rma_shell import Failure, open_session, run
    from rma_shell.providers.claude import ClaudeManagedAgents

    class Handler:
        def __init__(self) -> None:
            self.calls: list[int] = []

        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            self.calls.append(input["n"])
            return f"step {input['n']} done"

    async def setup() -> Any:
        return ClaudeManagedAgents(
            api_key=API_KEY, base_url=base_url, env={}, agent_id=agent, environment_id=env
        )

    async def run_once(provider: Any) -> Check:
        handler = Handler()
        if live:
            async with open_session(provider, handler=handler, prompt=PROMPT, max_turns=steps + 10) as s:
                outcome = await s.next_result()
        else:
            outcome = await run(provider, handler=handler, prompt=PROMPT, max_turns=steps + 10, timeout=120)

        async def check() -> dict[str, Any]:
            if isinstance(outcome, Failure):
                error = outcome.failure()
                detail = f"{error.kind}: {error.message}"[:300]
                return {"ok": False, "error": detail, "executions": len(handler.calls)}
            result = outcome.unwrap()
            ok = (
                result.text == expected_text(steps)
                and result.turns == steps + 1
                and sorted(handler.calls) == list(range(1, steps + 1))
            )
            return {"ok": ok, "executions": len(handler.calls), "error": None if ok else repr(result)[:300]}

        return check

    return setup, run_once


def client_sdk(
    base_url: str, agent: str, env: str, steps: int
) -> tuple[Callable[[], Awaitable[Any]], RunOnce]:
    import anthropic
    from anthropic import beta_async_tool

    executions: dict[str, list[int]] = {}
    current: list[str] = []

    @beta_async_tool(name="step", description="Run step n.")
    async def step(n: int) -> str:
        executions.setdefault(current[-1], []).append(n)
        return f"step {n} done"

    async def setup() -> Any:
        return anthropic.AsyncAnthropic(base_url=base_url, api_key=API_KEY)

    async def run_once(client: Any) -> Check:
        session = await client.beta.sessions.create(agent=agent, environment_id=env)
        current.append(session.id)
        await client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": PROMPT}]}]
        )
        posted = 0
        error = None
        try:
            async for call in client.beta.sessions.events.tool_runner(session.id, tools=[step], max_idle=0):
                posted += int(call.posted and not call.is_error)
        except Exception as exc:  # the runner gave up: what it raised is the finding
            error = f"{type(exc).__name__}: {exc}"[:200]

        async def check() -> dict[str, Any]:
            history = [e async for e in client.beta.sessions.events.list(session.id, limit=1000)]
            texts = [b.text for e in history if e.type == "agent.message" for b in e.content]
            results = [e for e in history if e.type == "user.custom_tool_result"]
            ran = executions.get(session.id, [])
            ok = (
                error is None
                and texts[-1:] == [expected_text(steps)]
                and len(results) == steps
                and posted == steps
                and sorted(ran) == list(range(1, steps + 1))
            )
            return {
                "ok": ok,
                "executions": len(ran),
                "error": error or (None if ok else f"texts {texts[-1:]}"),
            }

        return check

    return setup, run_once


def client_floor(
    base_url: str, agent: str, env: str, steps: int, *, wire: str
) -> tuple[Callable[[], Awaitable[Any]], RunOnce]:
    """The floors: a plain loop — create the session, open its event stream, send the
    kickoff, answer each ``requires_action`` idle's tool uses, stop at ``end_turn`` — over one
    ``httpx.AsyncClient`` (two pooled connections) or two ``h11`` keep-alive sockets (one
    for the stream, one for the posts), with rma's SSE decoder. No retries, no reconnects."""
    import httpx
    from _h11_floor import H11Floor

    from rma.wire.sse import SSEDecoder

    headers = {
        "authorization": f"Bearer {API_KEY}",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "managed-agents-2026-04-01",
        "content-type": "application/json",
    }

    async def setup() -> Any:
        if wire == "httpx":
            return httpx.AsyncClient(base_url=base_url, timeout=60)
        return (H11Floor(base_url), H11Floor(base_url))

    async def post(client: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        if wire == "httpx":
            response = await client.post(path, content=data, headers=headers)
            response.raise_for_status()
            answer: dict[str, Any] = json.loads(response.content)
            return answer
        posts = client[1]
        status, _, chunks = await posts.request("POST", path, list(headers.items()), data)
        content = await posts.read(chunks)
        if status // 100 != 2:
            raise RuntimeError(f"HTTP {status}: {content[:300]!r}")
        answer = json.loads(content)
        return answer

    async def run_once(client: Any) -> Check:
        session = await post(client, "/v1/sessions", {"agent": agent, "environment_id": env})
        sid = session["id"]
        path = f"/v1/sessions/{sid}/events"
        stream_headers = {**headers, "accept": "text/event-stream"}
        del stream_headers["content-type"]
        calls: dict[str, int] = {}
        ran: list[int] = []
        texts: list[str] = []
        decoder = SSEDecoder()

        async def on_event(event: dict[str, Any]) -> bool:
            kind = event.get("type")
            if kind == "agent.custom_tool_use":
                calls[event["id"]] = event["input"]["n"]
            elif kind == "agent.message":
                texts.extend(block["text"] for block in event["content"] if block.get("type") == "text")
            elif kind == "session.status_idle":
                stop = event["stop_reason"]
                if stop["type"] != "requires_action":
                    return True
                results = []
                for use_id in stop["event_ids"]:
                    n = calls.pop(use_id)
                    ran.append(n)
                    results.append(
                        {
                            "type": "user.custom_tool_result",
                            "custom_tool_use_id": use_id,
                            "content": [{"type": "text", "text": f"step {n} done"}],
                            "is_error": False,
                        }
                    )
                await post(client, path, {"events": results})
            return False

        async def consume(chunks: Any) -> None:
            async for chunk in chunks:
                for message in decoder.feed(chunk):
                    if message.data and await on_event(json.loads(message.data)):
                        return

        kickoff = {"events": [{"type": "user.message", "content": [{"type": "text", "text": PROMPT}]}]}
        if wire == "httpx":
            async with client.stream("GET", path + "/stream", headers=stream_headers) as response:
                await post(client, path, kickoff)
                await consume(response.aiter_bytes())
        else:
            stream = client[0]
            status, _, chunks = await stream.request(
                "GET", path + "/stream", list(stream_headers.items()), b""
            )
            if status != 200:
                raise RuntimeError(f"the event stream answered HTTP {status}")
            await post(client, path, kickoff)
            await consume(chunks)
            await chunks.aclose()
            await stream.aclose()  # the server keeps the stream open: this connection is spent

        async def check() -> dict[str, Any]:
            ok = texts[-1:] == [expected_text(steps)] and sorted(ran) == list(range(1, steps + 1))
            return {"ok": ok, "executions": len(ran), "error": None if ok else f"texts {texts[-1:]}"}

        return check

    return setup, run_once


def make_client(
    name: str, base_url: str, agent: str, env: str, steps: int
) -> tuple[str, Callable[[], Awaitable[Any]], RunOnce]:
    if name == "rma":
        return ("trio", *client_rma(base_url, agent, env, steps, live=False))
    if name == "rma-live":
        return ("trio", *client_rma(base_url, agent, env, steps, live=True))
    if name == "rma-asyncio":  # the same code on the other anyio backend
        return ("asyncio", *client_rma(base_url, agent, env, steps, live=False))
    if name == "rma-live-asyncio":
        return ("asyncio", *client_rma(base_url, agent, env, steps, live=True))
    if name == "sdk-asyncio":
        return ("asyncio", *client_sdk(base_url, agent, env, steps))
    if name == "sdk-trio":
        return ("trio", *client_sdk(base_url, agent, env, steps))
    if name in FLOORS:
        wire, _, loop = name.partition("-")
        return (loop, *client_floor(base_url, agent, env, steps, wire=wire))
    raise SystemExit(f"unknown client {name!r}")


# ── the worker: one client, its scenarios, in a process of its own ────────────────────────


def worker(
    names: list[str], jobs: list[dict[str, Any]], inner: int, profile: str | None
) -> list[dict[str, Any]]:
    out = []
    profiler = cProfile.Profile(time.process_time) if profile else None
    for name, job in ((name, job) for name in names for job in jobs if name in job.get("clients", names)):
        sessions, steps = job["sessions"], job["steps"]
        loop, setup, run_once = make_client(name, job["base_url"], job["agent"], job["env"], steps)

        async def body(
            setup: Callable[[], Awaitable[Any]] = setup,
            run_once: RunOnce = run_once,
            sessions: int = sessions,
        ) -> dict[str, Any]:
            shared = await setup()
            warm = await (await run_once(shared))()  # warm-up, and a check of the conversation
            walls, cpus, checks = [], [], [warm]
            for _ in range(inner):
                gc.collect()
                pending = []
                w0, c0 = time.perf_counter(), time.process_time()
                if profiler:
                    profiler.enable()
                for _ in range(sessions):
                    pending.append(await run_once(shared))
                if profiler:
                    profiler.disable()
                cpus.append(time.process_time() - c0)
                walls.append(time.perf_counter() - w0)
                checks += [await check() for check in pending]
            with contextlib.suppress(Exception):
                await (shared.aclose() if hasattr(shared, "aclose") else shared.close())
            return {"wall": walls, "cpu": cpus, "checks": checks}

        if loop == "trio":
            import trio

            got = trio.run(body)
        else:
            got = asyncio.run(body())
        out.append({**job, "client": name, **got})
    if profiler and profile:
        profiler.dump_stats(profile)
    return out


# ── the driver ────────────────────────────────────────────────────────────────────────────


class Emulator:
    """``bench/_cma_server.py`` in its own process, for one script (N steps, optional drop)."""

    def __init__(self, steps: int, drop_after: int | None = None) -> None:
        cmd = [sys.executable, str(ROOT / "bench" / "_cma_server.py"), "--steps", str(steps)]
        if drop_after is not None:
            cmd += ["--drop-after", str(drop_after)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ready(self) -> dict[str, str]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            self.close()
            raise SystemExit(f"the CMA emulator did not start: {line!r}")
        return {"base_url": f"http://127.0.0.1:{line[1]}", "agent": line[2], "env": line[3]}

    def close(self) -> None:
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


TREES: dict[str, Path] = {}
"""``--tree NAME=PATH``: another checkout whose rma a client ``CLIENT@NAME`` measures."""


def run_worker(name: str, jobs: list[dict[str, Any]], inner: int, timeout: float) -> list[dict[str, Any]]:
    names = name.split(",")
    bases = [n.partition("@")[0] for n in names]
    trees = {n.partition("@")[2] for n in names}
    if len(trees) > 1:
        raise SystemExit(f"one worker runs one tree's clients, not {name}")
    tree = trees.pop()
    script = TREES[tree] / "bench" / "cma_tool_loop.py" if tree else Path(__file__).resolve()
    cmd = [sys.executable, str(script), "--worker", ",".join(bases), "--inner", str(inner)]
    jobs = [
        {**job, "clients": [c.partition("@")[0] for c in job["clients"] if c in names]}
        if "clients" in job
        else job
        for job in jobs
    ]
    try:
        done = subprocess.run(cmd, input=json.dumps(jobs), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"worker {name} did not finish within {timeout:.0f} s") from None
    if done.returncode != 0:
        raise SystemExit(f"worker {name} failed:\n{done.stderr[-4000:]}")
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    for result in results:  # a tree's worker names its clients without the tree
        result["client"] = names[bases.index(result["client"])]
    return results


def versions() -> dict[str, str]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("rma-agents", "trio", "httpx", "anthropic", "httpx2", "anyio"):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def key(job: dict[str, Any]) -> str:
    drop = job.get("drop")
    return f"{job['sessions']}x{job['steps']}" + (f" drop@{drop}" if drop is not None else "")


def report(samples: dict[str, dict[str, dict[str, Any]]], clients: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for scenario, by_client in samples.items():
        sessions, steps = (int(x) for x in scenario.split()[0].split("x"))
        n = sessions * steps
        print(f"\n{scenario}: {sessions} sessions × {steps} tool round trips ({n} a sample)")
        print(
            f"  {'client':<16} {'ms/trip':>8} {'CPU ms/trip':>12} {'ms/session':>11} "
            f"{'× sdk':>6} {'CPU × sdk':>10}  samples  checks"
        )
        rows: dict[str, Any] = {}
        for name in clients:
            if name not in by_client:
                continue
            got = by_client[name]
            bad = [c for c in got["checks"] if not c["ok"]]
            row: dict[str, Any] = {
                "samples": len(got["wall"]),
                "sessions_ok": len(got["checks"]) - len(bad),
                "sessions": len(got["checks"]),
                "executions": sum(c["executions"] for c in got["checks"]),
                "errors": sorted({str(c["error"]) for c in bad}),
            }
            if got["wall"]:
                row["ms_per_trip"] = statistics.median(got["wall"]) / n * 1000
                row["cpu_ms_per_trip"] = statistics.median(got["cpu"]) / n * 1000
                row["ms_per_session"] = statistics.median(got["wall"]) / sessions * 1000
            rows[name] = row
        base = rows.get(BASELINE)
        for name, row in rows.items():
            if "ms_per_trip" not in row:
                continue
            if base and "ms_per_trip" in base:
                row["x_sdk"] = row["ms_per_trip"] / base["ms_per_trip"]
                row["cpu_x_sdk"] = row["cpu_ms_per_trip"] / base["cpu_ms_per_trip"]
                ratio = f"{row['x_sdk']:6.2f} {row['cpu_x_sdk']:10.2f}"
            else:
                ratio = f"{'-':>6} {'-':>10}"
            checks = f"{row['sessions_ok']}/{row['sessions']} ok, {row['executions']} executions"
            print(
                f"  {name:<16} {row['ms_per_trip']:8.3f} {row['cpu_ms_per_trip']:12.3f} "
                f"{row['ms_per_session']:11.1f} {ratio}  {row['samples']:>7}  {checks}"
            )
            for error in row["errors"]:
                print(f"  {'':<12} failed: {error}")
        summary[scenario] = rows
    return summary


def recovery(summary: dict[str, Any]) -> None:
    """What each client did with each drop, next to its time without one."""
    drops = [s for s in summary if "drop@" in s]
    if not drops:
        return
    print("\nstream drops (one per session)")
    for scenario in drops:
        at = int(scenario.split("drop@")[1])
        sessions, steps = (int(x) for x in scenario.split()[0].split("x"))
        clean = next((s for s in summary if "drop@" not in s and s.split("x")[1] == str(steps)), None)
        print(f"  drop after {at} events ({DROP_POINTS.get(at, '?')}), {sessions} sessions × {steps} steps")
        for name, row in summary[scenario].items():
            verdict = "recovered" if row["sessions_ok"] == row["sessions"] else "FAILED"
            line = f"    {name:<16} {verdict}: {row['sessions_ok']}/{row['sessions']} sessions ended right"
            line += f", {row['executions']} tool executions for {row['sessions'] * steps} calls"
            if "ms_per_session" in row:
                line += f", {row['ms_per_session']:.0f} ms/session"
                base = summary.get(clean, {}).get(name) if clean else None
                if base and "ms_per_session" in base:
                    line += f" (no drop: {base['ms_per_session']:.0f})"
            print(line)
            for error in row["errors"]:
                print(f"    {'':<12} {error}")


def targets(summary: dict[str, Any]) -> None:
    print("\ntargets (rma no slower than the SDK's runner)")
    for scenario, rows in summary.items():
        if "drop@" in scenario:
            continue
        for name in ("rma", "rma-live", "rma-asyncio", "rma-live-asyncio"):
            if name in rows and "x_sdk" in rows[name]:
                x = rows[name]["x_sdk"]
                verdict = "holds" if x <= 1.0 else ("within noise" if x <= 1.05 else "FAILS")
                cpu = rows[name]["cpu_x_sdk"]
                print(f"  {name} {scenario}: {x:.2f}× sdk-asyncio wall, {cpu:.2f}× CPU: {verdict}")


def profile_worker(args: argparse.Namespace) -> int:
    scenarios = parse_scenarios(args.scenarios or "1x100")
    emulators = {steps: Emulator(steps) for _, steps in scenarios}
    try:
        ready = {steps: emu.ready() for steps, emu in emulators.items()}
        jobs = [{"sessions": s, "steps": n, "drop": None, **ready[n]} for s, n in scenarios]
        what = f"{args.profile} on {args.scenarios or '1x100'}, {args.inner} samples"
        print(f"profiling {what} → {args.profile_out}")
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            args.profile,
            "--inner",
            str(args.inner),
            "--worker-profile",
            args.profile_out,
        ]
        subprocess.run(cmd, input=json.dumps(jobs), text=True, check=True, stdout=subprocess.DEVNULL)
    finally:
        for emu in emulators.values():
            emu.close()
    buf = io.StringIO()
    stats = pstats.Stats(args.profile_out, stream=buf)
    stats.sort_stats("tottime").print_stats(args.profile_lines)
    stats.sort_stats("cumulative").print_stats(args.profile_lines)
    print(buf.getvalue())
    return 0


def parse_scenarios(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in (item.lower().split("x") for item in text.split(","))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI smoke run: tiny scenarios, no figures to quote"
    )
    parser.add_argument("--rounds", type=int, default=3, help="worker processes per (client, scenario)")
    parser.add_argument("--inner", type=int, default=3, help="timed samples per worker")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset")
    parser.add_argument("--scenarios", help="SESSIONSxSTEPS,… instead of the built-in ones")
    parser.add_argument("--no-drops", action="store_true", help="skip the stream-drop scenarios")
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--profile", metavar="CLIENT", help="cProfile one worker (default scenario 1x100)")
    parser.add_argument("--profile-out", default="/tmp/cma_tool_loop.prof")
    parser.add_argument("--profile-lines", type=int, default=30)
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another checkout (with this bench/) whose rma CLIENT@NAME measures, e.g. rma@main",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-profile", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        jobs = json.loads(sys.stdin.read())
        print(json.dumps(worker(args.worker.split(","), jobs, args.inner, args.worker_profile)))
        return 0
    if args.profile:
        return profile_worker(args)

    scenarios = (
        parse_scenarios(args.scenarios)
        if args.scenarios
        else list(QUICK_SCENARIOS if args.quick else FULL_SCENARIOS)
    )
    drops = [] if args.no_drops else list(QUICK_DROPS if args.quick else FULL_DROPS)
    rounds, inner = (1, 1) if args.quick else (args.rounds, args.inner)
    for tree in args.tree:
        label, _, path = tree.partition("=")
        if not (Path(path) / "bench" / "cma_tool_loop.py").exists():
            raise SystemExit(f"--tree {tree}: copy bench/ (this benchmark and its helpers) into {path}/bench")
        TREES[label] = Path(path).resolve()
    clients = [c for c in args.clients.split(",") if c]
    for name in clients:
        base, _, tree = name.partition("@")
        if base not in CLIENTS or (tree and tree not in TREES):
            raise SystemExit(
                f"unknown client {name!r}; known: {', '.join(CLIENTS)} (CLIENT@TREE with --tree)"
            )

    print(f"machine: {machine()}; load average at start {load()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    digest = source_digest()
    print(f"rma sources: {digest}")
    configs = {(steps, None) for _, steps in scenarios} | {(steps, at) for _, steps, at in drops}
    emulators = {config: Emulator(*config) for config in sorted(configs, key=str)}
    started = time.perf_counter()
    samples: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        ready = {config: emu.ready() for config, emu in emulators.items()}
        jobs = [{"sessions": s, "steps": n, "drop": None, **ready[(n, None)]} for s, n in scenarios]
        jobs += [{"sessions": s, "steps": n, "drop": at, **ready[(n, at)]} for s, n, at in drops]
        for job in jobs:
            if job["drop"] is not None:  # the floors do not recover; the smoke run needs one SDK loop
                job["clients"] = [
                    c for c in clients if c not in FLOORS and not (args.quick and c == "sdk-trio")
                ]
        for job in jobs:
            samples[key(job)] = {}
        # --quick: one worker for every client and job (importing anthropic alone takes ~4 s of
        # CPU). Full: one worker per (client, job), interleaved over the rounds so that load
        # bursts on the shared machine hit every client alike.
        batches = [jobs] if args.quick else [[job] for job in jobs]
        workers = [",".join(clients)] if args.quick else clients
        for batch in batches:
            for _ in range(rounds):
                for name in workers:
                    for result in run_worker(name, batch, inner, 300 if args.quick else 3600):
                        into = samples[key(result)].setdefault(
                            result["client"], {"wall": [], "cpu": [], "checks": []}
                        )
                        ok = all(c["ok"] for c in result["checks"])
                        if ok:  # a failed session's time is not a round-trip time
                            into["wall"] += result["wall"]
                            into["cpu"] += result["cpu"]
                        into["checks"] += result["checks"]
    finally:
        for emu in emulators.values():
            emu.close()
    summary = report(samples, clients)
    recovery(summary)
    if source_digest() != digest:
        print("\nWARNING: the rma sources changed during the run; the figures mix two versions")
    if not args.quick:
        targets(summary)
    failed = [
        (scenario, name)
        for scenario, rows in summary.items()
        if "drop@" not in scenario
        for name, row in rows.items()
        if row["sessions_ok"] != row["sessions"]
    ]
    print(f"\nload average at end {load()}; {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"versions": versions(), "machine": machine(), "sources": digest, "results": summary},
                indent=2,
            )
        )
    if failed:
        print(f"FAIL: sessions went wrong without any fault: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
