"""The report of ``bench/scale.py``: its table, rma against the minimal client, issue #17's targets."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

TARGET_IDLE_KIB = 50  # issue #17: RSS per idle session at 1,000 sessions
TARGET_P99_MS = 10  # issue #17: p99 idle event → tool start at 1,000 sessions, 50 follow-ups/s
TARGET_P99_RATE = 50.0
TARGET_CPU_RATIO = 1.1  # issue #17: CPU per event against the minimal httpx-streams client


def fmt(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) else "-"


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\nmemory and idle cost; then steady phases of {args.duration:g} s at each rate (follow-ups/s, "
        "Poisson); latency = idle event handed to the session → its tool call starts"
    )
    print(
        f"  {'sessions':>8} {'client':>7} {'backend':>7} {'RSS KiB/idle':>12} {'traced KiB':>10} "
        f"{'idle CPU%':>9} "
        f"{'open s':>7} "
        f"{'full GC':>8} {'frozen':>7} "
        f"{'rate/s':>6} {'trips':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'busy99':>7} "
        f"{'busy%':>6} {'e2e p50':>8} "
        f"{'e2e p99':>8} {'CPU µs/ev':>9} {'CPU %':>6} {'gc2 max':>8}"
    )
    per_size = (
        ("rss_per_idle_kib", "12.1f"),
        ("traced_per_idle_kib", "10.1f"),
        ("idle_cpu_pct", "9.2f"),
        ("open_s", "7.1f"),
        ("full_gc_ms", "8.1f"),
        ("full_gc_frozen_ms", "7.1f"),
    )
    per_rate = (
        ("rate", "6g"),
        ("round_trips", "6d"),
        ("p50_ms", "7.2f"),
        ("p99_ms", "7.2f"),
        ("max_ms", "7.1f"),
        ("on_cpu_p99_ms", "7.2f"),
        ("slowest_on_cpu_share", "6.0%"),
        ("e2e_p50_ms", "8.2f"),
        ("e2e_p99_ms", "8.2f"),
        ("cpu_us_per_event", "9.0f"),
        ("cpu_pct", "6.1f"),
        ("gc2_max_ms", "8.1f"),
    )
    blank = " " * (8 + 8 + 12 + 10 + 9 + 7 + 8 + 7 + 5)
    for r in rows:
        if "error" in r:
            print(f"  {r['sessions']:>8} {r['error']}")
            continue
        head = f"  {r['sessions']:>8} {r.get('client', 'rma'):>7} {r.get('backend', 'trio'):>7} " + " ".join(
            fmt(r.get(name), spec) for name, spec in per_size
        )
        for i, phase in enumerate(r.get("steady", [])):
            lead = head if i == 0 else f"  {'':>8} {blank}"
            print(lead + " " + " ".join(fmt(phase.get(name), spec) for name, spec in per_rate))
        if r.get("failed"):
            print(f"  {'':>8} {r['failed']} session results were wrong: {r['failures']}")
    for r in rows:
        if r.get("traced_by_file"):
            print(f"\n  where the traced heap of an idle session is ({r['sessions']} sessions), B/session:")
            for filename, size in r["traced_by_file"]:
                print(f"    {size:9.0f}  {_short(filename)}")
    emulator = [
        f"{r['sessions']} sessions {r.get('emulator_cpu_s', 0):.0f} s CPU, "
        f"{r.get('emulator_rss_mib', 0):.0f} MiB, {r.get('emulator_errors', 0)} errors"
        for r in rows
    ]
    print("\n  emulator process: " + "; ".join(emulator))
    ratios(rows)


def _pair(rows: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any] | None:
    """The minimal client's row of the same size and backend as rma's ``row``."""
    for other in rows:
        same = other["sessions"] == row["sessions"] and other.get("backend") == row.get("backend")
        if same and other.get("client") == "minimal" and "error" not in other:
            return other
    return None


def ratios(rows: list[dict[str, Any]]) -> None:
    """rma against the minimal httpx-streams client of the same run, per size, backend, rate."""
    lines = []
    for r in rows:
        floor = _pair(rows, r) if r.get("client", "rma") == "rma" and "error" not in r else None
        if floor is None:
            continue
        memory = r["rss_per_idle_kib"] / floor["rss_per_idle_kib"]
        for mine, theirs in zip(r.get("steady", []), floor.get("steady", []), strict=False):
            cpu = mine["cpu_us_per_event"] / theirs["cpu_us_per_event"]
            counted = "".join(
                f", {name} {mine['per_event'].get(name, 0):.2f} vs {theirs['per_event'].get(name, 0):.2f}"
                for name in sorted(mine.get("per_event", {}))
            )
            lines.append(
                f"  {r['sessions']} sessions, {r.get('backend')}, {mine['rate']:g}/s: CPU/event "
                f"{mine['cpu_us_per_event']:.0f} vs {theirs['cpu_us_per_event']:.0f} µs (×{cpu:.2f}), "
                f"idle RSS {r['rss_per_idle_kib']:.1f} vs {floor['rss_per_idle_kib']:.1f} KiB "
                f"(×{memory:.2f}){counted}"
            )
    if lines:
        print("\nrma / minimal httpx-streams client (same run, per event):")
        print("\n".join(lines))


def _short(filename: str) -> str:
    parts = Path(filename).parts
    for anchor in ("site-packages", "lib"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1 :])
    for top in ("rma_shell", "rma", "bench"):
        if top in parts:
            return "/".join(parts[parts.index(top) :])
    return filename


def targets(rows: list[dict[str, Any]]) -> None:
    """Issue #17's targets, for rma's rows (the minimal client is the yardstick, not a subject)."""
    print("\ntargets")
    mine = [r for r in rows if r.get("client", "rma") == "rma" and "error" not in r]
    for r in mine:
        kib = r["rss_per_idle_kib"]
        verdict = "holds" if kib <= TARGET_IDLE_KIB else "FAILS"
        print(
            f"  {r['sessions']} sessions ({r.get('backend', 'trio')}): "
            f"{kib:.1f} KiB RSS per idle session (≤ {TARGET_IDLE_KIB}): {verdict}"
        )
    for r in mine:
        floor = _pair(rows, r)
        for i, phase in enumerate(r.get("steady", []) if r["sessions"] == 1_000 else []):
            backend = r.get("backend", "trio")
            if floor is not None and i < len(floor.get("steady", [])):
                ratio = phase["cpu_us_per_event"] / floor["steady"][i]["cpu_us_per_event"]
                verdict = "holds" if ratio <= TARGET_CPU_RATIO else "FAILS"
                print(
                    f"  1,000 sessions ({backend}) at {phase['rate']:g}/s: CPU per event "
                    f"×{ratio:.2f} the minimal client (≤ {TARGET_CPU_RATIO}): {verdict}"
                )
            if phase["rate"] == TARGET_P99_RATE:
                p99 = phase["p99_ms"]
                verdict = "holds" if p99 < TARGET_P99_MS else "FAILS"
                print(
                    f"  1,000 sessions ({backend}) at {phase['rate']:g}/s: "
                    f"p99 {p99:.2f} ms (< {TARGET_P99_MS}): {verdict}"
                )
    sized = [r for r in mine if r.get("backend", "trio") == "trio"]
    if len(sized) >= 2:
        lo, hi = sized[0], sized[-1]
        growth = (hi["rss_per_idle_kib"] * hi["sessions"]) / (lo["rss_per_idle_kib"] * lo["sessions"])
        print(
            f"  memory growth {lo['sessions']} → {hi['sessions']} sessions: ×{growth:.1f} "
            f"for ×{hi['sessions'] / lo['sessions']:.0f} sessions (linear: per-session cost "
            f"{lo['rss_per_idle_kib']:.1f} → {hi['rss_per_idle_kib']:.1f} KiB)"
        )
