"""Continuing as new: a long session's workflow hands its state to a fresh run of itself.

A Temporal history is bounded (50 K events, 50 MB by default; the server suggests continuing
as new well before). ``ContinuesAsNew`` is the workflow's side of it, mixed into
``SessionWorkflow``: at a moment nothing is in flight (``_may_continue``: no activity, timer,
report or update being handled, no approval given and not yet taken — only inputs not yet fed
and calls waiting for a person) it ends the run and starts the next with the same id, carrying
the session (``_continue_as_new``: the core's state, the inbox, the snapshot, the batches that
wait, the recorded results of the calls in flight); the next run takes it up in ``__init__``
(``_restore``: an approval may reach it before ``run`` starts) and sets the waiting batches
going again (``_resume``). Nothing is re-run and nothing re-decided: the next run feeds the
same events to the same state.

What this is not: the carry's encoding and size bounds (``rma_shell.temporal.carry``), or when
a session may continue (``SessionSpec.max_history_events`` / ``max_history_bytes``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from rma.codec_json import from_jsonable, to_jsonable
    from rma.provider import codec_for
    from rma.replay import load_config
    from rma_shell.temporal.carry import CARRY_KEY, decode_state, encode_state, pack
    from rma_shell.temporal.sides import WorkflowSides

if TYPE_CHECKING:
    pass

CONTINUE_AS_NEW_PATCH = "rma.continue-as-new"
"""The patch marking histories recorded by a workflow that may continue as new (issue #28):
one recorded before it replays with the same commands, never continuing."""

RECORDED_KEEP = 256
"""Recorded tool results a continued run keeps beyond those of the batches in flight: a
host replaying a recent call after a reconnect still finds its recorded result."""


class ContinuesAsNew(WorkflowSides):
    """The workflow's side of continue-as-new, mixed into ``SessionWorkflow``."""

    def _may_continue(self) -> bool:
        """Whether the history is long enough to continue as new, and this is a moment to:
        nothing in flight (no activity, timer or report, no update being handled, no approval
        given and not yet taken) — only inputs not yet fed and calls waiting for a person."""
        if not self._continuing or self._state is None or self._done() or not self._fed:
            return False
        if self._busy or self._reporting or self._approvals or not workflow.all_handlers_finished():
            return False
        info = workflow.info()
        spec = self._spec
        return (
            info.is_continue_as_new_suggested()
            or (
                spec.max_history_events is not None
                and info.get_current_history_length() >= spec.max_history_events
            )
            or (
                spec.max_history_bytes is not None
                and info.get_current_history_size() >= spec.max_history_bytes
            )
        )

    async def _continue_as_new(self, deadline: datetime | None) -> None:
        """End this run and start the next with the same id, carrying the session (``carry``)."""
        s = self._state
        assert s is not None
        in_flight = {u.id for b in self._batches.values() for u in b["uses"]}
        recorded = list(self._recorded.items())
        keep = {k: v for k, v in recorded if k in in_flight}
        keep.update(recorded[-RECORDED_KEEP:])
        last = self._results[-1:]
        carried = {
            "config": to_jsonable(s.config),
            "state": encode_state(s),
            "inbox": to_jsonable(self._inbox),
            "ahead": self._ahead,  # a fused turn not fed yet: the next run feeds it (fusing.py)
            "snap": self._snap,
            "snap_bytes": self._snap_bytes,
            "version": self._version,
            "gen": self._gen,
            "last_boundary": self._last_boundary,
            "last_boundary_at": self._last_boundary_at,
            "has_transcript": self._has_transcript,
            "fresh": self._fresh,
            "results": last,
            "first": self._first + len(self._results) - len(last),
            "expected": self._expected,
            "recorded": to_jsonable(keep),
            "awaiting": list(self._awaiting.values()),
            "confirmed": to_jsonable(self._confirmed),
            "batches": [
                {
                    "batch": n,
                    "uses": to_jsonable(list(b["uses"])),
                    "confirmations": to_jsonable(list(b["confirmations"])),
                    "verdicts": None if b["verdicts"] is None else to_jsonable(list(b["verdicts"])),
                }
                for n, b in self._batches.items()
            ],
            "deadline": None if deadline is None else deadline.timestamp(),
            "key": self._key,
            "at_most_once": sorted(self._at_most_once),
            "runs": int((self._carried or {}).get("runs", 1)) + 1,
        }
        await self._stop_tasks()  # only calls waiting for a person: the next run waits on
        workflow.continue_as_new(args=[{**self._spec_json, CARRY_KEY: pack(carried)}])

    def _restore(self, c: dict[str, Any]) -> None:
        """Take up what the previous run carried — in ``__init__``: an update (an approval)
        may reach this run before ``run`` starts, and its validator reads the waiting calls."""
        config = load_config({"config": c["config"]}, codec_for)
        self._state = decode_state(c["state"], config)
        self._inbox = list(from_jsonable(c["inbox"]))
        self._ahead = c.get("ahead")
        self._snap, self._version, self._gen = c["snap"], int(c["version"]), int(c["gen"])
        self._snap_bytes = int(c.get("snap_bytes") or 0)
        self._last_boundary, self._has_transcript = c["last_boundary"], bool(c["has_transcript"])
        self._last_boundary_at = c.get("last_boundary_at")  # absent in a hop carried before it
        self._fresh = bool(c.get("fresh"))
        self._results, self._first, self._expected = list(c["results"]), int(c["first"]), int(c["expected"])
        self._recorded = dict(from_jsonable(c["recorded"]))
        self._awaiting = {a["tool_use_id"]: a for a in c["awaiting"]}
        self._confirmed = dict(from_jsonable(c["confirmed"]))
        self._key = c["key"]
        self._at_most_once = frozenset(c.get("at_most_once") or ())

    def _resume(self, c: dict[str, Any]) -> datetime | None:
        """The tool batches the previous run left waiting wait on; the session's deadline."""
        for b in c["batches"]:
            verdicts = b["verdicts"]
            self._spawn(
                self._run_tools,
                int(b["batch"]),
                tuple(from_jsonable(b["uses"])),
                tuple(from_jsonable(b["confirmations"])),
                None if verdicts is None else list(from_jsonable(verdicts)),
                True,
            )
        at = c.get("deadline")
        return None if at is None else datetime.fromtimestamp(float(at), tz=UTC)
