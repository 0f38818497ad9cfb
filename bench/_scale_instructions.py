"""``bench/scale.py --instructions``: machine instructions per stream event, rma and the floor.

The host this project runs on is shared, so CPU time per event moves with the neighbours;
instruction counts do not. For each backend and client, the worker runs under valgrind
(``cachegrind``, no cache simulation) twice with every one of K sessions playing R₁ and then
R₂ round trips back to back (``--closed``) after opening; the difference between the two
runs, divided by the difference in stream events, is what one more event costs the client
process — opening, start-up and teardown cancel out. K is small (valgrind is ~50× slower),
so this counts the per-event work of the client, not the pool effects of thousands of
connections (the CPU figures of the steady phases show those).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from _cachegrind import VALGRIND, instructions


def count(args: argparse.Namespace, run_worker: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    sessions, (small, big) = args.instructions_sessions, args.instructions_rounds
    rows = []
    for backend in args.backends.split(","):
        for client in args.clients.split(","):
            runs = [
                run_worker(
                    sessions, args, traced=False, backend=backend, client=client, closed=r, wrap=VALGRIND
                )
                for r in (small, big)
            ]
            if any(r.get("failed") for r in runs):
                raise SystemExit(f"{client} on {backend}: wrong results under valgrind: {runs}")
            events = runs[1]["events"] - runs[0]["events"]
            small_count, big_count = (instructions(r.get("valgrind", "")) for r in runs)
            per_event = (big_count - small_count) / events
            rows.append({"backend": backend, "client": client, "per_event": per_event, "events": events})
            print(f"  {client:>8} on {backend:<7} {per_event:10,.0f} instructions per event", flush=True)
    for backend in args.backends.split(","):
        mine = [r for r in rows if r["backend"] == backend]
        rma = next((r for r in mine if r["client"] == "rma"), None)
        floor = next((r for r in mine if r["client"] == "minimal"), None)
        if rma and floor:
            ratio = rma["per_event"] / floor["per_event"]
            print(f"  {backend}: rma / minimal = ×{ratio:.2f} instructions per event")
    return rows
