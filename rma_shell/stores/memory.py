"""The in-memory store, and the document model it shares with the JSON file store.

What this is: ``State`` — the whole store as plain data (records, tags, claims, an insertion
counter) with its JSON form — and ``DocumentStore``, which implements every store primitive
on a ``State`` obtained from ``_open``. ``MemoryStore`` keeps one ``State`` behind a lock:
empty in every new process and in every new object (V-41 [BEAM]: an object, not a named
process-wide table — pass the same store to the calls that should share it).
What it is not: persistent. Use ``SqliteStore`` for anything that outlives a process.
"""

from __future__ import annotations

import abc
import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

from rma.provisioning.identity import is_digest
from rma.vocabulary import JSON
from rma_shell.seams import Seams
from rma_shell.stores.base import (
    Acquired,
    BaseStore,
    Claim,
    ClaimOutcome,
    Entry,
    Existing,
    Held,
    Record,
    StoreKey,
)

FORMAT: Final = "rma.store"
FORMAT_VERSION: Final = 1

_Id = tuple[str, str, str, str]
"""(provider, kind, base, digest-or-tag)"""


def _copy(data: JSON) -> Any:
    # A fresh tree per read: callers can never mutate what the store holds.
    return json.loads(json.dumps(data))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class State:
    """The store's content as plain data. Not thread-safe by itself."""

    def __init__(self) -> None:
        self.records: dict[_Id, dict[str, Any]] = {}
        self.tags: dict[_Id, dict[str, Any]] = {}
        self.claims: dict[_Id, dict[str, Any]] = {}
        self.seq = 0

    def to_json(self) -> dict[str, JSON]:
        def row(ident: _Id, names: tuple[str, str, str, str], body: Mapping[str, Any]) -> dict[str, JSON]:
            return {**dict(zip(names, ident, strict=True)), **body}

        record_id = ("provider", "kind", "base", "digest")
        tag_id = ("provider", "kind", "base", "tag")
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "seq": self.seq,
            "records": [row(i, record_id, b) for i, b in self.records.items()],
            "tags": [row(i, tag_id, b) for i, b in self.tags.items()],
            "claims": [row(i, record_id, b) for i, b in self.claims.items()],
        }

    @classmethod
    def from_json(cls, doc: object) -> tuple[State, list[str]]:
        """A state from a decoded document, and what had to be skipped. Raises ``ValueError``
        when the document is not a store at all; a newer format version is ``LookupError``."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not an rma store document")
        version = doc.get("version")
        if not isinstance(version, int) or version < 1:
            raise ValueError(f"bad format version {version!r}")
        if version > FORMAT_VERSION:
            raise LookupError(f"written by a newer rma (format version {version})")
        state, skipped = cls(), []
        state.seq = doc["seq"] if isinstance(doc.get("seq"), int) else 0
        for section, target, last in (
            ("records", state.records, "digest"),
            ("tags", state.tags, "tag"),
            ("claims", state.claims, "digest"),
        ):
            rows = doc.get(section, [])
            if not isinstance(rows, list):
                skipped.append(f"{section}: not a list")
                continue
            for n, row in enumerate(rows):
                parsed = _parse_row(section, row, last)
                if parsed is None:
                    skipped.append(f"{section}[{n}]")
                    continue
                ident, body = parsed
                target[ident] = body
                if section == "records":
                    state.seq = max(state.seq, body["seq"])
        return state, skipped


def _parse_row(section: str, row: object, last: str) -> tuple[_Id, dict[str, Any]] | None:
    if not isinstance(row, dict):
        return None
    try:
        key = StoreKey(provider=row["provider"], kind=row["kind"], base=row["base"])
        tail = row[last]
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(tail, str) or (last == "digest" and not is_digest(tail)):
        return None
    body = {k: v for k, v in row.items() if k not in ("provider", "kind", "base", last)}
    if section == "records":
        ok = (
            isinstance(body.get("remote_id"), str)
            and isinstance(body.get("name"), str)
            and (body.get("version") is None or type(body.get("version")) is int)
            and isinstance(body.get("data"), dict)
            and _number(body.get("created_at"))
            and _number(body.get("updated_at"))
            and type(body.get("seq")) is int
        )
    elif section == "tags":
        ok = is_digest(body.get("digest")) and _number(body.get("updated_at"))
    else:
        ok = (
            isinstance(body.get("owner"), str)
            and isinstance(body.get("token"), str)
            and _number(body.get("acquired_at"))
            and _number(body.get("expires_at"))
        )
    return ((key.provider, key.kind, key.base, tail), body) if ok else None


def _rid(key: StoreKey, tail: str) -> _Id:
    return (key.provider, key.kind, key.base, tail)


def _record(ident: _Id, body: Mapping[str, Any]) -> Record:
    return Record(
        key=StoreKey(provider=ident[0], kind=ident[1], base=ident[2]),
        digest=ident[3],
        remote_id=body["remote_id"],
        name=body["name"],
        version=body["version"],
        data=_copy(body["data"]),
        created_at=float(body["created_at"]),
        updated_at=float(body["updated_at"]),
    )


class DocumentStore(BaseStore):
    """Every store primitive over a ``State``; subclasses say how to open one atomically."""

    @abc.abstractmethod
    def _open(self, write: bool) -> contextlib.AbstractContextManager[State]:
        """The state, exclusively held for the duration; written back on exit when ``write``."""

    def _get(self, key: StoreKey, digest: str) -> Record | None:
        with self._open(write=False) as state:
            body = state.records.get(_rid(key, digest))
            return None if body is None else _record(_rid(key, digest), body)

    @staticmethod
    def _insert(state: State, ident: _Id, entry: Entry, now: float) -> dict[str, Any]:
        state.seq += 1
        body = {
            "remote_id": entry.remote_id,
            "name": entry.name,
            "version": entry.version,
            "data": _copy(dict(entry.data)),
            "created_at": now,
            "updated_at": now,
            "seq": state.seq,
        }
        state.records[ident] = body
        return body

    def _put(self, key: StoreKey, digest: str, entry: Entry, claim: Claim | None, now: float) -> Record:
        ident = _rid(key, digest)
        with self._open(write=True) as state:
            body = state.records.get(ident) or self._insert(state, ident, entry, now)
            if claim is not None and state.claims.get(ident, {}).get("token") == claim.token:
                del state.claims[ident]
            return _record(ident, body)

    def _replace(self, key: StoreKey, digest: str, entry: Entry, now: float) -> Record:
        ident = _rid(key, digest)
        with self._open(write=True) as state:
            body = state.records.get(ident)
            if body is None:
                body = self._insert(state, ident, entry, now)
            else:
                body.update(
                    remote_id=entry.remote_id,
                    name=entry.name,
                    version=entry.version,
                    data=_copy(dict(entry.data)),
                    updated_at=now,
                )
            return _record(ident, body)

    def _records(self, key: StoreKey) -> list[Record]:
        with self._open(write=False) as state:
            mine = [(i, b) for i, b in state.records.items() if i[:3] == _rid(key, "")[:3]]
            mine.sort(key=lambda item: (item[1]["created_at"], item[1]["seq"]), reverse=True)
            return [_record(i, b) for i, b in mine]

    def _delete(self, key: StoreKey, digests: list[str]) -> int:
        with self._open(write=True) as state:
            gone = [ident for ident in {_rid(key, d) for d in digests} if ident in state.records]
            for ident in gone:
                del state.records[ident]
            return len(gone)

    def _delete_remote(self, provider: str, remote_id: str) -> int:
        with self._open(write=True) as state:
            gone = [i for i, b in state.records.items() if i[0] == provider and b["remote_id"] == remote_id]
            for ident in gone:
                del state.records[ident]
            return len(gone)

    def _set_tag(self, key: StoreKey, tag: str, digest: str, now: float) -> bool:
        with self._open(write=True) as state:
            if _rid(key, digest) not in state.records:
                return False
            state.tags[_rid(key, tag)] = {"digest": digest, "updated_at": now}
            return True

    def _get_tag(self, key: StoreKey, tag: str) -> str | None:
        with self._open(write=False) as state:
            body = state.tags.get(_rid(key, tag))
            return None if body is None else str(body["digest"])

    def _remove_tag(self, key: StoreKey, tag: str) -> bool:
        with self._open(write=True) as state:
            return state.tags.pop(_rid(key, tag), None) is not None

    def _tags(self, key: StoreKey) -> dict[str, str]:
        with self._open(write=False) as state:
            prefix = _rid(key, "")[:3]
            return {i[3]: str(b["digest"]) for i, b in state.tags.items() if i[:3] == prefix}

    def _resolve(self, key: StoreKey, tag: str) -> tuple[str | None, Record | None]:
        with self._open(write=False) as state:
            body = state.tags.get(_rid(key, tag))
            if body is None:
                return None, None
            digest = str(body["digest"])
            record = state.records.get(_rid(key, digest))
            return digest, None if record is None else _record(_rid(key, digest), record)

    def _claim(
        self, key: StoreKey, digest: str, owner: str, lease_s: float, now: float, token: str
    ) -> ClaimOutcome:
        ident = _rid(key, digest)
        with self._open(write=True) as state:
            record = state.records.get(ident)
            if record is not None:
                return Existing(_record(ident, record))
            held = state.claims.get(ident)
            if held is not None and held["expires_at"] > now:
                return Held(owner=held["owner"], expires_at=float(held["expires_at"]))
            expires = now + lease_s
            state.claims[ident] = {"owner": owner, "token": token, "acquired_at": now, "expires_at": expires}
            return Acquired(Claim(key=key, digest=digest, owner=owner, token=token, expires_at=expires))

    def _renew(self, claim: Claim, lease_s: float, now: float) -> Claim | None:
        ident = _rid(claim.key, claim.digest)
        with self._open(write=True) as state:
            held = state.claims.get(ident)
            if held is None or held["token"] != claim.token:
                return None
            held["expires_at"] = now + lease_s
            return Claim(
                key=claim.key,
                digest=claim.digest,
                owner=claim.owner,
                token=claim.token,
                expires_at=now + lease_s,
            )

    def _release(self, claim: Claim) -> bool:
        ident = _rid(claim.key, claim.digest)
        with self._open(write=True) as state:
            held = state.claims.get(ident)
            if held is None or held["token"] != claim.token:
                return False
            del state.claims[ident]
            return True


class MemoryStore(DocumentStore):
    """Records and tags in this object only; thread-safe."""

    def __init__(self, *, _seams: Seams | None = None) -> None:
        super().__init__(_seams=_seams)
        self._state = State()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _open(self, write: bool) -> Iterator[State]:
        with self._lock:
            yield self._state

    def reset(self) -> None:
        """Forget everything (V-46, a test helper)."""
        with self._lock:
            self._state = State()
