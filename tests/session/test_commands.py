"""The per-event command builders of ``rma.session.commands`` build the very values the classes do."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import attrs
import pytest

from rma.codec_json import dumps, loads
from rma.session.commands import DeliverEvent, Emit, deliver_event, emit


@pytest.mark.parametrize("event", [{"type": "text", "text": "hi", "id": "e1"}, "ping", None, 7, ["a"]])
def test_deliver_event_equals_the_class_call(event: Any) -> None:
    built = deliver_event(event)
    assert type(built) is DeliverEvent
    assert built == DeliverEvent(event)
    assert built.event is event
    assert repr(built) == repr(DeliverEvent(event))
    assert dumps(loads(dumps(built))) == dumps(DeliverEvent(event))


@pytest.mark.parametrize(
    ("measurements", "metadata", "content"),
    [
        ({}, {"type": "text", "session_id": "s1"}, {}),
        ({"tool_use_count": 2}, {"turn": 1, "tool_use_ids": ["a", "b"]}, {"output": "x"}),
    ],
)
def test_emit_equals_the_class_call(
    measurements: dict[str, int], metadata: dict[str, Any], content: dict[str, Any]
) -> None:
    built = emit("rma.x", measurements, metadata, content)
    checked = Emit("rma.x", measurements, metadata, content)
    assert type(built) is Emit
    assert built == checked
    assert all(getattr(built, f.name) is getattr(checked, f.name) for f in attrs.fields(Emit))
    assert dumps(loads(dumps(built))) == dumps(checked)


def test_the_builders_set_every_field_and_stay_frozen() -> None:
    # The builders are only right while these classes have no validators or converters.
    for cls in (DeliverEvent, Emit):
        assert all(f.validator is None and f.converter is None for f in attrs.fields(cls)), cls
    built = emit("rma.x", {}, MappingProxyType({}), {})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.name = "changed"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        deliver_event(1).event = 2  # type: ignore[misc]
