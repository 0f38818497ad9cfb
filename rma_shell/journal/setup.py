"""Checking ``journal=`` / ``journal_key=`` and what a journal must keep of a run's request.

Every problem is an ``InvalidOpts`` naming the option, found before anything is sent. What the
journal keeps of the request is JSON only and never a credential: a ``model_config``'s
``api_key`` stays out (pass ``model_config=`` again to ``resume``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts, SessionError
from rma.recording import encode
from rma.session.options import SessionConfig
from rma_shell.journal.lease import Lease, acquire
from rma_shell.journal.store import JournalStore, JournalStoreError, open_store
from rma_shell.journal.writer import SessionJournal, declares_approvals
from rma_shell.providers.base import OpenRequest, Provider

MAX_KEY_CHARS = 256
_NOT_KEPT = frozenset({"model_config", "output_tool"})
"""Request options a journal does not keep: a ``model_config`` may carry credentials, and the
answer's tool is ``output_type``'s (code); resume takes them again."""


def check_key(key: object) -> Result[str, SessionError]:
    if not isinstance(key, str) or not key.strip():
        return Failure(InvalidOpts("journal_key", f"must be a non-empty string, got {key!r}"))
    if len(key) > MAX_KEY_CHARS:
        return Failure(InvalidOpts("journal_key", f"must be at most {MAX_KEY_CHARS} characters"))
    return Success(key)


def store_of(journal: object) -> Result[JournalStore, SessionError]:
    try:
        return Success(open_store(journal))
    except TypeError as exc:
        return Failure(InvalidOpts("journal", str(exc)))
    except JournalStoreError as exc:
        return Failure(InvalidOpts("journal", str(exc)))


@attrs.define(eq=False)
class Held:
    """What a run holds of a journal while it carries a key on: the key's lease, and the store
    when it opened that from a path (a store the caller passed is the caller's to close)."""

    store: JournalStore
    owned: bool
    lease: Lease | None = None

    def release(self) -> None:
        """Idempotent; never raises (it runs as a session closes)."""
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.release()
        if self.owned:
            self.owned = False
            with contextlib.suppress(Exception):  # a store that fails to close has nothing to lose
                self.store.close()


def opened(journal: object) -> Result[Held, SessionError]:
    """``journal=`` as a store, without a lease (``approve``, ``pending_approvals``): release it."""
    store = store_of(journal)
    if isinstance(store, Failure):
        return Failure(store.failure())
    return Success(Held(store.unwrap(), owned=isinstance(journal, str | os.PathLike)))


def hold(journal: object, key: str) -> Result[Held, SessionError]:
    """``journal=`` as a store with ``key``'s lease taken (``JournalBusy`` if another run has it)."""
    held = opened(journal)
    if isinstance(held, Failure):
        return held
    lease = acquire(held.unwrap().store, key)
    if isinstance(lease, Failure):
        held.unwrap().release()
        return Failure(lease.failure())
    held.unwrap().lease = lease.unwrap()
    return held


def resumable(provider: Provider[Any]) -> bool:
    return type(provider).snapshot is not Provider.snapshot


def check_new(
    journal: object, key: object, provider: Provider[Any], handler: object
) -> Result[tuple[Held, str] | None, SessionError]:
    """The held store (the key's lease taken: release it) and the key of a fresh journaled
    run, None without ``journal=``, or why not."""
    if journal is None:
        if key is not None:
            return Failure(InvalidOpts("journal_key", "names a session in a journal: pass journal= too"))
        if declares_approvals(handler):
            return Failure(
                InvalidOpts(
                    "journal",
                    "the handler has tools that may require approval, and a call waiting for a "
                    "person waits in a journal: pass journal= (a path or a JournalStore) and journal_key=",
                )
            )
        return Success(None)
    checked = check_key(key)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    if not resumable(provider):
        return Failure(
            InvalidOpts("journal", f"{type(provider).__name__} sessions cannot be resumed from a journal")
        )
    held = hold(journal, checked.unwrap())  # before the check: two new runs of one key race
    if isinstance(held, Failure):
        return Failure(held.failure())
    try:
        taken = bool(held.unwrap().store.rows(checked.unwrap()))
    except JournalStoreError as exc:
        held.unwrap().release()
        return Failure(InvalidOpts("journal", str(exc)))
    if taken:
        held.unwrap().release()
        return Failure(
            InvalidOpts(
                "journal_key",
                f"{key!r} already holds a session in this journal: carry it on with "
                "resume(journal, key, ...), or choose a new key",
            )
        )
    return Success((held.unwrap(), checked.unwrap()))


def begin_journal(
    journal: SessionJournal, config: SessionConfig, request: Mapping[str, Any]
) -> Result[None, SessionError]:
    """Write the journal's header: the session's config (as the core will run it) and request."""
    try:
        config_json = encode(config)
    except (TypeError, ValueError) as exc:
        return Failure(InvalidOpts("journal", f"the session's options have no JSON form ({exc})"))
    try:
        journal.begin(config.provider_name, config_json, request)
    except JournalStoreError as exc:
        return Failure(InvalidOpts("journal", str(exc)))
    return Success(None)


def request_record(request: OpenRequest) -> Result[dict[str, Any], SessionError]:
    """The JSON a journal keeps of the open request (no credentials), or which option has none."""
    kept: dict[str, Any] = {
        "prompt": request.prompt,
        "session_id": request.session_id,
        "max_turns": request.max_turns,
        "outcome": request.outcome,
        "budget": request.budget,
        "metadata": dict(request.metadata),
        "extra": {k: v for k, v in request.extra.items() if k not in _NOT_KEPT},
    }
    for name, value in (*kept.items(), *kept["extra"].items()):
        try:
            encode(value)
        except (TypeError, ValueError) as exc:
            return Failure(
                InvalidOpts("journal", f"{name} has no JSON form, so a journal cannot keep it ({exc})")
            )
    return Success(kept)


def request_from(
    record: Mapping[str, Any], model_config: Mapping[str, Any] | None, output_tool: Any = None
) -> OpenRequest:
    """The open request a journal kept, with ``model_config`` and ``output_type``'s tool
    (``output_tool.spec``, declared beside the provider's tools, as ``run`` does) given again."""
    from rma.codec_json import from_jsonable

    extra = dict(from_jsonable(record.get("extra") or {}))
    if model_config is not None:
        extra["model_config"] = model_config
    if output_tool is not None:
        extra["output_tool"] = output_tool.spec
    return OpenRequest(
        prompt=record.get("prompt"),
        session_id=record.get("session_id"),
        max_turns=int(record.get("max_turns") or 50),
        outcome=from_jsonable(record.get("outcome")),
        budget=from_jsonable(record.get("budget")),
        metadata=dict(record.get("metadata") or {}),
        extra=extra,
    )
