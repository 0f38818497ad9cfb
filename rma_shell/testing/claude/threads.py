"""The Claude Managed Agents emulator's session threads: multi-agent sessions.

A script makes a sub-agent thread with ``thread_created`` and drives it with
``thread_status``, ``thread_message_sent`` / ``thread_message_received``, ``in_thread`` (an
event of the thread's own stream only) and ``custom_tool_use(…, session_thread_id=…)`` — the
sub-agent's custom tool call, stored in the thread and cross-posted to the primary stream
with ``session_thread_id`` (same id: the answer is routed by ``custom_tool_use_id``).
``session.thread_status_*`` events are cross-posted the same way. Routes:
``GET …/threads`` (the primary thread first), ``GET …/threads/{id}``,
``POST …/threads/{id}/archive``, ``GET …/threads/{id}/events`` and ``…/threads/{id}/stream``
(the primary thread's are the session's own). Not the session's events (``streams``).
"""

from __future__ import annotations

import copy
from typing import Any

from rma_shell.testing.claude.events import IN_THREAD_TYPE, ServerEvent
from rma_shell.testing.claude.state import _Session, _Subscriber, _Thread
from rma_shell.testing.claude.streams import _Events
from rma_shell.testing.claude.wire import _not_found, _Query, _Rejected

JSONDict = dict[str, Any]

_STATUS = {
    "session.thread_status_running": "running",
    "session.thread_status_idle": "idle",
    "session.thread_status_rescheduled": "rescheduling",
    "session.thread_status_terminated": "terminated",
}
_CROSS_POSTED = frozenset({"agent.custom_tool_use", *_STATUS})


class _Threads(_Events):
    """Session threads (handlers run under the emulator's lock)."""

    def _primary(self, session: _Session) -> _Thread:
        for thread in session.threads.values():
            if thread.data["parent_thread_id"] is None:
                return thread
        return self._new_thread(session, self._id("sthr"), None, None)

    def _new_thread(
        self, session: _Session, thread_id: str, agent_name: str | None, parent: str | None
    ) -> _Thread:
        agent = copy.deepcopy(session.data.get("agent") or {})
        if agent_name is not None:
            agent["name"] = agent_name
        stamp = self._now()
        thread = _Thread(
            {
                "type": "session_thread",
                "id": thread_id,
                "session_id": session.data["id"],
                "agent": agent,
                "parent_thread_id": parent,
                "status": "idle" if parent is None else "running",
                "created_at": stamp,
                "updated_at": stamp,
                "archived_at": None,
                "stats": None,
                "usage": None,
            }
        )
        session.threads[thread_id] = thread
        return thread

    def _session_thread(self, session: _Session, thread_id: str) -> _Thread:
        primary = self._primary(session)
        thread = session.threads.get(thread_id)
        if thread is None or (thread is primary and thread_id != primary.data["id"]):
            raise _not_found("Session thread", thread_id)
        return thread

    def _thread_subscribers(self, session: _Session, thread_id: str) -> list[_Subscriber]:
        thread = self._session_thread(session, thread_id)
        if thread.data["parent_thread_id"] is None:
            return session.subscribers
        return thread.subscribers

    # -- emitting: route thread events --

    def _emit(self, session: _Session, template: ServerEvent) -> JSONDict:
        if template.get("type") == IN_THREAD_TYPE:
            thread_id = template.get("session_thread_id")
            inner = template.get("event")
            if not isinstance(thread_id, str) or not isinstance(inner, dict):
                raise TypeError(f"in_thread needs a thread id and an event: {template!r}")
            return self._emit_in_thread(session, thread_id, inner)
        final = super()._emit(session, template)
        kind, thread_id = final.get("type"), final.get("session_thread_id")
        if not isinstance(thread_id, str):
            return final
        if kind == "session.thread_created":
            self._primary(session)
            if thread_id not in session.threads:
                parent = self._primary(session).data["id"]
                self._new_thread(session, thread_id, final.get("agent_name"), parent)
        elif kind in _CROSS_POSTED:
            own = {k: copy.deepcopy(v) for k, v in final.items() if k != "session_thread_id"}
            if kind != "agent.custom_tool_use":
                own["session_thread_id"] = thread_id  # a thread's status names it on its own stream too
            thread = session.threads.get(thread_id)
            if thread is not None:
                status = _STATUS.get(str(kind))
                if status is not None:
                    thread.data["status"] = status
                    thread.data["updated_at"] = final["processed_at"]
                self._store_in_thread(thread, own)
        return final

    def _emit_in_thread(self, session: _Session, thread_id: str, template: JSONDict) -> JSONDict:
        thread = session.threads.get(thread_id)
        if thread is None:
            raise ValueError(f"in_thread: no thread {thread_id!r} was created (thread_created first)")
        kind = template.get("type")
        if not isinstance(kind, str):
            raise TypeError(f"a scripted event needs a string 'type': {template!r}")
        event: JSONDict = {"type": kind, "id": template.get("id") or self._id("sevt")}
        event.update({k: copy.deepcopy(v) for k, v in template.items() if k not in ("type", "id")})
        event["processed_at"] = self._now()
        self._store_in_thread(thread, event)
        return event

    def _store_in_thread(self, thread: _Thread, event: JSONDict) -> None:
        thread.history.append((self._next(), event))
        for sub in thread.subscribers:
            sub.queue.put(event)
        self._changed.notify_all()

    # -- routes --

    def _route_threads(self, method: str, session: _Session, rest: list[str], q: _Query) -> Any:
        sid = session.data["id"]
        if not rest and method == "GET":
            self._primary(session)
            statuses = set(q.list("statuses"))
            items = [
                (i, copy.deepcopy(t.data))
                for i, t in enumerate(session.threads.values())
                if not statuses or t.data["status"] in statuses
            ]
            return self._page(
                items, q, kind=f"threads:{sid}", ascending=True, default_limit=1000, max_limit=1000
            )
        if rest:
            thread = self._session_thread(session, rest[0])
            if len(rest) == 1 and method == "GET":
                return copy.deepcopy(thread.data)
            if rest[1:] == ["archive"] and method == "POST":
                stamp = self._now()
                thread.data["archived_at"] = thread.data["archived_at"] or stamp
                thread.data["updated_at"] = stamp
                return copy.deepcopy(thread.data)
            if rest[1:] == ["events"] and method == "GET":
                if thread.data["parent_thread_id"] is None:
                    return self._list_events(session, q)
                return self._page(
                    thread.history, q, kind=f"thread-events:{rest[0]}", ascending=True, max_limit=1000
                )
        raise _Rejected(404, f"Not found: {method} /v1/sessions/{sid}/threads/{'/'.join(rest)}")
