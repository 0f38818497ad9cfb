"""A session's timeline, as the inspector shows it: turns, text, tool calls, usage, times.

Built by folding the session's events through the core (``rma.session.machine.step``) with
live updates on, whatever the recorded run asked for: the machine's own ``TextDelta``,
``ToolCallStarted``/``Finished``, ``TurnFinished`` (with the turn's usage) and
``AttemptDiscarded`` give the turns in every host's terms, ``RunTools`` the calls' inputs,
and ``Finish`` each request's outcome. A journal adds what the events do not hold: tool
results written before their batch ended, decisions, the calls that wait, and (``at``) when
each record was written — the durations. A recording has no times: its durations are absent.

Everything a page shows passes through ``Redactor`` first: credential-named entries masked as
option maps print them, and every known secret's value masked as logs and errors mask them
(``rma.redact``). No I/O here; ``reading`` gives the records.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from returns.result import Result, Success

from rma.errors import SessionError
from rma.live import AttemptDiscarded, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished
from rma.redact import MASK, redact_json, redact_text
from rma.session import commands as cmd
from rma.session import events as ev
from rma.session.machine import initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import JSON, SessionResult, Usage
from rma_shell.providers.base import masked

SECRET_ENVIRONMENT = (
    "RMA_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
)
"""Environment variables whose values the inspector masks wherever they appear."""


@attrs.frozen
class Redactor:
    """Masks credential-named entries (``masked``) and every known secret's value (``MASK``)."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()
    ) -> Redactor:
        env = os.environ if environ is None else environ
        found = [env[name] for name in SECRET_ENVIRONMENT if env.get(name)]
        return cls(tuple(dict.fromkeys([*found, *extra])))

    def text(self, value: str) -> str:
        return redact_text(value, self.secrets)

    def json(self, value: Any) -> JSON:
        return redact_json(masked(value), self.secrets)


@attrs.define
class Call:
    """One tool call: what the model asked, what it was answered, and when."""

    id: str | None
    name: str
    input: JSON = None
    input_error: str | None = None
    result: str | None = None
    is_error: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    decision: str | None = None
    reason: str | None = None
    waiting: bool = False
    host_confirmation: bool = False

    @property
    def status(self) -> str:
        if self.waiting:
            return "waiting for approval"
        if self.result is None:
            return "denied" if self.decision == "deny" else "running"
        return "error" if self.is_error else "done"

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)


@attrs.define
class Turn:
    """One model turn: its text, its calls, its usage and stop, and how long it took."""

    number: int
    text: str = ""
    calls: list[Call] = attrs.Factory(list)
    usage: Usage | None = None
    terminal: str | None = None
    stop_reason: JSON = None
    discarded: list[str] = attrs.Factory(list)
    """Attempts that failed and were re-sent: the error kind of each."""
    started_at: float | None = None
    finished_at: float | None = None
    finished: bool = False

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)


@attrs.frozen
class Outcome:
    """How one request ended: ``ok`` with its text and stop, or the error's kind and message."""

    ok: bool
    kind: str
    message: str
    text: str = ""
    usage: Usage | None = None
    turns: int = 0


@attrs.define
class Timeline:
    turns: list[Turn] = attrs.Factory(list)
    outcomes: list[Outcome] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)
    """Failed turns and warnings the core logged, in order (redacted)."""
    messages: list[str] = attrs.Factory(list)
    """User messages sent into the session after its prompt."""

    @property
    def usage(self) -> Usage:
        total = Usage()
        for turn in self.turns:
            if turn.usage is not None:
                total = total + turn.usage
        return total

    def calls(self) -> Iterable[Call]:
        for turn in self.turns:
            yield from turn.calls


@attrs.frozen
class Extras:
    """What a journal holds beside the events (a recording: nothing)."""

    starts: Mapping[str, tuple[int, float | None]] = attrs.field(factory=dict)
    """Tool-use id → (last attempt, when it started)."""
    results: Mapping[str, tuple[str, bool, float | None]] = attrs.field(factory=dict)
    """Tool-use id → (text, is_error, when it was written)."""
    decisions: Mapping[str, tuple[str, str | None]] = attrs.field(factory=dict)
    waiting: Mapping[str, tuple[str, JSON, bool]] = attrs.field(factory=dict)
    """Undecided calls: id → (name, input, host confirmation)."""


def outcome_of(outcome: Result[SessionResult, SessionError], redactor: Redactor) -> Outcome:
    if isinstance(outcome, Success):
        result = outcome.unwrap()
        stop = f"{result.terminal.value}" + (f" ({result.reason})" if result.reason else "")
        return Outcome(True, stop, "", redactor.text(result.text), result.usage, result.turns)
    error = outcome.failure()
    result = error.result if isinstance(error, SessionError) else None
    return Outcome(
        False,
        getattr(error, "kind", type(error).__name__),
        redactor.text(getattr(error, "message", str(error))),
        redactor.text(result.text) if result is not None else "",
        result.usage if result is not None else None,
        result.turns if result is not None else 0,
    )


def build(
    config: SessionConfig,
    events: Iterable[tuple[ev.Event, float | None, float | None]],
    redactor: Redactor,
    extras: Extras | None = None,
) -> Timeline:
    """The timeline of ``events``, each with when it was written and when the record before it
    was (None where unknown): a turn lasted from the record before its first event — the open,
    the tools' results, a decision — to the event that ended it."""
    extras = extras or Extras()
    state = initial_state(attrs.evolve(config, deliver_updates=True))
    line = Timeline()
    current: Turn | None = None
    by_id: dict[str, Call] = {}

    def open_turn(at: float | None) -> Turn:
        nonlocal current
        if current is None:
            current = Turn(len(line.turns) + 1, started_at=at)
            line.turns.append(current)
        return current

    def call(use_id: str | None, name: str, turn: Turn) -> Call:
        if use_id is not None and use_id in by_id:
            return by_id[use_id]
        made = Call(use_id, name)
        turn.calls.append(made)
        if use_id is not None:
            by_id[use_id] = made
        return made

    for event, at, started in events:
        if isinstance(event, ev.UserMessage):
            line.messages.append(redactor.text(event.text))
        elif isinstance(event, ev.TurnFailed):
            line.errors.append(redactor.text(str(event.error)))
        elif isinstance(event, ev.StreamFailed):
            line.errors.append(redactor.text(f"stream dropped: {event.error}"))
        state, out = step(state, event)
        for c in out:
            if isinstance(c, cmd.DeliverUpdate):
                update = c.update
                if isinstance(update, TextDelta):
                    open_turn(started).text += redactor.text(update.text)
                elif isinstance(update, ToolCallStarted):
                    call(update.id, update.name, open_turn(started))
                elif isinstance(update, ToolCallFinished):
                    # Answered after its turn ended: it belongs to the turn that asked for it.
                    asked = line.turns[-1] if line.turns else open_turn(started)
                    call(update.id, update.name, asked).is_error = update.is_error
                elif isinstance(update, TurnFinished):
                    turn = open_turn(started)
                    turn.usage = update.usage
                    turn.terminal = str(update.terminal.value)
                    turn.stop_reason = redactor.json(update.stop_reason)
                    turn.finished_at = at
                    turn.finished = True
                    current = None
                elif isinstance(update, AttemptDiscarded):
                    turn = open_turn(started)
                    turn.text = ""
                    turn.calls.clear()
                    turn.discarded.append(update.error or "error")
            elif isinstance(c, cmd.RunTools):
                turn = line.turns[-1] if line.turns else open_turn(started)
                for use in (*c.uses, *c.confirmations):
                    made = call(use.id, use.name, turn)
                    made.input = redactor.json(dict(use.input))
                    made.input_error = use.input_error
            elif isinstance(c, cmd.Finish):
                line.outcomes.append(outcome_of(c.outcome, redactor))
            elif isinstance(c, cmd.Log) and c.level in ("warning", "error"):
                line.errors.append(redactor.text(c.message))
        if isinstance(event, ev.ToolsFinished):
            for result in (*event.results, *event.verdicts):
                if result.tool_use_id in by_id:
                    answered = by_id[result.tool_use_id]
                    answered.result = redactor.text(result.text)
                    answered.is_error = result.is_error
                    if answered.finished_at is None:
                        answered.finished_at = at
    _add_journal(line, by_id, extras, redactor)
    return line


def _add_journal(line: Timeline, by_id: dict[str, Call], extras: Extras, redactor: Redactor) -> None:
    for use_id, (attempt, at) in extras.starts.items():
        if use_id in by_id:
            by_id[use_id].attempts = attempt
            by_id[use_id].started_at = at
    for use_id, (text, is_error, at) in extras.results.items():
        if use_id in by_id:
            by_id[use_id].result = redactor.text(text)
            by_id[use_id].is_error = is_error
            by_id[use_id].finished_at = at
    for use_id, (decision, reason) in extras.decisions.items():
        if use_id in by_id:
            by_id[use_id].decision = decision
            by_id[use_id].reason = redactor.text(reason) if reason else None
    for use_id, (name, input_, host) in extras.waiting.items():
        found = by_id.get(use_id)
        if found is None:
            turn = line.turns[-1] if line.turns else Turn(1)
            if not line.turns:
                line.turns.append(turn)
            found = Call(use_id, name)
            turn.calls.append(found)
            by_id[use_id] = found
        found.input = redactor.json(input_)
        found.waiting = True
        found.host_confirmation = host


__all__ = ["MASK", "Call", "Extras", "Outcome", "Redactor", "Timeline", "Turn", "build", "outcome_of"]
