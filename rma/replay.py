"""Replay: fold a recorded event log through the session machine.

A log (written by ``rma_shell`` with ``record=``) is JSONL: a header with the session's
config, one line per input event in the order the core saw it, and one ``transcript``
line after each result the shell completed with the provider's transcript (format 2: failures
carrying a partial result too). Folding the
events through ``step`` reproduces every command and every result, byte for byte — the
basis of ``rma replay`` and of the record/replay properties. Pure: lines in, values out.

``replay_lines`` first checks the log (``rma.recording.check``: the digest chain, the end
record), then folds it and compares each result with the digest recorded for it, so a damaged
log, or one this version of the core no longer reproduces, is a ``DamagedLog`` error rather
than a different result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs
from returns.result import Failure, Result, Success

from rma.codec_json import decode_result, from_jsonable
from rma.errors import MalformedResponse, SessionError
from rma.provider import ProviderCodec
from rma.recording import DamagedLog, check, encode, result_digest
from rma.session.commands import Command, Finish
from rma.session.events import Event
from rma.session.machine import State, carries_result, initial_state, step, with_transcript
from rma.session.options import SessionConfig
from rma.vocabulary import SessionResult


@attrs.frozen
class Replayed:
    """What a replay produced: every command, every result, and the final state."""

    commands: tuple[Command, ...]
    results: tuple[Result[SessionResult, SessionError], ...]
    state: State
    verified: bool = False
    """The log was sealed (format 2): chain, end record and result digests all checked."""
    outcome: Result[SessionResult, SessionError] | None = None
    """What the run returned when the core did not produce it (a failure at open, a crash)."""
    at: str | None = None
    """Where ``outcome`` happened: ``"open"`` for a session that never opened."""
    stopped: str | None = None
    """What ended the recorded run early (``KeyboardInterrupt``, ``cancelled``), if anything."""
    complete: bool = True
    """False when a ``partial`` replay found no end record (the log was cut short)."""


def load_config(header: dict[str, object], codec_for: Callable[[str], ProviderCodec]) -> SessionConfig:
    raw = dict(header["config"])  # type: ignore[call-overload]
    raw.pop("$type", None)
    fields = {k: from_jsonable(v) for k, v in raw.items()}
    return SessionConfig(codec=codec_for(str(fields.get("provider_name", ""))), **fields)


def fold(
    config: SessionConfig,
    events: Iterable[Event],
    transcripts: Iterable[object] = (),
    *,
    failures_have_transcripts: bool = True,
) -> Replayed:
    """Fold ``events`` from a fresh state; the recorded transcripts go, in order, to the results
    the shell gave one: successes, and failures carrying a partial result (a format-1 log
    recorded them for successes only: ``failures_have_transcripts=False``)."""
    state = initial_state(config)
    commands: list[Command] = []
    results: list[Result[SessionResult, SessionError]] = []
    pending_transcripts = iter(transcripts)
    for ev in events:
        state, out = step(state, ev)
        commands.extend(out)
        for c in out:
            if isinstance(c, Finish):
                outcome = c.outcome
                if isinstance(outcome, Success) or (failures_have_transcripts and carries_result(outcome)):
                    t = next(pending_transcripts, None)
                    outcome = with_transcript(outcome, None if t is None else tuple(t))  # type: ignore[arg-type]
                results.append(outcome)
    return Replayed(tuple(commands), tuple(results), state)


def replay_lines(
    lines: Iterable[str], codec_for: Callable[[str], ProviderCodec], *, partial: bool = False
) -> Result[Replayed, SessionError]:
    """Check a recorded JSONL log and fold it. A damaged log is a typed error, not a traceback.

    ``partial`` replays a log that was cut short as far as it goes (``rma.recording.check``)."""
    checked = check(lines, partial=partial)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    config: SessionConfig | None = None
    log_format = 1
    events: list[Event] = []
    transcripts: list[object] = []
    digests: list[str] = []
    end: dict[str, object] = {}
    for n, record in checked.unwrap().records:
        try:
            kind = record["kind"]
            if kind == "header":
                config = load_config(record, codec_for)
                log_format = int(record.get("format", 1))
            elif kind == "event":
                events.append(from_jsonable(record["event"]))
            elif kind == "transcript":
                transcripts.append(from_jsonable(record["transcript"]))
            elif kind == "result":
                digests.append(str(record["digest"]))
            elif kind == "end":
                end = record
                if end.get("outcome") is not None:
                    end["outcome"] = decode_result(end["outcome"])
        except (ValueError, KeyError, TypeError) as exc:
            return Failure(MalformedResponse(detail=f"log line {n}: {type(exc).__name__}: {exc}"))
    if config is None:
        return Failure(MalformedResponse(detail="log has no header line"))
    replayed = fold(config, events, transcripts, failures_have_transcripts=log_format >= 2)
    if checked.unwrap().sealed:
        differs = _first_difference(replayed.results, digests, complete=checked.unwrap().complete)
        if differs is not None:
            return Failure(differs)
    outcome = end.get("outcome")
    stopped = end.get("stopped")
    at = end.get("at")
    return Success(
        attrs.evolve(
            replayed,
            verified=checked.unwrap().sealed,
            complete=checked.unwrap().complete,
            outcome=outcome if isinstance(outcome, Success | Failure) else None,
            at=at if isinstance(at, str) else None,
            stopped=stopped if isinstance(stopped, str) else None,
        )
    )


def _first_difference(
    results: tuple[Result[SessionResult, SessionError], ...], digests: list[str], *, complete: bool
) -> DamagedLog | None:
    for n, (outcome, digest) in enumerate(zip(results, digests, strict=False), 1):
        if result_digest(encode(outcome)) != digest:
            return DamagedLog(
                0, f"result {n} replays differently from the recorded run (another rma version?)"
            )
    if len(results) < len(digests) or (complete and len(results) != len(digests)):
        return DamagedLog(0, f"the recorded run reported {len(digests)} result(s), the replay {len(results)}")
    return None
