"""A simulated shell and loop host for the pure session machine.

``World`` plays the part of ``rma_shell`` plus a scripted provider: it feeds events into
``rma.session.machine.step`` and answers every command the machine returns — polls and
pushes with generated turns, tool batches with results, guard calls with verdicts,
reconnect timers and reconnects with consolidation results — while hypothesis chooses,
at every step, which of the possible things happens next (including faults, stale
stream generations, duplicate event ids, follow-up messages and send_event calls).

Every step is checked on the spot against the invariants in ``check_step``; the whole
run is checked afterwards by ``check_trace`` (replay, JSON round trips, forks).

Invariants (numbering of the brief) and where they are checked:

1. never an empty resume (S-53) — ``_on_drive``; the resume carries the batch's results
   in tool-use order (T-1) — ``_check_resume_matches_results``
2. an id runs twice in one batch only if the host sent it twice, with the T-12 warning —
   ``_check_batch``
3. at most ``max_turns`` drives per request, ``result.turns <= max_turns`` — ``_on_drive``,
   ``_check_result``
4. usage = the request's usage events (tokens and raw); request/response results hold
   exactly the polled turns; guard payloads (S-38) — ``_check_result``,
   ``_check_guard_payload``
5. one Finish per request, final only for sync runs, silence after it; no request left
   hanging with nothing outstanding — ``_on_finish``, ``_start_request``,
   ``_check_progress``, ``_check_not_stuck``, ``run`` (late inputs after a sync result)
6. ``fold`` and ``rma replay`` of the recorded log reproduce commands and results; events
   and commands survive ``codec_json`` — ``check_trace``
7. ``step`` never raises; re-stepping any older state (a fork) gives the same output and
   no state changes after the fact — ``feed``, ``check_trace``
8. recovery never adds an accumulated id, nor one id twice (S-54) —
   ``_check_recovery_adds_no_known_id``, ``_check_result``

Also: backoff schedule and its reset (R-12, R-13), one Reply per send_event, E-5 live or
batch delivery, E-9 text deltas, E-11 dedupe, stale inputs change nothing (S-24).
The world never reads the machine's state to decide what to do: it only sees commands,
exactly like the real shell. (One check, S-54 in ``_check_recovery_adds_no_known_id``,
compares the accumulators of consecutive states: recovery is invisible in commands.)
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from rma.codec_json import dumps, loads
from rma.errors import ProviderError, SessionError, StreamDropped, TransportError
from rma.provider import codec_for
from rma.providers.scripted import ScriptedCodec, ScriptedStreamingCodec
from rma.replay import fold, replay_lines
from rma.session import commands as C
from rma.session.events import (
    Event,
    GuardVerdict,
    LiveEvent,
    Opened,
    PushFinished,
    Reconnected,
    ReconnectFinished,
    ReconnectTimerFired,
    SendEventRequested,
    StreamClosed,
    StreamConnected,
    StreamEvent,
    StreamFailed,
    ToolsFinished,
    TurnFailed,
    TurnPolled,
    UserMessage,
)
from rma.session.machine import State, initial_state, reconnect_backoff_ms, step
from rma.session.options import SessionConfig
from rma.vocabulary import JSON, TEXT_DELTA_TYPE, SessionResult, ToolResult, ToolUse

TERMINAL_TOOL = "finish"
TOOL_NAMES = ("lookup", TERMINAL_TOOL, "calc")
TOOL_ID_POOL = ("t1", "t2", "t3")
Draw = Callable[[st.SearchStrategy[Any]], Any]


@attrs.frozen
class TurnSpec:
    """One host turn, drawn in one go (cheap to draw, shrinks towards a plain end_turn)."""

    stop: str
    tools: tuple[tuple[int, str], ...]  # (id choice: a pool id or a fresh one, tool name)
    other_tool: bool  # a turn that does not require action may still carry one call
    extras: tuple[tuple[str, int, int, int], ...]  # (kind, a, b, c): usage tokens, text, echo…
    calls_last: bool
    bare_stop: bool
    ids_mode: str  # what the idle's event_ids name: this turn's calls, some, earlier ones…
    picks: tuple[int, ...]


TURN_SPECS = st.builds(
    TurnSpec,
    stop=st.sampled_from(
        [
            "end_turn",
            "requires_action",
            "requires_action",
            "requires_action",
            "terminated",
            "retries_exhausted",
            "none",
        ]
    ),
    tools=st.lists(
        st.tuples(st.integers(0, len(TOOL_ID_POOL) + 1), st.sampled_from(TOOL_NAMES)), min_size=1, max_size=3
    ).map(tuple),
    other_tool=st.booleans(),
    extras=st.lists(
        st.tuples(
            st.sampled_from(["usage", "text", "server_tool_use", "tool_result", "dup"]),
            st.integers(0, 40),
            st.integers(0, 40),
            st.integers(-1, 5),
        ),
        max_size=3,
    ).map(tuple),
    calls_last=st.booleans(),
    bare_stop=st.booleans(),
    ids_mode=st.sampled_from(["here", "here", "here", "absent", "subset", "earlier", "empty", "mixed"]),
    picks=st.lists(st.integers(0, 63), max_size=3).map(tuple),
)


def scaled(examples: int) -> int:
    """``examples`` times ``RMA_PROPERTIES_SCALE`` (default 1), for deeper local or nightly runs."""
    return max(1, round(examples * float(os.environ.get("RMA_PROPERTIES_SCALE", "1"))))


class Violation(AssertionError):
    """An invariant of the session machine does not hold."""


# ── configuration ──────────────────────────────────────────────────────────────────────


@attrs.frozen
class Params:
    streaming: bool
    live: bool
    max_turns: int
    require_terminal_tool: bool
    max_reprompts: int
    guard: bool
    resumed: bool
    prompt: str | None
    # How a reconnect accounts for events released onto a stream that died before
    # delivering them: "replay" (R-18 Better: listed as Reconnected.replay), "carry"
    # (delivered on the next stream, like rma_shell.testing.ScriptedProvider) or both
    # drawn per reconnect.
    reconnect_styles: tuple[str, ...] = ("replay", "carry")

    def config(self) -> SessionConfig:
        codec = ScriptedStreamingCodec() if self.streaming else ScriptedCodec()
        return SessionConfig(
            codec=codec,
            live=self.live,
            prompt=self.prompt,
            max_turns=self.max_turns,
            terminal_tool=TERMINAL_TOOL if self.require_terminal_tool else None,
            max_reprompts=self.max_reprompts,
            has_turn_guard=self.guard,
            metadata={"app": "properties"},
            text_deltas=codec.has_text_delta,
            provider_name=codec.name,
        )


def params(
    *, streaming: bool | None = None, live: bool | None = None, resumed: bool | None = None
) -> st.SearchStrategy[Params]:
    def maybe(value: bool | None) -> st.SearchStrategy[bool]:
        return st.booleans() if value is None else st.just(value)

    return st.builds(
        Params,
        streaming=maybe(streaming),
        live=maybe(live),
        max_turns=st.integers(1, 6),
        require_terminal_tool=st.booleans(),
        max_reprompts=st.integers(0, 2),
        guard=st.booleans(),
        resumed=maybe(resumed),
        prompt=st.sampled_from([None, "go"]),
    )


# ── the trace of one run ───────────────────────────────────────────────────────────────


def snapshot(s: State) -> tuple[Any, ...]:
    """The contents of every shared-store container of a state, materialized now.

    Everything else in a ``State`` is a frozen value; these containers are the only parts
    that share mutable storage between versions, so they are what a fork could corrupt.
    """
    acc, seen = s.acc, s.seen
    ids = seen.ids()
    return (
        s.turn_events.to_tuple(),
        acc.events.to_tuple(),
        acc.custom_tool_uses.to_tuple(),
        acc.server_tool_uses.to_tuple(),
        acc.usage_raw.to_tuple(),
        ids,
        tuple(i in seen for i in ids),
        len(seen),
    )


@attrs.define
class Trace:
    config: SessionConfig
    events: list[Event] = attrs.Factory(list)
    before: list[State] = attrs.Factory(list)
    after: list[State] = attrs.Factory(list)
    after_snap: list[tuple[Any, ...]] = attrs.Factory(list)
    outputs: list[tuple[C.Command, ...]] = attrs.Factory(list)

    @property
    def commands(self) -> tuple[C.Command, ...]:
        return tuple(itertools.chain.from_iterable(self.outputs))

    @property
    def results(self) -> tuple[Result[SessionResult, SessionError], ...]:
        return tuple(c.outcome for c in self.commands if isinstance(c, C.Finish))


# ── the world ──────────────────────────────────────────────────────────────────────────


def _result_of(outcome: Result[SessionResult, SessionError]) -> SessionResult | None:
    result = outcome.unwrap() if isinstance(outcome, Success) else getattr(outcome.failure(), "result", None)
    return result if isinstance(result, SessionResult) else None


def _is_send_event(c: C.Command) -> bool:
    return isinstance(c, C.PushInput) and c.purpose == "send_event"


DRIVES = (C.PollTurn, C.PushInput)


class World:
    def __init__(self, draw: Draw, p: Params, *, max_steps: int = 80) -> None:
        self.draw = draw
        self.p = p
        self.codec = ScriptedStreamingCodec() if p.streaming else ScriptedCodec()
        self.cfg = p.config()
        self.state = initial_state(self.cfg)
        self.trace = Trace(self.cfg)
        self.max_steps = max_steps
        self._ids = itertools.count(1)
        # outstanding obligations (what the shell owes the machine)
        self.poll: C.PollTurn | None = None
        self.poll_turn: list[JSON] | None = None
        self.push: C.PushInput | None = None
        self.push_ok = True
        self.tools: C.RunTools | None = None
        self.answered: dict[int, tuple[ToolResult, ...]] = {}
        self.batches_seen = 0
        self.guard = False
        self.timer = False
        self.reconnect: C.Reconnect | None = None
        self.warned: set[str] = set()  # T-12 duplicates warned since the last batch
        self.sends: dict[int, int] = {}  # send_event request -> replies seen
        self.next_request = 0
        # streams (streaming only)
        self.machine_gen = 0
        self.stream_gen: int | None = None  # the stream that is open, if any
        self.connected = False
        self.queue: list[JSON] = []  # released by the host, not yet delivered
        self.turn_in_flight = False
        self.delivered: list[tuple[int, JSON]] = []
        self.history: list[JSON] = []  # the host's record: turn events and tool results
        self.tool_ids_sent: Counter[str] = Counter()
        # request accounting (invariants 3 and 5)
        self.request_open = False
        self.resuming = False
        self.drives = 0
        self.finished = False
        self.attempts = 0
        self.rr_turns: list[tuple[JSON, ...]] = []
        self.last_reconnected: Reconnected | None = None
        if p.resumed:
            self.history = self._draw_prior_history()
        self.prior_ids = {
            e["id"] for e in self.history if isinstance(e, dict) and isinstance(e.get("id"), str)
        }

    # ── ids and generated content ──

    def eid(self) -> str:
        return f"e{next(self._ids)}"

    def _tool_id(self, choice: int) -> str:
        if self.p.streaming or choice >= len(TOOL_ID_POOL):
            return f"t{next(self._ids)}"  # a streaming host's tool-use ids are its event ids: unique
        return TOOL_ID_POOL[choice]

    def draw_turn(self, *, allow_no_idle: bool = True) -> list[JSON]:
        """A turn in the scripted host's vocabulary; the idle, if any, comes last."""
        spec: TurnSpec = self.draw(TURN_SPECS)
        stop = spec.stop
        if stop == "none" and not allow_no_idle:
            stop = "end_turn"
        tools = spec.tools if stop == "requires_action" else spec.tools[: int(spec.other_tool)]
        here = [self._tool_id(choice) for choice, _ in tools]
        events: list[JSON] = [
            {"type": "tool_use", "id": tid, "name": name, "input": {}}
            for tid, (_, name) in zip(here, tools, strict=True)
        ]
        answered = sorted(self.tool_ids_sent) or ["t1"]
        for kind, a, b, c in spec.extras:
            if kind == "text":
                events.append({"type": "text", "text": ("", "a", "hello")[a % 3], "id": self.eid()})
            elif kind == "usage":
                ev: dict[str, JSON] = {
                    "type": "usage",
                    "input_tokens": a,
                    "output_tokens": b,
                    "id": self.eid(),
                }
                if c >= 0:
                    ev["cache_read_input_tokens"] = c
                events.append(ev)
            elif kind == "server_tool_use":
                events.append({"type": "server_tool_use", "id": self.eid(), "name": "web_search"})
            elif kind == "tool_result":  # the host echoes an answered call
                tid = answered[a % len(answered)]
                events.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": tid,
                        "text": "",
                        "is_error": False,
                        "id": self.eid(),
                    }
                )
            elif kind == "dup" and events:
                events.append(events[a % len(events)])  # the very same event twice
        if spec.calls_last and here and len(events) > len(here):
            events = events[len(here) :] + events[: len(here)]
        for e in events:
            if isinstance(e, dict) and e.get("type") == "tool_use":
                self.tool_ids_sent[str(e["id"])] += 1
        if stop == "none":
            return events
        idle: dict[str, JSON] = {"type": "idle", "stop_reason": {"type": stop}, "id": self.eid()}
        if spec.bare_stop:
            idle["stop_reason"] = stop  # a bare string stop reason is accepted too
        earlier = sorted(self.tool_ids_sent)
        picked = [earlier[i % len(earlier)] for i in spec.picks] if earlier else []
        mask = spec.picks[0] if spec.picks else 0
        if spec.ids_mode == "here":
            idle["event_ids"] = list(here)
        elif spec.ids_mode == "subset":
            idle["event_ids"] = [t for i, t in enumerate(here) if mask >> i & 1]
        elif spec.ids_mode == "earlier":
            idle["event_ids"] = picked
        elif spec.ids_mode == "empty":
            idle["event_ids"] = []
        elif spec.ids_mode == "mixed":
            idle["event_ids"] = [*here, *picked[:2]]
        events.append(idle)
        return events

    def _draw_prior_history(self) -> list[JSON]:
        """What a reattached session already holds on the host (R-1…R-10)."""
        history: list[JSON] = []
        for _ in range(self.draw(st.integers(0, 2))):
            history.extend(self.draw_turn())
        return history

    # ── feeding ──

    def feed(self, ev: Event) -> tuple[C.Command, ...]:
        before = self.state
        try:
            after, out = step(before, ev)
        except Exception as exc:  # invariant 7: step is total
            raise Violation(f"step raised {type(exc).__name__}: {exc} on {ev!r}") from exc
        self.trace.events.append(ev)
        self.trace.before.append(before)
        self.trace.after.append(after)
        self.trace.after_snap.append(snapshot(after))
        self.trace.outputs.append(out)
        self.state = after
        self.check_step(ev, out)
        return out

    # ── invariants checked at every step ──

    def check_step(self, ev: Event, out: tuple[C.Command, ...]) -> None:
        p = self.p
        if self.finished and not p.live:
            if out:  # invariant 5: nothing after a sync run's one result
                raise Violation(f"sync run produced {out!r} after its Finish, on {ev!r}")
            return
        self._check_recovery_adds_no_known_id()
        in_reconnect_step = isinstance(ev, ReconnectFinished) and isinstance(ev.outcome, Success)
        resume_start = self.resuming and in_reconnect_step
        if isinstance(ev, Opened) and (ev.resumed or not p.live):
            self._start_request()  # a sync run is one request from its open on (S-65)
            self.resuming = ev.resumed
        for i, c in enumerate(out):
            if isinstance(c, DRIVES) and not _is_send_event(c):
                self._on_drive(c, in_reconnect_step, resume_start)
            elif isinstance(c, C.RunTools):
                if not self.request_open:
                    if not in_reconnect_step:
                        raise Violation(f"RunTools outside a request: {c!r} on {ev!r}")
                    self._start_request(reset_turns=False)  # a redrive without a request
                self._check_batch(c, out[:i])
            elif isinstance(c, C.Finish):
                self._on_finish(ev, c, out[i + 1 :], in_reconnect_step)
            elif isinstance(c, C.CallGuard) and not p.streaming:
                self._check_guard_payload(c)
            elif isinstance(c, C.ScheduleReconnect):
                expected = reconnect_backoff_ms(self.attempts)
                if (c.attempt, c.delay_ms) != (self.attempts, expected):
                    raise Violation(f"backoff {c!r}, expected attempt {self.attempts} delay {expected}")
                self.attempts += 1
            elif isinstance(c, C.Log) and c.level == "warning" and "duplicates" in c.fields:
                self.warned |= {str(d) for d in c.fields["duplicates"]}
            elif isinstance(c, C.Reply):
                if c.request not in self.sends:
                    raise Violation(f"Reply for an unknown request {c!r}")
                self.sends[c.request] += 1
                if self.sends[c.request] > 1:
                    raise Violation(f"second Reply for request {c.request}")
        if resume_start and self.request_open and self.last_reconnected is not None:
            acted = any(
                isinstance(c, (*DRIVES, C.RunTools, C.CallGuard, C.Finish)) and not _is_send_event(c)
                for c in out
            )
            if not acted and self.last_reconnected.idle:
                if not p.live:  # R-10 Better: a sync reattach with nothing to do returns at once
                    raise Violation(
                        f"sync reattach landed idle with nothing to do but did not finish: {out!r}"
                    )
                self.request_open = False  # a live reattach parks
        if in_reconnect_step:
            self.resuming = False
        self._check_deliveries(ev, out)
        self._check_progress()

    def _start_request(self, *, reset_turns: bool = True) -> None:
        if self.request_open:
            raise Violation("a request started while another one is open")
        self.request_open = True
        self.drives = 0
        if reset_turns:
            self._reset_accumulators()

    def _reset_accumulators(self) -> None:
        """Mirror of the machine's request-scoped reset (S-32, S-69, R-6)."""
        self.rr_turns = []

    def _on_drive(self, c: C.PollTurn | C.PushInput, in_reconnect_step: bool, resume_start: bool) -> None:
        if self.poll is not None or (self.push is not None):
            raise Violation(f"a second drive {c!r} while one is outstanding")
        purpose = c.purpose
        if purpose == "kickoff":
            if self.p.live or self.drives:
                self._start_request()
        elif purpose == "message":
            if self.request_open:
                if not (in_reconnect_step and resume_start):  # R-6 delivers within the resume request
                    raise Violation(f"follow-up {c!r} started while a request is open (S-70)")
                self.drives = 0
                self._reset_accumulators()
            else:
                self._start_request()
        elif not self.request_open:
            raise Violation(f"{purpose} drive outside a request: {c!r}")
        if purpose == "resume":  # invariant 1: never an empty resume (S-53)
            if not self.codec.empty_resume_safe and not (isinstance(c.input, list) and c.input):
                raise Violation(f"empty resume {c!r}")
            self._check_resume_matches_results(c)
        self.drives += 1
        if self.drives > self.p.max_turns:  # invariant 3
            raise Violation(
                f"drive #{self.drives} in one request exceeds max_turns={self.p.max_turns}: {c!r}"
            )

    def _check_resume_matches_results(self, c: C.PollTurn | C.PushInput) -> None:
        """T-1: the resume lists the batch's results in tool-use order."""
        if not self.answered:
            if self.codec.empty_resume_safe:
                return
            raise Violation(f"a resume no tool batch asked for: {c!r}")
        batch = max(self.answered)
        results = self.answered.pop(batch)
        got = [(r.get("tool_use_id"), r.get("text"), r.get("is_error")) for r in c.input]
        want = [(r.tool_use_id, r.text, r.is_error) for r in results]
        if got != want:
            raise Violation(f"resume {got} does not carry batch {batch}'s results {want}")
        self.answered.clear()

    def _check_batch(self, c: C.RunTools, earlier: Sequence[C.Command]) -> None:
        if self.tools is not None:
            raise Violation(f"second RunTools {c!r} while batch {self.tools.batch} runs")
        if not c.uses and not c.confirmations:
            raise Violation(f"empty RunTools {c!r}")
        counts = Counter(u.id for u in c.uses)
        dups = {str(i) for i, n in counts.items() if n > 1}
        if None in counts and counts[None] > 1:
            raise Violation(f"id-less tool uses run together in {c!r}")
        for i in dups:  # invariant 2: a repeated id only when the host itself repeated it
            if self.tool_ids_sent[i] < counts[i]:
                raise Violation(f"id {i!r} runs {counts[i]}x in {c!r}, host sent it {self.tool_ids_sent[i]}x")
        warned = self.warned
        self.warned = set()
        if dups and not dups <= warned:  # T-12 (the warning may come with the turn, before the guard)
            raise Violation(f"duplicate ids {sorted(dups)} run without the T-12 warning: {c!r}")

    def _on_finish(self, ev: Event, c: C.Finish, after: Sequence[C.Command], in_reconnect_step: bool) -> None:
        p = self.p
        if c.final == p.live:
            raise Violation(f"Finish(final={c.final}) in a {'live' if p.live else 'sync'} session")
        if not self.request_open:
            if not in_reconnect_step:  # invariant 5: one Finish per request
                raise Violation(f"Finish without a request: {c!r} on {ev!r}")
            self._start_request(reset_turns=False)
        self.request_open = False
        if not p.live:
            self.finished = True
            if after:
                raise Violation(f"commands after a sync Finish in the same step: {after!r}")
        if isinstance(c.outcome, Success):
            self.attempts = 0  # only a real terminal resets the backoff
        result = _result_of(c.outcome)
        if result is not None:
            self._check_result(result, c.outcome)

    def _check_result(self, r: SessionResult, outcome: Result[SessionResult, SessionError]) -> None:
        p = self.p
        if r.turns > p.max_turns:  # invariant 3, as the result reports it
            raise Violation(f"result with {r.turns} turns > max_turns={p.max_turns}: {outcome!r}")
        # invariant 4: usage is the sum of the request's usage events
        usage_events = [e for e in r.events if isinstance(e, dict) and e.get("type") == "usage"]
        want = (
            sum(int(e.get("input_tokens") or 0) for e in usage_events),
            sum(int(e.get("output_tokens") or 0) for e in usage_events),
            sum(int(e.get("cache_read_input_tokens") or 0) for e in usage_events),
        )
        got = (r.usage.input_tokens, r.usage.output_tokens, r.usage.cache_read_input_tokens)
        if got != want or r.usage.raw != tuple(usage_events):
            raise Violation(
                f"usage {got} raw={len(r.usage.raw)} but the request's usage events sum to {want}"
            )
        if p.streaming:
            idles = sum(1 for e in r.events if isinstance(e, dict) and e.get("type") == "idle")
            if r.turns != idles:
                raise Violation(f"streaming result says {r.turns} turns but holds {idles} turn boundaries")
            ids = [e["id"] for e in r.events if isinstance(e, dict) and isinstance(e.get("id"), str)]
            if len(ids) != len(set(ids)) or any(e not in self.history for e in r.events):
                raise Violation(f"result events are not the host's events, each once (E-8, E-11): {ids}")
        else:
            want_events = tuple(itertools.chain.from_iterable(self.rr_turns))
            if r.events != want_events or r.turns != len(self.rr_turns):
                raise Violation(
                    f"result events/turns {len(r.events)}/{r.turns} differ from the polled turns "
                    f"{len(want_events)}/{len(self.rr_turns)}"
                )
        # invariant 8 (S-54): recovery adds each id at most once on top of what turns brought
        direct: Counter[str | None] = Counter()
        for turn in self._turns_of(r.events):
            direct.update(u.id for u in self.codec.normalize(turn).custom_tool_uses)
        for tid, n in Counter(u.id for u in r.custom_tool_uses).items():
            if n > direct[tid] + 1:
                raise Violation(f"custom_tool_uses holds {tid!r} {n}x, turns contributed it {direct[tid]}x")

    def _check_guard_payload(self, c: C.CallGuard) -> None:
        """S-38: the guard sees the request's accumulated usage and turn count so far."""
        usage = [
            e for turn in self.rr_turns for e in turn if isinstance(e, dict) and e.get("type") == "usage"
        ]
        want = (len(self.rr_turns), sum(int(e.get("input_tokens") or 0) for e in usage))
        got_usage = c.payload.get("usage")
        got = (c.payload.get("turns"), getattr(got_usage, "input_tokens", None))
        if got != want or c.payload.get("session_id") != self.state.session_id:
            raise Violation(f"guard payload {dict(c.payload)!r}, expected turns/input tokens {want}")

    def _turns_of(self, events: Sequence[JSON]) -> list[tuple[JSON, ...]]:
        return self._split_turns(events) if self.p.streaming else list(self.rr_turns)

    def _check_recovery_adds_no_known_id(self) -> None:
        """Invariant 8 (S-54), step by step: what a step appends to custom_tool_uses is the
        completed turns' own uses, then recovered uses whose ids were not accumulated yet."""
        before, after = self.trace.before[-1].acc, self.state.acc
        old_events, new_events = before.events.to_tuple(), after.events.to_tuple()
        old_uses, new_uses = before.custom_tool_uses.to_tuple(), after.custom_tool_uses.to_tuple()
        if new_events[: len(old_events)] != old_events or new_uses[: len(old_uses)] != old_uses:
            old_events, old_uses = (), ()  # the request's accumulators were reset (S-32)
        added = list(new_uses[len(old_uses) :])
        turns = (
            self._split_turns(new_events[len(old_events) :])
            if self.p.streaming
            else ([new_events[len(old_events) :]] if len(new_events) > len(old_events) else [])
        )
        for turn in turns:
            direct = list(self.codec.normalize(turn).custom_tool_uses)
            if added[: len(direct)] != direct:
                raise Violation(f"turn uses {direct} not accumulated as they came: {added}")
            del added[: len(direct)]
        known = {u.id for u in new_uses[: len(new_uses) - len(added)]}
        recovered = [u.id for u in added]
        if known & set(recovered):
            raise Violation(
                f"recovery re-added accumulated id(s) {sorted(map(str, known & set(recovered)))} (S-54)"
            )
        if len(set(recovered)) != len(recovered):
            raise Violation(f"recovery added an id twice: {recovered} (S-54)")

    def _split_turns(self, events: Sequence[JSON]) -> list[tuple[JSON, ...]]:
        turns: list[tuple[JSON, ...]] = []
        current: list[JSON] = []
        for e in events:
            current.append(e)
            if self.codec.turn_boundary(e):
                turns.append(tuple(current))
                current = []
        return turns

    def _check_deliveries(self, ev: Event, out: tuple[C.Command, ...]) -> None:
        """E-9: a synthetic text delta follows exactly the raw text events that carry text."""
        deliveries = [c.event for c in out if isinstance(c, C.DeliverEvent)]
        for i, raw in enumerate(deliveries):
            if isinstance(raw, dict) and raw.get("type") == TEXT_DELTA_TYPE:
                prev = deliveries[i - 1] if i else None
                if not (
                    isinstance(prev, dict) and prev.get("type") == "text" and prev.get("text") == raw["text"]
                ):
                    raise Violation(f"text delta {raw!r} not right after its text event")
            elif isinstance(raw, dict) and raw.get("type") == "text" and raw.get("text"):
                nxt = deliveries[i + 1] if i + 1 < len(deliveries) else None
                if not (isinstance(nxt, dict) and nxt.get("type") == TEXT_DELTA_TYPE):
                    raise Violation(f"text event {raw!r} without its synthetic delta")
        # E-11: with the host listing every delivered id as seen, no event is processed twice.
        if self.p.streaming:
            for raw in deliveries:
                # Pool tool ids are reused by distinct events on purpose; every other id names one event.
                if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"] not in TOOL_ID_POOL:
                    key = raw["id"]
                    if key in self._processed_ids:
                        raise Violation(f"event {key} processed twice (E-11)")
                    self._processed_ids.add(key)

    _processed_ids: set[str]

    def _check_progress(self) -> None:
        """A request/response session with a request open always waits on something."""
        if self.p.streaming or (self.finished and not self.p.live) or not self.request_open:
            return
        outstanding = (self.poll, self.tools, self.push, self.reconnect)
        idle_world = all(o is None for o in outstanding) and not self.guard and not self.timer
        if idle_world and not self._obligations_pending_from_last_step():
            raise Violation("request/response session hangs: a request is open and nothing is outstanding")

    def _check_not_stuck(self) -> None:
        """Streaming: once the host has said everything it will say, an open request must be
        waiting on a command of its own; otherwise the session hangs until a timeout."""
        if not self.p.streaming or not self.request_open or (self.finished and not self.p.live):
            return
        outstanding = (self.poll, self.tools, self.push, self.reconnect)
        host_done = (
            not self.queue and not self.turn_in_flight and self.connected and self.stream_gen is not None
        )
        if host_done and all(o is None for o in outstanding) and not self.guard and not self.timer:
            raise Violation("streaming session hangs: the host delivered every event, the request is open")

    def _obligations_pending_from_last_step(self) -> bool:
        out = self.trace.outputs[-1] if self.trace.outputs else ()
        return any(
            isinstance(c, (*DRIVES, C.RunTools, C.CallGuard, C.ScheduleReconnect, C.Reconnect)) for c in out
        )

    # ── answering the machine ──

    def absorb(self, out: tuple[C.Command, ...]) -> None:
        """Record what the machine asked for; the answers come as later actions."""
        for c in out:
            if isinstance(c, C.PollTurn):
                self.poll = c
                self._record_input(c.input)
            elif isinstance(c, C.PushInput):
                self.push = c
                self.push_ok = self.draw(st.sampled_from([True] * 6 + [False]))
                if self.push_ok:
                    self._record_input(c.input)
                    if c.purpose != "send_event":
                        turn = self.draw_turn()
                        self.queue.extend(turn)
                        self.history.extend(turn)
                        # a turn without its idle is one the host is still working on
                        self.turn_in_flight = not (turn and self.codec.turn_boundary(turn[-1]))
            elif isinstance(c, C.RunTools):
                self.tools = c
                self.batches_seen += 1
            elif isinstance(c, C.CallGuard):
                if self.guard:
                    raise Violation("second CallGuard while one is outstanding")
                self.guard = True
            elif isinstance(c, C.ScheduleReconnect):
                if self.timer or self.reconnect is not None:
                    raise Violation(f"{c!r} while a reconnect is already under way")
                self.timer = True
                self.machine_gen += 1
                self.stream_gen = None
            elif isinstance(c, C.Reconnect):
                if self.reconnect is not None:
                    raise Violation(f"second Reconnect {c!r}")
                self.reconnect = c
                self.machine_gen = c.gen
                self.stream_gen = None

    def _record_input(self, input: JSON) -> None:
        if isinstance(input, list):
            self.history.extend(e for e in input if isinstance(e, dict) and e.get("type") == "tool_result")

    def _step(self, ev: Event) -> None:
        self.absorb(self.feed(ev))

    def _step_ignored(self, ev: Event) -> None:
        """Feed an input nobody is waiting for: it must ask for nothing and change nothing
        (beyond waiting in line behind inputs of its kind, to be dropped when its turn comes)."""
        before = self.state
        out = self.feed(ev)
        if out or attrs.evolve(self.state, deferred=before.deferred) != before:
            raise Violation(f"stale {ev!r} was acted upon: {out!r}")

    # ── actions ──

    PROGRESS = frozenset(
        {
            "act_answer_poll",
            "act_finish_push",
            "act_connect",
            "act_deliver",
            "act_tools",
            "act_guard",
            "act_timer",
            "act_reconnect",
        }
    )

    def actions(self) -> list[str]:
        """The names of the ``act_*`` methods that can happen now, progress first."""
        return [m.__name__ for m in self._enabled()]

    def act(self) -> None:
        """One thing happens: mostly progress on what the machine asked for, sometimes noise."""
        self._check_not_stuck()
        names = self.actions()
        progress = [n for n in names if n in self.PROGRESS]
        noise = [n for n in names if n not in self.PROGRESS]
        if progress and noise:
            names = progress if self.draw(st.sampled_from([True, True, True, False])) else noise
        getattr(self, self.draw(st.sampled_from(names)))()

    def _enabled(self) -> list[Callable[[], None]]:
        p = self.p
        acts: list[Callable[[], None]] = []
        if self.poll is not None:
            acts.append(self.act_answer_poll)
        if self.push is not None:
            acts.append(self.act_finish_push)
        if self.stream_gen is not None and not self.connected:
            acts.append(self.act_connect)
        if self.stream_gen is not None and self.connected and self.queue:
            acts.append(self.act_deliver)
        if self.tools is not None:
            acts.append(self.act_tools)
        if self.guard:
            acts.append(self.act_guard)
        if self.timer:
            acts.append(self.act_timer)
        if self.reconnect is not None:
            acts.append(self.act_reconnect)
        if self.stream_gen is not None:
            acts.append(self.act_drop)
        if p.streaming and self.machine_gen > 0:
            acts.append(self.act_stale)
        if p.streaming and self.stream_gen is not None and self.connected and self._redeliverable():
            acts.append(self.act_redeliver)
        acts.append(self.act_stale_answer)
        if p.live:
            acts.append(self.act_user_message)
            acts.append(self.act_send_event)
        return acts

    def _redeliverable(self) -> list[JSON]:
        return [raw for _, raw in self.delivered if isinstance(raw, dict) and isinstance(raw.get("id"), str)]

    def act_answer_poll(self) -> None:
        assert self.poll is not None
        how = self.draw(st.sampled_from(["batch", "live", "batch", "live", "fail", "live_fail"]))
        turn = self.draw_turn()
        if how in ("live", "live_fail"):  # E-4: events forwarded while the poll runs
            for raw in turn if how == "live" else turn[: self.draw(st.integers(0, len(turn)))]:
                self._step(LiveEvent(raw))
        self.poll = None
        if how in ("fail", "live_fail"):
            self._step(TurnFailed(TransportError(detail="poll failed", error_type="ReadTimeout")))
            return
        self.history.extend(turn)
        self.rr_turns.append(tuple(turn))
        live = how == "live" and bool(turn)
        self._step(TurnPolled(turn))
        delivered = [
            c.event
            for c in self.trace.outputs[-1]
            if isinstance(c, C.DeliverEvent)
            and not (isinstance(c.event, dict) and c.event.get("type") == TEXT_DELTA_TYPE)
        ]
        if delivered != ([] if live else list(turn)):  # E-5: live or batch, never both
            raise Violation(f"turn delivered {delivered} after {'live' if live else 'no live'} forwarding")

    def act_finish_push(self) -> None:
        assert self.push is not None
        push, self.push = self.push, None
        if push.purpose == "send_event" or self.push_ok:
            outcome: Result[None, SessionError] = (
                Success(None) if self.push_ok else Failure(ProviderError(detail="push refused"))
            )
        else:
            outcome = Failure(ProviderError(detail="push refused"))
        self._step(PushFinished(outcome))

    def act_connect(self) -> None:
        assert self.stream_gen is not None
        self.connected = True
        self._step(StreamConnected(self.stream_gen))

    def act_deliver(self) -> None:
        assert self.stream_gen is not None
        raw = self.queue.pop(0)
        self.delivered.append((self.stream_gen, raw))
        self._step(StreamEvent(self.stream_gen, raw))

    def act_redeliver(self) -> None:
        assert self.stream_gen is not None
        raw = self.draw(st.sampled_from(self._redeliverable()))
        self._step(StreamEvent(self.stream_gen, raw))

    def act_tools(self) -> None:
        assert self.tools is not None
        batch, self.tools = self.tools, None
        results = tuple(
            ToolResult(u.id, f"r:{u.id}:{batch.batch}:{n}", is_error=self.draw(st.booleans()))
            for n, u in enumerate(batch.uses)
        )
        self.answered = {batch.batch: results}
        self._step(ToolsFinished(batch.batch, results))

    def act_guard(self) -> None:
        self.guard = False
        verdict = self.draw(st.sampled_from(["continue"] * 8 + ["halt", "failed"]))
        if verdict == "halt":
            self._step(GuardVerdict("halt", reason={"spent": 1}))
        elif verdict == "failed":
            self._step(GuardVerdict("failed", error_type="ValueError", detail="guard blew up"))
        else:
            self._step(GuardVerdict("continue"))

    def act_timer(self) -> None:
        self.timer = False
        self._step(ReconnectTimerFired())

    def act_drop(self) -> None:
        assert self.stream_gen is not None
        gen, self.stream_gen = self.stream_gen, None
        self.connected = False
        if self.draw(st.booleans()):
            self._step(StreamFailed(gen, StreamDropped(detail="reset")))
        else:
            self._step(StreamClosed(gen))

    def act_reconnect(self) -> None:
        assert self.reconnect is not None
        rc, self.reconnect = self.reconnect, None
        if self.draw(st.sampled_from([False, False, True])):
            self._step(ReconnectFinished(Failure(TransportError(detail="list failed"))))
            return
        style = self.draw(st.sampled_from(self.p.reconnect_styles))
        replay: list[JSON] = []
        if style == "replay" or not self.p.streaming:
            replay, self.queue = ([*self.queue] if self.p.streaming else []), []
        if self.resuming and self.p.streaming and self.draw(st.booleans()):
            # a reattach may find an in-flight turn the client never saw (R-18 Better)
            tail = self.draw_turn()
            self.history.extend(tail)
            replay = [*replay, *tail]
            self.turn_in_flight = not (tail and self.codec.turn_boundary(tail[-1]))
        delivered_ids = {
            raw["id"] for _, raw in self.delivered if isinstance(raw, dict) and isinstance(raw.get("id"), str)
        }
        # every id the host knows the client has (what it delivered, replayed, or held before)
        seen = sorted(self.prior_ids | delivered_ids | self._replayed)
        # The host's own view: nothing is pending while it is still producing a turn (whose
        # events it replays or carries over); otherwise the unanswered calls of its history.
        busy = bool(self.queue) or self.turn_in_flight
        pending = () if busy else self.codec.pending_tool_uses(self.history)
        r = Reconnected(
            session_id="sess_1",
            pending=pending,
            seen=tuple(seen),
            replay=tuple(replay),
            idle=self._remote_idle(replay),
        )
        self.last_reconnected = r
        for e in replay:
            if isinstance(e, dict) and isinstance(e.get("id"), str):
                self._replayed.add(e["id"])
        if self.p.streaming:
            self.stream_gen = rc.gen
            self.connected = False
        self._step(ReconnectFinished(Success(r)))

    _replayed: set[str]

    def _remote_idle(self, replay: Sequence[JSON]) -> bool:
        """Idle means nothing will arrive unprompted: no undelivered events, no partial turn."""
        if not self.p.streaming:
            return True  # request/response hosts never send anything unprompted
        if self.queue or self.turn_in_flight:
            return False
        return not replay or self.codec.turn_boundary(replay[-1])

    def act_stale(self) -> None:
        gen = self.draw(st.integers(0, self.machine_gen - 1))
        kind = self.draw(st.sampled_from(["event", "connected", "closed", "failed"]))
        if kind == "event":
            raw = self.draw(
                st.sampled_from([*self._redeliverable(), {"type": "text", "text": "stale", "id": "stale"}])
            )
            self._step_ignored(StreamEvent(gen, raw))
        elif kind == "connected":
            self._step_ignored(StreamConnected(gen))
        elif kind == "closed":
            self._step_ignored(StreamClosed(gen))
        else:
            self._step_ignored(StreamFailed(gen, StreamDropped(detail="old stream")))

    def act_stale_answer(self) -> None:
        """Answers nobody is waiting for; the machine must ignore them."""
        options: list[Event] = []
        if self.tools is None:
            options.append(ToolsFinished(self.state_batch_guess() + 7, [ToolResult("t1", "late")]))
        if not self.guard:
            options.append(GuardVerdict("halt", reason="late"))
        if self.push is None:
            options.append(PushFinished(Failure(ProviderError(detail="late push"))))
        if not self.timer:
            options.append(ReconnectTimerFired())
        if self.reconnect is None:
            options.append(ReconnectFinished(Failure(TransportError(detail="late reconnect"))))
        if self.poll is None and not self.p.streaming and not self._awaiting_without_poll():
            options.append(TurnFailed(TransportError(detail="late poll")))
        if not options:
            return
        self._step_ignored(self.draw(st.sampled_from(options)))

    def state_batch_guess(self) -> int:
        return self.batches_seen

    def _awaiting_without_poll(self) -> bool:
        # A request/response request parked by a reconnect waits for a turn that no
        # poll will bring; a stray TurnFailed there is processed, not stale.
        return self.request_open

    def act_user_message(self) -> None:
        self._step(UserMessage(self.draw(st.sampled_from(["more", "again"]))))

    def act_send_event(self) -> None:
        self.next_request += 1
        self.sends[self.next_request] = 0
        self._step(SendEventRequested(self.next_request, {"type": "user.interrupt"}))

    # ── running ──

    def run(self) -> Trace:
        self._processed_ids = set()
        self._replayed = set()
        session_id = "sess_1" if self.p.resumed else "sess_new"
        if self.p.streaming and not self.p.resumed:
            self.stream_gen = 0
        self._step(Opened(session_id, resumed=self.p.resumed))
        for _ in range(self.max_steps):
            if self.finished and not self.p.live:
                break
            self.act()
        if self.finished and not self.p.live:
            # Whatever still arrives after a sync run's one result changes nothing (S-65):
            # late answers, and inputs that would start work in any other phase.
            gen = self.machine_gen
            late: list[Event] = [
                UserMessage("late"),
                SendEventRequested(99, {"type": "user.interrupt"}),
                StreamConnected(gen),
                StreamEvent(gen, {"type": "idle", "stop_reason": {"type": "end_turn"}, "id": "late"}),
                StreamFailed(gen, StreamDropped(detail="late")),
                TurnPolled([{"type": "idle", "stop_reason": {"type": "end_turn"}}]),
                ReconnectFinished(Success(Reconnected("sess_1", pending=(ToolUse("late", "lookup"),)))),
            ]
            for _ in range(self.draw(st.integers(0, 3))):
                if self.draw(st.booleans()):
                    self.act()
                else:
                    self._step(self.draw(st.sampled_from(late)))
        return self.trace


# ── whole-trace checks ─────────────────────────────────────────────────────────────────


def check_trace(trace: Trace) -> None:
    """Invariants 6 and 7 over a finished run."""
    cfg = trace.config
    # 6a: folding the recorded events from a fresh state reproduces everything.
    replayed = fold(cfg, trace.events)
    if replayed.commands != trace.commands:
        raise Violation("fold() produced different commands than the run")
    if replayed.results != trace.results:
        raise Violation("fold() produced different results than the run")
    # 6b: every event and command survives the JSON codec; `rma replay` of the log agrees.
    event_lines = []
    for ev in trace.events:
        text = dumps(ev)
        if loads(text) != ev:
            raise Violation(f"event does not round-trip through codec_json: {ev!r}")
        event_lines.append('{"kind":"event","event":' + text + "}")
    seen_kinds: Counter[type] = Counter()
    for c in trace.commands:
        seen_kinds[type(c)] += 1
        if seen_kinds[type(c)] > 4 and isinstance(c, C.Emit | C.DeliverEvent) and seen_kinds[type(c)] % 7:
            continue  # plenty of these; a sample is enough
        text = dumps(c)
        if dumps(loads(text)) != text:  # structural equality: see test_session_regressions
            raise Violation(f"command does not round-trip through codec_json: {c!r}")
    header = '{"kind":"header","format":1,"config":' + dumps(cfg) + "}"
    outcome = replay_lines([header, *event_lines], codec_for)
    if not isinstance(outcome, Success):
        raise Violation(f"replay_lines failed: {outcome!r}")
    from_log = outcome.unwrap()
    if from_log.results != trace.results or from_log.commands != trace.commands:
        raise Violation("replaying the JSONL log (rma replay) gave different commands or results")
    # 7: old states are never mutated: stepping any old state again (a fork, after newer
    # versions have appended to the shared stores) gives the same result, and every
    # state still looks exactly as it did when it was made.
    for i in reversed(range(len(trace.events))):
        again, out = step(trace.before[i], trace.events[i])
        if out != trace.outputs[i]:
            raise Violation(f"re-stepping state #{i} gave different commands")
        if again != trace.after[i] or snapshot(again) != trace.after_snap[i]:
            raise Violation(f"re-stepping state #{i} gave a different state")
    for i, s in enumerate(trace.after):
        if snapshot(s) != trace.after_snap[i]:
            raise Violation(f"state #{i} changed after later steps and forks")
