"""Fused turns (``SessionSpec.fused_turns``): a tool batch and the turn after it, one activity.

Without it a turn that asks for tools costs two regular activities — the batch's calls, then
the model turn their results resume — and so two server round trips. When the turn is certain
to follow (``rma.session.completing.turn_follows_tools``: no confirmations, no typed output,
no terminal tool; and here: no at-most-once tool, no call already recorded), the workflow
runs the batch as ``rma.fused`` instead, which also runs that turn, with the input the worker
computes by the machine's own function (``tools_answer``) from the facts it is given.

The machine stays the single decider: the workflow feeds the batch's results
(``ToolsFinished``) as for any batch; the machine then asks for its next turn, and only if
that turn's input has the digest of the one the activity sent does the workflow feed the
recorded outcome instead of running it (``_ran_ahead``). Otherwise — which the shared
function rules out unless the worker's code or settings differ from the workflow's — the
turn run ahead is dropped: asked again when the host kept nothing of it (Local, whose
conversation is the snapshot the workflow has not applied yet), else the request fails typed
(``ProviderError``, ``error_type="FusedTurnMismatch"``): a host that keeps its conversation
(AgentCore, Claude Managed Agents) already holds a turn the machine did not ask for.

A call that turns out to need approval inside the activity comes back unanswered; the batch
then goes on as any batch does (``_run_tools``): the calls that ran answer from their recorded
results, the others wait for ``approve``, and the next turn is an activity of its own.
docs/temporal.md ("Fused turns") says what it costs in recovery.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from returns.result import Failure, Success

    from rma.codec_json import decode_result, from_jsonable, to_jsonable
    from rma.errors import ProviderError
    from rma.provider import Input, Mode
    from rma.session import commands as cmd
    from rma.session.completing import turn_follows_tools
    from rma.session.events import Event, PushFinished, ToolsFinished, TurnFailed, TurnPolled
    from rma.vocabulary import JSON, ToolResult, ToolUse
    from rma_shell.temporal.sides import WorkflowSides

if TYPE_CHECKING:
    pass

MISMATCH = "FusedTurnMismatch"
"""The ``error_type`` of the failure that ends a request whose turn, run ahead on a host that
keeps its conversation, is not the turn the machine asked for."""


def input_digest(value: JSON) -> str:
    """A digest of a turn's input as JSON (``to_jsonable``): what the workflow compares."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def lost(what: str, exc: BaseException) -> ProviderError:
    """What an activity whose every attempt's worker was lost ends in."""
    cause = exc.cause if isinstance(exc, ActivityError) and exc.cause is not None else exc
    return ProviderError(detail=f"{what}: {cause}"[:2000], error_type=type(cause).__name__)


def lost_call(use: ToolUse, exc: BaseException) -> ToolResult:
    """A call whose workers were all lost: an error result, as a lost ``rma.tool`` gives."""
    return ToolResult(use.id, f"tool error: {lost(f'{use.name} could not complete', exc).detail}", True)


def awaiting_entry(use: ToolUse, *, host_confirmation: bool) -> dict[str, Any]:
    """A call's entry in ``status()["awaiting_approval"]``."""
    name, given = use.name, dict(use.input)
    return {"tool_use_id": use.id, "name": name, "input": given, "host_confirmation": host_confirmation}


class FusedTurns(WorkflowSides):
    """The workflow's side of fused turns, mixed into ``SessionWorkflow``."""

    _ahead: dict[str, Any] | None = None
    """The turn ``rma.fused`` ran after batch ``batch``: its digest and recorded outcome, until
    the machine asks for its next turn (``_ran_ahead``) once that batch's results are fed."""

    def _fuses(self, c: cmd.RunTools) -> bool:
        """Whether batch ``c`` and the turn after it run as one ``rma.fused`` activity."""
        s = self._state
        return (
            self._spec.fused_turns
            and s is not None
            and turn_follows_tools(s)
            and not c.confirmations
            and all(
                u.name not in self._at_most_once and (u.id is None or u.id not in self._recorded)
                for u in c.uses
            )
        )

    async def _fused(self, batch: int, uses: tuple[ToolUse, ...], answer_uses: tuple[ToolUse, ...]) -> None:
        record: dict[str, Any] = {"uses": uses, "confirmations": (), "verdicts": []}
        self._batches[batch] = record
        t = self._timeouts
        fields = {
            "uses": to_jsonable(list(uses)),
            "answer_uses": to_jsonable(list(answer_uses)),
            "after": self._last_boundary,
            "after_at": self._last_boundary_at,
            "fresh": self._fresh,
        }
        try:
            # Its calls' limit and the turn's: one attempt may do both.
            out = await self._activity("rma.fused", fields, t.tool + t.turn, attempts=t.tool_attempts)
        except ActivityError as exc:  # every attempt's worker lost: the calls answer errors, as alone
            out = {"results": to_jsonable([lost_call(u, exc) for u in uses])}
        results: list[ToolResult | None] = list(from_jsonable(out["results"]))
        for use, result in zip(uses, results, strict=True):
            if result is not None and use.id is not None:
                self._recorded[use.id] = result
        del self._batches[batch]
        if any(r is None for r in results):
            # Some call waits for a person: the batch goes on as any batch (the calls that ran
            # answer from their recorded results), and the next turn is an activity of its own.
            for use, result in zip(uses, results, strict=True):
                if result is None and use.id is not None:
                    self._awaiting[use.id] = awaiting_entry(use, host_confirmation=False)
            await self._run_tools(batch, uses, ())
            return
        if out.get("turn") is not None:
            self._ahead = {
                "batch": batch,
                "digest": out["digest"],
                "turn": out["turn"],
                "rerun_safe": bool(out.get("rerun_safe")),
            }
        self._post(ToolsFinished(batch, tuple(r for r in results if r is not None), ()))

    def _ran_ahead(self, input: Input) -> bool:
        """Whether the machine's next turn (``input``) was run ahead by ``rma.fused``: then its
        recorded outcome is fed (True). False: run it as usual."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return False
        s = self._state
        assert s is not None
        streaming = s.config.codec.mode is Mode.STREAMING
        turn = ahead["turn"]
        if input_digest(to_jsonable(input)) == ahead["digest"]:
            self._take_snap(turn)
            if streaming:
                self._post(PushFinished(decode_result(turn["push"])))
                self._stream_read(self._gen, from_jsonable(turn["events"]), turn["end"])
            else:
                result = decode_result(turn["result"])
                if isinstance(result, Success):
                    self._post(TurnPolled(tuple(result.unwrap())))
                else:
                    self._post(TurnFailed(result.failure()))
            return True
        if ahead["rerun_safe"]:  # the host kept nothing of it: ask the turn the machine asked for
            workflow.logger.warning(
                "the turn run ahead of batch %s was not the next turn: asked again", ahead["batch"]
            )
            return False
        error = ProviderError(
            detail=f"the turn run with tool batch {ahead['batch']} is not the turn the session asked for;"
            " the host already holds it (do the workers run the same code and settings as the workflow?)",
            error_type=MISMATCH,
        )
        self._post(PushFinished(Failure(error)) if streaming else TurnFailed(error))
        return True

    def _drop_ahead(self, ev: Event) -> None:
        """After batch results are fed: a turn run ahead that the machine did not ask for."""
        if isinstance(ev, ToolsFinished) and self._ahead is not None and self._ahead["batch"] == ev.batch:
            workflow.logger.warning("the turn run ahead of batch %s was not asked for: dropped", ev.batch)
            self._ahead = None
