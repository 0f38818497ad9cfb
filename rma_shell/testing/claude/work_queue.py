"""The Claude Managed Agents emulator's self-hosted work queue: ``/v1/environments/{id}/work…``.

What this is: work items for the sessions of ``self_hosted`` environments, as the SDK's
``client.beta.environments.work`` resource drives them — ``poll`` (a long poll that claims the
oldest queued item, re-offering one nobody acknowledged within ``reclaim_older_than_ms``),
``ack`` (queued → starting), ``heartbeat`` (optimistic concurrency on
``expected_last_heartbeat``: ``NO_HEARTBEAT`` for the first, the server's last value after;
412 ``heartbeat_precondition_failed`` with the lease as the server holds it otherwise; a
stopping or stopped item answers ``lease_extended: false``), ``stop`` (force → stopped, 409
once stopped) and ``GET`` of one item. A session gets an item when it is created and again
when input arrives after its last item stopped. Leases expire after ``work_lease_ttl``
seconds without a heartbeat (the item is queued again, and its old holder's next heartbeat
is refused), or at once by ``expire_lease``; ``request_stop`` is the user stopping a session's
work (the holder's next heartbeat reads ``stopping``). Refused heartbeats are ordinary
``status_once(..., path="/heartbeat")`` faults.

What this is not: the per-item ``secret`` (always null: the emulator's tokens are the API key
or ``bearer_tokens``), work metadata updates, queue statistics, or the memory-store endpoints.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from rma_shell.testing.claude.state import _Core, _Reply, _Session
from rma_shell.testing.claude.wire import _invalid, _not_found, _Query, _Rejected

JSONDict = dict[str, Any]

DEFAULT_LEASE_TTL = 60
DEFAULT_RECLAIM_MS = 5000
_LIVE = ("queued", "starting", "active", "stopping")


@attrs.define
class _Work:
    data: JSONDict
    claimed_at: float | None = None
    lease_until: float | None = None
    last_heartbeat: str | None = None
    stop_seq: int = 0
    claims: int = 0


class _WorkQueue(_Core):
    """The work-queue routes; mixed into ``CMAEmulator`` (state lives on the emulator)."""

    work_lease_ttl: int = DEFAULT_LEASE_TTL

    def _work_init(self) -> None:
        self._work: dict[str, _Work] = {}
        self._work_stopped_at: dict[str, int] = {}  # session id → history length when its last item stopped

    # -- test controls (public on the emulator) --

    def work_items(self, environment_id: str | None = None) -> list[JSONDict]:
        """Every work item (copies), oldest first."""
        with self._lock:
            self._enqueue_due()
            return [
                dict(w.data)
                for w in self._work.values()
                if environment_id in (None, w.data["environment_id"])
            ]

    def work_for(self, session_id: str) -> JSONDict | None:
        """The session's newest work item, or None."""
        with self._lock:
            self._enqueue_due()
            found = [w.data for w in self._work.values() if w.data["data"]["id"] == session_id]
            return dict(found[-1]) if found else None

    def expire_lease(self, work_id: str) -> None:
        """The lease runs out now: the item is queued again for the next poll, and its old
        holder's next heartbeat is refused with 412."""
        with self._lock:
            self._requeue(self._work_item(work_id))
            self._changed.notify_all()

    def request_stop(self, work_id: str) -> None:
        """The user stops the session's work: the holder's next heartbeat reads ``stopping``."""
        with self._lock:
            work = self._work_item(work_id)
            if work.data["state"] in ("queued", "starting", "active"):
                work.data["state"] = "stopping"
                work.data["stop_requested_at"] = self._now()

    # -- routes --

    def _route_work(self, method: str, environment_id: str, rest: list[str], q: _Query, body: Any) -> _Reply:
        env = self._environments.get(environment_id)
        if env is None:
            raise _not_found("Environment", environment_id, error_code="environment_not_found")
        if env.data["config"].get("type") != "self_hosted":
            raise _invalid(f"environment {environment_id} is not self_hosted: it has no work queue")
        if rest == ["poll"] and method == "GET":
            return self._json(200, self._poll(environment_id, q))
        if len(rest) == 1 and method == "GET":
            return self._json(200, dict(self._item_of(environment_id, rest[0]).data))
        if len(rest) == 2 and method == "POST":
            work = self._item_of(environment_id, rest[0])
            if rest[1] == "ack":
                return self._json(200, self._ack(work))
            if rest[1] == "heartbeat":
                return self._heartbeat(work, q)
            if rest[1] == "stop":
                return self._json(200, self._stop(work, body))
        raise _Rejected(404, f"Not found: {method} /v1/environments/{environment_id}/work/{'/'.join(rest)}")

    def _poll(self, environment_id: str, q: _Query) -> JSONDict | None:
        block_ms = _int_param(q, "block_ms", 1, 999)
        reclaim_ms = _int_param(q, "reclaim_older_than_ms", 0, None)
        reclaim = (DEFAULT_RECLAIM_MS if reclaim_ms is None else reclaim_ms) / 1000.0
        deadline = time.monotonic() + (block_ms or 0) / 1000.0
        while True:
            self._enqueue_due()
            now = time.monotonic()
            for work in self._work.values():
                if work.data["environment_id"] != environment_id or work.data["state"] != "queued":
                    continue
                if work.claimed_at is not None and now - work.claimed_at < reclaim:
                    continue  # claimed by a poller that has not acknowledged it yet
                work.claimed_at = now
                work.claims += 1
                return dict(work.data)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._changed.wait(left)

    def _ack(self, work: _Work) -> JSONDict:
        if work.data["state"] != "queued" or work.claimed_at is None:
            raise _Rejected(409, f"work {work.data['id']} is {work.data['state']}, not a claimed queued item")
        stamp = self._now()
        work.data.update(state="starting", acknowledged_at=stamp)
        work.last_heartbeat = None  # the new holder's first heartbeat claims the lease
        work.lease_until = time.monotonic() + self.work_lease_ttl
        return dict(work.data)

    def _heartbeat(self, work: _Work, q: _Query) -> _Reply:
        expected = q.get("expected_last_heartbeat")
        state = work.data["state"]
        if state in ("stopping", "stopped"):
            return self._json(200, self._beat(work, extended=False))
        if state == "queued" or (expected or "NO_HEARTBEAT") != (work.last_heartbeat or "NO_HEARTBEAT"):
            lease = {
                "last_heartbeat": work.last_heartbeat,
                "lease_extended": False,
                "state": state,
                "ttl_seconds": self.work_lease_ttl,
            }
            error = {
                "type": "invalid_request_error",
                "message": "expected_last_heartbeat does not match the stored heartbeat",
                "error_code": "heartbeat_precondition_failed",
                "details": {"error_code": "heartbeat_precondition_failed", "current_state": lease},
            }
            return self._json(412, {"type": "error", "error": error, "request_id": None})
        stamp = self._now()
        work.last_heartbeat = stamp
        work.lease_until = time.monotonic() + self.work_lease_ttl
        work.data.update(state="active", latest_heartbeat_at=stamp)
        work.data["started_at"] = work.data["started_at"] or stamp
        return self._json(200, self._beat(work, extended=True))

    def _beat(self, work: _Work, *, extended: bool) -> JSONDict:
        return {
            "type": "work_heartbeat",
            "last_heartbeat": work.last_heartbeat or "",
            "lease_extended": extended,
            "state": work.data["state"],
            "ttl_seconds": self.work_lease_ttl,
        }

    def _stop(self, work: _Work, body: Any) -> JSONDict:
        if body is not None and not isinstance(body, dict):
            raise _invalid("body: expected an object")
        if work.data["state"] == "stopped":
            raise _Rejected(409, f"work {work.data['id']} is already stopped", "conflict_error")
        stamp = self._now()
        work.data.update(state="stopped", stopped_at=stamp)
        work.data["stop_requested_at"] = work.data["stop_requested_at"] or stamp
        session = self._sessions.get(work.data["data"]["id"])
        self._work_stopped_at[work.data["data"]["id"]] = len(session.history) if session else 0
        self._changed.notify_all()
        return dict(work.data)

    # -- bookkeeping --

    def _item_of(self, environment_id: str, work_id: str) -> _Work:
        work = self._work.get(work_id)
        if work is None or work.data["environment_id"] != environment_id:
            raise _not_found("Work", work_id, error_code="work_not_found")
        return work

    def _work_item(self, work_id: str) -> _Work:
        work = self._work.get(work_id)
        if work is None:
            raise KeyError(f"no work item {work_id!r}")
        return work

    def _requeue(self, work: _Work) -> None:
        if work.data["state"] in ("starting", "active"):
            work.data.update(state="queued")
            work.claimed_at = None
            work.lease_until = None
            # A new value, so the old holder's expected_last_heartbeat no longer matches.
            work.last_heartbeat = f"expired-{self._now()}"

    def _enqueue_due(self) -> None:
        """Queue an item for each self-hosted session that needs one; expire lapsed leases."""
        now = time.monotonic()
        for work in self._work.values():
            if work.lease_until is not None and now > work.lease_until:
                self._requeue(work)
        live = {w.data["data"]["id"] for w in self._work.values() if w.data["state"] in _LIVE}
        for session in self._sessions.values():
            sid = session.data["id"]
            if not session.self_hosted or sid in live or session.data["status"] == "terminated":
                continue
            if sid in self._work_stopped_at and not _input_after(session, self._work_stopped_at[sid]):
                continue
            self._new_work(session)

    def _new_work(self, session: _Session) -> None:
        env_id = session.data.get("environment_id")
        work_id = self._id("work")
        self._work[work_id] = _Work(
            {
                "type": "work",
                "id": work_id,
                "environment_id": env_id,
                "state": "queued",
                "data": {"type": "session", "id": session.data["id"]},
                "metadata": {},
                "secret": None,
                "created_at": self._now(),
                "acknowledged_at": None,
                "started_at": None,
                "latest_heartbeat_at": None,
                "stop_requested_at": None,
                "stopped_at": None,
            }
        )


def _input_after(session: _Session, count: int) -> bool:
    return any(e.get("type", "").startswith("user.") for _, e in session.history[count:])


def _int_param(q: _Query, name: str, low: int, high: int | None) -> int | None:
    raw = q.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise _invalid(f"{name}: must be an integer") from None
    if value < low or (high is not None and value > high):
        raise _invalid(f"{name}: must be between {low} and {high}" if high else f"{name}: must be >= {low}")
    return value
