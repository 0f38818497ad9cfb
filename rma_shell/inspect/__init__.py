"""``rma inspect``: see and steer sessions in a browser — a local page over a journal or a recording.

::

    rma inspect sessions.db            # http://127.0.0.1:8321/, loopback only

    from rma_shell.inspect import app, serve
    asgi = app("sessions.db")          # mount it in a Starlette or FastAPI app
    serve("sessions.db", port=0)       # or serve it (uvicorn) until Ctrl-C

The page lists a journal's sessions with their state (running, ended, failed, waiting for
approval) and shows one session's timeline: turns, model text, tool calls with their input and
result, token usage per turn, durations and errors — secrets masked as the logs mask them. It
follows a running session live. A pending approval has Allow and Deny buttons that record the
decision as ``rma_shell.approve`` does; a recording opens read-only. Needs the ``inspect``
extra (Starlette, uvicorn). See docs/inspect.md.

What this is not: a hosted dashboard, an exporter, or a way to run sessions — the page reads
and decides; whoever owns the session resumes it (``on_decision`` is the hook for that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rma_shell.inspect.reading import SourceError
    from rma_shell.inspect.server import app, serve

__all__ = ["SourceError", "app", "serve"]


def __getattr__(name: str) -> Any:
    # Starlette is an optional extra: importing the package must not need it, using it does.
    if name in ("app", "serve"):
        from rma_shell.inspect import server

        return getattr(server, name)
    if name == "SourceError":
        from rma_shell.inspect.reading import SourceError

        return SourceError
    raise AttributeError(name)
