"""The transport half of a provider, as the session runner sees it.

A ``Provider`` carries connection settings and a pure ``codec`` (``rma.provider``). The
runner calls ``open`` once, then — depending on the codec's mode — ``poll_turn`` per
turn (request/response) or ``stream`` + ``push_input`` (streaming), and ``reconnect`` after
a drop or to reattach. Transports make no loop decisions: they move bytes and report
facts. Expected failures come back as ``returns`` values carrying a ``SessionError``;
an exception escaping a method is treated by the runner as a provider error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import RemoteStop, SessionError, Unsupported
from rma.provider import Input, ProviderCodec
from rma.session.events import Reconnected
from rma.vocabulary import JSON, Budget, Outcome

C = TypeVar("C")

# Option names whose values are credentials: shown as *** wherever an option map is printed.
SECRET_OPTION_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "x-api-key",
        "authorization",
        "access_token",
        "bearer_token",
        "bearer_token_file",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "password",
        "secret",
    }
)


def masked(value: Any) -> Any:
    """``value`` with every credential-named entry (at any depth) replaced by ``***``."""
    if isinstance(value, Mapping):
        return {
            k: "***" if isinstance(k, str) and k.lower() in SECRET_OPTION_KEYS else masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, tuple):
        return tuple(masked(v) for v in value)
    return value


def _masked_repr(value: Any) -> str:
    return repr(masked(value))


@attrs.frozen
class OpenRequest:
    """What the runner tells ``open``: the session-level options a provider may need."""

    prompt: str | None = None
    session_id: str | None = None
    """Reattach to this existing session instead of creating one."""
    max_turns: int = 50
    outcome: Outcome | None = None
    budget: Budget | None = None
    metadata: Mapping[str, JSON] = attrs.field(factory=dict)
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=_masked_repr)
    """Provider-specific options passed to ``run``/``open_session`` as keyword arguments
    (and ``model_config``). Credentials in it never show in the repr."""


@attrs.frozen
class PollOutcome(Generic[C]):
    """The answer to a turn poll: the turn's events (or the error) and the updated conn."""

    result: Result[tuple[JSON, ...], SessionError]
    conn: C


@attrs.frozen
class StopReport:
    """What ``Provider.stop_remote`` found: whether the host confirmed its loop stopped."""

    outcome: RemoteStop
    detail: str | None = None
    """Why it is not confirmed, for logs and telemetry (never credentials)."""


LiveSink = Callable[[JSON], Awaitable[None]]
"""Where a request/response transport sends events as they arrive mid-turn (E-4)."""


class Provider(Generic[C]):
    """Base transport. ``C`` is the provider's connection value (opaque to the core)."""

    codec: ProviderCodec
    run_options: frozenset[str] = frozenset()
    """The per-run options this provider reads from ``OpenRequest.extra``: what
    ``run()``/``open_session()`` accept beyond their own (``rma.session.option_checks``).
    Any other name is refused with ``InvalidOpts`` before ``open``. ``"model_config"`` here
    means the provider picks its model per run from it; without it only
    ``model_config["metadata"]`` is accepted."""

    async def open(self, request: OpenRequest) -> Result[C, SessionError]:
        raise NotImplementedError

    def declared_tools(self, request: OpenRequest) -> Sequence[object]:
        """The tool declarations this run sends to the host, where they are known locally
        (the session checks the model's arguments against their schemas). Hosts whose tools
        live remotely (a Claude agent's) return none."""
        return ()

    def session_id(self, conn: C) -> str | None:
        raise NotImplementedError

    def resumed(self, conn: C) -> bool:
        return False

    def transcript(self, conn: C) -> tuple[JSON, ...] | None:
        return None

    def describe(self, conn: C) -> Mapping[str, JSON]:
        """What telemetry may say about this session beyond its id (``rma.session.start``).

        Known keys: ``model``, ``gen_ai_provider`` (who serves the model, in OpenTelemetry's
        ``gen_ai.provider.name`` vocabulary), ``agent_name``, ``agent_id``, ``server_address``,
        ``server_port``. Never credentials. Default: nothing.
        """
        return {}

    async def poll_turn(self, conn: C, input: Input, live: LiveSink | None) -> PollOutcome[C]:
        """Request/response: run one turn."""
        raise NotImplementedError

    async def push_input(self, conn: C, input: Input) -> Result[None, SessionError]:
        """Streaming: post an input."""
        return Failure(Unsupported(operation="push_input"))

    async def stream(
        self,
        conn: C,
        on_connected: Callable[[], Awaitable[None]],
        on_event: Callable[[JSON], Awaitable[None]],
    ) -> Result[None, SessionError]:
        """Streaming: hold the event stream open until it ends (Success) or fails (Failure).

        Called in its own task; cancelled by the runner on stop or reconnect.
        """
        return Failure(Unsupported(operation="stream"))

    async def reconnect(self, conn: C, seen: tuple[str, ...]) -> Result[tuple[C, Reconnected], SessionError]:
        """Consolidate after a drop or on reattach. Default (R-2): nothing pending, conn unchanged."""
        return Success((conn, Reconnected(session_id=self.session_id(conn), seen=seen)))

    async def reconnect_after(
        self, conn: C, boundary: str, processed_at: str | None
    ) -> Result[tuple[C, Reconnected], SessionError]:
        """``reconnect`` for a client whose position is one turn boundary (``boundary``, an event
        id; ``processed_at``: the host's time on it, when known): what the host did after it.
        A host that can list from a time reads only the events since then — a Temporal turn
        asks this every turn, so a full listing each time would make a session quadratic.
        Default: ``reconnect(conn, (boundary,))``."""
        return await self.reconnect(conn, (boundary,))

    def snapshot(self, conn: C) -> Mapping[str, JSON] | None:
        """What reattaching to this session in another process needs, as JSON (a journal keeps
        it): the host's session id, or Local's conversation. None: this provider cannot be
        resumed from a journal. A list in it may be a persistent log (``rma._persistent.AppendLog``)
        that the next snapshot's extends: what is written then is only its new tail
        (``rma.snapshots``); ``rma.snapshots.plain`` gives it as lists."""
        return None

    async def restore(self, request: OpenRequest, snapshot: Mapping[str, JSON]) -> Result[C, SessionError]:
        """Reattach to the session ``snapshot`` describes (``rma_shell.journal.resume``): the
        connection, as ``open`` would have left it by then. Nothing is sent to the model."""
        return Failure(Unsupported(operation="resume from a journal"))

    def turn_in_doubt(self, conn: C) -> C:
        """The connection for re-asking a model turn that was in flight when a journaled
        process stopped (``resume``): the host may already have taken it. Default: the same
        connection (Local's model keeps nothing between requests, so asking again is safe)."""
        return conn

    async def stop_remote(self, conn: C) -> Result[StopReport, SessionError]:
        """Stop the host's loop of this session (issue #15): called when a run times out or is
        cancelled, or a live session is left, while a request was in flight — before
        ``aclose``, shielded, under the run's ``stop_grace`` (``resume`` finishing a journaled
        stop: ``rma_shell.machinery.remote_stop.REMOTE_STOP_TIMEOUT_S``); the runner reports
        ``unconfirmed`` when that deadline cuts it short. A Failure means the host refused or
        could not be reached (``failed``). Default: ``not_needed`` — the loop runs in this
        process (Local, the scripted provider), and cancelling it stopped it."""
        await anyio.lowlevel.checkpoint()
        return Success(StopReport("not_needed"))

    async def threads(self, conn: C) -> Result[list[JSON], SessionError]:
        """The session's threads (a multi-agent session's primary and sub-agent threads).
        Default: ``Unsupported`` — only Claude Managed Agents runs sub-agents in threads."""
        await anyio.lowlevel.checkpoint()
        return Failure(Unsupported(operation="threads"))

    async def thread_events(self, conn: C, thread_id: str) -> Result[list[JSON], SessionError]:
        """One thread's events so far, oldest first. Default: ``Unsupported``."""
        await anyio.lowlevel.checkpoint()
        return Failure(Unsupported(operation="thread_events"))

    async def thread_stream(
        self, conn: C, thread_id: str, on_event: Callable[[JSON], Awaitable[None]]
    ) -> Result[None, SessionError]:
        """Read one thread's live stream into ``on_event`` until it ends (a drop is a
        Failure; the caller cancels to stop). Default: ``Unsupported``."""
        await anyio.lowlevel.checkpoint()
        return Failure(Unsupported(operation="thread_stream"))

    async def aclose(self, conn: C) -> None:
        """Release what ``open`` acquired (connections). Never raises."""
        await anyio.lowlevel.checkpoint()
