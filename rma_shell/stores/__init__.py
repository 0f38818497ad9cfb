"""Stores for provisioning records and tags: in-memory, JSON file, SQLite (the default).

One contract (``Store``, see ``rma_shell.stores.base``), three implementations:

==================  =========================================================================
``MemoryStore``     this object only; gone with the process (tests, one-shot scripts)
``JsonFileStore``   one readable JSON file, atomic fsync'd rewrites, a lock file; small stores
``SqliteStore``     the default: WAL, ``BEGIN IMMEDIATE``, safe with many processes at once
==================  =========================================================================

Where the default store lives (``default_store_path``), first match wins:

1. ``$RMA_STORE`` — a path (``~`` expanded); ``open_store`` also reads ``:memory:`` and a
   path ending in ``.json`` as the other two kinds;
2. ``$XDG_STATE_HOME/rma/rma.sqlite3`` when ``XDG_STATE_HOME`` is set to an absolute path;
3. ``~/.local/state/rma/rma.sqlite3``.

Stores are synchronous; call them from async code through ``anyio.to_thread.run_sync`` (as
``ensure_record`` does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from rma_shell.stores.base import (
    DEFAULT_LEASE_S,
    DEFAULT_POLL_S,
    Acquired,
    BaseStore,
    Claim,
    ClaimOutcome,
    Ensured,
    Entry,
    Existing,
    Held,
    Record,
    ResolveError,
    Store,
    StoreCorrupt,
    StoreError,
    StoreKey,
    TagError,
    default_owner,
    ensure_record,
)
from rma_shell.stores.json_file import JsonFileStore
from rma_shell.stores.memory import MemoryStore
from rma_shell.stores.sqlite import SqliteStore

ENV_VAR: Final = "RMA_STORE"
MEMORY: Final = ":memory:"


def default_store_path(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """Where the default store lives (see the module docstring). ``env`` defaults to
    ``os.environ`` and ``home`` to ``Path.home()``; tests pass both."""
    environ = os.environ if env is None else env
    explicit = environ.get(ENV_VAR)
    if explicit:
        return Path(explicit) if explicit == MEMORY else Path(explicit).expanduser()
    state_home = environ.get("XDG_STATE_HOME")
    if state_home and Path(state_home).is_absolute():
        return Path(state_home) / "rma" / "rma.sqlite3"
    return (Path.home() if home is None else home) / ".local" / "state" / "rma" / "rma.sqlite3"


def open_store(
    location: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None
) -> BaseStore:
    """A store at ``location``, or at ``default_store_path(env)`` when None: ``:memory:`` is a
    ``MemoryStore``, a ``.json`` path a ``JsonFileStore``, anything else a ``SqliteStore``."""
    where = default_store_path(env) if location is None else Path(location)
    if str(where) == MEMORY:
        return MemoryStore()
    if where.suffix.lower() == ".json":
        return JsonFileStore(where)
    return SqliteStore(where)


__all__ = [
    "DEFAULT_LEASE_S",
    "DEFAULT_POLL_S",
    "ENV_VAR",
    "MEMORY",
    "Acquired",
    "BaseStore",
    "Claim",
    "ClaimOutcome",
    "Ensured",
    "Entry",
    "Existing",
    "Held",
    "JsonFileStore",
    "MemoryStore",
    "Record",
    "ResolveError",
    "SqliteStore",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "StoreKey",
    "TagError",
    "default_owner",
    "default_store_path",
    "ensure_record",
    "open_store",
]
