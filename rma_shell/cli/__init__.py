"""The ``rma`` command line: ``rma demo``, ``rma replay LOG``, ``rma inspect``, ``rma worker`` and
the provisioning commands.

An argparse front end. ``demo`` runs the bundled agent demo (``rma_shell.demo``);
``replay`` checks a log recorded with ``--record`` (or ``run(record=...)``), folds it through
the pure core and prints the result(s) it reproduces; ``inspect`` serves a journal or a recording
as a local web page (``rma_shell.inspect``); ``worker`` serves a self-hosted Claude environment
(``rma_shell.cli.worker``). Exit codes: 0 success, 1 a session
error or a damaged or unreadable log, 2 bad usage, 130 interrupted (Ctrl-C: one line on
stderr), 141 a closed stdout (quietly). Settings come from flags, then the environment
(``RMA_BASE_URL``, ``RMA_MODEL``, ``RMA_API_KEY`` / ``OPENAI_API_KEY``); an API key is
never printed. What users see is described in docs/cli.md.
"""

from __future__ import annotations

import argparse
import collections
import functools
import io
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

import anyio
from returns.result import Failure, Result

from rma.errors import SessionError
from rma.recording import encode
from rma.vocabulary import SessionResult
from rma_shell.machinery.interrupt import keyboard_interrupt, silence_stdout

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""128 + SIGINT: the shell convention for a command ended by Ctrl-C."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a tool killed by writing to a closed pipe reports."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rma-agents")
    except PackageNotFoundError:
        return "unknown"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {text!r}")
    return value


class _Paragraphs(argparse.HelpFormatter):
    """Wraps each paragraph of a description on its own (argparse joins them by default)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(super(_Paragraphs, self)._fill_text(p, width, indent) for p in text.split("\n\n"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rma",
        description="Run AI agent sessions on any loop host; your tools stay in your process.",
        epilog="Run 'rma COMMAND --help' for what a command does, its options and its exit codes.",
    )
    parser.add_argument("--version", action="version", version=f"rma {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run an agent over a CSV offline (or against any OpenAI-compatible endpoint)",
        description=(
            "Run a real agent loop: the model inspects a CSV, summarises its numeric columns and "
            "writes a Markdown report to the current directory. Offline and deterministic by default "
            "(a bundled rehearsal model); give --base-url to use a real model. On a terminal, a wait "
            "for the model shows on stderr (connecting, waiting for the answer, and for how long).\n\n"
            "Exit codes: 0 success, 1 a session error, 2 bad usage, 130 interrupted (Ctrl-C)."
        ),
        formatter_class=_Paragraphs,
    )
    demo.add_argument(
        "--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 (env RMA_BASE_URL)"
    )
    demo.add_argument("--model", help="model name for --base-url (env RMA_MODEL)")
    demo.add_argument(
        "--api-key", help="API key for --base-url (env RMA_API_KEY or OPENAI_API_KEY); never printed"
    )
    demo.add_argument(
        "--data", metavar="PATH", help="a CSV file to analyse instead of the bundled sales data"
    )
    demo.add_argument(
        "--out", metavar="FILE", default="report.md", help="report file name (default: report.md)"
    )
    demo.add_argument(
        "--record", metavar="LOG", help="write the session's event log (JSONL) for 'rma replay'"
    )
    demo.add_argument("--max-turns", type=_positive_int, default=10, help="turn limit (default: 10)")
    demo.add_argument("--quiet", action="store_true", help="print only the summary")
    demo.add_argument("--plain", action="store_true", help="plain text output even when rich is installed")

    replay = commands.add_parser(
        "replay",
        help="fold a recorded event log through the core and print its result(s)",
        description=(
            "Replay a log written by 'rma demo --record LOG' or run(..., record=LOG): check it, fold "
            "its events through the session core (no model, tools or network) and print the "
            "result(s) the recorded run returned. A log whose lines were edited, reordered, removed "
            "or cut off, or whose results this version no longer reproduces, is reported as "
            "damaged and nothing is printed on stdout.\n\n"
            "Exit codes: 0 replayed, 1 a damaged or unreplayable log (or one without a result), "
            "2 a missing or unreadable file, 130 interrupted."
        ),
        formatter_class=_Paragraphs,
    )
    replay.add_argument("log", metavar="LOG", help="the JSONL event log")
    replay.add_argument("--json", action="store_true", help="print each result as JSON (one per line)")
    replay.add_argument(
        "--partial",
        action="store_true",
        help="replay a log that was cut short (its process died) as far as it goes; edits are still refused",
    )
    inspect = commands.add_parser(
        "inspect",
        help="see a journal's sessions (or a recording) in a browser, and decide pending approvals",
        description=(
            "Serve a local web page over a journal (SQLite) or a recording (JSONL): its sessions with "
            "their state, and each session's turns, text, tool calls, token usage, durations and "
            "errors, followed live while it runs. A call that waits for approval has Allow and Deny "
            "buttons (recorded as rma_shell.approve records them); a recording is read-only. Listens "
            "on 127.0.0.1 only unless --host says otherwise. Credentials in the environment "
            "(RMA_API_KEY, OPENAI_API_KEY, ANTHROPIC_API_KEY, AWS_*) are masked wherever they appear. "
            "Needs the 'inspect' extra: pip install 'rma-agents[inspect]'.\n\n"
            "It serves until Ctrl-C. Exit codes: 130 stopped (Ctrl-C), 1 the address is in use or "
            "cannot be bound, 2 bad usage, a missing file, or the extra not installed."
        ),
        formatter_class=_Paragraphs,
    )
    inspect.add_argument(
        "target", metavar="JOURNAL_OR_RECORDING", help="an SQLite journal or a JSONL recording"
    )
    inspect.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    inspect.add_argument(
        "--port", type=_port, default=8321, help="port to listen on (default 8321; 0: any free port)"
    )
    inspect.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="VALUE",
        help="a value to mask wherever it appears, besides the environment's credentials (repeatable)",
    )
    inspect.add_argument(
        "--model",
        default=None,
        help="price each usage as this model's (a genai-prices model id; needs the 'cost' extra)",
    )
    from rma_shell.cli.provision import add_commands
    from rma_shell.cli.worker import add_command as add_worker

    add_commands(commands)
    add_worker(commands)
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            chosen: argparse.ArgumentParser = action.choices[name]
            return chosen
    return None


def main(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None) -> int:
    """Run the CLI; returns the exit code. ``env`` defaults to the process environment.

    Ctrl-C prints one line (``rma COMMAND: interrupted``) and returns 130; a closed stdout
    (``rma … | head``) ends the command quietly with 141, as SIGPIPE would.
    """
    if isinstance(sys.stdout, io.TextIOWrapper):  # a lone surrogate in a reply must not crash a print
        sys.stdout.reconfigure(errors="backslashreplace")
    parser = build_parser()
    command = ""
    try:
        try:
            args, extras = parser.parse_known_args(argv)
            command = args.command or ""
            if extras:  # said by the sub-command's parser, so the message names it
                (_subparser(parser, command) or parser).error(f"unrecognized arguments: {' '.join(extras)}")
        except SystemExit as exc:  # argparse exits on --help, --version and usage errors
            sys.stdout.flush()
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        environ = os.environ if env is None else env
        code = _dispatch(parser, args, environ)
        sys.stdout.flush()
        return code
    except BaseException as exc:
        if keyboard_interrupt(exc) is not None:
            print(f"rma {command}: interrupted" if command else "rma: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        if isinstance(exc, BrokenPipeError):
            silence_stdout()
            return EXIT_BROKEN_PIPE
        raise


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if args.command == "demo":
        return _demo(args, environ)
    if args.command == "replay":
        return _replay(args)
    if args.command == "inspect":
        return _inspect(args)
    if args.command == "worker":
        from rma_shell.cli.worker import run_worker

        return run_worker(args, environ)
    from rma_shell.cli.provision import COMMANDS, run_command

    if args.command in COMMANDS:
        return run_command(args, environ)
    parser.print_usage(sys.stderr)
    print("rma: error: a command is required (rma --help lists them)", file=sys.stderr)
    return EXIT_USAGE


# ── demo ─────────────────────────────────────────────────────────────────────────────


def _setting(flag: str | None, environ: Mapping[str, str], *names: str) -> str | None:
    """Flag, else the first non-empty environment variable, else None."""
    if flag:
        return flag
    return next((environ[n] for n in names if environ.get(n)), None)


def _usage_error(message: str) -> int:
    print(f"rma demo: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _demo(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from rma_shell.demo import DemoConfig, Display, report, run_demo
    from rma_shell.demo.tools import REPORT_SUFFIXES

    base_url = _setting(args.base_url, environ, "RMA_BASE_URL")
    model = _setting(args.model, environ, "RMA_MODEL")
    api_key = _setting(args.api_key, environ, "RMA_API_KEY", "OPENAI_API_KEY")
    workdir = Path.cwd()
    if base_url and not model:
        return _usage_error("--base-url needs --model (or RMA_MODEL): the model to ask the server for")

    data = None
    if args.data is not None:
        data = Path(args.data)
        if not data.is_file():
            return _usage_error(f"--data: no such file: {args.data}")
    out = Path(args.out)
    if out.is_absolute() or ".." in out.parts or not args.out.endswith(REPORT_SUFFIXES):
        return _usage_error(
            f"--out: expected a Markdown file name inside the current directory, got {args.out!r}"
        )

    record: TextIO | None = None
    if args.record is not None:
        try:
            record = open(args.record, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            return _usage_error(f"--record: cannot write {args.record}: {exc.strerror or exc}")

    from rma_shell.cli.progress import Progress

    display = Display(quiet=args.quiet, plain=args.plain)
    config = DemoConfig(
        progress=Progress.for_stream(sys.stderr, enabled=not args.quiet, environ=environ),
        workdir=workdir,
        data=data,
        out=args.out,
        base_url=base_url,
        model=model,
        api_key=api_key if base_url else None,
        max_turns=args.max_turns,
        record=record,
    )
    try:
        demo = anyio.run(functools.partial(run_demo, config, display), backend="trio")
    finally:  # Ctrl-C goes on to main(), which says so and exits 130
        if record is not None:
            record.close()
    code = report(demo, display, secret=api_key)
    return EXIT_BROKEN_PIPE if display.broken else code


# ── inspect ──────────────────────────────────────────────────────────────────────────


def _inspect(args: argparse.Namespace) -> int:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        print(
            "rma inspect: error: needs the 'inspect' extra: pip install 'rma-agents[inspect]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from rma_shell.inspect import SourceError, serve

    shown = None
    if args.model is not None:
        try:
            import genai_prices  # noqa: F401
        except ImportError:
            needs = "--model needs the 'cost' extra: pip install 'rma-agents[cost]'"
            print(f"rma inspect: error: {needs}", file=sys.stderr)
            return EXIT_USAGE
        from rma_shell.cost import label

        try:
            shown = label(args.model)
        except ValueError as exc:
            print(f"rma inspect: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        serve(args.target, host=args.host, port=args.port, secrets=args.secret, price=shown)
    except SourceError as exc:
        print(f"rma inspect: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # the address: in use, or not this machine's
        print(
            f"rma inspect: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return EXIT_OK


# ── replay ───────────────────────────────────────────────────────────────────────────


def _known_codecs() -> None:
    """Make every bundled provider codec findable by name for ``codec_for``."""
    # Importing a provider module registers its codec (rma.provider.register_codec) and the
    # values it records (rma.codec_json.register).
    import rma.providers.agentcore.codec
    import rma.providers.claude.codec
    import rma.providers.local.codec
    import rma.providers.scripted  # noqa: F401


def _stopped(how: str) -> str:
    if how == "KeyboardInterrupt":
        return "the recorded run was interrupted (Ctrl-C, KeyboardInterrupt)"
    if how == "cancelled":
        return "the recorded run was cancelled by its caller"
    return f"the recorded run was stopped by {how}"


def _replay_error(log: str, message: str, code: int = EXIT_ERROR) -> int:
    print(f"rma replay: error: {log}: {message}", file=sys.stderr)
    return code


def _replay(args: argparse.Namespace) -> int:
    from rma.provider import codec_for
    from rma.replay import replay_lines

    _known_codecs()

    path = Path(args.log)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _replay_error(args.log, "no such file", EXIT_USAGE)
    except IsADirectoryError:
        return _replay_error(args.log, "is a directory", EXIT_USAGE)
    except UnicodeDecodeError:
        return _replay_error(args.log, "not a text (JSONL) event log")
    except OSError as exc:
        return _replay_error(args.log, f"cannot read: {exc.strerror or exc}", EXIT_USAGE)
    lines = text.splitlines()
    try:
        replayed = replay_lines(lines, codec_for, partial=args.partial)
    except Exception as exc:  # a log that parses but folds badly: still a message, not a traceback
        return _replay_error(args.log, f"could not be replayed: {type(exc).__name__}: {exc}")
    if isinstance(replayed, Failure):
        error = replayed.failure()
        if error.kind == "damaged_log":
            hint = " (--partial replays it as far as it goes)" if "truncated" in error.message else ""
            return _replay_error(args.log, f"damaged recording: {error.message}{hint}")
        detail = getattr(error, "detail", "") or error.message
        return _replay_error(args.log, f"not a valid event log: {detail}")
    done = replayed.unwrap()
    results = list(done.results)
    if done.outcome is not None:
        results.append(done.outcome)
    if not done.complete:
        print(f"rma replay: {args.log}: the log was cut short; replayed as far as it goes", file=sys.stderr)
    if not results:
        why = _stopped(done.stopped) if done.stopped else "was the run cut short?"
        return _replay_error(args.log, f"holds no finished request ({why})")
    if args.json:
        for outcome in results:
            print(encode(outcome))  # ASCII escapes where a value is not UTF-8 (a lone surrogate)
        return EXIT_OK
    events = sum(1 for line in lines if line.startswith('{"kind":"event"'))
    check = "verified" if done.verified else "not verified: a format-1 log has no digests"
    if not done.complete:
        check = "verified as far as it goes: no end record"
    plural = "s" if len(results) != 1 else ""
    print(f"{args.log}: {events} recorded events, {len(results)} result{plural} ({check})")
    for n, outcome in enumerate(results, 1):
        at = " (the session failed to open)" if outcome is done.outcome and done.at == "open" else ""
        _print_outcome(n, outcome, at)
    if done.stopped:
        print(f"\nafter its last result, {_stopped(done.stopped)}")
    return EXIT_OK


def _print_outcome(n: int, outcome: Result[SessionResult, SessionError], at: str = "") -> None:
    from rma_shell.demo.runner import outcome_line

    print()
    if isinstance(outcome, Failure):
        error = outcome.failure()
        print(f"result {n}: error ({error.kind}){at}")
        print(f"  message  {error.message}")
        return
    result = outcome.unwrap()
    counts = collections.Counter(use.name for use in result.custom_tool_uses)
    tools = ", ".join(f"{name} x{count}" for name, count in counts.items()) or "none"
    print(f"result {n}: {outcome_line(result)}")
    rows = [
        ("session", str(result.session_id)),
        ("tokens", f"{result.usage.input_tokens:,} in / {result.usage.output_tokens:,} out"),
        ("tools", tools),
        ("events", f"{len(result.events)} provider events"),
    ]
    if result.transcript is not None:
        rows.append(("history", f"{len(result.transcript)} messages in the transcript"))
    if result.reason:
        rows.append(("reason", result.reason))
    for label, value in rows:
        print(f"  {label:<8} {value}")
    if result.text.strip():
        print("  text")
        for line in result.text.strip().splitlines():
            print(f"    {line}")
