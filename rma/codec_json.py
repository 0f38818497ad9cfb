"""JSON encoding of the core's values: events, commands, results, errors, vocabulary.

Used to record a session's input events (JSONL) and to replay them (``rma replay``), and
by the properties. The encoding is tagged: an attrs value becomes ``{"$type": name,
…fields}``, a ``returns`` result ``{"$ok": v}`` / ``{"$err": e}``, a mapping whose keys
start with ``$`` is escaped as ``{"$dict": …}`` so raw provider events round-trip
verbatim whatever they contain. Pure: strings in, values out.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma import errors, live, vocabulary
from rma.session import commands, events, options

_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Make an attrs class encodable (providers register their own values)."""
    _REGISTRY[cls.__name__] = cls
    return cls


for _module in (vocabulary, errors, events, commands, options, live):
    for _value in vars(_module).values():
        if isinstance(_value, type) and attrs.has(_value) and _value.__module__ == _module.__name__:
            register(_value)


def to_jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Success):
        return {"$ok": to_jsonable(value.unwrap())}
    if isinstance(value, Failure):
        return {"$err": to_jsonable(value.failure())}
    if attrs.has(type(value)):
        out: dict[str, Any] = {"$type": type(value).__name__}
        for field in attrs.fields(type(value)):
            if not field.init:
                continue
            if field.name == "codec":
                continue
            out[field.alias or field.name] = to_jsonable(getattr(value, field.name))
        return out
    if isinstance(value, Mapping):
        body = {str(k): to_jsonable(v) for k, v in value.items()}
        if any(k.startswith("$") for k in body):
            return {"$dict": body}
        return body
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def from_jsonable(value: Any) -> Any:
    if isinstance(value, list):
        return [from_jsonable(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$dict" in value and len(value) == 1:
        return {k: from_jsonable(v) for k, v in value["$dict"].items()}
    if "$ok" in value and len(value) == 1:
        return Success(from_jsonable(value["$ok"]))
    if "$err" in value and len(value) == 1:
        return Failure(from_jsonable(value["$err"]))
    if "$type" in value:
        name = value["$type"]
        cls = _REGISTRY.get(name)
        if cls is None:
            raise ValueError(f"unknown recorded type {name!r}")
        kwargs = {k: from_jsonable(v) for k, v in value.items() if k != "$type"}
        return cls(**kwargs)
    return {k: from_jsonable(v) for k, v in value.items()}


def dumps(value: Any) -> str:
    return json.dumps(to_jsonable(value), ensure_ascii=False, separators=(",", ":"))


def loads(text: str) -> Any:
    return from_jsonable(json.loads(text))


def decode_result(value: Any) -> Result[Any, Any]:
    decoded = from_jsonable(value)
    if not isinstance(decoded, Success | Failure):
        raise ValueError("expected an encoded Result")
    return decoded
