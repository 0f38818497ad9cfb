"""The AgentCore emulator's ``StopRuntimeSession``: stop a runtime session's work.

``POST /runtimes/{agentRuntimeArn}/stopruntimesession`` (botocore's model: the runtime
session in the ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`` header, 33–256 characters;
``qualifier`` in the query; a JSON body whose only member is the optional ``clientToken``),
checked like every request (SigV4, media type, the model's input constraints, the target
harness and endpoint). An ``InvokeHarness`` of that session still in flight is cut (its
connection closed, the turn not consumed); the stop is recorded (``AgentCoreEmulator.stops``,
``SessionView.stops``) and answered 200 with the session header echoed. A session the
emulator never saw is a 404 ``ResourceNotFoundException``, and the conversation of a stopped
session is kept: both modeled, the service's behaviour there is not documented. Running
commands are not stopped. Faults: the status faults with ``operation="StopRuntimeSession"``
(a ``RetryableConflictException`` …) and ``hang_stop`` (no answer for a while).

Not ``InvokeHarness`` itself (``invoke``).
"""

from __future__ import annotations

import json
import time
from urllib.parse import unquote

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import (
    _DISCONNECTS,
    SESSION_HEADER,
    _client_gone,
    _not_found,
)
from rma_shell.testing.agentcore.faults import _fault_error
from rma_shell.testing.agentcore.state import RuntimeStop, _Core
from rma_shell.testing.agentcore.validation import _json_object, _params, _validate

_SETTLE_S = 2.0
"""How long a stop waits for the invoke it cut to finish settling the session (real time)."""


class _Stop(_Core):
    """``StopRuntimeSession`` (runs on a server thread)."""

    def _stop_runtime_session(
        self, h: LoopbackHandler, raw_label: str, query: list[tuple[str, str]], raw: bytes, request_id: str
    ) -> None:
        body = _json_object(raw)
        label = unquote(raw_label)
        params = _params("StopRuntimeSession", h, query, body, label)
        _validate("StopRuntimeSession", params)
        self.control._serving(
            lambda harness: label in (harness.arn, harness.runtime_arn, harness.id, harness.runtime_id),
            f"Agent runtime not found: {label}",
            params.get("qualifier"),
            lambda harness: label,
        )
        session_id: str = params["runtimeSessionId"]
        with self._lock:
            status = self._take(("status",), session_id, "StopRuntimeSession")
            if status:
                raise _fault_error(status[0], h)
            hangs = self._take(("hang",), session_id, "StopRuntimeSession")
        if hangs and not self._hang(h, hangs[0].seconds):
            h.close_connection = True  # the client gave up (or the emulator closes): no stop
            return
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                raise _not_found(f"Runtime session not found: {session_id}")
            busy, cut = session.busy, session.cut
            if cut is not None:
                cut.set()
            session.stops += 1
            qualifier, token = params.get("qualifier"), params.get("clientToken")
            self._stops.append(RuntimeStop(session_id, label, qualifier, token, busy is not None))
        self._settle(session_id, busy)
        payload = json.dumps({}).encode()
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            h.send_header("x-amzn-RequestId", request_id)
            h.send_header(SESSION_HEADER, session_id)
            h.end_headers()
            h.wfile.write(payload)
        except _DISCONNECTS:
            h.close_connection = True

    def _hang(self, h: LoopbackHandler, seconds: float) -> bool:
        """Hold the request; False when the client went away or the emulator is closing."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._stopping.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
                return False
            if _client_gone(h.connection):
                return False
        return True

    def _settle(self, session_id: str, busy: str | None) -> None:
        """Answer once the cut invoke has let go of the session (so a client may invoke again
        at once), or after ``_SETTLE_S``."""
        if busy is None:
            return
        deadline = time.monotonic() + _SETTLE_S
        while time.monotonic() < deadline:
            with self._lock:
                session = self._sessions.get(session_id)
                if session is None or session.busy != busy:
                    return
            if self._stopping.wait(0.01):
                return
