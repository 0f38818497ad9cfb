"""``rma worker``: serve a self-hosted Claude environment from this machine.

    rma worker env_… --workspaces ./ws            # until Ctrl-C; one line per claimed/ended item

What this is: the command line over ``rma_shell.environments.Worker`` — settings from flags or
the environment (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``), one progress line per event
on stderr, one line per error, and exit codes (0 served, 1 a session or API error, 2 bad usage
or no sandbox, 130 interrupted). It refuses to start when bash would have no sandbox, unless
``--sandbox none`` says so. Not the worker's logic, which lives in ``rma_shell.environments``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Mapping
from typing import Any

import anyio

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def add_command(commands: Any) -> None:
    parser = commands.add_parser(
        "worker",
        help="serve a self-hosted Claude environment: run its sessions' tools here, sandboxed",
        description=(
            "Claim the work items of a self-hosted Claude Managed Agents environment and answer each "
            "session's built-in tools (bash, read, write, edit, glob, grep) from a workspace of its "
            "own under --workspaces, bash inside bubblewrap. Progress goes to stderr, one line per "
            "event.\n\nExit codes: 0 served (with --drain or --max-items), 1 an API or session error, "
            "2 bad usage or no sandbox, 130 interrupted (Ctrl-C)."
        ),
    )
    parser.add_argument(
        "environment_id", metavar="ENVIRONMENT_ID", help="the self_hosted environment (env_…)"
    )
    parser.add_argument(
        "--workspaces", metavar="DIR", default="rma-workspaces", help="one workspace per session under DIR"
    )
    parser.add_argument("--api-key", help="API key (env ANTHROPIC_API_KEY); never printed")
    parser.add_argument("--base-url", help="API base URL (env ANTHROPIC_BASE_URL)")
    parser.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "none"),
        default="auto",
        help="bash's sandbox: bubblewrap (auto, bwrap) or none — unconfined, see docs/workspace.md",
    )
    parser.add_argument("--network", action="store_true", help="let bash reach the network")
    parser.add_argument("--max-sessions", type=int, default=8, help="sessions served at once (default 8)")
    parser.add_argument(
        "--journal", metavar="PATH", help="an SQLite journal: durable approvals, no tool run twice"
    )
    parser.add_argument("--drain", action="store_true", help="stop at the first empty poll")
    parser.add_argument("--max-items", type=int, help="stop after claiming this many items")
    parser.add_argument("--quiet", action="store_true", help="print errors only")


def _fail(message: str, code: int) -> int:
    print(f"rma worker: error: {message}", file=sys.stderr)
    return code


def run_worker(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from rma.errors import SessionError
    from rma_shell.environments import Worker, WorkerEvent
    from rma_shell.workspace.sandbox import SandboxUnavailable, resolve

    try:
        resolve(args.sandbox)
    except SandboxUnavailable as exc:
        return _fail(str(exc), EXIT_USAGE)
    if args.max_sessions < 1:
        return _fail("--max-sessions must be at least 1", EXIT_USAGE)
    os.makedirs(args.workspaces, exist_ok=True)
    settings: dict[str, Any] = {"env": dict(environ)}
    if args.api_key:
        settings["api_key"] = args.api_key
    if args.base_url:
        settings["base_url"] = args.base_url
    failures: list[str] = []

    def show(event: WorkerEvent) -> None:
        failed = isinstance(event.outcome, SessionError) and event.kind == "ended"
        if failed:
            failures.append(event.line())
        if not args.quiet or failed:
            print(f"rma worker: {event.line()}", file=sys.stderr, flush=True)

    async def main() -> int:
        async with Worker(
            environment_id=args.environment_id,
            workspaces=args.workspaces,
            sandbox=args.sandbox,
            network=args.network,
            max_sessions=args.max_sessions,
            journal=args.journal,
            on_event=show,
            **settings,
        ) as worker:
            if not args.quiet:
                print(
                    f"rma worker: serving {args.environment_id} as {worker.worker_id} "
                    f"(workspaces in {worker.workspaces}, sandbox {args.sandbox})",
                    file=sys.stderr,
                    flush=True,
                )
            return await worker.serve(drain=args.drain, max_items=args.max_items)

    try:
        served = anyio.run(functools.partial(main), backend="trio")
    except SessionError as exc:
        return _fail(str(exc).splitlines()[0], EXIT_ERROR)
    if not args.quiet:
        print(f"rma worker: served {served} item(s)", file=sys.stderr)
    return EXIT_ERROR if failures else EXIT_OK
