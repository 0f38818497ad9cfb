"""Error values of the provisioning flows: name collisions, archived names, prune, rollback.

What this is: frozen ``SessionError`` subclasses (through ``ProvisioningError``) with a stable
``kind``, returned inside ``returns.result.Failure`` by the Claude Managed Agents flows in
``rma_shell.providers.claude.provisioning`` — one class per named failure, so callers
branch on the type (or ``kind``) rather than parse a message. Each error the reference spells
with a resource prefix (``agent_archived`` / ``environment_archived``) is a pair of
subclasses under one base (``NameArchived``) so either spelling can be matched.
What it is not: spec validation (``InvalidSpec``), tag lookups (``UnknownTag``,
``UntrackedDigest``) and the AgentCore harness waits (``HarnessError``) live elsewhere; the
provider's own failures (``HttpError``, ``TransportError``) pass through unwrapped except
where a flow must say which step failed (``ProvisionFailed``, ``PrunePartial``,
``TeardownFailed`` carry them as ``reason``).
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from rma.errors import SessionError
from rma.provisioning.errors import ProvisioningError
from rma.vocabulary import JSON


@attrs.frozen
class BaseTooLong(ProvisioningError):
    """The base does not fit in a provider-side name whole (V-20): ``<base>_<digest8>`` would
    have to cut it, and a cut base is a different lineage — refused before any create."""

    kind: ClassVar[str] = "base_too_long"
    base: str = ""
    max_bytes: int = 0

    @property
    def message(self) -> str:
        size = len(self.base.encode("utf-8", "surrogatepass"))
        return (
            f"{self.kind}: base of {size} bytes does not fit a {self.max_bytes}-byte name with "
            f"its digest (at most {self.max_bytes - 9} bytes): {self.base[:40]!r}…"
        )


@attrs.frozen
class AgentBaseTooLong(BaseTooLong):
    kind: ClassVar[str] = "agent_base_too_long"


@attrs.frozen
class EnvironmentBaseTooLong(BaseTooLong):
    kind: ClassVar[str] = "environment_base_too_long"


@attrs.frozen
class NameArchived(ProvisioningError):
    """A create collided with a name that only archived resources hold (V-23, V-28): the
    provider keeps the name reserved and an archived resource cannot be adopted."""

    kind: ClassVar[str] = "name_archived"
    name: str = ""
    archived_ids: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return f"{self.kind}: {self.name!r} is held only by archived {', '.join(self.archived_ids) or '?'}"


@attrs.frozen
class AgentArchived(NameArchived):
    kind: ClassVar[str] = "agent_archived"


@attrs.frozen
class EnvironmentArchived(NameArchived):
    kind: ClassVar[str] = "environment_archived"


@attrs.frozen
class NameConflict(ProvisioningError):
    """A create answered 409 and no resource of that exact name is listed, live or archived,
    on any page (V-23, V-28) — the conflict is about something this library cannot see."""

    kind: ClassVar[str] = "name_conflict"
    name: str = ""
    response: JSON = None

    @property
    def message(self) -> str:
        return f"{self.kind}: creating {self.name!r} conflicted, but no resource of that name is listed"


@attrs.frozen
class AgentNameConflict(NameConflict):
    kind: ClassVar[str] = "agent_name_conflict"


@attrs.frozen
class EnvironmentNameConflict(NameConflict):
    kind: ClassVar[str] = "environment_name_conflict"


@attrs.frozen
class UnexpectedCreateResponse(ProvisioningError):
    """A create answered 2xx without a string ``id`` (V-22 Better: a value, not a crash)."""

    kind: ClassVar[str] = "unexpected_create_response"
    resource: str = ""
    name: str = ""
    response: JSON = None

    @property
    def message(self) -> str:
        return f"{self.kind}: creating {self.resource} {self.name!r} answered without an id"


@attrs.frozen
class KeepRequired(ProvisioningError):
    """``prune`` needs ``keep`` as an integer > 0 (V-35): pruning everything is never a default."""

    kind: ClassVar[str] = "keep_required"
    keep: str = ""
    """``repr`` of what was given."""

    @property
    def message(self) -> str:
        return f"{self.kind}: keep must be an integer > 0, got {self.keep}"


@attrs.frozen
class PrunePartial(ProvisioningError):
    """An archive failed mid-prune (V-38): what was archived before it (and evicted from the
    store), the one that failed and why; nothing after it was attempted."""

    kind: ClassVar[str] = "prune_partial"
    archived: tuple[str, ...] = ()
    failed: str = ""
    reason: SessionError | None = None

    @property
    def message(self) -> str:
        why = self.reason.message if self.reason is not None else "?"
        return f"{self.kind}: archived {list(self.archived)}, then {self.failed!r} failed: {why}"


@attrs.frozen
class ProvisionFailed(ProvisioningError):
    """``provision`` failed at ``step`` (``agent`` or ``environment``) (V-11). What this call had
    created before is archived again: ``rolled_back`` names it; ``rollback_failed`` names what
    could not be archived (left behind — archive it by hand or let ``prune`` collect it)."""

    kind: ClassVar[str] = "provision_failed"
    step: str = ""
    reason: SessionError | None = None
    rolled_back: tuple[str, ...] = ()
    rollback_failed: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        why = self.reason.message if self.reason is not None else "?"
        out = f"{self.kind} at {self.step}: {why}"
        if self.rolled_back:
            out += f"; rolled back {list(self.rolled_back)}"
        if self.rollback_failed:
            out += f"; could not roll back {list(self.rollback_failed)}"
        return out


@attrs.frozen
class TeardownFailed(ProvisioningError):
    """Some archives of a teardown failed (C-25). Every handle was attempted; ``archived`` were
    archived and evicted, ``failures`` pairs each other resource's name with its error (its
    store records are kept)."""

    kind: ClassVar[str] = "teardown_failed"
    archived: tuple[str, ...] = ()
    failures: tuple[tuple[str, SessionError], ...] = ()

    @property
    def message(self) -> str:
        failed = ", ".join(f"{name}: {error.message}" for name, error in self.failures)
        return f"{self.kind}: {failed}"


__all__ = [
    "AgentArchived",
    "AgentBaseTooLong",
    "AgentNameConflict",
    "BaseTooLong",
    "EnvironmentArchived",
    "EnvironmentBaseTooLong",
    "EnvironmentNameConflict",
    "KeepRequired",
    "NameArchived",
    "NameConflict",
    "ProvisionFailed",
    "PrunePartial",
    "TeardownFailed",
    "UnexpectedCreateResponse",
]
