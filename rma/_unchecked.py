"""Building frozen ``attrs`` values field by field, for values valid by construction.

attrs' frozen ``__init__`` sets each field through a bound setattr and runs its validators; on
the per-event and per-turn paths of the session machine and the scripted codec that costs more
than the work it wraps. ``field_setters`` hands out the slot setters of a class instead, checking
at import that the names given are exactly its fields, in order — a class that gains or renames
a field fails loudly rather than yielding half-built values. Not for boundary input: every
value built here must already satisfy the class's checks, and each builder is pinned against
the checked constructor by a test.
"""

from __future__ import annotations

from typing import Any

import attrs

from rma.vocabulary import JSON, Usage

new = object.__new__


def field_setters(cls: type, *names: str) -> tuple[Any, ...]:
    """The slot setters of ``cls``'s fields ``names`` — which must be all of them, in order."""
    if tuple(f.name for f in attrs.fields(cls)) != names:
        raise RuntimeError(f"{cls.__name__}'s fields are not {names}: update its unchecked builders")
    return tuple(cls.__dict__[name].__set__ for name in names)


_set_input, _set_output, _set_read, _set_creation, _set_raw = field_setters(
    Usage, "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "raw"
)


def usage_of(
    input_tokens: int, output_tokens: int, cache_read: int, cache_creation: int, raw: tuple[JSON, ...]
) -> Usage:
    """``Usage(...)`` for counts already known to be non-negative ints."""
    u: Usage = new(Usage)
    _set_input(u, input_tokens)
    _set_output(u, output_tokens)
    _set_read(u, cache_read)
    _set_creation(u, cache_creation)
    _set_raw(u, raw)
    return u
