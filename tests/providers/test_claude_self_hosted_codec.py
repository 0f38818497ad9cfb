"""The self-hosted codec (pure): which built-in calls take a local result, how they are
answered (``user.tool_result``), which take a confirmation first, and how an attach replays a
waiting turn instead of settling it."""

from __future__ import annotations

from typing import Any

from rma.providers.claude.self_hosted import (
    BUILTIN_PREFIX,
    SELF_HOSTED_CODEC,
    builtin_id,
    consolidate_self_hosted,
)
from rma.vocabulary import Terminal, ToolResult, ToolUse


def use(eid: str, name: str = "bash", permission: str | None = None, **inp: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "agent.tool_use", "id": eid, "name": name, "input": inp}
    if permission is not None:
        event["evaluated_permission"] = permission
    return event


def idle(*ids: str, eid: str = "idle") -> dict[str, Any]:
    return {
        "type": "session.status_idle",
        "id": eid,
        "stop_reason": {"type": "requires_action", "event_ids": list(ids)},
    }


def custom(eid: str) -> dict[str, Any]:
    return {"type": "agent.custom_tool_use", "id": eid, "name": "lookup", "input": {}}


def test_allowed_and_unmarked_builtin_calls_are_the_turns_uses_beside_custom_ones() -> None:
    turn = SELF_HOSTED_CODEC.normalize(
        [
            custom("c1"),
            use("b1", command="ls"),
            use("b2", "read", "allow", file_path="x"),
            idle("c1", "b1", "b2"),
        ]
    )
    assert turn.terminal is Terminal.REQUIRES_ACTION
    assert [u.id for u in turn.custom_tool_uses] == ["c1", "builtin:b1", "builtin:b2"]
    assert turn.custom_tool_uses[1] == ToolUse("builtin:b1", "bash", {"command": "ls"})
    assert SELF_HOSTED_CODEC.confirmation_uses(turn.events) == ()


def test_an_ask_waits_for_a_confirmation_and_a_deny_never_runs() -> None:
    events = [use("b1", permission="ask"), use("b2", permission="deny"), idle("b1")]
    turn = SELF_HOSTED_CODEC.normalize(events)
    assert turn.custom_tool_uses == ()
    assert [u.id for u in SELF_HOSTED_CODEC.confirmation_uses(events)] == ["b1"]
    allowed = [
        *events,
        {"type": "user.tool_confirmation", "id": "e1", "tool_use_id": "b1", "result": "allow"},
        idle("b1", eid="idle2"),
    ]
    assert [u.id for u in SELF_HOSTED_CODEC.pending_tool_uses(allowed)] == ["builtin:b1"]
    denied = [
        *events,
        {"type": "user.tool_confirmation", "id": "e1", "tool_use_id": "b1", "result": "deny"},
        idle("b1", eid="idle2"),
    ]
    assert SELF_HOSTED_CODEC.pending_tool_uses(denied) == ()


def test_answered_calls_are_not_run_again() -> None:
    events = [
        use("b1"),
        idle("b1"),
        {"type": "user.tool_result", "id": "r1", "tool_use_id": "b1"},
        use("b2"),
        idle("b2", eid="i2"),
    ]
    assert [u.id for u in SELF_HOSTED_CODEC.pending_tool_uses(events)] == ["builtin:b2"]


def test_builtin_uses_are_answered_with_user_tool_result_and_custom_ones_as_before() -> None:
    uses = [ToolUse("c1", "lookup"), ToolUse(BUILTIN_PREFIX + "b1", "bash")]
    answer = SELF_HOSTED_CODEC.resume_input(
        uses, [ToolResult("c1", "pro"), ToolResult("builtin:b1", "", True)]
    )
    assert answer == [
        {
            "type": "user.custom_tool_result",
            "custom_tool_use_id": "c1",
            "content": [{"type": "text", "text": "pro"}],
            "is_error": False,
        },
        {
            "type": "user.tool_result",
            "tool_use_id": "b1",
            "content": [{"type": "text", "text": "(no output)"}],
            "is_error": True,
        },
    ]
    assert builtin_id("builtin:b1") == "b1" and builtin_id("c1") is None
    assert not SELF_HOSTED_CODEC.input_landed(
        answer, [{"type": "user.custom_tool_result", "custom_tool_use_id": "c1"}]
    )
    echoes = [
        {"type": "user.custom_tool_result", "custom_tool_use_id": "c1"},
        {"type": "user.tool_result", "tool_use_id": "b1"},
    ]
    assert SELF_HOSTED_CODEC.input_landed(answer, echoes)


def test_an_attach_replays_the_waiting_turn_so_its_calls_run_and_its_asks_are_asked() -> None:
    history = [
        {"type": "user.message", "id": "m1"},
        {"type": "session.status_idle", "id": "i0", "stop_reason": {"type": "end_turn"}},
        {"type": "user.message", "id": "m2"},
        use("b1"),
        use("b2", permission="ask"),
        idle("b1", "b2", eid="i1"),
    ]
    found = consolidate_self_hosted(history, (), attach=True)
    assert [e["id"] for e in found.replay] == ["b1", "b2", "i1"]
    assert found.pending == () and "b1" not in found.seen and "m1" in found.seen
    seen_before = consolidate_self_hosted(history, ("m1", "i0", "m2", "b1", "b2", "i1"))
    assert seen_before.replay == () and seen_before.pending == ()
