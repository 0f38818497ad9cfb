"""The demo's toolset: read a CSV, summarize a numeric column, write a Markdown report.

These are ordinary user tools, written the way an application would write its own: they
run in this process (the loop host only ever sees their names, descriptions and input
schemas) and answer with JSON text. Reads are limited to the demo's named datasets and to
files under the working directory; writes, to Markdown files inside it. A bad argument is
a ``ToolError`` whose message says what went wrong and, where it can, suggests the fix
(``Did you mean column='revenue'?``) — models recover better from errors that say how.
Not part of the library's API; the tools are synchronous and do blocking file I/O, so
async callers run them in a worker thread.
"""

from __future__ import annotations

import csv
import difflib
import json
import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PREVIEW_ROWS = 5
MAX_ROWS = 1_000_000
REPORT_SUFFIXES = (".md", ".markdown")

TOOL_SPECS: tuple[dict[str, Any], ...] = (
    {
        "name": "read_csv",
        "description": (
            "Read a CSV file and describe it: its columns (each with type 'number' or 'text'), "
            "its row count and its first rows."
        ),
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "The CSV file, e.g. sales.csv"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    {
        "name": "summarize",
        "description": (
            "Summary statistics of one numeric column of a CSV file: count, sum, min, max, mean and median."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The CSV file"},
                "column": {"type": "string", "description": "The exact name of a numeric column"},
            },
            "required": ["path", "column"],
            "additionalProperties": False,
        },
    },
    {
        "name": "write_report",
        "description": (
            "Write a Markdown report to a file in the current directory (a plain file name ending "
            "in .md). Returns the path written and its size in bytes."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "filename": {"type": "string", "description": "e.g. report.md"},
                "markdown": {"type": "string", "description": "The whole report, in Markdown"},
            },
            "required": ["filename", "markdown"],
            "additionalProperties": False,
        },
    },
)
"""Tool declarations in the shape ``Local(tools=...)`` takes."""

TOOL_NAMES = tuple(spec["name"] for spec in TOOL_SPECS)


class ToolError(Exception):
    """A tool refused its input. ``suggestion`` is a corrected value for ``argument``."""

    def __init__(self, message: str, argument: str | None = None, suggestion: str | None = None) -> None:
        if argument is not None and suggestion is not None:
            message = f"{message}. Did you mean {argument}={json.dumps(suggestion)}?"
        super().__init__(message)
        self.argument = argument
        self.suggestion = suggestion


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _plain(value: float, integral: bool) -> int | float:
    # Whole-number columns stay whole in the JSON (units: 105, not 105.0).
    return int(value) if integral and value.is_integer() else round(value, 2)


class _Table:
    def __init__(self, columns: list[str], rows: list[dict[str, str]]) -> None:
        self.columns = columns
        self.rows = rows

    def values(self, column: str) -> list[str]:
        return [(row.get(column) or "").strip() for row in self.rows]

    def numeric(self, column: str) -> list[float] | None:
        present = [v for v in self.values(column) if v]
        numbers = [_number(v) for v in present]
        if not present or any(n is None for n in numbers):
            return None
        return [n for n in numbers if n is not None]

    def numeric_columns(self) -> list[str]:
        return [c for c in self.columns if self.numeric(c) is not None]

    def integral(self, column: str) -> bool:
        values = self.numeric(column)
        return values is not None and all(v.is_integer() for v in values)


class DemoTools:
    """The three demo tools over ``workdir`` plus named ``datasets`` (name → file)."""

    def __init__(self, workdir: Path, datasets: Mapping[str, Path] | None = None) -> None:
        self.workdir = workdir.resolve()
        self.datasets = dict(datasets or {})
        self.written: list[tuple[str, int]] = []
        """(path, bytes) of every report written, in order."""

    # ── dispatch ──

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run tool ``name`` and return its JSON result text; raises ``ToolError``."""
        if name == "read_csv":
            result = self.read_csv(_str_arg(arguments, "path"))
        elif name == "summarize":
            result = self.summarize(_str_arg(arguments, "path"), _str_arg(arguments, "column"))
        elif name == "write_report":
            result = self.write_report(_str_arg(arguments, "filename"), _str_arg(arguments, "markdown"))
        else:
            raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}")
        return json.dumps(result, ensure_ascii=False)

    # ── the tools ──

    def read_csv(self, path: str) -> dict[str, Any]:
        table = self._load(path)
        numeric = set(table.numeric_columns())
        integral = {c for c in numeric if table.integral(c)}
        first: list[dict[str, Any]] = []
        for row in table.rows[:PREVIEW_ROWS]:
            shown: dict[str, Any] = {}
            for column in table.columns:
                raw = (row.get(column) or "").strip()
                parsed = _number(raw) if column in numeric else None
                shown[column] = _plain(parsed, column in integral) if parsed is not None else raw
            first.append(shown)
        return {
            "path": path,
            "columns": [{"name": c, "type": "number" if c in numeric else "text"} for c in table.columns],
            "rows": len(table.rows),
            "first_rows": first,
        }

    def summarize(self, path: str, column: str) -> dict[str, Any]:
        table = self._load(path)
        if column not in table.columns:
            folded = {c.casefold(): c for c in table.columns}
            guess = folded.get(column.strip().casefold()) or _closest(column, table.numeric_columns())
            raise ToolError(
                f"column {column!r} not found in {path}; its columns are {', '.join(table.columns)}",
                "column",
                guess,
            )
        values = table.numeric(column)
        if values is None:
            numeric = table.numeric_columns()
            raise ToolError(
                f"column {column!r} is not numeric; numeric columns: {', '.join(numeric) or 'none'}",
                "column",
                _closest(column, numeric) or (numeric[0] if numeric else None),
            )
        whole = table.integral(column)
        return {
            "path": path,
            "column": column,
            "count": len(values),
            "sum": _plain(math.fsum(values), whole),
            "min": _plain(min(values), whole),
            "max": _plain(max(values), whole),
            "mean": round(statistics.fmean(values), 2),
            "median": _plain(statistics.median(values), whole),
        }

    def write_report(self, filename: str, markdown: str) -> dict[str, Any]:
        name = filename.strip()
        plain = Path(name).name or "report.md"
        if not plain.endswith(REPORT_SUFFIXES):
            plain = f"{Path(plain).stem or 'report'}.md"
        if not name:
            raise ToolError("filename is empty", "filename", "report.md")
        target = (self.workdir / name).resolve()
        if Path(name).is_absolute() or not target.is_relative_to(self.workdir):
            raise ToolError(
                f"refusing to write {name!r}: reports go inside the current directory", "filename", plain
            )
        if not name.endswith(REPORT_SUFFIXES):
            raise ToolError(
                f"refusing to write {name!r}: a report is a Markdown file ending in .md", "filename", plain
            )
        if target.is_dir():
            raise ToolError(f"{name!r} is a directory", "filename", plain)
        if not target.parent.is_dir():
            raise ToolError(f"the directory of {name!r} does not exist", "filename", plain)
        data = markdown if markdown.endswith("\n") else markdown + "\n"
        encoded = data.encode("utf-8")
        target.write_bytes(encoded)
        shown = target.relative_to(self.workdir).as_posix()
        self.written.append((shown, len(encoded)))
        return {"path": shown, "bytes": len(encoded)}

    # ── helpers ──

    def _resolve_input(self, path: str) -> Path:
        if path in self.datasets:
            return self.datasets[path]
        known = sorted({*self.datasets, *(p.name for p in self.workdir.glob("*.csv"))})
        candidate = (self.workdir / path).resolve()
        if Path(path).is_absolute() or not candidate.is_relative_to(self.workdir):
            raise ToolError(
                f"refusing to read {path!r}: only files in the current directory can be read",
                "path",
                _closest(Path(path).name, known),
            )
        if not candidate.is_file():
            raise ToolError(f"no such CSV file: {path!r}", "path", _closest(path, known))
        return candidate

    def _load(self, path: str) -> _Table:
        file = self._resolve_input(path)
        try:
            with file.open(newline="", encoding="utf-8-sig") as handle:
                reader = csv.DictReader(handle)
                columns = [c.strip() for c in reader.fieldnames or [] if c is not None]
                rows: list[dict[str, str]] = []
                for row in reader:
                    rows.append({(k or "").strip(): v if isinstance(v, str) else "" for k, v in row.items()})
                    if len(rows) >= MAX_ROWS:
                        break
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise ToolError(f"cannot read {path!r} as CSV: {exc}") from exc
        if not columns:
            raise ToolError(f"{path!r} is empty or has no header row")
        return _Table(columns, rows)


def _str_arg(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str):
        got = "nothing" if value is None else type(value).__name__
        raise ToolError(f"argument {name!r} must be a string, got {got}")
    return value


def _closest(word: str, options: list[str]) -> str | None:
    matches = difflib.get_close_matches(word, options, n=1, cutoff=0.5)
    return matches[0] if matches else None
