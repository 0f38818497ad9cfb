"""A completed turn and what it leads to: the guard, the terminal tool, tool batches (S-29…S-56).

``handle_turn`` normalizes a turn and accumulates it; then the turn guard is asked (GUARD),
or the turn decides: tool uses run (TOOLS) and their results resume the host, the terminal
tool is re-prompted for, or the request ends. Handlers of the machine's table here:
``on_guard`` and ``on_tools_finished``. Not how a turn is driven (``rma.session.driving``).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from rma._persistent import AppendLog
from rma.content import fit_parts, text_of
from rma.errors import (
    WINDOW_EXCEEDED_STOP,
    ContextWindowExceeded,
    GuardFailed,
    Halted,
    MalformedResponse,
    MaxTurnsExceeded,
    OutputInvalid,
    ToolContentUnsupported,
    UnresolvedRequiresAction,
)
from rma.live import NO_LIVE_TURN, ToolCallFinished, TurnFinished
from rma.provider import Input
from rma.session.commands import CallGuard, Command, DeliverUpdate, Log, RunTools
from rma.session.driving import drive
from rma.session.endings import fail, finish, terminated
from rma.session.events import GuardVerdict, ToolsFinished
from rma.session.options import SessionConfig
from rma.session.state import Phase, State, Step, evolve
from rma.session.telemetry import tool_uses, turn_stop
from rma.vocabulary import JSON, Terminal, ToolResult, ToolUse, TurnResult

REPROMPT_TEMPLATE = (
    "You returned a response without calling {tool}. You MUST call {tool} now to finish — "
    "produce the result via {tool}."
)
"""The terminal-tool re-prompt, verbatim (A.1)."""

NO_TERMINAL_TOOL = "no_terminal_tool"


def handle_turn(s: State, events: tuple[JSON, ...]) -> Step:
    """S-29, S-31: normalize and accumulate the turn; ask the guard, or go on."""
    try:
        tr = s.config.codec.normalize(events)
    except Exception as exc:  # a codec must be total; if it is not, fail typed, never escape
        return fail(s, MalformedResponse(detail=f"could not normalize the turn: {type(exc).__name__}: {exc}"))
    s = evolve(
        s, acc=s.acc.add_turn(events, tr), turns=s.turns + 1, turn_events=AppendLog(), live=NO_LIVE_TURN
    )
    out: list[Command] = [*turn_stop(s, tr)]
    if s.updates:
        out.append(DeliverUpdate(TurnFinished(s.turns, tr.terminal, tr.stop_reason, tr.usage)))
    out.extend(tool_uses(s, tr.custom_tool_uses))
    if s.config.has_turn_guard:
        # The raw per-turn entries too, as SessionResult.usage has them: a spending guard may
        # need what the provider reported beyond the four counts (a cost, a cache breakdown).
        payload = {"usage": s.acc.total_usage(), "turns": s.turns, "session_id": s.session_id}
        s = evolve(s, phase=Phase.GUARD, pending_turn=tr)
        out.append(CallGuard(payload))
        return s, tuple(out)
    s, more = continue_turn(s, tr)
    out.extend(more)
    return s, tuple(out)


def on_guard(s: State, verdict: GuardVerdict) -> Step:
    tr = s.pending_turn
    assert tr is not None
    s = evolve(s, pending_turn=None)
    if verdict.verdict == "continue":
        return continue_turn(s, tr)
    if verdict.verdict == "halt":
        result = terminated(s, tr, "halted")
        return fail(s, Halted(reason=verdict.reason, result=result))
    result = terminated(s, tr, "guard_failed")
    return fail(s, GuardFailed(error_type=verdict.error_type, detail=verdict.detail, result=result))


def exceeds_max_turns(s: State) -> bool:
    """S-35 Better: refuse to drive turn max_turns + 1 rather than bill it and then fail."""
    return s.turns >= s.config.max_turns


def max_turns_error(s: State, tr: TurnResult) -> Step:
    result = terminated(s, tr, "max_turns_exceeded")
    return fail(s, MaxTurnsExceeded(max_turns=s.config.max_turns, result=result))


def continue_turn(s: State, tr: TurnResult) -> Step:
    cfg = s.config
    if tr.terminal is Terminal.REQUIRES_ACTION:
        return requires_action(s, tr)
    if tr.terminal is Terminal.TERMINATED and tr.stop_reason == WINDOW_EXCEEDED_STOP:
        # The host stopped because the window is full: one typed error on every host.
        result = terminated(s, tr, WINDOW_EXCEEDED_STOP)
        return fail(s, ContextWindowExceeded(host=cfg.codec.name, detail="the host stopped", result=result))
    if (
        tr.terminal is Terminal.END_TURN
        and cfg.terminal_tool is not None
        and not _called(s, cfg.terminal_tool)
    ):
        if s.reprompts_left > 0:  # S-44
            if exceeds_max_turns(s):
                return max_turns_error(s, tr)
            s = evolve(s, reprompts_left=s.reprompts_left - 1)
            text = REPROMPT_TEMPLATE.format(tool=cfg.terminal_tool)
            return drive(s, cfg.codec.user_input(text), "reprompt", {"input": text})
        if cfg.output_tool:  # a typed answer was asked for: ending without one is a failure
            detail = f"the model ended without a valid {cfg.terminal_tool} call"
            return fail(s, OutputInvalid(tool=cfg.terminal_tool, detail=detail))
        return finish(s, tr, stop_reason=NO_TERMINAL_TOOL, reason=NO_TERMINAL_TOOL)  # S-45
    return finish(s, tr)


def _called(s: State, tool: str) -> bool:
    if s.config.output_tool:  # a typed answer: only one that validated counts
        return s.terminal_answered
    # A call whose input was rejected did not call the tool: it never ran.
    return any(u.name == tool and u.input_error is None for u in s.acc.custom_tool_uses)


def requires_action(s: State, tr: TurnResult) -> Step:
    """The host waits for tool results: run the turn's uses, or recover them (S-52)."""
    out: list[Command] = []
    codec = s.config.codec
    uses = tr.custom_tool_uses
    try:
        # Host-run calls waiting for a confirmation go to the handler too, never a hang (§8.4).
        confirms = codec.confirmation_uses(tr.events)
        recovered: tuple[ToolUse, ...] = ()
        if not uses and not confirms:
            # S-52: the batch resolved to nothing; recover from the request's own history.
            history = s.acc.events.to_tuple()
            recovered = codec.pending_tool_uses(history)
            confirms = codec.confirmation_uses(history)
    except Exception as exc:  # a codec must be total; if it is not, fail typed, never escape
        error = MalformedResponse(detail=f"could not read the pending tool uses: {type(exc).__name__}: {exc}")
        return fail(s, error)
    if not uses and recovered:
        out.extend(tool_uses(s, recovered))
        s = evolve(s, acc=s.acc.add_new_tool_uses(recovered))
        uses = recovered
    if not uses and not confirms:
        if codec.empty_resume_safe:
            # S-56 Better: the provider already answered everything; a bare resume is valid.
            if exceeds_max_turns(s):
                return max_turns_error(s, tr)
            s, more = drive(s, codec.resume_input((), ()), "resume")
            return s, (*out, *more)
        # S-53: never send an empty resume.
        result = terminated(s, tr, "unresolved_requires_action")
        s, more = fail(s, UnresolvedRequiresAction(stop_reason=tr.stop_reason, result=result))
        return s, (*out, *more)
    if exceeds_max_turns(s):
        # The resume would be turn max_turns + 1: do not run tools whose results go nowhere.
        s, more = max_turns_error(s, tr)
        return s, (*out, *more)
    return run_tools(s, uses, out, confirms)


def run_tools(
    s: State, uses: Sequence[ToolUse], out: list[Command], confirms: Sequence[ToolUse] = ()
) -> Step:
    """Hand batch ``s.batch + 1`` to the handler (TOOLS), after the commands in ``out``."""
    uses, confirms = tuple(uses), tuple(confirms)
    s = evolve(s, phase=Phase.TOOLS, batch=s.batch + 1, pending_uses=uses, pending_confirmations=confirms)
    # Input the model did not send as an object never reaches a tool (issue #12): the handler
    # runs the others; each rejected one is answered with its input_error (answer_tools).
    runnable = tuple(u for u in uses if u.input_error is None)
    if len(runnable) != len(uses):
        rejected = [{"tool": u.name, "tool_use_id": u.id} for u in uses if u.input_error is not None]
        out.append(Log("warning", "tool input rejected: not a usable object", {"rejected": rejected}))
    if not runnable and not confirms:
        s, more = answer_tools(s, (), ())  # nothing for the handler: answer at once
        return s, (*out, *more)
    out.append(RunTools(s.batch, runnable, confirms))
    return s, tuple(out)


def on_tools_finished(s: State, ev: ToolsFinished) -> Step:
    return answer_tools(s, ev.results, ev.verdicts)


def answer_tools(s: State, results: Sequence[ToolResult], verdicts: Sequence[ToolResult]) -> Step:
    """Resume with the batch's results, the rejected inputs' answers in their place."""
    uses = s.pending_uses
    answer = tools_answer(s.config, uses, s.pending_confirmations, results, verdicts)
    if isinstance(answer, ToolContentUnsupported):
        return fail(s, answer)
    results = answer.results
    if s.config.output_tool and s.config.terminal_tool is not None:
        checked = _check_output_answers(s, uses, results)
        if isinstance(checked, tuple):
            return checked
        s = checked
    content: dict[str, JSON] = {"tool_results": _results_content(results)}
    finished: list[Command] = []
    if s.updates:
        by_id = {r.tool_use_id: r for r in results}
        for use in uses:
            result = by_id.get(use.id)
            if result is not None:
                ran = use.input if use.input_error is None else None
                finished.append(
                    DeliverUpdate(
                        ToolCallFinished(use.id, use.name, result.is_error, input=ran, output=result.text)
                    )
                )
    s, more = drive(s, answer.input, "resume", content, pending_uses=(), pending_confirmations=())
    return s, (*finished, *more)


@attrs.frozen
class ToolsAnswer:
    """What a finished batch sends the host: the resume ``input`` and the ``results`` it carries
    (every use's, in tool-use order, rich content fitted to the host)."""

    input: Input
    results: tuple[ToolResult, ...]


def tools_answer(
    config: SessionConfig,
    uses: Sequence[ToolUse],
    confirms: Sequence[ToolUse],
    results: Sequence[ToolResult],
    verdicts: Sequence[ToolResult],
) -> ToolsAnswer | ToolContentUnsupported:
    """The input that resumes the host after batch ``uses`` (``State.pending_uses``: the rejected
    ones too) answered ``results`` (of the uses that ran, in order) and ``verdicts`` — or the
    error that ends the request instead. ``answer_tools`` sends it; a Temporal worker that runs
    a batch and the turn after it in one activity (``SessionSpec.fused_turns``) computes it with
    this same function, from these same facts, and the workflow checks the two agree."""
    merged = _with_rejections(uses, results)
    fitted = _fit_content(config, merged)
    if isinstance(fitted, ToolContentUnsupported):
        return fitted
    return ToolsAnswer(config.codec.answer_input(uses, fitted, confirms, verdicts), tuple(fitted))


def turn_follows_tools(s: State) -> bool:
    """Whether, once the batch ``s`` is running (TOOLS) has its results, the machine is certain
    to drive the next turn with ``tools_answer``'s input and nothing else decides in between —
    what lets a shell run that turn together with the batch. Not so when the host asked for
    confirmations (a person may decide them), when the answers are a typed output the machine
    checks (``output_type``: a wrong answer re-prompts or fails), or when the batch calls the
    terminal tool (the request is about to end: nothing is won by running ahead). ``max_turns``
    needs no check: the machine runs no batch whose resume would exceed it."""
    cfg = s.config
    return (
        s.phase is Phase.TOOLS
        and not s.pending_confirmations
        and not cfg.output_tool
        and (cfg.terminal_tool is None or all(u.name != cfg.terminal_tool for u in s.pending_uses))
    )


def _fit_content(
    config: SessionConfig, results: Sequence[ToolResult]
) -> Sequence[ToolResult] | ToolContentUnsupported:
    """Rich results as the host takes them (``rma.content.fit_parts``): an item over the host's
    byte limit replaced by a note; a kind the host cannot take ends the request, typed."""
    if all(not r.content for r in results):
        return results
    limits = config.codec.content_limits
    out: list[ToolResult] = []
    for result in results:
        if not result.content:
            out.append(result)
            continue
        parts = fit_parts(limits, result.content)
        if isinstance(parts, str):
            return ToolContentUnsupported(
                provider=config.codec.name, content=parts, tool_use_id=result.tool_use_id
            )
        out.append(
            result if parts == result.content else attrs.evolve(result, content=parts, text=text_of(parts))
        )
    return tuple(out)


def _results_content(results: Sequence[ToolResult]) -> list[JSON]:
    return [{"id": r.tool_use_id, "text": r.text, "is_error": r.is_error} for r in results]


def _check_output_answers(s: State, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> State | Step:
    """Typed output (``output_type``): an answer that validated satisfies the terminal tool; one
    that did not goes back to the model as its error result and uses a re-prompt — past
    ``max_reprompts`` the request fails with ``OutputInvalid`` (its partial result kept)."""
    tool = s.config.terminal_tool
    by_id = {r.tool_use_id: r for r in results}
    for use in uses:
        if use.name != tool:
            continue
        result = by_id.get(use.id)
        if result is None:
            continue
        if not result.is_error:
            s = evolve(s, terminal_answered=True)
        elif not s.terminal_answered:
            if s.reprompts_left <= 0:
                return fail(s, OutputInvalid(tool=str(tool), detail=result.text[:4000]))
            s = evolve(s, reprompts_left=s.reprompts_left - 1)
    return s


def _with_rejections(uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> Sequence[ToolResult]:
    """``results`` (of the uses that ran, in order) with an ``is_error`` result for each rejected
    use at its place, so every use has its answer in tool-use order (T-1)."""
    if all(use.input_error is None for use in uses):
        return results  # the usual batch: every use ran
    ran = iter(results)
    merged: list[ToolResult] = []
    for use in uses:
        if use.input_error is not None:
            merged.append(ToolResult(use.id, use.input_error, True))
        else:
            result = next(ran, None)
            if result is not None:
                merged.append(result)
    return tuple(merged)
