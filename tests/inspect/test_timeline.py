"""The timeline fold: turns from the core's own live updates, whatever the recorded run asked
for; an attempt that failed and was sent again is noted and its text dropped; durations from
the records' times; every shown value through the redactor."""

from __future__ import annotations

from rma.live import attempt_discarded_event
from rma.providers.scripted import ScriptedCodec
from rma.session import events as ev
from rma.session.options import SessionConfig
from rma.vocabulary import ToolResult
from rma_shell.inspect.timeline import Extras, Redactor, build
from tests.helpers import idle, text, tool, usage

CONFIG = SessionConfig(codec=ScriptedCodec(), prompt="go", provider_name="scripted")


def test_a_discarded_attempt_is_noted_and_its_text_dropped() -> None:
    events = [
        (ev.Opened("s1"), 10.0, 9.0),
        (ev.LiveEvent({"type": "text", "text": "half an ans"}), 10.5, 10.0),
        (ev.LiveEvent(attempt_discarded_event(1, "http_error")), 11.0, 10.5),
        (ev.LiveEvent({"type": "text", "text": "the whole answer"}), 11.5, 11.0),
        (ev.TurnPolled((text("the whole answer"), usage(5, 6), idle("end_turn"))), 12.0, 11.5),
    ]
    line = build(CONFIG, events, Redactor())
    (turn,) = line.turns
    assert turn.text == "the whole answer" and turn.discarded == ["http_error"]
    assert turn.usage is not None and (turn.usage.input_tokens, turn.usage.output_tokens) == (5, 6)
    assert turn.duration == 2.0  # from the open's record to the event that ended the turn
    assert [o.kind for o in line.outcomes] == ["end_turn"]


def test_calls_get_their_input_result_times_and_decision_and_everything_is_redacted() -> None:
    events = [
        (ev.Opened("s1"), 1.0, 0.5),
        (
            ev.TurnPolled(
                (
                    text("token sk-abcdef1234"),
                    tool("pay", "c1", amount=5, password="hunter22"),
                    usage(1, 2),
                    idle("requires_action", ["c1"]),
                )
            ),
            3.0,
            1.0,
        ),
        (ev.ToolsFinished(1, (ToolResult("c1", "paid with sk-abcdef1234", False),)), 4.5, 4.4),
        (ev.TurnPolled((text("done"), usage(3, 4), idle("end_turn"))), 6.0, 4.5),
    ]
    extras = Extras(starts={"c1": (2, 3.5)}, decisions={"c1": ("allow", "ok sk-abcdef1234")})
    line = build(CONFIG, events, Redactor(("sk-abcdef1234",)), extras)
    first, second = line.turns
    (call,) = first.calls
    assert first.text == "token ***" and call.input == {"amount": 5, "password": "***"}
    assert (call.result, call.status, call.attempts, call.decision, call.reason) == (
        "paid with ***",
        "done",
        2,
        "allow",
        "ok ***",
    )
    assert call.duration == 1.0 and first.duration == 2.0 and second.duration == 1.5
    assert (line.usage.input_tokens, line.usage.output_tokens) == (4, 6)


def test_a_failed_turn_is_an_error_and_the_outcome_says_so() -> None:
    from rma.errors import ProviderError

    events = [
        (ev.Opened("s1"), None, None),
        (ev.TurnFailed(ProviderError(detail="503 from sk-abcdef1234")), None, None),
    ]
    line = build(CONFIG, events, Redactor(("sk-abcdef1234",)))
    assert len(line.errors) == 1 and "503 from ***" in line.errors[0]
    assert not line.outcomes[0].ok and line.outcomes[0].kind == "provider_error"
    assert "sk-abcdef1234" not in line.outcomes[0].message
