"""Replay: fold a recorded event log through the session machine.

A log (written by ``rma_shell`` with ``record=``) is JSONL: a header with the session's
config, one line per input event in the order the core saw it, and one ``transcript``
line after each result the shell completed with the provider's transcript (format 2: failures
carrying a partial result too). Folding the
events through ``step`` reproduces every command and every result, byte for byte — the
basis of ``rma replay`` and of the record/replay properties. Pure: lines in, values out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import attrs
from returns.result import Failure, Result, Success

from rma.codec_json import from_jsonable
from rma.errors import MalformedResponse, SessionError
from rma.provider import ProviderCodec
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
    lines: Iterable[str], codec_for: Callable[[str], ProviderCodec]
) -> Result[Replayed, SessionError]:
    """Parse a recorded JSONL log and fold it. A damaged log is a typed error, not a traceback."""
    config: SessionConfig | None = None
    log_format = 1
    events: list[Event] = []
    transcripts: list[object] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            kind = record["kind"]
            if kind == "header":
                config = load_config(record, codec_for)
                log_format = int(record.get("format", 1))
            elif kind == "event":
                events.append(from_jsonable(record["event"]))
            elif kind == "transcript":
                transcripts.append(record["transcript"])
        except (ValueError, KeyError, TypeError) as exc:
            return Failure(MalformedResponse(detail=f"log line {n}: {type(exc).__name__}: {exc}"))
    if config is None:
        return Failure(MalformedResponse(detail="log has no header line"))
    return Success(fold(config, events, transcripts, failures_have_transcripts=log_format >= 2))
