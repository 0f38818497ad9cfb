"""Starting and talking to session workflows: ``start_session``, ``run_session``, ``SessionHandle``.

What a caller does with a session that runs on the workers: start it (the workflow id is the
session's durable name and its idempotency-key scope), wait for its result, send a live
session follow-ups, approve or deny a tool call that waits for a person, ask where it is, end
it. Results come back as rma's own values (``Result[SessionResult, SessionError]``), decoded
from the workflow's JSON; nothing here runs a session itself.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from returns.result import Failure, Result
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError

from rma.codec_json import decode_result
from rma.errors import Closed, Crashed, InvalidOpts, SessionError
from rma.session.endings import tupled_transcript
from rma.vocabulary import SessionResult
from rma_shell.temporal.carry import unpack_result
from rma_shell.temporal.spec import SessionSpec, spec_problem
from rma_shell.temporal.workflow import WORKFLOW_NAME

Outcome = Result[SessionResult, SessionError]


def _decoded(value: Any) -> Outcome:
    """An encoded result as rma's value (JSON keeps no tuples: the transcript gets its own back)."""
    decoded: Outcome = decode_result(unpack_result(value))
    return tupled_transcript(decoded)


class SessionHandle:
    """One session workflow, started or found by id."""

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.handle = handle

    @property
    def id(self) -> str:
        """The workflow id: the session's durable name (and its idempotency-key scope)."""
        return self.handle.id

    async def result(self) -> Outcome:
        """The session's result (a live session's last one, once it is closed)."""
        try:
            out = await self.handle.result()
        except WorkflowFailureError as exc:
            if isinstance(exc.cause, CancelledError):
                return Failure(Closed())  # cancelled: what a closed live session reports
            return Failure(Crashed(error_type="WorkflowFailed", detail=str(exc.cause or exc)[:2000]))
        return _decoded(out["result"])

    async def results(self) -> list[Outcome]:
        """Every request's result so far (a query: the workflow keeps running)."""
        return [_decoded(r) for r in await self.handle.query("results")]

    async def status(self) -> dict[str, Any]:
        """``phase``, ``turns``, ``session_id``, ``results`` (a count) and ``awaiting_approval``
        (the calls waiting for ``approve``: ``tool_use_id``, ``name``, ``input``)."""
        status: dict[str, Any] = await self.handle.query("status")
        return status

    async def message(self, text: str) -> Outcome:
        """Send a live session a follow-up; returns that request's result."""
        return _decoded(await self._update("message", [text], "text"))

    async def approve(
        self, tool_use_id: str, verdict: Literal["allow", "deny"], reason: str | None = None
    ) -> None:
        """Run (``"allow"``) or refuse (``"deny"``, the model reads ``reason``) a waiting call."""
        await self._update("approve", [tool_use_id, verdict, reason], "tool_use_id")

    async def _update(self, name: str, args: list[Any], option: str) -> Any:
        """An update; one its validator refused raises ``InvalidOpts`` saying why."""
        try:
            return await self.handle.execute_update(name, args=args)
        except WorkflowUpdateFailedError as exc:
            raise InvalidOpts(option, str(exc.cause or exc)) from None

    async def close(self) -> None:
        """End a live session; ``result()`` then returns its last result."""
        await self.handle.signal("close")

    async def cancel(self) -> None:
        """Cancel the workflow: its activities are cancelled, the host asked to stop (best effort)."""
        await self.handle.cancel()


async def start_session(
    client: Client,
    spec: SessionSpec,
    *,
    task_queue: str,
    id: str | None = None,
    **start_options: Any,
) -> SessionHandle:
    """Start ``spec`` as a workflow on ``task_queue``; ``id`` defaults to a fresh ``rma-…``.

    Starting twice with one ``id`` while the first runs is refused by Temporal
    (``WorkflowAlreadyStartedError``), so an id makes the start itself idempotent.
    ``SessionError`` (``InvalidOpts``) is raised at once for a spec that is not JSON; the
    options' meaning is checked by the worker, as ``run()`` checks it, and comes back as the
    result's ``Failure``.
    """
    problem = spec_problem(spec)
    if problem is not None:
        raise problem
    start_options.setdefault("id_reuse_policy", WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY)
    handle = await client.start_workflow(
        WORKFLOW_NAME,
        spec.to_json(),
        id=id or f"rma-{uuid.uuid4().hex}",
        task_queue=task_queue,
        **start_options,
    )
    return SessionHandle(handle)


def session_handle(client: Client, id: str) -> SessionHandle:
    """The session workflow ``id`` (started earlier, by this process or another)."""
    return SessionHandle(client.get_workflow_handle(id))


async def run_session(
    client: Client, spec: SessionSpec, *, task_queue: str, id: str | None = None, **start_options: Any
) -> Outcome:
    """``start_session`` then its ``result()``: ``run()``'s contract, durably."""
    handle = await start_session(client, spec, task_queue=task_queue, id=id, **start_options)
    return await handle.result()
