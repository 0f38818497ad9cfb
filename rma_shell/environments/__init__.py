"""Self-hosted Claude environments: the worker that serves sessions' tools on this machine."""

from rma_shell.environments.worker import Ending, Worker, WorkerEvent

__all__ = ["Ending", "Worker", "WorkerEvent"]
