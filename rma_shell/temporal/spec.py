"""What a Temporal session workflow is started with: ``SessionSpec``, plain JSON all the way down.

A workflow's input is recorded in its history and read back by any worker, so it carries
names, never objects: the provider, handler and turn guard are looked up by name in the
worker's registry (``rma_shell.temporal.worker``), and every run option is a JSON value.
The options are the ones ``run()`` takes, checked the same way (by the worker that opens the
session, with ``run()``'s own validation); what cannot be JSON (``output_type``, a
``Telemetry``, ``record=``) is not offered here. ``Timeouts`` are the activities' timeouts and
retry limits. This module only builds and encodes values: it does no I/O.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from rma.errors import InvalidOpts
from rma.session.option_checks import renamed_for
from rma.session.options import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_REPROMPTS,
    DEFAULT_MAX_TURNS,
    DEFAULT_STOP_GRACE_S,
    DEFAULT_TIMEOUT_S,
)
from rma.vocabulary import JSON
from rma_shell.handler import DEFAULT_MAX_RESULT_CHARS
from rma_shell.options import renamed_options, warn_renamed
from rma_shell.providers.base import SECRET_OPTION_KEYS


@attrs.frozen
class Timeouts:
    """Activity timeouts (seconds) and retry limits of one session's workflow.

    ``heartbeat`` is how soon a killed worker's activity is noticed and handed to another:
    every activity that can run long (a turn, a stream read, a tool) heartbeats several times
    within it. ``*_attempts`` bound Temporal's retries of an activity whose worker died (rma's
    own rules still decide the rest: a raising tool is an error result, never retried; the
    providers retry transient HTTP failures themselves). ``retry_initial``/``retry_max``
    are the backoff between those attempts. ``open``, ``turn``, ``tool`` and ``guard`` bound
    one attempt of the activity of that name.

    The names had an ``_s`` suffix before issue #22 (``heartbeat_s`` …): those are still
    accepted, deprecated, and are the names a workflow's recorded input keeps (``to_json``),
    so histories recorded before and workers deployed before read it the same.
    """

    heartbeat: float = 10.0
    open: float = 120.0
    turn: float = 1800.0
    tool: float = 3600.0
    guard: float = 60.0
    open_attempts: int = 5
    turn_attempts: int = 5
    tool_attempts: int = 5
    retry_initial: float = 1.0
    retry_max: float = 30.0

    def to_json(self) -> dict[str, JSON]:
        """The recorded form: the pre-#22 key names, which every worker reads."""
        return {_RECORDED_KEYS.get(k, k): v for k, v in attrs.asdict(self).items()}

    @staticmethod
    def from_json(value: Mapping[str, Any]) -> Timeouts:
        """A recorded value (the ``_s`` keys) or one with today's names."""
        return Timeouts(**{_READ_KEYS.get(k, k): v for k, v in value.items()})


_RECORDED_KEYS: dict[str, str] = {
    "heartbeat": "heartbeat_s",
    "open": "open_s",
    "turn": "turn_s",
    "tool": "tool_s",
    "guard": "guard_s",
    "retry_initial": "retry_initial_s",
    "retry_max": "retry_max_s",
}
"""Field → the key a workflow's input records it under (unchanged since before issue #22)."""
_READ_KEYS = {recorded: name for name, recorded in _RECORDED_KEYS.items()}
Timeouts.__init__ = renamed_options("Timeouts")(Timeouts.__init__)  # type: ignore[method-assign]


LOCAL_ACTIVITIES: tuple[bool | str, ...] = (False, "turns", True)
"""``SessionSpec.local_activities``' values: the cheap steps only, the turns too, every step."""


@attrs.frozen
class SessionSpec:
    """One session, as a Temporal workflow runs it (see ``rma_shell.temporal.start_session``).

    ``provider``, ``handler`` and ``turn_guard`` name what the worker registered. The rest
    are ``run()``'s options with their defaults; ``provider_opts`` are its provider keywords
    (``agent_id=``, ``runtime_session_id=`` …). ``live`` keeps the session open for
    follow-ups (``SessionHandle.message``) until ``close``. A tool call the handler says
    requires approval (``@tool(requires_approval=…)``, ``Toolbox(require_approval=…)``, a
    handler's ``requires_approval``) waits for ``SessionHandle.approve``.
    """

    provider: str
    handler: str
    prompt: str | None = None
    live: bool = False
    max_turns: int = DEFAULT_MAX_TURNS
    timeout: float | None = DEFAULT_TIMEOUT_S
    turn_guard: str | None = None
    require_terminal_tool: bool = False
    terminal_tool: str | None = None
    max_reprompts: int = DEFAULT_MAX_REPROMPTS
    outcome: Mapping[str, JSON] | None = None
    budget: Mapping[str, JSON] | None = None
    session_id: str | None = None
    metadata: Mapping[str, JSON] | None = None
    """``run()``'s ``metadata``: the session's labels (its telemetry, and the host's session
    where sessions carry metadata). The older ``telemetry_metadata=`` (telemetry only) is still
    accepted, deprecated: it is kept in ``provider_opts``, where ``run()`` reads it."""
    model_config: Mapping[str, JSON] | None = None
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    tool_timeout: float | None = None
    max_tool_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS
    stop_grace: float = DEFAULT_STOP_GRACE_S
    """Seconds the stop of the host's loop may take past the deadline or a cancellation, as
    ``run()``'s: the workflow waits no longer for the ``rma.stop`` activity, queueing included.
    A spec recorded before the option existed reads as the default."""
    provider_opts: Mapping[str, JSON] = attrs.field(factory=dict)
    timeouts: Timeouts = attrs.field(factory=Timeouts)
    max_history_events: int | None = None
    """Continue as new once the run's history holds this many events (None: when Temporal
    suggests it, ``is_continue_as_new_suggested``; either way at the first moment nothing is
    in flight). The session, its pending approvals and its recorded tool results carry on."""
    max_history_bytes: int | None = None
    """Likewise, once the run's history holds this many bytes."""
    context: str | None = None
    """The name of an object the workers registered (``session_worker(contexts=…)``), handed to
    every tool call as ``ctx`` — ``run()``'s ``context=``, by name: each worker hands its own."""
    local_activities: bool | Literal["turns"] = False
    """Which of the session's activities run as Temporal *local* activities — on the worker
    that runs the workflow task, recorded with that task's completion, no round trip through
    the server's task queues. ``False``: only the cheap steps (open, transcript, guard,
    ``confirm_tool_use``). ``"turns"``: those and the model's turns (the OpenAI Agents SDK's
    ``use_local_activity=True``); each tool call stays a regular activity. ``True``: every
    step, tool calls included. At-most-once tools and the host's stop are regular activities
    in every mode. What each costs in recovery is in docs/temporal.md ("Local activities")."""
    fused_turns: bool = False
    """Run a tool batch and the model turn that follows it as ONE regular activity (issue #28):
    one server round trip per turn instead of two. Only where the turn is certain to follow —
    no call waiting for approval, no host confirmation, no at-most-once tool, no terminal or
    output tool in the batch; every other step runs as without it. A fused activity retried
    after a lost worker runs its calls again (attempt 2, the same ``idempotency_key``) before
    the turn. Only with ``local_activities=False``. docs/temporal.md ("Fused turns") says what
    it costs in recovery."""

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, Any] = attrs.asdict(self, recurse=False)
        out["timeouts"] = self.timeouts.to_json()
        out["provider_opts"] = dict(self.provider_opts)
        for late in (
            "metadata",
            "max_history_events",
            "max_history_bytes",
            "context",
            "local_activities",
            "fused_turns",
        ):
            if out[late] is None or out[late] is False:
                del out[late]  # what a worker deployed before issue #22 (#28) reads, when it can
        return out

    @staticmethod
    def from_json(value: Mapping[str, Any]) -> SessionSpec:
        fields = dict(value)
        fields["timeouts"] = Timeouts.from_json(fields.get("timeouts") or {})
        old = fields.pop("telemetry_metadata", None)
        if old is not None:  # recorded before issue #22: telemetry only, as it meant then
            fields["provider_opts"] = {**dict(fields.get("provider_opts") or {}), "telemetry_metadata": old}
        return SessionSpec(**fields)


def _spec_init(init: Any) -> Any:
    """``SessionSpec(telemetry_metadata=…)`` (deprecated) keeps its meaning: into ``provider_opts``."""
    renamed = renamed_options("SessionSpec")(init)

    @functools.wraps(init)
    def accepting(self: SessionSpec, *args: Any, **kwargs: Any) -> None:
        if "telemetry_metadata" in kwargs:
            if kwargs.get("metadata") is not None:
                renamed(self, *args, **kwargs)  # refused: both names
            warn_renamed(renamed_for(["SessionSpec"]).values(), "SessionSpec()")
            old = kwargs.pop("telemetry_metadata")
            kwargs["provider_opts"] = {**dict(kwargs.get("provider_opts") or {}), "telemetry_metadata": old}
        init(self, *args, **kwargs)

    return accepting


SessionSpec.__init__ = _spec_init(SessionSpec.__init__)  # type: ignore[method-assign]


def spec_problem(spec: SessionSpec) -> InvalidOpts | None:
    """Why ``spec`` cannot be a workflow input (a value that is not JSON), or None.

    The options' own meaning is checked by the worker that opens the session, exactly as
    ``run()`` checks them; this only refuses what could not be recorded at all.
    """
    if not isinstance(spec.provider, str) or not spec.provider:
        return InvalidOpts("provider", "name the provider the worker registered (a non-empty str)")
    if not isinstance(spec.handler, str) or not spec.handler:
        return InvalidOpts("handler", "name the handler the worker registered (a non-empty str)")
    if spec.context is not None and not isinstance(spec.context, str):
        return InvalidOpts("context", "name the context the worker registered (a str)")
    if spec.turn_guard is not None and not isinstance(spec.turn_guard, str):
        return InvalidOpts("turn_guard", "name the turn guard the worker registered (a str)")
    for where, value in (("model_config", spec.model_config), ("provider_opts", spec.provider_opts)):
        secret = _secret_in(value)
        if secret is not None:
            return InvalidOpts(
                f"{where}.{secret}",
                "a workflow's input is kept in its history: credentials stay in the worker's provider",
            )
    if type(spec.local_activities) not in (bool, str) or spec.local_activities not in LOCAL_ACTIVITIES:
        return InvalidOpts(
            "local_activities",
            f"True, False or 'turns' (the model's turns only), got {spec.local_activities!r}",
        )
    if type(spec.fused_turns) is not bool:
        return InvalidOpts("fused_turns", f"True or False, got {spec.fused_turns!r}")
    if spec.fused_turns and spec.local_activities is not False:
        return InvalidOpts(
            "fused_turns",
            "only with local_activities=False: a fused batch and turn is one regular activity"
            f" (local_activities={spec.local_activities!r} already runs turns locally)",
        )
    for name in ("max_history_events", "max_history_bytes"):
        limit = getattr(spec, name)
        if limit is not None and (type(limit) is not int or limit < 1):
            return InvalidOpts(name, f"a positive int or None, got {limit!r}")
    for field in attrs.fields(SessionSpec):
        if field.name == "timeouts":
            continue
        try:
            json.dumps(getattr(spec, field.name), allow_nan=False)
        except (TypeError, ValueError) as exc:
            return InvalidOpts(field.name, f"a Temporal workflow input must be JSON: {exc}")
    return None


def _secret_in(value: object) -> str | None:
    """The first credential-named key in ``value`` (at any depth), or None."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and k.lower() in SECRET_OPTION_KEYS:
                return k
            inner = _secret_in(v)
            if inner is not None:
                return f"{k}.{inner}"
    return None
