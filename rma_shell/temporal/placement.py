"""Where each of a session workflow's activities runs: a local activity or a regular one.

A *regular* activity goes through the server's task queue to any worker, heartbeats, and is
recorded as soon as it completes; a *local* one runs on the worker holding the workflow task
and is recorded with that task's completion (no queue round trip; docs/temporal.md,
"Local activities", says what each costs in recovery). ``SessionSpec.local_activities``
picks the set; this module only answers, per activity, which one — it runs nothing.
"""

from __future__ import annotations

from collections.abc import Collection

CHEAP = frozenset({"rma.open", "rma.transcript", "rma.guard", "rma.confirm"})
"""Local in every workflow started since issue #28: short and at least once anyway, so a
round trip through the server's queues buys them nothing."""

TURNS = frozenset({"rma.poll", "rma.exchange", "rma.push", "rma.resync"})
"""The model's turns (a model call; a streamed turn; a consolidation): local from
``local_activities="turns"`` on — the OpenAI Agents SDK's ``use_local_activity=True``."""

REMOTE_ALWAYS = frozenset({"rma.stop"})
"""Regular in every mode: the stop's bound (its schedule-to-close) must hold while the
workflow task that asked for it is gone."""


def runs_local(
    mode: object, name: str, tool: str | None, at_most_once: Collection[str], continuing: bool
) -> bool:
    """Whether activity ``name`` (``tool``: the tool a ``rma.tool`` calls) runs locally under
    ``local_activities=mode``. ``continuing``: the workflow was started since issue #28 (a
    history recorded before keeps its regular cheap steps). An at-most-once tool is never
    local: a retry on another worker starts at attempt 1 there, so it could not tell."""
    if name in REMOTE_ALWAYS or (name == "rma.tool" and tool in at_most_once):
        return False
    if mode is True:
        return True
    return (continuing and name in CHEAP) or (mode == "turns" and name in TURNS)
