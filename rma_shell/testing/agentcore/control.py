"""The AgentCore emulator's control plane: ``ControlPlane``, the harness and endpoint operations.

CreateHarness, GetHarness, ListHarnesses, UpdateHarness, DeleteHarness and the endpoint
operations (create, get, list, delete), with idempotency tokens, pagination, the model's
output shapes, the test controls (``script_harness``, ``add_harness``, ``calls`` …) and what
the data plane asks (``_serving``: may this harness and endpoint be invoked now?). Not the
records' lifecycles (``harnesses``) nor the request checks (``sigv4``, ``validation``).
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import math
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import attrs

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import (
    _DEFAULT_LIFECYCLE,
    _DEFAULT_MODEL,
    _DISCONNECTS,
    _ECHOED,
    _OPTIONAL_VALUE,
    _REQUEST_ONLY,
    CONTROL_SERVICE,
    DEFAULT_ENDPOINT,
    GONE,
    INVOKABLE_STATUSES,
    JSONDict,
    _AwsError,
    _not_found,
    _partition,
    _suffix,
)
from rma_shell.testing.agentcore.faults import ControlOperation, _fault_error
from rma_shell.testing.agentcore.harnesses import (
    _ALWAYS_READY,
    ControlCall,
    HarnessView,
    _check_timing,
    _conflict,
    _EpState,
    _Harness,
    _NamedEndpoint,
    _not_ready,
    _Plan,
    _Version,
)
from rma_shell.testing.agentcore.validation import _json_object, _params, _show, _validate

if TYPE_CHECKING:
    from rma_shell.testing.agentcore.server import AgentCoreEmulator

_HARNESS_PATH = r"/harnesses/(?P<harnessId>[^/]+)"
_ENDPOINT_PATH = _HARNESS_PATH + r"/endpoints/(?P<endpointName>[^/]+)"
_CONTROL_ROUTES: tuple[tuple[str, re.Pattern[str], ControlOperation], ...] = (
    ("POST", re.compile(r"/harnesses"), "CreateHarness"),
    ("GET", re.compile(r"/harnesses"), "ListHarnesses"),
    ("GET", re.compile(_HARNESS_PATH), "GetHarness"),
    ("PATCH", re.compile(_HARNESS_PATH), "UpdateHarness"),
    ("DELETE", re.compile(_HARNESS_PATH), "DeleteHarness"),
    ("POST", re.compile(_HARNESS_PATH + "/endpoints"), "CreateHarnessEndpoint"),
    ("GET", re.compile(_HARNESS_PATH + "/endpoints"), "ListHarnessEndpoints"),
    ("GET", re.compile(_ENDPOINT_PATH), "GetHarnessEndpoint"),
    ("DELETE", re.compile(_ENDPOINT_PATH), "DeleteHarnessEndpoint"),
)


def _control_route(method: str, path: str) -> tuple[ControlOperation, dict[str, str]] | None:
    for route_method, pattern, operation in _CONTROL_ROUTES:
        match = pattern.fullmatch(path)
        if method == route_method and match:
            return operation, {k: unquote(v) for k, v in match.groupdict().items()}
    return None


class ControlPlane:
    """The control plane's state and test controls: ``emu.control``.

    Thread-safe (it shares the emulator's lock). Statuses are computed from the lifecycle
    clock whenever something asks, so reading a view or calling ``script_harness`` never
    moves anything along.
    """

    def __init__(
        self,
        emulator: AgentCoreEmulator,
        *,
        lifecycle_clock: Callable[[], float],
        ready_after_s: float,
        endpoint_appear_after_s: float,
        endpoint_ready_after_s: float,
        update_after_s: float,
        delete_after_s: float,
        page_size: int,
        harness_name: str,
        endpoints: frozenset[str],
    ) -> None:
        for name, value in (
            ("ready_after_s", ready_after_s),
            ("endpoint_appear_after_s", endpoint_appear_after_s),
            ("endpoint_ready_after_s", endpoint_ready_after_s),
            ("update_after_s", update_after_s),
            ("delete_after_s", delete_after_s),
        ):
            _check_timing(name, value)
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self._emu = emulator
        self._lifecycle_clock = lifecycle_clock
        self._defaults = attrs.evolve(
            _ALWAYS_READY,
            ready_after_s=ready_after_s,
            endpoint_appear_after_s=endpoint_appear_after_s,
            endpoint_ready_after_s=endpoint_ready_after_s,
            update_after_s=update_after_s,
            delete_after_s=delete_after_s,
        )
        self.page_size = page_size
        self._scripts: dict[str, dict[str, Any]] = {}
        self._seq = itertools.count(1)
        self._harnesses: dict[str, _Harness] = {}
        self._gone: list[str] = []
        self._calls: list[ControlCall] = []
        self._create_bodies: list[JSONDict] = []
        self._tokens: dict[tuple[str, str], tuple[str, JSONDict, str | None, str | None]] = {}
        self._page_tokens: dict[str, tuple[str, str, int]] = {}
        self._anchor: tuple[datetime, float] | None = None
        partition = _partition(emulator.region)
        role = f"arn:{partition}:iam::{emulator.account}:role/emulated_harness_role"
        existing = _Harness(
            seq=0,
            id=emulator.harness_id,
            name=harness_name,
            arn=emulator.harness_arn,
            runtime_id=emulator.runtime_id,
            runtime_arn=emulator.runtime_arn,
            created=-math.inf,
            plan=_ALWAYS_READY,
            versions=[_Version(1, {"executionRoleArn": role}, -math.inf)],
            has_default=DEFAULT_ENDPOINT in endpoints,
        )
        for name in sorted(endpoints - {DEFAULT_ENDPOINT}):
            existing.endpoints[name] = _NamedEndpoint(name, next(self._seq), -math.inf, "1", _ALWAYS_READY)
        self._harnesses[existing.id] = existing

    # -- test controls --

    def now(self) -> float:
        """The lifecycle clock's reading."""
        return float(self._lifecycle_clock())

    def script_harness(
        self,
        name: str,
        *,
        create: str = "READY",
        endpoint: str = "READY",
        update: str = "READY",
        delete: str = GONE,
        ready_after_s: float | None = None,
        endpoint_appear_after_s: float | None = None,
        endpoint_ready_after_s: float | None = None,
        update_after_s: float | None = None,
        delete_after_s: float | None = None,
        failure_reason: str | None = None,
    ) -> None:
        """Script the harnesses named ``name``: each phase ends in the status given instead
        of the normal one, after the given time (the emulator's default when None;
        ``math.inf`` never ends it).

        ``create``: the harness's status once ``ready_after_s`` has passed ("CREATE_FAILED";
        "CREATING" stays CREATING for ever; any other string is shown as it is — only
        "READY" brings the DEFAULT endpoint). ``endpoint``: every endpoint's status once
        created ("CREATE_FAILED", "CREATING" for ever, any string); ``endpoint_appear_after_s``
        = ``math.inf`` keeps DEFAULT absent (404) for ever. ``update``: "UPDATE_FAILED"
        keeps DEFAULT on its live version. ``delete``: "GONE" (removed), "DELETE_FAILED"
        (stays listed; a new DeleteHarness may be accepted), "DELETING" for ever, any string.
        ``failure_reason`` is the ``failureReason`` a ``*_FAILED`` status carries.

        A phase takes the script in force when it starts: creation (``create``,
        ``endpoint``, ``ready_after_s``, the endpoint timings) at CreateHarness, an update
        at UpdateHarness, a deletion at DeleteHarness. Calling again replaces the script;
        ``script_harness(name)`` restores the defaults.
        """
        for label, outcome in (
            ("create", create),
            ("endpoint", endpoint),
            ("update", update),
            ("delete", delete),
        ):
            if not isinstance(outcome, str) or not outcome:
                raise ValueError(f"{label} must be a non-empty status string, got {outcome!r}")
        for label, value in (
            ("ready_after_s", ready_after_s),
            ("endpoint_appear_after_s", endpoint_appear_after_s),
            ("endpoint_ready_after_s", endpoint_ready_after_s),
            ("update_after_s", update_after_s),
            ("delete_after_s", delete_after_s),
        ):
            _check_timing(label, value)
        script = {
            "create": create,
            "endpoint": endpoint,
            "update": update,
            "delete": delete,
            "ready_after_s": ready_after_s,
            "endpoint_appear_after_s": endpoint_appear_after_s,
            "endpoint_ready_after_s": endpoint_ready_after_s,
            "update_after_s": update_after_s,
            "delete_after_s": delete_after_s,
            "failure_reason": failure_reason,
        }
        with self._emu._lock:
            self._scripts[name] = {k: v for k, v in script.items() if v is not None}

    def add_harness(self, name: str, *, execution_role_arn: str | None = None, **config: Any) -> HarnessView:
        """A harness created as if CreateHarness had just arrived (``config``: its other
        members, e.g. ``model=…``), without a request: for a harness "someone else" made.
        Raises ``ValueError`` when the name is invalid or taken."""
        if not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,39}", name):
            raise ValueError(f"invalid harness name {name!r}")
        emu = self._emu
        role = (
            execution_role_arn
            or f"arn:{_partition(emu.region)}:iam::{emu.account}:role/emulated_harness_role"
        )
        with emu._lock:
            now = self.now()
            self._prune(now)
            if self._by_name(name) is not None:
                raise ValueError(f"a harness named {name!r} exists")
            harness = self._new(name, {"executionRoleArn": role, **copy.deepcopy(config)}, now)
            return self._view(harness, now)

    @property
    def harnesses(self) -> dict[str, HarnessView]:
        """Every harness that exists now (gone ones are not), by id, in creation order."""
        with self._emu._lock:
            now = self.now()
            self._prune(now)
            return {h.id: self._view(h, now) for h in self._ordered()}

    def harness(self, id_or_name: str) -> HarnessView | None:
        """The harness with this id (or else this name) that exists now."""
        with self._emu._lock:
            now = self.now()
            self._prune(now)
            found = self._harnesses.get(id_or_name) or self._by_name(id_or_name)
            return self._view(found, now) if found is not None else None

    @property
    def deleted(self) -> tuple[str, ...]:
        """Ids of the harnesses whose deletion completed, in the order they went."""
        with self._emu._lock:
            self._prune(self.now())
            return tuple(self._gone)

    @property
    def calls(self) -> tuple[ControlCall, ...]:
        """Every control-plane request that passed SigV4, in arrival order."""
        with self._emu._lock:
            return tuple(self._calls)

    def count(
        self,
        operation: str,
        *,
        harness_id: str | None = None,
        endpoint_name: str | None = None,
        status: str | None = None,
        http_status: int | None = None,
    ) -> int:
        """How many ``operation`` requests arrived (e.g. GetHarness polls), optionally only
        those for one harness or endpoint, showing one status, or answered with one HTTP
        status (404: a GetHarnessEndpoint before the endpoint existed)."""
        return sum(
            1
            for call in self.calls
            if call.operation == operation
            and (harness_id is None or call.harness_id == harness_id)
            and (endpoint_name is None or call.endpoint_name == endpoint_name)
            and (status is None or call.status == status)
            and (http_status is None or call.http_status == http_status)
        )

    @property
    def create_bodies(self) -> tuple[JSONDict, ...]:
        """The JSON body of every CreateHarness request that passed SigV4 (valid or not)."""
        with self._emu._lock:
            return tuple(copy.deepcopy(self._create_bodies))

    # -- the data plane asks --

    def _serving(
        self,
        matches: Callable[[_Harness], bool],
        missing: str,
        qualifier: str | None,
        where: Callable[[_Harness], str],
    ) -> _Harness:
        """The harness a data-plane request targets, if it and its endpoint can serve it."""
        with self._emu._lock:
            now = self.now()
            self._prune(now)
            harness = next((h for h in self._ordered() if matches(h)), None)
            if harness is None:
                raise _not_found(missing)
            status, _ = harness.state(now)
            if status not in INVOKABLE_STATUSES:
                raise _not_ready(f"Harness {harness.id} is {status}; it can be invoked once it is READY.")
            name = qualifier or DEFAULT_ENDPOINT
            endpoint = harness.endpoint(name, now)
            if endpoint is None:
                raise _not_found(f"Endpoint '{name}' not found for {where(harness)}")
            if endpoint.status not in INVOKABLE_STATUSES:
                raise _not_ready(
                    f"Endpoint '{name}' of harness {harness.id} is {endpoint.status}; "
                    "it can be invoked once it is READY."
                )
            return harness

    # -- request handling (server threads) --

    def _serve(
        self,
        h: LoopbackHandler,
        operation: ControlOperation,
        labels: dict[str, str],
        query: list[tuple[str, str]],
        raw: bytes,
        request_id: str,
    ) -> None:
        emu = self._emu
        harness_id, endpoint_name = labels.get("harnessId"), labels.get("endpointName")
        try:
            body = _json_object(raw)
            if operation == "CreateHarness":
                with emu._lock:
                    self._create_bodies.append(copy.deepcopy(body))
            params = _params(operation, h, query, body, labels, service=CONTROL_SERVICE)
            if operation == "CreateHarnessEndpoint" and isinstance(params.get("endpointName"), str):
                endpoint_name = params["endpointName"]
            _validate(operation, params, service=CONTROL_SERVICE)
            with emu._lock:
                injected = emu._take(("status",), None, operation)
                if injected:
                    fault = injected[0]
                    raise _fault_error(fault, h)
                now = self.now()
                self._prune(now)
                status, payload = self._dispatch(operation, params, now)
        except _AwsError as error:
            self._record(operation, error.status, harness_id, endpoint_name, None, error.code)
            raise
        resource = payload.get("harness") or payload.get("endpoint")
        shown = None
        if isinstance(resource, dict):
            harness_id, shown = resource.get("harnessId"), resource.get("status")
        self._record(operation, status, harness_id, endpoint_name, shown, None)
        data = json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.send_header("x-amzn-RequestId", request_id)
            h.end_headers()
            h.wfile.write(data)
        except _DISCONNECTS:
            h.close_connection = True

    def _record(
        self,
        operation: str,
        http_status: int,
        harness_id: str | None,
        endpoint_name: str | None,
        status: str | None,
        error: str | None,
    ) -> None:
        with self._emu._lock:
            self._calls.append(
                ControlCall(operation, http_status, harness_id, endpoint_name, status, error, self.now())
            )

    def _dispatch(self, operation: ControlOperation, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        token = params.get("clientToken")
        fingerprint = json.dumps({k: v for k, v in params.items() if k != "clientToken"}, sort_keys=True)
        if isinstance(token, str):
            seen = self._tokens.get((operation, token))
            if seen is not None:
                return self._replay(operation, token, fingerprint, seen, now)
        handler = {
            "CreateHarness": self._create_harness,
            "GetHarness": self._get_harness,
            "ListHarnesses": self._list_harnesses,
            "UpdateHarness": self._update_harness,
            "DeleteHarness": self._delete_harness,
            "CreateHarnessEndpoint": self._create_endpoint,
            "GetHarnessEndpoint": self._get_endpoint,
            "ListHarnessEndpoints": self._list_endpoints,
            "DeleteHarnessEndpoint": self._delete_endpoint,
        }[operation]
        status, payload = handler(params, now)
        if isinstance(token, str):
            resource = payload.get("harness") or payload.get("endpoint") or {}
            self._tokens[(operation, token)] = (
                fingerprint,
                copy.deepcopy(payload),
                resource.get("harnessId"),
                resource.get("endpointName"),
            )
        return status, payload

    def _replay(
        self,
        operation: str,
        token: str,
        fingerprint: str,
        seen: tuple[str, JSONDict, str | None, str | None],
        now: float,
    ) -> tuple[int, JSONDict]:
        first, payload, harness_id, endpoint_name = seen
        if first != fingerprint:
            raise _AwsError(
                400,
                "ValidationException",
                f"The client token {token} was already used for a {operation} request with different "
                "parameters.",
                reason="IdempotentParameterMismatchException",
            )
        status = 201 if operation.startswith("Create") else 200
        harness = self._harnesses.get(harness_id or "")
        if harness is None:
            return status, copy.deepcopy(payload)  # gone since: the first answer
        if endpoint_name is not None:
            state = harness.endpoint(endpoint_name, now)
            if state is None:
                return status, copy.deepcopy(payload)
            return status, {"endpoint": self._endpoint_json(harness, endpoint_name, state)}
        return status, {"harness": self._harness_json(harness, now)}

    # -- operations (under the lock) --

    def _create_harness(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        name: str = params["harnessName"]
        clash = self._by_name(name)
        if clash is not None:
            status, _ = clash.state(now)
            raise _conflict(f"Harness with name '{name}' already exists ({clash.id}, status {status}).")
        config = {k: copy.deepcopy(v) for k, v in params.items() if k not in _REQUEST_ONLY}
        harness = self._new(name, config, now)
        return 201, {"harness": self._harness_json(harness, now, status="CREATING", since=now)}

    def _get_harness(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        wanted = params.get("harnessVersion")
        version = None
        if wanted is not None:
            version = next((v for v in harness.versions if str(v.number) == wanted), None)
            if version is None:
                raise _not_found(f"Version {wanted} of harness {harness.id} not found")
        return 200, {"harness": self._harness_json(harness, now, version=version)}

    def _list_harnesses(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        items = [(h.seq, self._summary_json(h, now)) for h in self._ordered()]
        page, token = self._page("ListHarnesses", "", items, params)
        payload: JSONDict = {"harnesses": page}
        if token is not None:
            payload["nextToken"] = token
        return 200, payload

    def _update_harness(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        status, _ = harness.state(now)
        if status not in ("READY", "UPDATE_FAILED"):
            raise _conflict(f"Harness {harness.id} cannot be updated while it is {status}.")
        config = copy.deepcopy(harness.versions[-1].config)
        for key, value in params.items():
            if key in _REQUEST_ONLY:
                continue
            if key in _OPTIONAL_VALUE:
                if isinstance(value, dict) and "optionalValue" in value:
                    config[key] = copy.deepcopy(value["optionalValue"])
                else:
                    config.pop(key, None)
            else:
                config[key] = copy.deepcopy(value)
        plan = self._plan(harness.name)
        harness.versions.append(
            _Version(
                len(harness.versions) + 1,
                config,
                now,
                plan.update_after_s,
                plan.update,
                plan.endpoint_ready_after_s,
            )
        )
        harness.failure_reason = plan.failure_reason
        return 200, {"harness": self._harness_json(harness, now, status="UPDATING", since=now)}

    def _delete_harness(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        status, _ = harness.state(now)
        if status == "DELETING":
            raise _conflict(f"Harness {harness.id} is already being deleted.")
        plan = self._plan(harness.name)
        harness.deleting = now
        harness.delete_after = plan.delete_after_s
        harness.delete_outcome = plan.delete
        harness.failure_reason = plan.failure_reason
        harness.delete_managed_memory = bool(params.get("deleteManagedMemory", True))
        return 200, {"harness": self._harness_json(harness, now, status="DELETING", since=now)}

    def _create_endpoint(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        status, _ = harness.state(now)
        if status != "READY":
            raise _conflict(f"Harness {harness.id} is {status}; endpoints can be created once it is READY.")
        name: str = params["endpointName"]
        if name == DEFAULT_ENDPOINT or harness.endpoint(name, now) is not None:
            raise _conflict(f"Endpoint '{name}' already exists for harness {harness.id}.")
        target = params.get("targetVersion") or str(harness.versions[-1].number)
        if int(target) > len(harness.versions):
            message = (
                f"Value '{target}' at 'targetVersion' failed to satisfy constraint: no such harness version"
            )
            raise _AwsError(
                400,
                "ValidationException",
                f"1 validation error detected: {message}",
                reason="FieldValidationFailed",
                fieldList=[{"name": "targetVersion", "message": message}],
            )
        endpoint = _NamedEndpoint(
            name, next(self._seq), now, target, self._plan(harness.name), params.get("description")
        )
        harness.endpoints[name] = endpoint
        state = harness.endpoint(name, now)
        assert state is not None
        return 201, {"endpoint": self._endpoint_json(harness, name, state, status="CREATING", since=now)}

    def _get_endpoint(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        name: str = params["endpointName"]
        state = harness.endpoint(name, now)
        if state is None:
            raise _not_found(f"Endpoint '{name}' not found for harness {harness.id}")
        return 200, {"endpoint": self._endpoint_json(harness, name, state)}

    def _list_endpoints(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        items = []
        for name in harness.endpoint_names():
            state = harness.endpoint(name, now)
            if state is not None:
                seq = 0 if name == DEFAULT_ENDPOINT else harness.endpoints[name].seq
                items.append((seq, self._endpoint_json(harness, name, state)))
        page, token = self._page("ListHarnessEndpoints", harness.id, items, params)
        payload: JSONDict = {"endpoints": page}
        if token is not None:
            payload["nextToken"] = token
        return 200, payload

    def _delete_endpoint(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        name: str = params["endpointName"]
        state = harness.endpoint(name, now)
        if state is None:
            raise _not_found(f"Endpoint '{name}' not found for harness {harness.id}")
        if name == DEFAULT_ENDPOINT:
            raise _conflict(
                f"The DEFAULT endpoint of harness {harness.id} goes with the harness; delete the harness."
            )
        if state.status == "DELETING":
            raise _conflict(f"Endpoint '{name}' of harness {harness.id} is already being deleted.")
        endpoint = harness.endpoints[name]
        endpoint.deleting = now
        endpoint.delete_after = self._plan(harness.name).delete_after_s
        return 200, {"endpoint": self._endpoint_json(harness, name, state, status="DELETING", since=now)}

    # -- helpers (under the lock) --

    def _plan(self, name: str) -> _Plan:
        return attrs.evolve(self._defaults, **self._scripts.get(name, {}))

    def _new(self, name: str, config: JSONDict, now: float) -> _Harness:
        emu = self._emu
        seq = next(self._seq)
        partition = _partition(emu.region)
        harness_id = f"{name}-{_suffix(f'{name}#{seq}')}"
        runtime_id = f"harness_{name}-{_suffix(f'runtime:{name}#{seq}')}"
        plan = self._plan(name)
        harness = _Harness(
            seq=seq,
            id=harness_id,
            name=name,
            arn=f"arn:{partition}:bedrock-agentcore:{emu.region}:{emu.account}:harness/{harness_id}",
            runtime_id=runtime_id,
            runtime_arn=f"arn:{partition}:bedrock-agentcore:{emu.region}:{emu.account}:runtime/{runtime_id}",
            created=now,
            plan=plan,
            versions=[_Version(1, config, now)],
            failure_reason=plan.failure_reason,
        )
        self._harnesses[harness_id] = harness
        return harness

    def _ordered(self) -> list[_Harness]:
        return sorted(self._harnesses.values(), key=lambda h: h.seq)

    def _by_name(self, name: str) -> _Harness | None:
        return next((h for h in self._ordered() if h.name == name), None)

    def _find(self, harness_id: str) -> _Harness:
        harness = self._harnesses.get(harness_id)
        if harness is None:
            raise _not_found(f"Harness not found: {harness_id}")
        return harness

    def _prune(self, now: float) -> None:
        for harness in self._ordered():
            if harness.state(now)[0] is None:
                del self._harnesses[harness.id]
                self._gone.append(harness.id)
                continue
            for name, endpoint in list(harness.endpoints.items()):
                if endpoint.state(now) is None:
                    del harness.endpoints[name]

    def _page(
        self, operation: str, scope: str, items: list[tuple[int, JSONDict]], params: JSONDict
    ) -> tuple[list[JSONDict], str | None]:
        after = -1
        token = params.get("nextToken")
        if token is not None:
            entry = self._page_tokens.get(token)
            if entry is None or entry[:2] != (operation, scope):
                message = (
                    f"Value '{_show(token)}' at 'nextToken' failed to satisfy constraint: "
                    "unknown pagination token"
                )
                raise _AwsError(
                    400,
                    "ValidationException",
                    f"1 validation error detected: {message}",
                    reason="FieldValidationFailed",
                    fieldList=[{"name": "nextToken", "message": message}],
                )
            after = entry[2]
        wanted = params.get("maxResults")
        size = self.page_size if wanted is None else min(int(wanted), self.page_size)
        rest = [(seq, item) for seq, item in items if seq > after]
        page = rest[:size]
        if len(rest) <= size:
            return [item for _, item in page], None
        issued = base64.urlsafe_b64encode(uuid.uuid4().bytes + uuid.uuid4().bytes).decode().rstrip("=")
        self._page_tokens[issued] = (operation, scope, page[-1][0])
        return [item for _, item in page], issued

    def _iso(self, t: float) -> str:
        if self._anchor is None:
            wall = self._emu._clock()
            self._anchor = (wall if wall.tzinfo else wall.replace(tzinfo=UTC), self.now())
        wall, at = self._anchor
        stamp = wall + timedelta(seconds=t - at) if math.isfinite(t) else wall - timedelta(days=1)
        return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    def _harness_json(
        self,
        harness: _Harness,
        now: float,
        *,
        status: str | None = None,
        since: float | None = None,
        version: _Version | None = None,
    ) -> JSONDict:
        current, changed = harness.state(now)
        shown = status or current or "DELETING"
        chosen = version or harness.versions[-1]
        config = chosen.config
        requested = (config.get("environment") or {}).get("agentCoreRuntimeEnvironment") or {}
        runtime: JSONDict = {
            "agentRuntimeArn": harness.runtime_arn,
            "agentRuntimeName": harness.runtime_id.rsplit("-", 1)[0],
            "agentRuntimeId": harness.runtime_id,
            "lifecycleConfiguration": {
                **_DEFAULT_LIFECYCLE,
                **(requested.get("lifecycleConfiguration") or {}),
            },
            "networkConfiguration": requested.get("networkConfiguration") or {"networkMode": "PUBLIC"},
        }
        if "filesystemConfigurations" in requested:
            runtime["filesystemConfigurations"] = requested["filesystemConfigurations"]
        out: JSONDict = {
            "harnessId": harness.id,
            "harnessName": harness.name,
            "arn": harness.arn,
            "status": shown,
            "harnessVersion": str(chosen.number),
            "executionRoleArn": config["executionRoleArn"],
            "createdAt": self._iso(harness.created),
            "updatedAt": self._iso(since if since is not None else changed),
            "model": config.get("model", _DEFAULT_MODEL),
            "systemPrompt": config.get("systemPrompt", []),
            "tools": config.get("tools", []),
            "skills": config.get("skills", []),
            "allowedTools": config.get("allowedTools", ["*"]),
            "truncation": config.get("truncation", {"strategy": "sliding_window"}),
            "environment": {"agentCoreRuntimeEnvironment": runtime},
        }
        for key in _ECHOED:
            if key in config:
                out[key] = config[key]
        if shown.endswith("_FAILED"):
            out["failureReason"] = harness.failure_reason or f"agentcore emulator: scripted {shown}"
        return copy.deepcopy(out)

    def _summary_json(self, harness: _Harness, now: float) -> JSONDict:
        status, since = harness.state(now)
        return {
            "harnessId": harness.id,
            "harnessName": harness.name,
            "arn": harness.arn,
            "status": status or "DELETING",
            "createdAt": self._iso(harness.created),
            "updatedAt": self._iso(since),
            "harnessVersion": str(harness.versions[-1].number),
        }

    def _endpoint_json(
        self,
        harness: _Harness,
        name: str,
        state: _EpState,
        *,
        status: str | None = None,
        since: float | None = None,
    ) -> JSONDict:
        shown = status or state.status
        out: JSONDict = {
            "harnessId": harness.id,
            "harnessName": harness.name,
            "endpointName": name,
            "arn": f"{harness.arn}/harness-endpoint/{name}",
            "status": shown,
            "createdAt": self._iso(state.created),
            "updatedAt": self._iso(since if since is not None else state.since),
        }
        if state.live is not None:
            out["liveVersion"] = state.live
        if state.target is not None:
            out["targetVersion"] = state.target
        named = harness.endpoints.get(name)
        if named is not None and named.description is not None:
            out["description"] = named.description
        if shown.endswith("_FAILED"):
            out["failureReason"] = harness.failure_reason or f"agentcore emulator: scripted {shown}"
        return out

    def _view(self, harness: _Harness, now: float) -> HarnessView:
        status, _ = harness.state(now)
        endpoints: dict[str, str] = {}
        for name in harness.endpoint_names():
            state = harness.endpoint(name, now)
            if state is not None:
                endpoints[name] = state.status
        return HarnessView(
            id=harness.id,
            name=harness.name,
            arn=harness.arn,
            runtime_arn=harness.runtime_arn,
            status=status or GONE,
            version=str(harness.versions[-1].number),
            endpoints=endpoints,
            config=copy.deepcopy(harness.versions[-1].config),
            created_at=harness.created,
            deleting_since=harness.deleting,
            delete_managed_memory=harness.delete_managed_memory,
        )
