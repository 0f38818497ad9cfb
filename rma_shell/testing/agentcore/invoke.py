"""The AgentCore emulator's ``InvokeHarness``: one scripted turn per invoke, on a runtime session.

Validates the request, finds the harness and endpoint the control plane says may serve it,
checks the conversation (Bedrock's rules, the exact echo of pending tool uses), refuses a
second invoke on a busy session, plays the session's next scripted turn on a 200 event
stream and settles the session (conversation, pending tool uses, script position) before the
client can see the stream end. Not the stream's bytes and faults (``stream``).
"""

from __future__ import annotations

import copy
import threading

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import JSONDict, _AwsError, _StreamEnded
from rma_shell.testing.agentcore.conversation import _Assembler, _conversation_problem
from rma_shell.testing.agentcore.faults import _fault_error
from rma_shell.testing.agentcore.frames import Frame, SessionView, Turn, _flatten, metadata
from rma_shell.testing.agentcore.state import _Core
from rma_shell.testing.agentcore.stream import _Stream
from rma_shell.testing.agentcore.validation import _json_object, _params, _validate


class _Invoke(_Core):
    """``InvokeHarness`` (runs on a server thread)."""

    def _invoke_harness(
        self, h: LoopbackHandler, query: list[tuple[str, str]], raw: bytes, request_id: str
    ) -> None:
        body = _json_object(raw)
        params = _params("InvokeHarness", h, query, body, None)
        _validate("InvokeHarness", params)
        arn = params["harnessArn"]
        self.control._serving(
            lambda harness: harness.arn == arn,
            f"Harness not found: {arn}",
            params.get("qualifier"),
            lambda harness: f"harness {harness.id}",
        )
        session_id: str = params["runtimeSessionId"]
        messages: list[JSONDict] = copy.deepcopy(body["messages"])
        with self._lock:
            status = self._take(("status",), session_id, "InvokeHarness")
            if status:
                fault = status[0]
                raise _fault_error(fault, h)
            session = self._session(session_id)
            if session.busy is not None:
                raise _AwsError(
                    424,
                    "RuntimeClientError",
                    f"agentcore emulator: runtime session {session_id} is already running an invocation",
                )
            session.invocations += 1
            session.received.extend(copy.deepcopy(messages))
            if params.get("runtimeUserId") is not None:
                session.user_id = params["runtimeUserId"]
            problem = _conversation_problem(session.conversation, session.pending, messages)
            script = session.script if session.script is not None else self._script
            turn_index = session.turns_played
            if problem is None and turn_index >= len(script):
                raise _AwsError(
                    400,
                    "EmulatorScriptExhausted",
                    f"agentcore emulator: no scripted turn left for runtime session {session_id} "
                    f"(turn #{turn_index + 1}; the script has {len(script)})",
                )
            stream_faults = (
                self._take(("drop", "truncate", "bad_crc", "exception", "stall"), session_id, "InvokeHarness")
                if problem is None
                else []
            )
            combined = [*session.conversation, *messages]
            view = session.view(combined)
            session.busy = request_id
            cut = session.cut = threading.Event()
        played = {"all": False}
        assembler = _Assembler()
        stream = _Stream(self, h, stream_faults, filler=metadata(), cut=cut)

        def end() -> None:
            # Runs just before the client can see the stream end (last chunk, exception or
            # cut), so a client that invokes again at once finds the session settled.
            with self._lock:
                if played["all"] and (not stream.faulted or stream.kept):
                    # A test may give the session a new script while this turn's last bytes are
                    # still on their way: the new script starts at its first turn, so only the
                    # script this turn came from counts it.
                    current = session.script if session.script is not None else self._script
                    if current is script and session.turns_played == turn_index:
                        session.turns_played += 1
                    outcome = assembler.outcome()
                    if outcome is not None:
                        session.conversation = [*combined, *outcome[0]]
                        session.pending = outcome[1]
                if session.busy == request_id:
                    session.busy = None
                    session.cut = None

        stream.before_end = end
        try:
            stream.begin(request_id, session_id)
            if problem is not None:
                stream.send_frame(Frame("exception", "runtimeClientError", {"message": problem}))
                stream.finish()
                return
            self._play(stream, script[turn_index], view, body, assembler)
            played["all"] = True
            stream.finish()
        except _StreamEnded:
            pass
        finally:
            end()

    def _play(
        self, stream: _Stream, turn: Turn, view: SessionView, body: JSONDict, assembler: _Assembler
    ) -> None:
        """Send the turn's frames; a callable that raises ends the stream with an
        ``internalServerException`` frame saying why (raising ``_StreamEnded``)."""
        try:
            items = turn(view, copy.deepcopy(body)) if callable(turn) else turn
            for item in _flatten(items):
                if item.kind == "pause":
                    stream.wait(item.seconds)
                    continue
                stream.send_frame(item)
                assembler.feed(item)
        except _StreamEnded:
            raise
        except Exception as exc:
            message = f"agentcore emulator: scripted turn raised {type(exc).__name__}: {exc}"
            stream.send_frame(Frame("exception", "internalServerException", {"message": message}))
            stream.finish()
            raise _StreamEnded from exc
