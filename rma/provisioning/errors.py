"""Error values of provisioning's pure parts: specs, canonical JSON, tag references.

What this is: frozen values with a stable ``kind`` tag, returned inside
``returns.result.Failure`` by ``rma.provisioning.spec``, ``rma.provisioning.identity`` and the
stores' ``resolve``. They extend ``rma.errors.SessionError`` so the library keeps one family of
expected failures (a provider's ``provision`` and a session share one error type).
What it is not: the control-plane failures of the provisioning flows (409 recovery, wait
budgets, rollback) — those belong to the flows — nor store I/O failures, which are exceptions
(``rma_shell.stores.StoreError``) because they are not expected outcomes.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from rma.errors import SessionError


@attrs.frozen
class ProvisioningError(SessionError):
    """Base of provisioning's error values."""

    kind: ClassVar[str] = "provisioning_error"


@attrs.frozen
class InvalidSpec(ProvisioningError):
    """An agent or environment spec failed validation (X-19, X-20, X-22).

    ``spec`` is ``"agent"`` or ``"environment"``; ``path`` names the offending field the way a
    reader would write it (``tools[2].input_schema``, ``runtimes[0].version``,
    ``config.networking["allowed hosts"]``); an empty path means the whole value.
    """

    kind: ClassVar[str] = "invalid_spec"
    spec: str = "agent"
    path: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"invalid {self.spec} spec{where}: {self.detail}"


@attrs.frozen
class NotJSON(ProvisioningError):
    """A value cannot be put in canonical JSON: NaN or infinity, a non-string key, a lone
    surrogate, or a type JSON has no word for (set, bytes, an arbitrary object)."""

    kind: ClassVar[str] = "not_json"
    path: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"not canonical JSON{where}: {self.detail}"


@attrs.frozen
class InvalidRef(ProvisioningError):
    """A tag reference is not ``base:tag`` with a non-empty base and a valid tag (V-33 Better:
    a value, not a raised argument error)."""

    kind: ClassVar[str] = "invalid_ref"
    ref: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        return f"invalid reference {self.ref!r}: {self.detail}"


@attrs.frozen
class UnknownTag(ProvisioningError):
    """No such tag under the base (X-46). ``resolve`` never falls back to another digest."""

    kind: ClassVar[str] = "unknown_tag"
    base: str = ""
    tag: str = ""

    @property
    def message(self) -> str:
        return f"unknown tag {self.base}:{self.tag}"


@attrs.frozen
class UntrackedDigest(ProvisioningError):
    """A digest the store holds no record for (X-47): a tag pointing at a deleted record, or an
    attempt to tag a digest that was never stored."""

    kind: ClassVar[str] = "untracked_digest"
    base: str = ""
    digest: str = ""
    tag: str | None = None

    @property
    def message(self) -> str:
        via = f" (tag {self.base}:{self.tag})" if self.tag is not None else ""
        return f"no record for digest {self.digest} under {self.base!r}{via}"
