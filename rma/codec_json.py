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
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma import content, errors, live, vocabulary
from rma.session import commands, events, options

_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Make an attrs class encodable (providers register their own values)."""
    _REGISTRY[cls.__name__] = cls
    return cls


for _module in (vocabulary, content, errors, events, commands, options, live):
    for _value in vars(_module).values():
        if isinstance(_value, type) and attrs.has(_value) and _value.__module__ == _module.__name__:
            register(_value)


def _agent_spec(fields: dict[str, Any]) -> Any:
    from rma.provisioning.spec import AgentSpec

    tools = [t.to_json() if hasattr(t, "to_json") else t for t in fields.get("tools") or ()]
    return AgentSpec.coerce({**fields, "tools": tools}).unwrap()


def _environment_spec(fields: dict[str, Any]) -> Any:
    from rma.provisioning.spec import EnvironmentSpec

    runtimes = [attrs.asdict(r) if attrs.has(type(r)) else r for r in fields.get("runtimes") or ()]
    return EnvironmentSpec.coerce({**fields, "runtimes": runtimes}).unwrap()


def _plain_attrs(module: str, name: str) -> Callable[[dict[str, Any]], Any]:
    def decode(fields: dict[str, Any]) -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)(**fields)

    return decode


_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    # A run's request may hold a provisioning spec (``agent=`` on Local, an ``Agent``'s run):
    # specs are built through their validating constructors, which take lists of mappings.
    "AgentSpec": _agent_spec,
    "EnvironmentSpec": _environment_spec,
    "ToolSchema": _plain_attrs("rma.provisioning.spec", "ToolSchema"),
    "Runtime": _plain_attrs("rma.provisioning.spec", "Runtime"),
}


def to_jsonable(value: Any) -> Any:
    # The exact JSON types first — most of what is encoded is a provider's raw JSON — so a plain
    # dict, list or scalar costs a type check, not the ABC and attrs checks of ``_other``.
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        body = {k if type(k) is str else str(k): to_jsonable(v) for k, v in value.items()}
        for k in body:
            if k.startswith("$"):
                return {"$dict": body}
        return body
    if kind is list or kind is tuple:
        return [to_jsonable(v) for v in value]
    return _other(value)


_FIELDS: dict[type, tuple[tuple[str, str, bool], ...]] = {}
"""Per attrs class: (attribute, JSON key, omitted when empty) of the fields an encoding carries
(init, not ``codec``)."""

OMIT_EMPTY = "rma.codec_json.omit_empty"
"""Field metadata: an empty value is not written. For a field added to a recorded value, so
what a newer version writes without using it still reads on an older one (a Temporal worker
deployed before, a journal resumed by an older process) — ``ToolResult.content``."""


def _fields(cls: type) -> tuple[tuple[str, str, bool], ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = tuple(
            (f.name, f.alias or f.name, bool(f.metadata.get(OMIT_EMPTY)))
            for f in attrs.fields(cls)
            if f.init and f.name != "codec"
        )
    return fields


def _other(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Success):
        return {"$ok": to_jsonable(value.unwrap())}
    if isinstance(value, Failure):
        return {"$err": to_jsonable(value.failure())}
    cls = type(value)
    if attrs.has(cls):
        out: dict[str, Any] = {"$type": cls.__name__}
        for name, key, omit in _fields(cls):
            field = getattr(value, name)
            if not (omit and not field):
                out[key] = to_jsonable(field)
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
        kwargs = {k: from_jsonable(v) for k, v in value.items() if k != "$type"}
        decode = _DECODERS.get(name)
        if decode is not None:
            return decode(kwargs)
        cls = _REGISTRY.get(name)
        if cls is None:
            raise ValueError(f"unknown recorded type {name!r}")
        return cls(**kwargs)
    return {k: from_jsonable(v) for k, v in value.items()}


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not plain JSON")


def _plain_encoder() -> Callable[[Any], str]:
    """The C encoder of ``json.dumps(ensure_ascii=False, separators=(",", ":"))``, made once:
    ``JSONEncoder.encode`` builds a new one — and a dict for its circular check — on every call,
    which for the small parts a journal writes costs more than the encoding."""
    from json import encoder

    make = getattr(encoder, "c_make_encoder", None)
    quote = getattr(encoder, "c_encode_basestring", None)
    if make is None or quote is None:  # no C accelerator: the standard encoder
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_refuse).encode
    chunks = make(None, _refuse, quote, None, ":", ",", False, False, True)

    def plain(value: Any) -> str:
        if type(value) is str:
            return str(quote(value))
        return "".join(chunks(value, 0))

    return plain


_plain = _plain_encoder()


def plain_dumps(value: Any) -> str:
    """``value``'s JSON text, untagged: for what is read back as plain JSON (a snapshot), whose
    keys may start with ``$`` as they please. ``TypeError`` on a value JSON has no form for."""
    return _plain(value)


_JSON_TYPES = frozenset({dict, list, tuple, str, int, float, bool, type(None)})


def dumps(value: Any) -> str:
    """``value``'s tagged JSON text: the text of ``to_jsonable(value)``, built without it.

    A journal encodes every event a session takes, so this is on the hot path. A plain JSON
    part — a provider's raw event, most of what is written — goes to the C encoder whole; it is
    walked only when it holds something to tag (an attrs value, a result, an enum: the encoder
    refuses it) or to escape (a key starting with ``$``: its text then holds ``"$``, which the
    walk looks at more closely). So the text is ``to_jsonable``'s, at a fraction of the cost
    (``properties/test_codec_json.py`` holds them equal)."""
    kind = type(value)
    if kind is dict or kind is list or kind is tuple:
        if kind is dict or not value or type(value[0]) in _JSON_TYPES:  # a tuple of values: walk it
            try:
                text = _plain(value)
            except TypeError:  # something in it to tag
                pass
            else:
                if '"$' not in text:
                    return text
        if kind is dict:
            return _dict_text(value)
        return "[" + ",".join([dumps(v) for v in value]) + "]"
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return _plain(value)
    if kind in _ATTRS_TEXT:  # an attrs class written before: skip finding out again
        return _attrs_text(value)
    if attrs.has(kind) and not isinstance(value, enum.Enum):
        return _attrs_text(value)
    if isinstance(value, Success):
        return '{"$ok":' + dumps(value.unwrap()) + "}"
    if isinstance(value, Failure):
        return '{"$err":' + dumps(value.failure()) + "}"
    return _plain(to_jsonable(value))


def _dict_text(value: dict[Any, Any]) -> str:
    keys = [k if type(k) is str else str(k) for k in value]
    body = (
        "{" + ",".join([_plain(k) + ":" + dumps(v) for k, v in zip(keys, value.values(), strict=True)]) + "}"
    )
    return '{"$dict":' + body + "}" if any(k.startswith("$") for k in keys) else body


_ATTRS_TEXT: dict[type, tuple[str, tuple[tuple[str, str, bool], ...]]] = {}
"""Per attrs class: its ``{"$type":…`` opening and, per field, (attribute, ``,"key":``,
omitted when empty)."""


def _attrs_text(value: Any) -> str:
    cls = type(value)
    shape = _ATTRS_TEXT.get(cls)
    if shape is None:
        shape = _ATTRS_TEXT[cls] = (
            '{"$type":' + _plain(cls.__name__),
            tuple((name, "," + _plain(key) + ":", omit) for name, key, omit in _fields(cls)),
        )
    opening, fields = shape
    parts = [opening]
    for name, key, omit in fields:
        field = getattr(value, name)
        if omit and not field:
            continue
        parts.append(key)
        # A scalar field (most are) goes to the C encoder without a second dispatch.
        parts.append(_plain(field) if type(field) in _SCALARS else dumps(field))
    parts.append("}")
    return "".join(parts)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def loads(text: str) -> Any:
    return from_jsonable(json.loads(text))


def decode_result(value: Any) -> Result[Any, Any]:
    decoded = from_jsonable(value)
    if not isinstance(decoded, Success | Failure):
        raise ValueError("expected an encoded Result")
    return decoded
