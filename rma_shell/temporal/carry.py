"""What a session workflow carries into its next run (continue-as-new), and how large a payload may be.

A Temporal history is bounded (50 K events, 50 MB by default; the server suggests continuing
as new well before). A long session therefore continues as new: the workflow ends its run and
starts the next one with the same id, handing it a compact **carry** instead of the history —
the core's ``State`` (encoded here, field by field), the inputs not yet fed, the provider's
snapshot, the tool batches still waiting for a person, and the recorded results of the calls
still in flight. Nothing is re-run and nothing re-decided: the next run feeds the same events
to the same state.

(A turn's recorded output is kept small elsewhere: an activity that changed the provider's
snapshot returns only what changed, ``rma.snapshots.delta``, which the workflow applies to the
snapshot it holds.) The second helper keeps each payload under Temporal's limit: a long activity
input or output travels compressed (``pack_result``), and one too long even so is refused
typed (``fit_input``, and the activities' own check). Pure functions over JSON and the core's
values: no I/O, no clock.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from typing import Any

import attrs
from temporalio.exceptions import ActivityError, ApplicationError

from rma._persistent import AppendLog, SeenIds
from rma.codec_json import from_jsonable, to_jsonable
from rma.session.options import SessionConfig
from rma.session.state import Accumulated, Phase, State
from rma.vocabulary import Usage

CARRY_KEY = "$carried"
"""The key of a workflow input (the ``SessionSpec``'s JSON) that carries a previous run's state."""

_TUPLES = ("pending_uses", "pending_confirmations", "deferred")
_SKIP = frozenset({"config", "telemetry", "seen", "turn_events", "acc", "phase", "phase_before_push"})


def encode_state(s: State) -> dict[str, Any]:
    """``s`` as JSON (its ``config`` is carried apart, as ``rma.open`` recorded it)."""
    out: dict[str, Any] = {
        "phase": s.phase.value,
        "phase_before_push": None if s.phase_before_push is None else s.phase_before_push.value,
        "seen": {"window": s.seen.window, "ids": list(s.seen.ids())},
        "turn_events": to_jsonable(list(s.turn_events)),
        "acc": {
            "events": to_jsonable(list(s.acc.events)),
            "custom_tool_uses": to_jsonable(list(s.acc.custom_tool_uses)),
            "server_tool_uses": to_jsonable(list(s.acc.server_tool_uses)),
            "usage": to_jsonable(s.acc.usage),
            "usage_raw": to_jsonable(list(s.acc.usage_raw)),
            "last_text": s.acc.last_text,
        },
        "telemetry": s.telemetry,
    }
    for field in attrs.fields(State):
        if field.name not in _SKIP:
            out[field.name] = to_jsonable(getattr(s, field.name))
    return out


def decode_state(value: Mapping[str, Any], config: SessionConfig) -> State:
    """The ``State`` ``encode_state`` encoded, under ``config``."""
    fields: dict[str, Any] = {
        k: from_jsonable(v) for k, v in value.items() if k not in _SKIP and k in _STATE_FIELDS
    }
    for name in _TUPLES:
        fields[name] = tuple(fields.get(name) or ())
    mark = fields.get("progress_mark") or (0, 0)
    fields["progress_mark"] = (int(mark[0]), int(mark[1]))
    before = value.get("phase_before_push")
    acc = value["acc"]
    usage = from_jsonable(acc["usage"])
    seen = value["seen"]
    return State(
        config=config,
        phase=Phase(value["phase"]),
        phase_before_push=None if before is None else Phase(before),
        seen=SeenIds(window=int(seen["window"])).union(seen["ids"]),
        turn_events=AppendLog.of(from_jsonable(value["turn_events"])),
        acc=Accumulated(
            events=AppendLog.of(from_jsonable(acc["events"])),
            custom_tool_uses=AppendLog.of(from_jsonable(acc["custom_tool_uses"])),
            server_tool_uses=AppendLog.of(from_jsonable(acc["server_tool_uses"])),
            usage=usage if isinstance(usage, Usage) else Usage(),
            usage_raw=AppendLog.of(from_jsonable(acc["usage_raw"])),
            last_text=str(acc.get("last_text") or ""),
        ),
        telemetry=bool(value.get("telemetry", True)),
        **fields,
    )


_STATE_FIELDS = frozenset(f.name for f in attrs.fields(State))


def pack(carried: Mapping[str, Any]) -> dict[str, str]:
    """The carry as one compressed string: a workflow input is one payload, limited (2 MB by
    default), and a long request's accumulated events and a Local conversation compress ~10×."""
    return _zipped(json.dumps(carried, separators=(",", ":"), ensure_ascii=False))


RESULT_INLINE_BYTES = 256 * 1024
"""A result whose JSON is larger than this leaves the workflow compressed (``pack_result``)."""


def pack_result(value: Any) -> Any:
    """A request's encoded result as the workflow returns it: as it is, or — when its JSON is
    over ``RESULT_INLINE_BYTES`` — one compressed string, as a carry is. A result is one
    payload (2 MB by default), and a long Local request's transcript and events grow with its
    turns (~1.6 MB at 2,000 turns) and compress ~10×. ``unpack_result`` is the inverse."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return value if len(text) <= RESULT_INLINE_BYTES else _zipped(text)


PAYLOAD_BYTES = 2 * 1024 * 1024
"""Temporal's default limit on one payload (the server's blob size limit, which the SDK also
checks before it uploads one): an activity's output packed larger than this cannot leave."""


def unpack_result(value: Any) -> Any:
    """``pack_result``'s inverse: an encoded result (``{"$ok": …}``/``{"$err": …}``) is never
    a ``$zlib`` object, so one is always a packed result."""
    if isinstance(value, Mapping) and len(value) == 1 and "$zlib" in value:
        return _unzipped(value)
    return value


def pack_payload(value: dict[str, Any], what: str) -> dict[str, Any]:
    """``value`` (an activity's input or output: ``what``) as one payload carries it: as it is,
    compressed when its JSON is over ``RESULT_INLINE_BYTES`` (``unpack_result`` on the other
    side), or — over Temporal's payload limit even so — a non-retryable ``PayloadTooLarge``
    failure saying so: the SDK would refuse to upload it, and every retry would do the same
    work (a tool's effect included) to the same refusal."""
    packed: dict[str, Any] = pack_result(value)
    if packed is not value and len(packed["$zlib"]) > PAYLOAD_BYTES:
        raise ApplicationError(
            f"{what} is {len(packed['$zlib']):,} bytes compressed, over Temporal's payload limit "
            f"({PAYLOAD_BYTES:,} bytes): tool results are bounded by max_tool_result_chars",
            type="PayloadTooLarge",
            non_retryable=True,
        )
    return packed


def fit_input(name: str, arg: dict[str, Any]) -> dict[str, Any]:
    """Activity ``name``'s input ``arg`` as ``pack_payload`` leaves it; one too long is an
    ``ActivityError`` that never left, which each caller already turns into its typed outcome
    (a failed turn, a call's error result). Scheduled as it is, the workflow task could not
    complete and would be retried for ever."""
    try:
        return pack_payload(arg, f"{name}'s input")
    except ApplicationError as too_long:
        refused = ActivityError(
            f"{name} was not scheduled",
            scheduled_event_id=0,
            started_event_id=0,
            identity="",
            activity_type=name,
            activity_id="",
            retry_state=None,
        )
        raise refused from too_long


def unpack(packed: Mapping[str, Any]) -> dict[str, Any]:
    """``pack``'s inverse (a carry that is not packed is returned as it is)."""
    if "$zlib" not in packed:
        return dict(packed)
    value: dict[str, Any] = _unzipped(packed)
    return value


def _zipped(text: str) -> dict[str, str]:
    return {"$zlib": base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")}


def _unzipped(packed: Mapping[str, Any]) -> Any:
    return json.loads(zlib.decompress(base64.b64decode(packed["$zlib"])))


__all__ = [
    "CARRY_KEY",
    "PAYLOAD_BYTES",
    "decode_state",
    "encode_state",
    "fit_input",
    "pack",
    "pack_payload",
    "unpack",
]
