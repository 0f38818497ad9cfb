"""Small builders shared by the session tests."""

from __future__ import annotations

from typing import Any

from rma.vocabulary import JSON

_counter = iter(range(1, 1_000_000))


def eid() -> str:
    return f"e{next(_counter)}"


def text(t: str, *, id: str | None = None) -> dict[str, JSON]:
    return {"type": "text", "text": t, "id": id or eid()}


def tool(name: str, id: str, **input: Any) -> dict[str, JSON]:
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def usage(i: int, o: int) -> dict[str, JSON]:
    return {"type": "usage", "input_tokens": i, "output_tokens": o, "id": eid()}


def idle(stop: str = "end_turn", event_ids: list[str] | None = None) -> dict[str, JSON]:
    ev: dict[str, JSON] = {"type": "idle", "stop_reason": {"type": stop}, "id": eid()}
    if event_ids is not None:
        ev["event_ids"] = event_ids
    return ev


def end(t: str = "done", i: int = 1, o: int = 1) -> list[dict[str, JSON]]:
    return [text(t), usage(i, o), idle("end_turn")]


def calls(*uses: dict[str, JSON], i: int = 1, o: int = 1) -> list[dict[str, JSON]]:
    return [*uses, usage(i, o), idle("requires_action", [str(u["id"]) for u in uses])]


class Recorder:
    """A handler that records every call and answers from a table."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any], Any]] = []
        self.events: list[JSON] = []
        self.infos: list[Any] = []
        self.answers = answers or {}

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> Any:
        self.calls.append((name, input, ctx))
        answer = self.answers.get(name, f"ok:{name}")
        if isinstance(answer, BaseException):
            raise answer
        return answer(input) if callable(answer) else answer

    def handle_event(self, event: JSON, ctx: Any, info: Any) -> None:
        self.events.append(event)
        self.infos.append(info)
