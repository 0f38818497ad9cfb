"""A loopback Claude Managed Agents server with a scripted agent.

``CMAEmulator`` runs a real HTTP/1.1 server on 127.0.0.1 (an OS-chosen port) in background
threads and speaks the Claude Managed Agents wire (beta ``managed-agents-2026-04-01``) the way
the official ``anthropic`` SDK (2.10.0) expects it, so any client — the SDK, httpx, rma's
provider — talks to it over its ordinary HTTP stack::

    with CMAEmulator(script=[tool_turn(("lookup", {"id": "c9"})), text_turn("Done.")]) as emu:
        client = anthropic.Anthropic(base_url=emu.base_url, api_key=emu.api_key)
        agent = client.beta.agents.create(name="bot", model="claude-sonnet-4-6")
        ...

What it serves (all under ``/v1``): agents (create, get with ``version``, update — versioned —,
list, versions list, archive), environments (create, get, update, list, archive, delete),
sessions (create, get, update, list — bidirectional cursor —, archive, delete), session
resources, events (``POST …/events``, ``GET …/events`` paginated, ``GET …/events/stream`` as
SSE) and files (multipart upload, list, metadata, content download, delete). Errors use the
API's envelope ``{"type": "error", "error": {"type", "message", "details"?}, "request_id"}``
and, where the SDK maps one, its ``error.details.error_code`` (``environment_not_found``,
``environment_archived``, ``invalid_metadata``, ``file_not_downloadable``).

The agent is a script: a list of turns, each a list of server events (build them with the
helpers below: ``agent_message``, ``custom_tool_use``, ``model_request_end``,
``idle_requires_action`` …, or whole turns with ``text_turn`` / ``tool_turn``) or a callable
``(SessionView, input_events) -> events``. Every session runs the emulator's script from its
first turn (``script_session`` gives one session its own). A turn starts when the client sends
a ``user.message`` or ``user.define_outcome``, or answers the last pending tool use
(``user.custom_tool_result``, ``user.tool_confirmation``, ``user.tool_result``); answering only
some re-emits a ``requires_action`` idle listing the rest. A turn may ``pause`` (the host
still at work, the session ``running``): the rest of it comes after the pause's seconds, or
never when a ``user.interrupt`` arrives first. ``user.interrupt`` stops the agent: whatever
its turn had left is dropped and an ``end_turn`` idle emitted (the session reads ``idle``);
``interrupts(session_id)`` lists the interrupts received. Input events are echoed into the
history (and to live streams) before the turn they trigger. Running out of turns answers the
triggering POST with a 400 of type ``emulator_script_exhausted``.

The emulator fills what the server fills: event ``id`` (``sevt_…``) and ``processed_at``;
``event_ids`` of a ``requires_action`` idle (the tool uses still waiting); ``model_request_start_id``
of a ``span.model_request_end`` (emitting the start first if the script did not);
``outcome_id``, ``iteration`` and ``outcome_evaluation_start_id`` of outcome spans; the
``outcome_id`` of a ``user.define_outcome`` echo. It tracks the session's ``status``, ``usage``
(from ``span.model_request_end``) and ``outcome_evaluations``.

The stream has no replay: a subscriber receives only events emitted after it connected.
Faults (``inject`` or ``faults=``; global or per session; each for ``times`` occurrences):
``status_once`` (the stream's ``GET …/events/stream`` included), ``drop_stream_after``,
``error_frame``, ``requires_action_from_earlier_batch``, ``terminal_while_disconnected``,
``close_idle_connection``, ``slow_interrupt`` (an interrupt the session is slow to obey),
``cut_response_head``, ``cut_preview`` (a stream cut in the middle of a message's previews).

Streams that ask ``event_deltas`` (``agent.message``, ``agent.thinking``) get ``event_start``
/ ``event_delta`` previews (``delta_chars`` of text each) before each such event;
``cut_message`` scripts a message previewed and never finished. Multi-agent sessions: see
``threads`` (``thread_created``, ``thread_status``, ``thread_message_sent`` /
``…_received``, ``in_thread``, ``custom_tool_use(…, session_thread_id=…)``).
A wrong or missing key always gets a 401.

Scripted turns are played synchronously while the triggering POST is handled (before its
response is written), under the emulator's lock: a callable turn may call the emulator's own
inspection methods (``history``, ``session``) but must not make HTTP calls to it.

It is not a model and not the real service: no sandbox, no tool execution, no costs.

The package, one concern a module: ``server`` (``CMAEmulator``: start-up, test controls,
HTTP plumbing), ``resources`` (agents, environments, sessions, files), ``streams`` (session
events in and out, the SSE stream), ``events`` (script types and event builders), ``faults``,
``wire`` (validation and the error envelope) and ``state`` (the stored records). Every public
name is importable from here.
"""

from rma_shell.testing.claude.events import JSONDict as JSONDict
from rma_shell.testing.claude.events import (
    ServerEvent,
    SessionView,
    Turn,
    agent_message,
    agent_thinking,
    agent_tool_result,
    agent_tool_use,
    custom_tool_use,
    cut_message,
    idle_budget_reached,
    idle_end_turn,
    idle_refusal,
    idle_requires_action,
    idle_retries_exhausted,
    in_thread,
    model_request_end,
    model_request_start,
    model_usage,
    outcome_evaluation_end,
    outcome_evaluation_ongoing,
    outcome_evaluation_start,
    pause,
    session_error,
    session_usage,
    status_idle,
    status_rescheduled,
    status_running,
    status_terminated,
    text_turn,
    thread_created,
    thread_message_received,
    thread_message_sent,
    thread_status,
    tool_turn,
)
from rma_shell.testing.claude.events import TurnFunction as TurnFunction
from rma_shell.testing.claude.faults import (
    CMAFault,
    close_idle_connection,
    cut_preview,
    cut_response_head,
    drop_stream_after,
    error_frame,
    requires_action_from_earlier_batch,
    slow_interrupt,
    status_once,
    terminal_while_disconnected,
)
from rma_shell.testing.claude.faults import FaultKind as FaultKind
from rma_shell.testing.claude.faults import budget_not_echoed as budget_not_echoed
from rma_shell.testing.claude.faults import trickle as trickle
from rma_shell.testing.claude.server import CMAEmulator
from rma_shell.testing.claude.state import BETA, DEFAULT_API_KEY

__all__ = [
    "BETA",
    "DEFAULT_API_KEY",
    "CMAEmulator",
    "CMAFault",
    "ServerEvent",
    "SessionView",
    "Turn",
    "agent_message",
    "agent_thinking",
    "agent_tool_result",
    "agent_tool_use",
    "close_idle_connection",
    "custom_tool_use",
    "cut_message",
    "cut_preview",
    "cut_response_head",
    "drop_stream_after",
    "error_frame",
    "idle_budget_reached",
    "idle_end_turn",
    "idle_refusal",
    "idle_requires_action",
    "idle_retries_exhausted",
    "in_thread",
    "model_request_end",
    "model_request_start",
    "model_usage",
    "outcome_evaluation_end",
    "outcome_evaluation_ongoing",
    "outcome_evaluation_start",
    "pause",
    "requires_action_from_earlier_batch",
    "session_error",
    "session_usage",
    "slow_interrupt",
    "status_idle",
    "status_once",
    "status_rescheduled",
    "status_running",
    "status_terminated",
    "terminal_while_disconnected",
    "text_turn",
    "thread_created",
    "thread_message_received",
    "thread_message_sent",
    "thread_status",
    "tool_turn",
]
