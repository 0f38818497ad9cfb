"""The artifact vocabulary shared by every store: the ``Artifact`` value and the ``ArtifactStore`` verbs.

An ``Artifact`` is one file a session's agent can reach, as a store lists it: its name, size,
the provider's identity for it (``ref``: a Claude file id, an AgentCore storage path), when it
was made, and the provider's own record of it untouched (``raw``). ``ArtifactStore`` is the
protocol of the four verbs (A-1): ``list``, ``fetch``, ``put``, ``delete``, all async and
``Result``-returning. ``newest`` and ``check_name`` are the two decisions every store shares:
a name resolves to its newest listing (re-runs pile up duplicates, A-2), and a name is
``[A-Za-z0-9._-]+``, never ``.`` or ``..``, on every store (A-10), so no name is ever a path.

What it is not: no I/O here — this module is pure; the stores (``ClaudeFiles``,
``SessionStorage``) talk to the providers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import attrs
from returns.result import Result

from rma.errors import InvalidOpts, SessionError
from rma.providers.agentcore.commands import check_name as _check_name
from rma.vocabulary import JSON


def _optional_datetime(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    parsed = parse_timestamp(value)
    if parsed is None:
        raise ValueError(f"created_at: not a datetime or an ISO 8601 timestamp: {value!r}")
    return parsed


@attrs.frozen
class Artifact:
    """One file a store lists (A-3). JSON-encodable through ``to_json`` / ``from_json``.

    ``ref`` is the provider's identity (a Claude file id, an AgentCore storage path);
    ``created_at`` is timezone-aware (UTC when the provider gave no offset); ``raw`` is the
    provider's record as it arrived (file metadata, a listing row), never rewritten."""

    name: str
    size: int | None = None
    ref: str | None = None
    created_at: datetime | None = attrs.field(default=None, converter=_optional_datetime)
    raw: JSON = attrs.field(default=None, hash=False)

    def to_json(self) -> dict[str, JSON]:
        """``created_at`` as ISO 8601 text; everything else as it is."""
        return {
            "name": self.name,
            "size": self.size,
            "ref": self.ref,
            "created_at": self.created_at.isoformat() if self.created_at is not None else None,
            "raw": self.raw,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Artifact:
        return cls(
            name=str(data["name"]),
            size=data.get("size"),
            ref=data.get("ref"),
            created_at=data.get("created_at"),
            raw=data.get("raw"),
        )


@runtime_checkable
class ArtifactStore(Protocol):
    """The four verbs over one session's files (A-1). Every failure is a value:
    ``NotFound`` for a missing name, ``InvalidOpts(option="name")`` for a name refused
    before any request, the provider's error otherwise."""

    async def list(self) -> Result[tuple[Artifact, ...], SessionError]:
        """Every artifact, duplicates included (A-2)."""
        ...

    async def fetch(self, name: str) -> Result[bytes, SessionError]:
        """The bytes of the newest artifact of that exact name."""
        ...

    async def put(self, name: str, data: bytes) -> Result[Artifact, SessionError]:
        """Store ``data`` under ``name`` where the session's agent can read it."""
        ...

    async def delete(self, name: str) -> Result[None, SessionError]:
        """Remove the newest artifact of that exact name."""
        ...


def check_name(name: object) -> Result[str, InvalidOpts]:
    """A-10 on every store: 1–255 of ``[A-Za-z0-9._-]``, not ``.``/``..`` (no separator, so
    no traversal), not the AgentCore put's part-file suffix."""
    return _check_name(name)


def parse_timestamp(value: object) -> datetime | None:
    """An ISO 8601 timestamp (``Z`` or an offset; digits past microseconds dropped) as an
    aware datetime — UTC when no offset is given; None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


_OLDEST = datetime.min.replace(tzinfo=UTC)


def newest(artifacts: Iterable[Artifact], name: str) -> Artifact | None:
    """The newest artifact named exactly ``name`` (A-2, A-5); one without a timestamp counts
    as the oldest. Among equal timestamps the first listed wins, so the answer is stable."""
    best: Artifact | None = None
    for artifact in artifacts:
        if artifact.name != name:
            continue
        if best is None or (artifact.created_at or _OLDEST) > (best.created_at or _OLDEST):
            best = artifact
    return best


__all__ = ["Artifact", "ArtifactStore", "check_name", "newest", "parse_timestamp"]
