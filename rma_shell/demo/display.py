"""Terminal output for ``rma demo``: rich when it is installed, plain text otherwise.

``rich`` is the optional ``cli`` extra; it only makes the output prettier, so every line
here has a plain-text twin (ASCII markers, no colour) and nothing depends on it. This
module formats and prints; it decides nothing about the session.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from rma_shell.machinery.interrupt import silence_stdout

MAX_ARG_CHARS = 48
LABEL_WIDTH = 8
INDENT = "        "

Segment = tuple[str, str | None]
"""A piece of a line and its rich style (None: unstyled)."""


def _rich_console(file: TextIO | None) -> Any:
    try:
        from rich.console import Console
    except ImportError:
        return None
    # highlight=False: rich would otherwise colour numbers and paths at random in tool output.
    return Console(file=file, highlight=False, soft_wrap=True)


def format_args(args: Mapping[str, Any]) -> str:
    """``path="sales.csv", column="revenue"``, with long values cut and their size shown."""
    parts = []
    for key, value in args.items():
        shown = json.dumps(value, ensure_ascii=False)
        if len(shown) > MAX_ARG_CHARS:
            size = len(value) if isinstance(value, str) else len(shown)
            shown = shown[: MAX_ARG_CHARS - 8].replace("\\n", " ") + f'..." ({size:,} chars)'
        parts.append(f"{key}={shown}")
    return ", ".join(parts)


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


class Display:
    """Prints the demo's live trace and its summary; ``quiet`` keeps only the summary."""

    def __init__(self, *, quiet: bool = False, plain: bool = False, file: TextIO | None = None) -> None:
        self.quiet = quiet
        self.broken = False
        self.before_line: Callable[[], None] | None = None
        """Called before each line is printed (the CLI erases its progress line there)."""
        """True once the output's reader has gone (a closed pipe): nothing more is printed."""
        self._file = file
        self._console = None if plain else _rich_console(file)
        if self._console is not None:  # rich's own answer to a closed pipe is SystemExit(1)
            self._console.on_broken_pipe = self._broken_pipe

    def _broken_pipe(self) -> None:
        self.broken = True
        if self._console is not None:
            self._console.quiet = True
        silence_stdout()

    @property
    def rich(self) -> bool:
        return self._console is not None

    def _line(self, *segments: Segment, trace: bool = True) -> None:
        if (trace and self.quiet) or self.broken:
            return
        if self.before_line is not None:
            self.before_line()
        try:
            if self._console is not None:
                from rich.text import Text

                self._console.print(Text.assemble(*[(t, s) if s else t for t, s in segments]))
            else:
                # The stream is looked up per call so redirections (and pytest's capsys) apply.
                print("".join(t for t, _ in segments), file=self._file or sys.stdout)
        except BrokenPipeError:  # `rma demo | head`: the reader left; the run goes on, silently
            self._broken_pipe()

    def _mark(self, fancy: str, ascii_: str) -> str:
        return fancy if self.rich else ascii_

    # ── the trace ──

    def header(self, title: str, rows: Sequence[tuple[str, str]]) -> None:
        self._line((title, "bold"))
        for label, value in rows:
            self._line(("  ", None), (f"{label:<{LABEL_WIDTH}} ", "dim"), (value, None))
        self._line()

    def model_turn(self, turn: int, text: str, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        lines = text.strip().splitlines() or [""]
        # A long answer is shown in full once, in the summary; the trace keeps its first line.
        more = f"  (+{len(lines) - 1} more lines)" if len(lines) > 1 else ""
        said: Segment = (lines[0], None) if lines[0] else ("(no text)", "dim")
        self._line((f"turn {turn}", "bold cyan"), ("  model: ", "green"), said, (more, "dim"))
        for name, args in calls:
            self._line(
                (INDENT, None), (self._mark("→ ", "-> "), "yellow"), (f"{name}({format_args(args)})", None)
            )

    def tool_result(self, name: str, ok: bool, summary: str) -> None:
        mark, style = (self._mark("✓ ", "ok  "), "green") if ok else (self._mark("✗ ", "ERR "), "red")
        self._line((INDENT, None), (mark, style), (f"{name}: ", "dim"), (summary, None if ok else "red"))

    def notice(self, label: str, text: str) -> None:
        """A loop-level fact: a directive the loop added, a call it answered itself."""
        self._line((INDENT, None), (f"[{label}] ", "magenta"), (_first_line(text), "dim"))

    # ── the end ──

    def summary(self, rows: Sequence[tuple[str, str]], answer: str) -> None:
        if not self.quiet:
            self._line(trace=False)
        self._line(("Summary", "bold"), trace=False)
        for label, value in rows:
            self._line(("  ", None), (f"{label:<{LABEL_WIDTH}} ", "dim"), (value, None), trace=False)
        if answer.strip():
            self._line(trace=False)
            self._line(("Final answer", "bold"), trace=False)
            for line in answer.strip().splitlines():
                self._line(("  ", None), (line, None), trace=False)

    def error(self, message: str) -> None:
        """An error line on stderr (never on the trace's stream)."""
        if self.before_line is not None:
            self.before_line()
        if self._console is not None:
            from rich.console import Console
            from rich.text import Text

            console = Console(file=sys.stderr, highlight=False, soft_wrap=True)
            console.print(Text.assemble(("error: ", "bold red"), message))
        else:
            print(f"error: {message}", file=sys.stderr)
