"""The Claude Managed Agents emulator's data plane: session events in, scripted turns out.

``POST …/events`` (validation, echoes, which input starts a turn, interrupts), playing a
scripted turn (with the faults that hold back or drop events), emitting server events (ids,
timestamps, linkage, the session's status, usage and outcomes), ``GET …/events`` and the SSE
stream ``GET …/events/stream``. Not the resources' CRUD (``resources``) nor the HTTP
plumbing (``server``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.claude.events import (
    PAUSE_TYPE,
    PREVIEW_ONLY_TYPE,
    ServerEvent,
    SessionView,
    idle_end_turn,
    idle_requires_action,
    model_request_start,
    outcome_evaluation_start,
)
from rma_shell.testing.claude.faults import CMAFault
from rma_shell.testing.claude.state import (
    _DROP,
    _END,
    _GONE,
    _WAKE,
    _client_gone,
    _Core,
    _Session,
    _Subscriber,
)
from rma_shell.testing.claude.webhooks import event_for as webhook_event_for
from rma_shell.testing.claude.wire import (
    _ANSWERS,
    _INPUT_TYPES,
    _KICKOFFS,
    _add_usage,
    _answer_id,
    _blocks,
    _define_outcome,
    _in_range,
    _invalid,
    _is_requires_action,
    _is_terminal,
    _Query,
    _Rejected,
    _result_content,
)

JSONDict = dict[str, Any]


class _PreviewOnly:
    """A queued ``cut_message``: previewed, never sent whole."""

    def __init__(self, event: JSONDict) -> None:
        self.event = event


class _Events(_Core):
    """Session events: input, output and the live stream (handlers run under the lock unless
    they say otherwise)."""

    # -- events: input --

    def _post_events(self, session: _Session, body: JSONDict) -> JSONDict:
        events = body.get("events")
        if not isinstance(events, list) or not events:
            raise _invalid("events: must be a non-empty list of events")
        if session.data["status"] == "terminated":
            raise _invalid(f"Session {session.data['id']} is terminated and accepts no more events.")
        self._flush_deferred(session)
        self._validate_inputs(session, events, initial=False)
        return {"data": self._accept_inputs(session, events)}

    def _accept_inputs(self, session: _Session, events: list[JSONDict]) -> list[JSONDict]:
        """Echo validated inputs, then play what they trigger (all under the lock)."""
        interrupts = [i for i, e in enumerate(events) if e["type"] == "user.interrupt"]
        last_interrupt = interrupts[-1] if interrupts else -1
        kickoff = any(e["type"] in _KICKOFFS for e in events[last_interrupt + 1 :])
        answered = {_answer_id(e) for e in events if e["type"] in _ANSWERS}
        # An allowed confirmation on a self-hosted environment still waits for the tool result.
        converted = {
            e["tool_use_id"]
            for e in events
            if e["type"] == "user.tool_confirmation"
            and e["result"] == "allow"
            and session.self_hosted
            and session.tool_kinds.get(e["tool_use_id"]) == "agent.tool_use"
        }
        still_pending = (set(session.pending) - answered) | converted
        turn_due = kickoff or (bool(answered) and not still_pending and not interrupts)
        if turn_due and session.turn_index >= len(session.script):
            raise _Rejected(
                400,
                f"cma emulator: no scripted turn left for session {session.data['id']} "
                f"(turn #{session.turn_index + 1})",
                "emulator_script_exhausted",
            )
        echoes = [self._echo(session, e) for e in events]
        if interrupts:
            # The agent pauses (wire §8.2): a turn still at work stops, what it had left is
            # dropped, and the session goes idle — at once, or after ``slow_interrupt``'s wind-down.
            session.paused = []
            session.paused_token += 1
            slow = self._take("slow_interrupt", session.data["id"])
            if slow is not None and slow.delay:
                self._pause(session, slow.delay, [idle_end_turn()])
            else:
                self._emit(session, idle_end_turn())
        if turn_due:
            self._play_turn(session, echoes)
        elif answered and session.pending and session.awaiting_action:
            self._emit(session, idle_requires_action())
        return echoes

    def _validate_inputs(self, session: _Session, events: list[Any], *, initial: bool) -> None:
        answering: set[str] = set()
        for i, event in enumerate(events):
            where = f"events[{i}]"
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise _invalid(f"{where}: expected an event object with a string 'type'")
            kind = event["type"]
            if kind not in _INPUT_TYPES:
                raise _invalid(f"{where}.type: unknown input event type {kind!r}")
            if initial and kind not in _KICKOFFS:
                raise _invalid(
                    f"initial_events[{i}].type: only user.message and user.define_outcome are allowed"
                )
            if kind == "user.message":
                _blocks(event.get("content"), f"{where}.content", {"text", "image", "document", "redacted"})
            elif kind == "system.message":
                if i != len(events) - 1:
                    raise _invalid(f"{where}: a system.message must be the last event of the request")
                if i == 0 or events[i - 1].get("type") not in (
                    "user.message",
                    "user.tool_result",
                    "user.custom_tool_result",
                ):
                    raise _invalid(
                        f"{where}: a system.message must directly follow a user message or tool result"
                    )
                _blocks(event.get("content"), f"{where}.content", {"text"})
            elif kind == "user.custom_tool_result":
                ident = self._answerable(session, event, "custom_tool_use_id", where, answering)
                if session.tool_kinds.get(ident) != "agent.custom_tool_use":
                    raise _invalid(
                        f"{where}.custom_tool_use_id: {ident!r} is not an agent.custom_tool_use event"
                    )
                _result_content(event, where)
            elif kind == "user.tool_result":
                if not session.self_hosted:
                    raise _invalid(f"{where}: user.tool_result is only accepted in self_hosted environments")
                ident = self._answerable(session, event, "tool_use_id", where, answering)
                if session.tool_kinds.get(ident) != "agent.tool_use":
                    raise _invalid(f"{where}.tool_use_id: {ident!r} is not an agent.tool_use event")
                _result_content(event, where)
            elif kind == "user.tool_confirmation":
                ident = self._answerable(session, event, "tool_use_id", where, answering)
                if session.pending.get(ident) != "confirm":
                    raise _invalid(f"{where}.tool_use_id: {ident!r} is not awaiting a confirmation")
                result = event.get("result")
                if result not in ("allow", "deny"):
                    raise _invalid(f"{where}.result: must be 'allow' or 'deny'")
                if event.get("deny_message") is not None and result != "deny":
                    raise _invalid(f"{where}.deny_message: only allowed with result 'deny'")
            elif kind == "user.define_outcome":
                _define_outcome(event, where, self._files)
            elif kind == "user.interrupt" and not isinstance(event.get("session_thread_id", ""), str | None):
                raise _invalid(f"{where}.session_thread_id: expected a string")

    def _answerable(
        self, session: _Session, event: JSONDict, key: str, where: str, answering: set[str]
    ) -> str:
        ident = event.get(key)
        if not isinstance(ident, str) or not ident:
            raise _invalid(f"{where}.{key}: Field required")
        if ident not in session.tool_kinds:
            raise _invalid(f"{where}.{key}: no tool use event {ident!r} in this session")
        if ident in session.answered or ident in answering or ident not in session.pending:
            raise _invalid(f"{where}.{key}: tool use {ident!r} was already answered")
        answering.add(ident)
        return ident

    def _echo(self, session: _Session, event: JSONDict) -> JSONDict:
        kind = event["type"]
        echo: JSONDict = {"type": kind, "id": self._id("sevt")}
        echo.update({k: copy.deepcopy(v) for k, v in event.items() if k not in ("type", "id")})
        if kind == "user.define_outcome":
            outcome_id = self._id("outc")
            echo["outcome_id"] = outcome_id
            session.last_outcome_id = outcome_id
            session.data["outcome_evaluations"].append(
                {
                    "type": "outcome_evaluation",
                    "outcome_id": outcome_id,
                    "description": event["description"],
                    "iteration": 0,
                    "result": "pending",
                    "explanation": None,
                    "completed_at": None,
                }
            )
        elif kind in _ANSWERS:
            ident = _answer_id(event)
            session.pending.pop(ident, None)
            if kind == "user.tool_confirmation" and event["result"] == "allow" and session.self_hosted:
                session.pending[ident] = "tool_result"
            else:
                session.answered.add(ident)
        echo["processed_at"] = self._now()
        self._store(session, echo)
        return echo

    # -- events: output --

    def _play_turn(self, session: _Session, inputs: list[JSONDict]) -> None:
        turn = session.script[session.turn_index]
        index = session.turn_index
        session.turn_index += 1
        if callable(turn):
            view = SessionView(
                id=session.data["id"],
                resource=copy.deepcopy(self._session_out(session)),
                history=tuple(copy.deepcopy([e for _, e in session.history])),
                pending=tuple(session.pending),
                turn_index=index,
            )
            events = [dict(e) for e in turn(view, copy.deepcopy(inputs))]
        else:
            events = [dict(e) for e in turn]
        sid = session.data["id"]
        # The faults apply to what the turn emits before its first pause.
        first = next((i for i, e in enumerate(events) if e.get("type") == PAUSE_TYPE), len(events))
        ra_index = next((i for i, e in enumerate(events[:first]) if _is_requires_action(e)), None)
        end_index = next((i for i, e in enumerate(events[:first]) if _is_terminal(e)), None)
        earlier = self._take("earlier_batch", sid) if ra_index is not None else None
        disconnect = self._take("terminal_disconnected", sid) if end_index is not None else None
        for i, event in enumerate(events):
            if i == first:
                self._pause(session, float(event["seconds"]), events[i + 1 :])
                return
            if earlier is not None and i == ra_index:
                self._defer(session, events[i:], earlier)
                return
            if disconnect is not None and i == end_index:
                self._drop_subscribers(session)
            self._emit(session, event)

    def _emit_until_paused(self, session: _Session, events: list[JSONDict]) -> None:
        for i, event in enumerate(events):
            if event.get("type") == PAUSE_TYPE:
                self._pause(session, float(event["seconds"]), events[i + 1 :])
                return
            self._emit(session, event)

    def _pause(self, session: _Session, seconds: float, rest: list[JSONDict]) -> None:
        session.paused = rest
        session.paused_token += 1
        if math.isinf(seconds):
            return  # until an interrupt (or the emulator closing)
        timer = threading.Timer(seconds, self._resume, args=(session.data["id"], session.paused_token))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _resume(self, session_id: str, token: int) -> None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.paused_token != token or self._stopping.is_set():
                return
            rest, session.paused = session.paused, []
            self._emit_until_paused(session, rest)

    def _defer(self, session: _Session, events: list[JSONDict], fault: CMAFault) -> None:
        if fault.drop_stream:
            self._drop_subscribers(session)
        session.deferred = events
        session.deferred_token += 1
        if fault.delay is not None and not fault.drop_stream:
            timer = threading.Timer(
                fault.delay, self._release_deferred, args=(session.data["id"], session.deferred_token)
            )
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def _release_deferred(self, session_id: str, token: int) -> None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.deferred_token == token and not self._stopping.is_set():
                self._flush_deferred(session)

    def _flush_deferred(self, session: _Session) -> None:
        events, session.deferred = session.deferred, []
        session.deferred_token += 1
        self._emit_until_paused(session, events)

    def _drop_subscribers(self, session: _Session) -> None:
        for sub in session.subscribers:
            sub.queue.put(_DROP)
        session.subscribers.clear()
        self._changed.notify_all()

    def _emit(self, session: _Session, template: ServerEvent) -> JSONDict:
        """Finalize a server event (ids, timestamps, linkage), apply it to the session, store it
        and push it to every subscriber. Caller holds the lock."""
        event: JSONDict = json.loads(json.dumps(dict(template)))
        kind = event.get("type")
        if not isinstance(kind, str):
            raise TypeError(f"a scripted event needs a string 'type': {template!r}")
        if kind == PREVIEW_ONLY_TYPE:
            self._preview_only(session, event)
            return event
        if kind == "span.model_request_end" and "model_request_start_id" not in event:
            if session.open_model_request is None:
                self._emit(session, model_request_start())
            event["model_request_start_id"] = session.open_model_request
        if kind.startswith("span.outcome_evaluation_"):
            self._fill_outcome(session, event)
        if kind == "session.status_idle":
            stop = event.setdefault("stop_reason", {"type": "end_turn"})
            if stop.get("type") == "requires_action" and "event_ids" not in stop:
                stop["event_ids"] = [i for i, k in session.pending.items() if k != "tool_result"] or list(
                    session.pending
                )
        final: JSONDict = {"type": kind, "id": event.pop("id", None) or self._id("sevt")}
        final.update({k: v for k, v in event.items() if k != "type"})
        final["processed_at"] = self._now()
        self._apply(session, final)
        self._store(session, final)
        if self.webhooks is not None and (hook := webhook_event_for(final)) is not None:
            self.webhooks.enqueue(hook, session.data["id"])
        return final

    def _fill_outcome(self, session: _Session, event: JSONDict) -> None:
        outcome_id = event.setdefault("outcome_id", session.last_outcome_id)
        if outcome_id is None:
            raise ValueError(f"{event['type']} needs an outcome_id and no user.define_outcome was received")
        iteration = session.outcome_iterations.get(outcome_id, 0)
        event.setdefault("iteration", iteration)
        if event["type"] == "span.outcome_evaluation_end":
            start = session.outcome_starts.get(outcome_id)
            if "outcome_evaluation_start_id" not in event:
                if start is None:
                    start = self._emit(
                        session, outcome_evaluation_start(outcome_id=outcome_id, iteration=event["iteration"])
                    )["id"]
                event["outcome_evaluation_start_id"] = start

    def _apply(self, session: _Session, event: JSONDict) -> None:
        kind = event["type"]
        data = session.data
        status = {
            "session.status_running": "running",
            "session.status_idle": "idle",
            "session.status_rescheduled": "rescheduling",
            "session.status_terminated": "terminated",
        }.get(kind)
        if status is not None:
            data["status"] = status
            data["updated_at"] = event["processed_at"]
            session.awaiting_action = _is_requires_action(event)
        if kind == "agent.custom_tool_use":
            session.tool_kinds[event["id"]] = kind
            session.pending[event["id"]] = "custom"
        elif kind in ("agent.tool_use", "agent.mcp_tool_use"):
            session.tool_kinds[event["id"]] = kind
            permission = event.get("evaluated_permission")
            if permission == "ask":
                session.pending[event["id"]] = "confirm"
            elif kind == "agent.tool_use" and session.self_hosted and permission != "deny":
                session.pending[event["id"]] = "tool_result"
        elif kind == "span.model_request_start":
            session.open_model_request = event["id"]
        elif kind == "span.model_request_end":
            session.open_model_request = None
            _add_usage(data["usage"], event.get("model_usage") or {})
        elif kind.startswith("span.outcome_evaluation_"):
            outcome_id = event["outcome_id"]
            entry = next((o for o in data["outcome_evaluations"] if o["outcome_id"] == outcome_id), None)
            if kind == "span.outcome_evaluation_start":
                session.outcome_starts[outcome_id] = event["id"]
            if entry is not None:
                entry["iteration"] = event["iteration"]
                if kind == "span.outcome_evaluation_end":
                    entry["result"] = event["result"]
                    entry["explanation"] = event.get("explanation")
                    entry["completed_at"] = event["processed_at"]
                else:
                    entry["result"] = "evaluating"
            if kind == "span.outcome_evaluation_end":
                session.outcome_starts.pop(outcome_id, None)
                session.outcome_iterations[outcome_id] = event["iteration"] + 1
        elif kind == "session.usage" and isinstance(event.get("usage"), dict):
            data["usage"].update(copy.deepcopy(event["usage"]))

    def _store(self, session: _Session, event: JSONDict) -> None:
        session.history.append((self._next(), event))
        for sub in session.subscribers:
            sub.queue.put(event)
        self._changed.notify_all()

    def _list_events(self, session: _Session, q: _Query) -> JSONDict:
        order = q.get("order") or "asc"
        if order not in ("asc", "desc"):
            raise _invalid("order: must be 'asc' or 'desc'")
        types = set(q.list("types"))
        bounds = {op: q.time(f"created_at[{op}]") for op in ("gt", "gte", "lt", "lte")}
        items = [
            (seq, e)
            for seq, e in session.history
            if (not types or e["type"] in types) and _in_range(e["processed_at"], **bounds)
        ]
        if order == "desc":
            items.reverse()
        return self._page(
            items, q, kind=f"events:{session.data['id']}", ascending=order == "asc", max_limit=1000
        )

    # -- events: stream --

    def _stream(
        self,
        h: LoopbackHandler,
        session_id: str,
        query: list[tuple[str, str]],
        request_id: str,
        thread_id: str | None = None,
    ) -> None:
        """``GET …/events/stream`` (or a thread's ``…/threads/{id}/stream``) as SSE."""
        deltas = frozenset(v for k, v in query if k in ("event_deltas[]", "event_deltas"))
        sub = _Subscriber(h.connection, deltas)
        with self._lock:
            session = self._session(session_id)
            if thread_id is not None:
                self._thread_subscribers(session, thread_id).append(sub)
            else:
                drop = self._take("drop_stream", session_id)
                sub.drop_after = drop.after if drop is not None else None
                sub.error = self._take("error_frame", session_id)
                if "agent.message" in deltas:
                    sub.cut_preview = self._take("cut_preview", session_id)
                session.subscribers.append(sub)
            self._changed.notify_all()
            # Held-back events (requires_action_from_earlier_batch) reach the new subscriber.
            self._flush_deferred(session)
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream; charset=utf-8")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("request-id", request_id)
            h.end_headers()
            if self._ping_interval is None:
                self._hangups.watch(sub)
            self._pump(h, sub, lambda: self._detach(session_id, sub, thread_id))
        except OSError:
            h.close_connection = True
        finally:
            self._detach(session_id, sub, thread_id)
            self._hangups.unwatch(sub)

    def _thread_subscribers(self, session: _Session, thread_id: str) -> list[_Subscriber]:
        """A thread's live streams (the session's own for its primary thread)."""
        raise NotImplementedError  # the threads mixin

    def _detach(self, session_id: str, sub: _Subscriber, thread_id: str | None = None) -> None:
        with self._lock:
            session_now = self._sessions.get(session_id)
            if session_now is None:
                return
            lists = [session_now.subscribers]
            if thread_id is not None:
                lists.extend(t.subscribers for t in session_now.threads.values())
            for subs in lists:
                if sub in subs:
                    subs.remove(sub)
                    self._changed.notify_all()
                    return

    def _pump(self, h: LoopbackHandler, sub: _Subscriber, detach: Callable[[], None]) -> None:
        def write(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def frame(name: str, data: Any) -> None:
            write(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode())

        sent = 0
        last_write = time.monotonic()
        while True:
            if sub.error is not None and sent >= sub.error.after:
                body = {
                    "type": "error",
                    "error": {"type": sub.error.error_type, "message": sub.error.message},
                }
                frame("error", body)
                write(b"")
                return
            if sub.drop_after is not None and sent >= sub.drop_after:
                # Off the session before the client sees the cut, so a test that counts
                # subscribers right after it finds none.
                detach()
                self._hangups.unwatch(sub)  # the watcher must not wake up for our own hang-up
                self._abort(h)
                return
            wait = 0.1 if self._ping_interval is None else min(0.1, self._ping_interval)
            try:
                # A watched stream sleeps until its queue says something: an event, a fault,
                # the end, or _GONE from the hang-up watcher (close() queues _END everywhere).
                item = sub.queue.get(timeout=None if sub.watched else wait)
            except queue.Empty:
                if self._stopping.is_set() or _client_gone(h.connection):
                    h.close_connection = True
                    return
                if self._ping_interval is not None and time.monotonic() - last_write >= self._ping_interval:
                    frame("ping", {"type": "ping"})
                    last_write = time.monotonic()
                continue
            if item is _WAKE:
                continue
            if item is _GONE:
                h.close_connection = True
                return
            if item is _DROP:
                self._hangups.unwatch(sub)
                self._abort(h)
                return
            if item is _END:
                write(b"")
                return
            if isinstance(item, _PreviewOnly):
                if not self._preview(sub, item.event, frame):
                    detach()
                    self._hangups.unwatch(sub)
                    self._abort(h)
                    return
                continue
            event: JSONDict = item
            if not self._preview(sub, event, frame):
                # cut_preview: the connection dies mid-preview; the event itself is in the history.
                detach()
                self._hangups.unwatch(sub)
                self._abort(h)
                return
            frame(event["type"], event)
            sent += 1
            last_write = time.monotonic()
            if event["type"] == "session.deleted":
                write(b"")
                return

    def _preview(self, sub: _Subscriber, event: JSONDict, frame: Callable[[str, Any], None]) -> bool:
        """``event_start`` and ``event_delta`` frames of ``event`` when ``sub`` asked for
        previews of its type (text in ``delta_chars`` pieces); False when ``cut_preview`` cuts
        the connection in the middle of them."""
        kind = event["type"]
        if kind not in sub.deltas or kind not in ("agent.message", "agent.thinking"):
            return True
        frame("event_start", {"type": "event_start", "event": {"type": kind, "id": event["id"]}})
        if kind != "agent.message":
            return True  # agent.thinking previews are start-only
        cut = sub.cut_preview
        sent = 0
        for index, block in enumerate(event.get("content") or []):
            text = block.get("text") if isinstance(block, dict) else None
            if not isinstance(text, str):
                continue
            for at in range(0, len(text), self._delta_chars):
                if cut is not None and sent >= cut.after:
                    return False
                delta = {
                    "type": "content_delta",
                    "index": index,
                    "content": {"type": "text", "text": text[at : at + self._delta_chars]},
                }
                frame("event_delta", {"type": "event_delta", "event_id": event["id"], "delta": delta})
                sent += 1
        # Fewer deltas than the cut asked for: cut before the final event all the same.
        return cut is None

    def _preview_only(self, session: _Session, template: JSONDict) -> None:
        """``cut_message``: previews of a message that never comes, to the live streams only."""
        event: JSONDict = {"type": "agent.message", "id": self._id("sevt"), "content": template["content"]}
        for sub in session.subscribers:
            sub.queue.put(_PreviewOnly(event))

    @staticmethod
    def _abort(h: LoopbackHandler) -> None:
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.connection.shutdown(socket.SHUT_RDWR)
