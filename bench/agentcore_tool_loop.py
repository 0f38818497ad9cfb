#!/usr/bin/env python3
"""Bedrock AgentCore tool loop: rma's provider beside a boto3 loop, the httpx floor and the wire.

One loopback ``AgentCoreEmulator`` in a process of its own (``bench/_agentcore_server.py``:
every request's SigV4 checked with botocore, its input with botocore's model) plays N tool turns
(a ``toolUse`` ``step`` each, 8 event-stream frames) and a final text turn (7 frames), so a
conversation is T = N + 1 ``InvokeHarness`` calls ("turns"). Every client makes the same calls:
the user prompt and the tool declaration first, then per tool turn the assistant's ``toolUse``
echo and the ``toolResult`` (the runtime session keeps the rest, B-6), the declaration on every
call as rma sends it. Clients:

- ``boto3``: ``boto3.client("bedrock-agentcore", endpoint_url=...)`` with static fake
  credentials; ``invoke_harness`` and a loop over ``reply["stream"]`` assembling the tool use
  (synchronous: boto3 has no async API), one client for all runs;
- ``rma`` / ``rma-asyncio``: ``rma_shell.run(BedrockAgentCore(...), ...)`` under trio / asyncio,
  the provider built once (its HTTP client is shared by its sessions);
- ``httpx-trio`` / ``httpx-asyncio``: the httpx floor — one ``httpx.AsyncClient``, rma's SigV4
  signer and event-stream decoder, the same assembly as the boto3 loop;
- ``h11-trio`` / ``h11-asyncio``: the wire floor — the same over one keep-alive socket with
  ``h11`` framing (``bench/_h11_floor.py``): no pool, no client, no timeouts.

Every client's tool is ``step(n) -> "step {n} done"``. Each (client, scenario) runs in a fresh
worker process: one warm-up conversation, then ``--inner`` samples of ``runs`` conversations,
each timed in wall (``perf_counter``) and client-process CPU (``process_time``; the server's
CPU is not counted). Workers interleave over ``--rounds`` rounds; medians per turn are reported
with ratios to ``boto3``, and the server's invoke count is checked after every worker.

    python bench/agentcore_tool_loop.py            # full: 50×2, 10×10, 1×50
    python bench/agentcore_tool_loop.py --quick    # CI smoke: 2×2, 1×5
    python bench/agentcore_tool_loop.py --profile rma --scenarios 10x10 --profile-out F
    python bench/agentcore_tool_loop.py --instructions rma,rma-asyncio   # needs valgrind

``--instructions`` counts machine instructions per turn, the figure that does not move with the
neighbours on a shared host: each client's worker runs under cachegrind with 2 and then 7
conversations of 10 turns (``--scenarios`` sets another turn count; its runs are ignored), and
the difference is divided by the extra turns, so start-up, imports and the warm-up cancel out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _agentcore_server import final_text, session_id  # noqa: E402
from local_loop import _package, load, machine, print_totals, source_digest  # noqa: E402

PROMPT = "Run the steps."
REGION = "us-east-1"
ACCESS_KEY = "AKIDEMULATOR"  # the emulator's defaults
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEMULATORKEY"
STEP_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}
STEP_TOOL = {"name": "step", "description": "Run step n.", "input_schema": STEP_SCHEMA}
# What rma sends for STEP_TOOL (rma.providers.agentcore.codec.inline_function): every client
# sends the same declaration.
STEP_DECLARATION = {
    "type": "inline_function",
    "name": "step",
    "config": {"inlineFunction": {"description": "Run step n.", "inputSchema": STEP_SCHEMA}},
}
CLIENTS = ("boto3", "rma", "rma-asyncio", "httpx-trio", "httpx-asyncio", "h11-trio", "h11-asyncio")
BASELINE = "boto3"
FULL_SCENARIOS = ((50, 2), (10, 10), (1, 50))
QUICK_SCENARIOS = ((2, 2), (1, 5))


def step_tool(n: int) -> str:
    return f"step {n} done"


def new_session(turns: int) -> str:
    return session_id(turns - 1, uuid.uuid4().hex)


class Assembly:
    """One turn's stream folded as a plain client does: text, tool uses, the stop reason."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.uses: dict[int, dict[str, Any]] = {}
        self.stop: str | None = None

    def feed(self, event: dict[str, Any]) -> None:
        if "contentBlockDelta" in event:
            block = event["contentBlockDelta"]
            delta = block["delta"]
            if "text" in delta:
                self.text.append(delta["text"])
            elif "toolUse" in delta:
                self.uses[block["contentBlockIndex"]]["parts"].append(delta["toolUse"]["input"])
        elif "contentBlockStart" in event:
            block = event["contentBlockStart"]
            use = block["start"].get("toolUse")
            if use is not None:
                self.uses[block["contentBlockIndex"]] = {
                    "id": use["toolUseId"],
                    "name": use["name"],
                    "parts": [],
                }
        elif "messageStop" in event:
            self.stop = event["messageStop"]["stopReason"]

    def next_messages(self) -> list[dict[str, Any]] | None:
        """The resume (B-6: the echo, then the results), or None when the turn ended."""
        if self.stop != "tool_use":
            return None
        echo, results = [], []
        for use in self.uses.values():
            args = json.loads("".join(use["parts"]))
            echo.append({"toolUse": {"toolUseId": use["id"], "name": use["name"], "input": args}})
            content = [{"text": step_tool(**args)}]
            results.append({"toolResult": {"toolUseId": use["id"], "content": content, "status": "success"}})
        return [{"role": "assistant", "content": echo}, {"role": "user", "content": results}]


def first_messages() -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"text": PROMPT}]}]


# ── clients: each returns (loop, setup, run_once); run_once(shared, turns) → final text ──────

Setup = Callable[[], Any]
RunOnce = Callable[[Any, int], Any]


def client_boto3(base_url: str, arn: str) -> tuple[str, Setup, RunOnce]:
    import boto3
    from botocore.config import Config

    def setup() -> Any:
        return boto3.client(
            "bedrock-agentcore",
            endpoint_url=base_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(retries={"mode": "standard"}, read_timeout=60),
        )

    def run_once(client: Any, turns: int) -> str:
        sid = new_session(turns)
        messages = first_messages()
        for _ in range(turns + 10):
            reply = client.invoke_harness(
                harnessArn=arn, runtimeSessionId=sid, messages=messages, tools=[STEP_DECLARATION]
            )
            turn = Assembly()
            for event in reply["stream"]:
                turn.feed(event)
            follow = turn.next_messages()
            if follow is None:
                return "".join(turn.text)
            messages = follow
        raise RuntimeError("the conversation did not end")

    return "sync", setup, run_once


def client_rma(base_url: str, arn: str, loop: str) -> tuple[str, Setup, RunOnce]:
    from rma_shell import Failure, run
    from rma_shell.providers.agentcore import BedrockAgentCore

    class Handler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return step_tool(**input)

    handler = Handler()
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}

    async def setup() -> Any:
        return BedrockAgentCore(
            harness_arn=arn, data_url=base_url, control_url=base_url, env=env, tools=[STEP_TOOL]
        )

    async def run_once(provider: Any, turns: int) -> str:
        outcome = await run(
            provider,
            handler=handler,
            prompt=PROMPT,
            runtime_session_id=new_session(turns),
            max_turns=turns + 10,
        )
        if isinstance(outcome, Failure):
            raise RuntimeError(f"rma run failed: {outcome.failure()!r}")
        result = outcome.unwrap()
        if result.turns != turns:
            raise RuntimeError(f"rma counted {result.turns} turns, expected {turns}")
        return str(result.text)

    return loop, setup, run_once


def _signed(url: str, sid: str, body: bytes) -> dict[str, str]:
    from datetime import UTC, datetime

    from rma.wire.sigv4 import Credentials, sign

    headers = {"Content-Type": "application/json", "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": sid}
    creds = Credentials(ACCESS_KEY, SECRET_KEY)
    return sign(
        "POST",
        url,
        headers,
        body,
        credentials=creds,
        region=REGION,
        service="bedrock-agentcore",
        now=datetime.now(UTC),
    )


def _events(decoder: Any, chunk: bytes) -> Iterable[dict[str, Any]]:
    for message in decoder.feed(chunk).unwrap():
        if message.message_type != "event":
            raise RuntimeError(f"a {message.message_type} frame: {message.payload[:200]!r}")
        yield {message.event_type: json.loads(message.payload)}


def client_floor(base_url: str, arn: str, loop: str, wire: str) -> tuple[str, Setup, RunOnce]:
    """A plain async loop over httpx or over the h11 floor, with rma's signer and decoder."""
    from urllib.parse import quote

    from rma.wire.eventstream import EventStreamDecoder

    target = f"/harnesses/invoke?harnessArn={quote(arn, safe='')}"
    url = base_url + target

    async def setup() -> Any:
        if wire == "httpx":
            import httpx

            return httpx.AsyncClient(timeout=60)
        from _h11_floor import H11Floor

        return H11Floor(base_url)

    async def run_once(client: Any, turns: int) -> str:
        sid = new_session(turns)
        messages = first_messages()
        for _ in range(turns + 10):
            body = json.dumps(
                {"messages": messages, "tools": [STEP_DECLARATION]}, ensure_ascii=False, separators=(",", ":")
            ).encode()
            headers = _signed(url, sid, body)
            turn = Assembly()
            decoder = EventStreamDecoder()
            if wire == "httpx":
                async with client.stream("POST", url, content=body, headers=headers) as response:
                    if response.status_code != 200:
                        raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
                    async for chunk in response.aiter_bytes():
                        for event in _events(decoder, chunk):
                            turn.feed(event)
            else:
                status, _, chunks = await client.request("POST", target, list(headers.items()), body)
                if status != 200:
                    raise RuntimeError(f"HTTP {status}: {(await client.read(chunks))[:300]!r}")
                async for chunk in chunks:
                    for event in _events(decoder, chunk):
                        turn.feed(event)
            follow = turn.next_messages()
            if follow is None:
                return "".join(turn.text)
            messages = follow
        raise RuntimeError("the conversation did not end")

    return loop, setup, run_once


def make_client(name: str, base_url: str, arn: str) -> tuple[str, Setup, RunOnce]:
    if name == "boto3":
        return client_boto3(base_url, arn)
    if name in ("rma", "rma-asyncio"):
        return client_rma(base_url, arn, "asyncio" if name.endswith("asyncio") else "trio")
    wire, _, loop = name.partition("-")
    if wire in ("httpx", "h11") and loop in ("trio", "asyncio"):
        return client_floor(base_url, arn, loop, wire)
    raise SystemExit(f"unknown client {name!r}")


# ── the worker: one client, its scenarios, in a process of its own ────────────────────────


class Samples:
    """Wall, CPU and kernel CPU of each timed sample (and the profiler around it)."""

    def __init__(self, profiler: cProfile.Profile | None) -> None:
        self.profiler = profiler
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.sys: list[float] = []  # the kernel's share of the CPU (syscalls)

    def start(self) -> None:
        gc.collect()
        self._t = (time.perf_counter(), time.process_time(), os.times().system)
        if self.profiler:
            self.profiler.enable()

    def stop(self) -> None:
        if self.profiler:
            self.profiler.disable()
        w0, c0, s0 = self._t
        self.cpu.append(time.process_time() - c0)
        self.wall.append(time.perf_counter() - w0)
        self.sys.append(os.times().system - s0)


def worker(
    name: str, base_url: str, arn: str, scenarios: list[tuple[int, int]], inner: int, profile: str | None
) -> list[dict[str, Any]]:
    """Time ``name`` on each (runs, turns) scenario: a warm-up run, then ``inner`` samples."""
    loop, setup, run_once = make_client(name, base_url, arn)
    profiler = cProfile.Profile(time.process_time) if profile else None
    out = []

    def check(texts: list[str], expected: str) -> None:
        if set(texts) != {expected}:
            raise RuntimeError(f"{name}: final texts {set(texts)!r}, expected {expected!r}")

    for runs, turns in scenarios:
        expected = final_text(turns - 1)
        samples = Samples(profiler)
        if loop == "sync":
            shared = setup()
            check([run_once(shared, turns)], expected)  # warm-up
            for _ in range(inner):
                samples.start()
                texts = [run_once(shared, turns) for _ in range(runs)]
                samples.stop()
                check(texts, expected)
        else:

            async def body(
                runs: int = runs, turns: int = turns, expected: str = expected, samples: Samples = samples
            ) -> None:
                shared = await setup()
                check([await run_once(shared, turns)], expected)  # warm-up
                for _ in range(inner):
                    samples.start()
                    texts = [await run_once(shared, turns) for _ in range(runs)]
                    samples.stop()
                    check(texts, expected)
                # A provider's close() closes its client; the floors' clients have aclose().
                await (shared.close() if hasattr(shared, "run_command") else shared.aclose())

            if loop == "trio":
                import trio

                trio.run(body)
            else:
                asyncio.run(body())
        out.append(
            {
                "client": name,
                "runs": runs,
                "turns": turns,
                "wall": samples.wall,
                "cpu": samples.cpu,
                "sys": samples.sys,
            }
        )
    if profiler and profile:
        profiler.dump_stats(profile)
    return out


# ── the driver ────────────────────────────────────────────────────────────────────────────


class Server:
    """``bench/_agentcore_server.py`` in a process of its own."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "_agentcore_server.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.proc.kill()
            raise SystemExit(f"the AgentCore emulator did not start: {line!r}")
        _, port, self.arn = line.split()
        self.base_url = f"http://127.0.0.1:{int(port)}"

    def invokes(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


TREES: dict[str, Path] = {}
"""``--tree NAME=PATH``: another checkout whose rma a client ``CLIENT@NAME`` measures."""


def worker_cmd(name: str, server: Server, scenarios: list[tuple[int, int]], inner: int) -> list[str]:
    client, _, tree = name.partition("@")
    script = TREES[tree] / "bench" / "agentcore_tool_loop.py" if tree else Path(__file__).resolve()
    return [
        sys.executable,
        str(script),
        "--worker",
        client,
        "--base-url",
        server.base_url,
        "--arn",
        server.arn,
        "--scenarios",
        ",".join(f"{r}x{t}" for r, t in scenarios),
        "--inner",
        str(inner),
    ]


def run_worker(
    server: Server, name: str, scenarios: list[tuple[int, int]], inner: int, timeout: float
) -> list[dict[str, Any]]:
    before = server.invokes()
    try:
        done = subprocess.run(
            worker_cmd(name, server, scenarios, inner), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise SystemExit(f"worker {name} did not finish within {timeout:.0f} s") from None
    if done.returncode != 0:
        raise SystemExit(f"worker {name} failed:\n{done.stderr[-4000:]}")
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    for result in results:
        result["client"] = name
    made = server.invokes() - before
    want = sum((1 + runs * inner) * turns for runs, turns in scenarios)
    if made != want:
        raise SystemExit(f"worker {name} made {made} InvokeHarness calls, expected {want}")
    return results


def versions() -> dict[str, str]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("boto3", "botocore", "anyio", "trio", "httpx", "httpcore", "h11"):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def report(
    samples: dict[tuple[int, int], dict[str, dict[str, list[float]]]], clients: list[str]
) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for (runs, turns), by_client in samples.items():
        n = runs * turns
        print(f"\n{runs} runs × {turns} turns ({n} turns a sample)")
        print(
            f"  {'client':<14} {'ms/turn':>8} {'CPU ms/turn':>12} {'× boto3':>8} {'CPU × boto3':>12}"
            f" {'sys %':>6}  samples"
        )
        rows: dict[str, dict[str, float]] = {}
        for name in clients:
            if name in by_client:
                rows[name] = {
                    "ms_per_turn": statistics.median(by_client[name]["wall"]) / n * 1000,
                    "cpu_ms_per_turn": statistics.median(by_client[name]["cpu"]) / n * 1000,
                    "samples": len(by_client[name]["wall"]),
                    "sys_share": sum(by_client[name]["sys"]) / (sum(by_client[name]["cpu"]) or 1.0),
                }
        base = rows.get(BASELINE)
        for name, row in rows.items():
            ratio = f"{'-':>8} {'-':>12}"
            if base:
                row["x_boto3"] = row["ms_per_turn"] / base["ms_per_turn"]
                row["cpu_x_boto3"] = row["cpu_ms_per_turn"] / base["cpu_ms_per_turn"]
                ratio = f"{row['x_boto3']:8.2f} {row['cpu_x_boto3']:12.2f}"
            cpus = by_client[name]["cpu"]
            lo, hi = min(cpus) / n * 1000, max(cpus) / n * 1000
            print(
                f"  {name:<14} {row['ms_per_turn']:8.3f} {row['cpu_ms_per_turn']:12.3f} {ratio}"
                f" {row['sys_share']:6.0%}  {int(row['samples'])} (CPU {lo:.3f}–{hi:.3f})"
            )
        summary[f"{runs}x{turns}"] = rows
    return summary


def targets(summary: dict[str, Any]) -> None:
    print("\ntarget: rma CPU per turn ≤ 0.8× the boto3 loop's")
    for scenario, rows in summary.items():
        for name in ("rma", "rma-asyncio"):
            if name in rows and "cpu_x_boto3" in rows[name]:
                x = rows[name]["cpu_x_boto3"]
                print(f"  {name} {scenario}: {x:.2f}× boto3 CPU: {'holds' if x <= 0.8 else 'FAILS'}")


def profile_worker(args: argparse.Namespace) -> int:
    server = Server()
    scenarios = parse_scenarios(args.scenarios or "10x10")
    try:
        cmd = [*worker_cmd(args.profile, server, scenarios, args.inner), "--worker-profile", args.profile_out]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    finally:
        server.close()
    turns = sum(r * t for r, t in scenarios) * args.inner
    buf = io.StringIO()
    stats = pstats.Stats(args.profile_out, stream=buf)
    stats.sort_stats("cumulative").print_stats(args.profile_lines)
    stats.sort_stats("tottime").print_stats(args.profile_lines)
    print(buf.getvalue())
    totals: dict[str, float] = {}
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in raw.items():
        key = _package(filename, function)
        totals[key] = totals.get(key, 0.0) + tottime
    print_totals(
        "own CPU time by package (cProfile inflates call-heavy code)", totals, turns, args.profile_lines
    )
    return 0


def count_instructions(args: argparse.Namespace) -> int:
    """``--instructions``: instructions per turn of each client, under cachegrind."""
    from _cachegrind import run as counted

    turns = parse_scenarios(args.scenarios)[0][1] if args.scenarios else 10
    small, big = 2, 7
    server = Server()
    try:
        for name in args.instructions.split(","):
            counts = [
                counted(
                    [
                        *(sys.executable, str(Path(__file__).resolve()), "--worker", name),
                        *("--base-url", server.base_url, "--arn", server.arn),
                        *("--scenarios", f"{runs}x{turns}", "--inner", "1"),
                    ]
                )
                for runs in (small, big)
            ]
            per_turn = (counts[1] - counts[0]) / ((big - small) * turns)
            print(f"  {name:>14}: {per_turn:12,.0f} instructions per turn ({turns}-turn conversations)")
    finally:
        server.close()
    return 0


def parse_scenarios(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        runs, turns = item.lower().split("x")
        out.append((int(runs), int(turns)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI smoke run: tiny scenarios, no figures to quote"
    )
    parser.add_argument("--rounds", type=int, default=3, help="worker processes per (client, scenario)")
    parser.add_argument("--inner", type=int, default=3, help="timed samples per worker")
    parser.add_argument(
        "--clients", default=",".join(CLIENTS), help="comma-separated subset of " + ",".join(CLIENTS)
    )
    parser.add_argument("--scenarios", help="RUNSxTURNS,… instead of the built-in ones, e.g. 10x10,1x50")
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--profile", metavar="CLIENT", help="cProfile one worker (default scenario 10x10)")
    parser.add_argument("--profile-out", default="/tmp/agentcore_tool_loop.prof")
    parser.add_argument("--profile-lines", type=int, default=40)
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another checkout (with this bench/ copied in) measured as clients CLIENT@NAME",
    )
    parser.add_argument(
        "--instructions", metavar="CLIENTS", help="instructions per turn under valgrind (cachegrind)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-profile", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--arn", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        results = worker(
            args.worker,
            args.base_url,
            args.arn,
            parse_scenarios(args.scenarios),
            args.inner,
            args.worker_profile,
        )
        print(json.dumps(results))
        return 0
    if args.profile:
        return profile_worker(args)
    if args.instructions:
        return count_instructions(args)

    scenarios = (
        parse_scenarios(args.scenarios)
        if args.scenarios
        else list(QUICK_SCENARIOS if args.quick else FULL_SCENARIOS)
    )
    rounds, inner = (1, 1) if args.quick else (args.rounds, args.inner)
    for tree in args.tree:
        label, _, path = tree.partition("=")
        if not (Path(path) / "bench" / "agentcore_tool_loop.py").exists():
            raise SystemExit(f"--tree {tree}: copy bench/ (this benchmark and its helpers) into {path}/bench")
        TREES[label] = Path(path).resolve()
    clients = args.clients.split(",")
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
    server = Server()
    samples: dict[tuple[int, int], dict[str, dict[str, list[float]]]] = {s: {} for s in scenarios}
    batches = [scenarios] if args.quick else [[s] for s in scenarios]
    started = time.perf_counter()
    try:
        for batch in batches:
            for _ in range(rounds):
                for name in clients:
                    for result in run_worker(server, name, batch, inner, 300 if args.quick else 3600):
                        into = samples[(result["runs"], result["turns"])].setdefault(
                            name, {"wall": [], "cpu": [], "sys": []}
                        )
                        for key in ("wall", "cpu", "sys"):
                            into[key] += result[key]
    finally:
        server.close()
    summary = report(samples, clients)
    if source_digest() != digest:
        print("\nWARNING: the rma sources changed during the run; the figures mix two versions")
    if not args.quick:
        targets(summary)
    print(f"\nload average at end {load()}; {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"versions": versions(), "machine": machine(), "sources": digest, "results": summary},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
