"""A scripted loop host for tests: ``ScriptedProvider``, in both acquisition modes.

The script is a list of turns; each turn is a list of events in the vocabulary of
``rma.providers.scripted`` (or a callable taking the input and returning one). In
request/response mode each poll answers with the next turn; in streaming mode each push
releases the next turn onto the stream. Faults are explicit script items: an
``Exception`` raised by the poll, a ``SessionError`` returned, ``DROP``/``CLOSE`` markers
that fail or end the stream. Every input the session sent is kept in ``inputs`` so tests
can assert what "reached the host". Not a network emulator: no sockets.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import ProviderError, SessionError, StreamDropped
from rma.provider import Input
from rma.providers.scripted import ScriptedCodec, ScriptedStreamingCodec
from rma.session.events import Reconnected
from rma.vocabulary import JSON
from rma_shell.providers.base import LiveSink, OpenRequest, PollOutcome, Provider

DROP = {"$fault": "drop"}
"""Stream marker: the stream fails here (a drop)."""
CLOSE = {"$fault": "close"}
"""Stream marker: the server closes the stream cleanly here."""

Turn = Sequence[JSON] | Callable[[Input], Sequence[JSON]] | BaseException | SessionError


@attrs.define
class ScriptedConn:
    session_id: str
    resumed: bool = False
    connects: int = 0
    attached: bool = False


class ScriptedProvider(Provider[ScriptedConn]):
    run_options = frozenset({"agent", "agent_id", "environment", "environment_id", "model_config"})
    """A stand-in for any host: the agent handles (S-13) and a per-run model (S-16)."""

    def __init__(
        self,
        turns: Sequence[Turn] = (),
        *,
        streaming: bool = False,
        session_id: str = "sess_scripted",
        history: Sequence[JSON] = (),
        live_events: bool = False,
        push_failures: Sequence[int] = (),
        open_error: SessionError | None = None,
        reconnect_errors: int = 0,
        remote_idle: bool = True,
        transcript: Callable[[], tuple[JSON, ...] | None] | None = None,
        on_connect: Sequence[JSON] = (),
        turn_delay: float = 0.0,
    ) -> None:
        self.codec = ScriptedStreamingCodec() if streaming else ScriptedCodec()
        self.turns: list[Turn] = list(turns)
        self.streaming = streaming
        self._session_id = session_id
        self.history: list[JSON] = list(history)
        self.live_events = live_events
        self.push_failures = set(push_failures)
        self.open_error = open_error
        self.reconnect_errors = reconnect_errors
        self.remote_idle = remote_idle
        self._transcript = transcript
        self.on_connect = list(on_connect)
        self.turn_delay = turn_delay
        self.inputs: list[Input] = []
        self.opened: list[OpenRequest] = []
        self.reconnects: list[tuple[str, ...]] = []
        self.closed = 0
        self.streams_opened = 0
        self.active_streams = 0
        self._send, self._recv = anyio.create_memory_object_stream[JSON](math.inf)

    # ── script plumbing ──

    def _next_turn(self, input: Input) -> Sequence[JSON] | BaseException | SessionError:
        if not self.turns:
            return ProviderError(detail="script exhausted")
        turn = self.turns.pop(0)
        if callable(turn) and not isinstance(turn, BaseException | SessionError):
            return turn(input)
        return turn

    def _record_input(self, input: Input) -> None:
        self.inputs.append(input)
        if isinstance(input, list):
            self.history.extend(
                ev for ev in input if isinstance(ev, dict) and ev.get("type") == "tool_result"
            )

    # ── Provider ──

    async def open(self, request: OpenRequest) -> Result[ScriptedConn, SessionError]:
        await anyio.lowlevel.checkpoint()
        self.opened.append(request)
        if self.open_error is not None:
            return Failure(self.open_error)
        return Success(
            ScriptedConn(request.session_id or self._session_id, resumed=request.session_id is not None)
        )

    def session_id(self, conn: ScriptedConn) -> str | None:
        return conn.session_id

    def snapshot(self, conn: ScriptedConn) -> Mapping[str, JSON] | None:
        return {"session_id": conn.session_id}

    async def restore(
        self, request: OpenRequest, snapshot: Mapping[str, JSON]
    ) -> Result[ScriptedConn, SessionError]:
        await anyio.lowlevel.checkpoint()
        self.opened.append(request)
        return Success(ScriptedConn(str(snapshot["session_id"])))

    def resumed(self, conn: ScriptedConn) -> bool:
        return conn.resumed

    def transcript(self, conn: ScriptedConn) -> tuple[JSON, ...] | None:
        return self._transcript() if self._transcript else None

    async def poll_turn(
        self, conn: ScriptedConn, input: Input, live: LiveSink | None
    ) -> PollOutcome[ScriptedConn]:
        self._record_input(input)
        if self.turn_delay:
            await anyio.sleep(self.turn_delay)
        else:
            await anyio.lowlevel.checkpoint()
        turn = self._next_turn(input)
        if isinstance(turn, SessionError):  # before BaseException: errors are exceptions too
            return PollOutcome(Failure(turn), conn)
        if isinstance(turn, BaseException):
            raise turn
        events = tuple(turn)
        self.history.extend(events)
        if self.live_events and live is not None:
            for ev in events:
                await live(ev)
        return PollOutcome(Success(events), conn)

    async def push_input(self, conn: ScriptedConn, input: Input) -> Result[None, SessionError]:
        index = len(self.inputs)
        self._record_input(input)
        await anyio.lowlevel.checkpoint()
        if index in self.push_failures:
            return Failure(ProviderError(detail=f"push {index} refused"))
        if isinstance(input, list) and input and isinstance(input[0], dict):
            kind = input[0].get("type")
            if kind not in ("user.message", "tool_result", "define_outcome"):
                return Success(None)  # a raw send_event: nothing scripted answers it
        turn = self._next_turn(input)
        if isinstance(turn, SessionError):
            return Failure(turn)
        if isinstance(turn, BaseException):
            raise turn
        for ev in turn:
            self._send.send_nowait(ev)
        return Success(None)

    def emit(self, *events: JSON) -> None:
        """Put events on the stream now, outside any push (server-initiated activity)."""
        for ev in events:
            self._send.send_nowait(ev)

    async def stream(
        self,
        conn: ScriptedConn,
        on_connected: Callable[[], Awaitable[None]],
        on_event: Callable[[JSON], Awaitable[None]],
    ) -> Result[None, SessionError]:
        self.streams_opened += 1
        self.active_streams += 1
        conn.connects += 1
        try:
            await on_connected()
            for ev in self.on_connect:
                await on_event(ev)
            while True:
                ev = await self._recv.receive()
                if ev == DROP:
                    return Failure(StreamDropped(detail="scripted drop"))
                if ev == CLOSE:
                    return Success(None)
                if self.turn_delay:
                    await anyio.sleep(self.turn_delay)
                has_id = isinstance(ev, dict) and "id" in ev
                if not has_id or ev not in self.history:
                    self.history.append(ev)
                await on_event(ev)
        finally:
            self.active_streams -= 1

    async def reconnect(
        self, conn: ScriptedConn, seen: tuple[str, ...]
    ) -> Result[tuple[ScriptedConn, Reconnected], SessionError]:
        """Consolidate like a managed host: everything after the client's last processed
        boundary is replayed (the open turn included, since the machine dropped its partial
        buffer); on the first reconnect of a resumed conn, the last boundary in history is
        the position and its unanswered tool uses are pending."""
        self.reconnects.append(seen)
        await anyio.lowlevel.checkpoint()
        if self.reconnect_errors > 0:
            self.reconnect_errors -= 1
            return Failure(ProviderError(detail="reconnect refused"))
        history = list(self.history)
        boundaries = [i for i, ev in enumerate(history) if self.codec.turn_boundary(ev)]
        attach = conn.resumed and not conn.attached
        conn.attached = True
        if attach:
            k = boundaries[-1] if boundaries else -1
        else:
            known = set(seen)
            processed = [
                i for i in boundaries if isinstance(history[i], dict) and history[i].get("id") in known
            ]
            k = processed[-1] if processed else -1
        replay = tuple(history[k + 1 :])
        replayed = {ev.get("id") for ev in replay if isinstance(ev, dict)}
        ids = {ev["id"] for ev in history[: k + 1] if isinstance(ev, dict) and isinstance(ev.get("id"), str)}
        new_seen = tuple(sorted((ids | set(seen)) - replayed))
        pending = self.codec.pending_tool_uses(history[: k + 1]) if attach else ()
        return Success(
            (
                conn,
                Reconnected(
                    session_id=conn.session_id,
                    pending=pending,
                    seen=new_seen,
                    replay=replay,
                    idle=self.remote_idle,
                ),
            )
        )

    async def aclose(self, conn: ScriptedConn) -> None:
        self.closed += 1
        await anyio.lowlevel.checkpoint()
