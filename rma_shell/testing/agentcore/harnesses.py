"""The control plane's records: harnesses and endpoints whose status follows a lifecycle clock.

``HarnessView`` and ``ControlCall`` (what a test reads), and the internal records: a
harness's plan (how each phase ends, after how long), its versions and named endpoints, and
the status each shows at a time ``t`` — computed when asked, never by a background thread.
Not the operations that change them (``control``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import attrs

from rma_shell.testing.agentcore._common import DEFAULT_ENDPOINT, GONE, JSONDict, _AwsError


@attrs.frozen
class HarnessView:
    """A snapshot of one harness of the control plane (what ``ControlPlane.harnesses`` holds)."""

    id: str
    name: str
    arn: str
    runtime_arn: str
    status: str
    """The status GetHarness would show now (any string a script asked for)."""
    version: str
    """The latest ``harnessVersion``."""
    endpoints: Mapping[str, str]
    """Endpoint name -> status, for the endpoints that exist now (``DEFAULT`` first)."""
    config: JSONDict
    """The latest version's configuration as received (no ``harnessName``, ``clientToken``, ``tags``)."""
    created_at: float
    """On the lifecycle clock (``-inf`` for the constructor's harness)."""
    deleting_since: float | None
    """When the last accepted DeleteHarness arrived, on the lifecycle clock."""
    delete_managed_memory: bool | None
    """What the last accepted DeleteHarness said (``deleteManagedMemory``, default true)."""


@attrs.frozen
class ControlCall:
    """One control-plane request that passed SigV4 (``ControlPlane.calls``)."""

    operation: str
    http_status: int
    harness_id: str | None
    """The path's harnessId, or the id CreateHarness made."""
    endpoint_name: str | None
    status: str | None
    """The harness or endpoint status the answer showed (None for listings and errors)."""
    error: str | None
    """The error code of a failed request."""
    at: float
    """On the lifecycle clock."""


@attrs.frozen
class _Plan:
    create: str
    endpoint: str
    update: str
    delete: str
    ready_after_s: float
    endpoint_appear_after_s: float
    endpoint_ready_after_s: float
    update_after_s: float
    delete_after_s: float
    failure_reason: str | None


_ALWAYS_READY = _Plan(
    create="READY",
    endpoint="READY",
    update="READY",
    delete=GONE,
    ready_after_s=0.0,
    endpoint_appear_after_s=0.0,
    endpoint_ready_after_s=0.0,
    update_after_s=0.0,
    delete_after_s=0.0,
    failure_reason=None,
)


@attrs.frozen
class _EpState:
    status: str
    since: float
    created: float
    live: str | None
    target: str | None


@attrs.define
class _Version:
    number: int
    config: JSONDict
    started: float
    after: float = 0.0
    outcome: str = "READY"
    endpoint_after: float = 0.0


@attrs.define
class _NamedEndpoint:
    name: str
    seq: int
    created: float
    target: str
    plan: _Plan
    description: str | None = None
    deleting: float | None = None
    delete_after: float = 0.0

    def _base(self, t: float) -> _EpState:
        done = self.created + self.plan.endpoint_ready_after_s
        if t < done:
            return _EpState("CREATING", self.created, self.created, None, self.target)
        outcome = self.plan.endpoint
        if outcome != "READY":
            since = self.created if outcome == "CREATING" else done
            return _EpState(outcome, since, self.created, None, self.target)
        return _EpState("READY", done, self.created, self.target, self.target)

    def state(self, t: float) -> _EpState | None:
        if self.deleting is not None and t >= self.deleting:
            if t >= self.deleting + self.delete_after:
                return None
            before = self._base(self.deleting)
            return _EpState("DELETING", self.deleting, self.created, before.live, before.target)
        return self._base(t)


@attrs.define
class _Harness:
    seq: int
    id: str
    name: str
    arn: str
    runtime_id: str
    runtime_arn: str
    created: float
    plan: _Plan
    versions: list[_Version]
    has_default: bool = True
    endpoints: dict[str, _NamedEndpoint] = attrs.Factory(dict)
    failure_reason: str | None = None
    deleting: float | None = None
    delete_outcome: str = GONE
    delete_after: float = 0.0
    delete_managed_memory: bool | None = None

    def state(self, t: float) -> tuple[str | None, float]:
        """(status, since when) at ``t``; status None once the harness is gone."""
        if self.deleting is not None and t >= self.deleting:
            end = self.deleting + self.delete_after
            if t < end:
                return "DELETING", self.deleting
            return (None if self.delete_outcome == GONE else self.delete_outcome), end
        plan = self.plan
        ready_at = self.created + plan.ready_after_s
        if t < ready_at:
            return "CREATING", self.created
        if plan.create != "READY":
            return plan.create, (self.created if plan.create == "CREATING" else ready_at)
        status, since = "READY", ready_at
        for version in self.versions[1:]:
            if t < version.started:
                break
            done = version.started + version.after
            if t < done:
                return "UPDATING", version.started
            status, since = version.outcome, done
        return status, since

    def _default(self, t: float) -> _EpState | None:
        plan = self.plan
        if not self.has_default or plan.create != "READY":
            return None
        ready_at = self.created + plan.ready_after_s
        appear = ready_at + plan.endpoint_appear_after_s
        if t < appear:
            return None
        done = max(appear, ready_at + plan.endpoint_ready_after_s)
        if t < done:
            return _EpState("CREATING", appear, appear, None, "1")
        if plan.endpoint != "READY":
            since = appear if plan.endpoint == "CREATING" else done
            return _EpState(plan.endpoint, since, appear, None, "1")
        state = _EpState("READY", done, appear, "1", "1")
        for version in self.versions[1:]:
            if t < version.started:
                break
            number = str(version.number)
            if version.outcome == "READY":
                finish = version.started + version.after + version.endpoint_after
                if t < finish:
                    return _EpState("UPDATING", version.started, appear, state.live, number)
                state = _EpState("READY", finish, appear, number, number)
            else:
                finish = version.started + version.after
                if t < finish:
                    return _EpState("UPDATING", version.started, appear, state.live, number)
                state = _EpState("READY", finish, appear, state.live, state.live)
        return state

    def endpoint(self, name: str, t: float) -> _EpState | None:
        """The endpoint at ``t`` (None: it does not exist). While the harness is being deleted
        its endpoints show the harness's status."""
        named = self.endpoints.get(name)
        if name == DEFAULT_ENDPOINT:
            base: Callable[[float], _EpState | None] = self._default
        elif named is not None:
            base = named.state
        else:
            return None
        if self.deleting is None or t < self.deleting:
            return base(t)
        before = base(self.deleting)
        status, since = self.state(t)
        if before is None or status is None:
            return None
        return _EpState(status, since, before.created, before.live, before.target)

    def endpoint_names(self) -> list[str]:
        names = [DEFAULT_ENDPOINT] if self.has_default else []
        return names + sorted(self.endpoints, key=lambda n: self.endpoints[n].seq)


def _not_ready(message: str) -> _AwsError:
    # The service's answer to an invoke of a harness or endpoint that is not READY is not
    # documented; ValidationException is modeled for InvokeHarness, and botocore does not retry it.
    return _AwsError(400, "ValidationException", message, reason="ResourceConflict")


def _conflict(message: str) -> _AwsError:
    return _AwsError(409, "ConflictException", message)


def _check_timing(name: str, value: float | None) -> None:
    if value is not None and (math.isnan(value) or value < 0):
        raise ValueError(f"{name} must be a non-negative number of seconds (math.inf: never), got {value!r}")
