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

from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

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
        # Built without __init__: this runs once per streamed event.
        new: AppendLog[T] = _new(AppendLog)
        new._store = store
        new._size = size + 1
        return new

    def extend(self, items: Iterable[T]) -> AppendLog[T]:
        store = self._store
        if len(store) != self._size:
            store = store[: self._size]
        store.extend(items)
        new: AppendLog[T] = _new(AppendLog)
        new._store = store
        new._size = len(store)
        return new

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

    def add_new(self, event_id: str) -> SeenIds | None:
        """``add`` for the hot path: the next version, or None when ``event_id`` is a member."""
        index = self._index
        size = self._size
        at = index.get(event_id)
        if at is not None:
            if size - self.window <= at < size:
                return None
            return self._insert(event_id)
        order = self._order
        if len(order) != size or size >= 2 * self.window:
            return self._insert(event_id)  # a fork or a compaction
        # The newest version and a new id: append in place, share the store (as _insert does).
        index[event_id] = size
        order.append(event_id)
        new: SeenIds = _new(SeenIds)
        new.window = self.window
        new._index = index
        new._order = order
        new._size = size + 1
        return new

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
        new: SeenIds = _new(SeenIds)
        new.window = self.window
        new._index = index
        new._order = order
        new._size = len(order)
        return new

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
