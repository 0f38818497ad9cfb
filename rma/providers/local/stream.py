"""Local with ``stream=True``, live: the raw events one streamed chunk carries (sans-IO).

``StreamedReply`` wraps ``rma.wire.openai_chat.ChunkAssembler``: the transport feeds it each
decoded ``chat.completion.chunk`` and sends the events it returns to the session at once
(``poll_turn``'s ``live``), so text and tool-call arguments reach ``handle_event`` as they
arrive rather than when the reply ends (E-10 for ``stream=False`` stays the whole reply):

- ``{"type": "local.text_delta", "text": …}`` — a piece of the reply's content;
- ``{"type": "local.tool_call_delta", "index": n, "id": …, "name": …, "arguments": …}`` — a
  piece of the n-th call's arguments (``n`` is the call's place in the reply's
  ``tool_calls``). ``id`` and ``name`` are set on exactly one delta per call, the one on which
  its name arrived — that delta is the call's start — and are None on the others. A call the
  server sent without a usable id gets the id the conversation will give it
  (``synthetic_call_id``), so the start names the call its finish will.

These events are live-only, like ``rma.text_delta``: the turn's record (``TurnResult.events``)
holds the reply's own events (``local.model_response`` …), which the transport also sends
live once the reply is whole, marked ``"streamed": true`` so that nothing is counted twice.
No I/O here; the transport owns the socket.
"""

from __future__ import annotations

from collections.abc import Collection

from returns.result import Failure, Result, Success

from rma.errors import SessionError
from rma.vocabulary import JSON
from rma.wire.openai_chat import ChunkAssembler

TEXT_DELTA = "local.text_delta"
TOOL_CALL_DELTA = "local.tool_call_delta"
STREAMED = "streamed"
"""The key ``apply_response(..., streamed=True)`` sets on the reply's events."""


def synthetic_call_id(poll: int, position: int, used: Collection[str]) -> str:
    """The id Local gives a call sent without a usable one (missing, empty or repeated)."""
    call_id = f"call_{poll}_{position}"
    while call_id in used:
        call_id += "_"
    return call_id


class StreamedReply:
    """One streamed reply being assembled; ``feed`` says what each chunk brought, as events.

    ``poll`` is the conversation's poll count for this request (``Conversation.polls`` after
    ``prepare_request``), used for the ids of calls the server sent without one.
    """

    def __init__(self, poll: int) -> None:
        self.assembler = ChunkAssembler()
        self._poll = poll
        self._ids: dict[int, str] = {}
        """The id each started call was announced with, by position."""
        self.live_events = 0
        """How many events ``feed`` returned so far (nothing streamed → nothing to discard)."""

    @property
    def finish_reason(self) -> str | None:
        return self.assembler.finish_reason

    def feed(self, chunk: JSON) -> Result[tuple[JSON, ...], SessionError]:
        fed = self.assembler.feed(chunk)
        if isinstance(fed, Failure):
            return Failure(fed.failure())
        content = fed.unwrap()
        events: list[JSON] = []
        if content:
            events.append({"type": TEXT_DELTA, "text": content})
        assembler = self.assembler
        for position, arguments in assembler.fragments:
            call_id, name = assembler.call(position)
            start = bool(name) and position not in self._ids
            if start:
                used = set(self._ids.values())
                if not call_id or call_id in used:
                    call_id = synthetic_call_id(self._poll, position, used)
                self._ids[position] = call_id
            elif not arguments:
                continue  # an id- or type-only fragment with nothing new to say
            events.append(
                {
                    "type": TOOL_CALL_DELTA,
                    "index": position,
                    "id": call_id if start else None,
                    "name": name if start else None,
                    "arguments": arguments,
                }
            )
        self.live_events += len(events)
        return Success(tuple(events))

    def finish(self) -> Result[dict[str, JSON], SessionError]:
        return self.assembler.finish()
