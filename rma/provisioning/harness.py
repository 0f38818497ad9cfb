"""AgentCore harness provisioning: the pure half — wait budget, status vocabulary, errors, bodies.

What this is: the one monotonic deadline a harness provision spends (wire §9.1, B-60…B-63)
as a frozen value advanced with ``now`` arguments; the total status classification (B-67);
the named failures with their ``WaitContext`` (§9.3, B-65, B-81); the ``CreateHarness`` body a
spec and an environment make (B-48, §8.2: only what is set, never ``null``); and the handle
a provision returns. What it is not: no HTTP, no sleeping, no clock — the flow in
``rma_shell.providers.agentcore.provisioning`` polls and sleeps as this module decides.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from typing import ClassVar, Final

import attrs
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts
from rma.providers.agentcore.codec import inline_function
from rma.provisioning.errors import ProvisioningError
from rma.provisioning.runtimes import Bootstrap
from rma.provisioning.spec import AgentSpec, EnvironmentSpec
from rma.vocabulary import JSON

DEFAULT_POLL_S: Final = 5.0
DEFAULT_MAX_POLLS: Final = 72
DEFAULT_TIMEOUT_S: Final = DEFAULT_POLL_S * (DEFAULT_MAX_POLLS + 1)  # 365 s
TARGET_POLLS: Final = 12
MIN_DERIVED_POLL_S: Final = 0.05
ROLLBACK_BUDGET_S: Final = 30.0
DEFAULT_ENDPOINT: Final = "DEFAULT"
MIN_ATTEMPT_S: Final = 0.05
"""The shortest receive timeout worth an attempt: below it, fewer attempts share the budget."""


def backoff_steps(retries: int, base_s: float, cap_s: float) -> tuple[float, ...]:
    """The longest each of a client's ``retries`` backoff sleeps can be: the step
    ``min(cap_s, base_s * 2**i)`` (``rma.retry.backoff_delay_s`` sleeps at most that)."""
    return tuple(min(cap_s, base_s * 2.0 ** min(i, 64)) for i in range(max(0, retries)))


def attempt_share(remaining: float, configured: float, steps: Sequence[float]) -> float:
    """The receive timeout for each of the ``len(steps) + 1`` attempts a client makes so that
    all of them and the backoff sleeps between them fit in ``remaining`` seconds.

    When the sleeps leave less than ``MIN_ATTEMPT_S`` per attempt, the budget is planned for
    fewer attempts (the last ones are then cut by the caller's deadline, never the first)."""
    for attempts in range(len(steps) + 1, 0, -1):
        share = (remaining - sum(steps[: attempts - 1])) / attempts
        if share >= MIN_ATTEMPT_S or attempts == 1:
            return max(0.001, min(configured, share))
    raise AssertionError("unreachable: one attempt always has a share")


def _nonneg(option: str, value: object) -> Result[float | None, InvalidOpts]:
    if value is None:
        return Success(None)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return Failure(InvalidOpts(option=option, detail=f"must be a non-negative number, got {value!r}"))
    return Success(float(value))


@attrs.frozen
class WaitBudget:
    """One absolute deadline shared by every wait of one provision call (B-70)."""

    started_at: float
    deadline_at: float
    poll_s: float
    polls_left: int | None
    """None: unlimited (an explicit timeout drops the legacy count, B-61)."""

    @classmethod
    def start(
        cls,
        now: float,
        *,
        timeout: object = None,
        poll_interval: object = None,
        max_polls: object = None,
    ) -> Result[WaitBudget, InvalidOpts]:
        """B-60…B-62: validate, derive the cadence, fix the deadline."""
        checked_timeout = _nonneg("timeout", timeout)
        if isinstance(checked_timeout, Failure):
            return Failure(checked_timeout.failure())
        checked_poll = _nonneg("poll_interval", poll_interval)
        if isinstance(checked_poll, Failure):
            return Failure(checked_poll.failure())
        if max_polls is not None and (
            isinstance(max_polls, bool) or not isinstance(max_polls, int) or max_polls < 0
        ):
            return Failure(
                InvalidOpts(option="max_polls", detail=f"must be a non-negative integer, got {max_polls!r}")
            )
        t, p = checked_timeout.unwrap(), checked_poll.unwrap()
        if p is not None:
            poll_s = p
        elif t is not None:
            poll_s = min(max(t / TARGET_POLLS, MIN_DERIVED_POLL_S), DEFAULT_POLL_S)
        else:
            poll_s = DEFAULT_POLL_S
        if t is not None:
            return Success(cls(now, now + t, poll_s, None))
        count = DEFAULT_MAX_POLLS if max_polls is None else int(max_polls)
        total = max(poll_s * (count + 1), DEFAULT_TIMEOUT_S)
        return Success(cls(now, now + total, poll_s, count))

    def remaining(self, now: float) -> float:
        return self.deadline_at - now

    def elapsed(self, now: float) -> float:
        return now - self.started_at

    def may_poll(self, now: float) -> bool:
        """B-63: another poll only while the count allows and a whole cadence still fits
        before the deadline — so the wait stops with time left to report its named error."""
        return (self.polls_left is None or self.polls_left > 0) and self.remaining(now) > self.poll_s

    def spend(self) -> WaitBudget:
        if self.polls_left is None:
            return self
        return attrs.evolve(self, polls_left=max(0, self.polls_left - 1))

    def attempt_timeout(
        self, configured: float, attempts: int, now: float, *, backoff: Sequence[float] | None = None
    ) -> float:
        """B-63, B-71: the receive timeout one HTTP attempt may use. With ``backoff`` (the
        longest sleep before each retry, ``backoff_steps``), the attempts are the ones the
        client really makes — ``len(backoff) + 1`` — and their sleeps are budgeted too."""
        if backoff is not None:
            return attempt_share(self.remaining(now), configured, backoff)
        return max(0.001, min(configured, self.remaining(now)) / max(1, attempts))


class StatusClass(enum.StrEnum):
    READY = "ready"
    CREATING = "creating"
    TERMINATING = "terminating"
    FAILED = "failed"
    UNKNOWN = "unknown"


def classify(status: str | None) -> StatusClass:
    """B-67, total: a new status is a signal to update the code, not to keep polling."""
    if status == "READY":
        return StatusClass.READY
    if status in ("CREATING", "UPDATING"):
        return StatusClass.CREATING
    if status == "DELETING":
        return StatusClass.TERMINATING
    if status in ("CREATE_FAILED", "UPDATE_FAILED", "DELETE_FAILED"):
        return StatusClass.FAILED
    return StatusClass.UNKNOWN


class Phase(enum.StrEnum):
    READY = "ready"
    ENDPOINT = "endpoint"
    DELETED = "deleted"


@attrs.frozen
class WaitContext:
    """What a wait saw when it failed (§9.3)."""

    harness_id: str
    phase: Phase
    endpoint_name: str | None = None
    last_status: str | None = None
    elapsed_s: float = 0.0
    """Seconds since the wait this context describes began (not since the provision began)."""
    polls: int | None = 0


_TAGS: Final = {
    Phase.READY: {
        "timeout": "harness_ready_timeout",
        "terminating": "harness_terminating",
        "failed": "harness_failed",
        "unknown": "harness_unknown_status",
    },
    Phase.ENDPOINT: {
        "timeout": "endpoint_ready_timeout",
        "terminating": "endpoint_terminating",
        "failed": "endpoint_failed",
        "unknown": "endpoint_unknown_status",
    },
    Phase.DELETED: {"timeout": "harness_still_deleting"},
}


def tag_for(phase: Phase, outcome: str) -> str:
    return _TAGS[phase][outcome]


@attrs.frozen
class HarnessError(ProvisioningError):
    """A harness provision failed; ``tag`` names how (§9.3), ``context`` says where the wait was.

    Tags with a context: ``harness_ready_timeout``, ``harness_terminating``,
    ``harness_failed``, ``harness_unknown_status``, the four ``endpoint_*`` counterparts and
    ``harness_still_deleting``. Without: ``harness_name_conflict``,
    ``unexpected_create_response``, ``unexpected_list_response``,
    ``unexpected_get_harness_response``, ``unexpected_get_endpoint_response``.
    """

    kind: ClassVar[str] = "harness_error"
    tag: str = ""
    context: WaitContext | None = None
    detail: str = ""
    payload: JSON = None

    @property
    def message(self) -> str:
        where = ""
        if self.context is not None:
            c = self.context
            endpoint = f" endpoint={c.endpoint_name}" if c.endpoint_name else ""
            where = (
                f" (harness {c.harness_id}, phase {c.phase}{endpoint}, "
                f"last status {c.last_status or 'none'}, "
                f"{c.polls if c.polls is not None else '-'} polls, {c.elapsed_s:.1f}s)"
            )
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.tag}{where}{detail}"


@attrs.frozen
class HarnessHandle:
    """What a provision returns (B-4): spread it into a session (``harness=handle``)."""

    harness_arn: str
    harness_id: str
    name: str = ""
    digest: str = ""
    created: bool = False
    """True when this call created the harness (False: adopted or reused)."""
    bootstrap: Bootstrap | None = attrs.field(default=None, eq=False)
    """Set when the environment declares runtimes (V-30): put ``bootstrap.instructions`` in
    the agent's system prompt. Computed on every path, never stored."""

    def to_json(self) -> dict[str, JSON]:
        return {
            "harness_arn": self.harness_arn,
            "harness_id": self.harness_id,
            "name": self.name,
            "digest": self.digest,
        }

    def get(self, key: str, default: JSON = None) -> JSON:
        """Mapping-style access so a handle can be passed as ``harness=`` (B-4)."""
        return self.to_json().get(key, default)


MODEL_UNION_KEYS: Final = frozenset(
    {"bedrockModelConfig", "openAiModelConfig", "geminiModelConfig", "liteLlmModelConfig"}
)


def model_union(model: JSON) -> JSON:
    """The harness ``model`` union from an agent's model config: a union passes verbatim; a
    bare model id (``"us.anthropic.claude-sonnet-4-6"``) or a config without a union key is a
    Bedrock model (the service's default family, §8.2)."""
    if isinstance(model, str):
        return {"bedrockModelConfig": {"modelId": model}}
    if isinstance(model, Mapping) and not (set(model) & MODEL_UNION_KEYS):
        return {"bedrockModelConfig": dict(model)}
    return model


TRUNCATION_STRATEGIES = ("sliding_window", "summarization", "none")
"""botocore's ``HarnessTruncationStrategy`` enum (bedrock-agentcore-control 2023-06-05)."""


def truncation_config(
    strategy: object,
    *,
    messages_count: object = None,
    summary_ratio: object = None,
    preserve_recent_messages: object = None,
    summarization_system_prompt: object = None,
) -> Result[dict[str, JSON], InvalidOpts]:
    """The harness's ``truncation`` member (``HarnessTruncationConfiguration``): how AgentCore
    keeps a conversation inside the model's window — ``sliding_window`` (the last
    ``messages_count`` messages), ``summarization`` (``summary_ratio`` of the content condensed,
    ``preserve_recent_messages`` kept as they are, an optional ``summarization_system_prompt``)
    or ``none`` (the harness then stops with ``model_context_window_exceeded``, which rma reports
    as ``ContextWindowExceeded``)."""

    def bad(detail: str) -> Failure[InvalidOpts]:
        return Failure(InvalidOpts(option="truncation", detail=detail))

    def count(value: object, field: str) -> int | None:
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{field} must be a positive integer, got {value!r}")
        return value

    if strategy not in TRUNCATION_STRATEGIES:
        return bad(f"strategy must be one of {', '.join(TRUNCATION_STRATEGIES)}, got {strategy!r}")
    try:
        messages = count(messages_count, "messages_count")
        preserve = count(preserve_recent_messages, "preserve_recent_messages")
    except ValueError as exc:
        return bad(str(exc))
    out: dict[str, JSON] = {"strategy": strategy}
    if strategy == "sliding_window":
        if summary_ratio is not None or preserve is not None or summarization_system_prompt is not None:
            return bad("sliding_window takes messages_count only")
        if messages is not None:
            out["config"] = {"slidingWindow": {"messagesCount": messages}}
    elif strategy == "summarization":
        if messages is not None:
            return bad(
                "summarization takes summary_ratio, preserve_recent_messages, summarization_system_prompt"
            )
        summary: dict[str, JSON] = {}
        if summary_ratio is not None:
            if (
                not isinstance(summary_ratio, int | float)
                or isinstance(summary_ratio, bool)
                or not 0 < summary_ratio < 1
            ):
                return bad(f"summary_ratio must be a number between 0 and 1, got {summary_ratio!r}")
            summary["summaryRatio"] = float(summary_ratio)
        if preserve is not None:
            summary["preserveRecentMessages"] = preserve
        if summarization_system_prompt is not None:
            if not isinstance(summarization_system_prompt, str) or not summarization_system_prompt:
                return bad("summarization_system_prompt must be a non-empty string")
            summary["summarizationSystemPrompt"] = summarization_system_prompt
        if summary:
            out["config"] = {"summarization": summary}
    elif (
        messages is not None
        or summary_ratio is not None
        or preserve is not None
        or summarization_system_prompt
    ):
        return bad("none takes no settings")
    return Success(out)


def create_body(
    name: str,
    execution_role_arn: str,
    agent: AgentSpec,
    environment: EnvironmentSpec | None = None,
    *,
    environment_variables: Mapping[str, str] | None = None,
    client_token: str | None = None,
    extra: Mapping[str, JSON] | None = None,
    truncation: Mapping[str, JSON] | None = None,
) -> Result[dict[str, JSON], InvalidOpts]:
    """B-48 / §11 #1: ``harnessName`` and ``executionRoleArn`` plus only what is set.

    The system prompt becomes one text block, the spec's tools inline functions, the model
    config is passed verbatim as the ``model`` union, the environment's config verbatim as
    ``environment`` (omitted when empty). ``extra`` adds other model members verbatim
    (``maxIterations``, ``memory``, ``tags`` …); ``truncation`` is the context-window setting
    (``truncation_config``), which wins over one in ``extra``.
    """
    role = execution_role_arn.strip() if isinstance(execution_role_arn, str) else ""
    if not role:
        return Failure(
            InvalidOpts(option="execution_role_arn", detail="a non-blank IAM role ARN is required")
        )
    body: dict[str, JSON] = {"harnessName": name, "executionRoleArn": role}
    if client_token is not None:
        body["clientToken"] = client_token
    if agent.system_prompt:
        body["systemPrompt"] = [{"text": agent.system_prompt}]
    if agent.model_config is not None:
        body["model"] = model_union(agent.model_config)
    if agent.tools:
        tools: list[JSON] = []
        for tool in agent.tools:
            built = inline_function(
                {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
            )
            if isinstance(built, Failure):
                return Failure(built.failure())
            tools.append(built.unwrap())
        body["tools"] = tools
    if environment is not None and environment.config:
        body["environment"] = environment.config
    if environment_variables:
        body["environmentVariables"] = dict(environment_variables)
    for key, value in (extra or {}).items():
        if value is not None:
            body[key] = value
    if truncation is not None:
        if not isinstance(truncation, Mapping) or truncation.get("strategy") not in TRUNCATION_STRATEGIES:
            return Failure(
                InvalidOpts(option="truncation", detail="build it with truncation_config(strategy, ...)")
            )
        body["truncation"] = dict(truncation)
    return Success(body)
