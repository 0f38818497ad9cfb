"""What the inspector reads: a journal (every key a session) or a recording (one run), read-only
except for one thing — a journal's pending approval, decided through ``rma_shell.approve``.

``open_source(path)`` tells them apart by content (an SQLite file's magic, else a JSONL
recording). Each read is fresh: the journal may be written by a running session in another
process, and the inspector follows it by reading again (``version`` is cheap: the number of
records, or the recording's size). A damaged journal or recording is shown as such, with the
check's own message — never a traceback, never a partial timeline passed off as whole.

What this is not: the pages (``pages``) or the server (``server``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
from returns.result import Failure, Result, Success

from rma.codec_json import from_jsonable
from rma.errors import InvalidOpts, SessionError
from rma.journal import Decision, load
from rma.provider import ProviderCodec
from rma.replay import load_config, replay_lines
from rma.session import events as ev
from rma.session.options import SessionConfig
from rma.vocabulary import JSON
from rma_shell.inspect.timeline import Extras, Outcome, Redactor, Timeline, build, outcome_of
from rma_shell.journal.store import JournalStore, JournalStoreError, SQLiteJournal

State = Literal["running", "ended", "failed", "waiting for approval", "damaged"]
SQLITE_MAGIC = b"SQLite format 3\x00"


class SourceError(Exception):
    """A path the inspector cannot open (missing, unreadable, neither a journal nor a recording)."""


@attrs.frozen
class Summary:
    """One line of the sessions list."""

    key: str
    state: State
    provider: str
    turns: int
    input_tokens: int
    output_tokens: int
    started_at: float | None
    updated_at: float | None
    waiting: int = 0
    detail: str = ""


@attrs.frozen
class Pending:
    """A call that waits for a decision, with its (redacted) input."""

    id: str
    name: str
    input: JSON
    host_confirmation: bool


@attrs.frozen
class View:
    """One session: its summary, its request, its timeline and what waits."""

    summary: Summary
    request: JSON
    timeline: Timeline
    pending: tuple[Pending, ...]
    read_only: bool


def codec_for(name: str) -> ProviderCodec:
    # Importing a provider codec module registers it by name (rma.provider.register_codec).
    import rma.providers.agentcore.codec
    import rma.providers.claude.codec
    import rma.providers.local.codec
    import rma.providers.scripted  # noqa: F401
    from rma.provider import codec_for as registered

    return registered(name)


def _state(outcomes: Sequence[Outcome], final: bool, waiting: int) -> State:
    if waiting:
        return "waiting for approval"
    if not final:
        return "running"
    return "ended" if outcomes and outcomes[-1].ok else "failed"


class JournalSource:
    """Every session of a journal (an SQLite path or a ``JournalStore``)."""

    read_only = False

    def __init__(self, journal: str | os.PathLike[str] | JournalStore, redactor: Redactor) -> None:
        self.journal: Any = journal
        self.redactor = redactor
        self._store: JournalStore = (
            SQLiteJournal(journal) if isinstance(journal, str | os.PathLike) else journal
        )
        self.name = str(journal) if isinstance(journal, str | os.PathLike) else type(journal).__name__

    def close(self) -> None:
        if isinstance(self.journal, str | os.PathLike):
            self._store.close()

    def session_keys(self) -> Sequence[str]:
        return self._store.keys()

    def version(self, key: str | None = None) -> str:
        if key is None:
            return ",".join(f"{k}:{len(self._store.rows(k))}" for k in self.session_keys())
        return str(len(self._store.rows(key)))

    def sessions(self) -> list[Summary]:
        return [self.view(k).summary for k in self.session_keys()]

    def view(self, key: str) -> View:
        try:
            rows = self._store.rows(key)
        except JournalStoreError as exc:
            return _damaged(key, str(exc))
        loaded = load(key, rows, codec_for)
        if isinstance(loaded, Failure):
            return _damaged(key, self.redactor.text(str(loaded.failure())))
        got = loaded.unwrap()
        events: list[tuple[ev.Event, float | None, float | None]] = []
        starts: dict[str, tuple[int, float | None]] = {}
        results: dict[str, tuple[str, bool, float | None]] = {}
        first: float | None = None
        last: float | None = None
        for _seq, text, _chain in rows:
            record = json.loads(text)
            at = record.get("at")
            at = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None
            before = last
            if at is not None:
                first = at if first is None else first
                last = at
            kind = record["kind"]
            if kind == "event":
                events.append((from_jsonable(record["event"]), at, before))
            elif kind == "tool_start":
                starts[str(record["id"])] = (int(record["attempt"]), at)
            elif kind == "tool_result" and not record.get("confirm"):
                results[str(record["id"])] = (str(record["text"]), bool(record["is_error"]), at)
        extras = Extras(
            starts=starts,
            results=results,
            decisions={i: (d, r) for i, (d, r) in got.approvals.items()},
            waiting={p.tool_use_id: (p.name, dict(p.input), p.host_confirmation) for p in got.waiting},
        )
        timeline = build(got.config, events, self.redactor, extras)
        if got.outcome is not None and not timeline.outcomes:
            timeline.outcomes.append(outcome_of(got.outcome, self.redactor))
        pending = tuple(
            Pending(p.tool_use_id, p.name, self.redactor.json(dict(p.input)), p.host_confirmation)
            for p in got.waiting
        )
        summary = _summary(key, got.provider, timeline, got.outcome is not None, len(pending), first, last)
        return View(summary, self.redactor.json(dict(got.request)), timeline, pending, read_only=False)

    def decide(
        self, key: str, tool_use_id: str, decision: Decision, reason: str | None
    ) -> Result[None, SessionError]:
        """``rma_shell.approve``, as a person clicking Allow or Deny: a call that no longer waits
        (decided already, from here or elsewhere) is refused with its message."""
        from rma_shell.resuming import approve

        return approve(self._store, key, tool_use_id, decision, reason)


class RecordingSource:
    """One recorded run (``record=``, ``rma demo --record``): read-only."""

    read_only = True

    def __init__(self, path: str | os.PathLike[str], redactor: Redactor) -> None:
        self.path = Path(path)
        self.redactor = redactor
        self.name = str(path)
        self.key = self.path.name

    def close(self) -> None:
        pass

    def session_keys(self) -> Sequence[str]:
        return [self.key]

    def version(self, key: str | None = None) -> str:
        try:
            return str(self.path.stat().st_size)
        except OSError:
            return "gone"

    def sessions(self) -> list[Summary]:
        return [self.view(self.key).summary]

    def view(self, key: str) -> View:
        if key != self.key:
            raise KeyError(key)
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            return _damaged(key, f"cannot read {self.path}: {exc}", read_only=True)
        replayed = replay_lines(lines, codec_for, partial=True)
        if isinstance(replayed, Failure):
            return _damaged(key, self.redactor.text(str(replayed.failure())), read_only=True)
        done = replayed.unwrap()
        config: SessionConfig | None = None
        events: list[tuple[ev.Event, float | None, float | None]] = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:  # the last line of a recording still being written: checked above
                continue
            if record.get("kind") == "header":
                config = load_config(record, codec_for)
            elif record.get("kind") == "event":
                events.append((from_jsonable(record["event"]), None, None))
        if config is None:  # replay_lines refuses a log without a header: never here
            return _damaged(key, "no header line", read_only=True)
        timeline = build(config, events, self.redactor)
        if done.outcome is not None:
            timeline.outcomes.append(outcome_of(done.outcome, self.redactor))
        final = done.complete and (bool(timeline.outcomes) or done.stopped is not None)
        summary = _summary(key, config.provider_name, timeline, final, 0, None, None)
        if done.stopped:
            summary = attrs.evolve(summary, detail=f"stopped by {done.stopped}")
        request: JSON = {"prompt": self.redactor.text(config.prompt)} if config.prompt else {}
        return View(summary, request, timeline, (), read_only=True)


def _summary(
    key: str,
    provider: str,
    timeline: Timeline,
    final: bool,
    waiting: int,
    first: float | None,
    last: float | None,
) -> Summary:
    usage = timeline.usage
    state = _state(timeline.outcomes, final, waiting)
    detail = ""
    if timeline.outcomes and not timeline.outcomes[-1].ok:
        detail = timeline.outcomes[-1].message
    return Summary(
        key,
        state,
        provider,
        sum(1 for t in timeline.turns if t.finished),
        usage.input_tokens,
        usage.output_tokens,
        first,
        last,
        waiting,
        detail,
    )


def _damaged(key: str, message: str, *, read_only: bool = False) -> View:
    summary = Summary(key, "damaged", "", 0, 0, 0, None, None, 0, message)
    return View(summary, {}, Timeline(), (), read_only=read_only)


Source = JournalSource | RecordingSource


def open_source(target: str | os.PathLike[str] | JournalStore, redactor: Redactor) -> Source:
    """A journal (a store, or an SQLite file) or a recording (a JSONL file), by content."""
    if not isinstance(target, str | os.PathLike):
        if isinstance(target, JournalStore):
            return JournalSource(target, redactor)
        raise SourceError(f"expected a journal, a recording or a JournalStore, got {type(target).__name__}")
    path = Path(target)
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if head == SQLITE_MAGIC:
        try:
            return JournalSource(path, redactor)
        except JournalStoreError as exc:
            raise SourceError(str(exc)) from None
    if head.lstrip().startswith(b"{"):
        return RecordingSource(path, redactor)
    raise SourceError(f"{path}: neither a journal (SQLite) nor a recording (JSONL)")


def check_decision(decision: str) -> Result[Decision, SessionError]:
    if decision == "allow":
        return Success("allow")
    if decision == "deny":
        return Success("deny")
    return Failure(InvalidOpts("decision", f"must be 'allow' or 'deny', got {decision!r}"))
