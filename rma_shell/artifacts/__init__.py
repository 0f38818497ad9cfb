"""Artifacts: files a session's agent wrote, reachable from this process (list, fetch, put, delete)."""

from rma_shell.artifacts.session_storage import SessionStorage

__all__ = ["SessionStorage"]
