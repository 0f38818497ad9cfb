"""The journal format: a session's durable log, its check, and the fold a resume starts from. Pure.

A journal (``run(..., journal=..., journal_key=...)``) holds, per key, numbered records — one
JSON object each, chained like a recording (``rma.recording``): a record's ``chain`` is the
SHA-256 of the previous record's chain, a newline and the record's text, and the first record
chains onto the key's own genesis (``genesis(key)``), so a record edited, dropped, reordered
or copied in from another session's log breaks the chain where it happened.

Records (``kind``):

- ``header`` — first: ``format``, the ``key``, the ``provider`` name, the session's ``config``
  and the JSON parts of its open request (``request``);
- ``event`` — one per input event, in the order the core saw it, written *before* the core
  takes it and durable before any command it causes acts outside the process (a request, a
  tool, a result handed back; the shell commits the records pending then, in one transaction,
  so stream events that cause nothing else share a commit). With it, in the same
  record, what reattaching to the host needs (``Provider.snapshot``), when the open, a poll or
  a reconnect changed it: the first time whole (``conn``), then as what changed since the
  journal's previous one (``conn_delta``, ``rma.snapshots``), so a Local turn writes the
  messages and calls it added, not the whole conversation again — a journaled turn costs the
  same at turn 2,000 as at turn 2. (Formats 1 and 2 wrote ``conn`` each time, its ``history``
  as the suffix from ``history_from``; both are read.) One record, not two, so a journal cut
  short anywhere never parts an event from the snapshot it brought (which would resume a
  conversation that lacks the turn): every prefix of a journal is one a crash could have left;
- ``tool_start`` / ``tool_result`` — a tool call's start (``id``, ``attempt``), durable before
  the tool runs, and its result, durable before it goes to the host; ``confirm`` marks a
  host-run call's verdict (a Claude tool confirmation). The result that ends a batch has no
  record of its own: the batch's ``ToolsFinished`` event, in the same transaction, holds it
  (``load`` collects results from both);
- ``waiting`` — calls that wait for an approval (``approve``): the run paused there;
- ``approval`` — a decision: ``id``, ``decision`` (``allow``/``deny``), ``reason``;
- ``end`` — the session's final outcome, once it has one: ``"fold"`` when it is the one the
  events lead to (``load`` replays them), so a result is not written a second time.

Every record may carry ``at``: when the shell wrote it (Unix seconds, to the
millisecond), for durations (``rma inspect``). The format does not need it: ``load`` ignores
it, and a journal written before it existed reads the same.

``load`` checks a journal and collects what a resume needs; ``fold`` replays its events
through ``step`` and says which commands were in flight when it stopped. No I/O here: the
stores (SQLite by default) and the resume driver are ``rma_shell.journal``'s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal

import attrs
from returns.result import Failure, Result, Success

from rma import snapshots
from rma.codec_json import decode_result, from_jsonable
from rma.errors import SessionError
from rma.provider import ProviderCodec
from rma.recording import encode
from rma.replay import load_config
from rma.session import commands as cmd
from rma.session import events as ev
from rma.session.endings import replace_transcript, tupled_transcript
from rma.session.machine import State, initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import JSON, SessionResult, ToolResult

FORMAT = 3
"""The format written. 2 (issue #28): an end record may refer to its events' outcome
(``"fold"``), and a batch's last result may be only in its ``ToolsFinished``. 3: an event's
snapshot may be a delta from the previous one (``conn_delta``). An rma that reads only older
formats refuses a newer journal by its header (``unknown journal format``) instead of
misreading it. All three are read."""
READS = frozenset({1, 2, FORMAT})

Decision = Literal["allow", "deny"]


# ── errors ───────────────────────────────────────────────────────────────────────────


@attrs.frozen
class JournalDamaged(SessionError):
    """A journal that is not what was written — edited, cut, reordered, undecodable: never
    resumed. ``seq`` (1-based, 0 for the whole journal) says where."""

    kind: ClassVar[str] = "journal_damaged"
    key: str = ""
    seq: int = 0
    detail: str = ""

    @property
    def message(self) -> str:
        where = f" at record {self.seq}" if self.seq else ""
        return f"journal {self.key!r}{where}: {self.detail}"


@attrs.frozen
class JournalMismatch(SessionError):
    """A journal that belongs to another session: another key, another provider, another host
    session, or a run that is not there at all (``detail`` says which)."""

    kind: ClassVar[str] = "journal_mismatch"
    key: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        return f"journal {self.key!r}: {self.detail}"


@attrs.frozen
class JournalUnavailable(SessionError):
    """The journal could not be written (a locked or full disk, a closed store): the session
    stopped there, since going on would leave its effects unrecorded."""

    kind: ClassVar[str] = "journal_unavailable"
    key: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        return f"journal {self.key!r} cannot be written: {self.detail}"


@attrs.frozen
class JournalBusy(SessionError):
    """Another run carries this key on right now (``run``, ``resume`` or ``resume_session``,
    in this process or another): two would both drive the host. ``holder`` names it when
    known (``pid 4242 on host-a``). Refused at once, nothing sent; a holder that died holds
    nothing (docs/decisions.md)."""

    kind: ClassVar[str] = "journal_busy"
    key: str = ""
    holder: str | None = None
    detail: str = ""

    @property
    def message(self) -> str:
        by = f" by {self.holder}" if self.holder else ""
        more = f" ({self.detail})" if self.detail else ""
        return f"journal {self.key!r} is being carried on{by}{more}: try again when it returns"


@attrs.frozen
class PendingApproval:
    """A tool call that waits for a person: ``approve(journal, key, tool_use_id, ...)``."""

    tool_use_id: str
    name: str
    input: Mapping[str, JSON]
    host_confirmation: bool = False
    """A host-run call the host asks to confirm (Claude's ``evaluated_permission: ask``)."""


@attrs.frozen
class AwaitingApproval(SessionError):
    """The run paused, durably, on calls that need an approval; ``waiting`` lists them with their
    inputs. Decide each with ``approve(journal, key, tool_use_id, "allow" | "deny", reason)``,
    then ``resume(journal, key, ...)`` — from any process, at any later time."""

    kind: ClassVar[str] = "awaiting_approval"
    key: str = ""
    waiting: tuple[PendingApproval, ...] = ()

    @property
    def message(self) -> str:
        calls = ", ".join(f"{p.name} ({p.tool_use_id})" for p in self.waiting)
        return f"journal {self.key!r} waits for approval of {calls or 'nothing'}"


# ── writing ──────────────────────────────────────────────────────────────────────────


def genesis(key: str) -> str:
    """The chain value the first record of ``key`` is sealed onto."""
    return hashlib.sha256(b"rma-journal\n" + key.encode("utf-8", "surrogatepass")).hexdigest()


def chain(previous: str, body: str) -> str:
    """The chain value of record text ``body`` after a record whose chain is ``previous``."""
    return hashlib.sha256(
        previous.encode("ascii") + b"\n" + body.encode("utf-8", "surrogatepass")
    ).hexdigest()


def _at(at: float | None) -> str:
    """The ``"at":…`` member's text (with its leading comma), or nothing."""
    return "" if at is None else ',"at":' + f"{float(at):.3f}"


def header_record(
    key: str, provider: str, config_json: str, request: Mapping[str, JSON], at: float | None = None
) -> str:
    return (
        '{"kind":"header","format":'
        + str(FORMAT)
        + _at(at)
        + ',"key":'
        + json.dumps(key)
        + ',"provider":'
        + json.dumps(provider)
        + ',"config":'
        + config_json
        + ',"request":'
        + encode(dict(request))
        + "}"
    )


def event_record(
    event_json: str, conn_json: str | None = None, at: float | None = None, *, delta: bool = False
) -> str:
    """An event's record; ``conn_json``: the snapshot it brought, whole, or with ``delta`` what
    changed since the journal's previous one (``rma.snapshots.delta``)."""
    if conn_json is None:
        return '{"kind":"event"' + _at(at) + ',"event":' + event_json + "}"
    member = ',"conn_delta":' if delta else ',"conn":'
    return '{"kind":"event"' + _at(at) + ',"event":' + event_json + member + conn_json + "}"


def _stamped(body: dict[str, JSON], at: float | None) -> str:
    if at is not None:
        body["at"] = round(float(at), 3)
    return encode(body)


def tool_start_record(tool_use_id: str, attempt: int, at: float | None = None) -> str:
    # Written once per tool call: its text is put together, not encoded from a dict.
    return (
        '{"kind":"tool_start"'
        + _at(at)
        + ',"id":'
        + encode(tool_use_id)
        + ',"attempt":'
        + str(int(attempt))
        + "}"
    )


def tool_result_record(result: ToolResult, *, confirm: bool = False, at: float | None = None) -> str:
    body: dict[str, JSON] = {
        "kind": "tool_result",
        "id": result.tool_use_id,
        "text": result.text,
        "is_error": result.is_error,
    }
    if result.content:  # a rich result's parts, tagged as the recording codec writes them
        body["content"] = list(result.content)
    if confirm:
        body["confirm"] = True
    return _stamped(body, at)


def waiting_record(waiting: Iterable[PendingApproval], at: float | None = None) -> str:
    calls = [
        {
            "id": p.tool_use_id,
            "name": p.name,
            "input": dict(p.input),
            "host_confirmation": p.host_confirmation,
        }
        for p in waiting
    ]
    return _stamped({"kind": "waiting", "calls": calls}, at)


def approval_record(tool_use_id: str, decision: Decision, reason: str | None, at: float | None = None) -> str:
    return _stamped({"kind": "approval", "id": tool_use_id, "decision": decision, "reason": reason}, at)


FOLDED = '"fold"'
"""An end record's ``outcome`` when it is the one the journal's own events lead to: ``load``
replays them (``fold``) instead of reading a second copy of the session's result."""


def end_record(outcome_json: str, at: float | None = None, *, transcript_is_history: bool = False) -> str:
    """The outcome's record. ``outcome_json`` is the encoded outcome, or ``FOLDED`` when the
    outcome is the final one the record's events lead to (the core's own ``Finish``, with no
    transcript or with the journaled history as its transcript): a result's usage, events and
    calls are all in the events already, and at 1,000 sessions encoding them again was the
    end record's whole cost (issue #28). ``transcript_is_history``: the outcome was encoded
    without its transcript because it is the history the journal's last ``conn`` holds
    (Local's), which ``load`` puts back — a long session's transcript is not written twice."""
    where = ',"transcript":"history"' if transcript_is_history else ""
    return '{"kind":"end"' + _at(at) + where + ',"outcome":' + outcome_json + "}"


# ── reading ──────────────────────────────────────────────────────────────────────────


@attrs.frozen
class Loaded:
    """A checked journal: what a resume needs, in the order it was written."""

    key: str
    provider: str
    config: SessionConfig
    request: Mapping[str, JSON]
    events: tuple[ev.Event, ...]
    snapshot: Mapping[str, JSON] | None
    """The latest ``conn`` an event brought, its history whole again; None before the open."""
    results: Mapping[str, ToolResult]
    """Journaled tool results by tool-use id (calls run by the handler)."""
    verdicts: Mapping[str, ToolResult]
    """Journaled confirmation verdicts by tool-use id (host-run calls)."""
    starts: Mapping[str, int]
    """The last attempt started, by tool-use id."""
    approvals: Mapping[str, tuple[Decision, str | None]]
    waiting: tuple[PendingApproval, ...]
    outcome: Result[SessionResult, SessionError] | None
    """The final outcome, when the session had one (an ``end`` record)."""
    records: int
    last_chain: str
    format: int = FORMAT
    """The header's format: a process that goes on writing the journal writes records that
    format's readers know (``rma_shell.journal.writer``)."""


def load(
    key: str, rows: Iterable[tuple[int, str, str]], codec_for: Callable[[str], ProviderCodec]
) -> Result[Loaded, SessionError]:
    """Check ``(seq, text, chain)`` rows of ``key`` and collect them. A journal that is damaged or
    belongs to another session is a typed error, never a partial read."""
    previous = genesis(key)
    expected = 1
    header: dict[str, Any] | None = None
    events: list[ev.Event] = []
    snapshot: dict[str, JSON] | None = None
    history: list[JSON] = []
    results: dict[str, ToolResult] = {}
    verdicts: dict[str, ToolResult] = {}
    starts: dict[str, int] = {}
    approvals: dict[str, tuple[Decision, str | None]] = {}
    waiting: dict[str, PendingApproval] = {}
    outcome: Result[SessionResult, SessionError] | None = None
    folded_at = 0
    """The seq of an end record whose outcome is the events' fold (0: none)."""
    history_transcript = False
    for seq, text, sealed in rows:
        if seq != expected:
            return Failure(JournalDamaged(key=key, seq=expected, detail=f"record {expected} is missing"))
        if chain(previous, text) != sealed:
            detail = (
                "belongs to another session's chain"
                if seq == 1
                else "does not match its chain (edited, moved or dropped records)"
            )
            error: SessionError = (
                JournalMismatch(key=key, detail=f"its first record {detail}")
                if seq == 1
                else JournalDamaged(key=key, seq=seq, detail=detail)
            )
            return Failure(error)
        previous, expected = sealed, expected + 1
        try:
            record = json.loads(text)
            kind = record["kind"]
            if seq == 1:
                if kind != "header":
                    return Failure(JournalDamaged(key=key, seq=1, detail="the first record is not a header"))
                if record.get("key") != key:
                    return Failure(
                        JournalMismatch(key=key, detail=f"it is the journal of {record.get('key')!r}")
                    )
                if record.get("format") not in READS:
                    return Failure(
                        JournalDamaged(
                            key=key, seq=1, detail=f"unknown journal format {record.get('format')!r}"
                        )
                    )
                header = record
            elif kind == "event":
                event = from_jsonable(record["event"])
                events.append(event)
                if isinstance(event, ev.ToolsFinished):  # a batch's last result is only here
                    for done in event.results:
                        if done.tool_use_id is not None:
                            results.setdefault(done.tool_use_id, done)
                if "conn" in record:
                    conn = dict(record["conn"])
                    start = record.get("history_from")  # formats 1 and 2
                    if isinstance(start, int):
                        history = [*history[:start], *conn["history"]]
                        conn["history"] = list(history)
                    snapshot = conn
                elif "conn_delta" in record:  # format 3: applied in place, O(what it changed)
                    if snapshot is None:
                        raise ValueError("a snapshot delta before any snapshot")
                    changed = snapshots.apply(snapshot, record["conn_delta"], owned=True)
                    if not isinstance(changed, dict):
                        raise ValueError("a snapshot delta that leaves no mapping")
                    snapshot = changed
            elif kind == "tool_start":
                starts[str(record["id"])] = int(record["attempt"])
            elif kind == "tool_result":
                result = ToolResult(
                    str(record["id"]),
                    str(record["text"]),
                    bool(record["is_error"]),
                    from_jsonable(record.get("content", [])),
                )
                (verdicts if record.get("confirm") else results)[result.tool_use_id] = result  # type: ignore[index]
            elif kind == "waiting":
                for call in record["calls"]:
                    waiting[str(call["id"])] = PendingApproval(
                        str(call["id"]),
                        str(call["name"]),
                        dict(call["input"]),
                        bool(call.get("host_confirmation")),
                    )
            elif kind == "approval":
                decision = record["decision"]
                if decision not in ("allow", "deny"):
                    raise ValueError(f"decision {decision!r}")
                approvals[str(record["id"])] = (decision, record.get("reason"))
            elif kind == "end":
                if record["outcome"] == "fold":  # the events' own: replayed once the config is read
                    folded_at, outcome = seq, None
                else:
                    decoded = decode_result(record["outcome"])
                    if not isinstance(decoded, Success | Failure):
                        raise ValueError("end record without an outcome")
                    folded_at, outcome = 0, tupled_transcript(decoded)
                history_transcript = record.get("transcript") == "history"
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return Failure(
                JournalDamaged(key=key, seq=seq, detail=f"cannot read it ({type(exc).__name__}: {exc})")
            )
    if header is None:
        return Failure(JournalMismatch(key=key, detail="no session was journaled under this key"))
    try:
        config = load_config(header, codec_for)
    except (ValueError, KeyError, TypeError) as exc:
        return Failure(JournalDamaged(key=key, seq=1, detail=f"cannot read its config ({exc})"))
    if folded_at:
        outcome = fold(config, events).outcome
        if outcome is None:
            detail = "its end refers to the outcome of its events, and they reach none"
            return Failure(JournalDamaged(key=key, seq=folded_at, detail=detail))
    if outcome is not None and history_transcript:
        journaled = snapshot.get("history") if snapshot is not None else None
        outcome = replace_transcript(outcome, tuple(journaled or ()))
    return Success(
        Loaded(
            key=key,
            provider=str(header.get("provider", "")),
            config=config,
            request=dict(header.get("request") or {}),
            events=tuple(events),
            snapshot=snapshot,
            results=results,
            verdicts=verdicts,
            starts=starts,
            approvals=approvals,
            waiting=tuple(p for i, p in waiting.items() if i not in approvals),
            outcome=outcome,
            records=expected - 1,
            format=int(header.get("format") or 1),
            last_chain=previous,
        )
    )


# ── folding ──────────────────────────────────────────────────────────────────────────


@attrs.frozen
class InFlight:
    """The I/O commands the core had issued and not yet heard back from (each single-flight)."""

    poll: cmd.PollTurn | None = None
    push: cmd.PushInput | None = None
    tools: cmd.RunTools | None = None
    guard: cmd.CallGuard | None = None
    timer: cmd.ScheduleReconnect | None = None
    reconnect: cmd.Reconnect | None = None


_CLEARS: dict[type, str] = {
    ev.TurnPolled: "poll",
    ev.TurnFailed: "poll",
    ev.PushFinished: "push",
    ev.ToolsFinished: "tools",
    ev.GuardVerdict: "guard",
    ev.ReconnectTimerFired: "timer",
    ev.ReconnectFinished: "reconnect",
}

_ISSUED: dict[type, str] = {
    cmd.PollTurn: "poll",
    cmd.PushInput: "push",
    cmd.RunTools: "tools",
    cmd.CallGuard: "guard",
    cmd.ScheduleReconnect: "timer",
    cmd.Reconnect: "reconnect",
}


@attrs.frozen
class Folded:
    """The state a journal's events lead to, what was in flight, and the outcome if it ended."""

    state: State
    in_flight: InFlight
    outcome: Result[SessionResult, SessionError] | None


def fold(config: SessionConfig, events: Iterable[ev.Event]) -> Folded:
    """Replay ``events`` from a fresh state, as the shell fed them, tracking the commands in flight."""
    state = initial_state(config)
    flight: dict[str, object] = {}
    outcome: Result[SessionResult, SessionError] | None = None
    for event in events:
        cleared = _CLEARS.get(type(event))
        if cleared is not None:
            flight.pop(cleared, None)
        state, out = step(state, event)
        for c in out:
            issued = _ISSUED.get(type(c))
            if issued is not None:
                flight[issued] = c
            elif isinstance(c, cmd.Finish) and c.final:
                outcome = c.outcome
    return Folded(state, InFlight(**flight), outcome)  # type: ignore[arg-type]
