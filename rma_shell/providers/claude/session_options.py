"""Claude Managed Agents: the checks of the session options a fresh session takes.

``vault_ids`` and ``initial_events`` (refused on a reattach, with ``FRESH_ONLY``'s others) and
the streams' ``event_deltas``, each a typed ``InvalidOpts`` naming the field. Not where they
are sent (``provider``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts
from rma.providers.claude.previews import DELTA_TYPES
from rma.vocabulary import JSON
from rma_shell.providers.base import OpenRequest

FRESH_ONLY = ("title", "session_metadata", "resources", "vault_ids", "initial_events")
"""Run options only a session being created takes: refused on a reattach."""

_INITIAL_TYPES = frozenset({"user.message", "user.define_outcome"})


def vault_ids(value: object) -> Result[tuple[str, ...], InvalidOpts]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        return Failure(InvalidOpts("vault_ids", f"expected a list of vault ids, got {type(value).__name__}"))
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            return Failure(InvalidOpts(f"vault_ids[{i}]", f"expected a non-empty string, got {item!r}"))
    return Success(tuple(value))


def initial_events(value: object, request: OpenRequest) -> Result[tuple[JSON, ...], InvalidOpts]:
    """``initial_events``: ``user.message`` / ``user.define_outcome`` events (what the API
    starts a session on), never with a run's ``outcome`` (that is a kickoff of its own)."""
    if isinstance(value, str | Mapping) or not isinstance(value, Sequence):
        return Failure(
            InvalidOpts("initial_events", f"expected a list of events, got {type(value).__name__}")
        )
    for i, event in enumerate(value):
        kind = event.get("type") if isinstance(event, Mapping) else None
        if kind not in _INITIAL_TYPES:
            return Failure(
                InvalidOpts(
                    f"initial_events[{i}].type", f"only user.message and user.define_outcome, got {kind!r}"
                )
            )
    if value and request.outcome is not None:
        return Failure(
            InvalidOpts(
                "initial_events",
                "a run's outcome is its kickoff: put a user.define_outcome in initial_events",
            )
        )
    return Success(tuple(dict(e) for e in value))


def check_deltas(event_deltas: tuple[str, ...]) -> Result[None, InvalidOpts]:
    for kind in event_deltas:
        if kind not in DELTA_TYPES:
            return Failure(
                InvalidOpts(
                    "event_deltas", f"{kind!r} is not previewed; the API previews {', '.join(DELTA_TYPES)}"
                )
            )
    return Success(None)
