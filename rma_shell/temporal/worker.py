"""A worker that runs rma sessions: ``session_worker(client, task_queue=…, providers=…, handlers=…)``.

Start as many as the work needs, on as many machines, all on one task queue: Temporal hands
each workflow task and activity to whichever worker polls first, and a worker that dies is
simply not asked again — its in-flight activities time out on their heartbeat and run on
another. Each worker registers its own provider objects, handlers and turn guards under the
names a ``SessionSpec`` uses (the same names on every worker of the queue; credentials stay in
the worker, never in the workflow history). This module builds the ``temporalio`` worker and
nothing else: run it with ``async with worker:`` or ``await worker.run()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from rma_shell.providers.base import Provider
from rma_shell.temporal.activities import Activities, Registry
from rma_shell.temporal.workflow import SessionWorkflow

PASSED_THROUGH = ("rma", "rma_shell", "attrs", "returns", "anyio", "httpx", "trio", "sniffio")
"""Modules the workflow sandbox shares with the worker instead of re-importing per run: the
pure core (deterministic by construction) and what ``rma_shell``'s spec module imports."""


def session_worker(
    client: Client,
    *,
    task_queue: str,
    providers: Mapping[str, Provider[Any]],
    handlers: Mapping[str, object],
    turn_guards: Mapping[str, Callable[[Mapping[str, Any]], Any]] | None = None,
    contexts: Mapping[str, object] | None = None,
    max_concurrent_activities: int = 200,
    max_cached_workflows: int = 1000,
    sticky_queue_schedule_to_start_timeout: timedelta = timedelta(seconds=10),
    conn_cache_size: int = 4096,
    **worker_options: Any,
) -> Worker:
    """A ``temporalio.worker.Worker`` running ``rma.session`` workflows and their activities.

    ``providers``/``handlers``/``turn_guards``/``contexts`` map the names a ``SessionSpec`` uses
    to this worker's objects (a context is handed to tools as ``ctx``).
    ``sticky_queue_schedule_to_start_timeout`` is how long a workflow waits for the worker that
    last ran it before any worker may take it (lower it when workers come and go often). Other
    keyword arguments go to ``Worker`` as they are.
    """
    registry = Registry(
        providers=dict(providers),
        handlers=dict(handlers),
        turn_guards=dict(turn_guards or {}),
        contexts=dict(contexts or {}),
    )
    activities = Activities(registry, cache_size=conn_cache_size)
    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[SessionWorkflow],
        activities=activities.definitions(),
        workflow_runner=runner,
        max_concurrent_activities=max_concurrent_activities,
        max_cached_workflows=max_cached_workflows,
        sticky_queue_schedule_to_start_timeout=sticky_queue_schedule_to_start_timeout,
        **worker_options,
    )
