"""The OpenTelemetry bridge behind ``rma_shell.otel`` (imported only when OpenTelemetry is).

A telemetry subscriber that keeps one small record per session id and turns the session's
events into a span tree::

    invoke_agent [{agent}]         INTERNAL  rma.session.start (or first activity) → .terminal
    ├── chat {model}               CLIENT    rma.turn.start → rma.turn.stop  (Local)
    │   or invoke_agent [{agent}]  CLIENT                                    (managed hosts)
    └── execute_tool {tool}        INTERNAL  rma.tool.start → rma.tool.stop / .exception

with HTTP attempts (``rma.request``) and the event stream's lifecycle (``rma.stream.connected``,
``.done``, ``.error``) as span events on the turn (or request) they served, the host's stop
after a timeout or cancellation (``rma.session.remote_stop``) as an event on the request, plus the
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` histograms, recorded
once per turn. Span timings come from this process's clock (the core has none).
Nothing here may break a session: every callback is wrapped, failures are logged on
``rma.telemetry.otel`` and swallowed (O-8, O-10).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from rma_shell.logging import log_fields

log = logging.getLogger("rma.telemetry.otel")

INSTRUMENTATION_SCOPE = "rma"

# gen_ai.provider.name by rma provider, when the provider did not say (describe()).
PROVIDER_NAMES = {
    "local": "openai",
    "claude_managed_agents": "anthropic",
    "bedrock_agentcore": "aws.bedrock",
}
# Hosts that run the agent loop themselves: a turn there is a remote agent invocation.
MANAGED = frozenset({"claude_managed_agents", "bedrock_agentcore"})
# Hosts whose input_tokens exclude cached tokens (Anthropic's and Bedrock's usage shape);
# the conventions want gen_ai.usage.input_tokens to include them.
CACHE_EXCLUSIVE = frozenset({"claude_managed_agents", "bedrock_agentcore"})

TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]

# Metadata keys the library sets; everything else in an event's metadata is the caller's.
LIBRARY_KEYS = frozenset(
    {
        "session_id",
        "provider",
        "model",
        "gen_ai_provider",
        "agent_name",
        "agent_id",
        "server_address",
        "server_port",
        "resumed",
        "live",
        "turn",
        "purpose",
        "terminal",
        "stop_reason",
        "error",
        "phase",
        "tool",
        "tool_use_id",
        "tool_use_ids",
        "is_error",
        "kind",
        "type",
        "content",
        "method",
        "url",
        "path",
        "status",
        "attempt",
    }
)


def _finish_reason(terminal: object) -> str:
    """O-6: end_turn, terminated, error, retries_exhausted as themselves; else terminated."""
    if terminal in ("end_turn", "terminated", "error", "retries_exhausted"):
        return str(terminal)
    return "terminated"


def _attr_value(value: object) -> Any:
    """An OpenTelemetry attribute value: scalars and homogeneous scalar lists as they are,
    anything else as JSON text. None means "leave the attribute out"."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple) and value:
        kinds = {type(v) for v in value}
        if len(kinds) == 1 and kinds <= {bool, int, float, str}:
            return list(value)
    try:
        return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@attrs.define(eq=False)
class _Session:
    """What the bridge remembers about one session id."""

    session_id: str | None
    provider: str
    gen_ai_provider: str
    model: str | None = None
    agent_name: str | None = None
    agent_id: str | None = None
    server_address: str | None = None
    server_port: int | None = None
    live: bool = False
    resumed: bool = False
    user_meta: dict[str, Any] = attrs.Factory(dict)
    parent: Any = None
    """The OpenTelemetry context current at session start: invoke_agent spans' parent."""
    invoke: Span | None = None
    turn: Span | None = None
    turn_number: int = 0
    turn_t0: float = 0.0
    tools: dict[object, tuple[Span, Any]] = attrs.Factory(dict)
    last_activity_ns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    turns: int = 0
    request_input: str | None = None

    @property
    def turn_operation(self) -> str:
        return "invoke_agent" if self.provider in MANAGED else "chat"

    def base_attributes(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gen_ai.provider.name": self.gen_ai_provider,
            "gen_ai.conversation.id": self.session_id,
            "gen_ai.request.model": self.model,
            "gen_ai.agent.name": self.agent_name,
            "gen_ai.agent.id": self.agent_id,
            "server.address": self.server_address,
            "server.port": self.server_port,
            "rma.provider": self.provider,
        }
        for key, value in self.user_meta.items():
            out[f"rma.metadata.{key}"] = value
        return out

    def metric_attributes(self, operation: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": self.gen_ai_provider,
        }
        if self.model:
            out["gen_ai.request.model"] = self.model
        if self.server_address:
            out["server.address"] = self.server_address
        if self.server_port:
            out["server.port"] = self.server_port
        return out


def _set(span: Span, attributes: Mapping[str, Any]) -> None:
    for key, value in attributes.items():
        converted = _attr_value(value)
        if converted is not None:
            span.set_attribute(key, converted)


def _error(span: Span, error_type: str, description: str | None = None) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description or error_type))


class Bridge:
    """The telemetry subscriber; one per ``instrument`` call. Thread-safe."""

    def __init__(
        self,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        capture_content: bool = False,
        propagate_context: bool = True,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            own_version = version("rma-agents")
        except PackageNotFoundError:
            own_version = "0"
        self.tracer = trace.get_tracer(INSTRUMENTATION_SCOPE, own_version, tracer_provider=tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION_SCOPE, own_version, meter_provider=meter_provider)
        self.token_usage = _histogram(
            meter,
            "gen_ai.client.token.usage",
            "{token}",
            "Number of input and output tokens used",
            TOKEN_BUCKETS,
        )
        self.duration = _histogram(
            meter, "gen_ai.client.operation.duration", "s", "GenAI operation duration", DURATION_BUCKETS
        )
        self.capture_content = capture_content
        self.propagate_context = propagate_context
        self.sessions: dict[object, _Session] = {}
        self._lock = threading.RLock()
        self._closed = False

    # ── the subscriber ──

    def __call__(self, name: str, measurements: Mapping[str, Any], metadata: Mapping[str, Any]) -> None:
        try:
            with self._lock:
                if not self._closed:
                    self._dispatch(name, measurements, metadata)
        except Exception:  # O-10: never let a tracing problem reach the session or detach us
            log.warning(
                "OpenTelemetry bridge failed on %s",
                name,
                exc_info=True,
                extra=log_fields(event=name, session_id=_str(metadata.get("session_id"))),
            )

    def _dispatch(self, name: str, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        match name:
            case "rma.session.start":
                self._session_start(m, md)
            case "rma.turn.start":
                self._turn_start(md)
            case "rma.turn.stop":
                self._turn_stop(m, md)
            case "rma.tool.start":
                self._tool_start(md)
            case "rma.tool.stop" | "rma.tool.exception":
                self._tool_end(name, md)
            case "rma.session.terminal":
                self._terminal(m, md)
            case "rma.session.stop":
                self._session_stop(md)
            case "rma.request.stop" | "rma.request.exception":
                self._request(name, md)
            case "rma.stream.connected" | "rma.stream.done" | "rma.stream.error":
                self._stream(name, md)
            case "rma.session.remote_stop":
                self._remote_stop(m, md)

    def shutdown(self) -> None:
        """Uninstrumented: end whatever is still open and forget every session."""
        with self._lock:
            self._closed = True
            for st in list(self.sessions.values()):
                self._close_open(st, None, incomplete=True)
            self.sessions.clear()

    # ── sessions ──

    def _new_session(self, md: Mapping[str, Any]) -> _Session:
        provider = _str(md.get("provider")) or "unknown"
        st = _Session(
            session_id=md.get("session_id"),
            provider=provider,
            gen_ai_provider=_str(md.get("gen_ai_provider")) or PROVIDER_NAMES.get(provider, provider),
            model=_str(md.get("model")),
            agent_name=_str(md.get("agent_name")),
            agent_id=_str(md.get("agent_id")),
            server_address=_str(md.get("server_address")),
            server_port=_int(md.get("server_port")),
            live=md.get("live") is True,
            resumed=md.get("resumed") is True,
            user_meta={k: v for k, v in md.items() if k not in LIBRARY_KEYS},
            parent=otel_context.get_current(),
            last_activity_ns=time.time_ns(),
        )
        self.sessions[st.session_id] = st
        return st

    def _session(self, md: Mapping[str, Any]) -> _Session:
        """The session's record; events of a session that started before instrumenting make one."""
        st = self.sessions.get(md.get("session_id"))
        return st if st is not None else self._new_session(md)

    def _session_start(self, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        old = self.sessions.pop(md.get("session_id"), None)
        if old is not None:
            self._close_open(old, None, incomplete=True)
        st = self._new_session(md)
        if not st.live:
            # A run's one request starts now; backdated over the provider's open (its HTTP calls).
            opened = m.get("open_duration")
            backdate = int(opened * 1e9) if isinstance(opened, int | float) and opened > 0 else 0
            self._open_invoke(st, time.time_ns() - backdate)

    def _open_invoke(self, st: _Session, start_ns: int | None = None) -> Span:
        if st.invoke is not None:
            return st.invoke
        name = f"invoke_agent {st.agent_name}" if st.agent_name else "invoke_agent"
        span = self.tracer.start_span(
            name, context=st.parent, kind=SpanKind.INTERNAL, start_time=start_ns or time.time_ns()
        )
        _set(span, {"gen_ai.operation.name": "invoke_agent", **st.base_attributes()})
        if st.resumed:
            span.set_attribute("rma.session.resumed", True)
        st.invoke = span
        st.input_tokens = st.output_tokens = st.cache_read = st.cache_creation = st.turns = 0
        st.request_input = None
        return span

    def _terminal(self, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        terminal = md.get("terminal")
        error = _str(md.get("error")) if terminal == "error" else None
        st = self.sessions.get(md.get("session_id"))
        if st is None or md.get("phase") == "open":
            # The provider never opened (or the start came before instrumenting): one span,
            # backdated over the attempt when its duration is known.
            st = self._new_session(md)
            duration = m.get("duration")
            back = int(duration * 1e9) if isinstance(duration, int | float) and duration > 0 else 0
            self._open_invoke(st, time.time_ns() - back)
        invoke = self._open_invoke(st)
        self._close_open(st, error, incomplete=False, keep_invoke=True)
        _set(
            invoke,
            {
                **self._usage_attributes(
                    st, st.input_tokens, st.output_tokens, st.cache_read, st.cache_creation
                ),
                "gen_ai.response.finish_reasons": [_finish_reason(terminal)],
                "rma.turns": st.turns,
            },
        )
        content = md.get("content")
        if self.capture_content:
            if st.request_input is not None:
                invoke.set_attribute("gen_ai.input.messages", _user_messages(st.request_input))
            if isinstance(content, Mapping) and isinstance(content.get("output"), str):
                invoke.set_attribute(
                    "gen_ai.output.messages",
                    _assistant_messages(content["output"], [], _finish_reason(terminal)),
                )
        if error is not None:
            _error(invoke, error)
        invoke.end()
        st.invoke = None
        st.last_activity_ns = time.time_ns()
        if not st.live:
            self.sessions.pop(st.session_id, None)  # a run has one request; nothing else follows

    def _session_stop(self, md: Mapping[str, Any]) -> None:
        st = self.sessions.pop(md.get("session_id"), None)
        if st is not None:
            self._close_open(st, "closed", incomplete=True)

    def _close_open(
        self, st: _Session, error: str | None, *, incomplete: bool, keep_invoke: bool = False
    ) -> None:
        """End the session's open tool and turn spans (and its invoke span unless kept)."""
        # A tool's context token belongs to the tool's task: only that task could detach it.
        for span, _token in st.tools.values():
            if error is not None:
                _error(span, error)
            if incomplete:
                span.set_attribute("rma.incomplete", True)
            span.end()
        st.tools.clear()
        if st.turn is not None:
            if error is not None:
                _error(st.turn, error)
                self.duration.record(
                    time.perf_counter() - st.turn_t0,
                    {**st.metric_attributes(st.turn_operation), "error.type": error},
                )
            else:
                st.turn.set_attribute("rma.incomplete", True)
            st.turn.end()
            st.turn = None
        if not keep_invoke and st.invoke is not None:
            if error is not None:
                _error(st.invoke, error)
            if incomplete:
                st.invoke.set_attribute("rma.incomplete", True)
            st.invoke.end()
            st.invoke = None

    # ── turns ──

    def _turn_start(self, md: Mapping[str, Any]) -> None:
        st = self._session(md)
        invoke = self._open_invoke(st)
        if st.turn is not None:  # the previous turn never reported back
            st.turn.set_attribute("rma.incomplete", True)
            st.turn.end()
        turn = _int(md.get("turn")) or st.turns + 1
        purpose = _str(md.get("purpose"))
        st.turn = self._start_turn_span(st, invoke, turn, None)
        if purpose:
            st.turn.set_attribute("rma.turn.purpose", purpose)
        content = md.get("content")
        if isinstance(content, Mapping):
            text = content.get("input")
            if isinstance(text, str) and purpose in ("kickoff", "message") and st.request_input is None:
                st.request_input = text
            if self.capture_content:
                if isinstance(text, str):
                    st.turn.set_attribute("gen_ai.input.messages", _user_messages(text))
                elif isinstance(content.get("tool_results"), list):
                    st.turn.set_attribute("gen_ai.input.messages", _tool_messages(content["tool_results"]))

    def _start_turn_span(self, st: _Session, invoke: Span, turn: int, start_ns: int | None) -> Span:
        op = st.turn_operation
        if op == "chat":
            name = f"chat {st.model}" if st.model else "chat"
        else:
            name = f"invoke_agent {st.agent_name}" if st.agent_name else "invoke_agent"
        span = self.tracer.start_span(
            name,
            context=trace.set_span_in_context(invoke, st.parent),
            kind=SpanKind.CLIENT,
            start_time=start_ns or time.time_ns(),
        )
        _set(span, {"gen_ai.operation.name": op, **st.base_attributes(), "rma.turn": turn})
        st.turn_number = turn
        st.turn_t0 = time.perf_counter()
        return span

    def _turn_stop(self, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        st = self._session(md)
        invoke = self._open_invoke(st)
        turn = _int(md.get("turn")) or st.turns + 1
        span = st.turn
        if span is None:  # a turn nobody drove (server-initiated, or replayed after a reconnect)
            span = self._start_turn_span(st, invoke, turn, st.last_activity_ns)
            st.turn_t0 = time.perf_counter() - max(0, time.time_ns() - st.last_activity_ns) / 1e9
        st.turn = None
        stop_reason = _str(md.get("stop_reason"))
        terminal = _str(md.get("terminal"))
        inp, out = _int(m.get("input_tokens")), _int(m.get("output_tokens"))
        cread, ccreate = (
            _int(m.get("cache_read_input_tokens")) or 0,
            _int(m.get("cache_creation_input_tokens")) or 0,
        )
        attributes: dict[str, Any] = {"rma.turn": turn, "rma.turn.terminal": terminal}
        if stop_reason or terminal:
            attributes["gen_ai.response.finish_reasons"] = [stop_reason or _finish_reason(terminal)]
        if inp is not None or out is not None:
            attributes.update(self._usage_attributes(st, inp or 0, out or 0, cread, ccreate))
        _set(span, attributes)
        content = md.get("content")
        if self.capture_content and isinstance(content, Mapping):
            calls = content.get("tool_calls")
            text = content.get("output")
            span.set_attribute(
                "gen_ai.output.messages",
                _assistant_messages(
                    text if isinstance(text, str) else "",
                    calls if isinstance(calls, list) else [],
                    stop_reason or _finish_reason(terminal),
                ),
            )
        span.end()
        st.turns += 1
        st.last_activity_ns = time.time_ns()
        metric = st.metric_attributes(st.turn_operation)
        self.duration.record(time.perf_counter() - st.turn_t0, metric)
        if inp is not None or out is not None:
            total_in = (inp or 0) + (cread + ccreate if st.provider in CACHE_EXCLUSIVE else 0)
            self.token_usage.record(total_in, {**metric, "gen_ai.token.type": "input"})
            self.token_usage.record(out or 0, {**metric, "gen_ai.token.type": "output"})
            st.input_tokens += inp or 0
            st.output_tokens += out or 0
            st.cache_read += cread
            st.cache_creation += ccreate

    def _usage_attributes(self, st: _Session, inp: int, out: int, cread: int, ccreate: int) -> dict[str, Any]:
        total_in = inp + (cread + ccreate if st.provider in CACHE_EXCLUSIVE else 0)
        attributes: dict[str, Any] = {
            "gen_ai.usage.input_tokens": total_in,
            "gen_ai.usage.output_tokens": out,
        }
        if cread:
            attributes["gen_ai.usage.cache_read.input_tokens"] = cread
        if ccreate:
            attributes["gen_ai.usage.cache_creation.input_tokens"] = ccreate
        return attributes

    # ── tools ──

    def _tool_start(self, md: Mapping[str, Any]) -> None:
        st = self._session(md)
        invoke = self._open_invoke(st)
        tool = _str(md.get("tool")) or "unknown"
        call_id = md.get("tool_use_id")
        span = self.tracer.start_span(
            f"execute_tool {tool}",
            context=trace.set_span_in_context(invoke, st.parent),
            kind=SpanKind.INTERNAL,
        )
        _set(
            span,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
                **st.base_attributes(),
            },
        )
        content = md.get("content")
        if self.capture_content and isinstance(content, Mapping) and "arguments" in content:
            span.set_attribute("gen_ai.tool.call.arguments", _json(content["arguments"]))
        token = otel_context.attach(trace.set_span_in_context(span)) if self.propagate_context else None
        old = st.tools.pop((call_id, tool), None)
        if old is not None:
            old[0].set_attribute("rma.incomplete", True)
            old[0].end()
        st.tools[(call_id, tool)] = (span, token)

    def _tool_end(self, name: str, md: Mapping[str, Any]) -> None:
        st = self.sessions.get(md.get("session_id"))
        key = (md.get("tool_use_id"), _str(md.get("tool")) or "unknown")
        entry = st.tools.pop(key, None) if st is not None else None
        if entry is None:
            return
        span, token = entry
        if name == "rma.tool.exception":
            kind = _str(md.get("kind")) or "exception"
            _error(span, kind, f"the tool raised {kind}")
        elif md.get("is_error") is True:
            _error(span, "tool_error", "the tool returned an error result")
        content = md.get("content")
        if self.capture_content and isinstance(content, Mapping) and isinstance(content.get("result"), str):
            span.set_attribute("gen_ai.tool.call.result", content["result"])
        span.end()
        if token is not None:
            otel_context.detach(token)
        if st is not None:
            st.last_activity_ns = time.time_ns()

    # ── HTTP attempts (as events on the turn they served) ──

    def _request(self, name: str, md: Mapping[str, Any]) -> None:
        st = self.sessions.get(md.get("session_id"))
        span = (st.turn or st.invoke) if st is not None else None
        if span is None:
            return
        attributes = {
            "http.request.method": _str(md.get("method")),
            "http.response.status_code": _int(md.get("status")),
            "rma.attempt": _int(md.get("attempt")),
            "error.type": _str(md.get("error"))
            or (_str(md.get("kind")) if name.endswith("exception") else None),
        }
        span.add_event("rma.request", {k: v for k, v in attributes.items() if v is not None})

    # ── the event stream's lifecycle (M-4), as events on the span it served ──

    def _stream(self, name: str, md: Mapping[str, Any]) -> None:
        st = self.sessions.get(md.get("session_id"))
        span = (st.turn or st.invoke) if st is not None else None
        if span is None:
            return
        attributes = {"rma.stream.generation": _int(md.get("gen")), "error.type": _str(md.get("reason"))}
        span.add_event(name, {k: v for k, v in attributes.items() if v is not None})

    def _remote_stop(self, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        """Issue #15: the host's stop, on the request it ended (it comes before the terminal)."""
        st = self.sessions.get(md.get("session_id"))
        if st is None or st.invoke is None:
            return
        duration = m.get("duration")
        attributes = {
            "rma.remote_stop.outcome": _str(md.get("outcome")),
            "rma.remote_stop.reason": _str(md.get("reason")),
            "rma.remote_stop.duration": float(duration) if isinstance(duration, int | float) else None,
            "error.type": _str(md.get("error")),
        }
        st.invoke.add_event("rma.remote_stop", {k: v for k, v in attributes.items() if v is not None})


def _histogram(meter: Any, name: str, unit: str, description: str, buckets: list[Any]) -> Any:
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )
    except TypeError:  # an API older than bucket advice
        return meter.create_histogram(name, unit=unit, description=description)


def _json(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _user_messages(text: str) -> str:
    return _json([{"role": "user", "parts": [{"type": "text", "content": text}]}])


def _tool_messages(results: list[Any]) -> str:
    parts = [
        {"type": "tool_call_response", "id": r.get("id"), "response": r.get("text")}
        for r in results
        if isinstance(r, Mapping)
    ]
    return _json([{"role": "tool", "parts": parts}])


def _assistant_messages(text: str, calls: list[Any], finish_reason: str) -> str:
    parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
    parts += [
        {"type": "tool_call", "id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments")}
        for c in calls
        if isinstance(c, Mapping)
    ]
    return _json([{"role": "assistant", "parts": parts, "finish_reason": finish_reason}])
