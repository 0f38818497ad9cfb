"""OpenTelemetry: rma's telemetry as GenAI spans and metrics (the optional ``otel`` extra).

::

    from rma_shell import otel

    handle = otel.instrument().unwrap()   # global tracer/meter providers, content capture off
    ...
    otel.uninstrument(handle)

``instrument`` subscribes a bridge to a telemetry dispatcher (the process-wide one unless
told otherwise) that turns ``rma.session.*``, ``rma.turn.*``, ``rma.tool.*``,
``rma.request.*`` and the stream lifecycle (``rma.stream.connected/done/error``) into spans
following the OpenTelemetry GenAI semantic conventions —
``invoke_agent`` per request, ``chat {model}`` (Local) or ``invoke_agent {agent}`` (managed
hosts) per turn, ``execute_tool {tool}`` per tool call — and records
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``. The span tree, every
attribute and the metrics are described in ``docs/observability.md``.

This module imports without OpenTelemetry installed: ``available()`` is then False and
``instrument`` returns ``Failure(OTelError(kind="opentelemetry_unavailable"))``; nothing here
ever raises for it (O-9).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma_shell.telemetry import Telemetry
from rma_shell.telemetry import default as default_telemetry

EVENTS = (
    "rma.session.*",
    "rma.turn.*",
    "rma.tool.*",
    "rma.request.*",
    "rma.stream.connected",
    "rma.stream.done",
    "rma.stream.error",
)
"""The telemetry events the bridge subscribes to."""

_ids = itertools.count(1)
_ids_lock = threading.Lock()


@attrs.frozen
class OTelError:
    """Why instrumenting did not happen: ``kind`` is ``opentelemetry_unavailable``,
    ``already_attached`` (the handler id is taken) or ``not_found`` (uninstrumenting a
    handle that is not attached)."""

    kind: str
    detail: str = ""

    @property
    def message(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind

    def __str__(self) -> str:
        return self.message


@attrs.define(eq=False)
class Instrumentation:
    """The handle ``instrument`` returns; pass it to ``uninstrument``."""

    handler_id: str
    telemetry: Telemetry = attrs.field(repr=False)
    capture_content: bool
    bridge: Any = attrs.field(repr=False)
    """The ``rma_shell._otel_bridge.Bridge`` doing the work (its state is internal)."""
    active: bool = True


def available() -> bool:
    """Whether the OpenTelemetry API is importable (install ``rma-agents[otel]``)."""
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def instrument(
    telemetry: Telemetry | None = None,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    capture_content: bool = False,
    propagate_context: bool = True,
    handler_id: str | None = None,
) -> Result[Instrumentation, OTelError]:
    """Turn ``telemetry``'s events into spans and metrics; never raises.

    ``tracer_provider``/``meter_provider`` default to the global ones. ``capture_content``
    adds prompts, model output, tool arguments and tool results to spans (off by default:
    they may hold personal data). ``propagate_context`` makes each ``execute_tool`` span the
    current span while the tool runs, so spans the tool itself starts nest under it.
    """
    if not available():
        return Failure(
            OTelError("opentelemetry_unavailable", "install the otel extra: pip install 'rma-agents[otel]'")
        )
    from rma_shell._otel_bridge import Bridge

    tel = telemetry if telemetry is not None else default_telemetry
    if handler_id is None:
        with _ids_lock:
            handler_id = f"rma-otel-{next(_ids)}"
    bridge = Bridge(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
        propagate_context=propagate_context,
    )
    try:
        tel.attach(handler_id, EVENTS, bridge, content=capture_content)
    except ValueError as exc:
        return Failure(OTelError("already_attached", str(exc)))
    return Success(Instrumentation(handler_id, tel, capture_content, bridge))


def uninstrument(handle: Instrumentation) -> Result[None, OTelError]:
    """Detach the bridge; spans still open end now (marked ``rma.incomplete``)."""
    if not handle.active or not handle.telemetry.detach(handle.handler_id):
        handle.active = False
        return Failure(OTelError("not_found", f"no bridge attached as {handle.handler_id!r}"))
    handle.active = False
    handle.bridge.shutdown()
    return Success(None)


__all__ = ["EVENTS", "Instrumentation", "OTelError", "available", "instrument", "uninstrument"]
