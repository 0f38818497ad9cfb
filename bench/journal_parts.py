#!/usr/bin/env python3
"""Where a journaled Local turn's cost goes, in instructions: deterministic, unlike CPU time on
a shared machine (issue #28).

Each count is one worker process under valgrind's cachegrind (user space only: a commit's
kernel time is not in it) running K concurrent 10-call Local sessions against a loopback
OpenAI-compatible server in its own process (``bench/_chat_server.py``, not counted), once
and three times over: the difference of the two, divided by the turns it added, is the
instructions per turn, start-up and imports cancelled out. Variants:

- **plain** — ``run`` without a journal;
- **floor** — plain, with the handler flushing two small records per call through the same
  ``SQLiteJournal``'s group commit (the model's answer before the tool, its result after):
  what two durable commits per turn cost with nothing to encode;
- **sqlite** — ``journal=`` one ``SQLiteJournal``, a fresh key per session;
- with ``--parts`` (this tree only), the journal again with one part stubbed out at a time,
  so its cost is the difference:

  - ``events``: each event's record is a constant (no encoding of the event, no snapshot
    delta and its encoding: what the journal keeps for resume);
  - ``calls``: no tool start or result record of its own (a constant start, no result);
  - ``chain``: a constant seal instead of each record's SHA-256;
  - ``store``: a commit writes nothing (no SQLite, no group commit, no await);
  - ``all``: every one of these — what is left is the journal's machinery (the driver's
    write and commit per event, the tool runner's hooks, the header, lease and end of a
    session) and the collector.

    python bench/journal_parts.py                      # this tree, K = 100, trio
    python bench/journal_parts.py --parts              # and its parts
    python bench/journal_parts.py --base-ref bc2f16f   # a base tree beside it (plain, floor, sqlite)

Needs valgrind on the PATH (``apt install valgrind``); ~1.5 minutes per variant at K = 100.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEPS = 10
PARTS = {
    "events": ("events",),
    "calls": ("calls",),
    "chain": ("chain",),
    "store": ("store",),
    "all": ("events", "calls", "chain", "store"),
}

# ── the counted worker ─────────────────────────────────────────────────────────────────────


def _stub(parts: tuple[str, ...]) -> None:
    """Stub the journal's ``parts`` out (this tree's internals: a measurement, nothing else)."""
    from rma_shell.journal import store, writer

    if "events" in parts:

        def event(self: Any, event: Any, snapshot: Any = None) -> None:
            if snapshot is not None:
                self._snapshot = snapshot  # the end record still finds the history
            self._pending.append('{"kind":"event","at":1.0,"event":{"$type":"Stub"}}')

        writer.SessionJournal.event = event  # type: ignore[method-assign]
    if "calls" in parts:
        start = '{"kind":"tool_start","id":"x","attempt":1,"at":1.0}'
        writer.fmt.tool_start_record = lambda *a, **k: start  # type: ignore[assignment]
        writer.SessionJournal.tool_result = lambda self, *a, **k: None  # type: ignore[method-assign]
    if "chain" in parts:
        store.chain = lambda previous, body: "0" * 64  # type: ignore[assignment]
    if "store" in parts:

        async def commit(self: Any) -> None:
            self._pending = []
            self._held = 0

        writer.SessionJournal.commit = commit  # type: ignore[method-assign]


def count_worker(job: dict[str, Any]) -> None:
    from journal_group import STEP, Floor, Handler  # the same sessions and floor as the CPU bench

    sys.path.insert(0, job["tree"])
    import anyio

    from rma_shell import Failure, SQLiteJournal, run
    from rma_shell.providers.local import Local

    _stub(tuple(job["stubs"]))
    scratch = tempfile.TemporaryDirectory(prefix="rma-journal-parts-")
    journal = SQLiteJournal(Path(scratch.name) / "journal.db") if job["variant"] == "sqlite" else None
    floor = SQLiteJournal(Path(scratch.name) / "floor.db")
    group = floor.group
    keys = iter(range(10**9))

    async def one(provider: Any) -> None:
        if job["variant"] == "floor":
            group.enter()
            try:
                outcome = await run(
                    provider, handler=Floor(floor), context=f"f{next(keys)}", prompt="Run the steps.",
                    max_turns=STEPS + 6, timeout=600,
                )  # fmt: skip
            finally:
                group.leave()
        else:
            outcome = await run(
                provider, handler=Handler(), prompt="Run the steps.", max_turns=STEPS + 6, timeout=600,
                journal=journal, journal_key=f"s{next(keys)}" if journal is not None else None,
            )  # fmt: skip
        if isinstance(outcome, Failure) or outcome.unwrap().turns != STEPS + 1:
            raise RuntimeError(f"{job['variant']}: {outcome!r}")

    async def main() -> None:
        provider = Local(base_url=job["base_url"], model=f"step-{STEPS}", api_key="sk-bench", tools=[STEP])
        for _ in range(job["batches"]):
            async with anyio.create_task_group() as tg:
                for _ in range(job["k"]):
                    tg.start_soon(one, provider)
        await provider.close()

    anyio.run(main, backend=job["backend"])
    floor.close()
    if journal is not None:
        journal.close()
    scratch.cleanup()


# ── the driver ─────────────────────────────────────────────────────────────────────────────


def instructions(job: dict[str, Any]) -> int:
    from _cachegrind import count

    return count(Path(__file__).resolve(), job, env={"PYTHONHASHSEED": "0"})  # the same dict layouts


def per_turn(job: dict[str, Any]) -> float:
    small, big = (instructions({**job, "batches": n}) for n in (1, 3))
    return (big - small) / (2 * job["k"] * (STEPS + 1))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--k", type=int, default=100, help="concurrent sessions (default 100)")
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio")
    parser.add_argument("--parts", action="store_true", help="also this tree's journal with parts stubbed")
    parser.add_argument("--base-ref", help="a base tree beside this one: this commit, via git archive")
    parser.add_argument("--base", help="a base tree beside this one: this checkout")
    parser.add_argument("--json", help="write the counts here")
    parser.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        count_worker(json.loads(sys.stdin.read()))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("journal_parts.py counts instructions under valgrind: put it on the PATH")

    sys.path.insert(0, str(HERE))
    from journal_group import export
    from local_loop import ChatServer, machine

    trees = {"this tree": str(ROOT)}
    exported = None
    if args.base or args.base_ref:
        if args.base:
            base = str(Path(args.base).resolve())
        else:
            exported = export(args.base_ref)
            base = exported.name
        trees = {f"base ({args.base or args.base_ref})": base, **trees}
    print(f"machine: {machine()}; K = {args.k}, {STEPS} calls a session, {args.backend}")
    server = ChatServer()
    rows: list[dict[str, Any]] = []
    try:
        for label, tree in trees.items():
            variants: list[tuple[str, str, tuple[str, ...]]] = [
                ("plain", "plain", ()),
                ("floor", "floor", ()),
                ("sqlite", "sqlite", ()),
            ]
            if args.parts and tree == str(ROOT):
                variants += [(f"sqlite, no {part}", "sqlite", stubs) for part, stubs in PARTS.items()]
            counts = {}
            for name, variant, stubs in variants:
                job = {"tree": tree, "variant": variant, "stubs": list(stubs), "k": args.k,
                       "backend": args.backend, "base_url": server.base_url}  # fmt: skip
                counts[name] = per_turn(job)
                print(f"  counted {label}: {name}", flush=True)
            plain = counts["plain"]
            for name, n in counts.items():
                rows.append({"tree": label, "variant": name, "per_turn": n, "over_plain": n / plain - 1})
    finally:
        server.close()
        if exported is not None:
            exported.cleanup()
    print(
        f"\n  {'tree':<24} {'variant':<22} {'instructions/turn':>18} {'+ over plain':>13} {'% of plain':>11}"
    )
    for row in rows:
        plain = next(r["per_turn"] for r in rows if r["tree"] == row["tree"] and r["variant"] == "plain")
        extra = row["per_turn"] - plain
        shown = "" if row["variant"] == "plain" else f"{extra:13,.0f} {row['over_plain']:11.1%}"
        print(f"  {row['tree']:<24} {row['variant']:<22} {row['per_turn']:18,.0f} {shown}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "k": args.k, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
