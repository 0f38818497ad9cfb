"""The provisioning store contract: records by digest, tags, claims — and ``ensure_record``.

What a store holds, per ``StoreKey`` (provider, kind, base name):

- **records**: full digest (64 hex) → ``Record`` (remote id, provider-side name, version,
  free JSON ``data`` such as an ARN, ``created_at``/``updated_at`` stamped by the store's clock);
- **tags**: tag → digest, a movable pointer (V-32);
- **claims**: digest → who is creating it right now, with a lease (see below).

Operations are synchronous and thread-safe; every store returns the same shapes (a ``Record``
read back is JSON-normalized whatever the store, V-14 Better). ``put`` is create-if-absent:
two racers converge on the first record written, and both get that record back.
``resolve("base:tag")`` is ``UnknownTag`` when the tag is missing and ``UntrackedDigest`` when
it points at a digest without a record — never a fallback to another version (V-34).

**Claims.** ``claim(key, digest, owner, lease)`` atomically answers one of
``Existing(record)`` (nothing to do), ``Held(owner, expires_at)`` (someone else is creating
it: wait and ask again) or ``Acquired(claim)`` (you create it; finish with
``put(..., claim=claim)``, which drops the claim in the same step, or ``release(claim)`` on
failure). A claim expires ``lease`` seconds after it was taken or last ``renew``-ed, so a
creator that crashed blocks the others for at most one lease. Expiry uses the store's wall
clock (``time.time`` — comparable across processes; several *hosts* sharing one store need
synchronized clocks). Claims only avoid wasted duplicate creates: correctness rests on the
deterministic provider-side names, so a creator that crashed after the remote create is
recovered by the next one's 409-by-name path, and ``put`` stays create-if-absent.

**Calling from async code.** Stores are synchronous (SQLite and file locks block); async code runs
them in worker threads — ``await anyio.to_thread.run_sync(store.get, key, digest)`` — as
``ensure_record`` does. A store object may be shared by threads of one process; each process
opens its own.

Failures to read or write are ``StoreError`` exceptions (not values: they are not expected
outcomes, and the provisioning flows decide whether a failing store blocks them, V-13).
What this module is not: it knows no provider and makes no remote call.
"""

from __future__ import annotations

import abc
import functools
import logging
import math
import os
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final, Protocol, Self, TypeVar

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.provisioning.errors import InvalidRef, UnknownTag, UntrackedDigest
from rma.provisioning.identity import check_base, check_tag, is_digest, json_value, parse_ref, short_digest
from rma.vocabulary import JSON
from rma_shell.options import renamed_options
from rma_shell.seams import Seams, pick

log = logging.getLogger("rma.stores")

DEFAULT_LEASE_S: Final = 60.0
"""How long a claim lasts without renewal; ``ensure_record`` renews every third of it."""

DEFAULT_POLL_S: Final = 0.5
"""How often ``ensure_record`` asks again while another creator holds the claim."""

_SLUG = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


class StoreError(Exception):
    """A store could not be read or written (disk, permissions, database errors, a file
    written by a newer rma). Carries the underlying exception as ``__cause__``."""


def _slug(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not _SLUG.fullmatch(value):
        raise ValueError(f"{attribute.name} must match [a-z][a-z0-9_.-]{{0,63}}, got {value!r}")


def _base(_inst: object, _attribute: attrs.Attribute[str], value: str) -> None:
    checked = check_base(value)
    if isinstance(checked, Failure):
        raise ValueError(checked.failure().message)


@attrs.frozen
class StoreKey:
    """Where records and tags live: one provider, one kind of resource, one base name.

    ``provider`` and ``kind`` are short slugs (``claude_managed_agents``/``agent``,
    ``bedrock_agent_core``/``harness``); ``base`` is the user's name for the lineage
    (``support_bot``) — non-empty, no colon, no control characters.
    """

    provider: str = attrs.field(validator=_slug)
    kind: str = attrs.field(validator=_slug)
    base: str = attrs.field(validator=_base)


def _data(value: Mapping[str, JSON]) -> dict[str, JSON]:
    if not isinstance(value, Mapping):
        raise ValueError(f"record data must be a JSON object, got {type(value).__name__}")
    plain = json_value(value, "data")
    if isinstance(plain, Failure):
        raise ValueError(plain.failure().message)
    result: dict[str, JSON] = plain.unwrap()
    return result


@attrs.frozen
class Entry:
    """What a creator hands to ``put``: the remote resource it created or adopted."""

    remote_id: str
    name: str
    version: int | None = None
    data: Mapping[str, JSON] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.remote_id, str) or not self.remote_id:
            raise ValueError(f"remote_id must be a non-empty string, got {self.remote_id!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if self.version is not None and (not isinstance(self.version, int) or isinstance(self.version, bool)):
            raise ValueError(f"version must be an int or None, got {self.version!r}")


@attrs.frozen
class Record:
    """A stored provisioning result (one remote resource for one digest under one key)."""

    key: StoreKey
    digest: str
    remote_id: str
    name: str
    version: int | None
    data: dict[str, JSON]
    created_at: float
    updated_at: float

    @property
    def short_digest(self) -> str:
        return short_digest(self.digest)

    @property
    def entry(self) -> Entry:
        return Entry(remote_id=self.remote_id, name=self.name, version=self.version, data=self.data)


@attrs.frozen
class Claim:
    """The right to create ``digest`` under ``key`` until ``expires_at`` (store clock, epoch s)."""

    key: StoreKey
    digest: str
    owner: str
    token: str
    expires_at: float


@attrs.frozen
class Existing:
    """``claim`` found a record: nothing to create."""

    record: Record


@attrs.frozen
class Acquired:
    """``claim`` succeeded: create, then ``put(..., claim=claim)`` or ``release(claim)``."""

    claim: Claim


@attrs.frozen
class Held:
    """Another creator holds an unexpired claim."""

    owner: str
    expires_at: float


ClaimOutcome = Existing | Acquired | Held
ResolveError = InvalidRef | UnknownTag | UntrackedDigest
TagError = InvalidRef | UntrackedDigest


@attrs.frozen
class StoreCorrupt:
    """A store file that could not be read as a store (reported, then rewritten on the next
    write; the unreadable bytes are kept at ``backup`` when they were saved)."""

    path: str
    detail: str
    backup: str | None = None


class Store(Protocol):
    """The contract every store meets (pinned by ``tests/stores/test_store_contract.py``)."""

    def get(self, key: StoreKey, digest: str) -> Record | None: ...

    def put(self, key: StoreKey, digest: str, entry: Entry, *, claim: Claim | None = None) -> Record: ...

    def replace(self, key: StoreKey, digest: str, entry: Entry) -> Record: ...

    def records(self, key: StoreKey) -> list[Record]: ...

    def digests(self, key: StoreKey) -> list[str]: ...

    def delete(self, key: StoreKey, digests: Iterable[str]) -> int: ...

    def delete_remote(self, provider: str, remote_id: str) -> int: ...

    def set_tag(self, key: StoreKey, tag: str, digest: str) -> Result[None, TagError]: ...

    def get_tag(self, key: StoreKey, tag: str) -> str | None: ...

    def remove_tag(self, key: StoreKey, tag: str) -> bool: ...

    def tags(self, key: StoreKey) -> dict[str, str]: ...

    def resolve(self, ref: str, *, provider: str, kind: str) -> Result[Record, ResolveError]: ...

    def claim(
        self, key: StoreKey, digest: str, owner: str, lease: float = DEFAULT_LEASE_S
    ) -> ClaimOutcome: ...

    def renew(self, claim: Claim, lease: float = DEFAULT_LEASE_S) -> Claim | None: ...

    def release(self, claim: Claim) -> bool: ...

    def close(self) -> None: ...


def _digest(digest: str) -> str:
    if not is_digest(digest):
        raise ValueError(f"a store keys records by the full digest (64 lowercase hex), got {digest!r}")
    return digest


def _positive(name: str, seconds: float) -> float:
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


def _lease(lease: float) -> float:
    return _positive("lease", lease)


class BaseStore(abc.ABC):
    """Validation, clock and token minting shared by the stores; subclasses implement the
    ``_``-prefixed primitives atomically (one lock, one file rewrite or one transaction)."""

    def __init__(self, *, _seams: Seams | None = None) -> None:
        self._clock: Callable[[], float] = pick(_seams, "clock", time.time)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- public API (validates, then calls a primitive) ----------------------------------

    def get(self, key: StoreKey, digest: str) -> Record | None:
        return self._get(key, _digest(digest))

    def put(self, key: StoreKey, digest: str, entry: Entry, *, claim: Claim | None = None) -> Record:
        """Create-if-absent: store ``entry`` unless a record exists, and return the stored
        record. A ``claim`` for the same key and digest is dropped in the same step."""
        if claim is not None and (claim.key != key or claim.digest != digest):
            raise ValueError("the claim is for another key or digest")
        return self._put(key, _digest(digest), _entry(entry), claim, self._clock())

    def replace(self, key: StoreKey, digest: str, entry: Entry) -> Record:
        """Overwrite the record's entry (its remote resource was rebuilt); keeps ``created_at``."""
        return self._replace(key, _digest(digest), _entry(entry), self._clock())

    def records(self, key: StoreKey) -> list[Record]:
        """Every record under ``key``, newest first (``created_at``, then insertion order)."""
        return self._records(key)

    def digests(self, key: StoreKey) -> list[str]:
        """The digests under ``key``, newest first."""
        return [r.digest for r in self._records(key)]

    def delete(self, key: StoreKey, digests: Iterable[str]) -> int:
        """Remove records (tags pointing at them stay, and resolve to ``UntrackedDigest``)."""
        wanted = [_digest(d) for d in ([digests] if isinstance(digests, str) else digests)]
        return self._delete(key, wanted) if wanted else 0

    def delete_remote(self, provider: str, remote_id: str) -> int:
        """Remove every record of ``provider`` holding ``remote_id`` (teardown's eviction, V-15)."""
        return self._delete_remote(provider, remote_id)

    def set_tag(self, key: StoreKey, tag: str, digest: str) -> Result[None, TagError]:
        """Point ``tag`` at ``digest`` (moving it if it pointed elsewhere). Only a stored digest
        can be tagged: an unknown one is ``UntrackedDigest``."""
        checked = check_tag(tag, key.base)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        if not self._set_tag(key, tag, _digest(digest), self._clock()):
            return Failure(UntrackedDigest(base=key.base, digest=digest, tag=tag))
        return Success(None)

    def get_tag(self, key: StoreKey, tag: str) -> str | None:
        return self._get_tag(key, tag)

    def remove_tag(self, key: StoreKey, tag: str) -> bool:
        return self._remove_tag(key, tag)

    def tags(self, key: StoreKey) -> dict[str, str]:
        """tag → digest under ``key``, sorted by tag."""
        return dict(sorted(self._tags(key).items()))

    def resolve(self, ref: str, *, provider: str, kind: str) -> Result[Record, ResolveError]:
        """``base:tag`` → the tagged record, read atomically; never a fallback (V-34)."""
        parsed = parse_ref(ref)
        if isinstance(parsed, Failure):
            return Failure(parsed.failure())
        base, tag = parsed.unwrap().base, parsed.unwrap().tag
        digest, record = self._resolve(StoreKey(provider=provider, kind=kind, base=base), tag)
        if digest is None:
            return Failure(UnknownTag(base=base, tag=tag))
        if record is None:
            return Failure(UntrackedDigest(base=base, digest=digest, tag=tag))
        return Success(record)

    @renamed_options("Store.claim")
    def claim(self, key: StoreKey, digest: str, owner: str, lease: float = DEFAULT_LEASE_S) -> ClaimOutcome:
        """Existing, Held or Acquired — decided atomically (see the module docstring);
        ``lease``: seconds the claim holds unless renewed."""
        if not isinstance(owner, str) or not owner:
            raise ValueError("owner must be a non-empty string")
        return self._claim(key, _digest(digest), owner, _lease(lease), self._clock(), uuid.uuid4().hex)

    @renamed_options("Store.renew")
    def renew(self, claim: Claim, lease: float = DEFAULT_LEASE_S) -> Claim | None:
        """Extend a claim still held; None when it was lost (expired and taken, or dropped)."""
        return self._renew(claim, _lease(lease), self._clock())

    def release(self, claim: Claim) -> bool:
        """Drop a claim if it is still this one; False when it was lost meanwhile."""
        return self._release(claim)

    def close(self) -> None:  # noqa: B027 - stores without resources need nothing
        """Release files and connections. The store is unusable afterwards."""

    # -- primitives -----------------------------------------------------------------------

    @abc.abstractmethod
    def _get(self, key: StoreKey, digest: str) -> Record | None: ...

    @abc.abstractmethod
    def _put(self, key: StoreKey, digest: str, entry: Entry, claim: Claim | None, now: float) -> Record: ...

    @abc.abstractmethod
    def _replace(self, key: StoreKey, digest: str, entry: Entry, now: float) -> Record: ...

    @abc.abstractmethod
    def _records(self, key: StoreKey) -> list[Record]: ...

    @abc.abstractmethod
    def _delete(self, key: StoreKey, digests: list[str]) -> int: ...

    @abc.abstractmethod
    def _delete_remote(self, provider: str, remote_id: str) -> int: ...

    @abc.abstractmethod
    def _set_tag(self, key: StoreKey, tag: str, digest: str, now: float) -> bool: ...

    @abc.abstractmethod
    def _get_tag(self, key: StoreKey, tag: str) -> str | None: ...

    @abc.abstractmethod
    def _remove_tag(self, key: StoreKey, tag: str) -> bool: ...

    @abc.abstractmethod
    def _tags(self, key: StoreKey) -> dict[str, str]: ...

    @abc.abstractmethod
    def _resolve(self, key: StoreKey, tag: str) -> tuple[str | None, Record | None]: ...

    @abc.abstractmethod
    def _claim(
        self, key: StoreKey, digest: str, owner: str, lease_s: float, now: float, token: str
    ) -> ClaimOutcome: ...

    @abc.abstractmethod
    def _renew(self, claim: Claim, lease_s: float, now: float) -> Claim | None: ...

    @abc.abstractmethod
    def _release(self, claim: Claim) -> bool: ...


def _entry(entry: Entry) -> Entry:
    if not isinstance(entry, Entry):
        raise TypeError(f"expected an Entry, got {type(entry).__name__}")
    return attrs.evolve(entry, data=_data(entry.data))


# --- ensure ---------------------------------------------------------------------------------

E = TypeVar("E")


@attrs.frozen
class Ensured:
    """What ``ensure_record`` returns: the stored record, and whether this call ran ``build``."""

    record: Record
    built: bool


def default_owner() -> str:
    """``host:pid`` — who holds a claim, for diagnostics (claims are decided by token)."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def _keep_claim(store: Store, claim: Claim, lease_s: float, every_s: float) -> None:
    while True:
        await anyio.sleep(every_s)
        try:
            renewed = await anyio.to_thread.run_sync(store.renew, claim, lease_s)
        except StoreError as exc:
            log.warning(
                "could not renew the claim on %s: %s", claim.digest, exc, extra={"digest": claim.digest}
            )
            continue
        if renewed is None:
            log.warning(
                "lost the claim on %s (lease expired and taken); a duplicate create will be arbitrated "
                "by name",
                claim.digest,
                extra={"digest": claim.digest},
            )
            return


async def _release_quietly(store: Store, claim: Claim) -> None:
    # Never mask the build's own outcome: an unreleased claim only delays others one lease.
    try:
        await anyio.to_thread.run_sync(store.release, claim)
    except StoreError as exc:
        log.warning(
            "could not release the claim on %s: %s", claim.digest, exc, extra={"digest": claim.digest}
        )


async def _build_holding(
    store: Store,
    claim: Claim,
    lease_s: float,
    every_s: float,
    build: Callable[[], Awaitable[Result[Entry, E]]],
) -> Result[Entry, E]:
    """``build()`` while a background task renews the claim; the build's own exception comes
    out as itself, not wrapped in the nursery's exception group."""
    try:
        async with anyio.create_task_group() as nursery:
            nursery.start_soon(_keep_claim, store, claim, lease_s, every_s)
            try:
                return await build()
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    raise AssertionError("unreachable: the task group returned without the build's result")


@renamed_options("ensure_record")
async def ensure_record(
    store: Store,
    key: StoreKey,
    digest: str,
    build: Callable[[], Awaitable[Result[Entry, E]]],
    *,
    owner: str | None = None,
    lease: float = DEFAULT_LEASE_S,
    poll_interval: float = DEFAULT_POLL_S,
    renew_every: float | None = None,
) -> Result[Ensured, E]:
    """The record for ``digest`` under ``key``, running ``build`` only when nobody has or is
    making it — across threads, tasks and processes sharing the store.

    Loop: ``claim`` → ``Existing``: return it. ``Held``: sleep ``poll_interval`` seconds and
    ask again (a crashed holder's lease runs out). ``Acquired``: run ``build`` while a
    background task renews the claim every ``renew_every`` seconds (default ``lease / 3``);
    ``Success(entry)`` → ``put(..., claim=...)`` and return what the store holds; ``Failure``
    → release the claim and return the failure (the next caller tries again); an exception or cancellation →
    release (shielded) and re-raise.
    Store calls run in worker threads. Bound the wait with a cancel scope (``anyio.move_on_after``).
    """
    who = owner or default_owner()
    lease_s = _lease(lease)
    every_s = _positive("renew_every", lease_s / 3 if renew_every is None else renew_every)
    poll_s = _positive("poll_interval", poll_interval)
    while True:
        outcome = await anyio.to_thread.run_sync(store.claim, key, digest, who, lease_s)
        if isinstance(outcome, Existing):
            return Success(Ensured(record=outcome.record, built=False))
        if isinstance(outcome, Held):
            await anyio.sleep(poll_s)
            continue
        claim = outcome.claim
        try:
            result = await _build_holding(store, claim, lease_s, every_s, build)
            if isinstance(result, Failure):
                await _release_quietly(store, claim)
                return Failure(result.failure())
            put = functools.partial(store.put, key, digest, result.unwrap(), claim=claim)
            record = await anyio.to_thread.run_sync(put)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await _release_quietly(store, claim)
            raise
        return Success(Ensured(record=record, built=True))
