"""Claude Managed Agents: why a session stopped, typed — idle stop reasons and session errors.

What this module is: a reading of a finished request's events (``SessionResult.events``, or
any list of raw events) that says, as values, why the host stopped: ``host_stop`` gives a
``HostStop`` whose ``kind`` is one ``StopKind`` for every idle stop reason the API has
(``end_turn``, ``requires_action``, ``retries_exhausted``, ``budget_reached``, ``refusal``)
and for a termination or deletion, with the refusal's details and the typed
``HostSessionError`` (``rma.errors``) of the ``session.error`` that led there;
``session_error`` types one ``session.error`` event. What it is not: the terminal decision
(``codec.terminal_for`` keeps it: those values are what the session machine acts on) and no
I/O. Unknown stop reasons and error types are kept — ``StopKind.UNKNOWN`` /
``SessionErrorKind.UNKNOWN`` with the raw value — never an exception.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import attrs

from rma.errors import HostSessionError, SessionErrorKind
from rma.vocabulary import JSON, SessionResult

_KINDS = frozenset(k.value for k in SessionErrorKind)


class StopKind(enum.StrEnum):
    """Why a Claude session stopped, one value per idle stop reason and ending."""

    END_TURN = "end_turn"
    REQUIRES_ACTION = "requires_action"
    RETRIES_EXHAUSTED = "retries_exhausted"
    BUDGET_REACHED = "budget_reached"
    REFUSAL = "refusal"
    TERMINATED = "terminated"
    DELETED = "deleted"
    UNKNOWN = "unknown"
    """An idle whose stop reason this version does not know (kept raw in ``stop_reason``)."""
    NONE = "none"
    """No idle, termination or deletion among the events."""


@attrs.frozen
class Refusal:
    """A ``refusal`` idle's ``stop_details``: the policy category (None: unnamed) and the
    host's explanation (do not parse it)."""

    category: str | None = None
    explanation: str | None = None


@attrs.frozen
class HostStop:
    """Why the host stopped: ``kind``, the raw ``stop_reason``, the ``refusal`` details of a
    ``refusal`` idle, and ``error`` — the last ``session.error`` since the stop before (for
    ``retries_exhausted`` and a termination, what exhausted or ended it)."""

    kind: StopKind
    stop_reason: JSON = None
    refusal: Refusal | None = None
    error: HostSessionError | None = None


def _str(value: JSON) -> str | None:
    return value if isinstance(value, str) else None


def session_error(event: JSON) -> HostSessionError | None:
    """The typed error of a ``session.error`` event; None for any other event."""
    if not isinstance(event, Mapping) or event.get("type") != "session.error":
        return None
    error = event.get("error")
    error = error if isinstance(error, Mapping) else {}
    raw_type = _str(error.get("type"))
    retry = error.get("retry_status")
    return HostSessionError(
        detail=_str(error.get("message")) or "",
        error_type=raw_type,
        payload=dict(error),
        error_kind=raw_type if raw_type in _KINDS else SessionErrorKind.UNKNOWN.value,
        retry_status=_str(retry.get("type")) if isinstance(retry, Mapping) else _str(retry),
        mcp_server_name=_str(error.get("mcp_server_name")),
        repository_url=_str(error.get("repository_url")),
    )


_STOPS = {k.value: k for k in StopKind if k not in (StopKind.UNKNOWN, StopKind.NONE)}


def host_stop(source: SessionResult | Iterable[JSON]) -> HostStop:
    """Why the host stopped, from a result (its events) or raw events (oldest first): the
    last idle, termination or deletion decides. ``satisfied`` / ``max_iterations_reached``
    read as ``end_turn`` and ``failed`` as ``terminated``, as the codec reads them."""
    events = source.events if isinstance(source, SessionResult) else tuple(source)
    last_error: HostSessionError | None = None
    stop = HostStop(StopKind.NONE)
    for event in events:
        if not isinstance(event, Mapping):
            continue
        kind = event.get("type")
        if kind == "session.error":
            last_error = session_error(event)
        elif kind == "session.status_idle":
            reason = event.get("stop_reason")
            raw = _str(reason.get("type")) if isinstance(reason, Mapping) else _str(reason)
            raw = {"satisfied": "end_turn", "max_iterations_reached": "end_turn", "failed": "terminated"}.get(
                raw or "", raw
            )
            stop_kind = _STOPS.get(raw or "", StopKind.UNKNOWN)
            refusal = None
            if stop_kind is StopKind.REFUSAL:
                details = event.get("stop_details")
                details = details if isinstance(details, Mapping) else {}
                refusal = Refusal(_str(details.get("category")), _str(details.get("explanation")))
            stop = HostStop(stop_kind, reason, refusal, last_error)
            last_error = None  # an error belongs to the stop it led to
        elif kind in ("session.status_terminated", "session.deleted"):
            ending = StopKind.TERMINATED if kind == "session.status_terminated" else StopKind.DELETED
            stop = HostStop(ending, event.get("stop_reason"), None, last_error)
    return stop
