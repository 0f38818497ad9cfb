"""Stream events share their keys (issue #17: an idle session keeps its finished request's events)."""

from __future__ import annotations

import json

import pytest

from rma_shell.providers.claude import provider as cma

FRAME = (
    '{"type":"session.status_idle","id":"sevt_%d","stop_reason":{"type":"requires_action","event_ids":[]}}'
)


def test_every_event_holds_the_same_key_strings() -> None:
    first, second = cma._decode_event(FRAME % 1), cma._decode_event(FRAME % 2)
    assert first == json.loads(FRAME % 1)
    for a, b in zip(first, second, strict=True):
        assert a is b
    assert next(iter(first["stop_reason"])) is next(iter(first))  # nested objects' keys too


def test_keys_past_the_cap_are_left_as_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cma, "_KEYS", {})
    monkeypatch.setattr(cma, "_KEYS_MAX", 1)
    cma._decode_event('{"type":"x"}')  # the memo is full
    frame = '{"type":"x","novel_key":1}'
    first, second = cma._decode_event(frame), cma._decode_event(frame)
    assert first == second == {"type": "x", "novel_key": 1}
    assert list(cma._KEYS) == ["type"]  # the memo does not grow past its cap
    (type_a, novel_a), (type_b, novel_b) = first, second
    assert type_a is type_b and novel_a is not novel_b
