"""AgentCore harness lifecycle: create-or-adopt, wait for READY and the endpoint, roll back, tear down.

``provision_harness`` runs the reference algorithm (wire §9.2, B-47…B-84) on one monotonic
deadline (``timeout``, default 365 s) shared by the wait for a same-name harness to finish
deleting, the wait for ``READY`` and the wait for the endpoint (``DEFAULT`` or
``endpoint_name``). The poll cadence derives from the budget; every request's receive timeout
is bounded by what is left (B-71), split over the attempts the client really makes (its
``max_retries`` + 1) and the backoff sleeps between them, and every call is also cut at the
deadline itself (a ``Retry-After`` may ask for more than the plan), so a provision returns its
named error inside its budget even when every call hangs. Each failure is a ``HarnessError``
whose ``tag`` names it and whose ``WaitContext`` says where the wait was (``elapsed_s``: since
that wait began). A harness this call created and could not bring to READY (with its
endpoint) is deleted again on any failure — also on cancellation and on an exception — with
its own small budget, shielded from the caller's cancellation (B-72…B-74).
Every poll emits ``rma.agent_core.provision.poll`` and logs a line, every wait a ``.stop`` (or
``.exception``) — diagnosable without any handler (B-75…B-77, M-3, M-9).

Better than the reference: listings are read over every page (B-44 WEAK, §11 #12); creates
carry a ``clientToken`` so a retried create is idempotent (§11 #3); a 409 is told apart from a
``RetryableConflictException`` by its code; the endpoint wait exists (B-79).

Time and sleeping are anyio's (``anyio.current_time``, ``anyio.sleep``), so tests run the
365-second budget in ``trio.testing.MockClock`` virtual time.
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import HttpError, SessionError, TransportError
from rma.providers.agentcore.codec import check_endpoint_name, quote_value
from rma.provisioning.harness import (
    DEFAULT_ENDPOINT,
    ROLLBACK_BUDGET_S,
    HarnessError,
    HarnessHandle,
    Phase,
    StatusClass,
    WaitBudget,
    WaitContext,
    attempt_share,
    backoff_steps,
    classify,
    create_body,
    tag_for,
)
from rma.provisioning.identity import (
    AGENTCORE_HARNESS_NAMES,
    combined_digest,
    digest_of_name,
    harness_base,
    harness_name,
    short_digest,
)
from rma.provisioning.runtimes import Bootstrap, bootstrap
from rma.provisioning.spec import AgentSpec, EnvironmentSpec
from rma.vocabulary import JSON
from rma_shell.options import renamed_options
from rma_shell.providers.agentcore.client import AgentCoreClient
from rma_shell.seams import Seams, pick
from rma_shell.stores import Entry, Record, Store, StoreKey, ensure_record
from rma_shell.telemetry import Telemetry
from rma_shell.telemetry import default as default_telemetry

logger = logging.getLogger("rma.provisioning.agentcore")

CLIENT_RECEIVE_TIMEOUT_S = 600.0
"""The control-plane client's default receive timeout; one attempt never waits longer."""
ADOPTABLE = frozenset({"READY", "CREATING", "UPDATING"})


def _client_token() -> str:
    return f"rma-{uuid.uuid4()}"


T = TypeVar("T")


def _client_backoff(client: AgentCoreClient) -> tuple[float, ...]:
    """The longest sleep before each retry the client makes of an idempotent call (every
    provisioning call is one: GETs, DELETEs and creates carrying a ``clientToken``)."""
    retries = getattr(client, "max_retries", 0)
    base = getattr(client, "backoff_base", 0.0)
    cap = getattr(client, "backoff_cap", 0.0)
    if isinstance(retries, bool) or not isinstance(retries, int):
        return ()
    return backoff_steps(retries, float(base), float(cap))


@attrs.define
class _Run:
    """One provision call: the client, the budget, and how to sleep and read the clock."""

    client: AgentCoreClient
    budget: WaitBudget
    telemetry: Telemetry
    clock: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    read_timeout: float
    backoff: tuple[float, ...] = ()

    def timeout_for(self) -> float:
        """One attempt's receive timeout: what is left, shared by the attempts the client
        really makes and the backoff sleeps between them (B-71)."""
        return self.budget.attempt_timeout(self.read_timeout, 0, self.clock(), backoff=self.backoff)

    async def bounded(
        self, operation: str, call: Callable[[], Awaitable[Result[T, SessionError]]]
    ) -> Result[T, SessionError]:
        """``call()`` cut at the provision's deadline: a retry the plan could not foresee (a
        long ``Retry-After``) never carries a call past it."""
        with anyio.move_on_after(max(0.0, self.budget.remaining(self.clock()))):
            return await call()
        budget = self.budget.deadline_at - self.budget.started_at
        detail = f"{operation} did not answer within the provision's {budget:g} s budget"
        return Failure(TransportError(detail=detail, error_type="timeout"))


@renamed_options("provision_harness")
async def provision_harness(
    client: AgentCoreClient,
    agent: AgentSpec,
    environment: EnvironmentSpec | None = None,
    *,
    execution_role_arn: str,
    prefix: str | None = None,
    endpoint_name: str | None = None,
    timeout: float | None = None,
    poll_interval: float | None = None,
    max_polls: int | None = None,
    environment_variables: Mapping[str, str] | None = None,
    extra: Mapping[str, JSON] | None = None,
    truncation: Mapping[str, JSON] | None = None,
    read_timeout: float = CLIENT_RECEIVE_TIMEOUT_S,
    telemetry: Telemetry | None = None,
    _seams: Seams | None = None,
) -> Result[HarnessHandle, SessionError]:
    """Create (or adopt) the harness for ``agent`` in ``environment`` and wait until it and its
    endpoint are READY. ``truncation`` (``rma.provisioning.harness.truncation_config``) is how the
    harness keeps the conversation inside the model's window. ``timeout`` (seconds) is the whole
    budget; without it the legacy ``poll_interval`` × (``max_polls`` + 1) rule applies, at least
    365 s (B-62).
    ``read_timeout`` (seconds) bounds one control-plane call's answer."""
    clock: Callable[[], float] = pick(_seams, "clock", anyio.current_time)
    sleep: Callable[[float], Awaitable[None]] = pick(_seams, "sleep", anyio.sleep)
    client_token: Callable[[], str] = pick(_seams, "client_token", _client_token)
    endpoint = check_endpoint_name(endpoint_name)  # B-80: before any harness exists
    if isinstance(endpoint, Failure):
        return Failure(endpoint.failure())
    name = harness_name(agent, environment, prefix)
    digest = combined_digest(agent, environment)
    body = create_body(
        name,
        execution_role_arn,
        agent,
        environment,
        environment_variables=environment_variables,
        client_token=client_token(),
        extra=extra,
        truncation=truncation,
    )
    if isinstance(body, Failure):
        return Failure(body.failure())
    budget = WaitBudget.start(clock(), timeout=timeout, poll_interval=poll_interval, max_polls=max_polls)
    if isinstance(budget, Failure):
        return Failure(budget.failure())
    run = _Run(
        client,
        budget.unwrap(),
        telemetry or default_telemetry,
        clock,
        sleep,
        read_timeout,
        _client_backoff(client),
    )
    wanted_endpoint = endpoint.unwrap() or DEFAULT_ENDPOINT
    created = await _create(run, body.unwrap())
    if isinstance(created, Success):
        harness = created.unwrap()
        waited = await _wait_with_rollback(run, harness, wanted_endpoint, name, digest)
        return waited.map(lambda h: attrs.evolve(h, bootstrap=_bootstrap(environment)))
    error = created.failure()
    if not _conflict(error):
        logger.warning("CreateHarness %s failed: %s", name, error.message)
        return Failure(error)
    recovered = await _recover(run, body.unwrap(), name, digest, wanted_endpoint, client_token)
    return recovered.map(lambda h: attrs.evolve(h, bootstrap=_bootstrap(environment)))


@renamed_options("teardown_harness")
async def teardown_harness(
    client: AgentCoreClient,
    harness: HarnessHandle | Mapping[str, Any] | str,
    *,
    delete_managed_memory: bool | None = None,
    read_timeout: float | None = None,
    _seams: Seams | None = None,
) -> Result[None, SessionError]:
    """B-58: DeleteHarness; deletion completes asynchronously and is not awaited. A harness
    that is already gone (404) counts as torn down."""
    harness_id = harness if isinstance(harness, str) else harness.get("harness_id")
    if not isinstance(harness_id, str) or not harness_id:
        return Failure(HarnessError(tag="invalid_handle", detail=f"no harness_id in {harness!r}"))
    client_token: Callable[[], str] = pick(_seams, "client_token", _client_token)
    query = f"clientToken={quote_value(client_token())}"
    if delete_managed_memory is not None:
        query += f"&deleteManagedMemory={'true' if delete_managed_memory else 'false'}"
    got = await client.request_json(
        "DELETE",
        f"/harnesses/{quote_value(harness_id)}",
        query=query,
        operation="DeleteHarness",
        path_template="/harnesses/{harnessId}",
        read_timeout=read_timeout,
    )
    if isinstance(got, Failure):
        error = got.failure()
        if isinstance(error, HttpError) and error.status == 404:
            return Success(None)
        return Failure(error)
    return Success(None)


@renamed_options("list_harnesses")
async def list_harnesses(
    client: AgentCoreClient, *, read_timeout: float | None = None
) -> Result[list[JSON], SessionError]:
    """Every harness summary, over every page (§11 #12: absence is only evidence on a full listing)."""
    out: list[JSON] = []
    token: str | None = None
    while True:
        query = "maxResults=100" + (f"&nextToken={quote_value(token)}" if token else "")
        got = await client.request_json(
            "GET", "/harnesses", query=query, operation="ListHarnesses", read_timeout=read_timeout
        )
        if isinstance(got, Failure):
            return Failure(got.failure())
        _, page = got.unwrap()
        if not isinstance(page, Mapping):
            return Failure(HarnessError(tag="unexpected_list_response", payload=page))
        entries = page.get("harnesses", [])  # tolerate a missing key (§8.3)
        if not isinstance(entries, list):
            return Failure(HarnessError(tag="unexpected_list_response", payload=dict(page)))
        out.extend(entries)
        next_token = page.get("nextToken")
        if not isinstance(next_token, str) or not next_token:
            return Success(out)
        token = next_token


# --- steps ------------------------------------------------------------------------------------


def _conflict(error: SessionError) -> bool:
    """A 409 ``ConflictException`` (not the retryable kind, which the client already retried)."""
    if not isinstance(error, HttpError) or error.status != 409:
        return False
    code = error.body.get("code") if isinstance(error.body, Mapping) else None
    return code in (None, "ConflictException", "409")


async def _create(run: _Run, body: Mapping[str, JSON]) -> Result[HarnessHandle, SessionError]:
    """B-51: a 2xx must carry ``harness.arn`` and ``harness.harnessId`` (strings)."""
    got = await run.bounded(
        "CreateHarness",
        lambda: run.client.request_json(
            "POST",
            "/harnesses",
            body=dict(body),
            operation="CreateHarness",
            idempotent=True,  # the clientToken makes a re-sent create the same create
            read_timeout=run.timeout_for(),
        ),
    )
    if isinstance(got, Failure):
        return Failure(got.failure())
    _, answer = got.unwrap()
    harness = answer.get("harness") if isinstance(answer, Mapping) else None
    arn = harness.get("arn") if isinstance(harness, Mapping) else None
    harness_id = harness.get("harnessId") if isinstance(harness, Mapping) else None
    if not isinstance(arn, str) or not isinstance(harness_id, str):
        return Failure(HarnessError(tag="unexpected_create_response", payload=answer))
    return Success(HarnessHandle(arn, harness_id, str(body.get("harnessName", "")), created=True))


async def _recover(
    run: _Run,
    body: dict[str, JSON],
    name: str,
    digest: str,
    endpoint: str,
    client_token: Callable[[], str],
) -> Result[HarnessHandle, SessionError]:
    """B-52…B-56: a same-name harness exists — adopt it, wait out its deletion, or refuse."""
    listed = await run.bounded(
        "ListHarnesses", lambda: list_harnesses(run.client, read_timeout=run.timeout_for())
    )
    if isinstance(listed, Failure):
        return Failure(listed.failure())
    same = [h for h in listed.unwrap() if isinstance(h, Mapping) and h.get("harnessName") == name]
    adoptable = [h for h in same if h.get("status") in ADOPTABLE]
    if adoptable:
        entry = adoptable[0]
        arn, harness_id = entry.get("arn"), entry.get("harnessId")
        if not isinstance(arn, str) or not isinstance(harness_id, str):
            return Failure(HarnessError(tag="unexpected_list_response", payload=dict(entry)))
        logger.info("harness %s exists (%s); adopting it", name, entry.get("status"))
        adopted = HarnessHandle(arn, harness_id, name, digest, created=False)
        return await _wait(run, adopted, endpoint)  # never rolled back: someone else owns it
    if any(h.get("status") == "DELETING" for h in same):
        wait_began = run.clock()
        deleted = await _wait_deleted(run, name)
        if isinstance(deleted, Failure):
            return deleted
        if not run.budget.may_poll(run.clock()):
            context = WaitContext(name, Phase.DELETED, None, None, run.clock() - wait_began, None)
            return Failure(HarnessError(tag="harness_ready_timeout", context=context))
        again = await _create(run, {**body, "clientToken": client_token()})
        if isinstance(again, Failure):
            return Failure(again.failure())  # a second 409 is returned as is (B-56)
        return await _wait_with_rollback(run, again.unwrap(), endpoint, name, digest)
    statuses = [h.get("status") for h in same]
    logger.warning("harness name %s is taken (statuses %s); not adopting it", name, statuses or "not listed")
    return Failure(HarnessError(tag="harness_name_conflict", detail=name, payload={"statuses": statuses}))


async def _wait_with_rollback(
    run: _Run, harness: HarnessHandle, endpoint: str, name: str, digest: str
) -> Result[HarnessHandle, SessionError]:
    """B-72: a harness this call created and could not make ready is deleted again."""
    handle = attrs.evolve(harness, name=name, digest=digest, created=True)
    try:
        waited = await _wait(run, handle, endpoint)
    except BaseException:
        await _rollback(run.client, handle.harness_id, run.read_timeout, run.backoff)
        raise
    if isinstance(waited, Failure):
        await _rollback(run.client, handle.harness_id, run.read_timeout, run.backoff)
    return waited


async def _rollback(
    client: AgentCoreClient, harness_id: str, read_timeout: float, backoff: tuple[float, ...]
) -> None:
    """B-73, B-74: best effort on its own 30 s budget, shielded from the caller's cancellation;
    its outcome is logged and never replaces the original error. The budget is split over the
    attempts the client makes, as the provision's is."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(ROLLBACK_BUDGET_S) as scope:
        try:
            got = await teardown_harness(
                client,
                harness_id,
                read_timeout=attempt_share(ROLLBACK_BUDGET_S, read_timeout, backoff),
            )
        except Exception as exc:
            logger.error(
                "could not roll back harness %s (it may be orphaned): failed hard: %r", harness_id, exc
            )
            return
        if isinstance(got, Failure):
            logger.error(
                "could not roll back harness %s (it may be orphaned): %s", harness_id, got.failure().message
            )
        else:
            logger.info("rolled back harness %s", harness_id)
    if scope.cancelled_caught:
        logger.error(
            "could not roll back harness %s (it may be orphaned): no answer within %.0fs",
            harness_id,
            ROLLBACK_BUDGET_S,
        )


async def _wait(run: _Run, harness: HarnessHandle, endpoint: str) -> Result[HarnessHandle, SessionError]:
    """B-64, B-79: READY first; only then the endpoint (a harness that never gets there costs
    zero endpoint calls)."""
    ready = await _status_loop(run, harness.harness_id, Phase.READY, None)
    if isinstance(ready, Failure):
        return Failure(ready.failure())
    live = await _status_loop(run, harness.harness_id, Phase.ENDPOINT, endpoint)
    if isinstance(live, Failure):
        return Failure(live.failure())
    return Success(harness)


async def _fetch_status(
    run: _Run, harness_id: str, phase: Phase, endpoint: str | None
) -> Result[str | None, SessionError]:
    if phase is Phase.READY:
        path, template, operation, key = (
            f"/harnesses/{quote_value(harness_id)}",
            "/harnesses/{harnessId}",
            "GetHarness",
            "harness",
        )
    else:
        path, template, operation, key = (
            f"/harnesses/{quote_value(harness_id)}/endpoints/{quote_value(endpoint or DEFAULT_ENDPOINT)}",
            "/harnesses/{harnessId}/endpoints/{endpointName}",
            "GetHarnessEndpoint",
            "endpoint",
        )
    got = await run.bounded(
        operation,
        lambda: run.client.request_json(
            "GET",
            path,
            operation=operation,
            path_template=template,
            read_timeout=run.timeout_for(),
        ),
    )
    if isinstance(got, Failure):
        error = got.failure()
        if phase is Phase.ENDPOINT and isinstance(error, HttpError) and error.status == 404:
            return Success(None)  # the endpoint does not exist yet: "not yet" (§8.5)
        return Failure(error)
    _, answer = got.unwrap()
    item = answer.get(key) if isinstance(answer, Mapping) else None
    status = item.get("status") if isinstance(item, Mapping) else None
    if not isinstance(status, str):
        tag = (
            "unexpected_get_harness_response" if phase is Phase.READY else "unexpected_get_endpoint_response"
        )
        return Failure(HarnessError(tag=tag, payload=answer))
    return Success(status)


async def _status_loop(
    run: _Run, harness_id: str, phase: Phase, endpoint: str | None
) -> Result[str, SessionError]:
    """§9.2 step 4, for one phase, instrumented (B-75…B-77)."""
    started = run.clock()
    polls = 0
    last: str | None = None
    meta = {"harness_id": harness_id, "phase": str(phase), **({"endpoint": endpoint} if endpoint else {})}

    def context() -> WaitContext:  # elapsed: this wait's own time, not the whole provision's
        return WaitContext(harness_id, phase, endpoint, last, run.clock() - started, polls)

    def stop(result: str) -> None:
        duration = run.clock() - started
        run.telemetry.emit(
            "rma.agent_core.provision.stop",
            {"duration": duration, "polls": polls},
            {**meta, "result": result},
        )
        log = logger.info if result == "ok" else logger.warning
        log(
            "harness wait %s: harness_id=%s phase=%s%s last_status=%s polls=%d duration_s=%.1f",
            result,
            harness_id,
            phase,
            f" endpoint={endpoint}" if endpoint else "",
            last or "none",
            polls,
            duration,
        )

    try:
        while True:
            fetched = await _fetch_status(run, harness_id, phase, endpoint)
            if isinstance(fetched, Failure):
                error = fetched.failure()
                if isinstance(error, HarnessError):
                    stop(f"error:{error.tag}")
                    return Failure(error)
                if not run.budget.may_poll(run.clock()):
                    logger.warning(
                        "harness %s %s poll failed with the budget spent: %s",
                        harness_id,
                        phase,
                        error.message,
                    )
                    failure = HarnessError(
                        tag=tag_for(phase, "timeout"), context=attrs.evolve(context(), last_status=None)
                    )
                    stop(f"error:{failure.tag}")
                    return Failure(failure)
                stop(f"error:{error.kind}")
                return Failure(error)
            last = fetched.unwrap()
            polls += 1
            elapsed = run.budget.elapsed(run.clock())
            run.telemetry.emit(
                "rma.agent_core.provision.poll",
                {"elapsed": elapsed, "poll_n": polls},
                {**meta, "status": last},
            )
            logger.debug(
                "harness poll harness_id=%s phase=%s status=%s poll_n=%d elapsed_s=%.1f",
                harness_id,
                phase,
                last or "absent",
                polls,
                elapsed,
            )
            match classify(last or "CREATING"):
                case StatusClass.READY:
                    stop("ok")
                    return Success(last or "READY")
                case StatusClass.CREATING:
                    if not run.budget.may_poll(run.clock()):
                        failure = HarnessError(tag=tag_for(phase, "timeout"), context=context())
                        stop(f"error:{failure.tag}")
                        return Failure(failure)
                    await run.sleep(run.budget.poll_s)
                    run.budget = run.budget.spend()
                case StatusClass.TERMINATING:
                    failure = HarnessError(tag=tag_for(phase, "terminating"), context=context())
                    stop(f"error:{failure.tag}")
                    return Failure(failure)
                case StatusClass.FAILED:
                    failure = HarnessError(tag=tag_for(phase, "failed"), context=context())
                    stop(f"error:{failure.tag}")
                    return Failure(failure)
                case StatusClass.UNKNOWN:
                    failure = HarnessError(tag=tag_for(phase, "unknown"), context=context())
                    stop(f"error:{failure.tag}")
                    return Failure(failure)
    except BaseException as exc:
        run.telemetry.emit(
            "rma.agent_core.provision.exception",
            {"duration": run.clock() - started},
            {**meta, "kind": type(exc).__name__, "result": f"exception:{type(exc).__name__}"},
        )
        logger.error(
            "harness wait failed hard: harness_id=%s phase=%s kind=%s", harness_id, phase, type(exc).__name__
        )
        raise


async def _wait_deleted(run: _Run, name: str) -> Result[None, SessionError]:
    """B-68, B-69: poll the full listing until the name is gone; a listing failure proceeds
    unconfirmed (the next create arbitrates)."""
    polls = 0
    started = run.clock()
    while True:
        listed = await run.bounded(
            "ListHarnesses", lambda: list_harnesses(run.client, read_timeout=run.timeout_for())
        )
        if isinstance(listed, Failure):
            logger.warning(
                "could not list harnesses while waiting for %s to be deleted; proceeding unconfirmed: %s",
                name,
                listed.failure().message,
            )
            return Success(None)
        same = [h for h in listed.unwrap() if isinstance(h, Mapping) and h.get("harnessName") == name]
        polls += 1
        if not same:
            return Success(None)
        status = same[0].get("status")
        run.telemetry.emit(
            "rma.agent_core.provision.poll",
            {"elapsed": run.budget.elapsed(run.clock()), "poll_n": polls},
            {"harness_id": name, "phase": str(Phase.DELETED), "status": status},
        )
        if not run.budget.may_poll(run.clock()):
            context = WaitContext(
                name,
                Phase.DELETED,
                None,
                status if isinstance(status, str) else None,
                run.clock() - started,
                polls,
            )
            return Failure(HarnessError(tag="harness_still_deleting", context=context))
        await run.sleep(run.budget.poll_s)
        run.budget = run.budget.spend()


def wall_clock() -> float:
    """A clock for provisioning outside virtual time (scripts, the CLI)."""
    return time.monotonic()


# --- through a store: create-or-reuse, tags, prune, teardown ------------------------------------

PROVIDER = "bedrock_agent_core"
KIND = "harness"


def harness_key(agent: AgentSpec, prefix: str | None = None) -> StoreKey:
    return StoreKey(provider=PROVIDER, kind=KIND, base=harness_base(agent, prefix) or "a")


def _handle(record: Record) -> HarnessHandle:
    arn = record.data.get("harness_arn")
    return HarnessHandle(str(arn or ""), record.remote_id, record.name, record.digest, created=False)


async def ensure_harness(
    client: AgentCoreClient,
    agent: AgentSpec,
    environment: EnvironmentSpec | None = None,
    *,
    store: Store,
    execution_role_arn: str,
    prefix: str | None = None,
    **options: Any,
) -> Result[HarnessHandle, SessionError]:
    """V-10 for harnesses: the stored handle for (agent, environment) if there is one, else
    ``provision_harness`` once — across tasks and processes sharing ``store`` — and store it.
    The endpoint is a call-time choice (B-84): a stored hit does not wait for it again."""
    key = harness_key(agent, prefix)
    digest = combined_digest(agent, environment)
    made: list[HarnessHandle] = []

    async def build() -> Result[Entry, SessionError]:
        got = await provision_harness(
            client, agent, environment, execution_role_arn=execution_role_arn, prefix=prefix, **options
        )
        if isinstance(got, Failure):
            return Failure(got.failure())
        handle = got.unwrap()
        made.append(handle)
        return Success(Entry(handle.harness_id, handle.name, data={"harness_arn": handle.harness_arn}))

    ensured = await ensure_record(store, key, digest, build)
    if isinstance(ensured, Failure):
        return Failure(ensured.failure())
    handle = _handle(ensured.unwrap().record)
    return Success(
        attrs.evolve(handle, created=bool(made and made[0].created), bootstrap=_bootstrap(environment))
    )


def _bootstrap(environment: EnvironmentSpec | None) -> Bootstrap | None:
    return bootstrap(environment.runtimes) if environment is not None and environment.runtimes else None


async def release_harness(
    client: AgentCoreClient, handle: HarnessHandle, *, store: Store, **options: Any
) -> Result[None, SessionError]:
    """Teardown through the store: DeleteHarness, then evict every record holding it (V-15)."""
    deleted = await teardown_harness(client, handle, **options)
    if isinstance(deleted, Failure):
        return deleted
    await anyio.to_thread.run_sync(store.delete_remote, PROVIDER, handle.harness_id)
    return Success(None)


def tag_harness(
    store: Store, agent_or_base: AgentSpec | str, tag: str, digest: str
) -> Result[None, SessionError]:
    base = agent_or_base if isinstance(agent_or_base, str) else harness_base(agent_or_base)
    got = store.set_tag(StoreKey(provider=PROVIDER, kind=KIND, base=base), tag, digest)
    return Success(None) if isinstance(got, Success) else Failure(got.failure())


def resolve_harness(store: Store, ref: str) -> Result[HarnessHandle, SessionError]:
    """``base:tag`` → the tagged harness; UnknownTag / UntrackedDigest, never a fallback."""
    got = store.resolve(ref, provider=PROVIDER, kind=KIND)
    if isinstance(got, Failure):
        return Failure(got.failure())
    return Success(_handle(got.unwrap()))


@attrs.frozen
class Pruned:
    deleted: tuple[str, ...]
    kept: tuple[str, ...]


async def prune_harnesses(
    client: AgentCoreClient, store: Store, base: str, *, keep: int
) -> Result[Pruned, SessionError]:
    """V-35…V-38 for harnesses: keep the newest ``keep`` named ``<base>_<8 hex>`` and every
    tagged digest; delete the rest oldest first (over the complete listing); stop at the first
    failure and report what was deleted."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        return Failure(PruneError(tag="keep_required", detail=f"keep must be an integer > 0, got {keep!r}"))
    listed = await list_harnesses(client)
    if isinstance(listed, Failure):
        return Failure(listed.failure())
    key = StoreKey(provider=PROVIDER, kind=KIND, base=base)
    tagged = {short_digest(d) for d in (await anyio.to_thread.run_sync(store.tags, key)).values()}
    candidates: list[tuple[Mapping[str, Any], str]] = []
    for h in listed.unwrap():
        name = h.get("harnessName") if isinstance(h, Mapping) else None
        short = digest_of_name(name, base, AGENTCORE_HARNESS_NAMES) if isinstance(name, str) else None
        if short is not None and h.get("status") != "DELETING":
            candidates.append((h, short))
    candidates.sort(key=lambda pair: _when(pair[0].get("createdAt")), reverse=True)
    kept = [str(h["harnessName"]) for h, _ in candidates[:keep]]
    rest = candidates[keep:]
    kept += [str(h["harnessName"]) for h, short in rest if short in tagged]
    doomed = [h for h, short in reversed(rest) if short not in tagged]
    deleted: list[str] = []
    for harness in doomed:
        got = await teardown_harness(client, str(harness.get("harnessId")))
        if isinstance(got, Failure):
            return Failure(
                PruneError(
                    tag="partial",
                    detail=f"deleted {len(deleted)} of {len(doomed)}; {harness.get('harnessName')} failed: "
                    f"{got.failure().message}",
                    payload={"deleted": deleted, "failed": harness.get("harnessName")},
                )
            )
        await anyio.to_thread.run_sync(store.delete_remote, PROVIDER, str(harness.get("harnessId")))
        deleted.append(str(harness["harnessName"]))
    return Success(Pruned(tuple(deleted), tuple(kept)))


def _when(value: object) -> datetime.datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return datetime.datetime.min.replace(tzinfo=datetime.UTC)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
    return datetime.datetime.min.replace(tzinfo=datetime.UTC)


@attrs.frozen
class PruneError(HarnessError):
    """``keep_required`` (keep missing or < 1) or ``partial`` (a delete failed midway)."""
