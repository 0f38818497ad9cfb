"""rma.providers.claude.codec: the pure CMA codec (C-1…C-21, C-39…C-43, R-18…R-22, S-52…S-58, S-76).

The official ``anthropic`` SDK (2.10.0) is the oracle: inputs are compared with its typed
event params and with the request body it puts on the wire; every member of its
server-event union must be known to the codec and survive normalization.
"""

from __future__ import annotations

import datetime
import inspect
import itertools
import json
import types
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import httpx2
import pydantic
import pytest
from anthropic import Anthropic
from anthropic.lib.tools._beta_session_runner import _build_result_event, _to_session_content, ends_turn
from anthropic.types.beta.sessions import (
    BetaManagedAgentsAgentCustomToolUseEvent,
    BetaManagedAgentsSessionEvent,
    BetaManagedAgentsStreamSessionEvents,
)
from anthropic.types.beta.sessions.beta_managed_agents_event_params import BetaManagedAgentsEventParams
from anthropic.types.beta.sessions.beta_managed_agents_file_rubric_params import (
    BetaManagedAgentsFileRubricParams,
)
from anthropic.types.beta.sessions.beta_managed_agents_session_status_idle_event import (
    BetaManagedAgentsSessionStatusIdleEvent,
)
from anthropic.types.beta.sessions.beta_managed_agents_text_block_param import BetaManagedAgentsTextBlockParam
from anthropic.types.beta.sessions.beta_managed_agents_text_rubric_params import (
    BetaManagedAgentsTextRubricParams,
)
from anthropic.types.beta.sessions.beta_managed_agents_user_custom_tool_result_event_params import (
    BetaManagedAgentsUserCustomToolResultEventParams,
)
from anthropic.types.beta.sessions.beta_managed_agents_user_define_outcome_event_params import (
    BetaManagedAgentsUserDefineOutcomeEventParams,
)
from anthropic.types.beta.sessions.beta_managed_agents_user_interrupt_event_params import (
    BetaManagedAgentsUserInterruptEventParams,
)
from anthropic.types.beta.sessions.beta_managed_agents_user_message_event_params import (
    BetaManagedAgentsUserMessageEventParams,
)
from anthropic.types.beta.sessions.beta_managed_agents_user_tool_confirmation_event_params import (
    BetaManagedAgentsUserToolConfirmationEventParams,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Success
from typing_extensions import get_type_hints

from rma.errors import StreamDropped
from rma.provider import DEFAULT_PROMPT, Mode, codec_for
from rma.providers.claude import codec as cma
from rma.providers.claude.codec import (
    CODEC,
    EVENT_ROLES,
    ClaudeManagedAgentsCodec,
    Confirmation,
    Role,
    consolidate,
    dedupe,
    merge_history,
    pending_requires_action,
    unanswered_tool_uses,
)
from rma.session import commands as c
from rma.session.events import (
    Event,
    Opened,
    PushFinished,
    ReconnectFinished,
    ReconnectTimerFired,
    StreamConnected,
    StreamEvent,
    StreamFailed,
    ToolsFinished,
)
from rma.session.machine import State, initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import Outcome, SessionResult, Terminal, ToolResult, ToolUse, Usage

# --- helpers --------------------------------------------------------------------------------

_ids = itertools.count(1)


def ev(kind: str, **fields: Any) -> dict[str, Any]:
    """A server event with a fresh id (override with id=…)."""
    out: dict[str, Any] = {"type": kind, "id": f"ev_{next(_ids)}", "processed_at": "2026-05-01T10:00:00Z"}
    out.update(fields)
    return out


def msg(*texts: str, **fields: Any) -> dict[str, Any]:
    return ev("agent.message", content=[{"type": "text", "text": t} for t in texts], **fields)


def custom_use(name: str = "lookup", input: Any = None, **fields: Any) -> dict[str, Any]:
    return ev("agent.custom_tool_use", name=name, input={} if input is None else input, **fields)


def idle(stop_type: str | None = "end_turn", **fields: Any) -> dict[str, Any]:
    stop: Any = None if stop_type is None else {"type": stop_type}
    if "event_ids" in fields:
        stop["event_ids"] = fields.pop("event_ids")
    return ev("session.status_idle", stop_reason=stop, **fields)


def ra(*uses: dict[str, Any]) -> dict[str, Any]:
    return idle("requires_action", event_ids=[u["id"] for u in uses])


def result_echo(use: dict[str, Any]) -> dict[str, Any]:
    return ev(
        "user.custom_tool_result",
        custom_tool_use_id=use["id"],
        content=[{"type": "text", "text": "ok"}],
        is_error=False,
        processed_at=None,
    )


def model_end(i: int = 10, o: int = 5, cr: int = 0, cc: int = 0) -> dict[str, Any]:
    return ev(
        "span.model_request_end",
        model_request_start_id="ev_start",
        model_usage={
            "input_tokens": i,
            "output_tokens": o,
            "cache_read_input_tokens": cr,
            "cache_creation_input_tokens": cc,
        },
    )


def sdk_wire_body(events: Sequence[Any]) -> Any:
    """What the official SDK puts on the wire for ``client.beta.sessions.events.send``."""
    bodies: list[Any] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.method == "POST" and request.url.path == "/v1/sessions/sesn_1/events"
        bodies.append(json.loads(request.content))
        return httpx2.Response(200, json={"data": []})

    client = Anthropic(
        api_key="k",
        base_url="http://loopback",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )
    client.beta.sessions.events.send("sesn_1", events=list(events))
    (body,) = bodies
    return body


# --- C-1: the codec ---------------------------------------------------------------------------


def test_C1_streaming_with_outcomes_budget_and_text_deltas_and_registered() -> None:
    assert CODEC.name == "claude_managed_agents"
    assert CODEC.mode is Mode.STREAMING
    assert CODEC.supports_outcomes and CODEC.supports_budget and CODEC.has_text_delta
    assert not CODEC.empty_resume_safe  # S-53: the API rejects an empty events list
    assert isinstance(codec_for("claude_managed_agents"), ClaudeManagedAgentsCodec)


# --- inputs (C-6, C-7, C-39…C-42, S-57) against the SDK --------------------------------------


def test_C39_user_message_matches_the_sdk_params_and_wire() -> None:
    text: BetaManagedAgentsTextBlockParam = {"type": "text", "text": "Build the report."}
    sdk: BetaManagedAgentsUserMessageEventParams = {"type": "user.message", "content": [text]}
    ours = cma.user_message("Build the report.")
    assert ours == sdk
    assert sdk_wire_body([sdk]) == cma.events_body([ours])


def test_C41_custom_tool_result_matches_the_sdk_params_runner_and_wire() -> None:
    sdk: BetaManagedAgentsUserCustomToolResultEventParams = {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": "ev_02",
        "content": [{"type": "text", "text": '{"name":"Ada"}'}],
        "is_error": False,
    }
    ours = cma.custom_tool_result("ev_02", '{"name":"Ada"}')
    assert ours == sdk  # is_error defaults to False and is always sent, as the SDK runner does
    assert sdk_wire_body([sdk]) == cma.events_body([ours])
    # The SDK's own session runner builds the same event for the same tool output.
    use = BetaManagedAgentsAgentCustomToolUseEvent.model_validate(
        custom_use("lookup", {"id": "c9"}, id="ev_02")
    )
    for text, is_error in [('{"name":"Ada"}', False), ("boom", True), ("", False), ("", True)]:
        content, _ = _to_session_content(text)
        assert cma.custom_tool_result("ev_02", text, is_error) == _build_result_event(use, content, is_error)


def test_C41_empty_tool_output_becomes_no_output_like_the_sdk() -> None:
    event = cma.custom_tool_result("ev_1", "", is_error=True)
    assert event["content"] == [{"type": "text", "text": "(no output)"}]
    assert event["is_error"] is True


def test_C42_tool_confirmation_matches_the_sdk_and_rejects_bad_verdicts() -> None:
    allow: BetaManagedAgentsUserToolConfirmationEventParams = {
        "type": "user.tool_confirmation",
        "tool_use_id": "ev_07",
        "result": "allow",
    }
    deny: BetaManagedAgentsUserToolConfirmationEventParams = {
        "type": "user.tool_confirmation",
        "tool_use_id": "ev_07",
        "result": "deny",
        "deny_message": "no network writes",
    }
    ours = [
        cma.tool_confirmation("ev_07", "allow"),
        cma.tool_confirmation("ev_07", "deny", "no network writes"),
    ]
    assert ours == [allow, deny]
    assert sdk_wire_body([allow, deny]) == cma.events_body(ours)
    with pytest.raises(ValueError):
        cma.tool_confirmation("ev_07", "maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        cma.tool_confirmation("ev_07", "allow", "a deny message with allow is rejected by the API")


def test_C40_define_outcome_matches_the_sdk_text_and_file_rubrics() -> None:
    rubric: BetaManagedAgentsTextRubricParams = {"type": "text", "content": "- has a totals table"}
    sdk: BetaManagedAgentsUserDefineOutcomeEventParams = {
        "type": "user.define_outcome",
        "description": "Write report.md",
        "rubric": rubric,
        "max_iterations": 2,
    }
    ours = cma.define_outcome("Write report.md", "- has a totals table", 2)
    assert ours == sdk
    file_rubric: BetaManagedAgentsFileRubricParams = {"type": "file", "file_id": "file_1"}
    sdk_file: BetaManagedAgentsUserDefineOutcomeEventParams = {
        "type": "user.define_outcome",
        "description": "d",
        "rubric": file_rubric,
    }
    ours_file = cma.define_outcome("d", cma.file_rubric("file_1"))
    assert ours_file == sdk_file
    assert sdk_wire_body([sdk, sdk_file]) == cma.events_body([ours, ours_file])


def test_C40_max_iterations_only_when_an_int_never_null() -> None:
    assert "max_iterations" not in cma.define_outcome("d", "r")
    assert "max_iterations" not in cma.define_outcome("d", "r", None)
    assert cma.define_outcome("d", "r", 5)["max_iterations"] == 5


def test_interrupt_matches_the_sdk() -> None:
    every: BetaManagedAgentsUserInterruptEventParams = {"type": "user.interrupt"}
    one: BetaManagedAgentsUserInterruptEventParams = {"type": "user.interrupt", "session_thread_id": "sthr_1"}
    ours = [cma.interrupt(), cma.interrupt("sthr_1")]
    assert ours == [every, one]
    assert sdk_wire_body([every, one]) == cma.events_body(ours)
    assert CODEC.interrupt_input() == [every]


def test_every_input_builder_produces_a_member_of_the_sdk_event_params_union() -> None:
    members = get_args(BetaManagedAgentsEventParams)
    by_type = {get_args(get_type_hints(m)["type"])[0]: m for m in members}
    built = [
        cma.user_message("x"),
        cma.custom_tool_result("ev_1", "x"),
        cma.tool_confirmation("ev_1", "deny", "why"),
        cma.define_outcome("d", "r", 3),
        cma.interrupt("sthr_1"),
    ]
    for event in built:
        params = by_type[event["type"]]
        keys = set(params.__required_keys__) | set(params.__optional_keys__)
        assert set(event) <= keys and set(params.__required_keys__) <= set(event), event


def test_C6_S57_kickoff_with_an_outcome_is_define_outcome_alone_and_ignores_the_prompt() -> None:
    outcome = Outcome(description="Write report.md", rubric="- totals", max_iterations=2)
    assert CODEC.kickoff_input("ignored prompt", outcome) == [
        {
            "type": "user.define_outcome",
            "description": "Write report.md",
            "rubric": {"type": "text", "content": "- totals"},
            "max_iterations": 2,
        }
    ]
    no_max = CODEC.kickoff_input(None, Outcome(description="d", rubric="r"))
    assert no_max == [
        {"type": "user.define_outcome", "description": "d", "rubric": {"type": "text", "content": "r"}}
    ]


def test_C6_kickoff_without_an_outcome_is_the_prompt_or_begin() -> None:
    assert CODEC.kickoff_input("go", None) == [cma.user_message("go")]
    assert CODEC.kickoff_input(None, None) == [cma.user_message(DEFAULT_PROMPT)]
    assert DEFAULT_PROMPT == "Begin."


def test_C7_user_input_is_one_user_message() -> None:
    assert CODEC.user_input("next") == [
        {"type": "user.message", "content": [{"type": "text", "text": "next"}]}
    ]


def test_C7_resume_is_one_custom_tool_result_per_use_in_order_paired_by_position() -> None:
    uses = [ToolUse("ev_2", "b", {}), ToolUse("ev_1", "a", {}), ToolUse("ev_3", "c", {})]
    results = [ToolResult("ev_2", "B"), ToolResult("ev_1", "A", is_error=True), ToolResult(None, "")]
    assert CODEC.resume_input(uses, results) == [
        cma.custom_tool_result("ev_2", "B"),
        cma.custom_tool_result("ev_1", "A", True),
        cma.custom_tool_result("ev_3", "(no output)"),
    ]


def test_C7_resume_rejects_a_length_mismatch_an_empty_resume_and_an_id_less_use() -> None:
    with pytest.raises(ValueError, match="2 tool uses but 1 results"):
        CODEC.resume_input([ToolUse("a", "x"), ToolUse("b", "y")], [ToolResult("a", "r")])
    with pytest.raises(ValueError, match="empty"):
        CODEC.resume_input([], [])  # S-53: never an empty resume
    with pytest.raises(ValueError, match="no id"):
        CODEC.resume_input([ToolUse(None, "x")], [ToolResult(None, "r")])


def test_confirmation_input_builds_one_confirmation_per_verdict() -> None:
    got = CODEC.confirmation_input(
        [
            Confirmation("ev_1", allow=True, deny_message="dropped for allow"),
            Confirmation("ev_2", False, "no"),
        ]
    )
    assert got == [cma.tool_confirmation("ev_1", "allow"), cma.tool_confirmation("ev_2", "deny", "no")]
    with pytest.raises(ValueError):
        CODEC.confirmation_input([])


# --- every SDK server event is known and survives normalization (P-4) -------------------------


def _example(tp: Any) -> Any:
    """A minimal valid JSON value for an SDK type, built from its definition."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _example(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return _example(next(a for a in get_args(tp) if a is not type(None)))
    if origin is Literal:
        return get_args(tp)[0]
    if origin is list:
        return [_example(get_args(tp)[0])]
    if origin is dict:
        return {}
    simple = {
        str: "x",
        bool: False,
        int: 0,
        float: 0.0,
        datetime.datetime: "2026-05-01T10:00:00Z",
        object: None,
    }
    if tp in simple:
        return simple[tp]
    if inspect.isclass(tp) and issubclass(tp, pydantic.BaseModel):
        return {name: _example(f.annotation) for name, f in tp.model_fields.items() if f.is_required()}
    raise TypeError(f"no example for {tp!r}")


def _union_members(union: Any) -> tuple[type[pydantic.BaseModel], ...]:
    inner = get_args(union)[0] if get_origin(union) is Annotated else union
    return get_args(inner)


def _type_literal(model: type[pydantic.BaseModel]) -> str:
    (value,) = get_args(model.model_fields["type"].annotation)
    return str(value)


def sdk_examples() -> Iterator[tuple[type[pydantic.BaseModel], dict[str, Any]]]:
    for model in _union_members(BetaManagedAgentsStreamSessionEvents):
        example = _example(model)
        if "id" in example:
            example["id"] = f"ev_{_type_literal(model)}"
        model.model_validate(example)  # a valid SDK object, not a guess
        yield model, example


def test_every_type_of_the_sdk_server_event_unions_is_known_to_the_codec() -> None:
    stream_types = {_type_literal(m) for m in _union_members(BetaManagedAgentsStreamSessionEvents)}
    history_types = {_type_literal(m) for m in _union_members(BetaManagedAgentsSessionEvent)}
    assert history_types <= stream_types
    # A type the SDK adds must be classified here before this passes; so must a removal.
    assert set(EVENT_ROLES) == stream_types


@pytest.mark.parametrize("model,example", list(sdk_examples()), ids=lambda v: getattr(v, "__name__", ""))
def test_P4_every_sdk_event_normalizes_verbatim_and_is_a_boundary_only_if_the_role_says_so(
    model: type[pydantic.BaseModel], example: dict[str, Any]
) -> None:
    role = EVENT_ROLES[example["type"]]
    before = json.dumps(example, sort_keys=True)
    tr = CODEC.normalize([example])
    assert tr.events == (example,) and json.dumps(example, sort_keys=True) == before  # never mutated
    assert CODEC.turn_boundary(example) is (role is Role.BOUNDARY)
    # Only agent messages carry text; only server/MCP tool uses are server tool uses;
    # custom uses are never actionable without a requires_action idle (C-14).
    assert (tr.text == "x") is (role is Role.TEXT)
    assert (tr.server_tool_uses == (example,)) is (role is Role.SERVER_TOOL_USE)
    assert tr.custom_tool_uses == ()
    assert (tr.usage is not None) is (example["type"] == "span.model_request_end")
    expected = Terminal.END_TURN if example["type"] == "session.status_idle" else Terminal.TERMINATED
    assert tr.terminal is expected
    assert CODEC.text_delta(example) == ("x" if role is Role.TEXT else None)


def test_C15_every_sdk_idle_stop_reason_has_a_terminal() -> None:
    annotation = BetaManagedAgentsSessionStatusIdleEvent.model_fields["stop_reason"].annotation
    expected = {
        "end_turn": Terminal.END_TURN,
        "requires_action": Terminal.REQUIRES_ACTION,
        "retries_exhausted": Terminal.TERMINATED,
        "budget_reached": Terminal.TERMINATED,
        "refusal": Terminal.TERMINATED,
    }
    seen = set()
    for member in get_args(annotation):
        stop = _example(member)
        seen.add(stop["type"])
        event = idle(None) | {"stop_reason": stop}
        BetaManagedAgentsSessionStatusIdleEvent.model_validate(event)
        tr = CODEC.normalize([event])
        assert tr.terminal is expected[stop["type"]]
        assert tr.stop_reason is stop  # C-17 / S-63: raw, unflattened
        # The SDK ends the turn on every stop reason but requires_action; so do we.
        parsed = BetaManagedAgentsSessionStatusIdleEvent.model_validate(event)
        assert ends_turn(parsed) is (tr.terminal is not Terminal.REQUIRES_ACTION)
    assert seen == set(expected)  # a new SDK stop reason fails here until it is mapped


# --- normalize (C-13…C-21) ------------------------------------------------------------------


def test_C14_the_wire_reference_requires_action_turn() -> None:
    events: list[dict[str, Any]] = [
        {"type": "session.status_running", "id": "ev_01", "processed_at": "2026-05-01T10:00:00Z"},
        {
            "type": "agent.custom_tool_use",
            "id": "ev_02",
            "name": "lookup_customer",
            "input": {"id": "c9"},
            "processed_at": "2026-05-01T10:00:03Z",
        },
        {
            "type": "span.model_request_end",
            "id": "ev_03",
            "model_request_start_id": "ev_00b",
            "model_usage": {
                "input_tokens": 812,
                "output_tokens": 64,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 512,
            },
            "processed_at": "2026-05-01T10:00:03Z",
        },
        {
            "type": "session.status_idle",
            "id": "ev_04",
            "stop_reason": {"type": "requires_action", "event_ids": ["ev_02"]},
            "processed_at": "2026-05-01T10:00:03Z",
        },
    ]
    assert [CODEC.turn_boundary(e) for e in events] == [False, False, False, True]
    tr = CODEC.normalize(events)
    assert tr.terminal is Terminal.REQUIRES_ACTION
    assert tr.custom_tool_uses == (ToolUse("ev_02", "lookup_customer", {"id": "c9"}),)
    assert tr.stop_reason == {"type": "requires_action", "event_ids": ["ev_02"]}
    assert tr.usage == Usage(812, 64, 512, 0, raw=(events[2]["model_usage"],))
    assert tr.events == tuple(events) and tr.text == "" and tr.server_tool_uses == ()


def test_C14_uses_follow_event_ids_order_skip_server_tools_unlisted_answered_and_dead_threads() -> None:
    e1, e2 = custom_use("a", {"k": 1}), custom_use("b", None)
    server = ev("agent.tool_use", name="bash", input={"command": "ls"}, evaluated_permission="ask")
    answered = custom_use("c")
    dead = custom_use("d", session_thread_id="sthr_dead")
    unlisted = custom_use("e")
    events = [
        e1,
        e2,
        server,
        answered,
        result_echo(answered),
        dead,
        ev("session.thread_status_terminated", session_thread_id="sthr_dead", agent_name="sub"),
        unlisted,
        idle(
            "requires_action",
            event_ids=[e2["id"], e1["id"], server["id"], answered["id"], dead["id"], "ev_gone"],
        ),
    ]
    tr = CODEC.normalize(events)
    assert tr.custom_tool_uses == (ToolUse(e2["id"], "b", {}), ToolUse(e1["id"], "a", {"k": 1}))
    assert tr.server_tool_uses == (server,)  # P-6: observe-only


def test_C14_custom_uses_are_only_actionable_on_requires_action() -> None:
    use = custom_use("a")
    assert CODEC.normalize([use, idle("end_turn")]).custom_tool_uses == ()


def test_C14_an_idle_listing_tool_uses_from_an_earlier_batch_resolves_nothing_here() -> None:
    tr = CODEC.normalize([idle("requires_action", event_ids=["ev_earlier"])])
    assert tr.terminal is Terminal.REQUIRES_ACTION and tr.custom_tool_uses == ()


def test_C14_a_nameless_or_inputless_custom_use_does_not_crash() -> None:
    use = ev("agent.custom_tool_use", input="not a map")
    tr = CODEC.normalize([use, ra(use)])
    (got,) = tr.custom_tool_uses
    assert (got.id, got.name, got.input) == (use["id"], "unknown", {})
    # ...and it is not run with {} (issue #12): the session answers it with this error.
    assert got.input_error is not None and "got a string" in got.input_error
    bare = ev("agent.custom_tool_use", name="lookup")  # no input: a tool without parameters
    assert CODEC.normalize([bare, ra(bare)]).custom_tool_uses == (ToolUse(bare["id"], "lookup", {}),)


def test_C13_the_most_recent_boundary_decides() -> None:
    tr = CODEC.normalize([idle("requires_action", event_ids=[]), msg("x"), idle("end_turn")])
    assert tr.terminal is Terminal.END_TURN


@pytest.mark.parametrize(
    "stop,terminal",
    [
        ("end_turn", Terminal.END_TURN),
        ("requires_action", Terminal.REQUIRES_ACTION),
        ("retries_exhausted", Terminal.TERMINATED),
        ("budget_reached", Terminal.TERMINATED),  # S-76 decision
        ("refusal", Terminal.TERMINATED),
        ("satisfied", Terminal.END_TURN),  # reference alias
        ("max_iterations_reached", Terminal.END_TURN),  # reference alias
        ("failed", Terminal.TERMINATED),  # reference alias
        ("something_new", Terminal.TERMINATED),
        (None, Terminal.TERMINATED),  # C-16: never crash on a null stop reason
    ],
)
def test_C15_C16_terminal_mapping_of_idle_stop_reasons(stop: str | None, terminal: Terminal) -> None:
    event = idle(stop)
    tr = CODEC.normalize([event])
    assert tr.terminal is terminal
    assert tr.stop_reason is event["stop_reason"]  # C-17, S-63


def test_S76_budget_reached_is_terminated_with_the_raw_stop_reason() -> None:
    tr = CODEC.normalize([msg("partial"), idle("budget_reached")])
    assert tr.terminal is Terminal.TERMINATED
    assert tr.stop_reason == {"type": "budget_reached"}
    assert tr.text == "partial"


def test_C15_a_bare_string_stop_reason_is_tolerated() -> None:
    assert CODEC.normalize([ev("session.status_idle", stop_reason="end_turn")]).terminal is Terminal.END_TURN


def test_C16_terminated_and_deleted_sessions_and_batches_without_a_boundary() -> None:
    terminated = ev("session.status_terminated")
    assert CODEC.normalize([terminated]).terminal is Terminal.TERMINATED
    assert CODEC.normalize([terminated]).stop_reason is None  # §15 #12: no stop_reason field
    fixture = ev("session.status_terminated", stop_reason={"type": "error"})
    assert CODEC.normalize([fixture]).stop_reason == {"type": "error"}
    assert CODEC.normalize([ev("session.deleted")]).terminal is Terminal.TERMINATED
    tr = CODEC.normalize([msg("hi")])
    assert (tr.terminal, tr.stop_reason, tr.text) == (Terminal.TERMINATED, None, "hi")
    assert CODEC.normalize([]).terminal is Terminal.TERMINATED


def test_C9_boundaries_follow_the_sdk_session_error_and_spans_are_not() -> None:
    boundaries = [idle("end_turn"), idle("requires_action", event_ids=[]), idle(None)]
    boundaries += [ev("session.status_terminated"), ev("session.deleted")]
    assert all(CODEC.turn_boundary(e) for e in boundaries)
    not_boundaries = [
        ev(
            "session.error",
            error={"type": "unknown_error", "message": "m", "retry_status": {"type": "terminal"}},
        ),
        ev("span.outcome_evaluation_end", result="needs_revision"),
        ev("span.outcome_evaluation_end", result="satisfied"),
        msg("x"),
        custom_use(),
        ev(
            "session.thread_status_idle",
            session_thread_id="t",
            agent_name="a",
            stop_reason={"type": "end_turn"},
        ),
        ev("workflow_run.status_idle", workflow_run_id="w"),
        ev("session.status_rescheduled"),
        {"type": "event_delta", "event_id": "x", "delta": {}},
        "not even a map",
        None,
    ]
    assert not any(CODEC.turn_boundary(e) for e in not_boundaries)


def test_session_error_is_informational_the_idle_after_it_decides() -> None:
    error = ev(
        "session.error",
        error={"type": "model_overloaded_error", "message": "m", "retry_status": {"type": "exhausted"}},
    )
    tr = CODEC.normalize([error, idle("retries_exhausted")])
    assert tr.terminal is Terminal.TERMINATED and tr.stop_reason == {"type": "retries_exhausted"}
    retrying = ev(
        "session.error", error={"type": "unknown_error", "message": "m", "retry_status": {"type": "retrying"}}
    )
    assert CODEC.normalize([retrying, msg("done"), idle("end_turn")]).terminal is Terminal.END_TURN


def test_session_error_retry_status_is_readable() -> None:
    for status in ("retrying", "exhausted", "terminal"):
        error = {"type": "mcp_connection_failed_error", "message": "m", "mcp_server_name": "s"}
        event = ev("session.error", error={**error, "retry_status": {"type": status}})
        assert cma.retry_status(event) == status
    assert cma.retry_status(ev("session.error", error="odd")) is None
    assert cma.retry_status(idle()) is None


def test_S58_an_outcome_runs_as_one_turn_needs_revision_is_not_a_boundary() -> None:
    outcome_events = [
        ev(
            "user.define_outcome",
            description="d",
            rubric={"type": "text", "content": "r"},
            outcome_id="outc_1",
        ),
        ev("session.status_running"),
        msg("draft"),
        ev("span.outcome_evaluation_start", outcome_id="outc_1", iteration=0),
        ev("span.outcome_evaluation_ongoing", outcome_id="outc_1", iteration=0),
        ev("span.outcome_evaluation_end", outcome_id="outc_1", iteration=0, result="needs_revision"),
        msg("final"),
        ev("span.outcome_evaluation_start", outcome_id="outc_1", iteration=1),
        ev("span.outcome_evaluation_end", outcome_id="outc_1", iteration=1, result="satisfied"),
        idle("end_turn"),
    ]
    assert [i for i, e in enumerate(outcome_events) if CODEC.turn_boundary(e)] == [len(outcome_events) - 1]
    tr = CODEC.normalize(outcome_events)
    assert tr.terminal is Terminal.END_TURN and tr.text == "draft\nfinal"
    assert cma.outcome_result(outcome_events) == "satisfied"


@pytest.mark.parametrize(
    "verdict,terminal",
    [
        ("satisfied", Terminal.END_TURN),
        ("max_iterations_reached", Terminal.END_TURN),
        ("interrupted", Terminal.END_TURN),
        ("failed", Terminal.TERMINATED),
    ],
)
def test_S58_the_outcome_verdict_decides_an_end_turn_idle(verdict: str, terminal: Terminal) -> None:
    events = [ev("span.outcome_evaluation_end", result=verdict), idle("end_turn")]
    assert CODEC.normalize(events).terminal is terminal
    assert CODEC.normalize(events).stop_reason == {"type": "end_turn"}  # S-63: raw, not the verdict


def test_S58_the_reference_verdict_field_is_a_fallback() -> None:
    events = [ev("span.outcome_evaluation_end", verdict="failed"), idle("end_turn")]
    assert CODEC.normalize(events).terminal is Terminal.TERMINATED
    assert cma.outcome_result(events) == "failed"


def test_C18_C21_text_is_one_chunk_per_message_joined_by_newlines() -> None:
    m1 = msg("Hello, ", "world")
    m2 = ev("agent.message", content=[{"type": "redacted"}, {"type": "text", "text": "again"}])
    only_redacted = ev("agent.message", content=[{"type": "redacted"}])
    tr = CODEC.normalize([m1, only_redacted, ev("agent.thinking"), m2, idle()])
    assert tr.text == "Hello, world\nagain"
    assert [CODEC.text_delta(e) for e in (m1, m2, only_redacted)] == ["Hello, world", "again", None]
    assert tr.text == "\n".join(d for e in tr.events if (d := CODEC.text_delta(e)) is not None)
    assert CODEC.normalize([idle()]).text == ""


def test_C21_text_delta_is_none_for_everything_but_agent_messages() -> None:
    for event in [
        custom_use(),
        idle(),
        ev("user.message", content=[{"type": "text", "text": "x"}]),
        {},
        None,
        "x",
    ]:
        assert CODEC.text_delta(event) is None


def test_C19_P6_server_and_mcp_tool_uses_are_observe_only_and_raw() -> None:
    tool = ev("agent.tool_use", name="bash", input={"command": "ls"})
    mcp = ev("agent.mcp_tool_use", name="search", mcp_server_name="docs", input={})
    results = [
        ev("agent.tool_result", tool_use_id=tool["id"]),
        ev("agent.mcp_tool_result", mcp_tool_use_id=mcp["id"]),
    ]
    tr = CODEC.normalize([tool, *results, mcp, idle()])
    assert tr.server_tool_uses == (tool, mcp) and tr.custom_tool_uses == ()


def test_C20_usage_sums_all_four_token_counts_and_keeps_the_raw_maps() -> None:
    a, b = model_end(10, 5, 100, 7), model_end(1, 2, 3, 4)
    legacy = ev("span.model_request_end", usage={"input_tokens": 2, "output_tokens": 1})
    bad = ev(
        "span.model_request_end", model_usage={"input_tokens": -1, "output_tokens": "7", "speed": "fast"}
    )
    tr = CODEC.normalize([a, legacy, b, bad, idle()])
    assert tr.usage == Usage(
        13, 8, 103, 11, raw=(a["model_usage"], legacy["usage"], b["model_usage"], bad["model_usage"])
    )
    assert CODEC.normalize([msg("x"), idle()]).usage is None


def test_C20_grader_usage_and_session_usage_snapshots_are_read_apart() -> None:
    grader = ev(
        "span.outcome_evaluation_end",
        result="satisfied",
        usage={
            "input_tokens": 50,
            "output_tokens": 9,
            "cache_read_input_tokens": 1,
            "cache_creation_input_tokens": 2,
        },
    )
    snapshot = {"input_tokens": 99, "list_cost": {"amount": "120", "currency": "USD"}}
    events = [model_end(1, 1), grader, ev("session.usage", usage=snapshot), idle()]
    tr = CODEC.normalize(events)
    assert tr.usage is not None and (tr.usage.input_tokens, tr.usage.output_tokens) == (
        1,
        1,
    )  # no double count
    assert cma.grader_usage(events) == Usage(50, 9, 1, 2, raw=(grader["usage"],))
    assert cma.usage_snapshot(events) == snapshot
    assert cma.model_usage(events) == tr.usage


def test_P4_unknown_events_and_non_maps_are_kept_verbatim() -> None:
    weird = [{"type": "brand.new_event", "id": "z", "payload": [1, 2]}, {"no": "type"}, "text", 3, None]
    tr = CODEC.normalize([*weird, idle()])
    assert tr.events == (*weird, tr.events[-1]) and tr.terminal is Terminal.END_TURN


def test_C43_classify() -> None:
    cases = {
        "end_turn": idle("end_turn"),
        "requires_action": idle("requires_action", event_ids=[]),
        "retries_exhausted": idle("retries_exhausted"),
        "budget_reached": idle("budget_reached"),
        "refusal": idle("refusal"),
        "unknown_idle": idle("novel"),
        "terminated": ev("session.status_terminated"),
        "deleted": ev("session.deleted"),
        "error": ev("session.error", error={}),
    }
    for expected, event in cases.items():
        assert cma.classify(event) == expected
    assert cma.classify(idle("satisfied")) == cma.classify(idle("max_iterations_reached")) == "end_turn"
    assert cma.classify(idle("failed")) == "terminated"
    assert cma.classify(idle(None)) == "other" and cma.classify(msg("x")) == "other"


# --- history: R-20…R-22, S-52, C-11, confirmations -------------------------------------------


def test_R20_dedupe() -> None:
    a, b = {"id": "a", "type": "x"}, {"id": "b", "type": "x"}
    no_id, odd_id = {"type": "event_delta"}, {"id": 7, "type": "x"}
    fresh, seen = dedupe([a, no_id, b, a, no_id, odd_id, b], {"b"})
    assert fresh == (a, no_id, no_id, odd_id)
    assert seen == frozenset({"a", "b"})


def test_R21_unanswered_tool_uses_in_history_order() -> None:
    u1, u2, u3 = custom_use("a"), custom_use("b"), custom_use("c")
    server = ev("agent.tool_use", name="bash", input={})
    history = [u1, u2, server, result_echo(u1), u3, u2]
    assert unanswered_tool_uses(history) == (u2, u3)


def test_R22_pending_requires_action() -> None:
    stop = {"type": "requires_action", "event_ids": ["ev_x"]}
    pending = ev("session.status_idle", stop_reason=stop)
    assert pending_requires_action([msg("x"), pending, result_echo({"id": "ev_x"})]) is stop
    assert pending_requires_action([pending, idle("end_turn")]) is None  # a later typed idle resolves it
    assert pending_requires_action([msg("x")]) is None
    assert pending_requires_action([pending, ev("session.status_terminated")]) is None  # no input any more


def test_S52_C11_pending_tool_uses_recover_a_requires_action_from_earlier_batches() -> None:
    u1, u2 = custom_use("a", {"q": 1}), custom_use("b")
    batch1 = [ev("session.status_running"), u1, u2, model_end()]
    batch2 = [idle("requires_action", event_ids=[u2["id"], u1["id"]])]
    tr = CODEC.normalize(batch2)
    assert tr.terminal is Terminal.REQUIRES_ACTION and tr.custom_tool_uses == ()
    assert CODEC.pending_tool_uses(batch1 + batch2) == (
        ToolUse(u2["id"], "b", {}),
        ToolUse(u1["id"], "a", {"q": 1}),
    )


def test_S52_pending_tool_uses_skip_answered_and_dead_threads_and_need_an_outstanding_idle() -> None:
    u1, u2, dead = custom_use("a"), custom_use("b"), custom_use("c", session_thread_id="sthr_9")
    killed = ev("session.thread_status_terminated", session_thread_id="sthr_9", agent_name="sub")
    history = [u1, u2, dead, killed, result_echo(u1), ra(u1, u2, dead)]
    assert CODEC.pending_tool_uses(history) == (ToolUse(u2["id"], "b", {}),)
    assert CODEC.pending_tool_uses([u1, u2]) == ()  # no requires_action: nothing is awaited
    assert CODEC.pending_tool_uses([u1, ra(u1), idle("end_turn")]) == ()


def test_S52_an_idle_without_event_ids_falls_back_to_every_unanswered_custom_use() -> None:
    u1, u2 = custom_use("a"), custom_use("b")
    history = [u1, u2, result_echo(u2), idle("requires_action")]
    assert CODEC.pending_tool_uses(history) == (ToolUse(u1["id"], "a", {}),)


def test_confirmations_required_are_the_listed_non_custom_tool_uses_still_unconfirmed() -> None:
    custom = custom_use("mine")
    ask = ev("agent.tool_use", name="bash", input={}, evaluated_permission="ask")
    mcp = ev("agent.mcp_tool_use", name="q", mcp_server_name="s", input={}, evaluated_permission="ask")
    confirmed = ev("agent.tool_use", name="write", input={}, evaluated_permission="ask")
    denied = ev("agent.tool_use", name="rm", input={}, evaluated_permission="deny")
    dead = ev("agent.tool_use", name="x", input={}, session_thread_id="sthr_dead")
    history = [
        custom,
        ask,
        mcp,
        confirmed,
        ev("user.tool_confirmation", tool_use_id=confirmed["id"], result="allow"),
        denied,
        dead,
        ev("session.thread_status_terminated", session_thread_id="sthr_dead", agent_name="a"),
        ra(mcp, custom, ask, confirmed, denied, dead),
    ]
    assert CODEC.confirmations_required(history) == (mcp, ask)
    assert CODEC.normalize(history).custom_tool_uses == (ToolUse(custom["id"], "mine", {}),)
    assert CODEC.confirmations_required([*history, idle("end_turn")]) == ()


def test_session_idle() -> None:
    assert cma.session_idle([])  # sessions start idle
    assert cma.session_idle([msg("x"), idle(), ev("session.usage", usage={}), ev("session.updated")])
    assert cma.session_idle([ev("session.status_terminated"), {"type": "brand.new"}])
    assert not cma.session_idle([idle(), ev("user.message", content=[])])  # work is about to start
    assert not cma.session_idle([idle(), ev("session.status_running")])
    assert not cma.session_idle([idle(), ev("session.status_running"), ev("session.thread_status_idle")])


# --- consolidation (R-18, R-19) --------------------------------------------------------------


def ids(events: Sequence[Any]) -> list[str]:
    return [e["id"] for e in events]


def test_R19_merge_dedupes_the_buffer_against_the_listing_and_keeps_its_tail() -> None:
    a, b, c_, d = msg("a"), msg("b"), msg("c"), idle()
    early_preview = {"type": "event_start", "event": {"type": "agent.message", "id": b["id"]}}
    late_preview = {"type": "event_start", "event": {"type": "agent.message", "id": "ev_future"}}
    merged = merge_history([a, b, a], [early_preview, b, c_, late_preview, d, c_])
    assert merged == (a, b, c_, late_preview, d)


def test_R18_a_terminal_that_happened_while_disconnected_is_replayed() -> None:
    seen_part = [ev("user.message", content=[]), ev("session.status_running"), msg("before")]
    missed = [msg("while away"), model_end(), idle("end_turn")]
    got = consolidate(seen_part + missed, ids(seen_part))
    # The open turn is re-folded (the machine dropped its partial buffer), then the rest.
    assert got.replay == tuple(seen_part + missed)
    assert got.refolded == len(seen_part) and got.pending == () and got.idle
    assert set(got.seen).isdisjoint(ids(got.replay))


def test_R18_settled_turns_are_not_replayed_and_their_ids_are_seeded() -> None:
    turn1 = [ev("user.message", content=[]), msg("one"), idle("end_turn")]
    turn2 = [ev("user.message", content=[]), msg("two")]
    missed = [idle("end_turn")]
    got = consolidate(turn1 + turn2 + missed, ids(turn1 + turn2))
    assert got.replay == tuple(turn2 + missed)
    assert set(got.seen) == set(ids(turn1))


def test_R18_a_requires_action_whose_tool_uses_arrived_before_the_drop_recovers_by_folding() -> None:
    u = custom_use("lookup", {"id": "c9"})
    seen_part = [ev("user.message", content=[]), ev("session.status_running"), u]
    missed = [model_end(), ra(u)]
    got = consolidate(seen_part + missed, ids(seen_part))
    assert got.pending == ()  # folded, not redriven
    assert CODEC.normalize(got.replay).custom_tool_uses == (ToolUse(u["id"], "lookup", {"id": "c9"}),)


def test_R19_buffered_events_newer_than_the_listing_are_folded_once() -> None:
    listed = [ev("user.message", content=[]), msg("a")]
    newer = [msg("b"), idle("end_turn")]
    got = consolidate(listed, [], buffered=[listed[1], *newer, newer[0]])
    assert got.replay == tuple(listed + newer)


def test_R16_seen_keeps_prior_ids_absent_from_the_listing() -> None:
    done = [msg("a"), idle()]
    got = consolidate(done, ["ev_old_window", *ids(done)])
    assert got.replay == () and got.seen == ("ev_old_window", *ids(done))


def test_R4_attach_redrives_the_outstanding_requires_action_and_replays_nothing_settled() -> None:
    old = [ev("user.message", content=[]), msg("old"), idle("end_turn")]
    u1, u2, done = custom_use("a"), custom_use("b"), custom_use("c")
    ask = ev("agent.tool_use", name="bash", input={}, evaluated_permission="ask")
    current = [
        ev("user.message", content=[]),
        done,
        ra(done),
        result_echo(done),
        u1,
        u2,
        ask,
        ra(u1, ask, u2),
    ]
    got = consolidate(old + current, (), attach=True)
    assert got.replay == ()
    assert got.pending == (ToolUse(u1["id"], "a", {}), ToolUse(u2["id"], "b", {}))
    assert got.confirmations == (ask,)
    assert got.idle and set(got.seen) == set(ids(old + current))


def test_R1_attach_to_a_running_session_replays_its_open_turn() -> None:
    old = [ev("user.message", content=[]), msg("old"), idle("end_turn")]
    running = [ev("user.message", content=[]), ev("session.status_running"), msg("half")]
    got = consolidate(old + running, (), attach=True)
    assert got.replay == tuple(running) and got.pending == () and not got.idle


def test_a_processed_requires_action_is_never_redriven() -> None:
    # The client saw the idle, ran the tool and posted; the echo is not listed yet.
    u = custom_use("a")
    history = [ev("user.message", content=[]), u, ra(u)]
    got = consolidate(history, ids(history))
    assert got.pending == () and got.replay == ()


def test_session_over_is_reported() -> None:
    assert consolidate([msg("x"), ev("session.status_terminated")], ()).session_over
    assert not consolidate([msg("x"), idle()], ()).session_over


# --- consolidation through the real session machine --------------------------------------------


class Client:
    """Drives ``rma.session.machine.step`` with this codec, answering tools and pushes at once."""

    def __init__(self, *, resumed: bool = False, prompt: str | None = "go") -> None:
        self.s: State = initial_state(SessionConfig(codec=CODEC, live=True, prompt=prompt))
        self.runs: list[str | None] = []
        self.results: list[SessionResult] = []
        self.reconnects: list[c.Reconnect] = []
        self.delivered: list[Any] = []
        self.feed(Opened("sesn_1", resumed=resumed))
        if not resumed:
            self.feed(StreamConnected(0))

    def feed(self, *events: Event) -> None:
        queue = list(events)
        while queue:
            self.s, out = step(self.s, queue.pop(0))
            replies: list[Event] = []
            for cmd in out:
                if isinstance(cmd, c.RunTools):
                    self.runs += [u.id for u in cmd.uses]
                    replies.append(ToolsFinished(cmd.batch, [ToolResult(u.id, f"r{u.id}") for u in cmd.uses]))
                elif isinstance(cmd, c.PushInput):
                    replies.append(PushFinished(Success(None)))
                elif isinstance(cmd, c.Finish):
                    self.results.append(cmd.outcome.unwrap())
                elif isinstance(cmd, c.Reconnect):
                    self.reconnects.append(cmd)
                elif isinstance(cmd, c.DeliverEvent):
                    self.delivered.append(cmd.event)
            queue[:0] = replies

    def stream(self, events: Sequence[Any]) -> None:
        for event in events:
            self.feed(StreamEvent(self.s.gen, event))

    def drop_and_reconnect(
        self, listing: Sequence[Any], buffered: Sequence[Any] = (), attach: bool = False
    ) -> None:
        if not attach:
            self.feed(StreamFailed(self.s.gen, StreamDropped()), ReconnectTimerFired())
        seen = self.reconnects[-1].seen
        got = consolidate(listing, seen, buffered, attach=attach)
        self.feed(ReconnectFinished(Success(got.reconnected("sesn_1"))))


def test_R18_through_the_machine_a_terminal_during_the_drop_finishes_the_request() -> None:
    history = [
        ev("user.message", content=[]),
        ev("session.status_running"),
        msg("before"),
        msg("after"),
        idle(),
    ]
    client = Client()
    client.stream(history[:3])
    client.drop_and_reconnect(history)
    (result,) = client.results
    assert result.terminal is Terminal.END_TURN and result.text == "before\nafter"
    assert result.events == tuple(history)  # E-8: recorded exactly once, in order


def test_R18_through_the_machine_tool_uses_from_before_the_drop_run_once() -> None:
    u1, u2 = custom_use("a"), custom_use("b")
    history = [
        ev("user.message", content=[]),
        u1,
        u2,
        ra(u1, u2),
        result_echo(u1),
        result_echo(u2),
        msg("done"),
        idle(),
    ]
    client = Client()
    client.stream(history[:3])
    client.drop_and_reconnect(history[:4])
    assert client.runs == [u1["id"], u2["id"]]
    client.stream(history[4:])
    (result,) = client.results
    assert result.text == "done" and result.events == tuple(history)
    assert client.runs == [u1["id"], u2["id"]]


def test_R4_through_the_machine_attach_redrives_once() -> None:
    u = custom_use("a")
    history = [ev("user.message", content=[]), u, ra(u)]
    client = Client(resumed=True, prompt=None)
    client.drop_and_reconnect(history, attach=True)
    assert client.runs == [u["id"]]
    client.stream([*history, result_echo(u), msg("ok"), idle()])  # the stream may re-deliver listed events
    assert client.runs == [u["id"]]
    assert client.results[-1].text == "ok"


# Hypothesis: a session's history, one drop anywhere, any subscribe/list/buffer timing.


@st.composite
def sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    counter = itertools.count(1)

    def e(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "id": f"h{next(counter)}", **fields}

    history = [e("user.message", content=[{"type": "text", "text": "go"}]), e("session.status_running")]
    for turn in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            history.append(e("agent.message", content=[{"type": "text", "text": f"t{turn}"}]))
        uses = [
            e("agent.custom_tool_use", name=f"tool{i}", input={"i": i})
            for i in range(draw(st.integers(1, 3)))
        ]
        history += uses
        if draw(st.booleans()):
            history.append(e("agent.tool_use", name="bash", input={}))
        history.append(e("span.model_request_end", model_usage={"input_tokens": 1, "output_tokens": 1}))
        history.append(
            e(
                "session.status_idle",
                stop_reason={"type": "requires_action", "event_ids": [u["id"] for u in uses]},
            )
        )
        history += [e("user.custom_tool_result", custom_tool_use_id=u["id"], content=[]) for u in uses]
        history.append(e("session.status_running"))
    history.append(e("agent.message", content=[{"type": "text", "text": "final"}]))
    ending = draw(st.sampled_from(["end_turn", "budget_reached", "terminated"]))
    if ending == "terminated":
        error = {"type": "unknown_error", "message": "m", "retry_status": {"type": "terminal"}}
        history += [e("session.error", error=error), e("session.status_terminated")]
    else:
        history.append(e("session.status_idle", stop_reason={"type": ending}))
    return history


@settings(max_examples=300, deadline=None)
@given(history=sessions(), data=st.data())
def test_R18_R19_property_one_drop_anywhere_loses_nothing_and_runs_every_tool_once(
    history: list[dict[str, Any]], data: st.DataObject
) -> None:
    n = len(history)
    cut = data.draw(st.integers(0, n), label="client saw")
    subscribed = data.draw(st.integers(cut, n), label="new stream from")
    listed = data.draw(st.integers(subscribed, n), label="listing up to")
    buffered_to = data.draw(st.integers(listed, n), label="buffer up to")

    client = Client()
    client.stream(history[:cut])
    client.feed(StreamFailed(client.s.gen, StreamDropped()), ReconnectTimerFired())
    seen = client.reconnects[-1].seen
    got = consolidate(history[:listed], seen, history[subscribed:buffered_to])

    # The rule, literally: replay = H after the last boundary the client processed.
    position = max((i for i in range(cut) if CODEC.turn_boundary(history[i])), default=-1)
    assert got.replay == tuple(history[position + 1 : buffered_to])
    assert got.pending == ()  # a drop never redrives: outstanding idles are processed or replayed
    replay_ids = set(ids(got.replay))
    assert replay_ids.isdisjoint(got.seen)
    assert replay_ids | set(got.seen) >= set(ids(history[:buffered_to]))
    # (with nothing redriven, no tool use can be both redriven and folded)

    client.feed(ReconnectFinished(Success(got.reconnected("sesn_1"))))
    client.stream(history[buffered_to:])

    expected_runs = [
        i
        for e in history
        if e["type"] == "session.status_idle"
        for i in e["stop_reason"].get("event_ids", [])
    ]
    assert client.runs == expected_runs  # every tool exactly once, in order
    final = client.results[-1]
    assert len(client.results) == 1
    assert final.events == tuple(history)  # E-8: the record is exactly the history
    assert final.text == "final"
    ended_well = history[-1].get("stop_reason") == {"type": "end_turn"}
    assert final.terminal is (Terminal.END_TURN if ended_well else Terminal.TERMINATED)


@settings(max_examples=200, deadline=None)
@given(history=sessions(), data=st.data())
def test_R1_R4_property_attach_anywhere_never_runs_a_tool_twice(
    history: list[dict[str, Any]], data: st.DataObject
) -> None:
    n = len(history)
    subscribed = data.draw(st.integers(0, n), label="stream from")
    listed = data.draw(st.integers(subscribed, n), label="listing up to")
    buffered_to = data.draw(st.integers(listed, n), label="buffer up to")
    client = Client(resumed=True, prompt=None)
    got = consolidate(history[:listed], (), history[subscribed:buffered_to], attach=True)
    folded_uses = {e["id"] for e in got.replay if e["type"] == "agent.custom_tool_use"}
    assert folded_uses.isdisjoint({use.id for use in got.pending})
    client.feed(ReconnectFinished(Success(got.reconnected("sesn_1"))))
    client.stream(history[buffered_to:])
    assert len(client.runs) == len(set(client.runs))
    listed_ids = {
        i
        for e in history
        if e["type"] == "session.status_idle"
        for i in e["stop_reason"].get("event_ids", [])
    }
    assert set(client.runs) <= listed_ids
    # Every requires_action the attached client could not have settled gets answered.
    position = max((i for i in range(buffered_to) if CODEC.turn_boundary(history[i])), default=-1)
    later = [e for e in history[position + 1 :] if e["type"] == "session.status_idle"]
    for event in later:
        assert set(event["stop_reason"].get("event_ids", [])) <= set(client.runs)
