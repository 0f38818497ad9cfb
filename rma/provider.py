"""The pure half of a provider: how a loop host's events and inputs look (P-1…P-8).

A codec knows a host's wire vocabulary — how to build a kickoff, a follow-up and a tool
resume, how to tell a turn boundary, how to normalize a turn's raw events into a
``TurnResult`` — and nothing about transport. The session machine calls these functions;
the shell pairs the codec with a transport (``rma_shell.providers``) that opens
connections and moves the inputs built here. Optional capabilities (P-3) are explicit
attributes with safe defaults, not "is this method defined" probes.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from rma.content import TEXT_ONLY, ContentLimits
from rma.live import LiveTurn, LiveUpdate, common_updates
from rma.vocabulary import JSON, Outcome, ToolResult, ToolUse, TurnResult

DEFAULT_PROMPT = "Begin."
"""Kickoff text when the caller gives no prompt (A.6)."""


class Mode(enum.StrEnum):
    """How a provider acquires a turn (S-20…S-28): the only mode-specific step."""

    STREAMING = "streaming"
    REQUEST_RESPONSE = "request_response"


Input = JSON
"""An input for the provider's transport (a push or a poll), built by the codec."""


class ProviderCodec:
    """Base codec. Subclasses override what their host needs; defaults are the safe choice."""

    name: str = "provider"
    mode: Mode = Mode.REQUEST_RESPONSE
    supports_outcomes: bool = False
    supports_budget: bool = False
    empty_resume_safe: bool = False
    """True when a resume carrying no tool results is a valid input (Local: S-56 Better)."""
    has_text_delta: bool = False
    content_limits: ContentLimits = TEXT_ONLY
    """What the host takes in a tool result besides text (``rma.content``): text only unless
    the codec says more."""

    def kickoff_input(self, prompt: str | None, outcome: Outcome | None) -> Input:
        if outcome is not None:
            raise NotImplementedError(f"{self.name} has no outcome kickoff")
        return self.user_input(prompt if prompt is not None else DEFAULT_PROMPT)

    def user_input(self, text: str) -> Input:
        raise NotImplementedError

    def resume_input(self, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> Input:
        raise NotImplementedError

    def normalize(self, events: Sequence[JSON]) -> TurnResult:
        raise NotImplementedError

    def turn_boundary(self, event: JSON) -> bool:
        """Streaming providers: does this event end a turn?"""
        return False

    def text_delta(self, event: JSON) -> str | None:
        return None

    def live_updates(self, event: JSON) -> tuple[LiveUpdate, ...]:
        """The host-independent live updates (``rma.live``) one raw event carries: text deltas
        and custom tool-call starts. Pure and total; the machine adds tool-call finishes and
        turn ends. The default knows only the transports' ``rma.attempt_discarded`` marker."""
        return common_updates(event)

    def is_preview(self, event: JSON) -> bool:
        """Is ``event`` a preview of an event still being produced (Claude's ``event_start`` /
        ``event_delta``)? A preview feeds live updates only — never ``handle_event``, a turn's
        events, its dedupe or its telemetry: the final event is the source of truth."""
        return False

    def live_fold(
        self, live: LiveTurn, event: JSON, turn: Sequence[JSON]
    ) -> tuple[LiveTurn, tuple[LiveUpdate, ...]]:
        """``live_updates`` for hosts whose updates depend on what the open turn already said
        (``turn``: its events so far, previews excluded). Pure and total. The default folds
        nothing."""
        return live, self.live_updates(event)

    def pending_tool_uses(self, history: Sequence[JSON]) -> tuple[ToolUse, ...]:
        """Tool uses in ``history`` (oldest first) that still await a result (S-52)."""
        return ()

    def confirmation_uses(self, events: Sequence[JSON]) -> tuple[ToolUse, ...]:
        """Host-run tool calls the outstanding requires_action waits to have confirmed."""
        return ()

    def answer_input(
        self,
        uses: Sequence[ToolUse],
        results: Sequence[ToolResult],
        confirmations: Sequence[ToolUse],
        verdicts: Sequence[ToolResult],
    ) -> Input:
        """The input answering a requires_action: tool results, then confirmation verdicts.

        A verdict is a ToolResult: ``is_error`` False allows the call, True denies it with
        ``text`` as the reason. Hosts without confirmations only ever get tool results.
        """
        if confirmations:
            raise NotImplementedError(f"{self.name} has no tool confirmations")
        return self.resume_input(uses, results)


_CODECS: dict[str, type[ProviderCodec]] = {}


def register_codec(cls: type[ProviderCodec]) -> type[ProviderCodec]:
    """Make a codec findable by name, so recorded logs can be replayed (``rma replay``)."""
    _CODECS[cls.name] = cls
    return cls


def codec_for(name: str) -> ProviderCodec:
    """A fresh codec registered under ``name``; KeyError names the known ones."""
    try:
        return _CODECS[name]()
    except KeyError:
        raise KeyError(f"no codec named {name!r} (known: {sorted(_CODECS)})") from None
