"""Persistent append-only containers for the session state.

The session machine's state is a frozen value, but it accumulates events, tool uses and
raw usage for the whole request. Rebuilding a tuple on every append would make a long
session quadratic (the reference's S-33 weakness). These containers share one backing
store between versions: appending to the newest version is O(1) amortized; appending to
an older version (a fork, as hypothesis or a replay may do) copies its prefix first, so
every version keeps seeing exactly what it held. They are not general-purpose
collections: no removal, no slicing beyond what the session needs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import Generic, TypeVar

T = TypeVar("T")

# A version that shares its store is built without ``__init__``, which would make a fresh one.
_new = object.__new__


class AppendLog(Generic[T]):
    """An immutable sequence view ``store[:size]`` over a shared, growing list."""

    __slots__ = ("_size", "_store")

    def __init__(self, store: list[T] | None = None, size: int = 0) -> None:
        self._store: list[T] = store if store is not None else []
        self._size = size

    @classmethod
    def of(cls, items: Iterable[T]) -> AppendLog[T]:
        store = list(items)
        return cls(store, len(store))

    def append(self, item: T) -> AppendLog[T]:
        store, size = self._store, self._size
        if len(store) != size:
            # Someone appended to this store after this version was made: fork.
            store = store[:size]
        store.append(item)
        return AppendLog(store, size + 1)

    def extend(self, items: Iterable[T]) -> AppendLog[T]:
        store = self._store
        if len(store) != self._size:
            store = store[: self._size]
        store.extend(items)
        return AppendLog(store, len(store))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[T]:
        store = self._store
        for i in range(self._size):
            yield store[i]

    def __getitem__(self, index: int) -> T:
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        return self._store[index]

    def to_tuple(self) -> tuple[T, ...]:
        return tuple(self._store[: self._size])

    def to_list(self) -> list[T]:
        return self._store[: self._size]

    def grown_from(self, older: object) -> list[T] | None:
        """What this version holds past ``older``, when ``older`` is an earlier version of the
        same log (one store, no longer): O(what was added), nothing compared. None otherwise."""
        if isinstance(older, AppendLog) and older._store is self._store and older._size <= self._size:
            return self._store[older._size : self._size]
        return None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AppendLog):
            return self.to_tuple() == other.to_tuple()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.to_tuple())

    def __repr__(self) -> str:
        return f"AppendLog(size={self._size})"


class SeenIds:
    """A persistent, bounded set of event ids (the dedupe memory of a streaming session).

    Membership holds for the most recent ``window`` insertions; older ids are forgotten and
    the backing dict is compacted once it holds twice the window, so a live session that
    runs for days keeps O(window) memory (the reference's R-17 weakness).
    """

    __slots__ = ("_index", "_order", "_size", "window")

    def __init__(
        self,
        window: int = 65_536,
        index: dict[str, int] | None = None,
        order: list[str] | None = None,
        size: int = 0,
    ) -> None:
        self.window = window
        self._index: dict[str, int] = index if index is not None else {}
        self._order: list[str] = order if order is not None else []
        self._size = size

    def __contains__(self, event_id: object) -> bool:
        if not isinstance(event_id, str):
            return False
        at = self._index.get(event_id)
        if at is None or at >= self._size:
            return False
        return at >= self._size - self.window

    def __len__(self) -> int:
        return min(self._size, self.window)

    def add(self, event_id: str) -> SeenIds:
        if event_id in self:
            return self
        return self._insert(event_id)

    def _insert(self, event_id: str) -> SeenIds:
        index, order = self._index, self._order
        # Fork when the store moved on, or when the id is in the shared index but outside
        # this version's window: overwriting its entry would change what older versions see.
        if len(order) != self._size or event_id in index:
            order = order[: self._size]
            index = {k: v for k, v in index.items() if v < self._size}
        if len(order) >= 2 * self.window:
            keep = order[-self.window :]
            order = list(keep)
            index = {k: i for i, k in enumerate(order)}
        index[event_id] = len(order)
        order.append(event_id)
        return SeenIds(self.window, index, order, len(order))

    def union(self, ids: Iterable[str]) -> SeenIds:
        out = self
        for i in ids:
            out = out.add(i)
        return out

    def ids(self) -> tuple[str, ...]:
        start = max(0, self._size - self.window)
        return tuple(self._order[start : self._size])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SeenIds):
            return set(self.ids()) == set(other.ids())
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self.ids()))

    def __repr__(self) -> str:
        return f"SeenIds(size={len(self)}, window={self.window})"


class _JoinedStore:
    """The shared backing store of ``JoinedBytes`` versions."""

    __slots__ = ("buffer", "starts")

    def __init__(self, buffer: bytearray, starts: list[int]) -> None:
        self.buffer = buffer
        self.starts = starts


class JoinedBytes:
    """An immutable sequence of byte strings, held already joined by ``sep``.

    A request body that carries a whole history then costs one copy of these bytes
    instead of a walk over its items. Versions share one growing ``bytearray`` the way
    ``AppendLog`` versions share a list: extending the newest version appends in place,
    extending an older one copies its prefix first. No memoryview of the buffer outlives
    a method call (a live export would make the next in-place append fail).
    """

    __slots__ = ("_count", "_nbytes", "_sep", "_store")

    def __init__(self, sep: bytes = b",") -> None:
        self._sep = sep
        self._store = _JoinedStore(bytearray(), [])
        self._count = 0
        self._nbytes = 0

    @classmethod
    def of(cls, items: Iterable[bytes], sep: bytes = b",") -> JoinedBytes:
        return cls(sep).extend(items)

    @property
    def sep(self) -> bytes:
        return self._sep

    def extend(self, items: Iterable[bytes]) -> JoinedBytes:
        store, count, nbytes, sep = self._store, self._count, self._nbytes, self._sep
        if len(store.starts) != count:
            # Someone extended this store after this version was made: fork.
            store = _JoinedStore(bytearray(store.buffer[:nbytes]), store.starts[:count])
        buffer, starts = store.buffer, store.starts
        for item in items:
            if starts:
                buffer += sep
            starts.append(len(buffer))
            buffer += item
        if len(starts) == count and store is self._store:
            return self
        new: JoinedBytes = _new(JoinedBytes)
        new._sep = sep
        new._store = store
        new._count = len(starts)
        new._nbytes = len(buffer)
        return new

    def __len__(self) -> int:
        return self._count

    def _span(self, start: int, stop: int) -> tuple[int, int]:
        """Byte offsets of items ``start..stop-1`` joined (``0 <= start < stop <= len``)."""
        starts = self._store.starts
        end = self._nbytes if stop == self._count else starts[stop] - len(self._sep)
        return starts[start], end

    def __getitem__(self, index: int) -> bytes:
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        lo, hi = self._span(index, index + 1)
        return bytes(self._store.buffer[lo:hi])

    def to_tuple(self) -> tuple[bytes, ...]:
        return tuple(self[i] for i in range(self._count))

    def splice(self, head: bytes, ranges: Iterable[tuple[int, int]], tail: bytes) -> bytes:
        """``head + sep.join(items of every [start, stop) range, in order) + tail``, copied once.

        Ranges are clipped to the sequence; empty ones are skipped.
        """
        buffer = self._store.buffer
        spans: list[tuple[int, int]] = []
        for start, stop in ranges:
            start, stop = max(0, start), min(stop, self._count)
            if start < stop:
                spans.append(self._span(start, stop))
        if len(spans) == 1 and spans[0] == (0, len(buffer)):
            return b"".join((head, buffer, tail))  # the newest version, whole: no view needed
        with memoryview(buffer) as view:
            parts: list[bytes | memoryview] = [head]
            for n, (lo, hi) in enumerate(spans):
                if n:
                    parts.append(self._sep)
                parts.append(view[lo:hi])
            parts.append(tail)
            try:
                return b"".join(parts)
            finally:
                for part in parts:
                    if isinstance(part, memoryview):
                        part.release()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JoinedBytes):
            return self._sep == other._sep and self.to_tuple() == other.to_tuple()
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._sep, self.to_tuple()))

    def __repr__(self) -> str:
        return f"JoinedBytes(size={self._count}, bytes={self._nbytes})"


H = TypeVar("H", bound=Hashable)


class GrowOnlySet(AbstractSet[H]):
    """An immutable set that only grows; versions share one dict of item → insertion index,
    and one ``AppendLog`` of the items in that order (``ordered``).

    ``add`` on the newest version is O(1) (a set rebuilt per addition makes a long request
    quadratic); on an older version it copies that version's items first, as ``AppendLog``
    does. It is a ``collections.abc.Set``: it compares equal to a ``frozenset`` with the same
    items, and hashes like one.
    """

    __slots__ = ("_index", "_log", "_size")

    def __init__(self, items: Iterable[H] = ()) -> None:
        self._index: dict[H, int] = {}
        order: list[H] = []
        for item in items:
            if item not in self._index:
                self._index[item] = len(order)
                order.append(item)
        self._size = len(order)
        self._log: AppendLog[H] = AppendLog(order, len(order))

    def __contains__(self, item: object) -> bool:
        try:
            at = self._index.get(item)  # type: ignore[arg-type]
        except TypeError:  # unhashable: never a member
            return False
        return at is not None and at < self._size

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[H]:
        return iter(self._log)

    def ordered(self) -> AppendLog[H]:
        """The items in the order they were added, as a log later versions extend (a snapshot
        writes what a version added: ``rma.snapshots``). O(1)."""
        return self._log

    def add(self, item: H) -> GrowOnlySet[H]:
        if item in self:
            return self
        index, size = self._index, self._size
        if len(index) != size:
            # Someone added to this store after this version was made: fork.
            index = {k: at for k, at in index.items() if at < size}
        index[item] = size
        new: GrowOnlySet[H] = _new(GrowOnlySet)
        new._index = index
        new._size = size + 1
        new._log = self._log.append(item)  # forks the same way, on its own
        return new

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"GrowOnlySet(size={self._size})"
