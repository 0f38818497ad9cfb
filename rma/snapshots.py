"""Snapshot deltas: what turns one reattach snapshot into the next, and back. Pure.

A provider's reattach snapshot (``Provider.snapshot``: a JSON mapping) is written again
whenever a turn changes it — into the journal's event records (``rma.journal``) and into a
Temporal activity's output (``rma_shell.temporal``). A Local snapshot holds the whole
conversation and what its guards remember of the request, so writing it whole every turn
makes a long session quadratic. A **delta** holds only what changed, per key of a mapping:

- ``{"$extend": tail}`` — a list that grew at its end;
- ``{"$delta": {...}}`` — a mapping that changed (the same, one level down);
- ``{"$set": value}`` — anything else that changed, or a key that is new;
- ``{"$del": true}`` — a key that went;

unchanged keys are left out; a snapshot that is not a mapping is ``{"$set": new}`` whole.
``apply(old, delta(old, new)) == plain(new)``.

A snapshot's sequences may be persistent logs (``rma._persistent.AppendLog``, as Local's
history and its calls seen are): when the new snapshot's log is a later version of the old
one's, its tail is read in O(what it added) instead of comparing the two — what makes a
journaled turn cost the same at turn 2,000 as at turn 2. Other values are compared.

What this is not: the journal's records or Temporal's payloads (each writes a delta where
its format says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rma._persistent import AppendLog
from rma.vocabulary import JSON

NO_CHANGE: Mapping[str, JSON] = {"$delta": {}}
"""The delta of two equal mappings."""


def plain(value: JSON) -> JSON:
    """``value`` with its persistent logs as lists, in it or in the mappings it holds: what a
    JSON encoder that knows nothing of them (Temporal's) can write. A log's or a list's items
    are taken as they are (a snapshot keeps logs of JSON values): this costs the mappings'
    keys and a copy of each log's list, not a walk of what they hold."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if isinstance(value, AppendLog):  # a class of its own: no ABC to ask
        return value.to_list()
    if kind is dict or isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    return value


_LEAVES = frozenset({str, int, float, bool, type(None), list, tuple})
"""What ``plain`` returns as it is, found by type (an ABC's ``isinstance`` costs more)."""


def delta(old: JSON, new: JSON) -> JSON:
    """What turns ``old`` into ``new`` (the module docstring's forms); ``NO_CHANGE`` when nothing
    did. Values in it are plain JSON (``plain``)."""
    if not _mapping(old) or not _mapping(new):
        return {"$set": plain(new)}
    out: dict[str, Any] = {}
    for key, value in new.items():
        if key not in old:
            out[key] = {"$set": plain(value)}
            continue
        before = old[key]
        if before is value:  # a provider's own value, handed over again: unchanged
            continue
        if isinstance(value, AppendLog):
            tail = value.grown_from(before)
            if tail is not None:  # a later version of the same log: what it added, unread before
                if tail:
                    out[key] = {"$extend": plain(tail)}
                continue
            value = plain(value)
        if isinstance(before, AppendLog):
            before = plain(before)
        if before == value:
            continue
        if (
            type(before) is list
            and isinstance(value, list | tuple)
            and len(value) >= len(before)
            and list(value[: len(before)]) == before
        ):
            out[key] = {"$extend": plain(value[len(before) :])}
            continue
        if _mapping(before) and _mapping(value):
            out[key] = delta(before, value)
        else:
            out[key] = {"$set": plain(value)}
    for key in old:
        if key not in new:
            out[key] = {"$del": True}
    return {"$delta": out}


def _mapping(value: object) -> bool:
    return type(value) is dict or (type(value) not in _LEAVES and isinstance(value, Mapping))


def changed(change: JSON) -> bool:
    """Whether ``change`` (a ``delta``) changes anything."""
    return bool(change != NO_CHANGE)


def apply(old: JSON, change: Any, *, owned: bool = False) -> JSON:
    """``delta``'s inverse: ``apply(old, delta(old, new)) == plain(new)``. ``owned``: ``old`` and
    every mapping and list in it belong to the caller alone (a journal being read), so they
    are changed in place, a long log extended in O(its tail) rather than copied per delta.
    A delta that does not fit ``old`` raises ``ValueError``."""
    if not isinstance(change, Mapping):
        raise ValueError(f"a snapshot delta is a mapping, not {type(change).__name__}")
    if "$set" in change:
        return change["$set"]
    changes = change.get("$delta")
    if not isinstance(old, Mapping) or not isinstance(changes, Mapping):
        raise ValueError("a snapshot delta that does not fit the snapshot it follows")
    out: dict[str, Any] = old if owned and isinstance(old, dict) else dict(old)
    for key, step in changes.items():
        if not isinstance(step, Mapping):
            raise ValueError(f"snapshot delta of {key!r} is not a change")
        if "$del" in step:
            out.pop(key, None)
        elif "$extend" in step:
            current = out.get(key)
            if not isinstance(current, list) or not isinstance(step["$extend"], list):
                raise ValueError(f"snapshot delta extends {key!r}, which is not a list")
            if owned:
                current.extend(step["$extend"])
            else:
                out[key] = [*current, *step["$extend"]]
        elif "$delta" in step:
            out[key] = apply(out.get(key), step, owned=owned)
        elif "$set" in step:
            out[key] = step["$set"]
        else:
            raise ValueError(f"snapshot delta of {key!r} is not a change")
    return out


__all__ = ["NO_CHANGE", "apply", "changed", "delta", "plain"]
