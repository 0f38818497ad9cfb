"""Redaction: keep known secrets out of error values, whatever a server echoed back.

Transports know the credentials they sent (an API key, a bearer token). A server — or a proxy
in front of it — may reflect them in an error body, and error values travel far: into
results, logs, telemetry, recorded event logs and exception messages. Transports pass every
error they return through ``redact_error`` with the secrets they hold, so none of those ever
carries one. Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, cast

import attrs

from rma.vocabulary import JSON

MASK = "***"
MIN_SECRET_LENGTH = 4
"""Shorter values are not masked: they would shred ordinary text and are no credential."""

E = TypeVar("E")


def _usable(secrets: Iterable[str | None]) -> tuple[str, ...]:
    found = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LENGTH}
    return tuple(sorted(found, key=len, reverse=True))  # longest first: a key inside a token


def redact_text(text: str, secrets: Iterable[str | None]) -> str:
    for secret in _usable(secrets):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_json(value: JSON, secrets: Iterable[str | None]) -> JSON:
    """``value`` with every occurrence of a secret in a string (or a mapping key) masked."""
    usable = _usable(secrets)
    return _walk(value, usable) if usable else value


def _walk(value: JSON, secrets: tuple[str, ...]) -> JSON:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, Mapping):
        return {redact_text(str(k), secrets): _walk(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, secrets) for v in value]
    if isinstance(value, tuple):
        return tuple(_walk(v, secrets) for v in value)
    return value


def redact_error(error: E, secrets: Iterable[str | None]) -> E:
    """An attrs error value with every str/JSON field redacted (unchanged when nothing matched)."""
    usable = _usable(secrets)
    if not usable or not attrs.has(type(error)):
        return error
    cls: Any = type(error)
    changes: dict[str, JSON] = {}
    for field in attrs.fields(cls):
        if not field.init:
            continue
        value = getattr(error, field.name)
        if isinstance(value, str | Mapping | list | tuple):
            masked = _walk(value, usable)
            if masked != value:
                changes[field.alias or field.name] = masked
    if not changes:
        return error
    return cast(E, attrs.evolve(cast(Any, error), **changes))
